//! The findings JSON of every sample, byte for byte, against committed copies: a change that should only make the
//! findings faster (a model shared among replays, replays in parallel) must not change a byte of them.
//!
//! After an intended change of the findings: `UPDATE_SNAPSHOTS=1 cargo test -p shardscope-analyzer --test suite
//! findings::snapshots::` rewrites `analyzer/tests/snapshots/findings/*.json` (read the diff before committing).

use crate::common::{analyzer, repo_root};

/// (snapshot name, sample under `sample-traces/`).
const SAMPLES: [(&str, &str); 10] = [
    ("tp2_nsys", "tp2_nsys.sqlite.gz"),
    ("tp2_capture", "tp2_capture.sqlite.gz"),
    ("tp2_skew_capture", "tp2_skew_capture.sqlite.gz"),
    ("tp2_full_capture", "tp2_full_capture.sqlite.gz"),
    ("tp1_nsys", "tp1_nsys.sqlite.gz"),
    ("kineto_tp2", "kineto_tp2"),
    ("kineto_pageable_copies", "findings/kineto_pageable_copies.json.gz"),
    ("kineto_memory_full", "findings/kineto_memory_full.json.gz"),
    ("pp_imbalanced", "pipeline/pp_imbalanced.sqlite.gz"),
    ("pp_balanced", "pipeline/pp_balanced.sqlite.gz"),
];

#[test]
fn the_samples_give_the_committed_findings() {
    let snapshots = repo_root().join("analyzer/tests/snapshots/findings");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| !v.is_empty() && v != "0");
    for (name, sample) in SAMPLES {
        let trace = repo_root().join("sample-traces").join(sample);
        let output = analyzer(&["findings", "--format", "json", trace.to_str().unwrap()]);
        assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let path = snapshots.join(format!("{name}.json"));
        if update {
            std::fs::create_dir_all(&snapshots).unwrap();
            std::fs::write(&path, &output.stdout).unwrap();
            continue;
        }
        let committed =
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
        assert!(
            committed == output.stdout,
            "{name}: the findings differ from {}:\n{}",
            path.display(),
            String::from_utf8_lossy(&output.stdout)
        );
    }
}
