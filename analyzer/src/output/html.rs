//! The charts of one run's report and the self-contained HTML page that holds them
//! (`analyzer report --html OUT.html`, `--charts DIR`).
//!
//! Every number a chart draws is read from the [`Report`] — the same figures `report --format json` writes
//! (matched collective instances: `collectives --format json`) — never recomputed from the trace, so a chart
//! cannot disagree with the JSON. The page fetches nothing: its charts are inline SVG, its style is inline, and a
//! Content-Security-Policy forbids any load, so it opens offline and from an e-mail attachment alike.

use std::fmt::Write as _;
use std::path::Path;

use crate::figures::bench_peaks::BenchPeaks;
use crate::figures::categories::Classifier;
use crate::figures::collectives::Instance;
use crate::output::charts::{self, Chart, ChartKind, Line, PointSet, Segment, SeriesPoint, escape};
use crate::output::render;
use crate::report::{Figures, Report};

/// Columns of the waiting heatmap at most: about a column per two pixels of its plot (more would make a huge SVG of
/// cells too thin to see); more instances share columns.
pub const HEATMAP_MAX_COLUMNS: usize = 400;

/// A chart with what it shows, for the page.
#[derive(Debug, Clone)]
pub struct Section {
    /// The chart.
    pub chart: Chart,
    /// One or two sentences under the title: what is drawn and from which figures.
    pub caption: String,
}

/// The charts of one report, and notes on charts that could not be drawn (and why).
#[derive(Debug, Clone, Default)]
pub struct ReportCharts {
    /// Drawn charts, in page order.
    pub sections: Vec<Section>,
    /// Why a chart is missing (no steps, no message sizes, …).
    pub notes: Vec<String>,
    /// Tables shown before the charts.
    pub tables: Vec<Table>,
    /// HTML shown first, before the per-rank table (the findings section, made by a later wing).
    pub lead_html: String,
}

/// The LLM figures of one run, computed from its traces beside the report: instance times after the warm-up
/// (time to first token, time per output token), layers, and FLOP/s and MFU when the model and tokens are given.
/// `--charts DIR` writes them as `DIR/llm.json`: the figures the latency, MFU and layer charts draw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LlmFigures {
    /// Instances of each rank left out as warm-up: those before its steady state (`--skip-steps` or detected
    /// warm-up steps; the most of any rank when they differ).
    pub skipped: usize,
    /// True when the ranks left out different numbers of instances.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped_differ: bool,
    /// Per phase, the slowest rank's instance times.
    pub latency: Vec<crate::llm::layers::PhaseLatency>,
    /// Per phase, time per layer and op category.
    pub layers: Vec<crate::llm::layers::PhaseLayers>,
    /// Per phase, model FLOPs, achieved FLOP/s and MFU.
    pub mfu: Vec<crate::report::mfu::PhaseMfu>,
}

impl LlmFigures {
    /// The figures of a run; `model` and `tokens` (with the peak, if any) for FLOP/s and MFU. Each rank's warm-up
    /// is the report's: the instances whose range opened before its steady state (`skip` instances where the rank
    /// has no steps).
    pub fn of(
        report: &Report,
        traces: &[shardscope_model::Trace],
        classifier: &Classifier,
        phase_pattern: &regex::Regex,
        skip: usize,
        model: Option<(
            &crate::report::mfu::ModelShape,
            &crate::report::mfu::Tokens,
            Option<&crate::report::mfu::Peak>,
        )>,
    ) -> LlmFigures {
        let instances = crate::llm::layers::instances(traces, classifier, phase_pattern, report.window_ns);
        let skips: Vec<usize> = instances
            .iter()
            .map(|r| {
                let steps = report.ranks.iter().find(|rank| rank.rank == r.rank).and_then(|rank| rank.steps.as_ref());
                match steps {
                    Some(s) if s.skipped > 0 => r.warmup_before(s.steady_window_ns.map(|w| w.0)),
                    Some(_) => 0,
                    None => skip,
                }
            })
            .collect();
        let latency = crate::llm::layers::latencies_after(&instances, &skips);
        let layers = crate::llm::layers::phase_layers_after(&instances, &skips);
        let mfu = match model {
            Some((shape, tokens, peak)) => {
                let times =
                    latency.iter().filter(|l| l.time.count > 0).map(|l| (l.phase.clone(), l.time.p50_ns)).collect();
                crate::report::mfu::phase_mfu(report, shape, tokens, peak, &times)
            }
            None => Vec::new(),
        };
        let skipped = skips.iter().copied().max().unwrap_or(skip);
        let skipped_differ = skips.iter().any(|&n| n != skipped);
        LlmFigures { skipped, skipped_differ, latency, layers, mfu }
    }
}

/// The chart and table name of a phase's latency.
fn latency_title(phase: &str) -> String {
    match phase {
        "prefill" => "TTFT (prefill)".into(),
        "decode" => "TPOT (decode)".into(),
        other => other.to_string(),
    }
}

/// The achieved FLOP/s and MFU per phase: the table, and the chart when some phase has an MFU.
fn add_mfu_chart(out: &mut ReportCharts, llm: &LlmFigures) {
    out.tables.push(
        Table {
            title: "Achieved FLOP/s and MFU per phase (model FLOPs of one instance ÷ its p50 time)".into(),
            header: [
                "phase",
                "tokens",
                "context",
                "GFLOP",
                "time p50",
                "TFLOP/s",
                "GPUs",
                "peak TFLOP/s",
                "MFU",
                "why no MFU",
            ]
            .map(String::from)
            .to_vec(),
            rows: llm
                .mfu
                .iter()
                .map(|m| {
                    vec![
                        m.phase.clone(),
                        format!("{}", m.tokens_per_instance),
                        m.context_per_token.map_or("–".into(), |c| format!("{c}")),
                        format!("{:.2}", m.flops_per_instance / 1e9),
                        duration(m.instance_p50_ns),
                        format!("{:.1}", m.achieved_tflops),
                        m.gpus.to_string(),
                        m.peak.as_ref().map_or("–".into(), |p| format!("{:.0} ({})", p.tflops, p.kind)),
                        m.mfu_pct.map_or("–".into(), |p| format!("{p:.1} %")),
                        m.inconsistent.clone().unwrap_or_default(),
                    ]
                })
                .collect(),
        }
        .without_empty_last_column(),
    );
    let with_mfu: Vec<&crate::report::mfu::PhaseMfu> = llm.mfu.iter().filter(|m| m.mfu_pct.is_some()).collect();
    if with_mfu.is_empty() {
        out.notes.push(
            "MFU: no peak to divide by (give --bench results or peak_tflops in --model), or the model \
                        FLOPs were inconsistent with the trace (see the table)."
                .into(),
        );
    } else {
        out.sections.push(Section {
            caption: "Model FLOPs utilisation per phase: model FLOPs of one instance ÷ the slowest rank's median \
                      instance time ÷ (peak of one GPU × GPUs). The peak is bench's measured GEMM peak when \
                      --bench is given, else the datasheet figure of --model peak_tflops."
                .into(),
            chart: Chart {
                name: "mfu".into(),
                title: "MFU per phase".into(),
                size_px: (900, 420),
                kind: ChartKind::Series {
                    x_labels: with_mfu.iter().map(|m| m.phase.clone()).collect(),
                    x_label: "phase".into(),
                    y_label: "% of peak".into(),
                    lines: vec![Line {
                        joined: false,
                        label: "MFU".into(),
                        color: charts::series_color(2),
                        points: with_mfu
                            .iter()
                            .map(|m| m.mfu_pct.map(|v| SeriesPoint { value: v, low: v, high: v }))
                            .collect(),
                    }],
                },
            },
        });
    }
}
/// The warm-up instances left out of each rank, in words.
fn left_out(llm: &LlmFigures) -> String {
    if llm.skipped_differ {
        format!("warm-up instances (those before its steady state, at most {})", llm.skipped)
    } else {
        format!("first {} instances", llm.skipped)
    }
}

/// Time to first token and per output token: the chart and the table.
fn add_latency_chart(out: &mut ReportCharts, llm: &LlmFigures) {
    let x_labels: Vec<String> = llm.latency.iter().map(|l| latency_title(&l.phase)).collect();
    let p50 = llm
        .latency
        .iter()
        .map(|l| Some(SeriesPoint { value: ms(l.time.p50_ns), low: ms(l.time.min_ns), high: ms(l.time.max_ns) }));
    let p90 = llm
        .latency
        .iter()
        .map(|l| Some(SeriesPoint { value: ms(l.time.p90_ns), low: ms(l.time.p90_ns), high: ms(l.time.p90_ns) }));
    out.sections.push(Section {
        caption: format!(
            "Time to first token (one prefill instance) and time per output token (one decode step) on the \
             slowest rank, after leaving out each rank's {}: p50 with the min–max spread, and p90.",
            left_out(llm)
        ),
        chart: Chart {
            name: "latency".into(),
            title: "Time to first token and per output token".into(),
            size_px: (900, 420),
            kind: ChartKind::Series {
                x_labels,
                x_label: "phase".into(),
                y_label: "ms".into(),
                lines: vec![
                    Line {
                        joined: false,
                        label: "p50 (min–max)".into(),
                        color: charts::series_color(0),
                        points: p50.collect(),
                    },
                    Line { joined: false, label: "p90".into(), color: charts::series_color(1), points: p90.collect() },
                ],
            },
        },
    });
    out.tables.push(Table {
        title: if llm.skipped_differ {
            format!("Latency per phase (slowest rank; each rank's warm-up left out, at most {} instances)", llm.skipped)
        } else {
            format!("Latency per phase (slowest rank; first {} instances of each rank left out)", llm.skipped)
        },
        header: ["phase", "rank", "instances", "p50", "p90", "min", "max"].map(String::from).to_vec(),
        rows: llm
            .latency
            .iter()
            .map(|l| {
                vec![
                    latency_title(&l.phase),
                    l.rank.to_string(),
                    l.time.count.to_string(),
                    duration(l.time.p50_ns),
                    duration(l.time.p90_ns),
                    duration(l.time.min_ns),
                    duration(l.time.max_ns),
                ]
            })
            .collect(),
    });
}

/// Adds the LLM figures' tables and charts: latency, MFU, layers per phase.
pub fn add_llm_charts(out: &mut ReportCharts, llm: &LlmFigures) {
    if !llm.latency.is_empty() {
        add_latency_chart(out, llm);
    }
    if !llm.mfu.is_empty() {
        add_mfu_chart(out, llm);
    }
    for table in &llm.layers {
        add_layer_chart(out, table);
    }
}

/// The kernel time per layer and op of one phase: its table and heatmap.
fn add_layer_chart(out: &mut ReportCharts, table: &crate::llm::layers::PhaseLayers) {
    let mut header = vec!["layer".to_string()];
    header.extend(table.ops.iter().cloned());
    out.tables.push(Table {
        title: format!(
            "Kernel time per layer in one {} instance ({} layers, {}{}; mean over {} rank-instances)",
            table.phase,
            table.layers,
            table.source,
            table.kernels_per_layer.map_or(String::new(), |k| format!(", {k} kernels each")),
            table.instances
        ),
        header,
        rows: table
            .time_ns
            .iter()
            .enumerate()
            .map(|(layer, row)| {
                std::iter::once(format!("L{layer}")).chain(row.iter().map(|&ns| duration(ns))).collect()
            })
            .collect(),
    });
    out.sections.push(Section {
        caption: format!(
            "Kernel time of each op category in each layer of one {} instance, mean over ranks and instances \
         ({} layers {}).",
            table.phase,
            table.layers,
            if table.source == "inferred" {
                "inferred from the repeating kernel sequence"
            } else {
                "from layer ranges"
            }
        ),
        chart: Chart {
            name: format!("layers_{}", table.phase.replace(|c: char| !c.is_ascii_alphanumeric(), "_")),
            title: format!("Time per layer and op in {}", table.phase),
            size_px: (
                (400 + 40 * table.layers as u32).clamp(800, 2400),
                (140 + 36 * table.ops.len() as u32).clamp(260, 2400),
            ),
            kind: ChartKind::Heatmap {
                rows: table.ops.clone(),
                x_label: "layer".into(),
                cells: (0..table.ops.len())
                    .map(|op| table.time_ns.iter().map(|row| Some(row[op] as f64 / 1e3)).collect())
                    .collect(),
                unit: "µs".into(),
            },
        },
    });
}

/// Column label of a rank, or of one of its phases.
pub fn column_label(rank: u32, phase: Option<&str>) -> String {
    match phase {
        None => format!("r{rank}"),
        Some(phase) => format!("r{rank} {phase}"),
    }
}

/// The category stack of one set of figures: each category's share of the summed category time, in percent.
fn share_segments(figures: &Figures, order: &[String], classifier: &Classifier) -> Vec<Segment> {
    category_share_segments(&figures.categories, order, classifier)
}

/// The category stack of summed category times (ns per category label), in `order`: each category's share of their
/// total, in percent, with the time it stands for.
pub(crate) fn category_share_segments(
    categories: &std::collections::BTreeMap<String, i64>,
    order: &[String],
    classifier: &Classifier,
) -> Vec<Segment> {
    let total = categories.values().fold(0i64, |sum, &ns| sum.saturating_add(ns));
    order
        .iter()
        .filter_map(|label| {
            let ns = *categories.get(label)?;
            (ns > 0 && total > 0).then(|| Segment {
                label: label.clone(),
                value: 100.0 * ns as f64 / total as f64,
                source_ns: Some(ns),
                color: charts::category_color(classifier, label),
            })
        })
        .collect()
}

/// Category labels of all figures, largest summed time first, so that every bar stacks in the same order.
pub fn category_order<'a>(all: impl Iterator<Item = &'a Figures>) -> Vec<String> {
    let mut totals: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for figures in all {
        for (label, ns) in &figures.categories {
            *totals.entry(label).or_default() += ns;
        }
    }
    let mut order: Vec<(&str, i64)> = totals.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    order.into_iter().map(|(label, _)| label.to_string()).collect()
}

fn bar_chart_width_px(columns: usize) -> u32 {
    (300 + 56 * columns as u32).clamp(900, 4000)
}

/// Milliseconds from nanoseconds, for axes.
fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// The charts of a report. `report.instances` must have been kept (see `Options::keep_instances`) for the bus
/// bandwidth and waiting charts.
pub fn report_charts(report: &Report, classifier: &Classifier, bench: Option<&BenchPeaks>) -> ReportCharts {
    let mut out = ReportCharts::default();
    add_share_chart(&mut out, report, classifier);
    let labels: Vec<String> = report.ranks.iter().map(|r| column_label(r.rank, None)).collect();
    add_step_time_chart(&mut out, report, &labels);
    add_phase_time_chart(&mut out, report, &labels);
    add_busbw_chart(&mut out, report, bench);
    add_wait_heatmap(&mut out, report);
    out.sections.extend(super::memory_charts::sections(report));
    out
}

/// Op-category shares: per rank, the whole rank, then each phase; of the steady state where warm-up was left out.
fn add_share_chart(out: &mut ReportCharts, report: &Report, classifier: &Classifier) {
    let order = category_order(
        report
            .ranks
            .iter()
            .flat_map(|r| std::iter::once(r.steady_figures()).chain(r.steady_phases().iter().map(|p| &p.figures))),
    );
    let mut columns = Vec::new();
    let mut segments = Vec::new();
    for rank in &report.ranks {
        columns.push(column_label(rank.rank, None));
        segments.push(share_segments(rank.steady_figures(), &order, classifier));
        for phase in rank.steady_phases() {
            columns.push(column_label(rank.rank, Some(&phase.name)));
            segments.push(share_segments(&phase.figures, &order, classifier));
        }
    }
    if !columns.is_empty() {
        let warm_up = if report.ranks.iter().any(|r| r.steady_state.is_some()) {
            " Ranks with warm-up steps left out (--skip-steps or detected) show their steady state \
             (`steady_state.categories`)."
        } else {
            ""
        };
        out.sections.push(Section {
            caption: format!(
                "Share of summed GPU time per op category, per rank (rN) and per phase. A collective's waiting for \
                 the last rank (wait.*, darker) is apart from its transfer (comm.*). From the report's \
                 `categories`.{warm_up}"
            ),
            chart: Chart {
                name: "shares".into(),
                title: "Op-category shares per rank and phase".into(),
                size_px: (bar_chart_width_px(columns.len()), 460),
                kind: ChartKind::Stacked { columns, segments, y_label: "% of GPU time".into() },
            },
        });
    }
}

/// Step times per rank: median, with the min–max spread.
fn add_step_time_chart(out: &mut ReportCharts, report: &Report, labels: &[String]) {
    let step_points: Vec<Option<SeriesPoint>> = report
        .ranks
        .iter()
        .map(|r| {
            r.steps.as_ref().filter(|s| s.time.count > 0).map(|s| SeriesPoint {
                value: ms(s.time.p50_ns),
                low: ms(s.time.min_ns),
                high: ms(s.time.max_ns),
            })
        })
        .collect();
    if step_points.iter().any(Option::is_some) {
        let mut lines = vec![Line {
            joined: false,
            label: "step p50 (min–max)".into(),
            color: charts::series_color(0),
            points: step_points,
        }];
        let p90: Vec<Option<SeriesPoint>> = report
            .ranks
            .iter()
            .map(|r| {
                r.steps.as_ref().filter(|s| s.time.count > 0).map(|s| SeriesPoint {
                    value: ms(s.time.p90_ns),
                    low: ms(s.time.p90_ns),
                    high: ms(s.time.p90_ns),
                })
            })
            .collect();
        lines.push(Line { joined: false, label: "step p90".into(), color: charts::series_color(1), points: p90 });
        out.sections.push(Section {
            caption: "Step (iteration) time per rank: median with the min–max spread, and the 90th percentile. \
                      From the report's `steps.time`."
                .into(),
            chart: Chart {
                name: "step_times".into(),
                title: "Step time per rank".into(),
                size_px: (bar_chart_width_px(labels.len()).min(1400), 420),
                kind: ChartKind::Series {
                    x_labels: labels.to_vec(),
                    x_label: "rank".into(),
                    y_label: "ms".into(),
                    lines,
                },
            },
        });
    } else {
        out.notes.push(
            "Step times: no steps were found in the traces (no step or phase ranges, no repeating \
                        kernel sequence)."
                .into(),
        );
    }
}

/// Phase instance times per rank (time to first token for prefill, per output token for decode).
fn add_phase_time_chart(out: &mut ReportCharts, report: &Report, labels: &[String]) {
    let mut phase_names: Vec<&str> = Vec::new();
    for rank in &report.ranks {
        for phase in rank.steady_phases() {
            if !phase_names.contains(&phase.name.as_str()) {
                phase_names.push(&phase.name);
            }
        }
    }
    if !phase_names.is_empty() {
        let lines: Vec<Line> = phase_names
            .iter()
            .enumerate()
            .map(|(index, name)| Line {
                joined: false,
                label: format!("{name} p50 (min–max)"),
                color: charts::series_color(index + 2),
                points: report
                    .ranks
                    .iter()
                    .map(|r| {
                        let phase = r.steady_phases().iter().find(|p| p.name == *name)?;
                        let instances = phase.figures.instances.as_ref()?;
                        (instances.count > 0).then(|| SeriesPoint {
                            value: ms(instances.p50_ns),
                            low: ms(instances.min_ns),
                            high: ms(instances.max_ns),
                        })
                    })
                    .collect(),
            })
            .collect();
        let warm_up = if report.ranks.iter().any(|r| r.steady_state.is_some()) {
            " Ranks with warm-up steps left out show their steady state (`steady_state.phases`)."
        } else {
            ""
        };
        out.sections.push(Section {
            caption: format!(
                "Time of one instance of each phase per rank (prefill: time to first token of a batch; decode: \
                 time per output token): median with the min–max spread. From the report's \
                 `phases.*.instances`.{warm_up}"
            ),
            chart: Chart {
                name: "phase_times".into(),
                title: "Phase instance time per rank".into(),
                size_px: (bar_chart_width_px(labels.len()).min(1400), 420),
                kind: ChartKind::Series {
                    x_labels: labels.to_vec(),
                    x_label: "rank".into(),
                    y_label: "ms".into(),
                    lines,
                },
            },
        });
    }
}

/// Bus bandwidth against message size, beside bench's curve.
fn add_busbw_chart(out: &mut ReportCharts, report: &Report, bench: Option<&BenchPeaks>) {
    let mut sets: Vec<PointSet> = Vec::new();
    for instance in &report.instances {
        let (Some(bytes), Some(busbw)) = (instance.bytes, instance.busbw_gbps) else { continue };
        let label = format!("{} ×{}", instance.op.label(), instance.nranks);
        let index = match sets.iter().position(|s| s.label == label) {
            Some(index) => index,
            None => {
                sets.push(PointSet { label, color: charts::series_color(sets.len()), points: Vec::new() });
                sets.len() - 1
            }
        };
        sets[index].points.push((bytes as f64, busbw));
    }
    if sets.is_empty() {
        out.notes.push(
            "Bus bandwidth: no matched collective with a known message size (sizes come from the NCCL \
                        profiler plugin of `capture` or from Kineto's NCCL metadata)."
                .into(),
        );
    } else {
        let mut curves = Vec::new();
        if let Some(bench) = bench {
            let mut seen = Vec::new();
            for instance in report.instances.iter().filter(|i| i.bytes.is_some()) {
                if seen.contains(&(instance.op, instance.nranks)) {
                    continue;
                }
                seen.push((instance.op, instance.nranks));
                let curve = bench.curve(instance.op, instance.nranks);
                if !curve.is_empty() {
                    curves.push(PointSet {
                        label: format!("bench {} ×{}", instance.op.label(), instance.nranks),
                        color: charts::series_color(5 + curves.len()),
                        points: curve.into_iter().map(|(b, g)| (b as f64, g)).collect(),
                    });
                }
            }
        }
        out.sections.push(Section {
            caption: format!(
                "Bus bandwidth (nccl-tests' convention) of each matched collective against its message size{}. \
                 From `collectives --format json` `instances`.",
                if curves.is_empty() { String::new() } else { ", beside what `bench` measured on the machine".into() }
            ),
            chart: Chart {
                name: "busbw".into(),
                title: "Collective bus bandwidth against message size".into(),
                size_px: (1000, 460),
                kind: ChartKind::Scatter { x_label: "message size".into(), y_label: "busbw GB/s".into(), sets, curves },
            },
        });
    }
}

/// Waiting per rank and collective instance.
fn add_wait_heatmap(out: &mut ReportCharts, report: &Report) {
    if report.instances.is_empty() {
        out.notes.push("Waiting heatmap: no collective was matched across two or more ranks.".into());
    } else {
        // Every instance: past HEATMAP_MAX_COLUMNS, runs of consecutive instances share a column (their largest wait).
        let per_column = report.instances.len().div_ceil(HEATMAP_MAX_COLUMNS);
        let rows: Vec<String> = report.ranks.iter().map(|r| column_label(r.rank, None)).collect();
        let cells: Vec<Vec<Option<f64>>> = report
            .ranks
            .iter()
            .map(|r| {
                let largest_wait_ns =
                    |run: &[Instance]| run.iter().filter_map(|i| i.rank_wait_ns.get(&r.rank).copied()).max();
                report.instances.chunks(per_column).map(|run| largest_wait_ns(run).map(|ns| ns as f64 / 1e3)).collect()
            })
            .collect();
        let x_label = if per_column == 1 {
            "collective instance".to_string()
        } else {
            format!("collective instances, {per_column} a column (their largest wait)")
        };
        out.sections.push(Section {
            caption: "Time each rank waited for the last rank to arrive, per matched collective instance (in the \
                      order of their communicator, type and sequence; every instance, several to a column where \
                      there are many), on a logarithmic colour scale when the waits span decades. From \
                      `collectives --format json` `instances[].rank_wait_ns`."
                .into(),
            chart: Chart {
                name: "wait_heatmap".into(),
                title: "Waiting for the last rank, per collective instance".into(),
                size_px: (1100, (140 + 36 * rows.len() as u32).clamp(260, 2400)),
                kind: ChartKind::Heatmap { rows, x_label, cells, unit: "µs".into() },
            },
        });
    }
}

/// A table of figures, as text (the terminal, `study.txt`) and as HTML.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Title.
    pub title: String,
    /// Column names; the first is left-aligned, like every column whose name starts with `configuration`.
    pub header: Vec<String>,
    /// Cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn left(&self, column: usize) -> bool {
        column == 0 || ["configuration", "phase", "top", "why"].iter().any(|h| self.header[column].starts_with(h))
    }

    /// The table without its last column when every row leaves it empty (a "why not" column with nothing to say).
    pub fn without_empty_last_column(mut self) -> Table {
        if self.header.len() > 1 && self.rows.iter().all(|r| r.last().is_none_or(String::is_empty)) {
            self.header.pop();
            for row in &mut self.rows {
                row.pop();
            }
        }
        self
    }

    /// Aligned columns under the title.
    pub fn text(&self) -> String {
        let width = |c: usize| {
            self.rows.iter().map(|r| r[c].chars().count()).chain([self.header[c].chars().count()]).max().unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.header.len()).map(width).collect();
        let line = |cells: &[String]| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let pad = " ".repeat(widths[c].saturating_sub(cell.chars().count()));
                    if self.left(c) { format!("{cell}{pad}") } else { format!("{pad}{cell}") }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = format!("{}\n{}\n", self.title, line(&self.header));
        for row in &self.rows {
            out += &line(row);
            out.push('\n');
        }
        out
    }

    /// An HTML table under an `<h2>` title.
    pub fn html(&self) -> String {
        let class = |c: usize| if self.left(c) { " class=\"l\"" } else { "" };
        let mut out = format!("<h2>{}</h2>\n<table>\n<tr>", escape(&self.title));
        for (c, h) in self.header.iter().enumerate() {
            let _ = write!(out, "<th{}>{}</th>", class(c), escape(h));
        }
        out.push_str("</tr>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(out, "<td{}>{}</td>", class(c), escape(cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        out
    }
}

/// Why a page or a chart file could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// A chart could not be drawn.
    #[error("chart {name}: {error}")]
    Chart {
        /// The chart's name.
        name: String,
        /// Why.
        error: charts::ChartError,
    },
    /// A chart file or its folder could not be written (the message names the file).
    #[error("{0}")]
    Output(shardscope_io::Error),
}

impl PageError {
    fn chart(section: &Section) -> impl FnOnce(charts::ChartError) -> PageError + '_ {
        move |error| PageError::Chart { name: section.chart.name.clone(), error }
    }
}

/// Writes each chart as `<name>.svg` and `<name>.png` into `dir` (created if needed); returns the files written.
pub fn write_chart_files(dir: &Path, sections: &[Section]) -> Result<Vec<std::path::PathBuf>, PageError> {
    shardscope_io::output::output_dir(dir).map_err(PageError::Output)?;
    let mut written = Vec::new();
    for section in sections {
        let svg = charts::render_svg(&section.chart).map_err(PageError::chart(section))?;
        let png = charts::render_png(&section.chart).map_err(PageError::chart(section))?;
        for (extension, bytes) in [("svg", svg.as_bytes()), ("png", png.as_slice())] {
            let path = dir.join(format!("{}.{extension}", section.chart.name));
            shardscope_io::output::write_output(&path, bytes).map_err(PageError::Output)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// The page's head and style, in the charts' theme (light, or dark like the viewer); nothing is loaded from anywhere.
/// The page fits its window: charts scale down to its width, and a table wider than the window scrolls sideways in
/// its own box.
pub fn page_start(title: &str) -> String {
    // Background, text, headings, rules, notes.
    let (bg, text, heading, rule, muted) = match charts::theme() {
        charts::ChartTheme::Light => ("#ffffff", "#222222", "#111111", "#d8d8d8", "#5a5a5a"),
        charts::ChartTheme::Dark => ("#1b1b1b", "#c8c8c8", "#e6e6e6", "#3c3c3c", "#9a9a9a"),
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{}</title>
<style>
body {{ background: {bg}; color: {text}; font: 15px/1.45 "Ubuntu", system-ui, sans-serif; margin: 24px auto;
  padding: 0 24px; max-width: 1400px; }}
h1, h2 {{ color: {heading}; font-weight: 500; }}
table {{ border-collapse: collapse; margin: 8px 0 20px; display: block; max-width: 100%; overflow-x: auto; }}
th, td {{ border-bottom: 1px solid {rule}; padding: 3px 10px; text-align: right; white-space: nowrap; }}
th {{ color: {heading}; font-weight: 500; }}
td.l, th.l {{ text-align: left; }}
section.chart svg {{ display: block; width: 100%; max-width: 100%; height: auto; }}
p.caption, p.note {{ max-width: 110ch; }}
p.note {{ color: {muted}; }}
code {{ color: {heading}; }}
</style>
</head>
<body>
"#,
        escape(title)
    )
}

/// The end of the page.
pub fn page_end() -> &'static str {
    "</body>\n</html>\n"
}

/// A chart section: title, caption and the inline SVG.
pub fn chart_section(section: &Section) -> Result<String, PageError> {
    let svg = charts::render_svg(&section.chart).map_err(PageError::chart(section))?;
    // The XML declaration plotters writes is not allowed inside HTML.
    let svg = match svg.find("<svg") {
        Some(start) => &svg[start..],
        None => svg.as_str(),
    };
    Ok(format!(
        "<section class=\"chart\" id=\"chart-{}\">\n<h2>{}</h2>\n<p class=\"caption\">{}</p>\n{svg}\n</section>\n",
        escape(&section.chart.name),
        escape(&section.chart.title),
        escape(&section.caption),
    ))
}

fn duration(ns: i64) -> String {
    render::duration(ns)
}

/// The HTML page of one report.
pub fn report_page(report: &Report, charts: &ReportCharts) -> Result<String, PageError> {
    let mut page = page_start("shardscope report");
    page.push_str("<h1>shardscope report</h1>\n<p>Inputs: ");
    let inputs: Vec<String> = report.inputs.iter().map(|i| format!("<code>{}</code>", escape(i))).collect();
    page.push_str(&inputs.join(", "));
    page.push_str("</p>\n");
    for note in &report.notes {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(note));
    }
    page.push_str(&charts.lead_html);
    page.push_str(&crate::output::summary::late_rank_html(report));
    page.push_str(
        "<h2>Per rank</h2>\n<table>\n<tr><th class=\"l\">rank</th><th class=\"l\">GPU</th><th>span</th><th>busy</th>\
         <th>comm</th><th>transfer</th><th>wait</th><th>exposed comm</th><th>late</th><th>step p50</th>\
         <th class=\"l\">top categories</th></tr>\n",
    );
    for rank in &report.ranks {
        let f = &rank.figures;
        let total = f.category_total_ns();
        let mut top: Vec<(&String, &i64)> = f.categories.iter().collect();
        top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = top
            .iter()
            .take(5)
            .map(|(label, ns)| format!("{} {:.1} %", escape(label), 100.0 * **ns as f64 / total.max(1) as f64))
            .collect();
        let step =
            rank.steps.as_ref().filter(|s| s.time.count > 0).map_or("–".to_string(), |s| duration(s.time.p50_ns));
        let _ = writeln!(
            page,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            rank.rank,
            escape(&rank.gpu_name),
            duration(f.span_ns),
            duration(f.gpu_busy_ns),
            duration(f.comm_ns),
            duration(f.comm_transfer_ns),
            duration(f.comm_wait_ns),
            duration(f.exposed_comm_ns),
            f.late_count,
            step,
            top.join(", ")
        );
    }
    page.push_str("</table>\n");
    for table in &charts.tables {
        page.push_str(&table.html());
    }
    for section in &charts.sections {
        page.push_str(&chart_section(section)?);
    }
    for note in &charts.notes {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(note));
    }
    page.push_str(page_end());
    Ok(page)
}
