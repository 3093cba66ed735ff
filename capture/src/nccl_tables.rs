//! Writing the NCCL operations of a capture into its `SHARDSCOPE_NCCL_*` tables, beside the
//! Nsight Systems-schema tables: [`write_tables`] creates them and inserts each joined
//! [`NcclProcess`]'s rows. The columns are documented, and read back, in `shardscope_io::nccl::tables`;
//! only the launcher writes them, from the spools it joined ([`crate::nccl_spool`]).

use rusqlite::{Connection, params};
use shardscope_io::nccl::tables::{CHANNELS_TABLE, COLLECTIVES_TABLE, COMMUNICATORS_TABLE, PROCESSES_TABLE};

use crate::nccl_spool::NcclProcess;

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
