//! Nsight Systems SQLite export reader (see [`read`]).
//!
//! nsys exports are versioned by `META_DATA_EXPORT.EXPORT_SCHEMA_VERSION`; within major
//! version 3 tables are created lazily and columns come and go, so every `SELECT` is built
//! from the columns the file actually has (`pragma table_info`), with `NULL` standing in for
//! a missing one. Names are integer ids into `StringIds`, resolved once per id.
//!
//! Speed matters: exports of long runs hold tens of millions of kernels. The event tables are
//! decoded in parallel on separate read-only connections, the kernel, API and NVTX tables in shares
//! of rowids (the plan in module `jobs`, the rows in `scan`, their joining in `join`); rows are
//! decoded by fixed column index straight from SQLite's buffers, with processes and devices found
//! through small caches and nothing allocated per row. The shares' ids are then mapped to the
//! trace's, again in parallel.
//!
//! Processes: a trace keeps the processes that own at least one event (kernel, copy, API call
//! or range); `PROCESSES` only supplies their names, since it also lists every daemon and
//! compiler that ran during the capture. Devices: every GPU of `TARGET_INFO_GPU` (or the old
//! `TARGET_INFO_CUDA_GPU`) plus every `deviceId` an event names. Both lists come out in a
//! canonical order (processes by `globalPid`, devices by ordinal), independent of row order.

pub(crate) mod enums;
pub mod graph_nodes;
mod jobs;
mod join;
pub mod memory;
mod nccl_tables;
mod scan;
pub(crate) mod schema;
mod strings;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};
use shardscope_model::{
    ApiCall, ApiKind, CaptureWindow, Device, DeviceIdx, GraphLaunch, Kernel, MemOp, NameId, Process, ProcessIdx, Range,
    SourceFormat, ThreadName, Trace, WindowTrigger,
};

use self::jobs::{Output, ROWS_PER_JOB, plan_jobs, run_jobs};
use self::strings::StringTable;
use crate::{Error, Extent};

/// The schema major version this reader understands.
pub const SUPPORTED_SCHEMA_MAJOR: u32 = 3;

/// The table of facts `capture` writes about its run (`name, value`).
pub const CAPTURE_META_TABLE: &str = "SHARDSCOPE_CAPTURE_META";
/// The `captureMode` fact of a capture taken with `capture --comm-only`: no kernels but NCCL's, timed by
/// NCCL's own kernel-channel timers; read into [`shardscope_model::SourceInfo::capture_mode`].
pub const CAPTURE_MODE_COMM_ONLY: &str = "comm-only";

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
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
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
    read_in_shares(path, ROWS_PER_JOB, Extent::Whole)
}

/// [`read`], of the tables `extent` asks for (see [`Extent::GpuWork`]).
pub fn read_extent(path: &Path, extent: Extent) -> Result<Trace, Error> {
    read_in_shares(path, ROWS_PER_JOB, extent)
}

/// [`read`], reading the big tables in shares of `rows_per_job` rowids.
fn read_in_shares(path: &Path, rows_per_job: i64, extent: Extent) -> Result<Trace, Error> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_dir() {
        return Err(Error::format(path, "is a folder, not an SQLite file"));
    }
    if metadata.len() == 0 {
        return Err(Error::format(path, "file is empty"));
    }
    let conn = open_read_only(path)?;
    let tables = table_names(path, &conn)?;
    if !NSYS_TABLES.iter().any(|t| tables.contains(*t)) {
        return Err(Error::format(
            path,
            "SQLite database without Nsight Systems tables (no StringIds, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS)",
        ));
    }
    let db = Database { path, conn: &conn, tables: &tables, file_bytes: metadata.len() };

    let mut trace = Trace::default();
    trace.source.path = path.display().to_string();
    trace.source.format = SourceFormat::NsysSqlite;
    read_metadata(&db, &mut trace)?;
    let strings = read_string_ids(&db)?;
    let classes = {
        let ids = db.enum_ids("ENUM_NSYS_EVENT_CLASS")?;
        // The documented ids serve files without the enum table.
        let id = |name: &str, documented: i64| if ids.is_empty() { Some(documented) } else { ids.get(name).copied() };
        scan::ApiClasses {
            runtime: id("TRACE_PROCESS_EVENT_CUDA_RUNTIME", 0),
            driver: id("TRACE_PROCESS_EVENT_CUDA_DRIVER", 1),
        }
    };
    let nvtx_types = {
        let ids = db.enum_ids("ENUM_NSYS_EVENT_TYPE")?;
        // Event types are looked up by name; the documented ids serve files without the enum table.
        let ids_of = |names: &[(&str, i64)]| -> Vec<i64> {
            let id = |&(name, documented): &(&str, i64)| {
                if ids.is_empty() { Some(documented) } else { ids.get(name).copied() }
            };
            names.iter().filter_map(id).collect()
        };
        scan::NvtxTypes {
            push_pop: ids_of(&[("NvtxPushPopRange", 59), ("NvtxtPushPopRange", 70)]),
            start_end: ids_of(&[("NvtxStartEndRange", 60), ("NvtxtStartEndRange", 71)]),
            domain_create: ids_of(&[("NvtxDomainCreate", 75)]),
        }
    };

    // The event tables are decoded in parallel, the big ones in shares of rowids.
    let jobs = plan_jobs(&db, rows_per_job, extent);
    let (mut kernel_scans, mut api_scans, mut memops, mut range_shares) = (Vec::new(), Vec::new(), None, Vec::new());
    for output in run_jobs(&db, &jobs, &strings, classes, &nvtx_types, extent)? {
        match output {
            Output::Kernels(scan) => kernel_scans.push(scan),
            Output::ApiCalls(scan) => api_scans.push(scan),
            Output::MemOps(scan) => memops = Some(scan),
            Output::Ranges(share) => range_shares.push(share),
        }
    }
    let Some(memops) = memops else {
        return Err(Error::format(path, "internal error: a table reader gave no result"));
    };
    let range_scans = scan::name_domains(range_shares);

    // Small (one row per graph launch) and read whole, after the parallel jobs.
    let graphs = scan::graph_launches(&db, &strings)?;
    let gpus = read_gpus(&db, &mut trace)?;
    let locals: Vec<&scan::Local> = (kernel_scans.iter().map(|s| &s.local))
        .chain(api_scans.iter().map(|s| &s.local))
        .chain(range_scans.iter().map(|s| &s.local))
        .chain([&memops.local, &graphs.local])
        .collect();
    let (global_pids, listed_pids) = collect_processes(&db, &mut trace, &locals)?;
    collect_devices(&mut trace, gpus, &locals);
    // Sorted here the way Trace::finish sorts, so that its own sort only confirms the order.
    let kernel_ids = |k: &mut Kernel, map: &IdMap| {
        k.name = map.names[k.name.0 as usize];
        k.short_name = map.names[k.short_name.0 as usize];
        k.process = map.processes[k.process.0 as usize];
        k.device = map.devices[k.device.0 as usize];
    };
    trace.kernels = adopt(&mut trace, &global_pids, kernel_scans, kernel_ids, |k| (k.start_ns, k.end_ns));
    let api_ids = |a: &mut ApiCall, map: &IdMap| {
        a.name = map.names[a.name.0 as usize];
        a.process = map.processes[a.process.0 as usize];
    };
    trace.api_calls = adopt(&mut trace, &global_pids, api_scans, api_ids, |a| (a.start_ns, a.end_ns));
    let memop_ids = |m: &mut MemOp, map: &IdMap| {
        m.process = map.processes[m.process.0 as usize];
        m.device = map.devices[m.device.0 as usize];
    };
    trace.memops = adopt(&mut trace, &global_pids, vec![memops], memop_ids, |m| (m.start_ns, m.end_ns));
    let graph_ids = |g: &mut GraphLaunch, map: &IdMap| {
        g.process = map.processes[g.process.0 as usize];
        g.device = map.devices[g.device.0 as usize];
    };
    trace.graph_launches = adopt(&mut trace, &global_pids, vec![graphs], graph_ids, |g| (g.start_ns, g.end_ns));
    let range_ids = |r: &mut Range, map: &IdMap| {
        r.name = map.names[r.name.0 as usize];
        r.domain = map.names[r.domain.0 as usize];
        r.process = map.processes[r.process.0 as usize];
    };
    // Outer ranges first at equal start.
    let range_order = |r: &Range| (r.start_ns, std::cmp::Reverse(r.end_ns));
    trace.ranges = adopt(&mut trace, &global_pids, range_scans, range_ids, range_order);
    assign_device_owners(&mut trace);
    read_thread_names(&db, &strings, &global_pids, &mut trace)?;
    read_process_info(&db, &global_pids, &mut trace)?;
    read_capture_windows(&db, &global_pids, &listed_pids, &mut trace)?;
    read_capture_warnings(&db, &mut trace)?;
    if extent == Extent::Whole {
        nccl_tables::attach(&db, &mut trace)?;
        graph_nodes::attach(&db, &mut trace)?;
        memory::attach(&db, &mut trace)?;
    }
    trace.finish();
    Ok(trace)
}

/// Distinct capture warnings carried into the trace; more are counted together.
const MAX_CAPTURE_WARNINGS: usize = 1000;

/// The warnings `capture` met while recording and merging (`SHARDSCOPE_CAPTURE_WARNINGS`: what, count), carried
/// into the trace's own warnings (prefixed `capture:`) so that the report shows them.
fn read_capture_warnings(db: &Database<'_>, trace: &mut Trace) -> Result<(), Error> {
    let mut warnings: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut beyond = 0u64;
    db.each_row("SHARDSCOPE_CAPTURE_WARNINGS", &["what", "count"], |row| {
        let (Some(what), Some(count)) = (text(row, 0), int(row, 1).and_then(|c| u64::try_from(c).ok())) else {
            beyond += 1;
            return Ok(());
        };
        if warnings.len() < MAX_CAPTURE_WARNINGS || warnings.contains_key(&what) {
            let slot = warnings.entry(what).or_default();
            *slot = slot.saturating_add(count);
        } else {
            beyond = beyond.saturating_add(count.max(1));
        }
        Ok(())
    })?;
    for (what, count) in warnings {
        trace.warn_n(&format!("capture: {what}"), count);
    }
    trace.warn_n("capture: further warnings, or rows of its warnings table without a text or a count", beyond);
    Ok(())
}

/// One open export: its connection and the tables it has.
pub(super) struct Database<'a> {
    path: &'a Path,
    conn: &'a Connection,
    tables: &'a HashSet<String>,
    /// The file's size: it bounds how many rows the file can hold.
    file_bytes: u64,
}

/// Bytes an SQLite table row takes at least (cell pointer, payload length, rowid, record
/// header); used only to bound capacity hints and shares.
const MIN_ROW_BYTES: u64 = 4;

/// The most rows a file of `file_bytes` can hold.
fn max_rows(file_bytes: u64) -> u64 {
    file_bytes / MIN_ROW_BYTES
}

impl Database<'_> {
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
    fn select(&self, table: &str, wanted: &[&str], rowids: scan::RowIds) -> Result<String, Error> {
        let columns = self.columns(table)?;
        let list: Vec<String> =
            wanted.iter().map(|c| if columns.contains(*c) { format!("\"{c}\"") } else { "NULL".into() }).collect();
        let share = match rowids {
            Some((first, last)) => format!(" WHERE rowid BETWEEN {first} AND {last}"),
            None => String::new(),
        };
        Ok(format!("SELECT {} FROM \"{table}\"{share}", list.join(", ")))
    }

    /// A capacity hint for a table or share: its rowid span (cheap, unlike `count(*)`), but
    /// never more rows than the file has room for. Rowids are the file's to choose: one row at
    /// rowid 2^62 must not make us reserve memory for 2^62 rows.
    fn row_hint(&self, table: &str, rowids: scan::RowIds) -> usize {
        let span = match rowids {
            Some((first, last)) => last.saturating_sub(first).saturating_add(1),
            None => self
                .conn
                .query_row(&format!("SELECT max(rowid) FROM \"{table}\""), [], |row| Ok(int(row, 0)))
                .ok()
                .flatten()
                .unwrap_or(0),
        };
        (span.max(0) as u64).min(max_rows(self.file_bytes)) as usize
    }

    /// Every row of `table` (columns as [`Database::select`] picks them), one call per row.
    fn each_row(
        &self,
        table: &str,
        wanted: &[&str],
        each: impl FnMut(&Row<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.each_row_in(table, wanted, None, each)
    }

    /// Like [`Database::each_row`], for the rows in `rowids` only.
    fn each_row_in(
        &self,
        table: &str,
        wanted: &[&str],
        rowids: scan::RowIds,
        mut each: impl FnMut(&Row<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if !self.has(table) {
            return Ok(());
        }
        let mut stmt = self.conn.prepare(&self.select(table, wanted, rowids)?).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            each(row)?;
        }
        Ok(())
    }

    /// The rows of an `(id, name, label)` enum table as name → id; empty when the table is missing.
    fn enum_ids(&self, table: &str) -> Result<HashMap<String, i64>, Error> {
        let mut ids = HashMap::new();
        self.each_row(table, &["id", "name"], |row| {
            if let (Some(id), Some(name)) = (int(row, 0), text(row, 1)) {
                ids.insert(name, id);
            }
            Ok(())
        })?;
        Ok(ids)
    }
}

/// The file's ordinary tables: the only objects the reader queries.
///
/// Views, and virtual tables (whose module runs code), would run SQL the file's author wrote
/// (a recursive view can grow without bound): one named like a table the reader reads is an
/// error, since the data it stands for cannot be read safely; others are ignored.
fn table_names(path: &Path, conn: &Connection) -> Result<HashSet<String>, Error> {
    let mut tables = HashSet::new();
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')")
        .map_err(|e| db_error(path, e))?;
    let mut rows = stmt.query([]).map_err(|e| db_error(path, e))?;
    while let Some(row) = rows.next().map_err(|e| db_error(path, e))? {
        let (Some(kind), Some(name)) = (text(row, 0), text(row, 1)) else { continue };
        let is_virtual = text(row, 2).is_some_and(|sql| {
            sql.trim_start().get(..20).is_some_and(|head| head.eq_ignore_ascii_case("CREATE VIRTUAL TABLE"))
        });
        if kind == "table" && !is_virtual {
            tables.insert(name);
        } else if is_read_table(&name) {
            let what = if is_virtual { "a virtual table" } else { "a view" };
            return Err(Error::format(
                path,
                format!("'{}' is {what}, not a table: refusing to run SQL that the file supplies", name.escape_debug()),
            ));
        }
    }
    Ok(tables)
}

/// Whether the reader reads a table of this name (by name or by family).
fn is_read_table(name: &str) -> bool {
    const FAMILIES: &[&str] = &["CUPTI_", "NVTX_", "TARGET_INFO_", "ENUM_", "META_DATA_", "SHARDSCOPE_"];
    NSYS_TABLES.contains(&name)
        || ["PROCESSES", "ThreadNames"].contains(&name)
        || FAMILIES.iter().any(|family| name.starts_with(family))
}

/// Schema version, producer and session start; refuses major versions other than 3.
fn read_metadata(db: &Database<'_>, trace: &mut Trace) -> Result<(), Error> {
    let mut meta = HashMap::new();
    db.each_row("META_DATA_EXPORT", &["name", "value"], |row| {
        if let (Some(name), Some(value)) = (text(row, 0), text(row, 1)) {
            meta.insert(name, value);
        }
        Ok(())
    })?;
    if let Some(version) = meta.get("EXPORT_SCHEMA_VERSION") {
        let major = version.split('.').next().and_then(|m| m.trim().parse::<u32>().ok());
        if major != Some(SUPPORTED_SCHEMA_MAJOR) {
            return Err(Error::UnsupportedVersion {
                path: db.path.display().to_string(),
                version: version.clone(),
                cause: format!("this build reads export schema {SUPPORTED_SCHEMA_MAJOR}.x"),
            });
        }
        trace.source.schema_version = Some(version.clone());
    }
    trace.source.producer = match (meta.get("EXPORT_PRODUCT_NAME"), meta.get("EXPORT_PRODUCT_VERSION")) {
        (Some(name), Some(version)) => Some(format!("{name} {version}")),
        (Some(name), None) => Some(name.clone()),
        _ => None,
    };
    db.each_row(CAPTURE_META_TABLE, &["name", "value"], |row| {
        match text(row, 0).as_deref() {
            Some("captureMode") => trace.source.capture_mode = text(row, 1),
            Some("ncclKernelSample") => trace.source.nccl_kernel_sample = text(row, 1),
            _ => {}
        }
        Ok(())
    })?;
    db.each_row("TARGET_INFO_SESSION_START_TIME", &["utcEpochNs"], |row| {
        trace.clock_offset_ns = trace.clock_offset_ns.or(int(row, 0));
        Ok(())
    })
}

fn read_string_ids(db: &Database<'_>) -> Result<StringTable, Error> {
    let mut strings = Vec::new();
    db.each_row("StringIds", &["id", "value"], |row| {
        if let (Some(id), Some(value)) = (int(row, 0), text(row, 1)) {
            strings.push((id, value.into_boxed_str()));
        }
        Ok(())
    })?;
    Ok(StringTable::new(strings))
}

/// GPUs from `TARGET_INFO_GPU`, or from `TARGET_INFO_CUDA_GPU` (keyed by `deviceId`) in old exports.
fn read_gpus(db: &Database<'_>, trace: &mut Trace) -> Result<Vec<Device>, Error> {
    let (table, id_column) =
        if db.has("TARGET_INFO_GPU") { ("TARGET_INFO_GPU", "id") } else { ("TARGET_INFO_CUDA_GPU", "deviceId") };
    let wanted = [id_column, "name", "busLocation", "totalMemory", "memoryBandwidth", "clockRate", "smCount"];
    let mut gpus = Vec::new();
    db.each_row(table, &wanted, |row| {
        let Some(ordinal) = int(row, 0) else {
            trace.warn("GPU row without a device id");
            return Ok(());
        };
        let positive = |v: Option<i64>| v.filter(|&v| v > 0);
        gpus.push(Device {
            ordinal: ordinal as u32,
            process: None,
            name: text(row, 1).unwrap_or_default(),
            bus_location: text(row, 2).filter(|s| !s.is_empty()),
            memory_bytes: positive(int(row, 3)).map(|v| v as u64),
            memory_bandwidth_bytes_per_s: positive(int(row, 4)).map(|v| v as u64),
            // nsys stores the SM clock in Hz.
            clock_rate_khz: positive(int(row, 5)).map(|hz| (hz / 1000) as u32),
            sm_count: positive(int(row, 6)).map(|v| v as u32),
        });
        Ok(())
    })?;
    Ok(gpus)
}

/// The trace's processes: every `globalPid` an event names, sorted, named from `PROCESSES`.
/// Returns the sorted `globalPid`s (a process's index is its position), and every `globalPid` `PROCESSES` lists, sorted.
fn collect_processes(
    db: &Database<'_>,
    trace: &mut Trace,
    locals: &[&scan::Local],
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let mut global_pids: Vec<u64> = locals.iter().flat_map(|l| l.processes.iter().copied()).collect();
    global_pids.sort_unstable();
    global_pids.dedup();
    let mut names: HashMap<u64, (u32, String)> = HashMap::new();
    let mut listed: Vec<u64> = Vec::new();
    db.each_row("PROCESSES", &["globalPid", "pid", "name"], |row| {
        listed.extend(int(row, 0).map(|g| g as u64));
        if let Some(global_pid) = int(row, 0).map(|g| g as u64)
            && global_pids.binary_search(&global_pid).is_ok()
        {
            let pid = int(row, 1).map_or_else(|| pid_of(global_pid), |p| p as u32);
            names.insert(global_pid, (pid, text(row, 2).unwrap_or_default()));
        }
        Ok(())
    })?;
    trace.processes = global_pids
        .iter()
        .map(|&global_pid| {
            let (pid, name) = names.remove(&global_pid).unwrap_or_else(|| (pid_of(global_pid), String::new()));
            Process { pid, global_pid, name, ..Process::default() }
        })
        .collect();
    listed.sort_unstable();
    Ok((global_pids, listed))
}

/// The trace's GPUs, sorted by ordinal: those the GPU table lists and those events name.
fn collect_devices(trace: &mut Trace, gpus: Vec<Device>, locals: &[&scan::Local]) {
    let mut devices: BTreeMap<u32, Device> = BTreeMap::new();
    for gpu in gpus {
        devices.entry(gpu.ordinal).or_insert(gpu);
    }
    for &ordinal in locals.iter().flat_map(|l| l.devices.iter()) {
        let ordinal = ordinal as u32;
        devices.entry(ordinal).or_insert_with(|| Device { ordinal, ..Device::default() });
    }
    trace.devices = devices.into_values().collect();
}

/// How one scanner's local ids translate into the trace's.
struct IdMap {
    names: Vec<NameId>,
    processes: Vec<ProcessIdx>,
    devices: Vec<DeviceIdx>,
}

/// Takes the rows of scans of one table into the trace: interns their names, counts their
/// warnings, maps their local ids (in parallel, one thread per group of scans) and joins the
/// scans, each sorted by `order`, into one list sorted by `order` (see [`join::join_sorted`]).
fn adopt<T: Send, K: Ord>(
    trace: &mut Trace,
    global_pids: &[u64],
    scans: Vec<scan::Scan<T>>,
    remap: impl Fn(&mut T, &IdMap) + Sync,
    order: impl Fn(&T) -> K + Sync,
) -> Vec<T> {
    let mut parts: Vec<(Vec<T>, IdMap)> = Vec::with_capacity(scans.len());
    // The shares' warnings summed before they are counted, so that the trace's warnings come in the same order
    // however the table was shared out (a warning first seen in a later share would otherwise come first).
    let mut warnings: Vec<(&'static str, u64)> = Vec::new();
    for (what, count) in scans.iter().flat_map(|scan| scan.warnings.iter()) {
        match warnings.iter_mut().find(|(seen, _)| seen == what) {
            Some((_, total)) => *total = total.saturating_add(*count),
            None => warnings.push((what, *count)),
        }
    }
    for (what, count) in warnings {
        trace.warn_n(what, count);
    }
    // Each share's own names first, in share order, then the names added after the rows were read: the order of
    // names a whole-table read gives.
    let mut names: Vec<Vec<NameId>> = (scans.iter())
        .map(|scan| scan.local.names.iter().take(scan.late_names_from).map(|(_, s)| trace.names.intern(s)).collect())
        .collect();
    for (scan, names) in scans.iter().zip(&mut names) {
        names.extend(scan.local.names.iter().skip(scan.late_names_from).map(|(_, s)| trace.names.intern(s)));
    }
    for (scan, names) in scans.into_iter().zip(names) {
        let map = IdMap {
            names,
            processes: (scan.local.processes.iter())
                .map(|g| ProcessIdx(global_pids.binary_search(g).unwrap_or(0) as u32))
                .collect(),
            devices: (scan.local.devices.iter())
                .map(|&o| DeviceIdx(trace.devices.binary_search_by_key(&(o as u32), |d| d.ordinal).unwrap_or(0) as u32))
                .collect(),
        };
        parts.push((scan.rows, map));
    }
    // Each share's rows on a thread of their own, as far as threads go.
    shardscope_model::parallel::for_each_mut(&mut parts, 1, |(rows, map)| {
        rows.iter_mut().for_each(|row| remap(row, map))
    });
    join::join_sorted(parts.into_iter().map(|(rows, _)| rows).collect(), order)
}

/// A device belongs to a process when exactly one process launched kernels on it.
fn assign_device_owners(trace: &mut Trace) {
    /// Per device: the one launching process seen, or `Err` once a second one shows up.
    type Owners = Vec<Option<Result<ProcessIdx, ()>>>;
    fn meet(owner: &mut Option<Result<ProcessIdx, ()>>, seen: Option<Result<ProcessIdx, ()>>) {
        *owner = match (*owner, seen) {
            (None, seen) => seen,
            (Some(Ok(p)), Some(Ok(q))) if p != q => Some(Err(())),
            (Some(Err(())), _) | (_, Some(Err(()))) => Some(Err(())),
            (kept, _) => kept,
        };
    }
    let devices = trace.devices.len();
    // A chunk of kernels per thread (ten million kernels on one thread were a tenth of a second), then merged.
    let by_chunk =
        shardscope_model::parallel::map_chunks(&trace.kernels, shardscope_model::parallel::MIN_CHUNK, |_, part| {
            let mut owners: Owners = vec![None; devices];
            for kernel in part {
                if let Some(owner) = owners.get_mut(kernel.device.0 as usize) {
                    meet(owner, Some(Ok(kernel.process)));
                }
            }
            owners
        });
    let mut owners: Owners = vec![None; devices];
    for chunk in by_chunk {
        for (owner, seen) in owners.iter_mut().zip(chunk) {
            meet(owner, seen);
        }
    }
    for (device, owner) in trace.devices.iter_mut().zip(owners) {
        device.process = owner.and_then(Result::ok);
    }
}

/// Names of the threads of the trace's processes.
fn read_thread_names(
    db: &Database<'_>,
    strings: &StringTable,
    global_pids: &[u64],
    trace: &mut Trace,
) -> Result<(), Error> {
    db.each_row("ThreadNames", &["nameId", "globalTid"], |row| {
        let (Some(name_id), Some(global_tid)) = (int(row, 0), int(row, 1)) else { return Ok(()) };
        let global_tid = global_tid as u64;
        if let Ok(process) = global_pids.binary_search(&global_pid_of(global_tid))
            && let Some(name) = strings.text(name_id)
        {
            let process = ProcessIdx(process as u32);
            trace.threads.push(ThreadName { process, tid: tid_of(global_tid), name: name.to_string() });
        }
        Ok(())
    })?;
    trace.threads.sort_by_key(|t| (t.process, t.tid));
    Ok(())
}

/// Rank, world size and host, which files written by shardscope keep in a table of their own.
fn read_process_info(db: &Database<'_>, global_pids: &[u64], trace: &mut Trace) -> Result<(), Error> {
    db.each_row(schema::PROCESS_INFO_TABLE, &["globalPid", "rank", "worldSize", "host"], |row| {
        if let Some(global_pid) = int(row, 0)
            && let Ok(index) = global_pids.binary_search(&(global_pid as u64))
        {
            let process = &mut trace.processes[index];
            process.rank = int(row, 1).map(|r| r as u32);
            process.world_size = int(row, 2).map(|w| w as u32);
            process.host = text(row, 3);
        }
        Ok(())
    })
}

/// The capture windows of a capture taken in windows. A row of a process the file lists but that recorded no
/// event (a launcher such as `torch.distributed.run`, which loads the recorder and launches nothing) is dropped
/// without a warning: it holds nothing to analyse. A row of a process the file does not list, and a row with an
/// unknown trigger or an end before its start, are refused, each counted in a warning.
fn read_capture_windows(
    db: &Database<'_>,
    global_pids: &[u64],
    listed: &[u64],
    trace: &mut Trace,
) -> Result<(), Error> {
    let (mut unknown_process, mut malformed) = (0u64, 0u64);
    let columns = ["globalPid", "start", "end", "startTrigger", "endTrigger"];
    db.each_row(schema::CAPTURE_WINDOWS_TABLE, &columns, |row| {
        let global_pid = int(row, 0).map(|pid| pid as u64);
        let Some(index) = global_pid.and_then(|pid| global_pids.binary_search(&pid).ok()) else {
            if global_pid.is_none_or(|pid| listed.binary_search(&pid).is_err()) {
                unknown_process += 1;
            }
            return Ok(());
        };
        let trigger = |i| text(row, i).as_deref().and_then(WindowTrigger::from_name);
        match (int(row, 1), int(row, 2), trigger(3), trigger(4)) {
            (Some(start_ns), Some(end_ns), Some(start_trigger), Some(end_trigger)) if end_ns >= start_ns => {
                trace.capture_windows.push(CaptureWindow {
                    process: ProcessIdx(index as u32),
                    start_ns,
                    end_ns,
                    start_trigger,
                    end_trigger,
                });
            }
            _ => malformed += 1,
        }
        Ok(())
    })?;
    trace.warn_n("capture window of a process the file does not list (skipped)", unknown_process);
    trace.warn_n("capture window with an unknown trigger or an end before its start (skipped)", malformed);
    Ok(())
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
    // The file is input, not code: no schema-defined functions or virtual tables run with our
    // rights, no write of any kind, and no schema the defensive mode refuses.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true).map_err(|e| db_error(path, e))?;
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)
        .map_err(|e| db_error(path, e))?;
    conn.pragma_update(None, "query_only", true).map_err(|e| db_error(path, e))?;
    // Memory-mapping spares a copy per page; a large page cache helps the few re-read pages.
    conn.execute_batch("PRAGMA mmap_size = 2147418112; PRAGMA cache_size = -16384; PRAGMA temp_store = MEMORY;")
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
    fn a_device_belongs_to_its_one_launching_process_over_many_chunks() {
        let mut trace = Trace::default();
        let (p0, p1) = (ProcessIdx(0), ProcessIdx(1));
        let devices = 4;
        trace.devices =
            (0..devices).map(|ordinal| shardscope_model::Device { ordinal, ..Default::default() }).collect();
        // Device 0: process 0 only; device 1: process 1 only; device 2: process 0, then one kernel of process 1 in a
        // late chunk; device 3: no kernel.
        let n = 4 * shardscope_model::parallel::MIN_CHUNK + 2;
        trace.kernels = (0..n)
            .map(|i| {
                let device = (i % 3) as u32;
                let process = if device == 1 || (device == 2 && i == n - 1) { p1 } else { p0 };
                Kernel { device: DeviceIdx(device), process, ..Kernel::default() }
            })
            .collect();
        assert_eq!(trace.kernels[n - 1].device, DeviceIdx(2), "the late kernel is on device 2");
        assign_device_owners(&mut trace);
        let owners: Vec<Option<ProcessIdx>> = trace.devices.iter().map(|d| d.process).collect();
        assert_eq!(owners, vec![Some(p0), Some(p1), None, None]);
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
    #[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
    fn reading_in_shares_gives_the_same_trace() {
        // Built with `cfg(shared_traces)` only where `../shared/traces` is (trace-io/build.rs); ignored elsewhere.
        let Some(traces) = option_env!("SHARDSCOPE_SHARED_TRACES") else { panic!("../shared/traces") };
        let file = Path::new(traces).join("nsys/mfu_2gpu_before.sqlite");
        let whole = read(&file).unwrap();
        // 4010 kernels and 7466 API calls: at least 5 and 8 shares of about 1000 rowids.
        let shared = read_in_shares(&file, 1000, Extent::Whole).unwrap();
        type KernelRow = (i64, i64, String, u32, u32, u32, Option<u32>);
        let kernels = |t: &Trace| -> Vec<KernelRow> {
            let rows = t.kernels.iter();
            rows.map(|k| {
                (k.start_ns, k.end_ns, t.names.get(k.name).into(), k.process.0, k.device.0, k.correlation_id, k.launch)
            })
            .collect()
        };
        let api_calls = |t: &Trace| -> Vec<(i64, i64, String, u32, u32)> {
            let rows = t.api_calls.iter();
            rows.map(|a| (a.start_ns, a.end_ns, t.names.get(a.name).into(), a.process.0, a.correlation_id)).collect()
        };
        assert_eq!(kernels(&whole).len(), 4010);
        assert_eq!(kernels(&whole), kernels(&shared));
        assert_eq!(api_calls(&whole).len(), 7466);
        assert_eq!(api_calls(&whole), api_calls(&shared));
        assert_eq!(whole.warnings, shared.warnings);
    }

    /// A copy of the shared `nsys/mfu_2gpu_before.sqlite` in `dir`, open to be changed.
    fn copy_of_shared_mfu_trace(dir: &Path) -> (std::path::PathBuf, rusqlite::Connection) {
        let Some(traces) = option_env!("SHARDSCOPE_SHARED_TRACES") else { panic!("../shared/traces") };
        let file = dir.join("changed.sqlite");
        std::fs::copy(Path::new(traces).join("nsys/mfu_2gpu_before.sqlite"), &file).unwrap();
        let conn = rusqlite::Connection::open(&file).unwrap();
        (file, conn)
    }

    /// The two integers of the first row of `sql`.
    fn two_integers(conn: &rusqlite::Connection, sql: &str) -> (i64, i64) {
        conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?))).unwrap()
    }

    #[test]
    #[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
    fn warnings_of_a_table_read_in_shares_come_in_the_order_of_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let (file, conn) = copy_of_shared_mfu_trace(dir.path());
        // A kernel whose end is not a number late in the table (the column is NOT NULL) and one with a name
        // missing from StringIds early: in shares, the second warning type is seen first.
        let (first, last) = two_integers(&conn, "SELECT min(rowid), max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL");
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 'none' WHERE rowid = ?1", [last - 3]).unwrap();
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = -77 WHERE rowid = ?1", [first + 2])
            .unwrap();
        drop(conn);
        let whole = read(&file).unwrap();
        let shared = read_in_shares(&file, 1000, Extent::Whole).unwrap();
        let kernel_warnings = |t: &Trace| -> Vec<String> {
            t.warnings
                .iter()
                .filter(|w| w.what.starts_with("kernel"))
                .map(|w| format!("{} {}", w.what, w.count))
                .collect()
        };
        assert_eq!(kernel_warnings(&whole).len(), 2, "{:?}", whole.warnings);
        assert_eq!(kernel_warnings(&shared), kernel_warnings(&whole));
        assert_eq!(shared.warnings, whole.warnings);
    }

    #[test]
    #[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
    fn nvtx_ranges_read_in_shares_name_their_domains_and_names_as_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let (file, conn) = copy_of_shared_mfu_trace(dir.path());
        // 19,118 ranges, 462 of them in domain 1 with no create row. Added: domain 1's create row at the end of
        // the table (named in a later share than its ranges), and early ranges of domain 9 on another thread of
        // the same process, whose create row is missing (named by its id).
        let (tid, start) = two_integers(&conn, "SELECT globalTid, start FROM NVTX_EVENTS WHERE domainId = 1 LIMIT 1");
        conn.execute(
            "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?1, 75, 'comm', ?2, 1)",
            [start, tid],
        )
        .unwrap();
        for k in 0..3 {
            conn.execute("UPDATE NVTX_EVENTS SET domainId = 9, globalTid = ?1 WHERE rowid = ?2", [tid + 1, 10 + k])
                .unwrap();
        }
        drop(conn);
        let whole = read(&file).unwrap();
        let shared = read_in_shares(&file, 1000, Extent::Whole).unwrap();
        type RangeRow = (i64, i64, String, String, u32, u32);
        let ranges = |t: &Trace| -> Vec<RangeRow> {
            let rows = t.ranges.iter();
            rows.map(|r| {
                (r.start_ns, r.end_ns, t.names.get(r.name).into(), t.names.get(r.domain).into(), r.process.0, r.tid)
            })
            .collect()
        };
        let names = |t: &Trace| -> Vec<String> { t.names.iter().map(|(_, s)| s.to_string()).collect() };
        assert_eq!(ranges(&whole).len(), 19118);
        assert_eq!(ranges(&whole).iter().filter(|r| r.3 == "comm").count(), 462);
        assert_eq!(ranges(&whole).iter().filter(|r| r.3 == "domain 9").count(), 3);
        assert_eq!(ranges(&shared), ranges(&whole));
        assert_eq!(names(&shared), names(&whole));
        assert_eq!(shared.warnings, whole.warnings);
    }

    #[test]
    fn uri_escaping_keeps_plain_paths_and_escapes_the_rest() {
        assert_eq!(uri_escape(Path::new("/tmp/a_b-c.sqlite")), "/tmp/a_b-c.sqlite");
        assert_eq!(uri_escape(Path::new("/tmp/a b?#%.sqlite")), "/tmp/a%20b%3F%23%25.sqlite");
    }
}
