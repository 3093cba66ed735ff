//! Memory near capacity: a rank's highest GPU memory level over the whole trace against its GPU's total memory.
//! The level is the CUDA-level one (device memory allocated minus released, [`crate::figures::memory`]), or, for
//! a trace with only the framework's counters (Kineto), the bytes the allocator reserved from CUDA. Its worth is
//! not time: near the limit an allocation can fail (out of memory) and a caching allocator frees and retries first.
//! It is stated as a risk, with no saving, and ranked after every finding with a time.

use crate::findings::rules::MemoryRule;
use crate::findings::{Basis, Finding, Outcome, Quiet};
use crate::report::Report;
use shardscope_model::Trace;

pub(crate) const KIND: &str = "memory_near_capacity";

/// One rank's peak: (rank, GPU ordinal, peak bytes, when, total bytes, which level).
type RankPeak = (u32, u32, u64, i64, u64, &'static str);

fn total_memory_bytes(traces: &[Trace], report: &Report, rank: u32) -> Option<u64> {
    let r = report.ranks.iter().find(|r| r.rank == rank)?;
    let trace = traces.iter().find(|t| t.source.path == r.source)?;
    trace.devices.iter().find(|d| d.ordinal == r.device)?.memory_bytes.filter(|&b| b > 0)
}

fn rank_peaks(traces: &[Trace], report: &Report) -> Vec<RankPeak> {
    let mut out = Vec::new();
    for m in &report.memory {
        let peak = match (&m.cuda, &m.framework) {
            (Some(c), _) => (c.peak_bytes, c.peak_ns, "CUDA level"),
            (None, Some(f)) => (f.peak_reserved_bytes, f.peak_reserved_ns, "reserved by the allocator"),
            (None, None) => continue,
        };
        if let Some(total) = total_memory_bytes(traces, report, m.rank) {
            out.push((m.rank, m.device, peak.0, peak.1, total, peak.2));
        }
    }
    out
}

fn share_pct(peak: &RankPeak) -> f64 {
    100.0 * peak.2 as f64 / peak.4 as f64
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// See the module documentation.
pub fn evaluate(traces: &[Trace], report: &Report, rule: &MemoryRule) -> Outcome {
    if report.memory.is_empty() {
        let why = "not evaluated: the trace has no memory data (capture --trace memory, nsys \
                   --cuda-memory-usage=true, Kineto's profile_memory)";
        return Err(Quiet { kind: KIND, why: why.into() });
    }
    let peaks = rank_peaks(traces, report);
    let Some(top) = peaks.iter().max_by(|a, b| share_pct(a).total_cmp(&share_pct(b)).then(b.0.cmp(&a.0))) else {
        let why = "not evaluated: the trace records no GPU's total memory for the ranks with memory data";
        return Err(Quiet { kind: KIND, why: why.into() });
    };
    if share_pct(top) < rule.min_peak_share_pct {
        let why = format!(
            "the highest peak is {:.1} % of its GPU's memory (rank {}, {} of {}), below the {} % threshold",
            share_pct(top),
            top.0,
            gb(top.2),
            gb(top.4),
            rule.min_peak_share_pct
        );
        return Err(Quiet { kind: KIND, why });
    }
    let above: Vec<&RankPeak> = peaks.iter().filter(|p| share_pct(p) >= rule.min_peak_share_pct).collect();
    let evidence = above
        .iter()
        .map(|p| {
            format!(
                "rank {} (GPU {}): peak {} ({}, at {} ns) of {} total, {:.1} %",
                p.0,
                p.1,
                gb(p.2),
                p.5,
                p.3,
                gb(p.4),
                share_pct(p)
            )
        })
        .collect();
    Ok(Finding {
        kind: KIND,
        title: format!(
            "GPU memory peaks at {:.0} % of the GPU's total on {} rank(s): a risk of running out of memory",
            share_pct(top),
            above.len()
        ),
        evidence,
        how: "risk, not time: the rank's highest memory level over the whole trace against its GPU's total memory; \
              no saving is stated"
            .into(),
        basis: Basis::Risk,
        saving_ns: 0,
        saving_pct: 0.0,
        saving_per_step_ns: None,
        saving_per_run_ns: 0,
    })
}
