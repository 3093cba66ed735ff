//! Painting a prepared frame: row backgrounds and labels, event rectangles (one mesh for all
//! of them, which tessellates in a single pass), names inside events wide enough to hold
//! them, the time axis, the selected range, highlights and the launch → kernel arrow.

use egui::epaint::text::{LayoutJob, TextFormat, TextWrapping};
use egui::{Align2, Color32, FontId, Mesh, Pos2, Rect, Shape, Stroke, Vec2};

use super::events::{EventKindInfo, dispatch};
use super::layout::{EventKind, EventRef, RowContent, TimelineData};
use super::lod::DrawItem;
use super::{FramePlan, Highlights, Selected, TimelineView};
use shardscope_analyzer::output::render::{self, DurationDecimals};

use std::collections::HashMap;

use super::overlays::{IdealReplay, PathOverlay};
use crate::analysis::Categories;
use crate::memory::{MemoryCounter, format_bytes};
use crate::utilization::GpuBusy;

/// Events narrower than this get no text: a few characters plus an ellipsis need about 30 points.
const MIN_TEXT_WIDTH: f32 = 30.0;
/// Colours for categories the rules file gives none (Tableau 10, readable on a dark background).
pub(crate) const PALETTE: [Color32; 10] = [
    Color32::from_rgb(0x4e, 0x79, 0xa7),
    Color32::from_rgb(0xf2, 0x8e, 0x2b),
    Color32::from_rgb(0xe1, 0x57, 0x59),
    Color32::from_rgb(0x76, 0xb7, 0xb2),
    Color32::from_rgb(0x59, 0xa1, 0x4f),
    Color32::from_rgb(0xed, 0xc9, 0x48),
    Color32::from_rgb(0xb0, 0x7a, 0xa1),
    Color32::from_rgb(0xff, 0x9d, 0xa7),
    Color32::from_rgb(0x9c, 0x75, 0x5f),
    Color32::from_rgb(0xba, 0xb0, 0xac),
];

/// Colours of NVTX and annotation ranges: dark, muted hues, so that a range never passes for a kernel of some op
/// category (each is at least 20 CIE76 units from every colour of the built-in rules and of [`PALETTE`]).
pub const RANGE_PALETTE: [Color32; 10] = [
    Color32::from_rgb(0x6b, 0x39, 0x30),
    Color32::from_rgb(0x6b, 0x5c, 0x30),
    Color32::from_rgb(0x56, 0x6b, 0x30),
    Color32::from_rgb(0x33, 0x6b, 0x30),
    Color32::from_rgb(0x30, 0x6b, 0x51),
    Color32::from_rgb(0x30, 0x62, 0x6b),
    Color32::from_rgb(0x30, 0x3f, 0x6b),
    Color32::from_rgb(0x45, 0x30, 0x6b),
    Color32::from_rgb(0x68, 0x30, 0x6b),
    Color32::from_rgb(0x6b, 0x30, 0x4b),
];

/// The colour of a range: its name's FNV-1a hash picks one of [`RANGE_PALETTE`], so the same name has the same
/// colour on every rank and in every file, whatever ids the files gave their strings.
pub fn range_color(name: &str) -> Color32 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    RANGE_PALETTE[(hash % RANGE_PALETTE.len() as u64) as usize]
}

/// Black text on light fills, white on dark ones.
fn text_color_on(fill: Color32) -> Color32 {
    let luma = 0.299 * f32::from(fill.r()) + 0.587 * f32::from(fill.g()) + 0.114 * f32::from(fill.b());
    if luma > 110.0 { Color32::BLACK } else { Color32::WHITE }
}

/// The colour of an op category or report label (`comm.<type>`, `wait.<type>`): the analyzer's one rule
/// ([`shardscope_analyzer::output::colors`]), so the timeline, the Summary tab and the report's charts agree.
pub fn category_color(categories: &Categories, name: &str) -> Color32 {
    let [r, g, b] = shardscope_analyzer::output::colors::label_color(categories.classifier(), name);
    Color32::from_rgb(r, g, b)
}

/// The colour of a collective's waiting part, from the colour of the kernel (the analyzer's rule, as `wait.<type>`).
fn waiting_color(color: Color32) -> Color32 {
    let [r, g, b] = shardscope_analyzer::output::colors::waiting_color([color.r(), color.g(), color.b()]);
    Color32::from_rgba_premultiplied(r, g, b, color.a())
}

/// The fill colour of an event.
pub fn event_color(data: &TimelineData, trace: usize, event: EventRef) -> Color32 {
    dispatch!(event.kind(), Info => Info::color(data, trace, event.index()))
}

/// A duration as the viewer shows it: the analyzer's formatter with three decimals in every unit.
pub fn format_duration(ns: f64) -> String {
    render::format_duration(ns, DurationDecimals::FINE)
}

/// A tick label: as many decimals as the tick step needs.
fn format_tick(ns: f64, step_ns: f64) -> String {
    // A unit once the step is a tenth of it, so labels read 2.5 ms rather than 2500 µs.
    let (unit, scale) = if step_ns >= 1e8 {
        ("s", 1e9)
    } else if step_ns >= 1e5 {
        ("ms", 1e6)
    } else if step_ns >= 1e2 {
        ("µs", 1e3)
    } else {
        ("ns", 1.0)
    };
    let step = step_ns / scale;
    let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
    // Round before formatting so the tick at the origin reads 0, not -0.
    let value = (ns / step_ns).round() * step;
    format!("{:.*} {unit}", decimals, if value == 0.0 { 0.0 } else { value })
}

/// Tick spacing: the smallest 1-2-5 × 10^k step at least `min_ns`.
pub fn tick_step(min_ns: f64) -> f64 {
    let exponent = min_ns.max(1.0).log10().floor();
    let base = 10f64.powf(exponent);
    for multiple in [1.0, 2.0, 5.0, 10.0] {
        if base * multiple >= min_ns {
            return base * multiple;
        }
    }
    base * 10.0
}

fn elided_text(painter: &egui::Painter, text: &str, width: f32, color: Color32) -> std::sync::Arc<egui::Galley> {
    let mut job = LayoutJob::single_section(text.to_owned(), TextFormat::simple(FontId::proportional(11.0), color));
    job.wrap = TextWrapping { max_width: width, max_rows: 1, break_anywhere: true, overflow_character: Some('…') };
    painter.layout_job(job)
}

/// For a single collective kernel that waited for another rank: the share of its duration spent waiting.
fn wait_fraction(data: &TimelineData, trace: usize, item: &DrawItem) -> Option<f32> {
    if item.count != 1 || item.event.kind() != EventKind::Kernel {
        return None;
    }
    let index = item.event.index();
    let wait_ns = *data.collective_wait_ns.get(&(trace, index as u32))?;
    let duration_ns = data.traces[trace].kernels[index].duration_ns();
    (duration_ns > 0).then(|| (wait_ns as f64 / duration_ns as f64) as f32)
}

/// The widget being painted: its painter and visuals, the whole rectangle and its parts.
struct Canvas<'a> {
    painter: egui::Painter,
    visuals: &'a egui::Visuals,
    /// The whole widget.
    rect: Rect,
    /// The time axis along the top.
    axis_rect: Rect,
    /// Labels and events, below the axis.
    rows_rect: Rect,
    /// Events only: right of the labels.
    plot_rect: Rect,
}

/// Paints everything `plan` says; `rect` is the whole widget. One step per layer, back to front.
#[allow(clippy::too_many_arguments)]
pub fn paint_timeline(
    ui: &egui::Ui,
    data: &TimelineData,
    view: &TimelineView,
    plan: &FramePlan,
    highlights: &Highlights,
    rect: Rect,
    axis_rect: Rect,
    rows_rect: Rect,
    plot_rect: Rect,
    hover: Option<Pos2>,
) {
    let c = Canvas { painter: ui.painter_at(rect), visuals: ui.visuals(), rect, axis_rect, rows_rect, plot_rect };
    c.painter.rect_filled(rect, 0.0, c.visuals.extreme_bg_color);
    paint_rows(&c, data, view, plan);
    paint_utilization(&c, data, view, plan);
    paint_memory(&c, data, view, plan);
    paint_events(&c, data, plan);
    if let Some(replay) = &view.ideal {
        paint_ideal(&c, data, view, plan, replay);
    }
    if let Some(path) = &highlights.critical_path {
        paint_critical_path(&c, data, view, path);
    }
    paint_highlights(&c, data, view, plan, highlights);
    paint_selected_range(&c, view);
    paint_time_axis(&c, data, view);
    paint_scroll_thumb(&c, view, plan);
    paint_hover_line(&c, hover);
}

/// Row backgrounds and labels: headers with their fold triangle, tracks with their name.
fn paint_rows(c: &Canvas, data: &TimelineData, view: &TimelineView, plan: &FramePlan) {
    let text_color = c.visuals.text_color();
    let strong_text = c.visuals.strong_text_color();
    let rows_painter = c.painter.with_clip_rect(c.rows_rect);
    for (i, placed) in plan.rows.iter().enumerate() {
        let top = c.rows_rect.top() + placed.y;
        let row_rect = Rect::from_min_size(Pos2::new(c.rect.left(), top), Vec2::new(c.rect.width(), placed.height));
        let row = &data.rows[placed.row];
        let indent = f32::from(row.indent) * 12.0 + 4.0;
        match &row.content {
            RowContent::Header { id, label } => {
                rows_painter.rect_filled(row_rect, 0.0, c.visuals.faint_bg_color.gamma_multiply(2.0));
                // A drawn triangle rather than a glyph: the default fonts have no arrows.
                let centre = Pos2::new(c.rect.left() + indent + 4.0, top + placed.height / 2.0);
                let points = if view.collapsed.contains(id) {
                    vec![centre + Vec2::new(-3.0, -4.0), centre + Vec2::new(3.0, 0.0), centre + Vec2::new(-3.0, 4.0)]
                } else {
                    vec![centre + Vec2::new(-4.0, -3.0), centre + Vec2::new(4.0, -3.0), centre + Vec2::new(0.0, 3.0)]
                };
                rows_painter.add(Shape::convex_polygon(points, strong_text, Stroke::NONE));
                rows_painter.text(
                    Pos2::new(c.rect.left() + indent + 12.0, top + placed.height / 2.0),
                    Align2::LEFT_CENTER,
                    label,
                    FontId::proportional(12.0),
                    strong_text,
                );
            }
            RowContent::Track(track) => {
                if i % 2 == 0 {
                    rows_painter.rect_filled(row_rect, 0.0, c.visuals.faint_bg_color);
                }
                let label_rect = Rect::from_min_max(
                    Pos2::new(c.rect.left() + indent + 12.0, top),
                    Pos2::new(c.rect.left() + super::LABEL_WIDTH - 4.0, top + placed.height),
                );
                let galley = elided_text(&rows_painter, &data.tracks[*track].label, label_rect.width(), text_color);
                rows_painter.galley(
                    Pos2::new(label_rect.left(), top + (placed.height - galley.size().y) / 2.0),
                    galley,
                    text_color,
                );
            }
            RowContent::Ideal(_) => {
                rows_painter.rect_filled(row_rect, 0.0, IDEAL_COLOR.gamma_multiply(0.08));
                rows_painter.text(
                    Pos2::new(c.rect.left() + indent + 12.0, top + placed.height / 2.0),
                    Align2::LEFT_CENTER,
                    IDEAL_LABEL,
                    FontId::proportional(11.0),
                    IDEAL_COLOR,
                );
            }
            RowContent::Memory(index) => {
                rows_painter.rect_filled(row_rect, 0.0, c.visuals.faint_bg_color.gamma_multiply(0.5));
                memory_label(
                    &rows_painter,
                    &data.memory[*index],
                    Pos2::new(c.rect.left() + indent + 12.0, top),
                    text_color,
                );
            }
            RowContent::Utilization(index) => {
                rows_painter.rect_filled(row_rect, 0.0, c.visuals.faint_bg_color.gamma_multiply(0.5));
                rows_painter.text(
                    Pos2::new(c.rect.left() + indent + 12.0, top + placed.height / 2.0),
                    Align2::LEFT_CENTER,
                    utilization_label(&data.utilization[*index], view),
                    FontId::proportional(11.0),
                    text_color,
                );
            }
        }
    }
}

/// Colour of the utilisation graphs: a neutral grey, apart from every category colour.
const UTILIZATION_COLOR: Color32 = Color32::from_rgb(0xb8, 0xc0, 0xc8);

/// `GPU busy 63.2 %`: the GPU's busy share of the part of the visible window within its span.
fn utilization_label(busy: &GpuBusy, view: &TimelineView) -> String {
    let Some((first, last)) = busy.span_ns else { return "GPU busy".into() };
    let from = view.start_ns.max(first as f64);
    let to = view.end_ns.min(last as f64);
    if to <= from {
        return "GPU busy".into();
    }
    format!("GPU busy {:.1} % in view", 100.0 * busy.busy_ns(from, to) / (to - from))
}

/// Utilisation graphs: per point column, a bar as high as the GPU's busy fraction of that column's time.
fn paint_utilization(c: &Canvas, data: &TimelineData, view: &TimelineView, plan: &FramePlan) {
    let screen = view.to_screen(c.plot_rect.width());
    let columns = c.plot_rect.width().max(0.0).ceil() as usize;
    let mut mesh = Mesh::default();
    for placed in &plan.rows {
        let RowContent::Utilization(index) = data.rows[placed.row].content else { continue };
        let bottom = c.rows_rect.top() + placed.y + placed.height - 1.0;
        let height = placed.height - 3.0;
        let fractions = data.utilization[index].fractions(screen.start_ns, screen.ns_per_px, columns);
        for (column, fraction) in fractions.into_iter().enumerate() {
            if fraction > 0.0 {
                let x = c.plot_rect.left() + column as f32;
                // At least a hairline, so that a short kernel alone in its column still shows.
                let top = bottom - (height * fraction).max(1.0);
                mesh.add_colored_rect(
                    Rect::from_min_max(Pos2::new(x, top), Pos2::new(x + 1.0, bottom)),
                    UTILIZATION_COLOR,
                );
            }
        }
    }
    c.painter.with_clip_rect(c.plot_rect).add(Shape::mesh(mesh));
}

/// Colours of a memory row's series, in the order [`MemoryCounter::series`] has them by label: CUDA-level bytes,
/// the allocator's allocated and reserved bytes.
pub const MEMORY_COLORS: [(&str, Color32); 3] = [
    ("CUDA", Color32::from_rgb(0x4f, 0xc3, 0xf7)),
    ("allocated", Color32::from_rgb(0xff, 0xb7, 0x4d)),
    ("reserved", Color32::from_rgb(0xce, 0x93, 0xd8)),
];

/// The colour of the series labelled `label`.
fn memory_color(label: &str) -> Color32 {
    MEMORY_COLORS.iter().find(|(name, _)| *name == label).map_or(UTILIZATION_COLOR, |(_, color)| *color)
}

/// A memory row's label: its top (the highest level of any series), then each series' name in its colour.
fn memory_label(painter: &egui::Painter, counter: &MemoryCounter, at: Pos2, text_color: Color32) {
    let font = FontId::proportional(11.0);
    painter.text(
        at + Vec2::new(0.0, 3.0),
        Align2::LEFT_TOP,
        format!("memory · top {}", format_bytes(counter.max_bytes())),
        font.clone(),
        text_color,
    );
    let mut x = at.x;
    for series in &counter.series {
        let rect = painter.text(
            Pos2::new(x, at.y + 20.0),
            Align2::LEFT_TOP,
            series.label,
            font.clone(),
            memory_color(series.label),
        );
        x = rect.right() + 8.0;
    }
}

/// Memory rows: per point column, each series' lowest to highest level in the column as a line one point wide (the
/// columns join, since each starts at the level the one before ended on), the first series also as an area below
/// its highest level; scaled so that the highest level of any series reaches the top of the row.
fn paint_memory(c: &Canvas, data: &TimelineData, view: &TimelineView, plan: &FramePlan) {
    let screen = view.to_screen(c.plot_rect.width());
    let columns = c.plot_rect.width().max(0.0).ceil() as usize;
    let mut areas = Mesh::default();
    let mut lines = Mesh::default();
    for placed in &plan.rows {
        let RowContent::Memory(index) = data.rows[placed.row].content else { continue };
        let counter = &data.memory[index];
        let bottom = c.rows_rect.top() + placed.y + placed.height - 2.0;
        let height = placed.height - 6.0;
        let scale = height / counter.max_bytes().max(1) as f32;
        let y = |bytes: u64| bottom - bytes as f32 * scale;
        for (k, series) in counter.series.iter().enumerate() {
            let color = memory_color(series.label);
            let levels = series.columns(screen.start_ns, screen.ns_per_px, columns, counter.end_ns);
            for (column, level) in levels.into_iter().enumerate() {
                let Some((low, high)) = level else { continue };
                let x = c.plot_rect.left() + column as f32;
                if k == 0 {
                    let area = Rect::from_min_max(Pos2::new(x, y(high)), Pos2::new(x + 1.0, bottom));
                    areas.add_colored_rect(area, color.gamma_multiply(0.25));
                }
                let line = Rect::from_min_max(Pos2::new(x, y(high) - 0.75), Pos2::new(x + 1.0, y(low) + 0.75));
                lines.add_colored_rect(line, color);
            }
        }
    }
    let painter = c.painter.with_clip_rect(c.plot_rect);
    painter.add(Shape::mesh(areas));
    painter.add(Shape::mesh(lines));
}

/// Events: one mesh of rectangles (a collective's wait darker), then names on the wide ones.
fn paint_events(c: &Canvas, data: &TimelineData, plan: &FramePlan) {
    let plot_painter = c.painter.with_clip_rect(c.plot_rect);
    let mut mesh = Mesh::default();
    let mut texts = Vec::new();
    let left = c.plot_rect.left();
    for (placed_index, item) in &plan.items {
        let placed = plan.rows[*placed_index as usize];
        let RowContent::Track(track_index) = data.rows[placed.row].content else { continue };
        let trace = data.tracks[track_index].trace;
        let top = c.rows_rect.top() + placed.y + 1.0;
        let x0 = (left + item.x0).max(left - 1.0);
        let x1 = (left + item.x1).min(c.plot_rect.right() + 1.0);
        let event_rect = Rect::from_min_max(Pos2::new(x0, top), Pos2::new(x1.max(x0 + 1.0), top + placed.height - 2.0));
        let mut color = event_color(data, trace, item.event);
        if item.count > 1 {
            // Folded blocks are darker so they do not pass for one long event.
            color = color.gamma_multiply(0.7);
        }
        match wait_fraction(data, trace, item) {
            // A collective that waited for another rank: the waiting part darker, the transfer part as usual.
            Some(fraction) => {
                let split = event_rect.left() + (event_rect.width() * fraction).max(0.0);
                let (wait, transfer) = event_rect.split_left_right_at_x(split.min(event_rect.right()));
                mesh.add_colored_rect(wait, waiting_color(color));
                mesh.add_colored_rect(transfer, color);
            }
            None => mesh.add_colored_rect(event_rect, color),
        }
        if item.count == 1 && event_rect.width() >= MIN_TEXT_WIDTH {
            texts.push((event_rect, trace, item.event, text_color_on(color)));
        }
    }
    plot_painter.add(Shape::mesh(mesh));
    for (event_rect, trace, event, text_color) in texts {
        let visible = event_rect.intersect(c.plot_rect);
        let galley = elided_text(&plot_painter, data.event_name(trace, event), visible.width() - 4.0, text_color);
        plot_painter.galley(
            Pos2::new(visible.left() + 2.0, event_rect.center().y - galley.size().y / 2.0),
            galley,
            text_color,
        );
    }
}

/// Outlines of the selected event and its peers, and the launch → kernel arrow.
fn paint_highlights(c: &Canvas, data: &TimelineData, view: &TimelineView, plan: &FramePlan, highlights: &Highlights) {
    let screen = view.to_screen(c.plot_rect.width());
    let left = c.plot_rect.left();
    let plot_painter = c.painter.with_clip_rect(c.plot_rect);
    // Where is an event on screen (if its track is visible)?
    let event_rect = |selected: &Selected| -> Option<Rect> {
        let track = data.track_of(selected.trace, selected.event)?;
        let placed =
            plan.rows.iter().find(|r| matches!(data.rows[r.row].content, RowContent::Track(t) if t == track))?;
        let (start, end) = data.event_span(selected.trace, selected.event);
        let x0 = left + screen.x(start);
        let x1 = (left + screen.x(end)).max(x0 + 2.0);
        let top = c.rows_rect.top() + placed.y;
        Some(Rect::from_min_max(Pos2::new(x0, top), Pos2::new(x1, top + placed.height)))
    };
    for peer in &highlights.peers {
        if let Some(r) = event_rect(peer) {
            plot_painter.rect_stroke(
                r.expand(1.0),
                0.0,
                Stroke::new(2.0, Color32::from_rgb(0, 220, 255)),
                egui::StrokeKind::Outside,
            );
        }
    }
    if let Some(selected) = &highlights.selected
        && let Some(r) = event_rect(selected)
    {
        plot_painter.rect_stroke(r.expand(1.0), 0.0, Stroke::new(2.0, Color32::WHITE), egui::StrokeKind::Outside);
    }
    if let Some((from, to)) = &highlights.flow
        && let (Some(a), Some(b)) = (event_rect(from), event_rect(to))
    {
        let start = Pos2::new(a.right(), a.center().y);
        let end = Pos2::new(b.left(), b.center().y);
        plot_painter.arrow(start, end - start, Stroke::new(1.5, Color32::from_rgb(255, 200, 0)));
    }
}

/// Label of a replay row.
pub const IDEAL_LABEL: &str = "ideal (no straggler)";
/// Colour of the replay rows' labels and summary: a pale green that no category uses.
pub const IDEAL_COLOR: Color32 = Color32::from_rgb(0x9c, 0xe0, 0x9c);
/// Operations narrower than this on screen are merged with their neighbours into one outline.
const IDEAL_MERGE_PX: f32 = 2.0;

/// The replay rows: each GPU operation at its replayed time as a ghost (a faint fill in its category colour
/// and an outline); operations that share a point column are drawn as one.
fn paint_ideal(c: &Canvas, data: &TimelineData, view: &TimelineView, plan: &FramePlan, replay: &IdealReplay) {
    let screen = view.to_screen(c.plot_rect.width());
    let left = c.plot_rect.left();
    let painter = c.painter.with_clip_rect(c.plot_rect);
    let (from_ns, to_ns) = (view.start_ns.floor() as i64, view.end_ns.ceil() as i64);
    let mut mesh = Mesh::default();
    let mut outlines = Vec::new();
    for placed in &plan.rows {
        let RowContent::Ideal(track) = data.rows[placed.row].content else { continue };
        let Some(ops) = replay.rows.get(&track) else { continue };
        let top = c.rows_rect.top() + placed.y + 2.0;
        let bottom = top + placed.height - 4.0;
        // Operations on one stream run one after another in the replay (stream order), so ends rise with starts
        // and the first one reaching into the window is a binary search away.
        let first = ops.partition_point(|o| o.end_ns < from_ns);
        let mut pending: Option<(f32, f32, Color32)> = None;
        for op in ops[first..].iter().take_while(|o| o.start_ns <= to_ns) {
            let x0 = left + screen.x(op.start_ns);
            let x1 = (left + screen.x(op.end_ns)).max(x0 + 1.0);
            let color = match op.event {
                Some(event) => event_color(data, op.trace, event),
                None => PALETTE[0],
            };
            match &mut pending {
                Some((_, end, _)) if x0 - *end < IDEAL_MERGE_PX && x1 - x0 < IDEAL_MERGE_PX => *end = end.max(x1),
                _ => {
                    if let Some(done) = pending.replace((x0, x1, color)) {
                        outlines.push((done, top, bottom));
                    }
                }
            }
        }
        if let Some(done) = pending {
            outlines.push((done, top, bottom));
        }
    }
    let rects: Vec<(Rect, Color32)> = outlines
        .into_iter()
        .map(|((x0, x1, color), top, bottom)| (Rect::from_min_max(Pos2::new(x0, top), Pos2::new(x1, bottom)), color))
        .collect();
    for (rect, color) in &rects {
        mesh.add_colored_rect(*rect, color.gamma_multiply(0.3));
    }
    painter.add(Shape::mesh(mesh));
    for (rect, color) in rects {
        painter.rect_stroke(rect, 0.0, Stroke::new(1.0, color), egui::StrokeKind::Inside);
    }
}

/// Colour of the critical path: a magenta that no category, range or other highlight uses.
pub const CRITICAL_PATH_COLOR: Color32 = Color32::from_rgb(0xff, 0x3d, 0xf5);

/// The critical path: runs outlined, delays dashed through the middle of their track, a line wherever the path
/// moves to another track (thick, with an arrow, where it crosses to another rank).
fn paint_critical_path(c: &Canvas, data: &TimelineData, view: &TimelineView, path: &PathOverlay) {
    let screen = view.to_screen(c.plot_rect.width());
    let left = c.plot_rect.left();
    let painter = c.painter.with_clip_rect(c.plot_rect);
    // Every expanded track's top and height, on screen or not: a hop may lead to a track scrolled out of view.
    let mut placed: HashMap<usize, (f32, f32)> = HashMap::new();
    let mut y = c.rows_rect.top() - view.scroll_y;
    for (row, height) in super::visible_rows(data, view) {
        if let RowContent::Track(track) = data.rows[row].content {
            placed.insert(track, (y, height));
        }
        y += height;
    }
    let (from_ns, to_ns) = (view.start_ns as i64, view.end_ns.ceil() as i64);
    let stroke = Stroke::new(2.0, CRITICAL_PATH_COLOR);
    for segment in path.segments.iter().filter(|s| s.end_ns >= from_ns && s.start_ns <= to_ns) {
        let Some(&(top, height)) = segment.track.and_then(|t| placed.get(&t)) else { continue };
        let x0 = left + screen.x(segment.start_ns);
        let x1 = (left + screen.x(segment.end_ns)).max(x0 + 2.0);
        if segment.run {
            let rect = Rect::from_min_max(Pos2::new(x0, top + 1.0), Pos2::new(x1, top + height - 1.0));
            painter.rect_stroke(rect, 0.0, stroke, egui::StrokeKind::Inside);
        } else {
            let mid = top + height / 2.0;
            painter.add(Shape::dashed_line(
                &[Pos2::new(x0, mid), Pos2::new(x1, mid)],
                Stroke::new(1.5, CRITICAL_PATH_COLOR),
                4.0,
                3.0,
            ));
        }
    }
    for (a, b) in path.hops() {
        let (a, b) = (&path.segments[a], &path.segments[b]);
        if a.end_ns < from_ns && b.start_ns < from_ns || a.end_ns > to_ns && b.start_ns > to_ns {
            continue;
        }
        let (Some(&(top_a, height_a)), Some(&(top_b, height_b))) =
            (a.track.and_then(|t| placed.get(&t)), b.track.and_then(|t| placed.get(&t)))
        else {
            continue;
        };
        let from = Pos2::new(left + screen.x(a.end_ns), top_a + height_a / 2.0);
        let to = Pos2::new(left + screen.x(b.start_ns), top_b + height_b / 2.0);
        if a.rank != b.rank {
            arrow(&painter, from, to, Stroke::new(2.5, CRITICAL_PATH_COLOR));
        } else {
            painter.line_segment([from, to], Stroke::new(1.0, CRITICAL_PATH_COLOR));
        }
    }
}

/// A line from `from` to `to` with a head of a fixed size (egui's own arrow scales its head with its length).
fn arrow(painter: &egui::Painter, from: Pos2, to: Pos2, stroke: Stroke) {
    painter.line_segment([from, to], stroke);
    let direction = (to - from).normalized();
    if direction.length() == 0.0 {
        return;
    }
    let back = -direction * 9.0;
    let side = direction.rot90() * 5.0;
    painter.add(Shape::convex_polygon(vec![to, to + back + side, to + back - side], stroke.color, Stroke::NONE));
}

/// The selected time range: a band over the axis and the rows, with its length.
fn paint_selected_range(c: &Canvas, view: &TimelineView) {
    let screen = view.to_screen(c.plot_rect.width());
    let left = c.plot_rect.left();
    if let Some((a, b)) = view.range_ns {
        let x0 = left + screen.x(a);
        let x1 = left + screen.x(b);
        let band = Rect::from_min_max(Pos2::new(x0, c.axis_rect.top()), Pos2::new(x1.max(x0 + 1.0), c.rect.bottom()));
        c.painter.with_clip_rect(Rect::from_min_max(c.axis_rect.min, c.plot_rect.max)).rect_filled(
            band,
            0.0,
            Color32::from_rgba_unmultiplied(120, 170, 255, 40),
        );
        c.painter.text(
            Pos2::new((x0 + x1) / 2.0, c.axis_rect.bottom() - 2.0),
            Align2::CENTER_BOTTOM,
            format_duration((b - a) as f64),
            FontId::proportional(11.0),
            c.visuals.strong_text_color(),
        );
    }
}

/// The time axis: ticks count from the first event of all traces (short labels), and the label column gives that
/// origin on the trace clock, so a tick's time on the clock of `--window` and the reports is the origin plus it.
fn paint_time_axis(c: &Canvas, data: &TimelineData, view: &TimelineView) {
    let screen = view.to_screen(c.plot_rect.width());
    let left = c.plot_rect.left();
    let text_color = c.visuals.text_color();
    c.painter.rect_filled(c.axis_rect, 0.0, c.visuals.panel_fill);
    let step = tick_step(screen.ns_per_px * 90.0);
    let relative_start = screen.start_ns - data.t0_ns as f64;
    let mut tick = (relative_start / step).ceil() * step;
    let relative_end = relative_start + screen.ns_per_px * f64::from(c.plot_rect.width());
    let axis_painter = c.painter.with_clip_rect(c.axis_rect.union(c.plot_rect));
    while tick <= relative_end {
        let x = left + ((tick - relative_start) / screen.ns_per_px) as f32;
        axis_painter.line_segment(
            [Pos2::new(x, c.axis_rect.bottom() - 6.0), Pos2::new(x, c.plot_rect.bottom())],
            Stroke::new(1.0, c.visuals.weak_text_color().gamma_multiply(0.25)),
        );
        axis_painter.text(
            Pos2::new(x + 3.0, c.axis_rect.top() + 3.0),
            Align2::LEFT_TOP,
            format_tick(tick, step),
            FontId::proportional(11.0),
            text_color,
        );
        tick += step;
    }
    c.painter.text(
        Pos2::new(c.rect.left() + 4.0, c.axis_rect.center().y),
        Align2::LEFT_CENTER,
        format!("0 = {} ns", data.t0_ns),
        FontId::proportional(11.0),
        text_color,
    );
}

/// The vertical scroll position, when the rows do not fit.
fn paint_scroll_thumb(c: &Canvas, view: &TimelineView, plan: &FramePlan) {
    if plan.content_height > c.rows_rect.height() {
        let visible = c.rows_rect.height() / plan.content_height;
        let top = c.rows_rect.top() + c.rows_rect.height() * (view.scroll_y / plan.content_height);
        let thumb = Rect::from_min_size(
            Pos2::new(c.rect.right() - 5.0, top),
            Vec2::new(4.0, (c.rows_rect.height() * visible).max(12.0)),
        );
        c.painter.rect_filled(thumb, 2.0, Color32::from_white_alpha(70));
    }
}

/// The hover cursor line.
fn paint_hover_line(c: &Canvas, hover: Option<Pos2>) {
    if let Some(pos) = hover.filter(|p| c.plot_rect.contains(*p)) {
        c.painter.line_segment(
            [Pos2::new(pos.x, c.axis_rect.top()), Pos2::new(pos.x, c.plot_rect.bottom())],
            Stroke::new(1.0, Color32::from_white_alpha(60)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every label takes the analyzer's colour, so the Summary tab, the timeline and the report's charts agree:
    /// waiting is communication's colour darkened (one colour for all collective types), never another category's.
    #[test]
    fn labels_take_the_analyzers_colours_and_waiting_is_its_own() {
        let categories = Categories::builtin();
        let wait = category_color(&categories, "wait.all_reduce");
        for name in categories.names() {
            assert_ne!(category_color(&categories, name), wait, "{name}");
        }
        assert_eq!(category_color(&categories, "wait.all_gather"), wait);
        for label in ["gemm", "comm.all_reduce", "wait.all_reduce", "not_a_category"] {
            let [r, g, b] = shardscope_analyzer::output::charts::category_color(categories.classifier(), label);
            assert_eq!(category_color(&categories, label), Color32::from_rgb(r, g, b), "{label}");
        }
        // The timeline's waiting part of a communication kernel is the same colour.
        assert_eq!(waiting_color(category_color(&categories, "comm.all_reduce")), wait);
    }

    #[test]
    fn tick_steps_follow_one_two_five() {
        assert_eq!(tick_step(80.0), 100.0);
        assert_eq!(tick_step(101.0), 200.0);
        assert_eq!(tick_step(3_000.0), 5_000.0);
        assert_eq!(tick_step(6e6), 1e7);
        assert_eq!(format_tick(2_500_000.0, 500_000.0), "2.5 ms");
        assert_eq!(format_tick(3e9, 1e9), "3 s");
        assert_eq!(format_duration(1_234_567.0), "1.235 ms");
    }
}
