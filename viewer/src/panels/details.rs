//! The details of the selected event: timing, stream, launch configuration, the API call
//! that launched it, the NVTX ranges around it and its collective.

use egui::{Grid, RichText};
use shardscope_model::ProcessIdx;

use crate::collectives::CollectiveIndex;
use crate::timeline::Selected;
use crate::timeline::events::{EventKindInfo, dispatch, process_text, row};
use crate::timeline::layout::{EventKind, EventRef, TimelineData};
use crate::timeline::paint::format_duration;

/// Something the user asked for from the details panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailsAction {
    /// Select and show another event (the launching call, a launched kernel).
    Select(Selected),
}

/// How far past a call's start to look for what it launched; a launch queue deeper than this
/// many kernels is not something a real run sustains.
const LAUNCH_SCAN_LIMIT: usize = 200_000;

/// The kernel or memory operation an API call launched, by process and correlation id.
pub fn launched_by(data: &TimelineData, call: &Selected) -> Option<Selected> {
    if call.event.kind() != EventKind::Api {
        return None;
    }
    let trace = &data.traces[call.trace];
    let index = call.event.index() as u32;
    let api = &trace.api_calls[call.event.index()];
    if api.correlation_id == 0 {
        return None;
    }
    // Launched work starts after the call did: search kernels from there only.
    let from = trace.kernels.partition_point(|k| k.start_ns < api.start_ns);
    if let Some(k) = trace.kernels[from..].iter().take(LAUNCH_SCAN_LIMIT).position(|k| k.launch == Some(index)) {
        return Some(Selected { trace: call.trace, event: EventRef::new(EventKind::Kernel, from + k) });
    }
    let from = trace.memops.partition_point(|m| m.start_ns < api.start_ns);
    trace.memops[from..]
        .iter()
        .take(LAUNCH_SCAN_LIMIT)
        .position(|m| m.launch == Some(index))
        .map(|m| Selected { trace: call.trace, event: EventRef::new(EventKind::MemOp, from + m) })
}

/// The launching API call of a kernel or memory operation.
pub fn launch_of(data: &TimelineData, selected: &Selected) -> Option<Selected> {
    let trace = &data.traces[selected.trace];
    let launch = match selected.event.kind() {
        EventKind::Kernel => trace.kernels[selected.event.index()].launch,
        EventKind::MemOp => trace.memops[selected.event.index()].launch,
        _ => None,
    }?;
    Some(Selected { trace: selected.trace, event: EventRef::new(EventKind::Api, launch as usize) })
}

/// Ranges of thread `tid` that contain time `t_ns`, outermost first.
pub fn ranges_around(data: &TimelineData, trace: usize, process: ProcessIdx, tid: u32, t_ns: i64) -> Vec<Selected> {
    let Some(tracks) = data.range_tracks.get(&(trace, process, tid)) else { return Vec::new() };
    tracks
        .iter()
        .filter_map(|&track_index| {
            let track = &data.tracks[track_index];
            let i = track.event_at(t_ns, 0)?;
            (track.starts_ns[i] <= t_ns && track.ends_ns[i] >= t_ns)
                .then_some(Selected { trace, event: track.events[i] })
        })
        .collect()
}

/// Shows the details of `selected`; returns what the user clicked.
pub fn details_ui(
    ui: &mut egui::Ui,
    data: &TimelineData,
    collectives: &CollectiveIndex,
    selected: Option<Selected>,
) -> Option<DetailsAction> {
    let Some(selected) = selected else {
        ui.label("Click an event in the timeline to see its details.");
        return None;
    };
    let trace = &data.traces[selected.trace];
    let (start, end) = data.event_span(selected.trace, selected.event);
    ui.label(RichText::new(data.event_full_name(selected.trace, selected.event)).strong().monospace());
    ui.add_space(4.0);
    Grid::new("details_grid").num_columns(2).striped(true).show(ui, |ui| {
        row(ui, "kind", selected.event.kind().label());
        row(ui, "start", format!("{} (ts {start} ns)", format_duration((start - data.t0_ns) as f64)));
        row(ui, "duration", format_duration((end - start) as f64));
        row(ui, "file", trace.source.path.clone());
        dispatch!(selected.event.kind(), Info => Info::details_ui(ui, data, selected.trace, selected.event.index()));
    });
    // Each section returns the event the user clicked in it, if any; the last click wins.
    let clicked = [
        launch_relation_ui(ui, data, selected),
        ranges_around_ui(ui, data, selected),
        collective_ui(ui, data, collectives, selected),
    ];
    clicked.into_iter().flatten().last().map(DetailsAction::Select)
}

/// The launch relation, both directions: the call that launched the event, the work a call launched.
fn launch_relation_ui(ui: &mut egui::Ui, data: &TimelineData, selected: Selected) -> Option<Selected> {
    let mut clicked = None;
    let trace = &data.traces[selected.trace];
    let (start, _) = data.event_span(selected.trace, selected.event);
    if let Some(launch) = launch_of(data, &selected) {
        let (a_start, a_end) = data.event_span(launch.trace, launch.event);
        let call = &trace.api_calls[launch.event.index()];
        ui.separator();
        ui.label(RichText::new("Launched by").strong());
        if ui
            .link(format!(
                "{} on thread {} at {} ({})",
                data.event_name(launch.trace, launch.event),
                call.tid,
                format_duration((a_start - data.t0_ns) as f64),
                format_duration((a_end - a_start) as f64)
            ))
            .clicked()
        {
            clicked = Some(launch);
        }
        ui.label(format!("launch latency {}", format_duration((start - a_start) as f64)));
    }
    if let Some(kernel) = launched_by(data, &selected) {
        ui.separator();
        ui.label(RichText::new("Launched").strong());
        let (k_start, _) = data.event_span(kernel.trace, kernel.event);
        if ui
            .link(format!(
                "{} at {}",
                data.event_name(kernel.trace, kernel.event),
                format_duration((k_start - data.t0_ns) as f64)
            ))
            .clicked()
        {
            clicked = Some(kernel);
        }
    }
    clicked
}

/// The NVTX ranges around the host side of the event (the event itself, or its launching call).
fn ranges_around_ui(ui: &mut egui::Ui, data: &TimelineData, selected: Selected) -> Option<Selected> {
    let mut clicked = None;
    let trace = &data.traces[selected.trace];
    let host_side = match selected.event.kind() {
        EventKind::Api | EventKind::Range => Some(selected),
        _ => launch_of(data, &selected),
    };
    if let Some(host) = host_side {
        let (process, tid, t) = match host.event.kind() {
            EventKind::Api => {
                let a = &trace.api_calls[host.event.index()];
                (a.process, a.tid, a.start_ns)
            }
            _ => {
                let r = &trace.ranges[host.event.index()];
                (r.process, r.tid, r.start_ns)
            }
        };
        let around: Vec<Selected> =
            ranges_around(data, selected.trace, process, tid, t).into_iter().filter(|r| *r != selected).collect();
        if !around.is_empty() {
            ui.separator();
            ui.label(RichText::new("Ranges around it").strong());
            for range in around {
                if ui.link(data.event_name(range.trace, range.event)).clicked() {
                    clicked = Some(range);
                }
            }
        }
    }
    clicked
}

/// For a collective kernel: its instance across ranks, wait and transfer time, metadata, and the
/// same instance on every other rank.
fn collective_ui(
    ui: &mut egui::Ui,
    data: &TimelineData,
    collectives: &CollectiveIndex,
    selected: Selected,
) -> Option<Selected> {
    let mut clicked = None;
    let trace = &data.traces[selected.trace];
    if selected.event.kind() == EventKind::Kernel {
        let k = &trace.kernels[selected.event.index()];
        let meta = k.collective.and_then(|c| trace.collectives.get(c as usize));
        if let Some(instance) = collectives.instance_of(&selected) {
            ui.separator();
            ui.label(RichText::new("Collective").strong());
            Grid::new("collective_grid").num_columns(2).show(ui, |ui| {
                row(ui, "operation", instance.op.label());
                if !instance.group.is_empty() {
                    row(ui, "group", instance.group.clone());
                }
                row(ui, "occurrence on this rank", instance.occurrence.to_string());
                // Matched across ranks: the kernel's time splits into waiting for the last rank and moving data.
                let wait_ns = collectives.wait_ns().get(&(selected.trace, selected.event.index() as u32)).copied();
                let wait_ns = wait_ns.unwrap_or(0).min(k.duration_ns());
                row(ui, "waiting for other ranks", format_duration(wait_ns as f64));
                row(ui, "transfer", format_duration((k.duration_ns() - wait_ns) as f64));
                if let Some(c) = meta {
                    if let Some(bytes) = c.bytes {
                        row(ui, "bytes", bytes.to_string());
                    }
                    let dtype = trace.names.get(c.dtype);
                    if !dtype.is_empty() {
                        row(ui, "dtype", dtype);
                    }
                    if let Some(size) = c.group_size {
                        row(ui, "group size", size.to_string());
                    }
                    if let Some(seq) = c.seq {
                        row(ui, "sequence", seq.to_string());
                    }
                }
            });
            let peers = collectives.peers(&selected);
            ui.label(format!("same instance on {} rank(s):", peers.len()));
            for peer in peers {
                let (p_start, p_end) = data.event_span(peer.trace, peer.event);
                let peer_trace = &data.traces[peer.trace];
                let process = peer_trace.kernels[peer.event.index()].process;
                let text = format!(
                    "{}: {} at {}",
                    process_text(peer_trace, process),
                    format_duration((p_end - p_start) as f64),
                    format_duration((p_start - data.t0_ns) as f64)
                );
                if ui.link(text).clicked() {
                    clicked = Some(*peer);
                }
            }
        }
    }
    clicked
}
