//! Drives the exported `ncclProfiler_v5` table the way NCCL 2.28 does (init, group, collective,
//! kernel channels, point-to-point, finalize) with fabricated descriptors, then checks the
//! spool, a cut copy of it, the joined operations and the SQLite round trip.
//!
//! One test function: the plugin keeps one spool per process, so the steps share it in order.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;

use shardscope_capture::nccl_spool::read_process;
use shardscope_capture::nccl_tables::{TableOptions, write_tables};
use shardscope_io::nccl::{KernelLink, OpKind, read_tables};
use shardscope_nccl_profiler::ffi::{self, EventDescrV5, StateArgsV4, event};
use shardscope_nccl_profiler::plugin::{self, ncclProfiler_v5};
use shardscope_spool::nccl::NcclRecord;
use shardscope_spool::{SpoolContents, SpoolError};

fn parse_spool(bytes: &[u8]) -> Result<SpoolContents<NcclRecord>, SpoolError> {
    shardscope_spool::parse_spool(bytes)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-nccl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn descr(event_type: u64, parent: *mut c_void, rank: c_int) -> EventDescrV5 {
    // SAFETY: an all-zero descriptor is valid (null pointers, zero numbers), as NCCL's `= {}`.
    let mut d: EventDescrV5 = unsafe { std::mem::zeroed() };
    d.event_type = event_type;
    d.parent_obj = parent;
    d.rank = rank;
    d
}

fn start(context: *mut c_void, d: &mut EventDescrV5) -> *mut c_void {
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid descriptor and handle slot, as NCCL passes them.
    let result = unsafe { (ncclProfiler_v5.start_event)(context, &mut handle, d) };
    assert_eq!(result, ffi::NCCL_SUCCESS);
    handle
}

fn stop(handle: *mut c_void) {
    // SAFETY: a handle from start_event.
    assert_eq!(unsafe { (ncclProfiler_v5.stop_event)(handle) }, ffi::NCCL_SUCCESS);
}

fn all_reduce(context: *mut c_void, group: *mut c_void, seq: u64, count: usize, rank: c_int) -> *mut c_void {
    let mut d = descr(event::COLL, std::ptr::null_mut(), rank);
    d.u.coll = ffi::CollV5 {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count,
        root: 0,
        datatype: c"ncclBfloat16".as_ptr(),
        n_channels: 2,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"LL".as_ptr(),
        parent_group: group,
    };
    start(context, &mut d)
}

fn kernel_channel(context: *mut c_void, parent: *mut c_void, channel: u8, gpu_start: u64, gpu_stop: u64) {
    let mut d = descr(event::KERNEL_CH, parent, 0);
    d.u.kernel_ch = ffi::KernelChV4 { channel_id: channel, p_timer: gpu_start };
    let handle = start(context, &mut d);
    assert!(!handle.is_null());
    let mut args = StateArgsV4 { kernel_ch_p_timer: gpu_stop };
    // SAFETY: a kernel-channel handle and filled state arguments, as NCCL passes them.
    let result = unsafe { (ncclProfiler_v5.record_event_state)(handle, ffi::STATE_KERNEL_CH_STOP, &mut args) };
    assert_eq!(result, ffi::NCCL_SUCCESS);
    stop(handle);
}

#[test]
fn v5_calls_produce_a_readable_spool_and_tables() {
    let dir = temp_dir("v5");
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe { std::env::set_var(plugin::SPOOL_DIR_ENV, &dir) };

    // init, as ncclCommInitRank calls it.
    let mut context: *mut c_void = std::ptr::null_mut();
    let mut mask: c_int = 0;
    let comm_id = 0xfeed_beef_0123_4567u64 | (1 << 63); // top bit set: tests the signed column
    // SAFETY: valid out-pointers and a C string.
    let result = unsafe { (ncclProfiler_v5.init)(&mut context, comm_id, &mut mask, c"tp".as_ptr(), 1, 2, 1, None) };
    assert_eq!(result, ffi::NCCL_SUCCESS);
    assert!(!context.is_null());
    let mask = mask as u64;
    assert_eq!(mask & (event::COLL | event::P2P | event::GROUP | event::KERNEL_CH), mask);
    assert!(mask & event::COLL != 0 && mask & event::P2P != 0);
    // Kernel-channel events make NCCL post proxy work per collective: not asked for by default.
    assert_eq!(mask & event::KERNEL_CH, 0, "kernel-channel events requested without SHARDSCOPE_NCCL_KERNEL_TIMERS=1");

    // Three all-reduces, each its own group (kernel plan); the collective stops at enqueue and
    // its kernel channels arrive afterwards from the proxy thread, naming it as parent.
    let counts = [4096usize, 4096, 8];
    for (seq, &count) in counts.iter().enumerate() {
        let group = start(context, &mut descr(event::GROUP, std::ptr::null_mut(), 1));
        let coll = all_reduce(context, group, seq as u64, count, 1);
        stop(coll);
        stop(group);
        kernel_channel(context, coll, 0, 1_000 + seq as u64 * 100, 1_050 + seq as u64 * 100);
        kernel_channel(context, coll, 1, 1_010 + seq as u64 * 100, 1_070 + seq as u64 * 100);
    }
    // A grouped send/receive pair.
    let group = start(context, &mut descr(event::GROUP, std::ptr::null_mut(), 1));
    for (func, peer) in [(c"Send", 0), (c"Recv", 0)] {
        let mut d = descr(event::P2P, std::ptr::null_mut(), 1);
        d.u.p2p = ffi::P2pV5 {
            func: func.as_ptr(),
            buff: std::ptr::null_mut(),
            datatype: c"ncclFloat32".as_ptr(),
            count: 256,
            peer,
            n_channels: 1,
            parent_group: group,
        };
        let p2p = start(context, &mut d);
        stop(p2p);
    }
    stop(group);
    // Events the plugin did not ask for get a null handle, and stopping null is harmless.
    let ignored = start(context, &mut descr(event::PROXY_CTRL, std::ptr::null_mut(), 1));
    assert!(ignored.is_null());
    stop(ignored);
    // SAFETY: the context from init.
    assert_eq!(unsafe { (ncclProfiler_v5.finalize)(context) }, ffi::NCCL_SUCCESS);

    let path = plugin::spool_path().expect("spool path");
    assert_eq!(path, dir.join(format!("nccl-{}.bin", std::process::id())));
    let bytes = std::fs::read(&path).unwrap();
    let contents = parse_spool(&bytes).unwrap();
    assert_eq!(contents.truncated_bytes, 0);
    assert_eq!(contents.bad_records, 0);
    let count = |f: &dyn Fn(&NcclRecord) -> bool| contents.records.iter().filter(|r| f(r)).count();
    assert_eq!(count(&|r| matches!(r, NcclRecord::Process(_))), 1);
    assert_eq!(count(&|r| matches!(r, NcclRecord::Communicator(_))), 1);
    assert_eq!(count(&|r| matches!(r, NcclRecord::CollStart(_))), 3);
    assert_eq!(count(&|r| matches!(r, NcclRecord::P2pStart(_))), 2);
    assert_eq!(count(&|r| matches!(r, NcclRecord::OpStop { .. })), 5);
    assert_eq!(count(&|r| matches!(r, NcclRecord::KernelChStart { .. })), 6);
    assert_eq!(count(&|r| matches!(r, NcclRecord::KernelChStop { .. })), 6);
    assert_eq!(count(&|r| matches!(r, NcclRecord::CommunicatorEnd { .. })), 1);

    // Joined operations.
    let process = read_process(&path).unwrap();
    assert_eq!(process.pid, std::process::id());
    assert_eq!(process.orphan_records, 0);
    let ops = &process.operations;
    assert_eq!(ops.len(), 5);
    let colls: Vec<_> = ops.iter().filter(|o| o.kind == OpKind::Collective).collect();
    assert_eq!(colls.iter().map(|o| o.seq.unwrap()).collect::<Vec<_>>(), [0, 1, 2]);
    for (seq, o) in colls.iter().enumerate() {
        assert_eq!(o.comm_id, comm_id);
        assert_eq!((o.rank, o.n_ranks), (1, 2));
        assert_eq!((o.func.as_str(), o.datatype.as_str()), ("AllReduce", "ncclBfloat16"));
        assert_eq!((o.algo.as_str(), o.proto.as_str(), o.n_channels, o.n_warps), ("RING", "LL", 2, 16));
        assert_eq!(o.bytes, Some(counts[seq] as u64 * 2));
        assert_eq!(o.kernel_channels, 2);
        // Earliest channel start and latest channel stop.
        assert_eq!(o.gpu_start_ns, Some(1_000 + seq as i64 * 100));
        assert_eq!(o.gpu_end_ns, Some(1_070 + seq as i64 * 100));
        assert!(o.cpu_end_ns.unwrap() >= o.cpu_start_ns);
        assert_ne!(o.group, 0);
    }
    assert_eq!(colls.iter().map(|o| o.group).collect::<std::collections::HashSet<_>>().len(), 3);
    let p2p: Vec<_> = ops.iter().filter(|o| o.kind == OpKind::P2p).collect();
    assert_eq!(p2p.iter().map(|o| o.func.as_str()).collect::<Vec<_>>(), ["Send", "Recv"]);
    assert_eq!(p2p[0].group, p2p[1].group, "one group, one kernel");
    assert_eq!((p2p[0].peer, p2p[0].bytes, p2p[0].seq), (Some(0), Some(1024), None));

    // A cut copy: every cut keeps the whole frames before it and reports the bytes after them.
    let mut frame_ends = vec![8usize];
    while *frame_ends.last().unwrap() < bytes.len() {
        let at = *frame_ends.last().unwrap();
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        frame_ends.push(at + 8 + len);
    }
    assert_eq!(frame_ends.len() as u64 - 1, contents.frames);
    assert!(contents.frames >= 2, "the process record is flushed on its own, the rest at finalize");
    for cut in 8..bytes.len() {
        let partial = parse_spool(&bytes[..cut]).unwrap();
        let whole = frame_ends.iter().rev().find(|&&end| end <= cut).unwrap();
        assert_eq!(partial.truncated_bytes, (cut - whole) as u64);
        assert_eq!(partial.records[..], contents.records[..partial.records.len()]);
    }
    assert!(parse_spool(&bytes[..4]).is_err(), "a cut header is not a spool");

    // Tables: write, read back, compare.
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    assert!(read_tables(&conn).unwrap().is_empty(), "no table: no rows, no error");
    // The kernel capture linked the second operation to, stored with it.
    let mut process = process;
    process.kernel_links = vec![None; process.operations.len()];
    process.kernel_links[1] = Some(KernelLink { correlation_id: 7, start_ns: 123_456 });
    // Inside a transaction the caller holds, as a writer of the whole file would call it.
    conn.execute_batch("BEGIN").unwrap();
    let start_utc = process.realtime_ns(process.operations[0].cpu_start_ns).unwrap() - 1_000;
    let options = TableOptions { session_start_utc_ns: start_utc, global_pid: &|pid| (pid as i64) << 24 };
    write_tables(&conn, std::slice::from_ref(&process), &options).unwrap();
    conn.execute_batch("COMMIT").unwrap();
    let stored = read_tables(&conn).unwrap();
    assert_eq!(stored.len(), 5);
    for (row, original) in stored.iter().zip(&process.operations) {
        assert_eq!(row.global_pid, (std::process::id() as i64) << 24);
        let mut expected = original.clone();
        expected.cpu_start_ns = process.realtime_ns(original.cpu_start_ns).unwrap() - start_utc;
        expected.cpu_end_ns = original.cpu_end_ns.map(|t| process.realtime_ns(t).unwrap() - start_utc);
        assert_eq!(row.operation, expected);
    }
    assert_eq!(stored[0].operation.cpu_start_ns, 1_000);
    assert_eq!(stored.iter().map(|r| r.kernel).collect::<Vec<_>>(), process.kernel_links);
    let (version, comm_rows): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT ncclVersion FROM SHARDSCOPE_NCCL_PROCESSES), (SELECT count(*) FROM SHARDSCOPE_NCCL_COMMUNICATORS)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((version, comm_rows), (0, 1), "no NCCL in a test process");
    let _ = std::fs::remove_dir_all(&dir);
}
