//! The analysis window (`--window START:END`, nanoseconds on the trace's clock) and the one rule every subcommand
//! applies with it: an event is kept when it reaches into `[start, end)`, and its times are clipped to the window.
//! A zero-length event is kept when it lies inside the window, and so is an event that ends exactly where the window
//! starts (with zero length).
//!
//! [`clip`] is the rule; the report applies it event by event while it works, and [`restrict`] applies it to a
//! whole trace for the subcommands that hand traces on as they are (`kern-sum`, `export`).

use shardscope_model::Trace;

/// Why a `START_NS:END_NS` window could not be read; the text is what `--window` reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// No `:` between the two times.
    #[error("expected START_NS:END_NS")]
    NoColon,
    /// The start is not an integer.
    #[error("start: {0}")]
    Start(std::num::ParseIntError),
    /// The end is not an integer.
    #[error("end: {0}")]
    End(std::num::ParseIntError),
    /// The end is not after the start.
    #[error("END_NS must be after START_NS")]
    EndNotAfterStart,
}

/// Parses `START_NS:END_NS` (both integers, end after start).
pub fn parse(text: &str) -> Result<(i64, i64), WindowError> {
    let (start, end) = text.split_once(':').ok_or(WindowError::NoColon)?;
    let start: i64 = start.trim().parse().map_err(WindowError::Start)?;
    let end: i64 = end.trim().parse().map_err(WindowError::End)?;
    if end <= start {
        return Err(WindowError::EndNotAfterStart);
    }
    Ok((start, end))
}

/// Clips `[start_ns, end_ns)` to the window; `None` when nothing of it is left (without a window, the event as it is).
pub fn clip(start_ns: i64, end_ns: i64, window_ns: Option<(i64, i64)>) -> Option<(i64, i64)> {
    let (start, end) = match window_ns {
        Some((w0, w1)) => (start_ns.max(w0), end_ns.min(w1)),
        None => (start_ns, end_ns),
    };
    (end > start || (end == start && window_ns.is_none_or(|(w0, w1)| start >= w0 && start < w1)))
        .then_some((start, end))
}

/// How many events of each kind a [`restrict`] kept, out of how many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// Kernels kept, and in the trace.
    pub kernels: (usize, usize),
    /// Copies and sets kept, and in the trace.
    pub memops: (usize, usize),
    /// CUDA API calls kept, and in the trace.
    pub api_calls: (usize, usize),
    /// NVTX and annotation ranges kept, and in the trace.
    pub ranges: (usize, usize),
    /// CUDA graphs recorded whole kept, and in the trace.
    pub graph_launches: (usize, usize),
}

impl Kept {
    /// Adds another trace's counts.
    pub fn add(&mut self, other: Kept) {
        let sum = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
        self.kernels = sum(self.kernels, other.kernels);
        self.memops = sum(self.memops, other.memops);
        self.api_calls = sum(self.api_calls, other.api_calls);
        self.ranges = sum(self.ranges, other.ranges);
        self.graph_launches = sum(self.graph_launches, other.graph_launches);
    }
}

/// Keeps only the events of `trace` that reach into the window, clipped to it, and links launches again: a kernel
/// whose launch call lies outside the window keeps no launch call. Processes, devices, names, collective metadata and
/// import warnings stay as they are.
pub fn restrict(trace: &mut Trace, window_ns: (i64, i64)) -> Kept {
    fn keep<T>(
        events: &mut Vec<T>,
        window_ns: (i64, i64),
        times: impl Fn(&mut T) -> (&mut i64, &mut i64),
    ) -> (usize, usize) {
        let before = events.len();
        events.retain_mut(|event| {
            let (start, end) = times(event);
            match clip(*start, *end, Some(window_ns)) {
                Some((clipped_start, clipped_end)) => {
                    (*start, *end) = (clipped_start, clipped_end);
                    true
                }
                None => false,
            }
        });
        (events.len(), before)
    }
    let kept = Kept {
        kernels: keep(&mut trace.kernels, window_ns, |k| (&mut k.start_ns, &mut k.end_ns)),
        memops: keep(&mut trace.memops, window_ns, |m| (&mut m.start_ns, &mut m.end_ns)),
        api_calls: keep(&mut trace.api_calls, window_ns, |a| (&mut a.start_ns, &mut a.end_ns)),
        ranges: keep(&mut trace.ranges, window_ns, |r| (&mut r.start_ns, &mut r.end_ns)),
        graph_launches: keep(&mut trace.graph_launches, window_ns, |g| (&mut g.start_ns, &mut g.end_ns)),
    };
    // Launch links are indices into the API calls, which have just changed: link again by correlation id.
    for kernel in &mut trace.kernels {
        kernel.launch = None;
    }
    for memop in &mut trace.memops {
        memop.launch = None;
    }
    for graph in &mut trace.graph_launches {
        graph.launch = None;
    }
    trace.finish();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{ApiCall, Device, Kernel, Process};

    #[test]
    fn clip_keeps_what_reaches_into_the_window() {
        assert_eq!(clip(0, 10, Some((5, 20))), Some((5, 10)));
        // An event that ends where the window starts touches it: kept with zero length, like a zero-length event.
        assert_eq!(clip(0, 5, Some((5, 20))), Some((5, 5)));
        assert_eq!(clip(0, 4, Some((5, 20))), None);
        assert_eq!(clip(20, 30, Some((5, 20))), None);
        assert_eq!(clip(7, 7, Some((5, 20))), Some((7, 7)));
        assert_eq!(clip(20, 20, Some((5, 20))), None);
        assert_eq!(clip(3, 3, None), Some((3, 3)));
    }

    #[test]
    fn restrict_clips_and_relinks() {
        let mut trace = Trace::default();
        let p = trace.add_process(Process { pid: 1, ..Process::default() });
        let d = trace.add_device(Device::default());
        let launch = trace.names.intern("cudaLaunchKernel");
        let call = |start_ns, correlation_id| ApiCall {
            start_ns,
            end_ns: start_ns + 2,
            name: launch,
            process: p,
            correlation_id,
            ..ApiCall::default()
        };
        trace.api_calls = vec![call(0, 1), call(50, 2)];
        let kernel = |start_ns, end_ns, correlation_id| Kernel {
            start_ns,
            end_ns,
            device: d,
            process: p,
            correlation_id,
            ..Kernel::default()
        };
        trace.kernels = vec![kernel(10, 30, 1), kernel(60, 70, 2), kernel(200, 210, 3)];
        trace.finish();
        let kept = restrict(&mut trace, (20, 100));
        assert_eq!((kept.kernels, kept.api_calls), ((2, 3), (1, 2)));
        assert_eq!((trace.kernels[0].start_ns, trace.kernels[0].end_ns), (20, 30));
        // The first kernel's launch call lies before the window; the second's is the one call left.
        assert_eq!((trace.kernels[0].launch, trace.kernels[1].launch), (None, Some(0)));
    }

    #[test]
    fn parse_needs_an_ordered_pair() {
        assert_eq!(parse("5:9"), Ok((5, 9)));
        assert!(parse("9:5").is_err());
        assert!(parse("5").is_err());
        assert!(parse("a:9").is_err());
    }
}
