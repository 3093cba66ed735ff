//! The model's operations: each rank's host calls and GPU work in its window, one [`Op`] each, with the instance id
//! the no-straggler what-if groups them by. Every step runs on worker threads: each trace's events are sorted out to
//! their ranks in one pass; what each event is (its instance key, whether it is in the window, its category) is
//! found per rank; then the operations are written, the host calls a run of calls per task and the GPU work a rank
//! per task, each into its own slots of one list, and the instance keys numbered in order of first appearance. The
//! operation ids, categories and instance ids are those one thread adding the operations in turn would give.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use rayon::prelude::*;
use shardscope_model::{CollectiveOp, DeviceIdx, NameId, ProcessIdx, Trace};

use super::{Builder, HOST, NONE, Op, OpKind, PAR_MIN_LEN, RankSpec, strip_version};
use crate::figures::categories::{COMM_PREFIX, Classifier, KernelClass};
use crate::figures::workers::indices_by_owner;
use crate::stage_times::stage;

/// Names of the traces' events for the no-straggler what-if's instance keys: (kind, lane, global name, occurrence
/// on the rank's lane). The lane of a host call is its thread's ordinal on the rank (threads numbered by their
/// first call), so that a helper thread's calls do not shift the main thread's occurrences; GPU work uses lane 0
/// (stream ids may differ between ranks). The occurrences are counted per rank ([`Occurrences`], on worker
/// threads); [`number_instances`] numbers the keys in the order the operations are added.
#[derive(Default)]
pub(super) struct InstanceKeys {
    global_names: HashMap<String, u32>,
    /// Per trace and per name id of the trace: its global id as named (`2 × trace`) and with its `_vNNNN` version
    /// suffix stripped (`2 × trace + 1`, host calls), made once before the ranks are read.
    trace_names: Vec<Vec<u32>>,
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
pub(super) struct IntHasher;

impl std::hash::BuildHasher for IntHasher {
    type Hasher = IntHash;
    fn build_hasher(&self) -> IntHash {
        IntHash(0)
    }
}

/// The state of [`IntHasher`].
pub(super) struct IntHash(u64);

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

/// Which events of its trace are one rank's: their indices in the trace's lists, in order.
#[derive(Default)]
struct RankEventIndices {
    calls: Vec<u32>,
    kernels: Vec<u32>,
    memops: Vec<u32>,
    graphs: Vec<u32>,
}

/// Each rank's events, sorted out of its trace's lists in one pass per list (on worker threads) rather than one
/// pass per rank: the ranks of a file that holds several would each read every event of the file. A rank's host
/// calls are those of the process that drives its GPU ([`RankOfProcess`]), its GPU work that of its device.
fn events_per_rank(traces: &[Trace], ranks: &[RankSpec], rank_of: &RankOfProcess) -> Vec<RankEventIndices> {
    let per_trace: Vec<(Vec<usize>, Vec<RankEventIndices>)> = (traces.par_iter().enumerate())
        .map(|(t, trace)| {
            // The trace's ranks, numbered among themselves; the owner of each device.
            let members: Vec<usize> = (0..ranks.len()).filter(|&r| ranks[r].key.trace == t).collect();
            let mut member_of_rank = vec![None; ranks.len()];
            let mut member_of_device = vec![None; trace.devices.len()];
            for (m, &r) in members.iter().enumerate() {
                member_of_rank[r] = Some(m);
                if let Some(slot) = member_of_device.get_mut(ranks[r].key.device.0 as usize) {
                    slot.get_or_insert(m);
                }
            }
            let owner = |device: DeviceIdx| member_of_device.get(device.0 as usize).copied().flatten();
            let calls = indices_by_owner(&trace.api_calls, members.len(), |c| {
                rank_of.of(t, c.process).and_then(|r| member_of_rank[r as usize])
            });
            let kernels = indices_by_owner(&trace.kernels, members.len(), |k| owner(k.device));
            let memops = indices_by_owner(&trace.memops, members.len(), |m| owner(m.device));
            let graphs = indices_by_owner(&trace.graph_launches, members.len(), |g| owner(g.device));
            let lists = (calls.into_iter().zip(kernels).zip(memops).zip(graphs))
                .map(|(((calls, kernels), memops), graphs)| RankEventIndices { calls, kernels, memops, graphs })
                .collect();
            (members, lists)
        })
        .collect();
    let mut per_rank: Vec<RankEventIndices> = (0..ranks.len()).map(|_| RankEventIndices::default()).collect();
    for (members, lists) in per_trace {
        for (r, indices) in members.into_iter().zip(lists) {
            per_rank[r] = indices;
        }
    }
    per_rank
}

/// One rank's GPU work (`own`: its events' indices in its trace), per stream in start order.
fn gpu_events_of_rank(trace: &Trace, own: &RankEventIndices) -> Vec<GpuEvent> {
    let mut events: Vec<GpuEvent> = Vec::with_capacity(own.kernels.len() + own.memops.len() + own.graphs.len());
    for &index in &own.kernels {
        let k = &trace.kernels[index as usize];
        events.push(GpuEvent {
            kind: OpKind::Kernel,
            index,
            stream: k.stream,
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            launch: k.launch,
        });
    }
    for &index in &own.memops {
        let m = &trace.memops[index as usize];
        events.push(GpuEvent {
            kind: if m.is_memset() { OpKind::Set } else { OpKind::Copy },
            index,
            stream: m.stream,
            start_ns: m.start_ns,
            end_ns: m.end_ns,
            launch: m.launch,
        });
    }
    for &index in &own.graphs {
        let g = &trace.graph_launches[index as usize];
        events.push(GpuEvent {
            kind: OpKind::Graph,
            index,
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

/// What each event of every rank is ([`Builder::facts_per_rank`]), and the slots of their instance keys.
struct RanksFacts {
    host: Vec<RankFacts<HostCallFacts>>,
    /// Per rank, its GPU events per stream in start order (the GPU facts refer to them by position).
    events: Vec<Vec<GpuEvent>>,
    gpu: Vec<RankFacts<GpuEventFacts>>,
    slots: KeySlots,
}

/// What each event of one rank is, and how often each instance key's (kind, lane, name) came on the rank.
struct RankFacts<F> {
    facts: Vec<F>,
    occurrences: Occurrences,
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

/// Host call operations written per run of this many calls of a trace, on worker threads.
const CALLS_PER_TASK: usize = 1 << 15;

/// `count` operations to be written, all bytes zero: memory the system gives zeroed as the tasks that write the
/// operations first touch it (setting every operation first would take a pass over gigabytes).
fn operation_slots(count: usize) -> Vec<Op> {
    bytemuck::zeroed_vec(count)
}

/// Where each instance key (kind, lane, name, occurrence) has its slot: a run of slots per (kind, lane, name), one
/// per occurrence on the rank where it came most often. Operations hold their key's slot until
/// [`number_instances`] turns slots into instance ids.
struct KeySlots {
    first_slot: HashMap<(u8, u32, u32), u32, IntHasher>,
    count: usize,
}

impl KeySlots {
    /// The slots of every rank's keys, runs laid out in key order.
    fn new<'o>(per_rank: impl Iterator<Item = &'o Occurrences>) -> KeySlots {
        let mut most: HashMap<(u8, u32, u32), u32, IntHasher> = HashMap::default();
        for occurrences in per_rank {
            for (&key, &count) in &occurrences.0 {
                let held = most.entry(key).or_insert(0);
                *held = (*held).max(count);
            }
        }
        let mut keys: Vec<((u8, u32, u32), u32)> = most.into_iter().collect();
        keys.sort_unstable();
        let mut first_slot = HashMap::with_capacity_and_hasher(keys.len(), IntHasher);
        let mut count = 0usize;
        for (key, occurrences) in keys {
            first_slot.insert(key, count as u32);
            count += occurrences as usize;
        }
        KeySlots { first_slot, count }
    }

    /// The slot of occurrence `occurrence` of (`kind`, `lane`, `name`), a key the ranks' counts hold.
    fn of(&self, kind: OpKind, lane: u32, name: u32, occurrence: u32) -> u32 {
        self.first_slot.get(&(kind as u8, lane, name)).map_or(NONE, |first| first + occurrence)
    }
}

/// Turns each operation's key slot (in [`Op::instance`]) into its instance id: keys numbered in order of first
/// appearance among `ops`, as one thread giving a new id to each new key would, on worker threads. Returns how many.
fn number_instances(ops: &mut [Op], slot_count: usize) -> u32 {
    let atomics =
        |count: usize| -> Vec<AtomicU32> { (0..count).into_par_iter().map(|_| AtomicU32::new(NONE)).collect() };
    // Each key's first operation.
    let first_op = atomics(slot_count);
    ops.par_iter().with_min_len(PAR_MIN_LEN).enumerate().for_each(|(o, op)| {
        first_op[op.instance as usize].fetch_min(o as u32, Ordering::Relaxed);
    });
    let is_first = |o: usize, op: &Op| first_op[op.instance as usize].load(Ordering::Relaxed) == o as u32;
    // New keys per run of operations, then each run's first id.
    let per_run: Vec<u32> = (ops.par_chunks(PAR_MIN_LEN).enumerate())
        .map(|(run, chunk)| {
            let at = run * PAR_MIN_LEN;
            chunk.iter().enumerate().filter(|&(i, op)| is_first(at + i, op)).count() as u32
        })
        .collect();
    let first_ids: Vec<u32> = per_run.iter().scan(0u32, |next, &n| Some(std::mem::replace(next, *next + n))).collect();
    let id_of_slot = atomics(slot_count);
    (ops.par_chunks(PAR_MIN_LEN).enumerate().zip(&first_ids)).for_each(|((run, chunk), &first_id)| {
        let at = run * PAR_MIN_LEN;
        let firsts = chunk.iter().enumerate().filter(|&(i, op)| is_first(at + i, op));
        for ((_, op), id) in firsts.zip(first_id..) {
            id_of_slot[op.instance as usize].store(id, Ordering::Relaxed);
        }
    });
    ops.par_iter_mut().with_min_len(PAR_MIN_LEN).for_each(|op| {
        op.instance = id_of_slot[op.instance as usize].load(Ordering::Relaxed);
    });
    per_run.iter().sum()
}

impl Builder<'_> {
    /// Every rank's operations: the host calls of its process that start in its window, in trace and call order
    /// (first: GPU operations refer to them), then its GPU work whose launching call starts in the window (or that
    /// starts in it when no call is recorded), in rank and start order. Instance ids are numbered in order of first
    /// appearance in that order. Each part is written on worker threads: the host calls a run of calls at a time,
    /// the GPU work a rank at a time.
    pub(super) fn add_operations(&mut self, classifier: &Classifier) {
        // Categories in the order one pass would meet them: host, graph, copies, sets, then each collective.
        let host_category = self.category_id(HOST);
        let fixed = FixedCategories {
            graph: self.category_id(crate::figures::categories::CUDA_GRAPH),
            memcpy: self.category_id(crate::figures::categories::MEMCPY),
            memset: self.category_id(crate::figures::categories::MEMSET),
        };
        let traces = self.traces;
        stage("model operations: instances named", || self.instances.name_all(traces));
        let rank_of = RankOfProcess::new(traces, self.ranks);
        let facts = self.facts_per_rank(classifier, &rank_of);
        let comm_categories = self.comm_categories(&facts.gpu);
        stage("model operations: written", || {
            let gpu = GpuOpsToWrite {
                ranks: self.ranks,
                events: &facts.events,
                facts: &facts.gpu,
                slots: &facts.slots,
                fixed,
                comm_categories,
            };
            self.write_operations(&facts, &rank_of, host_category, gpu)
        });
        self.rank_gpu_events = facts.events;
    }

    /// What each event of each rank is, on worker threads: each trace's events sorted out to their ranks in one
    /// pass, then per rank its host calls beside its GPU events.
    fn facts_per_rank(&self, classifier: &Classifier, rank_of: &RankOfProcess) -> RanksFacts {
        let (traces, ranks) = (self.traces, self.ranks);
        let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| classifier.classify_names(&t.names)).collect();
        let own = stage("model operations: events per rank", || events_per_rank(traces, ranks, rank_of));
        let (host, (events, gpu)) = stage("model operations: facts per rank", || {
            rayon::join(
                || -> Vec<RankFacts<HostCallFacts>> {
                    (0..ranks.len()).into_par_iter().map(|r| self.host_call_facts(r as u32, &own[r].calls)).collect()
                },
                || {
                    let events: Vec<Vec<GpuEvent>> = (ranks.par_iter().zip(&own))
                        .map(|(spec, own)| gpu_events_of_rank(&traces[spec.key.trace], own))
                        .collect();
                    let facts: Vec<RankFacts<GpuEventFacts>> = (ranks.par_iter().enumerate().zip(&events))
                        .map(|((r, spec), events)| self.gpu_event_facts(r, spec, events, &classes, classifier))
                        .collect();
                    (events, facts)
                },
            )
        });
        let slots = KeySlots::new(host.iter().map(|r| &r.occurrences).chain(gpu.iter().map(|r| &r.occurrences)));
        RanksFacts { host, events, gpu, slots }
    }

    /// Writes the operations of `facts`: the host calls (`host_category`) beside the GPU work (`gpu`), each into
    /// its own part of one list, their ids into the trace maps; then numbers the instances.
    fn write_operations(
        &mut self,
        facts: &RanksFacts,
        rank_of: &RankOfProcess,
        host_category: u16,
        gpu: GpuOpsToWrite,
    ) {
        let host_count: usize = facts.host.iter().map(|r| r.facts.len()).sum();
        let gpu_counts: Vec<usize> = facts.gpu.iter().map(|r| r.facts.iter().filter(|f| f.in_window).count()).collect();
        let mut ops = operation_slots(host_count + gpu_counts.iter().sum::<usize>());
        let (host_ops, gpu_ops) = ops.split_at_mut(host_count);
        let host = HostCallsToWrite {
            traces: self.traces,
            ranks: self.ranks,
            windows_ns: self.windows_ns,
            rank_of,
            facts: &facts.host,
            slots: &facts.slots,
            category: host_category,
        };
        let mut maps = std::mem::take(&mut self.maps);
        let (call_maps, gpu_maps): (Vec<&mut Vec<u32>>, Vec<GpuMaps>) = (maps.iter_mut())
            .map(|m| (&mut m.calls, GpuMaps::new(&mut m.kernels, &mut m.memops, &mut m.graphs)))
            .unzip();
        let ((without_rank, stream_waits), gpu_maps) = rayon::join(
            || host.write(host_ops, call_maps),
            || gpu.write(gpu_ops, host_count as u32, &gpu_counts, gpu_maps),
        );
        for (trace_maps, gpu_maps) in maps.iter_mut().zip(gpu_maps) {
            gpu_maps.into_maps(trace_maps);
        }
        self.maps = maps;
        self.instance_count = number_instances(&mut ops, facts.slots.count);
        self.stats.host_calls_without_rank += without_rank;
        self.stats.stream_wait_calls_not_followed += stream_waits;
        self.ops = ops;
    }

    /// The categories of the collectives, numbered in order of first appearance over the ranks in turn (inside a
    /// window or not): each rank's collectives in its order of first appearance, found on worker threads.
    fn comm_categories(&mut self, gpu_facts: &[RankFacts<GpuEventFacts>]) -> HashMap<CollectiveOp, u16> {
        let per_rank: Vec<Vec<CollectiveOp>> = (gpu_facts.par_iter())
            .map(|rank| {
                let mut seen: Vec<CollectiveOp> = Vec::new();
                for op in rank.facts.iter().filter_map(|f| f.comm) {
                    if !seen.contains(&op) {
                        seen.push(op);
                    }
                }
                seen
            })
            .collect();
        let mut categories = HashMap::new();
        for op in per_rank.into_iter().flatten() {
            categories.entry(op).or_insert_with(|| self.category_id(&format!("{COMM_PREFIX}{}", op.label())));
        }
        categories
    }

    /// What each host call of rank `rank_index` in its window is, in call order; `ours(trace, process)` tells the
    /// rank's calls. Threads are numbered and occurrences counted over all of the rank's calls.
    fn host_call_facts(&self, rank_index: u32, calls: &[u32]) -> RankFacts<HostCallFacts> {
        let trace_index = self.ranks[rank_index as usize].key.trace;
        let trace = &self.traces[trace_index];
        let mut threads: HashMap<u32, u32> = HashMap::new();
        let mut occurrences = Occurrences::default();
        let mut facts = Vec::new();
        for &index in calls {
            let call = &trace.api_calls[index as usize];
            let next_thread = threads.len() as u32;
            let thread = *threads.entry(call.tid).or_insert(next_thread);
            let name = self.instances.of_trace(trace_index, call.name, true);
            let occurrence = occurrences.next(OpKind::HostCall, thread, name);
            if !self.in_window(rank_index, call.start_ns) {
                continue;
            }
            let base = strip_version(trace.names.get(call.name));
            let stream_wait = base == "cudaStreamWaitEvent" || base == "cuStreamWaitEvent";
            facts.push(HostCallFacts { call: index, thread, name, occurrence, stream_wait });
        }
        RankFacts { facts, occurrences }
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
    ) -> RankFacts<GpuEventFacts> {
        let trace_index = spec.key.trace;
        let trace = &self.traces[trace_index];
        let mut by_start: Vec<usize> = (0..events.len()).collect();
        by_start.sort_unstable_by_key(|&i| (events[i].start_ns, i));
        let mut occurrences = Occurrences::default();
        let fixed_names =
            [self.instances.known(MEMCPY_NAME), self.instances.known(MEMSET_NAME), self.instances.known(GRAPH_NAME)];
        let facts = by_start
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
                        // The matching holds only kernels the classifier calls communication: no other is looked up.
                        facts.matched =
                            facts.in_window && self.matching.shares.contains_key(&(trace_index, event.index));
                    } else {
                        facts.category = class.category.0;
                    }
                }
                facts
            })
            .collect();
        RankFacts { facts, occurrences }
    }
}

/// The host calls to write: per rank, what each of its calls in its window is ([`HostCallFacts`], in call order).
struct HostCallsToWrite<'i> {
    traces: &'i [Trace],
    ranks: &'i [RankSpec],
    windows_ns: &'i [Option<(i64, i64)>],
    rank_of: &'i RankOfProcess,
    facts: &'i [RankFacts<HostCallFacts>],
    slots: &'i KeySlots,
    category: u16,
}

/// A run of one trace's calls whose operations one task writes.
struct CallRun {
    trace: usize,
    calls: std::ops::Range<usize>,
    /// The id of its first operation.
    first_op: u32,
    /// How many of its calls are operations.
    ops: usize,
}

impl HostCallsToWrite<'_> {
    /// Writes the calls into `ops` (one slot per fact) in trace and call order, a run of calls per task, and their
    /// operation ids (their places in `ops`, which the list begins with) into `call_maps`, one per trace. Returns
    /// the calls of no rank's process that start in some rank's window, and the stream waits not followed.
    fn write(&self, ops: &mut [Op], call_maps: Vec<&mut Vec<u32>>) -> (u64, u64) {
        let runs = self.runs();
        let mut rest = ops;
        let mut run_ops = Vec::with_capacity(runs.len());
        for run in &runs {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(run.ops);
            run_ops.push(head);
            rest = tail;
        }
        let run_maps = call_maps.into_iter().flat_map(|map| map.chunks_mut(CALLS_PER_TASK));
        (runs.par_iter().zip(run_ops).zip(run_maps.collect::<Vec<_>>()))
            .map(|((run, ops), map)| self.write_run(run, ops, map))
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// The runs of every trace's calls, in order, with how many operations each holds (counted on worker threads).
    fn runs(&self) -> Vec<CallRun> {
        let mut runs: Vec<CallRun> = (self.traces.iter().enumerate())
            .flat_map(|(trace, t)| {
                let calls = t.api_calls.len();
                (0..calls).step_by(CALLS_PER_TASK).map(move |start| CallRun {
                    trace,
                    calls: start..(start + CALLS_PER_TASK).min(calls),
                    first_op: 0,
                    ops: 0,
                })
            })
            .collect();
        runs.par_iter_mut().for_each(|run| {
            run.ops = (self.ranks_of(run.trace))
                .map(|r| self.first_fact(r, run.calls.end) - self.first_fact(r, run.calls.start))
                .sum()
        });
        let mut next = 0u32;
        for run in &mut runs {
            run.first_op = next;
            next += run.ops as u32;
        }
        runs
    }

    /// The ranks whose calls are those of trace `trace`.
    fn ranks_of(&self, trace: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.ranks.len()).filter(move |&r| self.ranks[r].key.trace == trace)
    }

    /// The first fact of rank `rank` at call `call` or later.
    fn first_fact(&self, rank: usize, call: usize) -> usize {
        self.facts[rank].facts.partition_point(|f| (f.call as usize) < call)
    }

    /// Writes one run's operations into `ops` and their ids into `map` (the run's part of its trace's map).
    fn write_run(&self, run: &CallRun, ops: &mut [Op], map: &mut [u32]) -> (u64, u64) {
        let (mut without_rank, mut stream_waits) = (0, 0);
        let mut next_fact = vec![0usize; self.ranks.len()];
        for r in self.ranks_of(run.trace) {
            next_fact[r] = self.first_fact(r, run.calls.start);
        }
        let mut slots = ops.iter_mut().zip(run.first_op..);
        let calls = &self.traces[run.trace].api_calls[run.calls.clone()];
        for ((index, call), map_slot) in (run.calls.clone()).zip(calls).zip(map) {
            let Some(rank_index) = self.rank_of.of(run.trace, call.process) else {
                let counted =
                    self.windows_ns.iter().any(|w| w.is_none_or(|(a, b)| call.start_ns >= a && call.start_ns < b));
                without_rank += u64::from(counted);
                continue;
            };
            let rank = rank_index as usize;
            let Some(fact) = self.facts[rank].facts.get(next_fact[rank]).filter(|f| f.call as usize == index) else {
                continue;
            };
            next_fact[rank] += 1;
            stream_waits += u64::from(fact.stream_wait);
            // The run's slots were counted from the same facts.
            let (slot, op_id) = slots.next().expect("one operation slot per host call in a window");
            *map_slot = op_id;
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
                instance: self.slots.of(OpKind::HostCall, fact.thread, fact.name, fact.occurrence),
            };
        }
        (without_rank, stream_waits)
    }
}

/// A trace's maps from GPU events to operation ids while the ranks' tasks fill them (several ranks may share a
/// trace, each writing its own events' entries).
struct GpuMaps {
    kernels: Vec<AtomicU32>,
    memops: Vec<AtomicU32>,
    graphs: Vec<AtomicU32>,
}

impl GpuMaps {
    /// Takes the maps out of `kernels`, `memops` and `graphs` (in their own memory).
    fn new(kernels: &mut Vec<u32>, memops: &mut Vec<u32>, graphs: &mut Vec<u32>) -> GpuMaps {
        let atomic = |map: &mut Vec<u32>| std::mem::take(map).into_iter().map(AtomicU32::new).collect();
        GpuMaps { kernels: atomic(kernels), memops: atomic(memops), graphs: atomic(graphs) }
    }

    /// Puts the maps back into `maps`.
    fn into_maps(self, maps: &mut TraceMaps) {
        let plain = |map: Vec<AtomicU32>| map.into_iter().map(AtomicU32::into_inner).collect();
        (maps.kernels, maps.memops, maps.graphs) = (plain(self.kernels), plain(self.memops), plain(self.graphs));
    }
}

/// The GPU operations to write: per rank, its GPU events and what each is ([`GpuEventFacts`], in start order).
struct GpuOpsToWrite<'i> {
    ranks: &'i [RankSpec],
    events: &'i [Vec<GpuEvent>],
    facts: &'i [RankFacts<GpuEventFacts>],
    slots: &'i KeySlots,
    fixed: FixedCategories,
    comm_categories: HashMap<CollectiveOp, u16>,
}

impl GpuOpsToWrite<'_> {
    /// Writes each rank's events in its window into `ops` (whose first operation has id `first_op`; `counts`: per
    /// rank, how many), in rank and start order, a rank per task, and their ids into `maps` (one per trace).
    fn write(&self, ops: &mut [Op], first_op: u32, counts: &[usize], maps: Vec<GpuMaps>) -> Vec<GpuMaps> {
        let mut rest = ops;
        let mut rank_ops = Vec::with_capacity(counts.len());
        let mut first_ops = Vec::with_capacity(counts.len());
        let mut next = first_op;
        for &count in counts {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(count);
            rank_ops.push(head);
            first_ops.push(next);
            rest = tail;
            next += count as u32;
        }
        (rank_ops.into_par_iter().zip(first_ops).enumerate()).for_each(|(rank, (ops, first))| {
            self.write_rank(rank, ops, first, &maps[self.ranks[rank].key.trace]);
        });
        maps
    }

    /// Writes rank `rank`'s operations into `ops`, ids from `first_op`.
    fn write_rank(&self, rank: usize, ops: &mut [Op], first_op: u32, maps: &GpuMaps) {
        let mut slots = ops.iter_mut().zip(first_op..);
        for fact in self.facts[rank].facts.iter().filter(|f| f.in_window) {
            let event = &self.events[rank][fact.event];
            let (category, comm) = match (event.kind, fact.comm) {
                // Every collective of the facts has its category ([`Builder::comm_categories`]).
                (OpKind::Kernel, Some(op)) => (*self.comm_categories.get(&op).expect("a collective's category"), true),
                (OpKind::Kernel, None) => (fact.category, false),
                (OpKind::Copy, _) => (self.fixed.memcpy, false),
                (OpKind::Set, _) => (self.fixed.memset, false),
                (OpKind::Graph, _) => (self.fixed.graph, false),
                (OpKind::HostCall, _) => unreachable!("GPU events only"),
            };
            // The rank's slots were counted from the same facts.
            let (slot, op_id) = slots.next().expect("one operation slot per GPU event in a window");
            let map = match event.kind {
                OpKind::Kernel => &maps.kernels,
                OpKind::Graph => &maps.graphs,
                _ => &maps.memops,
            };
            map[event.index as usize].store(op_id, Ordering::Relaxed);
            *slot = Op {
                kind: event.kind,
                rank_index: rank as u32,
                index: event.index,
                lane: event.stream,
                category,
                comm,
                matched: fact.matched,
                start_ns: event.start_ns,
                end_ns: event.end_ns,
                instance: self.slots.of(event.kind, 0, fact.name, fact.occurrence),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation holding key slot `slot`.
    fn holding(slot: u32) -> Op {
        Op { instance: slot, ..bytemuck::Zeroable::zeroed() }
    }

    /// Keys numbered on worker threads, over many runs of operations, as one thread numbering each new key in turn
    /// would: keys met again at random, keys met once, keys whose first operation ends a run.
    #[test]
    fn instances_are_numbered_in_order_of_first_appearance() {
        let count = 5 * PAR_MIN_LEN + 123;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for slots in [64u64, 10_000, 1 << 20] {
            let mut ops: Vec<Op> = (0..count).map(|_| holding(random(slots) as u32)).collect();
            ops[PAR_MIN_LEN - 1] = holding(slots as u32 - 1);
            let mut expected = Vec::with_capacity(count);
            let mut ids: HashMap<u32, u32> = HashMap::new();
            for op in &ops {
                let next = ids.len() as u32;
                expected.push(*ids.entry(op.instance).or_insert(next));
            }
            let numbered = number_instances(&mut ops, slots as usize);
            assert_eq!(numbered as usize, ids.len(), "{slots} slots");
            assert!(ops.iter().map(|op| op.instance).eq(expected), "{slots} slots");
        }
    }
}
