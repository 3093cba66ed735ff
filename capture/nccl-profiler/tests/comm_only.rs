//! What `capture --comm-only` rests on, driven through the exported `ncclProfiler_v5` table as NCCL 2.28
//! drives it: with kernel-channel timers asked for, the plugin asks NCCL for kernel-channel events and
//! spools every channel's GPU start and stop with the host time it heard of them; read back, the channels
//! place the GPU timer on the wall clock and each collective becomes one kernel at its GPU times; a
//! collective whose channels never came, or came in part, is counted. The kernel sample's count of
//! collectives runs down as they are launched.

use std::ffi::{c_int, c_void};
use std::time::{SystemTime, UNIX_EPOCH};

use shardscope_capture::nccl_spool::read_process;
use shardscope_capture::nccl_timers;
use shardscope_model::{DeviceIdx, ProcessIdx, Trace};
use shardscope_nccl_profiler::ffi::{self, EventDescrV5, StateArgsV4, event};
use shardscope_nccl_profiler::plugin::{self, ncclProfiler_v5};

/// The GPU timer runs this far ahead of the wall clock.
const TIMER_AHEAD_NS: i64 = 351_000;
/// The kernel wrote each time this long before the test hands it to the plugin.
const WRITTEN_BEFORE_NS: i64 = 5_000;

fn wall_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn start(context: *mut c_void, d: &mut EventDescrV5) -> *mut c_void {
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid descriptor and handle slot, as NCCL passes them.
    assert_eq!(unsafe { (ncclProfiler_v5.start_event)(context, &mut handle, d) }, ffi::NCCL_SUCCESS);
    handle
}

fn descr(event_type: u64, parent: *mut c_void) -> EventDescrV5 {
    // SAFETY: an all-zero descriptor is valid (null pointers, zero numbers), as NCCL's `= {}`.
    let mut d: EventDescrV5 = unsafe { std::mem::zeroed() };
    (d.event_type, d.parent_obj, d.rank) = (event_type, parent, 0);
    d
}

fn all_reduce(context: *mut c_void, seq: u64, n_channels: u8) -> *mut c_void {
    let group = start(context, &mut descr(event::GROUP, std::ptr::null_mut()));
    let mut d = descr(event::COLL, std::ptr::null_mut());
    // SAFETY: zeroed union member, filled as NCCL fills a collective.
    d.u.coll = ffi::CollV5 {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 8192,
        root: 0,
        datatype: c"ncclBfloat16".as_ptr(),
        n_channels,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"LL".as_ptr(),
        parent_group: group,
    };
    let coll = start(context, &mut d);
    // SAFETY: handles from start_event; NCCL stops a collective once it is enqueued.
    unsafe {
        (ncclProfiler_v5.stop_event)(coll);
        (ncclProfiler_v5.stop_event)(group);
    }
    coll
}

/// One channel that ran `duration_ns` and ended just now (its stop reported `WRITTEN_BEFORE_NS` after the
/// kernel wrote it); `stopped: false` leaves its stop unreported. Returns its wall-clock span.
fn channel(context: *mut c_void, coll: *mut c_void, index: u8, duration_ns: i64, stopped: bool) -> (i64, i64) {
    let end = wall_ns() - WRITTEN_BEFORE_NS;
    let begin = end - duration_ns;
    let mut d = descr(event::KERNEL_CH, coll);
    d.u.kernel_ch = ffi::KernelChV4 { channel_id: index, p_timer: (begin + TIMER_AHEAD_NS) as u64 };
    let handle = start(context, &mut d);
    assert!(!handle.is_null());
    if stopped {
        let mut args = StateArgsV4 { kernel_ch_p_timer: (end + TIMER_AHEAD_NS) as u64 };
        // SAFETY: a kernel-channel handle and filled state arguments, as NCCL passes them.
        unsafe { (ncclProfiler_v5.record_event_state)(handle, ffi::STATE_KERNEL_CH_STOP, &mut args) };
    }
    // SAFETY: a handle from start_event.
    unsafe { (ncclProfiler_v5.stop_event)(handle) };
    (begin, end)
}

#[test]
fn channel_timers_become_kernels_on_the_host_clock() {
    let dir = std::env::temp_dir().join(format!("shardscope-nccl-comm-only-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe {
        std::env::set_var(plugin::SPOOL_DIR_ENV, &dir);
        std::env::set_var(plugin::KERNEL_TIMERS_ENV, "1");
        std::env::set_var(shardscope_spool::config::NCCL_KERNEL_SAMPLE_ENV, "3/60000");
    }
    let (mut context, mut mask): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
    // SAFETY: valid out-pointers and a C string.
    unsafe { (ncclProfiler_v5.init)(&mut context, 0x5eed, &mut mask, c"tp".as_ptr(), 1, 2, 0, None) };
    assert_eq!(mask as u64 & event::KERNEL_CH, event::KERNEL_CH, "timers asked for: kernel-channel events requested");

    let session_start = wall_ns() - 1_000_000;
    // seq 0 and 1: both channels; seq 2: one channel of two; seq 3: a channel without its stop; seq 4: none.
    let mut spans = Vec::new();
    for seq in 0..2 {
        let coll = all_reduce(context, seq, 2);
        let a = channel(context, coll, 0, 20_000, true);
        let b = channel(context, coll, 1, 18_000, true);
        spans.push((a.0.min(b.0), a.1.max(b.1)));
    }
    assert_eq!(plugin::nccl_sample_left(), 1, "two of the three collectives of the kernel sample launched");
    let coll = all_reduce(context, 2, 2);
    assert_eq!(plugin::nccl_sample_left(), 0, "the sample is over");
    spans.push(channel(context, coll, 0, 15_000, true));
    let coll = all_reduce(context, 3, 2);
    spans.push(channel(context, coll, 0, 12_000, true));
    channel(context, coll, 1, 12_000, false);
    all_reduce(context, 4, 2);
    // SAFETY: the context from init.
    unsafe { (ncclProfiler_v5.finalize)(context) };

    let process = read_process(&plugin::spool_path().unwrap()).unwrap();
    assert_eq!(process.operations.len(), 5);
    assert_eq!(process.channels.len(), 7);
    assert_eq!(process.channels.iter().filter(|c| c.gpu_stop_ns.is_none()).count(), 1);
    assert!(process.comm_devices.is_empty(), "no CUDA driver in a test process: no GPU recorded");
    let clock = nccl_timers::estimate_gpu_clock(&process).unwrap();
    assert_eq!(clock.reports, 13, "7 starts and 6 stops");
    // Every report came at least WRITTEN_BEFORE_NS after the time it carries: the estimate is at most that
    // far behind, and within a few milliseconds (the time between reading the clock and the callback).
    let behind = TIMER_AHEAD_NS - clock.timer_minus_utc_ns;
    assert!((WRITTEN_BEFORE_NS..WRITTEN_BEFORE_NS + 5_000_000).contains(&behind), "{behind}");

    let mut trace = Trace::default();
    let (stats, links) =
        nccl_timers::add_timer_kernels(&mut trace, ProcessIdx(0), DeviceIdx(0), &process, Some(&clock), session_start);
    assert_eq!(
        stats,
        nccl_timers::TimerKernelStats {
            launches: 4,
            launches_without_channels: 1,
            launches_partial: 2,
            channels_without_stop: 1
        }
    );
    assert_eq!(links.iter().flatten().count(), 4);
    for (kernel, (begin, end)) in trace.kernels.iter().zip(&spans) {
        // The kernel spans its channels, on the session clock, late by the estimate's lag only.
        assert_eq!(kernel.start_ns, begin - session_start + behind);
        assert_eq!(kernel.end_ns - kernel.start_ns, end - begin);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
