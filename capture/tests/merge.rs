//! Spool files of a two-rank job (one rank killed mid-run) → merge → SQLite → read back with
//! `shardscope_io::load`, the reader every other part of shardscope uses.

use std::io::Write;
use std::path::{Path, PathBuf};

use shardscope_capture::merge::{self, MergeOptions};
use shardscope_capture::sqlite::{self, RunFacts};
use shardscope_model::MemoryKind;
use shardscope_spool::config::WindowTrigger;
use shardscope_spool::cupti::{
    ApiRecord, DeviceRecord, KernelRecord, MarkerRecord, MemcpyRecord, ProcessInfo, SpoolRecord, SpoolWriter,
    SyncRecord, WindowRecord,
};

/// Wall clock of the first process's CUPTI clock reading.
const T0_UTC_NS: u64 = 1_800_000_000_000_000_000;
const NCCL_MANGLED: &str = "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE";
const GEMM: &str = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT";
/// CUPTI names threads by a truncated `pthread_t`, far above any OS thread id.
const MAIN_THREAD: u32 = 0x9ABC_DEF0;
const OTHER_THREAD: u32 = 0x9ABC_0000;

fn process(pid: u32, rank: u32, cupti_clock_ns: u64, realtime_ns: u64) -> SpoolRecord {
    SpoolRecord::Process(ProcessInfo {
        pid,
        ppid: 999,
        command_line: vec!["python3".into(), "tp_llm.py".into()],
        hostname: "node1".into(),
        rank: Some(rank),
        local_rank: Some(rank),
        world_size: Some(2),
        env: vec![("WORLD_SIZE".into(), "2".into())],
        cupti_version: 130001,
        cupti_clock_ns,
        realtime_ns,
    })
}

fn devices() -> Vec<SpoolRecord> {
    (0..2u8)
        .map(|i| {
            SpoolRecord::Device(DeviceRecord {
                device_id: u32::from(i),
                name: "NVIDIA H200".into(),
                uuid: [i + 1; 16],
                memory_bytes: 150_109_880_320,
                memory_bandwidth_kib_per_s: 4_814_304_000,
                clock_rate_khz: 1_980_000,
                sm_count: 132,
                cc_major: 9,
                ..DeviceRecord::default()
            })
        })
        .collect()
}

fn kernel(device_id: u32, correlation_id: u32, start_ns: u64, end_ns: u64, name_id: u32) -> SpoolRecord {
    SpoolRecord::Kernel(KernelRecord {
        start_ns,
        end_ns,
        device_id,
        context_id: 1,
        stream_id: 7,
        correlation_id,
        grid: [132, 1, 1],
        block: [256, 1, 1],
        registers_per_thread: 90,
        name_id,
        ..KernelRecord::default()
    })
}

fn names(list: &[&str]) -> Vec<SpoolRecord> {
    list.iter().enumerate().map(|(i, t)| SpoolRecord::Name { id: i as u32 + 1, text: t.to_string() }).collect()
}

/// Rank 0 exits cleanly; rank 1 is killed: no end record, an open NVTX range, a torn frame.
fn write_spools(dir: &Path) {
    let mut rank0 = SpoolWriter::create(&dir.join("node1.1000.spool")).unwrap();
    rank0.write_batch(&[process(1000, 0, 1_000_000, T0_UTC_NS)]).unwrap();
    let mut batch = names(&[NCCL_MANGLED, GEMM, "cudaLaunchKernel_v7000", "decode", "ncclCommInitRankConfig"]);
    batch.extend(devices());
    batch.push(SpoolRecord::Api(ApiRecord {
        cbid: 211,
        start_ns: 1_000_100,
        end_ns: 1_000_120,
        pid: 1000,
        tid: MAIN_THREAD,
        correlation_id: 10,
        name_id: 3,
        ..ApiRecord::default()
    }));
    batch.push(kernel(0, 10, 1_000_200, 1_000_700, 2));
    batch.push(kernel(0, 11, 1_000_800, 1_002_800, 1));
    let marker = |flags, timestamp_ns, tid, name_id| {
        SpoolRecord::Marker(MarkerRecord { flags, timestamp_ns, id: 1, pid: 1000, tid, name_id, domain_id: 0 })
    };
    // Two ranges open at once with the same marker id, on two threads: each end must close
    // the start of its own thread.
    batch.push(marker(2, 1_000_050, MAIN_THREAD, 4));
    batch.push(marker(2, 1_000_055, OTHER_THREAD, 5));
    batch.push(marker(4, 1_000_065, OTHER_THREAD, 0));
    batch.push(marker(4, 1_003_000, MAIN_THREAD, 0));
    batch.push(SpoolRecord::Memcpy(MemcpyRecord {
        start_ns: 1_000_010,
        end_ns: 1_000_090,
        bytes: 4096,
        copy_kind: 1,
        // CUPTI's memory kinds: 1 pageable, 3 device.
        src_kind: 1,
        dst_kind: 3,
        device_id: 0,
        stream_id: 7,
        correlation_id: 9,
        ..MemcpyRecord::default()
    }));
    batch.push(SpoolRecord::Sync(SyncRecord {
        sync_type: 3,
        start_ns: 1_002_900,
        end_ns: 1_003_100,
        correlation_id: 12,
        context_id: 1,
        stream_id: 7,
        event_id: u32::MAX,
    }));
    rank0.write_batch(&batch).unwrap();
    rank0.write_batch(&[SpoolRecord::End { records: batch.len() as u64, undecoded: 0 }]).unwrap();

    // Rank 1 started 1 µs of wall time later; its CUPTI clock read 2_000_000 then, so the two
    // processes' CUPTI clocks agree (offset T0 − 1_000_000 for both).
    let path = dir.join("node1.1001.spool");
    let mut rank1 = SpoolWriter::create(&path).unwrap();
    rank1.write_batch(&[process(1001, 1, 2_000_000, T0_UTC_NS + 1_000_000)]).unwrap();
    let mut batch = names(&[NCCL_MANGLED, "decode"]);
    batch.extend(devices());
    batch.push(kernel(1, 11, 1_000_900, 1_001_900, 1));
    batch.push(SpoolRecord::Marker(MarkerRecord {
        flags: 2,
        timestamp_ns: 1_000_060,
        id: 1,
        pid: 1001,
        tid: 1001,
        name_id: 2,
        domain_id: 0,
    }));
    rank1.write_batch(&batch).unwrap();
    drop(rank1);
    // A frame header promising more bytes than follow: what SIGKILL mid-write leaves.
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5, 6]).unwrap();
}

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-merge-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    dir
}

#[test]
fn two_rank_spools_merge_into_a_trace_the_reader_understands() {
    let dir = temp_dir("two-rank");
    write_spools(&dir.join("spool"));
    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    assert_eq!(spools.len(), 2);
    let (trace, extras) = merge::merge(&spools, &MergeOptions::default());
    let out = dir.join("out.sqlite");
    sqlite::write_capture(&out, &trace, &extras, &RunFacts::default()).unwrap();

    let read = shardscope_io::load(&out).unwrap();
    assert_eq!(read.len(), 1);
    let t = &read[0];
    assert_eq!(t.processes.len(), 2);
    let mut ranks: Vec<(u32, Option<u32>, Option<u32>)> =
        t.processes.iter().map(|p| (p.pid, p.rank, p.world_size)).collect();
    ranks.sort();
    assert_eq!(ranks, vec![(1000, Some(0), Some(2)), (1001, Some(1), Some(2))]);
    assert_eq!(t.clock_offset_ns, Some(T0_UTC_NS as i64));

    // Both processes saw the same two GPUs (same UUIDs): two devices, not four.
    assert_eq!(t.devices.len(), 2);
    assert!(t.devices.iter().all(|d| d.name == "NVIDIA H200" && d.sm_count == Some(132)));
    assert_eq!(t.devices[0].memory_bandwidth_bytes_per_s, Some(4_814_304_000_000));

    // Session time = CUPTI time − 1_000_000 (the shared clock offset minus the session start).
    let kernels: Vec<(i64, i64, &str, u32)> = t
        .kernels
        .iter()
        .map(|k| (k.start_ns, k.end_ns, t.kernel_name(k), t.devices[k.device.0 as usize].ordinal))
        .collect();
    let nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)";
    assert_eq!(kernels, vec![(200, 700, GEMM, 0), (800, 2_800, nccl, 0), (900, 1_900, nccl, 1)]);
    assert_eq!(t.names.get(t.kernels[1].short_name), "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    // The launch call links to its kernel on (process, correlation id).
    let launch = t.kernels[0].launch.expect("gemm kernel linked to its launch");
    assert_eq!(t.api_calls[launch as usize].correlation_id, 10);
    assert_eq!(t.kernels[0].grid, [132, 1, 1]);

    assert_eq!(t.memops.len(), 1);
    assert_eq!((t.memops[0].bytes, t.memops[0].start_ns, t.memops[0].end_ns), (4096, 10, 90));
    assert_eq!(
        (t.memops[0].src_memory, t.memops[0].dst_memory),
        (Some(MemoryKind::Pageable), Some(MemoryKind::Device))
    );

    // Rank 0's range closed; rank 1's never did and ends at its last event (its kernel's end).
    // Thread ids: rank 0's main thread (first seen) becomes its pid, the other thread pid + 1.
    let ranges: Vec<(i64, i64, &str, u32)> =
        t.ranges.iter().map(|r| (r.start_ns, r.end_ns, t.names.get(r.name), r.tid)).collect();
    assert_eq!(
        ranges,
        vec![(50, 3_000, "decode", 1000), (55, 65, "ncclCommInitRankConfig", 1001), (60, 1_900, "decode", 1001)]
    );
    assert_eq!(t.api_calls[launch as usize].tid, 1000);

    let conn = rusqlite::Connection::open(&out).unwrap();
    let clean: Vec<(i64, bool, i64)> = conn
        .prepare("SELECT pid, cleanExit, truncatedBytes FROM SHARDSCOPE_CAPTURE_PROCESS ORDER BY pid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(clean, vec![(1000, true, 0), (1001, false, 10)]);
    let warnings: Vec<(String, i64)> = conn
        .prepare("SELECT what, count FROM SHARDSCOPE_CAPTURE_WARNINGS ORDER BY what")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        warnings,
        vec![
            ("NVTX range without an end (ended at the process's last event)".to_string(), 1),
            ("spool file cut off (process killed?): last partial frame ignored".to_string(), 1),
        ]
    );
    let (sync_rows, regs, mangled): (i64, i64, String) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), k.registersPerThread, s.value \
             FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.mangledName WHERE k.start = 800",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((sync_rows, regs, mangled.as_str()), (1, 90, NCCL_MANGLED));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn capture_ranges_keep_only_what_starts_inside() {
    let dir = temp_dir("range");
    write_spools(&dir.join("spool"));
    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    let by_delay = MergeOptions {
        range: merge::CaptureRange { delay_ns: Some(750), duration_ns: Some(200), ..Default::default() },
        ..Default::default()
    };
    let (trace, extras) = merge::merge(&spools, &by_delay);
    let starts: Vec<i64> = trace.kernels.iter().map(|k| k.start_ns).collect();
    assert_eq!(starts, vec![800, 900]);
    assert_eq!(extras.kernels.len(), 2, "kernel details stay aligned with the kernels");
    assert!(trace.api_calls.is_empty());

    // Rank 1's "decode" range (60..1_900) also counts as a window: an NVTX range named in
    // any process opens the capture for all.
    let by_nvtx = MergeOptions {
        range: merge::CaptureRange { nvtx_range: Some("decode".into()), ..Default::default() },
        ..Default::default()
    };
    let (trace, _) = merge::merge(&spools, &by_nvtx);
    assert_eq!(trace.kernels.len(), 3);
    assert_eq!(trace.memops.len(), 0, "the copy (10..90) starts before any decode range");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merge_only_mode_writes_the_file_from_a_spool_folder() {
    let dir = temp_dir("cli");
    write_spools(&dir.join("spool"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capture"))
        .arg("--merge")
        .arg(dir.join("spool"))
        .arg("-o")
        .arg(dir.join("cli.sqlite"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("2 processes, 2 GPUs, 3 kernels, 1 memory ops, 1 API calls, 3 NVTX ranges"), "{stderr}");
    let read = shardscope_io::load(&dir.join("cli.sqlite")).unwrap();
    assert_eq!(read[0].kernels.iter().map(|k| k.duration_ns()).sum::<i64>(), 500 + 2_000 + 1_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes one process's spool at `path` in one batch: its process record, the devices, the names `names`, then
/// `records`.
fn write_one_process_spool(path: &Path, process_record: SpoolRecord, names_list: &[&str], records: Vec<SpoolRecord>) {
    let mut batch = vec![process_record];
    batch.extend(devices());
    batch.extend(names(names_list));
    batch.extend(records);
    SpoolWriter::create(path).unwrap().write_batch(&batch).unwrap();
}

/// A capture window from `start_ns` to `end_ns` (CUPTI clock), opened and closed by the given triggers.
fn window(start_ns: u64, end_ns: u64, start: WindowTrigger, end: WindowTrigger) -> SpoolRecord {
    SpoolRecord::Window(WindowRecord { start_ns, end_ns, start_trigger: start as u8, end_trigger: end as u8 })
}

/// The merge of a capture whose processes recorded only inside their `cudaProfilerStart`/`Stop` windows.
fn live_profiler_windows() -> MergeOptions {
    MergeOptions {
        range: merge::CaptureRange { cuda_profiler_api: true, ..Default::default() },
        windows_live: true,
        ..Default::default()
    }
}

/// A process that recorded in two capture windows: a kernel launched in the first runs past its end, a whole
/// graph launch comes in the second, and one stop came with recording off.
fn write_windowed_spool(dir: &Path) {
    use shardscope_spool::cupti::GraphTraceRecord;
    let records = vec![
        kernel(0, 1, 1_000_100, 1_000_900, 1),
        // An NVTX range pushed inside the first window whose pop came after recording stopped.
        SpoolRecord::Marker(MarkerRecord {
            flags: 2,
            timestamp_ns: 1_000_200,
            id: 5,
            pid: 3000,
            tid: MAIN_THREAD,
            name_id: 2,
            domain_id: 0,
        }),
        window(1_000_000, 1_000_500, WindowTrigger::CudaProfilerApi, WindowTrigger::CudaProfilerApi),
        SpoolRecord::WindowStrayStop { timestamp_ns: 1_000_600, trigger: WindowTrigger::CudaProfilerApi as u8 },
        SpoolRecord::GraphTrace(GraphTraceRecord {
            start_ns: 1_002_100,
            end_ns: 1_002_400,
            device_id: 0,
            context_id: 1,
            stream_id: 7,
            correlation_id: 9,
            graph_id: 4,
        }),
        window(1_002_000, 1_003_000, WindowTrigger::External, WindowTrigger::ProcessExit),
        SpoolRecord::End { records: 5, undecoded: 0 },
    ];
    let process_record = process(3000, 0, 1_000_000, T0_UTC_NS);
    write_one_process_spool(&dir.join("node1.3000.spool"), process_record, &[GEMM, "step"], records);
}

#[test]
fn windows_and_whole_graph_launches_reach_the_file_and_nothing_recorded_is_filtered_out() {
    let dir = temp_dir("windows");
    write_windowed_spool(&dir.join("spool"));
    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    // The live capture range: the processes recorded only inside their windows.
    let options = live_profiler_windows();
    let (trace, extras) = merge::merge(&spools, &options);
    assert_eq!(trace.kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect::<Vec<_>>(), [(100, 900)]);
    let windows: Vec<_> = trace.capture_windows.iter().map(|w| (w.start_ns, w.end_ns)).collect();
    assert_eq!(windows, [(0, 500), (2_000, 3_000)]);
    assert_eq!(trace.graph_launches.iter().map(|g| (g.start_ns, g.graph_id)).collect::<Vec<_>>(), [(2_100, 4)]);
    assert!(trace.warnings.iter().any(|w| w.what.contains("stop while recording was off") && w.count == 1));
    let ranges: Vec<_> = trace.ranges.iter().map(|r| (r.start_ns, r.end_ns)).collect();
    assert_eq!(ranges, [(200, 500)], "the range left open ends with its window, not across the gap");
    let path = dir.join("windows.sqlite");
    sqlite::write_capture(&path, &trace, &extras, &RunFacts::default()).unwrap();
    let read = shardscope_io::load(&path).unwrap().remove(0);
    let triggers: Vec<_> =
        read.capture_windows.iter().map(|w| (w.start_trigger.as_str(), w.end_trigger.as_str())).collect();
    assert_eq!(triggers, [("cuda-profiler-api", "cuda-profiler-api"), ("external", "process-exit")]);
    assert_eq!(read.graph_launches.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A process that started with CUPTI detached has no CUPTI clock in its header: the pair it wrote at its first
/// attach places its times, and a process that never attached takes its host's pair.
#[test]
fn a_process_that_started_detached_is_placed_by_the_clock_pair_of_its_first_attach() {
    let dir = temp_dir("clock-pair");
    let spool_dir = dir.join("spool");
    let attached = vec![
        SpoolRecord::ClockPair { cupti_clock_ns: 1_000_000, realtime_ns: T0_UTC_NS + 50_000 },
        kernel(0, 1, 1_000_100, 1_000_900, 1),
        window(1_000_000, 1_001_000, WindowTrigger::CudaProfilerApi, WindowTrigger::CudaProfilerApi),
        SpoolRecord::End { records: 3, undecoded: 0 },
    ];
    write_one_process_spool(&spool_dir.join("node1.4000.spool"), process(4000, 0, 0, T0_UTC_NS), &[GEMM], attached);
    let mut idle = SpoolWriter::create(&spool_dir.join("node1.4001.spool")).unwrap();
    idle.write_batch(&[process(4001, 1, 0, T0_UTC_NS + 20_000), SpoolRecord::End { records: 0, undecoded: 0 }])
        .unwrap();
    drop(idle);
    let spools = merge::read_spool_dir(&spool_dir).unwrap();
    let options = live_profiler_windows();
    let (trace, _) = merge::merge(&spools, &options);
    // Session start: the earliest process's wall clock; CUPTI 1_000_000 is T0 + 50 µs.
    assert_eq!(trace.kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect::<Vec<_>>(), [(50_100, 50_900)]);
    let windows: Vec<_> = trace.capture_windows.iter().map(|w| (w.start_ns, w.end_ns)).collect();
    assert_eq!(windows, [(50_000, 51_000)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clock pair from a damaged or hostile spool (CUPTI's clock at its maximum, the wall clock at 0) moves the
/// process's times far out: they saturate rather than wrap, the file is written, and reading it back skips the
/// kernel out of range with a counted warning.
#[test]
fn a_clock_pair_at_the_ends_of_the_range_merges_without_overflow() {
    let dir = temp_dir("clock-pair-hostile");
    let spool_dir = dir.join("spool");
    let records = vec![
        SpoolRecord::ClockPair { cupti_clock_ns: u64::MAX, realtime_ns: 0 },
        kernel(0, 1, u64::MAX - 10, u64::MAX, 1),
        kernel(0, 2, 0, 1, 1),
        SpoolRecord::End { records: 3, undecoded: 0 },
    ];
    write_one_process_spool(&spool_dir.join("node1.4100.spool"), process(4100, 0, 0, T0_UTC_NS), &[GEMM], records);
    let spools = merge::read_spool_dir(&spool_dir).unwrap();
    let (trace, extras) = merge::merge(&spools, &MergeOptions::default());
    let times: Vec<(i64, i64)> = trace.kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect();
    // The offset (0 − u64::MAX) and the session start move both far below 0; the second saturates, none wraps.
    assert_eq!(times, [(-1_800_000_000_000_000_010, -1_800_000_000_000_000_000), (i64::MIN, i64::MIN)]);
    let path = dir.join("hostile.sqlite");
    sqlite::write_capture(&path, &trace, &extras, &RunFacts::default()).unwrap();
    let read = shardscope_io::load(&path).unwrap().remove(0);
    // Read back, the kernel out of any trace's range is skipped and counted, the other kept.
    assert_eq!(read.kernels.len(), 1);
    assert!(read.warnings.iter().any(|w| w.what.contains("beyond") && w.count == 1), "{:?}", read.warnings);
    let _ = std::fs::remove_dir_all(&dir);
}
