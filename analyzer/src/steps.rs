//! Steps (iterations): the unit a training loop or a serving engine repeats, and the distribution of their times.
//!
//! A rank's steps come from the first of these sources that has any:
//! 1. step ranges: `ProfilerStep#N` (PyTorch profiler) or ranges matching the step pattern (vLLM's
//!    `execute_model`, TensorRT-LLM's `_forward_step …`, `step N`, `iteration N`): outermost ones per thread;
//!    a step's time is its range's wall time;
//! 2. phase instances: each prefill / decode range is one engine step; time as above;
//! 3. without annotations, a repeating kernel sequence (marked `inferred`): kernel names that run exactly once per
//!    step, in the same order each step. The step count is the smallest repeat count (at least
//!    [`MIN_INFERRED_STEPS`], fewer is no evidence of a loop) that at least
//!    [`MIN_ANCHORS`] names share, and whose occurrences interleave (the i-th of each lies between the i-th and
//!    (i+1)-th of the first such name). A step runs from one occurrence of the earliest of them to the next
//!    (the last step to the end of the last kernel before the trace ends); its time is that GPU interval.
//!
//! Percentiles are nearest-rank: the smallest value with at least p % of the steps at or below it.

use std::collections::HashMap;

use regex::Regex;
use serde::Serialize;
use shardscope_model::{NameId, ProcessIdx, RangeKind, Trace};

/// The default step pattern: PyTorch profiler steps, vLLM's model-execution call, TensorRT-LLM's forward step,
/// and ranges named `step`, `iteration`, `train_step`, `training_step` with an optional number.
pub const DEFAULT_STEP_PATTERN: &str = r"(?i)^(ProfilerStep#\d+|execute_model|_?forward_step\b.*|(train_|training_)?step([ _#:-]*\d+)?|iter(ation)?([ _#:-]*\d+)?)$";

/// The fewest repetitions of a kernel sequence taken as steps.
pub const MIN_INFERRED_STEPS: usize = 3;

/// The fewest kernel names that must repeat once per step before steps are inferred from kernels.
pub const MIN_ANCHORS: usize = 3;

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
}

impl StepSource {
    /// Words for the table.
    pub fn describe(self) -> &'static str {
        match self {
            StepSource::StepRanges => "step ranges",
            StepSource::PhaseInstances => "phase ranges",
            StepSource::InferredFromKernels => "inferred from a repeating kernel sequence",
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
    /// Leading steps left out as warm-up (`--skip-steps`).
    pub skipped: u64,
    /// Times of the steps kept (all zero when every step was skipped).
    pub time: Distribution,
    /// `[start_ns, end_ns)` of each kept step, in order.
    #[serde(skip)]
    pub intervals: Vec<(i64, i64)>,
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

/// Steps inferred from a repeating kernel sequence: `kernels` are one GPU's `(start_ns, end_ns, name)` in start
/// order. Empty when no name set repeats regularly.
pub fn infer_from_kernels(kernels: &[(i64, i64, NameId)]) -> Vec<(i64, i64)> {
    let mut occurrences: HashMap<NameId, Vec<usize>> = HashMap::new();
    for (index, kernel) in kernels.iter().enumerate() {
        occurrences.entry(kernel.2).or_default().push(index);
    }
    let mut by_count: HashMap<usize, Vec<&Vec<usize>>> = HashMap::new();
    for list in occurrences.values() {
        if list.len() >= MIN_INFERRED_STEPS {
            by_count.entry(list.len()).or_default().push(list);
        }
    }
    let mut counts: Vec<usize> = by_count.keys().copied().collect();
    counts.sort_unstable();
    for count in counts {
        let mut candidates = by_count[&count].clone();
        candidates.sort_unstable_by_key(|list| list[0]);
        let anchor = candidates[0];
        // A name runs once per step when its i-th occurrence lies between the anchor's i-th and (i+1)-th.
        let once_per_step = |list: &&&Vec<usize>| {
            (0..count).all(|i| list[i] >= anchor[i] && anchor.get(i + 1).is_none_or(|&next| list[i] < next))
        };
        if candidates.iter().filter(once_per_step).count() < MIN_ANCHORS {
            continue;
        }
        let last_end = kernels.iter().map(|k| k.1).max().unwrap_or(0);
        return (0..count)
            .map(|i| {
                let start = kernels[anchor[i]].0;
                let end = match anchor.get(i + 1) {
                    Some(&next) => kernels[next].0,
                    None => last_end,
                };
                (start, end)
            })
            .collect();
    }
    Vec::new()
}

/// Step times from intervals in time order, the first `skip` left out.
pub fn steps(source: StepSource, intervals: Vec<(i64, i64)>, skip: usize) -> Steps {
    let found = intervals.len();
    let kept: Vec<(i64, i64)> = intervals.into_iter().skip(skip).collect();
    Steps {
        source,
        found: found as u64,
        skipped: skip.min(found) as u64,
        time: Distribution::of(kept.iter().map(|(start, end)| end - start).collect()),
        intervals: kept,
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
        let skipped = steps(StepSource::InferredFromKernels, infer_from_kernels(&kernels), 1);
        assert_eq!((skipped.found, skipped.skipped, skipped.time.count, skipped.time.max_ns), (3, 1, 2, 55));
    }
}
