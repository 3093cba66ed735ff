//! Engines as they really run, captured on one H100 (`sample-traces/engines/`, made by `workloads/engines/`):
//! Hugging Face transformers' Qwen3 eager with a dynamic cache, the same with `cache_implementation="static"`
//! (torch.compile, decode replayed from CUDA graphs), and a jitted JAX step of 8 identical blocks (an XLA command
//! buffer per step). None has NVTX ranges. Each program wrote its own ground truth (`*.truth.json`: steps, CUDA-event
//! times of every forward and token, or host times per JAX step); the report must agree with it: the step count
//! exactly, the steady-state step median within 3 %, TTFT and TPOT of every generate call after the warm-up within
//! 5 %.

use crate::common;

use common::{analyzer, repo_root};
use serde_json::Value;

fn report(capture: &str) -> Value {
    let path = repo_root().join("sample-traces/engines").join(capture);
    let output = analyzer(&["report", "--format", "json", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn table(capture: &str) -> String {
    let path = repo_root().join("sample-traces/engines").join(capture);
    String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap()
}

fn truth(name: &str) -> Value {
    let path = repo_root().join("sample-traces/engines").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(value: &Value) -> Vec<f64> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

fn assert_within(what: &str, got_ns: f64, want_ms: f64, tolerance: f64) {
    let want_ns = want_ms * 1e6;
    assert!((got_ns / want_ns - 1.0).abs() <= tolerance, "{what}: report {got_ns} ns, program {want_ns} ns");
}

/// The generate-call workloads: steps, warm-up, steady median, TTFT and TPOT against the program's CUDA events.
fn check_generate_workload(capture: &str, truth_file: &str) -> Value {
    let truth = truth(truth_file);
    let report = report(capture);
    let rank = &report["ranks"][0];
    let steps = &rank["steps"];
    assert_eq!(steps["found"], truth["steps"], "{capture}: step count");
    // The program's first generate call is its warm-up (CUDA and cuBLAS set-up, compilation): its steps are left
    // out, detected by their time.
    let calls = truth["generate_calls"].as_array().unwrap();
    assert_eq!(steps["warmup"], "detected", "{capture}");
    assert!(steps["skipped"].as_u64().unwrap() >= 1, "{capture}");
    assert!(steps["skipped"].as_u64().unwrap() <= calls[0]["forwards"].as_u64().unwrap(), "{capture}");
    // Steady state: the forward-to-forward periods of the calls after the first.
    let periods: Vec<f64> = calls[1..].iter().flat_map(|c| floats(&c["step_period_ms"])).collect();
    assert_within(&format!("{capture}: step median"), steps["time"]["p50_ns"].as_f64().unwrap(), median(periods), 0.03);
    let found = rank["generate_calls"]["calls"].as_array().unwrap();
    assert_eq!(found.len(), calls.len(), "{capture}: generate calls");
    assert_eq!(found[0]["warmup"], true);
    for (got, want) in found.iter().zip(calls).skip(1) {
        assert_eq!(got["warmup"], false);
        assert_eq!(got["decode_steps"].as_u64(), want["forwards"].as_u64().map(|n| n - 1));
        assert_within(
            &format!("{capture}: TTFT"),
            got["ttft_ns"].as_f64().unwrap(),
            want["ttft_ms"].as_f64().unwrap(),
            0.05,
        );
        assert_within(
            &format!("{capture}: TPOT"),
            got["tpot_ns"].as_f64().unwrap(),
            want["tpot_ms"].as_f64().unwrap(),
            0.05,
        );
    }
    // Phases from the steps, the warm-up steps left out: one prefill per call after the first.
    assert_eq!(rank["phase_source"], "inferred");
    assert_eq!(rank["phases"]["prefill"]["instances"]["count"].as_u64(), Some(calls.len() as u64 - 1));
    assert!(rank["steady_state"]["gpu_busy_ns"].as_i64().unwrap() > 0);
    report
}

#[test]
fn transformers_eager_with_a_dynamic_cache() {
    let report = check_generate_workload("hf_qwen3_eager.sqlite.gz", "hf_qwen3_eager.truth.json");
    let rank = &report["ranks"][0];
    assert_eq!(rank["steps"]["source"], "inferred_from_kernels");
    assert_eq!(rank["graph_replays"], Value::Null);
}

#[test]
fn transformers_static_cache_compiled_with_cuda_graph_decode() {
    let report = check_generate_workload("hf_qwen3_static.sqlite.gz", "hf_qwen3_static.truth.json");
    let rank = &report["ranks"][0];

    // The decode steps after compilation are graph replays: every replay lies in a decode step of the report.
    let replays = &rank["graph_replays"];
    assert_eq!(replays["source"], "node_kernels");
    let calls = truth("hf_qwen3_static.truth.json")["generate_calls"].as_array().unwrap().len() as u64;
    let replay_count = replays["replay_ns"]["count"].as_u64().unwrap();
    assert!(replay_count >= calls * 9, "{replays}");
    // The graph line reads count × each = total.
    let text = table("hf_qwen3_static.sqlite.gz");
    let graph = &replays["by_graph"][0];
    let (count, total) = (graph["replays"].as_i64().unwrap(), graph["total_ns"].as_i64().unwrap());
    let line = text.lines().find(|l| l.contains("CUDA graph replays")).unwrap();
    let entry = format!("{count} × {} = {}", duration(total / count), duration(total));
    assert!(line.contains(&entry), "{entry} not in {line}");
}

#[test]
fn jax_loop_of_eight_identical_blocks_in_one_command_buffer() {
    let truth = truth("jax_blocks.truth.json");
    let report = report("jax_blocks.sqlite.gz");
    let rank = &report["ranks"][0];
    let steps = &rank["steps"];
    // One step per call of the jitted function, not one per block.
    assert_eq!(steps["found"], truth["steps"]);
    assert_eq!(steps["source"], "inferred_from_graphs");
    let periods = floats(&truth["step_period_ms"]);
    assert_within("step median", steps["time"]["p50_ns"].as_f64().unwrap(), median(periods[1..].to_vec()), 0.03);
    // XLA's autotuning helpers are runtime, not work, and the fusions have their kinds: little is left `other`.
    let categories = &rank["categories"];
    let total: f64 = categories.as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert!(categories["runtime"].as_f64().unwrap() > 0.0, "{categories}");
    let other = categories.get("other").and_then(Value::as_f64).unwrap_or(0.0);
    assert!(other <= 0.05 * total, "other {other} of {total}");
}

/// The transformers server compiled with CUDA graphs, captured in two profiler windows (requests 2–3 and 6–7 of
/// `workloads/engines/hf_server_window.py`, `MODE=static WINDOWS=2:4,6:8`, on an H200): the file keeps the 2,864
/// kernels that Nsight Systems kept with `-c cudaProfilerApi --capture-range-end=repeat` on the same program, and
/// the findings' steady state lies inside one window, so no replay or critical path reaches across the unrecorded
/// time between them (before, the model spanned both windows and counted the gap as host time).
#[test]
fn a_server_captured_in_two_profiler_windows_is_modelled_inside_one_window() {
    // SHARDSCOPE_CAPTURE_WINDOWS of the file.
    let windows_ns = [(29_563_575_409_i64, 29_605_361_949_i64), (29_649_252_001, 29_690_858_031)];
    let report = report("hf_server_static_2windows.sqlite.gz");
    assert_eq!(report["ranks"][0]["kernel_count"], 2864);
    let findings = &report["findings"];
    let window = findings["window"].as_str().unwrap();
    let range = window.rsplit('(').next().unwrap().trim_end_matches(" ns)");
    let (start, end) = range.split_once("..").unwrap();
    let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
    assert!(
        windows_ns.iter().any(|&(s, e)| s <= start && end <= e),
        "the findings' model {start}..{end} is not inside one capture window"
    );
    let excluded = findings["excluded"].to_string();
    assert!(excluded.contains("other capture windows"), "{excluded}");
    // The warm-up finding would count the first window and the gap as warm-up: it says why it is not evaluated.
    assert!(findings["quiet"].to_string().contains("later capture window"), "{}", findings["quiet"]);
}

/// The same server captured by the build that first attaches CUPTI when a window opens, so that CUPTI's clock is
/// read only then (sitting 19 of BENCHMARKS.md, one H200): at node level, and at graph level where each replay is one
/// record. Every kernel and graph launch starts inside a window of its process (the windows come from the wall clock
/// at the switch, the GPU times from CUPTI's clock placed by the pair read at the first attach), the counts are the
/// ones Nsight Systems kept on the same program, and the findings' model lies inside one window.
#[test]
fn a_server_first_attached_at_its_first_window_keeps_its_work_inside_the_windows() {
    for (capture, kernels, graph_launches) in [
        ("hf_server_static_2windows_first_attach.sqlite.gz", 2864, 0),
        ("hf_server_static_2windows_graph.sqlite.gz", 1660, 28),
    ] {
        let path = repo_root().join("sample-traces/engines").join(capture);
        let trace = shardscope_io::load(&path).unwrap().remove(0);
        assert_eq!((trace.kernels.len(), trace.graph_launches.len()), (kernels, graph_launches), "{capture}");
        assert_eq!(trace.capture_windows.len(), 2, "{capture}");
        let inside = |process, start_ns| {
            trace.capture_windows.iter().any(|w| w.process == process && w.start_ns <= start_ns && start_ns <= w.end_ns)
        };
        let starts = trace.kernels.iter().map(|k| (k.process, k.start_ns));
        let starts = starts.chain(trace.graph_launches.iter().map(|g| (g.process, g.start_ns)));
        for (process, start_ns) in starts {
            assert!(inside(process, start_ns), "{capture}: work at {start_ns} ns outside every window");
        }
        let report = report(capture);
        assert_eq!(report["ranks"][0]["kernel_count"], kernels);
        assert_eq!(report["ranks"][0]["cuda_graph_count"], graph_launches);
        let window = report["findings"]["window"].as_str().unwrap();
        let range = window.rsplit('(').next().unwrap().trim_end_matches(" ns)");
        let (start, end) = range.split_once("..").unwrap();
        let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
        let one_window = trace.capture_windows.iter().any(|w| w.start_ns <= start && end <= w.end_ns);
        assert!(one_window, "{capture}: the findings' model {start}..{end} is not inside one capture window");
    }
}

/// The table's duration format (`render::duration`), for matching its lines.
fn duration(ns: i64) -> String {
    shardscope_analyzer::output::render::duration(ns)
}
