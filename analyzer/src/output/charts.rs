//! Charts of a report or a study, drawn with `plotters` as SVG (inline in the HTML report, or files) and PNG.
//!
//! A chart is described as data first ([`Chart`]): what is drawn is exactly the numbers in that description,
//! which the callers take from the report's figures. Every bar, point and cell is also written into the SVG as
//! an invisible overlay element with `data-*` attributes and a `<title>` (the browser shows it on hover), so that
//! a program — the tests — can read back each number a chart draws and compare it with the JSON report.
//!
//! The look: a light theme by default, for slides and print, or the viewer's dark panel colours
//! ([`set_theme`], `--chart-theme dark`); the viewer's proportional font (Ubuntu Light, embedded so that a PNG renders
//! the same on every machine) at a readable size in dark text; the category colours of the rules file, and a
//! collective's waiting time drawn darker than its transfer. Categorical positions (ranks, phases) are bars, ordered
//! ones (a swept parameter) lines; times on colour scales read in µs, ms or s, and a heatmap of times whose values
//! span decades is coloured on a logarithmic scale, so that one long wait does not hide every short one.

use std::fmt::Write as _;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use plotters::coord::Shift;
use plotters::coord::ranged1d::{SegmentValue, SegmentedCoord};
use plotters::coord::types::{RangedCoordf64, RangedCoordusize};
use plotters::prelude::*;

use crate::figures::categories::Classifier;

/// The colours around the data: light (the default) or the viewer's dark panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ChartTheme {
    /// White background, near-black text: for slides, documents and print.
    #[default]
    Light,
    /// The viewer's dark panel fill with light text.
    Dark,
}

/// Whether charts drawn from now on are dark: one setting per process, made by the command line before drawing.
static DARK: AtomicBool = AtomicBool::new(false);

/// Chooses the theme of the charts and HTML pages drawn from now on (the command line's `--chart-theme`).
pub fn set_theme(theme: ChartTheme) {
    DARK.store(theme == ChartTheme::Dark, Ordering::Relaxed);
}

/// The theme charts are drawn in.
pub fn theme() -> ChartTheme {
    if DARK.load(Ordering::Relaxed) { ChartTheme::Dark } else { ChartTheme::Light }
}

/// Background, text and axes, grid lines of the current theme.
fn theme_colors() -> (RGBColor, RGBColor, RGBColor) {
    match theme() {
        ChartTheme::Light => (RGBColor(255, 255, 255), RGBColor(34, 34, 34), RGBColor(222, 222, 222)),
        ChartTheme::Dark => (RGBColor(27, 27, 27), RGBColor(210, 210, 210), RGBColor(60, 60, 60)),
    }
}

/// Background of the current theme.
pub fn background() -> RGBColor {
    theme_colors().0
}

fn foreground() -> RGBColor {
    theme_colors().1
}

/// Text sizes, pixels: axis labels and legends, titles.
const LABEL_PX: u32 = 15;
const TITLE_PX: u32 = 20;
/// Bars at most this many get their value written above them.
const MAX_VALUE_LABELS: usize = 24;
/// The font family name the charts use; registered once with the embedded font.
const FONT: &str = "sans-serif";
/// Width of the legend column right of a chart, pixels.
const LEGEND_WIDTH_PX: u32 = 190;

/// One chart, as data.
#[derive(Debug, Clone)]
pub struct Chart {
    /// File stem and HTML id (`shares`, `step_times`, …).
    pub name: String,
    /// Title drawn above the chart.
    pub title: String,
    /// Size in pixels.
    pub size_px: (u32, u32),
    /// What is drawn.
    pub kind: ChartKind,
}

/// The kinds of charts.
#[derive(Debug, Clone)]
pub enum ChartKind {
    /// One bar per column, split into coloured segments stacked from zero.
    Stacked {
        /// Column labels.
        columns: Vec<String>,
        /// The segments of each column, bottom first.
        segments: Vec<Vec<Segment>>,
        /// Unit of the y axis.
        y_label: String,
    },
    /// Lines over categorical x positions, each point with a spread (low to high).
    Series {
        /// x labels, in order.
        x_labels: Vec<String>,
        /// Name of the x axis.
        x_label: String,
        /// Name of the y axis.
        y_label: String,
        /// The lines.
        lines: Vec<Line>,
    },
    /// Points over a logarithmic x axis, with reference curves.
    Scatter {
        /// Name of the x axis.
        x_label: String,
        /// Name of the y axis.
        y_label: String,
        /// Point sets, each in its own colour.
        sets: Vec<PointSet>,
        /// Reference curves (drawn as lines), each in its own colour.
        curves: Vec<PointSet>,
    },
    /// A grid of cells coloured by value, rows top to bottom.
    Heatmap {
        /// Row labels.
        rows: Vec<String>,
        /// Name of the x axis (columns are numbered from 0).
        x_label: String,
        /// Cell values per row (all rows the same length); `None` is drawn empty.
        cells: Vec<Vec<Option<f64>>>,
        /// Unit of the values, for the colour scale.
        unit: String,
    },
}

/// One segment of a stacked bar.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Legend label (the report's category label).
    pub label: String,
    /// Its height.
    pub value: f64,
    /// The integer figure of the report it was computed from (e.g. nanoseconds), written beside the value.
    pub source_ns: Option<i64>,
    /// Fill colour.
    pub color: [u8; 3],
}

/// One line of a [`ChartKind::Series`].
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend label.
    pub label: String,
    /// Colour.
    pub color: [u8; 3],
    /// Per x position: the value and its spread (low, high), or nothing.
    pub points: Vec<Option<SeriesPoint>>,
    /// Whether consecutive points are joined: true where the x positions are ordered (a swept parameter, ranks),
    /// false where they are only names (phases, configurations).
    pub joined: bool,
}

/// One point of a line with its spread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesPoint {
    /// The value drawn as the point.
    pub value: f64,
    /// Bottom of the spread bar.
    pub low: f64,
    /// Top of the spread bar.
    pub high: f64,
}

/// Points of a scatter chart or a reference curve.
#[derive(Debug, Clone)]
pub struct PointSet {
    /// Legend label.
    pub label: String,
    /// Colour.
    pub color: [u8; 3],
    /// (x, y) pairs; x must be positive (logarithmic axis).
    pub points: Vec<(f64, f64)>,
}

/// A drawn element's place and numbers, written into the SVG as an overlay.
#[derive(Debug, Clone)]
struct Mark {
    /// `bar`, `point`, `cell` or `curve`.
    kind: &'static str,
    /// Pixel rectangle (x0, y0, x1, y1).
    rect_px: (i32, i32, i32, i32),
    /// What it is (series, column, row…), as `data-*` attributes, in order.
    attributes: Vec<(&'static str, String)>,
    /// Hover text.
    title: String,
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is a valid TrueType file compiled in; failing to read it would be a build defect.
        if plotters::style::register_font(FONT, FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT).is_err() {
            unreachable!("the embedded font is valid");
        }
    });
}

fn rgb(color: [u8; 3]) -> RGBColor {
    RGBColor(color[0], color[1], color[2])
}

/// The colour of a report label (`gemm`, `comm.all_reduce`, `wait.all_reduce`): the one rule of
/// [`crate::output::colors`], which the viewer follows too.
pub fn category_color(classifier: &Classifier, label: &str) -> [u8; 3] {
    crate::output::colors::label_color(classifier, label)
}

/// A colour from the palette chosen by the name (the viewer's rule for categories without a colour).
pub fn palette(name: &str) -> [u8; 3] {
    crate::output::colors::palette(name)
}

/// The n-th colour of the one palette ([`crate::output::colors::PALETTE`]), for series.
pub fn series_color(index: usize) -> [u8; 3] {
    use crate::output::colors::PALETTE;
    PALETTE[index % PALETTE.len()]
}

/// A sequential colour scale for heatmaps (dark blue → teal → yellow), readable on the dark background.
fn heat_color(fraction: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 5] =
        [[48.0, 18.0, 90.0], [59.0, 82.0, 139.0], [33.0, 145.0, 140.0], [94.0, 201.0, 98.0], [253.0, 231.0, 37.0]];
    let f = fraction.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (f.floor() as usize).min(STOPS.len() - 2);
    let t = f - i as f64;
    std::array::from_fn(|c| (STOPS[i][c] + (STOPS[i + 1][c] - STOPS[i][c]) * t).round() as u8)
}

/// A number as a chart label: at most 4 significant figures, no exponent for ordinary sizes.
pub fn short_number(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (3 - magnitude).clamp(0, 6) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// A byte count with a decimal unit (`10 kB`, `1.5 MB`), as bus bandwidth is in GB/s: ticks at powers of ten read
/// as round numbers.
pub fn format_bytes_decimal(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes;
    let mut unit = 0;
    while value.abs() >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{} {}", short_number(value), UNITS[unit])
}

/// A value in `unit`, times (`µs`) scaled to µs, ms or s (`58.35 ms`, not `58346 µs`); other units as they are.
pub fn format_value(value: f64, unit: &str) -> String {
    if !is_time_unit(unit) {
        return format!("{} {unit}", short_number(value));
    }
    match value.abs() {
        v if v >= 1e6 => format!("{} s", short_number(value / 1e6)),
        v if v >= 1e3 => format!("{} ms", short_number(value / 1e3)),
        _ => format!("{} µs", short_number(value)),
    }
}

fn is_time_unit(unit: &str) -> bool {
    unit == "µs"
}

/// A byte count with a binary unit (`32 KiB`).
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{} {}", short_number(value), UNITS[unit])
}

fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for HTML and XML.
pub fn escape(text: &str) -> String {
    escape_xml(text)
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The plotting library refused a drawing step (its message).
    #[error("{0}")]
    Draw(String),
    /// The PNG encoder failed.
    #[error("{0}")]
    Png(png::EncodingError),
    /// The SVG has no end tag to put the marks before.
    #[error("the SVG backend wrote no closing tag")]
    NoClosingTag,
}

type DrawResult<T> = Result<T, ChartError>;

/// A drawing step's error; the plotting library's errors are generic over the backend, so only their text is kept.
fn err<E: std::fmt::Display>(error: E) -> ChartError {
    ChartError::Draw(error.to_string())
}

/// Draws `chart` on any plotters drawing area and says where each element went.
fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>) -> DrawResult<Vec<Mark>> {
    register_font();
    root.fill(&background()).map_err(err)?;
    let (width, _) = root.dim_in_pixel();
    let (plot_area, legend_area) = root.split_horizontally(width.saturating_sub(LEGEND_WIDTH_PX));
    let title_font = (FONT, TITLE_PX).into_font().color(&foreground());
    let mut builder = ChartBuilder::on(&plot_area);
    // Heatmap rows are named on the y axis: room for the longest name (about 7 px a character).
    let y_label_px = match &chart.kind {
        ChartKind::Heatmap { rows, .. } => {
            (rows.iter().map(|r| r.chars().count()).max().unwrap_or(0) as u32 * 8 + 16).clamp(80, 420)
        }
        _ => 80,
    };
    builder.caption(&chart.title, title_font).margin(14).x_label_area_size(50).y_label_area_size(y_label_px);
    match &chart.kind {
        ChartKind::Stacked { columns, segments, y_label } => {
            draw_stacked(&mut builder, &legend_area, columns, segments, y_label)
        }
        ChartKind::Series { x_labels, x_label, y_label, lines } => {
            draw_series(&mut builder, &legend_area, x_labels, x_label, y_label, lines)
        }
        ChartKind::Scatter { x_label, y_label, sets, curves } => {
            draw_scatter(&mut builder, &legend_area, x_label, y_label, sets, curves)
        }
        ChartKind::Heatmap { rows, x_label, cells, unit } => {
            draw_heatmap(&mut builder, &legend_area, rows, x_label, cells, unit)
        }
    }
}

fn label_style() -> TextStyle<'static> {
    (FONT, LABEL_PX).into_font().color(&foreground())
}

/// The legend: a swatch and a label per entry, top to bottom.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[(String, [u8; 3])]) -> DrawResult<()> {
    let (_, height) = area.dim_in_pixel();
    let rows = ((height as i32 - 40) / 21).max(1) as usize;
    for (index, (label, color)) in entries.iter().enumerate() {
        if index + 1 == rows && entries.len() > rows {
            let more = format!("… {} more", entries.len() - index);
            area.draw(&Text::new(more, (10, 40 + 21 * index as i32), label_style())).map_err(err)?;
            break;
        }
        let y = 40 + 21 * index as i32;
        area.draw(&Rectangle::new([(10, y + 1), (23, y + 14)], rgb(*color).filled())).map_err(err)?;
        area.draw(&Text::new(label.clone(), (28, y - 1), label_style())).map_err(err)?;
    }
    Ok(())
}

fn legend_entries<'a>(items: impl Iterator<Item = (&'a str, [u8; 3])>) -> Vec<(String, [u8; 3])> {
    let mut entries: Vec<(String, [u8; 3])> = Vec::new();
    for (label, color) in items {
        if !entries.iter().any(|(l, _)| l == label) {
            entries.push((label.to_string(), color));
        }
    }
    entries
}

fn nice_max(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() { max * 1.08 } else { 1.0 }
}

/// The discrete range of `n` slots: plotters' discrete ranges include their end.
fn slots(n: usize) -> std::ops::Range<usize> {
    0..n.saturating_sub(1)
}

fn segment_label(labels: &[String], value: &SegmentValue<usize>) -> String {
    match value {
        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    }
}

fn draw_stacked<DB: DrawingBackend>(
    builder: &mut ChartBuilder<DB>,
    legend: &DrawingArea<DB, Shift>,
    columns: &[String],
    segments: &[Vec<Segment>],
    y_label: &str,
) -> DrawResult<Vec<Mark>> {
    let max = segments.iter().map(|s| s.iter().map(|g| g.value).sum::<f64>()).fold(0.0, f64::max);
    let mut chart =
        builder.build_cartesian_2d(slots(columns.len()).into_segmented(), 0.0..nice_max(max)).map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(theme_colors().2)
        .light_line_style(TRANSPARENT)
        .axis_style(foreground())
        .label_style(label_style())
        .x_labels(columns.len())
        .x_label_formatter(&|v| segment_label(columns, v))
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    let mut marks = Vec::new();
    // Bars leave a fifth of their slot free; the overlays take the same pixels.
    let slot_px = {
        let a = chart.backend_coord(&(SegmentValue::Exact(0), 0.0));
        let b = chart.backend_coord(&(SegmentValue::Exact(1), 0.0));
        (b.0 - a.0).abs()
    };
    let inset_px = (slot_px / 10).max(1);
    for (column, stack) in segments.iter().enumerate() {
        let mut bottom = 0.0;
        for segment in stack {
            let top = bottom + segment.value;
            let mut rect = Rectangle::new(
                [(SegmentValue::Exact(column), bottom), (SegmentValue::Exact(column + 1), top)],
                rgb(segment.color).filled(),
            );
            rect.set_margin(0, 0, inset_px as u32, inset_px as u32);
            chart.draw_series(std::iter::once(rect)).map_err(err)?;
            let p0 = chart.backend_coord(&(SegmentValue::Exact(column), bottom));
            let p1 = chart.backend_coord(&(SegmentValue::Exact(column + 1), top));
            let mut attributes = vec![
                ("column", columns[column].clone()),
                ("series", segment.label.clone()),
                ("value", format!("{}", segment.value)),
            ];
            if let Some(ns) = segment.source_ns {
                attributes.push(("ns", ns.to_string()));
            }
            marks.push(Mark {
                kind: "bar",
                rect_px: (p0.0 + inset_px, p1.1, p1.0 - inset_px, p0.1),
                attributes,
                title: format!("{} · {}: {} {y_label}", columns[column], segment.label, short_number(segment.value)),
            });
            bottom = top;
        }
    }
    let entries = legend_entries(segments.iter().flatten().map(|s| (s.label.as_str(), s.color)));
    draw_legend(legend, &entries)?;
    Ok(marks)
}

fn draw_series<DB: DrawingBackend>(
    builder: &mut ChartBuilder<DB>,
    legend: &DrawingArea<DB, Shift>,
    x_labels: &[String],
    x_label: &str,
    y_label: &str,
    lines: &[Line],
) -> DrawResult<Vec<Mark>> {
    let max = lines.iter().flat_map(|l| l.points.iter().flatten()).map(|p| p.high.max(p.value)).fold(0.0, f64::max);
    // Room above the tallest bar for its value.
    let mut chart =
        builder.build_cartesian_2d(slots(x_labels.len()).into_segmented(), 0.0..nice_max(max) * 1.06).map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(theme_colors().2)
        .light_line_style(TRANSPARENT)
        .axis_style(foreground())
        .label_style(label_style())
        .x_labels(x_labels.len())
        .x_label_formatter(&|v| segment_label(x_labels, v))
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    let mut marks = Vec::new();
    // Names (ranks, phases) are bars side by side in each slot; ordered positions are points joined by lines.
    let bar_lines: Vec<&Line> = lines.iter().filter(|l| !l.joined).collect();
    let bar_count = bar_lines.iter().map(|l| l.points.iter().flatten().count()).sum::<usize>();
    for (group, line) in bar_lines.iter().enumerate() {
        let bars = Bars { group, groups: bar_lines.len(), with_values: bar_count <= MAX_VALUE_LABELS };
        draw_bar_line(&mut chart, line, bars, x_labels, y_label, &mut marks)?;
    }
    for line in lines.iter().filter(|l| l.joined) {
        draw_joined_line(&mut chart, line, x_labels, y_label, &mut marks)?;
    }
    draw_legend(legend, &legend_entries(lines.iter().map(|l| (l.label.as_str(), l.color))))?;
    Ok(marks)
}

type SeriesChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<SegmentedCoord<RangedCoordusize>, RangedCoordf64>>;

/// Where one line's bars go in each slot: the `group`-th of `groups` side by side.
#[derive(Clone, Copy)]
struct Bars {
    group: usize,
    groups: usize,
    /// Whether each bar's value is written above it (few bars).
    with_values: bool,
}

/// The mark of a series point, with its spread.
fn series_mark(
    kind: &'static str,
    rect_px: (i32, i32, i32, i32),
    line: &Line,
    x: &str,
    p: SeriesPoint,
    y_label: &str,
) -> Mark {
    Mark {
        kind,
        rect_px,
        attributes: vec![
            ("series", line.label.clone()),
            ("x", x.to_string()),
            ("value", format!("{}", p.value)),
            ("low", format!("{}", p.low)),
            ("high", format!("{}", p.high)),
        ],
        title: format!(
            "{} at {x}: {} (spread {} – {}) {y_label}",
            line.label,
            short_number(p.value),
            short_number(p.low),
            short_number(p.high)
        ),
    }
}

/// One line of a series as bars from zero, with its spread as a whisker and, for few bars, the value above.
fn draw_bar_line<DB: DrawingBackend>(
    chart: &mut SeriesChart<'_, DB>,
    line: &Line,
    bars: Bars,
    x_labels: &[String],
    y_label: &str,
    marks: &mut Vec<Mark>,
) -> DrawResult<()> {
    let color = rgb(line.color);
    let slot_px = {
        let a = chart.backend_coord(&(SegmentValue::Exact(0), 0.0));
        let b = chart.backend_coord(&(SegmentValue::Exact(1), 0.0));
        (b.0 - a.0).abs()
    };
    // A fifth of the slot stays free; the bars of the lines share the rest.
    let inset_px = (slot_px / 10).max(1);
    let bar_px = ((slot_px - 2 * inset_px) / bars.groups.max(1) as i32).max(1);
    let left_px = inset_px + bar_px * bars.group as i32;
    let right_px = (slot_px - left_px - bar_px).max(0);
    for (x, point) in line.points.iter().enumerate() {
        let Some(p) = *point else { continue };
        let corners = [(SegmentValue::Exact(x), 0.0), (SegmentValue::Exact(x + 1), p.value)];
        let mut rect = Rectangle::new(corners.clone(), color.filled());
        rect.set_margin(0, 0, left_px as u32, right_px as u32);
        chart.draw_series(std::iter::once(rect)).map_err(err)?;
        let (p0, p1) = (chart.backend_coord(&corners[0]), chart.backend_coord(&corners[1]));
        // Drawn at pixel offsets from the slot's left edge at a value: the slot's coordinates have no fractions.
        let center_px = left_px + bar_px / 2;
        if p.high > p.low {
            let low = chart.backend_coord(&(SegmentValue::Exact(x), p.low)).1;
            let high = chart.backend_coord(&(SegmentValue::Exact(x), p.high)).1;
            let whisker = EmptyElement::at((SegmentValue::Exact(x), p.low))
                + PathElement::new(vec![(center_px, 0), (center_px, high - low)], foreground().stroke_width(2));
            chart.draw_series(std::iter::once(whisker)).map_err(err)?;
        }
        if bars.with_values {
            let text = short_number(p.value);
            let offset = (center_px - 4 * text.chars().count() as i32, -(LABEL_PX as i32) - 4);
            let label = EmptyElement::at((SegmentValue::Exact(x), p.value.max(p.high)))
                + Text::new(text, offset, label_style());
            chart.draw_series(std::iter::once(label)).map_err(err)?;
        }
        let rect_px = (p0.0 + left_px, p1.1, p0.0 + left_px + bar_px, p0.1);
        marks.push(series_mark("bar", rect_px, line, &x_labels[x], p, y_label));
    }
    Ok(())
}

/// One line of a series as points joined in order (a missing point breaks it), each with its spread.
fn draw_joined_line<DB: DrawingBackend>(
    chart: &mut SeriesChart<'_, DB>,
    line: &Line,
    x_labels: &[String],
    y_label: &str,
    marks: &mut Vec<Mark>,
) -> DrawResult<()> {
    let color = rgb(line.color);
    let mut run: Vec<(SegmentValue<usize>, f64)> = Vec::new();
    let mut runs = Vec::new();
    for (x, point) in line.points.iter().enumerate() {
        match point {
            Some(p) => run.push((SegmentValue::CenterOf(x), p.value)),
            None => runs.push(std::mem::take(&mut run)),
        }
    }
    runs.push(run);
    for run in runs.into_iter().filter(|r| r.len() > 1) {
        chart.draw_series(LineSeries::new(run, color.stroke_width(2))).map_err(err)?;
    }
    for (x, point) in line.points.iter().enumerate() {
        let Some(p) = *point else { continue };
        let at = |y: f64| (SegmentValue::CenterOf(x), y);
        if p.high > p.low {
            chart.draw_series(std::iter::once(PathElement::new(vec![at(p.low), at(p.high)], color))).map_err(err)?;
        }
        chart.draw_series(std::iter::once(Circle::new(at(p.value), 4, color.filled()))).map_err(err)?;
        let c = chart.backend_coord(&at(p.value));
        marks.push(series_mark("point", (c.0 - 5, c.1 - 5, c.0 + 5, c.1 + 5), line, &x_labels[x], p, y_label));
    }
    Ok(())
}

fn draw_scatter<DB: DrawingBackend>(
    builder: &mut ChartBuilder<DB>,
    legend: &DrawingArea<DB, Shift>,
    x_label: &str,
    y_label: &str,
    sets: &[PointSet],
    curves: &[PointSet],
) -> DrawResult<Vec<Mark>> {
    let all = || sets.iter().chain(curves).flat_map(|s| s.points.iter()).filter(|p| p.0 > 0.0);
    let x_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all().map(|p| p.0).fold(0.0, f64::max);
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min { (x_min / 1.5, x_max * 1.5) } else { (1.0, 1e9) };
    let y_max = nice_max(all().map(|p| p.1).fold(0.0, f64::max));
    let mut chart = builder.build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max).map_err(err)?;
    chart
        .configure_mesh()
        .bold_line_style(theme_colors().2)
        .light_line_style(TRANSPARENT)
        .axis_style(foreground())
        .label_style(label_style())
        .x_label_formatter(&|v| format_bytes_decimal(*v))
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    let mut marks = Vec::new();
    for curve in curves {
        let points: Vec<(f64, f64)> = curve.points.iter().copied().filter(|p| p.0 > 0.0).collect();
        chart.draw_series(LineSeries::new(points.clone(), rgb(curve.color).stroke_width(2))).map_err(err)?;
        for (x, y) in points {
            let c = chart.backend_coord(&(x, y));
            marks.push(Mark {
                kind: "curve",
                rect_px: (c.0 - 3, c.1 - 3, c.0 + 3, c.1 + 3),
                attributes: vec![("series", curve.label.clone()), ("x", format!("{x}")), ("value", format!("{y}"))],
                title: format!("{}: {} at {}", curve.label, short_number(y), format_bytes_decimal(x)),
            });
        }
    }
    for set in sets {
        let color = rgb(set.color);
        let points: Vec<(f64, f64)> = set.points.iter().copied().filter(|p| p.0 > 0.0).collect();
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.mix(0.8).filled()))).map_err(err)?;
        for (x, y) in points {
            let c = chart.backend_coord(&(x, y));
            marks.push(Mark {
                kind: "point",
                rect_px: (c.0 - 4, c.1 - 4, c.0 + 4, c.1 + 4),
                attributes: vec![("series", set.label.clone()), ("x", format!("{x}")), ("value", format!("{y}"))],
                title: format!("{}: {} {y_label} at {}", set.label, short_number(y), format_bytes_decimal(x)),
            });
        }
    }
    let entries = legend_entries(sets.iter().chain(curves).map(|s| (s.label.as_str(), s.color)));
    draw_legend(legend, &entries)?;
    Ok(marks)
}

fn draw_heatmap<DB: DrawingBackend>(
    builder: &mut ChartBuilder<DB>,
    legend: &DrawingArea<DB, Shift>,
    rows: &[String],
    x_label: &str,
    cells: &[Vec<Option<f64>>],
    unit: &str,
) -> DrawResult<Vec<Mark>> {
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let scale = ColorScale::of(cells.iter().flatten().flatten().copied(), unit);
    let mut chart = builder.build_cartesian_2d(0.0..columns as f64, slots(rows.len()).into_segmented()).map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .axis_style(foreground())
        .label_style(label_style())
        .y_labels(rows.len())
        .y_label_formatter(&|v| segment_label(rows, v))
        // A few columns: a tick at every column's left edge; many: plotters' round numbers. Never a fraction.
        .x_labels(if columns <= 40 { columns + 1 } else { 10 })
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-9 { format!("{}", v.round() as i64) } else { String::new() }
        })
        .x_desc(x_label)
        .draw()
        .map_err(err)?;
    let mut marks = Vec::new();
    for (row, values) in cells.iter().enumerate() {
        for (column, value) in values.iter().enumerate() {
            let Some(value) = *value else { continue };
            let fraction = scale.fraction(value);
            let corners =
                [(column as f64, SegmentValue::Exact(row)), ((column + 1) as f64, SegmentValue::Exact(row + 1))];
            chart
                .draw_series(std::iter::once(Rectangle::new(corners.clone(), rgb(heat_color(fraction)).filled())))
                .map_err(err)?;
            let p0 = chart.backend_coord(&corners[0]);
            let p1 = chart.backend_coord(&corners[1]);
            marks.push(Mark {
                kind: "cell",
                rect_px: (p0.0.min(p1.0), p0.1.min(p1.1), p0.0.max(p1.0), p0.1.max(p1.1)),
                attributes: vec![
                    ("row", rows[row].clone()),
                    ("column", column.to_string()),
                    ("value", format!("{value}")),
                ],
                title: format!("{} · #{column}: {}", rows[row], format_value(value, unit)),
            });
        }
    }
    draw_color_bar(legend, &scale, unit)?;
    Ok(marks)
}

/// How a heatmap's values map onto its colours: linearly from 0, or, for times spanning more than a decade,
/// logarithmically from half the smallest time (or of a thousandth of the largest; below it, zero among them, the
/// first colour).
struct ColorScale {
    /// The value of the first colour (0 on a linear scale).
    low: f64,
    /// The value of the last colour: the largest value.
    high: f64,
    logarithmic: bool,
}

impl ColorScale {
    fn of(values: impl Iterator<Item = f64> + Clone, unit: &str) -> ColorScale {
        let high = values.clone().fold(0.0, f64::max);
        let smallest = values.filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        // Half the smallest time: it still differs from zero, which takes the first colour.
        let low = smallest.max(high / 1e3) / 2.0;
        if is_time_unit(unit) && high > 10.0 * low && low.is_finite() {
            ColorScale { low, high, logarithmic: true }
        } else {
            ColorScale { low: 0.0, high, logarithmic: false }
        }
    }

    /// Where `value` falls between the first (0) and the last colour (1).
    fn fraction(&self, value: f64) -> f64 {
        match (self.logarithmic, self.high > self.low) {
            (_, false) => 0.0,
            (true, true) if value <= self.low => 0.0,
            (true, true) => (value / self.low).ln() / (self.high / self.low).ln(),
            (false, true) => value / self.high,
        }
    }

    /// The value at `fraction` of the scale.
    fn value_at(&self, fraction: f64) -> f64 {
        if self.logarithmic { self.low * (self.high / self.low).powf(fraction) } else { self.high * fraction }
    }
}

/// The colour bar beside a heatmap: first colour at the bottom, with its value at the ends and a third of the way.
fn draw_color_bar<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, scale: &ColorScale, unit: &str) -> DrawResult<()> {
    // As tall as the legend column allows, leaving room for the labels and the scale's name.
    let steps = 24;
    let (_, height_px) = area.dim_in_pixel();
    let (top_px, step_px) = (50, ((height_px as i32 - 110) / steps).clamp(3, 9));
    for step in 0..steps {
        let y = top_px + (steps - 1 - step) * step_px;
        let color = heat_color(step as f64 / (steps - 1) as f64);
        area.draw(&Rectangle::new([(10, y), (28, y + step_px)], rgb(color).filled())).map_err(err)?;
    }
    let bottom_px = top_px + steps * step_px;
    for fraction in [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0] {
        let text = if fraction == 0.0 && !scale.logarithmic {
            format_value(0.0, unit)
        } else {
            let prefix = if fraction == 0.0 { "≤ " } else { "" };
            format!("{prefix}{}", format_value(scale.value_at(fraction), unit))
        };
        let y = bottom_px - (fraction * f64::from(steps * step_px)) as i32 - LABEL_PX as i32 / 2;
        area.draw(&Text::new(text, (34, y), label_style())).map_err(err)?;
    }
    let kind = if scale.logarithmic { "log scale" } else { "linear scale" };
    area.draw(&Text::new(kind, (10, bottom_px + 10), label_style())).map_err(err)?;
    Ok(())
}

/// The chart as an SVG document, with the overlay elements that carry its numbers.
pub fn render_svg(chart: &Chart) -> DrawResult<String> {
    let mut svg = String::new();
    let marks = {
        let root = SVGBackend::with_string(&mut svg, chart.size_px).into_drawing_area();
        let marks = draw(chart, &root)?;
        root.present().map_err(err)?;
        marks
    };
    let mut overlay = format!(r#"<g class="marks" data-chart="{}">"#, escape_xml(&chart.name));
    for mark in &marks {
        let (x0, y0, x1, y1) = mark.rect_px;
        let _ = write!(
            overlay,
            r#"<rect class="mark" data-kind="{}" x="{x0}" y="{y0}" width="{}" height="{}" fill="transparent""#,
            mark.kind,
            (x1 - x0).max(1),
            (y1 - y0).max(1)
        );
        for (key, value) in &mark.attributes {
            let _ = write!(overlay, r#" data-{key}="{}""#, escape_xml(value));
        }
        let _ = write!(overlay, "><title>{}</title></rect>", escape_xml(&mark.title));
    }
    overlay.push_str("</g>");
    match svg.rfind("</svg>") {
        Some(end) => svg.insert_str(end, &overlay),
        None => return Err(ChartError::NoClosingTag),
    }
    Ok(svg)
}

/// The chart as a PNG file's bytes (8-bit RGB).
pub fn render_png(chart: &Chart) -> DrawResult<Vec<u8>> {
    let (width, height) = chart.size_px;
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, chart.size_px).into_drawing_area();
        draw(chart, &root)?;
        root.present().map_err(err)?;
    }
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(ChartError::Png)?;
        writer.write_image_data(&pixels).map_err(ChartError::Png)?;
        writer.finish().map_err(ChartError::Png)?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_drawn_darker_than_transfer_in_the_communication_colour() {
        let c = Classifier::builtin();
        let transfer = category_color(&c, "comm.all_reduce");
        let wait = category_color(&c, "wait.all_reduce");
        assert_eq!(transfer, [0xe1, 0x57, 0x59]);
        assert!(wait.iter().zip(transfer).all(|(w, t)| *w < t));
        assert_eq!(category_color(&c, "gemm"), [0x4e, 0x79, 0xa7]);
    }

    #[test]
    fn numbers_and_sizes_read_short() {
        assert_eq!(short_number(12.3456), "12.35");
        assert_eq!(short_number(1234.6), "1235");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(format_bytes(32768.0), "32 KiB");
        assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0), "3 MiB");
        // Bus bandwidth's message sizes: decimal, so that ticks at powers of ten are round.
        assert_eq!(format_bytes_decimal(10_000.0), "10 kB");
        assert_eq!(format_bytes_decimal(1e9), "1 GB");
    }

    #[test]
    fn times_are_scaled_to_their_unit() {
        assert_eq!(format_value(58346.0, "µs"), "58.35 ms");
        assert_eq!(format_value(2_500_000.0, "µs"), "2.5 s");
        assert_eq!(format_value(12.5, "µs"), "12.5 µs");
        assert_eq!(format_value(12.5, "%"), "12.5 %");
    }

    #[test]
    fn times_spanning_decades_get_a_logarithmic_colour_scale() {
        // One 58 ms warm-up wait beside 2 ms waits: on a linear scale every 2 ms wait would be 3 % of the colours.
        let waits = [0.0, 2000.0, 2100.0, 58000.0];
        let scale = ColorScale::of(waits.iter().copied(), "µs");
        assert!(scale.logarithmic);
        assert_eq!(scale.fraction(0.0), 0.0);
        assert!((scale.fraction(58000.0) - 1.0).abs() < 1e-12);
        assert!(scale.fraction(2000.0) > 0.0 && scale.fraction(2100.0) > scale.fraction(2000.0));
        assert!((scale.value_at(scale.fraction(2100.0)) - 2100.0).abs() < 1e-6);
        // Within a decade, or not times: linear from zero.
        assert!(!ColorScale::of([1000.0, 5000.0].into_iter(), "µs").logarithmic);
        assert!(!ColorScale::of(waits.iter().copied(), "%").logarithmic);
    }
}
