//! A process killed with SIGKILL while recording leaves a spool whose complete frames all read
//! back: the test runs this binary again as a child that records collectives without end,
//! kills it, and checks the file.

use std::ffi::{c_int, c_void};
use std::process::Command;
use std::time::{Duration, Instant};

use shardscope_capture::nccl_spool::read_process;
use shardscope_nccl_profiler::ffi::{EventDescrV5, event};
use shardscope_nccl_profiler::plugin::{self, ncclProfiler_v5};
use shardscope_spool::nccl::NcclRecord;
use shardscope_spool::read_spool;

const CHILD_ENV: &str = "SHARDSCOPE_NCCL_TEST_CHILD";

/// The child: one communicator, then all-reduces with increasing sequence numbers until killed.
#[test]
#[ignore = "run by sigkill_leaves_every_complete_frame_readable as a child process"]
fn child_records_until_killed() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let mut context: *mut c_void = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: valid out-pointers and a C string.
    unsafe { (ncclProfiler_v5.init)(&mut context, 99, &mut mask, c"kill".as_ptr(), 1, 1, 0, None) };
    for seq in 0u64.. {
        // SAFETY: an all-zero descriptor is what NCCL starts from.
        let mut d: EventDescrV5 = unsafe { std::mem::zeroed() };
        d.event_type = event::COLL;
        d.u.coll.seq_number = seq;
        d.u.coll.func = c"AllReduce".as_ptr();
        d.u.coll.datatype = c"ncclFloat32".as_ptr();
        d.u.coll.count = 1;
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid descriptor and handle slot.
        unsafe {
            (ncclProfiler_v5.start_event)(context, &mut handle, &mut d);
            (ncclProfiler_v5.stop_event)(handle);
        }
        if seq % 64 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[test]
fn sigkill_leaves_every_complete_frame_readable() {
    let dir = std::env::temp_dir().join(format!("shardscope-nccl-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_records_until_killed", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env(plugin::SPOOL_DIR_ENV, &dir)
        .env(plugin::FLUSH_MS_ENV, "2")
        .spawn()
        .unwrap();
    let path = dir.join(format!("nccl-{}.bin", child.id()));
    // Wait until the background flushes wrote a good number of frames, then kill mid-stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 200_000 {
        assert!(Instant::now() < deadline, "child wrote too little");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let contents = read_spool::<NcclRecord>(&path).unwrap();
    assert!(contents.frames >= 3, "frames: {}", contents.frames);
    assert_eq!(contents.bad_records, 0);
    // Sequence numbers in the readable part run 0, 1, 2, … without a gap: no frame was lost
    // or torn before the end.
    let seqs: Vec<u64> = contents
        .records
        .iter()
        .filter_map(|r| if let NcclRecord::CollStart(c) = r { Some(c.seq) } else { None })
        .collect();
    assert!(seqs.len() > 1000, "collectives read: {}", seqs.len());
    assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64));
    let process = read_process(&path).unwrap();
    assert_eq!(process.pid, child.id());
    assert_eq!(process.operations.len(), seqs.len());
    // Every start but possibly the last few (stopped after the last flush) has its stop.
    let unstopped = process.operations.iter().filter(|o| o.cpu_end_ns.is_none()).count();
    assert!(unstopped <= 1, "unstopped: {unstopped}");
    let _ = std::fs::remove_dir_all(&dir);
}
