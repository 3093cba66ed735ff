//! Turns loaded traces into the rows of the timeline: a tree of headers (host, process or
//! rank, GPU, thread) over tracks (one CUDA stream, one thread's API calls, one nesting level
//! of a thread's ranges, a GPU's module spans) and per-GPU graphs (utilisation, memory).
//!
//! Every track keeps its events sorted by start together with a running maximum of their
//! ends, so the events that overlap any time window are found by two binary searches
//! (see [`Track::visible_range`]), whatever their durations.

use std::collections::{BTreeMap, HashMap};

use shardscope_model::{DeviceIdx, ProcessIdx, Trace};

use super::events::{EventKindInfo, dispatch};
use crate::analysis::{Categories, CategoryId};
use crate::memory::MemoryCounter;
use crate::modules::ModuleSpans;
use crate::roi::RegionOfInterest;
use crate::utilization::GpuBusy;

pub use super::events::{EventKind, EventRef};

/// What a track shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackKind {
    /// Kernels and memory operations of one CUDA stream.
    Stream {
        /// GPU.
        device: DeviceIdx,
        /// Stream id.
        stream: u32,
    },
    /// CUDA API calls of one host thread.
    Api {
        /// Thread id.
        tid: u32,
    },
    /// One nesting level of a host thread's NVTX / annotation ranges.
    Ranges {
        /// Thread id.
        tid: u32,
        /// Nesting depth.
        depth: u16,
    },
    /// One nesting level of the GPU annotations on a stream.
    GpuRanges {
        /// GPU.
        device: DeviceIdx,
        /// Stream id.
        stream: u32,
        /// Nesting depth.
        depth: u16,
    },
    /// One nesting level of the module spans of one GPU's kernels ([`crate::modules`]).
    Modules {
        /// GPU.
        device: DeviceIdx,
        /// Row of the nesting: 0 for the layer row ([`crate::modules::ModuleSpan::level`]).
        level: u16,
    },
}

/// One row of events.
#[derive(Debug, Clone)]
pub struct Track {
    /// Row label.
    pub label: String,
    /// Index of the trace the events come from.
    pub trace: usize,
    /// Process the events belong to.
    pub process: ProcessIdx,
    /// What the row shows.
    pub kind: TrackKind,
    /// Event starts, sorted.
    pub starts_ns: Vec<i64>,
    /// Event ends, in the same order.
    pub ends_ns: Vec<i64>,
    /// `max_end_ns[i]` = largest end among events `0..=i`; non-decreasing, so the first event
    /// that can reach into a window is one binary search away.
    pub max_end_ns: Vec<i64>,
    /// The events.
    pub events: Vec<EventRef>,
}

impl Track {
    fn new(label: String, trace: usize, process: ProcessIdx, kind: TrackKind) -> Track {
        Track {
            label,
            trace,
            process,
            kind,
            starts_ns: Vec::new(),
            ends_ns: Vec::new(),
            max_end_ns: Vec::new(),
            events: Vec::new(),
        }
    }

    fn push(&mut self, start_ns: i64, end_ns: i64, event: EventRef) {
        self.starts_ns.push(start_ns);
        self.ends_ns.push(end_ns.max(start_ns));
        self.events.push(event);
    }

    /// Sorts by start (stable, so equal starts keep input order) and builds `max_end_ns`.
    fn seal(&mut self) {
        let sorted = self.starts_ns.windows(2).all(|w| w[0] <= w[1]);
        if !sorted {
            let mut order: Vec<u32> = (0..self.starts_ns.len() as u32).collect();
            order.sort_by_key(|&i| self.starts_ns[i as usize]);
            self.starts_ns = order.iter().map(|&i| self.starts_ns[i as usize]).collect();
            self.ends_ns = order.iter().map(|&i| self.ends_ns[i as usize]).collect();
            self.events = order.iter().map(|&i| self.events[i as usize]).collect();
        }
        let mut running = i64::MIN;
        self.max_end_ns = self
            .ends_ns
            .iter()
            .map(|&end| {
                running = running.max(end);
                running
            })
            .collect();
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when the track holds no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Indices `first..last` of the events that overlap `[start_ns, end_ns)`, plus possibly
    /// some that ended before `start_ns` but start after a longer one that does not.
    pub fn visible_range(&self, start_ns: i64, end_ns: i64) -> std::ops::Range<usize> {
        let first = self.max_end_ns.partition_point(|&e| e <= start_ns);
        let last = self.starts_ns.partition_point(|&s| s < end_ns);
        first..last.max(first)
    }

    /// The event under time `t_ns`, allowing `tolerance_ns` either side; the latest-starting
    /// one wins, so a short event drawn on top of a long one is the one picked.
    pub fn event_at(&self, t_ns: i64, tolerance_ns: i64) -> Option<usize> {
        let upper = self.starts_ns.partition_point(|&s| s <= t_ns + tolerance_ns);
        let mut best: Option<(i64, usize)> = None;
        // Walk back only while some earlier event can still reach t; bounded so a pathological
        // track cannot stall a click.
        for i in (0..upper).rev().take(100_000) {
            if self.max_end_ns[i] < t_ns - tolerance_ns {
                break;
            }
            if self.ends_ns[i] >= t_ns - tolerance_ns {
                let distance = if t_ns < self.starts_ns[i] {
                    self.starts_ns[i] - t_ns
                } else if t_ns > self.ends_ns[i] {
                    t_ns - self.ends_ns[i]
                } else {
                    0
                };
                if best.is_none_or(|(d, _)| distance < d) {
                    best = Some((distance, i));
                }
                if distance == 0 {
                    break;
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Position of `event` in this track, if it is here.
    pub fn position_of(&self, event: EventRef, start_ns: i64) -> Option<usize> {
        let from = self.starts_ns.partition_point(|&s| s < start_ns);
        (from..self.len()).take_while(|&i| self.starts_ns[i] == start_ns).find(|&i| self.events[i] == event)
    }
}

/// A row of the timeline: a collapsible header or a track.
#[derive(Debug, Clone)]
pub struct Row {
    /// Nesting level (0 = host).
    pub indent: u8,
    /// Header or track.
    pub content: RowContent,
}

/// What a [`Row`] is.
#[derive(Debug, Clone)]
pub enum RowContent {
    /// A group header; `id` keys its collapsed state.
    Header {
        /// Stable id of the group.
        id: u64,
        /// Text.
        label: String,
    },
    /// Index into [`TimelineData::tracks`].
    Track(usize),
    /// A GPU's utilisation graph: index into [`TimelineData::utilization`].
    Utilization(usize),
    /// The no-straggler replay of a stream track (index into [`TimelineData::tracks`]), right under it; shown only
    /// while the replay is.
    Ideal(usize),
    /// A GPU's memory in use over time: index into [`TimelineData::memory`].
    Memory(usize),
}

/// Everything the timeline draws, built once per load in the background.
pub struct TimelineData {
    /// The traces, one per file (or per rank).
    pub traces: Vec<Trace>,
    /// Tracks in display order.
    pub tracks: Vec<Track>,
    /// Headers and tracks in display order.
    pub rows: Vec<Row>,
    /// Per trace: category of every interned name, indexed by `NameId`.
    pub name_categories: Vec<Vec<CategoryId>>,
    /// The classifier the categories came from.
    pub categories: Categories,
    /// Earliest event start over all traces; the time axis counts from here.
    pub t0_ns: i64,
    /// Latest event end over all traces.
    pub t1_ns: i64,
    /// (trace, process, tid) → API-call track.
    pub api_track: HashMap<(usize, ProcessIdx, u32), usize>,
    /// (trace, device, stream) → stream track.
    pub stream_track: HashMap<(usize, DeviceIdx, u32), usize>,
    /// (trace, process, tid) → range tracks, outermost first.
    pub range_tracks: HashMap<(usize, ProcessIdx, u32), Vec<usize>>,
    /// Total events over all tracks.
    pub event_count: usize,
    /// (trace, kernel) → how long a collective kernel waited for the last rank before data moved (only kernels
    /// matched across ranks with a wait); the timeline draws that part darker.
    pub collective_wait_ns: HashMap<(usize, u32), i64>,
    /// Busy time of each GPU with work, in the order of their utilisation rows.
    pub utilization: Vec<GpuBusy>,
    /// Memory in use of each GPU with memory points, in the order of their memory rows.
    pub memory: Vec<MemoryCounter>,
    /// Per trace: the module spans of its kernels (empty without module ranges).
    pub modules: Vec<ModuleSpans>,
    /// (trace, process, device, level) → module track of that nesting level.
    pub module_track: HashMap<(usize, ProcessIdx, DeviceIdx, u16), usize>,
    /// Where the run opens: its phase and step ranges, else its GPU work (see [`crate::roi`]).
    pub roi: Option<RegionOfInterest>,
}

fn process_label(trace: &Trace, process: ProcessIdx, trace_index: usize, trace_count: usize) -> String {
    let Some(p) = trace.processes.get(process.0 as usize) else {
        return format!("file {trace_index}: unknown process");
    };
    let mut label = match p.rank {
        Some(rank) => format!("rank {rank} · pid {}", p.pid),
        None => format!("pid {}", p.pid),
    };
    if !p.name.is_empty() {
        let short: String = p.name.chars().take(40).collect();
        label.push_str(&format!(" · {short}"));
    }
    if trace_count > 1 && p.rank.is_none() {
        label = format!("file {trace_index} · {label}");
    }
    label
}

fn per_process_len(trace: &Trace) -> usize {
    trace.processes.len().max(1)
}

fn thread_label(trace: &Trace, process: ProcessIdx, tid: u32) -> String {
    match trace.threads.iter().find(|t| t.process == process && t.tid == tid) {
        // Kineto names threads "thread 123 (python3)" already.
        Some(t) if t.name.contains(&tid.to_string()) => t.name.clone(),
        Some(t) if !t.name.is_empty() => format!("thread {tid} · {}", t.name),
        _ => format!("thread {tid}"),
    }
}

/// Stable id for a header from its path in the tree.
fn header_id(parts: &[u64]) -> u64 {
    // FNV-1a: stable across runs, which a collapsed-state map keyed on it relies on.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

fn text_id(text: &str) -> u64 {
    header_id(&text.bytes().map(u64::from).collect::<Vec<_>>())
}

/// Per-process grouping while building.
#[derive(Default)]
struct ProcessTracks {
    /// device → stream → track.
    streams: BTreeMap<u32, BTreeMap<u32, Track>>,
    /// device → stream → depth → GPU annotation track.
    gpu_ranges: BTreeMap<u32, BTreeMap<u32, BTreeMap<u16, Track>>>,
    /// tid → API track.
    api: BTreeMap<u32, Track>,
    /// tid → depth → range track.
    ranges: BTreeMap<u32, BTreeMap<u16, Track>>,
    /// device → level → module track.
    modules: BTreeMap<u32, BTreeMap<u16, Track>>,
}

impl ProcessTracks {
    fn is_empty(&self) -> bool {
        self.streams.is_empty()
            && self.api.is_empty()
            && self.ranges.is_empty()
            && self.gpu_ranges.is_empty()
            && self.modules.is_empty()
    }
}

/// First start and last end of everything filed on tracks, trace ns.
struct Span {
    t0_ns: i64,
    t1_ns: i64,
}

impl Span {
    fn cover(&mut self, start_ns: i64, end_ns: i64) {
        self.t0_ns = self.t0_ns.min(start_ns);
        self.t1_ns = self.t1_ns.max(end_ns);
    }
}

/// Every event of trace `ti` (and its module spans) on its track, grouped per process index (cheap vector indexing
/// per event); one step per kind of event.
fn file_events(trace: &Trace, ti: usize, modules: &ModuleSpans, span: &mut Span) -> Vec<ProcessTracks> {
    let mut per_process: Vec<ProcessTracks> =
        (0..trace.processes.len().max(1)).map(|_| ProcessTracks::default()).collect();
    file_kernels(trace, ti, &mut per_process, span);
    file_memops(trace, ti, &mut per_process, span);
    file_api_calls(trace, ti, &mut per_process, span);
    file_ranges(trace, ti, &mut per_process, span);
    file_modules(trace, ti, modules, &mut per_process);
    per_process
}

/// Module spans lie within their kernels' time, so the span needs no widening. One track per GPU and nesting level,
/// labelled with the path parts it keeps.
fn file_modules(trace: &Trace, ti: usize, modules: &ModuleSpans, per_process: &mut [ProcessTracks]) {
    for (i, s) in modules.spans.iter().enumerate() {
        let levels = per_process[slot(trace, s.process)].modules.entry(s.device.0).or_default();
        let track = levels.entry(s.level).or_insert_with(|| {
            let depth = modules.depths.get(usize::from(s.level)).copied().unwrap_or_default();
            let label = if s.level == 0 { "modules".to_string() } else { format!("modules · depth {depth}") };
            Track::new(label, ti, s.process, TrackKind::Modules { device: s.device, level: s.level })
        });
        track.push(s.start_ns, s.end_ns, EventRef::new(EventKind::Module, i));
    }
}

/// The slot of `process` in the per-process groups of `trace`.
fn slot(trace: &Trace, process: ProcessIdx) -> usize {
    (process.0 as usize).min(per_process_len(trace) - 1)
}

/// The track of one CUDA stream, made on first use.
fn stream_track(
    tracks: &mut ProcessTracks,
    ti: usize,
    process: ProcessIdx,
    device: DeviceIdx,
    stream: u32,
) -> &mut Track {
    tracks
        .streams
        .entry(device.0)
        .or_default()
        .entry(stream)
        .or_insert_with(|| Track::new(format!("stream {stream}"), ti, process, TrackKind::Stream { device, stream }))
}

fn file_kernels(trace: &Trace, ti: usize, per_process: &mut [ProcessTracks], span: &mut Span) {
    for (i, k) in trace.kernels.iter().enumerate() {
        let track = stream_track(&mut per_process[slot(trace, k.process)], ti, k.process, k.device, k.stream);
        track.push(k.start_ns, k.end_ns, EventRef::new(EventKind::Kernel, i));
        span.cover(k.start_ns, k.end_ns);
    }
}

fn file_memops(trace: &Trace, ti: usize, per_process: &mut [ProcessTracks], span: &mut Span) {
    for (i, m) in trace.memops.iter().enumerate() {
        let track = stream_track(&mut per_process[slot(trace, m.process)], ti, m.process, m.device, m.stream);
        track.push(m.start_ns, m.end_ns, EventRef::new(EventKind::MemOp, i));
        span.cover(m.start_ns, m.end_ns);
    }
}

fn file_api_calls(trace: &Trace, ti: usize, per_process: &mut [ProcessTracks], span: &mut Span) {
    for (i, a) in trace.api_calls.iter().enumerate() {
        let track = per_process[slot(trace, a.process)]
            .api
            .entry(a.tid)
            .or_insert_with(|| Track::new("CUDA API".to_string(), ti, a.process, TrackKind::Api { tid: a.tid }));
        track.push(a.start_ns, a.end_ns, EventRef::new(EventKind::Api, i));
        span.cover(a.start_ns, a.end_ns);
    }
}

/// Ranges on a GPU stream (annotations) go under the GPU, the others under their thread; one
/// track per nesting depth.
fn file_ranges(trace: &Trace, ti: usize, per_process: &mut [ProcessTracks], span: &mut Span) {
    for (i, r) in trace.ranges.iter().enumerate() {
        let event = EventRef::new(EventKind::Range, i);
        let tracks = &mut per_process[slot(trace, r.process)];
        let track = match (r.device, r.stream) {
            (Some(device), Some(stream)) => {
                tracks.gpu_ranges.entry(device.0).or_default().entry(stream).or_default().entry(r.depth).or_insert_with(
                    || {
                        Track::new(
                            format!("annotations {stream} · {}", r.depth),
                            ti,
                            r.process,
                            TrackKind::GpuRanges { device, stream, depth: r.depth },
                        )
                    },
                )
            }
            _ => tracks.ranges.entry(r.tid).or_default().entry(r.depth).or_insert_with(|| {
                Track::new(
                    format!("ranges · {}", r.depth),
                    ti,
                    r.process,
                    TrackKind::Ranges { tid: r.tid, depth: r.depth },
                )
            }),
        };
        track.push(r.start_ns, r.end_ns, event);
        span.cover(r.start_ns, r.end_ns);
    }
}

/// What each GPU of one trace shows besides its tracks, taken by the first process that shows the GPU (so that a GPU
/// two processes share has one of each).
struct GpuGraphs {
    busy: Vec<GpuBusy>,
    memory: Vec<MemoryCounter>,
}

impl GpuGraphs {
    fn of_trace(trace: &Trace, ti: usize) -> GpuGraphs {
        GpuGraphs { busy: GpuBusy::of_trace(trace, ti), memory: MemoryCounter::of_trace(trace, ti) }
    }

    /// True when `process` has memory to show (a process whose only records are allocations still gets its rows).
    fn has_memory_of(&self, process: ProcessIdx) -> bool {
        self.memory.iter().any(|m| m.process == process)
    }
}

impl TimelineData {
    /// Builds the track tree of `traces`: every event filed on its track, then the tracks
    /// arranged host → process → GPU → stream and thread.
    pub fn build(traces: Vec<Trace>, categories: Categories) -> TimelineData {
        let trace_count = traces.len();
        let name_categories: Vec<Vec<CategoryId>> =
            traces.iter().map(|t| t.names.iter().map(|(_, name)| categories.classify(name)).collect()).collect();
        let modules: Vec<ModuleSpans> = traces.iter().map(ModuleSpans::of_trace).collect();
        let mut graphs: Vec<GpuGraphs> = traces.iter().enumerate().map(|(ti, t)| GpuGraphs::of_trace(t, ti)).collect();

        // host → (rank sort key, trace, process) → tracks
        type ProcessKey = (u64, usize, ProcessIdx);
        let mut hosts: BTreeMap<String, BTreeMap<ProcessKey, ProcessTracks>> = BTreeMap::new();
        let mut span = Span { t0_ns: i64::MAX, t1_ns: i64::MIN };
        for (ti, trace) in traces.iter().enumerate() {
            // File the groups under their host and rank once per process.
            for (process_index, tracks) in file_events(trace, ti, &modules[ti], &mut span).into_iter().enumerate() {
                let process = ProcessIdx(process_index as u32);
                if tracks.is_empty() && !graphs[ti].has_memory_of(process) {
                    continue;
                }
                let p = trace.processes.get(process_index);
                let host = p.and_then(|p| p.host.clone()).unwrap_or_else(|| "unknown host".to_string());
                let rank_key = p.and_then(|p| p.rank).map_or(u64::MAX / 2 + ti as u64, u64::from);
                hosts.entry(host).or_default().insert((rank_key, ti, process), tracks);
            }
            for counter in &graphs[ti].memory {
                let (first, last) = counter.span_ns();
                span.cover(first, last);
            }
        }
        if span.t0_ns > span.t1_ns {
            span = Span { t0_ns: 0, t1_ns: 1_000_000 };
        }

        let roi = crate::roi::region_of_interest(&traces, categories.phase_pattern(), categories.step_pattern());
        let mut data = TimelineData {
            tracks: Vec::new(),
            rows: Vec::new(),
            name_categories,
            categories,
            t0_ns: span.t0_ns,
            t1_ns: span.t1_ns,
            api_track: HashMap::new(),
            stream_track: HashMap::new(),
            range_tracks: HashMap::new(),
            event_count: 0,
            collective_wait_ns: HashMap::new(),
            utilization: Vec::new(),
            memory: Vec::new(),
            modules: Vec::new(),
            module_track: HashMap::new(),
            roi,
            traces: Vec::new(),
        };
        for (host, processes) in hosts {
            let host_id = text_id(&host);
            data.rows.push(Row { indent: 0, content: RowContent::Header { id: host_id, label: host } });
            for ((_, ti, process), mut tracks) in processes {
                let trace = &traces[ti];
                let process_id = header_id(&[host_id, ti as u64, u64::from(process.0)]);
                data.rows.push(Row {
                    indent: 1,
                    content: RowContent::Header {
                        id: process_id,
                        label: process_label(trace, process, ti, trace_count),
                    },
                });
                data.add_gpu_rows(trace, (ti, process), process_id, &mut tracks, &mut graphs[ti]);
                data.add_thread_rows(trace, ti, process, process_id, &mut tracks);
            }
        }
        // Every level holds until the end of the timeline.
        for counter in &mut data.memory {
            counter.end_ns = counter.end_ns.max(data.t1_ns);
        }
        data.traces = traces;
        data.modules = modules;
        data
    }

    /// Under a process: one header per GPU, its utilisation graph, its module track, then per stream its annotation
    /// tracks and its track, and last its memory row.
    fn add_gpu_rows(
        &mut self,
        trace: &Trace,
        (ti, process): (usize, ProcessIdx),
        process_id: u64,
        tracks: &mut ProcessTracks,
        graphs: &mut GpuGraphs,
    ) {
        let memory_devices = graphs.memory.iter().filter(|m| m.process == process).map(|m| m.device.0);
        let device_ordinals: std::collections::BTreeSet<u32> = tracks
            .streams
            .keys()
            .chain(tracks.gpu_ranges.keys())
            .chain(tracks.modules.keys())
            .copied()
            .chain(memory_devices)
            .collect();
        for device in device_ordinals {
            let info = trace.devices.get(device as usize);
            let label = match info {
                Some(d) if !d.name.is_empty() => format!("GPU {} · {}", d.ordinal, d.name),
                Some(d) => format!("GPU {}", d.ordinal),
                None => format!("GPU #{device}"),
            };
            self.rows.push(Row {
                indent: 2,
                content: RowContent::Header { id: header_id(&[process_id, 1, u64::from(device)]), label },
            });
            // The GPU's utilisation graph above its streams.
            if let Some(index) = graphs.busy.iter().position(|b| b.device == DeviceIdx(device) && !b.is_empty()) {
                self.utilization.push(graphs.busy.swap_remove(index));
                self.rows.push(Row { indent: 3, content: RowContent::Utilization(self.utilization.len() - 1) });
            }
            // Which module ran, above the streams that ran it.
            if let Some(levels) = tracks.modules.remove(&device) {
                self.add_module_rows((ti, process), header_id(&[process_id, 3, u64::from(device)]), device, levels);
            }
            self.add_stream_rows(ti, device, tracks);
            // Memory in use under the streams.
            if let Some(index) = graphs.memory.iter().position(|m| m.device == DeviceIdx(device)) {
                self.memory.push(graphs.memory.swap_remove(index));
                self.rows.push(Row { indent: 3, content: RowContent::Memory(self.memory.len() - 1) });
            }
        }
    }

    /// Under a GPU: its module tracks, the layer row first; above each deeper row a header that collapses it and
    /// every row below it, so the nesting folds by depth.
    fn add_module_rows(
        &mut self,
        (ti, process): (usize, ProcessIdx),
        modules_id: u64,
        device: u32,
        levels: BTreeMap<u16, Track>,
    ) {
        let mut indent = 3;
        for (level, track) in levels {
            if level > 0 {
                self.rows.push(Row {
                    indent,
                    content: RowContent::Header {
                        id: header_id(&[modules_id, u64::from(level)]),
                        label: format!("{} and deeper", track.label),
                    },
                });
                indent += 1;
            }
            let index = self.push_track(indent, track);
            self.module_track.insert((ti, process, DeviceIdx(device), level), index);
        }
    }

    /// Under a GPU: per stream, its annotation tracks, its track and its replay row.
    fn add_stream_rows(&mut self, ti: usize, device: u32, tracks: &mut ProcessTracks) {
        let mut streams = tracks.streams.remove(&device).unwrap_or_default();
        let mut annotations = tracks.gpu_ranges.remove(&device).unwrap_or_default();
        let stream_ids: std::collections::BTreeSet<u32> = streams.keys().chain(annotations.keys()).copied().collect();
        for stream in stream_ids {
            if let Some(depths) = annotations.remove(&stream) {
                for (_, track) in depths {
                    self.push_track(3, track);
                }
            }
            if let Some(track) = streams.remove(&stream) {
                let index = self.push_track(3, track);
                self.stream_track.insert((ti, DeviceIdx(device), stream), index);
                self.rows.push(Row { indent: 3, content: RowContent::Ideal(index) });
            }
        }
    }

    /// Under a process: one header per thread, then its range tracks (one per depth) and its API track.
    fn add_thread_rows(
        &mut self,
        trace: &Trace,
        ti: usize,
        process: ProcessIdx,
        process_id: u64,
        tracks: &mut ProcessTracks,
    ) {
        let tids: std::collections::BTreeSet<u32> = tracks.api.keys().chain(tracks.ranges.keys()).copied().collect();
        for tid in tids {
            self.rows.push(Row {
                indent: 2,
                content: RowContent::Header {
                    id: header_id(&[process_id, 2, u64::from(tid)]),
                    label: thread_label(trace, process, tid),
                },
            });
            if let Some(depths) = tracks.ranges.remove(&tid) {
                let mut indices = Vec::new();
                for (_, track) in depths {
                    indices.push(self.push_track(3, track));
                }
                self.range_tracks.insert((ti, process, tid), indices);
            }
            if let Some(track) = tracks.api.remove(&tid) {
                let index = self.push_track(3, track);
                self.api_track.insert((ti, process, tid), index);
            }
        }
    }

    fn push_track(&mut self, indent: u8, mut track: Track) -> usize {
        track.seal();
        self.event_count += track.len();
        self.tracks.push(track);
        let index = self.tracks.len() - 1;
        self.rows.push(Row { indent, content: RowContent::Track(index) });
        index
    }

    /// The text shown for an event.
    pub fn event_name(&self, trace: usize, event: EventRef) -> &str {
        dispatch!(event.kind(), Info => Info::name(self, trace, event.index()))
    }

    /// The full (demangled) name, for details and search.
    pub fn event_full_name(&self, trace: usize, event: EventRef) -> &str {
        dispatch!(event.kind(), Info => Info::full_name(self, trace, event.index()))
    }

    /// Start and end of an event.
    pub fn event_span(&self, trace: usize, event: EventRef) -> (i64, i64) {
        dispatch!(event.kind(), Info => Info::span(self, trace, event.index()))
    }

    /// The track that shows an event.
    pub fn track_of(&self, trace: usize, event: EventRef) -> Option<usize> {
        dispatch!(event.kind(), Info => Info::track_of(self, trace, event.index()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{SyntheticSpec, generate};

    #[test]
    fn tracks_hold_every_event_once_and_group_by_host_rank_gpu_stream() {
        let traces =
            generate(SyntheticSpec { ranks: 2, kernels_per_rank: 500, allreduce_every: 10, kernels_per_step: 100 });
        let data = TimelineData::build(traces, Categories::builtin());
        // Per rank: compute stream, comm stream, one range depth-0 row, one depth-1 row, one API row.
        assert_eq!(data.tracks.len(), 10);
        // 500 kernels + 500 API calls + 15 ranges per rank.
        assert_eq!(data.event_count, 2 * (500 + 500 + 15));
        let headers: Vec<&str> = data
            .rows
            .iter()
            .filter_map(|r| match &r.content {
                RowContent::Header { label, .. } => Some(label.as_str()),
                RowContent::Track(_) | RowContent::Utilization(_) | RowContent::Ideal(_) | RowContent::Memory(_) => {
                    None
                }
            })
            .collect();
        assert_eq!(headers[0], "node0");
        assert!(headers[1].starts_with("rank 0"));
        assert_eq!(headers[2], "GPU 0 · NVIDIA H200");
        for track in &data.tracks {
            assert!(track.starts_ns.windows(2).all(|w| w[0] <= w[1]));
            assert!(track.max_end_ns.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn visible_range_finds_long_events_that_started_before_the_window() {
        let mut track = Track::new(String::new(), 0, ProcessIdx(0), TrackKind::Api { tid: 0 });
        // A long event 0..1000 and short ones after it.
        track.push(0, 1000, EventRef::new(EventKind::Api, 0));
        track.push(10, 20, EventRef::new(EventKind::Api, 1));
        track.push(30, 40, EventRef::new(EventKind::Api, 2));
        track.push(2000, 2100, EventRef::new(EventKind::Api, 3));
        track.seal();
        assert_eq!(track.visible_range(500, 600), 0..3);
        assert_eq!(track.visible_range(1500, 1600), 3..3);
        assert_eq!(track.visible_range(1500, 2050), 3..4);
        assert_eq!(track.event_at(35, 0), Some(2));
        assert_eq!(track.event_at(500, 0), Some(0));
        assert_eq!(track.event_at(1500, 10), None);
    }
}
