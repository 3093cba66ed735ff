//! Comparing runs of one workload at different scales (TP=1 vs TP=2, 4 vs 8 GPUs): per phase and op category,
//! the time one rank spends, how much faster each run is than the first, and the scaling efficiency.
//!
//! Definitions, for a run with `n` ranks compared with the first (baseline) run with `n₀` ranks:
//! - per-rank time of a category = the category's summed kernel time averaged over the run's ranks (ranks work
//!   in parallel, so this is what one rank, and so the step, pays);
//! - `speedup = baseline per-rank time ÷ this run's per-rank time`;
//! - `efficiency = speedup ÷ (n / n₀)`: 100 % when doubling the GPUs halves the time.
//!
//! Communication has no baseline on one GPU; its per-rank time, wait and transfer are given as they are.
//! The whole-run table ends with `step_time_p50`: the median step time (see [`crate::llm::steps`]) averaged over the
//! run's ranks.
//!
//! Throughput, only where the caller says how many tokens a run processed (a trace records no token counts):
//! `tokens/s = tokens ÷ the run's per-rank span` (the whole-run `span` row, in seconds); its speedup is this run's
//! tokens/s ÷ the baseline's, and its efficiency that speedup ÷ (n / n₀) as above.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::{Figures, PHASES_INFERRED, Report};

/// One run's figures for one phase (or the whole run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPhase {
    /// Ranks with figures for this phase.
    pub ranks: u32,
    /// Mean over ranks of the phase's GPU span.
    pub span_ns: f64,
    /// Mean over ranks of GPU busy time.
    pub gpu_busy_ns: f64,
    /// Mean over ranks of communication time (union).
    pub comm_ns: f64,
    /// Mean over ranks of the time collectives waited for the last rank.
    pub comm_wait_ns: f64,
    /// Mean over ranks of the time collectives moved data.
    pub comm_transfer_ns: f64,
    /// Mean over ranks of summed time per op category.
    pub categories: BTreeMap<String, f64>,
}

/// One row of the comparison: a category (or a whole-phase figure) across runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Category, or `span`, `gpu_busy`, `comm_wait`, `comm_transfer`.
    pub what: String,
    /// Per-rank time in each run (`None` where the run has none).
    pub per_rank_ns: Vec<Option<f64>>,
    /// Speedup of each run over the first.
    pub speedup: Vec<Option<f64>>,
    /// Scaling efficiency of each run relative to the first, percent.
    pub efficiency_pct: Vec<Option<f64>>,
}

/// The comparison of one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseComparison {
    /// Phase name; empty for the whole run.
    pub phase: String,
    /// Ranks per run.
    pub ranks: Vec<u32>,
    /// Per run: whether the phase was inferred from the kernels (no phase ranges) on any of its ranks.
    pub inferred: Vec<bool>,
    /// One row per figure.
    pub rows: Vec<Row>,
}

/// Tokens per second of each run, where its token count is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// Tokens each run processed in the analysed time, as given.
    pub tokens: Vec<Option<u64>>,
    /// `tokens ÷ span` of the whole run, in tokens per second.
    pub tokens_per_s: Vec<Option<f64>>,
    /// Each run's tokens/s over the first run's.
    pub speedup: Vec<Option<f64>>,
    /// `speedup ÷ (ranks / baseline ranks)`, percent.
    pub efficiency_pct: Vec<Option<f64>>,
}

/// The comparison of several runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Labels of the runs, baseline first.
    pub runs: Vec<String>,
    /// The analysis window of each run (`None`: the whole trace).
    pub windows_ns: Vec<Option<(i64, i64)>>,
    /// Each run's input files, in order.
    pub inputs: Vec<Vec<String>>,
    /// Tokens per second, when a token count was given for some run.
    pub throughput: Option<Throughput>,
    /// Whole run first, then each phase that any run has.
    pub phases: Vec<PhaseComparison>,
}

fn mean<'a>(figures: &[&'a Figures], value: impl Fn(&'a Figures) -> f64) -> f64 {
    if figures.is_empty() { 0.0 } else { figures.iter().map(|f| value(f)).sum::<f64>() / figures.len() as f64 }
}

fn run_phase(figures: &[&Figures]) -> Option<RunPhase> {
    if figures.is_empty() {
        return None;
    }
    let mut categories: BTreeMap<String, f64> = BTreeMap::new();
    for f in figures {
        for (name, ns) in &f.categories {
            *categories.entry(name.clone()).or_default() += *ns as f64 / figures.len() as f64;
        }
    }
    Some(RunPhase {
        ranks: figures.len() as u32,
        span_ns: mean(figures, |f| f.span_ns as f64),
        gpu_busy_ns: mean(figures, |f| f.gpu_busy_ns as f64),
        comm_ns: mean(figures, |f| f.comm_ns as f64),
        comm_wait_ns: mean(figures, |f| f.comm_wait_ns as f64),
        comm_transfer_ns: mean(figures, |f| f.comm_transfer_ns as f64),
        categories,
    })
}

/// The figures of `phase` (empty = whole run) on every rank of a report that has it.
fn phase_figures<'a>(report: &'a Report, phase: &str) -> Vec<&'a Figures> {
    report
        .ranks
        .iter()
        .filter_map(|rank| {
            if phase.is_empty() {
                Some(&rank.figures)
            } else {
                rank.phases.iter().find(|p| p.name == phase).map(|p| &p.figures)
            }
        })
        .collect()
}

/// Compares the reports of several runs; the first is the baseline. `tokens` holds the token count of each run
/// where known (empty: none known).
pub fn compare(labels: &[String], reports: &[Report], tokens: &[Option<u64>]) -> Comparison {
    let mut phase_names: Vec<String> = vec![String::new()];
    for report in reports {
        for rank in &report.ranks {
            for phase in &rank.phases {
                if !phase_names.contains(&phase.name) {
                    phase_names.push(phase.name.clone());
                }
            }
        }
    }
    let phases: Vec<PhaseComparison> = phase_names
        .into_iter()
        .map(|phase| {
            let runs: Vec<Option<RunPhase>> = reports.iter().map(|r| run_phase(&phase_figures(r, &phase))).collect();
            let ranks: Vec<u32> = runs.iter().map(|r| r.as_ref().map_or(0, |r| r.ranks)).collect();
            let mut whats: Vec<String> =
                runs.iter().flatten().flat_map(|r| r.categories.keys().cloned()).collect::<Vec<_>>();
            whats.sort();
            whats.dedup();
            // Largest baseline category first, as a reader scans for what matters.
            let baseline_ns =
                |what: &String| runs.iter().flatten().next().and_then(|r| r.categories.get(what)).copied();
            whats.sort_by(|a, b| baseline_ns(b).unwrap_or(0.0).total_cmp(&baseline_ns(a).unwrap_or(0.0)));
            let mut rows: Vec<Row> =
                whats.iter().map(|what| row(what, &runs, &ranks, |r| r.categories.get(what).copied())).collect();
            rows.push(row("span", &runs, &ranks, |r| Some(r.span_ns)));
            rows.push(row("gpu_busy", &runs, &ranks, |r| Some(r.gpu_busy_ns)));
            rows.push(row("comm_wait", &runs, &ranks, |r| Some(r.comm_wait_ns).filter(|&ns| ns > 0.0)));
            rows.push(row("comm_transfer", &runs, &ranks, |r| Some(r.comm_transfer_ns).filter(|&ns| ns > 0.0)));
            if phase.is_empty() {
                // Step time is what a user of the run waits for: the median step, averaged over the ranks with steps.
                let medians: Vec<Option<RunPhase>> = reports.iter().map(median_step).collect();
                rows.push(row("step_time_p50", &medians, &ranks, |r| Some(r.span_ns)));
            }
            let inferred = reports
                .iter()
                .map(|report| {
                    report.ranks.iter().flat_map(|r| &r.phases).any(|p| p.name == phase && p.source == PHASES_INFERRED)
                })
                .collect();
            PhaseComparison { phase, ranks, inferred, rows }
        })
        .collect();
    let throughput = throughput(&phases[0], tokens);
    Comparison {
        runs: labels.to_vec(),
        windows_ns: reports.iter().map(|r| r.window_ns).collect(),
        inputs: reports.iter().map(|r| r.inputs.clone()).collect(),
        throughput,
        phases,
    }
}

/// Tokens per second from the whole run's `span` row; `None` when no run has a token count.
fn throughput(whole_run: &PhaseComparison, tokens: &[Option<u64>]) -> Option<Throughput> {
    if tokens.iter().all(Option::is_none) {
        return None;
    }
    let span = whole_run.rows.iter().find(|r| r.what == "span")?;
    let tokens: Vec<Option<u64>> = (0..span.per_rank_ns.len()).map(|i| tokens.get(i).copied().flatten()).collect();
    let tokens_per_s: Vec<Option<f64>> = tokens
        .iter()
        .zip(&span.per_rank_ns)
        .map(|(n, span_ns)| n.zip(span_ns.filter(|&ns| ns > 0.0)).map(|(n, ns)| n as f64 / (ns / 1e9)))
        .collect();
    let base = tokens_per_s.first().copied().flatten();
    let speedup: Vec<Option<f64>> = tokens_per_s.iter().map(|t| base.zip(*t).map(|(b, t)| t / b)).collect();
    let ranks = &whole_run.ranks;
    let efficiency_pct = speedup
        .iter()
        .zip(ranks)
        .map(|(s, &n)| s.filter(|_| n > 0).map(|s| 100.0 * s / (f64::from(n) / f64::from(ranks[0].max(1)))))
        .collect();
    Some(Throughput { tokens, tokens_per_s, speedup, efficiency_pct })
}

/// The mean over ranks of the median step time, carried in a [`RunPhase`]'s `span_ns` for [`row`].
fn median_step(report: &Report) -> Option<RunPhase> {
    let medians: Vec<f64> =
        report.ranks.iter().filter_map(|r| r.steps.as_ref()).map(|s| s.time.p50_ns as f64).collect();
    if medians.is_empty() {
        return None;
    }
    Some(RunPhase {
        ranks: medians.len() as u32,
        span_ns: medians.iter().sum::<f64>() / medians.len() as f64,
        gpu_busy_ns: 0.0,
        comm_ns: 0.0,
        comm_wait_ns: 0.0,
        comm_transfer_ns: 0.0,
        categories: BTreeMap::new(),
    })
}

fn row(what: &str, runs: &[Option<RunPhase>], ranks: &[u32], value: impl Fn(&RunPhase) -> Option<f64>) -> Row {
    let per_rank_ns: Vec<Option<f64>> = runs.iter().map(|r| r.as_ref().and_then(&value)).collect();
    let base = per_rank_ns.first().copied().flatten().filter(|&ns| ns > 0.0);
    let speedup: Vec<Option<f64>> =
        per_rank_ns.iter().map(|ns| base.zip(ns.filter(|&ns| ns > 0.0)).map(|(b, t)| b / t)).collect();
    let efficiency_pct = speedup
        .iter()
        .zip(ranks)
        .map(|(s, &n)| {
            let scale = f64::from(n) / f64::from(ranks[0].max(1));
            s.filter(|_| n > 0).map(|s| 100.0 * s / scale)
        })
        .collect();
    Row { what: what.to_string(), per_rank_ns, speedup, efficiency_pct }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Phase, RankReport};

    fn figures(gemm_ns: i64, comm_ns: i64) -> Figures {
        let mut f = Figures { span_ns: gemm_ns + comm_ns, gpu_busy_ns: gemm_ns + comm_ns, ..Figures::default() };
        f.categories.insert("gemm".into(), gemm_ns);
        if comm_ns > 0 {
            f.categories.insert("comm.all_reduce".into(), comm_ns);
        }
        f
    }

    fn report(ranks: &[(i64, i64)]) -> Report {
        Report {
            inputs: vec![],
            phase_pattern: String::new(),
            window_ns: None,
            hta_step_inclusion: "all",
            ranks: ranks
                .iter()
                .enumerate()
                .map(|(i, &(gemm, comm))| RankReport {
                    rank: i as u32,
                    rank_recorded: true,
                    source: String::new(),
                    device: i as u32,
                    gpu_name: String::new(),
                    pid: None,
                    figures: figures(gemm, comm),
                    phase_source: Some("recorded"),
                    phases: vec![Phase {
                        name: "decode".into(),
                        source: "recorded",
                        figures: figures(gemm / 2, comm / 2),
                    }],
                    hta: Default::default(),
                    annotation_ranges: 0,
                    steps: None,
                    graph_replays: None,
                    steady_state: None,
                    generate_calls: None,
                })
                .collect(),
            collectives: crate::report::CollectiveReport {
                matched_instances: 0,
                unmatched_kernels: 0,
                clocks_aligned: false,
                end_spread_median_ns: None,
                bench: None,
                groups: vec![],
                late_ranks: vec![],
            },
            instances: vec![],
            warnings: vec![],
            run_identities: vec![],
            notes: vec![],
            memory: vec![],
        }
    }

    #[test]
    fn speedup_and_efficiency_are_per_rank() {
        // 1 GPU: 1000 ns of GEMM. 2 GPUs: 500 and 600 ns each (mean 550) plus all-reduce.
        let c = compare(
            &["TP=1".into(), "TP=2".into()],
            &[report(&[(1000, 0)]), report(&[(500, 100), (600, 300)])],
            &[Some(100), Some(300)],
        );
        assert_eq!(c.phases.len(), 2);
        assert_eq!(c.phases[1].phase, "decode");
        let whole = &c.phases[0];
        assert_eq!(whole.ranks, [1, 2]);
        let gemm = whole.rows.iter().find(|r| r.what == "gemm").unwrap();
        assert_eq!(gemm.per_rank_ns, [Some(1000.0), Some(550.0)]);
        assert!((gemm.speedup[1].unwrap() - 1000.0 / 550.0).abs() < 1e-12);
        assert!((gemm.efficiency_pct[1].unwrap() - 100.0 * (1000.0 / 550.0) / 2.0).abs() < 1e-9);
        let comm = whole.rows.iter().find(|r| r.what == "comm.all_reduce").unwrap();
        assert_eq!(comm.per_rank_ns, [None, Some(200.0)]);
        assert_eq!(comm.speedup, [None, None]);
        // Spans: 1000 ns on one GPU; 600 and 900 ns (mean 750) on two. 100 tokens in 1 µs, 300 in 0.75 µs.
        let throughput = c.throughput.unwrap();
        assert_eq!(throughput.tokens_per_s, [Some(1e8), Some(4e8)]);
        assert_eq!(throughput.speedup, [Some(1.0), Some(4.0)]);
        assert_eq!(throughput.efficiency_pct, [Some(100.0), Some(200.0)]);
        let none = compare(&["a".into()], &[report(&[(1000, 0)])], &[None]);
        assert!(none.throughput.is_none());
    }
}
