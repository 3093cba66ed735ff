//! Dense bf16 matrix-multiply throughput with cuBLAS (`cublasGemmEx`, fp32 accumulation), on LLM shapes.
//!
//! Shapes are written as an LLM linear layer sees them: `m` tokens, `k` input features, `n` output
//! features, `Y[m×n] = X[m×k] · W[n×k]ᵀ`, issued the way PyTorch issues it (cuBLAS column-major, transposed
//! weight). Inputs are random bf16 values in [−1, 1): all-zero inputs draw less power and can run at higher
//! clocks than real data allows.

use anyhow::{Context, Result};
use cudarc::cublas::{result as blas, sys};
use cudarc::driver::result as cu;

use crate::gpu::{Gpu, TimingPlan, time_per_launch_us};
use shardscope_bench::results::GemmResult;

/// `(m, n, k)` shapes measured by default: a square reference, Llama-7B-like MLP projections at 4096 tokens
/// (prefill), and decode-sized token counts against the same weights.
pub const DEFAULT_SHAPES: &[(u64, u64, u64)] = &[
    (8192, 8192, 8192),
    (4096, 11008, 4096),
    (4096, 4096, 11008),
    (4096, 4096, 4096),
    (64, 11008, 4096),
    (16, 11008, 4096),
    (4, 11008, 4096),
    (64, 4096, 4096),
    (4, 4096, 4096),
];

/// cuBLAS workspace; 32 MiB is what cuBLAS itself uses by default on Hopper and what PyTorch gives it.
const WORKSPACE_BYTES: usize = 32 << 20;

/// Uploads `elements` random bf16 values in [−1, 1) into a new buffer on `gpu`.
fn random_bf16_buffer(gpu: &Gpu, elements: usize, seed: u64) -> Result<crate::gpu::DeviceBuffer> {
    let buffer = gpu.alloc(elements * 2, 0)?;
    // xorshift64: cheap, deterministic, good enough to give the multipliers realistic bit patterns.
    let mut state = seed | 1;
    let values: Vec<u16> = (0..elements)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let uniform = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            // bf16 is the upper half of an f32.
            (uniform.to_bits() >> 16) as u16
        })
        .collect();
    gpu.bind()?;
    // SAFETY: the buffer holds `elements` u16 values.
    unsafe { cu::memcpy_htod_sync(buffer.pointer, &values) }.context("upload GEMM input")?;
    Ok(buffer)
}

/// Measures every shape on `gpu`; calls `report` with each row as it is measured.
pub fn measure(
    gpu: &Gpu,
    shapes: &[(u64, u64, u64)],
    plan: TimingPlan,
    mut report: impl FnMut(&GemmResult),
) -> Result<Vec<GemmResult>> {
    let largest = |elements: fn(&(u64, u64, u64)) -> u64| shapes.iter().map(elements).max().unwrap_or(0) as usize;
    let activations = random_bf16_buffer(gpu, largest(|&(m, _, k)| m * k), 0x9e37_79b9_7f4a_7c15)?;
    let weights = random_bf16_buffer(gpu, largest(|&(_, n, k)| n * k), 0xd1b5_4a32_d192_ed03)?;
    let outputs = gpu.alloc(largest(|&(m, n, _)| m * n) * 2, 0)?;
    let workspace = gpu.alloc(WORKSPACE_BYTES, 0)?;
    gpu.bind()?;
    let handle = blas::create_handle().context("cublasCreate")?;
    // Destroys the handle on every exit path.
    struct Handle(sys::cublasHandle_t);
    impl Drop for Handle {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { blas::destroy_handle(self.0) };
        }
    }
    let handle = Handle(handle);
    // SAFETY: handle, stream and workspace are live and belong to this GPU's context.
    unsafe {
        blas::set_stream(handle.0, gpu.stream as sys::cudaStream_t).context("cublasSetStream")?;
        sys::cublasSetWorkspace_v2(handle.0, workspace.as_ptr(), WORKSPACE_BYTES)
            .result()
            .context("cublasSetWorkspace")?;
    }
    let (alpha, beta) = (1.0f32, 0.0f32);
    let mut rows = Vec::new();
    for &(m, n, k) in shapes {
        let (m_i, n_i, k_i) = (m as i32, n as i32, k as i32);
        let time_us = time_per_launch_us(&[gpu], plan, || {
            // Column-major view of the row-major layer: Yᵀ[n×m] = W[n×k] · Xᵀ[k×m], W stored k-major
            // (hence OP_T, lda = k), X stored k-major (OP_N, ldb = k), Y n-major (ldc = n).
            // SAFETY: every buffer is at least as large as the largest shape needs.
            unsafe {
                sys::cublasGemmEx(
                    handle.0,
                    sys::cublasOperation_t::CUBLAS_OP_T,
                    sys::cublasOperation_t::CUBLAS_OP_N,
                    n_i,
                    m_i,
                    k_i,
                    (&alpha as *const f32).cast(),
                    weights.as_ptr(),
                    sys::cudaDataType::CUDA_R_16BF,
                    k_i,
                    activations.as_ptr(),
                    sys::cudaDataType::CUDA_R_16BF,
                    k_i,
                    (&beta as *const f32).cast(),
                    outputs.as_ptr(),
                    sys::cudaDataType::CUDA_R_16BF,
                    n_i,
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .result()
            .context("cublasGemmEx")
        })
        .with_context(|| format!("GEMM {m}x{n}x{k}"))?;
        let row = GemmResult {
            m,
            n,
            k,
            dtype: "bf16".into(),
            gpu: gpu.ordinal,
            time_us,
            tflops: 2.0 * (m * n * k) as f64 / (time_us * 1e6),
        };
        report(&row);
        rows.push(row);
    }
    gpu.synchronize()?;
    Ok(rows)
}
