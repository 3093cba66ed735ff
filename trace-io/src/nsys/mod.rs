//! Nsight Systems SQLite export reader (see [`read`]).
//!
//! nsys exports are versioned by `META_DATA_EXPORT.EXPORT_SCHEMA_VERSION`; within major
//! version 3 tables are created lazily and columns come and go, so every `SELECT` is built
//! from the columns the file actually has (`pragma table_info`), with `NULL` standing in for
//! a missing one. Names are integer ids into `StringIds`, resolved once per id.
//!
//! Speed matters: exports of long runs hold tens of millions of kernels. Rows are decoded by
//! fixed column index straight from SQLite's buffers, processes and devices are found through
//! small caches, and nothing is allocated per row.
//!
//! Processes: a trace keeps the processes that own at least one event (kernel, copy, API call
//! or range); `PROCESSES` only supplies their names, since it also lists every daemon and
//! compiler that ran during the capture. Devices: every GPU of `TARGET_INFO_GPU` (or the old
//! `TARGET_INFO_CUDA_GPU`) plus every `deviceId` an event names. Both lists come out in a
//! canonical order (processes by `globalPid`, devices by ordinal), independent of row order.
pub(crate) mod enums;
pub(crate) mod schema;
mod strings;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};
use shardscope_model::{
    ApiCall, ApiKind, CopyKind, Device, DeviceIdx, Kernel, MemOp, NameId, Process, ProcessIdx, Range, RangeKind,
    SourceFormat, ThreadName, Trace,
};

use self::strings::StringTable;
use crate::Error;

/// The schema major version this reader understands.
pub const SUPPORTED_SCHEMA_MAJOR: u32 = 3;

/// Low 24 bits of a `globalTid`: the OS thread id.
const TID_MASK: u64 = 0xFF_FFFF;

/// The OS process id inside a `globalTid` or `globalPid` (`<hw:8><vm:8><pid:24><tid:24>`).
pub(crate) fn pid_of(global_id: u64) -> u32 {
    ((global_id >> 24) & 0xFF_FFFF) as u32
}

/// The `globalPid` of the process owning a `globalTid`.
pub(crate) fn global_pid_of(global_tid: u64) -> u64 {
    global_tid & !TID_MASK
}

/// The OS thread id inside a `globalTid`.
pub(crate) fn tid_of(global_tid: u64) -> u32 {
    (global_tid & TID_MASK) as u32
}

/// Tables whose presence marks a file as an nsys export (or a capture in its schema).
const NSYS_TABLES: &[&str] = &[
    "StringIds",
    "META_DATA_EXPORT",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_GPU",
    "TARGET_INFO_SESSION_START_TIME",
];

/// Reads an nsys SQLite export (or a capture) into a trace.
///
/// Opens the file read-only. Returns [`Error::Io`] when it cannot be opened,
/// [`Error::UnsupportedVersion`] for an export schema whose major version is not 3, and
/// [`Error::Format`] for a file that is not an SQLite database, is truncated or corrupt, or
/// holds none of the nsys tables.
pub fn read(path: &Path) -> Result<Trace, Error> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_dir() {
        return Err(Error::format(path, "is a folder, not an SQLite file"));
    }
    if metadata.len() == 0 {
        return Err(Error::format(path, "file is empty"));
    }
    let conn = open_read_only(path)?;
    let mut reader = Reader::new(path, &conn)?;
    reader.read_metadata()?;
    reader.read_string_ids()?;
    reader.read_process_names()?;
    reader.read_gpus()?;
    reader.read_kernels()?;
    reader.read_memcpys()?;
    reader.read_memsets()?;
    reader.read_api_calls()?;
    reader.read_nvtx()?;
    reader.canonical_order();
    reader.assign_device_owners();
    reader.read_thread_names()?;
    reader.read_process_info()?;
    let mut trace = reader.trace;
    trace.finish();
    Ok(trace)
}

/// Turns an SQLite error into a one-line format error naming the file.
fn db_error(path: &Path, error: rusqlite::Error) -> Error {
    let cause = error.to_string().replace(['\n', '\r'], " ");
    Error::format(path, format!("cannot read as an Nsight Systems SQLite export: {cause}"))
}

/// Opens `path` read-only and immutable (no locks, no journal look-ups), tuned for one long scan.
fn open_read_only(path: &Path) -> Result<Connection, Error> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let uri = format!("file:{}?mode=ro&immutable=1", uri_escape(path));
    let conn = Connection::open_with_flags(uri, flags).map_err(|e| db_error(path, e))?;
    // Memory-mapping spares a copy per page; a large page cache helps the few re-read pages.
    conn.execute_batch("PRAGMA mmap_size = 1073741824; PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY;")
        .map_err(|e| db_error(path, e))?;
    Ok(conn)
}

/// Percent-encodes a path for an SQLite `file:` URI (everything but unreserved bytes and `/`).
fn uri_escape(path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An integer column; SQLite may hand back a real for a column declared INTEGER.
#[inline]
fn int(row: &Row<'_>, index: usize) -> Option<i64> {
    match row.get_ref_unwrap(index) {
        ValueRef::Integer(i) => Some(i),
        ValueRef::Real(f) => Some(f as i64),
        _ => None,
    }
}

/// A text column, decoding invalid UTF-8 lossily.
fn text(row: &Row<'_>, index: usize) -> Option<String> {
    match row.get_ref_unwrap(index) {
        ValueRef::Text(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// `cudaLaunchKernel_v7000` → `cudaLaunchKernel`: nsys appends the CUDA version that
/// introduced a runtime entry point (`_v3020`, `_v11030`: four or more digits). Short suffixes
/// belong to the function's own name (`cudaStreamGetCaptureInfo_v2`) and stay.
pub(crate) fn strip_api_version(name: &str) -> &str {
    if let Some(pos) = name.rfind("_v") {
        let digits = &name[pos + 2..];
        if digits.len() >= 4 && digits.bytes().all(|b| b.is_ascii_digit()) {
            return &name[..pos];
        }
    }
    name
}

/// Driver API functions are named `cu*`, runtime ones `cuda*`.
fn api_kind_from_name(name: &str) -> ApiKind {
    if name.starts_with("cu") && !name.starts_with("cuda") { ApiKind::Driver } else { ApiKind::Runtime }
}

/// Processes by `globalPid`, with a one-entry cache: events of one process come in runs.
#[derive(Default)]
struct ProcessMap {
    last: Option<(u64, ProcessIdx)>,
    by_global_pid: HashMap<u64, ProcessIdx>,
}

/// Devices by ordinal: a direct table for the usual small ordinals.
#[derive(Default)]
struct DeviceMap {
    small: Vec<Option<DeviceIdx>>,
    other: HashMap<i64, DeviceIdx>,
}

/// Ordinals below this are looked up by index.
const SMALL_ORDINALS: i64 = 1024;

/// The state of one read.
struct Reader<'a> {
    path: &'a Path,
    conn: &'a Connection,
    tables: HashSet<String>,
    trace: Trace,
    strings: StringTable,
    processes: ProcessMap,
    devices: DeviceMap,
    /// `PROCESSES` rows: globalPid → (pid, name).
    process_names: HashMap<u64, (u32, String)>,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, conn: &'a Connection) -> Result<Reader<'a>, Error> {
        let mut tables = HashSet::new();
        {
            let mut stmt = conn
                .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
                .map_err(|e| db_error(path, e))?;
            let mut rows = stmt.query([]).map_err(|e| db_error(path, e))?;
            while let Some(row) = rows.next().map_err(|e| db_error(path, e))? {
                if let Some(name) = text(row, 0) {
                    tables.insert(name);
                }
            }
        }
        if !NSYS_TABLES.iter().any(|t| tables.contains(*t)) {
            return Err(Error::format(
                path,
                "SQLite database without Nsight Systems tables (no StringIds, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS)",
            ));
        }
        let mut trace = Trace::default();
        trace.source.path = path.display().to_string();
        trace.source.format = SourceFormat::NsysSqlite;
        Ok(Reader {
            path,
            conn,
            tables,
            trace,
            strings: StringTable::default(),
            processes: ProcessMap::default(),
            devices: DeviceMap::default(),
            process_names: HashMap::new(),
        })
    }

    fn err(&self, error: rusqlite::Error) -> Error {
        db_error(self.path, error)
    }

    fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    /// Column names of `table`.
    fn columns(&self, table: &str) -> Result<HashSet<String>, Error> {
        let mut stmt = self.conn.prepare(&format!("PRAGMA table_info(\"{table}\")")).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut columns = HashSet::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            if let Some(name) = text(row, 1) {
                columns.insert(name);
            }
        }
        Ok(columns)
    }

    /// `SELECT a, b, NULL, … FROM table`: `NULL` for each wanted column the table lacks, so
    /// that column indices stay fixed whatever the schema version.
    fn select(&self, table: &str, wanted: &[&str]) -> Result<String, Error> {
        let columns = self.columns(table)?;
        let list: Vec<String> =
            wanted.iter().map(|c| if columns.contains(*c) { format!("\"{c}\"") } else { "NULL".into() }).collect();
        Ok(format!("SELECT {} FROM \"{table}\"", list.join(", ")))
    }

    /// A capacity hint for a table: its largest rowid (cheap, unlike `count(*)`).
    fn row_hint(&self, table: &str) -> usize {
        self.conn
            .query_row(&format!("SELECT max(rowid) FROM \"{table}\""), [], |row| Ok(int(row, 0)))
            .ok()
            .flatten()
            .map_or(0, |n| n.clamp(0, 1 << 28) as usize)
    }

    /// The rows of a `(id, name, label)` enum table as name → id; empty when the table is missing.
    fn enum_ids(&self, table: &str) -> Result<HashMap<String, i64>, Error> {
        let mut ids = HashMap::new();
        if !self.has(table) {
            return Ok(ids);
        }
        let mut stmt = self.conn.prepare(&self.select(table, &["id", "name"])?).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            if let (Some(id), Some(name)) = (int(row, 0), text(row, 1)) {
                ids.insert(name, id);
            }
        }
        Ok(ids)
    }

    fn process(&mut self, global_pid: u64) -> ProcessIdx {
        if let Some((last_pid, index)) = self.processes.last
            && last_pid == global_pid
        {
            return index;
        }
        let index = match self.processes.by_global_pid.get(&global_pid) {
            Some(&index) => index,
            None => {
                let (pid, name) =
                    self.process_names.get(&global_pid).cloned().unwrap_or_else(|| (pid_of(global_pid), String::new()));
                let index = self.trace.add_process(Process { pid, global_pid, name, ..Process::default() });
                self.processes.by_global_pid.insert(global_pid, index);
                index
            }
        };
        self.processes.last = Some((global_pid, index));
        index
    }

    #[inline]
    fn device(&mut self, ordinal: i64) -> DeviceIdx {
        if (0..SMALL_ORDINALS).contains(&ordinal)
            && let Some(Some(index)) = self.devices.small.get(ordinal as usize)
        {
            return *index;
        }
        self.new_device(ordinal, Device { ordinal: ordinal as u32, ..Device::default() })
    }

    /// Registers a device unless one with this ordinal exists; returns its index either way.
    fn new_device(&mut self, ordinal: i64, device: Device) -> DeviceIdx {
        if (0..SMALL_ORDINALS).contains(&ordinal) {
            let slot = ordinal as usize;
            if self.devices.small.len() <= slot {
                self.devices.small.resize(slot + 1, None);
            }
            if let Some(index) = self.devices.small[slot] {
                return index;
            }
            let index = self.trace.add_device(device);
            self.devices.small[slot] = Some(index);
            index
        } else {
            if let Some(&index) = self.devices.other.get(&ordinal) {
                return index;
            }
            let index = self.trace.add_device(device);
            self.devices.other.insert(ordinal, index);
            index
        }
    }

    /// Schema version and producer; refuses major versions other than 3.
    fn read_metadata(&mut self) -> Result<(), Error> {
        if self.has("META_DATA_EXPORT") {
            let mut meta = HashMap::new();
            let mut stmt =
                self.conn.prepare(&self.select("META_DATA_EXPORT", &["name", "value"])?).map_err(|e| self.err(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
            while let Some(row) = rows.next().map_err(|e| self.err(e))? {
                if let (Some(name), Some(value)) = (text(row, 0), text(row, 1)) {
                    meta.insert(name, value);
                }
            }
            if let Some(version) = meta.get("EXPORT_SCHEMA_VERSION") {
                let major = version.split('.').next().and_then(|m| m.trim().parse::<u32>().ok());
                if major != Some(SUPPORTED_SCHEMA_MAJOR) {
                    return Err(Error::UnsupportedVersion {
                        path: self.path.display().to_string(),
                        version: version.clone(),
                        cause: format!("this build reads export schema {SUPPORTED_SCHEMA_MAJOR}.x"),
                    });
                }
                self.trace.source.schema_version = Some(version.clone());
            }
            self.trace.source.producer = match (meta.get("EXPORT_PRODUCT_NAME"), meta.get("EXPORT_PRODUCT_VERSION")) {
                (Some(name), Some(version)) => Some(format!("{name} {version}")),
                (Some(name), None) => Some(name.clone()),
                _ => None,
            };
        }
        if self.has("TARGET_INFO_SESSION_START_TIME") {
            let sql = self.select("TARGET_INFO_SESSION_START_TIME", &["utcEpochNs"])?;
            let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
            if let Some(row) = rows.next().map_err(|e| self.err(e))? {
                self.trace.clock_offset_ns = int(row, 0);
            }
        }
        Ok(())
    }

    fn read_string_ids(&mut self) -> Result<(), Error> {
        if !self.has("StringIds") {
            return Ok(());
        }
        let mut stmt = self.conn.prepare(&self.select("StringIds", &["id", "value"])?).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut strings = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            if let (Some(id), Some(value)) = (int(row, 0), text(row, 1)) {
                strings.push((id, value.into_boxed_str()));
            }
        }
        self.strings = StringTable::new(strings);
        Ok(())
    }

    fn read_process_names(&mut self) -> Result<(), Error> {
        if !self.has("PROCESSES") {
            return Ok(());
        }
        let sql = self.select("PROCESSES", &["globalPid", "pid", "name"])?;
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let Some(global_pid) = int(row, 0) else { continue };
            let global_pid = global_pid as u64;
            let pid = int(row, 1).map_or_else(|| pid_of(global_pid), |p| p as u32);
            self.process_names.insert(global_pid, (pid, text(row, 2).unwrap_or_default()));
        }
        Ok(())
    }

    /// GPUs from `TARGET_INFO_GPU`, or from `TARGET_INFO_CUDA_GPU` (keyed by `deviceId`) in old exports.
    fn read_gpus(&mut self) -> Result<(), Error> {
        let (table, id_column) = if self.has("TARGET_INFO_GPU") {
            ("TARGET_INFO_GPU", "id")
        } else if self.has("TARGET_INFO_CUDA_GPU") {
            ("TARGET_INFO_CUDA_GPU", "deviceId")
        } else {
            return Ok(());
        };
        let wanted = [id_column, "name", "busLocation", "totalMemory", "memoryBandwidth", "clockRate", "smCount"];
        let sql = self.select(table, &wanted)?;
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let Some(ordinal) = int(row, 0) else {
                self.trace.warn("GPU row without a device id");
                continue;
            };
            let positive = |v: Option<i64>| v.filter(|&v| v > 0);
            let device = Device {
                ordinal: ordinal as u32,
                process: None,
                name: text(row, 1).unwrap_or_default(),
                bus_location: text(row, 2).filter(|s| !s.is_empty()),
                memory_bytes: positive(int(row, 3)).map(|v| v as u64),
                memory_bandwidth_bytes_per_s: positive(int(row, 4)).map(|v| v as u64),
                // nsys stores the SM clock in Hz.
                clock_rate_khz: positive(int(row, 5)).map(|hz| (hz / 1000) as u32),
                sm_count: positive(int(row, 6)).map(|v| v as u32),
            };
            self.new_device(ordinal, device);
        }
        Ok(())
    }

    fn read_kernels(&mut self) -> Result<(), Error> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
        if !self.has(TABLE) {
            return Ok(());
        }
        let sql = self.select(
            TABLE,
            &[
                "start",
                "end",
                "deviceId",
                "streamId",
                "correlationId",
                "globalPid",
                "demangledName",
                "shortName",
                "gridX",
                "gridY",
                "gridZ",
                "blockX",
                "blockY",
                "blockZ",
            ],
        )?;
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        self.trace.kernels.reserve(self.row_hint(TABLE));
        let (mut no_time, mut unknown_name) = (0u64, 0u64);
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
                no_time += 1;
                continue;
            };
            let device = self.device(int(row, 2).unwrap_or(0));
            let process = self.process(int(row, 5).unwrap_or(0) as u64);
            let name = match int(row, 6).and_then(|id| self.strings.name(id, &mut self.trace.names)) {
                Some(name) => name,
                None => {
                    unknown_name += 1;
                    NameId::EMPTY
                }
            };
            let short_name = int(row, 7).and_then(|id| self.strings.name(id, &mut self.trace.names)).unwrap_or(name);
            let dim = |index| int(row, index).unwrap_or(0) as u32;
            self.trace.kernels.push(Kernel {
                start_ns,
                end_ns,
                name,
                short_name,
                device,
                process,
                stream: int(row, 3).unwrap_or(0) as u32,
                correlation_id: int(row, 4).unwrap_or(0) as u32,
                grid: [dim(8), dim(9), dim(10)],
                block: [dim(11), dim(12), dim(13)],
                launch: None,
                collective: None,
            });
        }
        self.trace.warn_n("kernel row without start or end (skipped)", no_time);
        self.trace.warn_n("kernel name id missing from StringIds (name left empty)", unknown_name);
        Ok(())
    }

    fn read_memcpys(&mut self) -> Result<(), Error> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
        if !self.has(TABLE) {
            return Ok(());
        }
        let wanted = [
            "start",
            "end",
            "deviceId",
            "streamId",
            "correlationId",
            "globalPid",
            "bytes",
            "copyKind",
            "srcDeviceId",
            "dstDeviceId",
        ];
        let sql = self.select(TABLE, &wanted)?;
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        self.trace.memops.reserve(self.row_hint(TABLE));
        let mut no_time = 0u64;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
                no_time += 1;
                continue;
            };
            let device = self.device(int(row, 2).unwrap_or(0));
            let process = self.process(int(row, 5).unwrap_or(0) as u64);
            self.trace.memops.push(MemOp {
                start_ns,
                end_ns,
                copy_kind: Some(CopyKind::from_cupti(int(row, 7).unwrap_or(0))),
                bytes: int(row, 6).unwrap_or(0).max(0) as u64,
                device,
                process,
                stream: int(row, 3).unwrap_or(0) as u32,
                correlation_id: int(row, 4).unwrap_or(0) as u32,
                src_device: int(row, 8).map(|d| d as u32),
                dst_device: int(row, 9).map(|d| d as u32),
                launch: None,
            });
        }
        self.trace.warn_n("memcpy row without start or end (skipped)", no_time);
        Ok(())
    }

    fn read_memsets(&mut self) -> Result<(), Error> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
        if !self.has(TABLE) {
            return Ok(());
        }
        let sql =
            self.select(TABLE, &["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"])?;
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        self.trace.memops.reserve(self.row_hint(TABLE));
        let mut no_time = 0u64;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
                no_time += 1;
                continue;
            };
            let device = self.device(int(row, 2).unwrap_or(0));
            let process = self.process(int(row, 5).unwrap_or(0) as u64);
            self.trace.memops.push(MemOp {
                start_ns,
                end_ns,
                copy_kind: None,
                bytes: int(row, 6).unwrap_or(0).max(0) as u64,
                device,
                process,
                stream: int(row, 3).unwrap_or(0) as u32,
                correlation_id: int(row, 4).unwrap_or(0) as u32,
                src_device: None,
                dst_device: None,
                launch: None,
            });
        }
        self.trace.warn_n("memset row without start or end (skipped)", no_time);
        Ok(())
    }

    /// CUDA runtime and driver calls, which newer exports keep in one table told apart by
    /// `eventClass` (`ENUM_NSYS_EVENT_CLASS`); the name decides when the class says nothing.
    fn read_api_calls(&mut self) -> Result<(), Error> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
        if !self.has(TABLE) {
            return Ok(());
        }
        let classes = self.enum_ids("ENUM_NSYS_EVENT_CLASS")?;
        let class_id = |name: &str, documented: i64| {
            if classes.is_empty() { Some(documented) } else { classes.get(name).copied() }
        };
        // Documented ids, used only for files without the enum table.
        let runtime_class = class_id("TRACE_PROCESS_EVENT_CUDA_RUNTIME", 0);
        let driver_class = class_id("TRACE_PROCESS_EVENT_CUDA_DRIVER", 1);

        let sql = self.select(TABLE, &["start", "end", "eventClass", "globalTid", "correlationId", "nameId"])?;
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        self.trace.api_calls.reserve(self.row_hint(TABLE));
        // nameId → (name without version suffix, kind the name suggests).
        let mut api_names: HashMap<i64, (NameId, ApiKind)> = HashMap::new();
        let mut last_name: Option<(i64, NameId, ApiKind)> = None;
        let (mut no_time, mut unknown_name) = (0u64, 0u64);
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
                no_time += 1;
                continue;
            };
            let name_id = int(row, 5).unwrap_or(-1);
            let (name, kind_by_name) = match last_name {
                Some((id, name, kind)) if id == name_id => (name, kind),
                _ => {
                    let entry = match api_names.get(&name_id) {
                        Some(&entry) => entry,
                        None => {
                            let entry = match self.strings.text(name_id) {
                                Some(full) => {
                                    let short = strip_api_version(full);
                                    let kind = api_kind_from_name(short);
                                    let short = short.to_string();
                                    (self.trace.names.intern(&short), kind)
                                }
                                None => (NameId::EMPTY, ApiKind::Runtime),
                            };
                            api_names.insert(name_id, entry);
                            entry
                        }
                    };
                    last_name = Some((name_id, entry.0, entry.1));
                    entry
                }
            };
            if name == NameId::EMPTY {
                unknown_name += 1;
            }
            let class = int(row, 2);
            let kind = if class.is_some() && class == driver_class {
                ApiKind::Driver
            } else if class.is_some() && class == runtime_class {
                ApiKind::Runtime
            } else {
                kind_by_name
            };
            let global_tid = int(row, 3).unwrap_or(0) as u64;
            let process = self.process(global_pid_of(global_tid));
            self.trace.api_calls.push(ApiCall {
                start_ns,
                end_ns,
                name,
                kind,
                process,
                tid: tid_of(global_tid),
                correlation_id: int(row, 4).unwrap_or(0) as u32,
            });
        }
        self.trace.warn_n("CUDA API row without start or end (skipped)", no_time);
        self.trace.warn_n("CUDA API name id missing from StringIds (name left empty)", unknown_name);
        Ok(())
    }

    /// NVTX push/pop and start/end ranges, with their domain names.
    fn read_nvtx(&mut self) -> Result<(), Error> {
        const TABLE: &str = "NVTX_EVENTS";
        if !self.has(TABLE) {
            return Ok(());
        }
        let types = self.enum_ids("ENUM_NSYS_EVENT_TYPE")?;
        // Event types are looked up by name; the documented ids serve files without the enum table.
        let type_ids = |names: &[(&str, i64)]| -> Vec<i64> {
            names
                .iter()
                .filter_map(
                    |&(name, documented)| if types.is_empty() { Some(documented) } else { types.get(name).copied() },
                )
                .collect()
        };
        let push_pop = type_ids(&[("NvtxPushPopRange", 59), ("NvtxtPushPopRange", 70)]);
        let start_end = type_ids(&[("NvtxStartEndRange", 60), ("NvtxtStartEndRange", 71)]);
        let domain_create = type_ids(&[("NvtxDomainCreate", 75)]);

        let sql = self.select(TABLE, &["start", "end", "eventType", "text", "textId", "globalTid", "domainId"])?;
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        // NVTX domain ids are handed out per process, so a domain is named by (globalPid, id).
        let mut domain_names: HashMap<(u64, i64), NameId> = HashMap::new();
        // Ranges in a non-default domain, resolved once every NvtxDomainCreate row is known.
        let mut ranges_in_domain: Vec<(usize, u64, i64)> = Vec::new();
        let (mut unterminated, mut no_name) = (0u64, 0u64);
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let Some(event_type) = int(row, 2) else { continue };
            let kind = if push_pop.contains(&event_type) {
                RangeKind::PushPop
            } else if start_end.contains(&event_type) {
                RangeKind::StartEnd
            } else {
                if domain_create.contains(&event_type)
                    && let Some(domain_id) = int(row, 6)
                {
                    let name = self.range_text(row);
                    let global_pid = global_pid_of(int(row, 5).unwrap_or(0) as u64);
                    domain_names.insert((global_pid, domain_id), name.unwrap_or(NameId::EMPTY));
                }
                continue;
            };
            let Some(start_ns) = int(row, 0) else { continue };
            let Some(end_ns) = int(row, 1) else {
                unterminated += 1;
                continue;
            };
            let name = self.range_text(row).unwrap_or_else(|| {
                no_name += 1;
                NameId::EMPTY
            });
            let global_tid = int(row, 5).unwrap_or(0) as u64;
            let process = self.process(global_pid_of(global_tid));
            if let Some(domain_id) = int(row, 6).filter(|&d| d != 0) {
                ranges_in_domain.push((self.trace.ranges.len(), global_pid_of(global_tid), domain_id));
            }
            self.trace.ranges.push(Range {
                start_ns,
                end_ns,
                name,
                domain: NameId::EMPTY,
                kind,
                process,
                tid: tid_of(global_tid),
                device: None,
                stream: None,
                depth: 0,
            });
        }
        // A process whose own create row is missing borrows the name other processes gave the
        // same id, when they all agree.
        let mut name_by_id: HashMap<i64, Option<NameId>> = HashMap::new();
        for (&(_, domain_id), &name) in &domain_names {
            name_by_id.entry(domain_id).and_modify(|n| *n = n.filter(|&n| n == name)).or_insert(Some(name));
        }
        let mut unnamed_domains = HashSet::new();
        for (index, global_pid, domain_id) in ranges_in_domain {
            let known = domain_names.get(&(global_pid, domain_id)).copied();
            let domain = match known.or_else(|| name_by_id.get(&domain_id).copied().flatten()) {
                Some(name) => name,
                None => {
                    // The NvtxDomainCreate row lies outside the exported window: keep the
                    // ranges apart from the default domain under a name that says so.
                    unnamed_domains.insert(domain_id);
                    self.trace.names.intern(&format!("domain {domain_id}"))
                }
            };
            self.trace.ranges[index].domain = domain;
        }
        self.trace.warn_n("NVTX range without end (unterminated, skipped)", unterminated);
        self.trace.warn_n("NVTX range without text", no_name);
        self.trace.warn_n("NVTX domain without NvtxDomainCreate row (named by its id)", unnamed_domains.len() as u64);
        Ok(())
    }

    /// An NVTX row's message: inline `text` or a registered string (`textId`).
    fn range_text(&mut self, row: &Row<'_>) -> Option<NameId> {
        match row.get_ref_unwrap(3) {
            ValueRef::Text(bytes) => Some(match std::str::from_utf8(bytes) {
                Ok(s) => self.trace.names.intern(s),
                Err(_) => self.trace.names.intern(&String::from_utf8_lossy(bytes)),
            }),
            _ => int(row, 4).and_then(|id| self.strings.name(id, &mut self.trace.names)),
        }
    }

    /// Renumbers processes by `globalPid` and devices by ordinal, so that the same content
    /// gives the same indices whatever order the rows were stored in.
    fn canonical_order(&mut self) {
        let trace = &mut self.trace;
        let process_order = sorted_order(trace.processes.iter().map(|p| p.global_pid));
        if let Some(new_index) = &process_order {
            trace.processes = permute(std::mem::take(&mut trace.processes), new_index);
            let remap = |p: &mut ProcessIdx| *p = ProcessIdx(new_index[p.0 as usize]);
            trace.kernels.iter_mut().for_each(|k| remap(&mut k.process));
            trace.memops.iter_mut().for_each(|m| remap(&mut m.process));
            trace.api_calls.iter_mut().for_each(|a| remap(&mut a.process));
            trace.ranges.iter_mut().for_each(|r| remap(&mut r.process));
        }
        if let Some(new_index) = sorted_order(trace.devices.iter().map(|d| d.ordinal as u64)) {
            trace.devices = permute(std::mem::take(&mut trace.devices), &new_index);
            let remap = |d: &mut DeviceIdx| *d = DeviceIdx(new_index[d.0 as usize]);
            trace.kernels.iter_mut().for_each(|k| remap(&mut k.device));
            trace.memops.iter_mut().for_each(|m| remap(&mut m.device));
            trace.ranges.iter_mut().filter_map(|r| r.device.as_mut()).for_each(remap);
        }
        // Later look-ups (thread names) go by globalPid.
        self.processes = ProcessMap::default();
        for (index, process) in self.trace.processes.iter().enumerate() {
            self.processes.by_global_pid.insert(process.global_pid, ProcessIdx(index as u32));
        }
    }

    /// A device belongs to a process when exactly one process launched kernels on it.
    fn assign_device_owners(&mut self) {
        // Per device: the one launching process so far, or `Err` once a second one shows up.
        let mut owners: Vec<Option<Result<ProcessIdx, ()>>> = vec![None; self.trace.devices.len()];
        for kernel in &self.trace.kernels {
            let owner = &mut owners[kernel.device.0 as usize];
            match owner {
                None => *owner = Some(Ok(kernel.process)),
                Some(Ok(p)) if *p != kernel.process => *owner = Some(Err(())),
                _ => {}
            }
        }
        for (device, owner) in self.trace.devices.iter_mut().zip(owners) {
            device.process = owner.and_then(Result::ok);
        }
    }

    /// Rank, world size and host, which files written by shardscope keep in a table of their own.
    fn read_process_info(&mut self) -> Result<(), Error> {
        if !self.has(schema::PROCESS_INFO_TABLE) {
            return Ok(());
        }
        let sql = self.select(schema::PROCESS_INFO_TABLE, &["globalPid", "rank", "worldSize", "host"])?;
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let Some(global_pid) = int(row, 0) else { continue };
            let Some(&index) = self.processes.by_global_pid.get(&(global_pid as u64)) else { continue };
            let process = &mut self.trace.processes[index.0 as usize];
            process.rank = int(row, 1).map(|r| r as u32);
            process.world_size = int(row, 2).map(|w| w as u32);
            process.host = text(row, 3);
        }
        Ok(())
    }

    /// Names of the threads of the trace's processes.
    fn read_thread_names(&mut self) -> Result<(), Error> {
        if !self.has("ThreadNames") {
            return Ok(());
        }
        let sql = self.select("ThreadNames", &["nameId", "globalTid"])?;
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let (Some(name_id), Some(global_tid)) = (int(row, 0), int(row, 1)) else { continue };
            let global_tid = global_tid as u64;
            let Some(&process) = self.processes.by_global_pid.get(&global_pid_of(global_tid)) else { continue };
            let Some(name) = self.strings.text(name_id) else { continue };
            self.trace.threads.push(ThreadName { process, tid: tid_of(global_tid), name: name.to_string() });
        }
        self.trace.threads.sort_by_key(|t| (t.process, t.tid));
        Ok(())
    }
}

/// For keys in current order: each element's new index after a stable sort by key, or `None`
/// when the order is already sorted.
fn sorted_order(keys: impl Iterator<Item = u64>) -> Option<Vec<u32>> {
    let keys: Vec<u64> = keys.collect();
    if keys.windows(2).all(|w| w[0] <= w[1]) {
        return None;
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    let mut new_index = vec![0u32; keys.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new as u32;
    }
    Some(new_index)
}

/// Moves `items[i]` to position `new_index[i]`.
fn permute<T: Default>(mut items: Vec<T>, new_index: &[u32]) -> Vec<T> {
    let mut out: Vec<T> = (0..items.len()).map(|_| T::default()).collect();
    for (old, item) in items.iter_mut().enumerate() {
        out[new_index[old] as usize] = std::mem::take(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_unpack() {
        // A real globalTid from an export: pid 144, thread 144 + 0x90 offset bits.
        let global_tid: u64 = 281477392629904;
        assert_eq!(pid_of(global_tid), 144);
        assert_eq!(global_pid_of(global_tid), 281477392629760);
        assert_eq!(tid_of(global_tid), 144);
        assert_eq!(pid_of(global_pid_of(global_tid)), 144);
    }

    #[test]
    fn api_names_lose_version_suffix_and_get_a_kind() {
        assert_eq!(strip_api_version("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
        assert_eq!(strip_api_version("cuLaunchKernelEx"), "cuLaunchKernelEx");
        assert_eq!(strip_api_version("cudaFoo_vx"), "cudaFoo_vx");
        assert_eq!(strip_api_version("cudaStreamGetCaptureInfo_v2_v11030"), "cudaStreamGetCaptureInfo_v2");
        assert_eq!(strip_api_version("cudaStreamGetCaptureInfo_v2"), "cudaStreamGetCaptureInfo_v2");
        assert_eq!(api_kind_from_name("cuLaunchKernelEx"), ApiKind::Driver);
        assert_eq!(api_kind_from_name("cudaMemcpyAsync"), ApiKind::Runtime);
    }

    #[test]
    fn uri_escaping_keeps_plain_paths_and_escapes_the_rest() {
        assert_eq!(uri_escape(Path::new("/tmp/a_b-c.sqlite")), "/tmp/a_b-c.sqlite");
        assert_eq!(uri_escape(Path::new("/tmp/a b?#%.sqlite")), "/tmp/a%20b%3F%23%25.sqlite");
    }

    #[test]
    fn sorted_order_gives_new_positions() {
        assert_eq!(sorted_order([1u64, 2, 3].into_iter()), None);
        assert_eq!(sorted_order([30u64, 10, 20].into_iter()), Some(vec![2, 0, 1]));
        assert_eq!(permute(vec!['c', 'a', 'b'], &[2, 0, 1]), vec!['a', 'b', 'c']);
    }
}
