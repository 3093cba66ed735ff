//! The gaps between capture windows: a capture taken in windows (`Trace::capture_windows`) recorded nothing
//! between them, so no step, span or idle time may reach across a gap.
//!
//! Kept apart from the figures it corrects: [`gaps`] finds the gaps of a process, [`unrecorded_ns`] is the
//! part of a span that fell in a gap with no recorded GPU work (left out of span and idle time), [`recorded_ns`]
//! the recorded time of a set of intervals (a phase's instances: its span), [`drop_spanning`] removes the steps
//! that touch a gap and [`drop_across`] the intervals that reach from one window over a gap into the next (a
//! phase instance whose length would include unrecorded time). The critical path splits its delays at the same
//! gaps (`dependency::critical_path`). A trace without windows, or with one window
//! per process, has no gaps and nothing changes.

use shardscope_model::{ProcessIdx, Trace};

use crate::figures::intervals::IntervalUnion;

/// The gaps between the capture windows of `process` (of all processes together when `None`), in time order.
pub fn gaps(trace: &Trace, process: Option<ProcessIdx>) -> Vec<(i64, i64)> {
    let windows: Vec<(i64, i64)> = trace
        .capture_windows
        .iter()
        .filter(|w| process.is_none_or(|p| w.process == p))
        .map(|w| (w.start_ns, w.end_ns))
        .collect();
    // Zero-length windows recorded nothing but still bound a gap.
    let covered = IntervalUnion::from_intervals(windows.iter().map(|&(s, e)| (s, e.max(s + 1))).collect());
    covered.spans().windows(2).map(|pair| (pair[0].1, pair[1].0)).collect()
}

/// The time of `[first_ns, last_ns)` that lies in a gap and is not in `busy` (recorded work launched inside a
/// window may run on into the gap): time the process was not recorded, so neither span nor idle.
pub fn unrecorded_ns(first_ns: i64, last_ns: i64, gaps: &[(i64, i64)], busy: &IntervalUnion) -> i64 {
    let inside: Vec<(i64, i64)> =
        gaps.iter().map(|&(s, e)| (s.max(first_ns), e.min(last_ns))).filter(|(s, e)| e > s).collect();
    let gap_time = IntervalUnion::from_intervals(inside);
    gap_time.length_ns() - gap_time.intersection_ns(busy)
}

/// The time of `union` outside the gaps, plus the time in a gap that `busy` holds (recorded work that ran on
/// into it): `union`'s length less [`unrecorded_ns`] of each of its spans.
pub fn recorded_ns(union: &IntervalUnion, gaps: &[(i64, i64)], busy: &IntervalUnion) -> i64 {
    let unrecorded: i64 = union.spans().iter().map(|&(start, end)| unrecorded_ns(start, end, gaps, busy)).sum();
    union.length_ns() - unrecorded
}

/// `intervals` without those that start before a gap and end after it (whose length includes the gap).
pub fn drop_across(intervals: Vec<(i64, i64)>, gaps: &[(i64, i64)]) -> Vec<(i64, i64)> {
    if gaps.is_empty() {
        return intervals;
    }
    intervals.into_iter().filter(|&(start, end)| !gaps.iter().any(|&(gs, ge)| start < gs && end > ge)).collect()
}

/// `intervals` without those that reach across a gap (start before its end and end after its start).
pub fn drop_spanning(intervals: Vec<(i64, i64)>, gaps: &[(i64, i64)]) -> Vec<(i64, i64)> {
    if gaps.is_empty() {
        return intervals;
    }
    intervals.into_iter().filter(|&(start, end)| !gaps.iter().any(|&(gs, ge)| start < ge && end > gs)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{CaptureWindow, WindowTrigger};

    fn trace(windows: &[(u32, i64, i64)]) -> Trace {
        let mut trace = Trace::default();
        for &(process, start_ns, end_ns) in windows {
            trace.capture_windows.push(CaptureWindow {
                process: ProcessIdx(process),
                start_ns,
                end_ns,
                start_trigger: WindowTrigger::CudaProfilerApi,
                end_trigger: WindowTrigger::CudaProfilerApi,
            });
        }
        trace
    }

    #[test]
    fn gaps_are_per_process_and_of_all_processes_together() {
        let trace = trace(&[(0, 0, 100), (0, 300, 400), (1, 50, 350)]);
        assert_eq!(gaps(&trace, Some(ProcessIdx(0))), [(100, 300)]);
        assert!(gaps(&trace, Some(ProcessIdx(1))).is_empty());
        assert!(gaps(&trace, None).is_empty(), "process 1 recorded through process 0's gap");
        assert!(gaps(&Trace::default(), None).is_empty());
    }

    #[test]
    fn unrecorded_time_leaves_out_work_that_ran_on_into_the_gap() {
        let busy = IntervalUnion::from_intervals(vec![(80, 150), (320, 390)]);
        // Span 80..390 crosses the gap 100..300; 100..150 was a kernel launched before the window ended.
        assert_eq!(unrecorded_ns(80, 390, &[(100, 300)], &busy), 150);
        assert_eq!(unrecorded_ns(80, 390, &[], &busy), 0);
    }

    #[test]
    fn recorded_time_and_instances_across_a_gap() {
        let busy = IntervalUnion::from_intervals(vec![(80, 150), (320, 390)]);
        let union = IntervalUnion::from_intervals(vec![(0, 60), (80, 390)]);
        // 60 + 310, less the gap 100..300 but for 100..150 that ran on into it.
        assert_eq!(recorded_ns(&union, &[(100, 300)], &busy), 60 + 310 - 150);
        assert_eq!(recorded_ns(&union, &[], &busy), 370);
        let instances = vec![(0, 60), (80, 150), (80, 390), (320, 390)];
        assert_eq!(drop_across(instances.clone(), &[(100, 300)]), [(0, 60), (80, 150), (320, 390)]);
        assert_eq!(drop_across(instances.clone(), &[]), instances);
    }

    #[test]
    fn steps_across_a_gap_are_dropped() {
        let steps = vec![(0, 50), (50, 120), (300, 350), (350, 400)];
        assert_eq!(drop_spanning(steps.clone(), &[(100, 300)]), [(0, 50), (300, 350), (350, 400)]);
        assert_eq!(drop_spanning(steps.clone(), &[]), steps);
    }
}
