//! What-if checks its own fit: on every multi-rank trace at hand it either gives a slowdown S ≥ 1 from a model that,
//! replayed unchanged, reproduces the measured time, or it gives no S and says why. Without --step or --window it
//! models the steady-state steps and says what it left out.

use crate::common;

use std::path::Path;

use common::{analyzer, repo_root, shared_traces};
use serde_json::Value;

fn what_if(trace: &Path, extra: &[&str]) -> (Value, String) {
    let run = |format: &str| {
        let mut args = vec!["what-if", trace.to_str().unwrap(), "--format", format];
        args.extend_from_slice(extra);
        let output = analyzer(&args);
        assert!(output.status.success(), "{}: {}", trace.display(), String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    (serde_json::from_str(&run("json")).unwrap(), run("table"))
}

/// Either a fitting model with S ≥ 1, or no S, no attribution, and the reasons in the table.
fn assert_fits_or_says_why(name: &str, report: &Value, table: &str) {
    let fit = &report["fit"];
    let tolerance = fit["tolerance_pct"].as_f64().unwrap();
    if fit["fits"] == true {
        let slowdown = report["slowdown"].as_f64().unwrap_or_else(|| panic!("{name}: a fitting model gives S"));
        assert!(slowdown >= 1.0, "{name}: S = {slowdown}");
        assert!(fit["replay_error_pct"].as_f64().unwrap().abs() <= tolerance, "{name}: {fit}");
        assert!(report["ideal_ns"].as_i64() <= report["measured_ns"].as_i64(), "{name}");
        assert!(fit["problems"].as_array().unwrap().is_empty(), "{name}");
        assert!(table.contains("slowdown S = "), "{name}: {table}");
    } else {
        assert!(report["slowdown"].is_null() && report["speedup"].is_null(), "{name}: {report}");
        assert!(report["by_rank"].as_array().unwrap().is_empty(), "{name}");
        assert!(report["by_category"].as_array().unwrap().is_empty(), "{name}");
        let problems = fit["problems"].as_array().unwrap();
        assert!(!problems.is_empty(), "{name}: no reason given");
        assert!(table.contains("the model does not fit this window"), "{name}: {table}");
        assert!(!table.contains("× faster") && !table.contains("slowdown S"), "{name}: {table}");
    }
    // The model's own lines (what was modelled, notes on the inputs) are the critical path's and not wrapped here.
    let model_lines = ["model:", "not modelled:", "note:"];
    for line in table.lines().filter(|l| !model_lines.iter().any(|m| l.starts_with(m))) {
        assert!(line.chars().count() <= 100, "{name}: {} columns: {line}", line.chars().count());
    }
}

#[test]
fn sample_traces_fit_or_say_why() {
    for sample in ["tp2_capture.sqlite.gz", "tp2_skew_capture.sqlite.gz", "tp2_nsys.sqlite.gz", "kineto_tp2"] {
        let (report, table) = what_if(&repo_root().join("sample-traces").join(sample), &[]);
        assert_fits_or_says_why(sample, &report, &table);
    }
}

/// The window of the skewed sample without warm-up left out (`--skip-steps 0`) is steps 1 to 17, and the table
/// says that step 0 and the start-up before it were left out. There the ideal saves 94.5 % of the time, which rank
/// 1's sleeps do not explain (idealising it alone removes 7.9 % of that): no S. By default the window starts after
/// the 9 warm-up steps the report detects (the first generate call): steps 0 to 8 of those after it.
#[test]
fn the_default_is_the_steady_state_and_says_what_it_left_out() {
    let (detected, table) = what_if(&repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz"), &[]);
    assert_eq!(detected["steps"], serde_json::json!([0, 8]));
    assert!(table.starts_with("what-if for steps 0 to 8, the steady state"), "{table}");
    let left_out = detected["excluded"][0].as_str().unwrap();
    assert!(left_out.starts_with("start-up and the warm-up: "), "{left_out}");
    assert!(
        left_out.ends_with("before step 0, after the warm-up step(s) detected (9 on the rank with most)"),
        "{left_out}"
    );
    let (report, table) =
        what_if(&repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz"), &["--skip-steps", "0"]);
    assert_eq!(report["steps"], serde_json::json!([1, 17]));
    assert!(report["step"].is_null());
    let excluded = report["excluded"].as_array().unwrap();
    assert!(excluded.iter().any(|e| e.as_str().unwrap().starts_with("start-up and step 0")), "{excluded:?}");
    assert!(table.starts_with("what-if for steps 1 to 17, the steady state"), "{table}");
    assert!(table.contains("  left out: start-up and step 0"), "{table}");
    assert_eq!(report["fit"]["fits"], false);
    assert!(report["fit"]["problems"][0].as_str().unwrap().starts_with("no single rank explains"));
    // The steady window is narrower than the whole trace, which keeps the start-up.
    let (whole, whole_table) =
        what_if(&repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz"), &["--whole-trace"]);
    assert!(whole["measured_ns"].as_i64() > report["measured_ns"].as_i64());
    assert!(whole["steps"].is_null() && whole["excluded"].as_array().unwrap().is_empty());
    assert!(whole_table.starts_with("what-if for whole trace"), "{whole_table}");
}

/// The public multi-rank traces: each fits with S ≥ 1 or says why not. DLRM's 8 ranks start their step up to
/// 7.68 ms apart and the no-straggler ideal of step 0 is slower than measured: no "faster" figure, and the
/// staggered starts named.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn public_multi_rank_traces_fit_or_say_why() {
    let shared = shared_traces();
    for trace in [
        "kineto/dlrm_8rank",
        "kineto/sampled_2rank",
        "nsys/h100_2gpu_1s.sqlite",
        "nsys/mfu_2gpu_before.sqlite",
        "nsys/mfu_2gpu_after.sqlite",
    ] {
        let (report, table) = what_if(&shared.join(trace), &[]);
        assert_fits_or_says_why(trace, &report, &table);
    }
    let (step0, table) = what_if(&shared.join("kineto/dlrm_8rank"), &["--step", "0"]);
    assert_fits_or_says_why("dlrm_8rank --step 0", &step0, &table);
    assert!(step0["ideal_ns"].as_i64() > step0["measured_ns"].as_i64(), "{step0}");
    let problem = step0["fit"]["problems"][0].as_str().unwrap();
    assert!(problem.contains("slower than measured") && problem.contains("staggered step starts"), "{problem}");
    assert!(step0["fit"]["start_stagger_ns"].as_i64().unwrap() > 7_000_000);
}
