//! Throughput of the analyzer's stages: import (SQLite or Kineto JSON) and the whole report.
//!
//! ```text
//! cargo bench -p shardscope-analyzer --bench report -- [--runs N] TRACE...
//! ```
//! For each trace (a file or a folder of ranks) it loads and analyses it N times (default 5) and prints the
//! median import time, the median analysis time and the median whole-report time, with kernels per second,
//! then the peak resident memory of this process (`VmHWM`). Use one trace per invocation to read a trace's
//! own peak memory.

use std::path::PathBuf;
use std::time::Instant;

use shardscope_analyzer::report::{Options, analyze};

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let mut runs = 5usize;
    let mut traces: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            // `cargo bench` passes --bench to every bench target.
            "--bench" => {}
            _ => traces.push(PathBuf::from(arg)),
        }
    }
    if traces.is_empty() {
        eprintln!("usage: cargo bench -p shardscope-analyzer --bench report -- [--runs N] TRACE...");
        std::process::exit(2);
    }
    let options = Options::default();
    println!(
        "trace,kernels,import_median_s,import_kernels_per_s,analyze_median_s,report_median_s,report_kernels_per_s"
    );
    for trace in &traces {
        let (mut import_s, mut analyze_s, mut total_s) = (Vec::new(), Vec::new(), Vec::new());
        let mut kernels = 0usize;
        for _ in 0..runs {
            let start = Instant::now();
            let loaded = match shardscope_io::load(trace) {
                Ok(loaded) => loaded,
                Err(error) => {
                    eprintln!("{error}");
                    std::process::exit(2);
                }
            };
            let imported = start.elapsed().as_secs_f64();
            let report = analyze(&loaded, &options);
            let total = start.elapsed().as_secs_f64();
            kernels = loaded.iter().map(|t| t.kernels.len()).sum();
            std::hint::black_box(&report);
            import_s.push(imported);
            analyze_s.push(total - imported);
            total_s.push(total);
        }
        let (import, analysis, total) = (median(&mut import_s), median(&mut analyze_s), median(&mut total_s));
        println!(
            "{},{kernels},{import:.4},{:.0},{analysis:.4},{total:.4},{:.0}",
            trace.display(),
            kernels as f64 / import,
            kernels as f64 / total
        );
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak_rss_mib,{mib:.1}");
    }
}
