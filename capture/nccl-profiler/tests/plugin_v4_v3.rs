//! The v4 and v3 tables, driven as NCCL 2.26/2.27 and 2.25 drive them: a collective whose parent
//! is its group, a kernel channel, a point-to-point operation; v3 carries the communicator id in
//! each descriptor instead of `init`.

use std::ffi::{c_int, c_void};

use shardscope_capture::nccl_spool::read_process;
use shardscope_io::nccl::OpKind;
use shardscope_nccl_profiler::ffi::{self, EventDescrV3, EventDescrV4, StateArgsV4, event};
use shardscope_nccl_profiler::plugin::{self, ncclProfiler_v3, ncclProfiler_v4};

#[test]
fn v4_and_v3_calls_are_recorded() {
    let dir = std::env::temp_dir().join(format!("shardscope-nccl-v4-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe { std::env::set_var(plugin::SPOOL_DIR_ENV, &dir) };
    // Kernel-channel events are opt-in; this test drives them.
    // SAFETY: as above.
    unsafe { std::env::set_var(plugin::KERNEL_TIMERS_ENV, "1") };

    // ---- v4
    let (mut context, mut mask): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; v4 passes the name before the hash.
    unsafe { (ncclProfiler_v4.init)(&mut context, &mut mask, c"dp".as_ptr(), 0x44, 1, 4, 3, None) };
    assert_eq!(mask as u64 & event::KERNEL_CH, event::KERNEL_CH);
    // SAFETY: zeroed descriptors are what NCCL starts from; slots are valid.
    unsafe {
        let mut group: *mut c_void = std::ptr::null_mut();
        let mut d: EventDescrV4 = std::mem::zeroed();
        d.event_type = event::GROUP as u8;
        (ncclProfiler_v4.start_event)(context, &mut group, &mut d);

        let mut coll: *mut c_void = std::ptr::null_mut();
        let mut d: EventDescrV4 = std::mem::zeroed();
        d.event_type = event::COLL as u8;
        d.parent_obj = group;
        d.rank = 3;
        d.u.coll.seq_number = 5;
        d.u.coll.func = c"ReduceScatter".as_ptr();
        d.u.coll.datatype = c"ncclFloat16".as_ptr();
        d.u.coll.count = 100;
        d.u.coll.n_channels = 4;
        d.u.coll.algo = c"RING".as_ptr();
        d.u.coll.proto = c"SIMPLE".as_ptr();
        (ncclProfiler_v4.start_event)(context, &mut coll, &mut d);
        (ncclProfiler_v4.stop_event)(coll);

        let mut channel: *mut c_void = std::ptr::null_mut();
        let mut d: EventDescrV4 = std::mem::zeroed();
        d.event_type = event::KERNEL_CH as u8;
        d.parent_obj = coll;
        d.u.kernel_ch = ffi::KernelChV4 { channel_id: 3, p_timer: 7_000 };
        (ncclProfiler_v4.start_event)(context, &mut channel, &mut d);
        let mut args = StateArgsV4 { kernel_ch_p_timer: 7_400 };
        (ncclProfiler_v4.record_event_state)(channel, ffi::STATE_KERNEL_CH_STOP, &mut args);
        (ncclProfiler_v4.stop_event)(channel);
        (ncclProfiler_v4.stop_event)(group);
        (ncclProfiler_v4.finalize)(context);
    }

    // ---- v3
    let (mut context, mut mask): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
    // SAFETY: valid out-pointers.
    unsafe { (ncclProfiler_v3.init)(&mut context, &mut mask) };
    assert_eq!(mask as u64 & event::KERNEL_CH, 0, "v3 kernel events carry no timers");
    // SAFETY: as above.
    unsafe {
        let mut p2p: *mut c_void = std::ptr::null_mut();
        let mut d: EventDescrV3 = std::mem::zeroed();
        d.event_type = event::P2P as u8;
        d.rank = 0;
        d.u.p2p.comm_hash = 0x33;
        d.u.p2p.func = c"Send".as_ptr();
        d.u.p2p.datatype = c"ncclInt64".as_ptr();
        d.u.p2p.count = 10;
        d.u.p2p.peer = 1;
        (ncclProfiler_v3.start_event)(context, &mut p2p, &mut d);
        (ncclProfiler_v3.stop_event)(p2p);
        (ncclProfiler_v3.finalize)(context);
    }

    let process = read_process(&plugin::spool_path().unwrap()).unwrap();
    let versions: Vec<u32> = process.communicators.iter().map(|c| c.interface_version).collect();
    assert_eq!(versions, [4, 3]);
    assert_eq!(process.operations.len(), 2);
    let rs = &process.operations[0];
    assert_eq!(
        (rs.kind, rs.func.as_str(), rs.comm_id, rs.rank, rs.n_ranks, rs.seq),
        (OpKind::Collective, "ReduceScatter", 0x44, 3, 4, Some(5))
    );
    assert_eq!(
        (rs.bytes, rs.n_channels, rs.kernel_channels, rs.gpu_start_ns, rs.gpu_end_ns),
        (Some(200), 4, 1, Some(7_000), Some(7_400))
    );
    assert_ne!(rs.group, 0);
    let send = &process.operations[1];
    assert_eq!(
        (send.kind, send.func.as_str(), send.comm_id, send.peer, send.bytes),
        (OpKind::P2p, "Send", 0x33, Some(1), Some(80))
    );
    let _ = std::fs::remove_dir_all(&dir);
}
