//! The NCCL kernel sample of `capture --comm-only` (see `NcclKernelSample` in `shardscope_spool::config`):
//! CUPTI times kernels from the start of the process until the NCCL profiler plugin says that enough
//! collectives have been launched ([`shardscope_nccl_sample_done`]) or the sample's time limit passes; then
//! the kernel kind is switched off for the rest of the run. The kernels it recorded tell the launcher how
//! NCCL's channel timers sit inside their kernels (start-up before the first channel, wind-down after the last).
//!
//! The switch off runs on the background thread, never inside NCCL's or the workload's calls. Records of
//! kernels launched before it are kept: CUPTI made them at launch and delivers them when the kernels end.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::config::NcclKernelSample;

/// The sample of this process, when one was asked for.
static SAMPLE: OnceLock<Sample> = OnceLock::new();

struct Sample {
    api: &'static cupti::Cupti,
    ends_at: Instant,
    /// The plugin has seen enough collectives launched.
    done_asked: AtomicBool,
    /// The kernel kind is off again.
    ended: AtomicBool,
}

/// Switches CUPTI's kernel timing on for the sample. Errors name CUPTI's refusal.
pub(crate) fn start(api: &'static cupti::Cupti, sample: NcclKernelSample) -> Result<(), String> {
    if sample.collectives == 0 || SAMPLE.get().is_some() {
        return Ok(());
    }
    // SAFETY: plain call with a valid kind constant.
    let result = unsafe { api.cuptiActivityEnable(cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
    if result != 0 {
        return Err(format!("cannot time the NCCL kernel sample (CUPTI error {result})"));
    }
    let ends_at = Instant::now() + Duration::from_millis(sample.max_ms);
    let _ = SAMPLE.set(Sample { api, ends_at, done_asked: AtomicBool::new(false), ended: AtomicBool::new(false) });
    Ok(())
}

/// Called by the NCCL profiler plugin once its sample of collectives has ended: the background thread
/// switches kernel timing off at its next look ([`tick`]), which this call brings forward.
#[unsafe(no_mangle)]
pub extern "C" fn shardscope_nccl_sample_done() {
    if let Some(sample) = SAMPLE.get() {
        sample.done_asked.store(true, Ordering::Relaxed);
        crate::live::wake_background();
    }
}

/// Whether kernels are being timed for the sample now.
pub fn sampling() -> bool {
    SAMPLE.get().is_some_and(|s| !s.ended.load(Ordering::Relaxed))
}

/// The background thread's look: ends the sample when it is done or due; returns how long until it is due
/// (`Duration::MAX` when there is no sample running).
pub(crate) fn tick(now: Instant) -> Duration {
    let Some(sample) = SAMPLE.get() else { return Duration::MAX };
    if sample.ended.load(Ordering::Relaxed) {
        return Duration::MAX;
    }
    if sample.done_asked.load(Ordering::Relaxed) || now >= sample.ends_at {
        // SAFETY: plain call with a valid kind constant, on the background thread (no lock of ours held).
        unsafe { sample.api.cuptiActivityDisable(cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
        sample.ended.store(true, Ordering::Relaxed);
        return Duration::MAX;
    }
    sample.ends_at - now
}
