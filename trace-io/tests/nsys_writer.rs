//! The nsys-schema writer: real exports read, written and read back must give the same trace.

mod nsys_common;

use std::path::Path;

use nsys_common::{TempDir, shared_traces};
use shardscope_io::nsys;
use shardscope_io::nsys_writer::{self, WriteOptions, Writer};
use shardscope_model::{
    ApiCall, ApiKind, CopyKind, Device, Kernel, MemOp, MemoryKind, Process, Range, RangeKind, ThreadName, Trace,
};

/// Ordinal, name, SMs, memory, bandwidth, clock, bus, owning globalPid.
type DeviceRow = (u32, String, Option<u32>, Option<u64>, Option<u64>, Option<u32>, Option<String>, Option<u64>);
/// Start, end, name, short name, GPU ordinal, globalPid, stream, correlation, grid, block, launch.
type KernelRow = (i64, i64, String, String, u32, u64, u32, u32, [u32; 3], [u32; 3], Option<u32>);
/// Start, end, kind, bytes, GPU ordinal, globalPid, stream, correlation, source, destination, launch.
/// Start, end, copy kind, bytes, GPU, globalPid, stream, correlation, source and destination GPU, launch, source and
/// destination memory kind.
type MemOpRow = (
    i64,
    i64,
    Option<CopyKind>,
    u64,
    u32,
    u64,
    u32,
    u32,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    (Option<MemoryKind>, Option<MemoryKind>),
);
/// Start, end, name, domain, kind, globalPid, thread, depth.
type RangeRow = (i64, i64, String, String, RangeKind, u64, u32, u16);

/// A trace with every id replaced by what it stands for, so two reads can be compared.
#[derive(Debug, PartialEq)]
struct Contents {
    schema: Option<String>,
    clock_offset_ns: Option<i64>,
    processes: Vec<(u32, u64, String, Option<u32>)>,
    devices: Vec<DeviceRow>,
    threads: Vec<(u64, u32, String)>,
    kernels: Vec<KernelRow>,
    memops: Vec<MemOpRow>,
    api_calls: Vec<(i64, i64, String, ApiKind, u64, u32, u32)>,
    ranges: Vec<RangeRow>,
}

fn contents(t: &Trace) -> Contents {
    let gpid = |p: shardscope_model::ProcessIdx| t.processes[p.0 as usize].global_pid;
    let ordinal = |d: shardscope_model::DeviceIdx| t.devices[d.0 as usize].ordinal;
    let name = |n| t.names.get(n).to_string();
    Contents {
        schema: t.source.schema_version.clone(),
        clock_offset_ns: t.clock_offset_ns,
        processes: t.processes.iter().map(|p| (p.pid, p.global_pid, p.name.clone(), p.rank)).collect(),
        devices: t
            .devices
            .iter()
            .map(|d| {
                (
                    d.ordinal,
                    d.name.clone(),
                    d.sm_count,
                    d.memory_bytes,
                    d.memory_bandwidth_bytes_per_s,
                    d.clock_rate_khz,
                    d.bus_location.clone(),
                    d.process.map(gpid),
                )
            })
            .collect(),
        threads: t.threads.iter().map(|th| (gpid(th.process), th.tid, th.name.clone())).collect(),
        kernels: t
            .kernels
            .iter()
            .map(|k| {
                (
                    k.start_ns,
                    k.end_ns,
                    name(k.name),
                    name(k.short_name),
                    ordinal(k.device),
                    gpid(k.process),
                    k.stream,
                    k.correlation_id,
                    k.grid,
                    k.block,
                    k.launch,
                )
            })
            .collect(),
        memops: t
            .memops
            .iter()
            .map(|m| {
                (
                    m.start_ns,
                    m.end_ns,
                    m.copy_kind,
                    m.bytes,
                    ordinal(m.device),
                    gpid(m.process),
                    m.stream,
                    m.correlation_id,
                    m.src_device,
                    m.dst_device,
                    m.launch,
                    (m.src_memory, m.dst_memory),
                )
            })
            .collect(),
        api_calls: t
            .api_calls
            .iter()
            .map(|a| (a.start_ns, a.end_ns, name(a.name), a.kind, gpid(a.process), a.tid, a.correlation_id))
            .collect(),
        ranges: t
            .ranges
            .iter()
            .map(|r| (r.start_ns, r.end_ns, name(r.name), name(r.domain), r.kind, gpid(r.process), r.tid, r.depth))
            .collect(),
    }
}

/// Equal lists, reporting only the first difference (the lists are long).
fn same<T: PartialEq + std::fmt::Debug>(before: &[T], after: &[T], what: &str) {
    assert_eq!(before.len(), after.len(), "{what}: count");
    if let Some(i) = (0..before.len()).find(|&i| before[i] != after[i]) {
        panic!("{what}: first difference at {i}: {:?} != {:?}", before[i], after[i]);
    }
}

fn round_trip(original: &Trace, temp: &TempDir, file_name: &str) -> Trace {
    let written = temp.path().join(file_name);
    nsys_writer::write(original, &written).unwrap();
    nsys::read(&written).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn real_exports_survive_a_round_trip() {
    let dir = shared_traces();
    let temp = TempDir::new("round-trip");
    let mut files: Vec<_> = std::fs::read_dir(dir.join("nsys")).unwrap().map(|e| e.unwrap().path()).collect::<Vec<_>>();
    files.sort();
    assert_eq!(files.len(), 5);
    for path in files {
        let original = nsys::read(&path).unwrap();
        let again = round_trip(&original, &temp, path.file_name().unwrap().to_str().unwrap());
        let (mut before, after) = (contents(&original), contents(&again));
        // The written file declares the schema whose columns it has.
        assert_eq!(after.schema.as_deref(), Some("3.25.0"));
        before.schema = after.schema.clone();
        assert!(!before.kernels.is_empty());
        let file = path.display().to_string();
        same(&before.kernels, &after.kernels, &format!("{file} kernels"));
        same(&before.memops, &after.memops, &format!("{file} memops"));
        same(&before.api_calls, &after.api_calls, &format!("{file} api calls"));
        same(&before.ranges, &after.ranges, &format!("{file} ranges"));
        same(&before.threads, &after.threads, &format!("{file} threads"));
        assert_eq!(before, after, "{file}");
        assert_eq!(again.source.producer.as_deref(), Some(concat!("shardscope ", env!("CARGO_PKG_VERSION"))));
    }
}

#[test]
fn committed_export_survives_a_round_trip_with_its_nccl_domain() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/tp2_nsys.sqlite.gz");
    // A committed sample: every checkout has it.
    assert!(path.is_file(), "{} is committed", path.display());
    let original = shardscope_io::load(&path).unwrap().remove(0);
    let temp = TempDir::new("round-trip-tp2");
    let again = round_trip(&original, &temp, "tp2.sqlite");
    let (mut before, after) = (contents(&original), contents(&again));
    before.schema = after.schema.clone();
    assert_eq!(before, after);
    assert_eq!(after.ranges.iter().filter(|r| r.3 == "NCCL").count(), 152);
}

/// A small trace built by hand, with what real exports lack: ranks, hosts, no globalPid,
/// two processes with one pid, GPU annotations.
fn hand_made() -> Trace {
    let mut t = Trace::default();
    let p0 = t.add_process(Process {
        pid: 10,
        name: "rank0".into(),
        rank: Some(0),
        world_size: Some(2),
        host: Some("node-a".into()),
        ..Process::default()
    });
    let p1 = t.add_process(Process {
        pid: 10,
        name: "rank1".into(),
        rank: Some(1),
        world_size: Some(2),
        host: Some("node-b".into()),
        ..Process::default()
    });
    let d0 = t.add_device(Device {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        sm_count: Some(132),
        clock_rate_khz: Some(1_980_000),
        ..Device::default()
    });
    let d1 = t.add_device(Device { ordinal: 1, ..Device::default() });
    let gemm = t.names.intern("nvjet_gemm");
    let nccl = t.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    let launch = t.names.intern("cudaLaunchKernel");
    let memset = t.names.intern("cudaMemsetAsync");
    let domain = t.names.intern("NCCL");
    let all_reduce = t.names.intern("ncclAllReduce");
    let prefill = t.names.intern("prefill");
    for (p, d) in [(p0, d0), (p1, d1)] {
        t.api_calls.push(ApiCall {
            start_ns: 100,
            end_ns: 110,
            name: launch,
            kind: ApiKind::Runtime,
            process: p,
            tid: 11,
            correlation_id: 1,
        });
        t.api_calls.push(ApiCall {
            start_ns: 120,
            end_ns: 130,
            name: launch,
            kind: ApiKind::Driver,
            process: p,
            tid: 11,
            correlation_id: 2,
        });
        t.api_calls.push(ApiCall {
            start_ns: 140,
            end_ns: 145,
            name: memset,
            kind: ApiKind::Runtime,
            process: p,
            tid: 11,
            correlation_id: 3,
        });
        t.kernels.push(Kernel {
            start_ns: 200,
            end_ns: 300,
            name: gemm,
            short_name: gemm,
            device: d,
            process: p,
            stream: 7,
            correlation_id: 1,
            grid: [1, 2, 3],
            block: [128, 1, 1],
            ..Kernel::default()
        });
        t.kernels.push(Kernel {
            start_ns: 300,
            end_ns: 500,
            name: nccl,
            short_name: nccl,
            device: d,
            process: p,
            stream: 9,
            correlation_id: 2,
            ..Kernel::default()
        });
        t.memops.push(MemOp {
            start_ns: 150,
            end_ns: 160,
            copy_kind: None,
            bytes: 4096,
            device: d,
            process: p,
            stream: 7,
            correlation_id: 3,
            ..MemOp::default()
        });
        t.memops.push(MemOp {
            start_ns: 510,
            end_ns: 600,
            copy_kind: Some(CopyKind::PtoP),
            bytes: 1 << 20,
            device: d,
            process: p,
            src_device: Some(0),
            dst_device: Some(1),
            // Rank 0's copy records its memory kinds, rank 1's does not.
            src_memory: (d == d0).then_some(MemoryKind::Device),
            dst_memory: (d == d0).then_some(MemoryKind::Device),
            ..MemOp::default()
        });
        t.ranges.push(Range {
            start_ns: 90,
            end_ns: 700,
            name: prefill,
            kind: RangeKind::PushPop,
            process: p,
            tid: 11,
            ..Range::default()
        });
        t.ranges.push(Range {
            start_ns: 115,
            end_ns: 135,
            name: all_reduce,
            domain,
            kind: RangeKind::PushPop,
            process: p,
            tid: 11,
            ..Range::default()
        });
        t.ranges.push(Range {
            start_ns: 300,
            end_ns: 500,
            name: all_reduce,
            kind: RangeKind::GpuAnnotation,
            process: p,
            device: Some(d),
            stream: Some(9),
            ..Range::default()
        });
        t.threads.push(ThreadName { process: p, tid: 11, name: "python3".into() });
    }
    t.clock_offset_ns = Some(1_700_000_000_000_000_000);
    t.finish();
    t
}

#[test]
fn hand_made_trace_keeps_ranks_domains_and_copy_kinds() {
    let original = hand_made();
    let temp = TempDir::new("hand-made");
    let again = round_trip(&original, &temp, "hand.sqlite");
    // Processes without a globalPid get one from their pid, kept apart though both pids are 10.
    let processes: Vec<_> =
        again.processes.iter().map(|p| (p.pid, p.name.as_str(), p.rank, p.world_size, p.host.as_deref())).collect();
    assert_eq!(
        processes,
        vec![(10, "rank0", Some(0), Some(2), Some("node-a")), (10, "rank1", Some(1), Some(2), Some("node-b"))]
    );
    assert_ne!(again.processes[0].global_pid, again.processes[1].global_pid);
    assert_eq!(again.devices[0].name, "NVIDIA H200");
    assert_eq!(again.devices[0].clock_rate_khz, Some(1_980_000));
    assert_eq!(again.devices.iter().map(|d| d.process.map(|p| p.0)).collect::<Vec<_>>(), vec![Some(0), Some(1)]);
    assert_eq!(again.device_rank(shardscope_model::DeviceIdx(1)), Some(1));
    assert_eq!(again.kernels.len(), 4);
    assert!(again.kernels.iter().all(|k| k.launch.is_some()));
    assert!(again.memops.iter().filter(|m| m.is_memset()).all(|m| m.launch.is_some()));
    let ptop: Vec<_> = again.memops.iter().filter(|m| m.copy_kind == Some(CopyKind::PtoP)).collect();
    assert_eq!(ptop.len(), 2);
    assert!(ptop.iter().all(|m| (m.src_device, m.dst_device, m.bytes) == (Some(0), Some(1), 1 << 20)));
    // One copy was written with its memory kinds (srcKind, dstKind), the other without (NULL): each as it was.
    let kinds: Vec<_> = ptop.iter().map(|m| (m.src_memory, m.dst_memory)).collect();
    assert!(kinds.contains(&(Some(MemoryKind::Device), Some(MemoryKind::Device))) && kinds.contains(&(None, None)));
    assert_eq!(again.api_calls.iter().filter(|a| a.kind == ApiKind::Driver).count(), 2);
    let nccl_ranges = again.ranges.iter().filter(|r| again.names.get(r.domain) == "NCCL").count();
    assert_eq!(nccl_ranges, 2);
    // GPU annotations have no nsys equivalent: they come back as start/end ranges on thread 0.
    assert_eq!(again.ranges.iter().filter(|r| r.kind == RangeKind::StartEnd && r.tid == 0).count(), 2);
    assert_eq!(
        again
            .ranges
            .iter()
            .find(|r| again.names.get(r.name) == "ncclAllReduce" && r.kind == RangeKind::PushPop)
            .map(|r| r.depth),
        Some(1)
    );
    assert_eq!(again.threads.len(), 2);
    assert_eq!(again.clock_offset_ns, Some(1_700_000_000_000_000_000));
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
}

#[test]
fn writer_can_be_driven_step_by_step_with_extra_tables() {
    let temp = TempDir::new("steps");
    let path = temp.path().join("steps.sqlite");
    let options = WriteOptions { producer_name: "shardscope-capture".into(), producer_version: "9.9".into() };
    let mut writer = Writer::create_with(&path, &options).unwrap();
    let trace = hand_made();
    writer.write_trace(&trace).unwrap();
    writer
        .connection()
        .execute_batch("CREATE TABLE CAPTURE_STATS (droppedRecords INTEGER); INSERT INTO CAPTURE_STATS VALUES (7);")
        .map_err(|e| writer.error(e))
        .unwrap();
    writer.finish().unwrap();

    let again = nsys::read(&path).unwrap();
    assert_eq!(again.source.producer.as_deref(), Some("shardscope-capture 9.9"));
    assert_eq!(again.kernels.len(), 4);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let dropped: i64 = conn.query_row("SELECT droppedRecords FROM CAPTURE_STATS", [], |r| r.get(0)).unwrap();
    assert_eq!(dropped, 7);
    // What `nsys stats --report cuda_gpu_kern_sum` reads: kernel rows joined to StringIds by demangledName.
    let mut stmt = conn
        .prepare(
            "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds s ON s.id = k.demangledName GROUP BY 1 ORDER BY 1",
        )
        .unwrap();
    let rows: Vec<(String, i64, i64)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows, vec![("ncclDevKernel_AllReduce_Sum_bf16_RING_LL".into(), 2, 400), ("nvjet_gemm".into(), 2, 200)]);
    // The enum tables match a real export's.
    let label: String =
        conn.query_row("SELECT label FROM ENUM_CUDA_MEMCPY_OPER WHERE id = 10", [], |r| r.get(0)).unwrap();
    assert_eq!(label, "Peer-to-Peer");
    let push_pop: i64 = conn
        .query_row("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(push_pop, 59);
}

#[test]
fn writing_into_a_missing_folder_fails_with_the_path() {
    let temp = TempDir::new("no-folder");
    let path = temp.path().join("no/such/folder/out.sqlite");
    let err = nsys_writer::write(&Trace::default(), &path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()) && !text.contains('\n'), "{text}");
}

#[test]
fn capture_windows_and_whole_graph_launches_survive_a_round_trip() {
    use shardscope_model::{CaptureWindow, DeviceIdx, GraphLaunch, ProcessIdx, WindowTrigger};
    let mut original = hand_made();
    let windows = [
        (ProcessIdx(0), 100, 250, WindowTrigger::CudaProfilerApi, WindowTrigger::CudaProfilerApi),
        (ProcessIdx(0), 400, 900, WindowTrigger::External, WindowTrigger::ProcessExit),
        (ProcessIdx(1), 0, 600, WindowTrigger::ProcessStart, WindowTrigger::Time),
    ];
    for (process, start_ns, end_ns, start_trigger, end_trigger) in windows {
        original.capture_windows.push(CaptureWindow { process, start_ns, end_ns, start_trigger, end_trigger });
    }
    original.graph_launches.push(GraphLaunch {
        start_ns: 700,
        end_ns: 800,
        device: DeviceIdx(1),
        process: ProcessIdx(1),
        stream: 7,
        correlation_id: 0,
        graph_id: 42,
        launch: None,
    });
    original.finish();
    let temp = TempDir::new("windows");
    let again = round_trip(&original, &temp, "windows.sqlite");
    let read: Vec<_> = again
        .capture_windows
        .iter()
        .map(|w| (w.process, w.start_ns, w.end_ns, w.start_trigger, w.end_trigger))
        .collect();
    assert_eq!(read, windows);
    let graphs: Vec<_> =
        again.graph_launches.iter().map(|g| (g.start_ns, g.end_ns, g.stream, g.graph_id, g.process)).collect();
    assert_eq!(graphs, [(700, 800, 7, 42, ProcessIdx(1))]);
    // A file without windows has no windows table and reads back with none.
    let plain = round_trip(&hand_made(), &temp, "plain.sqlite");
    assert!(plain.capture_windows.is_empty() && plain.graph_launches.is_empty());
}

#[test]
fn window_of_a_process_that_recorded_nothing_is_dropped_quietly_and_an_unlisted_one_is_counted() {
    use shardscope_model::{CaptureWindow, ProcessIdx, WindowTrigger};
    let mut original = hand_made();
    // A launcher (torch.distributed.run) loads the recorder, opens its whole-run window and launches nothing.
    let launcher = original.add_process(Process { pid: 99, name: "launcher".into(), ..Process::default() });
    for (process, end_ns) in [(ProcessIdx(0), 900), (launcher, 1_000)] {
        let (start_trigger, end_trigger) = (WindowTrigger::ProcessStart, WindowTrigger::ProcessExit);
        original.capture_windows.push(CaptureWindow { process, start_ns: 0, end_ns, start_trigger, end_trigger });
    }
    original.finish();
    let temp = TempDir::new("quiet-windows");
    let path = temp.path().join("launcher.sqlite");
    nsys_writer::write(&original, &path).unwrap();
    let again = nsys::read(&path).unwrap();
    let read: Vec<_> = again.capture_windows.iter().map(|w| (w.process, w.end_ns)).collect();
    assert_eq!(read, [(ProcessIdx(0), 900)], "the launcher holds no events, so neither its window");
    assert!(again.warnings.iter().all(|w| !w.what.contains("capture window")), "{:?}", again.warnings);

    // A row naming a process the file does not list at all is refused and counted.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO SHARDSCOPE_CAPTURE_WINDOWS (globalPid, start, end, startTrigger, endTrigger) \
         VALUES (123456789, 0, 10, 'process-start', 'process-exit')",
        [],
    )
    .unwrap();
    drop(conn);
    let hostile = nsys::read(&path).unwrap();
    let warning = hostile.warnings.iter().find(|w| w.what.contains("capture window")).expect("counted");
    assert_eq!(
        (warning.what.as_str(), warning.count),
        ("capture window of a process the file does not list (skipped)", 1)
    );
}
