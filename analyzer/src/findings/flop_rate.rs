//! Low FLOP rate: a prefill or decode phase whose achieved model FLOP/s is below a share of the GEMM peak of its
//! GPUs (its MFU, [`crate::report::mfu`]). Only with the model's shape and the tokens of one instance (`--model`,
//! `--tokens`) and a peak: the best GEMM throughput `bench` measured for the model's dtype (`--bench`), else the
//! datasheet figure `--model peak_tflops=…`. Without them the type is silent (listed as not evaluated).
//!
//! No replay applies (the model has no FLOPs), so the worth is a bound per instance of the phase: the time the
//! phase's GEMM kernels take on its busiest rank beyond what its dense model FLOPs (2 × weights per token, shared by
//! the phase's GPUs) would take at the threshold efficiency; times the instances of the phase in the run, summed
//! over the phases that fire. Attention's FLOPs are left out of that time, as they run in other kernels.

use crate::findings::rules::FlopRateRule;
use crate::findings::{Basis, Context, Finding, FlopInputs, Outcome, Quiet};
use crate::output::render::duration as human_ns;
use crate::report::Report;
use crate::report::mfu::{self, Peak, PhaseMfu};

pub(crate) const KIND: &str = "low_flop_rate";

/// The GEMM side of one phase: (rank, GEMM ns per instance, instances on that rank, the dense FLOPs' time per GPU
/// at the threshold efficiency, bound per instance).
type GemmBound = (u32, i64, u64, i64, i64);

/// The bound of `phase` on the rank whose GEMM kernels take the most time per instance.
fn gemm_bound(report: &Report, inputs: &FlopInputs, phase: &PhaseMfu, peak: &Peak, min_mfu_pct: f64) -> GemmBound {
    let dense_flops = phase.tokens_per_instance * 2.0 * inputs.shape.weights().unwrap_or(0.0);
    let per_gpu_flops = dense_flops / f64::from(phase.gpus.max(1));
    let at_threshold_ns = (per_gpu_flops / (min_mfu_pct / 100.0 * peak.tflops * 1e12) * 1e9).round() as i64;
    let busiest = report
        .ranks
        .iter()
        .filter_map(|rank| {
            let figures = &rank.phases.iter().find(|p| p.name == phase.phase)?.figures;
            let count = figures.instances.as_ref().map_or(0, |d| d.count);
            let gemm_ns = figures.categories.get("gemm").copied().unwrap_or(0);
            (count > 0).then(|| (rank.rank, gemm_ns / count as i64, count))
        })
        .max_by_key(|&(rank, per_instance, _)| (per_instance, std::cmp::Reverse(rank)));
    let (rank, gemm_per_instance_ns, count) = busiest.unwrap_or((0, 0, 0));
    (rank, gemm_per_instance_ns, count, at_threshold_ns, (gemm_per_instance_ns - at_threshold_ns).max(0))
}

/// The peak: measured by bench for the dtype, else the datasheet figure of `--model`.
fn peak(context: &Context, inputs: &FlopInputs) -> Option<Peak> {
    let dtype = inputs.shape.dtype();
    let measured = context.bench.and_then(|b| mfu::measured_gemm_peak(b.results(), dtype, &b.source));
    measured.or_else(|| {
        let source = "--model peak_tflops (datasheet)".to_string();
        inputs.shape.peak_tflops.map(|tflops| Peak { tflops, kind: "datasheet", source })
    })
}

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &FlopRateRule) -> Outcome {
    let quiet = |why: String| Err(Quiet { kind: KIND, why });
    let Some(inputs) = context.flops else {
        return quiet("not evaluated: needs the model's shape and tokens (--model, --tokens)".into());
    };
    let Some(peak) = peak(context, inputs) else {
        return quiet(format!(
            "not evaluated: no GEMM peak (--bench with a {} GEMM, or --model peak_tflops=…)",
            inputs.shape.dtype()
        ));
    };
    let phases = mfu::phase_mfu(context.report, inputs.shape, inputs.tokens, Some(&peak), &inputs.instance_p50_ns);
    if phases.is_empty() {
        return quiet("not evaluated: no prefill or decode phase with instances (the tokens describe those)".into());
    }
    let (mut evidence, mut low, mut others) = (Vec::new(), Vec::new(), Vec::new());
    let mut saving_per_run_ns = 0i64;
    for phase in &phases {
        let Some(pct) = phase.mfu_pct else {
            others.push(format!("{}: {}", phase.phase, phase.inconsistent.clone().unwrap_or_default()));
            continue;
        };
        if pct >= rule.min_mfu_pct {
            others.push(format!("{} at {pct:.1} %", phase.phase));
            continue;
        }
        let (rank, gemm_ns, count, at_threshold_ns, bound_ns) =
            gemm_bound(context.report, inputs, phase, &peak, rule.min_mfu_pct);
        evidence.push(format!(
            "{}: {:.0} tokens per instance, {:.3e} FLOPs in {} (slowest rank's median) on {} GPU(s): {:.1} TFLOP/s, \
             {pct:.1} % of {} × {:.1} TFLOP/s",
            phase.phase,
            phase.tokens_per_instance,
            phase.flops_per_instance,
            human_ns(phase.instance_p50_ns),
            phase.gpus,
            phase.achieved_tflops,
            phase.gpus,
            peak.tflops
        ));
        evidence.push(format!(
            "{}: rank {rank}'s GEMM kernels take {} per instance ({count} instances); its dense FLOPs need {} per GPU \
             at {} % of the peak: up to {} per instance",
            phase.phase,
            human_ns(gemm_ns),
            human_ns(at_threshold_ns),
            rule.min_mfu_pct,
            human_ns(bound_ns)
        ));
        saving_per_run_ns = saving_per_run_ns.saturating_add(bound_ns.saturating_mul(count as i64));
        low.push(format!("{} {pct:.1} %", phase.phase));
    }
    if low.is_empty() {
        return quiet(format!(
            "every phase at or above {} % of the GEMM peak: {}",
            rule.min_mfu_pct,
            others.join(", ")
        ));
    }
    if saving_per_run_ns <= 0 {
        return quiet(format!(
            "{} below {} % of the GEMM peak, but the GEMM kernels already run at that pace: the time is outside the \
             matrix products (nothing to win in them)",
            low.join(", "),
            rule.min_mfu_pct
        ));
    }
    evidence.push(format!("peak: {} ({})", peak.source, peak.kind));
    evidence.extend(others.into_iter().map(|o| format!("not firing: {o}")));
    let run_ns = context.report.ranks.iter().map(|r| r.figures.span_ns).max().unwrap_or(0);
    let title = format!("low FLOP rate against the GEMM peak: {} (below {} %)", low.join(", "), rule.min_mfu_pct);
    Ok(Finding {
        kind: KIND,
        title,
        evidence,
        how: format!(
            "bound: per instance, the GEMM kernels' time beyond the phase's dense model FLOPs at {} % of the peak, \
             times the instances in the run",
            rule.min_mfu_pct
        ),
        basis: Basis::Bound,
        saving_ns: saving_per_run_ns,
        saving_pct: if run_ns > 0 { 100.0 * saving_per_run_ns as f64 / run_ns as f64 } else { 0.0 },
        saving_per_step_ns: context.run_steps.filter(|&n| n > 0).map(|n| saving_per_run_ns / n as i64),
        saving_per_run_ns,
    })
}
