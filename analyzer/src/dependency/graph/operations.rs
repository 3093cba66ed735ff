//! The model's operations: each rank's host calls and GPU work in its window, one [`Op`] each, with the instance id
//! the no-straggler what-if groups them by. What each event is (its instance key, whether it is in the window, its
//! category) is found per rank on worker threads; the host calls and the GPU operations are then written side by
//! side, each into its own part of the list and in the order one thread would add them, so that operation ids,
//! categories and instance ids do not depend on the number of threads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use shardscope_model::{CollectiveOp, DeviceIdx, NameId, ProcessIdx, Trace};

use super::{Builder, HOST, NONE, Op, OpKind, PAR_MIN_LEN, RankSpec, strip_version};
use crate::figures::categories::{COMM_PREFIX, Classifier, KernelClass};
use crate::stage_times::stage;

/// Names of the traces' events for the no-straggler what-if's instance keys: (kind, lane, global name, occurrence
/// on the rank's lane). The lane of a host call is its thread's ordinal on the rank (threads numbered by their
/// first call), so that a helper thread's calls do not shift the main thread's occurrences; GPU work uses lane 0
/// (stream ids may differ between ranks). The occurrences are counted per rank ([`Occurrences`], on worker
/// threads); the instance ids are given by [`InstanceNumbers`] in the order the operations are added.
#[derive(Default)]
pub(super) struct InstanceKeys {
    global_names: HashMap<String, u32>,
    /// Per trace and per name id of the trace: its global id as named (`2 × trace`) and with its `_vNNNN` version
    /// suffix stripped (`2 × trace + 1`, host calls), made once before the ranks are read.
    trace_names: Vec<Vec<u32>>,
}

/// Instance ids of (kind, lane, global name, occurrence), numbered in the order they are first asked for.
#[derive(Default)]
struct InstanceNumbers {
    /// Per (kind, lane, global name): the instance id of each occurrence (`NONE`: none in the model yet). One small
    /// map and a list read in occurrence order, where a map keyed by the occurrence too would be as large as the
    /// model and looked up at random.
    ids: HashMap<(u8, u32, u32), Vec<u32>, IntHasher>,
    /// Ids given so far.
    count: u32,
}

impl InstanceNumbers {
    /// The instance id of occurrence `occurrence` of (`kind`, `lane`, the name of global id `name_id`): a new id
    /// the first time it is asked for.
    fn instance_of(&mut self, kind: OpKind, lane: u32, name_id: u32, occurrence: u32) -> u32 {
        let at = occurrence as usize;
        let ids = self.ids.entry((kind as u8, lane, name_id)).or_default();
        if ids.len() <= at {
            // Occurrences count one by one on each rank, so the list grows by at most the events seen.
            ids.resize(at + 1, NONE);
        }
        if ids[at] == NONE {
            ids[at] = self.count;
            self.count += 1;
        }
        ids[at]
    }
}

/// How often each (kind, lane, global name) came so far on one rank.
#[derive(Default)]
struct Occurrences(HashMap<(u8, u32, u32), u32, IntHasher>);

impl Occurrences {
    /// The occurrence of this event of (`kind`, `lane`, name `name_id`) on the rank, counting from 0. Occurrences
    /// count from the start of the trace, inside the window or not, so that the windows of different ranks (their
    /// own step N) still pair the same instances.
    fn next(&mut self, kind: OpKind, lane: u32, name_id: u32) -> u32 {
        let count = self.0.entry((kind as u8, lane, name_id)).or_insert(0);
        *count += 1;
        *count - 1
    }
}

/// A hasher for small keys of integers (multiply and rotate per word, as compilers' own maps do): the instance keys
/// are hashed once or twice per event of every trace, where the default (DoS-resistant) hasher is slow.
#[derive(Default, Clone, Copy)]
struct IntHasher;

impl std::hash::BuildHasher for IntHasher {
    type Hasher = IntHash;
    fn build_hasher(&self) -> IntHash {
        IntHash(0)
    }
}

/// The state of [`IntHasher`].
struct IntHash(u64);

impl std::hash::Hasher for IntHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl InstanceKeys {
    /// Global ids for the names of every trace that name a kernel (as named) or a host call (without the version
    /// suffix), and for the names the model gives copies, sets and graphs; other names (NVTX ranges, which can be
    /// millions) get none. Only the grouping of the ids matters, not their values.
    fn name_all(&mut self, traces: &[Trace]) {
        for name in [MEMCPY_NAME, MEMSET_NAME, GRAPH_NAME] {
            self.global_name(name);
        }
        for trace in traces {
            let kernel_names = names_used(trace, &trace.kernels, |k| k.name);
            let call_names = names_used(trace, &trace.api_calls, |c| c.name);
            for (strip, used) in [(false, kernel_names), (true, call_names)] {
                let ids = (trace.names.iter().zip(used))
                    .map(|((_, name), used)| {
                        if !used {
                            return NONE;
                        }
                        self.global_name(if strip { strip_version(name) } else { name })
                    })
                    .collect();
                self.trace_names.push(ids);
            }
        }
    }

    /// The global id of name `id` of trace `trace`, with its version suffix stripped when `strip` (host calls);
    /// [`InstanceKeys::name_all`] made them.
    fn of_trace(&self, trace: usize, id: NameId, strip: bool) -> u32 {
        let ids = &self.trace_names[2 * trace + usize::from(strip)];
        ids.get(id.0 as usize).copied().unwrap_or(NONE)
    }

    /// The global id of `name`.
    fn global_name(&mut self, name: &str) -> u32 {
        match self.global_names.get(name) {
            Some(&id) => id,
            None => {
                let id = self.global_names.len() as u32;
                self.global_names.insert(name.to_string(), id);
                id
            }
        }
    }

    /// The global id of a name [`InstanceKeys::name_all`] registered.
    fn known(&self, name: &str) -> u32 {
        self.global_names.get(name).copied().unwrap_or(NONE)
    }
}

/// Per name id of `trace`, whether one of `events` is named by it, read on worker threads (tens of millions of
/// events, a few names: a flag is read before it is set, so that the threads do not take its cache line in turn).
fn names_used<T: Sync>(trace: &Trace, events: &[T], name: impl Fn(&T) -> NameId + Sync) -> Vec<bool> {
    let used: Vec<AtomicBool> = (0..trace.names.len()).map(|_| AtomicBool::new(false)).collect();
    events.par_iter().with_min_len(PAR_MIN_LEN).for_each(|event| {
        if let Some(flag) = used.get(name(event).0 as usize)
            && !flag.load(Ordering::Relaxed)
        {
            flag.store(true, Ordering::Relaxed);
        }
    });
    used.into_iter().map(AtomicBool::into_inner).collect()
}

/// The instance names of copies, sets and graph launches.
const MEMCPY_NAME: &str = "[CUDA memcpy]";
const MEMSET_NAME: &str = "[CUDA memset]";
const GRAPH_NAME: &str = "[CUDA graph]";

/// Index maps from a trace's event lists to operation ids (`NONE` when the event is not in the model).
pub(super) struct TraceMaps {
    pub(super) kernels: Vec<u32>,
    pub(super) memops: Vec<u32>,
    pub(super) graphs: Vec<u32>,
    pub(super) calls: Vec<u32>,
}

/// A GPU event of a rank before it becomes an operation.
pub(super) struct GpuEvent {
    pub(super) kind: OpKind,
    pub(super) index: u32,
    pub(super) stream: u32,
    pub(super) start_ns: i64,
    pub(super) end_ns: i64,
    pub(super) launch: Option<u32>,
}

/// Each rank's GPU work (kernels, copies and sets, graph executions), per stream in start order.
fn gpu_events_per_rank(traces: &[Trace], ranks: &[RankSpec]) -> Vec<Vec<GpuEvent>> {
    ranks.par_iter().map(|spec| gpu_events_of_rank(traces, spec)).collect()
}

/// One rank's GPU work, per stream in start order.
fn gpu_events_of_rank(traces: &[Trace], spec: &RankSpec) -> Vec<GpuEvent> {
    let trace = &traces[spec.key.trace];
    let device: DeviceIdx = spec.key.device;
    let mut events: Vec<GpuEvent> = Vec::new();
    for (index, k) in trace.kernels.iter().enumerate().filter(|(_, k)| k.device == device) {
        events.push(GpuEvent {
            kind: OpKind::Kernel,
            index: index as u32,
            stream: k.stream,
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            launch: k.launch,
        });
    }
    for (index, m) in trace.memops.iter().enumerate().filter(|(_, m)| m.device == device) {
        events.push(GpuEvent {
            kind: if m.is_memset() { OpKind::Set } else { OpKind::Copy },
            index: index as u32,
            stream: m.stream,
            start_ns: m.start_ns,
            end_ns: m.end_ns,
            launch: m.launch,
        });
    }
    for (index, g) in trace.graph_launches.iter().enumerate().filter(|(_, g)| g.device == device) {
        events.push(GpuEvent {
            kind: OpKind::Graph,
            index: index as u32,
            stream: g.stream,
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            launch: g.launch,
        });
    }
    events.sort_by_key(|e| (e.stream, e.start_ns, e.end_ns));
    events
}

/// What one host call of a rank in its window is, found before it becomes an operation.
struct HostCallFacts {
    /// Its index in the trace's API calls.
    call: u32,
    /// Its thread's ordinal on the rank.
    thread: u32,
    /// Its instance name's global id, version suffix stripped.
    name: u32,
    /// Its occurrence on the rank's thread (see [`Occurrences`]).
    occurrence: u32,
    /// A `cudaStreamWaitEvent`/`cuStreamWaitEvent` (not followed across streams: counted).
    stream_wait: bool,
}

/// What one GPU event of a rank is, found before it becomes an operation.
struct GpuEventFacts {
    /// Its index in the rank's event list.
    event: usize,
    /// Its instance name's global id (see [`InstanceKeys`]).
    name: u32,
    /// Its occurrence on the rank (see [`Occurrences`]).
    occurrence: u32,
    /// Its launching call (or, with none recorded, its own start) is in the rank's window.
    in_window: bool,
    /// The classifier's category of a kernel that is not communication.
    category: u16,
    /// The collective type of a communication kernel.
    comm: Option<CollectiveOp>,
    /// A communication kernel in the window matched across ranks.
    matched: bool,
}

/// The host process of each rank; a process driving several analysed GPUs gives its calls to the first.
fn process_ranks(traces: &[Trace], ranks: &[RankSpec]) -> HashMap<(usize, ProcessIdx), u32> {
    let mut process_rank: HashMap<(usize, ProcessIdx), u32> = HashMap::new();
    for (rank_index, spec) in ranks.iter().enumerate() {
        let trace = &traces[spec.key.trace];
        if let Some(process) = trace.devices.get(spec.key.device.0 as usize).and_then(|d| d.process) {
            process_rank.entry((spec.key.trace, process)).or_insert(rank_index as u32);
        }
    }
    process_rank
}

/// Per trace and process index, the rank its host calls go to ([`process_ranks`]).
struct RankOfProcess(Vec<Vec<Option<u32>>>);

impl RankOfProcess {
    fn new(traces: &[Trace], ranks: &[RankSpec]) -> RankOfProcess {
        let process_rank = process_ranks(traces, ranks);
        RankOfProcess(
            (traces.iter().enumerate())
                .map(|(t, trace)| {
                    (0..trace.processes.len() as u32).map(|p| process_rank.get(&(t, ProcessIdx(p))).copied()).collect()
                })
                .collect(),
        )
    }

    fn of(&self, trace: usize, process: ProcessIdx) -> Option<u32> {
        self.0[trace].get(process.0 as usize).copied().flatten()
    }
}

/// The categories the model gives copies, sets and graph launches.
#[derive(Clone, Copy)]
struct FixedCategories {
    memcpy: u16,
    memset: u16,
    graph: u16,
}

/// The id of category `name` in `categories`, added after the others when new.
pub(super) fn category_id(categories: &mut Vec<String>, name: &str) -> u16 {
    match categories.iter().position(|c| c == name) {
        Some(i) => i as u16,
        None => {
            categories.push(name.to_string());
            (categories.len() - 1) as u16
        }
    }
}

/// A trace's maps from GPU events to operation ids, borrowed apart from its host calls' map.
struct GpuMaps<'m> {
    kernels: &'m mut Vec<u32>,
    memops: &'m mut Vec<u32>,
    graphs: &'m mut Vec<u32>,
}

/// `count` operations to be written, every slot written once on worker threads first: their pages are taken there,
/// not by the one thread that then writes each part in order.
fn operation_slots(count: usize) -> Vec<Op> {
    const UNSET: Op = Op {
        kind: OpKind::HostCall,
        rank_index: NONE,
        index: NONE,
        lane: 0,
        category: 0,
        comm: false,
        matched: false,
        start_ns: 0,
        end_ns: 0,
        instance: NONE,
    };
    let mut ops = Vec::with_capacity(count);
    ops.par_extend(rayon::iter::repeat_n(UNSET, count).with_min_len(PAR_MIN_LEN));
    ops
}

impl Builder<'_> {
    /// Every rank's operations: the host calls of its process that start in its window, in trace and call order
    /// (first: GPU operations refer to them), then its GPU work whose launching call starts in the window (or that
    /// starts in it when no call is recorded), in rank and start order. Instance ids are numbered in order of first
    /// appearance in that order; a host call and a GPU operation never share a key (their kinds differ), so the two
    /// parts are numbered side by side and the GPU operations' ids then moved past the host calls'.
    pub(super) fn add_operations(&mut self, classifier: &Classifier) {
        let (traces, ranks, windows_ns) = (self.traces, self.ranks, self.windows_ns);
        // Categories in the order one pass would meet them: host, graph, copies, sets, then each collective.
        let host_category = self.category_id(HOST);
        let fixed = FixedCategories {
            graph: self.category_id(crate::figures::categories::CUDA_GRAPH),
            memcpy: self.category_id(crate::figures::categories::MEMCPY),
            memset: self.category_id(crate::figures::categories::MEMSET),
        };
        stage("model operations: instances named", || self.instances.name_all(traces));
        let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| classifier.classify_names(&t.names)).collect();
        let rank_of = RankOfProcess::new(traces, ranks);
        let this = &*self;
        let (host_facts, (events, gpu_facts)) = stage("model operations: facts per rank", || {
            rayon::join(
                || {
                    (0..ranks.len() as u32)
                        .into_par_iter()
                        .map(|r| this.host_call_facts(r, |t, p| rank_of.of(t, p) == Some(r)))
                        .collect::<Vec<_>>()
                },
                || {
                    let events = gpu_events_per_rank(traces, ranks);
                    let facts: Vec<Vec<GpuEventFacts>> = (ranks.par_iter().enumerate().zip(&events))
                        .map(|((r, spec), events)| this.gpu_event_facts(r, spec, events, &classes, classifier))
                        .collect();
                    (events, facts)
                },
            )
        });
        let host_count: usize = host_facts.iter().map(Vec::len).sum();
        let gpu_count = gpu_facts.iter().flatten().filter(|f| f.in_window).count();
        let mut ops = operation_slots(host_count + gpu_count);
        let (host_ops, gpu_ops) = ops.split_at_mut(host_count);
        let (call_maps, gpu_maps): (Vec<&mut Vec<u32>>, Vec<GpuMaps>) = (self.maps.iter_mut())
            .map(|m| (&mut m.calls, GpuMaps { kernels: &mut m.kernels, memops: &mut m.memops, graphs: &mut m.graphs }))
            .unzip();
        let host =
            HostCallsToWrite { traces, windows_ns, rank_of: &rank_of, facts: &host_facts, category: host_category };
        let gpu = GpuOpsToWrite { ranks, events: &events, facts: &gpu_facts, fixed, first_op: host_count as u32 };
        let categories = &mut self.categories;
        let (written, gpu_numbers) = stage("model operations: host calls beside GPU operations", || {
            rayon::join(|| host.write(host_ops, call_maps), || gpu.write(gpu_ops, gpu_maps, categories))
        });
        let host_instances = written.numbers.count;
        gpu_ops.par_iter_mut().with_min_len(PAR_MIN_LEN).for_each(|op| op.instance += host_instances);
        self.instance_count = host_instances + gpu_numbers.count;
        self.stats.host_calls_without_rank += written.without_rank;
        self.stats.stream_wait_calls_not_followed += written.stream_waits;
        self.ops = ops;
        self.rank_gpu_events = events;
    }

    /// What each host call of rank `rank_index` in its window is, in call order; `ours(trace, process)` tells the
    /// rank's calls. Threads are numbered and occurrences counted over all of the rank's calls.
    fn host_call_facts(&self, rank_index: u32, ours: impl Fn(usize, ProcessIdx) -> bool) -> Vec<HostCallFacts> {
        let trace_index = self.ranks[rank_index as usize].key.trace;
        let trace = &self.traces[trace_index];
        let mut threads: HashMap<u32, u32> = HashMap::new();
        let mut occurrences = Occurrences::default();
        let mut facts = Vec::new();
        for (index, call) in trace.api_calls.iter().enumerate().filter(|(_, c)| ours(trace_index, c.process)) {
            let next_thread = threads.len() as u32;
            let thread = *threads.entry(call.tid).or_insert(next_thread);
            let name = self.instances.of_trace(trace_index, call.name, true);
            let occurrence = occurrences.next(OpKind::HostCall, thread, name);
            if !self.in_window(rank_index, call.start_ns) {
                continue;
            }
            let base = strip_version(trace.names.get(call.name));
            let stream_wait = base == "cudaStreamWaitEvent" || base == "cuStreamWaitEvent";
            facts.push(HostCallFacts { call: index as u32, thread, name, occurrence, stream_wait });
        }
        facts
    }

    /// What each GPU event of one rank is, in start order (ties by position, so the order is the same on any thread
    /// count).
    fn gpu_event_facts(
        &self,
        rank_index: usize,
        spec: &RankSpec,
        events: &[GpuEvent],
        classes: &[Vec<KernelClass>],
        classifier: &Classifier,
    ) -> Vec<GpuEventFacts> {
        let trace_index = spec.key.trace;
        let trace = &self.traces[trace_index];
        let mut by_start: Vec<usize> = (0..events.len()).collect();
        by_start.sort_unstable_by_key(|&i| (events[i].start_ns, i));
        let mut occurrences = Occurrences::default();
        let fixed_names =
            [self.instances.known(MEMCPY_NAME), self.instances.known(MEMSET_NAME), self.instances.known(GRAPH_NAME)];
        by_start
            .into_iter()
            .map(|i| {
                let event = &events[i];
                let name = match event.kind {
                    OpKind::Kernel => {
                        self.instances.of_trace(trace_index, trace.kernels[event.index as usize].name, false)
                    }
                    OpKind::Copy => fixed_names[0],
                    OpKind::Set => fixed_names[1],
                    _ => fixed_names[2],
                };
                let anchor = match event.launch.and_then(|l| trace.api_calls.get(l as usize)) {
                    Some(call) => call.start_ns,
                    None => event.start_ns,
                };
                let mut facts = GpuEventFacts {
                    event: i,
                    name,
                    occurrence: occurrences.next(event.kind, 0, name),
                    in_window: self.in_window(rank_index as u32, anchor),
                    category: 0,
                    comm: None,
                    matched: false,
                };
                if event.kind == OpKind::Kernel {
                    let kernel = &trace.kernels[event.index as usize];
                    let class = Classifier::lookup(&classes[trace_index], kernel.name);
                    if classifier.is_communication(class.category) {
                        let meta = kernel.collective.and_then(|c| trace.collectives.get(c as usize));
                        facts.comm = Some(class.collective.or(meta.map(|m| m.op)).unwrap_or_default());
                    } else {
                        facts.category = class.category.0;
                    }
                    facts.matched = facts.in_window && self.matching.shares.contains_key(&(trace_index, event.index));
                }
                facts
            })
            .collect()
    }
}

/// The host calls to write: per rank, what each of its calls in its window is ([`HostCallFacts`], in call order).
struct HostCallsToWrite<'i> {
    traces: &'i [Trace],
    windows_ns: &'i [Option<(i64, i64)>],
    rank_of: &'i RankOfProcess,
    facts: &'i [Vec<HostCallFacts>],
    category: u16,
}

/// What writing the host calls gives besides the operations.
#[derive(Default)]
struct HostCallsWritten {
    numbers: InstanceNumbers,
    /// Calls in a window of no rank's process (counted where they start in some rank's window).
    without_rank: u64,
    /// `cudaStreamWaitEvent` calls, not followed across streams.
    stream_waits: u64,
}

impl HostCallsToWrite<'_> {
    /// Writes the calls into `ops` (one slot per fact) in trace and call order, and their operation ids (their
    /// places in `ops`, which the list begins with) into `call_maps`, one per trace.
    fn write(&self, ops: &mut [Op], mut call_maps: Vec<&mut Vec<u32>>) -> HostCallsWritten {
        let mut written = HostCallsWritten::default();
        let mut next_fact = vec![0usize; self.facts.len()];
        let mut slots = ops.iter_mut().enumerate();
        for ((trace_index, trace), map) in self.traces.iter().enumerate().zip(&mut call_maps) {
            for (index, call) in trace.api_calls.iter().enumerate() {
                let Some(rank_index) = self.rank_of.of(trace_index, call.process) else {
                    let counted =
                        self.windows_ns.iter().any(|w| w.is_none_or(|(a, b)| call.start_ns >= a && call.start_ns < b));
                    written.without_rank += u64::from(counted);
                    continue;
                };
                let rank = rank_index as usize;
                let Some(fact) = self.facts[rank].get(next_fact[rank]).filter(|f| f.call == index as u32) else {
                    continue;
                };
                next_fact[rank] += 1;
                written.stream_waits += u64::from(fact.stream_wait);
                // Each fact is met once here (a rank's facts are its trace's calls in order), and `ops` has a slot
                // per fact.
                let (op_id, slot) = slots.next().expect("one operation slot per host call in a window");
                map[index] = op_id as u32;
                *slot = Op {
                    kind: OpKind::HostCall,
                    rank_index,
                    index: index as u32,
                    lane: call.tid,
                    category: self.category,
                    comm: false,
                    matched: false,
                    start_ns: call.start_ns,
                    end_ns: call.end_ns,
                    instance: written.numbers.instance_of(OpKind::HostCall, fact.thread, fact.name, fact.occurrence),
                };
            }
        }
        written
    }
}

/// The GPU operations to write: per rank, its GPU events and what each is ([`GpuEventFacts`], in start order).
struct GpuOpsToWrite<'i> {
    ranks: &'i [RankSpec],
    events: &'i [Vec<GpuEvent>],
    facts: &'i [Vec<GpuEventFacts>],
    fixed: FixedCategories,
    /// The id of the first GPU operation: the host calls come first.
    first_op: u32,
}

impl GpuOpsToWrite<'_> {
    /// Writes the events in a window into `ops` (one slot each) in rank and start order, their operation ids into
    /// `maps` (one per trace), and the collectives' categories into `categories` in order of first appearance,
    /// inside a window or not. Instance ids are numbered from 0.
    fn write(&self, ops: &mut [Op], mut maps: Vec<GpuMaps>, categories: &mut Vec<String>) -> InstanceNumbers {
        let mut numbers = InstanceNumbers::default();
        let mut comm_categories: HashMap<CollectiveOp, u16> = HashMap::new();
        let mut slots = ops.iter_mut().zip(self.first_op..);
        for ((rank_index, spec), rank_facts) in self.ranks.iter().enumerate().zip(self.facts) {
            let trace_maps = &mut maps[spec.key.trace];
            for fact in rank_facts {
                let event = &self.events[rank_index][fact.event];
                let (category, comm) = match (event.kind, fact.comm) {
                    (OpKind::Kernel, Some(op)) => {
                        let category = comm_categories
                            .entry(op)
                            .or_insert_with(|| category_id(categories, &format!("{COMM_PREFIX}{}", op.label())));
                        (*category, true)
                    }
                    (OpKind::Kernel, None) => (fact.category, false),
                    (OpKind::Copy, _) => (self.fixed.memcpy, false),
                    (OpKind::Set, _) => (self.fixed.memset, false),
                    (OpKind::Graph, _) => (self.fixed.graph, false),
                    (OpKind::HostCall, _) => unreachable!("GPU events only"),
                };
                if !fact.in_window {
                    continue;
                }
                let (slot, op_id) = slots.next().expect("one operation slot per GPU event in a window");
                let map = match event.kind {
                    OpKind::Kernel => &mut *trace_maps.kernels,
                    OpKind::Graph => &mut *trace_maps.graphs,
                    _ => &mut *trace_maps.memops,
                };
                map[event.index as usize] = op_id;
                *slot = Op {
                    kind: event.kind,
                    rank_index: rank_index as u32,
                    index: event.index,
                    lane: event.stream,
                    category,
                    comm,
                    matched: fact.matched,
                    start_ns: event.start_ns,
                    end_ns: event.end_ns,
                    instance: numbers.instance_of(event.kind, 0, fact.name, fact.occurrence),
                };
            }
        }
        numbers
    }
}
