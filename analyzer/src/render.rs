//! Printing a [`Report`]: a terminal table, JSON, or CSV; and the kernel summary in `nsys stats`' CSV layout.

use std::fmt::Write as _;

use crate::kernel_summary::KernelSummaryRow;
use crate::report::{Figures, Report};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A readable table.
    Table,
    /// The report as JSON (documented in the README).
    Json,
    /// One row per rank and per (rank, phase).
    Csv,
}

/// Human-readable duration: `812 ns`, `45.2 µs`, `3.07 ms`, `1.204 s`.
pub fn duration(ns: i64) -> String {
    let abs = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if abs < 1e3 {
        format!("{ns} ns")
    } else if abs < 1e6 {
        format!("{sign}{:.1} µs", abs / 1e3)
    } else if abs < 1e9 {
        format!("{sign}{:.2} ms", abs / 1e6)
    } else {
        format!("{sign}{:.3} s", abs / 1e9)
    }
}

fn share(part: i64, whole: i64) -> f64 {
    if whole > 0 { 100.0 * part as f64 / whole as f64 } else { 0.0 }
}

/// Renders the report as a terminal table, showing the `top` kernels of each rank.
pub fn table(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "shardscope report: {} rank(s) from {}", report.ranks.len(), report.inputs.join(", "));
    let _ = writeln!(out, "phases: ranges matching {}", report.phase_pattern);
    if let Some((start, end)) = report.window_ns {
        let _ = writeln!(out, "window: {start} ns .. {end} ns");
    }
    for rank in &report.ranks {
        let recorded = if rank.rank_recorded { "" } else { " (numbered in input order)" };
        let pid = rank.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
        let gpu = if rank.gpu_name.is_empty() { String::new() } else { format!(" {}", rank.gpu_name) };
        let _ = writeln!(out, "\n== rank {}{recorded}: GPU {}{gpu}{pid}  [{}]", rank.rank, rank.device, rank.source);
        figures_block(&mut out, &rank.figures, "  ");
        let kernels = &rank.figures.kernels;
        if !kernels.is_empty() {
            let _ = writeln!(out, "  top kernels ({} of {} names):", top.min(kernels.len()), kernels.len());
            let _ = writeln!(
                out,
                "    {:>6} {:>11} {:>9} {:>11} {:>11} {:>11}  name",
                "time%", "total", "instances", "avg", "med", "max"
            );
            for row in kernels.iter().take(top) {
                let _ = writeln!(
                    out,
                    "    {:>6.1} {:>11} {:>9} {:>11} {:>11} {:>11}  {}",
                    row.time_pct,
                    duration(row.total_ns),
                    row.instances,
                    duration(row.avg_ns.round() as i64),
                    duration(row.med_ns.round() as i64),
                    duration(row.max_ns),
                    truncate(&row.name, 90)
                );
            }
        }
        for phase in &rank.phases {
            let _ = writeln!(out, "  -- phase {} --", phase.name);
            figures_block(&mut out, &phase.figures, "    ");
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "\nwarning: {}: {} × {}", warning.source, warning.count, warning.what);
    }
    out
}

fn figures_block(out: &mut String, f: &Figures, indent: &str) {
    let _ = writeln!(
        out,
        "{indent}span {}   GPU busy {} ({:.1}%)   idle {}   kernels {}   copies/sets {}",
        duration(f.span_ns),
        duration(f.gpu_busy_ns),
        share(f.gpu_busy_ns, f.span_ns),
        duration(f.idle_ns),
        f.kernel_count,
        f.memop_count
    );
    let _ = writeln!(
        out,
        "{indent}communication {} ({:.1}% of busy)   exposed {} ({:.1}% of span)   comm/comp overlap {:.1}%",
        duration(f.comm_ns),
        f.comm_over_busy_pct,
        duration(f.exposed_comm_ns),
        f.exposed_comm_over_span_pct,
        f.comm_comp_overlap_pct
    );
    let total = f.category_total_ns();
    let mut categories: Vec<(&String, &i64)> = f.categories.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let line: Vec<String> = categories.iter().map(|(name, ns)| format!("{name} {:.1}%", share(**ns, total))).collect();
    let _ = writeln!(out, "{indent}op shares (of {} summed GPU time): {}", duration(total), line.join(", "));
}

fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max_chars - 1).collect();
        cut.push('…');
        cut
    }
}

/// The report as pretty JSON.
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("a report always serialises")
}

/// CSV: a row per rank (`phase` empty) and per (rank, phase), with one `cat:<category>_ns` column per category.
pub fn csv(report: &Report) -> String {
    let mut categories: Vec<&String> = report
        .ranks
        .iter()
        .flat_map(|r| r.figures.categories.keys().chain(r.phases.iter().flat_map(|p| p.figures.categories.keys())))
        .collect();
    categories.sort();
    categories.dedup();
    let mut out = String::from(
        "rank,phase,source,device,span_ns,gpu_busy_ns,idle_ns,comm_ns,exposed_comm_ns,comm_comp_overlap_pct,kernel_count,memop_count",
    );
    for category in &categories {
        let _ = write!(out, ",cat:{category}_ns");
    }
    out.push('\n');
    for rank in &report.ranks {
        let rows =
            std::iter::once(("", &rank.figures)).chain(rank.phases.iter().map(|p| (p.name.as_str(), &p.figures)));
        for (phase, f) in rows {
            let _ = write!(
                out,
                "{},{},{},{},{},{},{},{},{},{:.3},{},{}",
                rank.rank,
                csv_field(phase),
                csv_field(&rank.source),
                rank.device,
                f.span_ns,
                f.gpu_busy_ns,
                f.idle_ns,
                f.comm_ns,
                f.exposed_comm_ns,
                f.comm_comp_overlap_pct,
                f.kernel_count,
                f.memop_count
            );
            for category in &categories {
                let _ = write!(out, ",{}", f.categories.get(*category).copied().unwrap_or(0));
            }
            out.push('\n');
        }
    }
    out
}

/// Quotes a CSV field when it holds a comma, a quote or a line break.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// The kernel summary in the column layout and number formatting of `nsys stats --report cuda_gpu_kern_sum --format csv`.
pub fn kernel_summary_csv(rows: &[KernelSummaryRow]) -> String {
    let mut out =
        String::from("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n");
    for row in rows {
        let _ = writeln!(
            out,
            "{:.1},{},{},{:.1},{:.1},{},{},{:.1},{}",
            row.time_pct,
            row.total_ns,
            row.instances,
            row.avg_ns,
            row.med_ns,
            row.min_ns,
            row.max_ns,
            row.stddev_ns,
            csv_field(&row.name)
        );
    }
    out
}

/// The kernel summary as an aligned table, like `nsys stats`' default output.
pub fn kernel_summary_table(rows: &[KernelSummaryRow]) -> String {
    let mut out = format!(
        "{:>8}  {:>15}  {:>9}  {:>12}  {:>12}  {:>10}  {:>10}  {:>12}  Name\n",
        "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:>8.1}  {:>15}  {:>9}  {:>12.1}  {:>12.1}  {:>10}  {:>10}  {:>12.1}  {}",
            row.time_pct,
            row.total_ns,
            row.instances,
            row.avg_ns,
            row.med_ns,
            row.min_ns,
            row.max_ns,
            row.stddev_ns,
            row.name
        );
    }
    out
}
