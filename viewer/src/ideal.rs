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

use crate::critical::Computed;
use crate::timeline::events::{EventKind, EventRef};
use crate::timeline::layout::TimelineData;
use crate::timeline::overlays::PathRequest;
pub use crate::timeline::overlays::{IdealOp, IdealReplay};

impl IdealReplay {
    /// The replay of `request` over `data`'s traces, with the analyzer settings the viewer shows figures with; the
    /// error is one line (no such step, no GPU work in the window).
    pub fn compute(data: &TimelineData, request: PathRequest) -> Result<IdealReplay, String> {
        let options = data.categories.options(None);
        let window = if request.step.is_some() { None } else { request.window_ns };
        let model = build_model(&data.traces, &options, window, request.step).map_err(|e| e.to_string())?;
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
                trace: key.trace,
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
