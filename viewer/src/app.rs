//! The application: a toolbar (open, fit, search, legend), the timeline in the middle and a
//! side panel with details, range statistics and the summary charts.

use std::path::PathBuf;
use std::sync::Arc;

use egui::{Color32, Key, RichText};

use crate::analysis::Categories;
use crate::collectives::CollectiveIndex;
use crate::critical::{Computed, CriticalPathState};
use crate::ideal::IdealState;
use crate::load::{Loaded, Loader};
use crate::panels::details::{DetailsAction, details_ui, launch_of, launched_by};
use crate::panels::range_stats::{RangeStats, range_stats_ui};
use crate::panels::search::{SearchState, search_ui};
use crate::panels::summary::summary_ui;
use crate::timeline::layout::TimelineData;
use crate::timeline::paint::category_color;
use crate::timeline::{Highlights, Selected, TimelineView, timeline_ui};

/// Which side-panel page is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideTab {
    /// The selected event.
    Details,
    /// Figures for the selected range.
    Range,
    /// Category shares per rank and phase.
    Summary,
}

/// How the app starts, from the command line: applied when the traces are in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// Show exactly this window of the trace clock, ns, instead of the region of interest.
    pub window_ns: Option<(i64, i64)>,
    /// Open this side-panel page; the range page shows the figures of the window shown.
    pub tab: Option<SideTab>,
    /// Show the critical path: of this step (`Some(Some(n))`), else of the window or the whole trace.
    pub critical_path: Option<Option<usize>>,
    /// Show the no-straggler replay: of this step (`Some(Some(n))`), else of the window or the whole trace.
    pub ideal: Option<Option<usize>>,
}

/// A loaded set of traces with what the panels derived from it.
pub struct Session {
    /// Tracks and traces.
    pub data: Arc<TimelineData>,
    /// Same collective on every rank.
    pub collectives: CollectiveIndex,
    /// What the timeline shows.
    pub view: TimelineView,
    /// Seconds the load took.
    pub load_seconds: f64,
}

/// The whole viewer state.
pub struct ViewerApp {
    /// The loaded traces, if any.
    pub session: Option<Session>,
    /// A load in progress.
    pub loader: Option<Loader>,
    /// Load errors and other messages, newest last.
    pub errors: Vec<String>,
    /// Selected event.
    pub selected: Option<Selected>,
    /// Search box.
    pub search: SearchState,
    /// Figures for the selected range.
    pub range_stats: RangeStats,
    /// Whole-trace figures for the summary page.
    pub summary_stats: RangeStats,
    /// Open side-panel page.
    pub tab: SideTab,
    /// Text of the "open path" box.
    pub path_input: String,
    /// The critical path toggle and its path.
    pub critical_path: CriticalPathState,
    /// The no-straggler replay toggle and its replay.
    pub ideal: IdealState,
    /// Cached launched event of a selected API call (search is linear, so once per selection).
    flow_cache: Option<(Selected, Option<Selected>)>,
    /// The analyzer settings (rules, phase pattern) every load uses.
    categories: Categories,
    /// What the command line asked for, applied to each load.
    start: StartOptions,
}

impl Default for ViewerApp {
    fn default() -> Self {
        ViewerApp {
            session: None,
            loader: None,
            errors: Vec::new(),
            selected: None,
            search: SearchState::default(),
            range_stats: RangeStats::default(),
            summary_stats: RangeStats::default(),
            tab: SideTab::Details,
            path_input: String::new(),
            critical_path: CriticalPathState::default(),
            ideal: IdealState::default(),
            flow_cache: None,
            categories: Categories::builtin(),
            start: StartOptions::default(),
        }
    }
}

impl ViewerApp {
    /// An app that starts loading `paths` at once, and shows every file it opens with the
    /// analyzer settings `categories`.
    pub fn new(paths: Vec<PathBuf>, categories: Categories, ctx: &egui::Context) -> ViewerApp {
        let mut app = ViewerApp { categories, ..ViewerApp::default() };
        if !paths.is_empty() {
            app.open(paths, ctx);
        }
        app
    }

    /// An app showing already-loaded traces.
    pub fn with_loaded(loaded: Loaded) -> ViewerApp {
        ViewerApp::with_loaded_and(loaded, StartOptions::default())
    }

    /// An app showing already-loaded traces as `start` asks.
    pub fn with_loaded_and(loaded: Loaded, start: StartOptions) -> ViewerApp {
        let mut app = ViewerApp::default();
        app.set_start(start);
        app.install(loaded);
        app
    }

    /// Applies `start` now (tab, critical path, replay) and to every load from now on (window).
    pub fn set_start(&mut self, start: StartOptions) {
        if let Some(tab) = start.tab {
            self.tab = tab;
        }
        if let Some(step) = start.critical_path {
            let request = crate::critical::PathRequest { step, window_ns: start.window_ns };
            // A step's path moves the view to the step, unless a window was asked for.
            self.show_critical_path(request, step.is_some() && start.window_ns.is_none());
        }
        if let Some(step) = start.ideal {
            self.ideal.enabled = true;
            self.ideal.request = crate::critical::PathRequest { step, window_ns: start.window_ns };
            // The critical path's fit moves the view to the step already; without it, the replay's step is
            // shown by fitting to it once it is in.
            if start.critical_path.is_none() && step.is_some() && start.window_ns.is_none() {
                self.ideal.fit_when_ready = true;
            }
        }
        self.start = start;
    }

    /// Starts loading `paths` in the background.
    pub fn open(&mut self, paths: Vec<PathBuf>, ctx: &egui::Context) {
        self.path_input = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ");
        self.loader = Some(Loader::start(paths, self.categories.clone(), ctx.clone()));
    }

    fn install(&mut self, loaded: Loaded) {
        self.errors.extend(loaded.errors);
        let data = Arc::new(loaded.data);
        // Open at the region of interest, not at the process start-up.
        let (start, end) = data.roi.map_or((data.t0_ns, data.t1_ns), |roi| (roi.start_ns, roi.end_ns));
        let mut view = TimelineView::new(start, end);
        if let Some((start, end)) = self.start.window_ns {
            view.show_exactly(start, end);
        }
        if self.start.tab == Some(SideTab::Range) {
            view.range_ns = Some(self.start.window_ns.unwrap_or((start, end)));
        }
        self.session = Some(Session { data, collectives: loaded.collectives, view, load_seconds: loaded.seconds });
        self.selected = None;
        self.flow_cache = None;
        self.search.reset();
        self.range_stats.reset();
        self.summary_stats.reset();
        // A path of the previous traces means nothing for these: compute it again if it is on.
        self.critical_path = self.critical_path.restarted();
        self.ideal = self.ideal.restarted();
    }

    /// Turns the critical path on for `request`; with `fit`, the view moves to the path's window when it arrives.
    pub fn show_critical_path(&mut self, request: crate::critical::PathRequest, fit: bool) {
        self.critical_path.enabled = true;
        self.critical_path.request = request;
        self.critical_path.fit_when_ready = fit;
    }

    /// Computes what the panels and the timeline show in the background and waits for it: the critical path and
    /// the figures of the open tab (for screenshots and tests, where no later frame would pick them up).
    pub fn compute_now(&mut self, ctx: &egui::Context) {
        let Some(session) = &self.session else { return };
        let data = Arc::clone(&session.data);
        self.critical_path.update(&data, ctx);
        self.critical_path.wait();
        self.ideal.update(&data, ctx);
        self.ideal.wait();
        self.apply_path_fit();
        let Some(session) = &self.session else { return };
        match self.tab {
            SideTab::Range => {
                self.range_stats.update(&data, session.view.range_ns, ctx);
                self.range_stats.wait();
            }
            SideTab::Summary => {
                self.summary_stats.update(&data, None, ctx);
                self.summary_stats.wait();
            }
            SideTab::Details => {}
        }
    }

    /// Moves the view to the critical path's (or the replay's) window once, when asked to and it is in.
    fn apply_path_fit(&mut self) {
        if self.ideal.fit_when_ready
            && let Some(replay) = self.ideal.replay()
            && let Some(session) = &mut self.session
        {
            let end = replay.start_ns + replay.measured_ns.max(replay.ideal_ns);
            session
                .view
                .fit(replay.window_ns.map_or(replay.start_ns, |w| w.0), replay.window_ns.map_or(end, |w| w.1.max(end)));
            self.ideal.fit_when_ready = false;
        }
        if !self.critical_path.fit_when_ready {
            return;
        }
        let Some(path) = self.critical_path.overlay() else { return };
        if let Some(session) = &mut self.session {
            let end = path.start_ns + path.measured_ns;
            session
                .view
                .fit(path.window_ns.map_or(path.start_ns, |w| w.0), path.window_ns.map_or(end, |w| w.1.max(end)));
            self.critical_path.fit_when_ready = false;
        }
    }

    /// Selects an event and scrolls the timeline to it.
    pub fn select_and_reveal(&mut self, selected: Selected) {
        self.selected = Some(selected);
        self.tab = SideTab::Details;
        if let Some(session) = &mut self.session {
            let (start, end) = session.data.event_span(selected.trace, selected.event);
            session.view.reveal(start, end);
        }
    }

    /// Fits the view to the selected event, else the selected range.
    pub fn fit_selection(&mut self) {
        let Some(session) = &mut self.session else { return };
        if let Some(selected) = self.selected {
            let (start, end) = session.data.event_span(selected.trace, selected.event);
            session.view.fit(start, end);
        } else if let Some((a, b)) = session.view.range_ns {
            session.view.fit(a, b);
        }
    }

    /// Fits the view to the region of interest (see [`crate::roi`]), else the whole trace.
    pub fn fit_region_of_interest(&mut self) {
        if let Some(session) = &mut self.session {
            let data = &session.data;
            let (start, end) = data.roi.map_or((data.t0_ns, data.t1_ns), |roi| (roi.start_ns, roi.end_ns));
            session.view.fit(start, end);
        }
    }

    /// Fits the view to the whole trace.
    pub fn fit_all(&mut self) {
        if let Some(session) = &mut self.session {
            let (t0, t1) = (session.data.t0_ns, session.data.t1_ns);
            session.view.fit(t0, t1);
        }
    }

    fn poll_loader(&mut self) {
        let Some(loader) = &self.loader else { return };
        if let Some(result) = loader.poll() {
            self.loader = None;
            match result {
                Ok(loaded) => self.install(loaded),
                Err(errors) => self.errors.extend(errors),
            }
        }
    }

    fn highlights(&mut self) -> Highlights {
        let mut highlights = Highlights {
            selected: self.selected,
            critical_path: self.critical_path.overlay(),
            ..Highlights::default()
        };
        let (Some(session), Some(selected)) = (&self.session, self.selected) else { return highlights };
        highlights.peers = session.collectives.peers(&selected).iter().copied().filter(|p| *p != selected).collect();
        if let Some(launch) = launch_of(&session.data, &selected) {
            highlights.flow = Some((launch, selected));
        } else {
            let launched = match self.flow_cache {
                Some((cached_for, launched)) if cached_for == selected => launched,
                _ => {
                    let launched = launched_by(&session.data, &selected);
                    self.flow_cache = Some((selected, launched));
                    launched
                }
            };
            highlights.flow = launched.map(|kernel| (selected, kernel));
        }
        highlights
    }

    fn toolbar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            if ui.button("Open…").clicked()
                && let Some(files) = rfd::FileDialog::new()
                    .add_filter("traces", &["sqlite", "json", "gz"])
                    .set_title("Open traces (one file per rank)")
                    .pick_files()
            {
                self.open(files, ui.ctx());
            }
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.path_input)
                    .hint_text("paths separated by spaces")
                    .desired_width(260.0)
                    .id_salt("path_input"),
            );
            let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(Key::Enter));
            if (ui.button("Load").clicked() || enter) && !self.path_input.trim().is_empty() {
                let paths = self.path_input.split_whitespace().map(PathBuf::from).collect();
                self.open(paths, ui.ctx());
            }
            ui.separator();
            if ui.button("Fit all").on_hover_text("Home: everything, start-up included").clicked() {
                self.fit_all();
            }
            let roi_hint = match self.session.as_ref().and_then(|s| s.data.roi) {
                Some(roi) => format!("R: the {} (where the run opened)", roi.source.describe()),
                None => "R: no phase or step ranges or GPU work, so the whole trace".to_string(),
            };
            if ui.button("Region of interest").on_hover_text(roi_hint).clicked() {
                self.fit_region_of_interest();
            }
            if ui.button("Fit selection").on_hover_text("F").clicked() {
                self.fit_selection();
            }
            ui.separator();
            self.critical_path_ui(ui);
            self.ideal_ui(ui);
            ui.separator();
            let data = self.session.as_ref().map(|s| s.data.clone());
            if let Some(found) = search_ui(ui, data.as_ref(), &mut self.search) {
                self.select_and_reveal(found);
            }
        });
        if let Some(session) = &self.session {
            ui.horizontal_wrapped(|ui| {
                // First, so that it is never wrapped away: the window shown, as `--window` takes it.
                let (start_ns, end_ns) = (session.view.start_ns.floor() as i64, session.view.end_ns.ceil() as i64);
                ui.label(format!(
                    "window {start_ns}:{end_ns} ns ({})",
                    crate::timeline::paint::format_duration((end_ns - start_ns) as f64)
                ))
                .on_hover_text("Start and end on the trace clock, as --window takes them");
                ui.separator();
                for name in session.data.categories.names() {
                    let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
                    ui.painter().rect_filled(rect, 2.0, category_color(&session.data.categories, name));
                    ui.label(name);
                }
                ui.separator();
                ui.label(
                    RichText::new(format!(
                        "{} traces · {} events · {} tracks · loaded in {:.2} s · {} items drawn",
                        session.data.traces.len(),
                        session.data.event_count,
                        session.data.tracks.len(),
                        session.load_seconds,
                        session.view.last_item_count
                    ))
                    .weak(),
                );
            });
            if let Some(path) = self.critical_path.overlay() {
                ui.label(RichText::new(path.summary()).color(crate::timeline::paint::CRITICAL_PATH_COLOR));
            } else if let Some(error) = self.critical_path.error() {
                ui.colored_label(ui.visuals().error_fg_color, format!("critical path: {error}"));
            }
            if let Some(replay) = self.ideal.replay() {
                ui.label(RichText::new(replay.summary()).color(crate::timeline::paint::IDEAL_COLOR));
            } else if let Some(error) = self.ideal.error() {
                ui.colored_label(ui.visuals().error_fg_color, format!("ideal replay: {error}"));
            }
        }
        let mut dismiss = false;
        for error in &self.errors {
            ui.horizontal(|ui| {
                ui.colored_label(ui.visuals().error_fg_color, error);
                dismiss |= ui.small_button("dismiss").clicked();
            });
        }
        if dismiss {
            self.errors.clear();
        }
    }

    /// The critical path toggle (`C`), its step, and what the path is.
    fn critical_path_ui(&mut self, ui: &mut egui::Ui) {
        computed_toggle_ui(
            ui,
            &mut self.critical_path,
            "Critical path",
            "C: the longest dependency path across ranks (analyzer critical-path): runs outlined, delays dashed, \
             hops to another rank as arrows",
        );
    }

    /// The no-straggler replay toggle (`I`) and its step.
    fn ideal_ui(&mut self, ui: &mut egui::Ui) {
        computed_toggle_ui(
            ui,
            &mut self.ideal,
            "Ideal",
            "I: the no-straggler replay (analyzer what-if --no-straggler): every GPU operation at the time it would \
             run if each rank took the typical duration, in a row under its stream",
        );
    }

    fn side_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tab, SideTab::Details, "Details");
            ui.selectable_value(&mut self.tab, SideTab::Range, "Range statistics");
            ui.selectable_value(&mut self.tab, SideTab::Summary, "Summary");
        });
        ui.separator();
        let Some(session) = &mut self.session else {
            ui.label("Open a trace: Open…, a path above, or drop files on the window.");
            return;
        };
        let mut action = None;
        egui::ScrollArea::vertical().id_salt("side_scroll").show(ui, |ui| match self.tab {
            SideTab::Details => {
                action = details_ui(ui, &session.data, &session.collectives, self.selected);
            }
            SideTab::Range => {
                self.range_stats.update(&session.data, session.view.range_ns, ui.ctx());
                if range_stats_ui(ui, &session.data, &self.range_stats) {
                    session.view.range_ns = None;
                }
            }
            SideTab::Summary => {
                self.summary_stats.update(&session.data, None, ui.ctx());
                if self.summary_stats.is_computing() {
                    ui.spinner();
                }
                summary_ui(
                    ui,
                    &session.data.categories,
                    &self.summary_stats.ranks,
                    &self.summary_stats.late_rank_verdict,
                );
            }
        });
        if let Some(DetailsAction::Select(selected)) = action {
            self.select_and_reveal(selected);
        }
    }

    fn central_ui(&mut self, ui: &mut egui::Ui) {
        if let Some(loader) = &self.loader {
            let progress = loader.progress();
            ui.vertical_centered(|ui| {
                ui.add_space(40.0);
                ui.spinner();
                let fraction = progress.files_done as f32 / progress.files_total.max(1) as f32;
                ui.add(
                    egui::ProgressBar::new(fraction)
                        .desired_width(400.0)
                        .text(format!("{} / {} files", progress.files_done, progress.files_total)),
                );
                ui.label(format!("{} · {:.1} s", progress.stage, progress.elapsed_s));
            });
            if self.session.is_none() {
                return;
            }
        }
        let highlights = self.highlights();
        let Some(session) = &mut self.session else {
            ui.centered_and_justified(|ui| {
                ui.label("Drop trace files here (nsys SQLite or Kineto JSON; several files = several ranks).");
            });
            return;
        };
        session.view.ideal = self.ideal.replay();
        let output = timeline_ui(ui, &session.data, &mut session.view, &highlights);
        if let Some(clicked) = output.clicked {
            self.selected = clicked;
            if clicked.is_some() {
                self.tab = SideTab::Details;
            }
        }
        if output.range_changed {
            self.tab = SideTab::Range;
        }
    }

    fn handle_keys_and_drops(&mut self, ui: &mut egui::Ui) {
        let dropped: Vec<PathBuf> = ui.input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).collect());
        if !dropped.is_empty() {
            self.open(dropped, ui.ctx());
        }
        if !ui.ctx().egui_wants_keyboard_input() {
            let (fit_selection, fit_all, fit_roi, toggle_path, toggle_ideal) = ui.input(|i| {
                (
                    i.key_pressed(Key::F),
                    i.key_pressed(Key::Home),
                    i.key_pressed(Key::R),
                    i.key_pressed(Key::C),
                    i.key_pressed(Key::I),
                )
            });
            if toggle_path {
                self.critical_path.enabled = !self.critical_path.enabled;
            }
            if toggle_ideal {
                self.ideal.enabled = !self.ideal.enabled;
            }
            if fit_selection {
                self.fit_selection();
            }
            if fit_all {
                self.fit_all();
            }
            if fit_roi {
                self.fit_region_of_interest();
            }
        }
    }

    /// Draws the whole app into `ui`.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        self.poll_loader();
        self.handle_keys_and_drops(ui);
        if let Some(session) = &self.session {
            let data = Arc::clone(&session.data);
            self.critical_path.update(&data, ui.ctx());
            self.ideal.update(&data, ui.ctx());
            self.apply_path_fit();
        }
        egui::Panel::top("toolbar").show(ui, |ui| self.toolbar_ui(ui));
        egui::Panel::right("side").resizable(true).default_size(420.0).show(ui, |ui| self.side_ui(ui));
        egui::CentralPanel::no_frame().show(ui, |ui| self.central_ui(ui));
        if self.loader.is_some() {
            // Keep the spinner and elapsed time moving while the loader works.
            ui.ctx().request_repaint_after(std::time::Duration::from_millis(100));
        }
        let hovering_files = ui.input(|i| !i.raw.hovered_files.is_empty());
        if hovering_files {
            let rect = ui.ctx().content_rect();
            ui.painter().rect_filled(rect, 0.0, Color32::from_black_alpha(120));
        }
    }
}

impl eframe::App for ViewerApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }
}

/// A background figure's toggle, its "of step" choice and step number (changing them fits the view to the step once
/// the figure arrives), and a spinner while it is computed.
fn computed_toggle_ui<T: Send + 'static>(ui: &mut egui::Ui, state: &mut Computed<T>, label: &str, hover: &str) {
    ui.checkbox(&mut state.enabled, label).on_hover_text(hover);
    if state.enabled {
        let mut one_step = state.request.step.is_some();
        let of_step = ui.checkbox(&mut one_step, "of step");
        if of_step.changed() {
            state.request.step = one_step.then_some(0);
            state.fit_when_ready = one_step;
        }
        if let Some(step) = &mut state.request.step
            && ui.add(egui::DragValue::new(step).range(0..=100_000)).labelled_by(of_step.id).changed()
        {
            state.fit_when_ready = true;
        }
        if state.is_computing() {
            ui.spinner();
        }
    }
}
