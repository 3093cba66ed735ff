//! Writes a [`Trace`] as an SQLite file in Nsight Systems' export schema (3.25.0 columns), so
//! that [`crate::nsys::read`] reads it back unchanged and NVIDIA's `nsys stats` accepts it.
//!
//! ```no_run
//! # let trace = shardscope_model::Trace::default();
//! // All at once:
//! shardscope_io::nsys_writer::write(&trace, std::path::Path::new("out.sqlite"))?;
//! // Or step by step, adding tables of one's own before finishing:
//! let mut writer = shardscope_io::nsys_writer::Writer::create(std::path::Path::new("out2.sqlite"))?;
//! writer.write_trace(&trace)?;
//! writer.connection().execute_batch("CREATE TABLE EXTRA (x INTEGER)").map_err(|e| writer.error(e))?;
//! writer.finish()?;
//! # Ok::<(), shardscope_io::Error>(())
//! ```
//!
//! A capture knows more per kernel and GPU than the model holds (context, mangled name, launch
//! type, memory sizes; UUID, L2 size, compute capability): [`Writer::write_trace_with`] writes
//! those [`CuptiColumns`] into the same rows, so the file is written in one pass.
//!
//! What the schema cannot hold is lost on the way: a range's GPU and stream (GPU annotations
//! become start/end ranges), and copy kinds other than the five [`CopyKind`](shardscope_model::CopyKind) names. The
//! process rank, world size and host go to a table of our own, `SHARDSCOPE_PROCESS_INFO`.
//! Whole file content goes in one transaction with prepared statements and journaling off:
//! the file is either complete after [`Writer::finish`] or not worth keeping.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, Statement, params};
use shardscope_model::{ApiKind, MemoryKind, NameId, Names, ProcessIdx, RangeKind, Trace};

use crate::Error;
use crate::nsys::enums::ENUM_TABLES;
use crate::nsys::schema::{
    CAPTURE_WINDOWS_TABLE, CREATE_CAPTURE_WINDOWS, CREATE_GRAPH_TRACE, CREATE_TABLES, PROCESS_INFO_TABLE,
    SCHEMA_VERSION,
};

/// `ENUM_NSYS_EVENT_CLASS` ids of CUDA runtime and driver calls.
const EVENT_CLASS_CUDA_RUNTIME: i64 = 0;
const EVENT_CLASS_CUDA_DRIVER: i64 = 1;
/// `ENUM_NSYS_EVENT_TYPE` ids of the NVTX rows written.
const EVENT_TYPE_PUSH_POP: i64 = 59;
const EVENT_TYPE_START_END: i64 = 60;
const EVENT_TYPE_DOMAIN_CREATE: i64 = 75;

/// Who wrote the file, recorded in `META_DATA_EXPORT`.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// `EXPORT_PRODUCT_NAME`, e.g. `shardscope-capture`.
    pub producer_name: String,
    /// `EXPORT_PRODUCT_VERSION`.
    pub producer_version: String,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { producer_name: "shardscope".into(), producer_version: env!("CARGO_PKG_VERSION").into() }
    }
}

/// CUPTI columns of `CUPTI_ACTIVITY_KIND_KERNEL` that the model has no field for, for one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelColumns {
    /// CUDA context id.
    pub context_id: u32,
    /// The mangled name, as CUPTI reported it.
    pub mangled_name: NameId,
    /// CUPTI's launch type (regular, cooperative single- or multi-device).
    pub launch_type: u8,
    /// Requested cache configuration (CUPTI's packed byte).
    pub cache_config: u8,
    /// Registers per thread.
    pub registers_per_thread: u16,
    /// Static shared memory, bytes.
    pub static_shared_bytes: i32,
    /// Dynamic shared memory, bytes.
    pub dynamic_shared_bytes: i32,
    /// Local memory per thread, bytes.
    pub local_bytes_per_thread: u32,
    /// Local memory of the whole kernel, bytes.
    pub local_bytes_total: u32,
    /// CUPTI's grid id.
    pub grid_id: i64,
    /// Shared memory the driver configured, bytes.
    pub shared_executed_bytes: u32,
}

/// `TARGET_INFO_GPU` columns that the model has no field for, for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuColumns {
    /// Device UUID as nsys writes it (`GPU-xxxxxxxx-…`).
    pub uuid: String,
    /// L2 cache, bytes.
    pub l2_cache_bytes: u32,
    /// Copy engines.
    pub copy_engines: u32,
    /// Compute capability, major and minor.
    pub compute_capability: (u32, u32),
}

/// Columns beyond the model, written into the rows of the trace they belong to.
#[derive(Debug, Clone, Default)]
pub struct CuptiColumns {
    /// Parallel to `trace.kernels`, or empty (columns left at nsys' defaults).
    pub kernels: Vec<KernelColumns>,
    /// Parallel to `trace.devices`, or empty; `None` for a GPU without them.
    pub devices: Vec<Option<GpuColumns>>,
}

/// Writes `trace` to a new SQLite file at `path` (replacing any file there).
pub fn write(trace: &Trace, path: &Path) -> Result<(), Error> {
    let mut writer = Writer::create(path)?;
    writer.write_trace(trace)?;
    writer.finish()
}

/// An open output file. Tables are created and the transaction begun by [`Writer::create`];
/// nothing is durable until [`Writer::finish`] commits.
pub struct Writer {
    conn: Connection,
    path: PathBuf,
    /// String → `StringIds.id`, shared by every trace written.
    string_ids: HashMap<Box<str>, i64>,
    /// Processes and GPUs already written, so that several traces can share a file.
    written_processes: HashSet<u64>,
    written_devices: HashSet<u32>,
    /// Per process: NVTX domain name → `domainId`.
    domain_ids: HashMap<(u64, Box<str>), i64>,
    session_start_written: bool,
}

impl Writer {
    /// Creates `path` (replacing any file there) with the nsys tables and shardscope as producer.
    pub fn create(path: &Path) -> Result<Writer, Error> {
        Writer::create_with(path, &WriteOptions::default())
    }

    /// Like [`Writer::create`], naming another producer.
    pub fn create_with(path: &Path, options: &WriteOptions) -> Result<Writer, Error> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
        let conn = Connection::open(path).map_err(|e| write_error(path, e))?;
        let mut writer = Writer {
            conn,
            path: path.to_path_buf(),
            string_ids: HashMap::new(),
            written_processes: HashSet::new(),
            written_devices: HashSet::new(),
            domain_ids: HashMap::new(),
            session_start_written: false,
        };
        writer.start(options).map_err(|e| writer.error(e))?;
        Ok(writer)
    }

    fn start(&mut self, options: &WriteOptions) -> rusqlite::Result<()> {
        // A half-written file is discarded anyway, so durability buys nothing here.
        self.conn.execute_batch(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; \
             PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY; BEGIN;",
        )?;
        for sql in CREATE_TABLES {
            self.conn.execute_batch(sql)?;
        }
        for table in ENUM_TABLES {
            self.conn.execute_batch(&format!(
                "CREATE TABLE {} (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
                table.name
            ))?;
            let mut insert = self.conn.prepare(&format!("INSERT INTO {} VALUES (?1, ?2, ?3)", table.name))?;
            for (id, name, label) in table.rows {
                insert.execute(params![id, name, label])?;
            }
        }
        let (major, minor, micro) = SCHEMA_VERSION;
        let mut meta = self.conn.prepare("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?1, ?2)")?;
        for (name, value) in [
            ("EXPORT_PRODUCT_NAME", options.producer_name.clone()),
            ("EXPORT_PRODUCT_VERSION", options.producer_version.clone()),
            ("EXPORT_SCHEMA_VERSION", format!("{major}.{minor}.{micro}")),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major.to_string()),
            ("EXPORT_SCHEMA_VERSION_MINOR", minor.to_string()),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro.to_string()),
            ("EXPORT_PARAM_EXPORT_TYPE", "SQLite".to_string()),
        ] {
            meta.execute(params![name, value])?;
        }
        Ok(())
    }

    /// The open connection, inside the writer's transaction: for tables of the caller's own.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// An SQLite error while writing this file, as a one-line [`Error`].
    pub fn error(&self, error: rusqlite::Error) -> Error {
        write_error(&self.path, error)
    }

    /// Commits everything written and closes the file.
    pub fn finish(self) -> Result<(), Error> {
        self.conn.execute_batch("COMMIT").map_err(|e| self.error(e))?;
        self.conn.close().map_err(|(_conn, e)| write_error(&self.path, e))
    }

    /// Appends one trace: its processes, threads, GPUs and every event. May be called once per
    /// trace of a multi-file job; processes and GPUs already written are not repeated.
    pub fn write_trace(&mut self, trace: &Trace) -> Result<(), Error> {
        self.write_trace_with(trace, &CuptiColumns::default())
    }

    /// Like [`Writer::write_trace`], with the `columns` a capture has beyond the model in the
    /// same rows.
    pub fn write_trace_with(&mut self, trace: &Trace, columns: &CuptiColumns) -> Result<(), Error> {
        self.write_trace_inner(trace, columns).map_err(|e| self.error(e))
    }

    fn write_trace_inner(&mut self, trace: &Trace, columns: &CuptiColumns) -> rusqlite::Result<()> {
        let global_pids = self.global_pids(trace);
        let r = TraceRows { conn: &self.conn, trace, columns, global_pids };
        let mut strings = StringWriter {
            insert: r.conn.prepare("INSERT INTO StringIds (id, value) VALUES (?1, ?2)")?,
            ids: &mut self.string_ids,
            by_name: vec![-1; trace.names.len()],
            names: &trace.names,
        };
        if !self.session_start_written
            && let Some(offset) = trace.clock_offset_ns
        {
            r.conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs) VALUES (?1)", [offset])?;
            self.session_start_written = true;
        }
        // One step per table, in the order nsys' own exports fill them.
        write_processes(&r, &mut self.written_processes)?;
        write_threads(&r, &mut strings)?;
        write_gpus(&r, &mut self.written_devices)?;
        write_kernels(&r, &mut strings)?;
        write_memops(&r)?;
        write_api_calls(&r, &mut strings)?;
        write_graph_launches(&r)?;
        write_capture_windows(&r)?;
        write_ranges(&r, &mut strings, &mut self.domain_ids)?;
        crate::nsys::memory::write_tables(r.conn, trace, &|p| r.global_pid(p), &|d| r.ordinal(d))
    }

    /// The `globalPid` of each process: its own, or one made from its pid (kept unique by
    /// setting hardware-id bits when two processes share a pid, as on different hosts).
    fn global_pids(&self, trace: &Trace) -> Vec<u64> {
        let mut used: HashSet<u64> = HashSet::new();
        trace
            .processes
            .iter()
            .map(|p| {
                if p.global_pid != 0 {
                    used.insert(p.global_pid);
                    return p.global_pid;
                }
                let mut candidate = u64::from(p.pid & 0xFF_FFFF) << 24;
                while !used.insert(candidate) {
                    candidate = candidate.wrapping_add(1 << 56);
                }
                candidate
            })
            .collect()
    }
}

/// The trace being written and what every table step needs of it.
struct TraceRows<'a> {
    conn: &'a Connection,
    trace: &'a Trace,
    columns: &'a CuptiColumns,
    /// `globalPid` of each process of `trace`.
    global_pids: Vec<u64>,
}

impl TraceRows<'_> {
    /// nsys' `deviceId` of a GPU: its ordinal.
    fn ordinal(&self, device: shardscope_model::DeviceIdx) -> u32 {
        self.trace.devices.get(device.0 as usize).map_or(0, |d| d.ordinal)
    }

    fn global_pid(&self, process: ProcessIdx) -> i64 {
        self.global_pids.get(process.0 as usize).copied().unwrap_or(0) as i64
    }
}

/// `PROCESSES` and our `SHARDSCOPE_PROCESS_INFO`, for processes not yet in the file.
fn write_processes(r: &TraceRows, written: &mut HashSet<u64>) -> rusqlite::Result<()> {
    let mut process_row = r.conn.prepare("INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?1, ?2, ?3)")?;
    let mut info_row = r.conn.prepare(&format!(
        "INSERT INTO {PROCESS_INFO_TABLE} (globalPid, rank, worldSize, host) VALUES (?1, ?2, ?3, ?4)"
    ))?;
    for (process, &global_pid) in r.trace.processes.iter().zip(&r.global_pids) {
        if !written.insert(global_pid) {
            continue;
        }
        process_row.execute(params![global_pid as i64, process.pid, process.name])?;
        if process.rank.is_some() || process.world_size.is_some() || process.host.is_some() {
            info_row.execute(params![global_pid as i64, process.rank, process.world_size, process.host])?;
        }
    }
    Ok(())
}

/// `ThreadNames`.
fn write_threads(r: &TraceRows, strings: &mut StringWriter) -> rusqlite::Result<()> {
    let mut thread_row =
        r.conn.prepare("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?1, NULL, ?2)")?;
    for thread in &r.trace.threads {
        let name_id = strings.id_of_str(&thread.name)?;
        let global_tid = r.global_pids[thread.process.0 as usize] | u64::from(thread.tid);
        thread_row.execute(params![name_id, global_tid as i64])?;
    }
    Ok(())
}

/// `TARGET_INFO_GPU`, with the capture's columns where given, for GPUs not yet in the file.
fn write_gpus(r: &TraceRows, written: &mut HashSet<u32>) -> rusqlite::Result<()> {
    let mut gpu_row = r.conn.prepare(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, totalMemory, memoryBandwidth, clockRate, \
         smCount, cuDevice, uuid, l2CacheSize, asyncEngines, computeMajor, computeMinor, smMajor, smMinor, \
         isDiscrete) VALUES (0, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?1, ?8, ?9, ?10, ?11, ?12, ?11, ?12, ?13)",
    )?;
    for (index, device) in r.trace.devices.iter().enumerate() {
        if !written.insert(device.ordinal) {
            continue;
        }
        let gpu = r.columns.devices.get(index).and_then(Option::as_ref);
        gpu_row.execute(params![
            device.ordinal,
            device.name,
            device.bus_location,
            device.memory_bytes.map(|b| b as i64),
            device.memory_bandwidth_bytes_per_s.map(|b| b as i64),
            // nsys stores Hz.
            device.clock_rate_khz.map(|khz| i64::from(khz) * 1000),
            device.sm_count,
            gpu.map(|g| &g.uuid),
            gpu.map(|g| g.l2_cache_bytes),
            gpu.map(|g| g.copy_engines),
            gpu.map(|g| g.compute_capability.0),
            gpu.map(|g| g.compute_capability.1),
            gpu.map(|_| 1),
        ])?;
    }
    Ok(())
}

/// `CUPTI_ACTIVITY_KIND_KERNEL`, with the capture's columns in the same rows.
fn write_kernels(r: &TraceRows, strings: &mut StringWriter) -> rusqlite::Result<()> {
    // Without capture columns, the NOT NULL ones nsys has and the model lacks get 0, the others NULL.
    let mut kernel_row = r.conn.prepare(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, \
         globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, \
         staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, \
         tensorSizeMinusOneElements, mangledName, launchType, cacheConfig, sharedMemoryExecuted, graphNodeId, \
         graphId) \
         VALUES (?1, ?2, ?3, ?15, ?4, ?5, ?6, ?7, ?8, ?16, ?9, ?10, ?11, ?12, ?13, ?14, ?17, ?18, ?19, ?20, ?21, \
         '[]', ?22, ?23, ?24, ?25, ?26, ?27)",
    )?;
    for (index, kernel) in r.trace.kernels.iter().enumerate() {
        let name = strings.id_of(kernel.name)?;
        let short_name = strings.id_of(kernel.short_name)?;
        let stmt = &mut kernel_row;
        stmt.raw_bind_parameter(1, kernel.start_ns)?;
        stmt.raw_bind_parameter(2, kernel.end_ns)?;
        stmt.raw_bind_parameter(3, r.ordinal(kernel.device))?;
        stmt.raw_bind_parameter(4, kernel.stream)?;
        stmt.raw_bind_parameter(5, kernel.correlation_id)?;
        stmt.raw_bind_parameter(6, r.global_pid(kernel.process))?;
        stmt.raw_bind_parameter(7, name)?;
        stmt.raw_bind_parameter(8, short_name)?;
        for (i, value) in kernel.grid.iter().chain(&kernel.block).enumerate() {
            stmt.raw_bind_parameter(9 + i, value)?;
        }
        match r.columns.kernels.get(index) {
            Some(c) => {
                let mangled_name = strings.id_of(c.mangled_name)?;
                stmt.raw_bind_parameter(15, c.context_id)?;
                stmt.raw_bind_parameter(16, c.registers_per_thread)?;
                stmt.raw_bind_parameter(17, c.static_shared_bytes)?;
                stmt.raw_bind_parameter(18, c.dynamic_shared_bytes)?;
                stmt.raw_bind_parameter(19, c.local_bytes_per_thread)?;
                stmt.raw_bind_parameter(20, c.local_bytes_total)?;
                stmt.raw_bind_parameter(21, c.grid_id)?;
                stmt.raw_bind_parameter(22, mangled_name)?;
                stmt.raw_bind_parameter(23, c.launch_type)?;
                stmt.raw_bind_parameter(24, c.cache_config)?;
                stmt.raw_bind_parameter(25, c.shared_executed_bytes)?;
            }
            None => {
                for i in 15..=21 {
                    stmt.raw_bind_parameter(i, 0)?;
                }
                for i in 22..=25 {
                    stmt.raw_bind_parameter(i, rusqlite::types::Null)?;
                }
            }
        }
        // Node ids are CUPTI's 64-bit handles; SQLite integers are signed, and nsys stores them as they are.
        stmt.raw_bind_parameter(26, kernel.graph_node_id.map(|id| id as i64))?;
        stmt.raw_bind_parameter(27, kernel.graph_id)?;
        stmt.raw_execute()?;
    }
    Ok(())
}

/// `CUPTI_ACTIVITY_KIND_MEMCPY` and `CUPTI_ACTIVITY_KIND_MEMSET`.
fn write_memops(r: &TraceRows) -> rusqlite::Result<()> {
    let mut memcpy_row = r.conn.prepare(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, \
         globalPid, bytes, copyKind, srcDeviceId, dstDeviceId, srcKind, dstKind) \
         VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    let mut memset_row = r.conn.prepare(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId, \
         globalPid, value, bytes) VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, 0, ?7)",
    )?;
    for memop in &r.trace.memops {
        let common = params![
            memop.start_ns,
            memop.end_ns,
            r.ordinal(memop.device),
            memop.stream,
            memop.correlation_id,
            r.global_pid(memop.process),
            memop.bytes as i64,
        ];
        match memop.copy_kind {
            None => {
                memset_row.execute(common)?;
            }
            Some(kind) => {
                for (i, value) in common.iter().enumerate() {
                    memcpy_row.raw_bind_parameter(i + 1, value)?;
                }
                memcpy_row.raw_bind_parameter(8, i64::from(kind.to_cupti()))?;
                memcpy_row.raw_bind_parameter(9, memop.src_device)?;
                memcpy_row.raw_bind_parameter(10, memop.dst_device)?;
                // `ENUM_CUDA_MEM_KIND` ids; NULL where the model has no kind, as files written before it had.
                memcpy_row.raw_bind_parameter(11, memop.src_memory.map(MemoryKind::nsys_id))?;
                memcpy_row.raw_bind_parameter(12, memop.dst_memory.map(MemoryKind::nsys_id))?;
                memcpy_row.raw_execute()?;
            }
        }
    }
    Ok(())
}

/// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`, as nsys writes a graph launch recorded whole (the graph id stands in for
/// the executable graph's id, which the model does not keep). The table exists only when there are rows.
fn write_graph_launches(r: &TraceRows) -> rusqlite::Result<()> {
    if r.trace.graph_launches.is_empty() {
        return Ok(());
    }
    r.conn.execute_batch(&format!("CREATE TABLE IF NOT EXISTS {}", &CREATE_GRAPH_TRACE["CREATE TABLE ".len()..]))?;
    let mut row = r.conn.prepare(
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, end, deviceId, contextId, streamId, correlationId, \
         globalPid, graphId, graphExecId) VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?7)",
    )?;
    for g in &r.trace.graph_launches {
        row.execute(params![
            g.start_ns,
            g.end_ns,
            r.ordinal(g.device),
            g.stream,
            g.correlation_id,
            r.global_pid(g.process),
            g.graph_id
        ])?;
    }
    Ok(())
}

/// `SHARDSCOPE_CAPTURE_WINDOWS`: when each process recorded, for a capture taken in windows. The table exists
/// only when there are windows.
fn write_capture_windows(r: &TraceRows) -> rusqlite::Result<()> {
    if r.trace.capture_windows.is_empty() {
        return Ok(());
    }
    r.conn
        .execute_batch(&format!("CREATE TABLE IF NOT EXISTS {}", &CREATE_CAPTURE_WINDOWS["CREATE TABLE ".len()..]))?;
    let mut row = r.conn.prepare(&format!(
        "INSERT INTO {CAPTURE_WINDOWS_TABLE} (globalPid, start, end, startTrigger, endTrigger) \
         VALUES (?1, ?2, ?3, ?4, ?5)"
    ))?;
    for w in &r.trace.capture_windows {
        row.execute(params![
            r.global_pid(w.process),
            w.start_ns,
            w.end_ns,
            w.start_trigger.as_str(),
            w.end_trigger.as_str()
        ])?;
    }
    Ok(())
}

/// `CUPTI_ACTIVITY_KIND_RUNTIME` (runtime and driver calls alike, told apart by `eventClass`).
fn write_api_calls(r: &TraceRows, strings: &mut StringWriter) -> rusqlite::Result<()> {
    let mut api_row = r.conn.prepare(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, \
         returnValue) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
    )?;
    for call in &r.trace.api_calls {
        let class = match call.kind {
            ApiKind::Runtime => EVENT_CLASS_CUDA_RUNTIME,
            ApiKind::Driver => EVENT_CLASS_CUDA_DRIVER,
        };
        let global_tid = r.global_pid(call.process) | i64::from(call.tid);
        let name = strings.id_of(call.name)?;
        api_row.execute(params![call.start_ns, call.end_ns, class, global_tid, call.correlation_id, name])?;
    }
    Ok(())
}

/// `NVTX_EVENTS`: each range, and a domain-creation row the first time a process names a domain.
fn write_ranges(
    r: &TraceRows,
    strings: &mut StringWriter,
    domain_ids: &mut HashMap<(u64, Box<str>), i64>,
) -> rusqlite::Result<()> {
    let mut range_row = r.conn.prepare(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, endGlobalTid, textId, domainId) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let mut domain_row = r.conn.prepare(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?1, NULL, ?2, ?3, ?4, ?5)",
    )?;
    for range in &r.trace.ranges {
        let process_gpid = r.global_pid(range.process);
        let global_tid = process_gpid | i64::from(range.tid);
        let domain_name = r.trace.names.get(range.domain);
        let domain_id = if domain_name.is_empty() {
            0
        } else {
            let key = (process_gpid as u64, Box::<str>::from(domain_name));
            match domain_ids.get(&key) {
                Some(&id) => id,
                None => {
                    // NVTX numbers domains per process from 1; nsys records the creation.
                    let id = 1 + domain_ids.keys().filter(|(p, _)| *p == key.0).count() as i64;
                    domain_row.execute(params![
                        range.start_ns,
                        EVENT_TYPE_DOMAIN_CREATE,
                        domain_name,
                        global_tid,
                        id
                    ])?;
                    domain_ids.insert(key, id);
                    id
                }
            }
        };
        let (event_type, end_tid) = match range.kind {
            RangeKind::PushPop | RangeKind::CpuAnnotation => (EVENT_TYPE_PUSH_POP, None),
            RangeKind::StartEnd | RangeKind::GpuAnnotation => (EVENT_TYPE_START_END, Some(global_tid)),
        };
        let text_id = strings.id_of(range.name)?;
        range_row.execute(params![
            range.start_ns,
            range.end_ns,
            event_type,
            global_tid,
            end_tid,
            text_id,
            domain_id
        ])?;
    }
    Ok(())
}

fn write_error(path: &Path, error: rusqlite::Error) -> Error {
    let cause = error.to_string().replace(['\n', '\r'], " ");
    Error::format(path, format!("cannot write SQLite: {cause}"))
}

/// `StringIds` rows written on first use of each string.
struct StringWriter<'conn, 'w> {
    insert: Statement<'conn>,
    ids: &'w mut HashMap<Box<str>, i64>,
    /// `StringIds.id` by [`NameId`] of the trace being written; -1 until first use.
    by_name: Vec<i64>,
    names: &'w Names,
}

impl StringWriter<'_, '_> {
    fn id_of(&mut self, name: NameId) -> rusqlite::Result<i64> {
        if let Some(&id) = self.by_name.get(name.0 as usize)
            && id >= 0
        {
            return Ok(id);
        }
        let id = self.id_of_str(self.names.get(name))?;
        if let Some(slot) = self.by_name.get_mut(name.0 as usize) {
            *slot = id;
        }
        Ok(id)
    }

    fn id_of_str(&mut self, text: &str) -> rusqlite::Result<i64> {
        if let Some(&id) = self.ids.get(text) {
            return Ok(id);
        }
        let id = self.ids.len() as i64;
        self.insert.execute(params![id, text])?;
        self.ids.insert(text.into(), id);
        Ok(id)
    }
}
