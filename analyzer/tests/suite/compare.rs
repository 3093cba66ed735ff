//! `analyzer compare` on the one- and two-GPU captures of the same workload: per-rank times are the reports'
//! category times averaged over ranks, and speedup and efficiency follow from them.

use crate::common;

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

/// Golden figures computed with sqlite3 from the two nsys exports, not by the analyzer: GEMM kernels are the
/// `nvjet*` and `splitKreduce*` kernels (short names) of `CUPTI_ACTIVITY_KIND_KERNEL`, summed per GPU; a GPU's span
/// runs from its first kernel or memset start to its last end.
/// - TP=1: GEMM 4,739,354 ns on its one GPU; span 547,753,912 ns.
/// - TP=2: GEMM 2,584,797 and 2,565,109 ns (mean 2,574,953); spans 2,345,455,099 and 2,622,270,126 ns
///   (mean 2,483,862,612.5).
///
/// So GEMM speedup = 4,739,354 / 2,574,953 = 1.8406 and scaling efficiency = 1.8406 / (2 / 1) = 92.03 %; with 1000
/// tokens per run, tokens/s = 1825.64 and 402.60, a throughput efficiency of 11.03 %.
#[test]
fn tp1_vs_tp2_nsys_golden_efficiency() {
    let tp1 = repo_root().join("sample-traces/tp1_nsys.sqlite.gz");
    let tp2 = repo_root().join("sample-traces/tp2_nsys.sqlite.gz");
    let (tp1, tp2) = (tp1.to_str().unwrap(), tp2.to_str().unwrap());
    let c = json(&[
        "compare",
        "--format",
        "json",
        "--run",
        tp1,
        "--run",
        tp2,
        "--token-count",
        "1000",
        "--token-count",
        "1000",
    ]);
    let whole = &c["phases"][0];
    assert_eq!(whole["ranks"], serde_json::json!([1, 2]));
    let row = |what: &str| whole["rows"].as_array().unwrap().iter().find(|r| r["what"] == what).unwrap().clone();
    let gemm = row("gemm");
    assert_eq!(gemm["per_rank_ns"], serde_json::json!([4_739_354.0, 2_574_953.0]));
    let speedup = gemm["speedup"][1].as_f64().unwrap();
    assert!((speedup - 1.840_559_4).abs() < 1e-6, "GEMM speedup {speedup}");
    let efficiency = gemm["efficiency_pct"][1].as_f64().unwrap();
    assert!((efficiency - 92.028).abs() < 1e-3, "GEMM scaling efficiency {efficiency}");
    assert_eq!(row("span")["per_rank_ns"], serde_json::json!([547_753_912.0, 2_483_862_612.5]));

    let throughput = &c["throughput"];
    assert_eq!(throughput["tokens"], serde_json::json!([1000, 1000]));
    let rate = |i: usize| throughput["tokens_per_s"][i].as_f64().unwrap();
    assert!((rate(0) - 1_825.637_3).abs() < 1e-3 && (rate(1) - 402.598_8).abs() < 1e-3, "{throughput}");
    let efficiency = throughput["efficiency_pct"][1].as_f64().unwrap();
    assert!((efficiency - 11.026_3).abs() < 1e-3, "throughput efficiency {efficiency}");

    // Without token counts there is no throughput, and the table says nothing about tokens.
    let plain = json(&["compare", "--format", "json", "--run", tp1, "--run", tp2]);
    assert!(plain["throughput"].is_null());
    let table = String::from_utf8(
        analyzer(&["compare", "--run", tp1, "--run", tp2, "--token-count", "-", "--token-count", "1000"]).stdout,
    )
    .unwrap();
    let line = table.lines().find(|l| l.starts_with("tokens/s")).unwrap();
    assert!(line.contains("402.6") && line.contains(" - "), "{line}");
    let bad = analyzer(&["compare", "--run", tp1, "--run", tp2, "--token-count", "0", "--token-count", "1000"]);
    assert_one_line_error(&bad, "--token-count");
}
