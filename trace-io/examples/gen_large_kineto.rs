//! Writes a synthetic PyTorch-profiler (Kineto) trace of one rank, as large as asked, for measuring the
//! Kineto reader's memory and speed on files far larger than the real samples.
//!
//! ```text
//! cargo run --release -p shardscope-io --example gen_large_kineto -- --bytes 10000000000 -o /tmp/big.json
//! ```
//!
//! (`-o NAME.gz` gzips it at the fastest level.) The file has the shape of a `torch.profiler` trace recorded
//! with `with_stack=True` and `record_shapes=True` during tensor-parallel training of a Llama-shaped model (rank
//! 0 of 8): each step is a `ProfilerStep#N` annotation (on the CPU and on the GPU), a batch copied in, the
//! forward pass on the main thread (per layer: norms, QKV / output / MLP GEMMs, rotary, flash attention, two
//! NCCL all-reduces), the backward pass on the autograd thread (twice the GEMMs, the backward kernels, two
//! all-reduces), gradients zeroed with a memset, the optimizer's fused kernels and the loss read back with a
//! sync. Every op is a `cpu_op` (with a nested `aten::` op) under a stack of `python_function` frames on the
//! main thread, launched by `cudaLaunchKernel` (NCCL by `cuLaunchKernelEx`, inside `record_param_comms` and
//! `nccl:all_reduce`) with an `ac2g` flow to its kernel; NCCL kernels carry the collective's args. So, as in
//! real traces, most events are ones the reader skips. Field names and order follow Kineto's writer;
//! durations are deterministic pseudo-random around per-kernel means, and memory stays at one step's text.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Decoder layers per step.
const LAYERS: usize = 32;
/// The process (CPU side) and its threads: the main (Python) thread and the autograd thread.
const PID: u64 = 48_213;
const MAIN_TID: u64 = 48_213;
const AUTOGRAD_TID: u64 = 48_377;
/// GPU side: Kineto files GPU events under pid = device ordinal, tid = stream.
const GPU: u64 = 0;
const COMPUTE_STREAM: u64 = 7;
const NCCL_STREAM: u64 = 23;
/// Tensor-parallel group: all 8 ranks.
const GROUP_SIZE: u64 = 8;
/// `baseTimeNanoseconds`: `ts` is written relative to it, as Kineto has done since 2023.
const BASE_TIME_NS: u64 = 1_763_900_000_000_000_000;

/// One kind of GPU work and the CPU op that launches it.
struct Op {
    /// Python frames above the op, outermost first (forward and optimizer ops only).
    python: &'static [&'static str],
    /// The op as recorded (`aten::linear`, `autograd::engine::evaluate_function: MmBackward0`) and the
    /// nested op that launches the kernel.
    outer: &'static str,
    inner: &'static str,
    /// `Input Dims` and `Input type` of the inner op.
    dims: &'static str,
    types: &'static str,
    kernel: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    registers: u32,
    shared_bytes: u32,
    /// Mean GPU time, ns.
    mean_ns: u64,
}

/// A GEMM as PyTorch records it under `F.linear`.
const fn linear(kernel: &'static str, grid: [u32; 3], dims: &'static str, mean_ns: u64) -> Op {
    Op {
        python: &[
            "nn.Module: LlamaDecoderLayer_0",
            "torch/nn/modules/module.py(1762): _call_impl",
            "model.py(142): forward",
            "torch/nn/modules/module.py(1762): _call_impl",
            "torch/nn/modules/linear.py(125): forward",
            "<built-in function linear>",
        ],
        outer: "aten::linear",
        inner: "aten::mm",
        dims,
        types: "[\"c10::BFloat16\", \"c10::BFloat16\"]",
        kernel,
        grid,
        block: [384, 1, 1],
        registers: 168,
        shared_bytes: 213_000,
        mean_ns,
    }
}

/// An element-wise or normalisation op.
const fn pointwise(
    python: &'static [&'static str],
    outer: &'static str,
    inner: &'static str,
    kernel: &'static str,
    grid: [u32; 3],
    mean_ns: u64,
) -> Op {
    Op {
        python,
        outer,
        inner,
        dims: "[[8, 4096, 4096], [4096]]",
        types: "[\"c10::BFloat16\", \"c10::BFloat16\"]",
        kernel,
        grid,
        block: [256, 1, 1],
        registers: 32,
        shared_bytes: 0,
        mean_ns,
    }
}

/// A backward op on the autograd thread (no Python frames).
const fn backward(outer: &'static str, inner: &'static str, kernel: &'static str, grid: [u32; 3], mean_ns: u64) -> Op {
    Op {
        python: &[],
        outer,
        inner,
        dims: "[[32768, 4096], [4096, 1536]]",
        types: "[\"c10::BFloat16\", \"c10::BFloat16\"]",
        kernel,
        grid,
        block: [384, 1, 1],
        registers: 168,
        shared_bytes: 213_000,
        mean_ns,
    }
}

const GEMM_TN: &str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas";
const GEMM_NN: &str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas";
const GEMM_NT: &str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
const RMS_NORM: &str = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)";
const ADD: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)";
const ROTARY: &str = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})";
const FLASH_FWD: &str = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)";
const FLASH_BWD: &str = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, false, false, true, true, false>(pytorch_flash::Flash_bwd_params)";
const SILU_MUL: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)";
const SILU_BWD: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)";
const NORM_BWD: &str = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float, true>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)";
const ADAM: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::_fused_adam_utils::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::_fused_adam_utils::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*)";
const NCCL_ALL_REDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

/// Python frames of the element-wise and normalisation ops.
const NORM_FRAMES: [&str; 3] =
    ["nn.Module: LlamaDecoderLayer_0", "torch/nn/modules/module.py(1762): _call_impl", "model.py(211): forward"];
const ROTARY_FRAMES: [&str; 3] =
    ["nn.Module: LlamaDecoderLayer_0", "model.py(151): forward", "model.py(97): apply_rotary_emb"];
const ADD_FRAMES: [&str; 2] = ["nn.Module: LlamaDecoderLayer_0", "model.py(230): forward"];
const SILU_FRAMES: [&str; 3] =
    ["nn.Module: LlamaDecoderLayer_0", "model.py(179): forward", "torch/nn/functional.py(2378): silu"];

/// `Input type` of `aten::empty`.
const EMPTY_TYPES: &str = "[\"ScalarList\", \"Scalar\", \"\", \"Device\", \"Scalar\", \"\"]";

/// Where the per-layer all-reduces sit among a pass's ops: after these indices.
const FORWARD_ALL_REDUCE_AFTER: [usize; 2] = [4, 9];
const FORWARD: [Op; 11] = [
    pointwise(&NORM_FRAMES, "aten::rms_norm", "aten::native_layer_norm", RMS_NORM, [4096, 1, 1], 21_000),
    linear(GEMM_TN, [132, 1, 1], "[[8, 4096, 4096], [1536, 4096]]", 96_000),
    pointwise(&ROTARY_FRAMES, "aten::mul", "aten::mul", ROTARY, [8192, 1, 1], 34_000),
    Op {
        python: &[
            "nn.Module: LlamaDecoderLayer_0",
            "model.py(151): forward",
            "torch/nn/functional.py(5912): scaled_dot_product_attention",
        ],
        outer: "aten::scaled_dot_product_attention",
        inner: "aten::_flash_attention_forward",
        dims: "[[8, 4, 4096, 128], [8, 4, 4096, 128], [8, 4, 4096, 128]]",
        types: "[\"c10::BFloat16\", \"c10::BFloat16\", \"c10::BFloat16\"]",
        kernel: FLASH_FWD,
        grid: [32, 32, 1],
        block: [128, 1, 1],
        registers: 255,
        shared_bytes: 49_152,
        mean_ns: 310_000,
    },
    linear(GEMM_TN, [132, 1, 1], "[[8, 4096, 512], [4096, 512]]", 41_000),
    pointwise(&ADD_FRAMES, "aten::add", "aten::add", ADD, [16384, 1, 1], 28_000),
    pointwise(&NORM_FRAMES, "aten::rms_norm", "aten::native_layer_norm", RMS_NORM, [4096, 1, 1], 21_000),
    linear(GEMM_TN, [132, 1, 1], "[[8, 4096, 4096], [3584, 4096]]", 205_000),
    pointwise(&SILU_FRAMES, "aten::silu", "aten::silu", SILU_MUL, [14336, 1, 1], 39_000),
    linear(GEMM_TN, [132, 1, 1], "[[8, 4096, 1792], [4096, 1792]]", 104_000),
    pointwise(&ADD_FRAMES, "aten::add", "aten::add", ADD, [16384, 1, 1], 28_000),
];
const BACKWARD_ALL_REDUCE_AFTER: [usize; 2] = [4, 13];
const BACKWARD: [Op; 16] = [
    backward("autograd::engine::evaluate_function: AddBackward0", "AddBackward0", ADD, [16384, 1, 1], 28_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NN, [132, 1, 1], 104_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NT, [132, 1, 1], 110_000),
    backward(
        "autograd::engine::evaluate_function: SiluBackward0",
        "aten::silu_backward",
        SILU_BWD,
        [14336, 1, 1],
        52_000,
    ),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NN, [132, 1, 1], 205_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NT, [132, 1, 1], 214_000),
    backward(
        "autograd::engine::evaluate_function: NativeLayerNormBackward0",
        "aten::native_layer_norm_backward",
        NORM_BWD,
        [4096, 1, 1],
        33_000,
    ),
    backward("autograd::engine::evaluate_function: AddBackward0", "AddBackward0", ADD, [16384, 1, 1], 28_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NN, [132, 1, 1], 41_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NT, [132, 1, 1], 44_000),
    backward(
        "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
        "aten::_flash_attention_backward",
        FLASH_BWD,
        [32, 32, 1],
        780_000,
    ),
    backward("autograd::engine::evaluate_function: MulBackward0", "aten::mul", ROTARY, [8192, 1, 1], 34_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NN, [132, 1, 1], 96_000),
    backward("autograd::engine::evaluate_function: MmBackward0", "aten::mm", GEMM_NT, [132, 1, 1], 101_000),
    backward(
        "autograd::engine::evaluate_function: NativeLayerNormBackward0",
        "aten::native_layer_norm_backward",
        NORM_BWD,
        [4096, 1, 1],
        33_000,
    ),
    backward("autograd::engine::evaluate_function: AddBackward0", "AddBackward0", ADD, [16384, 1, 1], 28_000),
];
/// Fused AdamW launches one kernel per group of tensors.
const OPTIMIZER_KERNELS: usize = 24;
const OPTIMIZER: Op = Op {
    python: &[
        "train.py(88): train_step",
        "torch/optim/optimizer.py(485): wrapper",
        "torch/optim/adamw.py(209): step",
        "torch/optim/adam.py(920): _fused_adam",
        "<built-in method _fused_adamw_ of PyCapsule object at 0x7f3a2c1d5e90>",
    ],
    outer: "aten::_fused_adamw_",
    inner: "aten::_fused_adamw_",
    dims: "[[], [], [], [], [], [], [], [], [], [], [], [], []]",
    types: "[\"TensorList\", \"TensorList\", \"TensorList\", \"TensorList\", \"TensorList\", \"TensorList\", \"Scalar\", \"Scalar\", \"Scalar\", \"Scalar\", \"Scalar\", \"Scalar\", \"Scalar\"]",
    kernel: ADAM,
    grid: [320, 1, 1],
    block: [512, 1, 1],
    registers: 72,
    shared_bytes: 0,
    mean_ns: 180_000,
};

/// A copy or memset: its name as Kineto writes it, the runtime call and its callback id, its size and
/// the rate it runs at.
#[derive(Clone, Copy)]
struct Transfer {
    name: &'static str,
    api: &'static str,
    cbid: u64,
    bytes: u64,
    bytes_per_us: u64,
    memset: bool,
}

/// The step's batch of token ids, copied in from pinned memory.
const BATCH_IN: Transfer = Transfer {
    name: "Memcpy HtoD (Pinned -> Device)",
    api: "cudaMemcpyAsync",
    cbid: 41,
    bytes: 8 * 4096 * 8,
    bytes_per_us: 20_000,
    memset: false,
};
/// `zero_grad` on a flat gradient buffer.
const ZERO_GRADIENTS: Transfer = Transfer {
    name: "Memset (Device)",
    api: "cudaMemsetAsync",
    cbid: 51,
    bytes: 1 << 30,
    bytes_per_us: 2_000_000,
    memset: true,
};
/// `loss.item()`.
const LOSS_OUT: Transfer = Transfer {
    name: "Memcpy DtoH (Device -> Pageable)",
    api: "cudaMemcpyAsync",
    cbid: 41,
    bytes: 4,
    bytes_per_us: 20_000,
    memset: false,
};

/// Deterministic jitter (xorshift64*).
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `mean_ns` ± 20 %.
    fn around(&mut self, mean_ns: u64) -> u64 {
        let spread = mean_ns * 2 / 5;
        mean_ns - mean_ns / 5 + if spread == 0 { 0 } else { self.next() % spread }
    }

    /// Between `low` and `high` inclusive.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// One step's text, built in memory and written at once.
struct Out {
    text: Vec<u8>,
    /// Events written so far (to separate them with commas).
    events: u64,
}

impl Out {
    fn s(&mut self, text: &str) -> &mut Self {
        self.text.extend_from_slice(text.as_bytes());
        self
    }

    fn u(&mut self, value: u64) -> &mut Self {
        self.text.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self
    }

    /// A time or duration in ns, written as Kineto does: microseconds with three decimals.
    fn us(&mut self, ns: u64) -> &mut Self {
        self.u(ns / 1000).s(".");
        let fraction = ns % 1000;
        if fraction < 100 {
            self.s("0");
        }
        if fraction < 10 {
            self.s("0");
        }
        self.u(fraction)
    }

    fn dim3(&mut self, dim: [u32; 3]) -> &mut Self {
        self.s("[").u(dim[0].into()).s(", ").u(dim[1].into()).s(", ").u(dim[2].into()).s("]")
    }

    /// Opens an event on (pid, tid): the separator, and `ph` through `dur` (`None` for flows).
    fn open(
        &mut self,
        ph: &str,
        cat: &str,
        name: &str,
        (pid, tid): (u64, u64),
        ts_ns: u64,
        dur_ns: Option<u64>,
    ) -> &mut Self {
        if self.events > 0 {
            self.s(",");
        }
        self.events += 1;
        self.s("\n  {\n    \"ph\": \"").s(ph).s("\", \"cat\": \"").s(cat).s("\", \"name\": \"").s(name);
        self.s("\", \"pid\": ").u(pid).s(", \"tid\": ").u(tid).s(",\n    \"ts\": ").us(ts_ns);
        if let Some(dur_ns) = dur_ns {
            self.s(", \"dur\": ").us(dur_ns);
        }
        self
    }
}

/// Where the CPU threads and GPU streams are, and the running ids.
struct Clock {
    cpu_ns: u64,
    compute_free_ns: u64,
    nccl_free_ns: u64,
    correlation: u64,
    external_id: u64,
    event_index: u64,
    python_id: u64,
}

/// Counts of what was written, for the summary line.
#[derive(Default)]
struct Counts {
    python: u64,
    cpu_ops: u64,
    runtime: u64,
    kernels: u64,
    nccl_kernels: u64,
    copies: u64,
    annotations: u64,
    flows: u64,
}

struct Generator {
    out: Out,
    clock: Clock,
    jitter: Jitter,
    counts: Counts,
}

impl Generator {
    fn python_frame(&mut self, name: &str, tid: u64, start_ns: u64, end_ns: u64, parent: u64) -> u64 {
        self.clock.python_id += 1;
        let id = self.clock.python_id;
        self.clock.event_index += 1;
        let index = self.clock.event_index;
        self.out.open("X", "python_function", name, (PID, tid), start_ns, Some(end_ns - start_ns));
        self.out.s(",\n    \"args\": {\n      \"Python parent id\": ").u(parent).s(", \"Python id\": ").u(id);
        self.out.s(", \"Ev Idx\": ").u(index).s(", \"Python thread\": 0\n    }\n  }");
        self.counts.python += 1;
        id
    }

    fn cpu_op(&mut self, name: &str, tid: u64, start_ns: u64, end_ns: u64, dims: &str, types: &str) {
        self.clock.external_id += 1;
        self.clock.event_index += 1;
        let (external, index) = (self.clock.external_id, self.clock.event_index);
        self.out.open("X", "cpu_op", name, (PID, tid), start_ns, Some(end_ns - start_ns));
        self.out.s(",\n    \"args\": {\n      \"External id\": ").u(external).s(",\"Record function id\": 0, ");
        self.out.s("\"Input Dims\": ").s(dims).s(", \"Input type\": ").s(types);
        self.out.s(", \"Sequence number\": ").u(external / 3).s(", \"Fwd thread id\": 0, \"Ev Idx\": ").u(index);
        self.out.s("\n    }\n  }");
        self.counts.cpu_ops += 1;
    }

    /// A runtime or driver call; returns its correlation id.
    fn api_call(&mut self, cat: &str, name: &str, cbid: u64, tid: u64, start_ns: u64, end_ns: u64) -> u64 {
        self.clock.correlation += 1;
        let correlation = self.clock.correlation;
        self.out.open("X", cat, name, (PID, tid), start_ns, Some(end_ns - start_ns));
        self.out.s(",\n    \"args\": {\n      \"External id\": ").u(self.clock.external_id).s(", \"cbid\": ").u(cbid);
        self.out.s(", \"correlation\": ").u(correlation).s("\n    }\n  }");
        self.counts.runtime += 1;
        correlation
    }

    fn flows(&mut self, correlation: u64, cpu_tid: u64, launch_ns: u64, stream: u64, gpu_ns: u64) {
        self.out.open("s", "ac2g", "ac2g", (PID, cpu_tid), launch_ns, None);
        self.out.s(", \"id\": ").u(correlation).s("\n  }");
        self.out.open("f", "ac2g", "ac2g", (GPU, stream), gpu_ns, None);
        self.out.s(", \"id\": ").u(correlation).s(", \"bp\": \"e\"\n  }");
        self.counts.flows += 2;
    }

    /// The kernel's args up to (not including) the closing of `args`.
    fn kernel_open(&mut self, op: &Op, stream: u64, correlation: u64, start_ns: u64, dur_ns: u64) {
        self.out.open("X", "kernel", op.kernel, (GPU, stream), start_ns, Some(dur_ns));
        self.out.s(",\n    \"args\": {\n      \"External id\": ").u(self.clock.external_id).s(", \"device\": 0");
        self.out.s(", \"stream\": ").u(stream).s(", \"correlation\": ").u(correlation);
        self.out.s(", \"registers per thread\": ").u(op.registers.into()).s(", \"shared memory\": ");
        self.out.u(op.shared_bytes.into()).s(", \"blocks per SM\": 1, \"warps per SM\": 12");
        self.out.s(", \"grid\": ").dim3(op.grid).s(", \"block\": ").dim3(op.block);
        self.out.s(", \"est. achieved occupancy %\": 19");
        self.counts.kernels += 1;
    }

    /// One op on `tid`: its Python frames (when it has them), the op and its nested op, the launch, the flow
    /// and the kernel on the compute stream.
    fn compute_op(&mut self, op: &Op, tid: u64) {
        let start_ns = self.clock.cpu_ns;
        let depth = op.python.len() as u64;
        let frame_ns = 1_500;
        let op_start_ns = start_ns + depth * frame_ns;
        let inner_start_ns = op_start_ns + self.jitter.between(2_000, 6_000);
        let launch_start_ns = inner_start_ns + self.jitter.between(3_000, 9_000);
        let launch_end_ns = launch_start_ns + self.jitter.between(3_500, 8_000);
        let inner_end_ns = launch_end_ns + 1_200;
        let op_end_ns = inner_end_ns + 900;
        let end_ns = op_end_ns + depth * frame_ns;
        let mut parent = 0;
        for (level, frame) in op.python.iter().enumerate() {
            let level = level as u64;
            parent = self.python_frame(frame, tid, start_ns + level * frame_ns, end_ns - level * frame_ns, parent);
        }
        self.cpu_op(op.outer, tid, op_start_ns, op_end_ns, op.dims, op.types);
        // The output's allocation and a view: ops that launch nothing, as most recorded ops.
        self.cpu_op(
            "aten::empty",
            tid,
            op_start_ns + 500,
            op_start_ns + 1_400,
            "[[], [], [], [], [], []]",
            EMPTY_TYPES,
        );
        self.cpu_op("aten::as_strided", tid, op_start_ns + 1_500, op_start_ns + 1_900, op.dims, op.types);
        self.cpu_op(op.inner, tid, inner_start_ns, inner_end_ns, op.dims, op.types);
        let correlation = self.api_call("cuda_runtime", "cudaLaunchKernel", 211, tid, launch_start_ns, launch_end_ns);
        let kernel_start_ns = self.clock.compute_free_ns.max(launch_end_ns + 4_000);
        let kernel_ns = self.jitter.around(op.mean_ns);
        self.kernel_open(op, COMPUTE_STREAM, correlation, kernel_start_ns, kernel_ns);
        self.out.s("\n    }\n  }");
        self.flows(correlation, tid, launch_start_ns, COMPUTE_STREAM, kernel_start_ns);
        self.clock.compute_free_ns = kernel_start_ns + kernel_ns + 1_000;
        self.clock.cpu_ns = end_ns + self.jitter.between(1_000, 4_000);
        if !op.python.is_empty() {
            // Attribute look-ups and hooks between ops: Python calls that reach no op.
            for frame in ["torch/nn/modules/module.py(1940): __getattr__", "model.py(60): _maybe_checkpoint"] {
                let start_ns = self.clock.cpu_ns;
                self.python_frame(frame, tid, start_ns, start_ns + 800, 0);
                self.clock.cpu_ns += 1_300;
            }
        }
    }

    /// A tensor-parallel all-reduce of `elems` bf16 elements: Python frames on the main thread,
    /// `record_param_comms` and `nccl:all_reduce`, the stream handshake, the NCCL launch and its kernel.
    fn all_reduce(&mut self, tid: u64, elems: u64, with_python: bool) {
        let start_ns = self.clock.cpu_ns;
        let frames: &[&str] = if with_python {
            &[
                "torch/distributed/c10d_logger.py(81): wrapper",
                "torch/distributed/distributed_c10d.py(2806): all_reduce",
                "<built-in method allreduce of PyCapsule object at 0x7f3a2c1d6a30>",
            ]
        } else {
            &[]
        };
        let depth = frames.len() as u64;
        let frame_ns = 2_000;
        let annotation_start_ns = start_ns + depth * frame_ns;
        let comms_start_ns = annotation_start_ns + 4_000;
        let record_ns = comms_start_ns + 6_000;
        let wait_ns = record_ns + 3_000;
        let launch_start_ns = wait_ns + 4_000;
        let launch_end_ns = launch_start_ns + self.jitter.between(6_000, 12_000);
        let comms_end_ns = launch_end_ns + 3_000;
        let annotation_end_ns = comms_end_ns + 2_000;
        let end_ns = annotation_end_ns + depth * frame_ns;
        let mut parent = 0;
        for (level, frame) in frames.iter().enumerate() {
            let level = level as u64;
            parent = self.python_frame(frame, tid, start_ns + level * frame_ns, end_ns - level * frame_ns, parent);
        }
        self.clock.external_id += 1;
        self.clock.event_index += 1;
        let (external, index) = (self.clock.external_id, self.clock.event_index);
        self.out.open(
            "X",
            "user_annotation",
            "nccl:all_reduce",
            (PID, tid),
            annotation_start_ns,
            Some(annotation_end_ns - annotation_start_ns),
        );
        self.out
            .s(",\n    \"args\": {\n      \"External id\": ")
            .u(external)
            .s(", \"Ev Idx\": ")
            .u(index)
            .s("\n    }\n  }");
        self.counts.annotations += 1;
        self.clock.external_id += 1;
        self.clock.event_index += 1;
        let (external, index) = (self.clock.external_id, self.clock.event_index);
        self.out.open(
            "X",
            "cpu_op",
            "record_param_comms",
            (PID, tid),
            comms_start_ns,
            Some(comms_end_ns - comms_start_ns),
        );
        self.out.s(",\n    \"args\": {\n      \"External id\": ").u(external).s(",\"Record function id\": 0, ");
        self.collective_args(elems);
        self.out.s(", \"Ev Idx\": ").u(index).s("\n    }\n  }");
        self.counts.cpu_ops += 1;
        self.api_call("cuda_runtime", "cudaEventRecord", 135, tid, record_ns, record_ns + 1_500);
        self.api_call("cuda_runtime", "cudaStreamWaitEvent", 147, tid, wait_ns, wait_ns + 1_200);
        let correlation = self.api_call("cuda_driver", "cuLaunchKernelEx", 652, tid, launch_start_ns, launch_end_ns);
        // The NCCL stream waits for the compute stream's event; the compute stream then waits for the result.
        let kernel_start_ns = self.clock.nccl_free_ns.max(self.clock.compute_free_ns).max(launch_end_ns + 5_000);
        let kernel_ns = self.jitter.around(elems / 400 + 20_000);
        let op = Op {
            python: &[],
            outer: "",
            inner: "",
            dims: "",
            types: "",
            kernel: NCCL_ALL_REDUCE,
            grid: [24, 1, 1],
            block: [640, 1, 1],
            registers: 96,
            shared_bytes: 43_776,
            mean_ns: 0,
        };
        self.kernel_open(&op, NCCL_STREAM, correlation, kernel_start_ns, kernel_ns);
        self.out.s(", ");
        self.collective_args(elems);
        self.out.s("\n    }\n  }");
        self.counts.nccl_kernels += 1;
        self.flows(correlation, tid, launch_start_ns, NCCL_STREAM, kernel_start_ns);
        self.clock.nccl_free_ns = kernel_start_ns + kernel_ns;
        self.clock.compute_free_ns = self.clock.compute_free_ns.max(self.clock.nccl_free_ns + 2_000);
        self.clock.cpu_ns = end_ns + self.jitter.between(1_000, 4_000);
    }

    fn collective_args(&mut self, elems: u64) {
        self.out.s("\"Collective name\": \"allreduce\", \"dtype\": \"BFloat16\", \"In msg nelems\": ").u(elems);
        self.out.s(", \"Out msg nelems\": ").u(elems).s(", \"Group size\": ").u(GROUP_SIZE);
        self.out.s(", \"In split size\": \"[]\", \"Out split size\": \"[]\", \"Global rank start\": 0");
        self.out.s(", \"Global rank stride\": 1, \"Process Group Name\": \"0\", \"Process Group Description\": ");
        self.out.s("\"default_pg\", \"Process Group Ranks\": \"[0, 1, 2, 3, 4, 5, 6, 7]\"");
    }

    /// A copy or set on the compute stream, by its runtime call on the main thread.
    fn copy(&mut self, transfer: &Transfer) {
        let Transfer { name, api, cbid, bytes, bytes_per_us, memset } = *transfer;
        let tid = MAIN_TID;
        let start_ns = self.clock.cpu_ns;
        let end_ns = start_ns + self.jitter.between(5_000, 15_000);
        let correlation = self.api_call("cuda_runtime", api, cbid, tid, start_ns, end_ns);
        let gpu_start_ns = self.clock.compute_free_ns.max(end_ns + 3_000);
        let gpu_ns = bytes * 1000 / bytes_per_us + 1_500;
        let cat = if memset { "gpu_memset" } else { "gpu_memcpy" };
        self.out.open("X", cat, name, (GPU, COMPUTE_STREAM), gpu_start_ns, Some(gpu_ns));
        self.out.s(",\n    \"args\": {\n      \"External id\": ").u(self.clock.external_id);
        self.out.s(", \"device\": 0, \"context\": 1, \"stream\": ").u(COMPUTE_STREAM).s(", \"correlation\": ");
        self.out.u(correlation).s(", \"bytes\": ").u(bytes).s(", \"memory bandwidth (GB/s)\": ");
        self.out.u(bytes_per_us / 1000).s("\n    }\n  }");
        self.counts.copies += 1;
        self.flows(correlation, tid, start_ns, COMPUTE_STREAM, gpu_start_ns);
        self.clock.compute_free_ns = gpu_start_ns + gpu_ns + 1_000;
        self.clock.cpu_ns = end_ns + 2_000;
    }

    fn step(&mut self, step: u64) {
        let step_start_ns = self.clock.cpu_ns;
        let gpu_step_start_ns = self.clock.compute_free_ns.max(step_start_ns);
        self.clock.cpu_ns += 10_000;
        self.copy(&BATCH_IN);
        for _ in 0..LAYERS {
            for (index, op) in FORWARD.iter().enumerate() {
                self.compute_op(op, MAIN_TID);
                if FORWARD_ALL_REDUCE_AFTER.contains(&index) {
                    self.all_reduce(MAIN_TID, 8 * 4096 * 4096, true);
                }
            }
        }
        // Backward runs on the autograd thread while the main thread waits in `backward()`.
        for _ in 0..LAYERS {
            for (index, op) in BACKWARD.iter().enumerate() {
                self.compute_op(op, AUTOGRAD_TID);
                if BACKWARD_ALL_REDUCE_AFTER.contains(&index) {
                    self.all_reduce(AUTOGRAD_TID, 8 * 4096 * 4096, false);
                }
            }
        }
        self.copy(&ZERO_GRADIENTS);
        for _ in 0..OPTIMIZER_KERNELS {
            self.compute_op(&OPTIMIZER, MAIN_TID);
        }
        // `loss.item()`: copy out and wait for the GPU.
        self.copy(&LOSS_OUT);
        let sync_start_ns = self.clock.cpu_ns;
        self.clock.cpu_ns = self.clock.cpu_ns.max(self.clock.compute_free_ns) + 3_000;
        self.api_call("cuda_runtime", "cudaStreamSynchronize", 131, MAIN_TID, sync_start_ns, self.clock.cpu_ns);
        let step_end_ns = self.clock.cpu_ns + 5_000;
        let name = format!("ProfilerStep#{step}");
        self.clock.event_index += 1;
        let index = self.clock.event_index;
        self.out.open("X", "user_annotation", &name, (PID, MAIN_TID), step_start_ns, Some(step_end_ns - step_start_ns));
        self.out
            .s(",\n    \"args\": {\n      \"External id\": ")
            .u(self.clock.external_id)
            .s(", \"Ev Idx\": ")
            .u(index);
        self.out.s("\n    }\n  }");
        self.out.open(
            "X",
            "gpu_user_annotation",
            &name,
            (GPU, COMPUTE_STREAM),
            gpu_step_start_ns,
            Some(self.clock.compute_free_ns - gpu_step_start_ns),
        );
        self.out
            .s(",\n    \"args\": {\n      \"External id\": ")
            .u(self.clock.external_id)
            .s(", \"device\": 0, \"stream\": ");
        self.out.u(COMPUTE_STREAM).s("\n    }\n  }");
        self.counts.annotations += 2;
        self.clock.cpu_ns = step_end_ns + 50_000;
    }
}

struct Options {
    bytes: u64,
    output: PathBuf,
}

fn parse_args() -> Result<Options, String> {
    let mut bytes = None;
    let mut output = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bytes" => bytes = args.next().and_then(|v| v.parse::<u64>().ok()),
            "-o" => output = args.next().map(PathBuf::from),
            _ => return Err(format!("unknown argument '{arg}'")),
        }
    }
    match (bytes, output) {
        (Some(bytes), Some(output)) if bytes > 0 => Ok(Options { bytes, output }),
        _ => Err("usage: gen_large_kineto --bytes N -o FILE.json[.gz] (N: JSON text to write, at least)".to_owned()),
    }
}

const HEADER: &str = r#"{
  "schemaVersion": 1,
  "deviceProperties": [
    {
      "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045231616,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132,
      "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448
    }
  ],
  "cupti_version": 24,
  "cuda_runtime_version": 12080,
  "cuda_driver_version": 12080,
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": 1, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}], "nccl_version": "2.26.2"},
  "record_shapes": 1,
  "with_stack": 1,
  "trace_id": "2F4C8E61A7B94D0F9C3E5B7A1D2F4E60",
  "traceEvents": ["#;

fn run(options: &Options) -> Result<Counts, String> {
    let file = File::create(&options.output).map_err(|e| format!("{}: {e}", options.output.display()))?;
    let is_gzip = options.output.extension().is_some_and(|e| e == "gz");
    let mut sink: Box<dyn Write> = if is_gzip {
        Box::new(flate2::write::GzEncoder::new(BufWriter::with_capacity(1 << 20, file), flate2::Compression::fast()))
    } else {
        Box::new(BufWriter::with_capacity(1 << 20, file))
    };
    let io = |e: std::io::Error| format!("{}: {e}", options.output.display());
    let mut generator = Generator {
        out: Out { text: Vec::with_capacity(8 << 20), events: 0 },
        clock: Clock {
            cpu_ns: 2_000_000,
            compute_free_ns: 0,
            nccl_free_ns: 0,
            correlation: 0,
            external_id: 0,
            event_index: 0,
            python_id: 0,
        },
        jitter: Jitter(0x9E37_79B9_7F4A_7C15),
        counts: Counts::default(),
    };
    generator.out.s(HEADER);
    let mut written = 0u64;
    let mut step = 0;
    while written < options.bytes {
        generator.step(step);
        step += 1;
        sink.write_all(&generator.out.text).map_err(io)?;
        written += generator.out.text.len() as u64;
        generator.out.text.clear();
    }
    let out = &mut generator.out;
    for (name, pid, tid, value) in [
        ("process_name", PID, 0, "python3"),
        ("process_labels", PID, 0, "rank 0"),
        ("thread_name", PID, MAIN_TID, "thread 48213 (python3)"),
        ("thread_name", PID, AUTOGRAD_TID, "thread 48377 (pt_autograd_0)"),
        ("process_name", GPU, 0, "python3"),
        ("process_labels", GPU, 0, "GPU 0"),
        ("thread_name", GPU, COMPUTE_STREAM, "stream 7 "),
        ("thread_name", GPU, NCCL_STREAM, "stream 23 "),
    ] {
        let key = if name == "process_labels" { "labels" } else { "name" };
        out.s(",\n  {\n    \"name\": \"").s(name).s("\", \"ph\": \"M\", \"ts\": 2000.000, \"pid\": ").u(pid);
        out.s(", \"tid\": ").u(tid).s(",\n    \"args\": {\n      \"").s(key).s("\": \"").s(value).s("\"\n    }\n  }");
    }
    out.s("\n],\n  \"traceName\": \"").s(&options.output.display().to_string().replace(['\\', '"'], "_"));
    out.s("\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ").u(BASE_TIME_NS).s("\n}\n");
    sink.write_all(&out.text).map_err(io)?;
    written += out.text.len() as u64;
    sink.flush().map_err(io)?;
    drop(sink);
    eprintln!("wrote {written} bytes of JSON text, {step} steps, to {}", options.output.display());
    Ok(generator.counts)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("gen_large_kineto: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(c) => {
            let total = c.python + c.cpu_ops + c.runtime + c.kernels + c.copies + c.annotations + c.flows;
            eprintln!(
                "{total} events: {} python_function, {} cpu_op, {} cuda_runtime/cuda_driver, {} kernel ({} NCCL), \
                 {} gpu_memcpy/gpu_memset, {} annotations, {} ac2g flow events",
                c.python, c.cpu_ops, c.runtime, c.kernels, c.nccl_kernels, c.copies, c.annotations, c.flows
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("gen_large_kineto: {message}");
            ExitCode::FAILURE
        }
    }
}
