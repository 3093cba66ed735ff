//! The straggler what-if on the three traces published with the OSDI 2025 paper reproduces the paper artifact's
//! expected results: `S` and its decompositions per operation type, DP rank and stage within 1 % (relative), and
//! `M_W` / `M_S` within 1 percentage point.

use std::path::{Path, PathBuf};

use serde_json::Value;
use shardscope_analyzer::straggler_artifact::{self, GroupSlowdown, JobMeta, StragglerReport};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/straggler-artifact").join(name)
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

fn analyse(trial: &str) -> StragglerReport {
    let meta = JobMeta::load(&data(&format!("meta-{trial}.yaml"))).unwrap();
    straggler_artifact::run(&data(&format!("trace-{trial}.parquet")), &meta).unwrap()
}

/// Compares one decomposition with the expected `{name: slowdown}` object, every key present on both sides.
fn check_groups(trial: &str, what: &str, ours: &[GroupSlowdown], expected: &Value, failures: &mut Vec<String>) {
    let expected = expected.as_object().unwrap_or_else(|| panic!("{trial}: {what} is not an object"));
    assert_eq!(
        ours.len(),
        expected.len(),
        "{trial}: {what}: groups {:?} vs {:?}",
        ours.iter().map(|g| &g.name).collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (name, value) in expected {
        let want = value.as_f64().unwrap();
        let Some(got) = ours.iter().find(|g| &g.name == name) else {
            failures.push(format!("{trial}: {what}: no group {name}"));
            continue;
        };
        let error = (got.slowdown - want).abs() / want;
        if error > 0.01 {
            failures.push(format!(
                "{trial}: {what} {name}: {:.5} vs expected {want:.5} ({:.2} %)",
                got.slowdown,
                error * 100.0
            ));
        }
    }
}

fn check(trial: &str) {
    let report = analyse(trial);
    let result = json(&format!("result-{trial}.json"));
    let mut failures = Vec::new();
    let want = result["blocking_slowdown"].as_f64().unwrap();
    let error = (report.slowdown - want).abs() / want;
    if error > 0.01 {
        failures.push(format!("{trial}: S {:.5} vs expected {want:.5}", report.slowdown));
    }
    check_groups(trial, "S_t", &report.by_optype, &result["blocking_decompose_by_optype"], &mut failures);
    check_groups(trial, "S_w per DP rank", &report.by_dp_rank, &result["blocking_decompose_by_dp_rank"], &mut failures);
    check_groups(trial, "S_w per stage", &report.by_stage, &result["blocking_decompose_by_stage"], &mut failures);
    for (name, ours, file, key) in
        [("M_W", &report.m_w, format!("mw-{trial}.json"), "Mw"), ("M_S", &report.m_s, format!("ms-{trial}.json"), "Ms")]
    {
        let want = json(&file)[key].as_f64().unwrap();
        if (ours.removed - want).abs() > 0.01 {
            failures.push(format!("{trial}: {name} {:.4} vs expected {want:.4}", ours.removed));
        }
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), straggler_artifact::table(&report));
    // The per-step slowdowns are those of the expected result too (the same keys, each within 1 %).
    let per_step = result["blocking_step_slowdown"].as_object().unwrap();
    assert_eq!(per_step.len(), report.per_step.len(), "{trial}: steps");
    for step in &report.per_step {
        let want = per_step[&step.step.to_string()].as_f64().unwrap();
        assert!(
            (step.slowdown - want).abs() / want <= 0.01,
            "{trial}: step {}: {} vs {want}",
            step.step,
            step.slowdown
        );
    }
}

#[test]
fn artifact_trace_st_stage_imbalance() {
    check("ST");
}

#[test]
fn artifact_trace_ar_slow_worker() {
    check("AR");
}

#[test]
fn artifact_trace_se_sequence_imbalance() {
    check("SE");
}
