//! The report: per rank (one GPU of the job) and per phase, where GPU time goes.
//!
//! Definitions (all on the rank's own GPU, clipped to the analysis window):
//! - `span_ns`: of a rank, first GPU activity start to last GPU activity end (kernels, copies, sets); of a
//!   phase, the union over its instances (phase ranges) of each instance's first-start-to-last-end of the GPU
//!   work launched in it, so that the gaps between instances (other phases, host time) are not the phase's.
//! - `gpu_busy_ns`: length of the union of kernel, copy and set intervals and of CUDA graphs recorded whole;
//!   `idle_ns = span − busy`.
//! - `comm_ns`: length of the union of communication-kernel intervals.
//! - `exposed_comm_ns`: communication time during which no computation kernel runs (computation =
//!   kernels that are neither communication nor memory operations).
//! - `comm_comp_overlap_pct`: time both run / communication time × 100 (HTA's definition).
//! - `categories`: summed durations per op category (a share of work, so streams add up). Communication is
//!   `comm.<type>`; of collectives matched across ranks, the part spent waiting for the last rank is
//!   `wait.<type>` instead, so that `comm.<type>` is transfer time.
//! - `kernels`: the `cuda_gpu_kern_sum` rows of this rank.
//!
//! Phases come from the trace's phase ranges; a trace without any gets prefill and decode inferred from its kernels
//! ([`inferred_phases`]), marked `inferred` in [`RankReport::phase_source`] and [`Phase::source`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use regex::Regex;
use serde::{Serialize, Serializer};
use shardscope_model::{CollectiveOp, DeviceIdx, Kernel, MemOp, NameId, Trace};

use crate::figures::bench_peaks::BenchPeaks;
use crate::figures::capture_gaps;
use crate::figures::categories::{self, Classifier, KernelClass};
use crate::figures::collectives::{self, GroupSummary, Instance, Matching, RankInput, RankShare};
use crate::figures::hta::{self, HtaFigures};
use crate::figures::intervals::IntervalUnion;
use crate::figures::kernel_summary::{self, KernelSummaryRow};
use crate::figures::run::{self, RunIdentity, assign_ranks};
use crate::figures::window::clip;
use crate::figures::workers;
use crate::llm::generate_calls::{self, GenerateCalls};
use crate::llm::inferred_phases::{self, ComputeKind, KernelShape, Stretch};
use crate::llm::phases::{DEFAULT_PHASE_PATTERN, PhaseHit, PhaseId, PhaseIndex};
use crate::llm::steps::{self, DEFAULT_STEP_PATTERN, Distribution, Steps};
use crate::stage_times::stage;

pub mod compare;
pub mod memory;
pub mod mfu;
pub mod partial;
mod rank_steps;
pub mod streaming;

use rank_steps::{RankStepWork, StepInputs};

/// What to analyse and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// Op-category rules.
    pub classifier: Classifier,
    /// Ranges whose name matches are phases.
    pub phase_pattern: Regex,
    /// Only this `[start_ns, end_ns)` window of the trace clock (events are clipped to it).
    pub window_ns: Option<(i64, i64)>,
    /// Which profiler steps the HTA-compatible figures keep.
    pub hta_step_mode: hta::StepMode,
    /// Measured link peaks from `bench`, for "% of peak".
    pub bench_peaks: Option<BenchPeaks>,
    /// Keep every matched collective instance in [`Report::instances`].
    pub keep_instances: bool,
    /// Ranges whose name matches are steps (iterations).
    pub step_pattern: Regex,
    /// Leading steps of each rank left out of the step-time distribution as warm-up.
    pub skip_steps: usize,
    /// With `skip_steps` 0: leave out the leading warm-up steps found by [`steps::detect_warmup`].
    pub detect_warmup: bool,
    /// The inputs need not form one run (see [`run::mixed_runs`]): analyse them together, with a note.
    pub allow_mixed: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            classifier: Classifier::builtin(),
            phase_pattern: Regex::new(DEFAULT_PHASE_PATTERN).expect("valid default pattern"),
            window_ns: None,
            hta_step_mode: hta::StepMode::default(),
            bench_peaks: None,
            keep_instances: false,
            step_pattern: Regex::new(DEFAULT_STEP_PATTERN).expect("valid default pattern"),
            skip_steps: 0,
            detect_warmup: true,
            allow_mixed: false,
        }
    }
}

/// The figures of one rank, or of one phase of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// First GPU activity start to last end.
    pub span_ns: i64,
    /// Union of kernel, copy and set intervals.
    pub gpu_busy_ns: i64,
    /// `span_ns − gpu_busy_ns`.
    pub idle_ns: i64,
    /// Union of communication-kernel intervals.
    pub comm_ns: i64,
    /// Communication time not overlapped by computation.
    pub exposed_comm_ns: i64,
    /// Share of communication time overlapped by computation, in percent.
    pub comm_comp_overlap_pct: f64,
    /// `comm_ns / gpu_busy_ns` in percent.
    pub comm_over_busy_pct: f64,
    /// `exposed_comm_ns / span_ns` in percent.
    pub exposed_comm_over_span_pct: f64,
    /// Of the communication kernels matched across ranks: time spent waiting for the last rank to arrive.
    pub comm_wait_ns: i64,
    /// Of the communication kernels matched across ranks: time spent moving data.
    pub comm_transfer_ns: i64,
    /// Matched collectives this rank arrived at last.
    pub late_count: u64,
    /// Number of kernels.
    pub kernel_count: u64,
    /// Number of copies and sets.
    pub memop_count: u64,
    /// Number of CUDA graph executions recorded whole (category `cuda_graph`).
    pub cuda_graph_count: u64,
    /// Summed duration per op category; `comm.<type>` is communication less the waiting of matched
    /// collectives, which is `wait.<type>`.
    pub categories: BTreeMap<String, i64>,
    /// The `cuda_gpu_kern_sum` rows.
    pub kernels: Vec<KernelSummaryRow>,
    /// Of a phase: its instances' spans (count, percentiles); absent for whole ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<Distribution>,
}

impl Figures {
    /// Sum of the category times (kernels, copies and sets).
    pub fn category_total_ns(&self) -> i64 {
        self.categories.values().fold(0i64, |total, &ns| total.saturating_add(ns))
    }
}

/// CUDA graph replays of a rank: each launch of a graph is one replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphReplays {
    /// `graph_records` (nsys recorded each graph execution whole) or `node_kernels` (the kernels and copies of a
    /// graph were recorded one by one, and share the launch call `cudaGraphLaunch` / `cuGraphLaunch`).
    pub source: &'static str,
    /// Kernels and copies that ran as graph nodes (0 for `graph_records`: they are not recorded).
    pub node_activities: u64,
    /// Per replay, first GPU start to last GPU end.
    pub replay_ns: Distribution,
    /// Per graph: replays and their summed time, most time first. A graph is its CUPTI graph id where the trace
    /// records one (graph records; node kernels of nsys exports), else the smallest node id of its kernels
    /// (captures keep node ids only; replays of one executable graph repeat the same node ids).
    pub by_graph: Vec<GraphTotal>,
}

/// The replays of one graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphTotal {
    /// CUPTI graph id; `null` when the trace records node ids only.
    pub graph_id: Option<u32>,
    /// The smallest CUPTI node id among the graph's kernels (`null` for whole-graph records, which have none).
    pub first_node_id: Option<u64>,
    /// Kernels and copies per replay, most often seen (0 for whole-graph records).
    pub nodes_per_replay: u64,
    /// Replays.
    pub replays: u64,
    /// Summed replay time.
    pub total_ns: i64,
}

/// The steady state of a rank: the window from its first step after the warm-up to the end of its last step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SteadyState {
    /// `[start_ns, end_ns)` on the trace clock.
    pub window_ns: (i64, i64),
    /// Steps in it.
    pub steps: u64,
    /// The rank's figures clipped to the window.
    #[serde(flatten)]
    pub figures: Figures,
    /// Per-phase figures of the work inside the window (recorded or inferred phases alike), in order of first
    /// appearance in it; the rank's `phases` are the whole run's.
    #[serde(serialize_with = "phases_as_map")]
    pub phases: Vec<Phase>,
}

/// One phase's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Phase name (`prefill`, `decode`, …).
    pub name: String,
    /// Where the phase came from: `recorded` (ranges in the trace) or `inferred` (from the kernels, see
    /// [`inferred_phases`]).
    pub source: &'static str,
    /// Its figures.
    #[serde(flatten)]
    pub figures: Figures,
}

impl Report {
    /// The run's steady-state window: from the earliest start to the latest end of the ranks' steady states, when
    /// some rank left warm-up steps out (`--skip-steps` or detected); what a timeline should open on.
    pub fn steady_window_ns(&self) -> Option<(i64, i64)> {
        let windows = self.ranks.iter().filter_map(|r| r.steady_state.as_ref()).map(|s| s.window_ns);
        windows.fold(None, |acc, (start, end)| {
            Some(acc.map_or((start, end), |(a, b): (i64, i64)| (a.min(start), b.max(end))))
        })
    }
}

/// Where phases came from: ranges in the trace.
pub const PHASES_RECORDED: &str = "recorded";
/// Where phases came from: inferred from the kernels.
pub const PHASES_INFERRED: &str = "inferred";

/// One rank: a GPU of the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    /// The rank: recorded by the source, else numbered in input order.
    pub rank: u32,
    /// True when `rank` came from the trace (distributed info, environment) rather than input order.
    pub rank_recorded: bool,
    /// The file it came from.
    pub source: String,
    /// CUDA device ordinal in that file.
    pub device: u32,
    /// GPU name where known.
    pub gpu_name: String,
    /// OS pid of the process that drove it, when one did.
    pub pid: Option<u32>,
    /// Whole-rank figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Where the phases came from: `recorded`, `inferred` (no phase ranges; prefill and decode told apart by the
    /// kernels), or `None` without phases.
    pub phase_source: Option<&'static str>,
    /// Per-phase figures, in order of first appearance.
    #[serde(serialize_with = "phases_as_map")]
    pub phases: Vec<Phase>,
    /// NVTX and annotation ranges in the rank's trace file (0: the trace has none, so no phases or step ranges).
    pub annotation_ranges: u64,
    /// Step (iteration) times, when steps were found.
    pub steps: Option<Steps>,
    /// CUDA graph replays, when the rank ran graphs.
    pub graph_replays: Option<GraphReplays>,
    /// Generate calls (a prefill and the decode steps after it) told apart in inferred steps, with TTFT and TPOT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_calls: Option<GenerateCalls>,
    /// The figures of the steady state alone: the rank's work inside its steps after the warm-up (see
    /// [`Steps::steady_window_ns`]), when warm-up steps were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<SteadyState>,
    /// Kernel-type totals and overlap as Holistic Trace Analysis computes them.
    pub hta: HtaFigures,
}

impl RankReport {
    /// The figures of the steady state where warm-up steps were left out (`--skip-steps` or detected), else the
    /// whole run's: what op shares and charts show.
    pub fn steady_figures(&self) -> &Figures {
        self.steady_state.as_ref().map_or(&self.figures, |s| &s.figures)
    }

    /// The phases of the steady state where warm-up steps were left out, else the whole run's.
    pub fn steady_phases(&self) -> &[Phase] {
        self.steady_state.as_ref().map_or(&self.phases, |s| &s.phases)
    }
}

fn phases_as_map<S: Serializer>(phases: &[Phase], serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct PhaseEntry<'a> {
        phase_source: &'static str,
        #[serde(flatten)]
        figures: &'a Figures,
    }
    serializer.collect_map(phases.iter().map(|p| (&p.name, PhaseEntry { phase_source: p.source, figures: &p.figures })))
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The input files.
    pub inputs: Vec<String>,
    /// The phase pattern used.
    pub phase_pattern: String,
    /// The analysis window, if one was given.
    pub window_ns: Option<(i64, i64)>,
    /// How the HTA-compatible figures chose profiler steps: `all` (the job has fewer than two distinct
    /// `ProfilerStep` names, so HTA keeps everything), `last step dropped` (HTA's default) or `last step included`.
    pub hta_step_inclusion: &'static str,
    /// One entry per rank, ordered by rank.
    pub ranks: Vec<RankReport>,
    /// Collectives matched across ranks, grouped.
    pub collectives: CollectiveReport,
    /// Every matched instance (only when [`Options::keep_instances`] is set).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<Instance>,
    /// Import warnings, per input file.
    pub warnings: Vec<FileWarning>,
    /// What each input records about its run: hosts, pids, ranks, world size, time range.
    pub run_identities: Vec<RunIdentity>,
    /// Notes on the inputs as a whole: a partial set of ranks, inputs from different runs analysed together.
    pub notes: Vec<String>,
    /// GPU memory per rank and phase, for traces that hold memory events (see [`memory`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<memory::RankMemory>,
}

/// The note on a communication-only capture (the file's `captureMode`): a communication-only capture holds NCCL's collectives
/// timed by NCCL's own GPU timers and NVTX ranges, no compute kernels, so its overlap and exposed figures count
/// every collective as exposed.
pub fn capture_mode_note(trace: &Trace) -> Option<String> {
    if trace.source.capture_mode.as_deref() != Some(shardscope_io::nsys::CAPTURE_MODE_COMM_ONLY) {
        return None;
    }
    Some(format!(
        "{}: communication-only capture (capture --comm-only): collectives timed by NCCL's kernel-channel timers \
         ({}); no compute kernels were recorded, so GPU busy, categories and overlap cover communication only and \
         exposed communication is not known (shown as all of it)",
        trace.source.path,
        kernel_sample_words(trace.source.nccl_kernel_sample.as_deref())
    ))
}

/// What a communication-only file says of its kernel sample (`ncclKernelSample`: per process, how much longer its
/// NCCL kernels ran than their channel timers), in words.
fn kernel_sample_words(sample: Option<&str>) -> String {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Fit {
        process: Option<Widening>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Widening {
        kernel_minus_channels_ns: i64,
    }
    const UNWIDENED: &str = "each collective's time leaves out its kernel's start-up and wind-down, about 3 µs";
    let Some(text) = sample else { return format!("no kernel sample: {UNWIDENED}") };
    let Ok(fits) = serde_json::from_str::<Vec<Fit>>(text) else {
        return format!("its kernel sample could not be read: {UNWIDENED}");
    };
    let widened: Vec<i64> =
        fits.iter().filter_map(|f| f.process.as_ref().map(|w| w.kernel_minus_channels_ns)).collect();
    let (Some(&low), Some(&high)) = (widened.iter().min(), widened.iter().max()) else {
        return format!("the kernel sample fitted no process: {UNWIDENED}");
    };
    format!(
        "each collective's kernel widened by {:.2}–{:.2} µs of start-up and wind-down, from the kernels CUPTI timed \
         for the first collectives of {} of {} processes",
        low as f64 / 1e3,
        high as f64 / 1e3,
        widened.len(),
        fits.len()
    )
}

/// Collectives across ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveReport {
    /// Instances found on two or more ranks.
    pub matched_instances: u64,
    /// Communication kernels without a partner on another rank (a single-rank input, or missing ranks).
    pub unmatched_kernels: u64,
    /// Whether rank clocks were aligned on collective ends (ranks on different hosts).
    pub clocks_aligned: bool,
    /// Median over instances of (last end − first end) across ranks: the residual clock error bound.
    pub end_spread_median_ns: Option<i64>,
    /// The `bench` results the peaks came from.
    pub bench: Option<String>,
    /// Per communicator, collective type, message-size bucket and phase.
    pub groups: Vec<GroupSummary>,
    /// Per rank that arrived last at least once: how often, and the waiting of the others it caused there; the
    /// first entry, the rank that caused the most waiting, is the late rank of the summary's verdict.
    pub late_ranks: Vec<collectives::RankLateness>,
}

impl CollectiveReport {
    /// The report's view of a matching, with bus bandwidth against `options`' bench results.
    pub fn of(matching: &collectives::Matching, options: &Options) -> CollectiveReport {
        CollectiveReport {
            matched_instances: matching.instances.len() as u64,
            unmatched_kernels: matching.unmatched_kernels,
            clocks_aligned: matching.clocks_aligned,
            end_spread_median_ns: matching.end_spread_median_ns,
            bench: options.bench_peaks.as_ref().map(|b| b.source.clone()),
            groups: collectives::summarize(matching, options.bench_peaks.as_ref()),
            late_ranks: collectives::lateness(&matching.instances),
        }
    }
}

/// An importer warning, with its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileWarning {
    /// The file.
    pub source: String,
    /// What was wrong.
    pub what: String,
    /// How many times.
    pub count: u64,
}

/// Analyses the traces of one run (several files = several ranks), on the analyzer's worker threads (see
/// [`workers`]): the same report on any number of threads.
pub fn analyze(traces: &[Trace], options: &Options) -> Report {
    workers::run(|| analyze_here(traces, options))
}

/// [`analyze`] on a pool of `threads` workers of its own (1: every step in turn).
pub fn analyze_on_threads(traces: &[Trace], options: &Options, threads: usize) -> Report {
    workers::with_threads(threads, || analyze_here(traces, options))
}

/// A rank's steps, told as soon as they are found (beside the collective matching, before the ranks' figures): what
/// the findings' model of the steady-state steps needs of the report, so that it can be built beside the rest of it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankSteps {
    /// The rank, as in [`RankReport::rank`].
    pub rank: u32,
    /// The file it came from ([`RankReport::source`]).
    pub source: String,
    /// CUDA device ordinal in that file ([`RankReport::device`]).
    pub device: u32,
    /// Its steps ([`RankReport::steps`]).
    pub steps: Option<Steps>,
}

impl RankSteps {
    /// Every rank's steps of a report made already, in the report's rank order.
    pub fn of_report(report: &Report) -> Vec<RankSteps> {
        (report.ranks.iter())
            .map(|r| RankSteps { rank: r.rank, source: r.source.clone(), device: r.device, steps: r.steps.clone() })
            .collect()
    }
}

/// What the report tells a model built beside it, each part as soon as it is known.
pub enum Told {
    /// Every rank's steps, in the report's rank order.
    Steps(Vec<RankSteps>),
    /// The report's collective matching, where its ranks are those [`collectives::match_traces`] matches across
    /// (the same instances of the same kernels; the report's carry phases), so that the model needs no matching of
    /// its own; `None` where they are not (the model then matches the collectives itself), told before the report
    /// matches.
    Matching(Option<Arc<Matching>>),
}

/// [`analyze`], telling `tell` every rank's steps (in the report's rank order) once they are found, while the
/// collectives are still being matched and before the ranks' figures and the run's facts are made, and the
/// collective matching (see [`Told::Matching`]). `tell` runs on a worker: it should hand the news on (to a channel),
/// not work on it.
pub fn analyze_telling_steps(traces: &[Trace], options: &Options, tell: &(dyn Fn(Told) + Sync)) -> Report {
    workers::run(|| analyze_here_telling(traces, options, Some(Listener { tell, steps_first: true })))
}

/// [`analyze`], and its collective matching where a model of the run can be built on it (see [`Told::Matching`]):
/// the model then needs no matching of its own after the report.
pub fn analyze_keeping_matching(traces: &[Trace], options: &Options) -> (Report, Option<Arc<Matching>>) {
    let kept = std::sync::Mutex::new(None);
    let tell = |news: Told| {
        if let (Told::Matching(matching), Ok(mut kept)) = (news, kept.lock()) {
            *kept = matching;
        }
    };
    let report =
        workers::run(|| analyze_here_telling(traces, options, Some(Listener { tell: &tell, steps_first: false })));
    (report, kept.into_inner().ok().flatten())
}

fn analyze_here(traces: &[Trace], options: &Options) -> Report {
    analyze_here_telling(traces, options, None)
}

/// Who hears of the report's parts as they are made ([`Told`]).
#[derive(Clone, Copy)]
struct Listener<'a> {
    tell: &'a (dyn Fn(Told) + Sync),
    /// Whether the ranks' steps are found first and told (else only the matching is told).
    steps_first: bool,
}

/// The report; with a `listener`, told its matching (or that it will not serve), and where it asks for the steps
/// first, each rank's steps are found beside the collective matching and told. Otherwise each rank finds its steps
/// beside its figures, from the work they file (a pass over its kernels fewer).
fn analyze_here_telling(traces: &[Trace], options: &Options, listener: Option<Listener>) -> Report {
    let filter_steps = hta::job_has_steps(traces);
    let prepared = stage("report: classes, devices and phases", || Prepared::build(traces, options));
    let tell = listener.map(|l| l.tell);
    let shares_matching = tell.is_some() && prepared.matches_as_the_model(traces, options);
    if let (Some(tell), false) = (tell, shares_matching) {
        tell(Told::Matching(None));
    }
    // Collectives are matched across all ranks first: each rank's wait and transfer depend on the others. The
    // ranks' steps need no matching: where they are asked for, they are found (and told) meanwhile.
    let matching = || stage("report: collective matching", || match_across_ranks(traces, &prepared, options));
    let (matching, step_work) = match listener.filter(|l| l.steps_first).map(|l| l.tell) {
        Some(tell) => {
            let (matching, found) =
                rayon::join(matching, || stage("report: steps", || ranks_steps(traces, &prepared, options, tell)));
            (matching, found.into_iter().map(Some).collect())
        }
        None => (matching(), (0..prepared.ranks_in_input.len()).map(|_| None).collect()),
    };
    let matching = Arc::new(matching);
    if let (Some(tell), true) = (tell, shares_matching) {
        tell(Told::Matching(Some(matching.clone())));
    }
    // The run's own facts and the collectives' summary need no rank: they are gathered beside the ranks (which
    // leave workers idle where a machine has more cores than the run has ranks).
    let (ranks, (facts, collectives)) = rayon::join(
        || stage("report: ranks", || analyze_ranks(traces, &prepared, &matching, step_work, filter_steps, options)),
        || {
            rayon::join(
                || stage("report: run facts", || RunFacts::of(traces, options)),
                || CollectiveReport::of(&matching, options),
            )
        },
    );
    let instances = kept_instances(matching, options);
    stage("report: run", || report_of(facts, ranks, collectives, instances, filter_steps, options))
}

/// The matched instances the report keeps (with `keep_instances`), the rest of the matching dropped: on a thread
/// of its own where it is large (the kernels' shares of a large run are a hash map of millions of entries, which
/// takes one thread tens of milliseconds to free), here where it is small (it would not pay for starting a thread).
/// A matching shared with a model is never kept (see [`Prepared::matches_as_the_model`]); were it, its instances
/// would be copied.
fn kept_instances(matching: Arc<Matching>, options: &Options) -> Vec<Instance> {
    const LARGE_SHARES: usize = 1 << 16;
    if options.keep_instances {
        Arc::try_unwrap(matching).map_or_else(|shared| shared.instances.clone(), |own| own.instances)
    } else {
        // One shared with the model is the model's to free.
        match Arc::try_unwrap(matching) {
            Ok(own) if own.shares.len() >= LARGE_SHARES => workers::drop_in_background(own),
            _ => {}
        }
        Vec::new()
    }
}

/// Each rank's steps (in input order), ranks on worker threads; `tell` gets them all in the report's rank order
/// (by rank, input order among equals).
fn ranks_steps(
    traces: &[Trace],
    prepared: &Prepared,
    options: &Options,
    tell: &(dyn Fn(Told) + Sync),
) -> Vec<RankStepWork> {
    let found: Vec<RankStepWork> = (prepared.ranks_in_input.par_iter())
        .map(|&(key, _, _)| rank_steps::find(prepared.step_inputs(traces, key, options.window_ns), options))
        .collect();
    let mut told: Vec<RankSteps> = (prepared.ranks_in_input.iter().zip(&found))
        .map(|(&(key, rank, _), work)| {
            let trace = &traces[key.trace];
            let device = trace.devices[key.device.0 as usize].ordinal;
            RankSteps { rank, source: trace.source.path.clone(), device, steps: work.steps.clone() }
        })
        .collect();
    told.sort_by_key(|r| r.rank);
    tell(Told::Steps(told));
    found
}

/// Each rank's report, ranks on worker threads, in rank order; `step_work` holds each one's steps where found
/// already (in input order).
fn analyze_ranks(
    traces: &[Trace],
    prepared: &Prepared,
    matching: &Matching,
    step_work: Vec<Option<RankStepWork>>,
    filter_steps: bool,
    options: &Options,
) -> Vec<RankReport> {
    let mut ranks: Vec<RankReport> = (prepared.ranks_in_input.par_iter().zip(step_work))
        .map(|(&(key, rank, rank_recorded), step_work)| {
            let context = prepared.context(traces, key, filter_steps, matching);
            analyze_device_with_steps(&context, rank, rank_recorded, step_work, options)
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    ranks
}

/// What every rank of a trace shares: its names' classes, its phases, its events by device; and the ranks of the
/// run.
struct Prepared {
    classes: Vec<Vec<KernelClass>>,
    phase_indexes: Vec<PhaseIndex>,
    by_device: Vec<ByDevice>,
    /// (rank key, rank, recorded) per rank, in input order.
    ranks_in_input: Vec<(collectives::RankKey, u32, bool)>,
}

impl Prepared {
    /// Whether the report's collective matching is the one a model of the whole run would make
    /// ([`collectives::match_traces`]): no window (the report then matches only what reaches into it), no instances
    /// kept (the model holds the matching), and the same ranks, numbered alike, in the same order.
    fn matches_as_the_model(&self, traces: &[Trace], options: &Options) -> bool {
        let model_ranks = collectives::ranks_with_kernels(traces, |trace| &self.by_device[trace].kernels);
        options.window_ns.is_none()
            && !options.keep_instances
            && model_ranks.iter().copied().eq(self.ranks_in_input.iter().map(|&(key, rank, _)| (key, rank)))
    }

    /// What the steps of rank `key` of `traces` are found from.
    fn step_inputs<'a>(
        &'a self,
        traces: &'a [Trace],
        key: collectives::RankKey,
        window_ns: Option<(i64, i64)>,
    ) -> StepInputs<'a> {
        let trace = &traces[key.trace];
        let (kernel_indices, memop_indices) =
            events_in_window(trace, &self.by_device[key.trace], key.device, window_ns);
        StepInputs {
            trace,
            device: key.device,
            classes: &self.classes[key.trace],
            phase_index: &self.phase_indexes[key.trace],
            kernel_indices,
            memop_indices,
        }
    }

    /// What the analysis of rank `key` of `traces` needs.
    fn context<'a>(
        &'a self,
        traces: &'a [Trace],
        key: collectives::RankKey,
        filter_steps: bool,
        matching: &'a Matching,
    ) -> DeviceContext<'a> {
        DeviceContext {
            trace: &traces[key.trace],
            trace_index: key.trace,
            device: key.device,
            by_device: &self.by_device[key.trace],
            classes: &self.classes[key.trace],
            phase_index: &self.phase_indexes[key.trace],
            filter_steps,
            matching,
        }
    }

    fn build(traces: &[Trace], options: &Options) -> Prepared {
        // Phase ids are numbered across traces in input order, so the phase indexes are built one after the other
        // while the classes and device lists are made in parallel.
        let ((classes, by_device), (mut phase_indexes, mut phase_names)) = rayon::join(
            || -> (Vec<Vec<KernelClass>>, Vec<ByDevice>) {
                traces
                    .par_iter()
                    .map(|t| rayon::join(|| options.classifier.classify_names(&t.names), || ByDevice::build(t)))
                    .unzip()
            },
            || {
                let mut phase_names: Vec<String> = Vec::new();
                let indexes: Vec<PhaseIndex> =
                    traces.iter().map(|t| PhaseIndex::build(t, &options.phase_pattern, &mut phase_names)).collect();
                (indexes, phase_names)
            },
        );
        // Without phase ranges, prefill and decode are inferred from each GPU's kernels (never over recorded phases).
        let inferred: Vec<Vec<(DeviceIdx, Vec<Stretch>)>> = (traces.par_iter().enumerate())
            .map(|(i, trace)| {
                if phase_indexes[i].is_empty() {
                    infer_phases(trace, &by_device[i], &classes[i], options)
                } else {
                    Vec::new()
                }
            })
            .collect();
        for (index, inferred) in phase_indexes.iter_mut().zip(inferred) {
            if !inferred.is_empty() {
                *index = PhaseIndex::inferred(inferred, &mut phase_names);
            }
        }
        Prepared { classes, phase_indexes, by_device, ranks_in_input: assign_ranks(traces) }
    }
}

/// Matches the collectives of all ranks; with a window, among the kernels that reach into it, as the rank figures
/// count them.
fn match_across_ranks(traces: &[Trace], prepared: &Prepared, options: &Options) -> Matching {
    let Prepared { classes, phase_indexes, by_device, ranks_in_input } = prepared;
    let phase_closures: Vec<Box<dyn Fn(u32) -> Option<String> + Sync + '_>> = ranks_in_input
        .iter()
        .map(|&(key, _, _)| {
            let trace = &traces[key.trace];
            let index = &phase_indexes[key.trace];
            Box::new(move |kernel: u32| {
                let k = &trace.kernels[kernel as usize];
                phase_of(trace, index, k.launch, k.device, k.start_ns).map(|p| index.names()[p.phase as usize].clone())
            }) as Box<dyn Fn(u32) -> Option<String> + Sync>
        })
        .collect();
    let windowed_kernels: Vec<Vec<u32>> = ranks_in_input
        .par_iter()
        .map(|&(key, _, _)| {
            let trace = &traces[key.trace];
            let all = &by_device[key.trace].kernels[key.device.0 as usize];
            match options.window_ns {
                None => Vec::new(),
                Some(window) => all
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let kernel = &trace.kernels[i as usize];
                        clip(kernel.start_ns, kernel.end_ns, Some(window)).is_some()
                    })
                    .collect(),
            }
        })
        .collect();
    let inputs: Vec<RankInput> = ranks_in_input
        .iter()
        .zip(&phase_closures)
        .zip(&windowed_kernels)
        .map(|((&(key, rank, _), phase_of_kernel), windowed)| RankInput {
            key,
            rank,
            trace: &traces[key.trace],
            kernel_indices: if options.window_ns.is_some() {
                windowed
            } else {
                &by_device[key.trace].kernels[key.device.0 as usize]
            },
            classes: &classes[key.trace],
            phase_of_kernel: phase_of_kernel.as_ref(),
        })
        .collect();
    let hosts_differ = collectives::ranks_on_different_hosts(traces);
    collectives::match_collectives(&inputs, &options.classifier, hosts_differ)
}

/// What the run-level parts of the report take from each trace: taken from all traces at once ([`analyze`]), or
/// from one trace at a time ([`streaming`]).
#[derive(Default)]
struct RunFacts {
    /// The traces' files, in input order.
    inputs: Vec<String>,
    warnings: Vec<FileWarning>,
    identities: Vec<RunIdentity>,
    /// The notes on communication-only captures ([`capture_mode_note`]), in input order.
    capture_notes: Vec<String>,
    /// The memory section, by rank.
    memory: Vec<memory::RankMemory>,
}

impl RunFacts {
    /// The facts of all of `traces` at once.
    fn of(traces: &[Trace], options: &Options) -> RunFacts {
        RunFacts {
            inputs: traces.iter().map(|t| t.source.path.clone()).collect(),
            warnings: traces
                .iter()
                .flat_map(|t| {
                    t.warnings.iter().map(|w| FileWarning {
                        source: t.source.path.clone(),
                        what: w.what.clone(),
                        count: w.count,
                    })
                })
                .collect(),
            identities: traces.iter().map(RunIdentity::of).collect(),
            capture_notes: traces.iter().filter_map(capture_mode_note).collect(),
            memory: memory::section(traces, &assign_ranks(traces), &options.phase_pattern),
        }
    }
}

/// The report from the run's facts, its rank reports (ordered by rank), the collectives' summary and the matched
/// instances it keeps.
fn report_of(
    facts: RunFacts,
    ranks: Vec<RankReport>,
    collectives: CollectiveReport,
    instances: Vec<Instance>,
    filter_steps: bool,
    options: &Options,
) -> Report {
    let RunFacts { inputs, warnings, identities: run_identities, capture_notes, memory } = facts;
    let mut notes = Vec::new();
    if let Some(why) = run::mixed_runs(&run_identities) {
        // Callers refuse mixed inputs unless asked not to; when analysed anyway, the report says so.
        notes.push(format!("inputs are not one run ({why}); analysed together as asked"));
    }
    notes.extend(run::partial_run_note(&run_identities, ranks.len()));
    notes.extend(capture_notes);
    Report {
        inputs,
        phase_pattern: options.phase_pattern.as_str().to_string(),
        window_ns: options.window_ns,
        hta_step_inclusion: match (filter_steps, options.hta_step_mode) {
            (false, _) => "all",
            (true, hta::StepMode::DropLastStep) => "last step dropped",
            (true, hta::StepMode::IncludeLastStep) => "last step included",
        },
        ranks,
        collectives,
        instances,
        warnings,
        run_identities,
        notes,
        memory,
    }
}

/// Inferred prefill and decode stretches of each GPU of `trace` that shows them (see [`inferred_phases`]).
fn infer_phases(
    trace: &Trace,
    by_device: &ByDevice,
    classes: &[KernelClass],
    options: &Options,
) -> Vec<(DeviceIdx, Vec<Stretch>)> {
    let classifier = &options.classifier;
    let kind_of: Vec<ComputeKind> = classifier
        .categories()
        .iter()
        .map(|name| match name.as_str() {
            "gemm" => ComputeKind::Gemm,
            "attention" => ComputeKind::Attention,
            _ => ComputeKind::Other,
        })
        .collect();
    // Each GPU on its own: in time order of its kernels, in device order.
    (by_device.kernels.par_iter().enumerate())
        .filter_map(|(device, kernel_indices)| {
            let kernels: Vec<KernelShape> = kernel_indices
                .iter()
                .map(|&i| {
                    let kernel = &trace.kernels[i as usize];
                    let category = Classifier::lookup(classes, kernel.name).category;
                    KernelShape {
                        start_ns: kernel.start_ns,
                        end_ns: kernel.end_ns,
                        name: kernel.name,
                        // Three u32 dimensions can exceed u64: saturate rather than overflow.
                        grid_blocks: kernel.grid.iter().fold(1u64, |blocks, &d| blocks.saturating_mul(u64::from(d))),
                        kind: kind_of.get(category.0 as usize).copied().unwrap_or(ComputeKind::Other),
                    }
                })
                .collect();
            let (graph_served, step_phases) =
                phases_from_steps(trace, DeviceIdx(device as u32), by_device, classes, options);
            // Graph-served programs repeat no kernel sequence over prefill and decode alike: their steps decide.
            // Other programs get the kernel-sequence inference, and the steps where it finds nothing (its outermost
            // period is a whole generate call when a run makes several).
            let stretches = if graph_served {
                step_phases
            } else {
                let by_kernels = inferred_phases::infer(&kernels);
                if by_kernels.is_empty() { step_phases } else { by_kernels }
            };
            (!stretches.is_empty()).then_some((DeviceIdx(device as u32), stretches))
        })
        .collect()
}

/// Prefill and decode from one GPU's steps (see [`inferred_phases::from_steps`]), the warm-up steps left out; with
/// whether the GPU ran CUDA graphs.
fn phases_from_steps(
    trace: &Trace,
    device: DeviceIdx,
    by_device: &ByDevice,
    classes: &[KernelClass],
    options: &Options,
) -> (bool, Vec<Stretch>) {
    let d = device.0 as usize;
    let category = |name: NameId| options.classifier.name(Classifier::lookup(classes, name).category);
    let units =
        steps::work_units(trace, device, &by_device.kernels[d], None, |name| category(name) == categories::RUNTIME);
    let graph_served = units.iter().any(|u| matches!(u.token, steps::WorkToken::Graph(_)));
    let Some(inferred) = steps::infer_from_work(&units) else { return (graph_served, Vec::new()) };
    let kernels: Vec<(i64, i64, bool)> = by_device.kernels[d]
        .iter()
        .map(|&i| &trace.kernels[i as usize])
        .map(|k| (k.start_ns, k.end_ns, category(k.name) == "gemm"))
        .collect();
    let mut memops: Vec<(i64, i64)> =
        by_device.memops[d].iter().map(|&i| &trace.memops[i as usize]).map(|m| (m.start_ns, m.end_ns)).collect();
    memops.sort_unstable();
    let work = generate_calls::step_work(&kernels, &memops, &inferred.intervals);
    let heavy = generate_calls::prefill_steps(&work).unwrap_or_default();
    let durations_ns: Vec<i64> = inferred.intervals.iter().map(|(start, end)| end - start).collect();
    let warmup = if options.skip_steps > 0 {
        options.skip_steps
    } else if options.detect_warmup {
        steps::detect_warmup(&durations_ns, &heavy)
    } else {
        0
    };
    (graph_served, inferred_phases::from_steps(&work, warmup))
}

/// Indices of each device's kernels and memory operations, in time order: built in one pass over the trace so that
/// per-rank work never scans the other ranks' events.
struct ByDevice {
    kernels: Vec<Vec<u32>>,
    memops: Vec<Vec<u32>>,
    /// Per device, the longest kernel and the longest memory operation: with them a window's events are found
    /// by binary search on start times.
    longest_kernel_ns: Vec<i64>,
    longest_memop_ns: Vec<i64>,
}

impl ByDevice {
    /// Each device's kernels and memory operations sorted out in one pass over each list, and the longest of each,
    /// on worker threads (a file of eight ranks holds tens of millions of kernels).
    fn build(trace: &Trace) -> ByDevice {
        let n = trace.devices.len();
        let kernels = workers::indices_by_owner(&trace.kernels, n, |k| Some(k.device.0 as usize));
        let memops = workers::indices_by_owner(&trace.memops, n, |m| Some(m.device.0 as usize));
        let longest_kernel_ns = longest_per_device(&trace.kernels, n, |k| (k.device, k.duration_ns()));
        let longest_memop_ns = longest_per_device(&trace.memops, n, |m| (m.device, m.duration_ns()));
        ByDevice { kernels, memops, longest_kernel_ns, longest_memop_ns }
    }
}

/// Per device (`0..devices`), the longest duration of its `events` (0 when none lasts longer), on worker threads.
fn longest_per_device<T: Sync>(events: &[T], devices: usize, of: impl Fn(&T) -> (DeviceIdx, i64) + Sync) -> Vec<i64> {
    let durations = events.par_iter().with_min_len(1 << 16).map(|event| {
        let (device, ns) = of(event);
        (device.0 as usize, ns)
    });
    let longest = workers::fold_per_owner(durations, devices, i64::max);
    longest.into_iter().map(|ns| ns.map_or(0, |ns| ns.max(0))).collect()
}

/// The events (indices sorted by start) that can overlap `window_ns`: none that starts at or after its end, none
/// that starts before its start by more than the longest event lasts.
fn in_window(indices: &[u32], start_ns: impl Fn(u32) -> i64, longest_ns: i64, window_ns: Option<(i64, i64)>) -> &[u32] {
    let Some((w0, w1)) = window_ns else { return indices };
    let first = indices.partition_point(|&i| start_ns(i) < w0.saturating_sub(longest_ns));
    let end = indices.partition_point(|&i| start_ns(i) < w1).max(first);
    &indices[first..end]
}

/// One kernel of a rank after clipping.
#[derive(Clone, Copy)]
struct WorkKernel {
    start_ns: i64,
    end_ns: i64,
    name: NameId,
    class: KernelClass,
    collective: Option<CollectiveOp>,
    /// Wait and transfer when the kernel is a collective matched across ranks.
    share: Option<RankShare>,
}

/// The GPU work of one rank (or phase) after clipping, ready for [`figures`].
#[derive(Default)]
struct Work {
    kernels: Vec<WorkKernel>,
    /// `(start_ns, end_ns, is_memset)`.
    memops: Vec<(i64, i64, bool)>,
    /// CUDA graphs recorded whole: `(start_ns, end_ns)`.
    graphs: Vec<(i64, i64)>,
}

impl Work {
    /// Every kernel, memory operation and whole graph as `(start_ns, end_ns)`.
    fn intervals(&self) -> Vec<(i64, i64)> {
        (self.kernels.iter().map(|k| (k.start_ns, k.end_ns)))
            .chain(self.memops.iter().map(|m| (m.0, m.1)))
            .chain(self.graphs.iter().copied())
            .collect()
    }

    /// The part of this work inside `window_ns` (events cut at its edges; a cut collective keeps no wait/transfer
    /// split).
    fn clipped_to(&self, window_ns: (i64, i64)) -> Work {
        let window = Some(window_ns);
        let kernels = self
            .kernels
            .iter()
            .filter_map(|k| {
                let (start_ns, end_ns) = clip(k.start_ns, k.end_ns, window)?;
                let share = if (start_ns, end_ns) == (k.start_ns, k.end_ns) { k.share } else { None };
                Some(WorkKernel { start_ns, end_ns, share, ..*k })
            })
            .collect();
        let memops = self
            .memops
            .iter()
            .filter_map(|&(start, end, is_set)| clip(start, end, window).map(|(s, e)| (s, e, is_set)))
            .collect();
        let graphs = self.graphs.iter().filter_map(|&(start, end)| clip(start, end, window)).collect();
        Work { kernels, memops, graphs }
    }
}

/// Kernels a worker files per task in [`RankWork::collect`]: a rank of fewer stays on one thread and joins nothing.
const KERNELS_PER_TASK: usize = 1 << 17;

/// What [`analyze_device`] needs to know about the trace a device belongs to.
struct DeviceContext<'a> {
    trace: &'a Trace,
    trace_index: usize,
    device: DeviceIdx,
    by_device: &'a ByDevice,
    classes: &'a [KernelClass],
    phase_index: &'a PhaseIndex,
    filter_steps: bool,
    matching: &'a Matching,
}

impl<'a> DeviceContext<'a> {
    /// What this rank's steps are found from, its events inside `window_ns`.
    fn step_inputs(&self, window_ns: Option<(i64, i64)>) -> StepInputs<'a> {
        let (kernel_indices, memop_indices) = device_events(self, window_ns);
        let DeviceContext { trace, device, classes, phase_index, .. } = *self;
        StepInputs { trace, device, classes, phase_index, kernel_indices, memop_indices }
    }
}

/// A rank's GPU work after clipping, whole and per phase, with when each phase first ran and each phase instance's
/// extent.
#[derive(Default)]
struct RankWork {
    whole: Work,
    by_phase: BTreeMap<PhaseId, Work>,
    first_seen: BTreeMap<PhaseId, i64>,
    /// Per phase, per instance (phase range): first start and last end of the GPU work launched in it. Looked up
    /// for every kernel of a phase, so with a fast hasher (the extents are sorted before use: no order depends on
    /// it).
    instance_extents: BTreeMap<PhaseId, foldhash::HashMap<u32, (i64, i64)>>,
}

impl RankWork {
    fn note(&mut self, hit: PhaseHit, start_ns: i64, end_ns: i64) {
        let extent = self.instance_extents.entry(hit.phase).or_default().entry(hit.range).or_insert((start_ns, end_ns));
        *extent = (extent.0.min(start_ns), extent.1.max(end_ns));
    }

    /// The kernels `kernel_indices` names (in time order) inside `window_ns`, filed whole and by phase.
    fn of_kernels(context: &DeviceContext, kernel_indices: &[u32], window_ns: Option<(i64, i64)>) -> RankWork {
        let DeviceContext { trace, trace_index, device, classes, phase_index, matching, .. } = *context;
        let mut work = RankWork::default();
        for &index in kernel_indices {
            let kernel = &trace.kernels[index as usize];
            let Some((start, end)) = clip(kernel.start_ns, kernel.end_ns, window_ns) else { continue };
            let clipped = (start, end) != (kernel.start_ns, kernel.end_ns);
            let row = WorkKernel {
                start_ns: start,
                end_ns: end,
                name: kernel.name,
                class: Classifier::lookup(classes, kernel.name),
                collective: kernel.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op),
                // A kernel cut by the window has no meaningful wait/transfer split.
                share: if clipped { None } else { matching.shares.get(&(trace_index, index)).copied() },
            };
            work.whole.kernels.push(row);
            if let Some(hit) = phase_of(trace, phase_index, kernel.launch, device, kernel.start_ns) {
                work.first_seen.entry(hit.phase).or_insert(start);
                work.by_phase.entry(hit.phase).or_default().kernels.push(row);
                work.note(hit, start, end);
            }
        }
        work
    }

    /// The kernels of consecutive runs filed apart, filed as one pass over them all would have: rows in run order,
    /// each phase first seen in the earliest run that saw it, instance extents widened.
    fn joined(parts: Vec<RankWork>) -> RankWork {
        let mut parts = parts.into_iter();
        let Some(mut work) = parts.next() else { return RankWork::default() };
        let rest: Vec<RankWork> = parts.collect();
        work.whole.kernels.reserve(rest.iter().map(|p| p.whole.kernels.len()).sum());
        for part in rest {
            work.whole.kernels.extend(part.whole.kernels);
            for (phase, start_ns) in part.first_seen {
                work.first_seen.entry(phase).or_insert(start_ns);
            }
            for (phase, phase_work) in part.by_phase {
                work.by_phase.entry(phase).or_default().kernels.extend(phase_work.kernels);
            }
            for (phase, extents) in part.instance_extents {
                for (range, (start_ns, end_ns)) in extents {
                    work.note(PhaseHit { phase, range }, start_ns, end_ns);
                }
            }
        }
        work
    }

    /// The device's kernels, memory operations and whole-graph records inside `window_ns`, filed whole and by
    /// phase. The kernels (a rank of a large run has millions, each looked up in the phases and the matching) are
    /// filed a run of [`KERNELS_PER_TASK`] per worker, the runs then joined in order: the first thing a rank does,
    /// it otherwise kept one core per rank busy while the others waited.
    fn collect(
        context: &DeviceContext,
        kernel_indices: &[u32],
        memop_indices: &[u32],
        window_ns: Option<(i64, i64)>,
    ) -> RankWork {
        let DeviceContext { trace, device, phase_index, .. } = *context;
        let parts: Vec<RankWork> = kernel_indices
            .par_chunks(KERNELS_PER_TASK)
            .map(|run| RankWork::of_kernels(context, run, window_ns))
            .collect();
        let mut work = RankWork::joined(parts);
        for memop in memop_indices.iter().map(|&i| &trace.memops[i as usize]) {
            let Some((start, end)) = clip(memop.start_ns, memop.end_ns, window_ns) else { continue };
            let row = (start, end, memop.is_memset());
            work.whole.memops.push(row);
            if let Some(hit) = phase_of(trace, phase_index, memop.launch, device, memop.start_ns) {
                work.first_seen.entry(hit.phase).or_insert(start);
                work.by_phase.entry(hit.phase).or_default().memops.push(row);
                work.note(hit, start, end);
            }
        }
        for graph in trace.graph_launches.iter().filter(|g| g.device == device) {
            let Some((start, end)) = clip(graph.start_ns, graph.end_ns, window_ns) else { continue };
            work.whole.graphs.push((start, end));
            if let Some(hit) = phase_of(trace, phase_index, graph.launch, device, graph.start_ns) {
                work.first_seen.entry(hit.phase).and_modify(|t| *t = (*t).min(start)).or_insert(start);
                work.by_phase.entry(hit.phase).or_default().graphs.push((start, end));
                work.note(hit, start, end);
            }
        }
        work
    }

    /// The figures of each phase, in order of first GPU work; phases that first ran at the same nanosecond in name
    /// order, which a trace analysed on its own ([`partial::trace_part`]) orders the same way. No phase's span
    /// reaches across a gap between capture windows (`gaps`; see [`capture_gaps`]).
    fn phases(&self, trace: &Trace, phase_index: &PhaseIndex, gaps: &[(i64, i64)], options: &Options) -> Vec<Phase> {
        let source = if phase_index.is_inferred() { PHASES_INFERRED } else { PHASES_RECORDED };
        let names = phase_index.names();
        let mut order: Vec<(i64, &str, PhaseId)> =
            self.first_seen.iter().map(|(&phase, &t)| (t, names[phase as usize].as_str(), phase)).collect();
        order.sort_unstable();
        order
            .into_par_iter()
            .map(|(_, name, phase)| {
                let mut extents: Vec<(i64, i64)> = self.instance_extents[&phase].values().copied().collect();
                extents.sort_unstable();
                let work = &self.by_phase[&phase];
                let mut figures = figures(work, trace, &options.classifier);
                // The phase's span is its instances' time, not first instance to last: the gaps between instances
                // belong to other phases or to the host. Time between capture windows was not recorded: it is left
                // out (but for the phase's own recorded work running on into it), and an instance that reaches
                // across such a gap has no length to count.
                let busy = IntervalUnion::from_intervals(work.intervals());
                figures.span_ns =
                    capture_gaps::recorded_ns(&IntervalUnion::from_intervals(extents.clone()), gaps, &busy);
                figures.idle_ns = figures.span_ns - figures.gpu_busy_ns;
                figures.exposed_comm_over_span_pct = pct(figures.exposed_comm_ns, figures.span_ns);
                let extents = capture_gaps::drop_across(extents, gaps);
                figures.instances = Some(Distribution::of(extents.iter().map(|(start, end)| end - start).collect()));
                Phase { name: name.to_string(), source, figures }
            })
            .collect()
    }
}

/// The device's kernels and memory operations (indices in time order) that can reach into the analysis window.
fn device_events<'a>(context: &DeviceContext<'a>, window_ns: Option<(i64, i64)>) -> (&'a [u32], &'a [u32]) {
    let DeviceContext { trace, device, by_device, .. } = *context;
    events_in_window(trace, by_device, device, window_ns)
}

/// [`device_events`] of `device` of `trace`, whose events by device are `by_device`.
fn events_in_window<'a>(
    trace: &'a Trace,
    by_device: &'a ByDevice,
    device: DeviceIdx,
    window_ns: Option<(i64, i64)>,
) -> (&'a [u32], &'a [u32]) {
    let d = device.0 as usize;
    let kernel_start = |i: u32| trace.kernels[i as usize].start_ns;
    let kernels = in_window(&by_device.kernels[d], kernel_start, by_device.longest_kernel_ns[d], window_ns);
    let memop_start = |i: u32| trace.memops[i as usize].start_ns;
    let memops = in_window(&by_device.memops[d], memop_start, by_device.longest_memop_ns[d], window_ns);
    (kernels, memops)
}

/// A rank's report. Its independent parts (phase figures, whole-rank figures, steps and steady state, graph replays,
/// HTA figures) are computed in parallel.
fn analyze_device(context: &DeviceContext, rank: u32, rank_recorded: bool, options: &Options) -> RankReport {
    analyze_device_with_steps(context, rank, rank_recorded, None, options)
}

/// [`analyze_device`], with the rank's steps where found already (see [`rank_steps`]), else found from its work.
fn analyze_device_with_steps(
    context: &DeviceContext,
    rank: u32,
    rank_recorded: bool,
    step_work: Option<RankStepWork>,
    options: &Options,
) -> RankReport {
    let DeviceContext { trace, device, phase_index, filter_steps, .. } = *context;
    let (kernel_indices, memop_indices) = device_events(context, options.window_ns);
    let work = RankWork::collect(context, kernel_indices, memop_indices, options.window_ns);
    let owner = trace.devices[device.0 as usize].process;
    let gaps = capture_gaps::gaps(trace, owner);
    let (((phases, whole_figures), (graph_replays, hta)), step_figures) = rayon::join(
        || {
            rayon::join(
                || {
                    rayon::join(
                        || work.phases(trace, phase_index, &gaps, options),
                        || without_capture_gaps(figures(&work.whole, trace, &options.classifier), &work.whole, &gaps),
                    )
                },
                || {
                    rayon::join(
                        || graph_replays(trace, device, kernel_indices, memop_indices, options.window_ns),
                        || rank_hta(trace, (kernel_indices, memop_indices), filter_steps, options),
                    )
                },
            )
        },
        || {
            let step_work = step_work.unwrap_or_else(|| steps_of_work(context, &work, options));
            rank_step_figures(context, &work.whole, step_work, options)
        },
    );
    let info = &trace.devices[device.0 as usize];
    let phase_source = if phase_index.is_inferred() { PHASES_INFERRED } else { PHASES_RECORDED };
    RankReport {
        rank,
        rank_recorded,
        source: trace.source.path.clone(),
        device: info.ordinal,
        gpu_name: info.name.clone(),
        pid: info.process.and_then(|p| trace.processes.get(p.0 as usize)).map(|p| p.pid),
        figures: whole_figures,
        phase_source: (!phases.is_empty()).then_some(phase_source),
        phases,
        annotation_ranges: trace.ranges.len() as u64,
        steps: step_figures.steps,
        graph_replays,
        steady_state: step_figures.steady_state,
        generate_calls: step_figures.generate_calls,
        hta,
    }
}

/// The rank's steps from the work its figures file (see [`rank_steps::find_in`]).
fn steps_of_work(context: &DeviceContext, work: &RankWork, options: &Options) -> RankStepWork {
    let kernels = work.whole.kernels.iter().map(|k| rank_steps::kernel_row(k.start_ns, k.end_ns, k.class, options));
    let mut memops: Vec<(i64, i64)> = work.whole.memops.iter().map(|&(start, end, _)| (start, end)).collect();
    memops.sort_unstable();
    let phases = work.first_seen.keys().copied();
    rank_steps::find_in(context.step_inputs(options.window_ns), kernels.collect(), memops, phases, options)
}

/// HTA's figures of a rank's `events` (indices of its kernels and memory operations in `trace`).
fn rank_hta(trace: &Trace, events: (&[u32], &[u32]), filter_steps: bool, options: &Options) -> HtaFigures {
    let kernels: Vec<&Kernel> = events.0.iter().map(|&i| &trace.kernels[i as usize]).collect();
    let memops: Vec<&MemOp> = events.1.iter().map(|&i| &trace.memops[i as usize]).collect();
    hta::figures(trace, &kernels, &memops, filter_steps, options.hta_step_mode, options.window_ns)
}

/// What a rank's steps give: the steps, its generate calls and its steady state.
struct StepFigures {
    steps: Option<Steps>,
    generate_calls: Option<GenerateCalls>,
    steady_state: Option<SteadyState>,
}

/// The rank's steps (found before, `step_work`), the generate calls in inferred steps and the figures of its steady
/// state.
fn rank_step_figures(context: &DeviceContext, whole: &Work, step_work: RankStepWork, options: &Options) -> StepFigures {
    let steps = step_work.steps.as_ref();
    let generate_calls = (steps.filter(|_| step_work.inferred()))
        .and_then(|s| generate_calls::split(&step_work.work_of(&s.found_intervals), s.skipped as usize));
    let steady_state = steps.filter(|s| s.skipped > 0).and_then(|s| {
        let window_ns = s.steady_window_ns?;
        let figures = figures(&whole.clipped_to(window_ns), context.trace, &options.classifier);
        Some(SteadyState {
            window_ns,
            steps: s.time.count,
            figures,
            phases: steady_phases(context, window_ns, options),
        })
    });
    StepFigures { steps: step_work.steps, generate_calls, steady_state }
}

/// The phase figures of a rank's work inside its steady-state window: the same attribution as the whole run's
/// (launching thread, or inferred stretch), the events clipped to the window.
fn steady_phases(context: &DeviceContext, window_ns: (i64, i64), options: &Options) -> Vec<Phase> {
    if context.phase_index.is_empty() {
        return Vec::new();
    }
    let (kernel_indices, memop_indices) = device_events(context, Some(window_ns));
    let owner = context.trace.devices[context.device.0 as usize].process;
    let gaps = capture_gaps::gaps(context.trace, owner);
    RankWork::collect(context, kernel_indices, memop_indices, Some(window_ns)).phases(
        context.trace,
        context.phase_index,
        &gaps,
        options,
    )
}

fn phase_of(
    trace: &Trace,
    index: &PhaseIndex,
    launch: Option<u32>,
    device: DeviceIdx,
    start_ns: i64,
) -> Option<PhaseHit> {
    if index.is_empty() {
        return None;
    }
    // Inferred phases are stretches of GPU time: the launch thread has nothing to say about them.
    if index.is_inferred() {
        return index.hit_on_device(device, start_ns);
    }
    match launch.and_then(|l| trace.api_calls.get(l as usize)) {
        Some(call) => index.hit_on_thread(call.process, call.tid, call.start_ns),
        None => index.hit_on_device(device, start_ns),
    }
}

/// `figures` with the time between capture windows left out of span and idle time (see [`capture_gaps`]).
fn without_capture_gaps(mut figures: Figures, work: &Work, gaps: &[(i64, i64)]) -> Figures {
    if gaps.is_empty() {
        return figures;
    }
    let busy = work.intervals();
    let (Some(first), Some(last)) = (busy.iter().map(|b| b.0).min(), busy.iter().map(|b| b.1).max()) else {
        return figures;
    };
    figures.span_ns -= capture_gaps::unrecorded_ns(first, last, gaps, &IntervalUnion::from_intervals(busy));
    figures.idle_ns = figures.span_ns - figures.gpu_busy_ns;
    figures.exposed_comm_over_span_pct = pct(figures.exposed_comm_ns, figures.span_ns);
    figures
}

/// The rank's CUDA graph replays: whole-graph records when the trace has them, else the kernels and copies whose
/// launch call is a graph launch, one replay per call.
fn graph_replays(
    trace: &Trace,
    device: DeviceIdx,
    kernel_indices: &[u32],
    memop_indices: &[u32],
    window_ns: Option<(i64, i64)>,
) -> Option<GraphReplays> {
    let records: Vec<(i64, i64, u32)> = trace
        .graph_launches
        .iter()
        .filter(|g| g.device == device)
        .filter_map(|g| clip(g.start_ns, g.end_ns, window_ns).map(|(start, end)| (start, end, g.graph_id)))
        .collect();
    if !records.is_empty() {
        return Some(whole_graph_replays(&records));
    }
    let (replays, node_activities) = node_replays(trace, kernel_indices, memop_indices, window_ns);
    if replays.is_empty() {
        return None;
    }
    Some(GraphReplays {
        source: "node_kernels",
        node_activities,
        replay_ns: Distribution::of(replays.values().map(|r| r.end_ns - r.start_ns).collect()),
        by_graph: node_graph_totals(&replays),
    })
}

/// Replays recorded whole, `(start_ns, end_ns, graph id)` each.
fn whole_graph_replays(records: &[(i64, i64, u32)]) -> GraphReplays {
    let mut by_graph: BTreeMap<u32, GraphTotal> = BTreeMap::new();
    for &(start, end, graph_id) in records {
        let total = by_graph.entry(graph_id).or_insert(GraphTotal {
            graph_id: Some(graph_id),
            first_node_id: None,
            nodes_per_replay: 0,
            replays: 0,
            total_ns: 0,
        });
        total.replays += 1;
        total.total_ns += end - start;
    }
    let mut by_graph: Vec<GraphTotal> = by_graph.into_values().collect();
    by_graph.sort_by_key(|g| (std::cmp::Reverse(g.total_ns), g.graph_id));
    GraphReplays {
        source: "graph_records",
        node_activities: 0,
        replay_ns: Distribution::of(records.iter().map(|(start, end, _)| end - start).collect()),
        by_graph,
    }
}

/// Node-level recording: a graph's nodes carry the correlation id of the call that launched the graph. The replays
/// by launch call, and how many kernels and copies ran in them.
fn node_replays(
    trace: &Trace,
    kernel_indices: &[u32],
    memop_indices: &[u32],
    window_ns: Option<(i64, i64)>,
) -> (HashMap<u32, Replay>, u64) {
    // Most traces launch no graph, and then one look at the names spares the walk over every kernel.
    let is_graph_launch = steps::graph_launch_names(trace);
    let mut replays: HashMap<u32, Replay> = HashMap::new();
    let mut node_activities = 0u64;
    if !is_graph_launch.contains(&true) {
        return (replays, node_activities);
    }
    let kernels = kernel_indices.iter().map(|&i| {
        let k = &trace.kernels[i as usize];
        (k.launch, k.start_ns, k.end_ns, k.graph_id, k.graph_node_id)
    });
    let memops = memop_indices.iter().map(|&i| {
        let m = &trace.memops[i as usize];
        (m.launch, m.start_ns, m.end_ns, None, None)
    });
    for (launch, start, end, graph_id, node_id) in kernels.chain(memops) {
        let Some(call) = launch.and_then(|l| trace.api_calls.get(l as usize).map(|c| (l, c))) else { continue };
        let graph = is_graph_launch.get(call.1.name.0 as usize).copied().unwrap_or(false);
        let Some((start, end)) = clip(start, end, window_ns).filter(|_| graph) else { continue };
        node_activities += 1;
        let replay = replays.entry(call.0).or_insert(Replay { start_ns: start, end_ns: end, ..Replay::default() });
        replay.start_ns = replay.start_ns.min(start);
        replay.end_ns = replay.end_ns.max(end);
        replay.nodes += 1;
        replay.graph_id = replay.graph_id.or(graph_id);
        replay.first_node_id = match (replay.first_node_id, node_id) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    (replays, node_activities)
}

/// Per graph, its replays recorded node by node added up, most time first. A graph is its recorded graph id, else
/// its node ids; replays with neither are left out.
fn node_graph_totals(replays: &HashMap<u32, Replay>) -> Vec<GraphTotal> {
    // (graph id, first node id) → the graph's totals and its replays counted by size.
    type GraphKey = (Option<u32>, Option<u64>);
    let mut by_graph: BTreeMap<GraphKey, (GraphTotal, BTreeMap<u64, u64>)> = BTreeMap::new();
    for replay in replays.values() {
        let key = match replay.graph_id {
            Some(id) => (Some(id), None),
            None => (None, replay.first_node_id),
        };
        if key == (None, None) {
            continue;
        }
        let (total, sizes) = by_graph.entry(key).or_insert_with(|| {
            let graph = GraphTotal {
                graph_id: replay.graph_id,
                first_node_id: replay.first_node_id,
                nodes_per_replay: 0,
                replays: 0,
                total_ns: 0,
            };
            (graph, BTreeMap::new())
        });
        total.replays += 1;
        total.total_ns += replay.end_ns - replay.start_ns;
        total.first_node_id = match (total.first_node_id, replay.first_node_id) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        *sizes.entry(replay.nodes).or_default() += 1;
    }
    let mut by_graph: Vec<GraphTotal> = by_graph
        .into_values()
        .map(|(mut total, sizes)| {
            // The most frequent size; ties to the larger (a replay cut by the window is the smaller one).
            total.nodes_per_replay = sizes.iter().max_by_key(|&(size, count)| (*count, *size)).map_or(0, |(s, _)| *s);
            total
        })
        .collect();
    by_graph.sort_by_key(|g| (std::cmp::Reverse(g.total_ns), g.graph_id, g.first_node_id));
    by_graph
}

/// One launch of a graph recorded node by node.
#[derive(Debug, Clone, Copy, Default)]
struct Replay {
    start_ns: i64,
    end_ns: i64,
    /// Kernels and copies.
    nodes: u64,
    /// The graph id its kernels carry, if any.
    graph_id: Option<u32>,
    /// The smallest node id of its kernels.
    first_node_id: Option<u64>,
}

fn pct(part: i64, whole: i64) -> f64 {
    if whole > 0 { 100.0 * part as f64 / whole as f64 } else { 0.0 }
}

fn figures(work: &Work, trace: &Trace, classifier: &Classifier) -> Figures {
    let mut busy = Vec::with_capacity(work.kernels.len() + work.memops.len());
    let mut comm = Vec::new();
    let mut comp = Vec::new();
    // Summed per (category, collective type) first; labels are made once per key at the end.
    type ClassKey = (u16, Option<CollectiveOp>);
    let mut by_class: HashMap<ClassKey, (KernelClass, Option<CollectiveOp>, i64)> = HashMap::new();
    let (mut comm_wait_ns, mut comm_transfer_ns, mut late_count) = (0, 0, 0);
    for kernel in &work.kernels {
        let WorkKernel { start_ns: start, end_ns: end, class, collective, .. } = *kernel;
        if let Some(share) = kernel.share {
            comm_wait_ns = i64::saturating_add(comm_wait_ns, share.wait_ns);
            comm_transfer_ns = i64::saturating_add(comm_transfer_ns, share.transfer_ns);
            late_count += u64::from(share.late);
        }
        busy.push((start, end));
        let summed = &mut by_class
            .entry((class.category.0, class.collective.or(collective)))
            .or_insert((class, collective, 0))
            .2;
        *summed = summed.saturating_add(end.saturating_sub(start));
        if classifier.is_communication(class.category) {
            comm.push((start, end));
        } else if class.category != classifier.memcpy() && class.category != classifier.memset() {
            comp.push((start, end));
        }
    }
    let mut categories: BTreeMap<String, i64> = BTreeMap::new();
    for (class, collective, ns) in by_class.into_values() {
        let total = categories.entry(categories::report_label(classifier, class, collective)).or_default();
        *total = total.saturating_add(ns);
    }
    // A matched collective's kernel runs while its rank waits for the last peer to arrive: that part is the late
    // rank's doing, not the interconnect's. It moves from `comm.<type>` to `wait.<type>`, so that the shares show
    // transfer and waiting apart (and still add up to the summed GPU time).
    for kernel in &work.kernels {
        let Some(share) = kernel.share.filter(|s| s.wait_ns > 0) else { continue };
        let label = categories::report_label(classifier, kernel.class, kernel.collective);
        let Some(op) = label.strip_prefix(categories::COMM_PREFIX) else { continue };
        let wait_label = format!("{}{op}", categories::WAIT_PREFIX);
        if let Some(comm_ns) = categories.get_mut(&label) {
            *comm_ns -= share.wait_ns;
        }
        *categories.entry(wait_label).or_default() += share.wait_ns;
    }
    for &(start, end, is_memset) in &work.memops {
        busy.push((start, end));
        let label = if is_memset { categories::MEMSET } else { categories::MEMCPY };
        let total = categories.entry(label.to_string()).or_default();
        *total = total.saturating_add(end.saturating_sub(start));
    }
    // A graph recorded whole kept the GPU busy, but what ran in it is unknown: it is busy time in its own
    // category, neither computation nor communication (the import warning says how to record its kernels).
    for &(start, end) in &work.graphs {
        busy.push((start, end));
        *categories.entry(categories::CUDA_GRAPH.to_string()).or_default() += end - start;
    }
    let span_ns = match (busy.iter().map(|b| b.0).min(), busy.iter().map(|b| b.1).max()) {
        (Some(first), Some(last)) => last - first,
        _ => 0,
    };
    let busy = IntervalUnion::from_intervals(busy);
    let comm = IntervalUnion::from_intervals(comm);
    let comp = IntervalUnion::from_intervals(comp);
    let gpu_busy_ns = busy.length_ns();
    let comm_ns = comm.length_ns();
    let overlap_ns = comm.intersection_ns(&comp);
    let exposed_comm_ns = comm_ns - overlap_ns;
    Figures {
        span_ns,
        gpu_busy_ns,
        idle_ns: span_ns - gpu_busy_ns,
        comm_ns,
        exposed_comm_ns,
        comm_comp_overlap_pct: pct(overlap_ns, comm_ns),
        comm_over_busy_pct: pct(comm_ns, gpu_busy_ns),
        exposed_comm_over_span_pct: pct(exposed_comm_ns, span_ns),
        kernel_count: work.kernels.len() as u64,
        memop_count: work.memops.len() as u64,
        cuda_graph_count: work.graphs.len() as u64,
        categories,
        comm_wait_ns,
        comm_transfer_ns,
        late_count,
        instances: None,
        kernels: kernel_summary::summarize(
            work.kernels.iter().map(|k| (k.name, k.end_ns - k.start_ns)).collect(),
            |n| {
                // ROCm traces keep names mangled; the report shows them as a reader knows them.
                let name = trace.names.get(n);
                categories::demangle(name).unwrap_or_else(|| name.to_string())
            },
        ),
    }
}

/// The `cuda_gpu_kern_sum` of all kernels of all traces together (what `nsys stats` prints for one file).
pub fn kernel_summary(traces: &[Trace]) -> Vec<KernelSummaryRow> {
    // Names are interned per trace: group across traces by the name text.
    let mut names = shardscope_model::Names::default();
    let mut kernels = Vec::with_capacity(traces.iter().map(|t| t.kernels.len()).sum());
    for trace in traces {
        let ids: Vec<NameId> = trace.names.iter().map(|(_, s)| names.intern(s)).collect();
        // On worker threads: at ten million kernels the pairs are 160 MB of fresh pages to fill.
        let pairs = trace.kernels.par_iter().map(|k| (ids[k.name.0 as usize], k.duration_ns()));
        workers::run(|| kernels.par_extend(pairs));
    }
    kernel_summary::summarize(kernels, |n| names.get(n).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What filing gave, comparable: rows whole and by phase, when each phase was first seen, instance extents.
    type Filed = (Vec<(i64, i64, NameId)>, Vec<(PhaseId, i64, usize)>, Vec<(PhaseId, u32, (i64, i64))>);

    fn filed(work: &RankWork) -> Filed {
        let rows = work.whole.kernels.iter().map(|k| (k.start_ns, k.end_ns, k.name)).collect();
        let phases =
            work.first_seen.iter().map(|(&phase, &t)| (phase, t, work.by_phase[&phase].kernels.len())).collect();
        let mut extents: Vec<(PhaseId, u32, (i64, i64))> = work
            .instance_extents
            .iter()
            .flat_map(|(&phase, extents)| extents.iter().map(move |(&range, &extent)| (phase, range, extent)))
            .collect();
        extents.sort_unstable();
        (rows, phases, extents)
    }

    /// Kernels filed in runs and joined are filed as in one pass, with and without a window: a two-rank sample with
    /// recorded prefill and decode phases and matched collectives, in runs of 7 kernels.
    #[test]
    fn kernels_filed_in_runs_join_as_one_pass() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../sample-traces/tp2_nsys.sqlite.gz");
        let traces = shardscope_io::load(std::path::Path::new(path)).expect("the sample loads");
        let options = Options::default();
        let prepared = Prepared::build(&traces, &options);
        let matching = match_across_ranks(&traces, &prepared, &options);
        assert!(!matching.shares.is_empty(), "the sample's collectives are matched");
        for &(key, _, _) in &prepared.ranks_in_input {
            let context = prepared.context(&traces, key, false, &matching);
            let (kernels, _) = device_events(&context, None);
            let (first, last) = (
                context.trace.kernels[kernels[0] as usize].start_ns,
                context.trace.kernels[kernels[kernels.len() - 1] as usize].end_ns,
            );
            for window_ns in [None, Some((first + (last - first) / 3, last - (last - first) / 3))] {
                let one = RankWork::of_kernels(&context, kernels, window_ns);
                let runs: Vec<RankWork> =
                    kernels.chunks(7).map(|run| RankWork::of_kernels(&context, run, window_ns)).collect();
                let phases = if window_ns.is_none() { 2 } else { 1 };
                assert!(runs.len() > 2 && one.by_phase.len() >= phases, "several runs, the phases: {window_ns:?}");
                assert_eq!(filed(&RankWork::joined(runs)), filed(&one), "window {window_ns:?}");
            }
        }
    }
}
