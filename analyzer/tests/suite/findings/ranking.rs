//! The ranking of findings: the recurring causes by saving per run whatever the basis (a bound as much as a
//! replay), a replay before a bound of the same saving, then the warm-up (saved once per run), risks last; on a
//! hand-made list and on the samples, where the top finding must be the recurring one with the largest saving.

use super::{finding, findings_json};

use crate::common::repo_root;
use serde_json::Value;
use shardscope_analyzer::findings::{self, Basis, Finding};

fn made(kind: &'static str, basis: Basis, saving_per_run_ns: i64) -> Finding {
    Finding {
        kind,
        title: String::new(),
        evidence: Vec::new(),
        how: String::new(),
        basis,
        saving_ns: saving_per_run_ns,
        saving_pct: 0.0,
        saving_per_step_ns: None,
        saving_per_run_ns,
    }
}

/// A bound of 400 ns ranks above replays of 300 and 100 ns; a bound of 100 ns after the replay of 100 ns; the
/// warm-up's 500 ns after every recurring cause; a risk (no time) last although listed first; equal savings of one
/// basis by type name.
#[test]
fn findings_rank_by_saving_then_replay_before_bound_and_risks_last() {
    let mut list = vec![
        made("memory_near_capacity", Basis::Risk, 0),
        made("synchronising_calls", Basis::Replay, 100),
        made("warmup", Basis::Bound, 500),
        made("low_flop_rate", Basis::Bound, 100),
        made("pipeline_stage_imbalance", Basis::Bound, 400),
        made("launch_bound", Basis::Replay, 300),
        made("host_device_copies", Basis::Replay, 100),
    ];
    findings::rank(&mut list);
    let order: Vec<&str> = list.iter().map(|f| f.kind).collect();
    assert_eq!(
        order,
        [
            "pipeline_stage_imbalance",
            "launch_bound",
            "host_device_copies",
            "synchronising_calls",
            "low_flop_rate",
            "warmup",
            "memory_near_capacity"
        ]
    );
}

/// The ranking the list of `found` must have: savings per run of the recurring causes never rising, then the
/// warm-up, risks only at the end.
fn assert_ranked(name: &str, found: &Value) {
    let list = found["findings"].as_array().unwrap();
    let risk_at = list.iter().position(|f| f["basis"] == "risk").unwrap_or(list.len());
    assert!(list[risk_at..].iter().all(|f| f["basis"] == "risk"), "{name}: {found:#}");
    let warmup_at = list.iter().position(|f| f["kind"] == "warmup").unwrap_or(risk_at);
    assert!(warmup_at == risk_at || warmup_at + 1 == risk_at, "{name}: the warm-up just before the risks");
    let savings: Vec<i64> = list[..warmup_at].iter().map(|f| f["saving_per_run_ns"].as_i64().unwrap()).collect();
    assert!(savings.windows(2).all(|w| w[0] >= w[1]), "{name}: {savings:?}");
}

/// The program that copies 64 MiB from pageable memory in every step: the pageable copies, replayed with their
/// calls at no time, save far more than any other cause (the synchronising calls' replay, about 2 % of the window,
/// ranked first before) and are the top finding.
#[test]
fn the_pageable_program_ranks_its_copies_first() {
    let found = findings_json(&repo_root().join("sample-traces/findings/kineto_pageable_copies.json.gz"), &[]);
    assert_ranked("kineto_pageable_copies", &found);
    let list = found["findings"].as_array().unwrap();
    assert_eq!(list[0]["kind"], "pageable_copies", "{found:#}");
    assert_eq!(list[0]["basis"], "replay");
    let top = list[0]["saving_per_run_ns"].as_i64().unwrap();
    let syncs = finding(&found, "synchronising_calls").expect("the synchronising calls fire too");
    assert!(top > 10 * syncs["saving_per_run_ns"].as_i64().unwrap(), "{found:#}");
}

/// On every sample the list is in that order; the memory-full program's risk comes after every time.
#[test]
fn the_samples_are_ranked_by_saving() {
    let root = repo_root().join("sample-traces");
    for name in [
        "tp2_nsys.sqlite.gz",
        "tp2_capture.sqlite.gz",
        "tp2_skew_capture.sqlite.gz",
        "tp2_full_capture.sqlite.gz",
        "kineto_tp2",
        "findings/kineto_memory_full.json.gz",
    ] {
        let found = findings_json(&root.join(name), &[]);
        assert_ranked(name, &found);
    }
}
