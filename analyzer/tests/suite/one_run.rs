//! Inputs checked to be one run: files of different runs are refused (one line, exit 2) unless `--allow-mixed`,
//! a partial set of ranks gets a note, every report gives each input's time range, and `--window` limits the
//! collectives too.

use crate::common;

use common::{analyzer, assert_one_line_error, repo_root, shared_traces};
use serde_json::Value;

/// `sample-traces/` holds five runs (TP=1 and TP=2, nsys and capture): they record world sizes 1 and 2.
#[test]
fn different_runs_are_refused_unless_allowed() {
    let dir = repo_root().join("sample-traces");
    let output = analyzer(&["report", dir.to_str().unwrap()]);
    assert_one_line_error(&output, "not one run");
    assert_one_line_error(&output, "tp1_capture.sqlite.gz");
    let allowed = analyzer(&["report", "--format", "json", "--allow-mixed", dir.to_str().unwrap()]);
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    let r: Value = serde_json::from_slice(&allowed.stdout).unwrap();
    let notes = r["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().starts_with("inputs are not one run")), "{notes:?}");
}

/// Two windows cut from different runs of one program: their wall-clock ranges do not overlap.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn inputs_recorded_at_different_times_are_refused() {
    let shared = shared_traces();
    let (before, after) = (shared.join("nsys/mfu_2gpu_before.sqlite"), shared.join("nsys/mfu_2gpu_after.sqlite"));
    let output = analyzer(&["report", before.to_str().unwrap(), after.to_str().unwrap()]);
    assert_one_line_error(&output, "ran at another time");
}

/// Ranks 0 and 1 of a 128-rank job: analysed, with a note that says so. The eight DLRM ranks are one run.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn partial_rank_sets_get_a_note() {
    let shared = shared_traces();
    let output = analyzer(&["report", "--format", "json", shared.join("kineto/sampled_2rank").to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let r: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(r["notes"][0].as_str().unwrap().starts_with("2 of 128 ranks"), "{}", r["notes"]);
    let identity = &r["run_identities"][0];
    assert_eq!((identity["world_size"].as_u64(), identity["ranks"][0].as_u64()), (Some(128), Some(0)));
    let dlrm = analyzer(&["report", "--format", "json", shared.join("kineto/dlrm_8rank").to_str().unwrap()]);
    let r: Value = serde_json::from_slice(&dlrm.stdout).unwrap();
    assert_eq!(r["notes"].as_array().unwrap().len(), 0, "{}", r["notes"]);
}

/// The built-in sample's time range on its clock, from the first API call, range or GPU event to the last.
#[test]
fn reports_give_each_inputs_time_range() {
    let table = String::from_utf8(analyzer(&["report"]).stdout).unwrap();
    assert!(table.contains("time range of sample-traces/tp2_nsys.sqlite.gz (built in): "), "{table}");
    assert!(table.contains(" UTC"), "{table}");
}

/// `--window` applies to `collectives`: NCCL kernels reaching into one decode window of the sample are 5 on GPU 0
/// and 4 on GPU 1 (sqlite3 over the kernel table), so 4 are matched and 1 is left without a partner.
#[test]
fn window_limits_collective_matching() {
    let whole: Value = serde_json::from_slice(&analyzer(&["collectives", "--format", "json"]).stdout).unwrap();
    assert_eq!(whole["collectives"]["matched_instances"], 73);
    let windowed: Value = serde_json::from_slice(
        &analyzer(&["collectives", "--format", "json", "--window", "9282904333:9746385308"]).stdout,
    )
    .unwrap();
    assert_eq!(windowed["collectives"]["matched_instances"], 4);
    assert_eq!(windowed["collectives"]["unmatched_kernels"], 1);
    assert_eq!(windowed["instances"].as_array().unwrap().len(), 4);
}

/// `compare` labels runs by their file names and compares the median step time.
#[test]
fn compare_labels_runs_by_file_stem_and_has_step_time() {
    let root = repo_root();
    let tp1 = root.join("sample-traces/tp1_nsys.sqlite.gz");
    let tp2 = root.join("sample-traces/tp2_nsys.sqlite.gz");
    let output = analyzer(&["compare", "--run", tp1.to_str().unwrap(), "--run", tp2.to_str().unwrap()]);
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.starts_with("runs (baseline first): tp1_nsys | tp2_nsys"), "{table}");
    assert!(table.contains("step_time_p50"), "{table}");
}
