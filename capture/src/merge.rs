//! Merging the spool files of every process of a job into one [`Trace`].
//!
//! Each process wrote its own spool (see `shardscope_spool::cupti`). Merging puts all of them
//! on one timeline (ns since the session start, nsys' convention), turns kernel names into the
//! demangled and short forms nsys shows, pairs NVTX start/end markers into ranges, maps each
//! process's CUDA device ordinals to GPUs by UUID, and applies the capture range the user
//! asked for. What the trace model has no field for (records only the capture file keeps, per-kernel
//! resource usage, per-process environment and losses) is returned beside it in
//! [`CaptureExtras`], index-aligned where noted, for the SQLite writer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use shardscope_model::{
    ApiCall, ApiKind, CaptureWindow, CopyKind, Device, DeviceIdx, GraphLaunch, GraphNodeOrigin, Kernel, MemOp,
    MemoryKind, Process, ProcessIdx, Range, RangeKind, Trace, WindowTrigger as ModelTrigger, kernel_names,
};
use shardscope_spool::config::WindowTrigger;
use shardscope_spool::cupti::{
    ApiRecord, ApiSelection, CaptureCost, DeviceRecord, GraphNodeRecord, GraphTraceRecord, KernelRecord, MarkerRecord,
    MemcpyRecord, MemsetRecord, ProcessInfo, SpoolRecord, WindowRecord,
};
use shardscope_spool::{SpoolContents, read_spool};

use crate::names::{self, Demangler};
use crate::side_records::{ProcessClock, SideRecords, TakenCounts};

/// One process's spool file, read.
#[derive(Debug)]
pub struct ProcessSpool {
    /// The file.
    pub path: PathBuf,
    /// Its records and what was cut off.
    pub contents: SpoolContents<SpoolRecord>,
    /// Bytes skipped between valid frames (damage in the middle of the file).
    pub damaged_bytes: u64,
}

impl ProcessSpool {
    /// The process header, present in every spool the library wrote.
    pub fn info(&self) -> Option<&ProcessInfo> {
        self.contents.records.iter().find_map(|r| if let SpoolRecord::Process(p) = r { Some(p) } else { None })
    }
}

/// The spools of a folder, and what in it was not read.
#[derive(Debug, Default)]
pub struct SpoolFolder {
    /// Every `*.spool` file, ordered by process start.
    pub spools: Vec<ProcessSpool>,
    /// One line per entry skipped because it is not a regular file (a pipe would block the read).
    pub skipped: Vec<String>,
}

/// Reads every `*.spool` file in `dir`, ordered by process start. A file that is not a spool
/// at all is an error; a cut-off tail is not (it is counted in the contents).
pub fn read_spool_dir(dir: &Path) -> anyhow::Result<Vec<ProcessSpool>> {
    Ok(read_spool_folder(dir)?.spools)
}

/// [`read_spool_dir`], also listing the entries that were skipped.
pub fn read_spool_folder(dir: &Path) -> anyhow::Result<SpoolFolder> {
    let mut folder = SpoolFolder::default();
    let entries = std::fs::read_dir(dir).with_context(|| format!("{}: cannot list spool folder", dir.display()))?;
    for entry in entries {
        let path = entry.with_context(|| format!("{}: cannot list spool folder", dir.display()))?.path();
        let is_spool = path.extension().is_some_and(|e| e == "spool");
        let is_nccl_spool = shardscope_spool::nccl::pid_from_file_name(&path).is_some();
        if !is_spool && !is_nccl_spool {
            continue;
        }
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            folder.skipped.push(format!("{}: not a regular file (skipped)", path.display()));
            continue;
        }
        if is_spool {
            folder.spools.push(read_process_spool(&path).with_context(|| format!("{}", path.display()))?);
        }
    }
    folder.spools.sort_by_key(|s| s.info().map(|i| (i.realtime_ns, i.pid)).unwrap_or((u64::MAX, 0)));
    folder.skipped.sort();
    Ok(folder)
}

/// Reads one spool file (see [`shardscope_spool::read_spool`]: frames after a damaged stretch
/// are read too, and the stretch measured).
fn read_process_spool(path: &Path) -> anyhow::Result<ProcessSpool> {
    let contents = read_spool::<SpoolRecord>(path)?;
    Ok(ProcessSpool { path: path.to_path_buf(), damaged_bytes: contents.damaged_bytes, contents })
}

/// Which part of the run to keep.
#[derive(Debug, Clone, Default)]
pub struct CaptureRange {
    /// Drop events that start earlier than this after the session start.
    pub delay_ns: Option<i64>,
    /// Keep at most this long after the delay.
    pub duration_ns: Option<i64>,
    /// Keep only what starts inside NVTX ranges with this message (any process).
    pub nvtx_range: Option<String>,
    /// Keep only what starts between `cudaProfilerStart` and `cudaProfilerStop` (per process).
    pub cuda_profiler_api: bool,
}

/// Settings for [`merge`].
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// Wall-clock start of the session, ns since the Unix epoch (the launcher's start); else
    /// the earliest process start.
    pub session_start_utc_ns: Option<i64>,
    /// The range to keep.
    pub range: CaptureRange,
    /// The processes switched recording on and off themselves (capture windows), so the range is not applied
    /// again here: what they recorded is what was inside.
    pub windows_live: bool,
    /// NVIDIA's `cu++filt`, for nsys-identical kernel names.
    pub cufilt: Option<PathBuf>,
}

/// Kernel fields that the trace model does not hold; `CaptureExtras::kernels[i]` belongs to
/// `Trace::kernels[i]` (the merge leaves the trace unsorted so the two stay aligned).
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelDetail {
    /// The spooled record (CUPTI clock times, ids, resources).
    pub record: KernelRecord,
    /// The mangled name as CUPTI reported it.
    pub mangled_name: shardscope_model::NameId,
}

/// What the merge knows about one process beyond [`Process`]; aligned with `Trace::processes`.
#[derive(Debug, Clone, Default)]
pub struct ProcessExtra {
    /// Parent process id.
    pub ppid: u32,
    /// Command line.
    pub command_line: Vec<String>,
    /// Rank on its host.
    pub local_rank: Option<u32>,
    /// Allow-listed environment.
    pub env: Vec<(String, String)>,
    /// `cuptiGetVersion` of the CUPTI it loaded.
    pub cupti_version: u32,
    /// Records CUPTI reported as dropped.
    pub records_dropped: u64,
    /// Buffer requests refused because the pool was full.
    pub buffers_refused: u64,
    /// Activity records the decoder could not use.
    pub records_undecoded: u64,
    /// True when the process flushed at exit (false after a crash or kill).
    pub clean_exit: bool,
    /// Bytes at the end of the spool that did not form a whole frame.
    pub truncated_bytes: u64,
    /// The spool file.
    pub spool: PathBuf,
    /// Which API calls the process recorded (absent in spools written before this was noted).
    pub api_selection: Option<ApiSelection>,
    /// What recording cost the process, as it measured at a clean exit.
    pub cost: Option<CaptureCost>,
    /// Records of each kind the process wrote, before the capture range is applied.
    pub record_counts: RecordCounts,
    /// The workload's own CUPTI clients (torch.profiler, …) that CUPTI refused because capture held the
    /// process's subscription.
    pub refused_cupti_clients: u32,
}

/// Records one process wrote, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordCounts {
    /// Kernels.
    pub kernels: u64,
    /// Copies and sets.
    pub memops: u64,
    /// Runtime and driver API calls.
    pub api_calls: u64,
    /// Of those, calls that launch a kernel or a graph.
    pub launch_calls: u64,
    /// NVTX markers (a range is two).
    pub markers: u64,
    /// Synchronisation records.
    pub syncs: u64,
}

/// GPU facts beyond [`Device`]; aligned with `Trace::devices`.
#[derive(Debug, Clone, Default)]
pub struct DeviceExtra {
    /// UUID bytes as CUPTI reports them.
    pub uuid: [u8; 16],
    /// Compute capability.
    pub compute_capability: (u32, u32),
    /// L2 cache, bytes.
    pub l2_cache_bytes: u32,
    /// Copy engines.
    pub copy_engines: u32,
}

/// Everything [`merge`] found that the trace model has no place for.
#[derive(Debug, Default)]
pub struct CaptureExtras {
    /// Per process.
    pub processes: Vec<ProcessExtra>,
    /// Per device.
    pub devices: Vec<DeviceExtra>,
    /// Per kernel, aligned with `Trace::kernels`.
    pub kernels: Vec<KernelDetail>,
    /// Per memory operation: (context id, CUPTI memory kinds source/destination or memset kind).
    pub memops: Vec<(u32, u8, u8)>,
    /// Records only the capture file keeps (synchronisations), see [`crate::side_records`].
    pub side: SideRecords,
    /// Which demangler named the kernels.
    pub demangler: Option<Demangler>,
    /// The session start, ns since the Unix epoch.
    pub session_start_utc_ns: i64,
}

/// Formats CUPTI's UUID bytes the way nsys writes them (`c422d2bb-0c9d-…`).
pub fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// Merges the spools into one trace (not yet [`Trace::finish`]ed, see [`KernelDetail`]).
///
/// Three steps, as an importer's tokenizer, parser and tracker would split them: the job-wide
/// state (session clock, per-host clock offsets, kernel names demangled in one batch, GPUs by
/// UUID) is set up first ([`JobMerge::new`]); then each process's records go, one record kind
/// per method, through a [`ProcessMerge`]; last, GPUs used by one process only are marked as
/// its own and the capture range is applied.
pub fn merge(spools: &[ProcessSpool], options: &MergeOptions) -> (Trace, CaptureExtras) {
    let infos: Vec<Option<&ProcessInfo>> = spools.iter().map(|s| s.info()).collect();
    // A spool whose header frame was damaged still holds the process's events: they are merged under a header
    // rebuilt from what is known, rather than dropping the whole rank.
    let rebuilt: Vec<Option<ProcessInfo>> =
        spools.iter().zip(&infos).map(|(spool, info)| info.is_none().then(|| rebuilt_info(spool, &infos))).collect();
    let mut job = JobMerge::new(spools, &infos, options);
    for ((spool, info), rebuilt) in spools.iter().zip(&infos).zip(&rebuilt) {
        let Some(info) = info.or(rebuilt.as_ref()) else { continue };
        if rebuilt.is_some() {
            job.trace.warn(
                "spool file without a readable process header (its events merged under a process rebuilt from the \
                 file name: no command line, rank or environment)",
            );
            // A host no other process reported: its CUPTI times are kept as they are.
            if !job.host_offsets.contains_key(info.hostname.as_str()) {
                job.trace.warn("spool file without a process header on a host of its own (times not on the calendar)");
                job.host_offsets.insert(info.hostname.as_str(), 0);
            }
        }
        ProcessMerge::new(&mut job, spool, info).merge_records(&mut job, &spool.contents.records);
    }
    job.finish(options)
}

/// The header of a spool that lost it: the pid and host from the file's name (`<host>.<pid>.spool`, as the
/// library names it), else the host the other processes share.
fn rebuilt_info(spool: &ProcessSpool, infos: &[Option<&ProcessInfo>]) -> ProcessInfo {
    let stem = spool.path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".spool")).unwrap_or("");
    let from_name = stem.rsplit_once('.').and_then(|(host, pid)| Some((host.to_string(), pid.parse::<u32>().ok()?)));
    let mut hosts: Vec<&str> = infos.iter().flatten().map(|i| i.hostname.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let shared_host = if hosts.len() == 1 { hosts[0].to_string() } else { "unknown".to_string() };
    let (hostname, pid) = from_name.unwrap_or((shared_host, 0));
    ProcessInfo { pid, hostname, ..ProcessInfo::default() }
}

/// CUPTI's clock and the wall clock (ns) read together in `spool`'s process: its header's, or, for a process that
/// started with CUPTI detached (header clock 0), the pair written when CUPTI was first attached. `None` when
/// CUPTI was never attached.
fn clock_pair(spool: &ProcessSpool, info: &ProcessInfo) -> Option<(u64, u64)> {
    if info.cupti_clock_ns != 0 {
        return Some((info.cupti_clock_ns, info.realtime_ns));
    }
    spool.contents.records.iter().find_map(|record| match record {
        SpoolRecord::ClockPair { cupti_clock_ns, realtime_ns } => Some((*cupti_clock_ns, *realtime_ns)),
        _ => None,
    })
}

/// What the whole job shares while its processes are merged.
struct JobMerge<'s> {
    trace: Trace,
    extras: CaptureExtras,
    /// Session start, ns since the Unix epoch: times in the trace count from it.
    session_start_utc_ns: i64,
    /// Per host: wall clock minus CUPTI clock, ns.
    host_offsets: HashMap<&'s str, i128>,
    /// Per host: its index, the hardware-id bits of its processes' `globalPid`s.
    host_index: HashMap<String, u64>,
    /// Mangled kernel name → demangled.
    demangled: HashMap<String, String>,
    devices_by_uuid: HashMap<(String, [u8; 16]), DeviceIdx>,
    /// Processes that ran kernels on each GPU.
    device_users: HashMap<DeviceIdx, Vec<ProcessIdx>>,
}

impl<'s> JobMerge<'s> {
    fn new(spools: &'s [ProcessSpool], infos: &[Option<&'s ProcessInfo>], options: &MergeOptions) -> JobMerge<'s> {
        let mut trace = Trace::default();
        let mut extras = CaptureExtras::default();
        trace.source.producer = Some(format!("shardscope-capture {}", env!("CARGO_PKG_VERSION")));

        let earliest = infos.iter().flatten().map(|i| i.realtime_ns as i64).min().unwrap_or(0);
        let session_start_utc_ns = options.session_start_utc_ns.unwrap_or(earliest);
        extras.session_start_utc_ns = session_start_utc_ns;
        trace.clock_offset_ns = Some(session_start_utc_ns);
        // One CUPTI→wall offset per host, from its earliest process that read CUPTI's clock: CUPTI times of
        // processes on one host share a clock, and per-process offsets would add their measurement jitter.
        let mut host_offsets: HashMap<&str, i128> = HashMap::new();
        for (spool, info) in spools.iter().zip(infos) {
            let Some(info) = info else { continue };
            if let Some((cupti_ns, wall_ns)) = clock_pair(spool, info) {
                host_offsets.entry(info.hostname.as_str()).or_insert(wall_ns as i128 - cupti_ns as i128);
            }
        }
        // A host none of whose processes ever attached CUPTI recorded no CUPTI time but its stray stops, which
        // the library then took from the wall clock (CUPTI's clock on Linux): they stay as they are.
        for info in infos.iter().flatten() {
            host_offsets.entry(info.hostname.as_str()).or_insert(0);
        }

        // Kernel names: collect every distinct mangled name first, demangle in one batch.
        let mut mangled_names: Vec<String> = Vec::new();
        for spool in spools {
            let texts = spool_names(&spool.contents.records);
            for record in &spool.contents.records {
                if let SpoolRecord::Kernel(k) = record
                    && let Some(text) = texts.get(&k.name_id)
                {
                    mangled_names.push((*text).to_string());
                }
            }
        }
        mangled_names.sort();
        mangled_names.dedup();
        let (demangled, demangler) = names::demangle_all(&mangled_names, options.cufilt.as_deref());
        extras.demangler = Some(demangler);

        JobMerge {
            trace,
            extras,
            session_start_utc_ns,
            host_offsets,
            host_index: HashMap::new(),
            demangled,
            devices_by_uuid: HashMap::new(),
            device_users: HashMap::new(),
        }
    }

    fn finish(mut self, options: &MergeOptions) -> (Trace, CaptureExtras) {
        for (device, users) in self.device_users {
            if let [only] = users.as_slice() {
                self.trace.devices[device.0 as usize].process = Some(*only);
            }
        }
        // Processes that recorded in windows recorded nothing outside them: there is nothing to filter, and
        // work launched inside a window that ran past its end must stay.
        if !options.windows_live && self.trace.capture_windows.is_empty() {
            apply_range(&mut self.trace, &mut self.extras, &options.range);
        }
        drop_graph_launches_outside_windows(&mut self.trace);
        (self.trace, self.extras)
    }
}

/// At CUDA graph level with capture windows, CUPTI's graph-trace kind stays on for the whole run (switched on
/// after a graph was instantiated, CUPTI 13.0 crashed that graph's next launch): a graph launch that started
/// outside every window of its process is not kept, and is counted.
fn drop_graph_launches_outside_windows(trace: &mut Trace) {
    if trace.capture_windows.is_empty() {
        return;
    }
    // Per process, the windows by start, each with the latest end of it and the windows before it: a launch is
    // inside some window exactly when the windows that started by its start reach its start (a server captured in
    // windows for hours has many windows and millions of launches, so no launch looks at every window).
    let mut windows: HashMap<ProcessIdx, Vec<(i64, i64)>> = HashMap::new();
    for w in &trace.capture_windows {
        windows.entry(w.process).or_default().push((w.start_ns, w.end_ns));
    }
    for spans in windows.values_mut() {
        spans.sort_unstable();
        let mut latest_end = i64::MIN;
        for span in spans.iter_mut() {
            latest_end = latest_end.max(span.1);
            span.1 = latest_end;
        }
    }
    let inside = |g: &GraphLaunch| {
        let Some(spans) = windows.get(&g.process) else { return false };
        let started_by = spans.partition_point(|&(start, _)| start <= g.start_ns);
        started_by > 0 && spans[started_by - 1].1 >= g.start_ns
    };
    let before = trace.graph_launches.len();
    trace.graph_launches.retain(inside);
    let dropped = (before - trace.graph_launches.len()) as u64;
    trace.warn_n("CUDA graph launches outside every capture window (not kept)", dropped);
}

/// One process's records on their way into the job's trace.
struct ProcessMerge<'a> {
    process: ProcessIdx,
    extra: ProcessExtra,
    /// `Name` records of the spool by id.
    texts: HashMap<u32, &'a str>,
    /// This host's wall clock minus CUPTI clock, and the session start, for [`Self::to_session`].
    clock_offset_ns: i128,
    session_start_utc_ns: i64,
    /// CUDA device ordinal in this process → GPU of the trace.
    ordinals: HashMap<u32, DeviceIdx>,
    /// Open NVTX starts by marker id. Ids can repeat among ranges open at the same time (seen
    /// with NCCL's domain), so each id keeps a list and an end takes the latest start of its own
    /// thread first: push/pop ranges nest per thread.
    open_markers: HashMap<u32, Vec<MarkerRecord>>,
    threads: ThreadIds,
    /// End of the last thing the process recorded, session ns.
    last_ns: i64,
    /// Where this process's API calls and kernels start in the job's lists.
    first_api_call: usize,
    first_kernel: usize,
    /// Records of this process that [`SideRecords`] took, per kind.
    side_counts: TakenCounts,
}

impl<'a> ProcessMerge<'a> {
    /// Adds the process and its GPUs to the job.
    fn new(job: &mut JobMerge, spool: &'a ProcessSpool, info: &ProcessInfo) -> ProcessMerge<'a> {
        let hosts = job.host_index.len() as u64;
        let hw = *job.host_index.entry(info.hostname.clone()).or_insert(hosts);
        let global_pid = (hw << 56) | ((info.pid as u64 & 0xFF_FFFF) << 24);
        let process = job.trace.add_process(Process {
            pid: info.pid,
            global_pid,
            name: info.command_line.join(" "),
            host: Some(info.hostname.clone()),
            rank: info.rank,
            world_size: info.world_size,
        });
        let extra = ProcessExtra {
            ppid: info.ppid,
            command_line: info.command_line.clone(),
            local_rank: info.local_rank,
            env: info.env.clone(),
            cupti_version: info.cupti_version,
            truncated_bytes: spool.contents.truncated_bytes,
            spool: spool.path.clone(),
            ..ProcessExtra::default()
        };
        if spool.contents.truncated_bytes > 0 {
            job.trace.warn("spool file cut off (process killed?): last partial frame ignored");
        }
        if spool.contents.bad_records > 0 {
            job.trace.warn_n("undecodable spool record", spool.contents.bad_records);
        }
        if spool.damaged_bytes > 0 {
            job.trace.warn_n(
                "damaged spool bytes skipped between valid frames (their records are lost)",
                spool.damaged_bytes,
            );
        }
        let mut merge = ProcessMerge {
            process,
            extra,
            texts: spool_names(&spool.contents.records),
            clock_offset_ns: job.host_offsets[info.hostname.as_str()],
            session_start_utc_ns: job.session_start_utc_ns,
            ordinals: HashMap::new(),
            open_markers: HashMap::new(),
            threads: ThreadIds::new(info.pid),
            last_ns: 0,
            first_api_call: job.trace.api_calls.len(),
            first_kernel: job.extras.kernels.len(),
            side_counts: TakenCounts::default(),
        };
        for record in &spool.contents.records {
            if let SpoolRecord::Device(d) = record {
                merge.add_device(job, &info.hostname, d);
            }
        }
        merge
    }

    /// Every record of the spool, in file order, then the ranges left open.
    fn merge_records(mut self, job: &mut JobMerge, records: &[SpoolRecord]) {
        for record in records {
            match record {
                SpoolRecord::Kernel(k) => self.kernel(job, k),
                SpoolRecord::Memcpy(m) => self.memcpy(job, m),
                SpoolRecord::Memset(m) => self.memset(job, m),
                SpoolRecord::Api(a) => self.api_call(job, a),
                SpoolRecord::Marker(m) => self.marker(job, m),
                SpoolRecord::Window(w) => self.window(job, w),
                SpoolRecord::GraphTrace(g) => self.graph_launch(job, g),
                SpoolRecord::WindowStrayStop { .. } => {
                    job.trace.warn("capture window stop while recording was off (ignored; nothing lost)")
                }
                SpoolRecord::GraphNode(node) => self.graph_node(job, node),
                SpoolRecord::Memory(m) => self.memory(job, m),
                SpoolRecord::MemoryPool(p) => self.memory_pool(job, p),
                SpoolRecord::ApiSelection(selection) => self.extra.api_selection = Some(*selection),
                SpoolRecord::Cost(cost) => self.extra.cost = Some(*cost),
                SpoolRecord::RefusedClient { count } => {
                    self.extra.refused_cupti_clients = self.extra.refused_cupti_clients.max(*count)
                }
                SpoolRecord::Dropped(d) => self.extra.records_dropped += d.count,
                SpoolRecord::BuffersRefused { count } => self.extra.buffers_refused = *count,
                SpoolRecord::End { undecoded, .. } => {
                    self.extra.clean_exit = true;
                    self.extra.records_undecoded = *undecoded;
                }
                SpoolRecord::Process(_)
                | SpoolRecord::Name { .. }
                | SpoolRecord::Device(_)
                | SpoolRecord::ClockPair { .. } => {}
                other => {
                    let (offset_ns, session_start_utc_ns) = (self.clock_offset_ns, self.session_start_utc_ns);
                    let to_session = |ns: u64| session_ns(ns, offset_ns, session_start_utc_ns);
                    let at = ProcessClock { process: self.process, to_session: &to_session };
                    if !job.extras.side.take(&at, other, &mut self.side_counts) {
                        job.trace.warn("spool record of a kind this capture cannot merge");
                    }
                }
            }
        }
        let context_id = job.extras.kernels[self.first_kernel..].first().map_or(0, |k| k.record.context_id);
        let calls = &job.trace.api_calls[self.first_api_call..];
        job.extras.side.end_of_process(&job.trace, calls, context_id, &self.side_counts);
        self.extra.record_counts.syncs = self.side_counts.syncs;
        self.close_open_ranges(job);
        job.trace.warn_n("CUPTI records dropped (buffers full)", self.extra.records_dropped);
        job.trace.warn_n(
            "the workload's own CUPTI profiler (torch.profiler, …) was refused: capture holds the process's CUPTI \
             subscription, so that profiler got no GPU events",
            u64::from(self.extra.refused_cupti_clients),
        );
        job.extras.processes.push(self.extra);
    }

    /// A CUPTI time of this process as session ns; saturating, so that a damaged record's time
    /// cannot wrap into a plausible one.
    fn to_session(&self, cupti_ns: u64) -> i64 {
        session_ns(cupti_ns, self.clock_offset_ns, self.session_start_utc_ns)
    }

    fn text(&self, id: u32) -> &'a str {
        self.texts.get(&id).copied().unwrap_or("")
    }

    /// A GPU this process saw: the job's GPU of the same UUID on the same host, or a new one.
    fn add_device(&mut self, job: &mut JobMerge, hostname: &str, d: &DeviceRecord) {
        let key = (hostname.to_string(), d.uuid);
        let index = *job.devices_by_uuid.entry(key).or_insert_with(|| {
            job.extras.devices.push(DeviceExtra {
                uuid: d.uuid,
                compute_capability: (d.cc_major, d.cc_minor),
                l2_cache_bytes: d.l2_cache_bytes,
                copy_engines: d.copy_engines,
            });
            job.trace.add_device(Device {
                ordinal: d.device_id,
                process: None,
                name: d.name.clone(),
                sm_count: Some(d.sm_count),
                memory_bytes: Some(d.memory_bytes),
                // CUPTI reports kB/s (10^3): 4_814_304_000 for an H200, which nsys
                // stores as 4_814_304_000_000 B/s.
                memory_bandwidth_bytes_per_s: Some(d.memory_bandwidth_kib_per_s * 1000),
                clock_rate_khz: Some(d.clock_rate_khz),
                bus_location: None,
            })
        });
        self.ordinals.insert(d.device_id, index);
    }

    /// The GPU of a device ordinal of this process.
    fn device(&mut self, job: &mut JobMerge, ordinal: u32) -> DeviceIdx {
        *self.ordinals.entry(ordinal).or_insert_with(|| {
            // No device record (device kind refused): one anonymous device per ordinal.
            job.trace.warn("GPU without a CUPTI device record");
            job.extras.devices.push(DeviceExtra::default());
            job.trace.add_device(Device { ordinal, ..Device::default() })
        })
    }

    fn kernel(&mut self, job: &mut JobMerge, k: &KernelRecord) {
        let device = self.device(job, k.device_id);
        let users = job.device_users.entry(device).or_default();
        if !users.contains(&self.process) {
            users.push(self.process);
        }
        let mangled = self.text(k.name_id);
        let full = job.demangled.get(mangled).map(String::as_str).unwrap_or(mangled);
        let name = job.trace.names.intern(full);
        let short_name = job.trace.names.intern(kernel_names::short_name(full));
        let mangled_name = job.trace.names.intern(mangled);
        let (start_ns, end_ns) = (self.to_session(k.start_ns), self.to_session(k.end_ns));
        self.last_ns = self.last_ns.max(end_ns);
        job.trace.kernels.push(Kernel {
            start_ns,
            end_ns,
            name,
            short_name,
            device,
            process: self.process,
            stream: k.stream_id,
            correlation_id: k.correlation_id,
            grid: k.grid.map(|v| v.max(0) as u32),
            block: k.block.map(|v| v.max(0) as u32),
            launch: None,
            collective: None,
            // The spooled record keeps CUPTI's node id but not its graph id (the graph is found from the
            // launching call and the node ids).
            graph_id: None,
            graph_node_id: (k.graph_node_id != 0).then_some(k.graph_node_id),
        });
        job.extras.kernels.push(KernelDetail { record: *k, mangled_name });
        self.extra.record_counts.kernels += 1;
    }

    /// A capture window of this process, on the session clock.
    fn window(&mut self, job: &mut JobMerge, w: &WindowRecord) {
        let trigger = |code: u8| WindowTrigger::from_code(code).map_or(ModelTrigger::External, model_trigger);
        if WindowTrigger::from_code(w.start_trigger).is_none() || WindowTrigger::from_code(w.end_trigger).is_none() {
            job.trace.warn("capture window with an unknown trigger (kept, named external)");
        }
        job.trace.capture_windows.push(CaptureWindow {
            process: self.process,
            start_ns: self.to_session(w.start_ns),
            end_ns: self.to_session(w.end_ns),
            start_trigger: trigger(w.start_trigger),
            end_trigger: trigger(w.end_trigger),
        });
    }

    /// A CUDA graph launch recorded whole (`--cuda-graph-trace graph`); one CUPTI could not time is counted.
    fn graph_launch(&mut self, job: &mut JobMerge, g: &GraphTraceRecord) {
        if (g.start_ns == 0 && g.end_ns == 0) || g.end_ns < g.start_ns {
            job.trace.warn("CUDA graph execution without GPU start/end (skipped)");
            return;
        }
        let device = self.device(job, g.device_id);
        let (start_ns, end_ns) = (self.to_session(g.start_ns), self.to_session(g.end_ns));
        self.last_ns = self.last_ns.max(end_ns);
        job.trace.graph_launches.push(GraphLaunch {
            start_ns,
            end_ns,
            device,
            process: self.process,
            stream: g.stream_id,
            correlation_id: g.correlation_id,
            graph_id: g.graph_id,
            launch: None,
        });
    }

    fn memcpy(&mut self, job: &mut JobMerge, m: &MemcpyRecord) {
        let device = self.device(job, m.device_id);
        let copy_kind = Some(CopyKind::from_cupti(i64::from(m.copy_kind)));
        self.memop(job, device, copy_kind, (m.start_ns, m.end_ns), m.bytes, m.stream_id, m.correlation_id);
        // CUPTI's `CUpti_ActivityMemoryKind`; 0 (unknown) is left unset, as a source without the field.
        if let Some(memop) = job.trace.memops.last_mut() {
            let kind = |value: u8| (value != 0).then(|| MemoryKind::from_cupti(value));
            (memop.src_memory, memop.dst_memory) = (kind(m.src_kind), kind(m.dst_kind));
        }
        job.extras.memops.push((m.context_id, m.src_kind, m.dst_kind));
    }

    fn memset(&mut self, job: &mut JobMerge, m: &MemsetRecord) {
        let device = self.device(job, m.device_id);
        self.memop(job, device, None, (m.start_ns, m.end_ns), m.bytes, m.stream_id, m.correlation_id);
        job.extras.memops.push((m.context_id, m.memory_kind as u8, 0));
    }

    /// A copy (`copy_kind` set) or a set; `cupti_ns` is (start, end) on the CUPTI clock.
    #[allow(clippy::too_many_arguments)]
    fn memop(
        &mut self,
        job: &mut JobMerge,
        device: DeviceIdx,
        copy_kind: Option<CopyKind>,
        cupti_ns: (u64, u64),
        bytes: u64,
        stream: u32,
        correlation_id: u32,
    ) {
        let (start_ns, end_ns) = (self.to_session(cupti_ns.0), self.to_session(cupti_ns.1));
        job.trace.memops.push(MemOp {
            start_ns,
            end_ns,
            copy_kind,
            bytes,
            device,
            process: self.process,
            stream,
            correlation_id,
            src_device: None,
            dst_device: None,
            launch: None,
            src_memory: None,
            dst_memory: None,
        });
        self.extra.record_counts.memops += 1;
        self.last_ns = self.last_ns.max(end_ns);
    }

    fn api_call(&mut self, job: &mut JobMerge, a: &ApiRecord) {
        let name = if a.name_id == 0 {
            job.trace.names.intern(&format!("{}_cbid_{}", if a.driver { "driver" } else { "runtime" }, a.cbid))
        } else {
            job.trace.names.intern(self.text(a.name_id))
        };
        self.extra.record_counts.api_calls += 1;
        if is_launch_call(job.trace.names.get(name)) {
            self.extra.record_counts.launch_calls += 1;
        }
        let end_ns = self.to_session(a.end_ns);
        job.trace.api_calls.push(ApiCall {
            start_ns: self.to_session(a.start_ns),
            end_ns,
            name,
            kind: if a.driver { ApiKind::Driver } else { ApiKind::Runtime },
            process: self.process,
            tid: self.threads.map(a.tid),
            correlation_id: a.correlation_id,
        });
        self.last_ns = self.last_ns.max(end_ns);
    }

    /// An NVTX marker: a start is kept open, an end closes the start it pairs with.
    fn marker(&mut self, job: &mut JobMerge, m: &MarkerRecord) {
        // CUPTI's `CUpti_ActivityFlag` bits of a marker.
        const INSTANT: u32 = 1;
        const START: u32 = 2;
        const END: u32 = 4;
        self.extra.record_counts.markers += 1;
        self.last_ns = self.last_ns.max(self.to_session(m.timestamp_ns));
        if m.flags & START != 0 {
            let mut start = *m;
            start.tid = self.threads.map(m.tid);
            self.open_markers.entry(m.id).or_default().push(start);
        } else if m.flags & END != 0 {
            let end_tid = self.threads.map(m.tid);
            let taken = self.open_markers.get_mut(&m.id).and_then(|list| {
                let at = list.iter().rposition(|s| s.tid == end_tid).or(list.len().checked_sub(1))?;
                Some(list.remove(at))
            });
            match taken {
                Some(start) => {
                    let range = self.marker_range(job, &start, end_tid, m.timestamp_ns);
                    job.trace.ranges.push(range);
                }
                None => job.trace.warn("NVTX range end without its start"),
            }
        } else if m.flags & INSTANT != 0 {
            job.trace.warn("NVTX mark (instant event) not kept");
        }
    }

    /// A CUDA allocation or release (`--trace memory`), on the session clock.
    fn memory(&mut self, job: &mut JobMerge, m: &shardscope_spool::cupti::MemoryRecord) {
        let device = self.device(job, m.device_id);
        let time_ns = self.to_session(m.timestamp_ns);
        match crate::memory::memory_event(m, self.process, device, time_ns) {
            Some(event) => job.trace.memory_events.push(event),
            None => job.trace.warn("CUDA memory record that is neither an allocation nor a release (skipped)"),
        }
    }

    /// A stream-ordered memory pool made, destroyed or trimmed, on the session clock.
    fn memory_pool(&mut self, job: &mut JobMerge, p: &shardscope_spool::cupti::MemoryPoolRecord) {
        let device = self.device(job, p.device_id);
        let time_ns = self.to_session(p.timestamp_ns);
        job.trace.memory_pool_events.push(crate::memory::pool_event(p, self.process, device, time_ns));
    }

    /// A graph node's origin, on the thread numbering and clock of the process's ranges.
    fn graph_node(&mut self, job: &mut JobMerge, node: &GraphNodeRecord) {
        job.trace.graph_nodes.push(GraphNodeOrigin {
            process: self.process,
            node_id: node.node_id,
            cloned_from: (node.original_node_id != 0).then_some(node.original_node_id),
            tid: self.threads.map(node.tid),
            created_ns: self.to_session(node.timestamp_ns),
        });
    }

    /// Ranges with no end: the process was killed, or CUPTI never delivered the end (seen for
    /// NCCL's `ncclCommInitRankConfig` and `ncclCommFinalize` ranges with CUDA 13.0 CUPTI and
    /// NCCL 2.28, which nsys shows closed). Push/pop ranges nest per thread, so such a range ends
    /// no later than the enclosing range of its thread; without one, it ends at the last thing
    /// the process recorded.
    fn close_open_ranges(&mut self, job: &mut JobMerge) {
        let closed_ranges = job.trace.ranges.len();
        let mut unclosed: Vec<MarkerRecord> = std::mem::take(&mut self.open_markers).into_values().flatten().collect();
        unclosed.sort_by_key(|m| m.timestamp_ns);
        for start in unclosed {
            let mut range = self.marker_range(job, &start, start.tid, start.timestamp_ns);
            let enclosing_end = job.trace.ranges[..closed_ranges]
                .iter()
                .filter(|r| r.process == self.process && r.tid == range.tid)
                .filter(|r| r.start_ns < range.start_ns && r.end_ns > range.start_ns)
                .map(|r| r.end_ns)
                .min();
            // Recording stopped with the range still open: its end was never recorded, and it must not reach
            // across the gap to the next window.
            let window_end = job
                .trace
                .capture_windows
                .iter()
                .filter(|w| w.process == self.process && w.start_ns <= range.start_ns && range.start_ns <= w.end_ns)
                .map(|w| w.end_ns)
                .min();
            match (enclosing_end, window_end) {
                (Some(end_ns), _) => {
                    job.trace.warn("NVTX range without an end (ended with its enclosing range)");
                    range.end_ns = end_ns;
                }
                (None, Some(end_ns)) => {
                    job.trace.warn("NVTX range still open when its capture window closed (ended with the window)");
                    range.end_ns = end_ns.max(range.start_ns);
                }
                (None, None) => {
                    job.trace.warn("NVTX range without an end (ended at the process's last event)");
                    range.end_ns = self.last_ns.max(range.start_ns);
                }
            }
            job.trace.ranges.push(range);
        }
    }

    fn marker_range(&self, job: &mut JobMerge, start: &MarkerRecord, end_tid: u32, end_timestamp_ns: u64) -> Range {
        Range {
            start_ns: self.to_session(start.timestamp_ns),
            end_ns: self.to_session(end_timestamp_ns),
            name: job.trace.names.intern(self.text(start.name_id)),
            domain: job.trace.names.intern(self.text(start.domain_id)),
            // CUPTI marks push/pop and start/end ranges alike; a range that ends on another
            // thread can only be a start/end range.
            kind: if end_tid == start.tid { RangeKind::PushPop } else { RangeKind::StartEnd },
            process: self.process,
            tid: start.tid,
            device: None,
            stream: None,
            depth: 0,
        }
    }
}

/// Thread ids for one process that fit nsys' 24-bit `globalTid` field.
///
/// CUPTI reports a thread as its `pthread_t` truncated to 32 bits, not as the OS thread id, so
/// it does not fit the 24 bits nsys keeps for a thread and would spill into the process id.
/// Ids that already look like OS thread ids (below Linux's largest `pid_max`, 2^22) are kept;
/// others are numbered in order of first appearance from the process id on, so the first
/// thread that calls CUDA (the main thread of a Python workload) gets the pid, like the main
/// thread's OS id.
struct ThreadIds {
    pid: u32,
    mapped: HashMap<u32, u32>,
}

impl ThreadIds {
    const LARGEST_OS_TID: u32 = 1 << 22;

    fn new(pid: u32) -> ThreadIds {
        ThreadIds { pid, mapped: HashMap::new() }
    }

    fn map(&mut self, cupti_tid: u32) -> u32 {
        if cupti_tid < Self::LARGEST_OS_TID {
            return cupti_tid;
        }
        let next = (self.pid + self.mapped.len() as u32) & 0xFF_FFFF;
        *self.mapped.entry(cupti_tid).or_insert(next)
    }
}

/// A CUPTI time of a process whose clock is `clock_offset_ns` from the Unix epoch's, as ns since the session
/// start; saturating, so that a damaged record's time cannot wrap into a plausible one.
fn session_ns(cupti_ns: u64, clock_offset_ns: i128, session_start_utc_ns: i64) -> i64 {
    (cupti_ns as i128 + clock_offset_ns - session_start_utc_ns as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The model's name for a spool's window trigger.
fn model_trigger(trigger: WindowTrigger) -> ModelTrigger {
    match trigger {
        WindowTrigger::ProcessStart => ModelTrigger::ProcessStart,
        WindowTrigger::CudaProfilerApi => ModelTrigger::CudaProfilerApi,
        WindowTrigger::Nvtx => ModelTrigger::Nvtx,
        WindowTrigger::Time => ModelTrigger::Time,
        WindowTrigger::External => ModelTrigger::External,
        WindowTrigger::ProcessExit => ModelTrigger::ProcessExit,
    }
}

/// Runtime or driver calls that launch a kernel or a graph (`cudaLaunchKernel_v7000`, `cuLaunchKernelEx`,
/// `cudaGraphLaunch_v10000`): the denominator of the capture's cost per launch.
fn is_launch_call(name: &str) -> bool {
    ["cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch"].iter().any(|p| name.starts_with(p))
        && !name.starts_with("cudaLaunchHostFunc")
        && !name.starts_with("cuLaunchHostFunc")
}

fn spool_names(records: &[SpoolRecord]) -> HashMap<u32, &str> {
    records
        .iter()
        .filter_map(|r| if let SpoolRecord::Name { id, text } = r { Some((*id, text.as_str())) } else { None })
        .collect()
}

/// Keeps only events that start inside the capture range (ranges: that overlap it).
fn apply_range(trace: &mut Trace, extras: &mut CaptureExtras, range: &CaptureRange) {
    // Windows as (process or None for all, start, end).
    let mut windows: Vec<(Option<ProcessIdx>, i64, i64)> = Vec::new();
    let mut restricted = false;
    if range.delay_ns.is_some() || range.duration_ns.is_some() {
        restricted = true;
        let start = range.delay_ns.unwrap_or(0);
        let end = range.duration_ns.map(|d| start.saturating_add(d)).unwrap_or(i64::MAX);
        windows.push((None, start, end));
    }
    if let Some(name) = &range.nvtx_range {
        restricted = true;
        let windows_before = windows.len();
        let id = trace.names.lookup(name);
        for r in trace.ranges.iter().filter(|r| Some(r.name) == id) {
            windows.push((None, r.start_ns, r.end_ns));
        }
        if windows.len() == windows_before {
            trace.warn("--nvtx-range: no NVTX range with that name; nothing kept");
        }
    }
    if range.cuda_profiler_api {
        restricted = true;
        let mut open: HashMap<ProcessIdx, i64> = HashMap::new();
        let mut calls: Vec<&ApiCall> = trace.api_calls.iter().collect();
        calls.sort_by_key(|c| c.start_ns);
        for call in calls {
            let name = trace.names.get(call.name);
            if name.starts_with("cudaProfilerStart") || name.starts_with("cuProfilerStart") {
                open.entry(call.process).or_insert(call.end_ns);
            } else if (name.starts_with("cudaProfilerStop") || name.starts_with("cuProfilerStop"))
                && let Some(start) = open.remove(&call.process)
            {
                windows.push((Some(call.process), start, call.start_ns));
            }
        }
        for (process, start) in open {
            windows.push((Some(process), start, i64::MAX));
        }
    }
    if !restricted {
        return;
    }
    let inside = |process: ProcessIdx, t: i64| {
        windows.iter().any(|(p, s, e)| p.is_none_or(|p| p == process) && t >= *s && t < *e)
    };
    let overlaps = |process: ProcessIdx, s0: i64, e0: i64| {
        windows.iter().any(|(p, s, e)| p.is_none_or(|p| p == process) && s0 < *e && e0 >= *s)
    };
    let keep: Vec<bool> = trace.kernels.iter().map(|k| inside(k.process, k.start_ns)).collect();
    let mut flags = keep.iter();
    trace.kernels.retain(|_| *flags.next().unwrap());
    let mut flags = keep.iter();
    extras.kernels.retain(|_| *flags.next().unwrap());
    let keep: Vec<bool> = trace.memops.iter().map(|m| inside(m.process, m.start_ns)).collect();
    let mut flags = keep.iter();
    trace.memops.retain(|_| *flags.next().unwrap());
    let mut flags = keep.iter();
    extras.memops.retain(|_| *flags.next().unwrap());
    trace.api_calls.retain(|a| inside(a.process, a.start_ns));
    trace.graph_launches.retain(|g| inside(g.process, g.start_ns));
    extras.side.retain_inside(&inside);
    trace.ranges.retain(|r| overlaps(r.process, r.start_ns, r.end_ns));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_calls_are_kernel_and_graph_launches() {
        for name in ["cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cudaGraphLaunch_v10000", "cuGraphLaunch"] {
            assert!(is_launch_call(name), "{name}");
        }
        for name in ["cudaLaunchHostFunc_v10000", "cudaMemcpyAsync_v3020", "cudaEventRecord_v3020"] {
            assert!(!is_launch_call(name), "{name}");
        }
    }

    #[test]
    fn with_windows_only_graph_launches_inside_a_window_of_their_process_are_kept_and_the_rest_counted() {
        use shardscope_model::{CaptureWindow, DeviceIdx, GraphLaunch, WindowTrigger as Trigger};
        let launch = |process: u32, start_ns: i64| GraphLaunch {
            start_ns,
            end_ns: start_ns + 10,
            device: DeviceIdx(0),
            process: ProcessIdx(process),
            stream: 1,
            correlation_id: start_ns as u32,
            graph_id: 7,
            launch: None,
        };
        let window = |process: u32, start_ns: i64, end_ns: i64| CaptureWindow {
            process: ProcessIdx(process),
            start_ns,
            end_ns,
            start_trigger: Trigger::CudaProfilerApi,
            end_trigger: Trigger::CudaProfilerApi,
        };
        let launches = vec![launch(0, 50), launch(0, 150), launch(0, 250), launch(1, 150), launch(1, 350)];
        let mut trace = Trace { graph_launches: launches, ..Trace::default() };
        drop_graph_launches_outside_windows(&mut trace);
        assert_eq!(trace.graph_launches.len(), 5, "no window: nothing is dropped");
        trace.capture_windows = vec![window(0, 100, 200), window(1, 300, 400)];
        drop_graph_launches_outside_windows(&mut trace);
        let kept: Vec<(u32, i64)> = trace.graph_launches.iter().map(|g| (g.process.0, g.start_ns)).collect();
        assert_eq!(kept, [(0, 150), (1, 350)]);
        assert!(trace.warnings.iter().any(|w| w.count == 3 && w.what.contains("outside every capture window")));
        // Windows out of order, one inside another (a hand-made spool): a launch inside the outer one after the
        // inner one ended is still inside; one at an end is inside, one past it is not.
        trace.capture_windows = vec![window(0, 120, 130), window(0, 100, 200), window(0, 400, 500)];
        trace.graph_launches = vec![launch(0, 140), launch(0, 200), launch(0, 201), launch(0, 500), launch(0, 99)];
        drop_graph_launches_outside_windows(&mut trace);
        let kept: Vec<i64> = trace.graph_launches.iter().map(|g| g.start_ns).collect();
        assert_eq!(kept, [140, 200, 500]);
    }
}
