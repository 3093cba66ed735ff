//! The `viewer` binary: `--screenshot` writes a PNG of the requested size without a display,
//! and bad input ends with one line on stderr and exit code 2.

use std::process::Command;

use shardscope_viewer::synthetic::{SyntheticSpec, generate_single};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-viewer-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A small one-rank synthetic trace written to `dir/one_rank.sqlite`; its path.
fn one_rank_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("one_rank.sqlite");
    let trace =
        generate_single(SyntheticSpec { ranks: 1, kernels_per_rank: 50, allreduce_every: 10, kernels_per_step: 10 });
    shardscope_io::nsys_writer::write(&trace, &path).expect("writes the trace");
    path
}

/// `viewer --screenshot OUT ARGS…`, run to its end.
fn viewer(out: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_viewer"))
        .args(["--screenshot", out.to_str().unwrap()])
        .args(args)
        .output()
        .expect("runs viewer")
}

#[test]
fn screenshot_writes_a_png_of_the_requested_size() {
    let dir = temp_dir("screenshot");
    let trace_path = dir.join("two_ranks.sqlite");
    let trace =
        generate_single(SyntheticSpec { ranks: 2, kernels_per_rank: 300, allreduce_every: 10, kernels_per_step: 100 });
    shardscope_io::nsys_writer::write(&trace, &trace_path).expect("writes the trace");
    let png = dir.join("out.png");
    let output = viewer(&png, &["--size", "900x500", trace_path.to_str().unwrap()]);
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
    let output = viewer(&dir.join("out.png"), &["/nonexistent/trace.sqlite"]);
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

fn sample(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces").join(name).to_str().unwrap().to_string()
}

/// Runs `viewer --screenshot OUT ARGS…` and returns its image, or panics with its stderr.
fn screenshot(out: &std::path::Path, args: &[&str]) -> image::RgbaImage {
    let output = viewer(out, args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    image::open(out).expect("a PNG").to_rgba8()
}

fn pixels_of(image: &image::RgbaImage, rgb: [u8; 3]) -> usize {
    image.pixels().filter(|p| p.0[..3] == rgb).count()
}

#[test]
fn window_tab_and_size_change_what_the_screenshot_shows() {
    let dir = temp_dir("options-picture");
    let trace = sample("tp2_capture.sqlite.gz");
    let out = dir.join("out.png");
    let default = screenshot(&out, &["--size", "1000x600", &trace]);
    assert_eq!(default.dimensions(), (1000, 600));
    // A 1 ms window inside the decode steps, the summary page, a smaller size: each a different picture.
    let window = screenshot(&out, &["--size", "1000x600", "--window", "9700000000:9701000000", &trace]);
    assert_ne!(window, default);
    let summary = screenshot(&out, &["--size", "1000x600", "--tab", "summary", &trace]);
    assert_ne!(summary, default);
    let range = screenshot(&out, &["--size", "1000x600", "--tab", "range", &trace]);
    assert_ne!(range, default);
    assert_ne!(range, summary);
    assert_eq!(screenshot(&out, &["--size", "640x480", "--tab", "details", &trace]).dimensions(), (640, 480));
    std::fs::remove_dir_all(&dir).ok();
}

/// The path is drawn in its own magenta; `--critical-path` takes a step (counted after the sample's 9 detected
/// warm-up steps), or no value before the trace.
#[test]
fn critical_path_is_drawn_in_screenshots() {
    let dir = temp_dir("critical-path");
    let trace = sample("tp2_skew_capture.sqlite.gz");
    let out = dir.join("out.png");
    let magenta = [0xff, 0x3d, 0xf5];
    let without = screenshot(&out, &["--size", "1200x700", "--window", "7000000000:7010000000", &trace]);
    assert_eq!(pixels_of(&without, magenta), 0);
    let step = screenshot(&out, &["--size", "1200x700", "--critical-path", "1", &trace]);
    assert!(pixels_of(&step, magenta) > 200, "{} path pixels", pixels_of(&step, magenta));
    // No step: the value is the trace, and the path is of the window.
    let window =
        screenshot(&out, &["--size", "1200x700", "--window", "7000000000:7010000000", "--critical-path", &trace]);
    assert!(pixels_of(&window, magenta) > 200, "{} path pixels", pixels_of(&window, magenta));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_step_that_is_not_there_or_a_bad_window_is_one_line_and_exit_code_2() {
    let dir = temp_dir("bad-step");
    let trace = sample("tp2_skew_capture.sqlite.gz");
    let out = dir.join("out.png");
    let output = viewer(&out, &["--critical-path", "999", &trace]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("viewer:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("tp2_skew_capture") && lines[0].contains("999"), "{stderr}");
    assert!(!out.exists());
    for window in ["9:5", "12", "a:b"] {
        let output = viewer(&out, &["--window", window, &trace]);
        assert_eq!(output.status.code(), Some(2), "--window {window}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("--window"), "--window {window}");
        assert!(!out.exists());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--ideal` adds the replay rows (labelled in their own green) and the summary line; it takes a step, or no value
/// before the trace; a step that is not there is one line and exit code 2.
#[test]
fn ideal_replay_is_drawn_in_screenshots() {
    let dir = temp_dir("ideal");
    let trace = sample("tp2_skew_capture.sqlite.gz");
    let out = dir.join("out.png");
    let green = [0x9c, 0xe0, 0x9c];
    let without = screenshot(&out, &["--size", "1200x700", "--window", "7000000000:7010000000", &trace]);
    assert_eq!(pixels_of(&without, green), 0);
    let step = screenshot(&out, &["--size", "1200x700", "--ideal", "1", &trace]);
    assert!(pixels_of(&step, green) > 50, "{} label pixels", pixels_of(&step, green));
    let window = screenshot(&out, &["--size", "1200x700", "--window", "7000000000:7010000000", "--ideal", &trace]);
    assert!(pixels_of(&window, green) > 50, "{} label pixels", pixels_of(&window, green));
    let output = viewer(&out, &["--ideal", "999", &trace]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("viewer:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("ideal replay") && lines[0].contains("999"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_renderer_is_one_line_naming_the_cause_and_a_non_zero_exit() {
    let dir = temp_dir("no-renderer");
    let trace_path = one_rank_trace(&dir);
    let png = dir.join("out.png");
    // Linux has no Metal: no adapter at all. Without a session directory, Mesa's EGL would print its complaint
    // while probing; none of that reaches the terminal.
    let output = Command::new(env!("CARGO_BIN_EXE_viewer"))
        .env("WGPU_BACKEND", "metal")
        .env_remove("XDG_RUNTIME_DIR")
        .args(["--screenshot", png.to_str().unwrap(), trace_path.to_str().unwrap()])
        .output()
        .expect("runs viewer");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let expected = format!("viewer: {}: --screenshot: no GPU or software renderer", png.display());
    assert!(lines[0].starts_with(&expected), "{stderr}");
    assert!(!png.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_trace_that_fails_to_load_beside_one_that_loads_fails_the_screenshot() {
    let dir = temp_dir("one-missing");
    let trace_path = one_rank_trace(&dir);
    let missing = dir.join("rank1.sqlite");
    let png = dir.join("out.png");
    // Fails before drawing, so the same on a machine without a renderer.
    let output = viewer(&png, &[trace_path.to_str().unwrap(), missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("viewer: ") && lines[0].contains("rank1.sqlite"), "{stderr}");
    assert!(!png.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu")]
fn a_screenshot_without_a_session_directory_prints_nothing() {
    let dir = temp_dir("quiet");
    let trace_path = one_rank_trace(&dir);
    let png = dir.join("out.png");
    // Mesa's EGL complains of a missing XDG_RUNTIME_DIR on every probe: none of it reaches standard error.
    let output = Command::new(env!("CARGO_BIN_EXE_viewer"))
        .env_remove("XDG_RUNTIME_DIR")
        .args(["--screenshot", png.to_str().unwrap(), "--size", "400x300", trace_path.to_str().unwrap()])
        .output()
        .expect("runs viewer");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr.trim(), "", "nothing printed");
    assert_eq!(image::open(&png).expect("a PNG").to_rgba8().dimensions(), (400, 300));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_png_that_cannot_be_written_is_one_line_naming_it() {
    let dir = temp_dir("unwritable");
    let trace_path = one_rank_trace(&dir);
    let png = dir.join("no-such-folder/out.png");
    let output = viewer(&png, &["--size", "400x300", trace_path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Exit code 2 where the picture was drawn and could not be written; 1 where nothing could draw it.
    assert!(matches!(output.status.code(), Some(1 | 2)), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with(&format!("viewer: {}: ", png.display())), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
