//! Times the Kineto reader: `cargo run --release -p shardscope-io --example bench_kineto_read -- [--runs K] FILE...`
//!
//! For each file, reads it K times (default 7) and prints the median wall time, the mean CPU time
//! per read of all threads (less inflated than wall time by other load on the machine), kernels/s and events/s (kernels +
//! copies + API calls + ranges) at the median, the counts, and the process's peak resident memory
//! at the end (Linux `VmHWM`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() {
    let mut runs = 7usize;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--runs" {
            runs = args.next().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or_else(|| usage());
        } else {
            files.push(PathBuf::from(arg));
        }
    }
    if files.is_empty() {
        usage();
    }
    for file in &files {
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        let mut last = None;
        let cpu_before = cpu_time_ns();
        for _ in 0..runs {
            let started = Instant::now();
            let traces = match shardscope_io::load(file) {
                Ok(traces) => traces,
                Err(e) => {
                    eprintln!("{e:#}");
                    std::process::exit(2);
                }
            };
            times.push(started.elapsed());
            last = Some(traces);
        }
        let cpu_per_read_ms = match (cpu_before, cpu_time_ns()) {
            (Some(before), Some(after)) => format!("{:.1} ms", (after - before) as f64 / runs as f64 / 1e6),
            _ => "n/a".to_owned(),
        };
        times.sort();
        let median = times[times.len() / 2].as_secs_f64();
        let traces = last.unwrap_or_default();
        let kernels: usize = traces.iter().map(|t| t.kernels.len()).sum();
        let events: usize =
            traces.iter().map(|t| t.kernels.len() + t.memops.len() + t.api_calls.len() + t.ranges.len()).sum();
        let collectives: usize = traces.iter().map(|t| t.collectives.len()).sum();
        println!(
            "{}: {} trace(s), median of {runs}: {:.1} ms (min {:.1} ms), CPU {cpu_per_read_ms}/read, \
             {:.0} kernels/s, {:.0} events/s [{kernels} kernels, {events} events, {collectives} collectives]",
            file.display(),
            traces.len(),
            median * 1e3,
            times[0].as_secs_f64() * 1e3,
            kernels as f64 / median,
            events as f64 / median,
        );
    }
    if let Some(peak) = peak_resident_kib() {
        println!("peak resident memory: {:.1} MiB", peak as f64 / 1024.0);
    }
}

fn usage() -> ! {
    eprintln!("usage: bench_kineto_read [--runs K] FILE_OR_FOLDER...");
    std::process::exit(2);
}

/// CPU time (user + system) of the whole process, all threads, ns: fields 14 and 15 of
/// `/proc/self/stat`, in clock ticks of 10 ms (Linux's `USER_HZ` of 100); `None` off Linux.
fn cpu_time_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// The process's peak resident set (`VmHWM` in /proc/self/status), KiB; `None` off Linux.
fn peak_resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
