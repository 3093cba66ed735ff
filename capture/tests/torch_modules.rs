//! `capture --torch-modules`: the Python start-up hook, run by the real launcher on a stand-in torch
//! (`tests/data/fake_torch`) that logs every NVTX call and counter read. Checks the ranges' names, nesting,
//! depth limit, memory counters, that nothing happens while torch.compile traces, and that the workload's own
//! sitecustomize still runs. Skipped, by name, where no `python3` is on the path.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_torch")
}

/// Runs the stand-in model under `capture --torch-modules<option>` and returns what the hook did.
fn run_model(test: &str, option: &str) -> Value {
    run_model_with(test, option, &[])
}

/// `run_model` with more environment for the stand-in torch.
fn run_model_with(test: &str, option: &str, env: &[(&str, &str)]) -> Value {
    let dir = std::env::temp_dir().join(format!("shardscope-torch-modules-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fake_lib = dir.join("libfake_inject.so");
    std::fs::write(&fake_lib, b"").unwrap();
    let pythonpath = format!("{}:{}", data().display(), data().join("own_site").display());
    let out = Command::new(env!("CARGO_BIN_EXE_capture"))
        .arg("-o")
        .arg(dir.join("out.sqlite"))
        .arg("--inject-lib")
        .arg(&fake_lib)
        .arg(format!("--torch-modules{option}"))
        .args(["--group-wait", "5", "--", "python3"])
        .arg(data().join("run_model.py"))
        .env("PYTHONPATH", pythonpath)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "only the stand-in library and the output stay: {leftovers:?}");
    std::fs::remove_dir_all(&dir).unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The log as lines: `push NAME`, `pop`, `stats`.
fn log(result: &Value) -> Vec<String> {
    let events = result["events"].as_array().unwrap();
    events
        .iter()
        .map(|event| {
            let parts: Vec<&str> = event.as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
            parts.join(" ")
        })
        .collect()
}

fn one_call(prefix: &str, layers: usize) -> Vec<String> {
    let mut lines = vec![format!("push (Model){prefix}"), "push layers (Module)".into()];
    for layer in 0..layers {
        lines.push(format!("push layers.{layer} (Block)"));
        for proj in ["q_proj", "o_proj"] {
            lines.push(format!("push layers.{layer}.{proj} (Linear)"));
            lines.push("pop".into());
        }
        lines.push("pop".into());
    }
    lines.extend(["pop".into(), "pop".into()]);
    lines
}

/// What `run_model.py` logs with every module named: two plain passes, a compiled one (nothing), a pass with a
/// forward hook on one projection, a stray module, a forward that raises.
fn expected_full_log() -> Vec<String> {
    let mut expected = one_call("", 2);
    expected.extend(one_call("", 2));
    // The compiled call adds nothing; then a call with a forward hook on one projection: its hook runs inside
    // its range.
    let mut hooked = one_call("", 2);
    let at = hooked.iter().position(|l| l == "push layers.0.q_proj (Linear)").unwrap();
    hooked.insert(at + 1, "hook".into());
    expected.extend(hooked);
    // The stray module is named under its caller; a forward that raises closes its range and its callers' before
    // the exception reaches the program.
    expected.extend(
        ["push (Model)", "push layers (Module)", "push layers.Linear (Linear)", "pop", "pop", "pop"].map(String::from),
    );
    expected.extend(
        ["push (Model)", "push layers (Module)", "push layers.Failing (Failing)", "pop", "pop", "pop", "raised"]
            .map(String::from),
    );
    expected
}

#[test]
#[cfg_attr(not(python3_on_path), ignore = "needs python3 on PATH")]
fn every_module_forward_is_one_named_range_and_compiling_adds_none() {
    let result = run_model("all", "");
    assert_eq!(log(&result), expected_full_log());
    assert_eq!(result["chained"], "yes", "the workload's own sitecustomize ran after the hook");
    // torch's `_call_impl` ran for no call of the two plain passes (the hook took torch's fast path itself), for
    // all 8 calls while compiling, and for the one hooked module's call.
    assert_eq!(result["call_impl"], serde_json::json!([0, 8, 1]));
    compiled_code_gets_balanced_ranges(&result);
}

/// Inductor's Python wrappers (the stand-in's) get the pushes and pops that follow each kernel's module stack,
/// named as the eager ranges, all closed before the code returns; the C++ wrapper gets none; the caches are off.
fn compiled_code_gets_balanced_ranges(result: &Value) {
    let push = |name: &str| format!("torch._C._nvtx.rangePushA('{name}')");
    let pop = "torch._C._nvtx.rangePop()".to_string();
    let expected = [
        "ctx mm".into(),
        push("model (Model)"),
        push("model.layers.0 (Block)"),
        push("model.layers.0.q_proj (Linear)"),
        "kernel 1".into(),
        "ctx mm_1".into(),
        pop.clone(),
        push("model.layers.0.o_proj (Linear)"),
        "kernel 2".into(),
        "ctx add".into(),
        pop.clone(),
        "kernel 3".into(),
        "ctx sum".into(),
        pop.clone(),
        pop.clone(),
        push("(Model)"),
        "kernel 4".into(),
        // A loop written inline: every range closed before it, none opened inside.
        pop.clone(),
        "while cond:".into(),
        "ctx loop_mm".into(),
        "    kernel in loop loop_mm".into(),
        "ctx mm_2".into(),
        push("model (Model)"),
        push("model.layers.0 (Block)"),
        "kernel 5".into(),
        pop.clone(),
        pop.clone(),
    ];
    for kind in ["PythonWrapperCodegen", "SubgraphPythonWrapperCodegen"] {
        assert_eq!(result["generated"][kind], serde_json::json!(expected), "{kind}");
    }
    let cpp = [
        "ctx mm",
        "kernel 1",
        "ctx mm_1",
        "kernel 2",
        "ctx add",
        "kernel 3",
        "ctx sum",
        "kernel 4",
        "while cond:",
        "ctx loop_mm",
        "    kernel in loop loop_mm",
        "ctx mm_2",
        "kernel 5",
    ];
    assert_eq!(result["generated"]["CppWrapperCpu"], serde_json::json!(cpp));
    assert_eq!(result["caches"], serde_json::json!([false, false]), "Inductor's and AOTAutograd's caches off");
    // A node whose module stack cannot be read stops the ranges (said on stderr), and the ones already open are
    // still closed before the code returns.
    let after_failure = [
        "ctx mm".into(),
        push("model (Model)"),
        push("model.layers.0 (Block)"),
        "kernel 1".into(),
        "ctx odd".into(),
        "kernel 2".into(),
        "ctx mm_1".into(),
        "kernel 3".into(),
        pop.clone(),
        pop,
    ];
    assert_eq!(result["generated"]["after a failure"], serde_json::json!(after_failure));
}

/// A torch without what its fast path checks (here no `torch._C._is_tracing`, as before 2.0 the backward-pre
/// tables): every call goes through `_call_impl`, with the same ranges.
#[test]
#[cfg_attr(not(python3_on_path), ignore = "needs python3 on PATH")]
fn without_the_fast_path_every_call_goes_through_call_impl() {
    let result = run_model_with("no-fast-path", "", &[("FAKE_TORCH_NO_FAST_PATH", "1")]);
    assert_eq!(log(&result), expected_full_log());
    assert_eq!(result["call_impl"], serde_json::json!([16, 8, 8]));
}

#[test]
#[cfg_attr(not(python3_on_path), ignore = "needs python3 on PATH")]
fn depth_limit_and_memory_counters() {
    let result = run_model("depth", "=2,memory");
    let lines = log(&result);
    // Depth 2 keeps the root (0 parts), `layers` (1) and `layers.N` (2), not the projections (3).
    let pushes: Vec<&str> = lines.iter().filter(|l| l.starts_with("push")).map(String::as_str).take(6).collect();
    assert_eq!(
        pushes,
        [
            "push (Model) mem=0,4096",
            "push layers (Module) mem=0,4096",
            "push layers.0 (Block) mem=0,4096",
            "push mem=200,4096",
            "push layers.1 (Block) mem=200,4096",
            "push mem=400,4096",
        ]
    );
    // Each exit reading is a zero-length range just inside its module's range.
    let exit = lines.iter().position(|l| l == "push mem=200,4096").unwrap();
    assert_eq!(lines[exit - 1], "stats");
    assert_eq!(&lines[exit + 1..exit + 3], ["pop", "pop"]);
    let stats = lines.iter().filter(|l| *l == "stats").count();
    let ranges = lines.iter().filter(|l| l.starts_with("push") && !l.starts_with("push mem=")).count();
    assert_eq!(stats, 2 * ranges, "one counter read at entry and one at exit of every recorded module");
    // Compiled code keeps the same depth limit (`model.layers.0` has 3 parts) and reads no counters.
    let generated = result["generated"]["PythonWrapperCodegen"].as_array().unwrap();
    let pushes: Vec<&str> = generated.iter().filter_map(|l| l.as_str()).filter(|l| l.contains("rangePushA")).collect();
    let model = "torch._C._nvtx.rangePushA('model (Model)')";
    assert_eq!(pushes, [model, "torch._C._nvtx.rangePushA('(Model)')", model]);
}
