//! `analyzer export`: every rank of a run into one Perfetto file; unreadable input is a one-line error.

use crate::common;

use common::{analyzer, assert_one_line_error, repo_root};

#[test]
fn exports_a_two_rank_capture_to_perfetto() {
    let input = repo_root().join("sample-traces/tp2_capture.sqlite.gz");
    let output = std::env::temp_dir().join(format!("shardscope-export-{}.pftrace", std::process::id()));
    let run = analyzer(&["export", "-o", output.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stderr = String::from_utf8_lossy(&run.stderr);
    // The capture holds 1184 kernels (592 per GPU), all with their launch call.
    // Said in a sentence, not as a Rust structure.
    assert!(stderr.contains(" 1184 kernel, ") && stderr.contains("1184 kernels linked to their launch"), "{stderr}");
    assert!(!stderr.contains('{') && !stderr.contains("Stats"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let bytes = std::fs::read(&output).unwrap();
    // A Perfetto trace is a sequence of `Trace.packet` fields (tag 0x0a).
    assert_eq!(bytes.first(), Some(&0x0a));
    let _ = std::fs::remove_file(&output);
}

#[test]
fn unreadable_input_is_one_line() {
    let missing = std::env::temp_dir().join("shardscope-no-such-trace.sqlite");
    let output = std::env::temp_dir().join(format!("shardscope-export-bad-{}.pftrace", std::process::id()));
    let run = analyzer(&["export", "-o", output.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_one_line_error(&run, missing.to_str().unwrap());
}
