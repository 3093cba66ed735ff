//! Figures for a time window equal a brute-force clip of every event to that window (the analyzer finds a
//! window's events by binary search; this guards it, also for windows that start inside the longest kernel).

use crate::common;

use common::repo_root;
use shardscope_analyzer::report::{Options, analyze};
use shardscope_model::DeviceIdx;

#[test]
fn windowed_category_time_equals_clipped_event_time() {
    let traces = shardscope_io::load(&repo_root().join("sample-traces/tp2_nsys.sqlite.gz")).unwrap();
    let trace = &traces[0];
    let longest = trace.kernels.iter().max_by_key(|k| k.duration_ns()).unwrap();
    let (first, last) = (trace.kernels[0].start_ns, trace.kernels.iter().map(|k| k.end_ns).max().unwrap());
    let windows = [
        (first, last + 1),
        (longest.start_ns + longest.duration_ns() / 2, longest.end_ns + 1_000_000),
        (first + (last - first) / 3, first + (last - first) / 2),
        (last - 10_000_000, last),
    ];
    for window in windows {
        let report = analyze(&traces, &Options { window_ns: Some(window), ..Options::default() });
        for rank in &report.ranks {
            let device = DeviceIdx(trace.devices.iter().position(|d| d.ordinal == rank.device).unwrap() as u32);
            let clipped = |start: i64, end: i64| (end.min(window.1) - start.max(window.0)).max(0);
            let kernel_ns: i64 = trace
                .kernels
                .iter()
                .filter(|k| k.device == device && k.start_ns < window.1 && k.end_ns > window.0)
                .map(|k| clipped(k.start_ns, k.end_ns))
                .sum();
            let memop_ns: i64 = trace
                .memops
                .iter()
                .filter(|m| m.device == device && m.start_ns < window.1 && m.end_ns > window.0)
                .map(|m| clipped(m.start_ns, m.end_ns))
                .sum();
            assert_eq!(rank.figures.category_total_ns(), kernel_ns + memop_ns, "window {window:?} rank {}", rank.rank);
        }
    }
}
