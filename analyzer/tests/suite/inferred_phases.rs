//! Prefill and decode inferred without NVTX: the bundled nsys exports and a capture, copied with their NVTX ranges
//! deleted, give the phases their recorded ranges give, to a stated tolerance; with the ranges in place the
//! recorded phases are used and nothing is inferred.

use crate::common;

use std::path::{Path, PathBuf};

use common::{analyzer, repo_root};
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Unpacks a bundled `.sqlite.gz` into `dir` and deletes its NVTX ranges in the copy.
fn without_nvtx(bundled: &str, dir: &Path) -> PathBuf {
    let packed = std::fs::File::open(repo_root().join("sample-traces").join(bundled)).unwrap();
    let copy = dir.join(bundled.trim_end_matches(".gz"));
    let mut out = std::fs::File::create(&copy).unwrap();
    std::io::copy(&mut flate2::read::GzDecoder::new(packed), &mut out).unwrap();
    let db = rusqlite::Connection::open(&copy).unwrap();
    let deleted = db.execute("DELETE FROM NVTX_EVENTS", []).unwrap();
    assert!(deleted > 0, "{bundled} has NVTX ranges to delete");
    copy
}

/// Kernel count of `phase` on each rank.
fn phase_kernels(report: &Value, phase: &str) -> Vec<i64> {
    let ranks = report["ranks"].as_array().unwrap();
    ranks.iter().map(|r| r["phases"][phase]["kernel_count"].as_i64().unwrap_or(0)).collect()
}

/// Tolerance: every inferred phase has its recorded phase's kernel count within 10 % (the inferred prefill starts at
/// its first GEMM, so the few kernels a recorded prefill range opens with go without phase, and the next decode
/// step's first kernels may join it), and as many prefill instances as the trace has prefill ranges.
fn assert_phases_match(bundled: &str, prefills: u64) {
    let dir = tempfile::tempdir().unwrap();
    let stripped = without_nvtx(bundled, dir.path());
    let original = repo_root().join("sample-traces").join(bundled);
    let recorded = json(&["report", "--format", "json", original.to_str().unwrap()]);
    let inferred = json(&["report", "--format", "json", stripped.to_str().unwrap()]);
    for rank in recorded["ranks"].as_array().unwrap() {
        assert_eq!(rank["phase_source"], "recorded", "{bundled}: recorded phases are never replaced");
        assert_eq!(rank["phases"]["prefill"]["phase_source"], "recorded");
    }
    for rank in inferred["ranks"].as_array().unwrap() {
        assert_eq!(rank["annotation_ranges"], 0, "{bundled}: the copy has no ranges");
        assert_eq!(rank["phase_source"], "inferred", "{bundled}");
        let phases: Vec<&String> = rank["phases"].as_object().unwrap().keys().collect();
        assert_eq!(phases, ["prefill", "decode"], "{bundled}");
        assert_eq!(rank["phases"]["prefill"]["instances"]["count"].as_u64(), Some(prefills), "{bundled}");
        assert_eq!(rank["phases"]["decode"]["phase_source"], "inferred");
    }
    for phase in ["prefill", "decode"] {
        let (want, got) = (phase_kernels(&recorded, phase), phase_kernels(&inferred, phase));
        assert_eq!(want.len(), got.len());
        for (want, got) in want.iter().zip(&got) {
            assert!(*want > 0, "{bundled}: recorded {phase} has kernels");
            assert!((got - want).abs() * 10 <= *want, "{bundled} {phase}: inferred {got} kernels, recorded {want}");
        }
    }
    let table = String::from_utf8(analyzer(&["report", stripped.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("-- phase prefill (inferred) --"), "{table}");
    assert!(table.contains("phases (inferred): no phase ranges"), "{table}");
}

/// One GPU, a warm-up and a timed request (two prefills, 16 decode steps): recorded prefill 44 and decode 482
/// kernels, inferred 40 and 484.
#[test]
fn one_gpu_nsys_export() {
    assert_phases_match("tp1_nsys.sqlite.gz", 2);
}

/// `collectives` says whose phase column is inferred.
#[test]
fn collectives_say_phases_are_inferred() {
    let dir = tempfile::tempdir().unwrap();
    let stripped = without_nvtx("tp2_nsys.sqlite.gz", dir.path());
    let c = json(&["collectives", "--format", "json", stripped.to_str().unwrap()]);
    assert_eq!(c["phases_inferred_in"], serde_json::json!([stripped.to_str().unwrap()]));
    let phases: Vec<&str> =
        c["collectives"]["groups"].as_array().unwrap().iter().map(|g| g["phase"].as_str().unwrap()).collect();
    assert!(phases.contains(&"prefill") && phases.contains(&"decode"), "{phases:?}");
    let table = String::from_utf8(analyzer(&["collectives", stripped.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("phases inferred from the kernels (no phase ranges) in "), "{table}");
    let recorded = repo_root().join("sample-traces/tp2_nsys.sqlite.gz");
    let c = json(&["collectives", "--format", "json", recorded.to_str().unwrap()]);
    assert_eq!(c["phases_inferred_in"], serde_json::json!([]));
}

/// `compare` says in which runs a phase was inferred.
#[test]
fn compare_marks_inferred_phases() {
    let dir = tempfile::tempdir().unwrap();
    let stripped = without_nvtx("tp1_nsys.sqlite.gz", dir.path());
    let tp2 = repo_root().join("sample-traces/tp2_nsys.sqlite.gz");
    let args = ["compare", "--format", "json", "--run", stripped.to_str().unwrap(), "--run", tp2.to_str().unwrap()];
    let c = json(&args);
    let phases = c["phases"].as_array().unwrap();
    let prefill = phases.iter().find(|p| p["phase"] == "prefill").unwrap();
    assert_eq!(prefill["inferred"], serde_json::json!([true, false]));
    assert_eq!(phases[0]["inferred"], serde_json::json!([false, false]));
}

/// Two GPUs of the same program: recorded 52 and 514 kernels per rank, inferred 56 and 508.
#[test]
fn two_gpu_nsys_export() {
    assert_phases_match("tp2_nsys.sqlite.gz", 2);
}

/// The full-size capture (8 layers, 4 requests of 1024 prompt tokens, 32 decode steps each): recorded 416 and
/// 17,412 kernels per rank, inferred 424 and 17,400.
#[test]
fn full_size_capture() {
    assert_phases_match("tp2_full_capture.sqlite.gz", 4);
}
