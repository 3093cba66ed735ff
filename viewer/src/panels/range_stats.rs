//! Figures for the selected time range (or the whole trace), per rank.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError, channel};

use egui::{Grid, RichText};

use crate::analysis::{RankFigures, analyze_window_with_verdict};
use crate::timeline::layout::TimelineData;
use crate::timeline::paint::format_duration;

/// A time window in ns (start, end); `None` = the whole trace.
type Window = Option<(i64, i64)>;

/// What the background thread sends back: the per-rank figures and the late-rank verdict.
type WindowFigures = (Vec<RankFigures>, String);

/// Figures for one window, computed on a background thread because the analyzer walks every
/// event of every rank (seconds for ten million kernels) and the window must stay responsive.
#[derive(Debug, Default)]
pub struct RangeStats {
    /// The window the shown figures are for; `None` = whole trace.
    pub window_ns: Option<(i64, i64)>,
    /// Per-rank figures.
    pub ranks: Vec<RankFigures>,
    /// The report's late-rank verdict for the window.
    pub late_rank_verdict: String,
    computed: bool,
    pending: Option<(Window, Receiver<WindowFigures>)>,
}

impl RangeStats {
    /// Starts computing the figures of `window_ns` unless they are shown or on their way;
    /// picks up finished results. `ctx` is asked to repaint when a result arrives.
    pub fn update(&mut self, data: &Arc<TimelineData>, window_ns: Option<(i64, i64)>, ctx: &egui::Context) {
        self.poll();
        let wanted_shown = self.computed && self.window_ns == window_ns;
        let wanted_pending = self.pending.as_ref().is_some_and(|(w, _)| *w == window_ns);
        if wanted_shown || wanted_pending {
            return;
        }
        let (sender, receiver) = channel();
        let data = Arc::clone(data);
        let ctx = ctx.clone();
        std::thread::Builder::new()
            .name("viewer-range-stats".into())
            .spawn(move || {
                let figures = analyze_window_with_verdict(&data.traces, &data.categories, window_ns);
                // The receiver is gone when the user picked another range meanwhile: drop the result.
                let _ = sender.send(figures);
                ctx.request_repaint();
            })
            .expect("cannot start the range statistics thread");
        self.pending = Some((window_ns, receiver));
    }

    fn poll(&mut self) {
        let Some((window, receiver)) = &self.pending else { return };
        match receiver.try_recv() {
            Ok((ranks, verdict)) => {
                self.window_ns = *window;
                self.ranks = ranks;
                self.late_rank_verdict = verdict;
                self.computed = true;
                self.pending = None;
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => self.pending = None,
        }
    }

    /// Blocks until the figures asked for last are in (for tests and screenshots).
    pub fn wait(&mut self) {
        if let Some((window, receiver)) = self.pending.take()
            && let Ok((ranks, verdict)) = receiver.recv()
        {
            self.window_ns = window;
            self.ranks = ranks;
            self.late_rank_verdict = verdict;
            self.computed = true;
        }
    }

    /// True while a computation runs.
    pub fn is_computing(&self) -> bool {
        self.pending.is_some()
    }

    /// Forgets everything (after a new load).
    pub fn reset(&mut self) {
        *self = RangeStats::default();
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
            // On the trace clock, as `--window` takes it, and where it lies on the time axis.
            ui.label(format!(
                "Range {a}:{b} ns ({}; axis {} – {})",
                format_duration((b - a) as f64),
                format_duration((a - data.t0_ns) as f64),
                format_duration((b - data.t0_ns) as f64)
            ));
            clear = ui.button("whole trace").clicked();
        }
        None => {
            ui.label("Whole trace (drag on the time axis to pick a range)");
        }
    });
    if stats.is_computing() {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("computing…");
        });
    }
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
        let title = format!("{} · {} of kernel time", rank.label, format_duration(total as f64));
        egui::CollapsingHeader::new(title).id_salt(("range_rank", &rank.label)).default_open(true).show(ui, |ui| {
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
