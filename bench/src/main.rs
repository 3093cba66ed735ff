//! `bench`: measures this machine's copy bandwidth, NCCL collective bus bandwidth and bf16 GEMM throughput,
//! prints a table and writes the JSON that shardscope's analyzer compares traces against.
//!
//! One process drives all GPUs from one thread. Sections (copy, collectives, gemm) fail independently:
//! a failed section is reported on stderr and in the file's `errors`, the rest still runs, and the exit
//! status is 1. Without a usable driver or GPU the program prints one line and exits with status 2.
//! See `bench/README.md` for the JSON layout and how the libraries are found.

mod collectives;
mod copy;
mod gemm;
mod gpu;
mod libs;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, ValueEnum};
use cudarc::driver::{result as cu, sys};

use gpu::{Gpu, TimingPlan};
use shardscope_bench::results::{BenchResults, CollectiveResult, CopyResult, GemmResult, Peaks, SCHEMA_VERSION};

/// Measure copy, NVLink, NCCL and GEMM limits of this GPU machine.
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
struct Args {
    /// Write the results as JSON to this file.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Use the first N visible GPUs (default: all).
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Largest copy / collective message size, with an optional K, M or G (binary) suffix.
    #[arg(long, value_name = "SIZE", default_value = "2G", value_parser = parse_size)]
    max_bytes: usize,
    /// Untimed launches before each measurement.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Fewest timed launches per measurement (short operations get more, up to 1000, so that each
    /// measurement spans at least 20 ms).
    #[arg(long, default_value_t = 20)]
    iterations: u32,
    /// Sections to leave out.
    #[arg(long, value_enum, value_delimiter = ',')]
    skip: Vec<Section>,
}

/// The independently measured parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Device-to-device and peer-to-peer copies.
    Copy,
    /// NCCL all-reduce, all-gather, reduce-scatter.
    Collectives,
    /// cuBLAS bf16 GEMM.
    Gemm,
}

/// Parses `4096`, `64K`, `256M`, `2G` (powers of 1024).
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, multiplier) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&text[..text.len() - 1], 1usize << 10),
        Some('M') => (&text[..text.len() - 1], 1 << 20),
        Some('G') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    let value: usize = digits.parse().map_err(|_| format!("not a size: {text:?} (examples: 4096, 64K, 256M, 2G)"))?;
    value.checked_mul(multiplier).filter(|&bytes| bytes > 0).ok_or_else(|| format!("size out of range: {text:?}"))
}

/// Powers of two from `smallest` up to and including `largest` (or `largest` alone if it is smaller).
fn power_of_two_sizes(smallest: usize, largest: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut size = smallest;
    while size <= largest {
        sizes.push(size);
        size *= 2;
    }
    if sizes.is_empty() {
        sizes.push(largest);
    }
    sizes
}

/// `1 KiB`, `256 MiB`, `2 GiB`, or plain bytes when not a whole binary unit.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}

/// Host name from the kernel, or "unknown".
fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return "unknown".into();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// First line of a panic's message.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("panic");
    text.lines().next().unwrap_or(text).to_string()
}

/// Runs one section, turning errors and panics (the bindings panic on a missing symbol) into one line.
fn run_section<T>(name: &str, errors: &mut Vec<String>, body: impl FnOnce() -> Result<Vec<T>>) -> Vec<T> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    let message = match outcome {
        Ok(Ok(rows)) => return rows,
        Ok(Err(error)) => format!("{name}: {error:#}"),
        Err(payload) => format!("{name}: {}", panic_text(payload.as_ref())),
    };
    eprintln!("bench: {message}");
    errors.push(message);
    Vec::new()
}

fn print_line(line: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) must not stop the measurement or the JSON file.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn print_copy(row: &CopyResult) {
    print_line(format_args!(
        "{:<5} {:>3} {:>3} {:>10} {:>12.2} {:>10.1}",
        format!("{:?}", row.kind).to_lowercase(),
        row.src,
        row.dst,
        human_bytes(row.bytes),
        row.time_us,
        row.gbps
    ));
}

fn print_collective(row: &CollectiveResult) {
    print_line(format_args!(
        "{:<15} {:>6} {:>10} {:>12.2} {:>12.2} {:>12.2}",
        row.op.as_str(),
        row.nranks,
        human_bytes(row.bytes),
        row.time_us,
        row.algbw_gbps,
        row.busbw_gbps
    ));
}

fn print_gemm(row: &GemmResult) {
    print_line(format_args!(
        "{:>6} {:>6} {:>6} {:>5} {:>4} {:>12.2} {:>9.1}",
        row.m, row.n, row.k, row.dtype, row.gpu, row.time_us, row.tflops
    ));
}

fn print_peaks(peaks: &Peaks) {
    let show =
        |value: Option<f64>, unit: &str| value.map_or_else(|| "not measured".to_string(), |v| format!("{v:.1} {unit}"));
    print_line(format_args!("\n# peaks"));
    print_line(format_args!("d2d copy            {}", show(peaks.d2d_gbps, "GB/s")));
    print_line(format_args!("p2p copy            {}", show(peaks.p2p_gbps, "GB/s")));
    print_line(format_args!("all_reduce busbw    {}", show(peaks.all_reduce_busbw_gbps, "GB/s")));
    print_line(format_args!("all_gather busbw    {}", show(peaks.all_gather_busbw_gbps, "GB/s")));
    print_line(format_args!("reduce_scatter bw   {}", show(peaks.reduce_scatter_busbw_gbps, "GB/s")));
    print_line(format_args!("bf16 GEMM           {}", show(peaks.gemm_bf16_tflops, "TFLOP/s")));
}

/// Loads the driver, picks the GPUs and measures; `Err` only for problems that stop everything.
fn run(args: &Args) -> Result<BenchResults> {
    // SAFETY: probing only opens and closes the library.
    if !unsafe { sys::is_culib_present() } {
        bail!("no NVIDIA driver: libcuda.so could not be loaded (this program needs a machine with a GPU)");
    }
    libs::prepare_and_maybe_reexec()?;
    let started_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    cu::init().map_err(|error| anyhow!("the NVIDIA driver could not start: {error}"))?;
    let visible = cu::device::get_count().context("cuDeviceGetCount")? as u32;
    if visible == 0 {
        bail!("the NVIDIA driver sees no GPU");
    }
    let count = args.gpus.unwrap_or(visible);
    if count == 0 || count > visible {
        bail!("--gpus {count}: {visible} GPU(s) visible");
    }
    let mut driver_version = 0;
    // SAFETY: valid out-parameter.
    let cuda_driver_version =
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result().ok().map(|()| driver_version);
    let gpus = (0..count).map(Gpu::open).collect::<Result<Vec<_>>>()?;
    let infos = gpus.iter().map(Gpu::info).collect::<Result<Vec<_>>>()?;
    let mut errors = Vec::new();
    // SAFETY: probing only opens the library.
    let nccl_version =
        if unsafe { cudarc::nccl::sys::is_culib_present() } { collectives::nccl_version().ok() } else { None };

    print_line(format_args!("host {}  driver {:?}  NCCL {:?}", host_name(), cuda_driver_version, nccl_version));
    for info in &infos {
        print_line(format_args!(
            "GPU {}: {} ({} SMs, {} memory, {} L2, sm_{})",
            info.ordinal,
            info.name,
            info.sm_count,
            human_bytes(info.memory_bytes),
            info.l2_cache_bytes.map_or_else(|| "?".to_string(), human_bytes),
            info.compute_capability.replace('.', "")
        ));
    }
    let plan = TimingPlan {
        warmup: args.warmup,
        min_iterations: args.iterations.max(1),
        max_iterations: 1000,
        min_total_ms: 20.0,
    };

    let copy_rows = if args.skip.contains(&Section::Copy) {
        Vec::new()
    } else {
        print_line(format_args!("\n# copy (GB/s = 1e9 bytes/s, bytes counted once)"));
        print_line(format_args!(
            "{:<5} {:>3} {:>3} {:>10} {:>12} {:>10}",
            "kind", "src", "dst", "size", "time_us", "gbps"
        ));
        run_section("copy", &mut errors, || {
            let unreachable = copy::enable_peer_access(&gpus)?;
            let rows =
                copy::measure(&gpus, &power_of_two_sizes(1 << 20, args.max_bytes), plan, &unreachable, print_copy)?;
            for (from, to) in unreachable {
                eprintln!("bench: GPU {from} cannot access GPU {to} directly; p2p copies between them not measured");
            }
            Ok(rows)
        })
    };

    let collective_rows = if args.skip.contains(&Section::Collectives) {
        Vec::new()
    } else if nccl_version.is_none() {
        let message = "collectives: NCCL could not be loaded (libnccl.so / libnccl.so.2 not found)".to_string();
        eprintln!("bench: {message}");
        errors.push(message);
        Vec::new()
    } else {
        print_line(format_args!("\n# collectives (bf16, out of place; busbw per nccl-tests)"));
        print_line(format_args!(
            "{:<15} {:>6} {:>10} {:>12} {:>12} {:>12}",
            "op", "nranks", "size", "time_us", "algbw_gbps", "busbw_gbps"
        ));
        run_section("collectives", &mut errors, || {
            collectives::measure(&gpus, &power_of_two_sizes(1 << 10, args.max_bytes), plan, print_collective)
        })
    };

    let gemm_rows = if args.skip.contains(&Section::Gemm) {
        Vec::new()
    } else {
        print_line(format_args!("\n# GEMM (cuBLAS, bf16 in/out, fp32 accumulate; Y[m x n] = X[m x k] W[n x k]^T)"));
        print_line(format_args!(
            "{:>6} {:>6} {:>6} {:>5} {:>4} {:>12} {:>9}",
            "m", "n", "k", "dtype", "gpu", "time_us", "tflops"
        ));
        run_section("gemm", &mut errors, || gemm::measure(&gpus[0], gemm::DEFAULT_SHAPES, plan, print_gemm))
    };

    let mut results = BenchResults {
        schema_version: SCHEMA_VERSION,
        host: host_name(),
        started_unix_s,
        cuda_driver_version,
        nccl_version,
        gpus: infos,
        copy: copy_rows,
        collectives: collective_rows,
        gemm: gemm_rows,
        peaks: Peaks::default(),
        errors,
    };
    results.compute_peaks();
    print_peaks(&results.peaks);
    Ok(results)
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Panics inside the bindings are caught per section and reported in one line; keep the default
    // multi-line panic message off stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let measured = std::panic::catch_unwind(|| run(&args))
        .unwrap_or_else(|payload| Err(anyhow!("{}", panic_text(payload.as_ref()))));
    let outcome = measured.and_then(|results| {
        if let Some(path) = &args.output {
            let json = serde_json::to_string_pretty(&results).context("cannot encode results")?;
            std::fs::write(path, json + "\n").with_context(|| format!("{}: cannot write", path.display()))?;
        }
        Ok(results.errors.is_empty())
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("bench: {error:#}");
            ExitCode::from(2)
        }
    }
}
