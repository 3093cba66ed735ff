//! One warm-up for every figure: a synthetic trace whose first 2 of 10 recorded `decode` steps (NVTX ranges) are
//! slow, so the report detects them as warm-up. Its steady state leaves them out of the op shares, the phase
//! figures, the latency (TPOT) figures and the what-if model alike, while the whole-run figures keep them; with
//! `--skip-steps 0` nothing is left out, with `--skip-steps 3` exactly three steps are.
//!
//! The trace, by hand (ns): step k's range opens at S_k and lasts 10,000 (k < 2, warm-up) or 2,000; 1,000 between
//! ranges, so S_0 = 1,000,000, S_1 = 1,011,000 and S_k = 1,022,000 + 3,000 × (k − 2) for k ≥ 2. In each step a GEMM
//! runs S_k + 100 .. S_k + 1,100, then an elementwise kernel for 4,000 (warm-up) or 200 ns.
//! - whole run: gemm 10 × 1,000 = 10,000; elementwise 2 × 4,000 + 8 × 200 = 9,600; decode 10 instances of
//!   5,000 (2) and 1,200 (8), 19,600 in all; span 1,000,100 .. 1,044,300 = 44,200.
//! - steady state (steps 2..9: S_2 = 1,022,000 to S_9 + 2,000 = 1,045,000): gemm 8,000, elementwise 1,600 (gemm
//!   83.3 %); decode 8 instances of 1,200 = 9,600; span 1,022,100 .. 1,044,300 = 22,200.

use crate::common;

use common::analyzer;
use serde_json::Value;
use shardscope_analyzer::dependency::critical_path;
use shardscope_analyzer::report::{Options, analyze};
use shardscope_model::{ApiCall, ApiKind, Device, Kernel, Process, Range, RangeKind, Trace};

const STEPS: usize = 10;
const WARMUP_STEPS: usize = 2;

/// Step k's range start and length.
fn step(k: usize) -> (i64, i64) {
    match k {
        0 => (1_000_000, 10_000),
        1 => (1_011_000, 10_000),
        k => (1_022_000 + 3_000 * (k as i64 - 2), 2_000),
    }
}

fn trace() -> Trace {
    let mut trace = Trace::default();
    let gemm = trace.names.intern("nvjet_sm90_gemm_kernel");
    let elementwise = trace.names.intern("vectorized_elementwise_kernel");
    let launch = trace.names.intern("cudaLaunchKernel");
    let decode = trace.names.intern("decode");
    let process = trace.add_process(Process { pid: 4242, ..Process::default() });
    let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
    let tid = 4242;
    let mut correlation_id = 0;
    for k in 0..STEPS {
        let (start_ns, length_ns) = step(k);
        trace.ranges.push(Range {
            start_ns,
            end_ns: start_ns + length_ns,
            name: decode,
            domain: Default::default(),
            kind: RangeKind::PushPop,
            process,
            tid,
            device: None,
            stream: None,
            depth: 0,
        });
        let elementwise_ns = if k < WARMUP_STEPS { 4_000 } else { 200 };
        let kernels = [
            (gemm, start_ns + 10, start_ns + 100, start_ns + 1_100),
            (elementwise, start_ns + 30, start_ns + 1_100, start_ns + 1_100 + elementwise_ns),
        ];
        for (name, call_ns, kernel_start_ns, kernel_end_ns) in kernels {
            correlation_id += 1;
            trace.api_calls.push(ApiCall {
                start_ns: call_ns,
                end_ns: call_ns + 10,
                name: launch,
                kind: ApiKind::Runtime,
                process,
                tid,
                correlation_id,
            });
            trace.kernels.push(Kernel {
                start_ns: kernel_start_ns,
                end_ns: kernel_end_ns,
                name,
                short_name: name,
                device,
                process,
                stream: 7,
                correlation_id,
                ..Kernel::default()
            });
        }
    }
    trace.finish();
    trace
}

/// The trace written as an nsys export in a temporary folder (kept alive by the returned guard).
fn written() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("warmup.sqlite");
    shardscope_io::nsys_writer::write(&trace(), &path).expect("the nsys writer writes it");
    let path = path.to_str().expect("a UTF-8 path").to_string();
    (dir, path)
}

fn json(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn table(args: &[&str]) -> String {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn detected_warm_up_leaves_the_steady_state_shares_and_phases_without_it() {
    let (_dir, path) = written();
    let r = json(&["report", "--format", "json", &path]);
    let rank = &r["ranks"][0];
    let steps = &rank["steps"];
    assert_eq!(steps["source"], "phase_instances");
    assert_eq!((steps["found"].as_u64(), steps["skipped"].as_u64()), (Some(10), Some(2)));
    assert_eq!(steps["warmup"], "detected");
    assert_eq!(steps["time"]["p50_ns"], 2_000);
    // Whole run: warm-up included.
    assert_eq!(rank["categories"]["gemm"], 10_000);
    assert_eq!(rank["categories"]["elementwise"], 9_600);
    assert_eq!(rank["span_ns"], 44_200);
    let decode = &rank["phases"]["decode"];
    assert_eq!(decode["phase_source"], "recorded");
    assert_eq!(
        (decode["instances"]["count"].as_u64(), decode["instances"]["total_ns"].as_i64()),
        (Some(10), Some(19_600))
    );
    assert_eq!(decode["instances"]["max_ns"], 5_000);
    assert_eq!(decode["categories"]["elementwise"], 9_600);
    // Steady state: warm-up left out of the shares and the phase figures.
    let steady = &rank["steady_state"];
    assert_eq!(steady["window_ns"], serde_json::json!([1_022_000, 1_045_000]));
    assert_eq!(steady["steps"], 8);
    assert_eq!(steady["categories"]["gemm"], 8_000);
    assert_eq!(steady["categories"]["elementwise"], 1_600);
    assert_eq!((steady["span_ns"].as_i64(), steady["gpu_busy_ns"].as_i64()), (Some(22_200), Some(9_600)));
    let decode = &steady["phases"]["decode"];
    assert_eq!(decode["phase_source"], "recorded");
    let i = &decode["instances"];
    assert_eq!(
        (i["count"].as_u64(), i["total_ns"].as_i64(), i["max_ns"].as_i64()),
        (Some(8), Some(9_600), Some(1_200))
    );
    assert_eq!(
        (decode["categories"]["gemm"].as_i64(), decode["categories"]["elementwise"].as_i64()),
        (Some(8_000), Some(1_600))
    );

    let text = table(&["report", &path]);
    assert!(text.contains("steps (phase ranges): 10 found, first 2 left out as warm-up (detected"), "{text}");
    assert!(text.contains("steady state (8 steps after the warm-up, 1022000 .. 1045000"), "{text}");
    assert!(text.contains("steady-state op shares: gemm 83.3%, elementwise 16.7%"), "{text}");
    assert!(text.contains("steady-state phase decode: 8 instance(s)"), "{text}");
    // The summary gives the steady state beside the whole run, with the steady phase rows.
    assert!(text.contains("steady"), "{text}");
    assert!(text.contains("top: gemm 83%, elementwise 17%"), "{text}");
    assert!(text.contains("top: gemm 51%, elementwise 49%"), "{text}");
    // The findings model the same steady state: the 8 steps after the warm-up, none more left out.
    assert!(text.contains("findings for steps 0 to 7, the steady state (1022000..1045000 ns)"), "{text}");
}

#[test]
fn skip_steps_0_leaves_nothing_out_and_skip_steps_3_leaves_three() {
    let (_dir, path) = written();
    let r = json(&["report", "--format", "json", "--skip-steps", "0", &path]);
    let rank = &r["ranks"][0];
    assert_eq!((rank["steps"]["skipped"].as_u64(), rank["steps"]["warmup"].as_str()), (Some(0), Some("none")));
    assert_eq!(rank["steps"]["time"]["count"], 10);
    assert!(rank.get("steady_state").is_none(), "{rank}");
    assert_eq!(rank["phases"]["decode"]["instances"]["count"], 10);
    let text = table(&["report", "--skip-steps", "0", &path]);
    assert!(!text.contains("steps after the warm-up") && !text.contains("steady-state"), "{text}");
    // The findings model the steps after the first (taken as start-up), as without any warm-up.
    assert!(text.contains("findings for steps 1 to 9, the steady state (1011000..1045000 ns)"), "{text}");

    let r = json(&["report", "--format", "json", "--skip-steps", "3", &path]);
    let steady = &r["ranks"][0]["steady_state"];
    assert_eq!(r["ranks"][0]["steps"]["warmup"], "skip_steps");
    assert_eq!(steady["window_ns"], serde_json::json!([1_025_000, 1_045_000]));
    assert_eq!(steady["phases"]["decode"]["instances"]["count"], 7);
    assert_eq!(steady["categories"]["elementwise"], 7 * 200);
}

/// TPOT (the decode instances' times, `--charts DIR/llm.json`) after the same warm-up.
#[test]
fn latency_figures_leave_out_the_same_warm_up() {
    let (dir, path) = written();
    let latency = |extra: &[&str], name: &str| -> Value {
        let charts = dir.path().join(name);
        let charts = charts.to_str().unwrap();
        let mut args = vec!["report", "--charts", charts];
        args.extend_from_slice(extra);
        args.push(&path);
        let output = analyzer(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let llm: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(name).join("llm.json")).unwrap()).unwrap();
        llm
    };
    let detected = latency(&[], "detected");
    assert_eq!(detected["skipped"], 2);
    let decode = &detected["latency"][0];
    assert_eq!((decode["phase"].as_str(), decode["skipped"].as_u64()), (Some("decode"), Some(2)));
    assert_eq!((decode["time"]["count"].as_u64(), decode["time"]["max_ns"].as_i64()), (Some(8), Some(1_200)));
    let none = latency(&["--skip-steps", "0"], "none");
    assert_eq!(none["skipped"], 0);
    assert_eq!(
        (none["latency"][0]["time"]["count"].as_u64(), none["latency"][0]["time"]["max_ns"].as_i64()),
        (Some(10), Some(5_000))
    );
}

/// The what-if model's default window is the report's steady state: steps 0..7 after the 2 detected warm-up
/// steps (not one step more), and with the warm-up not left out, steps 1..9 (the first step as start-up).
#[test]
fn the_steady_model_starts_after_the_detected_warm_up() {
    let traces = vec![trace()];
    let model = critical_path::build_steady_model(&traces, &Options::default()).expect("a model");
    assert_eq!(model.steps, Some((0, 7)));
    assert_eq!(model.window_ns, Some((1_022_000, 1_045_000)));
    // Left out: the first kernel at 1,000,100 to the window's start, 21,900 ns; nothing after its end.
    assert_eq!(model.excluded.len(), 1, "{:?}", model.excluded);
    let left_out = &model.excluded[0];
    assert!(left_out.starts_with("start-up and the warm-up: 21.9"), "{left_out}");
    assert!(
        left_out.ends_with("before step 0, after the warm-up step(s) detected (2 on the rank with most)"),
        "{left_out}"
    );
    let off = Options { detect_warmup: false, ..Options::default() };
    let model = critical_path::build_steady_model(&traces, &off).expect("a model");
    assert_eq!(model.steps, Some((1, 9)));
    // The library's steady window, which the viewer opens on.
    assert_eq!(analyze(&traces, &Options::default()).steady_window_ns(), Some((1_022_000, 1_045_000)));
    assert_eq!(analyze(&traces, &off).steady_window_ns(), None);
}
