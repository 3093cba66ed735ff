//! The timeline: view state, input handling, and the prepare → paint split.
//!
//! Each frame, [`prepare_frame`] works out which rows are on screen and asks [`lod`] for the
//! draw items of each visible track; [`paint`] then turns that plan into shapes. Nothing in
//! a frame walks all events: rows off screen are skipped and each visible track costs a few
//! binary searches per pixel.

pub mod events;
pub mod layout;
pub mod lod;
pub mod overlays;
pub mod paint;

use std::collections::HashSet;

use egui::{Event, Key, MouseWheelUnit, Pos2, Rect, Sense, Vec2};

use layout::{EventRef, RowContent, TimelineData};
use lod::{DrawItem, LodParams, TimeToScreen};

/// Width of the label column, points.
pub const LABEL_WIDTH: f32 = 230.0;
/// Height of the time axis strip, points.
pub const AXIS_HEIGHT: f32 = 24.0;
/// Height of a track row, points.
pub const TRACK_HEIGHT: f32 = 18.0;
/// Height of a group header row, points.
pub const HEADER_HEIGHT: f32 = 18.0;
/// Height of a GPU's utilisation graph, points.
pub const UTILIZATION_HEIGHT: f32 = 24.0;
/// Height of a GPU's memory row, points.
pub const MEMORY_HEIGHT: f32 = 40.0;
/// Zoom factor per point of wheel movement: one 50-point notch zooms by e^(50·0.005) ≈ 1.28.
pub const WHEEL_ZOOM_PER_POINT: f64 = 0.005;
/// Points per wheel "line" (what most mice send); matches egui's own conversion.
pub const POINTS_PER_LINE: f32 = 50.0;
/// Zoom factor of one W press (S zooms out by its inverse).
pub const KEY_ZOOM_FACTOR: f64 = 0.8;
/// Share of the visible width one A/D press pans.
pub const KEY_PAN_FRACTION: f64 = 0.1;
/// Narrowest window the view zooms to, ns.
const MIN_WINDOW_NS: f64 = 100.0;

/// An event the user picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Selected {
    /// Trace index.
    pub trace: usize,
    /// The event.
    pub event: EventRef,
}

/// What the user looks at: the time window, vertical scroll, collapsed groups, selections.
#[derive(Debug, Clone)]
pub struct TimelineView {
    /// Time at the left edge, absolute ns.
    pub start_ns: f64,
    /// Time at the right edge, absolute ns.
    pub end_ns: f64,
    /// Vertical scroll offset of the rows, points.
    pub scroll_y: f32,
    /// Ids of collapsed headers.
    pub collapsed: HashSet<u64>,
    /// Folding thresholds.
    pub lod: LodParams,
    /// Time range picked by dragging on the axis, absolute ns.
    pub range_ns: Option<(i64, i64)>,
    /// Time where a range drag started.
    range_drag_origin_ns: Option<f64>,
    /// Width of the plot area in the last frame, points (used by fit and key handling).
    pub last_plot_width: f32,
    /// Draw items in the last frame.
    pub last_item_count: usize,
    /// Screen rectangle of the event area in the last frame (tests aim clicks with it).
    pub last_plot_rect: Rect,
    /// The no-straggler replay to draw in a row under each stream track that has work in it (the app sets it
    /// while the replay is on and computed).
    pub ideal: Option<std::sync::Arc<overlays::IdealReplay>>,
}

impl TimelineView {
    /// A view showing `[start_ns, end_ns]`.
    pub fn new(start_ns: i64, end_ns: i64) -> TimelineView {
        let mut view = TimelineView {
            start_ns: 0.0,
            end_ns: 1.0,
            scroll_y: 0.0,
            collapsed: HashSet::new(),
            lod: LodParams::default(),
            range_ns: None,
            range_drag_origin_ns: None,
            last_plot_width: 800.0,
            last_item_count: 0,
            last_plot_rect: Rect::NOTHING,
            ideal: None,
        };
        view.fit(start_ns, end_ns);
        view
    }

    /// Shows `[start_ns, end_ns]` with a 2 % margin either side.
    pub fn fit(&mut self, start_ns: i64, end_ns: i64) {
        let span = ((end_ns - start_ns) as f64).max(MIN_WINDOW_NS);
        let margin = span * 0.02;
        self.start_ns = start_ns as f64 - margin;
        self.end_ns = start_ns as f64 + span + margin;
    }

    /// Visible duration, ns.
    pub fn span_ns(&self) -> f64 {
        self.end_ns - self.start_ns
    }

    /// Zooms by `factor` (< 1 zooms in) keeping the time at `anchor_fraction` of the width fixed.
    pub fn zoom(&mut self, factor: f64, anchor_fraction: f64) {
        let span = self.span_ns();
        let new_span = (span * factor).max(MIN_WINDOW_NS);
        let anchor = self.start_ns + span * anchor_fraction;
        self.start_ns = anchor - new_span * anchor_fraction;
        self.end_ns = self.start_ns + new_span;
    }

    /// Moves the window by `delta_ns`.
    pub fn pan(&mut self, delta_ns: f64) {
        self.start_ns += delta_ns;
        self.end_ns += delta_ns;
    }

    /// Shows exactly `[start_ns, end_ns]`, without a margin (a window asked for by number).
    pub fn show_exactly(&mut self, start_ns: i64, end_ns: i64) {
        self.start_ns = start_ns as f64;
        self.end_ns = start_ns as f64 + ((end_ns - start_ns) as f64).max(MIN_WINDOW_NS);
    }

    /// Centres the view on `[start_ns, end_ns]` without changing the zoom, unless it does not fit.
    pub fn reveal(&mut self, start_ns: i64, end_ns: i64) {
        let span = self.span_ns();
        if ((end_ns - start_ns) as f64) > span * 0.8 {
            self.fit(start_ns, end_ns);
        } else {
            let centre = (start_ns + end_ns) as f64 / 2.0;
            self.start_ns = centre - span / 2.0;
            self.end_ns = centre + span / 2.0;
        }
    }

    /// The time → screen mapping for a plot `width_px` wide.
    pub fn to_screen(&self, width_px: f32) -> TimeToScreen {
        let width = width_px.max(1.0);
        TimeToScreen { start_ns: self.start_ns, ns_per_px: self.span_ns() / f64::from(width), width_px: width }
    }
}

/// A row placed on screen.
#[derive(Debug, Clone, Copy)]
pub struct PlacedRow {
    /// Index into [`TimelineData::rows`].
    pub row: usize,
    /// Top, relative to the top of the rows area, after scrolling.
    pub y: f32,
    /// Height.
    pub height: f32,
}

/// Screen y of the vertical centre of `track`, as laid out in the last frame; `None` when it
/// is collapsed away.
pub fn track_center_y(data: &TimelineData, view: &TimelineView, track: usize) -> Option<f32> {
    let row = data.rows.iter().position(|r| matches!(r.content, RowContent::Track(t) if t == track))?;
    row_center_y(data, view, row)
}

/// Screen y of the vertical centre of row `row` (of [`TimelineData::rows`]), as laid out in the last frame; `None`
/// when it is collapsed away.
pub fn row_center_y(data: &TimelineData, view: &TimelineView, row: usize) -> Option<f32> {
    let mut y = view.last_plot_rect.top() - view.scroll_y;
    for (visible, height) in visible_rows(data, view) {
        if visible == row {
            return Some(y + height / 2.0);
        }
        y += height;
    }
    None
}

/// What one frame draws.
#[derive(Debug, Default)]
pub struct FramePlan {
    /// Rows that intersect the rows area.
    pub rows: Vec<PlacedRow>,
    /// Draw items, with the index of the row (in `rows`) they belong to.
    pub items: Vec<(u32, DrawItem)>,
    /// Height of all expanded rows together.
    pub content_height: f32,
}

/// Rows not hidden inside a collapsed group (nor replay rows without a replay to show), with their heights.
fn visible_rows(data: &TimelineData, view: &TimelineView) -> Vec<(usize, f32)> {
    let collapsed = &view.collapsed;
    let mut out = Vec::with_capacity(data.rows.len());
    let mut hidden_below: Option<u8> = None;
    for (index, row) in data.rows.iter().enumerate() {
        if let Some(level) = hidden_below {
            if row.indent > level {
                continue;
            }
            hidden_below = None;
        }
        match &row.content {
            RowContent::Header { id, .. } => {
                out.push((index, HEADER_HEIGHT));
                if collapsed.contains(id) {
                    hidden_below = Some(row.indent);
                }
            }
            RowContent::Track(_) => out.push((index, TRACK_HEIGHT)),
            RowContent::Utilization(_) => out.push((index, UTILIZATION_HEIGHT)),
            RowContent::Memory(_) => out.push((index, MEMORY_HEIGHT)),
            RowContent::Ideal(track) if view.ideal.as_ref().is_some_and(|r| r.rows.contains_key(track)) => {
                out.push((index, TRACK_HEIGHT));
            }
            RowContent::Ideal(_) => {}
        }
    }
    out
}

/// Works out rows and draw items for a plot area of `plot_size` (points, axis excluded).
pub fn prepare_frame(data: &TimelineData, view: &TimelineView, plot_size: Vec2) -> FramePlan {
    let screen = view.to_screen(plot_size.x);
    let mut plan = FramePlan::default();
    let mut y = -view.scroll_y;
    let mut jobs: Vec<(u32, usize)> = Vec::new();
    for (row, height) in visible_rows(data, view) {
        let top = y;
        y += height;
        if top + height < 0.0 || top > plot_size.y {
            continue;
        }
        let placed_index = plan.rows.len() as u32;
        plan.rows.push(PlacedRow { row, y: top, height });
        if let RowContent::Track(track) = data.rows[row].content {
            jobs.push((placed_index, track));
        }
    }
    plan.content_height = y + view.scroll_y;

    let mut scratch = Vec::new();
    for &(placed_index, track) in &jobs {
        scratch.clear();
        lod::prepare_track(&data.tracks[track], &screen, &view.lod, &mut scratch);
        plan.items.extend(scratch.iter().map(|item| (placed_index, *item)));
    }
    // Folding runs on this thread: on a quiet 32-core machine, splitting tracks over threads
    // made 10M kernels at fit-all slower (p95 2.6 ms against 1.8 ms), thread starts costing
    // more than the folding itself.
    plan
}

/// What the timeline reports back to the app after a frame.
#[derive(Debug, Default, Clone, Copy)]
pub struct TimelineOutput {
    /// The user clicked on an event (Some) or on empty space (None inside Some).
    pub clicked: Option<Option<Selected>>,
    /// The user finished dragging a range on the axis.
    pub range_changed: bool,
}

/// Things other panels ask the timeline to mark.
#[derive(Debug, Default, Clone)]
pub struct Highlights {
    /// The selected event.
    pub selected: Option<Selected>,
    /// Events to outline (the same collective on other ranks, search matches).
    pub peers: Vec<Selected>,
    /// A launch → kernel arrow: (API call, kernel or memop).
    pub flow: Option<(Selected, Selected)>,
    /// The critical path to outline.
    pub critical_path: Option<std::sync::Arc<overlays::PathOverlay>>,
}

/// Converts one wheel event into points.
fn wheel_points(unit: MouseWheelUnit, delta: Vec2, page_height: f32) -> Vec2 {
    match unit {
        MouseWheelUnit::Point => delta,
        MouseWheelUnit::Line => delta * POINTS_PER_LINE,
        MouseWheelUnit::Page => delta * page_height,
    }
}

/// Draws the timeline into the rest of `ui` and handles its input.
pub fn timeline_ui(
    ui: &mut egui::Ui,
    data: &TimelineData,
    view: &mut TimelineView,
    highlights: &Highlights,
) -> TimelineOutput {
    let mut output = TimelineOutput::default();
    let rect = ui.available_rect_before_wrap();
    let response = ui.allocate_rect(rect, Sense::click_and_drag());
    let axis_rect = Rect::from_min_max(
        Pos2::new(rect.left() + LABEL_WIDTH, rect.top()),
        Pos2::new(rect.right(), rect.top() + AXIS_HEIGHT),
    );
    let rows_rect = Rect::from_min_max(Pos2::new(rect.left(), rect.top() + AXIS_HEIGHT), rect.max);
    let plot_rect = Rect::from_min_max(Pos2::new(rect.left() + LABEL_WIDTH, rows_rect.top()), rect.max);
    let areas = Areas { axis_rect, rows_rect, plot_rect };
    view.last_plot_width = plot_rect.width();
    view.last_plot_rect = plot_rect;
    let hover = response.hover_pos();

    wheel_input(ui, view, &areas, hover);
    key_input(ui, view, &areas, hover);
    if drag_input(ui, &response, view, &areas) {
        output.range_changed = true;
    }

    let plan = prepare_frame(data, view, plot_rect.size());
    view.scroll_y = view.scroll_y.clamp(0.0, (plan.content_height - plot_rect.height() + TRACK_HEIGHT).max(0.0));
    view.last_item_count = plan.items.len();
    if response.clicked()
        && let Some(pos) = response.interact_pointer_pos()
    {
        output.clicked = click_input(data, view, &plan, &areas, pos);
    }

    paint::paint_timeline(ui, data, view, &plan, highlights, rect, axis_rect, rows_rect, plot_rect, hover);
    tooltip_ui(data, view, &plan, &areas, &response, hover);
    output
}

/// The parts of the timeline widget: the time axis, the rows (labels and events), the events only.
struct Areas {
    axis_rect: Rect,
    rows_rect: Rect,
    plot_rect: Rect,
}

impl Areas {
    /// Width of the events area, points (at least 1).
    fn plot_width(&self) -> f64 {
        f64::from(self.plot_rect.width().max(1.0))
    }
}

/// Wheel: zoom around the pointer; with shift, scroll rows; sideways wheel pans.
fn wheel_input(ui: &egui::Ui, view: &mut TimelineView, areas: &Areas, hover: Option<Pos2>) {
    let width = areas.plot_width();
    if let Some(pos) = hover {
        let events = ui.input(|i| i.events.clone());
        for event in events {
            if let Event::MouseWheel { unit, delta, modifiers, .. } = event {
                let points = wheel_points(unit, delta, areas.rows_rect.height());
                if modifiers.shift {
                    view.scroll_y -= points.y + points.x;
                } else {
                    if points.x != 0.0 {
                        view.pan(-f64::from(points.x) * view.span_ns() / width);
                    }
                    if points.y != 0.0 {
                        let anchor = (f64::from(pos.x - areas.plot_rect.left()) / width).clamp(0.0, 1.0);
                        view.zoom((-f64::from(points.y) * WHEEL_ZOOM_PER_POINT).exp(), anchor);
                    }
                }
            }
        }
    }
}

/// Keys: W/S zoom, A/D pan (F and Home are the app's).
fn key_input(ui: &egui::Ui, view: &mut TimelineView, areas: &Areas, hover: Option<Pos2>) {
    let width = areas.plot_width();
    if !ui.ctx().egui_wants_keyboard_input() {
        let anchor = hover
            .filter(|p| areas.plot_rect.contains(*p))
            .map_or(0.5, |p| (f64::from(p.x - areas.plot_rect.left()) / width).clamp(0.0, 1.0));
        let (zoom_in, zoom_out, left, right) =
            ui.input(|i| (i.num_presses(Key::W), i.num_presses(Key::S), i.num_presses(Key::A), i.num_presses(Key::D)));
        for _ in 0..zoom_in {
            view.zoom(KEY_ZOOM_FACTOR, anchor);
        }
        for _ in 0..zoom_out {
            view.zoom(1.0 / KEY_ZOOM_FACTOR, anchor);
        }
        let pan = (right as f64 - left as f64) * KEY_PAN_FRACTION * view.span_ns();
        if pan != 0.0 {
            view.pan(pan);
        }
    }
}

/// Dragging: on the axis selects a range; elsewhere pans (both directions). True when a range
/// selection just ended.
fn drag_input(ui: &egui::Ui, response: &egui::Response, view: &mut TimelineView, areas: &Areas) -> bool {
    let width = areas.plot_width();
    let press_origin = ui.input(|i| i.pointer.press_origin());
    let drag_on_axis = press_origin.is_some_and(|p| areas.axis_rect.contains(p));
    if response.dragged() {
        if drag_on_axis {
            if let Some(pos) = response.interact_pointer_pos() {
                let screen = view.to_screen(areas.plot_rect.width());
                let origin = *view
                    .range_drag_origin_ns
                    .get_or_insert_with(|| screen.t(press_origin.unwrap_or(pos).x - areas.plot_rect.left()));
                let here = screen.t(pos.x - areas.plot_rect.left());
                let (a, b) = if here < origin { (here, origin) } else { (origin, here) };
                view.range_ns = Some((a.round() as i64, b.round() as i64));
            }
        } else {
            let delta = response.drag_delta();
            view.pan(-f64::from(delta.x) * view.span_ns() / width);
            view.scroll_y -= delta.y;
        }
    }
    response.drag_stopped() && view.range_drag_origin_ns.take().is_some()
}

/// A click at `pos`: a header toggles its group; in the plot, the event under it (`Some(None)`:
/// a click on nothing, which clears the selection).
fn click_input(
    data: &TimelineData,
    view: &mut TimelineView,
    plan: &FramePlan,
    areas: &Areas,
    pos: Pos2,
) -> Option<Option<Selected>> {
    let row_at = plan
        .rows
        .iter()
        .find(|r| pos.y >= areas.rows_rect.top() + r.y && pos.y < areas.rows_rect.top() + r.y + r.height);
    if let Some(placed) = row_at {
        match &data.rows[placed.row].content {
            RowContent::Header { id, .. } => {
                if !view.collapsed.remove(id) {
                    view.collapsed.insert(*id);
                }
            }
            RowContent::Track(track_index) if areas.plot_rect.contains(pos) => {
                let screen = view.to_screen(areas.plot_rect.width());
                let t = screen.t(pos.x - areas.plot_rect.left());
                let tolerance = (3.0 * screen.ns_per_px) as i64;
                let track = &data.tracks[*track_index];
                let picked = track
                    .event_at(t.round() as i64, tolerance)
                    .map(|i| Selected { trace: track.trace, event: track.events[i] });
                return Some(picked);
            }
            RowContent::Track(_) | RowContent::Utilization(_) | RowContent::Ideal(_) | RowContent::Memory(_) => {}
        }
    } else if areas.plot_rect.contains(pos) {
        return Some(None);
    }
    None
}

/// Tooltip: what is under the pointer, how many events a folded block holds, how busy a GPU was, how much memory it
/// had in use, or an operation's replayed time against its measured one.
fn tooltip_ui(
    data: &TimelineData,
    view: &TimelineView,
    plan: &FramePlan,
    areas: &Areas,
    response: &egui::Response,
    hover: Option<Pos2>,
) {
    let Some(pos) = hover.filter(|p| areas.plot_rect.contains(*p)) else { return };
    if response.dragged() {
        return;
    }
    let Some(placed) = plan
        .rows
        .iter()
        .find(|r| pos.y >= areas.rows_rect.top() + r.y && pos.y < areas.rows_rect.top() + r.y + r.height)
    else {
        return;
    };
    match data.rows[placed.row].content {
        RowContent::Track(track_index) => {
            let placed_index = plan.rows.iter().position(|r| r.row == placed.row).unwrap_or(0) as u32;
            let x = pos.x - areas.plot_rect.left();
            let item =
                plan.items.iter().find(|(row, item)| *row == placed_index && item.x0 <= x + 1.0 && item.x1 >= x - 1.0);
            if let Some((_, item)) = item {
                let trace = data.tracks[track_index].trace;
                let (start, end) = data.event_span(trace, item.event);
                let name = data.event_name(trace, item.event).to_owned();
                let count = item.count;
                response.clone().on_hover_ui_at_pointer(|ui| {
                    if count > 1 {
                        ui.label(format!("{count} events, first: {name}"));
                        ui.label("zoom in to see them one by one");
                    } else {
                        ui.label(egui::RichText::new(name).strong());
                        ui.label(paint::format_duration((end - start) as f64));
                    }
                });
            }
        }
        RowContent::Utilization(index) => {
            let screen = view.to_screen(areas.plot_rect.width());
            let column = (pos.x - areas.plot_rect.left()).floor();
            let (from, to) = (screen.t(column), screen.t(column + 1.0));
            let busy = data.utilization[index].busy_ns(from, to);
            response.clone().on_hover_ui_at_pointer(|ui| {
                ui.label(format!("GPU busy {:.0} % of this column", 100.0 * busy / (to - from)));
                ui.label(format!("{} busy of {}", paint::format_duration(busy), paint::format_duration(to - from)));
            });
        }
        RowContent::Memory(index) => {
            let screen = view.to_screen(areas.plot_rect.width());
            let t_ns = screen.t(pos.x - areas.plot_rect.left()).floor() as i64;
            if let Some(text) = data.memory[index].hover_text(t_ns, data.t0_ns) {
                response.clone().on_hover_ui_at_pointer(|ui| {
                    ui.label(text);
                });
            }
        }
        RowContent::Ideal(track) => {
            let Some(ops) = view.ideal.as_ref().and_then(|replay| replay.rows.get(&track)) else { return };
            let screen = view.to_screen(areas.plot_rect.width());
            let x = pos.x - areas.plot_rect.left();
            let (from, to) = (screen.t(x - 1.0) as i64, screen.t(x + 1.0).ceil() as i64);
            // The operations run one after another on a stream in the replay: the first ending at the pointer.
            let first = ops.partition_point(|o| o.end_ns < from);
            let Some(op) = ops.get(first).filter(|o| o.start_ns <= to) else { return };
            let name = op.event.map_or("CUDA graph", |event| data.event_name(op.trace, event)).to_owned();
            let measured = op.event.map(|event| data.event_span(op.trace, event));
            let replayed_ns = (op.end_ns - op.start_ns) as f64;
            response.clone().on_hover_ui_at_pointer(|ui| {
                ui.label(egui::RichText::new(name).strong());
                ui.label(format!("ideal {}", paint::format_duration(replayed_ns)));
                if let Some((start, end)) = measured {
                    let shift_ns = start - op.start_ns;
                    let when = if shift_ns >= 0 { "later" } else { "earlier" };
                    ui.label(format!(
                        "measured {}, starting {} {when}",
                        paint::format_duration((end - start) as f64),
                        paint::format_duration(shift_ns.unsigned_abs() as f64)
                    ));
                }
            });
        }
        RowContent::Header { .. } => {}
    }
}
