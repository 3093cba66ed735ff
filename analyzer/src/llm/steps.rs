//! Steps (iterations): the unit a training loop or a serving engine repeats, and the distribution of their times.
//!
//! A rank's steps come from the strongest evidence it has, in this order:
//! 1. step ranges: `ProfilerStep#N` (PyTorch profiler) or ranges matching the step pattern (vLLM's
//!    `execute_model`, TensorRT-LLM's `_forward_step …`, `step N`, `iteration N`): outermost ones per thread;
//!    a step's time is its range's wall time;
//! 2. phase instances: each prefill / decode range is one engine step; time as above;
//! 3. without annotations, the rank's GPU work as a sequence of units: each kernel launched on its own is a unit
//!    named by the kernel, and each launch of a CUDA graph is ONE unit named by the graph, its node kernels folded
//!    into it (a decode step served from a graph — torch.compile's CUDA graphs, an XLA executable run as a command
//!    buffer — is the graph launch with the eager kernels around it). A *period* is a repeat count shared by units
//!    that run exactly once per repetition, in the same order each time (the i-th occurrence of each lies between
//!    the i-th and (i+1)-th of the earliest of them): at least [`MIN_ANCHORS`] kernel names, or one graph (a
//!    graph replayed [`MIN_INFERRED_STEPS`] times or more is a loop by itself). Periods nest (calls hold steps,
//!    steps hold layers or 8 identical blocks), and some cover part of the run only (prefills, eager warm-up). An
//!    engine's step is the host's loop: the GPU waits for the host once per step (the sampled token is read back,
//!    `block_until_ready`, the next call into the framework), while the layers or blocks inside a step are launched
//!    back to back. So the steps are the period with the most repetitions of those where [`BREAK_SHARE`] of the
//!    repetitions hold such a *host break* (GPU idle of at least [`MIN_HOST_BREAK_NS`] and [`HOST_BREAK_FACTOR`] ×
//!    the median idle before the units inside its repetitions); a loop that never waits for the host (a GPU-bound training loop) gets its
//!    outermost period, the one with the fewest repetitions. A step runs from one occurrence of the earliest unit
//!    of its period to the next (the last step to the end of the last unit, at most [`LAST_STEP_FACTOR`] × the
//!    median step); its time is that GPU interval. Marked `inferred_from_graphs` when a graph is among the units that define the period,
//!    else `inferred_from_kernels`.
//!
//! Leading warm-up (compilation, autotuning, caches filling) is told by [`detect_warmup`]: steps at the start that
//! take more than [`WARMUP_FACTOR`] × the median of their kind (prefill or not) in the run's second half; a first
//! prefill alone is not warm-up. `--skip-steps N` overrides it.
//!
//! Percentiles are nearest-rank: the smallest value with at least p % of the steps at or below it.

use std::collections::HashMap;

use regex::Regex;
use serde::Serialize;
use shardscope_model::{DeviceIdx, NameId, ProcessIdx, RangeKind, Trace};

use crate::figures::window::clip;

/// The default step pattern: PyTorch profiler steps, vLLM's model-execution call, TensorRT-LLM's forward step,
/// and ranges named `step`, `iteration`, `train_step`, `training_step` with an optional number.
pub const DEFAULT_STEP_PATTERN: &str = r"(?i)^(ProfilerStep#\d+|execute_model|_?forward_step\b.*|(train_|training_)?step([ _#:-]*\d+)?|iter(ation)?([ _#:-]*\d+)?)$";

/// The fewest repetitions of a kernel sequence taken as steps.
pub const MIN_INFERRED_STEPS: usize = 3;

/// The fewest kernel names that must repeat once per step before steps are inferred from kernels.
pub const MIN_ANCHORS: usize = 3;

/// A leading step slower than this many times the median of the run's second half is warm-up.
pub const WARMUP_FACTOR: f64 = 1.5;

/// The GPU idle before a unit that marks the host's turn in a loop (a synchronisation, the sampling of a token, the
/// next call into the framework): at least this long …
pub const MIN_HOST_BREAK_NS: i64 = 20_000;

/// … and at least this many times the median idle before the units inside the loop's repetitions (launch-bound
/// programs idle between every two kernels).
pub const HOST_BREAK_FACTOR: i64 = 5;

/// A period is a host loop when at least this share (numerator, denominator) of its repetitions hold a host break.
pub const BREAK_SHARE: (usize, usize) = (9, 10);

/// The last step of a loop lasts at most this many times the median of the others.
pub const LAST_STEP_FACTOR: i64 = 2;

/// How many units of one repeat count are tried as the earliest of a period before the count is given up.
const MAX_ANCHOR_TRIES: usize = 8;

/// Count, extremes and percentiles of a set of durations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Distribution {
    /// Number of values.
    pub count: u64,
    /// Smallest.
    pub min_ns: i64,
    /// Median (nearest rank).
    pub p50_ns: i64,
    /// 90th percentile (nearest rank).
    pub p90_ns: i64,
    /// 99th percentile (nearest rank).
    pub p99_ns: i64,
    /// Largest.
    pub max_ns: i64,
    /// Sum of all values.
    pub total_ns: i64,
}

impl Distribution {
    /// The distribution of `values` (empty: all zero).
    pub fn of(mut values: Vec<i64>) -> Distribution {
        if values.is_empty() {
            return Distribution::default();
        }
        values.sort_unstable();
        let n = values.len();
        let rank = |p: usize| values[(p * n).div_ceil(100).clamp(1, n) - 1];
        Distribution {
            count: n as u64,
            min_ns: values[0],
            p50_ns: rank(50),
            p90_ns: rank(90),
            p99_ns: rank(99),
            max_ns: values[n - 1],
            total_ns: values.iter().sum(),
        }
    }
}

/// Where a rank's steps came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Ranges matching the step pattern (incl. `ProfilerStep#N`).
    StepRanges,
    /// Instances of the phases (prefill, decode, ...).
    PhaseInstances,
    /// A repeating kernel sequence (no annotations): inferred.
    InferredFromKernels,
    /// CUDA graph launches (XLA command buffers included) with the kernels around them (no annotations): inferred.
    InferredFromGraphs,
}

impl StepSource {
    /// Words for the table.
    pub fn describe(self) -> &'static str {
        match self {
            StepSource::StepRanges => "step ranges",
            StepSource::PhaseInstances => "phase ranges",
            StepSource::InferredFromKernels => "inferred from a repeating kernel sequence",
            StepSource::InferredFromGraphs => "inferred from CUDA graph launches and the kernels around them",
        }
    }
}

/// One rank's step times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Steps {
    /// Where they came from.
    pub source: StepSource,
    /// Steps found (warm-up included).
    pub found: u64,
    /// Leading steps left out as warm-up (`--skip-steps`, or detected: see `warmup`).
    pub skipped: u64,
    /// How the warm-up was chosen: `skip_steps` (given), `detected` (leading outliers, see [`detect_warmup`]) or
    /// `none`.
    pub warmup: &'static str,
    /// The steady-state window: the start of the first kept step to the end of the last, when steps were kept.
    pub steady_window_ns: Option<(i64, i64)>,
    /// Times of the steps kept (all zero when every step was skipped).
    pub time: Distribution,
    /// `[start_ns, end_ns)` of each kept step, in order.
    #[serde(skip)]
    pub intervals: Vec<(i64, i64)>,
    /// `[start_ns, end_ns)` of every step found, warm-up included, in order.
    #[serde(skip)]
    pub found_intervals: Vec<(i64, i64)>,
}

/// Top-level step ranges of `trace` (outermost per thread and per GPU stream) matching `pattern`, in time order,
/// of `process` when given (the process that drove the rank's GPU).
pub fn step_ranges(trace: &Trace, process: Option<ProcessIdx>, pattern: &Regex) -> Vec<(i64, i64)> {
    let mut matches: HashMap<NameId, bool> = HashMap::new();
    // A track: process, thread, and the GPU stream of GPU-side annotations.
    type Track = (u32, u32, Option<u32>);
    let mut by_track: HashMap<Track, Vec<(i64, i64)>> = HashMap::new();
    for range in &trace.ranges {
        let is_step = *matches.entry(range.name).or_insert_with(|| pattern.is_match(trace.names.get(range.name)));
        if !is_step || range.end_ns <= range.start_ns || process.is_some_and(|p| range.process != p) {
            continue;
        }
        let stream = if range.kind == RangeKind::GpuAnnotation { range.stream } else { None };
        by_track.entry((range.process.0, range.tid, stream)).or_default().push((range.start_ns, range.end_ns));
    }
    // The track with the most steps is the loop's; nested matches (a step inside a step) are dropped.
    let mut best: Vec<(i64, i64)> = Vec::new();
    for mut track in by_track.into_values() {
        track.sort_unstable_by_key(|&(start, end)| (start, std::cmp::Reverse(end)));
        let mut outermost: Vec<(i64, i64)> = Vec::new();
        for range in track {
            if outermost.last().is_none_or(|last| range.0 >= last.1) {
                outermost.push(range);
            }
        }
        if outermost.len() > best.len() || (outermost.len() == best.len() && outermost.first() < best.first()) {
            best = outermost;
        }
    }
    best
}

/// What a unit of GPU work is, for finding the period of a loop: a kernel launched on its own (by name), or one
/// launch of a CUDA graph (by the graph's identity; its node kernels are not units of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkToken {
    /// A kernel launched on its own.
    Kernel(NameId),
    /// One launch of the graph with this identity (graph id, or smallest node id where only node ids are known).
    Graph(u64),
}

/// One unit of a GPU's work, in start order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnit {
    /// GPU start.
    pub start_ns: i64,
    /// GPU end.
    pub end_ns: i64,
    /// What it is.
    pub token: WorkToken,
}

/// Steps found in a unit sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferredSteps {
    /// `[start_ns, end_ns)` per step, in order.
    pub intervals: Vec<(i64, i64)>,
    /// A graph is among the units that define the period.
    pub from_graphs: bool,
}

/// By name id: whether a call of that name launches a CUDA graph (`cudaGraphLaunch*`, `cuGraphLaunch*`). Made once
/// per walk, it spares a lookup by hash per kernel.
pub fn graph_launch_names(trace: &Trace) -> Vec<bool> {
    (trace.names.iter())
        .map(|(_, name)| name.starts_with("cudaGraphLaunch") || name.starts_with("cuGraphLaunch"))
        .collect()
}

/// One GPU's units of work in start order (see [`WorkToken`]): `kernels` are its kernel indices in start order,
/// clipped to `window_ns`; kernels for which `leave_out` says so (runtime helpers that are no part of the loop) are
/// not units. Whole-graph records of the device are one unit each.
pub fn work_units(
    trace: &Trace,
    device: DeviceIdx,
    kernels: &[u32],
    window_ns: Option<(i64, i64)>,
    leave_out: impl Fn(NameId) -> bool,
) -> Vec<WorkUnit> {
    let is_graph_launch = graph_launch_names(trace);
    // Per graph launch call: the unit so far, the graph id and the smallest node id of its kernels.
    let mut replays: HashMap<u32, (WorkUnit, Option<u32>, Option<u64>)> = HashMap::new();
    let mut units = Vec::new();
    for kernel in kernels.iter().filter_map(|&i| trace.kernels.get(i as usize)) {
        let Some((start_ns, end_ns)) = clip(kernel.start_ns, kernel.end_ns, window_ns) else { continue };
        if leave_out(kernel.name) {
            continue;
        }
        let graph_call = kernel.launch.filter(|&l| {
            (trace.api_calls.get(l as usize))
                .is_some_and(|call| is_graph_launch.get(call.name.0 as usize).copied().unwrap_or(false))
        });
        let Some(call) = graph_call else {
            units.push(WorkUnit { start_ns, end_ns, token: WorkToken::Kernel(kernel.name) });
            continue;
        };
        let placeholder = WorkUnit { start_ns, end_ns, token: WorkToken::Graph(0) };
        let entry = replays.entry(call).or_insert((placeholder, kernel.graph_id, kernel.graph_node_id));
        entry.0.start_ns = entry.0.start_ns.min(start_ns);
        entry.0.end_ns = entry.0.end_ns.max(end_ns);
        entry.1 = entry.1.or(kernel.graph_id);
        entry.2 = match (entry.2, kernel.graph_node_id) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    // A graph is its graph id where recorded, else its smallest node id (every replay of one executable graph
    // repeats its node ids); the top bit keeps the two kinds of identity apart.
    units.extend(replays.into_values().map(|(mut unit, graph_id, first_node)| {
        let key = graph_id.map_or(first_node.unwrap_or(u64::MAX) | 1 << 63, u64::from);
        unit.token = WorkToken::Graph(key);
        unit
    }));
    for graph in trace.graph_launches.iter().filter(|g| g.device == device) {
        if let Some((start_ns, end_ns)) = clip(graph.start_ns, graph.end_ns, window_ns) {
            units.push(WorkUnit { start_ns, end_ns, token: WorkToken::Graph(u64::from(graph.graph_id)) });
        }
    }
    units.sort_by_key(|u| (u.start_ns, u.end_ns));
    units
}

/// One period of a unit sequence: `count` repetitions, the positions of the earliest unit of the period.
#[derive(Debug, Clone)]
struct Period {
    count: usize,
    starts: Vec<usize>,
    from_graphs: bool,
}

/// The outermost repeating kernel sequence: `kernels` are one GPU's `(start_ns, end_ns, name)` in start order; the
/// period with the fewest repetitions, whatever the host does (a repetition may be one layer where layers repeat
/// the same kernels). Empty when no name set repeats regularly. Prefill/decode inference cuts kernels with it.
pub fn infer_from_kernels(kernels: &[(i64, i64, NameId)]) -> Vec<(i64, i64)> {
    let units: Vec<WorkUnit> = kernels
        .iter()
        .map(|&(start_ns, end_ns, name)| WorkUnit { start_ns, end_ns, token: WorkToken::Kernel(name) })
        .collect();
    periods(&units, 1).first().map(|p| intervals_of(&units, p)).unwrap_or_default()
}

/// Steps inferred from one GPU's units of work in start order (see the module's comment). `None` when nothing
/// repeats regularly.
pub fn infer_from_work(units: &[WorkUnit]) -> Option<InferredSteps> {
    let periods = periods(units, MAX_ANCHOR_TRIES);
    let idle_ns = idle_before(units);
    let with_breaks = |p: &&Period| broken_repetitions(p, &idle_ns) * BREAK_SHARE.1 >= p.count * BREAK_SHARE.0;
    let chosen = match periods.iter().filter(with_breaks).max_by_key(|p| (p.count, p.from_graphs)) {
        Some(host_loop) => host_loop,
        None => periods.first()?,
    };
    Some(InferredSteps { intervals: intervals_of(units, chosen), from_graphs: chosen.from_graphs })
}

/// The repetitions of `period`: from one occurrence of its earliest unit to the next, the last to the end of the
/// last unit, but no longer than [`LAST_STEP_FACTOR`] × the median of the others (work after a loop, such as a
/// final check of the results, is no step's).
fn intervals_of(units: &[WorkUnit], period: &Period) -> Vec<(i64, i64)> {
    let last_end = units.iter().map(|u| u.end_ns).max().unwrap_or(0);
    let mut intervals: Vec<(i64, i64)> = (0..period.count)
        .map(|i| {
            let start = units[period.starts[i]].start_ns;
            let end = period.starts.get(i + 1).map_or(last_end, |&next| units[next].start_ns);
            (start, end)
        })
        .collect();
    let others_median_ns =
        Distribution::of(intervals[..intervals.len() - 1].iter().map(|(s, e)| e - s).collect()).p50_ns;
    if let Some(last) = intervals.last_mut()
        && others_median_ns > 0
    {
        last.1 = last.1.min(last.0.saturating_add(others_median_ns.saturating_mul(LAST_STEP_FACTOR)));
    }
    intervals
}

/// Per unit, how long the GPU was idle before it (0 for the first).
fn idle_before(units: &[WorkUnit]) -> Vec<i64> {
    let mut busy_until_ns = i64::MIN;
    units
        .iter()
        .map(|u| {
            let idle = if busy_until_ns == i64::MIN { 0 } else { (u.start_ns - busy_until_ns).max(0) };
            busy_until_ns = busy_until_ns.max(u.end_ns);
            idle
        })
        .collect()
}

/// The idle that marks a host break in `period`: at least [`MIN_HOST_BREAK_NS`] and [`HOST_BREAK_FACTOR`] × the
/// median idle before the units inside its repetitions (launch-bound programs idle between every two kernels).
fn break_threshold_ns(period: &Period, idle_ns: &[i64]) -> i64 {
    let first = period.starts[0];
    let last = *period.starts.last().unwrap_or(&first);
    let inside: Vec<i64> =
        (first + 1..=last).filter(|i| period.starts.binary_search(i).is_err()).map(|i| idle_ns[i]).collect();
    MIN_HOST_BREAK_NS.max(Distribution::of(inside).p50_ns.saturating_mul(HOST_BREAK_FACTOR))
}

/// How many repetitions of `period` hold a host break (see [`break_threshold_ns`]): before one of a repetition's
/// units after its first, or before the next repetition's first.
fn broken_repetitions(period: &Period, idle_ns: &[i64]) -> usize {
    let threshold_ns = break_threshold_ns(period, idle_ns);
    (0..period.count)
        .filter(|&j| {
            let from = period.starts[j] + 1;
            let to = period.starts.get(j + 1).map_or(idle_ns.len().saturating_sub(1), |&next| next);
            idle_ns.get(from..=to).is_some_and(|slice| slice.iter().any(|&idle| idle >= threshold_ns))
        })
        .count()
}

/// Every repeat count of at least [`MIN_INFERRED_STEPS`] whose units run once per repetition (see the module's
/// comment), in increasing count; per count, at most `max_tries` units are tried as the earliest of a period.
fn periods(units: &[WorkUnit], max_tries: usize) -> Vec<Period> {
    let mut occurrences: HashMap<WorkToken, Vec<usize>> = HashMap::new();
    for (index, unit) in units.iter().enumerate() {
        occurrences.entry(unit.token).or_default().push(index);
    }
    let mut by_count: std::collections::BTreeMap<usize, Vec<(WorkToken, &Vec<usize>)>> = Default::default();
    for (token, list) in &occurrences {
        if list.len() >= MIN_INFERRED_STEPS {
            by_count.entry(list.len()).or_default().push((*token, list));
        }
    }
    let mut out = Vec::new();
    for (count, mut candidates) in by_count {
        candidates.sort_unstable_by_key(|(_, list)| list[0]);
        // Every unit of this count is tried as the earliest of a period, in order of first occurrence (at most
        // `max_tries` of them): set-up kernels that run as often as the steps by chance make a period of their
        // own beside the loop's, not one that hides it.
        let mut in_a_period: Vec<WorkToken> = Vec::new();
        let mut tries = 0;
        for first in 0..candidates.len() {
            if tries == max_tries {
                break;
            }
            if in_a_period.contains(&candidates[first].0) {
                continue;
            }
            tries += 1;
            let anchor = candidates[first].1;
            let once_per_repetition = |list: &Vec<usize>| {
                (0..count).all(|i| list[i] >= anchor[i] && anchor.get(i + 1).is_none_or(|&next| list[i] < next))
            };
            let members: Vec<(WorkToken, &Vec<usize>)> =
                candidates[first..].iter().filter(|(_, list)| once_per_repetition(list)).copied().collect();
            let graphs = members.iter().filter(|(t, _)| matches!(t, WorkToken::Graph(_))).count();
            if (members.len() - graphs) + graphs * MIN_ANCHORS >= MIN_ANCHORS {
                out.push(Period { count, starts: anchor.clone(), from_graphs: graphs > 0 });
                in_a_period.extend(members.iter().map(|(t, _)| *t));
            }
        }
    }
    out
}

/// Leading warm-up steps of `durations_ns` (in order; `heavy` marks prefill steps, empty when unknown): the
/// leading steps up to the last one that takes more than [`WARMUP_FACTOR`] × the median of its kind in the run's
/// second half (the steady state), as long as every step before it is such an outlier or a prefill (a first prefill
/// is the program's work, not warm-up, unless slow steps follow it). At least [`MIN_INFERRED_STEPS`] steps are kept.
pub fn detect_warmup(durations_ns: &[i64], heavy: &[bool]) -> usize {
    let n = durations_ns.len();
    if n < 2 * MIN_INFERRED_STEPS {
        return 0;
    }
    let is_heavy = |i: usize| heavy.get(i).copied().unwrap_or(false);
    let steady_median_ns = |want_heavy: bool| {
        let of_kind: Vec<i64> = (n / 2..n).filter(|&i| is_heavy(i) == want_heavy).map(|i| durations_ns[i]).collect();
        (!of_kind.is_empty()).then(|| Distribution::of(of_kind).p50_ns as f64)
    };
    let (light_median, heavy_median) = (steady_median_ns(false), steady_median_ns(true));
    let mut warmup = 0;
    for (i, &duration_ns) in durations_ns.iter().enumerate().take(n - MIN_INFERRED_STEPS) {
        let median = if is_heavy(i) { heavy_median } else { light_median };
        let outlier = median.is_some_and(|m| duration_ns as f64 > WARMUP_FACTOR * m);
        if outlier {
            warmup = i + 1;
        } else if !is_heavy(i) {
            break;
        }
    }
    warmup
}

/// How many leading steps are warm-up, and how that was decided: the first `skip` when it is not 0 (`skip_steps`),
/// else with `detect` those [`detect_warmup`] finds in the steps' durations (`detected`), else none (`none`). The
/// durations are asked for only when detecting.
pub fn leading_warmup(
    durations_ns: impl FnOnce() -> Vec<i64>,
    heavy: &[bool],
    skip: usize,
    detect: bool,
) -> (usize, &'static str) {
    if skip > 0 {
        return (skip, "skip_steps");
    }
    match detect.then(|| detect_warmup(&durations_ns(), heavy)) {
        Some(n) if n > 0 => (n, "detected"),
        _ => (0, "none"),
    }
}

/// Step times from intervals in time order, the first `skip` left out; with `skip` 0 and `detect` set, the leading
/// warm-up [`detect_warmup`] finds (`heavy` marks prefill steps, empty when unknown).
pub fn steps(source: StepSource, intervals: Vec<(i64, i64)>, skip: usize, detect: bool, heavy: &[bool]) -> Steps {
    let found = intervals.len();
    let durations = || intervals.iter().map(|(start, end)| end - start).collect::<Vec<i64>>();
    let (skip, warmup) = leading_warmup(durations, heavy, skip, detect);
    let kept: Vec<(i64, i64)> = intervals.iter().skip(skip).copied().collect();
    Steps {
        source,
        found: found as u64,
        skipped: skip.min(found) as u64,
        warmup,
        steady_window_ns: kept.first().zip(kept.last()).map(|(first, last)| (first.0, last.1)),
        time: Distribution::of(kept.iter().map(|(start, end)| end - start).collect()),
        intervals: kept,
        found_intervals: intervals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let d = Distribution::of((1..=10).rev().collect());
        assert_eq!((d.count, d.min_ns, d.p50_ns, d.p90_ns, d.p99_ns, d.max_ns, d.total_ns), (10, 1, 5, 9, 10, 10, 55));
        assert_eq!(Distribution::of(vec![7]).p50_ns, 7);
        assert_eq!(Distribution::of(Vec::new()), Distribution::default());
    }

    #[test]
    fn default_step_pattern() {
        let pattern = Regex::new(DEFAULT_STEP_PATTERN).unwrap();
        for name in [
            "ProfilerStep#12",
            "execute_model",
            "_forward_step 3: 2 ctx reqs, 0 gen reqs",
            "step 4",
            "train_step",
            "iteration_7",
        ] {
            assert!(pattern.is_match(name), "{name}");
        }
        for name in ["aten::step", "stepper", "optimizer.step#SGD.step", "Optimizer.zero_grad"] {
            assert!(!pattern.is_match(name), "{name}");
        }
    }

    #[test]
    fn repeating_kernel_sequence_gives_steps() {
        // Warm-up kernel 9, then three steps of [1, 2, 3, 4, 4] (4 runs twice per step), then 8.
        let names = [9, 1, 2, 3, 4, 4, 1, 2, 3, 4, 4, 1, 2, 3, 4, 4, 8];
        let kernels: Vec<(i64, i64, NameId)> =
            names.iter().enumerate().map(|(i, &n)| (i as i64 * 10, i as i64 * 10 + 5, NameId(n))).collect();
        assert_eq!(infer_from_kernels(&kernels), [(10, 60), (60, 110), (110, 165)]);
        // Two repeating names are not enough evidence, nor two repetitions.
        let few: Vec<(i64, i64, NameId)> =
            [1, 2, 1, 2, 1, 2].iter().enumerate().map(|(i, &n)| (i as i64, i as i64 + 1, NameId(n))).collect();
        assert!(infer_from_kernels(&few).is_empty());
        let twice: Vec<(i64, i64, NameId)> =
            [1, 2, 3, 1, 2, 3].iter().enumerate().map(|(i, &n)| (i as i64, i as i64 + 1, NameId(n))).collect();
        assert!(infer_from_kernels(&twice).is_empty());
        let skipped = steps(StepSource::InferredFromKernels, infer_from_kernels(&kernels), 1, true, &[]);
        assert_eq!((skipped.found, skipped.skipped, skipped.time.count, skipped.time.max_ns), (3, 1, 2, 55));
    }

    /// Units of 1 µs, 1 µs apart; token 0 is no unit but the host's turn: 100 µs of GPU idle. Kernels by number,
    /// graphs as `1000 + id`.
    fn laid_out(tokens: &[u32]) -> Vec<WorkUnit> {
        let mut time_ns = 0;
        let mut units = Vec::new();
        for &t in tokens {
            if t == 0 {
                time_ns += 100_000;
                continue;
            }
            let token = if t >= 1000 { WorkToken::Graph(u64::from(t - 1000)) } else { WorkToken::Kernel(NameId(t)) };
            units.push(WorkUnit { start_ns: time_ns, end_ns: time_ns + 1_000, token });
            time_ns += 2_000;
        }
        units
    }

    /// Start times of the inferred steps, and whether a graph defined them.
    fn step_starts(tokens: &[u32]) -> (Vec<i64>, bool) {
        let units = laid_out(tokens);
        let steps = infer_from_work(&units).unwrap();
        (steps.intervals.iter().map(|i| i.0).collect(), steps.from_graphs)
    }

    /// Start times of the units that are `token`.
    fn starts_of(tokens: &[u32], token: u32) -> Vec<i64> {
        let wanted =
            if token >= 1000 { WorkToken::Graph(u64::from(token - 1000)) } else { WorkToken::Kernel(NameId(token)) };
        laid_out(tokens).iter().filter(|u| u.token == wanted).map(|u| u.start_ns).collect()
    }

    #[test]
    fn nested_repetition_gives_the_outer_steps() {
        // Five steps, each: an input copy (1), eight identical blocks [2, 3, 4], sampling [5, 6], and the host's turn.
        let step: Vec<u32> = [1].into_iter().chain((0..8).flat_map(|_| [2, 3, 4])).chain([5, 6, 0]).collect();
        let tokens: Vec<u32> = (0..5).flat_map(|_| step.clone()).collect();
        assert_eq!(step_starts(&tokens), (starts_of(&tokens, 1), false));
        // Two levels: two identical halves of four identical blocks each.
        let half: Vec<u32> = [7, 8, 9].into_iter().chain((0..4).flat_map(|_| [2, 3, 4])).collect();
        let step: Vec<u32> = [1, 5, 6].into_iter().chain(half.clone()).chain(half).chain([0]).collect();
        let tokens: Vec<u32> = (0..4).flat_map(|_| step.clone()).collect();
        assert_eq!(step_starts(&tokens), (starts_of(&tokens, 1), false));
        // A GPU-bound loop that never waits for the host: the outermost period.
        let busy: Vec<u32> = tokens.iter().copied().filter(|&t| t != 0).collect();
        assert_eq!(step_starts(&busy), (starts_of(&busy, 1), false));
    }

    #[test]
    fn steps_are_the_host_loop_not_the_calls_around_it() {
        // Three generate calls of an eager engine, each a prefill [20..=24] and five decode steps [30, 31, 32];
        // every step opens with the same kernel (2: positions) and ends with the same sampling [5, 6, 7] and the
        // host's turn. Steps: 3 × 6, not 3 calls, each from its opening kernel.
        let call: Vec<u32> = [2]
            .into_iter()
            .chain(20..25)
            .chain([5, 6, 7, 0])
            .chain((0..5).flat_map(|_| [2, 30, 31, 32, 5, 6, 7, 0]))
            .collect();
        let tokens: Vec<u32> = (0..3).flat_map(|_| call.clone()).collect();
        assert_eq!(step_starts(&tokens), (starts_of(&tokens, 2), false));
        // Without the opening kernel the steps are still 18; each begins at the sampling that ends the step
        // before (then the period's earliest unit), which shifts every step by the same amount.
        let without: Vec<u32> = tokens.iter().copied().filter(|&t| t != 2).collect();
        assert_eq!(step_starts(&without), (starts_of(&without, 5), false));
    }

    #[test]
    fn graph_served_decode_steps_are_a_launch_with_the_kernels_around_it() {
        // Set-up 9; two generate calls, each an eager prefill [20..=24] and four decode steps; every step opens
        // with the same kernel (2) and ends with the same sampling [5, 6, 7] and the host's turn. The first call's
        // first decode step runs eagerly (warm-up before the graph exists), then each decode step is an input
        // copy (1) and one launch of graph 3.
        let sampling = [5, 6, 7, 0];
        let prefill: Vec<u32> = [2].into_iter().chain(20..25).chain(sampling).collect();
        let eager_decode: Vec<u32> = [2, 30, 31, 32].into_iter().chain(sampling).collect();
        let graph_decode: Vec<u32> = [2, 1, 1003].into_iter().chain(sampling).collect();
        let mut tokens = vec![9, 0];
        tokens.extend(&prefill);
        tokens.extend(&eager_decode);
        (0..3).for_each(|_| tokens.extend(&graph_decode));
        tokens.extend(&prefill);
        (0..4).for_each(|_| tokens.extend(&graph_decode));
        // Ten steps as the program counts them: two prefills and eight decode steps, each from its first unit.
        // The period is set by the units every step shares, not by the graph.
        let (starts, from_graphs) = step_starts(&tokens);
        assert_eq!(starts.len(), 10);
        assert_eq!((starts, from_graphs), (starts_of(&tokens, 2), false));
        // Graph launches alone (an XLA program: one command buffer per step, nothing eager around it) are steps;
        // set-up kernels before them, repeated by chance as often as steps, are not.
        let xla: Vec<u32> = (0..6)
            .flat_map(|_| [9, 10, 11])
            .chain([0, 40, 41])
            .chain((0..6).flat_map(|_| [1003, 0]))
            .chain([42])
            .collect();
        assert_eq!(step_starts(&xla), (starts_of(&xla, 1003), true));
    }

    #[test]
    fn graph_units_fold_node_kernels_per_launch() {
        // Four launches of graph 7, 100 µs of GPU idle between them: one step each, the last to its end.
        let graph = WorkUnit { start_ns: 0, end_ns: 100_000, token: WorkToken::Graph(7) };
        let repeated: Vec<WorkUnit> = (0..4)
            .map(|j| WorkUnit { start_ns: graph.start_ns + j * 200_000, end_ns: graph.end_ns + j * 200_000, ..graph })
            .collect();
        let steps = infer_from_work(&repeated).unwrap();
        assert_eq!(steps.intervals, [(0, 200_000), (200_000, 400_000), (400_000, 600_000), (600_000, 700_000)]);
        assert!(steps.from_graphs);
    }

    #[test]
    fn leading_outliers_are_warm_up() {
        // Compilation in the first two steps, then a steady state with one slower step later (kept).
        let durations = [4_000_000, 900, 100, 101, 99, 100, 180, 100, 102, 98];
        assert_eq!(detect_warmup(&durations, &[]), 2);
        assert_eq!(detect_warmup(&[100, 101, 99, 100, 100, 100], &[]), 0);
        // Too few steps to tell a steady state.
        assert_eq!(detect_warmup(&[900, 100, 100], &[]), 0);
        // A first prefill is work, not warm-up; a cold first call (slow prefill and decode steps) is warm-up.
        let heavy = [true, false, false, false, false, true, false, false, false, false];
        assert_eq!(detect_warmup(&[900, 100, 101, 99, 100, 800, 100, 102, 98, 100], &heavy), 0);
        assert_eq!(detect_warmup(&[9000, 700, 750, 720, 100, 800, 100, 102, 98, 100], &heavy), 4);
        assert_eq!(detect_warmup(&[9000, 100, 101, 99, 100, 800, 100, 102, 98, 100], &heavy), 1);
        let intervals: Vec<(i64, i64)> = durations
            .iter()
            .scan(0i64, |t, &d| {
                let start = *t;
                *t += d;
                Some((start, start + d))
            })
            .collect();
        let detected = steps(StepSource::InferredFromGraphs, intervals.clone(), 0, true, &[]);
        assert_eq!((detected.found, detected.skipped, detected.warmup), (10, 2, "detected"));
        assert_eq!(detected.steady_window_ns, Some((intervals[2].0, intervals[9].1)));
        assert_eq!(detected.time.max_ns, 180);
        let given = steps(StepSource::InferredFromGraphs, intervals.clone(), 1, true, &[]);
        assert_eq!((given.skipped, given.warmup), (1, "skip_steps"));
        let off = steps(StepSource::InferredFromGraphs, intervals, 0, false, &[]);
        assert_eq!((off.skipped, off.warmup), (0, "none"));
    }
}
