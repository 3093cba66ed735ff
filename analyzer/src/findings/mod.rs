//! Findings: what limits a run, ranked by the time removing it would save.
//!
//! Each finding type (one file each) removes one cause from the run's dependency model
//! ([`crate::dependency::graph`]) and replays it ([`crate::dependency::whatif`]): the saving is the measured time of
//! the modelled steps minus the replayed one, so every stated saving is a replay, not a guess. Where no replay
//! applies (warm-up before the modelled steps), the saving is a stated bound. The model is that of `analyzer
//! what-if`: the steady-state steps (the report's warm-up, else step 0, and the start-up left out, and said so),
//! or the whole trace without
//! steps. Savings are per step (the window's saving over its steps) and per run (per step × the steps of the
//! run); they do not add up, as two causes can hide behind each other. The thresholds come from
//! [`rules::FindingsRules`] (`analyzer/rules/findings.toml`, replaceable with `--findings-rules`).
//!
//! A replayed finding is only given when the model fits the window by the what-if's own checks
//! ([`crate::dependency::whatif::model_fit`]: replayed unchanged it reproduces the measured time within
//! [`REPLAY_TOLERANCE_PCT`], and the no-straggler ideal is not slower than measured); otherwise every replayed type
//! is reported as not evaluated, with the what-if's reasons, and only stated bounds are given.

pub mod exposed_comm;
pub mod flop_rate;
pub mod host_copies;
pub mod late_rank;
pub mod launch_bound;
pub mod memory_capacity;
pub mod pageable_copies;
pub mod pipeline_stages;
pub mod rules;
pub mod slow_collectives;
pub mod syncs;
pub mod warmup;

use serde::Serialize;
use shardscope_model::Trace;

use crate::dependency::critical_path::{self, CriticalPath, Model};
use crate::dependency::graph::EdgeKind;
use crate::dependency::whatif::{self, Fit, REPLAY_TOLERANCE_PCT, Typical};
use crate::figures::bench_peaks::BenchPeaks;
use crate::output::render::{duration as human_ns, push_wrapped};
use crate::report::Report;
use crate::report::mfu::{ModelShape, Tokens};
use crate::stage_times::stage;
use rules::FindingsRules;

/// How a saving was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The dependency model replayed with the cause removed.
    Replay,
    /// An upper bound stated in `how`: removing the cause saves at most this much.
    Bound,
    /// Not a time: a risk stated in `how`, with no saving (ranked after every finding with a time).
    Risk,
}

impl Basis {
    /// Where a finding of this basis goes among findings of the same saving: a replay (exact within the model)
    /// before a bound (an upper bound, so possibly less in fact); risks, which state no time, after every saving.
    fn tie_order(self) -> u8 {
        match self {
            Basis::Replay => 0,
            Basis::Bound => 1,
            Basis::Risk => 2,
        }
    }
}

/// The ranking of `findings`: every finding whose saving recurs with the steps by its saving per run, largest first
/// (on equal savings a replay before a bound, then by type name); then what is saved once per run (the warm-up),
/// whose worth depends on how long the run goes on, not on what was profiled; risks, which state no time, last. A
/// bound is an upper bound, so a bound ranked above a replay is the larger only if the bound is reached: see
/// `docs/findings.md`, "Ranking".
pub fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        let key = |f: &Finding| {
            let once_per_run = f.kind == warmup::KIND;
            (f.basis == Basis::Risk, once_per_run, std::cmp::Reverse(f.saving_per_run_ns), f.basis.tie_order(), f.kind)
        };
        key(a).cmp(&key(b))
    });
}

/// One thing that limits the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The finding type: `late_rank`, `exposed_communication`, `launch_bound`, `synchronising_calls`,
    /// `host_device_copies`, `slow_collectives`, `warmup`, `pageable_copies`, `memory_near_capacity`.
    pub kind: &'static str,
    /// What limits the run, in one sentence.
    pub title: String,
    /// The figures behind it.
    pub evidence: Vec<String>,
    /// What was removed in the replay, or how the bound is computed.
    pub how: String,
    /// Replay or bound.
    pub basis: Basis,
    /// Time saved over the modelled window (measured minus replayed).
    pub saving_ns: i64,
    /// The same as a share of the window's measured time (of a bound without a per-step figure: of the run; of a
    /// risk: 0), percent.
    pub saving_pct: f64,
    /// Per step of the window (`null` without steps).
    pub saving_per_step_ns: Option<i64>,
    /// Over the whole run: per step × the run's steps, or the window's saving without steps.
    pub saving_per_run_ns: i64,
}

/// Why a finding type did not fire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quiet {
    /// The finding type.
    pub kind: &'static str,
    /// Below its threshold (with the figure), or not evaluated (with the reason).
    pub why: String,
}

/// The findings of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    /// The modelled window: the steady-state steps, or the whole trace.
    pub window: String,
    /// The first and last step modelled, when the window is steps.
    pub steps: Option<(usize, usize)>,
    /// Steps in the run (every rank has at least these many), when the run has steps.
    pub run_steps: Option<u64>,
    /// Last GPU end minus window start, as recorded.
    pub measured_ns: i64,
    /// The model replayed unchanged.
    pub replay_ns: i64,
    /// The findings with a time by saving per run, largest first (a replay before a bound of the same saving);
    /// then risks.
    pub findings: Vec<Finding>,
    /// The types that did not fire, and why.
    pub quiet: Vec<Quiet>,
    /// What the window leaves out of the run.
    pub excluded: Vec<String>,
    /// The what-if's fit checks on the model; without a fit no replayed saving is given.
    pub fit: Fit,
}

/// The model's shape and the tokens of one phase instance (`--model`, `--tokens`), for the FLOP-rate finding.
#[derive(Debug, Clone)]
pub struct FlopInputs<'a> {
    /// The model's shape.
    pub shape: &'a ModelShape,
    /// Tokens per phase instance.
    pub tokens: &'a Tokens,
    /// Per phase, the slowest rank's median instance time after the warm-up: the time the report's MFU divides by.
    pub instance_p50_ns: std::collections::BTreeMap<String, i64>,
}

impl<'a> FlopInputs<'a> {
    /// The inputs of `traces` (with `report`, their report under `options`), instance times as the report's LLM
    /// figures take them.
    pub fn of(
        shape: &'a ModelShape,
        tokens: &'a Tokens,
        traces: &[Trace],
        report: &Report,
        options: &crate::report::Options,
    ) -> FlopInputs<'a> {
        let instances =
            crate::llm::layers::instances(traces, &options.classifier, &options.phase_pattern, report.window_ns);
        let instance_p50_ns = crate::llm::layers::latencies(&instances, options.skip_steps)
            .into_iter()
            .filter(|l| l.time.count > 0)
            .map(|l| (l.phase, l.time.p50_ns))
            .collect();
        FlopInputs { shape, tokens, instance_p50_ns }
    }
}

/// What every finding type reads.
pub struct Context<'a> {
    /// The traces.
    pub traces: &'a [Trace],
    /// The report of the whole run.
    pub report: &'a Report,
    /// The dependency model of the steady-state steps.
    pub model: &'a Model,
    /// Its critical path, made beside the replays ([`Context::path`]).
    path: &'a PathComing,
    /// Measured time of the window.
    pub measured_ns: i64,
    /// The model replayed unchanged.
    pub replay_ns: i64,
    /// Steps in the window.
    pub window_steps: Option<u64>,
    /// Steps in the run.
    pub run_steps: Option<u64>,
    /// `bench` results, when given.
    pub bench: Option<&'a BenchPeaks>,
    /// The model's shape and tokens, when given.
    pub flops: Option<&'a FlopInputs<'a>>,
    /// The typical own times of the model's instances, shared by the replays at typical times.
    pub typical: Typical,
}

impl Context<'_> {
    /// The model's critical path, once it is made (the finding types that read it wait here).
    pub fn path(&self) -> &CriticalPath {
        self.path.wait()
    }

    /// Whether [`Context::path`] returns at once: the path is made before the finding types on few cores, beside
    /// them on many.
    pub fn path_is_made(&self) -> bool {
        self.path.is_made()
    }

    /// A share of the window's measured time, percent.
    pub fn pct(&self, ns: i64) -> f64 {
        if self.measured_ns > 0 { 100.0 * ns as f64 / self.measured_ns as f64 } else { 0.0 }
    }

    /// The saving against the measured time of a replay with the own time `own_of(vertex)` of every vertex (edges
    /// of the kinds in `skip` ignored). The replay keeps one time per vertex and no list of own times, so that
    /// the finding types' replays fit [`REPLAY_STATE_BUDGET_BYTES`] side by side.
    pub fn replay_saving_ns(&self, own_of: impl Fn(u32) -> i64, skip: &[EdgeKind]) -> i64 {
        self.saving_of_end_ns(self.model.graph.replayed_last_end(own_of, skip))
    }

    /// The saving against the measured time of a replay whose last operation ended at `end` (as
    /// [`Graph::replayed_last_end`](crate::dependency::graph::Graph::replayed_last_end) finds it).
    pub fn saving_of_end_ns(&self, end: Option<(u32, i64)>) -> i64 {
        self.measured_ns - self.model.graph.span_ns(end)
    }

    /// [`Context::replay_saving_ns`] with the operations `free(op)` names ending at no time (their end vertices' own
    /// time 0), every other own time as measured.
    pub fn saving_with_ends_free(&self, free: impl Fn(u32) -> bool, skip: &[EdgeKind]) -> i64 {
        let graph = &self.model.graph;
        let own = graph.own_ns();
        let own_of = |v: u32| match graph.op_ended_at(v) {
            Some(op) if free(op) => 0,
            _ => own[v as usize],
        };
        self.replay_saving_ns(own_of, skip)
    }

    /// A replayed finding whose saving was computed already.
    pub fn replayed_saving(
        &self,
        kind: &'static str,
        title: String,
        evidence: Vec<String>,
        how: String,
        saving_ns: i64,
    ) -> Finding {
        self.finding(kind, title, evidence, how, Basis::Replay, saving_ns)
    }

    /// A finding of `saving_ns` over the window.
    pub fn finding(
        &self,
        kind: &'static str,
        title: String,
        evidence: Vec<String>,
        how: String,
        basis: Basis,
        saving_ns: i64,
    ) -> Finding {
        let per_step = self.window_steps.filter(|&n| n > 0).map(|n| saving_ns / n as i64);
        let per_run = match (per_step, self.run_steps) {
            (Some(step), Some(run)) => step.saturating_mul(run as i64),
            _ => saving_ns,
        };
        Finding {
            kind,
            title,
            evidence,
            how,
            basis,
            saving_ns,
            saving_pct: self.pct(saving_ns),
            saving_per_step_ns: per_step,
            saving_per_run_ns: per_run,
        }
    }

    /// True when the model replayed unchanged gives the measured time.
    pub fn replay_fits(&self) -> bool {
        self.pct((self.replay_ns - self.measured_ns).abs()) <= REPLAY_TOLERANCE_PCT
    }

    /// A "below its threshold" line.
    pub fn below(&self, kind: &'static str, what: &str, saving_ns: i64, min_pct: f64) -> Quiet {
        Quiet {
            kind,
            why: format!(
                "{what} saves {} ({:.2} % of the window), below the {min_pct} % threshold",
                human_ns(saving_ns),
                self.pct(saving_ns)
            ),
        }
    }
}

/// What one finding type gives.
pub type Outcome = Result<Finding, Quiet>;

/// The findings of `traces` (with `report`, their report) on the model of the steady-state steps, or of
/// `options.window_ns` when set.
pub fn findings(
    traces: &[Trace],
    report: &Report,
    options: &crate::report::Options,
    bench: Option<&BenchPeaks>,
    rules: &FindingsRules,
) -> Result<Findings, critical_path::ModelError> {
    findings_matched(traces, report, options, bench, rules, None, None)
}

/// [`findings`], with the model's shape and tokens for the FLOP-rate finding, on the model's collective matching
/// made already (by [`critical_path::model_matching`] on the same traces and options: beside the report's figures,
/// which do not need it), or made here when `None`.
pub fn findings_matched(
    traces: &[Trace],
    report: &Report,
    options: &crate::report::Options,
    bench: Option<&BenchPeaks>,
    rules: &FindingsRules,
    flops: Option<&FlopInputs>,
    matching: Option<crate::figures::collectives::Matching>,
) -> Result<Findings, critical_path::ModelError> {
    let matching =
        matching.unwrap_or_else(|| crate::figures::workers::run(|| critical_path::model_matching(traces, options)));
    let model = critical_path::model_after_report(traces, options, report, matching)?;
    Ok(findings_on_model(traces, report, model, bench, rules, flops))
}

/// The findings on `model` (made by [`critical_path::report_and_steady_model`] or as [`findings_matched`] makes
/// it), which is freed beside what follows.
pub fn findings_on_model(
    traces: &[Trace],
    report: &Report,
    model: Model,
    bench: Option<&BenchPeaks>,
    rules: &FindingsRules,
    flops: Option<&FlopInputs>,
) -> Findings {
    let found = stage("findings", || findings_of_model_with(traces, report, &model, bench, rules, flops));
    crate::figures::workers::drop_in_background(model);
    found
}

/// The JSON of `analyzer report`: `findings` first (`null` when the run could not be modelled), then the report's
/// own keys, unchanged.
pub fn report_json(findings: Option<&Findings>, report: &Report) -> Result<String, serde_json::Error> {
    let mut map = serde_json::Map::new();
    map.insert("findings".into(), serde_json::to_value(findings)?);
    if let serde_json::Value::Object(rest) = serde_json::to_value(report)? {
        map.extend(rest);
    }
    serde_json::to_string_pretty(&map)
}

/// The findings on a model already built.
pub fn findings_of_model(
    traces: &[Trace],
    report: &Report,
    model: &Model,
    bench: Option<&BenchPeaks>,
    rules: &FindingsRules,
) -> Findings {
    findings_of_model_with(traces, report, model, bench, rules, None)
}

/// [`findings_of_model`], with the model's shape and tokens for the FLOP-rate finding.
pub fn findings_of_model_with(
    traces: &[Trace],
    report: &Report,
    model: &Model,
    bench: Option<&BenchPeaks>,
    rules: &FindingsRules,
    flops: Option<&FlopInputs>,
) -> Findings {
    let path = PathComing::default();
    // Beside the finding types' replays only where the workers outnumber the path's own: on fewer cores the replays
    // keep them all busy, and the path's threads would only take turns with them.
    let beside = crate::figures::workers::run(rayon::current_num_threads) > PATH_THREADS;
    let found = std::thread::scope(|scope| {
        // The critical path on a thread (and workers) of its own: the finding types' replays need only the unchanged
        // replay and the typical times, and the types that read the path wait for it (made on workers of its own,
        // the path is held up by no finding's worker that waits).
        let spawned = beside.then(|| {
            std::thread::Builder::new()
                .name("shardscope-path".into())
                .spawn_scoped(scope, || path.make(traces, model, true))
        });
        let path_here = spawned.is_none_or(|spawned| spawned.is_err());
        let inputs = Inputs { traces, report, model, bench, rules, flops };
        findings_beside_path(inputs, (&path, path_here))
    });
    let (found, typical) = found;
    // The critical path's segments (a million and more, four names each, on a large run) and the typical times are
    // freed beside what follows, not before the findings are handed back.
    crate::figures::workers::drop_in_background((path, typical));
    found
}

/// What the findings read: the run's traces and report, its model, the bench's peaks, the rules, and the model's
/// shape and tokens for the FLOP-rate finding.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    traces: &'a [Trace],
    report: &'a Report,
    model: &'a Model,
    bench: Option<&'a BenchPeaks>,
    rules: &'a FindingsRules,
    flops: Option<&'a FlopInputs<'a>>,
}

/// [`findings_of_model_with`], the critical path made on another thread meanwhile (`path.0`), or here, beside the
/// model's other shared parts (where `path.1`); and the typical times, for the caller to free.
fn findings_beside_path(inputs: Inputs, (path, path_here): (&PathComing, bool)) -> (Findings, Typical) {
    let Inputs { traces, report, model, bench, rules, flops } = inputs;
    let graph = &model.graph;
    let measured_ns = graph.span_ns(graph.last_end(graph.measured_ns()));
    let run_steps = report.ranks.iter().map(|r| r.steps.as_ref().map(|s| s.found)).collect::<Option<Vec<u64>>>();
    // The model's shared parts (the unchanged replay, the typical own times) at once; then every finding type at
    // once beside the fit checks' no-straggler replay, which needs the typical times. Each type only reads the
    // shared parts, and the outcomes keep their order, so the findings are the same bytes on any number of
    // threads. The replayed types run before the fit is known: where it fails, their outcomes are set aside for the
    // fit's reasons (the work is lost, the figures are the same).
    let ((), (replay, typical)) = crate::figures::workers::run(|| {
        rayon::join(
            || {
                if path_here {
                    path.make(traces, model, false);
                }
            },
            || {
                rayon::join(
                    || stage("findings: replay", || whatif::unchanged_last_end(graph)),
                    || stage("findings: typical times", || whatif::typical_of(graph)),
                )
            },
        )
    });
    let context = Context {
        traces,
        report,
        model,
        path,
        measured_ns,
        replay_ns: graph.span_ns(replay),
        window_steps: model.steps.map(|(first, last)| (last + 1 - first) as u64),
        run_steps: run_steps.and_then(|counts| counts.into_iter().min()).filter(|_| model.steps.is_some()),
        bench,
        flops,
        typical,
    };
    // On one pool: the types' threads, one of them taken by the no-straggler replay while it runs.
    let (no_straggler, before_fit) = crate::figures::workers::with_threads(replay_threads(graph), || {
        rayon::join(
            || stage("findings: no-straggler replay", || whatif::no_straggler_last_end(model, &context.typical)),
            || evaluate_before_fit(&context, rules),
        )
    });
    let fit = whatif::model_fit_of(model, replay, no_straggler);
    let outcomes = crate::figures::workers::run(|| with_fit(before_fit, &context, &fit, rules));
    let (mut fired, mut quiet) = (Vec::new(), Vec::new());
    for outcome in outcomes {
        match outcome {
            Ok(finding) => fired.push(finding),
            Err(q) => quiet.push(q),
        }
    }
    rank(&mut fired);
    let found = Findings {
        window: window_words(model),
        steps: model.steps,
        run_steps: context.run_steps,
        measured_ns,
        replay_ns: context.replay_ns,
        findings: fired,
        quiet,
        excluded: model.excluded.clone(),
        fit,
    };
    (found, context.typical)
}

/// The critical path of a model, made on one thread and read on others: [`PathComing::wait`] waits until
/// [`PathComing::make`] is done.
#[derive(Default)]
struct PathComing(std::sync::OnceLock<Option<CriticalPath>>);

/// Workers of the thread that makes the critical path: the walk back along the path is one thread's, the naming of
/// its segments a few threads' work, beside the findings' replays on every core.
const PATH_THREADS: usize = 4;

impl PathComing {
    /// Makes the critical path of `model` (of `traces`), on [`PATH_THREADS`] workers of its own where `own_workers`,
    /// else on the shared ones. A panic there is passed on, and those waiting for the path panic too rather than
    /// wait for ever.
    fn make(&self, traces: &[Trace], model: &Model, own_workers: bool) {
        let path = || stage("findings: critical path", || critical_path::critical_path(traces, model));
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match own_workers {
            true => crate::figures::workers::with_threads(PATH_THREADS, path),
            false => crate::figures::workers::run(path),
        }));
        match made {
            Ok(path) => {
                let _ = self.0.set(Some(path));
            }
            Err(panic) => {
                let _ = self.0.set(None);
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// The critical path, once made.
    fn wait(&self) -> &CriticalPath {
        self.0.wait().as_ref().expect("the critical path was made")
    }

    /// Whether the path is made (or failed) already: [`PathComing::wait`] then returns at once.
    fn is_made(&self) -> bool {
        self.0.get().is_some()
    }
}

/// How much replay state the finding types may hold at once, bytes. Each of their replays holds what
/// [`Graph::span_replay_bytes`](crate::dependency::graph::Graph::span_replay_bytes) says ([`Context::replay_saving_ns`]:
/// own times are computed where read): a ring of a few hundred KiB on most models, but one 8-byte time per vertex
/// where edges reach too far back for a ring. On 16 cores a 10 M-kernel, 8-rank model replayed on every core at
/// once, three times per vertex then, doubled the report's peak (16.1 against 8.5 GB): where replays keep a time
/// per vertex, fewer run at once on a model that large.
const REPLAY_STATE_BUDGET_BYTES: u64 = 2 << 30;

/// How many threads the finding types and their replays get on `graph`: as many as the budget holds replays, at
/// least one, at most the pool's.
fn replay_threads(graph: &crate::dependency::graph::Graph) -> usize {
    let per_replay_bytes = graph.span_replay_bytes().max(1);
    let fitting = usize::try_from(REPLAY_STATE_BUDGET_BYTES / per_replay_bytes).unwrap_or(usize::MAX);
    fitting.clamp(1, rayon::current_num_threads().max(1))
}

/// One finding type's evaluation, and its name (for [`stage`] lines).
type Evaluate = (&'static str, fn(&Context, &FindingsRules) -> Outcome);

/// The outcomes of the finding types that do not read the fit checks, in parallel: [`BEFORE_FIT`]'s types, then
/// [`REPLAYED_KINDS`]', then [`MEMORY_LAST`]'s.
fn evaluate_before_fit(context: &Context, rules: &FindingsRules) -> Vec<Outcome> {
    use rayon::prelude::*;
    let replayed: [Evaluate; 6] = [
        (REPLAYED_KINDS[0], |c, r| late_rank::evaluate(c, &r.late_rank)),
        (REPLAYED_KINDS[1], |c, r| exposed_comm::evaluate(c, &r.exposed_communication)),
        (REPLAYED_KINDS[2], |c, r| launch_bound::evaluate(c, &r.launch_bound)),
        (REPLAYED_KINDS[3], |c, r| syncs::evaluate(c, &r.synchronising_calls)),
        (REPLAYED_KINDS[4], |c, r| host_copies::evaluate(c, &r.host_device_copies)),
        (REPLAYED_KINDS[5], |c, r| slow_collectives::evaluate(c, &r.slow_collectives)),
    ];
    let kinds: Vec<Evaluate> = BEFORE_FIT.into_iter().chain(replayed).chain([MEMORY_LAST]).collect();
    kinds.par_iter().map(|&(name, evaluate)| stage(&format!("findings: {name}"), || evaluate(context, rules))).collect()
}

/// The types evaluated before the replayed ones that need no fit checks.
const BEFORE_FIT: [Evaluate; 2] = [
    (warmup::KIND, |c, r| warmup::evaluate(c, &r.warmup)),
    (flop_rate::KIND, |c, r| flop_rate::evaluate(c, &r.low_flop_rate)),
];

/// The last type, which needs no fit checks.
const MEMORY_LAST: Evaluate =
    (memory_capacity::KIND, |c, r| memory_capacity::evaluate(c.traces, c.report, &r.memory_near_capacity));

/// Every finding type's outcome, in the order of the quiet list, from `before_fit` ([`evaluate_before_fit`]'s)
/// and the two types that read whether the model fits (each replays only where it does); the replayed types'
/// outcomes only where the model fits (else each is not evaluated, with the fit's reasons).
fn with_fit(before_fit: Vec<Outcome>, context: &Context, fit: &Fit, rules: &FindingsRules) -> Vec<Outcome> {
    let (pipeline, pageable) = rayon::join(
        || {
            let rule = &rules.pipeline_stage_imbalance;
            stage(&format!("findings: {}", pipeline_stages::KIND), || {
                pipeline_stages::evaluate(context, fit.fits, rule)
            })
        },
        || {
            let rule = &rules.pageable_copies;
            stage(&format!("findings: {}", pageable_copies::KIND), || {
                pageable_copies::evaluate(context, fit.fits, rule)
            })
        },
    );
    let mut before_fit = before_fit.into_iter();
    let mut outcomes: Vec<Outcome> = before_fit.by_ref().take(BEFORE_FIT.len()).collect();
    outcomes.push(pipeline);
    let replayed: Vec<Outcome> = before_fit.by_ref().take(REPLAYED_KINDS.len()).collect();
    if fit.fits {
        outcomes.extend(replayed);
    } else {
        let why = not_fitting(fit);
        outcomes.extend(REPLAYED_KINDS.map(|kind| Err(Quiet { kind, why: why.clone() })));
    }
    outcomes.push(pageable);
    outcomes.extend(before_fit);
    outcomes
}

/// Why a replayed type is not evaluated on a model that does not fit: the what-if's own reasons.
pub fn not_fitting(fit: &Fit) -> String {
    format!("not evaluated: the model does not fit this window: {}", fit.problems.join("; "))
}

/// The finding types that need a fitting replay.
const REPLAYED_KINDS: [&str; 6] = [
    "late_rank",
    "exposed_communication",
    "launch_bound",
    "synchronising_calls",
    "host_device_copies",
    "slow_collectives",
];

fn window_words(model: &Model) -> String {
    match (model.step, model.steps, model.window_ns) {
        (Some(n), _, Some((a, b))) => format!("step {n} ({a}..{b} ns)"),
        (_, Some((first, last)), Some((a, b))) => format!("steps {first} to {last}, the steady state ({a}..{b} ns)"),
        (_, _, Some((a, b))) => format!("window {a}..{b} ns"),
        _ => "whole trace".to_string(),
    }
}

/// The findings as a table: one block per finding, most worth first, then what did not fire.
pub fn table(findings: &Findings) -> String {
    let mut out = String::new();
    let heading =
        format!("measured {}, replayed unchanged {}", human_ns(findings.measured_ns), human_ns(findings.replay_ns));
    push_wrapped(&mut out, "findings for ", "  ", &format!("{}: {heading}", findings.window));
    if !findings.fit.fits {
        let problems = findings.fit.problems.join("; ");
        push_wrapped(
            &mut out,
            "  ",
            "    ",
            &format!("the model does not fit this window, no replayed saving: {problems}"),
        );
    }
    if findings.findings.is_empty() {
        out.push_str("  nothing found above its threshold\n");
    }
    for (rank, f) in findings.findings.iter().enumerate() {
        let per_step = f.saving_per_step_ns.map(|ns| format!("{} per step, ", human_ns(ns))).unwrap_or_default();
        let bound = if f.basis == Basis::Bound { "up to " } else { "" };
        push_wrapped(&mut out, &format!("{}. [{}] ", rank + 1, f.kind), "   ", &f.title);
        let of = match (f.basis, f.saving_per_step_ns) {
            (Basis::Risk, _) => {
                out.push_str("   worth no stated time: a risk\n");
                ""
            }
            (Basis::Replay, _) => "the window; replayed",
            // A bound over the modelled steps (with a per-step figure) is a share of their window.
            (Basis::Bound, Some(_)) => "the window; bound",
            (Basis::Bound, None) => "the run; bound",
        };
        if f.basis != Basis::Risk {
            out.push_str(&format!(
                "   worth {bound}{per_step}{} per run ({:.1} % of {of})\n",
                human_ns(f.saving_per_run_ns),
                f.saving_pct,
            ));
        }
        push_wrapped(&mut out, "   how: ", "        ", &f.how);
        for line in &f.evidence {
            push_wrapped(&mut out, "   - ", "     ", line);
        }
    }
    if !findings.quiet.is_empty() {
        out.push_str("did not fire:\n");
        for q in &findings.quiet {
            push_wrapped(&mut out, &format!("  {:<25} ", q.kind), &" ".repeat(28), &q.why);
        }
    }
    out
}

/// The findings as the first section of the HTML report: a table of the findings, most worth first.
pub fn html(findings: &Findings) -> String {
    let mut out = format!(
        "<h2>Findings</h2>\n<p>{}: measured {}; each saving replays the dependency model with the cause removed \
         (or is a stated bound).</p>\n",
        escape(&findings.window),
        human_ns(findings.measured_ns)
    );
    if findings.findings.is_empty() {
        out.push_str("<p>Nothing found above its threshold.</p>\n");
        return out;
    }
    out.push_str(
        "<table>\n<tr><th>#</th><th class=\"l\">finding</th><th>per step</th><th>per run</th><th>share</th>\
         <th class=\"l\">how</th><th class=\"l\">evidence</th></tr>\n",
    );
    for (rank, f) in findings.findings.iter().enumerate() {
        let evidence: Vec<String> = f.evidence.iter().map(|e| escape(e)).collect();
        let bound = if f.basis == Basis::Bound { "≤ " } else { "" };
        let (per_run, share) = match f.basis {
            Basis::Risk => ("risk".to_string(), "–".to_string()),
            _ => (format!("{bound}{}", human_ns(f.saving_per_run_ns)), format!("{:.1} %", f.saving_pct)),
        };
        out.push_str(&format!(
            "<tr><td>{}</td><td class=\"l\"><b>{}</b><br>{}</td><td>{}</td><td>{per_run}</td><td>{share}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td></tr>\n",
            rank + 1,
            escape(f.kind),
            escape(&f.title),
            f.saving_per_step_ns.map_or("–".to_string(), human_ns),
            escape(&f.how),
            evidence.join("<br>")
        ));
    }
    out.push_str("</table>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The op names of up to `limit` operations, most frequent first, as `name ×count`.
pub fn top_names(names: impl IntoIterator<Item = String>, limit: usize) -> String {
    let mut counts: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for name in names {
        *counts.entry(name).or_default() += 1;
    }
    let mut list: Vec<(String, u64)> = counts.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    list.iter().take(limit).map(|(n, c)| format!("{n} ×{c}")).collect::<Vec<_>>().join(", ")
}

/// Up to `limit` names with the most time, as `name 1.2 ms`.
pub fn top_by_time(items: impl IntoIterator<Item = (String, i64)>, limit: usize) -> String {
    let mut totals: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for (name, ns) in items {
        *totals.entry(name).or_default() += ns;
    }
    let mut list: Vec<(String, i64)> = totals.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    list.iter().take(limit).map(|(n, ns)| format!("{n} {}", human_ns(*ns))).collect::<Vec<_>>().join(", ")
}
