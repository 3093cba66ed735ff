//! The critical path across ranks, on the timeline: the analyzer's path of one step or window
//! (`shardscope_analyzer::dependency::critical_path`, what `analyzer critical-path` prints) placed on the viewer's tracks.
//!
//! Each segment of the path names its rank and lane (`stream N` or `thread N`); the rank is one GPU of one trace
//! (the model's rank table), a stream lane is that GPU's stream track and a thread lane is that thread's CUDA API
//! track. The timeline outlines the runs, dashes the delays and joins consecutive segments on different tracks,
//! boldly where the path crosses to another rank (a collective that waited for the last rank to arrive).
//!
//! The path is computed on a background thread: the dependency model walks every event of the window.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError, channel};

use shardscope_analyzer::dependency::critical_path::{build_model, critical_path};
use shardscope_model::DeviceIdx;

use crate::timeline::layout::TimelineData;
pub use crate::timeline::overlays::{PathOverlay, PathRequest, PathSegment};

impl PathOverlay {
    /// The path of `request` over `data`'s traces, with the analyzer settings the viewer shows figures with; the
    /// error is one line (no such step, no GPU work in the window).
    pub fn compute(data: &TimelineData, request: PathRequest) -> Result<PathOverlay, String> {
        let options = data.categories.options(None);
        let window = if request.step.is_some() { None } else { request.window_ns };
        let model = build_model(&data.traces, &options, window, request.step).map_err(|e| e.to_string())?;
        let path = critical_path(&data.traces, &model);
        let place = |rank: u32, lane: &str| -> Option<usize> {
            let spec = model.graph.ranks.iter().find(|r| r.rank == rank)?;
            let (trace, device) = (spec.key.trace, spec.key.device);
            if let Some(stream) = lane.strip_prefix("stream ") {
                return data.stream_track.get(&(trace, device, stream.parse().ok()?)).copied();
            }
            let tid: u32 = lane.strip_prefix("thread ")?.parse().ok()?;
            api_track_of_thread(data, trace, device, tid)
        };
        let segments = path
            .segments
            .iter()
            .map(|s| PathSegment {
                track: place(s.rank, &s.lane),
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                rank: s.rank,
                run: s.part == "run",
                op: s.op.clone(),
                category: s.category.clone(),
                after: s.after.clone(),
            })
            .collect();
        Ok(PathOverlay {
            step: path.step,
            window_ns: path.window_ns,
            start_ns: path.start_ns,
            measured_ns: path.measured_ns,
            segments,
            by_rank: path.by_rank,
            by_category: path.by_category,
        })
    }
}

/// The CUDA API track of thread `tid` of `trace`, preferring the process that drives `device`.
fn api_track_of_thread(data: &TimelineData, trace: usize, device: DeviceIdx, tid: u32) -> Option<usize> {
    let owner = data.traces[trace].devices.get(device.0 as usize).and_then(|d| d.process);
    if let Some(process) = owner
        && let Some(&track) = data.api_track.get(&(trace, process, tid))
    {
        return Some(track);
    }
    data.api_track.iter().filter(|((t, _, thread), _)| *t == trace && *thread == tid).map(|(_, &track)| track).min()
}

/// A toggle and the figure it shows (a critical path, a replay) for a [`PathRequest`], computed on a named
/// background thread because the dependency model walks every event of the window. Only the figure of the request
/// asked for last is shown; one asked for meanwhile replaces the one on its way.
#[derive(Debug)]
pub struct Computed<T> {
    /// Show the figure.
    pub enabled: bool,
    /// Of which step or window.
    pub request: PathRequest,
    /// The figure of `shown_for`, or why there is none.
    pub result: Option<Result<Arc<T>, String>>,
    /// Fit the view to the figure's window once it arrives.
    pub fit_when_ready: bool,
    shown_for: Option<PathRequest>,
    pending: Option<(PathRequest, Receiver<Result<T, String>>)>,
}

impl<T> Default for Computed<T> {
    fn default() -> Computed<T> {
        Computed {
            enabled: false,
            request: PathRequest::default(),
            result: None,
            fit_when_ready: false,
            shown_for: None,
            pending: None,
        }
    }
}

impl<T: Send + 'static> Computed<T> {
    /// Starts `compute` for the request on a thread named `thread_name` unless its figure is shown or on its way;
    /// picks up a finished one. `ctx` is asked to repaint when it arrives.
    pub(crate) fn start(
        &mut self,
        data: &Arc<TimelineData>,
        ctx: &egui::Context,
        thread_name: &str,
        compute: fn(&TimelineData, PathRequest) -> Result<T, String>,
    ) {
        self.poll();
        if !self.enabled
            || self.shown_for == Some(self.request)
            || self.pending.as_ref().is_some_and(|(r, _)| *r == self.request)
        {
            return;
        }
        let (sender, receiver) = channel();
        let (data, ctx, request) = (Arc::clone(data), ctx.clone(), self.request);
        std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || {
                // The receiver is gone when another figure was asked for meanwhile: drop this one.
                let _ = sender.send(compute(&data, request));
                ctx.request_repaint();
            })
            .unwrap_or_else(|e| panic!("cannot start the {thread_name} thread: {e}"));
        self.pending = Some((request, receiver));
    }

    fn poll(&mut self) {
        let Some((request, receiver)) = &self.pending else { return };
        match receiver.try_recv() {
            Ok(result) => {
                self.shown_for = Some(*request);
                self.result = Some(result.map(Arc::new));
                self.pending = None;
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => self.pending = None,
        }
    }

    /// The same toggle, request and fitting with nothing computed (after new traces were loaded).
    pub fn restarted(&self) -> Computed<T> {
        Computed {
            enabled: self.enabled,
            request: self.request,
            fit_when_ready: self.fit_when_ready,
            ..Computed::default()
        }
    }

    /// Blocks until the figure asked for last is in (for tests and screenshots).
    pub fn wait(&mut self) {
        if let Some((request, receiver)) = self.pending.take()
            && let Ok(result) = receiver.recv()
        {
            self.shown_for = Some(request);
            self.result = Some(result.map(Arc::new));
        }
    }

    /// True while a figure is being computed.
    pub fn is_computing(&self) -> bool {
        self.pending.is_some()
    }

    /// The figure to draw: enabled, computed, and the one asked for.
    pub fn shown(&self) -> Option<Arc<T>> {
        match &self.result {
            Some(Ok(figure)) if self.enabled && self.shown_for == Some(self.request) => Some(Arc::clone(figure)),
            _ => None,
        }
    }

    /// Why the figure asked for could not be made.
    pub fn error(&self) -> Option<&str> {
        match &self.result {
            Some(Err(e)) if self.enabled && self.shown_for == Some(self.request) => Some(e),
            _ => None,
        }
    }
}

/// The path toggle and its result.
pub type CriticalPathState = Computed<PathOverlay>;

impl CriticalPathState {
    /// Starts computing the path asked for unless it is shown or on its way; picks up a finished one.
    pub fn update(&mut self, data: &Arc<TimelineData>, ctx: &egui::Context) {
        self.start(data, ctx, "viewer-critical-path", PathOverlay::compute);
    }

    /// The path to draw: enabled, computed, and the one asked for.
    pub fn overlay(&self) -> Option<Arc<PathOverlay>> {
        self.shown()
    }
}
