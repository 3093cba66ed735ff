//! Small promises of the command line: `--top 0` lists every kernel, a window outside the trace is warned about,
//! each subcommand's `--format` offers only what it writes, `--bench` shows in the report's table, `compare` shows
//! labels whole and takes `--skip-steps`, and matched collectives carry each rank's kernel times.

use crate::common;

use common::{analyzer, repo_root};
use serde_json::Value;

fn sample(name: &str) -> String {
    repo_root().join("sample-traces").join(name).to_str().unwrap().to_string()
}

fn ok_stdout(args: &[&str]) -> String {
    let output = analyzer(args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn top_zero_lists_every_kernel_name() {
    let table = ok_stdout(&["report", "--top", "0", &sample("tp2_nsys.sqlite.gz")]);
    let heading = table.lines().find(|l| l.trim_start().starts_with("top kernels (")).expect("a kernel list");
    let counts: Vec<&str> = heading.trim().trim_start_matches("top kernels (").split(' ').collect();
    assert_eq!(counts[0], counts[2], "{heading}");
    assert_ne!(counts[0], "0", "{heading}");
}

#[test]
fn a_window_outside_the_trace_is_warned_about() {
    let output = analyzer(&["report", "--window", "0:1", &sample("tp2_nsys.sqlite.gz")]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("warning: --window 0:1 holds no GPU work of any rank (the traces run from "), "{stderr}");
    // A window inside the trace is not.
    let inside = analyzer(&["report", "--window", "9282904333:9746385308", &sample("tp2_nsys.sqlite.gz")]);
    assert!(!String::from_utf8_lossy(&inside.stderr).contains("holds no GPU work"));
}

#[test]
fn each_subcommand_offers_the_formats_it_writes() {
    for command in ["what-if", "critical-path"] {
        let help = ok_stdout(&[command, "--help"]);
        let format = help.lines().skip_while(|l| !l.contains("--format")).take(8).collect::<Vec<_>>().join("\n");
        assert!(format.contains("json") && !format.contains("csv"), "{command}: {format}");
        let refused = analyzer(&[command, "--format", "csv", &sample("tp2_skew_capture.sqlite.gz")]);
        assert_eq!(refused.status.code(), Some(2), "{command}");
    }
    let help = ok_stdout(&["kern-sum", "--help"]);
    assert!(!help.contains("per rank and per (rank, phase)"), "{help}");
    assert!(help.contains("cuda_gpu_kern_sum"), "{help}");
}

#[test]
fn bench_results_show_in_the_report_table() {
    let bench = repo_root().join("bench/results/h200x2.json");
    let trace = sample("tp2_full_capture.sqlite.gz");
    let with = ok_stdout(&["report", "--bench", bench.to_str().unwrap(), &trace]);
    let without = ok_stdout(&["report", &trace]);
    assert!(with.contains("\nbus bandwidth against ") && !without.contains("bus bandwidth against"));
    let line = with.lines().find(|l| l.contains(" AllReduce prefill") && l.contains("GB/s")).expect("a group line");
    // The 32 MiB prefill all-reduces of the full sample reach what bench measured at that size.
    assert!(line.contains("247.5 GB/s") && line.contains("100% of same size"), "{line}");
    assert!(line.contains("of peak") && line.chars().count() <= 100, "{line}");
}

#[test]
fn compare_shows_labels_whole_and_takes_skip_steps() {
    let (tp1, tp2) = (sample("tp1_nsys.sqlite.gz"), sample("tp2_nsys.sqlite.gz"));
    let long = "tensor-parallel-two-gpus";
    let table = ok_stdout(&["compare", "--run", &tp1, "--run", &tp2, "--label", "one", "--label", long]);
    assert!(table.contains(long), "{table}");
    let skipped = ok_stdout(&["compare", "--format", "json", "--run", &tp1, "--run", &tp2, "--skip-steps", "2"]);
    let all = ok_stdout(&["compare", "--format", "json", "--run", &tp1, "--run", &tp2]);
    assert_ne!(skipped, all, "--skip-steps changes the step figures");
}

#[test]
fn collective_instances_carry_each_ranks_kernel_times() {
    let json: Value =
        serde_json::from_str(&ok_stdout(&["collectives", "--format", "json", &sample("tp2_nsys.sqlite.gz")])).unwrap();
    let instances = json["instances"].as_array().expect("instances in the JSON");
    assert!(!instances.is_empty());
    for instance in instances {
        let times = instance["rank_times_ns"].as_object().unwrap();
        let waits = instance["rank_wait_ns"].as_object().unwrap();
        assert_eq!(times.len(), waits.len(), "a time per member");
        let starts: Vec<i64> = times.values().map(|t| t[0].as_i64().unwrap()).collect();
        for (rank, t) in times {
            let (start, end) = (t[0].as_i64().unwrap(), t[1].as_i64().unwrap());
            assert!(start <= end);
            // One clock here (one host): a rank's wait is the latest start less its own start, within its kernel.
            let expected = (starts.iter().max().unwrap() - start).min(end - start);
            assert_eq!(waits[rank].as_i64().unwrap(), expected, "{instance}");
        }
    }
}
