//! torch.profiler's module view as torch 2.x writes it (`with_modules=True, with_stack=True`): `nn.Module: Class_N`
//! `python_function` events among the Python frames of the stack (`_call_impl`, `forward`, with their `Python id`,
//! `Python parent id` and `Python module id` arguments), an outer and an inner module starting at the same
//! microsecond, `record_function` phases; `analyzer modules` makes the module paths from their nesting and gives
//! each module the kernels launched inside it (hand-computed times). And `benchmarks/scripts/modules_compare.py`,
//! which splits decoder-layer GPU time into projections, attention, norms and MLP: a trace against itself differs
//! by 0 pp (the synthetic trace and the eager module capture), and one projection made slower by a known amount
//! moves the split by the hand-computed points.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{analyzer, repo_root};
use serde_json::{Value, json};

/// One decoder layer's module calls in one step: (name, start µs, end µs) from the step's start, in call order.
const MODULES: [(&str, f64, f64); 16] = [
    ("Qwen3ForCausalLM_0", 10.0, 800.0),
    // Starts at the same microsecond as its parent: the longer range is the parent.
    ("Qwen3Model_0", 10.0, 700.0),
    ("Qwen3DecoderLayer_0", 20.0, 600.0),
    ("Qwen3RMSNorm_0", 30.0, 40.0),
    ("Qwen3Attention_0", 50.0, 300.0),
    ("Linear_0", 60.0, 70.0),
    ("Qwen3RMSNorm_1", 80.0, 90.0),
    ("Linear_1", 100.0, 110.0),
    ("Qwen3RMSNorm_2", 120.0, 130.0),
    ("Linear_2", 140.0, 150.0),
    ("Linear_3", 250.0, 260.0),
    ("Qwen3RMSNorm_3", 310.0, 320.0),
    ("Qwen3MLP_0", 330.0, 500.0),
    ("Linear_4", 340.0, 350.0),
    ("SiLUActivation_0", 360.0, 370.0),
    ("Linear_5", 380.0, 390.0),
];

/// The MLP's down projection and lm_head, after the others (kept apart to keep the list above one screen).
const LATER_MODULES: [(&str, f64, f64); 2] = [("Linear_6", 410.0, 420.0), ("Linear_7", 710.0, 720.0)];

/// Kernel launches: (launch µs from the step's start, kernel µs). Each lies inside one module call above (or in
/// a module's own code between its children): input norm, q, q_norm, k, k_norm, v, attention's own (scores,
/// softmax), o, post-attention norm, gate, act, up, the MLP's own multiply, down, the layer's residual add, lm_head.
fn launches(q_proj_us: f64) -> [(f64, f64); 16] {
    [
        (35.0, 1.0),
        (65.0, q_proj_us),
        (85.0, 1.0),
        (105.0, 5.0),
        (125.0, 1.0),
        (145.0, 5.0),
        (200.0, 6.0),
        (255.0, 10.0),
        (315.0, 1.0),
        (345.0, 15.0),
        (365.0, 2.0),
        (385.0, 15.0),
        (400.0, 3.0),
        (415.0, 15.0),
        (550.0, 10.0),
        (715.0, 20.0),
    ]
}

/// Two decode steps of the layer above, as torch 2.x's profiler writes them.
fn torch2_trace(q_proj_us: f64) -> Value {
    let mut events = Vec::new();
    let mut python_id = 0u64;
    let mut correlation = 0u64;
    for step in 0..2 {
        let base = 1_000_000.0 + 2000.0 * f64::from(step);
        let x = |cat: &str, name: &str, start: f64, dur: f64, args: Value| {
            json!({"ph": "X", "cat": cat, "name": name, "pid": 4242, "tid": 4242, "ts": base + start, "dur": dur,
                   "args": args})
        };
        events.push(x("user_annotation", "decode", 0.0, 900.0, json!({})));
        let mut parents: Vec<(u64, f64)> = Vec::new();
        for (name, start, end) in MODULES.iter().chain(&LATER_MODULES) {
            while parents.last().is_some_and(|&(_, parent_end)| parent_end <= *start) {
                parents.pop();
            }
            let parent = parents.last().map_or(Value::Null, |&(id, _)| json!(id));
            python_id += 1;
            let number: u64 = name.rsplit('_').next().unwrap().parse().unwrap();
            let args = json!({"Python id": python_id, "Python parent id": parent, "Python module id": number});
            events.push(x("python_function", &format!("nn.Module: {name}"), *start, end - start, args));
            // The frames inside a module call: `_call_impl`, then the module's `forward`.
            let module_id = python_id;
            python_id += 1;
            let args = json!({"Python id": python_id, "Python parent id": module_id});
            let call = "torch/nn/modules/module.py(1784): _call_impl";
            events.push(x("python_function", call, start + 0.2, end - start - 0.4, args));
            python_id += 1;
            let args = json!({"Python id": python_id, "Python parent id": python_id - 1});
            events.push(x("python_function", "modeling_qwen3.py(60): forward", start + 0.4, end - start - 0.8, args));
            parents.push((module_id, *end));
        }
        for (i, (launch, duration)) in launches(q_proj_us).into_iter().enumerate() {
            correlation += 1;
            let args = json!({"correlation": correlation, "External id": correlation});
            events.push(x("cuda_runtime", "cudaLaunchKernel", launch, 2.0, args));
            let kernel = json!({"device": 0, "stream": 7, "correlation": correlation});
            let start = 1000.0 + 30.0 * i as f64;
            let mut event = x("kernel", &format!("kernel_{i}"), start, duration, kernel);
            event["pid"] = json!(0);
            event["tid"] = json!(7);
            events.push(event);
        }
    }
    json!({"schemaVersion": 1, "traceEvents": events})
}

fn write(dir: &Path, name: &str, trace: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(trace).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

fn modules_json(trace: &str) -> Value {
    let output = analyzer(&["modules", "--format", "json", trace]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn torch2_module_calls_give_paths_by_nesting_and_the_kernels_launched_in_them() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "torch2.json", &torch2_trace(10.0));
    let report = modules_json(&trace);
    let phases = report["ranks"][0]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 1, "{phases:?}");
    assert_eq!((phases[0]["phase"].as_str(), phases[0]["instances"].as_u64()), (Some("decode"), Some(2)));
    assert_eq!(phases[0]["gpu_ns"], 2 * 120_000);
    let layer = "Qwen3ForCausalLM_0.Qwen3Model_0.Qwen3DecoderLayer_0";
    let got: Vec<(String, i64, u64, Option<u64>, String)> = phases[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let path = row["path"].as_str().unwrap().to_string();
            (
                path,
                row["gpu_ns"].as_i64().unwrap(),
                row["calls"].as_u64().unwrap(),
                row["layer"].as_u64(),
                row["within_layer"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Two steps of each kernel (µs × 2 × 1000 ns), every module called once a step.
    let in_layer = |below: &str, ns: i64| {
        let path = if below.is_empty() { layer.to_string() } else { format!("{layer}.{below}") };
        (path, ns, 2, Some(0), below.to_string())
    };
    let expected = vec![
        in_layer("", 20_000),
        in_layer("Qwen3Attention_0", 12_000),
        in_layer("Qwen3Attention_0.Linear_0", 20_000),
        in_layer("Qwen3Attention_0.Linear_1", 10_000),
        in_layer("Qwen3Attention_0.Linear_2", 10_000),
        in_layer("Qwen3Attention_0.Linear_3", 20_000),
        in_layer("Qwen3Attention_0.Qwen3RMSNorm_1", 2_000),
        in_layer("Qwen3Attention_0.Qwen3RMSNorm_2", 2_000),
        in_layer("Qwen3MLP_0", 6_000),
        in_layer("Qwen3MLP_0.Linear_4", 30_000),
        in_layer("Qwen3MLP_0.Linear_5", 30_000),
        in_layer("Qwen3MLP_0.Linear_6", 30_000),
        in_layer("Qwen3MLP_0.SiLUActivation_0", 4_000),
        in_layer("Qwen3RMSNorm_0", 2_000),
        in_layer("Qwen3RMSNorm_3", 2_000),
        ("Qwen3ForCausalLM_0.Linear_7".to_string(), 40_000, 2, None, "Qwen3ForCausalLM_0.Linear_7".to_string()),
    ];
    let mut sorted = got.clone();
    sorted.sort();
    let mut expected_sorted = expected;
    expected_sorted.sort();
    assert_eq!(sorted, expected_sorted);
}

fn compare(first: &str, second: &str, out: &Path) -> (i32, String, Value) {
    let script = repo_root().join("benchmarks/scripts/modules_compare.py");
    let output = Command::new("python3")
        .arg(script)
        .args(["--analyzer", env!("CARGO_BIN_EXE_analyzer"), "--out", out.to_str().unwrap(), first, second])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.code().is_some_and(|c| c < 2), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let json = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    (output.status.code().unwrap(), stdout, json)
}

#[test]
fn the_compare_script_splits_layers_by_part_and_gives_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(dir.path(), "base.json", &torch2_trace(10.0));
    let (code, stdout, json) = compare(&base, &base, &dir.path().join("same.json"));
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(json["largest_part_gap_pp"], 0.0);
    // Per step 100 µs in the layer: q 10, k 5, v 5, o 10, norms 4, attention's own 6, gate, up, down 15 each, the
    // MLP's own (act_fn, multiply) 5, the layer's own 10.
    let shares = &json["files"][&base]["shares"];
    let expected = [
        ("q_proj", 0.10),
        ("k_proj", 0.05),
        ("v_proj", 0.05),
        ("o_proj", 0.10),
        ("gate_proj", 0.15),
        ("up_proj", 0.15),
        ("down_proj", 0.15),
        ("attention", 0.06),
        ("norms", 0.04),
        ("mlp", 0.05),
        ("layer", 0.10),
        ("projections", 0.75),
    ];
    for (part, share) in expected {
        assert!((shares[part].as_f64().unwrap() - share).abs() < 1e-12, "{part}: {}", shares[part]);
    }
    assert_eq!(json["files"][&base]["decoder_layer_gpu_ns"], 200_000);
    // q_proj 30 µs instead of 10: 120 µs in the layer, q_proj 25 % instead of 10 % (+15 pp), k_proj 5/120.
    let slower = write(dir.path(), "slower.json", &torch2_trace(30.0));
    let (code, stdout, json) = compare(&base, &slower, &dir.path().join("slower_out.json"));
    assert_eq!(code, 1, "a 15 pp gap is over the 5 pp target: {stdout}");
    let gaps = &json["difference_pp"];
    assert!((gaps["q_proj"].as_f64().unwrap() - 15.0).abs() < 1e-9, "{gaps}");
    assert!((gaps["k_proj"].as_f64().unwrap() - (5.0 / 1.2 - 5.0)).abs() < 1e-9, "{gaps}");
    assert!((json["largest_part_gap_pp"].as_f64().unwrap() - 15.0).abs() < 1e-9);
    assert!(stdout.contains("NOT within the 5 pp target"), "{stdout}");
}

/// The eager module capture against itself: every part 0 pp apart, and its layers' time split between the named
/// projections (the capture names modules by attribute).
#[test]
fn the_compare_script_gives_zero_for_a_capture_against_itself() {
    let dir = tempfile::tempdir().unwrap();
    let sample = repo_root().join("sample-traces/modules/qwen3_eager.sqlite.gz");
    let sample = sample.to_str().unwrap();
    let (code, stdout, json) = compare(sample, sample, &dir.path().join("eager.json"));
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(json["largest_part_gap_pp"], 0.0);
    let file = &json["files"][sample];
    assert_eq!(file["layers"], 4);
    for part in ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "norms", "attention"] {
        assert!(file["shares"][part].as_f64().unwrap() > 0.0, "{part}: {stdout}");
    }
    assert_eq!(file["shares"]["other_proj"], 0.0);
    assert_eq!(file["shares"]["other"], 0.0, "{stdout}");
}

/// A real torch.profiler trace of the eager decoder (`with_modules=True, with_stack=True`, one H100, torch 2.11):
/// its module view, built from the nesting of `nn.Module:` calls among Python frames, splits the decode layers as the
/// module capture of the same program does, every part within 5 pp (0.51 pp at most when recorded).
#[test]
fn a_real_torch_profiler_module_view_agrees_with_the_capture_within_five_points() {
    let dir = tempfile::tempdir().unwrap();
    let modules = repo_root().join("sample-traces/modules");
    let capture = modules.join("qwen3_eager.sqlite.gz");
    let kineto = modules.join("qwen3_eager_torch_profiler.json.gz");
    let (code, stdout, json) =
        compare(capture.to_str().unwrap(), kineto.to_str().unwrap(), &dir.path().join("real.json"));
    assert_eq!(code, 0, "{stdout}");
    let gap = json["largest_part_gap_pp"].as_f64().unwrap();
    assert!(gap < 1.0, "{stdout}");
    let file = &json["files"][kineto.to_str().unwrap()];
    assert_eq!(file["layers"], 4, "{stdout}");
    for part in ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "norms", "attention"] {
        assert!(file["shares"][part].as_f64().unwrap() > 0.0, "{part}: {stdout}");
    }
}
