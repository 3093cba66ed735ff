//! One type per kind of timeline event, each saying in one place what the timeline, the painter
//! and the details panel need of it: its label, its text, its span, its colour, its track and its
//! details rows ([`EventKindInfo`]). [`EventKind`] names the kinds and `dispatch!` hands a kind
//! to its type, so the rest of the viewer asks the kind instead of matching on it.
//!
//! Adding a kind of event: its type and [`EventKindInfo`] implementation here, its line in
//! [`EventKind`], [`EventKind::ALL`] and `dispatch!`; then the tracks that show it in
//! `layout.rs`. An [`EventRef`] whose tag names no kind is rejected ([`EventRef::from_bits`]).

use egui::{Color32, RichText};
use shardscope_model::{ProcessIdx, Trace};

use crate::modules::ModuleSpan;

use super::layout::{TimelineData, TrackKind};
use super::paint::{category_color, range_color};

/// One key–value line of a details grid (the details panel's own lines use it too).
pub(crate) fn row(ui: &mut egui::Ui, key: &str, value: impl Into<String>) {
    ui.label(RichText::new(key).weak());
    ui.label(value.into());
    ui.end_row();
}

/// The process of an event as the details show it: its rank and pid, or its pid.
pub(crate) fn process_text(trace: &Trace, process: ProcessIdx) -> String {
    match trace.processes.get(process.0 as usize) {
        Some(p) => match p.rank {
            Some(rank) => format!("rank {rank} (pid {})", p.pid),
            None => format!("pid {}", p.pid),
        },
        None => "?".into(),
    }
}

/// What the viewer needs of one kind of event; `index` is into the kind's list of trace `trace` (of `data.traces`,
/// or for what the viewer derives from a trace, of its list in `data`).
pub trait EventKindInfo {
    /// The kind, as the details panel names it.
    const LABEL: &'static str;
    /// The text drawn on the event.
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str;
    /// The full name, for details and search.
    fn full_name(data: &TimelineData, trace: usize, index: usize) -> &str {
        Self::name(data, trace, index)
    }
    /// Start and end, trace ns.
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64);
    /// Fill colour.
    fn color(data: &TimelineData, trace: usize, index: usize) -> Color32;
    /// The track that shows the event.
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize>;
    /// The kind's own rows of the details grid.
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize);
}

/// Kernels (`Trace::kernels`), on their stream's track.
pub struct Kernels;
/// Memory copies and sets (`Trace::memops`), on their stream's track.
pub struct MemOps;
/// CUDA API calls (`Trace::api_calls`), on their thread's track.
pub struct ApiCalls;
/// NVTX and annotation ranges (`Trace::ranges`), on one track per thread (or stream) and depth.
pub struct Ranges;
/// Runs of consecutive kernels in one module of the model (`TimelineData::modules`), on their GPU's module track.
pub struct Modules;

impl EventKindInfo for Kernels {
    const LABEL: &'static str = "kernel";
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str {
        let t = &data.traces[trace];
        t.names.get(t.kernels[index].short_name).trim()
    }
    fn full_name(data: &TimelineData, trace: usize, index: usize) -> &str {
        let t = &data.traces[trace];
        t.names.get(t.kernels[index].name)
    }
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64) {
        let k = &data.traces[trace].kernels[index];
        (k.start_ns, k.end_ns)
    }
    fn color(data: &TimelineData, trace: usize, index: usize) -> Color32 {
        let name = data.traces[trace].kernels[index].name;
        let category = data.name_categories[trace].get(name.0 as usize).copied().unwrap_or(0);
        category_color(&data.categories, data.categories.name(category))
    }
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize> {
        let k = &data.traces[trace].kernels[index];
        data.stream_track.get(&(trace, k.device, k.stream)).copied()
    }
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize) {
        let t = &data.traces[trace];
        let k = &t.kernels[index];
        row(ui, "process", process_text(t, k.process));
        let device = t.devices.get(k.device.0 as usize).map_or(0, |d| d.ordinal);
        row(ui, "GPU / stream", format!("GPU {device} / stream {}", k.stream));
        row(ui, "grid", format!("{} × {} × {}", k.grid[0], k.grid[1], k.grid[2]));
        row(ui, "block", format!("{} × {} × {}", k.block[0], k.block[1], k.block[2]));
        row(ui, "correlation id", k.correlation_id.to_string());
        let category = data.name_categories[trace].get(k.name.0 as usize).copied().unwrap_or(0);
        row(ui, "category", data.categories.name(category));
    }
}

impl EventKindInfo for MemOps {
    const LABEL: &'static str = "memory operation";
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str {
        match data.traces[trace].memops[index].copy_kind {
            Some(kind) => kind.label(),
            None => "memset",
        }
    }
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64) {
        let m = &data.traces[trace].memops[index];
        (m.start_ns, m.end_ns)
    }
    fn color(data: &TimelineData, trace: usize, index: usize) -> Color32 {
        let category = if data.traces[trace].memops[index].is_memset() { "memset" } else { "memcpy" };
        category_color(&data.categories, category)
    }
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize> {
        let m = &data.traces[trace].memops[index];
        data.stream_track.get(&(trace, m.device, m.stream)).copied()
    }
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize) {
        let t = &data.traces[trace];
        let m = &t.memops[index];
        row(ui, "process", process_text(t, m.process));
        row(ui, "stream", m.stream.to_string());
        row(ui, "bytes", m.bytes.to_string());
        row(ui, "correlation id", m.correlation_id.to_string());
    }
}

impl EventKindInfo for ApiCalls {
    const LABEL: &'static str = "CUDA API call";
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str {
        let t = &data.traces[trace];
        t.names.get(t.api_calls[index].name)
    }
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64) {
        let a = &data.traces[trace].api_calls[index];
        (a.start_ns, a.end_ns)
    }
    fn color(_data: &TimelineData, _trace: usize, _index: usize) -> Color32 {
        Color32::from_rgb(0x6b, 0x7f, 0x99)
    }
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize> {
        let a = &data.traces[trace].api_calls[index];
        data.api_track.get(&(trace, a.process, a.tid)).copied()
    }
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize) {
        let t = &data.traces[trace];
        let a = &t.api_calls[index];
        row(ui, "process", process_text(t, a.process));
        row(ui, "thread", a.tid.to_string());
        row(ui, "correlation id", a.correlation_id.to_string());
    }
}

impl EventKindInfo for Ranges {
    const LABEL: &'static str = "range";
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str {
        let t = &data.traces[trace];
        t.names.get(t.ranges[index].name)
    }
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64) {
        let r = &data.traces[trace].ranges[index];
        (r.start_ns, r.end_ns)
    }
    fn color(data: &TimelineData, trace: usize, index: usize) -> Color32 {
        // By the name's text, not its id in the file, so the same phase looks the same on every rank.
        let t = &data.traces[trace];
        range_color(t.names.get(t.ranges[index].name))
    }
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize> {
        let r = &data.traces[trace].ranges[index];
        let key_matches = |track: &super::layout::Track| match track.kind {
            TrackKind::Ranges { tid, depth } => {
                r.device.is_none() && tid == r.tid && depth == r.depth && track.process == r.process
            }
            TrackKind::GpuRanges { device, stream, depth } => {
                Some(device) == r.device && Some(stream) == r.stream && depth == r.depth
            }
            _ => false,
        };
        data.tracks.iter().position(|track| track.trace == trace && key_matches(track))
    }
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize) {
        let t = &data.traces[trace];
        let r = &t.ranges[index];
        row(ui, "process", process_text(t, r.process));
        row(ui, "thread", r.tid.to_string());
        row(ui, "depth", r.depth.to_string());
        let domain = t.names.get(r.domain);
        if !domain.is_empty() {
            row(ui, "domain", domain);
        }
    }
}

/// The span `index` of trace `trace`'s module spans.
fn module_span(data: &TimelineData, trace: usize, index: usize) -> &ModuleSpan {
    &data.modules[trace].spans[index]
}

impl EventKindInfo for Modules {
    const LABEL: &'static str = "module";
    fn name(data: &TimelineData, trace: usize, index: usize) -> &str {
        data.modules[trace].label_of(module_span(data, trace, index))
    }
    fn full_name(data: &TimelineData, trace: usize, index: usize) -> &str {
        data.modules[trace].path_of(module_span(data, trace, index))
    }
    fn span(data: &TimelineData, trace: usize, index: usize) -> (i64, i64) {
        let s = module_span(data, trace, index);
        (s.start_ns, s.end_ns)
    }
    fn color(data: &TimelineData, trace: usize, index: usize) -> Color32 {
        // By the path below the layer: attention looks the same in every layer, and on every rank.
        let key = data.modules[trace].color_keys.get(module_span(data, trace, index).path as usize);
        range_color(key.map_or("", String::as_str))
    }
    fn track_of(data: &TimelineData, trace: usize, index: usize) -> Option<usize> {
        let s = module_span(data, trace, index);
        data.module_track.get(&(trace, s.process, s.device, s.level)).copied()
    }
    fn details_ui(ui: &mut egui::Ui, data: &TimelineData, trace: usize, index: usize) {
        let t = &data.traces[trace];
        let s = module_span(data, trace, index);
        row(ui, "process", process_text(t, s.process));
        let device = t.devices.get(s.device.0 as usize).map_or(0, |d| d.ordinal);
        row(ui, "GPU", format!("GPU {device}"));
        let depth = data.modules[trace].depths.get(usize::from(s.level)).copied().unwrap_or_default();
        row(ui, "depth", format!("{depth} path parts (row {} of the module rows)", s.level + 1));
        row(ui, "kernels", s.kernels.to_string());
        if let Some(first) = t.kernels.get(s.first_kernel as usize) {
            row(ui, "first kernel", t.names.get(first.short_name).trim());
        }
    }
}

/// What kind of record an [`EventRef`] points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// [`Kernels`].
    Kernel,
    /// [`MemOps`].
    MemOp,
    /// [`ApiCalls`].
    Api,
    /// [`Ranges`].
    Range,
    /// [`Modules`].
    Module,
}

/// Runs `$body` with `$info` naming the [`EventKindInfo`] type of `$kind`.
macro_rules! dispatch {
    ($kind:expr, $info:ident => $body:expr) => {
        match $kind {
            $crate::timeline::events::EventKind::Kernel => {
                type $info = $crate::timeline::events::Kernels;
                $body
            }
            $crate::timeline::events::EventKind::MemOp => {
                type $info = $crate::timeline::events::MemOps;
                $body
            }
            $crate::timeline::events::EventKind::Api => {
                type $info = $crate::timeline::events::ApiCalls;
                $body
            }
            $crate::timeline::events::EventKind::Range => {
                type $info = $crate::timeline::events::Ranges;
                $body
            }
            $crate::timeline::events::EventKind::Module => {
                type $info = $crate::timeline::events::Modules;
                $body
            }
        }
    };
}
pub(crate) use dispatch;

impl EventKind {
    /// Every kind; a kind's position is its tag in an [`EventRef`].
    pub const ALL: [EventKind; 5] =
        [EventKind::Kernel, EventKind::MemOp, EventKind::Api, EventKind::Range, EventKind::Module];

    /// The kind, as the details panel names it.
    pub fn label(self) -> &'static str {
        dispatch!(self, Info => Info::LABEL)
    }

    fn tag(self) -> u32 {
        EventKind::ALL.iter().position(|&k| k == self).expect("every kind is in ALL") as u32
    }
}

/// A kind and an index into the matching list of one trace, packed into 32 bits because a
/// track holds one per event (10 million events: 40 MB rather than 80). 29 bits of index: half a billion events
/// of one kind in one trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventRef(u32);

// Every tag must fit in the bits above the index: a module-level constant, so that the compiler evaluates it
// (an associated constant is evaluated only where something reads it).
const _: () = assert!(EventKind::ALL.len() <= 1 << (32 - EventRef::INDEX_BITS));

impl EventRef {
    /// Bits of the index; the rest hold the kind's tag.
    const INDEX_BITS: u32 = 29;
    const INDEX_MASK: u32 = (1 << Self::INDEX_BITS) - 1;

    /// Packs `kind` and `index`; indices must stay below 2^29.
    pub fn new(kind: EventKind, index: usize) -> EventRef {
        debug_assert!(index <= Self::INDEX_MASK as usize);
        EventRef((kind.tag() << Self::INDEX_BITS) | (index as u32 & Self::INDEX_MASK))
    }

    /// An event from its packed bits; `None` when the tag names no kind.
    pub fn from_bits(bits: u32) -> Option<EventRef> {
        EventKind::ALL.get((bits >> Self::INDEX_BITS) as usize).map(|_| EventRef(bits))
    }

    /// The packed bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The record kind. Every `EventRef` is made by [`EventRef::new`] or checked by
    /// [`EventRef::from_bits`], so its tag always names one.
    pub fn kind(self) -> EventKind {
        EventKind::ALL[(self.0 >> Self::INDEX_BITS) as usize]
    }

    /// Index into the kind's list.
    pub fn index(self) -> usize {
        (self.0 & Self::INDEX_MASK) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Categories;
    use crate::timeline::paint::{PALETTE, RANGE_PALETTE, event_color};
    use shardscope_model::{Process, Range};

    /// A file with the ranges `names`, interned after `other_names` so that the same name gets another id here.
    fn file(other_names: &[&str], names: &[&str]) -> Trace {
        let mut trace = Trace::default();
        let process = trace.add_process(Process { pid: 7, ..Process::default() });
        for name in other_names {
            trace.names.intern(name);
        }
        for (i, name) in names.iter().enumerate() {
            let name = trace.names.intern(name);
            let start_ns = i as i64 * 100;
            trace.ranges.push(Range { start_ns, end_ns: start_ns + 50, name, process, ..Range::default() });
        }
        trace.finish();
        trace
    }

    #[test]
    fn a_range_name_has_one_colour_in_every_file() {
        let names = ["prefill", "decode", "ncclAllReduce", "forward"];
        let first = file(&[], &names);
        let second = file(&["sm90_xmma_gemm", "cudaLaunchKernel", "other"], &names);
        let id = |t: &Trace, name: &str| t.ranges.iter().find(|r| t.names.get(r.name) == name).unwrap().name;
        assert_ne!(id(&first, "decode"), id(&second, "decode"), "the files give the name different ids");
        let data = TimelineData::build(vec![first, second], Categories::builtin());
        let color = |trace: usize, i: usize| event_color(&data, trace, EventRef::new(EventKind::Range, i));
        for (i, name) in names.iter().enumerate() {
            assert_eq!(color(0, i), color(1, i), "{name}");
            assert_eq!(color(0, i), range_color(name));
        }
        // Not all one colour: the names spread over the palette.
        let distinct: std::collections::HashSet<Color32> = (0..names.len()).map(|i| color(0, i)).collect();
        assert!(distinct.len() >= 3, "{distinct:?}");
    }

    /// CIE 1976 L*a*b* of an sRGB colour.
    fn lab(color: Color32) -> [f64; 3] {
        let linear = |u: u8| {
            let u = f64::from(u) / 255.0;
            if u <= 0.04045 { u / 12.92 } else { ((u + 0.055) / 1.055).powf(2.4) }
        };
        let (r, g, b) = (linear(color.r()), linear(color.g()), linear(color.b()));
        let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
        let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
        let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
        let f = |t: f64| if t > 0.008856 { t.cbrt() } else { 7.787 * t + 16.0 / 116.0 };
        [116.0 * f(y) - 16.0, 500.0 * (f(x) - f(y)), 200.0 * (f(y) - f(z))]
    }

    #[test]
    fn range_colours_stay_apart_from_the_category_colours() {
        let categories = Categories::builtin();
        let legend: Vec<Color32> = categories
            .names()
            .iter()
            .map(|name| crate::timeline::paint::category_color(&categories, name))
            .chain(PALETTE)
            .collect();
        for range in RANGE_PALETTE {
            for category in &legend {
                let (a, b) = (lab(range), lab(*category));
                let distance = ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt();
                assert!(distance >= 20.0, "{range:?} is {distance:.1} from {category:?}");
            }
        }
    }

    #[test]
    fn every_kind_round_trips_and_unknown_tags_are_rejected() {
        for kind in EventKind::ALL {
            let event = EventRef::new(kind, 12_345);
            assert_eq!((event.kind(), event.index()), (kind, 12_345));
            assert_eq!(EventRef::from_bits(event.bits()), Some(event));
        }
        // Five kinds take five of the eight 3-bit tags; a tag beyond the kinds never reads back as some other kind.
        let past_the_kinds = (EventKind::ALL.len() as u64) << EventRef::INDEX_BITS;
        let bits = u32::try_from(past_the_kinds).expect("a tag is left over");
        assert_eq!(EventRef::from_bits(bits), None);
        assert_eq!(EventKind::Range.label(), "range");
    }
}
