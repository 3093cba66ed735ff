//! Writes a synthetic multi-rank LLM-inference trace in the nsys export schema, for benchmarks
//! and for trying the analyzer and viewer on traces far larger than the real samples.
//!
//! ```text
//! cargo run --release -p shardscope-io --example gen_large_nsys -- --kernels 1000000 --ranks 8 -o big.sqlite
//! ```
//!
//! With `--split`, each rank goes to a file of its own, as a job writes them (`big.rank0.sqlite`, …), with the
//! same events as the one file.
//!
//! Each rank is one process driving one GPU. Its main thread runs one prefill step and then
//! decode steps, each an NVTX range (`prefill` / `decode`) around the layers of a Llama-shaped
//! decoder with tensor parallelism: RMSNorm, QKV GEMM, rotary embedding, flash attention,
//! output GEMM, NCCL all-reduce, RMSNorm, gate/up GEMM, SiLU-and-mul, down GEMM, all-reduce,
//! residual add. Every kernel has its launch call (`cudaLaunchKernel`, or `cuLaunchKernelEx`
//! for NCCL) with a correlation id; each step copies its tokens in and the sampled ids out.
//! Durations are deterministic pseudo-random around per-kernel means, prefill kernels being
//! longer. The trace is written in chunks of steps, each in time order, so memory stays bounded.

use std::path::PathBuf;
use std::process::ExitCode;

use shardscope_io::nsys_writer::{WriteOptions, Writer};
use shardscope_model::{
    ApiCall, ApiKind, CopyKind, Device, DeviceIdx, Kernel, MemOp, NameId, Process, ProcessIdx, Range, RangeKind,
    ThreadName, Trace,
};

/// Decoder layers per step.
const LAYERS: usize = 32;
/// Kernels per step and rank beyond the layers: final norm, LM-head GEMM, sampling.
const TAIL_KERNELS: usize = 3;
/// Steps per written chunk.
const STEPS_PER_CHUNK: usize = 64;
/// Decode steps after each prefill before the next request's prefill.
const DECODE_STEPS_PER_PREFILL: usize = 127;

/// One kind of kernel: demangled and short name, mean GPU time in decode and in prefill (ns),
/// launch grid and block, and whether NCCL launches it.
struct KernelKind {
    name: &'static str,
    short_name: &'static str,
    decode_ns: i64,
    prefill_ns: i64,
    grid: [u32; 3],
    block: [u32; 3],
    nccl: bool,
}

const fn kind(
    name: &'static str,
    short_name: &'static str,
    decode_ns: i64,
    prefill_ns: i64,
    grid: [u32; 3],
    block: [u32; 3],
) -> KernelKind {
    KernelKind { name, short_name, decode_ns, prefill_ns, grid, block, nccl: false }
}

const RMS_NORM: KernelKind = kind(
    "void vllm::rms_norm_kernel<c10::BFloat16, (int)8, (int)4>(T1 *, const T1 *, const T1 *, float, int, int)",
    "rms_norm_kernel",
    3_500,
    28_000,
    [8, 1, 1],
    [1024, 1, 1],
);
const QKV_GEMM: KernelKind = kind(
    "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT",
    "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT",
    14_000,
    160_000,
    [132, 1, 1],
    [384, 1, 1],
);
const ROTARY: KernelKind = kind(
    "void vllm::rotary_embedding_kernel<c10::BFloat16, (bool)1>(const long *, T1 *, T1 *, const T1 *, int, long, long, \
     long, int, int, int)",
    "rotary_embedding_kernel",
    2_800,
    19_000,
    [8, 1, 1],
    [512, 1, 1],
);
const FLASH_ATTENTION: KernelKind = kind(
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, \
     (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>, \
     (bool)1, (bool)0, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)",
    "flash_fwd_splitkv_kernel",
    21_000,
    240_000,
    [4, 8, 16],
    [128, 1, 1],
);
const O_GEMM: KernelKind = kind(
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT",
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT",
    9_000,
    95_000,
    [132, 1, 1],
    [256, 1, 1],
);
const ALL_REDUCE: KernelKind = KernelKind {
    name: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
    short_name: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    decode_ns: 18_000,
    prefill_ns: 210_000,
    grid: [16, 1, 1],
    block: [512, 1, 1],
    nccl: true,
};
const GATE_UP_GEMM: KernelKind = kind(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    26_000,
    420_000,
    [132, 1, 1],
    [384, 1, 1],
);
const ACT_AND_MUL: KernelKind = kind(
    "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(T1 *, const T1 *, int)",
    "act_and_mul_kernel",
    3_200,
    36_000,
    [8, 1, 1],
    [1024, 1, 1],
);
const DOWN_GEMM: KernelKind = kind(
    "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT",
    "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT",
    16_000,
    230_000,
    [132, 1, 1],
    [384, 1, 1],
);
const RESIDUAL_ADD: KernelKind = kind(
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>, \
     std::array<char *, (unsigned long)3>>(int, T2, T3)",
    "vectorized_elementwise_kernel",
    2_400,
    17_000,
    [64, 1, 1],
    [128, 1, 1],
);
const LM_HEAD_GEMM: KernelKind = kind(
    "nvjet_sm90_tst_128x128_64x4_2x1_v_bz_TNN",
    "nvjet_sm90_tst_128x128_64x4_2x1_v_bz_TNN",
    48_000,
    52_000,
    [132, 1, 1],
    [384, 1, 1],
);
const SAMPLER: KernelKind = kind(
    "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, \
     unsigned int, long, (int)4>>(T3)",
    "reduce_kernel",
    6_000,
    6_500,
    [1, 1, 1],
    [512, 1, 1],
);

/// The kernels of one decoder layer, in launch order.
const LAYER: [&KernelKind; 12] = [
    &RMS_NORM,
    &QKV_GEMM,
    &ROTARY,
    &FLASH_ATTENTION,
    &O_GEMM,
    &ALL_REDUCE,
    &RMS_NORM,
    &GATE_UP_GEMM,
    &ACT_AND_MUL,
    &DOWN_GEMM,
    &ALL_REDUCE,
    &RESIDUAL_ADD,
];
/// The kernels after the last layer.
const TAIL: [&KernelKind; TAIL_KERNELS] = [&RMS_NORM, &LM_HEAD_GEMM, &SAMPLER];

/// Command-line options.
struct Options {
    kernels: u64,
    ranks: u32,
    output: PathBuf,
    /// One file per rank.
    split: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut kernels = None;
    let mut ranks = 8;
    let mut output = None;
    let mut split = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--kernels" => {
                kernels = Some(value("--kernels")?.parse::<u64>().map_err(|e| format!("--kernels: {e}"))?);
            }
            "--ranks" => ranks = value("--ranks")?.parse::<u32>().map_err(|e| format!("--ranks: {e}"))?,
            "-o" | "--output" => output = Some(PathBuf::from(value("-o")?)),
            "--split" => split = true,
            "-h" | "--help" => {
                return Err("usage: gen_large_nsys --kernels N [--ranks R] [--split] -o OUT.sqlite".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let kernels = kernels.ok_or("--kernels N is required")?;
    let output = output.ok_or("-o OUT.sqlite is required")?;
    if ranks == 0 || ranks > 4096 {
        return Err(format!("--ranks must be between 1 and 4096, not {ranks}"));
    }
    Ok(Options { kernels, ranks, output, split })
}

/// xorshift64*: a fast deterministic generator, enough for jitter.
struct Jitter(u64);

impl Jitter {
    /// `mean` ± 15 %.
    fn around(&mut self, mean: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let unit = (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        (mean as f64 * (0.85 + 0.3 * unit)) as i64
    }
}

/// Where one rank stands between chunks.
struct RankClock {
    cpu_ns: i64,
    gpu_free_ns: i64,
    correlation_id: u32,
}

/// The interned names one chunk uses.
struct ChunkNames {
    kernels: Vec<(NameId, NameId)>,
    tail: Vec<(NameId, NameId)>,
    launch: NameId,
    launch_ex: NameId,
    memcpy: NameId,
    prefill: NameId,
    decode: NameId,
    nccl_domain: NameId,
    nccl_all_reduce: NameId,
}

/// A chunk holding the ranks `which` of a job of `ranks`; a rank's process and GPU are its position in `which`.
fn empty_chunk(which: std::ops::Range<u32>, ranks: u32) -> (Trace, ChunkNames) {
    let mut t = Trace::default();
    for (slot, rank) in which.enumerate() {
        let pid = 4000 + rank;
        t.add_process(Process {
            pid,
            // Host and VM bits as nsys sets them for the first VM of a machine.
            global_pid: (1u64 << 48) | (u64::from(pid) << 24),
            name: "python3".into(),
            host: Some("gpu-node-0".into()),
            rank: Some(rank),
            world_size: Some(ranks),
        });
        t.add_device(Device {
            ordinal: rank,
            process: Some(ProcessIdx(slot as u32)),
            name: "NVIDIA H200".into(),
            sm_count: Some(132),
            memory_bytes: Some(150_109_880_320),
            memory_bandwidth_bytes_per_s: Some(4_814_304_000_000),
            clock_rate_khz: Some(1_980_000),
            bus_location: Some(format!("0000:{:02x}:00.0", 0x18 + rank)),
        });
    }
    let mut pair = |k: &KernelKind| (t.names.intern(k.name), t.names.intern(k.short_name));
    let kernels = LAYER.iter().map(|k| pair(k)).collect();
    let tail = TAIL.iter().map(|k| pair(k)).collect();
    let names = ChunkNames {
        kernels,
        tail,
        launch: t.names.intern("cudaLaunchKernel"),
        launch_ex: t.names.intern("cuLaunchKernelEx"),
        memcpy: t.names.intern("cudaMemcpyAsync"),
        prefill: t.names.intern("prefill"),
        decode: t.names.intern("decode"),
        nccl_domain: t.names.intern("NCCL"),
        nccl_all_reduce: t.names.intern("ncclAllReduce"),
    };
    (t, names)
}

/// Appends one step of one rank to `t`; returns the number of kernels added.
#[allow(clippy::too_many_arguments)]
fn add_step(
    t: &mut Trace,
    names: &ChunkNames,
    (rank, slot): (u32, u32),
    clock: &mut RankClock,
    jitter: &mut Jitter,
    prefill: bool,
    kernel_budget: u64,
) -> u64 {
    let process = ProcessIdx(slot);
    let device = DeviceIdx(slot);
    let tid = 4000 + rank;
    let compute_stream = 7;
    let step_start = clock.cpu_ns;
    let mut added = 0u64;

    let copy = |t: &mut Trace, clock: &mut RankClock, kind: CopyKind, bytes: u64| {
        clock.correlation_id += 1;
        let start_ns = clock.cpu_ns;
        clock.cpu_ns += 9_000;
        t.api_calls.push(ApiCall {
            start_ns,
            end_ns: clock.cpu_ns,
            name: names.memcpy,
            kind: ApiKind::Runtime,
            process,
            tid,
            correlation_id: clock.correlation_id,
        });
        let gpu_start = clock.gpu_free_ns.max(start_ns + 4_000);
        clock.gpu_free_ns = gpu_start + 2_000 + bytes as i64 / 50;
        t.memops.push(MemOp {
            start_ns: gpu_start,
            end_ns: clock.gpu_free_ns,
            copy_kind: Some(kind),
            bytes,
            device,
            process,
            stream: compute_stream,
            correlation_id: clock.correlation_id,
            ..MemOp::default()
        });
    };
    copy(t, clock, CopyKind::HtoD, if prefill { 8 * 2048 } else { 8 * 64 });

    let layer_kernels = (0..LAYERS).flat_map(|_| LAYER.iter().zip(&names.kernels));
    for (kind, &(name, short_name)) in layer_kernels.chain(TAIL.iter().zip(&names.tail)) {
        if added == kernel_budget {
            break;
        }
        clock.correlation_id += 1;
        let launch_start = clock.cpu_ns;
        clock.cpu_ns += jitter.around(if kind.nccl { 11_000 } else { 5_500 });
        t.api_calls.push(ApiCall {
            start_ns: launch_start,
            end_ns: clock.cpu_ns,
            name: if kind.nccl { names.launch_ex } else { names.launch },
            kind: if kind.nccl { ApiKind::Driver } else { ApiKind::Runtime },
            process,
            tid,
            correlation_id: clock.correlation_id,
        });
        if kind.nccl {
            // NCCL's own NVTX range around the enqueue, in its domain.
            t.ranges.push(Range {
                start_ns: launch_start - 1_500,
                end_ns: clock.cpu_ns + 500,
                name: names.nccl_all_reduce,
                domain: names.nccl_domain,
                kind: RangeKind::PushPop,
                process,
                tid,
                ..Range::default()
            });
        }
        let start_ns = clock.gpu_free_ns.max(launch_start + 3_000);
        let end_ns = start_ns + jitter.around(if prefill { kind.prefill_ns } else { kind.decode_ns });
        clock.gpu_free_ns = end_ns + 800;
        t.kernels.push(Kernel {
            start_ns,
            end_ns,
            name,
            short_name,
            device,
            process,
            stream: compute_stream,
            correlation_id: clock.correlation_id,
            grid: kind.grid,
            block: kind.block,
            launch: None,
            collective: None,
            graph_id: None,
            graph_node_id: None,
        });
        added += 1;
    }

    // The host waits for the sampled tokens, then the step ends.
    copy(t, clock, CopyKind::DtoH, 8 * 4);
    clock.cpu_ns = clock.cpu_ns.max(clock.gpu_free_ns) + 20_000;
    t.ranges.push(Range {
        start_ns: step_start,
        end_ns: clock.cpu_ns,
        name: if prefill { names.prefill } else { names.decode },
        kind: RangeKind::PushPop,
        process,
        tid,
        ..Range::default()
    });
    added
}

/// The files written: one, or with `--split` one per rank (`OUT.rankN.sqlite`).
fn output_paths(options: &Options) -> Vec<PathBuf> {
    if !options.split {
        return vec![options.output.clone()];
    }
    let stem = options.output.file_stem().map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    let extension = options.output.extension().map_or("sqlite".into(), |e| e.to_string_lossy().into_owned());
    (0..options.ranks).map(|rank| options.output.with_file_name(format!("{stem}.rank{rank}.{extension}"))).collect()
}

/// One file's chunk: the trace, its names, and `(rank, slot in the chunk)` per rank in it.
type FileChunk = (Trace, ChunkNames, Vec<(u32, u32)>);

/// Each file's chunk for the next steps.
fn empty_chunks(options: &Options) -> Vec<FileChunk> {
    let groups: Vec<std::ops::Range<u32>> = if options.split {
        (0..options.ranks).map(|r| r..r + 1).collect()
    } else {
        std::iter::once(0..options.ranks).collect()
    };
    groups
        .into_iter()
        .map(|which| {
            let slots = which.clone().zip(0..).collect();
            let (chunk, names) = empty_chunk(which, options.ranks);
            (chunk, names, slots)
        })
        .collect()
}

fn run(options: &Options) -> Result<(), String> {
    let paths = output_paths(options);
    let write_options = WriteOptions { producer_name: "shardscope gen_large_nsys".into(), ..WriteOptions::default() };
    let mut writers: Vec<Writer> = paths
        .iter()
        .map(|path| Writer::create_with(path, &write_options).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let kernels_per_step = (LAYERS * LAYER.len() + TAIL_KERNELS) as u64;
    let ranks = u64::from(options.ranks);
    let mut clocks: Vec<RankClock> = (0..options.ranks)
        .map(|rank| RankClock { cpu_ns: 1_000_000 + i64::from(rank) * 1_700, gpu_free_ns: 0, correlation_id: 0 })
        .collect();
    let mut jitter = Jitter(0x9E37_79B9_7F4A_7C15);
    let mut written = 0u64;
    let mut step = 0usize;
    let mut first_chunk = true;
    while written < options.kernels {
        let mut chunks = empty_chunks(options);
        // The file of each rank, and the rank's slot in it.
        let file_of: Vec<(usize, u32)> =
            (0..options.ranks).map(|rank| if options.split { (rank as usize, 0) } else { (0, rank) }).collect();
        if first_chunk {
            for (chunk, _, slots) in &mut chunks {
                chunk.clock_offset_ns = Some(1_779_000_000_000_000_000);
                for &(rank, slot) in slots.iter() {
                    chunk.threads.push(ThreadName {
                        process: ProcessIdx(slot),
                        tid: 4000 + rank,
                        name: "python3".into(),
                    });
                }
            }
            first_chunk = false;
        }
        for _ in 0..STEPS_PER_CHUNK {
            if written >= options.kernels {
                break;
            }
            let prefill = step.is_multiple_of(DECODE_STEPS_PER_PREFILL + 1);
            // Share what is left evenly; the last step of each rank may be partial.
            let left = options.kernels - written;
            let per_rank = left.div_ceil(ranks).min(kernels_per_step);
            for (rank, clock) in clocks.iter_mut().enumerate() {
                let budget = per_rank.min(options.kernels - written);
                if budget == 0 {
                    break;
                }
                let (file, slot) = file_of[rank];
                let (chunk, names, _) = &mut chunks[file];
                written += add_step(chunk, names, (rank as u32, slot), clock, &mut jitter, prefill, budget);
            }
            step += 1;
        }
        // nsys exports store events in time order; so does each file, chunk by chunk.
        for ((chunk, _, _), writer) in chunks.iter_mut().zip(&mut writers) {
            chunk.finish();
            writer.write_trace(chunk).map_err(|e| e.to_string())?;
        }
    }
    for writer in writers {
        writer.finish().map_err(|e| e.to_string())?;
    }
    let into = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    eprintln!("wrote {written} kernels, {step} steps, {} ranks to {into}", options.ranks);
    Ok(())
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("gen_large_nsys: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gen_large_nsys: {message}");
            ExitCode::FAILURE
        }
    }
}
