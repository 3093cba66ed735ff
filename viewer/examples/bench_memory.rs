//! Cost of a GPU memory row per frame.
//!
//! ```text
//! cargo run --release -p shardscope-viewer --example bench_memory
//! cargo run --release -p shardscope-viewer --example bench_memory -- 50000000
//! ```
//!
//! Builds one CUDA-level series of N points (default 20 million: allocations and releases a microsecond apart,
//! the level wandering), then times what a frame asks of a memory row: the lowest and highest level of each of
//! 1,600 pixel columns, at fit all and zoomed in by factors of ten, and prints p50 / p95 over 40 frames. It also
//! prints how long building the series (sort and min/max pyramid) took.

use std::time::Instant;

use shardscope_analyzer::figures::memory::MemoryPoint;
use shardscope_viewer::memory::CounterSeries;

const COLUMNS: usize = 1600;
const FRAMES: usize = 40;

fn percentile(sorted_ms: &[f64], p: f64) -> f64 {
    let index = ((sorted_ms.len() as f64 - 1.0) * p).round() as usize;
    sorted_ms[index.min(sorted_ms.len() - 1)]
}

fn main() {
    let points: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000_000);
    // A deterministic walk of the level: xorshift steps of up to ±4 MiB, never below zero.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut level: u64 = 1 << 30;
    let series: Vec<MemoryPoint> = (0..points)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let step = (state % (8 << 20)) as i64 - (4 << 20);
            level = level.saturating_add_signed(step);
            MemoryPoint { time_ns: i as i64 * 1_000, bytes: level }
        })
        .collect();
    let started = Instant::now();
    let series = CounterSeries::new("CUDA", &series);
    println!("{points} points: built in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    let span_ns = points as f64 * 1_000.0;
    let end_ns = points as i64 * 1_000;
    println!("| zoom | points in view | p50 | p95 |");
    println!("| --- | --- | --- | --- |");
    for zoom in [1.0, 10.0, 100.0, 1_000.0, 10_000.0] {
        let window_ns = span_ns / zoom;
        let start_ns = (span_ns - window_ns) / 2.0;
        let mut times_ms: Vec<f64> = (0..FRAMES)
            .map(|_| {
                let started = Instant::now();
                let columns = series.columns(start_ns, window_ns / COLUMNS as f64, COLUMNS, end_ns);
                std::hint::black_box(columns);
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times_ms.sort_by(f64::total_cmp);
        println!(
            "| 1/{zoom} | {:.0} | {:.3} ms | {:.3} ms |",
            window_ns / 1_000.0,
            percentile(&times_ms, 0.5),
            percentile(&times_ms, 0.95)
        );
    }
}
