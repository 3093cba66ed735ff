//! Reads an nsys SQLite file K times and prints the median read speed in kernel rows per second.
//!
//! ```text
//! cargo run --release -p shardscope-io --example bench_nsys_read -- big.sqlite --repeat 5
//! ```
//!
//! The time covers the whole `nsys::read` (every table, interning, sorting and launch linking
//! in `Trace::finish`), so "kernel rows/s" understates the raw scan speed. The first read also
//! warms the page cache; the median of several hides that.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut path = None;
    let mut repeat = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-k" | "--repeat" => match args.next().and_then(|v| v.parse().ok()) {
                Some(k) if k > 0 => repeat = k,
                _ => {
                    eprintln!("bench_nsys_read: --repeat needs a positive number");
                    return ExitCode::from(2);
                }
            },
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            other => {
                eprintln!("bench_nsys_read: unexpected argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: bench_nsys_read FILE.sqlite [--repeat K]");
        return ExitCode::from(2);
    };

    let mut seconds = Vec::with_capacity(repeat);
    let mut counts = (0, 0, 0, 0);
    for run in 1..=repeat {
        let started = Instant::now();
        let trace = match shardscope_io::nsys::read(&path) {
            Ok(trace) => trace,
            Err(e) => {
                eprintln!("bench_nsys_read: {e}");
                return ExitCode::from(2);
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        counts = (trace.kernels.len(), trace.memops.len(), trace.api_calls.len(), trace.ranges.len());
        println!("run {run}: {elapsed:.3} s, {:.2} M kernel rows/s", counts.0 as f64 / elapsed / 1e6);
        seconds.push(elapsed);
    }
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    let (kernels, memops, api_calls, ranges) = counts;
    let all_rows = kernels + memops + api_calls + ranges;
    println!(
        "{}: {kernels} kernels, {memops} memops, {api_calls} API calls, {ranges} ranges; median of {repeat}: \
         {median:.3} s = {:.2} M kernel rows/s ({:.2} M rows/s over all four tables)",
        path.display(),
        kernels as f64 / median / 1e6,
        all_rows as f64 / median / 1e6,
    );
    ExitCode::SUCCESS
}
