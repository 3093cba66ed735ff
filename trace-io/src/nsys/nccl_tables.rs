//! Collective metadata that `capture`'s NCCL profiler plugin stored beside the nsys tables
//! (`SHARDSCOPE_NCCL_COLLECTIVES`: communicator, sequence number, function, size, algorithm, …;
//! columns in [`crate::nccl::tables`]).
//!
//! Each recorded operation becomes a [`shardscope_model::Collective`] linked to the NCCL kernel that ran
//! it, so the analyzer can match collectives across ranks by communicator and sequence number and compute
//! bus bandwidth. The link is the one capture stored; files written before it stored links are matched
//! again ([`crate::nccl::attach_to_kernels`]). Files without the table (every nsys export) are left as
//! they are.

use std::collections::BTreeMap;

use shardscope_model::{ProcessIdx, Trace};

use super::Database;
use crate::Error;
use crate::nccl::{self, KernelLink, NcclOperation, tables::COLLECTIVES_TABLE};

pub(super) fn attach(db: &Database, trace: &mut Trace) -> Result<(), Error> {
    if !db.tables.contains(COLLECTIVES_TABLE) {
        return Ok(());
    }
    let table_error = |e: rusqlite::Error| Error::format(db.path, format!("{COLLECTIVES_TABLE}: {e}"));
    let linked_at_capture = nccl::tables::stores_kernel_links(db.conn).map_err(table_error)?;
    let stored = nccl::read_tables(db.conn).map_err(table_error)?;
    let mut by_process: BTreeMap<i64, (Vec<NcclOperation>, Vec<Option<KernelLink>>)> = BTreeMap::new();
    for row in stored {
        let (operations, links) = by_process.entry(row.global_pid).or_default();
        operations.push(row.operation);
        links.push(row.kernel);
    }
    let mut unlinked = 0;
    for (global_pid, (operations, links)) in by_process {
        let Some(index) = trace.processes.iter().position(|p| p.global_pid as i64 == global_pid) else {
            trace.warn_n("NCCL operation of a process without events", operations.len() as u64);
            continue;
        };
        let process = ProcessIdx(index as u32);
        unlinked += if linked_at_capture {
            nccl::attach_linked(trace, process, &operations, &links)
        } else {
            // Stored CPU times are already on the trace clock.
            nccl::attach_to_kernels(trace, process, &operations, &|t: i64| Some(t)).launches_unlinked
        };
    }
    trace.warn_n("NCCL operation not linked to a kernel", unlinked);
    Ok(())
}
