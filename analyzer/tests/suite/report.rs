//! The report on the bundled sample traces, checked against figures computed independently from the same files
//! (with SQL over the nsys export and with NVIDIA's own `nsys stats`).

use crate::common;

use common::{analyzer, repo_root, shared_traces};
use serde_json::Value;

fn json_report(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

/// Regression guard for the whole-rank figures. Expected values were computed with SQL over the unpacked export
/// (unions of kernel/copy/set intervals per deviceId; NCCL kernels as communication).
#[test]
fn builtin_sample_figures_match_independent_sql() {
    let report = json_report(&["report", "--format", "json"]);
    let ranks = report["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    let expected = [
        // (span_ns, gpu_busy_ns, comm_ns, exposed_comm_ns, kernels, memops)
        (2_345_455_099i64, 41_141_065i64, 35_992_269i64, 35_992_269i64, 592u64, 250u64),
        (2_622_270_126, 6_597_544, 1_479_000, 1_479_000, 592, 250),
    ];
    for (rank, (span, busy, comm, exposed, kernels, memops)) in ranks.iter().zip(expected) {
        assert_eq!(rank["span_ns"], span);
        assert_eq!(rank["gpu_busy_ns"], busy);
        assert_eq!(rank["idle_ns"], span - busy);
        assert_eq!(rank["comm_ns"], comm);
        assert_eq!(rank["exposed_comm_ns"], exposed);
        assert_eq!(rank["comm_comp_overlap_pct"], 0.0);
        assert_eq!(rank["kernel_count"], kernels);
        assert_eq!(rank["memop_count"], memops);
        // No two all-reduces overlap on one GPU: transfer plus waiting is the communication time.
        let shares = &rank["categories"];
        assert_eq!(shares["comm.all_reduce"].as_i64().unwrap() + shares["wait.all_reduce"].as_i64().unwrap(), comm);
        assert_eq!(shares["comm.all_reduce"], rank["comm_transfer_ns"]);
        for field in ["rank", "kernels", "phases", "hta", "categories"] {
            assert!(!rank[field].is_null(), "missing {field}");
        }
    }
}

/// Kernels are put in phases through their launch call: counts and sums from SQL joining
/// CUPTI_ACTIVITY_KIND_KERNEL → RUNTIME (correlationId, globalPid) → NVTX_EVENTS on the same globalTid.
#[test]
fn builtin_sample_phases_follow_launching_thread() {
    let report = json_report(&["report", "--format", "json"]);
    let expected = [
        [("prefill", 52, 2_685_916i64), ("decode", 514, 37_527_438)],
        [("prefill", 52, 1_310_491), ("decode", 514, 4_280_431)],
    ];
    for (rank, phases) in report["ranks"].as_array().unwrap().iter().zip(expected) {
        let names: Vec<&str> = rank["phases"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["prefill", "decode"], "phases in order of first appearance");
        for (name, kernels, kernel_ns) in phases {
            let phase = &rank["phases"][name];
            assert_eq!(phase["kernel_count"], kernels, "{name}");
            let summed: i64 =
                phase["kernels"].as_array().unwrap().iter().map(|r| r["total_ns"].as_i64().unwrap()).sum();
            assert_eq!(summed, kernel_ns, "{name}");
        }
    }
}

/// `analyzer kern-sum --format csv` prints what NVIDIA's `nsys stats --report cuda_gpu_kern_sum --format csv`
/// printed for the same exports (saved in sample-traces/nsys-reference/).
#[test]
fn kernel_summary_equals_nsys_stats() {
    let kernel_names = |name: &str| match name {
        "tp1_nsys" | "tp1_capture" => 20,
        _ => 22,
    };
    for name in ["tp2_nsys", "tp1_nsys", "tp2_capture", "tp1_capture", "tp2_skew_capture"] {
        let trace = repo_root().join(format!("sample-traces/{name}.sqlite.gz"));
        let reference = std::fs::read_to_string(
            repo_root().join(format!("sample-traces/nsys-reference/{name}.cuda_gpu_kern_sum.csv")),
        )
        .unwrap();
        // nsys prints a "Processing [...]" line before the CSV, and an empty line after it when writing to stdout.
        let reference: Vec<&str> = reference.lines().skip_while(|l| !l.starts_with("Time (%)")).collect();
        let output = analyzer(&["kern-sum", "--format", "csv", trace.to_str().unwrap()]);
        assert!(output.status.success());
        let ours = String::from_utf8(output.stdout).unwrap();
        let ours: Vec<&str> = ours.trim_end_matches('\n').lines().collect();
        assert_eq!(ours, reference.iter().copied().filter(|l| !l.is_empty()).collect::<Vec<_>>(), "{name}");
        assert_eq!(ours.len(), 1 + kernel_names(name), "{name}: header + one row per kernel name");
    }
}

#[test]
fn csv_and_table_cover_every_rank_and_phase() {
    let output = analyzer(&["report", "--format", "csv"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("rank,phase,source,device,span_ns,gpu_busy_ns"));
    assert!(lines[0].contains("cat:comm.all_reduce_ns"));
    // 2 ranks × (whole + prefill + decode).
    assert_eq!(lines.len(), 1 + 6);
    assert!(lines[1].starts_with("0,,"));
    let table = String::from_utf8(analyzer(&["report"]).stdout).unwrap();
    assert!(table.contains("== rank 0"), "{table}");
    assert!(table.contains("== rank 1"));
    assert!(table.contains("-- phase decode --"));
}

#[test]
fn user_rules_and_phase_pattern_change_the_report() {
    let dir = std::env::temp_dir().join(format!("shardscope-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("rules.toml");
    std::fs::write(&rules, "[[rule]]\ncategory = \"communication\"\npattern = '^nccl'\n\n[[rule]]\ncategory = \"matmul\"\npattern = 'nvjet'\n").unwrap();
    let report = json_report(&[
        "report",
        "--format",
        "json",
        "--rules",
        rules.to_str().unwrap(),
        "--phase-pattern",
        "^(decode)$",
    ]);
    let rank = &report["ranks"][0];
    assert!(rank["categories"]["matmul"].as_i64().unwrap() > 0);
    assert!(rank["categories"].get("gemm").is_none());
    let phases: Vec<&String> = rank["phases"].as_object().unwrap().keys().collect();
    assert_eq!(phases, ["decode"]);
}

/// The Kineto traces of the same workload give per-rank reports with all-reduce collectives. torch.profiler does
/// not record `torch.cuda.nvtx` ranges, so these traces have no phase ranges: prefill and decode are inferred.
#[test]
fn kineto_sample_folder_is_two_ranks() {
    let dir = repo_root().join("sample-traces/kineto_tp2");
    let report = json_report(&["report", "--format", "json", dir.to_str().unwrap()]);
    let ranks = report["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for (index, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["rank"], index as i64);
        assert_eq!(rank["rank_recorded"], true);
        assert_eq!(rank["kernel_count"], 285);
        assert!(rank["categories"]["comm.all_reduce"].as_i64().unwrap() > 0);
        assert_eq!(rank["phase_source"], "inferred");
        let phases: Vec<&String> = rank["phases"].as_object().unwrap().keys().collect();
        assert_eq!(phases, ["prefill", "decode"]);
        assert_eq!(rank["phases"]["prefill"]["phase_source"], "inferred");
    }
}

/// Every real trace in ../shared/traces gives a report (exit 0) in every format.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn every_shared_trace_reports() {
    let shared = shared_traces();
    let mut inputs: Vec<std::path::PathBuf> = Vec::new();
    for sub in ["nsys", "kineto"] {
        for entry in std::fs::read_dir(shared.join(sub)).unwrap() {
            inputs.push(entry.unwrap().path());
        }
    }
    for input in inputs {
        let cpu_only = input.to_string_lossy().contains("rank-34");
        for format in ["table", "json", "csv"] {
            let output = analyzer(&["report", "--format", format, input.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            if cpu_only {
                // A CPU-only trace has nothing to report on: a one-line error, exit 2.
                common::assert_one_line_error(&output, "no GPU kernels");
            } else {
                assert!(output.status.success(), "{}: {stderr}", input.display());
            }
        }
    }
}
