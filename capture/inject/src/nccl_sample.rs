//! The NCCL kernel sample of `capture --comm-only` (see `NcclKernelSample` in `shardscope_spool::config`):
//! CUPTI times kernels from when the process starts recording until the NCCL profiler plugin says that enough
//! collectives have been launched ([`shardscope_nccl_sample_done`]) or the sample's time limit passes; then
//! the kernel kind is switched off for the rest of the run. The kernels it recorded tell the launcher how
//! NCCL's channel timers sit inside their kernels (start-up before the first channel, wind-down after the last).
//!
//! The sample runs while recording is on: from the start for a capture that records from the start, from the first
//! window otherwise, and no longer than that window. The switch off at the plugin's word or the time limit runs on
//! the background thread, never inside NCCL's or the workload's calls. Records of kernels launched before it are
//! kept: CUPTI made them at launch and delivers them when the kernels end.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::config::NcclKernelSample;

/// The sample of this process, when one was asked for.
static SAMPLE: OnceLock<Sample> = OnceLock::new();

/// Waiting for recording to switch on (the first window).
const PENDING: u8 = 0;
/// Kernels are being timed.
const RUNNING: u8 = 1;
/// Done: the kernel kind is off again.
const ENDED: u8 = 2;

struct Sample {
    api: &'static cupti::Cupti,
    max: Duration,
    state: AtomicU8,
    /// When a running sample ends at the latest.
    ends_at: Mutex<Option<Instant>>,
    /// The plugin has seen enough collectives launched.
    done_asked: AtomicBool,
    /// Wakes the background thread for a look ([`tick`]) now.
    wake: fn(),
}

/// Sets the sample up; it starts when recording switches on ([`window_switched`]: at once for a capture that
/// records from the start, at the first window otherwise), so a process that waits for its window pays nothing.
/// `wake` wakes the background thread that calls [`tick`].
pub(crate) fn prepare(api: &'static cupti::Cupti, sample: NcclKernelSample, wake: fn()) {
    if sample.collectives == 0 {
        return;
    }
    let _ = SAMPLE.set(Sample {
        api,
        max: Duration::from_millis(sample.max_ms),
        state: AtomicU8::new(PENDING),
        ends_at: Mutex::new(None),
        done_asked: AtomicBool::new(false),
        wake,
    });
}

/// Recording switched on or off: the sample starts with the first window and ends with it at the latest (its
/// kernels outside a window would have no channel times to pair with).
pub(crate) fn window_switched(on: bool) {
    let Some(sample) = SAMPLE.get() else { return };
    // Callers hold the window machine's lock, so two switches never race here; the limit is set before the
    // sample is marked running, so the background thread never sees a running sample without it.
    if on && sample.state.load(Ordering::SeqCst) == PENDING {
        *sample.ends_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + sample.max);
        sample.state.store(RUNNING, Ordering::SeqCst);
        // SAFETY: plain call with a valid kind constant.
        let result = unsafe { sample.api.cuptiActivityEnable(cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
        if result != 0 {
            eprintln!("shardscope: cannot time the NCCL kernel sample (CUPTI error {result})");
            sample.state.store(ENDED, Ordering::SeqCst);
        }
    } else if !on {
        end(sample);
    }
}

/// Called by the NCCL profiler plugin once its sample of collectives has been launched: the background thread
/// switches kernel timing off at its next look ([`tick`]), which this call brings forward.
#[unsafe(no_mangle)]
pub extern "C" fn shardscope_nccl_sample_done() {
    if let Some(sample) = SAMPLE.get() {
        sample.done_asked.store(true, Ordering::Relaxed);
        (sample.wake)();
    }
}

/// Whether kernels are being timed for the sample now.
pub fn sampling() -> bool {
    SAMPLE.get().is_some_and(|s| s.state.load(Ordering::SeqCst) == RUNNING)
}

/// The background thread's look: ends the sample when it is done or due; returns how long until it is due
/// (`Duration::MAX` when no sample is running).
pub(crate) fn tick(now: Instant) -> Duration {
    let Some(sample) = SAMPLE.get() else { return Duration::MAX };
    if sample.state.load(Ordering::SeqCst) != RUNNING {
        return Duration::MAX;
    }
    let ends_at = sample.ends_at.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(now + sample.max);
    if now < ends_at && !sample.done_asked.load(Ordering::Relaxed) {
        return ends_at - now;
    }
    end(sample);
    Duration::MAX
}

/// Switches kernel timing off, once, if the sample is running.
fn end(sample: &Sample) {
    if sample.state.compare_exchange(RUNNING, ENDED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
        // SAFETY: plain call with a valid kind constant.
        unsafe { sample.api.cuptiActivityDisable(cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
    }
}
