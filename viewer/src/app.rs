//! The application: a toolbar (open, fit, search, legend), the timeline in the middle and a
//! side panel with details, range statistics and the summary charts.

use std::path::PathBuf;
use std::sync::Arc;

use egui::{Color32, Key, RichText};

use crate::analysis::Categories;
use crate::collectives::CollectiveIndex;
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
    /// Cached launched event of a selected API call (search is linear, so once per selection).
    flow_cache: Option<(Selected, Option<Selected>)>,
    /// The analyzer settings (rules, phase pattern) every load uses.
    categories: Categories,
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
            flow_cache: None,
            categories: Categories::builtin(),
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
        let mut app = ViewerApp::default();
        app.install(loaded);
        app
    }

    /// Starts loading `paths` in the background.
    pub fn open(&mut self, paths: Vec<PathBuf>, ctx: &egui::Context) {
        self.path_input = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ");
        self.loader = Some(Loader::start(paths, self.categories.clone(), ctx.clone()));
    }

    fn install(&mut self, loaded: Loaded) {
        self.errors.extend(loaded.errors);
        let data = Arc::new(loaded.data);
        let view = TimelineView::new(data.t0_ns, data.t1_ns);
        self.session = Some(Session { data, collectives: loaded.collectives, view, load_seconds: loaded.seconds });
        self.selected = None;
        self.flow_cache = None;
        self.search.reset();
        self.range_stats.reset();
        self.summary_stats.reset();
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
        let mut highlights = Highlights { selected: self.selected, ..Highlights::default() };
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
            if ui.button("Fit all").on_hover_text("Home").clicked() {
                self.fit_all();
            }
            if ui.button("Fit selection").on_hover_text("F").clicked() {
                self.fit_selection();
            }
            ui.separator();
            let data = self.session.as_ref().map(|s| s.data.clone());
            if let Some(found) = search_ui(ui, data.as_ref(), &mut self.search) {
                self.select_and_reveal(found);
            }
        });
        if let Some(session) = &self.session {
            ui.horizontal_wrapped(|ui| {
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
                summary_ui(ui, &session.data.categories, &self.summary_stats.ranks);
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
            let (fit_selection, fit_all) = ui.input(|i| (i.key_pressed(Key::F), i.key_pressed(Key::Home)));
            if fit_selection {
                self.fit_selection();
            }
            if fit_all {
                self.fit_all();
            }
        }
    }

    /// Draws the whole app into `ui`.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        self.poll_loader();
        self.handle_keys_and_drops(ui);
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
