//! The dependency model of a sharded run: which recorded operation had to wait for which, on every rank, and a
//! replay of it with changed durations.
//!
//! **Operations.** Every GPU kernel, copy, set and whole-graph execution of a rank, and every CUDA API call of the
//! host process that drives the rank's GPU. An operation is two vertices: its *start* and its *end*.
//!
//! **Edges** (each from the start or end of one operation to the start or end of another):
//! - *stream order*: a GPU operation starts after the previous one on its stream ends;
//! - *launch*: a GPU operation starts after its launching call (linked by correlation id) starts;
//! - *host order*: a call starts after the previous call on its thread ends (a call nested in another starts
//!   after its parent starts);
//! - *host sync*: a blocking call (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`,
//!   synchronous `cudaMemcpy`, their driver forms) ends after the GPU operation it waited for: the operation of
//!   its rank, issued before the call, that ended last while the call was blocked;
//! - *collective*: every matched instance of a collective or point-to-point operation (see
//!   [`crate::figures::collectives`]) gets one barrier vertex that is reached when the last member starts; each member's
//!   transfer begins at the later of its own start and the barrier, so a collective cannot finish before the
//!   last rank arrives. The time a member spends before its transfer begins is its wait; it is not a duration;
//! - *cross-stream (inferred)*: the trace model keeps no event handles, so `cudaEventRecord` /
//!   `cudaStreamWaitEvent` pairs cannot be followed. A GPU operation that started later than all its modelled
//!   dependencies allow and within [`CROSS_STREAM_SLACK_NS`] of the end of an operation on another stream of the
//!   same GPU is taken to have waited for that operation.
//!
//! **Timing.** A vertex's time is the latest of its predecessors' times (each plus a lag) plus its *own* time.
//! For an end vertex the own time is the operation's duration (for a matched collective, its transfer time; for a
//! blocking call, the time from the awaited GPU work's end to the call's return). For a start vertex it is the
//! delay nothing in the model explains: on a host thread, host work between two calls (a *host gap*); on a GPU,
//! launch latency, contention, or waits the trace does not record (a *GPU delay*). Lags are zero except where the
//! trace contradicts an edge (an operation that starts slightly before its predecessor ends): then the lag is the
//! (negative) measured difference, so that replaying the model with the measured own times reproduces every
//! recorded time exactly. Work outside the analysed window keeps its measured times.
//!
//! **Replay.** Earliest-start simulation in topological order with changed own times: [`Graph::simulate`]. A model
//! whose dependencies are known rather than inferred (the straggler paper's training-operation traces, synthetic
//! cases) is built with [`Graph::from_explicit`] and replayed by the same code.
//!
//! **Critical path.** From the end of the GPU operation that ends last, walk back along the *binding*
//! dependency of each vertex (the predecessor whose time plus lag is latest; on ties the operation's own start,
//! then the first recorded edge) until the window start. The walk crosses ranks at collectives: the barrier's
//! binding predecessor is the start of the member that arrived last. [`Graph::critical_path`].
//!
//! Memory is linear in the number of events: two vertices per operation, one per collective instance, and a
//! bounded number of edges per vertex.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

use rayon::prelude::*;
use rdst::RadixSort;
use shardscope_model::Trace;

use crate::figures::categories::Classifier;
use crate::figures::collectives::{Matching, RankKey};
use crate::stage_times::stage;

mod host_order;
mod operations;
mod segments;
use operations::{GpuEvent, InstanceKeys, TraceMaps};

/// The longest gap between the end of an operation on another stream and the start of a GPU operation that is
/// taken as an (inferred) cross-stream wait.
pub const CROSS_STREAM_SLACK_NS: i64 = 10_000;

/// Category of host calls (their own time on the host).
pub const HOST: &str = "host";
/// Category of host gaps on the critical path (host work between two calls).
pub const HOST_GAP: &str = "host_gap";
/// Category of unexplained GPU delays on the critical path (launch latency, contention, unrecorded waits).
pub const GPU_DELAY: &str = "gpu_delay";
/// Category of the critical path's time between two capture windows of its rank: nothing was recorded then, so
/// the wait is neither a host gap nor a GPU delay.
pub const CAPTURE_GAP: &str = "capture_gap";
/// Category of the critical path's time before its first operation: waiting for work before the window.
pub const BEFORE_WINDOW: &str = "before_window";

/// Items a worker thread takes at least in the model's passes on worker threads: a small model's passes stay on
/// one thread instead of waking others for microseconds of work.
const PAR_MIN_LEN: usize = 1 << 14;

/// GPU events a worker takes per task when the model adds stream order and launch edges.
const EVENTS_PER_TASK: usize = 1 << 16;

/// How far back [`Graph::build`] looks among the ends of a rank's GPU operations for the one a blocking call or a
/// late GPU operation waited for.
const SEARCH_BACK: usize = 64;

/// What an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Zeroable)]
#[repr(u8)]
pub enum OpKind {
    /// A GPU kernel.
    Kernel,
    /// A memory copy.
    Copy,
    /// A memory set.
    Set,
    /// A CUDA graph recorded as one execution.
    Graph,
    /// A CUDA API call on a host thread.
    HostCall,
}

impl OpKind {
    /// True for work on the GPU.
    pub fn on_gpu(self) -> bool {
        self != OpKind::HostCall
    }
}

/// One operation of the model.
#[derive(Debug, Clone, Copy, bytemuck::Zeroable)]
pub struct Op {
    /// What it is.
    pub kind: OpKind,
    /// Index of its rank in [`Graph::ranks`] (whose key names its trace: [`Graph::trace_of`]; not kept here, so
    /// that an operation is 40 bytes, not 48).
    pub rank_index: u32,
    /// Index in its trace's kernels, memops, graph launches or API calls.
    pub index: u32,
    /// CUDA stream (GPU work) or OS thread id (host calls).
    pub lane: u32,
    /// Index in [`Graph::categories`].
    pub category: u16,
    /// True for communication kernels.
    pub comm: bool,
    /// True for a communication kernel matched across ranks (its end waits for the collective's barrier).
    pub matched: bool,
    /// Measured start.
    pub start_ns: i64,
    /// Measured end.
    pub end_ns: i64,
    /// Index of the same operation's instance across ranks (name and occurrence on its rank), for the
    /// no-straggler what-if.
    pub instance: u32,
}

/// Why one vertex waited for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    /// An operation's end after its own start.
    Run,
    /// Previous operation on the same GPU stream.
    StreamOrder,
    /// The launching call.
    Launch,
    /// Previous call on the same host thread.
    HostOrder,
    /// The call this call is nested in.
    NestedCall,
    /// A blocking call waiting for GPU work.
    HostSync,
    /// An operation on another stream of the same GPU (inferred from timing).
    CrossStream,
    /// A member's arrival at a collective's barrier.
    CollectiveArrival,
    /// A collective's barrier releasing a member's transfer.
    CollectiveRelease,
    /// Removed to break a cycle (inconsistent input); ignored everywhere.
    Dropped,
}

impl EdgeKind {
    /// How many kinds there are.
    const COUNT: usize = 10;
    /// Every kind, in declaration order (`ALL[k as usize] == k`).
    const ALL: [EdgeKind; EdgeKind::COUNT] = [
        EdgeKind::Run,
        EdgeKind::StreamOrder,
        EdgeKind::Launch,
        EdgeKind::HostOrder,
        EdgeKind::NestedCall,
        EdgeKind::HostSync,
        EdgeKind::CrossStream,
        EdgeKind::CollectiveArrival,
        EdgeKind::CollectiveRelease,
        EdgeKind::Dropped,
    ];

    /// Words for reports.
    pub fn describe(self) -> &'static str {
        match self {
            EdgeKind::Run => "own start",
            EdgeKind::StreamOrder => "stream order",
            EdgeKind::Launch => "launch",
            EdgeKind::HostOrder => "host order",
            EdgeKind::NestedCall => "enclosing call",
            EdgeKind::HostSync => "host sync on GPU work",
            EdgeKind::CrossStream => "cross-stream (inferred)",
            EdgeKind::CollectiveArrival => "collective arrival",
            EdgeKind::CollectiveRelease => "collective wait",
            EdgeKind::Dropped => "dropped",
        }
    }
}

/// An incoming edge of a vertex.
#[derive(Debug, Clone, Copy)]
struct Edge {
    source: u32,
    lag_ns: i64,
    kind: EdgeKind,
}

impl Edge {
    /// The edge in two words, `[source | kind << 32, lag]`: how the incoming lists hold it.
    fn words(self) -> [u64; 2] {
        [u64::from(self.source) | (self.kind as u64) << 32, self.lag_ns as u64]
    }

    /// The edge [`Edge::words`] gave.
    fn from_words([source_and_kind, lag]: [u64; 2]) -> Edge {
        let kind = EdgeKind::ALL[(source_and_kind >> 32) as usize];
        Edge { source: source_and_kind as u32, lag_ns: lag as i64, kind }
    }
}

/// An edge as the constructors list it, in three words: `[target << 32 | place in the list, edge words]` (the place
/// is set when the incoming lists are made). Words, so that the list can be sorted into the incoming lists in place
/// and then packed into two words an edge in the same memory ([`incoming_lists`]).
type ListedEdge = [u64; 3];

/// `edge`, whose target is `target`, as listed.
fn listed(target: u32, edge: Edge) -> ListedEdge {
    let [first, second] = edge.words();
    [u64::from(target) << 32, first, second]
}

/// The target and the edge of a listed edge.
fn unlisted(listed: &ListedEdge) -> (u32, Edge) {
    ((listed[0] >> 32) as u32, Edge::from_words([listed[1], listed[2]]))
}

/// One rank of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankSpec {
    /// Which GPU of which trace.
    pub key: RankKey,
    /// Its rank number.
    pub rank: u32,
}

/// What could not be modelled, and what was inferred, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ModelStats {
    /// Operations in the model.
    pub ops: u64,
    /// Of them on GPUs.
    pub gpu_ops: u64,
    /// Of them host calls.
    pub host_calls: u64,
    /// Edges per kind (without the one from each operation's start to its end).
    pub edges: std::collections::BTreeMap<String, u64>,
    /// Matched collective instances with a member in the model (one barrier each).
    pub collective_instances: u64,
    /// Communication kernels in the model not matched on another rank: plain kernels, their wait not separable.
    pub unmatched_comm_kernels: u64,
    /// GPU operations without a recorded launching call (no launch edge).
    pub gpu_ops_without_launch: u64,
    /// Blocking calls for which no GPU operation ending during the call was found (modelled as plain calls).
    pub blocking_calls_without_gpu_work: u64,
    /// `cudaStreamWaitEvent` / `cuStreamWaitEvent` calls: their cross-stream edges are not recorded in the trace
    /// model and are only inferred from timing.
    pub stream_wait_calls_not_followed: u64,
    /// Host calls of processes that drive no analysed GPU (left out).
    pub host_calls_without_rank: u64,
    /// Edges removed because the input's dependencies formed a cycle.
    pub edges_dropped_for_cycles: u64,
    /// Vertices whose recorded time contradicts the model beyond its lags (replay differs from the record).
    pub inconsistent_vertices: u64,
    /// True when ranks ran on different hosts: cross-rank edges use the raw clocks.
    pub clocks_not_aligned: bool,
}

/// The dependency model of one window of a run.
#[derive(Debug, Clone)]
pub struct Graph {
    /// The operations.
    pub ops: Vec<Op>,
    /// The ranks, in input order.
    pub ranks: Vec<RankSpec>,
    /// Category names.
    pub categories: Vec<String>,
    /// Start of the analysed window (or of the first operation).
    pub window_start_ns: i64,
    /// Counts of what was and was not modelled.
    pub stats: ModelStats,
    /// Per vertex: its position in [`Graph::order`] (where the replay plan keeps its incoming edges).
    position_of: Vec<u32>,
    /// Per vertex: its own time, as measured.
    own_ns: Vec<i64>,
    /// Per vertex: its measured time.
    measured_ns: Vec<i64>,
    /// Vertices in topological order.
    order: Vec<u32>,
    /// The edges, laid out in topological order (see [`ReplayPlan`]): the only copy once the graph is assembled.
    plan: ReplayPlan,
    /// Number of collective barriers (vertices after the operations' two each).
    barriers: u32,
    /// Per barrier: the index of its instance in the [`Matching`] the model was built from (empty for an
    /// [`ExplicitModel`]).
    barrier_instances: Vec<u32>,
    /// Instances across ranks: number of distinct (kind, name, occurrence) keys.
    instances: u32,
    /// Time buffers of finished replays, for the next ones.
    spare_times: SpareTimes,
    /// Per operation, one bit: whether it runs on a GPU (bit `op % 64` of word `op / 64`). Every span replay asks
    /// it of every operation's end; read from the operations, each question was a cache line of its own.
    on_gpu_bits: Vec<u64>,
    /// Whether replaying the measured own times gives every measured time: at every vertex the latest of its
    /// predecessors' measured times (with lags) and its external time, plus its own time, is its measured time
    /// exactly (no own time below 0, none cut at the integer range).
    replays_measured: bool,
}

/// Replays' time buffers (one time per vertex) handed back when a replay ends and taken by the next: a fresh
/// buffer meets fresh pages, which the kernel zeroes on first touch (320 MB per replay of a 10 M-kernel model, and
/// the findings replay it a few dozen times). A replay writes every time before it reads it, so what a buffer
/// held before does not matter. A clone of the graph starts with none.
#[derive(Default)]
struct SpareTimes(Mutex<Vec<Vec<i64>>>);

impl SpareTimes {
    /// A buffer of `len` times, one handed back if there is one.
    fn take(&self, len: usize) -> Vec<i64> {
        let spare = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match spare {
            Some(mut times) => {
                times.resize(len, 0);
                times
            }
            None => vec![0i64; len],
        }
    }

    /// Hands `times` back; no more are kept than replays can run at once (one per worker).
    fn give(&self, times: Vec<i64>) {
        let mut spares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if spares.len() < rayon::current_num_threads().max(1) {
            spares.push(times);
        }
    }
}

impl Clone for SpareTimes {
    fn clone(&self) -> Self {
        SpareTimes::default()
    }
}

impl std::fmt::Debug for SpareTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpareTimes")
    }
}

/// The model laid out for replay: vertices in topological order, each one's incoming edges (without dropped
/// ones) next to those of the vertex before it, and sources named by their position. A replay then reads its
/// edges in sequence and its predecessors' times from a short way back, instead of hopping through the vertex
/// numbering; on the largest models this more than halves its time.
#[derive(Debug, Clone, Default)]
struct ReplayPlan {
    /// Incoming edges of the vertex at position p: `edges[offsets[p]..offsets[p + 1]]`.
    offsets: Vec<u32>,
    edges: Vec<PlanEdge>,
    /// Per edge (as `edges`): why the target waits, read only by replays that skip some kinds
    /// ([`Graph::simulate_skipping`]).
    kinds: Vec<EdgeKind>,
    /// The lags that are not 0, where edges' [`PlanEdge::lag`] point; `lags_ns[0]` is 0, for every other edge. A lag
    /// is not 0 only where the recorded times contradict the edge (clocks of different hosts, a skewed record), so
    /// an edge is 8 bytes, not 16, and a replay reads half as much.
    lags_ns: Vec<i64>,
    /// Per position: the earliest time given from outside the model.
    external: ExternalTimes,
    /// The positions (ascending) whose time an edge reads [`RING_POSITIONS`] or more positions later: a replay
    /// that keeps only the last [`RING_POSITIONS`] times keeps theirs beside them ([`Graph::replayed_last_end`]).
    /// `None` where they are so many that the ring would save little: such a replay then keeps every time.
    far_sources: Option<Vec<u32>>,
}

/// How many of the latest positions' times a replay that needs no times afterwards keeps (a ring of 512 KiB, in
/// the cache): on the generated 10 M-kernel model no edge reaches further back than about 25,000 positions, and
/// the few that do on other inputs have their sources kept beside the ring.
const RING_POSITIONS: usize = 1 << 16;

/// Per position of a [`ReplayPlan`] (per vertex while the model is ordered), the earliest time given to its vertex
/// from outside the model, kept as a rule and the positions where it does not hold: an operation's start may not
/// come before the window start, and other vertices have no such time; only starts raised by work before the window
/// (or starting before the window) differ.
/// A replay then reads no time per position (320 MB at 10 M kernels × 8 ranks, a third of what it read).
#[derive(Debug, Clone, Default)]
struct ExternalTimes {
    /// Vertices below this are operations' (the even ones their starts).
    op_vertices: u32,
    /// The rule's time for an operation's start.
    start_ns: i64,
    /// The positions (ascending) whose time is not the rule's, and their times.
    positions: Vec<u32>,
    times_ns: Vec<i64>,
}

impl ExternalTimes {
    /// `by_position` (each position's vertex and time, in order; while the model is ordered, each vertex's own, a
    /// vertex being its own position) as the rule for operations' starts at `start_ns` and its exceptions.
    fn new(op_vertices: u32, start_ns: i64, by_position: impl IndexedParallelIterator<Item = (u32, i64)>) -> Self {
        let mut times = ExternalTimes { op_vertices, start_ns, positions: Vec::new(), times_ns: Vec::new() };
        let exceptions: Vec<(u32, i64)> = by_position
            .enumerate()
            .filter(|&(_, (vertex, at))| at != times.rule(vertex))
            .map(|(position, (_, at))| (position as u32, at))
            .collect();
        (times.positions, times.times_ns) = exceptions.into_iter().unzip();
        times
    }

    /// These times, made by vertex, keyed instead by the position `position_of` gives each vertex.
    fn keyed_by_position(self, position_of: &[u32]) -> Self {
        let mut exceptions: Vec<(u32, i64)> = self
            .positions
            .iter()
            .zip(&self.times_ns)
            .map(|(&vertex, &at)| (position_of[vertex as usize], at))
            .collect();
        exceptions.par_sort_unstable_by_key(|&(position, _)| position);
        let (positions, times_ns) = exceptions.into_iter().unzip();
        ExternalTimes { positions, times_ns, ..self }
    }

    /// The time the rule gives `vertex`.
    fn rule(&self, vertex: u32) -> i64 {
        if vertex < self.op_vertices && vertex.is_multiple_of(2) { self.start_ns } else { i64::MIN }
    }

    /// The time at `position`, whose vertex is `vertex`.
    fn at(&self, position: usize, vertex: u32) -> i64 {
        match self.positions.binary_search(&(position as u32)) {
            Ok(exception) => self.times_ns[exception],
            Err(_) => self.rule(vertex),
        }
    }

    /// The times for a replay that asks for every position once, in order.
    fn in_order(&self) -> ExternalInOrder<'_> {
        ExternalInOrder { times: self, next_exception: 0 }
    }
}

/// [`ExternalTimes`] read position after position: the next exception is the only one to look at.
struct ExternalInOrder<'a> {
    times: &'a ExternalTimes,
    next_exception: usize,
}

impl ExternalInOrder<'_> {
    /// The time at `position`, whose vertex is `vertex`; positions are asked for in ascending order, none skipped.
    #[inline]
    fn at(&mut self, position: usize, vertex: u32) -> i64 {
        let times = self.times;
        if times.positions.get(self.next_exception) == Some(&(position as u32)) {
            self.next_exception += 1;
            times.times_ns[self.next_exception - 1]
        } else {
            times.rule(vertex)
        }
    }
}

/// An incoming edge in a [`ReplayPlan`] (its kind is in [`ReplayPlan::kinds`]).
#[derive(Debug, Clone, Copy, Default)]
struct PlanEdge {
    source_position: u32,
    /// Where its lag is in [`ReplayPlan::lags_ns`] (0: no lag).
    lag: u32,
}

impl ReplayPlan {
    /// Where the incoming edges of the vertex at `position` lie in `edges` and `kinds`.
    fn range(&self, position: usize) -> std::ops::Range<usize> {
        self.offsets[position] as usize..self.offsets[position + 1] as usize
    }

    /// When the vertex at `position` is ready: the latest of its external time `external_ns` and, over its incoming
    /// edges whose kind is not in `skip_mask` (one bit per kind), the source's time (`source_ns(source position)`)
    /// plus the edge's lag. Every replay's inner loop.
    #[inline]
    fn ready_ns(
        &self,
        position: usize,
        external_ns: i64,
        skip_mask: u32,
        mut source_ns: impl FnMut(u32) -> i64,
    ) -> i64 {
        let [ready] = self.ready_in_lanes(position, external_ns, skip_mask, |source| [source_ns(source)]);
        ready
    }

    /// [`ReplayPlan::ready_ns`] of `LANES` replays at once, which differ only in their times (`source_ns` gives a
    /// source's time in each): the edges are read once for all of them.
    #[inline]
    fn ready_in_lanes<const LANES: usize>(
        &self,
        position: usize,
        external_ns: i64,
        skip_mask: u32,
        mut source_ns: impl FnMut(u32) -> [i64; LANES],
    ) -> [i64; LANES] {
        let range = self.range(position);
        let mut ready = [external_ns; LANES];
        let mut wait = |edge: &PlanEdge| {
            let (times, lag_ns) = (source_ns(edge.source_position), self.lags_ns[edge.lag as usize]);
            for (ready, time) in ready.iter_mut().zip(times) {
                *ready = (*ready).max(time.saturating_add(lag_ns));
            }
        };
        if skip_mask == 0 {
            self.edges[range].iter().for_each(wait);
        } else {
            let kinds = &self.kinds[range.clone()];
            let kept = self.edges[range].iter().zip(kinds).filter(|&(_, &kind)| skip_mask & (1 << kind as u32) == 0);
            kept.for_each(|(edge, _)| wait(edge));
        }
        ready
    }
}

/// Incoming edges per vertex as the constructors found them (dropped ones too), and each vertex's external time:
/// what [`Graph::assemble`] orders the vertices and lays out the [`ReplayPlan`] from. Dropped once the plan is
/// made: the plan holds the same edges, less the dropped ones, and keeping both held every edge twice (about
/// 0.9 GB of a 10 M-kernel model).
struct IncomingLists {
    /// Incoming edges of vertex v: edges `offsets[v]..offsets[v + 1]` of `words`.
    offsets: Vec<u32>,
    /// Two words an edge ([`Edge::words`]).
    words: Vec<u64>,
    /// Per vertex (its "positions" are vertices here): the earliest time given from outside the model (window start,
    /// work before the window), kept as its rule and exceptions from the start, not a time per vertex.
    external: ExternalTimes,
}

impl IncomingLists {
    /// Which edges are `vertex`'s incoming ones.
    fn range(&self, vertex: u32) -> std::ops::Range<usize> {
        self.offsets[vertex as usize] as usize..self.offsets[vertex as usize + 1] as usize
    }

    /// Edge `index`.
    fn edge(&self, index: usize) -> Edge {
        Edge::from_words([self.words[2 * index], self.words[2 * index + 1]])
    }

    /// `vertex`'s incoming edges, in the order they were found.
    fn of(&self, vertex: u32) -> impl Iterator<Item = Edge> + '_ {
        let range = self.range(vertex);
        let (edges, _) = self.words[2 * range.start..2 * range.end].as_chunks::<2>();
        edges.iter().map(|&words| Edge::from_words(words))
    }

    /// `vertex`'s incoming edges that were not dropped to break a cycle.
    fn kept(&self, vertex: u32) -> impl Iterator<Item = Edge> + '_ {
        self.of(vertex).filter(|edge| edge.kind != EdgeKind::Dropped)
    }

    /// Marks edge `index` dropped.
    fn drop_edge(&mut self, index: usize) {
        let edge = Edge { kind: EdgeKind::Dropped, ..self.edge(index) };
        self.words[2 * index] = edge.words()[0];
    }
}

/// What [`Graph::assemble`] needs from either constructor.
struct Parts {
    ops: Vec<Op>,
    ranks: Vec<RankSpec>,
    categories: Vec<String>,
    window_start_ns: i64,
    stats: ModelStats,
    /// The edges, in the order they were found.
    edges: Vec<ListedEdge>,
    external_ns: Vec<i64>,
    measured_ns: Vec<i64>,
    barriers: u32,
    barrier_instances: Vec<u32>,
    instances: u32,
}

/// A dependency edge of an [`ExplicitModel`], between two vertices ([`start_vertex`], [`end_vertex`], or a barrier:
/// `2 × ops + k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExplicitEdge {
    /// The vertex waited for.
    pub source: u32,
    /// The vertex that waits.
    pub target: u32,
    /// Why.
    pub kind: EdgeKind,
}

/// A model given in full, for [`Graph::from_explicit`]: the operations, `barriers` barrier vertices after their
/// `2 × ops` vertices, and the edges between them (each operation's end after its own start is implied).
#[derive(Debug, Clone, Default)]
pub struct ExplicitModel {
    /// The operations (their `start_ns`/`end_ns` are the measured times of their vertices).
    pub ops: Vec<Op>,
    /// The ranks the operations' `rank_index` refers to.
    pub ranks: Vec<RankSpec>,
    /// Names for the operations' `category`.
    pub categories: Vec<String>,
    /// Where the analysed time starts.
    pub window_start_ns: i64,
    /// Number of barrier vertices.
    pub barriers: u32,
    /// The edges.
    pub edges: Vec<ExplicitEdge>,
    /// Per vertex, the earliest time given from outside the model (`i64::MIN`: none).
    pub external_ns: Vec<i64>,
    /// Per vertex, its measured time (own times are measured against it).
    pub measured_ns: Vec<i64>,
    /// Number of distinct [`Op::instance`] values.
    pub instances: u32,
}

/// Index in the input list of the trace of `op`, whose rank is one of `ranks`.
fn trace_of(ranks: &[RankSpec], op: &Op) -> usize {
    ranks[op.rank_index as usize].key.trace
}

/// Vertex of an operation's start.
pub fn start_vertex(op: u32) -> u32 {
    2 * op
}

/// Vertex of an operation's end.
pub fn end_vertex(op: u32) -> u32 {
    2 * op + 1
}

const NONE: u32 = u32::MAX;

/// The name `trace` (the trace host call `op` came from) records for the call.
pub fn host_call_name<'t>(trace: &'t Trace, op: &Op) -> &'t str {
    trace.names.get(trace.api_calls[op.index as usize].name)
}

/// Calls that block the host until GPU work completes (names without the `_vNNNN` version suffix).
pub fn is_blocking_call(name: &str) -> bool {
    let base = strip_version(name);
    matches!(
        base,
        "cudaDeviceSynchronize"
            | "cudaStreamSynchronize"
            | "cudaEventSynchronize"
            | "cudaThreadSynchronize"
            | "cudaMemcpy"
            | "cudaMemcpy2D"
            | "cudaMemcpyToSymbol"
            | "cudaMemcpyFromSymbol"
            | "cuCtxSynchronize"
            | "cuStreamSynchronize"
            | "cuEventSynchronize"
            | "cuMemcpy"
            | "cuMemcpyDtoH"
            | "cuMemcpyHtoD"
            | "cuMemcpyDtoD"
    )
}

/// `cudaStreamSynchronize_v3020` → `cudaStreamSynchronize`.
fn strip_version(name: &str) -> &str {
    match name.rfind("_v") {
        Some(at) if at + 2 < name.len() && name[at + 2..].bytes().all(|b| b.is_ascii_digit()) => &name[..at],
        _ => name,
    }
}

/// Collects operations and edges while the model is built: [`Graph::build`] adds the operations, then each kind of
/// edge of the module doc, one method each.
struct Builder<'a> {
    traces: &'a [Trace],
    ranks: &'a [RankSpec],
    matching: &'a Matching,
    windows_ns: &'a [Option<(i64, i64)>],
    ops: Vec<Op>,
    /// The edges, in the order they were found.
    edges: Vec<ListedEdge>,
    external_ns: Vec<i64>,
    stats: ModelStats,
    /// The classifier's categories, then those the model adds (host, graph, copies, sets, each collective).
    categories: Vec<String>,
    maps: Vec<TraceMaps>,
    instances: InstanceKeys,
    /// Instance ids given to the operations (see [`Op::instance`]).
    instance_count: u32,
    /// Each rank's GPU events, per stream in start order.
    rank_gpu_events: Vec<Vec<GpuEvent>>,
    /// Operations in the model (vertices `0..2 × op_count`), known once all are added.
    op_count: usize,
    window_start_ns: i64,
    /// Indices into `matching.instances` of the instances with a member in the model: one barrier vertex each.
    instances_in_model: Vec<usize>,
    /// The measured release of each operation: when its own time (duration) begins.
    release_ns: Vec<i64>,
    /// Per rank, GPU operations in the model by end time: for host sync and cross-stream searches.
    gpu_by_end: Vec<Vec<u32>>,
    /// Per rank, the end times of [`Builder::gpu_by_end`] in the same order: the searches bisect these in one
    /// array instead of reading an operation at every step.
    gpu_end_ns: Vec<Vec<i64>>,
}

/// The latest end among the operations' ends offered: of a GPU operation, else of any; on ties the lowest operation
/// ([`Graph::last_end`], [`Graph::replayed_last_end`]).
#[derive(Default)]
struct LastEnd {
    gpu: Option<(u32, i64)>,
    any: Option<(u32, i64)>,
}

impl LastEnd {
    fn offer(&mut self, op: u32, on_gpu: bool, end_ns: i64) {
        let later = |best: Option<(u32, i64)>| match best {
            Some((o, t)) if (t, Reverse(o)) >= (end_ns, Reverse(op)) => best,
            _ => Some((op, end_ns)),
        };
        if on_gpu {
            self.gpu = later(self.gpu);
        }
        self.any = later(self.any);
    }

    /// The latest of both offers: what one would hold had it been offered everything the two were (the order is
    /// total, ties going to the lowest operation, so offers may be split and merged in any way).
    fn merge(self, other: LastEnd) -> LastEnd {
        let later = |a: Option<(u32, i64)>, b: Option<(u32, i64)>| match (a, b) {
            (Some((ao, at)), Some((bo, bt))) => {
                Some(if (at, Reverse(ao)) >= (bt, Reverse(bo)) { (ao, at) } else { (bo, bt) })
            }
            (a, None) => a,
            (None, b) => b,
        };
        LastEnd { gpu: later(self.gpu, other.gpu), any: later(self.any, other.any) }
    }

    /// (operation, end) of the latest GPU operation, else of the latest operation.
    fn found(self) -> Option<(u32, i64)> {
        self.gpu.or(self.any)
    }
}

/// The edge from `source` to `target` (listed) whose lag makes the measured times satisfy it:
/// `min(0, target_ref − source_time)`.
fn edge_between(source: u32, target: u32, source_ns: i64, target_ref_ns: i64, kind: EdgeKind) -> ListedEdge {
    let lag_ns = (target_ref_ns.saturating_sub(source_ns)).min(0);
    listed(target, Edge { source, lag_ns, kind })
}

/// Per operation, whether it runs on a GPU, one bit each ([`Graph::on_gpu_bits`]), made on worker threads.
fn on_gpu_bits(ops: &[Op]) -> Vec<u64> {
    ops.par_chunks(64)
        .map(|chunk| chunk.iter().enumerate().fold(0u64, |bits, (i, op)| bits | u64::from(op.kind.on_gpu()) << i))
        .collect()
}

/// What a collective barrier needs before its edges are written ([`Builder::barrier_arrivals`]).
struct BarrierArrivals {
    /// The latest start among its members.
    latest_ns: i64,
    /// The latest start of its members outside the model (`None`: every member is in it), which reaches it from
    /// outside ([`Builder::external`]).
    outside_start_ns: Option<i64>,
    /// Its edges: two per member in the model.
    edges: u32,
}

/// One rank's stream order and launch edges, and the dependencies on work outside the model (target vertex, source
/// time, target reference time) that [`Builder::external`] records.
#[derive(Default)]
struct RankOrderEdges {
    edges: Vec<ListedEdge>,
    externals: Vec<(u32, i64, i64)>,
    without_launch: u64,
}

impl<'a> Builder<'a> {
    fn new(
        traces: &'a [Trace],
        ranks: &'a [RankSpec],
        matching: &'a Matching,
        classifier: &Classifier,
        windows_ns: &'a [Option<(i64, i64)>],
    ) -> Builder<'a> {
        let maps: Vec<TraceMaps> = traces
            .iter()
            .map(|t| TraceMaps {
                kernels: vec![NONE; t.kernels.len()],
                memops: vec![NONE; t.memops.len()],
                graphs: vec![NONE; t.graph_launches.len()],
                calls: vec![NONE; t.api_calls.len()],
            })
            .collect();
        let stats = ModelStats { clocks_not_aligned: matching.clocks_aligned, ..ModelStats::default() };
        Builder {
            traces,
            ranks,
            matching,
            windows_ns,
            ops: Vec::new(),
            edges: Vec::new(),
            external_ns: Vec::new(),
            stats,
            categories: classifier.categories().to_vec(),
            maps,
            instances: InstanceKeys::default(),
            instance_count: 0,
            rank_gpu_events: Vec::new(),
            op_count: 0,
            window_start_ns: 0,
            instances_in_model: Vec::new(),
            release_ns: Vec::new(),
            gpu_by_end: Vec::new(),
            gpu_end_ns: Vec::new(),
        }
    }

    /// Adds an edge whose lag makes the measured times satisfy it (see [`edge_between`]).
    fn edge(&mut self, source: u32, target: u32, source_ns: i64, target_ref_ns: i64, kind: EdgeKind) {
        self.edges.push(edge_between(source, target, source_ns, target_ref_ns, kind));
    }

    /// A dependency on work outside the model: a constant time for `target`.
    fn external(&mut self, target: u32, source_ns: i64, target_ref_ns: i64) {
        let at = source_ns.min(target_ref_ns);
        let slot = &mut self.external_ns[target as usize];
        *slot = (*slot).max(at);
    }

    /// Whether time `t` of the trace clock is in the window of rank `rank_index`.
    fn in_window(&self, rank_index: u32, t: i64) -> bool {
        self.windows_ns[rank_index as usize].is_none_or(|(a, b)| t >= a && t < b)
    }

    /// The id of category `name`, added after the known ones when new.
    fn category_id(&mut self, name: &str) -> u16 {
        operations::category_id(&mut self.categories, name)
    }

    /// Once every operation is in: the window start, the barrier vertices (after the operations' vertices), the
    /// external times of start vertices and each operation's measured release.
    fn prepare_vertices(&mut self) {
        let op_count = self.ops.len();
        self.op_count = op_count;
        self.window_start_ns = self
            .windows_ns
            .iter()
            .map(|w| w.map(|(a, _)| a))
            .collect::<Option<Vec<i64>>>()
            .and_then(|starts| starts.into_iter().min())
            .or_else(|| self.ops.iter().map(|o| o.start_ns).min())
            .unwrap_or(0);
        let maps = &self.maps;
        self.instances_in_model = (self.matching.instances.par_iter().enumerate())
            .filter(|(_, inst)| {
                inst.members.iter().any(|&(t, k)| maps.get(t).is_some_and(|m| m.kernels[k as usize] != NONE))
            })
            .map(|(i, _)| i)
            .collect();
        let vertex_count = 2 * op_count + self.instances_in_model.len();
        let (ops, window_start_ns) = (&self.ops, self.window_start_ns);
        // Start vertices: the window start (or the operation's own start before it); end and barrier vertices none.
        self.external_ns = (0..vertex_count)
            .into_par_iter()
            .map(|v| {
                if v < 2 * op_count && v.is_multiple_of(2) {
                    window_start_ns.min(ops[v / 2].start_ns)
                } else {
                    i64::MIN
                }
            })
            .collect();
        let (shares, ranks) = (&self.matching.shares, self.ranks);
        self.release_ns = ops
            .par_iter()
            .map(|op| match op.matched.then(|| shares.get(&(trace_of(ranks, op), op.index))).flatten() {
                Some(share) => (op.start_ns + share.wait_ns).min(op.end_ns),
                None => op.start_ns,
            })
            .collect();
    }

    /// Run edges: each operation's end after its own start.
    fn add_run_edges(&mut self) {
        let (ops, release_ns) = (&self.ops, &self.release_ns);
        let run = (0..self.op_count as u32).into_par_iter().map(|op| {
            edge_between(
                start_vertex(op),
                end_vertex(op),
                ops[op as usize].start_ns,
                release_ns[op as usize],
                EdgeKind::Run,
            )
        });
        self.edges.par_extend(run);
    }

    /// Stream order and launch edges, each rank's found on a worker thread and added in rank order (as one thread
    /// would add them).
    fn add_stream_order_and_launch_edges(&mut self) {
        let this = &*self;
        // Runs of each rank's events on worker threads (an event's edges read only it and the one before it), in
        // rank order, then run order: a rank per task kept half of 16 cores idle on an 8-rank run.
        let runs: Vec<(&RankSpec, &[GpuEvent], std::ops::Range<usize>)> =
            (this.ranks.iter().zip(&this.rank_gpu_events))
                .flat_map(|(spec, events)| {
                    (0..events.len())
                        .step_by(EVENTS_PER_TASK)
                        .map(move |start| (spec, events.as_slice(), start..(start + EVENTS_PER_TASK).min(events.len())))
                })
                .collect();
        let per_run: Vec<RankOrderEdges> = runs
            .into_par_iter()
            .map(|(spec, events, positions)| this.stream_order_and_launch_of_run(spec, events, positions))
            .collect();
        let edges: Vec<&[ListedEdge]> = per_run.iter().map(|run| run.edges.as_slice()).collect();
        append_parts(&mut self.edges, &edges);
        for run in per_run {
            for (target, source_ns, target_ref_ns) in run.externals {
                self.external(target, source_ns, target_ref_ns);
            }
            self.stats.gpu_ops_without_launch += run.without_launch;
        }
    }

    /// The stream order and launch edges of the events at `positions` of a rank's GPU events (`events`: per stream
    /// in start order).
    fn stream_order_and_launch_of_run(
        &self,
        spec: &RankSpec,
        events: &[GpuEvent],
        positions: std::ops::Range<usize>,
    ) -> RankOrderEdges {
        let trace_index = spec.key.trace;
        let (trace, maps) = (&self.traces[trace_index], &self.maps[trace_index]);
        let mut found = RankOrderEdges::default();
        for position in positions {
            let event = &events[position];
            let op = op_of(maps, event.kind, event.index);
            if op == NONE {
                continue;
            }
            let target = start_vertex(op);
            if position > 0 && events[position - 1].stream == event.stream {
                let previous = &events[position - 1];
                let source = op_of(maps, previous.kind, previous.index);
                if source == NONE {
                    found.externals.push((target, previous.end_ns, event.start_ns));
                } else {
                    let kind = EdgeKind::StreamOrder;
                    found.edges.push(edge_between(end_vertex(source), target, previous.end_ns, event.start_ns, kind));
                }
            }
            match event.launch {
                Some(call_index) => {
                    let call_start = trace.api_calls[call_index as usize].start_ns;
                    let source = maps.calls[call_index as usize];
                    if source == NONE {
                        found.externals.push((target, call_start, event.start_ns));
                    } else {
                        let kind = EdgeKind::Launch;
                        found.edges.push(edge_between(start_vertex(source), target, call_start, event.start_ns, kind));
                    }
                }
                None => found.without_launch += 1,
            }
        }
        found
    }

    /// Host order per thread; nested calls after their parent's start. Each thread's edges are found on a worker
    /// thread and added in the order of the threads (as one thread would add them).
    fn add_host_order_edges(&mut self) {
        let ops = &self.ops;
        let threads = host_order::host_threads(ops, self.ranks);
        let per_thread: Vec<Vec<ListedEdge>> =
            threads.par_iter().map(|calls| host_order::edges_of_thread(ops, calls)).collect();
        let parts: Vec<&[ListedEdge]> = per_thread.iter().map(Vec::as_slice).collect();
        append_parts(&mut self.edges, &parts);
    }

    /// Per rank, the GPU operations in the model by end time.
    fn sort_gpu_ops_by_end(&mut self) {
        let (ops, ranks) = (&self.ops, self.ranks.len());
        // Each rank's GPU operations with their ends, gathered a chunk of operations per task (tens of millions to
        // scan), then sorted: the keys (end, operation) are unique, so the sort gives the one order whatever the
        // order gathered. The keys are made once beside the ids (read from the operations at each comparison, they
        // miss the cache).
        const CHUNK: usize = 1 << 16;
        let per_chunk: Vec<Vec<Vec<(i64, u32)>>> = (ops.par_chunks(CHUNK).enumerate())
            .map(|(chunk_index, chunk)| {
                let mut per_rank = vec![Vec::new(); ranks];
                for (offset, op) in chunk.iter().enumerate().filter(|(_, op)| op.kind.on_gpu()) {
                    per_rank[op.rank_index as usize].push((op.end_ns, (chunk_index * CHUNK + offset) as u32));
                }
                per_rank
            })
            .collect();
        let by_rank: Vec<(Vec<u32>, Vec<i64>)> = (0..ranks)
            .into_par_iter()
            .map(|rank| {
                let mut keyed: Vec<(i64, u32)> = per_chunk.iter().flat_map(|c| &c[rank]).copied().collect();
                keyed.par_sort_unstable();
                keyed.into_iter().map(|(end_ns, id)| (id, end_ns)).unzip()
            })
            .collect();
        (self.gpu_by_end, self.gpu_end_ns) = by_rank.into_iter().unzip();
    }

    /// The start time and index of the call that launched GPU operation `op`, if recorded.
    fn launch_start(&self, op: &Op) -> Option<(i64, u32)> {
        let trace = &self.traces[trace_of(self.ranks, op)];
        let launch = match op.kind {
            OpKind::Kernel => trace.kernels[op.index as usize].launch,
            OpKind::Copy | OpKind::Set => trace.memops[op.index as usize].launch,
            OpKind::Graph => trace.graph_launches[op.index as usize].launch,
            OpKind::HostCall => None,
        }?;
        Some((trace.api_calls[launch as usize].start_ns, launch))
    }

    /// Host sync: a blocking call's end waits for the GPU operation it was blocked on.
    fn add_host_sync_edges(&mut self) {
        // The searches in parallel, the edges added in operation order (as one thread would add them).
        let this = &*self;
        let blocking: Vec<(u32, Option<u32>)> = (0..self.op_count as u32)
            .into_par_iter()
            .filter(|&op| this.is_blocking(&this.ops[op as usize]))
            .map(|op| (op, this.awaited_by(&this.ops[op as usize])))
            .collect();
        make_room(&mut self.edges, blocking.iter().filter(|(_, awaited)| awaited.is_some()).count());
        for (op, awaited) in blocking {
            let o = self.ops[op as usize];
            match awaited {
                Some(g) => {
                    let release = o.start_ns.max(self.ops[g as usize].end_ns);
                    self.release_ns[op as usize] = release;
                    let end_ns = self.ops[g as usize].end_ns;
                    self.edge(end_vertex(g), end_vertex(op), end_ns, release, EdgeKind::HostSync);
                }
                None => self.stats.blocking_calls_without_gpu_work += 1,
            }
        }
        // The run edge of a blocking call was added with release = start; its lag is 0 either way.
    }

    /// Whether `o` is a host call that blocks until GPU work ends.
    fn is_blocking(&self, o: &Op) -> bool {
        let trace = &self.traces[trace_of(self.ranks, o)];
        o.kind == OpKind::HostCall && is_blocking_call(host_call_name(trace, o))
    }

    /// The GPU operation blocking call `o` waited for: the last one to end before it returned that was running
    /// when it was called and launched before it (or by it), within [`SEARCH_BACK`] operations.
    fn awaited_by(&self, o: &Op) -> Option<u32> {
        let list = &self.gpu_by_end[o.rank_index as usize];
        let upto = self.gpu_end_ns[o.rank_index as usize].partition_point(|&end_ns| end_ns <= o.end_ns);
        list[..upto].iter().rev().take(SEARCH_BACK).copied().find(|&g| {
            let gpu = &self.ops[g as usize];
            gpu.end_ns > o.start_ns
                && self.launch_start(gpu).is_some_and(|(start, call)| start < o.start_ns || call == o.index)
        })
    }

    /// Collective barriers: every member's start reaches the barrier, which its transfer waits for.
    fn add_collective_edges(&mut self) {
        let barriers = self.instances_in_model.len();
        let this = &*self;
        // Each barrier's latest arrival and its edges' count, then its edges written into its own part of the room,
        // both on worker threads (the members' look-ups are out of order): the edges stay in barrier order.
        let arrivals: Vec<BarrierArrivals> = (0..barriers).into_par_iter().map(|b| this.barrier_arrivals(b)).collect();
        for (barrier, arrivals) in arrivals.iter().enumerate() {
            if let Some(start_ns) = arrivals.outside_start_ns {
                self.external(self.barrier_vertex(barrier), start_ns, arrivals.latest_ns);
            }
        }
        let total: usize = arrivals.iter().map(|a| a.edges as usize).sum();
        // Out of the builder while its room is written, so that the builder can be read meanwhile.
        let mut edges = std::mem::take(&mut self.edges);
        let start = edges.len();
        make_room(&mut edges, total);
        edges.par_extend(rayon::iter::repeat_n([0u64; 3], total));
        let mut parts: Vec<&mut [ListedEdge]> = Vec::with_capacity(barriers);
        let mut room = &mut edges[start..];
        for arrivals in &arrivals {
            let (part, rest) = room.split_at_mut(arrivals.edges as usize);
            parts.push(part);
            room = rest;
        }
        let this = &*self;
        parts.into_par_iter().zip(&arrivals).enumerate().for_each(|(barrier, (part, arrivals))| {
            this.write_barrier_edges(barrier, arrivals.latest_ns, part);
        });
        self.edges = edges;
        self.stats.collective_instances = barriers as u64;
        self.stats.unmatched_comm_kernels =
            self.ops.par_iter().with_min_len(PAR_MIN_LEN).filter(|o| o.comm && !o.matched).count() as u64;
    }

    /// The members of barrier `barrier`'s instance: (operation or [`NONE`] where not in the model, start).
    fn barrier_members(&self, barrier: usize) -> impl Iterator<Item = (u32, i64)> + '_ {
        let instance = &self.matching.instances[self.instances_in_model[barrier]];
        instance
            .members
            .iter()
            .map(|&(t, k)| (self.maps[t].kernels[k as usize], self.traces[t].kernels[k as usize].start_ns))
    }

    /// Barrier `barrier`'s vertex, after the operations' two each.
    fn barrier_vertex(&self, barrier: usize) -> u32 {
        (2 * self.op_count + barrier) as u32
    }

    /// Barrier `barrier`'s latest arrival, the latest start of its members outside the model, and its edge count.
    fn barrier_arrivals(&self, barrier: usize) -> BarrierArrivals {
        let latest_ns = self.barrier_members(barrier).map(|m| m.1).max().unwrap_or(0);
        let (mut outside_start_ns, mut edges) = (None, 0);
        for (op, start_ns) in self.barrier_members(barrier) {
            if op == NONE {
                outside_start_ns = outside_start_ns.max(Some(start_ns));
            } else {
                edges += 2;
            }
        }
        BarrierArrivals { latest_ns, outside_start_ns, edges }
    }

    /// Writes into `part` barrier `barrier`'s edges: per member in the model, its arrival (its start before the
    /// barrier) and its release (the barrier before its end).
    fn write_barrier_edges(&self, barrier: usize, latest_ns: i64, part: &mut [ListedEdge]) {
        let vertex = self.barrier_vertex(barrier);
        let members = self.barrier_members(barrier).filter(|&(op, _)| op != NONE);
        for ((op, start_ns), pair) in members.zip(part.chunks_exact_mut(2)) {
            pair[0] = edge_between(start_vertex(op), vertex, start_ns, latest_ns, EdgeKind::CollectiveArrival);
            let release_ns = self.release_ns[op as usize];
            pair[1] = edge_between(vertex, end_vertex(op), latest_ns, release_ns, EdgeKind::CollectiveRelease);
        }
    }

    /// The measured time of vertex `vertex` (see [`vertex_measured`]).
    fn measured(&self, vertex: u32) -> i64 {
        vertex_measured(&self.ops, self.op_count, &self.instances_in_model, self.matching, self.traces, vertex)
    }

    /// Inferred cross-stream waits: a GPU operation that started later than its modelled dependencies allow,
    /// just after an operation on another stream of its GPU ended.
    fn add_cross_stream_edges(&mut self) {
        let op_count = self.op_count;
        let this = &*self;
        // Each operation's readiness by its modelled dependencies: a maximum over its edges, so the edges may be
        // read on worker threads in any order.
        let ready_ns: Vec<AtomicI64> = (0..op_count)
            .into_par_iter()
            .map(|o| AtomicI64::new(self.external_ns[start_vertex(o as u32) as usize]))
            .collect();
        self.edges.par_iter().map(unlisted).for_each(|(target, edge)| {
            if target % 2 == 0 && (target as usize) < 2 * op_count {
                let source_ns = this.measured(edge.source);
                ready_ns[(target / 2) as usize].fetch_max(source_ns.saturating_add(edge.lag_ns), Ordering::Relaxed);
            }
        });
        let ready_ns: Vec<i64> = ready_ns.into_par_iter().map(AtomicI64::into_inner).collect();
        // The searches in parallel, the edges added in operation order (as one thread would add them).
        let waits: Vec<(u32, u32)> = (0..op_count as u32)
            .into_par_iter()
            .filter_map(|op| this.cross_stream_wait(op, ready_ns[op as usize]).map(|g| (op, g)))
            .collect();
        make_room(&mut self.edges, waits.len());
        for (op, g) in waits {
            let (end_ns, start_ns) = (self.ops[g as usize].end_ns, self.ops[op as usize].start_ns);
            self.edge(end_vertex(g), start_vertex(op), end_ns, start_ns, EdgeKind::CrossStream);
        }
    }

    /// The operation on another stream of its GPU that GPU operation `op` (ready at `ready_ns` by its modelled
    /// dependencies) waited for: the last to end before it started, if it ended after `ready_ns` and within
    /// [`CROSS_STREAM_SLACK_NS`] of the start.
    fn cross_stream_wait(&self, op: u32, ready_ns: i64) -> Option<u32> {
        let o = &self.ops[op as usize];
        if !o.kind.on_gpu() || o.start_ns <= ready_ns {
            return None;
        }
        let list = &self.gpu_by_end[o.rank_index as usize];
        let upto = self.gpu_end_ns[o.rank_index as usize].partition_point(|&end_ns| end_ns <= o.start_ns);
        let waited =
            list[..upto].iter().rev().take(SEARCH_BACK).copied().find(|&g| self.ops[g as usize].lane != o.lane)?;
        let end_ns = self.ops[waited as usize].end_ns;
        (end_ns > ready_ns && o.start_ns - end_ns <= CROSS_STREAM_SLACK_NS).then_some(waited)
    }

    /// The graph: measured vertex times and the counts of the stats.
    fn finish(mut self) -> Graph {
        let op_count = self.op_count;
        let vertex_count = 2 * op_count + self.instances_in_model.len();
        let this = &self;
        let measured_ns: Vec<i64> = (0..vertex_count as u32).into_par_iter().map(|v| this.measured(v)).collect();
        self.stats.ops = op_count as u64;
        let calls = self.ops.par_iter().with_min_len(PAR_MIN_LEN).filter(|o| o.kind == OpKind::HostCall).count();
        self.stats.host_calls = calls as u64;
        self.stats.gpu_ops = self.stats.ops - self.stats.host_calls;
        Graph::assemble(Parts {
            ops: self.ops,
            ranks: self.ranks.to_vec(),
            categories: self.categories,
            window_start_ns: self.window_start_ns,
            stats: self.stats,
            edges: self.edges,
            external_ns: self.external_ns,
            measured_ns,
            barriers: self.instances_in_model.len() as u32,
            barrier_instances: self.instances_in_model.iter().map(|&i| i as u32).collect(),
            instances: self.instance_count,
        })
    }
}

impl Graph {
    /// Builds the model of `ranks` of `traces`, each rank within its window in `windows_ns` (`[start, end)` of
    /// the trace clock; `None`: everything): host calls that start in it, and GPU operations whose launching call
    /// starts in it, or that start in it when no call is recorded. The collective instances come from `matching`
    /// ([`crate::figures::collectives::match_traces`] over the same traces).
    pub fn build(
        traces: &[Trace],
        ranks: &[RankSpec],
        matching: &Matching,
        classifier: &Classifier,
        windows_ns: &[Option<(i64, i64)>],
    ) -> Graph {
        let b = stage("model operations", || {
            let mut b = Builder::new(traces, ranks, matching, classifier, windows_ns);
            b.add_operations(classifier);
            stage("model operations: vertices", || b.prepare_vertices());
            b
        });
        let b = stage("model edges", || {
            let mut b = b;
            stage("model edges: run", || b.add_run_edges());
            stage("model edges: stream order and launches", || b.add_stream_order_and_launch_edges());
            stage("model edges: host order", || b.add_host_order_edges());
            stage("model edges: GPU operations by end", || b.sort_gpu_ops_by_end());
            stage("model edges: host syncs", || b.add_host_sync_edges());
            stage("model edges: collectives", || b.add_collective_edges());
            stage("model edges: cross-stream waits", || b.add_cross_stream_edges());
            b
        });
        b.finish()
    }
    /// Builds a model whose operations and dependencies are given rather than inferred from a trace (a dataset
    /// that records its own dependency structure, or a synthetic case): every edge has lag 0, and the measured own
    /// times follow from `measured_ns` as in [`Graph::build`].
    pub fn from_explicit(model: ExplicitModel) -> Graph {
        let vertex_count = 2 * model.ops.len() + model.barriers as usize;
        assert_eq!(model.external_ns.len(), vertex_count, "one external time per vertex");
        assert_eq!(model.measured_ns.len(), vertex_count, "one measured time per vertex");
        let mut edges = Vec::with_capacity(model.edges.len() + model.ops.len());
        // The run edge of every operation comes first among its end's edges, as in `build`, so that the critical
        // path prefers it on ties.
        for op in 0..model.ops.len() as u32 {
            edges.push(listed(end_vertex(op), Edge { source: start_vertex(op), lag_ns: 0, kind: EdgeKind::Run }));
        }
        edges.extend(model.edges.iter().map(|e| listed(e.target, Edge { source: e.source, lag_ns: 0, kind: e.kind })));
        let ops_count = model.ops.len() as u64;
        let stats = ModelStats {
            ops: ops_count,
            gpu_ops: model.ops.iter().filter(|o| o.kind.on_gpu()).count() as u64,
            host_calls: model.ops.iter().filter(|o| !o.kind.on_gpu()).count() as u64,
            collective_instances: u64::from(model.barriers),
            ..ModelStats::default()
        };
        Graph::assemble(Parts {
            ops: model.ops,
            ranks: model.ranks,
            categories: model.categories,
            window_start_ns: model.window_start_ns,
            stats,
            edges,
            external_ns: model.external_ns,
            measured_ns: model.measured_ns,
            barriers: model.barriers,
            barrier_instances: Vec::new(),
            instances: model.instances,
        })
    }

    /// The common end of both constructors: incoming edges per vertex, topological order, measured own times.
    fn assemble(parts: Parts) -> Graph {
        let Parts {
            ops,
            ranks,
            categories,
            window_start_ns,
            mut stats,
            edges: list,
            external_ns,
            measured_ns,
            barriers,
            barrier_instances,
            instances,
        } = parts;
        // Counted per kind first (a slot per kind, counted on worker threads), then one map entry per kind.
        let per_kind = list
            .par_chunks(1 << 16)
            .map(|chunk| {
                let mut counts = [0u64; EdgeKind::COUNT];
                for (_, edge) in chunk.iter().map(unlisted) {
                    counts[edge.kind as usize] += 1;
                }
                counts
            })
            .reduce(|| [0u64; EdgeKind::COUNT], |a, b| std::array::from_fn(|k| a[k] + b[k]));
        for kind in EdgeKind::ALL.into_iter().filter(|&k| k != EdgeKind::Run && per_kind[k as usize] > 0) {
            *stats.edges.entry(kind.describe().to_string()).or_default() += per_kind[kind as usize];
        }
        let by_vertex = external_ns.into_par_iter().enumerate().map(|(vertex, at)| (vertex as u32, at));
        let external = ExternalTimes::new(2 * ops.len() as u32, window_start_ns, by_vertex);
        let mut graph = Graph {
            ops,
            ranks,
            categories,
            window_start_ns,
            stats,
            position_of: Vec::new(),
            own_ns: Vec::new(),
            measured_ns,
            order: Vec::new(),
            plan: ReplayPlan::default(),
            barriers,
            barrier_instances,
            instances,
            spare_times: SpareTimes::default(),
            on_gpu_bits: Vec::new(),
            replays_measured: false,
        };
        graph.on_gpu_bits = on_gpu_bits(&graph.ops);
        let (incoming, order) = stage("model order", || graph.lists_and_order(list, external));
        graph.order = order;
        graph.position_of = graph.positions_in_order();
        // The plan takes the lists' place (they go as soon as it holds the kept edges: with both, a 10 M-kernel
        // model's peak held every edge twice).
        graph.plan = stage("model replay plan", || graph.replay_plan(incoming));
        graph.own_ns = graph.measured_own();
        graph
    }

    /// Number of vertices.
    pub fn vertex_count(&self) -> usize {
        2 * self.ops.len() + self.barriers as usize
    }

    /// The kept incoming edges of `vertex`, in the order they were found, read from the replay plan.
    fn incoming(&self, vertex: u32) -> impl Iterator<Item = Edge> + '_ {
        let plan = &self.plan;
        let range = plan.range(self.position_of[vertex as usize] as usize);
        plan.edges[range.clone()].iter().zip(&plan.kinds[range]).map(|(edge, &kind)| Edge {
            source: self.order[edge.source_position as usize],
            lag_ns: plan.lags_ns[edge.lag as usize],
            kind,
        })
    }

    /// The earliest time given to `vertex` from outside the model.
    fn external_ns(&self, vertex: u32) -> i64 {
        self.plan.external.at(self.position_of[vertex as usize] as usize, vertex)
    }

    /// The incoming lists of `list`'s edges (with the times given from outside, `external`) and the topological
    /// order: Kahn's algorithm, earliest measured time first; where the edges form a cycle, the remaining vertex with
    /// the earliest measured time loses its incoming edges from unprocessed vertices (counted). The order is made a
    /// stretch of time per worker where the model allows it ([`segments`]); elsewhere, on a large model and a pool of
    /// several workers, Kahn's loop over every vertex runs on one worker while the others lay out the incoming lists,
    /// which it reads only to break a cycle (then it gives up, and runs again once they are laid out); else after
    /// them.
    fn lists_and_order(&mut self, list: Vec<ListedEdge>, external: ExternalTimes) -> (IncomingLists, Vec<u32>) {
        let n = self.vertex_count();
        let edges = || list.par_iter().with_min_len(PAR_MIN_LEN).map(source_and_target);
        let cuts = stage("model order: cuts", || segments::cuts_worth_making(&self.measured_ns, edges()));
        let lists = |list| {
            let (offsets, words) = stage("model incoming lists", || incoming_lists(list, n));
            IncomingLists { offsets, words, external }
        };
        let ((mut incoming, order), (outgoing_offsets, outgoing)) =
            if cuts.is_none() && segments::order_worth_sharing_out(n) {
                // Here the successors come from the listed edges, as the incoming lists are laid out beside the
                // loop; elsewhere from the incoming lists, once the list is gone (24 bytes an edge against 16).
                let (outgoing_offsets, outgoing) = stage("model order: successors", || bucketed(n, edges));
                let indegree = in_degrees(n, edges());
                let measured_ns = &self.measured_ns;
                let acyclic_loop = || kahns_loop(measured_ns, indegree, &outgoing_offsets, &outgoing, |_| None);
                let made = rayon::join(|| lists(list), || stage("model order: loop", acyclic_loop));
                (made, (outgoing_offsets, outgoing))
            } else {
                let incoming = lists(list);
                let (outgoing_offsets, outgoing) = stage("model order: successors", || outgoing_lists(&incoming, n));
                let order = cuts.and_then(|cuts| {
                    stage("model order: segments", || {
                        segments::segmented_order(&self.measured_ns, &incoming, &outgoing_offsets, &outgoing, &cuts)
                    })
                });
                ((incoming, order), (outgoing_offsets, outgoing))
            };
        let order = order.unwrap_or_else(|| self.whole_loop_order(&mut incoming, &outgoing_offsets, &outgoing));
        // Tests (debug builds) check what the loops rely on: each vertex handed out once.
        #[cfg(debug_assertions)]
        {
            let mut handed_out = vec![false; n];
            for &v in &order {
                assert!(!std::mem::replace(&mut handed_out[v as usize], true), "vertex {v} ordered twice");
            }
        }
        (incoming, order)
    }

    /// [`Graph::lists_and_order`]'s order by Kahn's loop over every vertex, on one thread, a cycle broken where met.
    fn whole_loop_order(
        &mut self,
        incoming: &mut IncomingLists,
        outgoing_offsets: &[u32],
        outgoing: &[AtomicU32],
    ) -> Vec<u32> {
        let n = self.vertex_count();
        let indegree: Vec<u32> =
            incoming.offsets.par_windows(2).with_min_len(PAR_MIN_LEN).map(|w| w[1] - w[0]).collect();
        let measured_ns = &self.measured_ns;
        let dropped = &mut self.stats.edges_dropped_for_cycles;
        let mut by_time: Vec<u32> = Vec::new();
        let mut cursor = 0;
        // A cycle: force the earliest remaining vertex.
        let force = |indegree: &mut [u32]| {
            if by_time.is_empty() {
                by_time = (0..n as u32).collect();
                by_time.sort_by_key(|&v| (measured_ns[v as usize], v));
            }
            while indegree[by_time[cursor] as usize] == 0 {
                cursor += 1;
            }
            let v = by_time[cursor];
            for index in incoming.range(v) {
                let edge = incoming.edge(index);
                if indegree[edge.source as usize] > 0 && edge.kind != EdgeKind::Dropped {
                    incoming.drop_edge(index);
                    *dropped += 1;
                }
            }
            Some(v)
        };
        let order = kahns_loop(measured_ns, indegree, outgoing_offsets, outgoing, force);
        order.unwrap_or_default()
    }

    /// Each vertex's position in the topological order.
    fn positions_in_order(&self) -> Vec<u32> {
        let position_of = atomic_zeros(self.vertex_count());
        self.order.par_iter().with_min_len(PAR_MIN_LEN).enumerate().for_each(|(position, &vertex)| {
            position_of[vertex as usize].store(position as u32, Ordering::Relaxed);
        });
        position_of.into_par_iter().with_min_len(PAR_MIN_LEN).map(AtomicU32::into_inner).collect()
    }

    /// Own times from the measured times and the replay plan; negative ones (the record contradicts the model) are
    /// counted and zeroed.
    fn measured_own(&mut self) -> Vec<i64> {
        // Each position's own time depends on measured times only: made on worker threads in the plan's order
        // (its edges read in sequence), then gathered by vertex.
        let (plan, order, measured_ns) = (&self.plan, &self.order, &self.measured_ns);
        let saturated = AtomicBool::new(false);
        let own_by_position: Vec<i64> = (0..order.len())
            .into_par_iter()
            .with_min_len(PAR_MIN_LEN)
            .map(|position| {
                let external_ns = plan.external.at(position, order[position]);
                let ready =
                    plan.ready_ns(position, external_ns, 0, |source| measured_ns[order[source as usize] as usize]);
                let measured = measured_ns[order[position] as usize];
                measured.checked_sub(ready).unwrap_or_else(|| {
                    saturated.store(true, Ordering::Relaxed);
                    measured.saturating_sub(ready)
                })
            })
            .collect();
        self.stats.inconsistent_vertices =
            own_by_position.par_iter().with_min_len(PAR_MIN_LEN).filter(|&&own| own < 0).count() as u64;
        // Then, vertex by vertex in the order, the replay's ready time is the measured one and adds up to the
        // measured time again.
        self.replays_measured = self.stats.inconsistent_vertices == 0 && !saturated.into_inner();
        let position_of = &self.position_of;
        position_of.par_iter().with_min_len(PAR_MIN_LEN).map(|&p| own_by_position[p as usize].max(0)).collect()
    }

    /// Whether replaying the model unchanged gives every measured time (see [`Graph::replayed_last_end`]): its last
    /// end is then the measured one, with no replay to run.
    pub fn replays_measured(&self) -> bool {
        self.replays_measured
    }

    /// The measured own time of each vertex: delays at start vertices, durations at end vertices, 0 at barriers.
    pub fn own_ns(&self) -> &[i64] {
        &self.own_ns
    }

    /// The measured time of each vertex.
    pub fn measured_ns(&self) -> &[i64] {
        &self.measured_ns
    }

    /// Number of distinct operation instances (kind, name, occurrence on a rank) across ranks.
    pub fn instance_count(&self) -> usize {
        self.instances as usize
    }

    /// Replays the model with own times `own_ns` (one per vertex); with `comm_free`, matched collectives no longer
    /// wait for their barrier. Returns every vertex's simulated time.
    pub fn simulate(&self, own_ns: &[i64], comm_free: bool) -> Vec<i64> {
        let skip: &[EdgeKind] = if comm_free { &[EdgeKind::CollectiveRelease] } else { &[] };
        self.simulate_skipping(own_ns, skip)
    }

    /// Replays the model with own times `own_ns`, ignoring every edge of the kinds in `skip` (a collective's
    /// release: communication free; a host sync: the host no longer waits for the GPU). Returns every vertex's
    /// simulated time.
    pub fn simulate_skipping(&self, own_ns: &[i64], skip: &[EdgeKind]) -> Vec<i64> {
        let at = self.replay_in_order(|vertex| own_ns[vertex as usize], skip, |_, _| {});
        // Gathered by vertex on worker threads (scattered from the order by one thread, the writes and the fresh
        // pages they met were a second of the 10 M-kernel report on 2 cores).
        let times =
            self.position_of.par_iter().with_min_len(PAR_MIN_LEN).map(|&position| at[position as usize]).collect();
        self.spare_times.give(at);
        times
    }

    /// The bytes one [`Graph::replayed_last_end`] holds while it runs: its ring and the far sources' times, or a
    /// time per vertex where the model has no ring plan.
    pub fn span_replay_bytes(&self) -> u64 {
        let times = match &self.plan.far_sources {
            Some(far_sources) => self.ring_len() + far_sources.len(),
            None => self.order.len(),
        };
        (times as u64).saturating_mul(size_of::<i64>() as u64)
    }

    /// What [`Graph::last_end`] finds in the times of a replay with the own time `own_of(vertex)` of every vertex
    /// (edges of the kinds in `skip` ignored), without keeping those times: the replays whose only figure is the
    /// span hold one time per vertex, not three.
    pub fn replayed_last_end(&self, own_of: impl Fn(u32) -> i64, skip: &[EdgeKind]) -> Option<(u32, i64)> {
        if let Some([end]) = self.replayed_last_ends(|vertex| [own_of(vertex)], skip) {
            return end;
        }
        let mut last = LastEnd::default();
        let times = self.replay_in_order(own_of, skip, |vertex, t| self.offer_end(&mut last, vertex, t));
        self.spare_times.give(times);
        last.found()
    }

    /// Offers `last` the time `t` of `vertex` where it is an operation's end.
    #[inline]
    fn offer_end(&self, last: &mut LastEnd, vertex: u32, t: i64) {
        if vertex % 2 == 1 && (vertex as usize) < 2 * self.ops.len() {
            let op = vertex / 2;
            let on_gpu = self.on_gpu_bits[op as usize / 64] >> (op % 64) & 1 == 1;
            last.offer(op, on_gpu, t);
        }
    }

    /// [`Graph::replayed_last_end`] of `LANES` replays in one pass over the replay plan, replay `k` with the own
    /// time `own_of(vertex)[k]` of every vertex: replays that differ only in their own times (each rank's
    /// operations at typical times, say) read the plan, the largest thing a replay reads, once instead of each.
    /// `None` where the model has no ring plan (each replay would keep a time per vertex): replay them one by one.
    pub fn replayed_last_ends<const LANES: usize>(
        &self,
        own_of: impl Fn(u32) -> [i64; LANES],
        skip: &[EdgeKind],
    ) -> Option<[Option<(u32, i64)>; LANES]> {
        let far_sources = self.plan.far_sources.as_ref()?;
        let mut last: [LastEnd; LANES] = std::array::from_fn(|_| LastEnd::default());
        self.replay_in_ring(own_of, skip, far_sources, |vertex, times: [i64; LANES]| {
            for (last, t) in last.iter_mut().zip(times) {
                self.offer_end(last, vertex, t);
            }
        });
        Some(last.map(LastEnd::found))
    }

    /// The positions a replay ring holds: a model of fewer positions needs no larger a ring than its count rounded
    /// up to a power of two (no edge reaches further back), so that a small model's replays do not clear 512 KiB
    /// each.
    fn ring_len(&self) -> usize {
        RING_POSITIONS.min(self.order.len().next_power_of_two())
    }

    /// [`Graph::replay_in_order`] of `LANES` replays at once (own times `own_of(vertex)`, one per replay), keeping
    /// only the last [`RING_POSITIONS`] times, and those of `far_sources`, which later edges read from further
    /// back: the same times, each position's passed to `seen`, in a few hundred KiB a replay instead of a time per
    /// vertex (the findings run a dozen such replays side by side).
    fn replay_in_ring<const LANES: usize>(
        &self,
        own_of: impl Fn(u32) -> [i64; LANES],
        skip: &[EdgeKind],
        far_sources: &[u32],
        mut seen: impl FnMut(u32, [i64; LANES]),
    ) {
        let ring_len = self.ring_len();
        let mask = ring_len - 1;
        let plan = &self.plan;
        let skip_mask: u32 = skip.iter().fold(0, |mask, &kind| mask | 1 << kind as u32);
        let mut ring = vec![[0i64; LANES]; ring_len];
        let mut external = plan.external.in_order();
        let mut far_times = vec![[0i64; LANES]; far_sources.len()];
        let mut next_far = 0;
        for (position, &vertex) in self.order.iter().enumerate() {
            let ready = plan.ready_in_lanes(position, external.at(position, vertex), skip_mask, |source| {
                // Within the ring, the source's slot has not been written since (a later position in it would be
                // `ring_len` after the source, past this one).
                if position - (source as usize) < ring_len {
                    ring[source as usize & mask]
                } else {
                    far_times[far_sources.binary_search(&source).expect("a far source is listed")]
                }
            });
            let own = own_of(vertex);
            let t: [i64; LANES] = std::array::from_fn(|k| ready[k].saturating_add(own[k]));
            ring[position & mask] = t;
            if far_sources.get(next_far) == Some(&(position as u32)) {
                far_times[next_far] = t;
                next_far += 1;
            }
            seen(vertex, t);
        }
    }

    /// The replay itself: every vertex's time by its position in the topological order, each passed to `seen` with
    /// its vertex as it is found.
    fn replay_in_order(
        &self,
        own_of: impl Fn(u32) -> i64,
        skip: &[EdgeKind],
        mut seen: impl FnMut(u32, i64),
    ) -> Vec<i64> {
        let plan = &self.plan;
        // One bit per edge kind: the test in the inner loop stays one shift and one mask.
        let skip_mask: u32 = skip.iter().fold(0, |mask, &kind| mask | 1 << kind as u32);
        // Times by position in the order: written in sequence, and the predecessors read are recent ones.
        let mut at = self.spare_times.take(self.order.len());
        let mut external = plan.external.in_order();
        for (position, &vertex) in self.order.iter().enumerate() {
            let ready = plan.ready_ns(position, external.at(position, vertex), skip_mask, |source| at[source as usize]);
            at[position] = ready.saturating_add(own_of(vertex));
            seen(vertex, at[position]);
        }
        at
    }

    /// The kept edges, by the topological position of their target, with their sources as positions too (from
    /// [`Graph::position_of`]), and the external times keyed by position. Made on worker threads: per group of
    /// positions their kept edges.
    fn replay_plan(&self, mut incoming: IncomingLists) -> ReplayPlan {
        let external = std::mem::take(&mut incoming.external).keyed_by_position(&self.position_of);
        let position_of = &self.position_of;
        let kept = |vertex: u32| incoming.kept(vertex);
        // The counts become the offsets in their own vector (a second one of a number per vertex was the stage's
        // peak on the largest models).
        let mut offsets: Vec<u32> = Vec::with_capacity(self.order.len() + 1);
        offsets.par_extend(self.order.par_iter().with_min_len(PAR_MIN_LEN).map(|&vertex| kept(vertex).count() as u32));
        lengths_into_offsets(&mut offsets);
        // Written in place by groups of positions (collecting per thread and joining would hold the edges twice).
        let total = offsets[self.order.len()] as usize;
        let mut edges: Vec<PlanEdge> =
            (0..total).into_par_iter().with_min_len(PAR_MIN_LEN).map(|_| PlanEdge::default()).collect();
        let mut kinds: Vec<EdgeKind> =
            (0..total).into_par_iter().with_min_len(PAR_MIN_LEN).map(|_| EdgeKind::Dropped).collect();
        let groups = groups_by_offsets(&mut edges, &offsets).into_iter().zip(groups_by_offsets(&mut kinds, &offsets));
        // Each group also lists its lags that are not 0 (numbered within the group, then renumbered once every group
        // has its place among them) and the sources of its edges that reach past a replay ring (see `far_sources`).
        let laid_out: Vec<(Vec<i64>, Vec<u32>)> = groups
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|((positions, edge_slots), (_, kind_slots))| {
                let mut slots = edge_slots.iter_mut().zip(kind_slots.iter_mut());
                let (mut lags, mut far) = (Vec::new(), Vec::new());
                for position in positions {
                    // The edges first: `zip` asks its first iterator first, and an ended list must not use a slot.
                    for (edge, (slot, kind)) in kept(self.order[position]).zip(slots.by_ref()) {
                        let source_position = position_of[edge.source as usize];
                        if position - source_position as usize >= RING_POSITIONS {
                            far.push(source_position);
                        }
                        let lag = if edge.lag_ns == 0 {
                            0
                        } else {
                            lags.push(edge.lag_ns);
                            lags.len() as u32
                        };
                        *slot = PlanEdge { source_position, lag };
                        *kind = edge.kind;
                    }
                }
                (lags, far)
            })
            .collect();
        let (lags_ns, far_by_group) = renumbered_lags(&mut edges, &offsets, laid_out);
        drop(incoming);
        let far_sources = far_sources(far_by_group, edges.len(), self.order.len());
        ReplayPlan { offsets, edges, kinds, lags_ns, external, far_sources }
    }

    /// The span of the record or of a replay whose last end is `end` ([`Graph::last_end`],
    /// [`Graph::replayed_last_end`]): that end less the window start, 0 without one.
    pub fn span_ns(&self, end: Option<(u32, i64)>) -> i64 {
        end.map_or(0, |(_, t)| t.saturating_sub(self.window_start_ns))
    }

    /// The latest end of a GPU operation (else of any operation) in `times`, and its operation.
    pub fn last_end(&self, times: &[i64]) -> Option<(u32, i64)> {
        // On worker threads: tens of millions of operations, read several times per report.
        crate::figures::workers::run(|| {
            let ops = self.ops.par_iter().with_min_len(PAR_MIN_LEN).enumerate();
            let offered = ops.fold(LastEnd::default, |mut last, (op, o)| {
                last.offer(op as u32, o.kind.on_gpu(), times[end_vertex(op as u32) as usize]);
                last
            });
            offered.reduce(LastEnd::default, LastEnd::merge).found()
        })
    }

    /// The critical path through the measured times: see the module documentation.
    pub fn critical_path(&self) -> Vec<PathStep> {
        let times = &self.measured_ns;
        let Some((last, _)) = self.last_end(times) else { return Vec::new() };
        let mut steps = Vec::new();
        let mut vertex = end_vertex(last);
        loop {
            let external = self.external_ns(vertex);
            let mut best: Option<(i64, Edge)> = None;
            for edge in self.incoming(vertex) {
                let at = times[edge.source as usize].saturating_add(edge.lag_ns);
                // Strictly later wins, so that on ties the first recorded edge (the run edge of an end) is kept.
                if best.is_none_or(|(t, _)| at > t) {
                    best = Some((at, edge));
                }
            }
            let own = self.own_ns[vertex as usize];
            match best {
                Some((at, edge)) if at >= external => {
                    steps.push(PathStep {
                        vertex,
                        from_ns: at,
                        to_ns: times[vertex as usize],
                        own_ns: own,
                        after: edge.kind,
                    });
                    vertex = edge.source;
                }
                _ => {
                    steps.push(PathStep {
                        vertex,
                        from_ns: external,
                        to_ns: times[vertex as usize],
                        own_ns: own,
                        after: EdgeKind::Dropped,
                    });
                    break;
                }
            }
        }
        steps.reverse();
        steps
    }

    /// Index in the input list of the trace of operation `op`.
    pub fn trace_of(&self, op: &Op) -> usize {
        trace_of(&self.ranks, op)
    }

    /// The operation a vertex belongs to (`None` for barriers).
    pub fn op_of_vertex(&self, vertex: u32) -> Option<u32> {
        ((vertex as usize) < 2 * self.ops.len()).then_some(vertex / 2)
    }

    /// The operation whose end is vertex `vertex` (none for a start or a barrier).
    pub fn op_ended_at(&self, vertex: u32) -> Option<u32> {
        self.op_of_vertex(vertex).filter(|_| vertex % 2 == 1)
    }

    /// One flag per operation, set for the operations `ops` lists (for own times changed per operation).
    pub fn op_flags(&self, ops: impl IntoIterator<Item = usize>) -> Vec<bool> {
        let mut flags = vec![false; self.ops.len()];
        for op in ops {
            flags[op] = true;
        }
        flags
    }

    /// The barrier vertex whose release a matched collective operation waits for.
    pub fn barrier_of(&self, op: u32) -> Option<u32> {
        self.incoming(end_vertex(op)).find(|e| e.kind == EdgeKind::CollectiveRelease).map(|e| e.source)
    }

    /// The index in the model's [`Matching`] of a barrier vertex's collective instance.
    pub fn barrier_instance(&self, vertex: u32) -> Option<usize> {
        let barrier = (vertex as usize).checked_sub(2 * self.ops.len())?;
        self.barrier_instances.get(barrier).map(|&i| i as usize)
    }

    /// True for a collective barrier vertex.
    pub fn is_barrier(&self, vertex: u32) -> bool {
        (vertex as usize) >= 2 * self.ops.len()
    }
}

/// One vertex on the critical path, in time order: the path reached it at `from_ns` through `after` (`Dropped`:
/// from the window start or work before the window) and left it at `to_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStep {
    /// The vertex.
    pub vertex: u32,
    /// When its binding predecessor allowed it.
    pub from_ns: i64,
    /// Its time.
    pub to_ns: i64,
    /// Its own time (delay or duration).
    pub own_ns: i64,
    /// The kind of its binding edge.
    pub after: EdgeKind,
}

/// The lags of every group laid out by [`Graph::replay_plan`] in one list after a 0 (`lags_ns[0]`), the edges'
/// lag numbers (numbered from 1 within their group) made numbers in that list; and the groups' far sources.
fn renumbered_lags(
    edges: &mut [PlanEdge],
    offsets: &[u32],
    laid_out: Vec<(Vec<i64>, Vec<u32>)>,
) -> (Vec<i64>, Vec<Vec<u32>>) {
    let mut lags_ns = vec![0i64];
    let mut bases = Vec::with_capacity(laid_out.len());
    let mut far_by_group = Vec::with_capacity(laid_out.len());
    for (lags, far) in laid_out {
        bases.push(lags_ns.len() as u32 - 1);
        lags_ns.extend(lags);
        far_by_group.push(far);
    }
    groups_by_offsets(edges, offsets).into_par_iter().zip(bases).for_each(|((_, group), base)| {
        for edge in group.iter_mut().filter(|edge| edge.lag != 0) {
            edge.lag += base;
        }
    });
    (lags_ns, far_by_group)
}

/// The sources (as positions, ascending) of the edges that reach [`RING_POSITIONS`] or more positions back, or
/// `None` where more than one edge in 16 does so or more than one position in 8 is such a source (a replay in a
/// ring would then search the list often, and hold nearly as much as keeping every time).
/// `far_by_group`: the far edges' sources as the plan's groups of positions found them.
fn far_sources(far_by_group: Vec<Vec<u32>>, edges: usize, positions: usize) -> Option<Vec<u32>> {
    if far_by_group.iter().map(Vec::len).sum::<usize>() > edges / 16 {
        return None;
    }
    let mut far = far_by_group.concat();
    far.par_sort_unstable();
    far.dedup();
    (far.len() <= positions / 8).then_some(far)
}

/// Makes room in `items` for `additional` more, every page of the room touched on worker threads (and, where the
/// list must move, its items copied over on worker threads): the serial pushes and extends that follow then meet
/// no fresh page. Fresh pages are zeroed by the kernel on first touch, on the touching thread: in a profile of the
/// 10 M-kernel report that zeroing was most of the model's one-thread time (BENCHMARKS.md, sitting 11).
fn make_room<T: Copy + Send + Sync>(items: &mut Vec<T>, additional: usize) {
    let needed = items.len().saturating_add(additional);
    if needed > items.capacity() {
        // Twice what is needed, as growing by pushes would, so that the next steps' rooms rarely move the list;
        // only the items' pages and the room are touched (each later step touches its own room).
        let mut moved: Vec<T> = Vec::with_capacity(needed.saturating_mul(2));
        moved.par_extend(items.par_iter().with_min_len(PAR_MIN_LEN).copied());
        *items = moved;
    }
    let room = additional.min(items.capacity() - items.len());
    touch_pages(&mut items.spare_capacity_mut()[..room]);
}

/// Appends `parts` to `items` in order, each part copied by a worker into its place in room made first (tens of
/// millions of edges, one thread copying them took a tenth of a second with every other core idle).
fn append_parts<T: Copy + Send + Sync>(items: &mut Vec<T>, parts: &[&[T]]) {
    let total: usize = parts.iter().map(|part| part.len()).sum();
    make_room(items, total);
    if total < PAR_MIN_LEN {
        parts.iter().for_each(|part| items.extend_from_slice(part));
        return;
    }
    let mut room = &mut items.spare_capacity_mut()[..total];
    let mut places = Vec::with_capacity(parts.len());
    for part in parts {
        let (place, rest) = room.split_at_mut(part.len());
        places.push((place, *part));
        room = rest;
    }
    places.into_par_iter().with_min_len(1).for_each(|(place, part)| {
        for (slot, &item) in place.iter_mut().zip(part) {
            slot.write(item);
        }
    });
    // SAFETY: the `total` slots after the items were each written above (the places cover them exactly), and
    // `make_room` left room for them.
    unsafe { items.set_len(items.len() + total) };
}

/// Kahn's loop over every vertex, on one thread: vertices with `indegree` 0 ready, the earliest (measured time,
/// vertex) handed out first, each hand-out counted off its successors
/// (`outgoing[outgoing_offsets[v]..outgoing_offsets[v + 1]]`, in any order: the heap hands out its least key,
/// unique, whatever order the ready vertices join it in). Where the ready vertices run out before every vertex is
/// handed out (a cycle), `force` breaks it: it returns the vertex to hand out next (whose in-degree the loop then
/// sets to 0), or `None` to give up (the loop then returns `None`).
fn kahns_loop(
    measured_ns: &[i64],
    mut indegree: Vec<u32>,
    outgoing_offsets: &[u32],
    outgoing: &[AtomicU32],
    mut force: impl FnMut(&mut [u32]) -> Option<u32>,
) -> Option<Vec<u32>> {
    let n = indegree.len();
    // The loop runs on one thread: everything it fills is made on worker threads first, so that it meets no fresh
    // page (the kernel zeroes a fresh page on the thread that first touches it).
    let ready: Vec<Reverse<(i64, u32)>> = (0..n as u32)
        .into_par_iter()
        .with_min_len(PAR_MIN_LEN)
        .filter(|&v| indegree[v as usize] == 0)
        .map(|v| Reverse((measured_ns[v as usize], v)))
        .collect();
    let mut heap = BinaryHeap::from(ready);
    // No mark of the vertices done: each vertex joins the heap (or `next`) once, when its in-degree comes to 0 or
    // it is forced, so it is handed out once; and where the heap runs dry (a cycle), every vertex of in-degree 0
    // has been handed out, so "not done" there is "in-degree above 0".
    let mut order: Vec<u32> = Vec::with_capacity(n);
    touch_pages(&mut order.spare_capacity_mut()[..n]);
    // A vertex made ready by the last one that sorts before everything in the heap: the heap would hand it out
    // next, so it skips the heap (a kernel's end right after its start, a chain on one stream).
    let mut next: Option<u32> = None;
    while order.len() < n {
        let Some(v) = next.take().or_else(|| heap.pop().map(|Reverse((_, v))| v)) else {
            let v = force(&mut indegree)?;
            indegree[v as usize] = 0;
            heap.push(Reverse((measured_ns[v as usize], v)));
            continue;
        };
        order.push(v);
        // The earliest of the vertices `v` makes ready waits in `next`; the others go to the heap.
        let mut earliest: Option<(i64, u32)> = None;
        for w in &outgoing[outgoing_offsets[v as usize] as usize..outgoing_offsets[v as usize + 1] as usize] {
            let w = w.load(Ordering::Relaxed);
            let slot = &mut indegree[w as usize];
            if *slot > 0 {
                *slot -= 1;
                if *slot == 0 {
                    hold_earliest(&mut earliest, (measured_ns[w as usize], w), &mut heap);
                }
            }
        }
        next = next_past_heap(earliest, &mut heap);
    }
    Some(order)
}

/// Each vertex's number of incoming edges among `edges` (source and target vertex), counted on worker threads.
fn in_degrees(vertex_count: usize, edges: impl ParallelIterator<Item = (u32, u32)>) -> Vec<u32> {
    let counts = atomic_zeros(vertex_count);
    edges.for_each(|(_, target)| {
        counts[target as usize].fetch_add(1, Ordering::Relaxed);
    });
    counts.into_par_iter().with_min_len(PAR_MIN_LEN).map(AtomicU32::into_inner).collect()
}

/// A listed edge's source and target vertex.
fn source_and_target(listed: &ListedEdge) -> (u32, u32) {
    let (target, edge) = unlisted(listed);
    (edge.source, target)
}

/// In Kahn's loop, of the vertices that one handed-out vertex makes ready, keeps the earliest (time, vertex) in
/// `earliest` and puts the others on `heap`.
#[inline]
fn hold_earliest(earliest: &mut Option<(i64, u32)>, ready: (i64, u32), heap: &mut BinaryHeap<Reverse<(i64, u32)>>) {
    match *earliest {
        Some(held) if held < ready => heap.push(Reverse(ready)),
        Some(held) => {
            heap.push(Reverse(held));
            *earliest = Some(ready);
        }
        None => *earliest = Some(ready),
    }
}

/// The vertex Kahn's loop hands out next without the heap: the earliest one the last step made ready, where it sorts
/// before everything on `heap` (the heap would hand it out next); else it joins the heap.
#[inline]
fn next_past_heap(earliest: Option<(i64, u32)>, heap: &mut BinaryHeap<Reverse<(i64, u32)>>) -> Option<u32> {
    let ready = earliest?;
    match heap.peek() {
        Some(Reverse(top)) if *top < ready => {
            heap.push(Reverse(ready));
            None
        }
        _ => Some(ready.1),
    }
}

/// Writes one byte of each page of `room` on worker threads (the values stay unset: nothing reads them).
fn touch_pages<T: Send>(room: &mut [std::mem::MaybeUninit<T>]) {
    const PAGE_BYTES: usize = 4096;
    if size_of::<T>() == 0 {
        return;
    }
    let per_page = (PAGE_BYTES / size_of::<T>()).max(1);
    room.par_chunks_mut(per_page).with_min_len(64).for_each(|page| {
        // SAFETY: the first byte of a slot of the room, which this chunk holds exclusively; writing a byte of
        // uninitialised memory through `MaybeUninit` is allowed. Volatile, so that the write is not left out.
        unsafe { std::ptr::write_volatile(page[0].as_mut_ptr() as *mut u8, 0) };
    });
}

/// Each vertex's successors (offsets by vertex, then the targets) read from its incoming lists, counted and placed on
/// worker threads. The order within a vertex's list is the threads': the topological order does not depend on it.
fn outgoing_lists(incoming: &IncomingLists, vertex_count: usize) -> (Vec<u32>, Vec<AtomicU32>) {
    let pairs = || {
        (0..vertex_count as u32)
            .into_par_iter()
            .with_min_len(PAR_MIN_LEN)
            .flat_map_iter(|v| incoming.of(v).map(move |edge| (edge.source, v)))
    };
    bucketed(vertex_count, pairs)
}

/// Incoming edges per vertex (CSR: offsets by vertex, then two words an edge), in the order `list` gives them
/// within a vertex. `list` itself is sorted by target and place on worker threads, then packed from three words an
/// edge to two in the same memory, whose tail goes back to the system: a second list beside the first held every
/// edge twice (40 bytes an edge more at the model's peak, 2 GB at 10 M kernels × 8 ranks).
fn incoming_lists(list: Vec<ListedEdge>, vertex_count: usize) -> (Vec<u32>, Vec<u64>) {
    let edge_count = list.len();
    let mut words = list.into_flattened();
    let (records, _) = words.as_chunks_mut::<3>();
    records.par_iter_mut().with_min_len(PAR_MIN_LEN).enumerate().for_each(|(place, record)| record[0] |= place as u64);
    // Each key (target, place) is unique, so any correct sort gives this one order.
    let keyed: &mut [KeyedByFirstWord] = bytemuck::cast_slice_mut(&mut *records);
    keyed.radix_sort_builder().with_low_mem_tuner().sort();
    let counts = counters_with_room(vertex_count);
    records.par_iter().with_min_len(PAR_MIN_LEN).for_each(|record| {
        counts[(record[0] >> 32) as usize].fetch_add(1, Ordering::Relaxed);
    });
    // Collected in place (the same size and alignment), then made the offsets in place: one number per vertex.
    let mut offsets: Vec<u32> = counts.into_iter().map(AtomicU32::into_inner).collect();
    lengths_into_offsets(&mut offsets);
    pack_three_words_into_two(&mut words, edge_count);
    words.truncate(2 * edge_count);
    words.shrink_to_fit();
    (offsets, words)
}

/// A listed edge as the radix sort sees it: its key is the first word (target, then place in the list), taken a
/// byte at a time from the least significant.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
struct KeyedByFirstWord(ListedEdge);

impl rdst::RadixKey for KeyedByFirstWord {
    const LEVELS: usize = 8;

    #[inline]
    fn get_level(&self, level: usize) -> u8 {
        (self.0[0] >> (8 * level)) as u8
    }
}

/// Moves the last two words of each of the first `records` three-word records to words `2i` and `2i + 1`, in place.
/// Record i's new place ends before the old place of any record after `1.5 i`, so records `[a, 1.5 a)` move side by
/// side once the ones before them have moved: a few dozen rounds on worker threads after the first few thousand.
fn pack_three_words_into_two(words: &mut [u64], records: usize) {
    const ONE_BY_ONE: usize = 4096;
    for i in 0..records.min(ONE_BY_ONE) {
        words[2 * i] = words[3 * i + 1];
        words[2 * i + 1] = words[3 * i + 2];
    }
    let mut first = ONE_BY_ONE;
    while first < records {
        let end = (first + first / 2).min(records);
        let (front, back) = words.split_at_mut(3 * first);
        let moved = front[2 * first..2 * end].par_chunks_exact_mut(2).with_min_len(PAR_MIN_LEN);
        moved.zip(back[..3 * (end - first)].par_chunks_exact(3)).for_each(|(new, old)| new.copy_from_slice(&old[1..]));
        first = end;
    }
}

/// The values of `pairs()` (bucket, value) grouped by bucket: each bucket's offset (the total last) and the values,
/// counted and placed on worker threads, each bucket's in the order the threads placed them. `pairs` is called
/// twice (once to count, once to place) and must give the same pairs both times. The counts become each bucket's
/// end, the values are placed down from the ends, and the ends, come down to the starts, are the offsets: one number
/// per bucket held, not three.
pub(crate) fn bucketed<I: ParallelIterator<Item = (u32, u32)>>(
    buckets: usize,
    pairs: impl Fn() -> I,
) -> (Vec<u32>, Vec<AtomicU32>) {
    let mut bounds = counters_with_room(buckets);
    pairs().for_each(|(bucket, _)| {
        bounds[bucket as usize].fetch_add(1, Ordering::Relaxed);
    });
    let mut total = 0u32;
    for bound in &mut bounds {
        total += *bound.get_mut();
        *bound.get_mut() = total;
    }
    bounds.push(AtomicU32::new(total));
    let values = atomic_zeros(total as usize);
    pairs().for_each(|(bucket, value)| {
        let slot = bounds[bucket as usize].fetch_sub(1, Ordering::Relaxed) - 1;
        values[slot as usize].store(value, Ordering::Relaxed);
    });
    // Collected in place (the same size and alignment).
    (bounds.into_iter().map(AtomicU32::into_inner).collect(), values)
}

/// `len` counters at 0, made on worker threads, with room for one more (the total, once they are offsets).
fn counters_with_room(len: usize) -> Vec<AtomicU32> {
    let mut counters = Vec::with_capacity(len + 1);
    counters.par_extend((0..len).into_par_iter().with_min_len(PAR_MIN_LEN).map(|_| AtomicU32::new(0)));
    counters
}

/// `len` counters at 0, made on worker threads.
fn atomic_zeros(len: usize) -> Vec<AtomicU32> {
    (0..len).into_par_iter().with_min_len(PAR_MIN_LEN).map(|_| AtomicU32::new(0)).collect()
}

/// Turns the lengths of consecutive lists into where each starts in their concatenation and pushes the total, in
/// the lengths' own vector (which should have room for one more).
fn lengths_into_offsets(lengths: &mut Vec<u32>) {
    let mut total = 0u32;
    for length in lengths.iter_mut() {
        (*length, total) = (total, total + *length);
    }
    lengths.push(total);
}

/// `flat` cut into the lists of groups of consecutive vertices (`offsets` gives each vertex's list), so that
/// worker threads can write the groups side by side.
fn groups_by_offsets<'a, T>(flat: &'a mut [T], offsets: &[u32]) -> Vec<(std::ops::Range<usize>, &'a mut [T])> {
    let vertex_count = offsets.len().saturating_sub(1);
    let per_group = vertex_count.div_ceil(4096).max(1);
    let mut groups = Vec::new();
    let mut rest = flat;
    for first in (0..vertex_count).step_by(per_group) {
        let end = (first + per_group).min(vertex_count);
        let (group, tail) = std::mem::take(&mut rest).split_at_mut((offsets[end] - offsets[first]) as usize);
        groups.push((first..end, group));
        rest = tail;
    }
    groups
}

fn op_of(maps: &TraceMaps, kind: OpKind, index: u32) -> u32 {
    match kind {
        OpKind::Kernel => maps.kernels[index as usize],
        OpKind::Copy | OpKind::Set => maps.memops[index as usize],
        OpKind::Graph => maps.graphs[index as usize],
        OpKind::HostCall => maps.calls[index as usize],
    }
}

/// The measured time of a vertex during the build: start, end, or a barrier's latest member start.
fn vertex_measured(
    ops: &[Op],
    op_count: usize,
    instances_in_model: &[usize],
    matching: &Matching,
    traces: &[Trace],
    vertex: u32,
) -> i64 {
    let v = vertex as usize;
    if v < 2 * op_count {
        let op = &ops[v / 2];
        return if v.is_multiple_of(2) { op.start_ns } else { op.end_ns };
    }
    let instance = &matching.instances[instances_in_model[v - 2 * op_count]];
    instance.members.iter().map(|&(t, k)| traces[t].kernels[k as usize].start_ns).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::DeviceIdx;

    /// External times kept as the rule and its exceptions read back as they were given, looked up or in order:
    /// exceptions first and last, side by side, a start without a time, an end and a barrier with one.
    #[test]
    fn external_times_read_back_as_given() {
        let (op_vertices, start_ns) = (8u32, 100i64);
        // (vertex, time) by position: vertices in a topological order, barriers 8 and 9 after the operations'.
        let by_position: Vec<(u32, i64)> = vec![
            (0, 90),
            (1, i64::MIN),
            (2, 100),
            (8, 5),
            (3, 7),
            (4, i64::MIN),
            (6, 100),
            (5, i64::MIN),
            (9, i64::MIN),
            (7, 3),
        ];
        let times = ExternalTimes::new(op_vertices, start_ns, by_position.clone().into_par_iter());
        assert_eq!(times.positions, [0, 3, 4, 5, 9]);
        let mut in_order = times.in_order();
        for (position, &(vertex, at)) in by_position.iter().enumerate() {
            assert_eq!(times.at(position, vertex), at, "position {position}");
            assert_eq!(in_order.at(position, vertex), at, "position {position}, in order");
        }
        // Kept by vertex first (as while the model is ordered), then keyed by position: the same.
        let mut by_vertex = by_position.clone();
        by_vertex.sort_unstable();
        let mut position_of = vec![0u32; by_position.len()];
        for (position, &(vertex, _)) in by_position.iter().enumerate() {
            position_of[vertex as usize] = position as u32;
        }
        let keyed =
            ExternalTimes::new(op_vertices, start_ns, by_vertex.into_par_iter()).keyed_by_position(&position_of);
        assert_eq!((keyed.positions, keyed.times_ns), (times.positions, times.times_ns));
    }

    /// What one operation, one plan edge and one incoming edge hold (a 10 M-kernel, 8-rank model has about 20 M
    /// operations and 50 M edges).
    #[test]
    fn operations_and_edges_keep_their_sizes() {
        assert_eq!(std::mem::size_of::<Op>(), 40);
        assert_eq!(std::mem::size_of::<PlanEdge>(), 8);
        assert_eq!(std::mem::size_of::<ListedEdge>(), 24);
    }

    #[test]
    fn lengths_become_offsets_in_place() {
        let cases: [(Vec<u32>, Vec<u32>); 4] = [
            (vec![], vec![0]),
            (vec![0], vec![0, 0]),
            (vec![3, 0, 2, 5], vec![0, 3, 3, 5, 10]),
            (vec![1; 1000], (0..=1000).collect()),
        ];
        for (lengths, expected) in cases {
            let mut offsets = lengths.clone();
            lengths_into_offsets(&mut offsets);
            assert_eq!(offsets, expected, "{lengths:?}");
        }
    }

    /// Packed from three words a record to two in place: every record's last two words, in order, whether the
    /// records fit the first ones moved one by one or need the rounds after them (ending on and off a round's end).
    #[test]
    fn three_word_records_pack_into_two_in_place() {
        for records in [0, 1, 4095, 4096, 4097, 6144, 6145, 100_003] {
            let mut words: Vec<u64> = (0..3 * records as u64).collect();
            pack_three_words_into_two(&mut words, records);
            let expected: Vec<u64> = (0..records as u64).flat_map(|i| [3 * i + 1, 3 * i + 2]).collect();
            assert!(words[..2 * records] == expected[..], "{records} records");
        }
    }

    /// The incoming lists hold each vertex's edges in the order they were listed, whatever the list's order of
    /// targets (here scattered over few vertices, so that many edges share a target), every edge word for word.
    #[test]
    fn incoming_lists_keep_the_listed_order_within_a_vertex() {
        let vertex_count = 97u32;
        let list: Vec<(u32, Edge)> = (0..20_000u32)
            .map(|i| {
                let target = i.wrapping_mul(2_654_435_761) % vertex_count;
                let kind = EdgeKind::ALL[i as usize % EdgeKind::COUNT];
                (target, Edge { source: i, lag_ns: -i64::from(i % 5) * 1_000_000_007, kind })
            })
            .collect();
        let (offsets, words) = incoming_lists(list.iter().map(|&(t, e)| listed(t, e)).collect(), vertex_count as usize);
        let incoming = IncomingLists { offsets, words, external: ExternalTimes::default() };
        assert_eq!(incoming.words.len(), 2 * list.len());
        for vertex in 0..vertex_count {
            let expected: Vec<[u64; 2]> = list.iter().filter(|(t, _)| *t == vertex).map(|(_, e)| e.words()).collect();
            let found: Vec<[u64; 2]> = incoming.of(vertex).map(Edge::words).collect();
            assert_eq!(found, expected, "vertex {vertex}");
        }
        let (target, edge) = unlisted(&listed(7, list[3].1));
        assert_eq!((target, edge.words()), (7, list[3].1.words()));
    }

    /// Offers split in two anywhere and merged, either way round, give what one holder offered everything gives:
    /// ties of time (here many) go to the lowest operation, GPU operations before host calls.
    #[test]
    fn last_ends_merged_equal_one_holder_of_all_offers() {
        let offers: Vec<(u32, bool, i64)> = (0..400u32)
            .map(|op| (op, op.wrapping_mul(2_654_435_761) % 3 == 0, i64::from(op.wrapping_mul(7919) % 13)))
            .collect();
        let holding = |offers: &[(u32, bool, i64)]| {
            let mut last = LastEnd::default();
            for &(op, on_gpu, end_ns) in offers {
                last.offer(op, on_gpu, end_ns);
            }
            last
        };
        let whole = holding(&offers);
        for cut in 0..=offers.len() {
            let (front, back) = offers.split_at(cut);
            for merged in [holding(front).merge(holding(back)), holding(back).merge(holding(front))] {
                assert_eq!((merged.gpu, merged.any), (whole.gpu, whole.any), "cut at {cut}");
            }
        }
        let latest_gpu = offers.iter().filter(|o| o.1).map(|o| o.2).max();
        let first_at_latest = offers.iter().find(|o| o.1 && Some(o.2) == latest_gpu).map(|o| (o.0, o.2));
        assert_eq!(whole.gpu, first_at_latest);
    }

    /// Lists long enough for each way the in-place radix sort takes (a few hundred thousand edges, over a million)
    /// give the same incoming lists as a stable sort by target: runs of ascending targets (as the model's passes
    /// list them) followed by scattered ones.
    #[test]
    fn long_incoming_lists_equal_a_stable_sort_by_target() {
        for edge_count in [300_000u32, 1_300_000] {
            let vertex_count = edge_count / 2;
            let target_of = |i: u32| match i % 3 {
                0 => i / 3 % vertex_count,
                1 => (i / 3 + 1) % vertex_count,
                _ => i.wrapping_mul(2_654_435_761) % vertex_count,
            };
            let list: Vec<(u32, Edge)> = (0..edge_count)
                .map(|i| {
                    (target_of(i), Edge { source: i, lag_ns: i64::from(i % 7), kind: EdgeKind::ALL[i as usize % 4] })
                })
                .collect();
            let mut expected = list.clone();
            expected.sort_by_key(|&(target, _)| target);
            let (offsets, words) =
                incoming_lists(list.iter().map(|&(t, e)| listed(t, e)).collect(), vertex_count as usize);
            assert_eq!(offsets.len(), vertex_count as usize + 1);
            for (vertex, range) in offsets.windows(2).enumerate() {
                let (start, end) = (range[0] as usize, range[1] as usize);
                for (index, &(target, edge)) in (start..end).zip(&expected[start..end]) {
                    assert_eq!(target as usize, vertex, "edge {index}");
                    assert_eq!([words[2 * index], words[2 * index + 1]], edge.words(), "edge {index}");
                }
            }
            assert_eq!(offsets[vertex_count as usize] as usize, list.len());
        }
    }

    /// Lags numbered within each group of positions point, once renumbered, at their own value in the one list of
    /// lags, whichever group they came from; edges without a lag keep 0, whose lag is 0.
    #[test]
    fn renumbered_lags_point_at_their_own_values() {
        let lags_by_position: [&[i64]; 5] = [&[-5, 0], &[], &[0, -7, -9], &[-1], &[0, 0]];
        let mut offsets: Vec<u32> = lags_by_position.iter().map(|lags| lags.len() as u32).collect();
        lengths_into_offsets(&mut offsets);
        let mut edges = vec![PlanEdge::default(); offsets[5] as usize];
        let laid_out: Vec<(Vec<i64>, Vec<u32>)> = groups_by_offsets(&mut edges, &offsets)
            .into_iter()
            .map(|(positions, group)| {
                let mut lags = Vec::new();
                let lags_of_group = positions.flat_map(|p| lags_by_position[p].iter());
                for (slot, &lag_ns) in group.iter_mut().zip(lags_of_group) {
                    if lag_ns != 0 {
                        lags.push(lag_ns);
                        slot.lag = lags.len() as u32;
                    }
                }
                (lags, vec![7])
            })
            .collect();
        let groups = laid_out.len();
        let (lags_ns, far_by_group) = renumbered_lags(&mut edges, &offsets, laid_out);
        assert_eq!(lags_ns, [0, -5, -7, -9, -1]);
        let found: Vec<i64> = edges.iter().map(|edge| lags_ns[edge.lag as usize]).collect();
        assert_eq!(found, lags_by_position.concat());
        assert_eq!(far_by_group, vec![vec![7]; groups]);
    }

    #[test]
    fn room_keeps_the_items_and_holds_what_is_asked_moved_or_not() {
        let mut items: Vec<u64> = (0..100_000).collect();
        make_room(&mut items, 1_000_000);
        assert!(items.capacity() >= 1_100_000);
        assert!(items.iter().copied().eq(0..100_000), "items lost or reordered by the move");
        let capacity = items.capacity();
        items.extend(100_000..1_100_000);
        assert_eq!(items.capacity(), capacity, "the room held the extension");
        make_room(&mut items, 0);
        let left = capacity - items.len();
        make_room(&mut items, left);
        assert_eq!(items.capacity(), capacity, "room already there moves nothing");
        assert!(items.iter().copied().eq(0..1_100_000));
        let mut units = vec![(); 3];
        make_room(&mut units, 5);
        assert_eq!(units.len(), 3);
    }

    #[test]
    fn parts_are_appended_in_order_copied_in_parallel_or_not() {
        for sizes in [vec![3usize, 0, 5], vec![PAR_MIN_LEN, 0, 1, 3 * PAR_MIN_LEN + 7, 2]] {
            let mut items: Vec<u64> = (0..10).collect();
            let mut next = 10u64;
            let parts: Vec<Vec<u64>> = sizes
                .iter()
                .map(|&size| {
                    let part = (next..next + size as u64).collect();
                    next += size as u64;
                    part
                })
                .collect();
            let slices: Vec<&[u64]> = parts.iter().map(Vec::as_slice).collect();
            append_parts(&mut items, &slices);
            assert!(items.iter().copied().eq(0..next), "parts of sizes {sizes:?} lost or reordered");
        }
    }

    /// Kernel `index` of rank 0 on stream `lane`, its own instance, from `start_ns` to `end_ns`.
    fn kernel(index: u32, lane: u32, start_ns: i64, end_ns: i64) -> Op {
        Op {
            kind: OpKind::Kernel,
            rank_index: 0,
            index,
            lane,
            category: 0,
            comm: false,
            matched: false,
            start_ns,
            end_ns,
            instance: index,
        }
    }

    /// The one rank of the test models.
    fn rank_zero() -> Vec<RankSpec> {
        vec![RankSpec { key: RankKey { trace: 0, device: DeviceIdx(0) }, rank: 0 }]
    }

    /// Two streams of `per_stream` kernels of 10 ns each, one after the other on each stream, the second stream's
    /// first kernel waiting for the first stream's last (an inferred cross-stream wait).
    fn two_stream_model(per_stream: u32) -> Graph {
        let op = |index: u32| {
            let (lane, place) = (index / per_stream, i64::from(index % per_stream));
            let start_ns = i64::from(lane) * 10 * i64::from(per_stream) + 10 * place;
            kernel(index, lane, start_ns, start_ns + 10)
        };
        let ops: Vec<Op> = (0..2 * per_stream).map(op).collect();
        let mut edges = Vec::new();
        for index in 1..2 * per_stream {
            let kind = if index == per_stream { EdgeKind::CrossStream } else { EdgeKind::StreamOrder };
            edges.push(ExplicitEdge { source: end_vertex(index - 1), target: start_vertex(index), kind });
        }
        // Each stream may start at time 0 but for what it waits for.
        kernel_model(ops, edges, &[0, per_stream])
    }

    /// The model of kernels `ops` (one rank, one category) with `edges`, the operations `free_at_zero` free to
    /// start at time 0 but for what they wait for.
    fn kernel_model(ops: Vec<Op>, edges: Vec<ExplicitEdge>, free_at_zero: &[u32]) -> Graph {
        let measured_ns: Vec<i64> = ops.iter().flat_map(|o| [o.start_ns, o.end_ns]).collect();
        let mut external_ns = vec![i64::MIN; measured_ns.len()];
        for &op in free_at_zero {
            external_ns[start_vertex(op) as usize] = 0;
        }
        Graph::from_explicit(ExplicitModel {
            instances: ops.len() as u32,
            ops,
            ranks: rank_zero(),
            categories: vec!["kernel".into()],
            window_start_ns: 0,
            barriers: 0,
            edges,
            external_ns,
            measured_ns,
        })
    }

    #[test]
    fn replays_that_reuse_a_time_buffer_give_what_fresh_ones_give() {
        let graph = two_stream_model(50);
        let measured = graph.simulate(graph.own_ns(), false);
        assert_eq!(measured, graph.measured_ns(), "the measured own times replay to the record");
        // A second replay with other own times takes the first one's buffer back, full of its times.
        let doubled: Vec<i64> = graph.own_ns().iter().map(|own| 2 * own).collect();
        let slower = graph.simulate(&doubled, false);
        assert_eq!(slower.last(), Some(&2000), "100 kernels of 20 ns one after the other");
        assert_eq!(graph.simulate(graph.own_ns(), false), measured);
        assert_eq!(graph.replayed_last_end(|v| doubled[v as usize], &[]), Some((99, 2000)));
        assert_eq!(graph.replayed_last_end(|v| graph.own_ns()[v as usize], &[]), graph.last_end(&measured));
        // Without the cross-stream edge the second stream starts at time 0.
        let apart = graph.simulate_skipping(graph.own_ns(), &[EdgeKind::CrossStream]);
        assert_eq!(apart[end_vertex(99) as usize], 500);
        assert_eq!(graph.clone().simulate(graph.own_ns(), false), measured, "a clone replays alike");
    }

    /// Stream 0: `chain` kernels of 10 ns one after the other from time 0. Stream 1: `waiting` kernels, all after
    /// stream 0 has ended, kernel j waiting (an inferred cross-stream wait) for stream 0's kernel `j * stride`. With
    /// a long chain, the waits reach back further than a replay ring keeps times.
    fn far_waits_model(chain: u32, waiting: u32, stride: u32) -> Graph {
        let chain_end_ns = 10 * i64::from(chain);
        let ops: Vec<Op> = (0..chain)
            .map(|i| kernel(i, 0, 10 * i64::from(i), 10 * i64::from(i) + 10))
            .chain((0..waiting).map(|j| {
                let start_ns = chain_end_ns + 100 + 10 * i64::from(j);
                kernel(chain + j, 1, start_ns, start_ns + 10)
            }))
            .collect();
        let mut edges = Vec::new();
        for i in 1..chain {
            edges.push(ExplicitEdge {
                source: end_vertex(i - 1),
                target: start_vertex(i),
                kind: EdgeKind::StreamOrder,
            });
        }
        for j in 0..waiting {
            let (op, kind) = (chain + j, EdgeKind::CrossStream);
            edges.push(ExplicitEdge { source: end_vertex(j * stride), target: start_vertex(op), kind });
            if j > 0 {
                edges.push(ExplicitEdge {
                    source: end_vertex(op - 1),
                    target: start_vertex(op),
                    kind: EdgeKind::StreamOrder,
                });
            }
        }
        kernel_model(ops, edges, &[0])
    }

    /// The span of a replay kept in a ring (with its far sources beside it) is the full replay's, whether the
    /// edges reaching past the ring are few (kept beside it) or many (every time kept instead).
    #[test]
    fn a_replay_in_a_ring_ends_where_the_full_replay_ends() {
        let chain = RING_POSITIONS as u32; // 2 vertices per kernel: the chain spans two rings of positions
        for (waiting, stride, ring) in [(3, 7, true), (chain / 4, 1, false)] {
            let graph = far_waits_model(chain, waiting, stride);
            let far = graph.plan.far_sources.as_ref();
            assert_eq!(far.is_some(), ring, "{waiting} waits: far sources listed or not");
            if let Some(far) = far {
                assert_eq!(far.len(), waiting as usize, "one far source per wait");
            }
            // What the findings size their threads by: the ring and the far sources' times, else every time.
            let held = if ring { RING_POSITIONS + waiting as usize } else { graph.order.len() };
            assert_eq!(graph.span_replay_bytes(), 8 * held as u64, "{waiting} waits");
            // Stream 0's waited-for kernels made slow in turn, so that each far wait in turn binds.
            for slow in [0, waiting / 2, waiting - 1].map(|j| j * stride) {
                let own = graph.own_ns();
                let own_of =
                    |v: u32| if v == end_vertex(slow) { own[v as usize] + 50_000_000 } else { own[v as usize] };
                let full: Vec<i64> = (0..graph.vertex_count() as u32).map(own_of).collect();
                let expected = graph.last_end(&graph.simulate(&full, false));
                assert_eq!(graph.replayed_last_end(own_of, &[]), expected, "{waiting} waits, kernel {slow} slow");
                let apart = graph.last_end(&graph.simulate_skipping(&full, &[EdgeKind::CrossStream]));
                assert_eq!(graph.replayed_last_end(own_of, &[EdgeKind::CrossStream]), apart);
            }
            // The three slow kernels (each slower than the last) as three replays of one pass: each ends where it
            // ends replayed alone, and each alone ends elsewhere (the lanes are not mixed up). Without a ring plan a
            // pass is refused.
            let slow = [0, waiting / 2, waiting - 1].map(|j| end_vertex(j * stride));
            let own = graph.own_ns();
            let own_in_lanes = |v: u32| -> [i64; 3] {
                std::array::from_fn(|lane| own[v as usize] + if v == slow[lane] { 50_000_000 << lane } else { 0 })
            };
            for skip in [&[][..], &[EdgeKind::CrossStream]] {
                let alone: [Option<(u32, i64)>; 3] =
                    std::array::from_fn(|lane| graph.replayed_last_end(|v| own_in_lanes(v)[lane], skip));
                assert_eq!(graph.replayed_last_ends(own_in_lanes, skip), ring.then_some(alone), "{waiting} waits");
                if skip.is_empty() && waiting > 2 {
                    assert!(alone[0] != alone[1] && alone[1] != alone[2], "{alone:?}");
                }
            }
        }
    }

    /// A model smaller than the ring replays in a ring of its own size (rounded up to a power of two), its waits
    /// reaching back over most of it, and ends where the full replay ends.
    #[test]
    fn a_small_model_replays_in_a_ring_of_its_size() {
        for (chain, waiting, stride) in [(40, 3, 7), (5, 2, 1), (1, 1, 1)] {
            let graph = far_waits_model(chain, waiting, stride);
            assert!(graph.order.len() < RING_POSITIONS);
            assert_eq!(graph.plan.far_sources.as_deref(), Some(&[][..]), "no far sources");
            assert_eq!(graph.span_replay_bytes(), 8 * graph.order.len().next_power_of_two() as u64);
            for slow in 0..chain.min(waiting * stride) {
                let own = graph.own_ns();
                let own_of = |v: u32| if v == end_vertex(slow) { own[v as usize] + 5_000 } else { own[v as usize] };
                let full: Vec<i64> = (0..graph.vertex_count() as u32).map(own_of).collect();
                let expected = graph.last_end(&graph.simulate(&full, false));
                assert_eq!(graph.replayed_last_end(own_of, &[]), expected, "chain {chain}, kernel {slow} slow");
            }
        }
    }

    /// Kahn's algorithm with every ready vertex on a heap, earliest (measured time, vertex) first, a cycle broken
    /// at its earliest vertex: the order [`Graph::topological_order`] must give, and the edges it drops.
    fn heap_order(n: usize, edges: &[(u32, u32)], measured_ns: &[i64]) -> (Vec<u32>, u64) {
        let mut incoming: Vec<Vec<(u32, bool)>> = vec![Vec::new(); n];
        let mut outgoing: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(source, target) in edges {
            incoming[target as usize].push((source, false));
            outgoing[source as usize].push(target);
        }
        let mut indegree: Vec<usize> = incoming.iter().map(Vec::len).collect();
        let key = |v: u32| (measured_ns[v as usize], v);
        let mut heap: BinaryHeap<Reverse<(i64, u32)>> =
            (0..n as u32).filter(|&v| indegree[v as usize] == 0).map(|v| Reverse(key(v))).collect();
        let (mut done, mut order, mut dropped) = (vec![false; n], Vec::new(), 0);
        while order.len() < n {
            let Some(Reverse((_, v))) = heap.pop() else {
                let v = (0..n as u32).filter(|&v| !done[v as usize]).min_by_key(|&v| key(v)).unwrap();
                for (source, gone) in &mut incoming[v as usize] {
                    if !done[*source as usize] && !*gone {
                        *gone = true;
                        dropped += 1;
                    }
                }
                indegree[v as usize] = 0;
                heap.push(Reverse(key(v)));
                continue;
            };
            done[v as usize] = true;
            order.push(v);
            for &w in &outgoing[v as usize] {
                if indegree[w as usize] > 0 {
                    indegree[w as usize] -= 1;
                    if indegree[w as usize] == 0 && !done[w as usize] {
                        heap.push(Reverse(key(w)));
                    }
                }
            }
        }
        (order, dropped)
    }

    /// The explicit model of `ops` (their vertices' times `measured_ns`), `barriers` barrier vertices and `edges`, and
    /// the order and dropped edges [`heap_order`] gives it (the constructor puts each operation's run edge first,
    /// then the given ones).
    fn model_and_heap_order(
        ops: Vec<Op>,
        barriers: u32,
        edges: Vec<ExplicitEdge>,
        measured_ns: Vec<i64>,
    ) -> (ExplicitModel, Vec<u32>, u64) {
        let op_count = ops.len() as u32;
        let n = measured_ns.len();
        let all: Vec<(u32, u32)> = (0..op_count)
            .map(|o| (start_vertex(o), end_vertex(o)))
            .chain(edges.iter().map(|e| (e.source, e.target)))
            .collect();
        let (expected, dropped) = heap_order(n, &all, &measured_ns);
        let model = ExplicitModel {
            ops,
            ranks: rank_zero(),
            categories: vec!["kernel".into()],
            window_start_ns: 0,
            barriers,
            edges,
            external_ns: vec![0; n],
            measured_ns,
            instances: op_count,
        };
        (model, expected, dropped)
    }

    proptest::proptest! {
        #[test]
        fn the_order_is_kahns_earliest_first_with_edges_backwards_in_time_and_cycles(
            op_count in 1usize..12,
            barriers in 0u32..3,
            times in proptest::collection::vec(0i64..8, 30),
            pairs in proptest::collection::vec((0usize..30, 0usize..30), 0..40),
        ) {
            let n = 2 * op_count + barriers as usize;
            let measured_ns: Vec<i64> = (0..n).map(|v| times[v % times.len()]).collect();
            let edges: Vec<ExplicitEdge> = pairs
                .iter()
                .map(|&(a, b)| ExplicitEdge { source: (a % n) as u32, target: (b % n) as u32, kind: EdgeKind::HostSync })
                .collect();
            let ops: Vec<Op> = (0..op_count as u32)
                .map(|o| kernel(o, 0, measured_ns[2 * o as usize], measured_ns[2 * o as usize + 1]))
                .collect();
            let (model, expected, dropped) = model_and_heap_order(ops, barriers, edges, measured_ns);
            // On one thread the whole loop orders the vertices; on three, segments of time (see `segments`).
            let on_one = crate::figures::workers::with_threads(1, || Graph::from_explicit(model.clone()));
            proptest::prop_assert_eq!(&on_one.order, &expected);
            let graph = crate::figures::workers::with_threads(3, || Graph::from_explicit(model));
            proptest::prop_assert_eq!(&graph.order, &expected);
            proptest::prop_assert_eq!(graph.stats.edges_dropped_for_cycles, dropped);
            // Edges backwards in time make own times below 0: the unchanged replay then differs from the record,
            // and its last end is replayed, not read from the measured times.
            let own = graph.own_ns();
            let replayed = graph.replayed_last_end(|v| own[v as usize], &[]);
            proptest::prop_assert_eq!(crate::dependency::whatif::unchanged_last_end(&graph), replayed);
            if graph.replays_measured() {
                proptest::prop_assert_eq!(graph.simulate(own, false), graph.measured_ns().to_vec());
            }
        }
    }

    proptest::proptest! {
        /// Streams of kernels (each after the one before it), with edges between them forwards and backwards in
        /// time (as collective releases run), and now and then a cycle: ordered a segment of time per worker, the
        /// order is the whole loop's, and a cycle sends it back to the whole loop.
        #[test]
        fn segments_of_time_give_the_whole_loops_order(
            streams in 1usize..5,
            per_stream in 1usize..40,
            gaps in proptest::collection::vec(0i64..6, 160),
            links in proptest::collection::vec((0usize..160, 0usize..160), 0..60),
            threads in 2usize..6,
        ) {
            let op_count = streams * per_stream;
            let mut ops = Vec::new();
            let mut edges = Vec::new();
            for stream in 0..streams {
                let mut at_ns = stream as i64;
                for k in 0..per_stream {
                    let o = (stream * per_stream + k) as u32;
                    let start_ns = at_ns + gaps[o as usize % gaps.len()];
                    let end_ns = start_ns + 1 + gaps[(o as usize + 7) % gaps.len()];
                    ops.push(kernel(o, stream as u32, start_ns, end_ns));
                    if k > 0 {
                        edges.push(ExplicitEdge { source: end_vertex(o - 1), target: start_vertex(o), kind: EdgeKind::StreamOrder });
                    }
                    at_ns = end_ns;
                }
            }
            edges.extend(links.iter().map(|&(a, b)| ExplicitEdge {
                source: end_vertex((a % op_count) as u32),
                target: start_vertex((b % op_count) as u32),
                kind: EdgeKind::CrossStream,
            }));
            let measured_ns: Vec<i64> = ops.iter().flat_map(|op: &Op| [op.start_ns, op.end_ns]).collect();
            let (model, expected, dropped) = model_and_heap_order(ops, 0, edges, measured_ns);
            let graph = crate::figures::workers::with_threads(threads, || Graph::from_explicit(model));
            proptest::prop_assert_eq!(&graph.order, &expected);
            proptest::prop_assert_eq!(graph.stats.edges_dropped_for_cycles, dropped);
        }
    }

    /// Cuts between segments of time lie across no edge backwards in time, and split the vertices about evenly.
    #[test]
    fn cuts_lie_across_no_edge_backwards_in_time() {
        // 40 kernels on one stream, 10 ns each (start 10 k, end 10 k + 9); kernel 25's end releases kernel 20's
        // start, an edge from 259 ns back to 200 ns.
        let measured_ns: Vec<i64> = (0..40i64).flat_map(|k| [10 * k, 10 * k + 9]).collect();
        let edge = |source: u32, target: u32| listed(target, Edge { source, lag_ns: 0, kind: EdgeKind::StreamOrder });
        let mut list: Vec<ListedEdge> = (0..40u32).map(|k| edge(start_vertex(k), end_vertex(k))).collect();
        list.extend((1..40u32).map(|k| edge(end_vertex(k - 1), start_vertex(k))));
        list.push(edge(end_vertex(25), start_vertex(20)));
        let mut sample = measured_ns.clone();
        sample.sort_unstable();
        let edges = list.par_iter().map(source_and_target);
        let cuts = segments::cuts_ns(&sample, &segments::backward_spans(&measured_ns, edges), 16);
        assert!(cuts.len() >= 12, "about 16 segments of 80 vertices: {cuts:?}");
        assert!(cuts.iter().all(|&cut| !(201..=259).contains(&cut)), "no cut across the edge back: {cuts:?}");
        assert!(cuts.contains(&260), "the cut that fell inside moved to just after it: {cuts:?}");
        assert!(cuts.windows(2).all(|w| w[0] < w[1]), "{cuts:?}");
    }

    #[test]
    fn the_critical_path_reads_the_kept_edges_from_the_replay_plan() {
        let graph = two_stream_model(3);
        let path = graph.critical_path();
        let vertices: Vec<u32> = path.iter().map(|step| step.vertex).collect();
        assert_eq!(vertices, (0..12).collect::<Vec<u32>>(), "every start and end, in order");
        let kinds: Vec<EdgeKind> = path.iter().map(|step| step.after).collect();
        let run_then = |kind| [kind, EdgeKind::Run];
        let expected: Vec<EdgeKind> = [[EdgeKind::Dropped, EdgeKind::Run]]
            .into_iter()
            .chain([run_then(EdgeKind::StreamOrder); 2])
            .chain([run_then(EdgeKind::CrossStream)])
            .chain([run_then(EdgeKind::StreamOrder); 2])
            .flatten()
            .collect();
        assert_eq!(kinds, expected);
        assert_eq!(graph.barrier_of(0), None);
    }
}
