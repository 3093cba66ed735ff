//! The cross-rank critical path of one step or window, from the dependency model of [`crate::dependency::graph`].
//!
//! The path ends at the end of the GPU operation that ends last (over all ranks) and is walked back along each
//! vertex's binding dependency (the predecessor that finished last) to the window start; it crosses to another
//! rank where a collective waited for that rank's arrival. It is listed as segments in time order:
//! - `run`: an operation's own time (a matched collective's transfer, a blocking call's return after the GPU
//!   work it waited for);
//! - `delay`: time before an operation starts that no modelled dependency explains: host work between two calls
//!   on a thread (category `host_gap`) or a GPU delay (launch latency, contention, unrecorded waits: `gpu_delay`).
//!
//! A capture taken in windows recorded nothing between two windows of a rank: a delay that reaches into such a
//! gap is split there, and the part in the gap is a segment of its own (`part` `gap`, category `capture_gap`), so
//! no host gap or GPU delay on the path ever crosses the gap between two capture windows.
//!
//! Each segment names the edge that made it wait (`stream order`, `launch`, `host order`, `host sync on GPU
//! work`, `cross-stream (inferred)`, `collective wait` with the rank that arrived last). The segments add up to
//! the measured time: the last GPU end minus the window start (less any overlap where the record contradicts an
//! edge by a few ns, reported as `overlap`).

use std::collections::BTreeMap;
use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;
use shardscope_model::Trace;

use crate::dependency::graph::{
    BEFORE_WINDOW, CAPTURE_GAP, EdgeKind, GPU_DELAY, Graph, HOST_GAP, ModelStats, OpKind, PathStep, RankSpec,
    end_vertex, host_call_name,
};
use crate::figures::capture_gaps;
use crate::figures::collectives::{self, RankKey};
// Durations for people, as every report prints them: `1.25 ms`, `830.0 µs`, `12 ns`.
use crate::output::render::duration as human_ns;
use crate::report::{self, Options};
use crate::stage_times::stage;

/// A model ready for analysis: the graph and how its window was chosen.
pub struct Model {
    /// The dependency graph.
    pub graph: Graph,
    /// The analysed window: `[start, end)` of the trace clock (`None`: the whole trace).
    pub window_ns: Option<(i64, i64)>,
    /// The step, when the window is one.
    pub step: Option<usize>,
    /// The first and last step, when the window is the steady-state steps ([`build_steady_model`]).
    pub steps: Option<(usize, usize)>,
    /// What the steady-state window leaves out of the trace, in words (empty for a window or step asked for).
    pub excluded: Vec<String>,
    /// The input files.
    pub inputs: Vec<String>,
    /// Notes on the model as a whole.
    pub notes: Vec<String>,
    /// The collectives matched across ranks; the graph's barriers refer to its instances.
    pub matching: Arc<collectives::Matching>,
}

/// How the window of a model is chosen.
enum Selection {
    /// A window of the trace clock (`None`: the whole trace).
    Window(Option<(i64, i64)>),
    /// One step, on each rank its own.
    Step(usize),
    /// The steady-state steps: see [`build_steady_model`].
    SteadySteps,
}

/// Why no dependency model could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// No GPU has anything to model.
    #[error("no GPU with kernels or memory operations in the input")]
    NoGpu,
    /// `--step` names a step a rank does not have.
    #[error("--step {step}: rank {rank} has {steps} step(s) (counted from 0, after --skip-steps)")]
    NoSuchStep {
        /// The step asked for.
        step: usize,
        /// The rank that lacks it.
        rank: u32,
        /// Steps that rank has.
        steps: usize,
    },
    /// Nothing ran on a GPU in the window.
    #[error("no GPU work launched in the window {start_ns}:{end_ns}")]
    NoWorkInWindow {
        /// Window start, ns.
        start_ns: i64,
        /// Window end, ns.
        end_ns: i64,
    },
    /// Nothing ran on a GPU in the whole input.
    #[error("no GPU work in the input")]
    NoWork,
}

/// Builds the model of `traces` for `window_ns`, or for step `step` (0 = the first step found on each rank; each
/// rank contributes the work of its own step, and the window runs from the earliest start of that step on any
/// rank to the latest end).
pub fn build_model(
    traces: &[Trace],
    options: &Options,
    window_ns: Option<(i64, i64)>,
    step: Option<usize>,
) -> Result<Model, ModelError> {
    build(traces, options, step.map_or(Selection::Window(window_ns), Selection::Step), None)
}

/// Builds the model of the run's steady state: on each rank its steps from the second to the last (the first
/// carries the start-up: allocations, autotuning, communicator set-up), or from the first when the report already
/// left warm-up steps out (`--skip-steps`, or leading slow steps it detected: the same warm-up as the report's). What that leaves out is listed in [`Model::excluded`]. Without steps on every
/// rank, or with fewer than two steady steps, the model is of the whole trace and `excluded` says so.
pub fn build_steady_model(traces: &[Trace], options: &Options) -> Result<Model, ModelError> {
    build(traces, options, Selection::SteadySteps, None)
}

/// [`build_steady_model`] with the report of `traces` under `options` made already, on `matching`: `report` must be
/// what `report::analyze(traces, options)` gives with `options.window_ns` `None` (the caller's own report, so that
/// the model does not analyse the run a second time), and `matching` [`model_matching`]'s of the same traces and
/// options.
pub fn build_steady_model_matched(
    traces: &[Trace],
    options: &Options,
    report: &report::Report,
    matching: impl Into<Arc<collectives::Matching>>,
) -> Result<Model, ModelError> {
    let ranks = report::RankSteps::of_report(report);
    build_from(traces, options, Selection::SteadySteps, &ranks, report.notes.clone(), Some(matching.into()))
}

/// The run's report (see [`report::analyze`]) and, beside it, the model of its steady-state steps (see
/// [`build_steady_model_matched`]): the collectives matched for the model first, then the model built as soon as
/// every rank's steps are found, while the report makes its ranks' figures, their steady states and the run's facts.
/// Side by side only where the shared pool has more workers than `report_width` (the most the report keeps busy,
/// one per rank) and a thread can be started for the model's side; else the report, then the model. The same report
/// and model either way. With a window in `options`, the model is of that window and is built after the report.
pub fn report_and_steady_model(
    traces: &[Trace],
    options: &Options,
    report_width: usize,
) -> (report::Report, Result<Model, ModelError>) {
    report_and_steady_model_from(traces, options, report_width, BESIDE_MIN_EVENTS)
}

/// Fewest GPU operations and API calls for which [`report_and_steady_model`] builds the model beside the report: the
/// model of a smaller run takes less time than starting the threads that would build it there.
const BESIDE_MIN_EVENTS: usize = 1 << 17;

/// [`report_and_steady_model`], side by side from `min_events` GPU operations and API calls (0: any run).
pub fn report_and_steady_model_from(
    traces: &[Trace],
    options: &Options,
    report_width: usize,
    min_events: usize,
) -> (report::Report, Result<Model, ModelError>) {
    let threads = crate::figures::workers::run(rayon::current_num_threads);
    let events: usize = traces.iter().map(|t| t.kernels.len() + t.memops.len() + t.api_calls.len()).sum();
    if options.window_ns.is_some() || threads <= report_width || events < min_events {
        return report_then_model(traces, options, report_width);
    }
    std::thread::scope(|scope| {
        // Made in the scope, so that a report that panics drops the sender before the scope waits for the model.
        let (sender, receiver) = std::sync::mpsc::channel::<report::Told>();
        let sender = std::sync::Mutex::new(sender);
        // The model's side waits for the steps on a thread of its own, never on a worker: a worker blocked there
        // could hold up the very report work that finds them.
        let spawned = std::thread::Builder::new()
            .name("shardscope-model".into())
            .spawn_scoped(scope, move || model_once_steps_come(traces, options, threads, receiver));
        let Ok(model_side) = spawned else {
            return report_then_model(traces, options, report_width);
        };
        let tell = |news: report::Told| {
            if let Ok(sender) = sender.lock() {
                let _ = sender.send(news);
            }
        };
        let report = stage("report figures", || report::analyze_telling_steps(traces, options, &tell));
        drop(sender);
        let model = match model_side.join() {
            Ok(Ok(model)) => model.map(|mut model| {
                model.notes.splice(0..0, report.notes.iter().cloned());
                model
            }),
            Ok(Err(matching)) => {
                let matching = matching.unwrap_or_else(|| Arc::new(model_matching(traces, options)));
                model_after_report(traces, options, &report, matching)
            }
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (report, model)
    })
}

/// [`report_and_steady_model`] one after the other: the report (beside the model's matching where the pool has
/// more workers than `report_width`; else keeping its own matching for the model where it serves), then the model.
fn report_then_model(
    traces: &[Trace],
    options: &Options,
    report_width: usize,
) -> (report::Report, Result<Model, ModelError>) {
    let idle_workers = crate::figures::workers::run(rayon::current_num_threads) > report_width;
    let (report, matching) = if idle_workers {
        let (report, matching) = crate::figures::workers::run(|| {
            rayon::join(
                || stage("report figures", || report::analyze(traces, options)),
                || model_matching(traces, options),
            )
        });
        (report, Arc::new(matching))
    } else {
        // No worker to spare (both at once would only compete for caches and memory: on 2 cores the 10 M-kernel
        // report took 3–5 % more CPU time): the report's matching serves the model where it can, else the model's
        // comes after.
        let (report, shared) = stage("report figures", || report::analyze_keeping_matching(traces, options));
        let own = || Arc::new(crate::figures::workers::run(|| model_matching(traces, options)));
        (report, shared.unwrap_or_else(own))
    };
    let model = model_after_report(traces, options, &report, matching);
    (report, model)
}

/// The findings' model on the shared workers, once `report` (the run's report under `options`) is made, on
/// `matching` ([`model_matching`]'s of the same traces and options): of `options.window_ns` where one is set, else
/// of the steady-state steps of `report`, which the model would otherwise make again.
pub fn model_after_report(
    traces: &[Trace],
    options: &Options,
    report: &report::Report,
    matching: impl Into<Arc<collectives::Matching>>,
) -> Result<Model, ModelError> {
    let matching: Arc<collectives::Matching> = matching.into();
    // On the report's pool of workers, as everything after it: its parallel passes then hand work to threads
    // already running there (a small model's passes cost microseconds, not a wake-up each).
    stage("model", || {
        crate::figures::workers::run(|| match options.window_ns {
            Some(window_ns) => build_window_model_matched(traces, options, window_ns, matching),
            None => build_steady_model_matched(traces, options, report, matching),
        })
    })
}

/// The model's side of [`report_and_steady_model`]: once `news` brings every rank's steps and the report's
/// collective matching, the model of the steady state (without the report's notes, which the caller adds). Where the
/// report says its matching will not serve, the model matches the collectives itself meanwhile; the matching is
/// handed back where no steps come (the report failed). Its work runs on `threads` workers of its own, not on the
/// report's: a report worker waiting for a stolen half of its work takes other work meanwhile, and one that took the
/// whole model would hold its rank, and the report, until the model was built.
fn model_once_steps_come(
    traces: &[Trace],
    options: &Options,
    threads: usize,
    news: std::sync::mpsc::Receiver<report::Told>,
) -> Result<Result<Model, ModelError>, Option<Arc<collectives::Matching>>> {
    let (mut ranks, mut matching) = (None, None);
    let (ranks, matching) = loop {
        match (ranks.take(), matching.take()) {
            (Some(told), Some(made)) => break (told, made),
            (told, made) => (ranks, matching) = (told, made),
        }
        match news.recv() {
            Ok(report::Told::Steps(told)) => ranks = Some(told),
            Ok(report::Told::Matching(Some(shared))) => matching = Some(shared),
            Ok(report::Told::Matching(None)) => {
                let own = crate::figures::workers::with_threads(threads, || model_matching(traces, options));
                matching = Some(Arc::new(own));
            }
            Err(_) => return Err(matching),
        }
    };
    Ok(stage("model", || {
        crate::figures::workers::with_threads(threads, || {
            build_from(traces, options, Selection::SteadySteps, &ranks, Vec::new(), Some(matching))
        })
    }))
}

/// [`build_model`] of `window_ns` on `matching`, which must be [`model_matching`]'s of the same traces and options.
pub fn build_window_model_matched(
    traces: &[Trace],
    options: &Options,
    window_ns: (i64, i64),
    matching: impl Into<Arc<collectives::Matching>>,
) -> Result<Model, ModelError> {
    build(traces, options, Selection::Window(Some(window_ns)), Some(matching.into()))
}

/// The collectives matched across ranks that a model of `traces` is built on. It depends on the traces and the
/// classifier alone (not on the report, nor on the window), so a caller may make it beside other work, such as
/// the report's figures, and hand it to [`build_steady_model_matched`] or [`build_window_model_matched`].
pub fn model_matching(traces: &[Trace], options: &Options) -> collectives::Matching {
    stage("model collective matching", || collectives::match_traces(traces, &options.classifier))
}

fn build(
    traces: &[Trace],
    options: &Options,
    selection: Selection,
    matching: Option<Arc<collectives::Matching>>,
) -> Result<Model, ModelError> {
    // The report gives each GPU its rank number and its steps exactly as `analyzer report` does.
    let mut whole = options.clone();
    whole.window_ns = None;
    let report = report::analyze(traces, &whole);
    let ranks = report::RankSteps::of_report(&report);
    build_from(traces, options, selection, &ranks, report.notes, matching)
}

/// The model of `selection`, with `report_ranks` the ranks and steps of the report of `traces` under `options`
/// without a window (in its rank order) and `notes` its notes, on `matching` (made here when `None`).
fn build_from(
    traces: &[Trace],
    options: &Options,
    selection: Selection,
    report_ranks: &[report::RankSteps],
    mut notes: Vec<String>,
    matching: Option<Arc<collectives::Matching>>,
) -> Result<Model, ModelError> {
    let mut ranks = Vec::new();
    let mut rank_steps: Vec<&[(i64, i64)]> = Vec::new();
    // The warm-up steps the report left out (most on any rank), and whether they were detected.
    let warmup = report_ranks.iter().filter_map(|r| r.steps.as_ref()).map(|s| (s.skipped as usize, s.warmup)).max();
    let warmup = warmup.filter(|w| w.0 > 0).map_or(WarmupLeftOut::None, |(n, how)| match how {
        "detected" => WarmupLeftOut::Detected(n),
        _ => WarmupLeftOut::Given(n),
    });
    for rank in report_ranks {
        let Some(trace_index) = traces.iter().position(|t| t.source.path == rank.source) else { continue };
        let trace = &traces[trace_index];
        let Some(device) = (0..trace.devices.len()).find(|&d| trace.devices[d].ordinal == rank.device) else {
            continue;
        };
        ranks.push(RankSpec {
            key: RankKey { trace: trace_index, device: shardscope_model::DeviceIdx(device as u32) },
            rank: rank.rank,
        });
        rank_steps.push(rank.steps.as_ref().map(|s| s.intervals.as_slice()).unwrap_or_default());
    }
    if ranks.is_empty() {
        return Err(ModelError::NoGpu);
    }
    let (mut step, mut steps, mut excluded) = (None, None, Vec::new());
    let rank_windows: Vec<Option<(i64, i64)>> = match selection {
        Selection::Window(window_ns) => vec![window_ns; ranks.len()],
        Selection::Step(n) => {
            step = Some(n);
            let mut windows = Vec::with_capacity(ranks.len());
            for (spec, intervals) in ranks.iter().zip(&rank_steps) {
                let Some(&window) = intervals.get(n) else {
                    return Err(ModelError::NoSuchStep { step: n, rank: spec.rank, steps: intervals.len() });
                };
                windows.push(Some(window));
            }
            windows
        }
        Selection::SteadySteps => {
            let rank_gaps: Vec<Vec<(i64, i64)>> = ranks.iter().map(|spec| rank_capture_gaps(traces, spec)).collect();
            let (windows, range, left_out) = steady_windows(traces, &rank_steps, &rank_gaps, warmup);
            steps = range;
            excluded = left_out;
            windows
        }
    };
    let window_ns = rank_windows
        .iter()
        .copied()
        .collect::<Option<Vec<(i64, i64)>>>()
        .and_then(|w| Some((w.iter().map(|w| w.0).min()?, w.iter().map(|w| w.1).max()?)));
    let matching = matching.unwrap_or_else(|| Arc::new(model_matching(traces, options)));
    let graph = Graph::build(traces, &ranks, &matching, &options.classifier, &rank_windows);
    if graph.ops.iter().all(|o| !o.kind.on_gpu()) {
        return Err(match window_ns {
            Some((start_ns, end_ns)) => ModelError::NoWorkInWindow { start_ns, end_ns },
            None => ModelError::NoWork,
        });
    }
    if graph.stats.clocks_not_aligned {
        notes.push(
            "ranks ran on different hosts: cross-rank edges use the recorded clocks as they are, so waits across \
             hosts include the clock difference"
                .into(),
        );
    }
    Ok(Model {
        graph,
        window_ns,
        step,
        steps,
        excluded,
        inputs: traces.iter().map(|t| t.source.path.clone()).collect(),
        notes,
        matching,
    })
}

/// The earliest kernel start and the latest kernel end of all traces, read on worker threads (tens of millions of
/// kernels).
fn kernels_extent_ns(traces: &[Trace]) -> (Option<i64>, Option<i64>) {
    let widest = |a: (i64, i64), b: (i64, i64)| (a.0.min(b.0), a.1.max(b.1));
    let extent = (traces.iter())
        .filter_map(|t| t.kernels.par_iter().with_min_len(1 << 14).map(|k| (k.start_ns, k.end_ns)).reduce_with(widest))
        .reduce(widest);
    (extent.map(|e| e.0), extent.map(|e| e.1))
}

/// Warm-up steps the report left out before the steps a model counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WarmupLeftOut {
    None,
    /// `--skip-steps N`.
    Given(usize),
    /// Detected as leading slow steps: at most this many on a rank.
    Detected(usize),
}

/// Per rank the window of its steady-state steps (`None`: the whole trace), the first and last step, and what is
/// left out.
type SteadyWindows = (Vec<Option<(i64, i64)>>, Option<(usize, usize)>, Vec<String>);

/// Per rank the window of its steady-state steps, the step range, and what is left out, in words. A capture taken
/// in windows recorded nothing between them (`rank_gaps`: per rank, the gaps of the process that drives its GPU),
/// so the steady state is taken inside one capture window: the one, counted per rank, where every rank has the
/// most steps (the earliest of equals). Without gaps, [`steady_windows_of`] of all steps.
fn steady_windows(
    traces: &[Trace],
    rank_steps: &[&[(i64, i64)]],
    rank_gaps: &[Vec<(i64, i64)>],
    warmup: WarmupLeftOut,
) -> SteadyWindows {
    let most_gaps = rank_gaps.iter().map(Vec::len).max().unwrap_or(0);
    if most_gaps == 0 {
        return steady_windows_of(traces, rank_steps, warmup, 0);
    }
    let per_window: Vec<Vec<usize>> =
        rank_steps.iter().zip(rank_gaps).map(|(steps, gaps)| steps_per_window(steps, gaps)).collect();
    let common = |w: usize| per_window.iter().map(|counts| counts.get(w).copied().unwrap_or(0)).min().unwrap_or(0);
    let best = (0..=most_gaps).rev().max_by_key(|&w| common(w)).unwrap_or(0);
    // A rank's steps of one window are consecutive: those of the windows before it come first.
    let ranges: Vec<std::ops::Range<usize>> = per_window
        .iter()
        .map(|counts| {
            let first: usize = counts.iter().take(best).sum();
            first..first + counts.get(best).copied().unwrap_or(0)
        })
        .collect();
    let chosen: Vec<&[(i64, i64)]> = rank_steps.iter().zip(&ranges).map(|(steps, r)| &steps[r.clone()]).collect();
    let offset = ranges.first().map_or(0, |r| r.start);
    let (windows, range, mut left_out) = steady_windows_of(traces, &chosen, warmup, offset);
    let others = rank_steps.iter().zip(&ranges).map(|(steps, r)| steps.len() - r.len()).max().unwrap_or(0);
    if others > 0 {
        left_out.push(format!(
            "{others} step(s) in the other capture windows (on the rank with most): nothing was recorded between \
             windows, so one model never spans two"
        ));
    }
    (windows, range, left_out)
}

/// How many of `steps` lie in each capture window, window `w` being the one after the `w`-th of `gaps`: one walk
/// through both, which are in time order (a step crosses no gap of its process), so hours of windows and millions
/// of steps stay linear.
fn steps_per_window(steps: &[(i64, i64)], gaps: &[(i64, i64)]) -> Vec<usize> {
    let mut counts = vec![0; gaps.len() + 1];
    let mut window = 0;
    for step in steps {
        while window < gaps.len() && gaps[window].1 <= step.0 {
            window += 1;
        }
        counts[window] += 1;
    }
    counts
}

/// [`steady_windows`] of the given steps (the same step numbers on every rank), numbered from `offset` in what
/// it says; all windows `None` (the whole trace) when there are too few steps.
fn steady_windows_of(
    traces: &[Trace],
    rank_steps: &[&[(i64, i64)]],
    warmup: WarmupLeftOut,
    offset: usize,
) -> SteadyWindows {
    let common = rank_steps.iter().map(|s| s.len()).min().unwrap_or(0);
    // The first step is warm-up unless the report already left warm-up out (and unless it is one of two).
    let none_left_out = warmup == WarmupLeftOut::None;
    let first = usize::from(none_left_out && common >= 3);
    if common < first + 2 {
        let whole = format!(
            "nothing: {common} step(s) on every rank, too few for a steady state, so the whole trace (start-up \
             included) is modelled; --step N or --window narrows it"
        );
        return (vec![None; rank_steps.len()], None, vec![whole]);
    }
    let last = common - 1;
    let windows: Vec<Option<(i64, i64)>> = rank_steps.iter().map(|s| Some((s[first].0, s[last].1))).collect();
    let (trace_start, trace_end) = kernels_extent_ns(traces);
    let window_start = windows.iter().flatten().map(|w| w.0).min().unwrap_or(0);
    let window_end = windows.iter().flatten().map(|w| w.1).max().unwrap_or(0);
    let mut excluded = Vec::new();
    // Step numbers as the report counts them (the chosen capture window's steps start at `offset`).
    let (first_n, last_n) = (first + offset, last + offset);
    if first == 0 && none_left_out {
        excluded.push(format!(
            "nothing of step {first_n}, although it may carry warm-up: only {common} steps on every rank (--step \
             {} models step {} alone)",
            first_n + 1,
            first_n + 1
        ));
    }
    let skipped = match warmup {
        WarmupLeftOut::None => String::new(),
        WarmupLeftOut::Given(n) => format!(", after the {n} step(s) --skip-steps left out"),
        WarmupLeftOut::Detected(n) => format!(", after the warm-up step(s) detected ({n} on the rank with most)"),
    };
    if let Some(start) = trace_start.filter(|&t| t < window_start) {
        let before = match (first, warmup, offset) {
            (1, _, 1..) => "earlier capture windows and this window's first step".to_string(),
            (_, _, 1..) => "earlier capture windows".to_string(),
            (1, _, _) => "start-up and step 0 (warm-up)".to_string(),
            (_, WarmupLeftOut::Detected(_), _) => "start-up and the warm-up".to_string(),
            _ => "start-up".to_string(),
        };
        excluded.push(format!(
            "{before}: {} of GPU time line before step {first_n}{skipped}",
            human_ns(window_start - start)
        ));
    }
    let longest = rank_steps.iter().map(|s| s.len()).max().unwrap_or(0);
    if longest > common {
        excluded.push(format!(
            "steps after step {last_n} that not every rank has ({} on the rank with most)",
            longest - common
        ));
    }
    if let Some(end) = trace_end.filter(|&t| t > window_end) {
        excluded.push(format!("after step {last_n}: {} of GPU time line", human_ns(end - window_end)));
    }
    (windows, Some((first_n, last_n)), excluded)
}

/// One segment of the critical path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Rank it ran on.
    pub rank: u32,
    /// `stream N` or `thread N`.
    pub lane: String,
    /// The operation: kernel name, API call name, `[CUDA memcpy]`, ...
    pub op: String,
    /// `run` (the operation's own time), `delay` (before it starts) or `gap` (the part of a delay between two
    /// capture windows of the rank, when nothing was recorded).
    pub part: &'static str,
    /// Op category of a run (`gemm`, `comm.all_reduce`, `host`, ...); `host_gap` or `gpu_delay` of a delay;
    /// `capture_gap` of a gap.
    pub category: String,
    /// Start on the trace clock.
    pub start_ns: i64,
    /// End on the trace clock.
    pub end_ns: i64,
    /// Length.
    pub duration_ns: i64,
    /// The edge that made it wait: its binding dependency.
    pub after: String,
    /// For a collective wait: the rank that arrived last; for other edges from another rank, that rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_rank: Option<u32>,
}

/// Time on the path of one category or rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    /// Category name or `rank N`.
    pub name: String,
    /// Time on the path.
    pub ns: i64,
    /// Share of the path, percent.
    pub pct: f64,
}

/// The critical path of one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CriticalPath {
    /// The input files.
    pub inputs: Vec<String>,
    /// The analysed window (`null`: the whole trace).
    pub window_ns: Option<(i64, i64)>,
    /// The step, when the window is one.
    pub step: Option<usize>,
    /// Where the path's time is measured from: the window start (or the first operation).
    pub start_ns: i64,
    /// Last GPU end minus `start_ns`.
    pub measured_ns: i64,
    /// Sum of the segments (equals `measured_ns` unless the record contradicts an edge: see `overlap`).
    pub path_ns: i64,
    /// The path, in time order.
    pub segments: Vec<Segment>,
    /// Time on the path per category, most first.
    pub by_category: Vec<Share>,
    /// Time on the path per rank, most first.
    pub by_rank: Vec<Share>,
    /// What was modelled and what could not be.
    pub model: ModelStats,
    /// Notes on the inputs.
    pub notes: Vec<String>,
}

/// The name of an operation.
pub fn op_name(traces: &[Trace], graph: &Graph, op: u32) -> String {
    let o = &graph.ops[op as usize];
    let trace = &traces[graph.trace_of(o)];
    match o.kind {
        OpKind::Kernel => trace.names.get(trace.kernels[o.index as usize].name).to_string(),
        OpKind::Copy => {
            let m = &trace.memops[o.index as usize];
            format!("[CUDA memcpy {}]", m.copy_kind.map_or("", |k| k.label()))
        }
        OpKind::Set => "[CUDA memset]".into(),
        OpKind::Graph => format!("[CUDA graph {}]", trace.graph_launches[o.index as usize].graph_id),
        OpKind::HostCall => host_call_name(trace, o).to_string(),
    }
}

fn lane(graph: &Graph, op: u32) -> String {
    let o = &graph.ops[op as usize];
    if o.kind.on_gpu() { format!("stream {}", o.lane) } else { format!("thread {}", o.lane) }
}

/// The critical path of `model`.
pub fn critical_path(traces: &[Trace], model: &Model) -> CriticalPath {
    let graph = &model.graph;
    let steps = graph.critical_path();
    let start_ns = graph.window_start_ns;
    let measured_ns = graph.span_ns(graph.last_end(graph.measured_ns()));
    let mut by_category: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_rank: BTreeMap<u32, i64> = BTreeMap::new();
    if let Some(first) = steps.first()
        && first.from_ns > start_ns
    {
        *by_category.entry(BEFORE_WINDOW.into()).or_default() += first.from_ns - start_ns;
    }
    let overlap_ns: i64 = (steps.windows(2).map(|pair| (pair[1].from_ns - pair[0].to_ns).min(0))).sum();
    // Each step's segment reads the steps before it only: made on worker threads (a path through a 10 M-kernel
    // run has over a million), in path order.
    let segments: Vec<Segment> = (0..steps.len())
        .into_par_iter()
        .with_min_len(1 << 12)
        .filter_map(|position| segment_at(traces, graph, &steps, position))
        .collect();
    // Summed per category and rank on worker threads too, under borrowed names (a few distinct ones).
    let (category_ns, rank_ns) = segments
        .par_iter()
        .fold(
            || (BTreeMap::<&str, i64>::new(), BTreeMap::<u32, i64>::new()),
            |(mut categories, mut ranks), segment| {
                *categories.entry(segment.category.as_str()).or_default() += segment.duration_ns;
                *ranks.entry(segment.rank).or_default() += segment.duration_ns;
                (categories, ranks)
            },
        )
        .reduce(|| (BTreeMap::new(), BTreeMap::new()), |a, b| (merge_sums(a.0, b.0), merge_sums(a.1, b.1)));
    for (category, ns) in category_ns {
        *by_category.entry(category.to_string()).or_default() += ns;
    }
    for (rank, ns) in rank_ns {
        *by_rank.entry(rank).or_default() += ns;
    }
    let segments = split_at_capture_gaps(traces, graph, segments, &mut by_category);
    if overlap_ns != 0 {
        by_category.insert("overlap".into(), overlap_ns);
    }
    let path_ns: i64 = by_category.values().sum();
    let share = |name: String, ns: i64| Share {
        name,
        ns,
        pct: if path_ns > 0 { ns as f64 * 100.0 / path_ns as f64 } else { 0.0 },
    };
    let mut categories: Vec<Share> = by_category.into_iter().map(|(name, ns)| share(name, ns)).collect();
    categories.sort_by_key(|s| std::cmp::Reverse(s.ns));
    let mut ranks: Vec<Share> = by_rank.into_iter().map(|(rank, ns)| share(format!("rank {rank}"), ns)).collect();
    ranks.sort_by_key(|s| std::cmp::Reverse(s.ns));
    CriticalPath {
        inputs: model.inputs.clone(),
        window_ns: model.window_ns,
        step: model.step,
        start_ns,
        measured_ns,
        path_ns,
        segments,
        by_category: categories,
        by_rank: ranks,
        model: graph.stats.clone(),
        notes: model.notes.clone(),
    }
}

/// `a` with the sums of `b` added, key by key.
fn merge_sums<K: Ord>(mut a: BTreeMap<K, i64>, b: BTreeMap<K, i64>) -> BTreeMap<K, i64> {
    for (key, ns) in b {
        *a.entry(key).or_default() += ns;
    }
    a
}

/// The segment of the path's step at `position`: `None` for a barrier or a step of no time.
fn segment_at(traces: &[Trace], graph: &Graph, steps: &[PathStep], position: usize) -> Option<Segment> {
    let step = &steps[position];
    let op = graph.op_of_vertex(step.vertex)?;
    let duration_ns = step.to_ns - step.from_ns;
    if duration_ns == 0 {
        return None;
    }
    let o = &graph.ops[op as usize];
    let is_run = step.vertex == end_vertex(op);
    let category = if is_run {
        graph.categories[o.category as usize].clone()
    } else if o.kind.on_gpu() {
        GPU_DELAY.to_string()
    } else {
        HOST_GAP.to_string()
    };
    // The edge that made it wait: a run entered from its own start waited for whatever its start waited for.
    let mut entered = position;
    while entered > 0 && steps[entered].after == EdgeKind::Run {
        entered -= 1;
    }
    let edge = steps[entered].after;
    // The rank the path came from: for a collective wait, the member that arrived last (two steps back, before
    // the barrier); otherwise the previous vertex's operation.
    let came_from = match edge {
        EdgeKind::CollectiveRelease => entered.checked_sub(2).map(|p| steps[p].vertex),
        _ => entered.checked_sub(1).map(|p| steps[p].vertex),
    };
    let from_rank = came_from
        .and_then(|v| graph.op_of_vertex(v))
        .map(|p| graph.ranks[graph.ops[p as usize].rank_index as usize].rank);
    let rank = graph.ranks[o.rank_index as usize].rank;
    let after = match edge {
        EdgeKind::Dropped if entered == 0 => "window start".to_string(),
        EdgeKind::Dropped => "work before the window".to_string(),
        EdgeKind::CollectiveRelease => match from_rank {
            Some(r) => format!("collective wait on rank {r}"),
            None => "collective wait".to_string(),
        },
        kind => kind.describe().to_string(),
    };
    Some(Segment {
        rank,
        lane: lane(graph, op),
        op: op_name(traces, graph, op),
        part: if is_run { "run" } else { "delay" },
        category,
        start_ns: step.from_ns,
        end_ns: step.to_ns,
        duration_ns,
        after,
        after_rank: from_rank.filter(|&r| r != rank),
    })
}

/// The gaps between the capture windows of the process that drives `spec`'s GPU (of every process of its trace
/// when the GPU has no known process).
fn rank_capture_gaps(traces: &[Trace], spec: &RankSpec) -> Vec<(i64, i64)> {
    let trace = &traces[spec.key.trace];
    let owner = trace.devices.get(spec.key.device.0 as usize).and_then(|d| d.process);
    capture_gaps::gaps(trace, owner)
}

/// `segments` with every delay that reaches into a gap between two capture windows of its rank cut there: the
/// parts outside the gap keep the delay's category, the part inside becomes a `gap` segment (`capture_gap`);
/// `by_category` moves the gap time likewise. A trace without windows (or with one per process) is unchanged.
fn split_at_capture_gaps(
    traces: &[Trace],
    graph: &Graph,
    segments: Vec<Segment>,
    by_category: &mut BTreeMap<String, i64>,
) -> Vec<Segment> {
    // Per rank number, the gaps of the process that owns its GPU.
    let gaps_of: BTreeMap<u32, Vec<(i64, i64)>> =
        graph.ranks.iter().map(|spec| (spec.rank, rank_capture_gaps(traces, spec))).collect();
    let mut out = Vec::with_capacity(segments.len());
    for segment in segments {
        let gaps = gaps_of.get(&segment.rank).map_or(&[][..], Vec::as_slice);
        let inside: Vec<(i64, i64)> = gaps
            .iter()
            .map(|&(gs, ge)| (gs.max(segment.start_ns), ge.min(segment.end_ns)))
            .filter(|(s, e)| e > s)
            .collect();
        if segment.part != "delay" || inside.is_empty() {
            out.push(segment);
            continue;
        }
        let mut from_ns = segment.start_ns;
        for (gap_start, gap_end) in inside.into_iter().chain([(segment.end_ns, segment.end_ns)]) {
            if gap_start > from_ns {
                out.push(Segment {
                    start_ns: from_ns,
                    end_ns: gap_start,
                    duration_ns: gap_start - from_ns,
                    ..segment.clone()
                });
            }
            if gap_end > gap_start {
                let duration_ns = gap_end - gap_start;
                *by_category.entry(segment.category.clone()).or_default() -= duration_ns;
                *by_category.entry(CAPTURE_GAP.into()).or_default() += duration_ns;
                out.push(Segment {
                    part: "gap",
                    category: CAPTURE_GAP.into(),
                    start_ns: gap_start,
                    end_ns: gap_end,
                    duration_ns,
                    after: "not recorded (between capture windows)".into(),
                    after_rank: None,
                    ..segment.clone()
                });
            }
            from_ns = gap_end;
        }
    }
    by_category.retain(|_, ns| *ns != 0);
    out
}

/// The critical path and a replay as extra processes of a Perfetto export, beside the traces' own tracks:
/// - `critical path`, above all ranks: one row per rank the path visits, each segment a slice named by its
///   operation and category, and a flow arrow wherever the path crosses from one rank to another;
/// - per rank, `rank N · <label>`: the operations at their `replay_ns` times (vertex times of
///   [`Graph::simulate`]), one row per stream and host thread, for comparison with the real timeline.
pub fn perfetto_extras(
    traces: &[Trace],
    model: &Model,
    path: &CriticalPath,
    replay_ns: &[i64],
    label: &str,
) -> Vec<shardscope::perfetto::ExtraProcess> {
    use shardscope::perfetto::{ExtraProcess, ExtraSlice, ExtraTrack};
    let graph = &model.graph;
    let mut path_rows: BTreeMap<u32, Vec<ExtraSlice>> = BTreeMap::new();
    let mut flow = 0u64;
    let mut previous_rank: Option<u32> = None;
    for segment in &path.segments {
        let name = match segment.part {
            "run" => format!("{} [{}]", segment.op, segment.category),
            _ => format!("{} before {}", segment.category, segment.op),
        };
        let mut slice =
            ExtraSlice { name, start_ns: segment.start_ns, end_ns: segment.end_ns, ..ExtraSlice::default() };
        if previous_rank.is_some_and(|r| r != segment.rank) {
            // The arrow from the previous rank's last segment: opened there, closed here.
            if let Some(last) = path_rows.get_mut(&previous_rank.unwrap_or_default()).and_then(|row| row.last_mut()) {
                flow += 1;
                last.flows_out.push(flow);
                slice.flows_in.push(flow);
            }
        }
        previous_rank = Some(segment.rank);
        path_rows.entry(segment.rank).or_default().push(slice);
    }
    let mut extras = vec![ExtraProcess {
        name: format!("critical path ({} segments)", path.segments.len()),
        order: -1,
        tracks: path_rows
            .into_iter()
            .map(|(rank, slices)| ExtraTrack { name: format!("rank {rank}"), slices })
            .collect(),
    }];
    // The replay: per rank, per stream or thread.
    let mut rows: BTreeMap<(u32, bool, u32), Vec<ExtraSlice>> = BTreeMap::new();
    for (op, o) in graph.ops.iter().enumerate() {
        let (start_ns, end_ns) = (replay_ns[2 * op], replay_ns[2 * op + 1]);
        rows.entry((o.rank_index, !o.kind.on_gpu(), o.lane)).or_default().push(ExtraSlice {
            name: op_name(traces, graph, op as u32),
            start_ns,
            end_ns,
            ..ExtraSlice::default()
        });
    }
    for (rank_index, spec) in graph.ranks.iter().enumerate() {
        let tracks: Vec<ExtraTrack> = rows
            .range((rank_index as u32, false, 0)..=(rank_index as u32, true, u32::MAX))
            .map(|(&(_, host, lane), slices)| ExtraTrack {
                name: if host { format!("thread {lane}") } else { format!("stream {lane}") },
                slices: slices.clone(),
            })
            .collect();
        if !tracks.is_empty() {
            extras.push(ExtraProcess {
                name: format!("rank {} · {label}", spec.rank),
                order: 1_000_000 + spec.rank.min(1 << 20) as i32,
                tracks,
            });
        }
    }
    extras
}

fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut out: String = text.chars().take(width - 1).collect();
        out.push('…');
        out
    }
}

/// The model's counts as table lines.
pub fn model_lines(stats: &ModelStats, notes: &[String]) -> String {
    let mut out = String::new();
    let edges: Vec<String> = stats.edges.iter().map(|(k, n)| format!("{k} {n}")).collect();
    out.push_str(&format!(
        "model: {} operations ({} GPU, {} host calls), {} collective instances; edges: {}\n",
        stats.ops,
        stats.gpu_ops,
        stats.host_calls,
        stats.collective_instances,
        edges.join(", ")
    ));
    let mut unmodelled = Vec::new();
    for (count, what) in [
        (stats.unmatched_comm_kernels, "communication kernels not matched on another rank (plain kernels)"),
        (stats.gpu_ops_without_launch, "GPU operations without a recorded launch call"),
        (stats.blocking_calls_without_gpu_work, "blocking calls with no GPU work found ending during them"),
        (
            stats.stream_wait_calls_not_followed,
            "stream-wait calls not followed (no event ids in the trace model; cross-stream waits inferred from timing)",
        ),
        (stats.host_calls_without_rank, "host calls of processes that drive no analysed GPU (left out)"),
        (stats.edges_dropped_for_cycles, "edges dropped to break cycles (inconsistent input)"),
        (stats.inconsistent_vertices, "recorded times the model cannot reproduce"),
    ] {
        if count > 0 {
            unmodelled.push(format!("{count} {what}"));
        }
    }
    if !unmodelled.is_empty() {
        out.push_str(&format!("not modelled: {}\n", unmodelled.join("; ")));
    }
    for note in notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// The path as a table: the `limit` longest segments in time order (0: all), then the totals.
pub fn table(path: &CriticalPath, limit: usize) -> String {
    let mut out = String::new();
    let what = match (path.step, path.window_ns) {
        (Some(n), Some((a, b))) => format!("step {n} ({a}..{b} ns)"),
        (_, Some((a, b))) => format!("window {a}..{b} ns"),
        _ => "whole trace".to_string(),
    };
    out.push_str(&format!(
        "critical path of {what}: {} from {} ns to the last GPU end; {} segments\n",
        human_ns(path.measured_ns),
        path.start_ns,
        path.segments.len()
    ));
    let mut shown: Vec<usize> = (0..path.segments.len()).collect();
    if limit > 0 && shown.len() > limit {
        shown.sort_by_key(|&i| (std::cmp::Reverse(path.segments[i].duration_ns), i));
        shown.truncate(limit);
        shown.sort_unstable();
        out.push_str(&format!("the {limit} longest segments, in time order (--limit 0 shows all):\n"));
    }
    out.push_str(&format!(
        "  {:>14} {:>10}  {:>4}  {:<12} {:<6} {:<16} {:<28} {}\n",
        "start_ns", "duration", "rank", "lane", "part", "category", "after", "operation"
    ));
    for &i in &shown {
        let s = &path.segments[i];
        out.push_str(&format!(
            "  {:>14} {:>10}  {:>4}  {:<12} {:<6} {:<16} {:<28} {}\n",
            s.start_ns,
            human_ns(s.duration_ns),
            s.rank,
            s.lane,
            s.part,
            shorten(&s.category, 16),
            shorten(&s.after, 28),
            shorten(&s.op, 70)
        ));
    }
    out.push_str("time on the path per category:\n");
    for s in &path.by_category {
        out.push_str(&format!("  {:<20} {:>10} {:>6.1}%\n", s.name, human_ns(s.ns), s.pct));
    }
    out.push_str("time on the path per rank:\n");
    for s in &path.by_rank {
        out.push_str(&format!("  {:<20} {:>10} {:>6.1}%\n", s.name, human_ns(s.ns), s.pct));
    }
    out.push_str(&model_lines(&path.model, &path.notes));
    out
}
