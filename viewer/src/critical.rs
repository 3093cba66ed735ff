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

use shardscope_analyzer::dependency::critical_path::{Share, build_model, critical_path};
use shardscope_model::DeviceIdx;

use crate::timeline::layout::TimelineData;

/// One segment of the path, placed on a track.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSegment {
    /// The track it is drawn on; `None` when the viewer has no track for its lane.
    pub track: Option<usize>,
    /// Start, trace ns.
    pub start_ns: i64,
    /// End, trace ns.
    pub end_ns: i64,
    /// The rank it ran on.
    pub rank: u32,
    /// An operation's own time (`run`), else the time before it started (`delay`).
    pub run: bool,
    /// The operation.
    pub op: String,
    /// Op category of a run; `host_gap` or `gpu_delay` of a delay.
    pub category: String,
    /// The edge that made it wait.
    pub after: String,
}

/// The critical path of one step or window, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct PathOverlay {
    /// The step, when the path is one step's.
    pub step: Option<usize>,
    /// The analysed window (the step's, when there is a step); `None`: the whole trace.
    pub window_ns: Option<(i64, i64)>,
    /// Where the path starts, trace ns.
    pub start_ns: i64,
    /// Last GPU end minus `start_ns`.
    pub measured_ns: i64,
    /// The segments, in time order.
    pub segments: Vec<PathSegment>,
    /// Time on the path per rank, most first.
    pub by_rank: Vec<Share>,
    /// Time on the path per category, most first.
    pub by_category: Vec<Share>,
}

/// Which path: of a step (counted from 0 on each rank, as `analyzer critical-path --step`), else of a window,
/// else of the whole trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathRequest {
    /// The step.
    pub step: Option<usize>,
    /// The window, used when there is no step.
    pub window_ns: Option<(i64, i64)>,
}

impl PathOverlay {
    /// The path of `request` over `data`'s traces, with the analyzer settings the viewer shows figures with; the
    /// error is one line (no such step, no GPU work in the window).
    pub fn compute(data: &TimelineData, request: PathRequest) -> Result<PathOverlay, String> {
        let options = data.categories.options(None);
        let window = if request.step.is_some() { None } else { request.window_ns };
        let model = build_model(&data.traces, &options, window, request.step)?;
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

    /// Consecutive segments drawn on different tracks: the path's moves from one lane to another, as pairs of
    /// segment indices.
    pub fn hops(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (1..self.segments.len())
            .filter(move |&i| {
                let (a, b) = (&self.segments[i - 1], &self.segments[i]);
                a.track.is_some() && b.track.is_some() && a.track != b.track
            })
            .map(|i| (i - 1, i))
    }

    /// One line for the toolbar: what the path is of, how long, and who is on it most.
    pub fn summary(&self) -> String {
        let of = match (self.step, self.window_ns) {
            (Some(step), _) => format!("step {step}"),
            (None, Some(_)) => "the window".to_string(),
            (None, None) => "the whole trace".to_string(),
        };
        let top = |shares: &[Share]| -> String {
            shares.iter().take(2).map(|s| format!("{} {:.0} %", s.name, s.pct)).collect::<Vec<_>>().join(", ")
        };
        format!(
            "critical path of {of}: {} · {} · {}",
            crate::timeline::paint::format_duration(self.measured_ns as f64),
            top(&self.by_rank),
            top(&self.by_category)
        )
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
