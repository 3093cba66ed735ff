//! Helpers shared by the analyzer's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("analyzer/ has a parent").to_path_buf()
}

/// `../shared/traces` beside the checkout (CI has it; a user's clone does not). A test that calls this carries
/// `#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]`: the build script sets that cfg, and the
/// path, when it finds the folder, so without it `cargo test` lists the test as ignored rather than passed.
pub fn shared_traces() -> PathBuf {
    match option_env!("SHARDSCOPE_SHARED_TRACES") {
        Some(dir) => PathBuf::from(dir),
        None => panic!("../shared/traces was not there when this test was built (see analyzer/build.rs)"),
    }
}

/// Runs the `analyzer` binary.
pub fn analyzer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().expect("analyzer runs")
}

/// Asserts a failed run: exit code 2, one error line on stderr naming `needle`, no panic. Warnings about inputs
/// read before the error (`analyzer: warning: …`, such as a capture file's own) are not the error's lines.
pub fn assert_one_line_error(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "exit code; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let errors = stderr.trim_end().lines().filter(|l| !l.starts_with("analyzer: warning: ")).count();
    assert_eq!(errors, 1, "one line expected: {stderr}");
    assert!(stderr.contains(needle), "stderr should name {needle}: {stderr}");
    assert!(output.stdout.is_empty(), "nothing on stdout on error");
}

/// Decoded 8-bit RGB pixels of a PNG the analyzer drew, and its size.
pub fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut pixels).expect("a frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}
