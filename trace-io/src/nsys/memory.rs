//! GPU memory in Nsight Systems' schema: `CUDA_GPU_MEMORY_USAGE_EVENTS` (one row per CUDA allocation or release,
//! what `nsys profile --cuda-memory-usage=true` exports) and `CUDA_GPU_MEMORY_POOL_EVENTS` (stream-ordered pools
//! made, destroyed or trimmed), with the columns and enum ids of nsys' exports, so that `nsys stats` and other
//! tools that read those tables read a capture's too.
//!
//! The writer stores `Trace::memory_events` and `Trace::memory_pool_events`; the reader fills them back from
//! either a capture or a real export. Rows of a process the trace does not know are counted, not guessed.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use shardscope_model::{
    Device, DeviceIdx, MemoryEvent, MemoryKind, MemoryOperation, MemoryPoolEvent, MemoryPoolState, ProcessIdx, Trace,
};

use super::{Database, int};
use crate::Error;

/// The allocation table's name.
pub const USAGE_TABLE: &str = "CUDA_GPU_MEMORY_USAGE_EVENTS";
/// The pool table's name.
pub const POOL_TABLE: &str = "CUDA_GPU_MEMORY_POOL_EVENTS";

/// nsys' columns of [`USAGE_TABLE`], in its order.
const CREATE_USAGE: &str = "CREATE TABLE IF NOT EXISTS CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, \
    globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, address INTEGER NOT NULL, \
    pc INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, \
    name TEXT, correlationId INTEGER, streamId INTEGER, localMemoryPoolAddress INTEGER, \
    localMemoryPoolReleaseThreshold INTEGER, localMemoryPoolSize INTEGER, localMemoryPoolUtilizedSize INTEGER, \
    importedMemoryPoolAddress INTEGER, importedMemoryPoolProcessId INTEGER)";

/// nsys' columns of [`POOL_TABLE`], in its order.
const CREATE_POOL: &str = "CREATE TABLE IF NOT EXISTS CUDA_GPU_MEMORY_POOL_EVENTS (start INTEGER NOT NULL, \
    globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, address INTEGER NOT NULL, \
    operationType INTEGER NOT NULL, poolType INTEGER NOT NULL, correlationId INTEGER, minBytesToKeep INTEGER, \
    localMemoryPoolReleaseThreshold INTEGER, localMemoryPoolSize INTEGER, localMemoryPoolUtilizedSize INTEGER)";

/// Rows of nsys' `ENUM_CUDA_DEV_MEM_EVENT_OPER`.
const ENUM_DEV_MEM_EVENT_OPER: &[(i64, &str, &str)] = &[
    (0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"),
    (1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"),
];

/// Rows of nsys' `ENUM_CUDA_MEMPOOL_OPER` (the same numbers as CUPTI's `CUpti_ActivityMemoryPoolOperationType`,
/// seen in an nsys 2025.3 export).
const ENUM_MEMPOOL_OPER: &[(i64, &str, &str)] = &[
    (0, "CUDA_MEMPOOL_OPERATION_TYPE_INVALID", "Invalid"),
    (1, "CUDA_MEMPOOL_OPERATION_TYPE_CREATED", "Created"),
    (2, "CUDA_MEMPOOL_OPERATION_TYPE_DESTROYED", "Destroyed"),
    (3, "CUDA_MEMPOOL_OPERATION_TYPE_TRIMMED", "Trimmed"),
];

/// Rows of nsys' `ENUM_CUDA_MEMPOOL_TYPE` (CUPTI's `CUpti_ActivityMemoryPoolType` numbers, likewise).
const ENUM_MEMPOOL_TYPE: &[(i64, &str, &str)] = &[
    (0, "CUDA_MEMPOOL_TYPE_INVALID", "Invalid"),
    (1, "CUDA_MEMPOOL_TYPE_LOCAL", "Local"),
    (2, "CUDA_MEMPOOL_TYPE_IMPORTED", "Imported"),
];

/// Creates an `(id, name, label)` enum table if missing and fills in its rows.
fn write_enum(conn: &Connection, table: &str, rows: &[(i64, &str, &str)]) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)"
    ))?;
    let mut row = conn.prepare(&format!("INSERT OR IGNORE INTO {table} VALUES (?1, ?2, ?3)"))?;
    for (id, name, label) in rows {
        row.execute(params![id, name, label])?;
    }
    Ok(())
}

/// Writes the two tables (created when the trace has rows for them) and the operation enum table. Addresses and
/// sizes beyond `i64` (none are real) are stored wrapped, as SQLite integers are signed.
pub fn write_tables(
    conn: &Connection,
    trace: &Trace,
    global_pid: &dyn Fn(ProcessIdx) -> i64,
    ordinal: &dyn Fn(DeviceIdx) -> u32,
) -> rusqlite::Result<()> {
    if !trace.memory_events.is_empty() {
        conn.execute_batch(CREATE_USAGE)?;
        write_enum(conn, "ENUM_CUDA_DEV_MEM_EVENT_OPER", ENUM_DEV_MEM_EVENT_OPER)?;
        let mut row = conn.prepare(
            "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, ?10, ?11, \
             ?12, ?13, ?14, ?15, ?16, ?17)",
        )?;
        for m in &trace.memory_events {
            let local = m.pool.filter(|p| !p.imported);
            let imported = m.pool.filter(|p| p.imported);
            row.execute(params![
                m.time_ns,
                global_pid(m.process),
                ordinal(m.device),
                m.context_id,
                m.address as i64,
                m.pc as i64,
                m.bytes as i64,
                m.kind.nsys_id(),
                m.operation.nsys_id(),
                m.correlation_id,
                m.stream,
                local.map(|p| p.address as i64),
                local.and_then(|p| p.release_threshold_bytes).map(|v| v as i64),
                local.and_then(|p| p.size_bytes).map(|v| v as i64),
                local.and_then(|p| p.utilized_bytes).map(|v| v as i64),
                imported.map(|p| p.address as i64),
                imported.and_then(|p| p.imported_pid).map(|v| v as i64),
            ])?;
        }
    }
    write_pool_table(conn, trace, global_pid, ordinal)
}

fn write_pool_table(
    conn: &Connection,
    trace: &Trace,
    global_pid: &dyn Fn(ProcessIdx) -> i64,
    ordinal: &dyn Fn(DeviceIdx) -> u32,
) -> rusqlite::Result<()> {
    if trace.memory_pool_events.is_empty() {
        return Ok(());
    }
    conn.execute_batch(CREATE_POOL)?;
    write_enum(conn, "ENUM_CUDA_MEMPOOL_OPER", ENUM_MEMPOOL_OPER)?;
    write_enum(conn, "ENUM_CUDA_MEMPOOL_TYPE", ENUM_MEMPOOL_TYPE)?;
    let mut row =
        conn.prepare("INSERT INTO CUDA_GPU_MEMORY_POOL_EVENTS VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?;
    for p in &trace.memory_pool_events {
        row.execute(params![
            p.time_ns,
            global_pid(p.process),
            ordinal(p.device),
            p.address as i64,
            p.operation,
            p.pool_type,
            p.correlation_id,
            p.min_bytes_to_keep as i64,
            p.release_threshold_bytes as i64,
            p.size_bytes as i64,
            p.utilized_bytes as i64,
        ])?;
    }
    Ok(())
}

/// The columns the reader takes from [`USAGE_TABLE`].
const USAGE_COLUMNS: &[&str] = &[
    "start",
    "globalPid",
    "deviceId",
    "contextId",
    "address",
    "pc",
    "bytes",
    "memKind",
    "memoryOperationType",
    "correlationId",
    "streamId",
    "localMemoryPoolAddress",
    "localMemoryPoolReleaseThreshold",
    "localMemoryPoolSize",
    "localMemoryPoolUtilizedSize",
    "importedMemoryPoolAddress",
    "importedMemoryPoolProcessId",
];

/// Where the rows' processes and GPUs are in the trace: found by `globalPid` and `deviceId`; a GPU seen only in
/// these tables is added.
struct Places {
    processes: HashMap<u64, ProcessIdx>,
    devices: HashMap<u32, DeviceIdx>,
}

impl Places {
    fn new(trace: &Trace) -> Places {
        let processes = trace.processes.iter().enumerate().map(|(i, p)| (p.global_pid, ProcessIdx(i as u32))).collect();
        let devices = trace.devices.iter().enumerate().map(|(i, d)| (d.ordinal, DeviceIdx(i as u32))).collect();
        Places { processes, devices }
    }

    fn device(&mut self, trace: &mut Trace, ordinal: u32) -> DeviceIdx {
        *self.devices.entry(ordinal).or_insert_with(|| trace.add_device(Device { ordinal, ..Device::default() }))
    }
}

/// Reads both tables into the trace.
pub(super) fn attach(db: &Database, trace: &mut Trace) -> Result<(), Error> {
    let mut places = Places::new(trace);
    let (mut orphans, mut unusable) = (0u64, 0u64);
    let mut events = Vec::new();
    db.each_row(USAGE_TABLE, USAGE_COLUMNS, |row| {
        let value = |i: usize| int(row, i);
        let (Some(time_ns), Some(global_pid), Some(ordinal), Some(bytes), Some(operation)) =
            (value(0), value(1), value(2), value(6), value(8).and_then(MemoryOperation::from_nsys))
        else {
            unusable += 1;
            return Ok(());
        };
        let (Some(&process), Ok(ordinal)) = (places.processes.get(&(global_pid as u64)), u32::try_from(ordinal)) else {
            orphans += 1;
            return Ok(());
        };
        events.push(MemoryEvent {
            time_ns,
            process,
            device: places.device(trace, ordinal),
            context_id: value(3).and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
            operation,
            kind: value(7).map_or(MemoryKind::Unknown, MemoryKind::from_nsys),
            address: value(4).unwrap_or(0) as u64,
            bytes: bytes as u64,
            pc: value(5).unwrap_or(0) as u64,
            stream: value(10).and_then(|s| u32::try_from(s).ok()),
            correlation_id: value(9).and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
            pool: pool_state(&value),
        });
        Ok(())
    })?;
    trace.memory_events = events;
    trace.warn_n("CUDA memory event without time, process, GPU, size or operation (skipped)", unusable);
    trace.warn_n("CUDA memory event of a process without other events (skipped)", orphans);
    attach_pools(db, trace, &mut places)
}

/// The pool columns of one row (11–16 of [`USAGE_COLUMNS`]): local when its address is set, else imported.
fn pool_state(value: &dyn Fn(usize) -> Option<i64>) -> Option<MemoryPoolState> {
    let unsigned = |i: usize| value(i).map(|v| v as u64);
    if let Some(address) = unsigned(11) {
        return Some(MemoryPoolState {
            imported: false,
            address,
            release_threshold_bytes: unsigned(12),
            size_bytes: unsigned(13),
            utilized_bytes: unsigned(14),
            imported_pid: None,
        });
    }
    unsigned(15).map(|address| MemoryPoolState {
        imported: true,
        address,
        imported_pid: unsigned(16),
        ..MemoryPoolState::default()
    })
}

fn attach_pools(db: &Database, trace: &mut Trace, places: &mut Places) -> Result<(), Error> {
    const COLUMNS: &[&str] = &[
        "start",
        "globalPid",
        "deviceId",
        "address",
        "operationType",
        "poolType",
        "correlationId",
        "minBytesToKeep",
        "localMemoryPoolReleaseThreshold",
        "localMemoryPoolSize",
        "localMemoryPoolUtilizedSize",
    ];
    let mut skipped = 0u64;
    let mut events = Vec::new();
    db.each_row(POOL_TABLE, COLUMNS, |row| {
        let value = |i: usize| int(row, i);
        let place = (value(0), value(1).and_then(|g| places.processes.get(&(g as u64)).copied()), value(2));
        let (Some(time_ns), Some(process), Some(Ok(ordinal))) = (place.0, place.1, place.2.map(u32::try_from)) else {
            skipped += 1;
            return Ok(());
        };
        let unsigned = |i: usize| value(i).unwrap_or(0) as u64;
        events.push(MemoryPoolEvent {
            time_ns,
            process,
            device: places.device(trace, ordinal),
            operation: u8::try_from(value(4).unwrap_or(0)).unwrap_or(u8::MAX),
            pool_type: u8::try_from(value(5).unwrap_or(0)).unwrap_or(u8::MAX),
            address: unsigned(3),
            correlation_id: value(6).and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
            min_bytes_to_keep: unsigned(7),
            release_threshold_bytes: unsigned(8),
            size_bytes: unsigned(9),
            utilized_bytes: unsigned(10),
        });
        Ok(())
    })?;
    trace.memory_pool_events = events;
    trace.warn_n("CUDA memory pool event without time, known process or GPU (skipped)", skipped);
    Ok(())
}
