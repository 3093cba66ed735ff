//! The summary that opens `analyzer report`'s table: at most 100 columns, before the details, with the report's
//! own figures and the late-rank verdict.

mod common;

use common::{analyzer, repo_root};
use serde_json::Value;

fn stdout(args: &[&str]) -> String {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The summary: the lines before the details' first line.
fn summary_of(table: &str) -> Vec<&str> {
    table.lines().take_while(|l| !l.starts_with("shardscope report:")).collect()
}

#[test]
fn the_summary_comes_first_fits_100_columns_and_says_who_is_late() {
    let table = stdout(&["report"]);
    assert!(table.starts_with("summary: 2 rank(s)"), "{table}");
    let summary = summary_of(&table);
    assert!(summary.len() < 25, "one screen: {} lines", summary.len());
    for line in &summary {
        assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
    }
    assert!(table.contains("\nshardscope report:"), "the details follow");

    let report: Value = serde_json::from_str(&stdout(&["report", "--format", "json"])).unwrap();
    let matched = report["collectives"]["matched_instances"].as_u64().unwrap();
    let late = report["ranks"][1]["late_count"].as_u64().unwrap();
    let text = summary.join("\n");
    assert!(text.contains(&format!("rank 1 arrived last at {late} of {matched} matched collectives")), "{text}");
    // Each rank's row: its busy time and late count; the top line names its largest category first.
    for (index, rank) in report["ranks"].as_array().unwrap().iter().enumerate() {
        let row = summary.iter().position(|l| l.starts_with(&format!("r{index} "))).expect("a row per rank");
        assert!(summary[row].ends_with(&format!(" {}", rank["late_count"])), "{}", summary[row]);
        let categories = rank["categories"].as_object().unwrap();
        let largest = categories.iter().max_by_key(|(_, v)| v.as_i64().unwrap()).unwrap().0;
        assert!(summary[row + 1].trim_start().starts_with(&format!("top: {largest} ")), "{}", summary[row + 1]);
        assert!(summary[row + 1].matches('%').count() <= 5, "top 5 only");
    }
}

#[test]
fn a_single_rank_has_no_late_rank() {
    let trace = repo_root().join("sample-traces/tp1_nsys.sqlite.gz");
    let table = stdout(&["report", trace.to_str().unwrap()]);
    let summary = summary_of(&table).join("\n");
    assert!(summary.contains("late rank: one rank only"), "{summary}");
    assert!(summary.contains("prefill") && summary.contains("decode"), "{summary}");
}

#[test]
fn no_progress_is_drawn_when_stderr_is_not_a_terminal() {
    // The tests' standard error is a pipe: the loading spinner must leave no trace in it.
    let trace = repo_root().join("sample-traces/tp2_nsys.sqlite.gz");
    let output = analyzer(&["report", trace.to_str().unwrap()]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains('\u{1b}') && !stderr.contains("loading"), "{stderr:?}");
}
