//! The SQLite tables that carry NCCL operations inside a capture file, beside the
//! Nsight Systems-schema tables: their layout and [`read_tables`]. The capture launcher writes
//! them (`capture/src/nccl_tables.rs`, from the spools it joined).
//!
//! `SHARDSCOPE_NCCL_COLLECTIVES`: one row per collective or point-to-point operation of a rank.
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | `globalPid` | INTEGER | the process, as in the nsys tables |
//! | `pid` | INTEGER | OS process id |
//! | `event` | INTEGER | the plugin's event number, unique within the process |
//! | `kind` | TEXT | `coll` or `p2p` |
//! | `commId` | INTEGER | NCCL communicator id (`commHash`, its 64 bits stored as a signed integer), equal on all ranks |
//! | `commName` | TEXT | user-assigned communicator name |
//! | `rank`, `nRanks` | INTEGER | rank in the communicator and its size (`nRanks` 0: unknown) |
//! | `seqNumber` | INTEGER | NCCL sequence number, counted per `func` within the communicator; NULL for p2p |
//! | `func` | TEXT | `AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Reduce`, `Send`, `Recv`, … |
//! | `count` | INTEGER | the count argument of the NCCL call (all-gather: per-rank send count; reduce-scatter: per-rank receive count) |
//! | `datatype` | TEXT | NCCL type name, e.g. `ncclBfloat16` |
//! | `elementBytes`, `bytes` | INTEGER | element size, `count` × element size; NULL for unknown types |
//! | `root` | INTEGER | root rank (collectives), else NULL |
//! | `peer` | INTEGER | peer rank (p2p), else NULL |
//! | `algo`, `proto` | TEXT | algorithm (`RING`, `TREE`, …) and protocol (`LL`, `LL128`, `SIMPLE`); empty for p2p |
//! | `nChannels`, `nWarps` | INTEGER | channels and warps per channel NCCL chose |
//! | `groupId` | INTEGER | operations with the same nonzero `groupId` (per process) ran in one kernel |
//! | `cpuStart`, `cpuEnd` | INTEGER | CPU time NCCL started/stopped the event (ns since the session start, like every nsys time): right after the kernel launch |
//! | `gpuStart`, `gpuEnd` | INTEGER | earliest start / latest end over the kernel's channels: the GPU's `%globaltimer` in ns, as NCCL's kernel read it, not shifted (its offset to trace time differs per GPU: see `AttachStats::gpu_timer_minus_trace_ns`); NULL without kernel-channel events |
//! | `kernelChannels` | INTEGER | kernel-channel events seen |
//! | `interfaceVersion` | INTEGER | profiler interface NCCL used (3–5) |
//! | `kernelCorrelationId`, `kernelStart` | INTEGER | the kernel this operation's launch ran in (its `correlationId` and `start` in `CUPTI_ACTIVITY_KIND_KERNEL`, same `globalPid`), on the first operation of each launch that capture linked; NULL otherwise. Files written before these columns existed are linked again on reading |
//!
//! `SHARDSCOPE_NCCL_COMMUNICATORS(globalPid, pid, commId, commName, rank, nRanks, nNodes,
//! interfaceVersion, initTime)`: one row per communicator a process initialised (`initTime` in
//! session ns).
//!
//! `SHARDSCOPE_NCCL_PROCESSES(globalPid, pid, hostname, ncclVersion, ncclLibrary,
//! truncatedBytes, badRecords, droppedRecords, orphanRecords)`: per process, the NCCL that was
//! loaded (`ncclVersion` as `ncclGetVersion` gives it, e.g. 22803) and what was lost.
//!
//! `SHARDSCOPE_NCCL_CHANNELS(globalPid, pid, event, channel, gpuStart, gpuEnd, start, end, reportedStart,
//! reportedEnd)`: one row per kernel-channel event (`capture --comm-only`, `--trace nccl-timers`): the
//! operation's `event`, the channel index, its GPU start and stop as NCCL's kernel read `%globaltimer`
//! (`gpuEnd` NULL when the stop never came), the same two placed on the session clock with the process's
//! estimated GPU clock (`start`, `end`; NULL without an estimate, see `capture/src/nccl_timers.rs`), and
//! when the plugin heard of each (session ns: what the estimate rests on).

use rusqlite::{Connection, OptionalExtension};

use super::attach::KernelLink;
use super::ops::{NcclOperation, OpKind};

/// Name of the operations table.
pub const COLLECTIVES_TABLE: &str = "SHARDSCOPE_NCCL_COLLECTIVES";
/// Name of the communicators table.
pub const COMMUNICATORS_TABLE: &str = "SHARDSCOPE_NCCL_COMMUNICATORS";
/// Name of the per-process table.
pub const PROCESSES_TABLE: &str = "SHARDSCOPE_NCCL_PROCESSES";
/// Name of the kernel-channel table.
pub const CHANNELS_TABLE: &str = "SHARDSCOPE_NCCL_CHANNELS";

/// One row of [`COLLECTIVES_TABLE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOperation {
    /// The process's nsys `globalPid`.
    pub global_pid: i64,
    /// OS process id.
    pub pid: u32,
    /// The operation; its CPU times are trace ns (since the session start).
    pub operation: NcclOperation,
    /// The kernel capture linked it to (see [`stores_kernel_links`]).
    pub kernel: Option<KernelLink>,
}

/// Whether the file's operations table has the kernel link columns (files written before they
/// existed must be linked by matching again).
pub fn stores_kernel_links(conn: &Connection) -> rusqlite::Result<bool> {
    let count: i64 = conn.query_row(
        &format!("SELECT count(*) FROM pragma_table_info('{COLLECTIVES_TABLE}') WHERE name = 'kernelCorrelationId'"),
        [],
        |r| r.get(0),
    )?;
    Ok(count > 0)
}

/// Reads [`COLLECTIVES_TABLE`] in process and start order; empty when the file has no such table.
pub fn read_tables(conn: &Connection) -> rusqlite::Result<Vec<StoredOperation>> {
    let exists: Option<String> = conn
        .query_row("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1", [COLLECTIVES_TABLE], |r| {
            r.get(0)
        })
        .optional()?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    let link_columns = if stores_kernel_links(conn)? { "kernelCorrelationId, kernelStart" } else { "NULL, NULL" };
    let mut statement = conn.prepare(&format!(
        "SELECT globalPid, pid, event, kind, commId, commName, rank, nRanks, seqNumber, func, count, datatype,
                elementBytes, bytes, root, peer, algo, proto, nChannels, nWarps, groupId, cpuStart, cpuEnd,
                gpuStart, gpuEnd, kernelChannels, interfaceVersion, {link_columns}
         FROM {COLLECTIVES_TABLE} ORDER BY globalPid, cpuStart, event"
    ))?;
    let rows = statement.query_map([], |r| {
        let kind: String = r.get(3)?;
        Ok(StoredOperation {
            global_pid: r.get(0)?,
            pid: r.get(1)?,
            operation: NcclOperation {
                kind: if kind == "p2p" { OpKind::P2p } else { OpKind::Collective },
                event: r.get::<_, i64>(2)? as u64,
                comm_id: r.get::<_, i64>(4)? as u64,
                comm_name: r.get(5)?,
                rank: r.get(6)?,
                n_ranks: r.get(7)?,
                seq: r.get::<_, Option<i64>>(8)?.map(|s| s as u64),
                func: r.get(9)?,
                count: r.get::<_, i64>(10)? as u64,
                datatype: r.get(11)?,
                element_bytes: r.get::<_, Option<i64>>(12)?.map(|b| b as u64),
                bytes: r.get::<_, Option<i64>>(13)?.map(|b| b as u64),
                root: r.get(14)?,
                peer: r.get(15)?,
                algo: r.get(16)?,
                proto: r.get(17)?,
                n_channels: r.get(18)?,
                n_warps: r.get(19)?,
                group: r.get::<_, i64>(20)? as u64,
                cpu_start_ns: r.get::<_, Option<i64>>(21)?.unwrap_or(0),
                cpu_end_ns: r.get(22)?,
                gpu_start_ns: r.get(23)?,
                gpu_end_ns: r.get(24)?,
                kernel_channels: r.get(25)?,
                interface_version: r.get(26)?,
            },
            kernel: match (r.get::<_, Option<u32>>(27)?, r.get::<_, Option<i64>>(28)?) {
                (Some(correlation_id), Some(start_ns)) => Some(KernelLink { correlation_id, start_ns }),
                _ => None,
            },
        })
    })?;
    rows.collect()
}
