//! What-if: replay the dependency model of [`crate::dependency::graph`] with changed own times and compare the simulated
//! time of the window (last GPU end minus window start) with the measured one.
//!
//! Scenarios:
//! - *no straggler*: every operation takes the typical own time of the same operation instance across ranks (the
//!   same kind and name, the same occurrence on its rank, for calls on the same thread ordinal): the nearest-rank
//!   median (of two ranks, the smaller),
//!   for its duration and for the delay before it (host gaps included). A matched collective keeps its own
//!   transfer time; its wait is not an own time, so it shrinks by itself once the ranks arrive together.
//!   Operations without a peer instance keep their own times (counted).
//! - *communication overlapped*: communication kernels take no time and nothing waits at a collective's barrier.
//! - *communication at peak* (`--comm-at-peak BENCH.json`): every matched collective whose type, rank count and
//!   message size are known transfers in the time the machine's measured bus bandwidth for that size allows
//!   (`bytes × bus factor / busbw`, busbw interpolated over `bench`'s size sweep); the others keep their own.
//! - `--scale CATEGORY=F`: durations of that op category (`gemm`, `comm` for all communication, `host`, ...)
//!   times F; `--scale rankN=F`: rank N's operations take F times their typical (median across ranks) own times,
//!   so `rank3=1.0` removes rank 3's straggling and `rank3=1.2` makes it 20 % slower than typical.
//!
//! Slowdown, after the definitions of "Understanding Stragglers in Large Model Training Using What-if Analysis"
//! (OSDI 2025): `S = measured / ideal`, with ideal the no-straggler replay. Per op category t, `S_t = measured /
//! T_t` where `T_t` replays with only category t idealised; per rank w likewise (`S_w`). `removed_pct` is the share
//! of the slowdown (`measured − ideal`) that idealising only t (or w) removes.

use std::sync::atomic::{AtomicU32, Ordering};

use rayon::prelude::*;
use serde::Serialize;

use crate::dependency::critical_path::{Model, model_lines};
use crate::dependency::graph::{Graph, Op, end_vertex, start_vertex};
use crate::figures::bench_peaks::BenchPeaks;
use crate::figures::collectives::bus_factor;
use crate::output::render::{duration as human_ns, push_wrapped};

/// What a `--scale` rule applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum ScaleTarget {
    /// An op category (`comm` / `communication`: every `comm.*` category).
    Category(String),
    /// A rank number: its operations relative to their typical own times.
    Rank(u32),
}

/// One `--scale KEY=FACTOR` rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleRule {
    /// What it applies to.
    pub target: ScaleTarget,
    /// The factor.
    pub factor: f64,
}

/// Why a `--scale` rule cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScaleError {
    /// No `=` in the rule.
    #[error("--scale {0}: expected KEY=FACTOR")]
    NotKeyFactor(String),
    /// The factor is not a number.
    #[error("--scale {text}: factor: {error}")]
    Factor {
        /// The rule as given.
        text: String,
        /// Why the factor is not a number.
        error: std::num::ParseFloatError,
    },
    /// The factor is negative or not finite.
    #[error("--scale {0}: the factor must be a finite number ≥ 0")]
    FactorOutOfRange(String),
    /// Nothing before the `=`.
    #[error("--scale {0}: empty key")]
    EmptyKey(String),
    /// No operation of the category in the model.
    #[error("--scale {key}={factor}: no operation of category '{key}' in the window (present: {present}, or rankN)")]
    NoSuchCategory {
        /// The category.
        key: String,
        /// The rule's factor.
        factor: f64,
        /// The categories the model has, comma-separated.
        present: String,
    },
    /// No such rank in the model.
    #[error("--scale rank{rank}: no rank {rank} (ranks: {ranks})")]
    NoSuchRank {
        /// The rank.
        rank: u32,
        /// The ranks the model has, comma-separated.
        ranks: String,
    },
}

/// Parses `gemm=0.8` or `rank1=1.0`.
pub fn parse_scale(text: &str) -> Result<ScaleRule, ScaleError> {
    let (key, factor) = text.split_once('=').ok_or_else(|| ScaleError::NotKeyFactor(text.to_string()))?;
    let factor: f64 = factor.trim().parse().map_err(|error| ScaleError::Factor { text: text.to_string(), error })?;
    if !factor.is_finite() || factor < 0.0 {
        return Err(ScaleError::FactorOutOfRange(text.to_string()));
    }
    let key = key.trim();
    let target = match key.strip_prefix("rank").map(str::parse::<u32>) {
        Some(Ok(rank)) => ScaleTarget::Rank(rank),
        _ if key.is_empty() => return Err(ScaleError::EmptyKey(text.to_string())),
        _ => ScaleTarget::Category(key.to_string()),
    };
    Ok(ScaleRule { target, factor })
}

/// A scenario: the changes to replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scenario {
    /// Every operation at its typical own time.
    pub no_straggler: bool,
    /// Communication costs nothing.
    pub comm_overlapped: bool,
    /// Scale rules, applied after the above.
    pub scales: Vec<ScaleRule>,
    /// Matched collectives at the measured bus bandwidth (applied after the scale rules).
    pub comm_at_peak: Option<PeakTransfers>,
}

/// The transfer time of each collective instance of a model at the machine's measured bus bandwidth for its
/// type, rank count and size.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeakTransfers {
    /// The `bench` results file.
    pub source: String,
    /// Per barrier of the model (collective instance): the transfer time at the measured bus bandwidth, ns
    /// (`None`: no size, or no measurement of that type and rank count).
    pub per_barrier_ns: Vec<Option<i64>>,
}

/// The transfer times of `model`'s collective instances at the bus bandwidth `bench` measured for their size.
pub fn peak_transfers(model: &Model, bench: &BenchPeaks) -> PeakTransfers {
    let graph = &model.graph;
    let first_barrier = 2 * graph.ops.len() as u32;
    let barriers = graph.measured_ns().len() as u32 - first_barrier;
    let per_barrier_ns = (first_barrier..first_barrier + barriers)
        .map(|vertex| {
            let instance = &model.matching.instances[graph.barrier_instance(vertex)?];
            let bytes = instance.bytes?;
            let busbw_gbps = bench.at_size(instance.op, instance.nranks, bytes).filter(|b| *b > 0.0)?;
            // GB/s is bytes per ns.
            Some((bytes as f64 * bus_factor(instance.op, instance.nranks) / busbw_gbps).round() as i64)
        })
        .collect();
    PeakTransfers { source: bench.source.clone(), per_barrier_ns }
}

impl Scenario {
    /// Words for the report.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.no_straggler {
            out.push("no straggler (typical own times)".into());
        }
        if self.comm_overlapped {
            out.push("communication overlapped (costs nothing)".into());
        }
        for rule in &self.scales {
            out.push(match &rule.target {
                ScaleTarget::Category(c) => format!("{c} durations × {}", rule.factor),
                ScaleTarget::Rank(r) => format!("rank {r} at {} × typical", rule.factor),
            });
        }
        if let Some(peak) = &self.comm_at_peak {
            out.push(format!("collectives at the bus bandwidth measured for their size ({})", peak.source));
        }
        out
    }
}

/// Typical own times per operation instance: per instance the median across its members ([`typical_of`]). The
/// replays of one model share it (the findings replay a rank at typical times several times).
pub struct Typical {
    /// By instance. The replays read an instance's figures together, out of order (its members lie on every
    /// rank): side by side they are one cache miss, not two.
    of_instance: Vec<TypicalOwn>,
}

/// One instance's typical own times and how many operations it has.
#[derive(Clone, Copy, Default)]
struct TypicalOwn {
    start_ns: i64,
    end_ns: i64,
    members: u32,
}

/// Nearest-rank median: the smallest value with at least half of the values at or below it.
fn lower_median(values: &mut [i64]) -> i64 {
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

/// The typical own times of `graph`'s instances. The operations are grouped by instance by counting (one pass to
/// count, one to place, both on worker threads), not by sorting them: a median does not depend on the order of its
/// values, nor on the order the threads placed them in. The medians are taken on worker threads, a run of instances
/// each (the members of an instance lie on every rank, so their own times are read out of order: on one thread that
/// was most of a second at 10 M kernels).
pub fn typical_of(graph: &Graph) -> Typical {
    let n = graph.instance_count();
    let members = || graph.ops.par_iter().with_min_len(OPS_PER_TASK).enumerate().map(|(o, op)| (op.instance, o as u32));
    let (offsets, by_instance) = crate::dependency::graph::bucketed(n, members);
    let mut typical = Typical { of_instance: vec![TypicalOwn::default(); n] };
    typical.of_instance.par_chunks_mut(INSTANCES_PER_RUN).enumerate().for_each(|(run, typical_owns)| {
        let first = run * INSTANCES_PER_RUN;
        let mut medians = Medians::default();
        for (i, typical_own) in typical_owns.iter_mut().enumerate() {
            let instance = first + i;
            let of_instance = &by_instance[offsets[instance] as usize..offsets[instance + 1] as usize];
            if let Some((start_ns, end_ns)) = medians.of(graph.own_ns(), of_instance) {
                *typical_own = TypicalOwn { start_ns, end_ns, members: of_instance.len() as u32 };
            }
        }
    });
    typical
}

/// Operations a worker takes at least when [`typical_of`] groups them by instance.
const OPS_PER_TASK: usize = 1 << 14;

/// Instances per run of [`typical_of`]'s medians on one worker.
const INSTANCES_PER_RUN: usize = 1 << 12;

/// Room for one instance's own times at a time, reused from instance to instance.
#[derive(Default)]
struct Medians {
    starts: Vec<i64>,
    ends: Vec<i64>,
}

impl Medians {
    /// The lower medians of the start and end own times of the operations `ops` (`None` when there are none).
    fn of(&mut self, own: &[i64], ops: &[AtomicU32]) -> Option<(i64, i64)> {
        if ops.is_empty() {
            return None;
        }
        let ops = ops.iter().map(|o| o.load(Ordering::Relaxed));
        self.starts.clear();
        self.ends.clear();
        self.starts.extend(ops.clone().map(|o| own[start_vertex(o) as usize]));
        self.ends.extend(ops.map(|o| own[end_vertex(o) as usize]));
        Some((lower_median(&mut self.starts), lower_median(&mut self.ends)))
    }
}

fn category_matches(graph: &Graph, op: &Op, key: &str) -> bool {
    let name = &graph.categories[op.category as usize];
    let key = if key == "communication" { "comm" } else { key };
    name == key || (name.starts_with(key) && name[key.len()..].starts_with('.'))
}

/// Own times with the operations `idealise` selects at `factor` × their typical own times.
fn own_with(graph: &Graph, typical: &Typical, base: &[i64], idealise: impl Fn(&Op) -> Option<f64>) -> (Vec<i64>, u64) {
    let mut own = base.to_vec();
    let mut without_peer = 0;
    for (op_id, op) in graph.ops.iter().enumerate() {
        let Some(factor) = idealise(op) else { continue };
        if typical.of_instance[op.instance as usize].members < 2 {
            without_peer += 1;
        }
        for vertex in [start_vertex(op_id as u32), end_vertex(op_id as u32)] {
            own[vertex as usize] = idealised_own_ns(typical, base, op, vertex as usize, factor);
        }
    }
    (own, without_peer)
}

/// The own time of `vertex`, a vertex of `op`, idealised with `factor`: the typical own time of its instance across
/// ranks, scaled; an operation without a peer, and a matched collective's transfer (its wait is not an own time),
/// keep `base`'s, scaled.
fn idealised_own_ns(typical: &Typical, base: &[i64], op: &Op, vertex: usize, factor: f64) -> i64 {
    let typical = typical.of_instance[op.instance as usize];
    let is_start = vertex.is_multiple_of(2);
    let own = if typical.members < 2 || (!is_start && op.matched) {
        base[vertex]
    } else if is_start {
        typical.start_ns
    } else {
        typical.end_ns
    };
    scale(own, factor)
}

/// The own time of each vertex in the no-straggler replay, one vertex at a time: what [`own_with`] gives with every
/// operation idealised at factor 1, for a replay that keeps no list of own times ([`Graph::replayed_last_end`]).
fn no_straggler_own_of<'a>(graph: &'a Graph, typical: &'a Typical) -> impl Fn(u32) -> i64 + 'a {
    let base = graph.own_ns();
    let op_vertices = 2 * graph.ops.len();
    move |vertex: u32| {
        let v = vertex as usize;
        if v >= op_vertices { base[v] } else { idealised_own_ns(typical, base, &graph.ops[v / 2], v, 1.0) }
    }
}

/// Which own times of an operation [`typical_own_ns`] replaces by the typical ones of its instance across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OwnParts {
    /// The delay before it starts (a host gap, a GPU delay).
    pub delay: bool,
    /// Its duration (a matched collective keeps its own transfer either way).
    pub duration: bool,
}

/// The measured own times with the parts `select` names of each operation at the typical own times of its
/// instance (as the no-straggler scenario: operations without a peer keep theirs).
pub fn typical_own_ns(graph: &Graph, select: impl Fn(&Op) -> OwnParts) -> Vec<i64> {
    typical_own_ns_with(graph, &typical_of(graph), select)
}

/// [`typical_own_ns`] with the typical own times computed already.
pub fn typical_own_ns_with(graph: &Graph, typical: &Typical, select: impl Fn(&Op) -> OwnParts) -> Vec<i64> {
    let own_of = typical_own_of(graph, typical, select);
    (0..graph.vertex_count() as u32).map(own_of).collect()
}

/// The own time of each vertex as [`typical_own_ns_with`] gives it, one vertex at a time (for a replay that keeps
/// no list of own times: [`Graph::replayed_last_end`]).
pub fn typical_own_of<'a>(
    graph: &'a Graph,
    typical: &'a Typical,
    select: impl Fn(&Op) -> OwnParts + 'a,
) -> impl Fn(u32) -> i64 + 'a {
    let own_in_lanes = typical_own_in_lanes(graph, typical, move |op| [select(op)]);
    move |vertex: u32| own_in_lanes(vertex)[0]
}

/// [`typical_own_of`] of `LANES` replays at once (for [`Graph::replayed_last_ends`]): replay `k` replaces the
/// parts `select(op)[k]` of each operation.
pub fn typical_own_in_lanes<'a, const LANES: usize>(
    graph: &'a Graph,
    typical: &'a Typical,
    select: impl Fn(&Op) -> [OwnParts; LANES] + 'a,
) -> impl Fn(u32) -> [i64; LANES] + 'a {
    let base = graph.own_ns();
    let op_vertices = 2 * graph.ops.len();
    move |vertex: u32| {
        let v = vertex as usize;
        if v >= op_vertices {
            return [base[v]; LANES];
        }
        let op = &graph.ops[v / 2];
        // The parts first: most replays change one rank's operations, and the others' own times then need no
        // look-up in the typical times (read by instance, out of order).
        let parts = select(op);
        if parts.iter().all(|p| !p.delay && !p.duration) {
            return [base[v]; LANES];
        }
        let typical = typical.of_instance[op.instance as usize];
        if typical.members < 2 {
            return [base[v]; LANES];
        }
        let is_start = v.is_multiple_of(2);
        parts.map(|parts| {
            if is_start && parts.delay {
                typical.start_ns
            } else if !is_start && parts.duration && !op.matched {
                typical.end_ns
            } else {
                base[v]
            }
        })
    }
}

fn scale(ns: i64, factor: f64) -> i64 {
    (ns as f64 * factor).round() as i64
}

/// Simulated time of one variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// The op category or `rank N` idealised alone.
    pub name: String,
    /// Simulated time with only it idealised.
    pub simulated_ns: i64,
    /// measured / simulated.
    pub slowdown: f64,
    /// Share of (measured − ideal) removed, percent.
    pub removed_pct: f64,
}

/// A rank's collective waiting, measured and in the scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankWait {
    /// The rank.
    pub rank: u32,
    /// Summed wait of its matched collectives, measured.
    pub measured_wait_ns: i64,
    /// The same in the scenario.
    pub simulated_wait_ns: i64,
}

/// How far the replayed model may miss the measured time and still be said to fit it, percent.
pub const REPLAY_TOLERANCE_PCT: f64 = 1.0;

/// Ranks whose first operations in the window start further apart than this share of the measured time are said to
/// start staggered, percent.
const STAGGER_PCT: f64 = 5.0;

/// Whether the model fits the measured run. It fits when the graph replayed with its measured own times gives the
/// measured time (within [`REPLAY_TOLERANCE_PCT`]), the no-straggler ideal is not slower than measured, and, when
/// the ideal saves a fifth of the time or more, some single rank explains at least half of it; a replay that cannot reproduce the run, or an ideal that
/// describes no run these ranks could have had, has no speed-up to sell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// True when both checks pass.
    pub fits: bool,
    /// (replayed unchanged − measured) / measured, percent.
    pub replay_error_pct: f64,
    /// The tolerance of the replay check, percent.
    pub tolerance_pct: f64,
    /// The largest gap between the ranks' first operation starts in the window, ns.
    pub start_stagger_ns: i64,
    /// Why the model does not fit, in sentences (empty when it fits).
    pub problems: Vec<String>,
}

/// Below this share of the time the ideal saves removed by the best single rank, the saving belongs to no rank.
const ONE_RANK_EXPLAINS_PCT: f64 = 50.0;

/// The single-rank check applies from this share of the measured time saved on: a small gain the ranks' noise can
/// give is shown, a large one must have a rank behind it.
const LARGE_SAVING_PCT: f64 = 20.0;

/// The third fit check: a slowdown that idealising any one rank removes little of. The ideal then combines the
/// fastest operations of different ranks (of two ranks the typical time is the smaller): where the ranks are slow at
/// different operations, typically because a wait the trace does not record shows as a host gap on the waiting
/// rank, the ideal is a run none of them came near, and S would measure that, not a straggler.
fn no_rank_explains(by_rank: &[Attribution], measured_ns: i64, ideal_ns: i64) -> Option<String> {
    let best = by_rank.iter().map(|a| a.removed_pct).fold(f64::NEG_INFINITY, f64::max);
    let saved_pct = if measured_ns > 0 { 100.0 * (measured_ns - ideal_ns) as f64 / measured_ns as f64 } else { 0.0 };
    (by_rank.len() > 1 && saved_pct >= LARGE_SAVING_PCT && best < ONE_RANK_EXPLAINS_PCT).then(|| {
        format!(
            "no single rank explains the {} the ideal saves (idealising the best one removes \
             {best:.1} % of it): the ranks are slow at different operations (a wait the trace does not record shows \
             as a host gap on the waiting rank), and the ideal, the typical of the ranks at each operation (of two, \
             the faster), is a run none of them came near",
            human_ns(measured_ns - ideal_ns)
        )
    })
}

/// The fit checks of [`Fit`], with the likely causes named.
fn fit(graph: &Graph, measured_ns: i64, replay_ns: i64, ideal_ns: i64) -> Fit {
    let replay_error_pct =
        if measured_ns > 0 { 100.0 * replay_ns.saturating_sub(measured_ns) as f64 / measured_ns as f64 } else { 0.0 };
    // Each rank's first operation start in the window: far apart, the ranks did not start the window together.
    // Folded on worker threads (tens of millions of operations: a tenth of a second on one thread).
    let op_starts = graph.ops.par_iter().with_min_len(1 << 14).map(|op| (op.rank_index as usize, op.start_ns));
    let first_start = crate::figures::workers::fold_per_owner(op_starts, graph.ranks.len(), i64::min);
    let starts: Vec<i64> = first_start.into_iter().flatten().collect();
    let start_stagger_ns = starts.iter().max().zip(starts.iter().min()).map_or(0, |(a, b)| a - b);
    let staggered = measured_ns > 0 && 100.0 * start_stagger_ns as f64 / measured_ns as f64 > STAGGER_PCT;
    let stagger_note = || {
        format!(
            "the ranks start the window {} apart (staggered step starts), so one rank's delay before an operation \
             and the typical delay across ranks count from different points",
            human_ns(start_stagger_ns)
        )
    };
    let mut problems = Vec::new();
    if replay_error_pct.abs() > REPLAY_TOLERANCE_PCT {
        let mut text = format!(
            "replayed unchanged the model gives {}, not the measured {} ({replay_error_pct:+.1} %, more than the \
             {REPLAY_TOLERANCE_PCT} % allowed)",
            human_ns(replay_ns),
            human_ns(measured_ns)
        );
        if graph.stats.inconsistent_vertices > 0 {
            text.push_str(&format!(
                ": {} recorded time(s) contradict the modelled dependencies",
                graph.stats.inconsistent_vertices
            ));
        }
        problems.push(text);
    }
    if ideal_ns > measured_ns {
        let mut text = format!(
            "the no-straggler ideal ({}) is slower than measured ({}): the typical own times do not describe a run \
             these ranks could have had",
            human_ns(ideal_ns),
            human_ns(measured_ns)
        );
        if staggered {
            text.push_str(&format!("; {}", stagger_note()));
        }
        problems.push(text);
    } else if !problems.is_empty() && staggered {
        problems.push(stagger_note());
    }
    Fit { fits: problems.is_empty(), replay_error_pct, tolerance_pct: REPLAY_TOLERANCE_PCT, start_stagger_ns, problems }
}

/// The first two fit checks of [`what_if`] on `model` (the replay reproduces the measured time; the no-straggler
/// ideal is not slower than measured), without the third, which is about attributing the slowdown S to one rank:
/// what findings check before they give any replayed saving.
pub fn model_fit(model: &Model) -> Fit {
    let typical = typical_of(&model.graph);
    model_fit_of(model, unchanged_last_end(&model.graph), no_straggler_last_end(model, &typical))
}

/// [`model_fit`] from the last ends (operation, time) of the unchanged replay ([`unchanged_last_end`]) and of the
/// no-straggler replay ([`no_straggler_last_end`]), found already.
pub fn model_fit_of(model: &Model, replay_end: Option<(u32, i64)>, no_straggler_end: Option<(u32, i64)>) -> Fit {
    let graph = &model.graph;
    let measured_ns = graph.span_ns(graph.last_end(graph.measured_ns()));
    fit(graph, measured_ns, graph.span_ns(replay_end), graph.span_ns(no_straggler_end))
}

/// The last end (operation, time) of the model replayed unchanged (the measured own times), without keeping the
/// replay's times: where the replay is known to give every measured time, the measured last end, with no replay
/// (one walk of every vertex on one thread, a third of a second at 10 M kernels × 8 ranks).
pub fn unchanged_last_end(graph: &Graph) -> Option<(u32, i64)> {
    if graph.replays_measured() {
        return graph.last_end(graph.measured_ns());
    }
    let own = graph.own_ns();
    graph.replayed_last_end(|vertex| own[vertex as usize], &[])
}

/// The last end (operation, time) of the no-straggler replay (the ideal of the slowdown `S`; `typical` from
/// [`typical_of`]), without keeping its times or its own times: the same end as [`no_straggler_times`] gives.
pub fn no_straggler_last_end(model: &Model, typical: &Typical) -> Option<(u32, i64)> {
    model.graph.replayed_last_end(no_straggler_own_of(&model.graph, typical), &[])
}

/// The what-if report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// The input files.
    pub inputs: Vec<String>,
    /// The analysed window (`null`: the whole trace).
    pub window_ns: Option<(i64, i64)>,
    /// The step, when the window is one.
    pub step: Option<usize>,
    /// The first and last step, when the window is the steady-state steps (the default).
    pub steps: Option<(usize, usize)>,
    /// What the steady-state window leaves out of the trace.
    pub excluded: Vec<String>,
    /// Whether the model reproduces the measured window; without it, no speed-up or slowdown is given.
    pub fit: Fit,
    /// Last GPU end minus window start, as recorded.
    pub measured_ns: i64,
    /// The model replayed unchanged (equals `measured_ns` unless `model.inconsistent_vertices` > 0).
    pub replay_ns: i64,
    /// The changes replayed.
    pub scenario: Vec<String>,
    /// Last GPU end minus window start in the scenario.
    pub simulated_ns: i64,
    /// measured / simulated (`null` when the model does not fit).
    pub speedup: Option<f64>,
    /// Per rank: collective wait, measured and in the scenario.
    pub rank_waits: Vec<RankWait>,
    /// The no-straggler replay.
    pub ideal_ns: i64,
    /// S = measured / ideal (`null` when the model does not fit).
    pub slowdown: Option<f64>,
    /// Per op category: only it idealised (empty when the model does not fit).
    pub by_category: Vec<Attribution>,
    /// Per rank: only it idealised (empty when the model does not fit).
    pub by_rank: Vec<Attribution>,
    /// Operations without a peer instance on another rank (keep their own times when idealised).
    pub ops_without_peer: u64,
    /// With communication at peak: matched collective operations without a bus bandwidth for their size (no size
    /// recorded, or no measurement of their type and rank count), which keep their own transfer.
    pub collectives_without_peak: u64,
    /// What was modelled and what could not be.
    pub model: crate::dependency::graph::ModelStats,
    /// Notes on the inputs.
    pub notes: Vec<String>,
}

/// Checks the scale rules against the model: a category or rank nothing in the window has is an error.
pub fn check_scales(graph: &Graph, scales: &[ScaleRule]) -> Result<(), ScaleError> {
    for rule in scales {
        match &rule.target {
            ScaleTarget::Category(key) => {
                if !graph.ops.iter().any(|o| category_matches(graph, o, key)) {
                    let mut present: Vec<&str> =
                        graph.ops.iter().map(|o| graph.categories[o.category as usize].as_str()).collect();
                    present.sort_unstable();
                    present.dedup();
                    return Err(ScaleError::NoSuchCategory {
                        key: key.clone(),
                        factor: rule.factor,
                        present: present.join(", "),
                    });
                }
            }
            ScaleTarget::Rank(rank) => {
                if !graph.ranks.iter().any(|r| r.rank == *rank) {
                    let ranks: Vec<String> = graph.ranks.iter().map(|r| r.rank.to_string()).collect();
                    return Err(ScaleError::NoSuchRank { rank: *rank, ranks: ranks.join(", ") });
                }
            }
        }
    }
    Ok(())
}

/// Every vertex's time in the no-straggler replay (the ideal of the slowdown `S`).
pub fn no_straggler_times(model: &Model) -> Vec<i64> {
    let graph = &model.graph;
    let (own, _) = own_with(graph, &typical_of(graph), graph.own_ns(), |_| Some(1.0));
    graph.simulate(&own, false)
}

/// Runs `scenario` on `model`, with the slowdown decomposition.
pub fn what_if(model: &Model, scenario: &Scenario) -> WhatIf {
    let graph = &model.graph;
    let base = graph.own_ns();
    let typical = typical_of(graph);
    let span = |times: &[i64]| graph.span_ns(graph.last_end(times));
    let measured_ns = span(graph.measured_ns());
    let replay_ns = span(&graph.simulate(base, false));

    // The scenario's own times.
    let rank_of = |op: &Op| graph.ranks[op.rank_index as usize].rank;
    let (mut own, mut without_peer) =
        if scenario.no_straggler { own_with(graph, &typical, base, |_| Some(1.0)) } else { (base.to_vec(), 0) };
    for rule in &scenario.scales {
        match &rule.target {
            ScaleTarget::Rank(rank) => {
                let (scaled, missing) =
                    own_with(graph, &typical, &own, |o| (rank_of(o) == *rank).then_some(rule.factor));
                own = scaled;
                without_peer = without_peer.max(missing);
            }
            ScaleTarget::Category(key) => {
                for (op_id, op) in graph.ops.iter().enumerate() {
                    if category_matches(graph, op, key) {
                        let e = end_vertex(op_id as u32) as usize;
                        own[e] = scale(own[e], rule.factor);
                    }
                }
            }
        }
    }
    let mut collectives_without_peak = 0;
    if let Some(peak) = &scenario.comm_at_peak {
        let first_barrier = 2 * graph.ops.len();
        for (op_id, op) in graph.ops.iter().enumerate() {
            if !op.matched {
                continue;
            }
            let at_peak = graph
                .barrier_of(op_id as u32)
                .and_then(|b| peak.per_barrier_ns.get((b as usize).checked_sub(first_barrier)?).copied().flatten());
            match at_peak {
                Some(ns) => own[end_vertex(op_id as u32) as usize] = ns,
                None => collectives_without_peak += 1,
            }
        }
    }
    if scenario.comm_overlapped {
        for (op_id, op) in graph.ops.iter().enumerate() {
            if op.comm {
                own[end_vertex(op_id as u32) as usize] = 0;
            }
        }
    }
    let times = graph.simulate(&own, scenario.comm_overlapped);
    let simulated_ns = span(&times);

    // Collective waits per rank: release − start, where release = end − own duration.
    let wait = |times: &[i64], own: &[i64], op_id: usize| -> i64 {
        let (s, e) = (start_vertex(op_id as u32) as usize, end_vertex(op_id as u32) as usize);
        times[e].saturating_sub(own[e]).saturating_sub(times[s]).max(0)
    };
    let mut rank_waits: Vec<RankWait> =
        graph.ranks.iter().map(|r| RankWait { rank: r.rank, measured_wait_ns: 0, simulated_wait_ns: 0 }).collect();
    for (op_id, op) in graph.ops.iter().enumerate() {
        if op.matched {
            let slot = &mut rank_waits[op.rank_index as usize];
            slot.measured_wait_ns = slot.measured_wait_ns.saturating_add(wait(graph.measured_ns(), base, op_id));
            slot.simulated_wait_ns = slot.simulated_wait_ns.saturating_add(wait(&times, &own, op_id));
        }
    }
    rank_waits.sort_by_key(|r| r.rank);

    // Slowdown and its decomposition.
    let (ideal_own, ideal_missing) = own_with(graph, &typical, base, |_| Some(1.0));
    let ideal_ns = span(&graph.simulate(&ideal_own, false));
    let attribution = |name: String, select: &dyn Fn(&Op) -> bool| -> Attribution {
        let (own, _) = own_with(graph, &typical, base, |o| select(o).then_some(1.0));
        let simulated_ns = span(&graph.simulate(&own, false));
        let excess = measured_ns.saturating_sub(ideal_ns);
        Attribution {
            name,
            simulated_ns,
            slowdown: ratio(measured_ns, simulated_ns),
            removed_pct: if excess != 0 {
                measured_ns.saturating_sub(simulated_ns) as f64 * 100.0 / excess as f64
            } else {
                0.0
            },
        }
    };
    let mut categories: Vec<u16> = graph.ops.iter().map(|o| o.category).collect();
    categories.sort_unstable();
    categories.dedup();
    let mut by_category: Vec<Attribution> = categories
        .iter()
        .map(|&c| attribution(graph.categories[c as usize].clone(), &|o: &Op| o.category == c))
        .collect();
    by_category.sort_by(|a, b| b.removed_pct.total_cmp(&a.removed_pct).then(a.name.cmp(&b.name)));
    let mut fit = fit(graph, measured_ns, replay_ns, ideal_ns);
    if !fit.fits {
        // Idealising a part of a model that does not fit says nothing either.
        by_category.clear();
    }
    let mut by_rank: Vec<Attribution> = graph
        .ranks
        .iter()
        .enumerate()
        .map(|(index, r)| attribution(format!("rank {}", r.rank), &|o: &Op| o.rank_index as usize == index))
        .collect();
    by_rank.sort_by(|a, b| b.removed_pct.total_cmp(&a.removed_pct).then(a.name.cmp(&b.name)));
    if let Some(problem) = fit.fits.then(|| no_rank_explains(&by_rank, measured_ns, ideal_ns)).flatten() {
        fit.problems.push(problem);
        fit.fits = false;
        by_category.clear();
    }
    if !fit.fits {
        by_rank.clear();
    }

    WhatIf {
        inputs: model.inputs.clone(),
        window_ns: model.window_ns,
        step: model.step,
        steps: model.steps,
        excluded: model.excluded.clone(),
        measured_ns,
        replay_ns,
        scenario: scenario.describe(),
        simulated_ns,
        speedup: fit.fits.then(|| ratio(measured_ns, simulated_ns)),
        rank_waits,
        ideal_ns,
        slowdown: fit.fits.then(|| ratio(measured_ns, ideal_ns)),
        fit,
        by_category,
        by_rank,
        ops_without_peer: without_peer.max(ideal_missing),
        collectives_without_peak,
        model: graph.stats.clone(),
        notes: model.notes.clone(),
    }
}

fn ratio(a: i64, b: i64) -> f64 {
    if b > 0 { a as f64 / b as f64 } else { 0.0 }
}

/// The report as a table.
pub fn table(report: &WhatIf) -> String {
    let mut out = String::new();
    let what = match (report.step, report.steps, report.window_ns) {
        (Some(n), _, Some((a, b))) => format!("step {n} ({a}..{b} ns)"),
        (_, Some((first, last)), Some((a, b))) => format!("steps {first} to {last}, the steady state ({a}..{b} ns)"),
        (_, _, Some((a, b))) => format!("window {a}..{b} ns"),
        _ => "whole trace".to_string(),
    };
    out.push_str(&format!("what-if for {what}\n"));
    for left_out in &report.excluded {
        push_wrapped(&mut out, "  left out: ", "    ", left_out);
    }
    out.push_str(&format!(
        "  measured {}   replayed unchanged {} ({:+.1} %)\n",
        human_ns(report.measured_ns),
        human_ns(report.replay_ns),
        report.fit.replay_error_pct
    ));
    if !report.fit.fits {
        out.push_str("the model does not fit this window, so it gives no speed-up or slowdown:\n");
        for problem in &report.fit.problems {
            push_wrapped(&mut out, "  - ", "    ", problem);
        }
        out.push_str("  (--step N models one step; --window START:END one stretch of the trace clock)\n");
        out.push_str(&format!(
            "  scenario: {}\n  simulated {} (not comparable with the measured time)\n",
            report.scenario.join(", "),
            human_ns(report.simulated_ns)
        ));
        out.push_str(&model_lines(&report.model, &report.notes));
        return out;
    }
    out.push_str(&format!(
        "  scenario: {}\n  simulated {}   ({:.3}× faster, {} saved)\n",
        report.scenario.join(", "),
        human_ns(report.simulated_ns),
        report.speedup.unwrap_or(0.0),
        human_ns(report.measured_ns.saturating_sub(report.simulated_ns))
    ));
    out.push_str("  collective wait per rank (measured -> scenario):\n");
    for w in &report.rank_waits {
        out.push_str(&format!(
            "    rank {:<4} {:>10} -> {:>10}\n",
            w.rank,
            human_ns(w.measured_wait_ns),
            human_ns(w.simulated_wait_ns)
        ));
    }
    out.push_str(&format!(
        "slowdown S = measured / ideal (no straggler) = {} / {} = {:.3}\n",
        human_ns(report.measured_ns),
        human_ns(report.ideal_ns),
        report.slowdown.unwrap_or(0.0)
    ));

    for (title, rows) in [("per op category", &report.by_category), ("per rank", &report.by_rank)] {
        out.push_str(&format!("  {title}, only it idealised:\n"));
        out.push_str(&format!("    {:<50} {:>10} {:>8} {:>9}\n", "", "simulated", "S", "removed"));
        for a in rows {
            out.push_str(&format!(
                "    {:<50} {:>10} {:>8.3} {:>8.1}%\n",
                a.name,
                human_ns(a.simulated_ns),
                a.slowdown,
                a.removed_pct
            ));
        }
    }
    if report.collectives_without_peak > 0 {
        out.push_str(&format!(
            "{} collective operations have no measured bus bandwidth for their size and keep their transfer\n",
            report.collectives_without_peak
        ));
    }
    if report.ops_without_peer > 0 {
        out.push_str(&format!(
            "{} operations have no peer instance on another rank and keep their own times when idealised\n",
            report.ops_without_peer
        ));
    }
    out.push_str(&model_lines(&report.model, &report.notes));
    out
}
