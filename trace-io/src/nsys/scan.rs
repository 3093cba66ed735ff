//! Readers of the big event tables, each able to run on its own thread and connection.
//!
//! A scanner fills its rows with ids local to it (names in its own [`Names`], processes and
//! GPUs numbered in order of appearance, see [`Local`]) and sorts them the way
//! [`Trace::finish`](shardscope_model::Trace::finish) will; `read` then maps the local ids to
//! the trace's in one pass. That lets the kernel, copy, API and NVTX tables be decoded in
//! parallel, which is where the time of a large read goes.

use std::collections::HashMap;

use rusqlite::Row;
use rusqlite::types::ValueRef;
use shardscope_model::{
    ApiCall, ApiKind, CopyKind, DeviceIdx, GraphLaunch, Kernel, MemOp, MemoryKind, NameId, Names, ProcessIdx, Range,
    RangeKind,
};

use super::strings::StringTable;
use super::{Database, api_kind_from_name, global_pid_of, int, strip_api_version, tid_of};
use crate::{Error, Extent};

/// Marks a string slot that has not been interned yet.
const NOT_INTERNED: u32 = u32::MAX;
/// GPU ordinals below this are looked up by index.
const SMALL_ORDINALS: i64 = 1024;

/// Names, processes and GPUs as one scanner numbered them.
pub(super) struct Local {
    /// Strings this scanner used.
    pub(super) names: Names,
    /// Per `StringIds` slot: its id in `names`, or [`NOT_INTERNED`].
    slot_names: Vec<u32>,
    /// Local process index → `globalPid`.
    pub(super) processes: Vec<u64>,
    process_index: HashMap<u64, ProcessIdx>,
    last_process: Option<(u64, ProcessIdx)>,
    /// Local device index → ordinal (`deviceId`).
    pub(super) devices: Vec<i64>,
    small_devices: Vec<Option<DeviceIdx>>,
    other_devices: HashMap<i64, DeviceIdx>,
}

impl Local {
    fn new(strings: &StringTable) -> Local {
        Local {
            names: Names::default(),
            slot_names: vec![NOT_INTERNED; strings.len()],
            processes: Vec::new(),
            process_index: HashMap::new(),
            last_process: None,
            devices: Vec::new(),
            small_devices: Vec::new(),
            other_devices: HashMap::new(),
        }
    }

    /// The local name of an nsys string id, interned on first use.
    #[inline]
    fn string(&mut self, strings: &StringTable, id: i64) -> Option<NameId> {
        let slot = strings.slot(id)?;
        let cached = self.slot_names[slot];
        if cached != NOT_INTERNED {
            return Some(NameId(cached));
        }
        let name = self.names.intern(strings.value(slot));
        self.slot_names[slot] = name.0;
        Some(name)
    }

    /// The local index of a process; events of one process come in runs, hence the cache.
    #[inline]
    fn process(&mut self, global_pid: u64) -> ProcessIdx {
        if let Some((last, index)) = self.last_process
            && last == global_pid
        {
            return index;
        }
        let next = ProcessIdx(self.processes.len() as u32);
        let index = *self.process_index.entry(global_pid).or_insert(next);
        if index == next {
            self.processes.push(global_pid);
        }
        self.last_process = Some((global_pid, index));
        index
    }

    /// The local index of a GPU.
    #[inline]
    fn device(&mut self, ordinal: i64) -> DeviceIdx {
        if (0..SMALL_ORDINALS).contains(&ordinal) {
            let slot = ordinal as usize;
            if let Some(Some(index)) = self.small_devices.get(slot) {
                return *index;
            }
            if self.small_devices.len() <= slot {
                self.small_devices.resize(slot + 1, None);
            }
            let index = DeviceIdx(self.devices.len() as u32);
            self.devices.push(ordinal);
            self.small_devices[slot] = Some(index);
            return index;
        }
        let next = DeviceIdx(self.devices.len() as u32);
        let index = *self.other_devices.entry(ordinal).or_insert(next);
        if index == next {
            self.devices.push(ordinal);
        }
        index
    }
}

/// The rows of one or two tables in local ids, and what had to be skipped.
pub(super) struct Scan<T> {
    pub(super) rows: Vec<T>,
    pub(super) local: Local,
    /// `(what, how many)` for [`shardscope_model::Trace::warn_n`].
    pub(super) warnings: Vec<(&'static str, u64)>,
    /// Names from this index on were added after the rows were read (an NVTX share's domain names): the trace
    /// takes them after every share's own, as a whole-table read would have found them.
    pub(super) late_names_from: usize,
}

impl<T> Scan<T> {
    pub(super) fn new(strings: &StringTable) -> Scan<T> {
        Scan { rows: Vec::new(), local: Local::new(strings), warnings: Vec::new(), late_names_from: usize::MAX }
    }
}

/// The kernel columns every extent reads: times, names, device and process.
const KERNEL_SUMMARY_COLUMNS: [&str; 6] = ["start", "end", "deviceId", "globalPid", "demangledName", "shortName"];

/// The kernel columns only [`Extent::Whole`] reads, after [`KERNEL_SUMMARY_COLUMNS`] in the `SELECT`.
const KERNEL_DETAIL_COLUMNS: [&str; 10] =
    ["streamId", "correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "graphId", "graphNodeId"];

/// An inclusive range of rowids: one share of a big table, so that several threads can read it.
pub(super) type RowIds = Option<(i64, i64)>;

/// `CUPTI_ACTIVITY_KIND_KERNEL`, all of it or the rows in `rowids`.
pub(super) fn kernels(
    db: &Database<'_>,
    strings: &StringTable,
    rowids: RowIds,
    extent: Extent,
) -> Result<Scan<Kernel>, Error> {
    const TABLE: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    let mut scan = Scan::new(strings);
    if !db.has(TABLE) {
        return Ok(scan);
    }
    // A summary of GPU work selects the summary columns only: SQLite then decodes less of each row, and the
    // details are left as a row without those columns would leave them.
    let details = extent == Extent::Whole;
    let mut columns = KERNEL_SUMMARY_COLUMNS.to_vec();
    if details {
        columns.extend(KERNEL_DETAIL_COLUMNS);
    }
    scan.rows.reserve(db.row_hint(TABLE, rowids));
    let (mut no_time, mut unknown_name) = (0u64, 0u64);
    let local = &mut scan.local;
    let rows = &mut scan.rows;
    db.each_row_in(TABLE, &columns, rowids, |row| {
        let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
            no_time += 1;
            return Ok(());
        };
        let name = match int(row, 4).and_then(|id| local.string(strings, id)) {
            Some(name) => name,
            None => {
                unknown_name += 1;
                NameId::EMPTY
            }
        };
        let short_name = int(row, 5).and_then(|id| local.string(strings, id)).unwrap_or(name);
        let mut kernel = Kernel {
            start_ns,
            end_ns,
            name,
            short_name,
            device: local.device(int(row, 2).unwrap_or(0)),
            process: local.process(int(row, 3).unwrap_or(0) as u64),
            stream: 0,
            correlation_id: 0,
            grid: [0; 3],
            block: [0; 3],
            launch: None,
            collective: None,
            graph_id: None,
            graph_node_id: None,
        };
        if details {
            read_kernel_details(row, &mut kernel);
        }
        rows.push(kernel);
        Ok(())
    })?;
    scan.rows.sort_by_key(|k| (k.start_ns, k.end_ns));
    scan.warnings = vec![
        ("kernel row without start or end (skipped)", no_time),
        ("kernel name id missing from StringIds (name left empty)", unknown_name),
    ];
    Ok(scan)
}

/// The columns of [`KERNEL_DETAIL_COLUMNS`], which follow the summary columns in the row.
fn read_kernel_details(row: &Row<'_>, kernel: &mut Kernel) {
    let at = KERNEL_SUMMARY_COLUMNS.len();
    let dim = |index: usize| int(row, at + index).unwrap_or(0) as u32;
    kernel.stream = dim(0);
    kernel.correlation_id = dim(1);
    kernel.grid = [dim(2), dim(3), dim(4)];
    kernel.block = [dim(5), dim(6), dim(7)];
    // 0 (or no column) outside a graph; node ids are 64-bit handles stored as signed integers.
    kernel.graph_id = int(row, at + 8).filter(|&id| id != 0).map(|id| id as u32);
    kernel.graph_node_id = int(row, at + 9).filter(|&id| id != 0).map(|id| id as u64);
}

/// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`: CUDA graphs recorded as whole executions (nsys' default
/// `--cuda-graph-trace=graph`). Rows whose start and end are both 0 (CUPTI could not time the graph) or missing
/// are skipped and counted.
pub(super) fn graph_launches(db: &Database<'_>, strings: &StringTable) -> Result<Scan<GraphLaunch>, Error> {
    const TABLE: &str = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
    let mut scan = Scan::new(strings);
    if !db.has(TABLE) {
        return Ok(scan);
    }
    let columns = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"];
    let mut untimed = 0u64;
    let local = &mut scan.local;
    let rows = &mut scan.rows;
    db.each_row(TABLE, &columns, |row| {
        let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
            untimed += 1;
            return Ok(());
        };
        if (start_ns == 0 && end_ns == 0) || end_ns < start_ns {
            untimed += 1;
            return Ok(());
        }
        rows.push(GraphLaunch {
            start_ns,
            end_ns,
            device: local.device(int(row, 2).unwrap_or(0)),
            process: local.process(int(row, 5).unwrap_or(0) as u64),
            stream: int(row, 3).unwrap_or(0) as u32,
            correlation_id: int(row, 4).unwrap_or(0) as u32,
            graph_id: int(row, 6).unwrap_or(0) as u32,
            launch: None,
        });
        Ok(())
    })?;
    scan.rows.sort_by_key(|g| (g.start_ns, g.end_ns));
    let recorded = scan.rows.len() as u64;
    scan.warnings = vec![
        ("CUDA graph execution without GPU start/end (skipped)", untimed),
        (
            "CUDA graph executions recorded whole, not per kernel (counted as busy time in category cuda_graph; \
             record with nsys --cuda-graph-trace=node for per-kernel figures)",
            recorded,
        ),
    ];
    Ok(scan)
}

/// `CUPTI_ACTIVITY_KIND_MEMCPY` and `CUPTI_ACTIVITY_KIND_MEMSET`.
pub(super) fn memops(db: &Database<'_>, strings: &StringTable) -> Result<Scan<MemOp>, Error> {
    let mut scan = Scan::new(strings);
    let (mut copies_without_time, mut sets_without_time) = (0u64, 0u64);
    for (table, is_copy) in [("CUPTI_ACTIVITY_KIND_MEMCPY", true), ("CUPTI_ACTIVITY_KIND_MEMSET", false)] {
        if !db.has(table) {
            continue;
        }
        let copy_columns: &[&str] =
            if is_copy { &["copyKind", "srcDeviceId", "dstDeviceId", "srcKind", "dstKind"] } else { &[] };
        let mut columns = vec!["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"];
        columns.extend_from_slice(copy_columns);
        scan.rows.reserve(db.row_hint(table, None));
        let local = &mut scan.local;
        let rows = &mut scan.rows;
        let no_time = if is_copy { &mut copies_without_time } else { &mut sets_without_time };
        db.each_row(table, &columns, |row| {
            let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
                *no_time += 1;
                return Ok(());
            };
            let (copy_kind, src_device, dst_device) = if is_copy {
                (
                    Some(CopyKind::from_cupti(int(row, 7).unwrap_or(0))),
                    int(row, 8).map(|d| d as u32),
                    int(row, 9).map(|d| d as u32),
                )
            } else {
                (None, None, None)
            };
            // `ENUM_CUDA_MEM_KIND` ids; NULL (captures before the model kept them, sets) stays unknown.
            let (src_memory, dst_memory) = if is_copy {
                (int(row, 10).map(MemoryKind::from_nsys), int(row, 11).map(MemoryKind::from_nsys))
            } else {
                (None, None)
            };
            rows.push(MemOp {
                start_ns,
                end_ns,
                copy_kind,
                bytes: int(row, 6).unwrap_or(0).max(0) as u64,
                device: local.device(int(row, 2).unwrap_or(0)),
                process: local.process(int(row, 5).unwrap_or(0) as u64),
                stream: int(row, 3).unwrap_or(0) as u32,
                correlation_id: int(row, 4).unwrap_or(0) as u32,
                src_device,
                dst_device,
                launch: None,
                src_memory,
                dst_memory,
            });
            Ok(())
        })?;
    }
    scan.rows.sort_by_key(|m| (m.start_ns, m.end_ns));
    scan.warnings = vec![
        ("memcpy row without start or end (skipped)", copies_without_time),
        ("memset row without start or end (skipped)", sets_without_time),
    ];
    Ok(scan)
}

/// `eventClass` ids of CUDA runtime and driver calls, from `ENUM_NSYS_EVENT_CLASS`.
#[derive(Clone, Copy)]
pub(super) struct ApiClasses {
    pub(super) runtime: Option<i64>,
    pub(super) driver: Option<i64>,
}

/// `CUPTI_ACTIVITY_KIND_RUNTIME` (all of it or the rows in `rowids`): CUDA runtime and driver
/// calls, which newer exports keep in one table told apart by `eventClass`; the name decides
/// when the class says nothing.
pub(super) fn api_calls(
    db: &Database<'_>,
    strings: &StringTable,
    classes: ApiClasses,
    rowids: RowIds,
) -> Result<Scan<ApiCall>, Error> {
    const TABLE: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
    let mut scan = Scan::new(strings);
    if !db.has(TABLE) {
        return Ok(scan);
    }
    let columns = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"];
    scan.rows.reserve(db.row_hint(TABLE, rowids));
    // Per StringIds slot: the name without nsys' version suffix and the kind it suggests.
    let mut api_names: Vec<Option<(NameId, ApiKind)>> = vec![None; strings.len()];
    let (mut no_time, mut unknown_name) = (0u64, 0u64);
    let local = &mut scan.local;
    let rows = &mut scan.rows;
    db.each_row_in(TABLE, &columns, rowids, |row| {
        let (Some(start_ns), Some(end_ns)) = (int(row, 0), int(row, 1)) else {
            no_time += 1;
            return Ok(());
        };
        let (name, kind_by_name) = match int(row, 5).and_then(|id| strings.slot(id)) {
            Some(slot) => *api_names[slot].get_or_insert_with(|| {
                let stripped = strip_api_version(strings.value(slot));
                (local.names.intern(stripped), api_kind_from_name(stripped))
            }),
            None => {
                unknown_name += 1;
                (NameId::EMPTY, ApiKind::Runtime)
            }
        };
        let class = int(row, 2);
        let kind = if class.is_some() && class == classes.driver {
            ApiKind::Driver
        } else if class.is_some() && class == classes.runtime {
            ApiKind::Runtime
        } else {
            kind_by_name
        };
        let global_tid = int(row, 3).unwrap_or(0) as u64;
        rows.push(ApiCall {
            start_ns,
            end_ns,
            name,
            kind,
            process: local.process(global_pid_of(global_tid)),
            tid: tid_of(global_tid),
            correlation_id: int(row, 4).unwrap_or(0) as u32,
        });
        Ok(())
    })?;
    scan.rows.sort_by_key(|a| (a.start_ns, a.end_ns));
    scan.warnings = vec![
        ("CUDA API row without start or end (skipped)", no_time),
        ("CUDA API name id missing from StringIds (name left empty)", unknown_name),
    ];
    Ok(scan)
}

/// `ENUM_NSYS_EVENT_TYPE` ids of the NVTX rows that matter.
pub(super) struct NvtxTypes {
    pub(super) push_pop: Vec<i64>,
    pub(super) start_end: Vec<i64>,
    pub(super) domain_create: Vec<i64>,
}

/// One share of `NVTX_EVENTS` as read, before its ranges' domains are named (a domain's create row may lie in
/// another share): see [`name_domains`].
pub(super) struct RangeShare {
    /// The ranges, in row order, every one in the default domain for now.
    scan: Scan<Range>,
    /// The `NvtxDomainCreate` rows: (globalPid, domain id) and the name, in row order.
    created: Vec<((u64, i64), NameId)>,
    /// The ranges in another domain: their index in `scan.rows`, globalPid and domain id.
    in_domain: Vec<(usize, u64, i64)>,
}

/// `NVTX_EVENTS`, all of it or the rows in `rowids`: push/pop and start/end ranges and the domains created.
pub(super) fn ranges(
    db: &Database<'_>,
    strings: &StringTable,
    types: &NvtxTypes,
    rowids: RowIds,
) -> Result<RangeShare, Error> {
    const TABLE: &str = "NVTX_EVENTS";
    let mut share = RangeShare { scan: Scan::new(strings), created: Vec::new(), in_domain: Vec::new() };
    if !db.has(TABLE) {
        return Ok(share);
    }
    let columns = ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"];
    share.scan.rows.reserve(db.row_hint(TABLE, rowids));
    let RangeShare { scan, created, in_domain } = &mut share;
    let (mut unterminated, mut no_name) = (0u64, 0u64);
    let local = &mut scan.local;
    let rows = &mut scan.rows;
    // An NVTX row's message: inline `text` or a registered string (`textId`).
    let message = |local: &mut Local, row: &Row<'_>| match row.get_ref_unwrap(3) {
        ValueRef::Text(bytes) => Some(match std::str::from_utf8(bytes) {
            Ok(s) => local.names.intern(s),
            Err(_) => local.names.intern(&String::from_utf8_lossy(bytes)),
        }),
        _ => int(row, 4).and_then(|id| local.string(strings, id)),
    };
    db.each_row_in(TABLE, &columns, rowids, |row| {
        let Some(event_type) = int(row, 2) else { return Ok(()) };
        let global_tid = int(row, 5).unwrap_or(0) as u64;
        let kind = if types.push_pop.contains(&event_type) {
            RangeKind::PushPop
        } else if types.start_end.contains(&event_type) {
            RangeKind::StartEnd
        } else {
            if types.domain_create.contains(&event_type)
                && let Some(domain_id) = int(row, 6)
            {
                let name = message(local, row).unwrap_or(NameId::EMPTY);
                created.push(((global_pid_of(global_tid), domain_id), name));
            }
            return Ok(());
        };
        let Some(start_ns) = int(row, 0) else { return Ok(()) };
        let Some(end_ns) = int(row, 1) else {
            unterminated += 1;
            return Ok(());
        };
        let name = message(local, row).unwrap_or_else(|| {
            no_name += 1;
            NameId::EMPTY
        });
        if let Some(domain_id) = int(row, 6).filter(|&d| d != 0) {
            in_domain.push((rows.len(), global_pid_of(global_tid), domain_id));
        }
        rows.push(Range {
            start_ns,
            end_ns,
            name,
            domain: NameId::EMPTY,
            kind,
            process: local.process(global_pid_of(global_tid)),
            tid: tid_of(global_tid),
            device: None,
            stream: None,
            depth: 0,
        });
        Ok(())
    })?;
    share.scan.warnings =
        vec![("NVTX range without end (unterminated, skipped)", unterminated), ("NVTX range without text", no_name)];
    Ok(share)
}

/// Names the domains of the ranges of `shares` (consecutive shares of `NVTX_EVENTS`, in table order) from every
/// share's create rows, and sorts each share's ranges as `Trace::finish` orders them.
///
/// NVTX domain ids are handed out per process, so a domain is named by (globalPid, id); where a table has two
/// create rows for one, the later names it. A process whose own create row is missing borrows the name other
/// processes gave the same id, when they all agree; failing that the domain is called `domain ID` and counted. The
/// names a share did not meet in its own rows are added to it after them (`Scan::late_names_from`), which keeps the
/// trace's names in the order a whole-table read gives.
pub(super) fn name_domains(shares: Vec<RangeShare>) -> Vec<Scan<Range>> {
    let mut named: HashMap<(u64, i64), String> = HashMap::new();
    for share in &shares {
        for &(key, name) in &share.created {
            named.insert(key, share.scan.local.names.get(name).to_string());
        }
    }
    let mut name_by_id: HashMap<i64, Option<&str>> = HashMap::new();
    for (&(_, domain_id), name) in &named {
        name_by_id.entry(domain_id).and_modify(|n| *n = n.filter(|&n| n == name)).or_insert(Some(name));
    }
    // Each share on a thread of its own: its names are its own, and its domains are named once per (process,
    // domain id), not once per range (a million ranges in a domain were a tenth of a second on one thread). A job
    // is a share's ranges, those in another domain (`RangeShare::in_domain`) and the domain ids it found no name for.
    type Job = (Scan<Range>, Vec<(usize, u64, i64)>, Vec<i64>);
    let mut jobs: Vec<Job> = (shares.into_iter())
        .map(|RangeShare { mut scan, in_domain, .. }| {
            scan.late_names_from = scan.local.names.len();
            (scan, in_domain, Vec::new())
        })
        .collect();
    shardscope_model::parallel::for_each_mut(&mut jobs, 1, |(scan, in_domain, unnamed)| {
        let mut domain_of: HashMap<(u64, i64), NameId> = HashMap::new();
        for &(index, global_pid, domain_id) in in_domain.iter() {
            let domain = *domain_of.entry((global_pid, domain_id)).or_insert_with(|| {
                let known = named.get(&(global_pid, domain_id)).map(String::as_str);
                match known.or_else(|| name_by_id.get(&domain_id).copied().flatten()) {
                    Some(name) => scan.local.names.intern(name),
                    None => {
                        // The NvtxDomainCreate row lies outside the exported window: keep the ranges apart from the
                        // default domain under a name that says so.
                        unnamed.push(domain_id);
                        scan.local.names.intern(&format!("domain {domain_id}"))
                    }
                }
            });
            scan.rows[index].domain = domain;
        }
        // Outer ranges first at equal start, as Trace::finish orders them.
        scan.rows.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.end_ns)));
    });
    let mut unnamed_domains: Vec<i64> = jobs.iter().flat_map(|(_, _, unnamed)| unnamed.iter().copied()).collect();
    unnamed_domains.sort_unstable();
    unnamed_domains.dedup();
    let mut scans: Vec<Scan<Range>> = jobs.into_iter().map(|(scan, _, _)| scan).collect();
    // Counted over the whole table, on the first share (the trace sums the shares' warnings in the order they
    // list them, so every share lists it).
    for (index, scan) in scans.iter_mut().enumerate() {
        let unnamed = if index == 0 { unnamed_domains.len() as u64 } else { 0 };
        scan.warnings.push(("NVTX domain without NvtxDomainCreate row (named by its id)", unnamed));
    }
    scans
}
