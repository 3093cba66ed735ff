//! What the timeline draws over its tracks: the critical path across ranks and the no-straggler replay, as data
//! ready to paint. `critical.rs` and `ideal.rs` compute them from the timeline's data on a background thread;
//! the timeline only reads them, so the dependencies point one way (those modules use the timeline, never the
//! reverse).

use std::collections::HashMap;

use shardscope_analyzer::dependency::critical_path::Share;

use super::events::EventRef;
use super::paint::format_duration;

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
            format_duration(self.measured_ns as f64),
            top(&self.by_rank),
            top(&self.by_category)
        )
    }
}

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
            format_duration(self.measured_ns as f64),
            format_duration(self.ideal_ns as f64),
        )
    }
}
