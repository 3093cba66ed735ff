//! The HTA-compatible figures equal Holistic Trace Analysis 0.5.0's on the real multi-rank Kineto traces.
//!
//! The reference numbers in `scripts/hta_reference/*.json` were measured by running HTA 0.5.0 itself
//! (`scripts/hta_reference.py`); `scripts/compare_hta.py` does the same comparison from the command line.

use crate::common;

use common::{analyzer, repo_root, shared_traces};
use serde_json::Value;

const TOLERANCE_PP: f64 = 0.1;

fn check_set(trace: &str, reference_file: &str, extra_args: &[&str]) {
    let shared = shared_traces();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("scripts/hta_reference").join(reference_file)).unwrap(),
    )
    .unwrap();
    let input = shared.join("kineto").join(trace);
    let mut args = vec!["report", "--format", "json", input.to_str().unwrap()];
    args.extend_from_slice(extra_args);
    let output = analyzer(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let ours: Value = serde_json::from_slice(&output.stdout).unwrap();
    let ref_ranks = reference["trace_sets"][0]["ranks"].as_array().unwrap();
    assert_eq!(ours["ranks"].as_array().unwrap().len(), ref_ranks.len(), "{trace}: rank count");
    for ref_rank in ref_ranks {
        let rank = ref_rank["rank"].as_u64().unwrap();
        let our_rank = ours["ranks"].as_array().unwrap().iter().find(|r| r["rank"] == rank).expect("rank present");
        let (ref_hta, our_hta) = (&ref_rank["hta"], &our_rank["hta"]);
        let union_ns = ref_hta["union_ns"].as_f64().unwrap();
        let close = |what: &str, reference: f64, ours: f64, scale: f64| {
            let diff_pp = (ours - reference) * scale;
            assert!(diff_pp.abs() <= TOLERANCE_PP, "{trace} rank {rank} {what}: HTA {reference}, ours {ours}");
        };
        match ref_rank["comm_comp_overlap_pct"].as_f64() {
            Some(reference) => close("overlap %", reference, our_hta["comm_comp_overlap_pct"].as_f64().unwrap(), 1.0),
            None => assert!(our_hta["comm_comp_overlap_pct"].is_null(), "{trace} rank {rank}: no communication"),
        }
        for field in ["comm_pct", "comp_pct", "mem_pct"] {
            close(field, ref_hta[field].as_f64().unwrap(), our_hta[field].as_f64().unwrap(), 1.0);
        }
        for field in ["comm_ns", "comp_ns", "mem_ns"] {
            close(field, ref_hta[field].as_f64().unwrap(), our_hta[field].as_f64().unwrap(), 100.0 / union_ns);
        }
        assert_eq!(our_hta["union_ns"], ref_hta["union_ns"], "{trace} rank {rank}: union of GPU time");
    }
}

/// dlrm_8rank: every rank holds only `ProfilerStep#10`, so HTA (and we) analyse everything.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn dlrm_8rank_matches_hta() {
    check_set("dlrm_8rank", "dlrm_8rank.json", &[]);
}

/// sampled_2rank: two steps; HTA's default drops launches from the last one on.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn sampled_2rank_matches_hta_with_last_step_dropped() {
    check_set("sampled_2rank", "sampled_2rank.json", &[]);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn sampled_2rank_matches_hta_with_last_step_included() {
    check_set("sampled_2rank", "sampled_2rank.include_last_step.json", &["--hta-include-last-step"]);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn df_index_resolver_matches_hta_with_last_step_dropped() {
    check_set("df_index_resolver.json.gz", "df_index_resolver.json", &[]);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn df_index_resolver_matches_hta_with_last_step_included() {
    check_set("df_index_resolver.json.gz", "df_index_resolver.include_last_step.json", &["--hta-include-last-step"]);
}
