//! Synthetic multi-rank traces for benchmarks, tests and demos.
//!
//! The generator is deterministic (a fixed-seed xorshift), so a test can assert exact counts
//! and a benchmark sees the same events on every run. Each rank gets one process, one GPU, a
//! compute stream with back-to-back kernels, a communication stream with NCCL all-reduce
//! kernels (with collective metadata), one `cudaLaunchKernel` call per kernel on the main
//! thread, and NVTX `request` / `prefill` / `decode` ranges around them (the phase names the
//! analyzer recognises).

use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, Device, Kernel, Process, Range, RangeKind, SourceFormat, SourceInfo,
    Trace,
};

/// Kernel names used for compute, chosen so every built-in category appears.
const COMPUTE_KERNELS: [&str; 8] = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::(anonymous namespace)::layer_norm_kernel<float>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
    "void at::native::elementwise_kernel<128, 2, at::native::gelu_kernel>",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "triton_poi_fused_add_mul_0",
];

/// The all-reduce kernel NCCL runs.
const ALLREDUCE_KERNEL: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

/// Shape of a generated job.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticSpec {
    /// Number of ranks (one trace each).
    pub ranks: u32,
    /// Kernels per rank, compute and communication together.
    pub kernels_per_rank: usize,
    /// Every n-th kernel is an all-reduce on the communication stream.
    pub allreduce_every: usize,
    /// Kernels per request (one `request` NVTX range each, split into `prefill` and `decode`).
    pub kernels_per_step: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec { ranks: 2, kernels_per_rank: 200, allreduce_every: 10, kernels_per_step: 100 }
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Builds one trace per rank as described in the module docs.
pub fn generate(spec: SyntheticSpec) -> Vec<Trace> {
    (0..spec.ranks)
        .map(|rank| {
            let mut trace = Trace {
                source: SourceInfo {
                    path: format!("synthetic-rank{rank}"),
                    format: SourceFormat::NsysSqlite,
                    ..SourceInfo::default()
                },
                ..Trace::default()
            };
            add_rank(&mut trace, spec, rank);
            trace.finish();
            trace
        })
        .collect()
}

/// Builds all ranks into one trace, one process and GPU each, as one nsys export of a
/// single-node job holds them.
pub fn generate_single(spec: SyntheticSpec) -> Trace {
    let mut trace = Trace {
        source: SourceInfo { path: "synthetic".into(), format: SourceFormat::NsysSqlite, ..SourceInfo::default() },
        ..Trace::default()
    };
    for rank in 0..spec.ranks {
        add_rank(&mut trace, spec, rank);
    }
    trace.finish();
    trace
}

fn add_rank(trace: &mut Trace, spec: SyntheticSpec, rank: u32) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (u64::from(rank) + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let pid = 1000 + rank;
    let tid = pid;
    let process = trace.add_process(Process {
        pid,
        global_pid: u64::from(pid) << 24,
        name: "python serve.py".into(),
        host: Some(format!("node{}", rank / 4)),
        rank: Some(rank),
        world_size: Some(spec.ranks),
    });
    let device = trace.add_device(Device {
        ordinal: rank % 4,
        process: Some(process),
        name: "NVIDIA H200".into(),
        sm_count: Some(132),
        ..Device::default()
    });
    let compute_names: Vec<_> = COMPUTE_KERNELS.iter().map(|n| trace.names.intern(n)).collect();
    let allreduce_name = trace.names.intern(ALLREDUCE_KERNEL);
    let launch_name = trace.names.intern("cudaLaunchKernel");
    let group_name = trace.names.intern("0");
    let dtype = trace.names.intern("BFloat16");
    let step_name = trace.names.intern("request");
    let phase_names = [trace.names.intern("prefill"), trace.names.intern("decode")];

    let n = spec.kernels_per_rank;
    trace.kernels.reserve(n);
    trace.api_calls.reserve(n);
    // Collective seq numbers count per rank, like NCCL's per-communicator counters.
    // Host runs ahead of the GPU by a few microseconds, as it does in a launch-bound-free run.
    let mut host_ns: i64 = 1_000_000 + i64::from(rank) * 3_000;
    let mut compute_free_ns: i64 = 0;
    let mut comm_free_ns: i64 = 0;
    let mut step_start_ns = host_ns;
    let mut phase_start_ns = host_ns;
    let mut occurrence = 0u64;
    for index in 0..n {
        let correlation_id = index as u32 + 1;
        let call_start_ns = host_ns;
        let call_end_ns = call_start_ns + 2_000 + rng.below(3_000) as i64;
        host_ns = call_end_ns + 500 + rng.below(1_000) as i64;
        trace.api_calls.push(ApiCall {
            start_ns: call_start_ns,
            end_ns: call_end_ns,
            name: launch_name,
            kind: ApiKind::Runtime,
            process,
            tid,
            correlation_id,
        });
        let is_allreduce = spec.allreduce_every > 0 && index % spec.allreduce_every == spec.allreduce_every - 1;
        if is_allreduce {
            let start_ns = comm_free_ns.max(call_end_ns + 1_000);
            let end_ns = start_ns + 20_000 + rng.below(40_000) as i64;
            comm_free_ns = end_ns;
            trace.collectives.push(Collective {
                op: CollectiveOp::AllReduce,
                bytes: Some(1 << 24),
                in_elems: Some(1 << 23),
                out_elems: Some(1 << 23),
                dtype,
                group_name,
                group_size: Some(spec.ranks),
                group_ranks: (0..spec.ranks).collect(),
                seq: Some(occurrence),
                ..Collective::default()
            });
            occurrence += 1;
            trace.kernels.push(Kernel {
                start_ns,
                end_ns,
                name: allreduce_name,
                short_name: allreduce_name,
                device,
                process,
                stream: 13,
                correlation_id,
                grid: [4, 1, 1],
                block: [640, 1, 1],
                collective: Some(trace.collectives.len() as u32 - 1),
                ..Kernel::default()
            });
        } else {
            let which = rng.below(compute_names.len() as u64) as usize;
            let start_ns = compute_free_ns.max(call_end_ns + 1_000);
            let end_ns = start_ns + 1_000 + rng.below(30_000) as i64;
            compute_free_ns = end_ns;
            trace.kernels.push(Kernel {
                start_ns,
                end_ns,
                name: compute_names[which],
                short_name: compute_names[which],
                device,
                process,
                stream: 7,
                correlation_id,
                grid: [132, 1 + which as u32, 1],
                block: [256, 1, 1],
                ..Kernel::default()
            });
        }
        let step_len = spec.kernels_per_step.max(2);
        let in_step = index % step_len;
        if in_step == step_len / 2 - 1 || in_step == step_len - 1 || index == n - 1 {
            let phase = usize::from(in_step >= step_len / 2);
            trace.ranges.push(Range {
                start_ns: phase_start_ns,
                end_ns: host_ns,
                name: phase_names[phase],
                kind: RangeKind::PushPop,
                process,
                tid,
                ..Range::default()
            });
            phase_start_ns = host_ns + 1;
        }
        if in_step == step_len - 1 || index == n - 1 {
            trace.ranges.push(Range {
                start_ns: step_start_ns - 1,
                end_ns: host_ns + 1,
                name: step_name,
                kind: RangeKind::PushPop,
                process,
                tid,
                ..Range::default()
            });
            host_ns += 2;
            step_start_ns = host_ns;
            phase_start_ns = host_ns;
        }
    }
    trace.threads.push(shardscope_model::ThreadName { process, tid, name: "python".into() });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_the_requested_counts_and_links_every_launch() {
        let traces =
            generate(SyntheticSpec { ranks: 3, kernels_per_rank: 1000, allreduce_every: 10, kernels_per_step: 100 });
        assert_eq!(traces.len(), 3);
        for trace in &traces {
            assert_eq!(trace.kernels.len(), 1000);
            assert_eq!(trace.api_calls.len(), 1000);
            assert_eq!(trace.collectives.len(), 100);
            // 10 steps, each with one forward and one backward range.
            assert_eq!(trace.ranges.len(), 30);
            assert!(trace.kernels.iter().all(|k| k.launch.is_some()));
            assert!(trace.ranges.iter().filter(|r| r.depth == 1).count() == 20);
        }
        let single = generate_single(SyntheticSpec {
            ranks: 3,
            kernels_per_rank: 1000,
            allreduce_every: 10,
            kernels_per_step: 100,
        });
        assert_eq!((single.processes.len(), single.devices.len(), single.kernels.len()), (3, 3, 3000));
        assert!(single.kernels.iter().all(|k| k.launch.is_some()));
    }
}
