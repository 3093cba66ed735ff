//! Frame and load benchmark of the viewer.
//!
//! ```text
//! cargo run --release -p shardscope-viewer --example bench_frame
//! cargo run --release -p shardscope-viewer --example bench_frame -- --sqlite big.sqlite --skip-10m
//! ```
//!
//! 1. Open: writes (in a child process, so its memory does not count) a synthetic 8-rank
//!    nsys-schema SQLite file of about one million events with `shardscope_io::nsys_writer`,
//!    unless `--sqlite FILE` names one, then times `load::load_paths` on it (read, track
//!    layout, collective index: everything before the first frame) and reports the process's
//!    peak resident memory against the file size.
//! 2. Frames: for 1M and 10M kernels over 8 ranks (in memory, plus one launch call per
//!    kernel), runs the whole app for one 1600×1000 frame at several zoom levels and reports
//!    p50 / p95 of (a) `prepare_frame` alone (culling and level of detail) and (b) a full
//!    frame: every panel's ui code, painting and tessellation into triangles. It also times a
//!    regex search and the range statistics (the analyzer) once per size.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use egui::{Pos2, RawInput, Rect, vec2};
use shardscope_viewer::app::ViewerApp;
use shardscope_viewer::load::{load_paths, prepare};
use shardscope_viewer::synthetic::{SyntheticSpec, generate, generate_single};
use shardscope_viewer::timeline::prepare_frame;

const RANKS: u32 = 8;
const FRAMES: usize = 40;
const WARMUP_FRAMES: usize = 5;
const WINDOW: (f32, f32) = (1600.0, 1000.0);

fn spec(kernels_per_rank: usize) -> SyntheticSpec {
    SyntheticSpec { ranks: RANKS, kernels_per_rank, allreduce_every: 10, kernels_per_step: 1000 }
}

/// A `VmHWM`/`VmRSS` line of /proc/self/status, in bytes.
fn proc_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn percentile(sorted_ms: &[f64], p: f64) -> f64 {
    let index = ((sorted_ms.len() as f64 - 1.0) * p).round() as usize;
    sorted_ms[index.min(sorted_ms.len() - 1)]
}

fn write_sqlite(path: &Path) -> Result<(), String> {
    // 8 ranks × 62,500 kernels and as many launch calls ≈ one million events.
    let trace = generate_single(spec(62_500));
    shardscope_io::nsys_writer::write(&trace, path).map_err(|e| format!("{e:#}"))
}

fn bench_open(path: &Path) -> Result<(), String> {
    let file_bytes = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    let rss_before = proc_status_bytes("VmRSS:").unwrap_or(0);
    let started = Instant::now();
    let loaded = load_paths(&[path.to_path_buf()], |_, _| {}).map_err(|e| e.join("; "))?;
    let open_s = started.elapsed().as_secs_f64();
    let peak = proc_status_bytes("VmHWM:").unwrap_or(0);
    println!("open {}", path.display());
    println!(
        "  events {}  file {:.1} MB  open (read + layout + collective index) {:.3} s",
        loaded.data.event_count,
        file_bytes as f64 / 1e6,
        open_s
    );
    println!(
        "  peak RSS {:.1} MB (before load {:.1} MB) = {:.2} × file size",
        peak as f64 / 1e6,
        rss_before as f64 / 1e6,
        peak as f64 / file_bytes as f64
    );
    drop(loaded);
    // Three more timed opens (peak memory is only meaningful for the first), split into the
    // reader's part and the viewer's (track layout and collective index).
    let mut times = vec![open_s];
    let mut read_times = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let traces = shardscope_io::load(path).map_err(|e| format!("{e:#}"))?;
        let read_s = started.elapsed().as_secs_f64();
        let loaded = prepare(traces, Vec::new(), started);
        times.push(started.elapsed().as_secs_f64());
        read_times.push(read_s);
        drop(loaded);
    }
    times.sort_by(f64::total_cmp);
    read_times.sort_by(f64::total_cmp);
    println!(
        "  open times over 4 runs: min {:.3} s, median {:.3} s, max {:.3} s (of which the reader: median {:.3} s)",
        times[0],
        (times[1] + times[2]) / 2.0,
        times[3],
        read_times[1]
    );
    Ok(())
}

fn raw_input() -> RawInput {
    RawInput { screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(WINDOW.0, WINDOW.1))), ..RawInput::default() }
}

fn bench_frames(label: &str, kernels_per_rank: usize) {
    let started = Instant::now();
    let traces = generate(spec(kernels_per_rank));
    let loaded = prepare(traces, Vec::new(), Instant::now());
    let kernels: usize = loaded.data.traces.iter().map(|t| t.kernels.len()).sum();
    println!(
        "\n{label}: {kernels} kernels, {} events in {} tracks over {RANKS} ranks (generated and laid out in {:.1} s)",
        loaded.data.event_count,
        loaded.data.tracks.len(),
        started.elapsed().as_secs_f64()
    );
    // Things that run once per user action rather than per frame, for scale.
    let started = Instant::now();
    let regex = regex::Regex::new("AllReduce").expect("valid regex");
    let matches = shardscope_viewer::panels::search::find_matches(&loaded.data, &regex);
    println!(
        "  search /AllReduce/: {} matches in {:.1} ms (on Enter, UI thread)",
        matches.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let (t0, t1) = (loaded.data.t0_ns, loaded.data.t1_ns);
    for (what, window) in
        [("whole trace", None), ("middle 1 %", Some((t0 + (t1 - t0) / 2, t0 + (t1 - t0) / 2 + (t1 - t0) / 100)))]
    {
        let started = Instant::now();
        let figures = shardscope_viewer::analysis::analyze_window(&loaded.data.traces, &loaded.data.categories, window);
        println!(
            "  range statistics, {what}: {} ranks in {:.1} ms (background thread)",
            figures.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let mut app = ViewerApp::with_loaded(loaded);
    let ctx = egui::Context::default();
    // One frame to lay out panels and learn the plot size.
    let _ = ctx.run_ui(raw_input(), |ui| app.show(ui));
    let (t0, t1) = {
        let data = &app.session.as_ref().expect("loaded").data;
        (data.t0_ns, data.t1_ns)
    };
    println!(
        "  {:>14} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "window", "items", "prepare p50", "prepare p95", "frame p50", "frame p95"
    );
    for zoom in [1.0, 0.1, 0.01, 0.001, 0.0001] {
        let span = ((t1 - t0) as f64 * zoom) as i64;
        let centre = t0 + ((t1 - t0) as f64 * 0.4) as i64;
        let mut prepare_ms = Vec::new();
        let mut frame_ms = Vec::new();
        let mut items = 0;
        for frame in 0..WARMUP_FRAMES + FRAMES {
            // Move a little every frame so nothing can be reused from the last one.
            let start = centre - span / 2 + (frame as i64) * span / 1000;
            {
                let session = app.session.as_mut().expect("loaded");
                session.view.fit(start, start + span);
            }
            let prepare_elapsed = {
                let session = app.session.as_ref().expect("loaded");
                let plot_size = session.view.last_plot_rect.size();
                let started = Instant::now();
                let plan = prepare_frame(&session.data, &session.view, plot_size);
                items = plan.items.len();
                started.elapsed()
            };
            let started = Instant::now();
            let output = ctx.run_ui(raw_input(), |ui| app.show(ui));
            let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
            std::hint::black_box(primitives);
            let frame_elapsed = started.elapsed();
            if frame >= WARMUP_FRAMES {
                prepare_ms.push(prepare_elapsed.as_secs_f64() * 1e3);
                frame_ms.push(frame_elapsed.as_secs_f64() * 1e3);
            }
        }
        prepare_ms.sort_by(f64::total_cmp);
        frame_ms.sort_by(f64::total_cmp);
        println!(
            "  {:>14} {:>9} {:>9.3} ms {:>9.3} ms {:>9.3} ms {:>9.3} ms",
            shardscope_viewer::timeline::paint::format_duration(span as f64),
            items,
            percentile(&prepare_ms, 0.5),
            percentile(&prepare_ms, 0.95),
            percentile(&frame_ms, 0.5),
            percentile(&frame_ms, 0.95)
        );
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice()
        && flag == "--write-sqlite"
    {
        return match write_sqlite(Path::new(path)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench_frame: {e}");
                ExitCode::from(2)
            }
        };
    }
    let sqlite = args.iter().position(|a| a == "--sqlite").and_then(|i| args.get(i + 1)).map(PathBuf::from);
    let skip_10m = args.iter().any(|a| a == "--skip-10m");
    let path = match sqlite {
        Some(path) => path,
        None => {
            let path = std::env::temp_dir().join("shardscope-bench-1m-events.sqlite");
            if !path.exists() {
                let started = Instant::now();
                let status = std::process::Command::new(std::env::current_exe().expect("own path"))
                    .arg("--write-sqlite")
                    .arg(&path)
                    .status();
                if !status.is_ok_and(|s| s.success()) {
                    eprintln!("bench_frame: could not write {}", path.display());
                    return ExitCode::from(2);
                }
                println!("wrote {} in {:.1} s", path.display(), started.elapsed().as_secs_f64());
            }
            path
        }
    };
    if let Err(e) = bench_open(&path) {
        eprintln!("bench_frame: {e}");
        return ExitCode::from(2);
    }
    bench_frames("1M", 125_000);
    if !skip_10m {
        bench_frames("10M", 1_250_000);
    }
    ExitCode::SUCCESS
}
