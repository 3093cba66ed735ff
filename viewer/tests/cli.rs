//! The `viewer` binary: `--screenshot` writes a PNG of the requested size without a display,
//! and bad input ends with one line on stderr and exit code 2.

use std::process::Command;

use shardscope_viewer::synthetic::{SyntheticSpec, generate_single};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-viewer-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn screenshot_writes_a_png_of_the_requested_size() {
    let dir = temp_dir("screenshot");
    let trace_path = dir.join("two_ranks.sqlite");
    let trace =
        generate_single(SyntheticSpec { ranks: 2, kernels_per_rank: 300, allreduce_every: 10, kernels_per_step: 100 });
    shardscope_io::nsys_writer::write(&trace, &trace_path).expect("writes the trace");
    let png = dir.join("out.png");
    let output = Command::new(env!("CARGO_BIN_EXE_viewer"))
        .args(["--screenshot", png.to_str().unwrap(), "--size", "900x500", trace_path.to_str().unwrap()])
        .output()
        .expect("runs viewer");
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    let image = image::open(&png).expect("a PNG").to_rgba8();
    // Size in points at 1 pixel per point.
    assert_eq!(image.dimensions(), (900, 500));
    // Not a blank frame: the timeline's event colours are there.
    let distinct: std::collections::HashSet<[u8; 4]> = image.pixels().map(|p| p.0).collect();
    assert!(distinct.len() > 20, "only {} colours", distinct.len());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_missing_trace_is_one_line_and_exit_code_2() {
    let dir = temp_dir("missing");
    let output = Command::new(env!("CARGO_BIN_EXE_viewer"))
        .args(["--screenshot", dir.join("out.png").to_str().unwrap(), "/nonexistent/trace.sqlite"])
        .output()
        .expect("runs viewer");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("viewer:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("/nonexistent/trace.sqlite"), "{stderr}");
    assert!(!dir.join("out.png").exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_rules_or_phase_pattern_are_one_line_and_exit_code_2() {
    let dir = temp_dir("options");
    let rules = dir.join("rules.toml");
    std::fs::write(&rules, "[[rule]]\ncategory = \"gemm\"\npattern = '('\n").unwrap();
    for args in [vec!["--rules", rules.to_str().unwrap()], vec!["--phase-pattern", "("]] {
        let output = Command::new(env!("CARGO_BIN_EXE_viewer"))
            .args(&args)
            .args(["--screenshot", dir.join("out.png").to_str().unwrap(), "trace.sqlite"])
            .output()
            .expect("runs viewer");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("viewer:")).collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(if args[0] == "--rules" { "rules.toml" } else { "--phase-pattern" }), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
