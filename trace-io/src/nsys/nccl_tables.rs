//! Collective metadata that `capture`'s NCCL profiler plugin stored beside the nsys tables
//! (`SHARDSCOPE_NCCL_COLLECTIVES`: communicator, sequence number, function, size, algorithm, …).
//!
//! Each recorded operation becomes a [`shardscope_model::Collective`] linked to the NCCL kernel that ran
//! it, so the analyzer can match collectives across ranks by communicator and sequence number and compute
//! bus bandwidth. Files without the table (every nsys export) are left as they are.

use std::collections::BTreeMap;

use shardscope_model::{ProcessIdx, Trace};

use super::Database;
use crate::Error;

pub(super) fn attach(db: &Database, trace: &mut Trace) -> Result<(), Error> {
    if !db.tables.contains(shardscope_nccl_profiler::tables::COLLECTIVES_TABLE) {
        return Ok(());
    }
    let stored = shardscope_nccl_profiler::read_tables(db.conn)
        .map_err(|e| Error::format(db.path, format!("{}: {e}", shardscope_nccl_profiler::tables::COLLECTIVES_TABLE)))?;
    let mut by_process: BTreeMap<i64, Vec<shardscope_nccl_profiler::NcclOperation>> = BTreeMap::new();
    for row in stored {
        by_process.entry(row.global_pid).or_default().push(row.operation);
    }
    let mut unlinked = 0;
    for (global_pid, operations) in by_process {
        let Some(index) = trace.processes.iter().position(|p| p.global_pid as i64 == global_pid) else {
            trace.warn_n("NCCL operation of a process without events", operations.len() as u64);
            continue;
        };
        // Stored CPU times are already on the trace clock.
        let stats =
            shardscope_nccl_profiler::attach_to_kernels(trace, ProcessIdx(index as u32), &operations, &|t: i64| {
                Some(t)
            });
        unlinked += stats.launches_unlinked;
    }
    trace.warn_n("NCCL operation not linked to a kernel", unlinked);
    Ok(())
}
