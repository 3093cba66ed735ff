//! NCCL all-reduce, all-gather and reduce-scatter over a message-size sweep, in the manner of nccl-tests
//! run with one process driving all GPUs (`-g N`).
//!
//! One communicator per GPU comes from `ncclCommInitAll`. Each measured launch is one NCCL group holding the
//! call for every rank; events on every rank's stream frame the timed launches and the slowest rank's span
//! is the collective's time. Buffers are bf16 and out of place. The size S is the all-reduce buffer, or the
//! whole gathered (all-gather output) / scattered (reduce-scatter input) buffer, as nccl-tests counts it.

use std::ffi::CStr;

use anyhow::{Result, bail};
use cudarc::nccl::sys as nccl;

use crate::gpu::{DeviceBuffer, Gpu, TimingPlan, time_per_launch_us};
use shardscope_bench::results::{CollectiveOp, CollectiveResult, busbw_factor};

/// Bytes per bf16 element.
const BF16_BYTES: usize = 2;

/// Turns an NCCL status into an error that names the call and NCCL's own explanation.
fn check(status: nccl::ncclResult_t, call: &str) -> Result<()> {
    if status == nccl::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any status.
    let text = unsafe { CStr::from_ptr(nccl::ncclGetErrorString(status)) }.to_string_lossy();
    bail!("{call} failed: {status:?} ({text})")
}

/// NCCL's version number, e.g. 22803 for 2.28.3.
pub fn nccl_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: valid out-parameter.
    check(unsafe { nccl::ncclGetVersion(&mut version) }, "ncclGetVersion")?;
    Ok(version)
}

/// One communicator per GPU, destroyed on drop.
pub struct Communicators {
    comms: Vec<nccl::ncclComm_t>,
}

impl Communicators {
    /// Creates communicators for all `gpus` with `ncclCommInitAll`.
    pub fn new(gpus: &[Gpu]) -> Result<Self> {
        let ordinals: Vec<i32> = gpus.iter().map(|gpu| gpu.ordinal as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        // SAFETY: `comms` has one slot per ordinal.
        check(
            // SAFETY: `comms` has one slot per ordinal.
            unsafe { nccl::ncclCommInitAll(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr()) },
            "ncclCommInitAll",
        )?;
        Ok(Communicators { comms })
    }
}

impl Drop for Communicators {
    fn drop(&mut self) {
        for &comm in &self.comms {
            // SAFETY: each communicator was created by ncclCommInitAll and is destroyed once.
            unsafe {
                let _ = nccl::ncclCommDestroy(comm);
            }
        }
    }
}

/// Enqueues one `op` of `bytes` (S) on every rank inside one NCCL group.
fn launch(
    op: CollectiveOp,
    bytes: usize,
    gpus: &[Gpu],
    communicators: &Communicators,
    sends: &[DeviceBuffer],
    receives: &[DeviceBuffer],
) -> Result<()> {
    let nranks = gpus.len();
    let elements = bytes / BF16_BYTES;
    let bf16 = nccl::ncclDataType_t::ncclBfloat16;
    let sum = nccl::ncclRedOp_t::ncclSum;
    // SAFETY: group calls have no preconditions.
    check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart")?;
    for rank in 0..nranks {
        let (send, receive) = (sends[rank].as_ptr(), receives[rank].as_ptr());
        let (comm, stream) = (communicators.comms[rank], gpus[rank].stream as nccl::cudaStream_t);
        // SAFETY: every buffer holds at least `bytes` bytes on the rank's GPU; counts stay within them.
        let status = unsafe {
            match op {
                CollectiveOp::AllReduce => nccl::ncclAllReduce(send, receive, elements, bf16, sum, comm, stream),
                CollectiveOp::AllGather => nccl::ncclAllGather(send, receive, elements / nranks, bf16, comm, stream),
                CollectiveOp::ReduceScatter => {
                    nccl::ncclReduceScatter(send, receive, elements / nranks, bf16, sum, comm, stream)
                }
            }
        };
        if let Err(error) = check(status, op.as_str()) {
            // Close the group so NCCL is left in a usable state before reporting.
            // SAFETY: matches the ncclGroupStart above.
            let _ = unsafe { nccl::ncclGroupEnd() };
            return Err(error);
        }
    }
    // SAFETY: matches the ncclGroupStart above.
    check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd")
}

/// Rounds `bytes` down so every rank gets a whole number of bf16 elements.
pub fn message_bytes(bytes: usize, nranks: usize) -> usize {
    let granule = BF16_BYTES * nranks.max(1);
    bytes / granule * granule
}

/// Measures every op in [`CollectiveOp::ALL`] at every size; calls `report` with each row as it is measured.
pub fn measure(
    gpus: &[Gpu],
    sizes_bytes: &[usize],
    plan: TimingPlan,
    mut report: impl FnMut(&CollectiveResult),
) -> Result<Vec<CollectiveResult>> {
    let nranks = gpus.len();
    if nranks < 2 {
        bail!("collectives need at least 2 GPUs, {nranks} visible");
    }
    let communicators = Communicators::new(gpus)?;
    let largest = sizes_bytes.iter().copied().max().unwrap_or(0);
    let sends = gpus.iter().map(|gpu| gpu.alloc(largest, 0)).collect::<Result<Vec<_>>>()?;
    let receives = gpus.iter().map(|gpu| gpu.alloc(largest, 0)).collect::<Result<Vec<_>>>()?;
    let timed_gpus: Vec<&Gpu> = gpus.iter().collect();
    let mut rows = Vec::new();
    for op in CollectiveOp::ALL {
        for &requested in sizes_bytes {
            let bytes = message_bytes(requested, nranks);
            if bytes == 0 {
                continue;
            }
            let time_us =
                time_per_launch_us(&timed_gpus, plan, || launch(op, bytes, gpus, &communicators, &sends, &receives))?;
            let algbw_gbps = bytes as f64 / (time_us * 1e3);
            let row = CollectiveResult {
                op,
                nranks: nranks as u32,
                dtype: "bf16".into(),
                bytes: bytes as u64,
                time_us,
                algbw_gbps,
                busbw_gbps: algbw_gbps * busbw_factor(op, nranks as u32),
            };
            report(&row);
            rows.push(row);
        }
    }
    for gpu in gpus {
        gpu.bind()?;
        gpu.synchronize()?;
    }
    Ok(rows)
}
