//! The SQLite tables that carry NCCL operations inside a capture file, beside the
//! Nsight Systems-schema tables.
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
//! estimated GPU clock (`start`, `end`; NULL without an estimate, see `nccl::timers`), and when the plugin
//! heard of each (session ns: what the estimate rests on).

use rusqlite::{Connection, OptionalExtension, params};

use super::attach::KernelLink;
use super::ops::{NcclOperation, NcclProcess, OpKind};

/// Name of the operations table.
pub const COLLECTIVES_TABLE: &str = "SHARDSCOPE_NCCL_COLLECTIVES";
/// Name of the communicators table.
pub const COMMUNICATORS_TABLE: &str = "SHARDSCOPE_NCCL_COMMUNICATORS";
/// Name of the per-process table.
pub const PROCESSES_TABLE: &str = "SHARDSCOPE_NCCL_PROCESSES";
/// Name of the kernel-channel table.
pub const CHANNELS_TABLE: &str = "SHARDSCOPE_NCCL_CHANNELS";

/// How the tables place processes and times.
pub struct TableOptions<'a> {
    /// The session start, ns since the Unix epoch: stored CPU times are relative to it.
    pub session_start_utc_ns: i64,
    /// The nsys `globalPid` of an OS process id.
    pub global_pid: &'a dyn Fn(u32) -> i64,
}

/// Creates the four tables (if absent) and inserts every process's rows, all or nothing.
///
/// Works inside or outside a transaction the caller holds (it uses a savepoint).
pub fn write_tables(conn: &Connection, processes: &[NcclProcess], options: &TableOptions) -> rusqlite::Result<()> {
    conn.execute_batch("SAVEPOINT shardscope_nccl_tables")?;
    let result = create_tables(conn).and_then(|()| insert_rows(conn, processes, options));
    match &result {
        Ok(()) => conn.execute_batch("RELEASE shardscope_nccl_tables")?,
        Err(_) => conn.execute_batch("ROLLBACK TO shardscope_nccl_tables; RELEASE shardscope_nccl_tables")?,
    }
    result
}

fn create_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {COLLECTIVES_TABLE} (
            globalPid INTEGER NOT NULL, pid INTEGER NOT NULL, event INTEGER NOT NULL, kind TEXT NOT NULL,
            commId INTEGER NOT NULL, commName TEXT NOT NULL, rank INTEGER NOT NULL, nRanks INTEGER NOT NULL,
            seqNumber INTEGER, func TEXT NOT NULL, count INTEGER NOT NULL, datatype TEXT NOT NULL,
            elementBytes INTEGER, bytes INTEGER, root INTEGER, peer INTEGER, algo TEXT NOT NULL,
            proto TEXT NOT NULL, nChannels INTEGER NOT NULL, nWarps INTEGER NOT NULL, groupId INTEGER NOT NULL,
            cpuStart INTEGER, cpuEnd INTEGER, gpuStart INTEGER, gpuEnd INTEGER,
            kernelChannels INTEGER NOT NULL, interfaceVersion INTEGER NOT NULL,
            kernelCorrelationId INTEGER, kernelStart INTEGER);
         CREATE TABLE IF NOT EXISTS {COMMUNICATORS_TABLE} (
            globalPid INTEGER NOT NULL, pid INTEGER NOT NULL, commId INTEGER NOT NULL, commName TEXT NOT NULL,
            rank INTEGER NOT NULL, nRanks INTEGER NOT NULL, nNodes INTEGER NOT NULL,
            interfaceVersion INTEGER NOT NULL, initTime INTEGER);
         CREATE TABLE IF NOT EXISTS {PROCESSES_TABLE} (
            globalPid INTEGER NOT NULL, pid INTEGER NOT NULL, hostname TEXT NOT NULL, ncclVersion INTEGER NOT NULL,
            ncclLibrary TEXT NOT NULL, truncatedBytes INTEGER NOT NULL, badRecords INTEGER NOT NULL,
            droppedRecords INTEGER NOT NULL, orphanRecords INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS {CHANNELS_TABLE} (
            globalPid INTEGER NOT NULL, pid INTEGER NOT NULL, event INTEGER NOT NULL, channel INTEGER NOT NULL,
            gpuStart INTEGER NOT NULL, gpuEnd INTEGER, start INTEGER, end INTEGER, reportedStart INTEGER,
            reportedEnd INTEGER);"
    ))
}

/// The kernel-channel rows of one process (see the module docs).
fn insert_channels(
    conn: &Connection,
    process: &NcclProcess,
    global_pid: i64,
    options: &TableOptions,
) -> rusqlite::Result<()> {
    let mut insert =
        conn.prepare_cached(&format!("INSERT INTO {CHANNELS_TABLE} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"))?;
    let place =
        |gpu_ns: i64| process.gpu_clock.as_ref().map(|clock| clock.to_trace_ns(gpu_ns, options.session_start_utc_ns));
    let session = |monotonic: i64| process.realtime_ns(monotonic).map(|t| t - options.session_start_utc_ns);
    for c in &process.channels {
        insert.execute(params![
            global_pid,
            process.pid,
            c.operation_event as i64,
            c.channel,
            c.gpu_start_ns,
            c.gpu_stop_ns,
            place(c.gpu_start_ns),
            c.gpu_stop_ns.and_then(place),
            session(c.reported_start_ns),
            c.reported_stop_ns.and_then(session),
        ])?;
    }
    Ok(())
}

fn insert_rows(conn: &Connection, processes: &[NcclProcess], options: &TableOptions) -> rusqlite::Result<()> {
    let mut insert_op = conn.prepare(&format!(
        "INSERT INTO {COLLECTIVES_TABLE} VALUES
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23,
          ?24, ?25, ?26, ?27, ?28, ?29)"
    ))?;
    let mut insert_comm =
        conn.prepare(&format!("INSERT INTO {COMMUNICATORS_TABLE} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"))?;
    let mut insert_process =
        conn.prepare(&format!("INSERT INTO {PROCESSES_TABLE} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"))?;
    for process in processes {
        let global_pid = (options.global_pid)(process.pid);
        let session = |monotonic: i64| process.realtime_ns(monotonic).map(|t| t - options.session_start_utc_ns);
        let info = process.info.clone().unwrap_or_default();
        insert_process.execute(params![
            global_pid,
            process.pid,
            info.hostname.as_str(),
            info.nccl_version,
            info.nccl_library.as_str(),
            process.truncated_bytes as i64,
            process.bad_records as i64,
            process.dropped_records as i64,
            process.orphan_records as i64,
        ])?;
        for c in &process.communicators {
            insert_comm.execute(params![
                global_pid,
                process.pid,
                c.comm_id as i64,
                c.name.as_str(),
                c.rank,
                c.n_ranks,
                c.n_nodes,
                c.interface_version,
                session(c.cpu_ns as i64),
            ])?;
        }
        for (index, o) in process.operations.iter().enumerate() {
            let kernel = process.kernel_links.get(index).copied().flatten();
            insert_op.execute(params![
                global_pid,
                process.pid,
                o.event as i64,
                o.kind.label(),
                o.comm_id as i64,
                o.comm_name,
                o.rank,
                o.n_ranks,
                o.seq.map(|s| s as i64),
                o.func,
                o.count as i64,
                o.datatype,
                o.element_bytes.map(|b| b as i64),
                o.bytes.map(|b| b as i64),
                o.root,
                o.peer,
                o.algo,
                o.proto,
                o.n_channels,
                o.n_warps,
                o.group as i64,
                session(o.cpu_start_ns),
                o.cpu_end_ns.and_then(session),
                o.gpu_start_ns,
                o.gpu_end_ns,
                o.kernel_channels,
                o.interface_version,
                kernel.map(|k| k.correlation_id),
                kernel.map(|k| k.start_ns),
            ])?;
        }
        insert_channels(conn, process, global_pid, options)?;
    }
    Ok(())
}

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
