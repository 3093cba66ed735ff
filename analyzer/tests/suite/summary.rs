//! The summary that opens `analyzer report`'s table: at most 100 columns, before the details, with the report's
//! own figures and the late-rank verdict.

use crate::common;

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
    let whole = stdout(&["report"]);
    // The findings come first (tests/suite/findings.rs), the summary right after them.
    assert!(whole.starts_with("findings for "), "{whole}");
    let table = &whole[whole.find("\nsummary: ").expect("a summary after the findings") + 1..];
    assert!(table.starts_with("summary: 2 rank(s)"), "{table}");
    let summary = summary_of(table);
    assert!(summary.len() < 25, "one screen: {} lines", summary.len());
    for line in &summary {
        assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
    }
    assert!(table.contains("\nshardscope report:"), "the details follow");

    let report: Value = serde_json::from_str(&stdout(&["report", "--format", "json"])).unwrap();
    let matched = report["collectives"]["matched_instances"].as_u64().unwrap();
    let late = &report["collectives"]["late_ranks"][0];
    let text = summary.join("\n").replace("\n  ", " ");
    let named =
        format!("late rank: rank {}: the {} of {matched} matched collectives", late["rank"], late["arrived_last"]);
    assert!(text.contains(&named), "{text}");
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

/// The report's JSON and its summary's verdict (lines joined) for a sample trace.
fn verdict_and_json(sample: &str) -> (String, Value) {
    let trace = repo_root().join("sample-traces").join(sample);
    let table = stdout(&["report", trace.to_str().unwrap()]);
    let summary = summary_of(&table).join("\n").replace("\n  ", " ");
    let verdict = summary.lines().find(|l| l.starts_with("late rank:")).expect("a verdict").to_string();
    let report: Value =
        serde_json::from_str(&stdout(&["report", "--format", "json", trace.to_str().unwrap()])).unwrap();
    (verdict, report)
}

/// The late rank is the one whose late arrivals cost the others the most waiting, whatever the counts say: of two
/// ranks, the waiting one rank caused is exactly the other's waiting at matched collectives.
#[test]
fn the_late_rank_is_the_one_whose_lateness_caused_the_most_waiting() {
    // (sample, the rank whose lateness costs most, whether that rank is also the one most often last)
    for (sample, expected, also_most_often_last) in
        [("tp2_full_capture.sqlite.gz", 1, false), ("tp2_skew_capture.sqlite.gz", 1, true)]
    {
        let (verdict, report) = verdict_and_json(sample);
        let ranks = report["ranks"].as_array().unwrap();
        let late_ranks = report["collectives"]["late_ranks"].as_array().unwrap();
        assert_eq!(late_ranks.len(), 2, "{sample}: both ranks were last at times");
        for entry in late_ranks {
            let rank = entry["rank"].as_u64().unwrap() as usize;
            let other = &ranks[1 - rank];
            assert_eq!(entry["caused_wait_ns"], other["comm_wait_ns"], "{sample}: rank {rank} caused the other's wait");
            assert_eq!(entry["arrived_last"], ranks[rank]["late_count"], "{sample}");
        }
        assert_eq!(late_ranks[0]["rank"], expected, "{sample}: {late_ranks:?}");
        assert!(late_ranks[0]["caused_wait_ns"].as_i64() > late_ranks[1]["caused_wait_ns"].as_i64());
        let most_often = late_ranks.iter().max_by_key(|l| l["arrived_last"].as_u64()).unwrap()["rank"].as_u64();
        assert_eq!(most_often == Some(expected), also_most_often_last, "{sample}: {late_ranks:?}");
        assert!(verdict.starts_with(&format!("late rank: rank {expected}: the ")), "{sample}: {verdict}");
        // The counts stand beside the waiting, for both ranks.
        for entry in late_ranks {
            assert!(verdict.contains(&entry["arrived_last"].to_string()), "{sample}: {verdict}");
        }
    }
    // The figures of the full capture as measured: 402 arrivals cost 571.87 ms, 1711 cost 456.14 ms.
    let (verdict, _) = verdict_and_json("tp2_full_capture.sqlite.gz");
    assert!(verdict.contains("the 402 of 2113 matched collectives it arrived at last cost the others 571.87 ms"));
    assert!(verdict.contains("rank 0: last at 1711, 456.14 ms"), "{verdict}");
}

#[test]
fn the_html_page_carries_the_verdict() {
    let trace = repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    stdout(&["report", "--html", page.to_str().unwrap(), trace.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    let (verdict, _) = verdict_and_json("tp2_skew_capture.sqlite.gz");
    let block = html.split("<section class=\"verdict\" id=\"late-rank\">").nth(1).expect("a verdict block");
    let paragraph = block.split("<p>").nth(1).unwrap().split("</p>").next().unwrap();
    assert_eq!(paragraph, verdict);
}
