//! Writes traces to one Perfetto file and prints what went in, for trying the exporter and for
//! measuring output size and speed on large traces.
//!
//! ```text
//! cargo run --release --example export_perfetto -- OUT.pftrace TRACE...
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let (Some(output), inputs) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: export_perfetto OUT.pftrace TRACE...");
        return ExitCode::from(2);
    };
    if inputs.is_empty() {
        eprintln!("usage: export_perfetto OUT.pftrace TRACE...");
        return ExitCode::from(2);
    }
    let started = Instant::now();
    match shardscope::perfetto::export_file(&inputs, &output) {
        Ok(stats) => {
            let slices = stats.kernel_slices + stats.memop_slices + stats.api_slices + stats.range_slices;
            println!(
                "{}: {} bytes in {:.2} s (reading included); {} kernels, {} copies/sets, {} API calls, {} ranges; \
                 {:.1} bytes per kernel, {:.1} bytes per slice; {} overlap rows",
                output.display(),
                stats.bytes,
                started.elapsed().as_secs_f64(),
                stats.kernel_slices,
                stats.memop_slices,
                stats.api_slices,
                stats.range_slices,
                stats.bytes as f64 / stats.kernel_slices.max(1) as f64,
                stats.bytes as f64 / slices.max(1) as f64,
                stats.overlap_rows,
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(2)
        }
    }
}
