//! `analyzer compare` on the one- and two-GPU captures of the same workload: per-rank times are the reports'
//! category times averaged over ranks, and speedup and efficiency follow from them.

mod common;

use common::{analyzer, assert_one_line_error, repo_root};
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn tp1_vs_tp2_per_rank_speedup() {
    let tp1 = repo_root().join("sample-traces/tp1_capture.sqlite.gz");
    let tp2 = repo_root().join("sample-traces/tp2_capture.sqlite.gz");
    let (tp1, tp2) = (tp1.to_str().unwrap(), tp2.to_str().unwrap());
    let c = json(&["compare", "--format", "json", "--run", tp1, "--run", tp2, "--label", "TP=1", "--label", "TP=2"]);
    assert_eq!(c["runs"], serde_json::json!(["TP=1", "TP=2"]));
    let phases: Vec<&str> = c["phases"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["", "prefill", "decode"]);

    // Independent: the per-rank GEMM time of each run from its own report.
    let gemm_of = |trace: &str, phase: &str| -> f64 {
        let report = json(&["report", "--format", "json", trace]);
        let ranks = report["ranks"].as_array().unwrap();
        let total: i64 = ranks.iter().map(|r| r["phases"][phase]["categories"]["gemm"].as_i64().unwrap()).sum();
        total as f64 / ranks.len() as f64
    };
    let decode = &c["phases"][2];
    assert_eq!(decode["ranks"], serde_json::json!([1, 2]));
    let gemm = decode["rows"].as_array().unwrap().iter().find(|r| r["what"] == "gemm").unwrap();
    let (base, two) = (gemm_of(tp1, "decode"), gemm_of(tp2, "decode"));
    assert_eq!(gemm["per_rank_ns"][0].as_f64().unwrap(), base);
    assert_eq!(gemm["per_rank_ns"][1].as_f64().unwrap(), two);
    assert!((gemm["speedup"][1].as_f64().unwrap() - base / two).abs() < 1e-9);
    assert!((gemm["efficiency_pct"][1].as_f64().unwrap() - 100.0 * base / two / 2.0).abs() < 1e-9);
    // Tensor parallelism splits the GEMMs: on 2 GPUs each rank does clearly less.
    assert!(base / two > 1.5, "GEMM speedup {}", base / two);
    // There is no all-reduce on one GPU: no speedup can be given.
    let comm = decode["rows"].as_array().unwrap().iter().find(|r| r["what"] == "comm.all_reduce").unwrap();
    assert!(comm["per_rank_ns"][0].is_null() && comm["speedup"][1].is_null());
}

#[test]
fn labels_must_match_runs() {
    let tp1 = repo_root().join("sample-traces/tp1_capture.sqlite.gz");
    let output = analyzer(&["compare", "--run", tp1.to_str().unwrap(), "--label", "a", "--label", "b"]);
    assert_one_line_error(&output, "--label");
}
