//! Copy bandwidth: device-to-device within each GPU, and peer-to-peer for every ordered GPU pair.
//!
//! Each copy's bytes are counted once (a d2d copy reads and writes them, so the memory system moves twice
//! as much; nccl-tests and `nvbandwidth` report it the same way). Peer copies are issued on the source GPU's
//! stream with peer access enabled in both directions, so they take the direct link (NVLink or PCIe) rather
//! than staging through host memory.

use anyhow::{Context, Result};
use cudarc::driver::{result as cu, sys};

use crate::gpu::{Gpu, TimingPlan, time_per_launch_us};
use shardscope_bench::results::{CopyKind, CopyResult};

/// Enables direct access from every GPU to every other one that supports it. Returns the pairs
/// `(from, to)` that cannot reach each other directly.
pub fn enable_peer_access(gpus: &[Gpu]) -> Result<Vec<(u32, u32)>> {
    let mut unreachable = Vec::new();
    for from in gpus {
        for to in gpus {
            if from.ordinal == to.ordinal {
                continue;
            }
            let mut can_access = 0;
            // SAFETY: valid device handles and out-parameter.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can_access, from.device, to.device) }
                .result()
                .context("cuDeviceCanAccessPeer")?;
            if can_access == 0 {
                unreachable.push((from.ordinal, to.ordinal));
                continue;
            }
            from.bind()?;
            // SAFETY: the peer context is retained and differs from the current one.
            let status = unsafe { sys::cuCtxEnablePeerAccess(to.context, 0) };
            if status != sys::CUresult::CUDA_SUCCESS && status != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            {
                status.result().with_context(|| format!("cuCtxEnablePeerAccess {} -> {}", from.ordinal, to.ordinal))?;
            }
        }
    }
    Ok(unreachable)
}

/// Measures d2d on each GPU and p2p for each reachable ordered pair over `sizes_bytes`; calls `report`
/// with each row as soon as it is measured.
pub fn measure(
    gpus: &[Gpu],
    sizes_bytes: &[usize],
    plan: TimingPlan,
    unreachable: &[(u32, u32)],
    mut report: impl FnMut(&CopyResult),
) -> Result<Vec<CopyResult>> {
    let largest = sizes_bytes.iter().copied().max().unwrap_or(0);
    // Two buffers of the largest size per GPU: a source and a destination. The source is filled with a
    // non-zero byte so that nothing can shortcut an all-zero copy.
    let sources = gpus.iter().map(|gpu| gpu.alloc(largest, 0x5a)).collect::<Result<Vec<_>>>()?;
    let destinations = gpus.iter().map(|gpu| gpu.alloc(largest, 0)).collect::<Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    for (src_index, src_gpu) in gpus.iter().enumerate() {
        for (dst_index, dst_gpu) in gpus.iter().enumerate() {
            if unreachable.contains(&(src_gpu.ordinal, dst_gpu.ordinal)) {
                continue;
            }
            let kind = if src_index == dst_index { CopyKind::D2d } else { CopyKind::P2p };
            for &bytes in sizes_bytes {
                let source = &sources[src_index];
                let destination = &destinations[dst_index];
                src_gpu.bind()?;
                let time_us = time_per_launch_us(&[src_gpu], plan, || {
                    // SAFETY: both buffers hold at least `bytes` bytes and live until after synchronisation.
                    unsafe {
                        if kind == CopyKind::D2d {
                            cu::memcpy_dtod_async(destination.pointer, source.pointer, bytes, src_gpu.stream)
                        } else {
                            cu::memcpy_peer_async(
                                dst_gpu.context,
                                destination.pointer,
                                src_gpu.context,
                                source.pointer,
                                bytes,
                                src_gpu.stream,
                            )
                        }
                    }
                    .context("copy launch")
                })
                .with_context(|| {
                    format!("{kind:?} copy {} -> {} of {bytes} bytes", src_gpu.ordinal, dst_gpu.ordinal)
                })?;
                let row = CopyResult {
                    kind,
                    src: src_gpu.ordinal,
                    dst: dst_gpu.ordinal,
                    bytes: bytes as u64,
                    time_us,
                    gbps: bytes as f64 / (time_us * 1e3),
                };
                report(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}
