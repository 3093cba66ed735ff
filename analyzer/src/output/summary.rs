//! The one-screen summary that opens `analyzer report`'s table: per rank and phase the step (or phase instance)
//! time, GPU busy time, communication transfer against waiting and the top five categories, then a verdict on
//! which rank's late arrivals kept the others waiting longest. At most [`MAX_COLUMNS`] columns, so it reads in an
//! ordinary terminal; the details follow it.

use std::fmt::Write as _;

use crate::output::render::duration;
use crate::report::{Figures, Report};

/// The widest line of the summary, in characters.
pub const MAX_COLUMNS: usize = 100;
/// Categories named per row.
const TOP_CATEGORIES: usize = 5;

fn pct(part: i64, whole: i64) -> f64 {
    if whole > 0 { 100.0 * part as f64 / whole as f64 } else { 0.0 }
}

/// Cuts a line to [`MAX_COLUMNS`] characters, ending it with `…` when cut.
fn fit(line: &str) -> String {
    if line.chars().count() <= MAX_COLUMNS {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(MAX_COLUMNS - 1).collect();
    cut.push('…');
    cut
}

/// The top categories of a set of figures with their share of the summed category time.
pub fn top_categories(figures: &Figures) -> Vec<(String, f64)> {
    let total = figures.category_total_ns();
    let mut list: Vec<(&String, &i64)> = figures.categories.iter().filter(|(_, ns)| **ns > 0).collect();
    list.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    list.into_iter().take(TOP_CATEGORIES).map(|(label, ns)| (label.clone(), pct(*ns, total))).collect()
}

fn row(out: &mut String, rank: &str, phase: &str, step_ns: Option<i64>, f: &Figures) {
    let step = step_ns.map_or("–".to_string(), duration);
    let line = format!(
        "{rank:<5} {phase:<10} {step:>10} {:>10} {:>6.1} {:>10} {:>10} {:>5}",
        duration(f.gpu_busy_ns),
        pct(f.gpu_busy_ns, f.span_ns),
        duration(f.comm_transfer_ns),
        duration(f.comm_wait_ns),
        f.late_count
    );
    let _ = writeln!(out, "{}", fit(line.trim_end()));
    // Whole percents, so that five categories fit on one line; the details give one decimal.
    let top: Vec<String> = top_categories(f)
        .iter()
        .map(|(label, share)| if *share < 1.0 { format!("{label} <1%") } else { format!("{label} {share:.0}%") })
        .collect();
    if !top.is_empty() {
        let _ = writeln!(out, "{}", fit(&format!("      top: {}", top.join(", "))));
    }
}

/// Ranks named beside the late rank in the verdict (the others are counted).
const OTHER_RANKS_NAMED: usize = 3;

/// Who kept the others waiting, in one or two lines: the rank whose late arrivals caused the most waiting of the
/// others, with how often it was last; then the next ranks likewise. A rank that is last often but only by a little
/// costs less than one that is last seldom but long, so the waiting decides, not the count.
pub fn late_rank_verdict(report: &Report) -> String {
    let matched = report.collectives.matched_instances;
    if matched == 0 {
        return if report.ranks.len() < 2 {
            "late rank: one rank only, no collective to wait in".into()
        } else {
            "late rank: no collective was matched across ranks".into()
        };
    }
    let late = &report.collectives.late_ranks;
    let all_waiting_ns: i64 = late.iter().fold(0, |sum, l| sum.saturating_add(l.caused_wait_ns));
    let Some(first) = late.first().filter(|_| all_waiting_ns > 0) else {
        return format!("late rank: none; no rank waited for another at the {matched} matched collectives");
    };
    let mut text = format!(
        "late rank: rank {}: the {} of {matched} matched collectives it arrived at last cost the others {} of \
         waiting ({:.0} % of all)",
        first.rank,
        first.arrived_last,
        duration(first.caused_wait_ns),
        pct(first.caused_wait_ns, all_waiting_ns)
    );
    // One long wait (often start-up) can be most of it: then say so, since it is not a pattern.
    if 2 * first.largest_wait_ns > first.caused_wait_ns && first.arrived_last > 1 {
        let _ = write!(text, ", {} of it at one collective", duration(first.largest_wait_ns));
    }
    for other in late.iter().skip(1).take(OTHER_RANKS_NAMED) {
        let _ = write!(
            text,
            "; rank {}: last at {}, {} ({:.0} %)",
            other.rank,
            other.arrived_last,
            duration(other.caused_wait_ns),
            pct(other.caused_wait_ns, all_waiting_ns)
        );
    }
    let unnamed = late.len().saturating_sub(1 + OTHER_RANKS_NAMED);
    if unnamed > 0 {
        let _ = write!(text, "; {unnamed} more rank(s) last at times");
    }
    text
}

/// The verdict as a block of the HTML page.
pub fn late_rank_html(report: &Report) -> String {
    format!(
        "<section class=\"verdict\" id=\"late-rank\">\n<h2>Late rank</h2>\n<p>{}</p>\n</section>\n",
        crate::output::charts::escape(&late_rank_verdict(report))
    )
}

/// The summary: a table of ranks and phases, then the late-rank verdict; every line at most [`MAX_COLUMNS`].
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", fit(&format!("summary: {} rank(s), {}", report.ranks.len(), report.inputs.join(", "))));
    let _ = writeln!(
        out,
        "{:<5} {:<10} {:>10} {:>10} {:>6} {:>10} {:>10} {:>5}",
        "rank", "phase", "step p50", "busy", "busy%", "transfer", "wait", "late"
    );
    for rank in &report.ranks {
        let step = rank.steps.as_ref().filter(|s| s.time.count > 0).map(|s| s.time.p50_ns);
        row(&mut out, &format!("r{}", rank.rank), "all", step, &rank.figures);
        // Warm-up left out: the steady state beside the whole run, and the phases of the steady state.
        if let Some(steady) = &rank.steady_state {
            row(&mut out, "", "steady", step, &steady.figures);
        }
        for phase in rank.steady_phases() {
            let instance = phase.figures.instances.as_ref().filter(|d| d.count > 0).map(|d| d.p50_ns);
            row(&mut out, "", &phase.name, instance, &phase.figures);
        }
    }
    let verdict = late_rank_verdict(report);
    // The verdict may be longer than a line: wrapped at word boundaries.
    let mut line = String::new();
    for word in verdict.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > MAX_COLUMNS {
            let _ = writeln!(out, "{line}");
            line = "  ".into();
        }
        if !line.is_empty() && !line.ends_with("  ") {
            line.push(' ');
        }
        line.push_str(word);
    }
    let _ = writeln!(out, "{}", fit(&line));
    let _ = writeln!(out, "(step p50 of a phase: its instance time; busy% of span; details below)");
    if report.ranks.iter().any(|r| r.steady_state.is_some()) {
        let _ = writeln!(out, "(steady: after the warm-up steps; the phase rows of such a rank are its steady state)");
    }
    out
}
