//! Figures for the selected time range (or the whole trace), per rank.

use egui::{Grid, RichText};

use crate::analysis::{RankFigures, analyze_window};
use crate::timeline::layout::TimelineData;
use crate::timeline::paint::format_duration;

/// Cached figures for one window.
#[derive(Debug, Default)]
pub struct RangeStats {
    /// The window the figures are for; `None` = whole trace.
    pub window_ns: Option<(i64, i64)>,
    /// Per-rank figures.
    pub ranks: Vec<RankFigures>,
    computed: bool,
}

impl RangeStats {
    /// Recomputes when the window changed.
    pub fn update(&mut self, data: &TimelineData, window_ns: Option<(i64, i64)>) {
        if self.computed && self.window_ns == window_ns {
            return;
        }
        self.window_ns = window_ns;
        self.ranks = analyze_window(&data.traces, &data.categories, window_ns);
        self.computed = true;
    }

    /// Forgets the cache (after a new load).
    pub fn reset(&mut self) {
        self.computed = false;
        self.ranks.clear();
    }
}

fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 { "–".into() } else { format!("{:.1} %", 100.0 * part as f64 / whole as f64) }
}

/// Shows the figures; returns true when the user asked to clear the range.
pub fn range_stats_ui(ui: &mut egui::Ui, data: &TimelineData, stats: &RangeStats) -> bool {
    let mut clear = false;
    ui.horizontal(|ui| match stats.window_ns {
        Some((a, b)) => {
            ui.label(format!(
                "Range {} – {} ({})",
                format_duration((a - data.t0_ns) as f64),
                format_duration((b - data.t0_ns) as f64),
                format_duration((b - a) as f64)
            ));
            clear = ui.button("whole trace").clicked();
        }
        None => {
            ui.label("Whole trace (drag on the time axis to pick a range)");
        }
    });
    ui.add_space(4.0);
    Grid::new("range_stats_grid").num_columns(6).striped(true).show(ui, |ui| {
        for heading in ["rank", "span", "GPU busy", "comm", "exposed comm", "overlap"] {
            ui.label(RichText::new(heading).strong());
        }
        ui.end_row();
        for rank in &stats.ranks {
            ui.label(&rank.label);
            ui.label(format_duration(rank.span_ns as f64));
            ui.label(format!(
                "{} ({})",
                format_duration(rank.gpu_busy_ns as f64),
                percent(rank.gpu_busy_ns, rank.span_ns)
            ));
            ui.label(format!("{} ({})", format_duration(rank.comm_ns as f64), percent(rank.comm_ns, rank.span_ns)));
            ui.label(format_duration(rank.exposed_comm_ns as f64));
            ui.label(format!("{:.1} %", rank.comm_comp_overlap_pct));
            ui.end_row();
        }
    });
    ui.add_space(6.0);
    ui.label(RichText::new("Kernel time by category").strong());
    for rank in &stats.ranks {
        let total: i64 = rank.categories.iter().map(|(_, ns)| ns).sum();
        ui.collapsing(format!("{} · {}", rank.label, format_duration(total as f64)), |ui| {
            Grid::new(("range_categories", &rank.label)).num_columns(3).show(ui, |ui| {
                for (name, ns) in &rank.categories {
                    ui.label(name);
                    ui.label(format_duration(*ns as f64));
                    ui.label(percent(*ns, total));
                    ui.end_row();
                }
            });
        });
    }
    clear
}
