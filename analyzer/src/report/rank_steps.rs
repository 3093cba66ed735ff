//! A rank's steps, found from its GPU work, its ranges and its phases alone: before the collectives are matched.
//!
//! The findings' model of the steady state waits for every rank's steps, and the rank's figures need the matching
//! (each collective's wait and transfer) first. Found in a pass of their own beside the matching, the steps reach the
//! model a second or more sooner on a large run than as a part of each rank's figures, where the slowest rank held
//! them all back. The rank's figures then take the steps from here ([`RankStepWork`]): the same steps, found once.
//! Where nothing waits for the steps (no model is built beside the report), each rank finds them beside its figures
//! instead, from the work they file ([`find_in`]): that spares the pass its second look at every kernel's phase.

use std::collections::HashMap;

use rayon::prelude::*;
use shardscope_model::{DeviceIdx, NameId, ProcessIdx, Trace};

use super::{KERNELS_PER_TASK, Options, phase_of};
use crate::figures::capture_gaps;
use crate::figures::categories::{self, Classifier, KernelClass};
use crate::figures::window::clip;
use crate::llm::generate_calls::{self, StepWork};
use crate::llm::phases::{PhaseId, PhaseIndex};
use crate::llm::steps::{self, StepSource, Steps};

/// What a rank's steps are found from: one GPU of a trace and its events that can reach into the window.
#[derive(Clone, Copy)]
pub(super) struct StepInputs<'a> {
    pub trace: &'a Trace,
    pub device: DeviceIdx,
    pub classes: &'a [KernelClass],
    pub phase_index: &'a PhaseIndex,
    /// Indices of the device's kernels and memory operations that can reach into the window, in time order.
    pub kernel_indices: &'a [u32],
    pub memop_indices: &'a [u32],
}

/// `(start_ns, end_ns, is_gemm)` of a kernel inside the window (clipped to it).
type KernelRow = (i64, i64, bool);

/// A rank's steps and, where they were inferred from its kernels or graphs (the only steps its generate calls are
/// split by, later), the GPU work they were found from.
#[derive(Debug, Default)]
pub(super) struct RankStepWork {
    /// The kernels inside the window, in time order (where the steps were inferred; else none).
    kernels: Vec<KernelRow>,
    /// `(start_ns, end_ns)` of the memory operations inside the window (clipped), sorted (as the kernels).
    memops: Vec<(i64, i64)>,
    pub steps: Option<Steps>,
}

impl RankStepWork {
    /// Whether the steps were inferred from the kernels or graphs: then the generate calls are split by them.
    pub fn inferred(&self) -> bool {
        let source = self.steps.as_ref().map(|s| s.source);
        matches!(source, Some(StepSource::InferredFromKernels | StepSource::InferredFromGraphs))
    }

    /// The GPU work in each of `intervals` (where [`RankStepWork::inferred`]).
    pub fn work_of(&self, intervals: &[(i64, i64)]) -> Vec<StepWork> {
        generate_calls::step_work(&self.kernels, &self.memops, intervals)
    }
}

/// The rank's steps (see [`rank_steps`]) and the work they were found from, found from `inputs` alone (the pass
/// beside the matching).
pub(super) fn find(inputs: StepInputs, options: &Options) -> RankStepWork {
    let (RankStepWork { kernels, memops, .. }, phases_seen) = gpu_work(inputs, options);
    let phases = phases_seen.iter().enumerate().filter(|&(_, &seen)| seen).map(|(phase, _)| phase as PhaseId);
    find_in(inputs, kernels, memops, phases, options)
}

/// A kernel's row as the steps read it: its times inside the window, and whether its class `class` is a GEMM's.
pub(super) fn kernel_row(start_ns: i64, end_ns: i64, class: KernelClass, options: &Options) -> KernelRow {
    (start_ns, end_ns, options.classifier.name(class.category) == "gemm")
}

/// The rank's steps (see [`rank_steps`]) from its GPU work filed already: `kernels` inside the window in time order
/// ([`kernel_row`]), `memops` there sorted, and the phases with GPU work there (`phases`, in any order).
pub(super) fn find_in(
    inputs: StepInputs,
    kernels: Vec<KernelRow>,
    memops: Vec<(i64, i64)>,
    phases: impl Iterator<Item = PhaseId>,
    options: &Options,
) -> RankStepWork {
    let names = inputs.phase_index.names();
    let phase_names: Vec<&str> = phases.map(|phase| names[phase as usize].as_str()).collect();
    let StepInputs { trace, device, .. } = inputs;
    let owner = trace.devices[device.0 as usize].process;
    let gaps = capture_gaps::gaps(trace, owner);
    let units = || {
        steps::work_units(trace, device, inputs.kernel_indices, options.window_ns, |name| {
            options.classifier.name(Classifier::lookup(inputs.classes, name).category) == categories::RUNTIME
        })
    };
    let heavy_of = |intervals: &[(i64, i64)]| {
        generate_calls::prefill_steps(&generate_calls::step_work(&kernels, &memops, intervals)).unwrap_or_default()
    };
    let steps = rank_steps(trace, owner, &phase_names, units, &heavy_of, &gaps, options);
    let mut work = RankStepWork { kernels, memops, steps };
    // The rows are tens of megabytes per rank of a large run, held while the collectives are matched.
    if !work.inferred() {
        (work.kernels, work.memops) = (Vec::new(), Vec::new());
    }
    work
}

/// The rank's kernels and memory operations inside the window as [`RankStepWork`] keeps them, and per phase whether
/// any of its GPU work (kernels, memory operations, whole-graph records) lies there. The kernels in runs of
/// [`KERNELS_PER_TASK`] on worker threads, as the rank's figures file them.
fn gpu_work(inputs: StepInputs, options: &Options) -> (RankStepWork, Vec<bool>) {
    let StepInputs { trace, device, classes, phase_index, .. } = inputs;
    let window_ns = options.window_ns;
    let phase_count = phase_index.names().len();
    let parts: Vec<(Vec<KernelRow>, Vec<bool>)> = (inputs.kernel_indices.par_chunks(KERNELS_PER_TASK))
        .map(|run| {
            let mut seen = vec![false; phase_count];
            let mut rows = Vec::with_capacity(run.len());
            for kernel in run.iter().map(|&i| &trace.kernels[i as usize]) {
                let Some((start, end)) = clip(kernel.start_ns, kernel.end_ns, window_ns) else { continue };
                rows.push(kernel_row(start, end, Classifier::lookup(classes, kernel.name), options));
                if let Some(hit) = phase_of(trace, phase_index, kernel.launch, device, kernel.start_ns) {
                    seen[hit.phase as usize] = true;
                }
            }
            (rows, seen)
        })
        .collect();
    let mut seen = vec![false; phase_count];
    let mut kernels = Vec::with_capacity(parts.iter().map(|(rows, _)| rows.len()).sum());
    for (rows, part_seen) in parts {
        kernels.extend(rows);
        seen.iter_mut().zip(part_seen).for_each(|(seen, part)| *seen |= part);
    }
    let mut memops = Vec::new();
    for memop in inputs.memop_indices.iter().map(|&i| &trace.memops[i as usize]) {
        let Some(clipped) = clip(memop.start_ns, memop.end_ns, window_ns) else { continue };
        memops.push(clipped);
        if let Some(hit) = phase_of(trace, phase_index, memop.launch, device, memop.start_ns) {
            seen[hit.phase as usize] = true;
        }
    }
    memops.sort_unstable();
    for graph in trace.graph_launches.iter().filter(|g| g.device == device) {
        if clip(graph.start_ns, graph.end_ns, window_ns).is_none() {
            continue;
        }
        if let Some(hit) = phase_of(trace, phase_index, graph.launch, device, graph.start_ns) {
            seen[hit.phase as usize] = true;
        }
    }
    (RankStepWork { kernels, memops, steps: None }, seen)
}

/// Per step interval, whether it holds a prefill (see [`generate_calls::prefill_steps`]).
type PrefillFlags<'a> = dyn Fn(&[(i64, i64)]) -> Vec<bool> + 'a;

/// The rank's steps: step ranges, else phase instances, else the period of its kernels and graph launches (see
/// [`steps`]); clipped to the analysis window (a step must lie inside it to count). The units of work (`units`,
/// see [`steps::work_units`]) are made only where neither step ranges nor phase instances give the steps.
fn rank_steps(
    trace: &Trace,
    process: Option<ProcessIdx>,
    phase_names: &[&str],
    units: impl FnOnce() -> Vec<steps::WorkUnit>,
    heavy_of: &PrefillFlags,
    gaps: &[(i64, i64)],
    options: &Options,
) -> Option<Steps> {
    // One notion of warm-up whatever the steps came from: `--skip-steps`, else the leading outliers (step ranges
    // and phase instances are timed like inferred steps; a program's slow first steps are warm-up all the same).
    let steps_of = |source: StepSource, intervals: Vec<(i64, i64)>| {
        let heavy = heavy_of(&intervals);
        steps::steps(source, intervals, options.skip_steps, options.detect_warmup, &heavy)
    };
    // A step must lie inside the analysis window and must not reach across the gap between two capture windows.
    let inside = |intervals: Vec<(i64, i64)>| -> Vec<(i64, i64)> {
        let intervals = match options.window_ns {
            Some((w0, w1)) => intervals.into_iter().filter(|&(start, end)| start >= w0 && end <= w1).collect(),
            None => intervals,
        };
        capture_gaps::drop_spanning(intervals, gaps)
    };
    let ranges = inside(steps::step_ranges(trace, process, &options.step_pattern));
    if !ranges.is_empty() {
        return Some(steps_of(StepSource::StepRanges, ranges));
    }
    // Phase instances: only those of phases with GPU work on this rank are known here, through its work; their
    // ranges are taken from the trace again so that each instance counts once.
    if !phase_names.is_empty() {
        // The pattern runs once per distinct range name, not once per range.
        let mut is_phase: HashMap<NameId, bool> = HashMap::new();
        let mut instances: Vec<(i64, i64)> = trace
            .ranges
            .iter()
            .filter(|r| process.is_none_or(|p| r.process == p))
            .filter(|r| {
                *is_phase.entry(r.name).or_insert_with(|| {
                    let text = trace.names.get(r.name);
                    options.phase_pattern.captures(text).is_some_and(|c| {
                        let name = c.get(1).map_or(text.to_string(), |m| m.as_str().to_lowercase());
                        phase_names.contains(&name.as_str())
                    })
                })
            })
            .map(|r| (r.start_ns, r.end_ns))
            .collect();
        instances.sort_unstable();
        // Nested phase ranges (a decode inside a decode) are one step.
        let mut outermost: Vec<(i64, i64)> = Vec::new();
        for range in instances {
            if outermost.last().is_none_or(|last| range.0 >= last.1) {
                outermost.push(range);
            }
        }
        let outermost = inside(outermost);
        if !outermost.is_empty() {
            return Some(steps_of(StepSource::PhaseInstances, outermost));
        }
    }
    let inferred = steps::infer_from_work(&units())?;
    let source = if inferred.from_graphs { StepSource::InferredFromGraphs } else { StepSource::InferredFromKernels };
    Some(steps_of(source, capture_gaps::drop_spanning(inferred.intervals, gaps)))
}
