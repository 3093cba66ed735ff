//! Warm-up dominating the run: the time before the modelled steady-state steps (start-up, compilation,
//! autotuning, the first steps) beyond what as many steady steps would take. No replay applies (the warm-up is not
//! in the model); the saving is the bound "the warm-up steps as fast as the steady ones, and no start-up", per run
//! only, taken on the rank where it is largest.

use rayon::prelude::*;
use shardscope_model::{DeviceIdx, Trace};

use crate::findings::rules::WarmupRule;
use crate::findings::{Basis, Context, Finding, Outcome, Quiet};
use crate::output::render::duration as human_ns;
use crate::report::RankReport;

/// The finding type's name.
pub(crate) const KIND: &str = "warmup";

/// One rank's warm-up: (rank, warm-up ns, steps in it, excess ns, run ns).
type RankWarmup = (u32, i64, usize, i64, i64);

/// Every rank's warm-up, in the report's rank order, on worker threads. Each trace's GPU extents per device are
/// found first, in one pass over its kernels and copies: a rank reading its trace's every kernel for its own device
/// read a file of eight ranks eight times (most of a second at 10 M kernels × 8 ranks, beside the replays).
fn rank_warmups(context: &Context, first_steady: usize) -> Vec<RankWarmup> {
    let extents: Vec<Vec<Option<(i64, i64)>>> = context.traces.par_iter().map(gpu_extents_ns).collect();
    (context.report.ranks.par_iter()).filter_map(|rank| rank_warmup(context, &extents, rank, first_steady)).collect()
}

/// `rank`'s warm-up, where it has steps up to `first_steady` and GPU work (`extents`: per trace, per device, the
/// GPU work's extent).
fn rank_warmup(
    context: &Context,
    extents: &[Vec<Option<(i64, i64)>>],
    rank: &RankReport,
    first_steady: usize,
) -> Option<RankWarmup> {
    let steps = rank.steps.as_ref()?;
    let &(steady_start, _) = steps.intervals.get(first_steady)?;
    let trace = context.traces.iter().position(|t| t.source.path == rank.source)?;
    let device = context.traces[trace].devices.iter().position(|d| d.ordinal == rank.device)?;
    let (first, last) = extents[trace].get(device).copied().flatten()?;
    let warmup_ns = (steady_start - first).max(0);
    let steps_before = steps.found_intervals.iter().filter(|s| s.0 < steady_start).count();
    let excess_ns = (warmup_ns - steps_before as i64 * steps.time.p50_ns).max(0);
    Some((rank.rank, warmup_ns, steps_before, excess_ns, (last - first).max(0)))
}

/// Per device of `trace`, the earliest start and the latest end of its kernels and copies (`None`: it has none), on
/// worker threads.
fn gpu_extents_ns(trace: &Trace) -> Vec<Option<(i64, i64)>> {
    let extent = |device: DeviceIdx, start_ns: i64, end_ns: i64| (device.0 as usize, (start_ns, end_ns));
    let kernels = trace.kernels.par_iter().with_min_len(1 << 16).map(|k| extent(k.device, k.start_ns, k.end_ns));
    let memops = trace.memops.par_iter().with_min_len(1 << 16).map(|m| extent(m.device, m.start_ns, m.end_ns));
    let widest = |a: (i64, i64), b: (i64, i64)| (a.0.min(b.0), a.1.max(b.1));
    crate::figures::workers::fold_per_owner(kernels.chain(memops), trace.devices.len(), widest)
}

/// True when on some rank a gap between capture windows ends before the first steady step starts.
fn steady_after_a_capture_gap(context: &Context, first_steady: usize) -> bool {
    context.report.ranks.iter().any(|rank| {
        let steady_start = rank.steps.as_ref().and_then(|s| s.intervals.get(first_steady)).map(|s| s.0);
        let trace = context.traces.iter().find(|t| t.source.path == rank.source);
        match (steady_start, trace) {
            (Some(start), Some(trace)) => crate::figures::capture_gaps::gaps(trace, None).iter().any(|g| g.1 <= start),
            _ => false,
        }
    })
}

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &WarmupRule) -> Outcome {
    let Some((first_steady, _)) = context.model.steps else {
        return Err(Quiet { kind: KIND, why: "not evaluated: no steady-state steps on every rank".into() });
    };
    if steady_after_a_capture_gap(context, first_steady) {
        let why = "not evaluated: the steady steps are in a later capture window; what came before them was not all \
                   recorded";
        return Err(Quiet { kind: KIND, why: why.into() });
    }
    let warmups = rank_warmups(context, first_steady);
    let Some(&(rank, warmup_ns, steps_before, excess_ns, run_ns)) = warmups.iter().max_by_key(|w| (w.3, w.0)) else {
        return Err(Quiet { kind: KIND, why: "not evaluated: no rank with steps and GPU work".into() });
    };
    let share = if run_ns > 0 { 100.0 * excess_ns as f64 / run_ns as f64 } else { 0.0 };
    if share < rule.min_share_of_run_pct {
        return Err(Quiet {
            kind: KIND,
            why: format!(
                "warm-up beyond steady steps is {} ({share:.1} % of the run on rank {rank}), below the {} % threshold",
                human_ns(excess_ns),
                rule.min_share_of_run_pct
            ),
        });
    }
    Ok(Finding {
        kind: KIND,
        title: format!("warm-up takes {share:.0} % of the run (start-up, compilation, slow first steps)"),
        evidence: vec![
            format!(
                "rank {rank}: {} from its first GPU work to the steady steps, {steps_before} step(s) in it; the run is {}",
                human_ns(warmup_ns),
                human_ns(run_ns)
            ),
            "the saving applies once per run (a longer run dilutes it)".into(),
        ],
        how: "bound: the warm-up less as many steps at the steady median step time".into(),
        basis: Basis::Bound,
        saving_ns: excess_ns,
        saving_pct: share,
        saving_per_step_ns: None,
        saving_per_run_ns: excess_ns,
    })
}
