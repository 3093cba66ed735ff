//! The no-straggler replay beside the real timeline: every GPU operation of a step or window at the start and end
//! the analyzer's dependency model gives it once every rank runs each operation at its typical (median across
//! ranks) duration (`shardscope_analyzer::dependency::whatif::no_straggler_times`, the ideal of the slowdown `S` that
//! `analyzer what-if --no-straggler` reports and `analyzer critical-path --perfetto` exports).
//!
//! Each operation is placed on the viewer's stream track of its rank (the model's rank table names the trace and
//! GPU) and lane (the CUDA stream); the timeline draws it in an extra row under that track. Host calls are left
//! out: the rows compare GPU work, and the step time is the last GPU end.
//!
//! The replay is computed on a background thread: the dependency model walks every event of the window.

use std::collections::HashMap;
use std::sync::Arc;

use shardscope_analyzer::dependency::critical_path::build_model;
use shardscope_analyzer::dependency::graph::{OpKind, end_vertex, start_vertex};
use shardscope_analyzer::dependency::whatif::no_straggler_times;

use crate::critical::{Computed, PathRequest};
use crate::timeline::events::{EventKind, EventRef};
use crate::timeline::layout::TimelineData;

/// One GPU operation at its replayed time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdealOp {
    /// Replayed start, trace ns.
    pub start_ns: i64,
    /// Replayed end, trace ns.
    pub end_ns: i64,
    /// Its trace.
    pub trace: usize,
    /// The event it replays; `None` for a CUDA graph execution, which the viewer shows no event for.
    pub event: Option<EventRef>,
}

/// The no-straggler replay of one step or window, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct IdealReplay {
    /// The step, when the replay is one step's.
    pub step: Option<usize>,
    /// The analysed window (the step's, when there is a step); `None`: the whole trace.
    pub window_ns: Option<(i64, i64)>,
    /// Where both times are counted from: the model's window start, trace ns.
    pub start_ns: i64,
    /// Last measured GPU end minus `start_ns`.
    pub measured_ns: i64,
    /// Last replayed GPU end minus `start_ns` (what-if's `ideal_ns`).
    pub ideal_ns: i64,
    /// Replayed operations per stream track, by start.
    pub rows: HashMap<usize, Vec<IdealOp>>,
    /// GPU operations whose stream has no track in the viewer.
    pub unplaced: usize,
}

impl IdealReplay {
    /// The replay of `request` over `data`'s traces, with the analyzer settings the viewer shows figures with; the
    /// error is one line (no such step, no GPU work in the window).
    pub fn compute(data: &TimelineData, request: PathRequest) -> Result<IdealReplay, String> {
        let options = data.categories.options(None);
        let window = if request.step.is_some() { None } else { request.window_ns };
        let model = build_model(&data.traces, &options, window, request.step)?;
        let graph = &model.graph;
        let replay_ns = no_straggler_times(&model);
        let origin = graph.window_start_ns;
        let span = |times: &[i64]| graph.last_end(times).map_or(0, |(_, t)| t.saturating_sub(origin));
        let mut rows: HashMap<usize, Vec<IdealOp>> = HashMap::new();
        let mut unplaced = 0;
        for (op_id, op) in graph.ops.iter().enumerate() {
            if !op.kind.on_gpu() {
                continue;
            }
            let key = &graph.ranks[op.rank_index as usize].key;
            let Some(&track) = data.stream_track.get(&(key.trace, key.device, op.lane)) else {
                unplaced += 1;
                continue;
            };
            let event = match op.kind {
                OpKind::Kernel => Some(EventRef::new(EventKind::Kernel, op.index as usize)),
                OpKind::Copy | OpKind::Set => Some(EventRef::new(EventKind::MemOp, op.index as usize)),
                OpKind::Graph | OpKind::HostCall => None,
            };
            rows.entry(track).or_default().push(IdealOp {
                start_ns: replay_ns[start_vertex(op_id as u32) as usize],
                end_ns: replay_ns[end_vertex(op_id as u32) as usize],
                trace: op.trace as usize,
                event,
            });
        }
        for ops in rows.values_mut() {
            ops.sort_by_key(|o| (o.start_ns, o.end_ns));
        }
        Ok(IdealReplay {
            step: model.step,
            window_ns: model.window_ns,
            start_ns: origin,
            measured_ns: span(graph.measured_ns()),
            ideal_ns: span(&replay_ns),
            rows,
            unplaced,
        })
    }

    /// The latest replayed end of an operation in the rows, trace ns.
    pub fn last_end_ns(&self) -> Option<i64> {
        self.rows.values().flatten().map(|o| o.end_ns).max()
    }

    /// Slowdown `S`: measured over ideal step time (1 when there is no ideal time to divide by).
    pub fn slowdown(&self) -> f64 {
        if self.ideal_ns > 0 { self.measured_ns as f64 / self.ideal_ns as f64 } else { 1.0 }
    }

    /// One line for the toolbar: what the replay is of, measured against ideal time, and `S`.
    pub fn summary(&self) -> String {
        let of = match (self.step, self.window_ns) {
            (Some(step), _) => format!("step {step}"),
            (None, Some(_)) => "the window".to_string(),
            (None, None) => "the whole trace".to_string(),
        };
        let unplaced = match self.unplaced {
            0 => String::new(),
            n => format!(" · {n} operations on streams without a track"),
        };
        // An ideal slower than the run is a model that does not fit it (as `analyzer what-if` says): no S then.
        let slowdown = if self.ideal_ns > self.measured_ns {
            "no S: the ideal is slower than measured, the model does not fit (analyzer what-if says why)".to_string()
        } else {
            format!("S = {:.3}", self.slowdown())
        };
        format!(
            "ideal (no straggler) of {of}: measured {} · ideal {} · {slowdown}{unplaced}",
            crate::timeline::paint::format_duration(self.measured_ns as f64),
            crate::timeline::paint::format_duration(self.ideal_ns as f64),
        )
    }
}

/// The replay toggle and its result, computed in the background like the critical path.
pub type IdealState = Computed<IdealReplay>;

impl IdealState {
    /// Starts computing the replay asked for unless it is shown or on its way; picks up a finished one.
    pub fn update(&mut self, data: &Arc<TimelineData>, ctx: &egui::Context) {
        self.start(data, ctx, "viewer-ideal-replay", IdealReplay::compute);
    }

    /// The replay to draw: enabled, computed, and the one asked for.
    pub fn replay(&self) -> Option<Arc<IdealReplay>> {
        self.shown()
    }
}
