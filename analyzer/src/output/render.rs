//! Printing a [`Report`]: a terminal table, JSON, or CSV; and the kernel summary in `nsys stats`' CSV layout.

use std::fmt::Write as _;

use crate::figures::kernel_summary::KernelSummaryRow;
use crate::output::figure_tables::MemoryRow;
use crate::report::compare::Comparison;
use crate::report::{Figures, PHASES_INFERRED, RankReport, Report, SteadyState};

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

/// Decimals [`format_duration`] shows in each unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationDecimals {
    /// In µs.
    pub us: usize,
    /// In ms.
    pub ms: usize,
    /// In s.
    pub s: usize,
}

impl DurationDecimals {
    /// About three significant digits, for reports: `45.2 µs`, `3.07 ms`, `1.204 s`.
    pub const REPORT: DurationDecimals = DurationDecimals { us: 1, ms: 2, s: 3 };
    /// Three decimals in every unit, for the viewer's details: `45.213 µs`, `3.071 ms`.
    pub const FINE: DurationDecimals = DurationDecimals { us: 3, ms: 3, s: 3 };
}

/// The one duration formatter of the analyzer and the viewer: whole ns below 1 µs, then µs, ms
/// or s with `decimals` decimals.
pub fn format_duration(ns: f64, decimals: DurationDecimals) -> String {
    let abs = ns.abs();
    if abs < 1e3 {
        format!("{ns:.0} ns")
    } else if abs < 1e6 {
        format!("{:.*} µs", decimals.us, ns / 1e3)
    } else if abs < 1e9 {
        format!("{:.*} ms", decimals.ms, ns / 1e6)
    } else {
        format!("{:.*} s", decimals.s, ns / 1e9)
    }
}

/// A duration as reports show it: `812 ns`, `45.2 µs`, `3.07 ms`, `1.204 s`.
pub fn duration(ns: i64) -> String {
    format_duration(ns as f64, DurationDecimals::REPORT)
}

/// The line that says which window a subcommand applied.
pub fn window_note(window_ns: (i64, i64)) -> String {
    let (start, end) = window_ns;
    format!(
        "window: {start} .. {end} ns of the trace clock ({}); events reaching into it, clipped to it",
        duration(end - start)
    )
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
    for identity in &report.run_identities {
        let Some((start, end)) = identity.time_range_ns else { continue };
        let wall = identity
            .wall_clock_ns
            .map(|(start, end)| format!(", {} .. {} UTC", utc(start), utc(end)))
            .unwrap_or_default();
        let range = format!(
            "time range of {}: {start} .. {end} ns on its clock ({}){wall}",
            identity.source,
            duration(end - start)
        );
        push_detail(&mut out, "", &range);
    }
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for rank in &report.ranks {
        let recorded = if rank.rank_recorded { "" } else { " (numbered in input order)" };
        let pid = rank.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
        let gpu = if rank.gpu_name.is_empty() { String::new() } else { format!(" {}", rank.gpu_name) };
        let _ = writeln!(out, "\n== rank {}{recorded}: GPU {}{gpu}{pid}  [{}]", rank.rank, rank.device, rank.source);
        figures_block(&mut out, &rank.figures, "  ");
        top_kernels(&mut out, rank, top);
        steps_line(&mut out, rank);
        steady_state_and_generate_calls(&mut out, rank);
        graph_replays_line(&mut out, rank);
        rank_phases(&mut out, rank);
    }
    if let Some(bench) = &report.collectives.bench {
        bus_bandwidth_against_bench(&mut out, report, bench);
    }
    if !report.collectives.groups.is_empty() {
        let _ = writeln!(out, "\n(`analyzer collectives` gives per-collective wait, transfer and bus bandwidth)");
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "\nwarning: {}: {} × {}", warning.source, warning.count, warning.what);
    }
    out
}

/// The `top` kernels of a rank by total time.
fn top_kernels(out: &mut String, rank: &RankReport, top: usize) {
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
}

/// The step-time distribution of a rank, or why there is none.
fn steps_line(out: &mut String, rank: &RankReport) {
    match &rank.steps {
        Some(steps) if steps.time.count == 0 => {
            let _ = writeln!(
                out,
                "  steps ({}): {} found, all left out as warm-up by --skip-steps",
                steps.source.describe(),
                steps.found
            );
        }
        Some(steps) => {
            let t = &steps.time;
            let skipped = match (steps.skipped, steps.warmup) {
                (0, _) => String::new(),
                (n, "detected") => {
                    format!(", first {n} left out as warm-up (detected: slower than 1.5 × the steady median)")
                }
                (n, _) => format!(", first {n} skipped"),
            };
            push_detail(
                out,
                "  ",
                &format!(
                    "steps ({}): {} found{skipped}; step time median {}  p90 {}  p99 {}  min {}  max {}",
                    steps.source.describe(),
                    steps.found,
                    duration(t.p50_ns),
                    duration(t.p90_ns),
                    duration(t.p99_ns),
                    duration(t.min_ns),
                    duration(t.max_ns)
                ),
            );
        }
        None => {
            let _ = writeln!(out, "  steps: none found (no step or phase ranges, no repeating kernel sequence)");
        }
    }
}

/// The steady state after the warm-up and the inferred generate calls of a rank, when found.
fn steady_state_and_generate_calls(out: &mut String, rank: &RankReport) {
    if let Some(steady) = &rank.steady_state {
        let f = &steady.figures;
        push_detail(
            out,
            "  ",
            &format!(
                "steady state ({} steps after the warm-up, {} .. {} on the trace clock): span {}   GPU busy {} ({:.1}%)   \
             kernels {}   (whole run: span {}, busy {:.1}%)",
                steady.steps,
                steady.window_ns.0,
                steady.window_ns.1,
                duration(f.span_ns),
                duration(f.gpu_busy_ns),
                share(f.gpu_busy_ns, f.span_ns),
                f.kernel_count,
                duration(rank.figures.span_ns),
                share(rank.figures.gpu_busy_ns, rank.figures.span_ns)
            ),
        );
        steady_shares_and_phases(out, steady);
    }
    if let Some(calls) = &rank.generate_calls {
        let warmup = calls.calls.iter().filter(|c| c.warmup).count();
        push_detail(
            out,
            "  ",
            &format!(
                "generate calls (inferred: a prefill step and the decode steps after it): {} ({} in the warm-up, left \
             out); TTFT median {}  min {}  max {}; TPOT median {}  min {}  max {}",
                calls.calls.len(),
                warmup,
                duration(calls.ttft.p50_ns),
                duration(calls.ttft.min_ns),
                duration(calls.ttft.max_ns),
                duration(calls.tpot.p50_ns),
                duration(calls.tpot.min_ns),
                duration(calls.tpot.max_ns)
            ),
        );
    }
}

/// The op shares and phases of a rank's steady state (the whole run's are in the rank's other lines).
fn steady_shares_and_phases(out: &mut String, steady: &SteadyState) {
    let shares = |f: &Figures| {
        let top: Vec<String> =
            crate::output::summary::top_categories(f).iter().map(|(label, pct)| format!("{label} {pct:.1}%")).collect();
        top.join(", ")
    };
    push_detail(out, "    ", &format!("steady-state op shares: {}", shares(&steady.figures)));
    for phase in &steady.phases {
        let Some(instances) = &phase.figures.instances else { continue };
        push_detail(
            out,
            "    ",
            &format!(
                "steady-state phase {}: {} instance(s), summed span {}; per instance median {}  p90 {}  max {}; \
             GPU busy {}; {}",
                phase.name,
                instances.count,
                duration(instances.total_ns),
                duration(instances.p50_ns),
                duration(instances.p90_ns),
                duration(instances.max_ns),
                duration(phase.figures.gpu_busy_ns),
                shares(&phase.figures)
            ),
        );
    }
}

/// The CUDA graph replays of a rank, when it has any.
fn graph_replays_line(out: &mut String, rank: &RankReport) {
    if let Some(replays) = &rank.graph_replays {
        let r = &replays.replay_ns;
        let what = if replays.source == "graph_records" {
            "recorded whole".to_string()
        } else {
            format!("{} node kernels/copies", replays.node_activities)
        };
        let graphs: Vec<String> = replays
            .by_graph
            .iter()
            .take(5)
            .map(|g| {
                let name = match (g.graph_id, g.first_node_id) {
                    (Some(id), _) => format!("graph {id}"),
                    (None, Some(node)) => format!("graph of node {node}"),
                    (None, None) => "graph ?".to_string(),
                };
                let nodes =
                    if g.nodes_per_replay > 0 { format!(" ({} nodes)", g.nodes_per_replay) } else { String::new() };
                // Count × each = total: the mean replay time, so that the line reads as a product.
                let each_ns = g.total_ns / i64::try_from(g.replays.max(1)).unwrap_or(i64::MAX);
                format!("{name}{nodes}: {} × {} = {}", g.replays, duration(each_ns), duration(g.total_ns))
            })
            .collect();
        let graphs = if graphs.is_empty() { String::new() } else { format!("; {}", graphs.join(", ")) };
        let _ = writeln!(
            out,
            "  CUDA graph replays ({what}): {}; per replay median {}  p90 {}  max {}{graphs}",
            r.count,
            duration(r.p50_ns),
            duration(r.p90_ns),
            duration(r.max_ns)
        );
    }
}

/// The phases of a rank (or why it has none), each with its instances and figures.
fn rank_phases(out: &mut String, rank: &RankReport) {
    if rank.phase_source == Some(PHASES_INFERRED) {
        let _ = writeln!(
            out,
            "  phases (inferred): no phase ranges; prefill told apart from the repeating decode steps by its GEMM \
             time and larger grids"
        );
    }
    if rank.phases.is_empty() {
        let why = if rank.annotation_ranges == 0 {
            "the trace has no NVTX or annotation ranges".to_string()
        } else {
            format!("none of its {} NVTX/annotation ranges match the phase pattern", rank.annotation_ranges)
        };
        let _ = writeln!(out, "  phases: none ({why})");
    }
    for phase in &rank.phases {
        let inferred = if phase.source == PHASES_INFERRED { " (inferred)" } else { "" };
        let _ = writeln!(out, "  -- phase {}{inferred} --", phase.name);
        if let Some(instances) = &phase.figures.instances {
            let _ = writeln!(
                out,
                "    {} instance(s), summed span {}; per instance median {}  p90 {}  max {}",
                instances.count,
                duration(instances.total_ns),
                duration(instances.p50_ns),
                duration(instances.p90_ns),
                duration(instances.max_ns)
            );
        }
        figures_block(out, &phase.figures, "    ");
    }
}

/// With `--bench`: each collective group's median bus bandwidth against what `bench` measured, so that the report's
/// table shows what the bench results add.
fn bus_bandwidth_against_bench(out: &mut String, report: &Report, bench: &str) {
    let _ =
        writeln!(out, "\nbus bandwidth against {bench} (median busbw; % of the best measured; % of the same size):");
    let groups: Vec<_> = report.collectives.groups.iter().filter(|g| g.busbw_median_gbps.is_some()).collect();
    if groups.is_empty() {
        let _ = writeln!(out, "  no matched collective with a known size: nothing to compare");
    }
    let percent = |p: Option<f64>| p.map(|p| format!("{p:.0}%")).unwrap_or_else(|| "-".into());
    for g in groups {
        let phase = if g.phase.is_empty() { String::new() } else { format!(" {}", g.phase) };
        let _ = writeln!(
            out,
            "  {} {}{phase} ({} × {}): {:.1} GB/s, {} of peak, {} of same size",
            truncate(&g.communicator, 16),
            g.op.name(),
            g.count,
            g.size_bucket,
            g.busbw_median_gbps.unwrap_or(0.0),
            percent(g.busbw_pct_of_peak),
            percent(g.busbw_pct_of_bench_same_size)
        );
    }
}

/// Collectives matched across ranks, one row per communicator, type, size bucket and phase.
pub fn collectives_table(report: &Report) -> String {
    let c = &report.collectives;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "collectives: {} instance(s) matched across ranks, {} communication kernel(s) unmatched; clocks {}{}",
        c.matched_instances,
        c.unmatched_kernels,
        if c.clocks_aligned { "aligned on collective ends" } else { "shared (one host)" },
        c.end_spread_median_ns
            .map(|s| format!("; median spread of ends across ranks {}", duration(s)))
            .unwrap_or_default()
    );
    let inferred = inferred_phase_sources(report);
    if !inferred.is_empty() {
        let _ = writeln!(
            out,
            "phases inferred from the kernels (no phase ranges) in {}: the phase column is inferred there",
            inferred.join(", ")
        );
    }
    if let Some(bench) = &c.bench {
        let _ = writeln!(
            out,
            "compared with {bench}: % peak = median busbw ÷ best busbw measured for the type; % same = median of \
             busbw ÷ busbw measured at the same size and rank count"
        );
    }
    let _ = writeln!(
        out,
        "{:<10} {:<14} {:<13} {:<8} {:>6} {:>10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7} {:>7}  late ranks",
        "comm",
        "op",
        "size",
        "phase",
        "count",
        "bytes",
        "transfer",
        "med xfer",
        "wait (sum)",
        "med wait",
        "busbw",
        "% peak",
        "% same"
    );
    for g in &c.groups {
        let late: Vec<String> = g.late_rank_counts.iter().map(|(r, n)| format!("{r}:{n}")).collect();
        let _ = writeln!(
            out,
            "{:<10} {:<14} {:<13} {:<8} {:>6} {:>10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7} {:>7}  {}",
            truncate(&g.communicator, 10),
            g.op.label(),
            g.size_bucket,
            truncate(&g.phase, 8),
            g.count,
            if g.size_bucket == "unknown" { "-".to_string() } else { bytes_human(g.bytes) },
            duration(g.transfer_total_ns),
            duration(g.transfer_median_ns),
            duration(g.wait_total_ns),
            duration(g.wait_median_ns),
            g.busbw_median_gbps.map(|b| format!("{b:.2} GB/s")).unwrap_or_else(|| "-".into()),
            g.busbw_pct_of_peak.map(|p| format!("{p:.0}%")).unwrap_or_else(|| "-".into()),
            g.busbw_pct_of_bench_same_size.map(|p| format!("{p:.0}%")).unwrap_or_else(|| "-".into()),
            late.join(" ")
        );
    }
    out
}

/// The collectives part of the report as JSON, with every matched instance when the report kept them.
pub fn collectives_json(report: &Report) -> String {
    let value = serde_json::json!({
        "inputs": report.inputs,
        "phases_inferred_in": inferred_phase_sources(report),
        "collectives": report.collectives,
        "instances": report.instances,
    });
    serde_json::to_string_pretty(&value).expect("collectives always serialise")
}

/// The input files whose phases were inferred from the kernels, each once.
fn inferred_phase_sources(report: &Report) -> Vec<&str> {
    let mut sources: Vec<&str> =
        report.ranks.iter().filter(|r| r.phase_source == Some(PHASES_INFERRED)).map(|r| r.source.as_str()).collect();
    sources.dedup();
    sources
}

/// The collective groups as CSV.
pub fn collectives_csv(report: &Report) -> String {
    let mut out = String::from(
        "communicator,op,size_bucket,phase,count,bytes,transfer_total_ns,transfer_median_ns,wait_total_ns,wait_median_ns,busbw_median_gbps,busbw_pct_of_peak,busbw_pct_of_bench_same_size\n",
    );
    let number = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for g in &report.collectives.groups {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&g.communicator),
            g.op.label(),
            g.size_bucket,
            csv_field(&g.phase),
            g.count,
            g.bytes,
            g.transfer_total_ns,
            g.transfer_median_ns,
            g.wait_total_ns,
            g.wait_median_ns,
            number(g.busbw_median_gbps),
            number(g.busbw_pct_of_peak),
            number(g.busbw_pct_of_bench_same_size)
        );
    }
    out
}

fn bytes_human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn figures_block(out: &mut String, f: &Figures, indent: &str) {
    let _ = writeln!(
        out,
        "{indent}span {}   GPU busy {} ({:.1}%)   idle {}   kernels {}   copies/sets {}{}",
        duration(f.span_ns),
        duration(f.gpu_busy_ns),
        share(f.gpu_busy_ns, f.span_ns),
        duration(f.idle_ns),
        f.kernel_count,
        f.memop_count,
        if f.cuda_graph_count > 0 {
            format!("   CUDA graphs (recorded whole) {}", f.cuda_graph_count)
        } else {
            String::new()
        }
    );
    let communication = format!(
        "communication {} ({:.1}% of busy)   exposed {} ({:.1}% of span)   comm/comp overlap {:.1}%",
        duration(f.comm_ns),
        f.comm_over_busy_pct,
        duration(f.exposed_comm_ns),
        f.exposed_comm_over_span_pct,
        f.comm_comp_overlap_pct
    );
    push_detail(out, indent, &communication);
    if f.comm_wait_ns + f.comm_transfer_ns > 0 {
        let matched = f.comm_wait_ns + f.comm_transfer_ns;
        push_detail(
            out,
            indent,
            &format!(
                "collectives matched across ranks {}: waiting for peers {} ({:.1}%), transfer {} ({:.1}%), arrived last {} time(s)",
                duration(matched),
                duration(f.comm_wait_ns),
                share(f.comm_wait_ns, matched),
                duration(f.comm_transfer_ns),
                share(f.comm_transfer_ns, matched),
                f.late_count
            ),
        );
    }
    let total = f.category_total_ns();
    let mut categories: Vec<(&String, &i64)> = f.categories.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let line: Vec<String> = categories.iter().map(|(name, ns)| format!("{name} {:.1}%", share(**ns, total))).collect();
    push_detail(out, indent, &format!("op shares (of {} summed GPU time): {}", duration(total), line.join(", ")));
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

/// CSV: a row per rank (`phase` empty) and per (rank, phase), with the rank's or phase's GPU memory (the report's
/// `memory` section: `mem_*` columns, empty where the trace holds no memory events) and one `cat:<category>_ns` column
/// per category. A phase that has memory figures but no GPU work gets a row of its memory figures alone.
pub fn csv(report: &Report) -> String {
    let mut categories: Vec<&String> = report
        .ranks
        .iter()
        .flat_map(|r| r.figures.categories.keys().chain(r.phases.iter().flat_map(|p| p.figures.categories.keys())))
        .collect();
    categories.sort();
    categories.dedup();
    let mut out = String::from(
        "rank,phase,source,device,span_ns,gpu_busy_ns,idle_ns,comm_ns,exposed_comm_ns,comm_comp_overlap_pct,comm_wait_ns,comm_transfer_ns,kernel_count,memop_count,phase_source",
    );
    out.push_str(MEMORY_CSV_HEADER);
    for category in &categories {
        let _ = write!(out, ",cat:{category}_ns");
    }
    out.push('\n');
    let memory = MemoryRow::of_report(report);
    for rank in &report.ranks {
        let memory_of = |phase: Option<&str>| memory.iter().find(|m| m.rank.rank == rank.rank && m.phase == phase);
        let rows = std::iter::once((None, "", &rank.figures))
            .chain(rank.phases.iter().map(|p| (Some(p.name.as_str()), p.source, &p.figures)));
        for (phase, phase_source, f) in rows {
            let _ = write!(
                out,
                "{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{}",
                rank.rank,
                csv_field(phase.unwrap_or("")),
                csv_field(&rank.source),
                rank.device,
                f.span_ns,
                f.gpu_busy_ns,
                f.idle_ns,
                f.comm_ns,
                f.exposed_comm_ns,
                f.comm_comp_overlap_pct,
                f.comm_wait_ns,
                f.comm_transfer_ns,
                f.kernel_count,
                f.memop_count,
                phase_source
            );
            push_memory_cells(&mut out, memory_of(phase));
            for category in &categories {
                let _ = write!(out, ",{}", f.categories.get(*category).copied().unwrap_or(0));
            }
            out.push('\n');
        }
        let has_row = |name: &str| rank.phases.iter().any(|p| p.name == name);
        for row in memory.iter().filter(|m| m.rank.rank == rank.rank && m.phase.is_some_and(|p| !has_row(p))) {
            let phase = row.phase.unwrap_or("");
            let _ = write!(
                out,
                "{},{},{},{},,,,,,,,,,,",
                rank.rank,
                csv_field(phase),
                csv_field(&rank.source),
                rank.device
            );
            push_memory_cells(&mut out, Some(row));
            out.push_str(&",".repeat(categories.len()));
            out.push('\n');
        }
    }
    out
}

/// The `mem_*` columns of [`csv`], each with its leading comma.
const MEMORY_CSV_HEADER: &str = ",mem_peak_bytes,mem_peak_ns,mem_end_bytes,mem_allocations,mem_releases,\
    mem_largest_allocation_bytes,mem_kernel_at_peak,mem_framework_peak_allocated_bytes,mem_framework_peak_reserved_bytes";

/// One row's `mem_*` cells (see [`MEMORY_CSV_HEADER`]): empty where the rank or phase has no such figure.
fn push_memory_cells(out: &mut String, row: Option<&MemoryRow>) {
    let cuda = row.and_then(|r| r.cuda);
    let framework = row.and_then(|r| r.framework);
    let cell = |value: Option<String>| value.unwrap_or_default();
    let _ = write!(
        out,
        ",{},{},{},{},{},{},{},{},{}",
        cell(cuda.map(|c| c.peak_bytes.to_string())),
        cell(cuda.map(|c| c.peak_ns.to_string())),
        cell(cuda.map(|c| c.end_bytes.to_string())),
        cell(cuda.map(|c| c.allocations.to_string())),
        cell(cuda.map(|c| c.releases.to_string())),
        cell(row.and_then(|r| r.largest_allocation()).map(|a| a.bytes.to_string())),
        cell(cuda.and_then(|c| c.kernels_at_peak.first()).map(|k| csv_field(k))),
        cell(framework.map(|f| f.peak_allocated_bytes.to_string())),
        cell(framework.map(|f| f.peak_reserved_bytes.to_string())),
    );
}

/// The comparison of runs: one block per phase, one row per figure.
pub fn comparison_table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "runs (baseline first): {}", c.runs.join(" | "));
    let _ = writeln!(out, "per-rank time = mean over the run's ranks; speedup and efficiency against the first run");
    for (index, label) in c.runs.iter().enumerate() {
        let window = match c.windows_ns.get(index).copied().flatten() {
            Some(window_ns) => window_note(window_ns),
            None => "whole trace".to_string(),
        };
        let inputs = c.inputs.get(index).map(|i| i.join(", ")).unwrap_or_default();
        let _ = writeln!(out, "{label}: {inputs}; {window}");
    }
    for phase in &c.phases {
        let title = if phase.phase.is_empty() { "whole run" } else { &phase.phase };
        let ranks: Vec<String> = phase.ranks.iter().map(|n| format!("{n} rank(s)")).collect();
        let inferred_in: Vec<&str> = c
            .runs
            .iter()
            .zip(&phase.inferred)
            .filter(|(_, inferred)| **inferred)
            .map(|(label, _)| label.as_str())
            .collect();
        let inferred =
            if inferred_in.is_empty() { String::new() } else { format!(" (inferred in {})", inferred_in.join(", ")) };
        let _ = writeln!(out, "\n== {title}{inferred} ({})", ranks.join(" | "));
        let _ = write!(out, "{:<22}", "");
        // A run's column is as wide as its label (at least 12): labels are shown whole.
        let widths: Vec<usize> = c.runs.iter().map(|label| label.chars().count().max(12)).collect();
        for (index, label) in c.runs.iter().enumerate() {
            let _ = write!(out, " {label:>width$}", width = widths[index]);
            if index > 0 {
                let _ = write!(out, " {:>8} {:>6}", "speedup", "eff.");
            }
        }
        out.push('\n');
        for row in &phase.rows {
            let _ = write!(out, "{:<22}", truncate(&row.what, 22));
            for (index, &width) in widths.iter().enumerate() {
                let time = row.per_rank_ns[index].map(|ns| duration(ns.round() as i64)).unwrap_or_else(|| "-".into());
                let _ = write!(out, " {time:>width$}");
                if index > 0 {
                    let speedup = row.speedup[index].map(|s| format!("{s:.2}x")).unwrap_or_else(|| "-".into());
                    let efficiency =
                        row.efficiency_pct[index].map(|e| format!("{e:.0}%")).unwrap_or_else(|| "-".into());
                    let _ = write!(out, " {speedup:>8} {efficiency:>6}");
                }
            }
            out.push('\n');
        }
        if let Some(throughput) = c.throughput.as_ref().filter(|_| phase.phase.is_empty()) {
            let _ = write!(out, "{:<22}", "tokens/s");
            for (index, &width) in widths.iter().enumerate() {
                let rate = throughput.tokens_per_s[index].map(|t| format!("{t:.1}")).unwrap_or_else(|| "-".into());
                let _ = write!(out, " {rate:>width$}");
                if index > 0 {
                    let speedup = throughput.speedup[index].map(|s| format!("{s:.2}x")).unwrap_or_else(|| "-".into());
                    let efficiency =
                        throughput.efficiency_pct[index].map(|e| format!("{e:.0}%")).unwrap_or_else(|| "-".into());
                    let _ = write!(out, " {speedup:>8} {efficiency:>6}");
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The comparison as CSV: one row per phase, figure and run.
pub fn comparison_csv(c: &Comparison) -> String {
    let mut out = String::from("phase,what,run,ranks,per_rank_ns,speedup,efficiency_pct,tokens_per_s\n");
    let number = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for phase in &c.phases {
        for row in &phase.rows {
            for (index, run) in c.runs.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},",
                    csv_field(&phase.phase),
                    csv_field(&row.what),
                    csv_field(run),
                    phase.ranks[index],
                    number(row.per_rank_ns[index]),
                    number(row.speedup[index]),
                    number(row.efficiency_pct[index])
                );
            }
        }
    }
    // Tokens per second is a rate, not a per-rank time: it has its own column, on whole-run rows of its own.
    if let Some(throughput) = &c.throughput {
        let ranks = c.phases.first().map(|p| p.ranks.clone()).unwrap_or_default();
        for (index, run) in c.runs.iter().enumerate() {
            let _ = writeln!(
                out,
                ",tokens_per_s,{},{},,{},{},{}",
                csv_field(run),
                ranks.get(index).copied().unwrap_or(0),
                number(throughput.speedup[index]),
                number(throughput.efficiency_pct[index]),
                number(throughput.tokens_per_s[index])
            );
        }
    }
    out
}

/// Quotes a CSV field when it holds a comma, a quote or a line break.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// One decimal the way `nsys stats` prints it: the exact binary value rounded to nearest, with exact ties going
/// away from zero (3361 / 4 = 840.25 prints 840.3, where Rust's formatting gives 840.2; 50135.95, stored as
/// 50135.9499…, prints 50135.9).
fn nsys_decimal1(value: f64) -> String {
    if !value.is_finite() {
        return format!("{value:.1}");
    }
    // Rust prints the exact decimal expansion of an f64 when asked for enough digits.
    let exact = format!("{:.80}", value.abs());
    let (whole, fraction) = exact.split_once('.').unwrap_or((&exact, "0"));
    let is_tie = fraction.as_bytes().get(1) == Some(&b'5') && fraction.bytes().skip(2).all(|b| b == b'0');
    if !is_tie {
        return format!("{value:.1}");
    }
    let tenths: u128 = format!("{whole}{}", &fraction[..1]).parse::<u128>().unwrap_or(0) + 1;
    let sign = if value < 0.0 { "-" } else { "" };
    format!("{sign}{}.{}", tenths / 10, tenths % 10)
}

/// The kernel summary in the column layout and number formatting of `nsys stats --report cuda_gpu_kern_sum --format csv`.
pub fn kernel_summary_csv(rows: &[KernelSummaryRow]) -> String {
    let mut out = KERNEL_SUMMARY_HEADER.join(",") + "\n";
    for row in rows {
        let mut cells = kernel_summary_cells(row);
        cells[8] = csv_field(&cells[8]);
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The kernel summary as an aligned table, like `nsys stats`' default output.
pub fn kernel_summary_table(rows: &[KernelSummaryRow]) -> String {
    const WIDTHS: [usize; 8] = [8, 15, 9, 12, 12, 10, 10, 12];
    let line = |cells: &[String]| -> String {
        let numbers: Vec<String> = WIDTHS.iter().zip(cells).map(|(w, c)| format!("{c:>w$}")).collect();
        format!("{}  {}\n", numbers.join("  "), cells[8])
    };
    let mut out = line(&KERNEL_SUMMARY_HEADER.map(String::from));
    for row in rows {
        out.push_str(&line(&kernel_summary_cells(row)));
    }
    out
}

/// Column names of `nsys stats --report cuda_gpu_kern_sum`.
const KERNEL_SUMMARY_HEADER: [&str; 9] =
    ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"];

/// One summary row's cells, numbers formatted as `nsys stats` prints them.
fn kernel_summary_cells(row: &KernelSummaryRow) -> [String; 9] {
    [
        nsys_decimal1(row.time_pct),
        row.total_ns.to_string(),
        row.instances.to_string(),
        nsys_decimal1(row.avg_ns),
        nsys_decimal1(row.med_ns),
        row.min_ns.to_string(),
        row.max_ns.to_string(),
        nsys_decimal1(row.stddev_ns),
        row.name.clone(),
    ]
}

/// The widest line of the sentences of the text tables (what-if, findings), in characters.
pub const LINE_COLUMNS: usize = 100;

/// A report detail line: `text` after `indent`, broken only between its items (after `, `, `; ` or a run of
/// spaces) so that no figure is parted from its label, at [`LINE_COLUMNS`], each continuation four columns deeper.
pub fn push_detail(out: &mut String, indent: &str, text: &str) {
    let continuation = format!("{indent}    ");
    let mut line = indent.to_string();
    let mut at_start = true;
    for item in detail_items(text) {
        let mut item = item;
        let room = LINE_COLUMNS.saturating_sub(line.chars().count());
        if !at_start && item.trim_end().chars().count() > room {
            // A long item after a short start of line is cut at a word rather than left alone on that line.
            if line.chars().count() < LINE_COLUMNS / 2
                && let Some(cut) = word_break_within(item, room)
            {
                line.push_str(&item[..cut]);
                item = &item[cut..];
            }
            out.push_str(line.trim_end());
            out.push('\n');
            line.clone_from(&continuation);
        }
        line.push_str(item);
        at_start = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// The last place in `item`, within its first `room` characters, where a line may break: a space before a word that
/// starts with a letter and is no unit, so that a figure keeps its unit and its label.
fn word_break_within(item: &str, room: usize) -> Option<usize> {
    const UNITS: [&str; 8] = ["ns", "µs", "ms", "s", "B", "KB", "MB", "GB"];
    let mut best = None;
    for (at, _) in item.char_indices().filter(|(_, c)| *c == ' ') {
        if item[..at].chars().count() > room {
            break;
        }
        let next = item[at + 1..].split(' ').next().unwrap_or("");
        let starts_with_letter = next.chars().next().is_some_and(char::is_alphabetic);
        if starts_with_letter && !UNITS.contains(&next.trim_end_matches([',', ';', ')'])) {
            best = Some(at + 1);
        }
    }
    best
}

/// `text` cut after each `, `, `; ` and run of two or more spaces, the separators kept with the item before.
fn detail_items(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut items = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let separator = matches!(bytes[i], b',' | b';') && bytes.get(i + 1) == Some(&b' ')
            || bytes[i] == b' ' && bytes.get(i + 1) == Some(&b' ');
        if separator {
            let mut end = i + 1;
            while bytes.get(end) == Some(&b' ') {
                end += 1;
            }
            items.push(&text[start..end]);
            (start, i) = (end, end);
        } else {
            i += 1;
        }
    }
    if start < text.len() {
        items.push(&text[start..]);
    }
    items
}

/// `text` after `first`, wrapped at spaces to [`LINE_COLUMNS`] and continued under `indent` (a word longer than a
/// line stays whole).
pub fn push_wrapped(out: &mut String, first: &str, indent: &str, text: &str) {
    let mut line = first.to_string();
    let mut words_on_line = 0;
    for word in text.split(' ') {
        if words_on_line > 0 && line.chars().count() + 1 + word.chars().count() > LINE_COLUMNS {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
            words_on_line = 0;
        }
        if words_on_line > 0 {
            line.push(' ');
        }
        line.push_str(word);
        words_on_line += 1;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::nsys_decimal1;

    #[test]
    fn one_decimal_like_nsys_stats() {
        assert_eq!(nsys_decimal1(840.25), "840.3");
        assert_eq!(nsys_decimal1(1_002_719.0 / 20.0), "50135.9");
        assert_eq!(nsys_decimal1(-840.25), "-840.3");
        assert_eq!(nsys_decimal1(20959.5), "20959.5");
        assert_eq!(nsys_decimal1(0.04), "0.0");
        assert_eq!(nsys_decimal1(79.04), "79.0");
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn reports_keep_three_significant_digits_and_the_viewer_three_decimals() {
        let report: Vec<String> = [812, 45_213, 3_071_400, 1_204_000_000, -45_213].map(duration).to_vec();
        assert_eq!(report, ["812 ns", "45.2 µs", "3.07 ms", "1.204 s", "-45.2 µs"]);
        let fine = |ns: f64| format_duration(ns, DurationDecimals::FINE);
        assert_eq!([fine(812.0), fine(45_213.0), fine(1_234_567.0)], ["812 ns", "45.213 µs", "1.235 ms"]);
    }
}

/// `ns` since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC, proleptic Gregorian calendar).
fn utc(ns: i64) -> String {
    let ms = ns.div_euclid(1_000_000);
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days to civil date (the algorithm of Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let (h, m, sec, milli) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{sec:02}.{milli:03}")
}

#[cfg(test)]
mod utc_tests {
    use super::utc;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(utc(1_735_632_360_000_000_000), "2024-12-31 08:06:00.000");
        assert_eq!(utc(951_782_400_123_000_000), "2000-02-29 00:00:00.123");
    }
}

#[cfg(test)]
mod detail_tests {
    use super::*;

    #[test]
    fn detail_lines_break_between_items_and_keep_figures_with_their_units() {
        let mut out = String::new();
        let shares: Vec<String> = (0..12).map(|i| format!("category_{i} {}.5%", 10 + i)).collect();
        push_detail(&mut out, "  ", &format!("op shares (of 1.00 ms summed GPU time): {}", shares.join(", ")));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= LINE_COLUMNS), "{out}");
        assert!(lines[1..].iter().all(|l| l.starts_with("      category_")), "continuations 4 deeper: {out}");
        assert_eq!(
            out.replace("\n      ", " "),
            format!("  op shares (of 1.00 ms summed GPU time): {}\n", shares.join(", "))
        );

        // A long item after a short start is cut at a word, never before a unit.
        let mut out = String::new();
        let long = "first 33 left out as warm-up (detected: slower than 1.5 × the steady median of 3.74 ms)";
        push_detail(&mut out, "  ", &format!("steps: 132 found, {long}; step time median 3.74 ms"));
        assert!(out.lines().all(|l| l.chars().count() <= LINE_COLUMNS && !l.trim_start().starts_with("ms")), "{out}");
        assert!(out.starts_with("  steps: 132 found, first 33"), "{out}");
        // Text that fits stays one line.
        let mut out = String::new();
        push_detail(&mut out, "    ", "span 1.0 ms   GPU busy 0.5 ms (50.0%)");
        assert_eq!(out, "    span 1.0 ms   GPU busy 0.5 ms (50.0%)\n");
    }
}
