//! Pipeline findings on real pipeline-parallel runs: `workloads/pp_stages.py` on two H100s, one stage per rank,
//! recorded by `capture` with its stages imbalanced (2 and 6 decoder layers) and balanced (4 and 4), and the
//! imbalanced program under Nsight Systems (`sample-traces/pipeline/`). Each run wrote its own per-stage compute
//! time (CUDA events around each micro-batch's layers) beside the capture, which the stage figures are held to.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, repo_root};
use serde_json::Value;

fn pipeline_dir() -> PathBuf {
    repo_root().join("sample-traces/pipeline")
}

fn findings_json(trace: &Path) -> Value {
    let output = analyzer(&["findings", trace.to_str().unwrap(), "--format", "json"]);
    assert!(output.status.success(), "{}: {}", trace.display(), String::from_utf8_lossy(&output.stderr));
    assert!(output.stderr.is_empty(), "no warning on a clean capture: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The median over the timed steps of the stage's own compute time, ms, as the program measured it.
fn truth_compute_ms(run: &str, rank: u32) -> f64 {
    let path = pipeline_dir().join(format!("{run}.rank{rank}.truth.json"));
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut steps: Vec<f64> =
        truth["steps"].as_array().unwrap().iter().map(|s| s["compute_ms"].as_f64().unwrap()).collect();
    steps.sort_by(f64::total_cmp);
    steps[steps.len() / 2]
}

/// `stage 0 (rank 0) 5.25 ms per step; stage 1 (rank 1) 17.04 ms per step` → the per-step figures, ms.
fn stage_ms(evidence: &str) -> Vec<f64> {
    evidence
        .split("; ")
        .map(|part| {
            let figure = part.rsplit(") ").next().unwrap().trim_end_matches(" ms per step");
            figure.parse::<f64>().unwrap_or_else(|_| panic!("{part}"))
        })
        .collect()
}

#[test]
fn an_imbalanced_pipeline_is_the_top_finding_and_its_stages_match_the_programs_own_times() {
    let found = findings_json(&pipeline_dir().join("pp_imbalanced.sqlite.gz"));
    let top = &found["findings"][0];
    assert_eq!(top["kind"], "pipeline_stage_imbalance", "{found:#}");
    assert_eq!(top["basis"], "replay", "the model fits this run, so the saving is replayed");
    assert!(top["title"].as_str().unwrap().starts_with("pipeline stage 1 is the busiest"), "{top:#}");
    let evidence = top["evidence"][0].as_str().unwrap();
    assert!(evidence.starts_with("stages inferred from 56 point-to-point transfers"), "{evidence}");
    let stages = stage_ms(evidence.split(": ").nth(1).unwrap());
    // 12 timed steps of 4 micro-batches, one send per micro-batch from stage 0: 48 transfers plus the warm-up's 8.
    let (ours, theirs) =
        (stages[1] / stages[0], truth_compute_ms("pp_imbalanced", 1) / truth_compute_ms("pp_imbalanced", 0));
    assert!((ours / theirs - 1.0).abs() < 0.10, "stage 1 ÷ stage 0: trace {ours:.3}, program {theirs:.3}");
    // The stated saving is the replay's; it must be a real share of the window and no more than the window.
    let pct = top["saving_pct"].as_f64().unwrap();
    assert!((2.0..100.0).contains(&pct), "{pct}");
}

#[test]
fn a_balanced_pipeline_does_not_fire_and_says_by_how_little_it_misses() {
    let found = findings_json(&pipeline_dir().join("pp_balanced.sqlite.gz"));
    let kinds: Vec<&str> = found["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"pipeline_stage_imbalance"), "{kinds:?}");
    let quiet = found["quiet"].as_array().unwrap().iter().find(|q| q["kind"] == "pipeline_stage_imbalance").unwrap();
    let why = quiet["why"].as_str().unwrap();
    assert!(why.contains("below the 10 % threshold"), "{why}");
    let stages = stage_ms(why.split(" (").skip(1).collect::<Vec<_>>().join(" (").trim_end_matches(')'));
    let theirs = truth_compute_ms("pp_balanced", 1) / truth_compute_ms("pp_balanced", 0);
    assert!((stages[1] / stages[0] / theirs - 1.0).abs() < 0.05, "{stages:?} against {theirs:.3}");
}

/// The same imbalanced program under Nsight Systems ran host-bound (its rank 1 launched slower than the GPU ran):
/// the stages are still inferred from nsys' own export and stage 1 is still the busiest, but removing the
/// imbalance is not what would save the most there, and the ranking says so.
#[test]
fn the_nsys_export_of_the_imbalanced_program_infers_the_same_stages() {
    let found = findings_json(&pipeline_dir().join("pp_nsys_imbalanced.sqlite.gz"));
    let all = found["findings"].as_array().unwrap().iter().chain(found["quiet"].as_array().unwrap());
    let text: Vec<String> = all.map(|f| f.to_string()).filter(|f| f.contains("pipeline_stage_imbalance")).collect();
    assert_eq!(text.len(), 1, "{found:#}");
    assert!(text[0].contains("stage 1"), "{}", text[0]);
    assert!(!text[0].contains("not evaluated"), "stages inferred from the nsys export: {}", text[0]);
    assert_ne!(found["findings"][0]["kind"], "pipeline_stage_imbalance", "host-bound under nsys: {found:#}");
}
