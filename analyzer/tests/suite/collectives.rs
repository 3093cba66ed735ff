//! Collectives matched across ranks on real traces. Expected values were computed independently in Python from
//! the same files (kernels ordered by start per GPU, the k-th NCCL kernel of each rank paired).

use crate::common;

use common::{analyzer, repo_root, shared_traces};
use serde_json::Value;

fn report(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Two-GPU tensor-parallel sample: rank 1 arrives last at 53 of the 73 all-reduces, and rank 0 spends nearly all of
/// its NCCL time waiting for it. Wait + transfer add up to each rank's NCCL kernel time.
#[test]
fn tp2_wait_and_transfer_add_up_and_blame_the_late_rank() {
    let r = report(&["report", "--format", "json"]);
    assert_eq!(r["collectives"]["matched_instances"], 73);
    assert_eq!(r["collectives"]["unmatched_kernels"], 0);
    assert_eq!(r["collectives"]["clocks_aligned"], false);
    let expected = [(0, 35_212_724i64, 779_545i64, 20u64), (1, 699_976, 779_024, 53)];
    for (rank, wait, transfer, late) in expected {
        let figures = &r["ranks"][rank];
        assert_eq!(figures["comm_wait_ns"], wait, "rank {rank}");
        assert_eq!(figures["comm_transfer_ns"], transfer, "rank {rank}");
        assert_eq!(figures["late_count"], late, "rank {rank}");
        // The op shares show the transfer as `comm.all_reduce` and the waiting as `wait.all_reduce`.
        assert_eq!(figures["categories"]["comm.all_reduce"], transfer, "rank {rank}");
        assert_eq!(figures["categories"]["wait.all_reduce"], wait, "rank {rank}");
    }
    // Per phase too: decode is where the waiting happens.
    let decode = &r["ranks"][0]["phases"]["decode"];
    assert_eq!(decode["comm_transfer_ns"], decode["categories"]["comm.all_reduce"]);
    assert_eq!(decode["comm_wait_ns"], decode["categories"]["wait.all_reduce"]);
    assert!(decode["comm_wait_ns"].as_i64().unwrap() > 10 * decode["comm_transfer_ns"].as_i64().unwrap());
}

/// Kineto traces carry message sizes: bus bandwidth is computed, and the group rows split by size.
#[test]
fn kineto_tp2_has_bus_bandwidth() {
    let dir = repo_root().join("sample-traces/kineto_tp2");
    let r = report(&["collectives", "--format", "json", dir.to_str().unwrap()]);
    assert_eq!(r["collectives"]["matched_instances"], 36);
    let instances = r["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 36);
    for instance in instances {
        let bytes = instance["bytes"].as_f64().unwrap();
        let transfer_ns = instance["transfer_ns"].as_f64().unwrap();
        let busbw = instance["busbw_gbps"].as_f64().unwrap();
        // Two ranks: the all-reduce bus factor 2(n−1)/n is 1, so busbw = algbw = S / t.
        assert!((busbw - bytes / transfer_ns).abs() < 1e-9, "{instance}");
        assert_eq!(instance["nranks"], 2);
    }
    let sizes: Vec<&str> =
        r["collectives"]["groups"].as_array().unwrap().iter().map(|g| g["size_bucket"].as_str().unwrap()).collect();
    assert_eq!(sizes, ["1-16 MiB", "<64 KiB"]);
}

/// dlrm_8rank: the late rank and transfer time of each all-reduce, from Python over the raw JSON.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn dlrm_8rank_late_ranks() {
    let shared = shared_traces();
    let dir = shared.join("kineto/dlrm_8rank");
    let r = report(&["collectives", "--format", "json", dir.to_str().unwrap()]);
    let mut all_reduces: Vec<(u64, i64)> = r["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["op"] == "AllReduce")
        .map(|i| (i["late_rank"].as_u64().unwrap(), i["transfer_ns"].as_i64().unwrap()))
        .collect();
    all_reduces.sort_by_key(|&(_, t)| std::cmp::Reverse(t));
    assert_eq!(all_reduces, [(7, 87_000), (4, 69_000), (5, 23_000)]);
    assert_eq!(r["collectives"]["unmatched_kernels"], 0);
}

#[test]
fn collectives_csv_and_table() {
    let csv = String::from_utf8(analyzer(&["collectives", "--format", "csv"]).stdout).unwrap();
    assert!(csv.starts_with("communicator,op,size_bucket,phase,count"));
    assert_eq!(csv.lines().count(), 1 + 3, "{csv}");
    let table = String::from_utf8(analyzer(&["collectives"]).stdout).unwrap();
    assert!(table.contains("73 instance(s) matched"), "{table}");
}

#[test]
fn bad_bench_file_is_one_line() {
    let path = std::env::temp_dir().join(format!("shardscope-bench-{}.json", std::process::id()));
    std::fs::write(&path, "{\"gpus\": []}").unwrap();
    let output = analyzer(&["report", "--bench", path.to_str().unwrap()]);
    common::assert_one_line_error(&output, path.to_str().unwrap());
}

/// With `--bench`, every group's "% of bench at the same size" is the median of instance busbw over the bus
/// bandwidth bench measured at that size (recomputed here through bench's own interpolation).
#[test]
fn bench_comparison_uses_the_same_size() {
    let dir = repo_root().join("sample-traces/kineto_tp2");
    let bench_file = repo_root().join("bench/results/h200x2.json");
    let r =
        report(&["collectives", "--format", "json", "--bench", bench_file.to_str().unwrap(), dir.to_str().unwrap()]);
    let bench = shardscope_bench::results::BenchResults::load(&bench_file).unwrap();
    let peak = bench
        .collectives
        .iter()
        .filter(|c| c.op == shardscope_bench::results::CollectiveOp::AllReduce)
        .map(|c| c.busbw_gbps)
        .fold(0.0, f64::max);
    for group in r["collectives"]["groups"].as_array().unwrap() {
        let mut ratios: Vec<f64> = r["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| super_bucket(i["bytes"].as_u64().unwrap()) == group["size_bucket"].as_str().unwrap())
            .map(|i| {
                let measured = bench
                    .busbw_gbps(shardscope_bench::results::CollectiveOp::AllReduce, 2, i["bytes"].as_u64().unwrap())
                    .unwrap();
                100.0 * i["busbw_gbps"].as_f64().unwrap() / measured
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let median = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
        let ours = group["busbw_pct_of_bench_same_size"].as_f64().unwrap();
        assert!((ours - median).abs() < 1e-9, "{group}");
        let pct_of_peak = group["busbw_pct_of_peak"].as_f64().unwrap();
        assert!((pct_of_peak - 100.0 * group["busbw_median_gbps"].as_f64().unwrap() / peak).abs() < 1e-9);
    }
}

fn super_bucket(bytes: u64) -> &'static str {
    if bytes < 64 << 10 {
        "<64 KiB"
    } else if bytes < 1 << 20 {
        "64 KiB-1 MiB"
    } else if bytes < 16 << 20 {
        "1-16 MiB"
    } else if bytes < 256 << 20 {
        "16-256 MiB"
    } else {
        ">=256 MiB"
    }
}

/// A capture with the NCCL profiler plugin of a run where rank 1 synchronises and sleeps 2 ms before every 4th
/// all-reduce: collectives carry communicator, sequence number and size; rank 1 is the late rank and rank 0 does
/// the waiting.
#[test]
fn skewed_capture_blames_the_sleeping_rank() {
    let trace = repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz");
    let r = report(&["collectives", "--format", "json", trace.to_str().unwrap()]);
    assert_eq!(r["collectives"]["matched_instances"], 73);
    assert_eq!(r["collectives"]["unmatched_kernels"], 0);
    let instances = r["instances"].as_array().unwrap();
    // Matched by communicator and sequence number from the plugin: sequence numbers 0..=72, sizes known.
    let mut seqs: Vec<u64> = instances.iter().map(|i| i["seq"].as_u64().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..73).collect::<Vec<u64>>());
    assert!(instances.iter().all(|i| i["communicator"].as_str().unwrap().starts_with("0x") && i["bytes"].is_u64()));
    let late_rank_1 = instances.iter().filter(|i| i["late_rank"] == 1).count();
    assert_eq!(late_rank_1, 66);

    let ranks = report(&["report", "--format", "json", trace.to_str().unwrap()]);
    let wait = |rank: usize| ranks["ranks"][rank]["comm_wait_ns"].as_i64().unwrap();
    assert_eq!(ranks["ranks"][1]["late_count"], 66);
    assert!(wait(0) > 30 * wait(1), "rank 0 waits for rank 1: {} vs {}", wait(0), wait(1));
    for rank in 0..2 {
        let figures = &ranks["ranks"][rank];
        assert_eq!(figures["comm_transfer_ns"], figures["categories"]["comm.all_reduce"]);
        assert_eq!(figures["comm_wait_ns"], figures["categories"]["wait.all_reduce"]);
    }
}

/// The two-GPU nsys exports with NCCL SendRecv kernels (no collective metadata: matched by order). Kernel counts
/// and sums per GPU from sqlite3 over `CUPTI_ACTIVITY_KIND_KERNEL` (names starting with `nccl`); on each GPU, wait
/// and transfer add up to that sum.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn shared_two_gpu_exports_split_send_recv_into_wait_and_transfer() {
    let shared = shared_traces();
    let cases = [
        ("mfu_2gpu_before.sqlite", 33u64, [17_172_652i64, 8_229_100]),
        ("mfu_2gpu_after.sqlite", 31, [9_989_016, 23_753_085]),
    ];
    for (file, instances, nccl_ns_per_gpu) in cases {
        let path = shared.join("nsys").join(file);
        let r = report(&["report", "--format", "json", path.to_str().unwrap()]);
        assert_eq!(r["collectives"]["matched_instances"], instances, "{file}");
        assert_eq!(r["collectives"]["unmatched_kernels"], 0, "{file}");
        let late: u64 = (0..2).map(|i| r["ranks"][i]["late_count"].as_u64().unwrap()).sum();
        assert_eq!(late, instances, "{file}: every instance has one late rank");
        for (rank, nccl_ns) in nccl_ns_per_gpu.into_iter().enumerate() {
            let figures = &r["ranks"][rank];
            let split = figures["comm_wait_ns"].as_i64().unwrap() + figures["comm_transfer_ns"].as_i64().unwrap();
            assert_eq!(split, nccl_ns, "{file} rank {rank}");
            let shares = &figures["categories"];
            let in_shares = shares["comm.send_recv"].as_i64().unwrap() + shares["wait.send_recv"].as_i64().unwrap_or(0);
            assert_eq!(in_shares, nccl_ns, "{file} rank {rank}");
            assert_eq!(shares["comm.send_recv"], figures["comm_transfer_ns"], "{file} rank {rank}");
        }
    }
}

/// The 4 × H200 bench results load, and give the bus bandwidth the scaling study quotes at 32 MiB.
#[test]
fn four_gpu_bench_results_read() {
    let path = repo_root().join("bench/results/h200x4.json");
    let bench = shardscope_bench::results::BenchResults::load(&path).unwrap();
    let op = shardscope_bench::results::CollectiveOp::AllReduce;
    let busbw = bench.busbw_gbps(op, 4, 32 << 20).unwrap();
    assert!((busbw - 291.12).abs() < 0.01, "{busbw}");
    assert!(bench.busbw_gbps(op, 2, 32 << 20).is_none(), "no 2-rank rows in the 4-GPU file");
}
