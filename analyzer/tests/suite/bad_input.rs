//! Every class of bad input gives one line naming the file and the cause, exit code 2, and no panic.

use crate::common;

use std::io::Write;
use std::path::PathBuf;

use common::{analyzer, assert_one_line_error, repo_root};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn unpacked_sample() -> Vec<u8> {
    let gz = std::fs::read(repo_root().join("sample-traces/tp1_nsys.sqlite.gz")).unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
    bytes
}

fn check(path: &std::path::Path, cause_fragment: &str) {
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
    let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
    assert!(stderr.contains(cause_fragment), "cause '{cause_fragment}' not in: {stderr}");
}

#[test]
fn missing_file() {
    check(&scratch("does-not-exist.sqlite"), "no such file");
}

#[test]
fn empty_file() {
    let path = scratch("empty.json");
    std::fs::write(&path, b"").unwrap();
    check(&path, "empty");
}

#[test]
fn not_a_trace() {
    let path = scratch("picture.sqlite");
    std::fs::write(&path, b"\x89PNG\r\n\x1a\n not a trace").unwrap();
    check(&path, "not a trace");
}

#[test]
fn truncated_sqlite() {
    let path = scratch("truncated.sqlite");
    std::fs::write(&path, &unpacked_sample()[..8192]).unwrap();
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn corrupt_sqlite_pages() {
    let path = scratch("corrupt.sqlite");
    let mut bytes = unpacked_sample();
    for byte in bytes.iter_mut().skip(4096).step_by(7) {
        *byte ^= 0x5a;
    }
    std::fs::write(&path, bytes).unwrap();
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn unknown_schema_version() {
    let path = scratch("future.sqlite");
    std::fs::write(&path, unpacked_sample()).unwrap();
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute("UPDATE META_DATA_EXPORT SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'", []).unwrap();
    drop(db);
    check(&path, "9.0.0");
}

#[test]
fn truncated_json() {
    let path = scratch("truncated.json");
    std::fs::write(&path, br#"{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1"#)
        .unwrap();
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn truncated_gzip() {
    let path = scratch("truncated.json.gz");
    let gz = std::fs::read(repo_root().join("sample-traces/kineto_tp2/rank0.pt.trace.json.gz")).unwrap();
    std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn json_that_is_not_a_chrome_trace() {
    let path = scratch("other.json");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(br#"{"hello": "world"}"#).unwrap();
    let output = analyzer(&["report", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn bad_rules_file() {
    let path = scratch("rules.toml");
    std::fs::write(&path, "[[rule]]\ncategory = \"gemm\"\npattern = '(unclosed'\n").unwrap();
    let output = analyzer(&["report", "--rules", path.to_str().unwrap()]);
    assert_one_line_error(&output, path.to_str().unwrap());
}

#[test]
fn bad_phase_pattern() {
    let output = analyzer(&["report", "--phase-pattern", "(prefill"]);
    assert_one_line_error(&output, "--phase-pattern");
}

#[test]
fn one_bad_file_among_good_ones_fails_the_run() {
    let good = repo_root().join("sample-traces/tp1_nsys.sqlite.gz");
    let bad = scratch("bad-among-good.json");
    std::fs::write(&bad, b"{ nope").unwrap();
    let output = analyzer(&["report", good.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_one_line_error(&output, bad.to_str().unwrap());
}
