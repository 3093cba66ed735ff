//! The viewer on real traces from `../shared/traces`: every event lands in exactly one track,
//! and the range-statistics panel shows what `shardscope_analyzer::report::analyze` computes
//! for the same files and window.
//!
//! Listed as ignored ("needs ../shared/traces") where that folder is absent, as in a user's clone.

use std::path::PathBuf;
use std::sync::Arc;

use shardscope_analyzer::report::{Options, analyze};
use shardscope_viewer::load::{Loaded, load_paths};
use shardscope_viewer::panels::range_stats::RangeStats;
use shardscope_viewer::timeline::layout::EventKind;

/// `../shared/traces` beside the checkout. Tests that call this carry `#[cfg_attr(not(shared_traces), ignore = …)]`:
/// the build script sets that cfg, and the path, when it finds the folder.
fn shared_traces() -> PathBuf {
    match option_env!("SHARDSCOPE_SHARED_TRACES") {
        Some(dir) => PathBuf::from(dir),
        None => panic!("../shared/traces was not there when this test was built (see viewer/build.rs)"),
    }
}

fn load(path: PathBuf) -> Loaded {
    load_paths(&[path], |_, _| {}).expect("loads")
}

fn count_kind(loaded: &Loaded, kind: EventKind) -> usize {
    loaded.data.tracks.iter().map(|t| t.events.iter().filter(|e| e.kind() == kind).count()).sum()
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn every_event_of_an_nsys_export_is_in_one_track() {
    let traces = shared_traces();
    let loaded = load(traces.join("nsys/mfu_2gpu_before.sqlite"));
    let trace = &loaded.data.traces[0];
    // sqlite3: SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL → 4010 (2 devices);
    // MEMCPY → 1020, MEMSET → 269.
    assert_eq!(trace.kernels.len(), 4010);
    assert_eq!(count_kind(&loaded, EventKind::Kernel), 4010);
    assert_eq!(count_kind(&loaded, EventKind::MemOp), 1020 + 269);
    assert_eq!(count_kind(&loaded, EventKind::Api), trace.api_calls.len());
    assert_eq!(count_kind(&loaded, EventKind::Range), trace.ranges.len());
    // Two processes, one GPU each.
    let gpu_headers = loaded
        .data
        .rows
        .iter()
        .filter(|r| matches!(&r.content, shardscope_viewer::timeline::layout::RowContent::Header { label, .. } if label.starts_with("GPU")))
        .count();
    assert_eq!(gpu_headers, 2);
}

fn assert_panel_matches_analyzer(loaded: Loaded, window_ns: Option<(i64, i64)>) {
    let data = Arc::new(loaded.data);
    let mut stats = RangeStats::default();
    stats.update(&data, window_ns, &egui::Context::default());
    stats.wait();
    let report = analyze(&data.traces, &Options { window_ns, ..Options::default() });
    assert_eq!(stats.ranks.len(), report.ranks.len());
    assert!(!stats.ranks.is_empty());
    for (shown, expected) in stats.ranks.iter().zip(&report.ranks) {
        let f = &expected.figures;
        assert_eq!(shown.rank, expected.rank);
        assert_eq!(shown.span_ns, f.span_ns);
        assert_eq!(shown.gpu_busy_ns, f.gpu_busy_ns);
        assert_eq!(shown.comm_ns, f.comm_ns);
        assert_eq!(shown.exposed_comm_ns, f.exposed_comm_ns);
        assert_eq!(shown.comm_comp_overlap_pct, f.comm_comp_overlap_pct);
        let shown_total: i64 = shown.categories.iter().map(|(_, ns)| ns).sum();
        assert_eq!(shown_total, f.categories.values().sum::<i64>());
        for (name, ns) in &shown.categories {
            assert_eq!(f.categories.get(name), Some(ns), "category {name}");
        }
        assert_eq!(shown.phases.len(), expected.phases.len());
    }
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn whole_trace_statistics_equal_the_analyzer_report_nsys() {
    let traces = shared_traces();
    let loaded = load(traces.join("nsys/mfu_2gpu_before.sqlite"));
    assert_panel_matches_analyzer(loaded, None);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn range_statistics_equal_the_analyzer_report_for_the_same_window() {
    let traces = shared_traces();
    let loaded = load(traces.join("nsys/mfu_2gpu_before.sqlite"));
    let (t0, t1) = (loaded.data.t0_ns, loaded.data.t1_ns);
    let window = (t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3);
    assert_panel_matches_analyzer(loaded, Some(window));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn whole_trace_statistics_equal_the_analyzer_report_kineto_8_ranks() {
    let traces = shared_traces();
    let loaded = load(traces.join("kineto/dlrm_8rank"));
    assert_eq!(loaded.data.traces.len(), 8);
    assert_panel_matches_analyzer(loaded, None);
}
