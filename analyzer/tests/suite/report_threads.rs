//! The whole `analyzer report` (findings included) prints the same bytes on one worker thread as on several: the
//! findings' replays, the late rank's per-rank replays and the report's ranks run on workers, and every one of
//! them collects its results in input order. Run through the binary, with `RAYON_NUM_THREADS` setting the pool.

use std::process::Command;

use crate::common::repo_root;

/// `report --format json` of `trace` on a pool of `threads` workers: its standard output.
fn report_on(threads: &str, trace: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["report", "--format", "json", trace])
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .expect("analyzer runs");
    assert!(output.status.success(), "{trace}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8 JSON")
}

#[test]
fn report_with_findings_is_the_same_on_one_thread_and_on_four() {
    let samples = ["tp1_nsys.sqlite.gz", "tp2_nsys.sqlite.gz", "tp2_capture.sqlite.gz", "tp2_skew_capture.sqlite.gz"];
    let mut with_findings = 0;
    for name in samples.iter().chain(["kineto_tp2"].iter()) {
        let path = repo_root().join("sample-traces").join(name);
        let path = path.to_str().expect("a UTF-8 path");
        let one = report_on("1", path);
        let four = report_on("4", path);
        assert!(one == four, "{name}: the report on 4 threads differs from 1 thread");
        let json: serde_json::Value = serde_json::from_str(&one).expect("JSON");
        // The findings must be part of what is compared, with a replayed type evaluated on the skewed sample.
        if json["findings"].is_object() {
            with_findings += 1;
        }
        if *name == "tp2_skew_capture.sqlite.gz" {
            let quiet = json["findings"]["quiet"].as_array().expect("quiet types");
            let fired = json["findings"]["findings"].as_array().expect("fired types");
            let late_rank = |list: &Vec<serde_json::Value>| list.iter().any(|f| f["kind"] == "late_rank");
            assert!(late_rank(fired) || late_rank(quiet), "{name}: the late rank is evaluated");
        }
    }
    assert!(with_findings >= 4, "findings on {with_findings} samples");
}
