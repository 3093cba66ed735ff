//! `--window` on every subcommand that reads traces: `kern-sum`, `export` and `compare` keep the events that reach
//! into the window, clipped to it, as `report` does; each says which window it applied. The expected numbers come
//! from sqlite3 over the sample's kernel, runtime and memset tables (`end > START AND start < END`).

use crate::common;

use common::{analyzer, assert_one_line_error, repo_root};
use serde_json::Value;

/// One decode stretch of the built-in two-rank sample (`sample-traces/tp2_nsys.sqlite.gz`).
const WINDOW: &str = "9282904333:9746385308";

fn sample() -> String {
    repo_root().join("sample-traces/tp2_nsys.sqlite.gz").to_str().unwrap().to_string()
}

fn json(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// 60 kernels of both GPUs reach into the window; the 9 all-reduce kernels among them add up to 1,936,105 ns once
/// clipped (sqlite3: `sum(min(end, END) - max(start, START))`). The per-name rows equal the report's per-rank rows
/// for the same window, summed over ranks.
#[test]
fn kern_sum_keeps_the_window() {
    let sample = sample();
    let summary = json(&["kern-sum", "--format", "json", "--window", WINDOW, &sample]);
    assert_eq!(summary["window_ns"], serde_json::json!([9282904333i64, 9746385308i64]));
    let rows = summary["kernels"].as_array().unwrap();
    let instances: u64 = rows.iter().map(|r| r["instances"].as_u64().unwrap()).sum();
    assert_eq!(instances, 60);
    let all_reduce = rows.iter().find(|r| r["name"].as_str().unwrap().starts_with("ncclDevKernel_AllReduce")).unwrap();
    assert_eq!((all_reduce["total_ns"].as_i64(), all_reduce["instances"].as_u64()), (Some(1_936_105), Some(9)));

    let report = json(&["report", "--format", "json", "--window", WINDOW, &sample]);
    for row in rows {
        let name = row["name"].as_str().unwrap();
        let from_report: i64 = report["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|rank| rank["kernels"].as_array().unwrap())
            .filter(|k| k["name"] == name)
            .map(|k| k["total_ns"].as_i64().unwrap())
            .sum();
        assert_eq!(row["total_ns"].as_i64().unwrap(), from_report, "{name}");
    }

    let table = String::from_utf8(analyzer(&["kern-sum", "--window", WINDOW, &sample]).stdout).unwrap();
    assert!(table.starts_with("window: 9282904333 .. 9746385308 ns"), "{table}");
    // The CSV keeps nsys' layout; the window is said on stderr.
    let csv = analyzer(&["kern-sum", "--format", "csv", "--window", WINDOW, &sample]);
    assert!(String::from_utf8(csv.stdout).unwrap().starts_with("Time (%),"));
    assert!(String::from_utf8(csv.stderr).unwrap().contains("window: 9282904333 .. 9746385308 ns"));
    // Without a window nothing changes: all 1184 kernels.
    let whole = json(&["kern-sum", "--format", "json", &sample]);
    assert!(whole["window_ns"].is_null());
    let all: u64 = whole["kernels"].as_array().unwrap().iter().map(|r| r["instances"].as_u64().unwrap()).sum();
    assert_eq!(all, 1184);
}

/// The Perfetto export of the window holds the 60 kernels, 2 memsets and 314 runtime calls that reach into it.
#[test]
fn export_keeps_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("window.pftrace");
    let output = analyzer(&["export", "--window", WINDOW, "-o", output_path.to_str().unwrap(), &sample()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(": 1 trace(s), 60 kernel, 2 copy/set, 314 CUDA API and "), "{stderr}");
    assert!(stderr.contains("kept 60 of 1184 kernels"), "{stderr}");
    assert!(std::fs::metadata(&output_path).unwrap().len() > 0);
}

/// `compare` takes one window per run (each run has its own clock); a windowed run's figures are those of
/// `report --window`, and the comparison names each run's window.
#[test]
fn compare_windows_each_run() {
    let sample = sample();
    let tp1 = repo_root().join("sample-traces/tp1_nsys.sqlite.gz");
    let tp1 = tp1.to_str().unwrap();
    let args = ["compare", "--format", "json", "--run", tp1, "--run", &sample, "--window", "-", "--window", WINDOW];
    let c = json(&args);
    assert_eq!(c["windows_ns"], serde_json::json!([null, [9282904333i64, 9746385308i64]]));
    let report = json(&["report", "--format", "json", "--window", WINDOW, &sample]);
    let ranks = report["ranks"].as_array().unwrap();
    let gemm_mean = ranks.iter().map(|r| r["categories"]["gemm"].as_i64().unwrap()).sum::<i64>() as f64 / 2.0;
    let gemm = c["phases"][0]["rows"].as_array().unwrap().iter().find(|r| r["what"] == "gemm").unwrap();
    assert_eq!(gemm["per_rank_ns"][1].as_f64().unwrap(), gemm_mean);

    let table_args = ["compare", "--run", tp1, "--run", &sample, "--window", "-", "--window", WINDOW];
    let table = String::from_utf8(analyzer(&table_args).stdout).unwrap();
    assert!(table.contains("tp1_nsys: ") && table.contains("; whole trace"), "{table}");
    assert!(table.contains("tp2_nsys: ") && table.contains("; window: 9282904333 .. 9746385308 ns"), "{table}");

    let output = analyzer(&["compare", "--run", tp1, "--run", &sample, "--window", WINDOW]);
    assert_one_line_error(&output, "--window: 1 windows for 2 runs");
}
