//! Writes a synthetic many-rank job, one gzipped PyTorch-profiler (Kineto) trace per rank, for the Dask fleet
//! benchmarks (`benchmarks/scripts/fleet_bench.py`, `benchmarks/scripts/dask_chunks_ab.py`).
//!
//! ```text
//! cargo run --release -p shardscope-io --example gen_fleet_job -- --ranks 512 --steps 1040 --layers 64 \
//!     --out /tmp/fleet --jobs 16
//! ```
//!
//! The job is a tensor-parallel decoder: ranks in groups of `--tp` (one process group each), every step `--layers`
//! layers of a GEMM, an attention kernel and an all-reduce within the group, and a data-parallel all-reduce over
//! all ranks at the end of the step. Compute times jitter per rank (seeded: the same files every time) and one
//! rank in 32 is a straggler (its compute 15 % slower), so its group waits for it at every all-reduce, as peers
//! wait for a late rank on real hardware. A collective ends for every member `transfer` after its last arrival.
//!
//! Each file has what the Kineto reader needs: `distributedInfo` (rank, world size), its node's `host_name`
//! (8 GPUs per node, so clocks are aligned across hosts as for a real multi-node job), `baseTimeNanoseconds`, a
//! `ProfilerStep#N` range per step, a `cudaLaunchKernel` call per kernel linked by its correlation id, and on
//! NCCL kernels the collective's name, message size and process group, as PyTorch writes them.
//!
//! Nothing is held per kernel. Every random draw comes from a hash of (seed, rank, layer index), so it can be
//! made again wherever it is needed: one pass over the groups finds when each group's all-reduces end (the
//! only state the ranks share, one `u64` per group and layer), then `--jobs` threads write the ranks' files,
//! each drawing its own rank's compute times again while it writes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

const GEMM: &str =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel";
const ATTENTION: &str =
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false>, true>";
const ALL_REDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

/// `baseTimeNanoseconds`: the files' `ts` are relative to it.
const BASE_TIME_NS: u64 = 1_790_000_000_000_000_000;
/// Where every rank's clock starts.
const FIRST_STEP_NS: u64 = 1_000_000;
/// Mean GPU time of the GEMM and of the attention kernel.
const GEMM_MEAN_NS: f64 = 180_000.0;
const ATTENTION_MEAN_NS: f64 = 90_000.0;
/// Per-rank jitter of a compute kernel: normal around 1 with this deviation, clipped to the range below.
const JITTER_SIGMA: f64 = 0.03;
const JITTER_MIN: f64 = 0.8;
const JITTER_MAX: f64 = 1.2;
/// One rank in this many (rank 0, 32, …) is a straggler whose compute takes this factor longer.
const STRAGGLER_EVERY: usize = 32;
const STRAGGLER_FACTOR: f64 = 1.15;
/// Idle time before each compute kernel (the launch gap).
const LAUNCH_GAP_NS: u64 = 2_000;
/// The tensor-parallel all-reduce: time after the group's last arrival, and elements per rank.
const TP_TRANSFER_NS: u64 = 40_000;
const TP_ELEMENTS: u64 = 4096 * 256;
/// The data-parallel all-reduce over every rank at the end of a step.
const DP_TRANSFER_NS: u64 = 900_000;
const DP_ELEMENTS: u64 = 1 << 24;
/// GPUs per node: a rank's device ordinal and host name follow from it.
const GPUS_PER_NODE: usize = 8;
/// The stream every kernel runs on.
const STREAM: u32 = 7;
/// A `cudaLaunchKernel` call starts this long before its kernel and lasts `LAUNCH_CALL_NS`.
const LAUNCH_LEAD_NS: u64 = 3_000;
const LAUNCH_CALL_NS: u64 = 2_500;
/// A `ProfilerStep#N` range opens this long before its step's first kernel gap.
const STEP_LEAD_NS: u64 = 5_000;
/// JSON text is formatted into a buffer of about this size before it is handed to the compressor.
const TEXT_CHUNK_BYTES: usize = 1 << 20;
/// Compressed bytes gathered before each write to the file.
const FILE_BUFFER_BYTES: usize = 1 << 20;

/// The job's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Ranks in the job (a multiple of `tp`), one file each.
    pub ranks: usize,
    /// Training steps, each ending in the data-parallel all-reduce.
    pub steps: usize,
    /// Decoder layers per step.
    pub layers: usize,
    /// Ranks per tensor-parallel group.
    pub tp: usize,
    /// Seed of the compute times' jitter.
    pub seed: u64,
}

impl Job {
    /// Kernels in each rank's file: per step a GEMM, an attention kernel and an all-reduce per layer, and the
    /// data-parallel all-reduce.
    pub fn kernels_per_rank(&self) -> u64 {
        (self.steps * (self.layers * 3 + 1)) as u64
    }

    fn groups(&self) -> usize {
        self.ranks / self.tp
    }

    /// The GEMM's and the attention kernel's GPU time, ns, of `rank` in layer `layer_index` (counted over the
    /// whole run: step × layers + layer).
    fn compute_ns(&self, rank: usize, layer_index: u64) -> (u64, u64) {
        let (gemm_z, attention_z) = normal_pair(self.seed, rank as u64, layer_index);
        let slow = if rank.is_multiple_of(STRAGGLER_EVERY) { STRAGGLER_FACTOR } else { 1.0 };
        let duration_ns = |mean_ns: f64, z: f64| {
            let jitter = (1.0 + JITTER_SIGMA * z).clamp(JITTER_MIN, JITTER_MAX);
            (mean_ns * slow * jitter).round() as u64
        };
        (duration_ns(GEMM_MEAN_NS, gemm_z), duration_ns(ATTENTION_MEAN_NS, attention_z))
    }
}

/// splitmix64's output function: a bijective mix of all 64 bits.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Two independent standard normal draws for (seed, rank, index), by Box–Muller on two uniforms hashed from
/// the key: the same key gives the same draws in whichever thread and order it is asked for.
fn normal_pair(seed: u64, rank: u64, index: u64) -> (f64, f64) {
    let key = mix(mix(mix(seed) ^ rank) ^ index);
    const UNIT: f64 = 1.0 / (1u64 << 53) as f64;
    // In (0, 1], so that the logarithm is finite.
    let u1 = ((key >> 11) + 1) as f64 * UNIT;
    let u2 = (mix(key) >> 11) as f64 * UNIT;
    let radius = (-2.0 * u1.ln()).sqrt();
    let (sin, cos) = (std::f64::consts::TAU * u2).sin_cos();
    (radius * cos, radius * sin)
}

/// When the ranks meet: what a rank's file needs beyond its own compute times.
pub struct Clocks {
    layers: usize,
    /// Entries of `layer_end_ns` per group: steps × layers.
    row_len: usize,
    /// Start of each step (every rank leaves the data-parallel all-reduce at once), and after them the end of
    /// the last step; ns.
    step_start_ns: Vec<u64>,
    /// Per group, then step, then layer: when the layer's tensor-parallel all-reduce ends for the whole group,
    /// ns after its step's start.
    layer_end_ns: Vec<u64>,
}

impl Clocks {
    /// Simulates the job's clocks, over `threads` threads (the groups are independent within a step); fails
    /// when the job is too large to count or to hold its clocks.
    pub fn simulate(job: &Job, threads: usize) -> Result<Clocks, Failure> {
        let too_large = || Failure::Usage(format!("the job is too large ({job:?})"));
        let row_len = job.steps.checked_mul(job.layers).ok_or_else(too_large)?;
        let entries = job.groups().checked_mul(row_len).ok_or_else(too_large)?;
        job.ranks.checked_mul(job.layers * 3 + 1).and_then(|n| n.checked_mul(job.steps)).ok_or_else(too_large)?;
        let mut layer_end_ns = Vec::new();
        layer_end_ns.try_reserve_exact(entries).map_err(|_| {
            Failure::Usage(format!("cannot allocate the job's clocks ({entries} × 8 bytes) for {job:?}"))
        })?;
        layer_end_ns.resize(entries, 0u64);
        let rows = Mutex::new(layer_end_ns.chunks_mut(row_len).enumerate());
        std::thread::scope(|scope| {
            for thread in 0..threads.clamp(1, job.groups()) {
                let rows = &rows;
                std::thread::Builder::new()
                    .name(format!("fleet-clocks-{thread}"))
                    .spawn_scoped(scope, move || {
                        loop {
                            // Take the next group while holding the lock, then release it to simulate.
                            let next = rows.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).next();
                            let Some((group, row)) = next else { break };
                            simulate_group(job, group, row);
                        }
                    })
                    .expect("spawning a thread");
            }
        });
        // A step ends `DP_TRANSFER_NS` after the slowest group reaches the data-parallel all-reduce.
        let mut step_start_ns = Vec::with_capacity(job.steps + 1);
        step_start_ns.push(FIRST_STEP_NS);
        for step in 0..job.steps {
            let last_layer = step * job.layers + job.layers - 1;
            let slowest_ns = layer_end_ns.chunks(row_len).map(|row| row[last_layer]).max().unwrap_or(0);
            step_start_ns.push(step_start_ns[step] + slowest_ns + DP_TRANSFER_NS);
        }
        Ok(Clocks { layers: job.layers, row_len, step_start_ns, layer_end_ns })
    }

    /// The end of `group`'s all-reduce after layer `layer_index` (step × layers + layer), absolute ns.
    fn layer_end_ns(&self, group: usize, layer_index: usize) -> u64 {
        self.step_start_ns[layer_index / self.layers] + self.layer_end_ns[group * self.row_len + layer_index]
    }
}

/// One group's layer ends, relative to each step's start: a layer starts when the previous all-reduce ends (the
/// step's start for the first), and its all-reduce ends `TP_TRANSFER_NS` after the slowest member arrives.
fn simulate_group(job: &Job, group: usize, row: &mut [u64]) {
    let members = group * job.tp..(group + 1) * job.tp;
    for step in 0..job.steps {
        let mut clock_ns = 0;
        for layer in 0..job.layers {
            let layer_index = step * job.layers + layer;
            let slowest_ns = members
                .clone()
                .map(|rank| {
                    let (gemm_ns, attention_ns) = job.compute_ns(rank, layer_index as u64);
                    2 * LAUNCH_GAP_NS + gemm_ns + attention_ns
                })
                .max()
                .unwrap_or(0);
            clock_ns += slowest_ns + TP_TRANSFER_NS;
            row[layer_index] = clock_ns;
        }
    }
}

/// JSON text of one rank's file, before compression.
struct Text {
    bytes: Vec<u8>,
}

impl Text {
    fn s(&mut self, text: &str) -> &mut Self {
        self.bytes.extend_from_slice(text.as_bytes());
        self
    }

    fn u(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self
    }

    /// Nanoseconds as a JSON float of microseconds, as Python prints `ns / 1000`: the fraction without trailing
    /// zeros, `.0` when whole.
    fn us(&mut self, ns: u64) -> &mut Self {
        self.u(ns / 1000);
        let mut fraction = ns % 1000;
        if fraction == 0 {
            return self.s(".0");
        }
        let mut digits = [b'.', b'0', b'0', b'0'];
        let mut places = 3;
        while fraction.is_multiple_of(10) {
            fraction /= 10;
            places -= 1;
        }
        for at in (1..=places).rev() {
            digits[at] = b'0' + (fraction % 10) as u8;
            fraction /= 10;
        }
        self.bytes.extend_from_slice(&digits[..=places]);
        self
    }
}

/// The parts of one rank's events that are the same for every kernel, formatted once.
struct RankText {
    launch_head: String,
    gemm_head: String,
    attention_head: String,
    all_reduce_head: String,
    kernel_args: String,
    tp_tail: String,
}

/// The end of a compute kernel's `args` and of the event.
const COMPUTE_TAIL: &str = ", \"grid\": [132, 1, 1], \"block\": [256, 1, 1]}}";

impl RankText {
    fn new(job: &Job, rank: usize) -> RankText {
        let pid = 10_000 + rank;
        let device = rank % GPUS_PER_NODE;
        let kernel_head = |name: &str| {
            format!(
                ", {{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{name}\", \"pid\": {device}, \"tid\": {STREAM}, \"ts\": "
            )
        };
        let group = rank / job.tp;
        let members = (group * job.tp..(group + 1) * job.tp).map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
        RankText {
            launch_head: format!(
                ", {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": {pid}, \"tid\": {pid}, \"ts\": "
            ),
            gemm_head: kernel_head(GEMM),
            attention_head: kernel_head(ATTENTION),
            all_reduce_head: kernel_head(ALL_REDUCE),
            kernel_args: format!(", \"args\": {{\"device\": {device}, \"stream\": {STREAM}, \"correlation\": "),
            tp_tail: collective_tail(TP_ELEMENTS, job.tp, &format!("tp{group}"), &members),
        }
    }
}

/// The end of an NCCL kernel's `args`: grid and block, then the collective as PyTorch records it, with the
/// member ranks as a JSON-encoded string.
fn collective_tail(elements: u64, group_size: usize, group_name: &str, members: &str) -> String {
    format!(
        ", \"grid\": [132, 1, 1], \"block\": [256, 1, 1], \"Collective name\": \"allreduce\", \
         \"In msg nelems\": {elements}, \"Out msg nelems\": {elements}, \"Group size\": {group_size}, \
         \"dtype\": \"BFloat16\", \"Process Group Name\": \"{group_name}\", \"Process Group Ranks\": \"[{members}]\"}}}}"
    )
}

/// The opening of a rank's file, up to and including its first event.
fn header(job: &Job, rank: usize) -> String {
    let devices = (0..GPUS_PER_NODE)
        .map(|d| {
            format!("{{\"id\": {d}, \"name\": \"NVIDIA H200\", \"totalGlobalMem\": 150109880320, \"numSms\": 132}}")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let pid = 10_000 + rank;
    format!(
        "{{\"schemaVersion\": 1, \"deviceProperties\": [{devices}], \
         \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": {world}}}, \
         \"host_name\": \"node{node:03}\", \"baseTimeNanoseconds\": {BASE_TIME_NS}, \"traceEvents\": \
         [{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {pid}, \"tid\": 0, \"args\": {{\"name\": \"python3\"}}}}",
        world = job.ranks,
        node = rank / GPUS_PER_NODE,
    )
}

/// Why the generator stopped.
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments or an output folder that cannot be written: exit code 2.
    Usage(String),
    /// Writing failed part way (a full disk): exit code 1.
    Write(String),
}

impl Failure {
    /// The one line to print.
    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(message) | Failure::Write(message) => message,
        }
    }
}

/// Writes `rank{NNNN}.json.gz` of one rank; returns its kernel count.
fn write_rank(
    job: &Job,
    clocks: &Clocks,
    dp_tail: &str,
    rank: usize,
    dir: &Path,
    text: &mut Text,
) -> Result<u64, Failure> {
    let path = dir.join(format!("rank{rank:04}.json.gz"));
    let file = File::create(&path).map_err(|e| Failure::Usage(format!("cannot create {}: {e}", path.display())))?;
    let mut sink =
        flate2::write::GzEncoder::new(BufWriter::with_capacity(FILE_BUFFER_BYTES, file), flate2::Compression::fast());
    let failed = |e: std::io::Error| Failure::Write(format!("writing {}: {e}", path.display()));
    let parts = RankText::new(job, rank);
    let pid = (10_000 + rank) as u64;
    let group = rank / job.tp;
    text.bytes.clear();
    text.s(&header(job, rank));

    for (step, pair) in clocks.step_start_ns.windows(2).enumerate() {
        let (start_ns, end_ns) = (pair[0], pair[1]);
        text.s(", {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"ProfilerStep#").u(step as u64);
        text.s("\", \"pid\": ").u(pid).s(", \"tid\": ").u(pid).s(", \"ts\": ").us(start_ns - STEP_LEAD_NS);
        text.s(", \"dur\": ").us(end_ns - start_ns).s(", \"args\": {\"External id\": ").u(step as u64 + 1).s("}}");
    }

    let mut correlation = 0u64;
    let mut kernel = |text: &mut Text, head: &str, start_ns: u64, end_ns: u64, tail: &str| {
        correlation += 1;
        text.s(&parts.launch_head).us(start_ns - LAUNCH_LEAD_NS).s(", \"dur\": ").us(LAUNCH_CALL_NS);
        text.s(", \"args\": {\"correlation\": ").u(correlation).s("}}");
        text.s(head).us(start_ns).s(", \"dur\": ").us(end_ns - start_ns);
        text.s(&parts.kernel_args).u(correlation).s(tail);
    };
    for step in 0..job.steps {
        let mut clock_ns = clocks.step_start_ns[step];
        for layer in 0..job.layers {
            let layer_index = step * job.layers + layer;
            let (gemm_ns, attention_ns) = job.compute_ns(rank, layer_index as u64);
            let gemm_start_ns = clock_ns + LAUNCH_GAP_NS;
            kernel(text, &parts.gemm_head, gemm_start_ns, gemm_start_ns + gemm_ns, COMPUTE_TAIL);
            let attention_start_ns = gemm_start_ns + gemm_ns + LAUNCH_GAP_NS;
            let arrival_ns = attention_start_ns + attention_ns;
            kernel(text, &parts.attention_head, attention_start_ns, arrival_ns, COMPUTE_TAIL);
            let end_ns = clocks.layer_end_ns(group, layer_index);
            kernel(text, &parts.all_reduce_head, arrival_ns, end_ns, &parts.tp_tail);
            clock_ns = end_ns;
            if text.bytes.len() >= TEXT_CHUNK_BYTES {
                sink.write_all(&text.bytes).map_err(failed)?;
                text.bytes.clear();
            }
        }
        kernel(text, &parts.all_reduce_head, clock_ns, clocks.step_start_ns[step + 1], dp_tail);
    }
    text.s("]}");
    sink.write_all(&text.bytes).map_err(failed)?;
    sink.finish().map_err(failed)?.flush().map_err(failed)?;
    Ok(correlation)
}

/// Writes the job's files into `dir` (created if missing) over `threads` threads; returns the kernel count.
pub fn generate(job: &Job, dir: &Path, threads: usize) -> Result<u64, Failure> {
    // The clocks first: a job too large to hold leaves no folder behind.
    let clocks = Clocks::simulate(job, threads)?;
    std::fs::create_dir_all(dir).map_err(|e| Failure::Usage(format!("cannot create {}: {e}", dir.display())))?;
    let everyone = (0..job.ranks).map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
    let dp_tail = collective_tail(DP_ELEMENTS, job.ranks, "dp", &everyone);
    let next_rank = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let first_failure = Mutex::new(None);
    let kernels = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..threads.clamp(1, job.ranks) {
            let (clocks, dp_tail, next_rank, stop, first_failure, kernels) =
                (&clocks, &dp_tail, &next_rank, &stop, &first_failure, &kernels);
            std::thread::Builder::new()
                .name(format!("fleet-writer-{thread}"))
                .spawn_scoped(scope, move || {
                    let mut text = Text { bytes: Vec::with_capacity(TEXT_CHUNK_BYTES + (64 << 10)) };
                    while !stop.load(Ordering::Relaxed) {
                        let rank = next_rank.fetch_add(1, Ordering::Relaxed);
                        if rank >= job.ranks {
                            break;
                        }
                        match write_rank(job, clocks, dp_tail, rank, dir, &mut text) {
                            Ok(count) => {
                                kernels.fetch_add(count, Ordering::Relaxed);
                            }
                            Err(failure) => {
                                stop.store(true, Ordering::Relaxed);
                                first_failure
                                    .lock()
                                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                                    .get_or_insert(failure);
                            }
                        }
                    }
                })
                .expect("spawning a thread");
        }
    });
    match first_failure.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner()) {
        Some(failure) => Err(failure),
        None => Ok(kernels.into_inner()),
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub struct Options {
    /// The job to write.
    pub job: Job,
    /// Folder of the rank files.
    pub out: PathBuf,
    /// Threads simulating and writing.
    pub jobs: usize,
}

const USAGE: &str = "usage: gen_fleet_job --out DIR [--ranks N (512)] [--steps N (20)] [--layers N (32)] \
                     [--tp N (8)] [--seed N (1)] [--jobs N (cores)]";

/// Reads the arguments (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut job = Job { ranks: 512, steps: 20, layers: 32, tp: 8, seed: 1 };
    let mut out = None;
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|_| format!("{flag} takes a whole number, not '{value}'"));
        let count = || {
            let n = number()?;
            usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| format!("{flag} must be at least 1"))
        };
        match flag.as_str() {
            "--ranks" => job.ranks = count()?,
            "--steps" => job.steps = count()?,
            "--layers" => job.layers = count()?,
            "--tp" => job.tp = count()?,
            "--seed" => job.seed = number()?,
            "--jobs" => jobs = count()?,
            "--out" => out = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown argument '{flag}' ({USAGE})")),
        }
    }
    let out = out.ok_or_else(|| format!("--out is required ({USAGE})"))?;
    if !job.ranks.is_multiple_of(job.tp) {
        return Err(format!("--ranks ({}) must be a multiple of --tp ({})", job.ranks, job.tp));
    }
    Ok(Options { job, out, jobs })
}

fn main() -> ExitCode {
    if std::env::args().skip(1).any(|arg| arg == "-h" || arg == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("gen_fleet_job: {message}");
            return ExitCode::from(2);
        }
    };
    match generate(&options.job, &options.out, options.jobs) {
        Ok(kernels) => {
            println!("{} ranks, {kernels} kernels in {}", options.job.ranks, options.out.display());
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("gen_fleet_job: {}", failure.message());
            ExitCode::from(match failure {
                Failure::Usage(_) => 2,
                Failure::Write(_) => 1,
            })
        }
    }
}
