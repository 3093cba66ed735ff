//! The nsys SQLite reader against the real exports in `../shared/traces/nsys`, and against
//! broken or foreign files made from them.
//!
//! Expected numbers were counted independently with `sqlite3` on each file (queries noted
//! beside each field); tests skip with a message when `../shared/traces` is absent.

mod nsys_common;

use std::path::{Path, PathBuf};

use nsys_common::{TempDir, shared_traces};
use shardscope_io::{Error, nsys};
use shardscope_model::{ApiKind, MemoryKind, RangeKind, Trace};

/// What one export must load as.
struct Expected {
    file: &'static str,
    schema: Option<&'static str>,
    /// `count(*)` of CUPTI_ACTIVITY_KIND_KERNEL.
    kernels: usize,
    /// `sum(end - start)` over the kernels.
    kernel_ns: i64,
    /// MEMCPY + MEMSET rows, and MEMSET alone.
    memops: usize,
    memsets: usize,
    /// CUPTI_ACTIVITY_KIND_RUNTIME rows, and those with eventClass 1 (driver).
    api_calls: usize,
    driver_calls: usize,
    /// NVTX_EVENTS rows of a range type (59, 60, 70, 71) with an end.
    ranges: usize,
    /// Distinct globalPid over kernels, copies, sets, API calls and ranges
    /// (`globalTid & ~16777215` for the latter two).
    processes: usize,
    /// Distinct deviceId of kernels and copies, union TARGET_INFO_GPU.id.
    devices: usize,
    /// Kernels / copies with a RUNTIME row of the same correlationId in the same process.
    kernel_links: usize,
    memop_links: usize,
    /// ThreadNames rows of those processes.
    threads: usize,
}

const EXPECTED: &[Expected] = &[
    Expected {
        file: "h100_2gpu_1s.sqlite",
        schema: Some("3.25.0"),
        kernels: 3442,
        kernel_ns: 44_829_522,
        memops: 926,
        memsets: 22,
        api_calls: 5796,
        driver_calls: 0,
        ranges: 16782,
        processes: 2,
        devices: 2,
        kernel_links: 1632,
        memop_links: 460,
        threads: 157,
    },
    Expected {
        file: "mfu_2gpu_after.sqlite",
        schema: Some("3.25.0"),
        kernels: 3587,
        kernel_ns: 488_835_406,
        memops: 1146,
        memsets: 242,
        api_calls: 6682,
        driver_calls: 960,
        ranges: 17113,
        processes: 2,
        devices: 2,
        kernel_links: 3577,
        memop_links: 1140,
        threads: 138,
    },
    Expected {
        file: "mfu_2gpu_before.sqlite",
        schema: Some("3.25.0"),
        kernels: 4010,
        kernel_ns: 535_200_650,
        memops: 1289,
        memsets: 269,
        api_calls: 7466,
        driver_calls: 1074,
        ranges: 19118,
        processes: 2,
        devices: 2,
        kernel_links: 3986,
        memop_links: 1282,
        threads: 136,
    },
    Expected {
        file: "mock.sqlite",
        schema: Some("3.24.14"),
        kernels: 2,
        kernel_ns: 4129,
        memops: 1,
        memsets: 0,
        api_calls: 9,
        driver_calls: 1,
        ranges: 0,
        processes: 1,
        devices: 1,
        kernel_links: 2,
        memop_links: 1,
        threads: 9,
    },
    Expected {
        file: "perlmutter-cloverleaf-cuda.sqlite",
        schema: Some("3.13.2"),
        kernels: 1312,
        kernel_ns: 294_404_540,
        memops: 279,
        memsets: 0,
        api_calls: 3048,
        driver_calls: 1,
        ranges: 0,
        processes: 1,
        devices: 4,
        kernel_links: 1312,
        memop_links: 279,
        threads: 6,
    },
];

fn nsys_dir() -> PathBuf {
    shared_traces().join("nsys")
}

fn check(trace: &Trace, e: &Expected) {
    let file = e.file;
    assert_eq!(trace.source.schema_version.as_deref(), e.schema, "{file}");
    assert_eq!(trace.kernels.len(), e.kernels, "{file} kernels");
    assert_eq!(trace.kernels.iter().map(|k| k.end_ns - k.start_ns).sum::<i64>(), e.kernel_ns, "{file} kernel ns");
    assert_eq!(trace.memops.len(), e.memops, "{file} memops");
    assert_eq!(trace.memops.iter().filter(|m| m.is_memset()).count(), e.memsets, "{file} memsets");
    assert_eq!(trace.api_calls.len(), e.api_calls, "{file} api calls");
    assert_eq!(trace.api_calls.iter().filter(|a| a.kind == ApiKind::Driver).count(), e.driver_calls, "{file} driver");
    assert_eq!(trace.ranges.len(), e.ranges, "{file} ranges");
    assert_eq!(trace.processes.len(), e.processes, "{file} processes");
    assert_eq!(trace.devices.len(), e.devices, "{file} devices");
    assert_eq!(trace.kernels.iter().filter(|k| k.launch.is_some()).count(), e.kernel_links, "{file} kernel links");
    assert_eq!(trace.memops.iter().filter(|m| m.launch.is_some()).count(), e.memop_links, "{file} memop links");
    assert_eq!(trace.threads.len(), e.threads, "{file} threads");
    // Every link must point at a call of the same process and correlation id.
    for kernel in &trace.kernels {
        if let Some(call) = kernel.launch.map(|i| &trace.api_calls[i as usize]) {
            assert_eq!((call.process, call.correlation_id), (kernel.process, kernel.correlation_id), "{file}");
        }
    }
    assert!(trace.kernels.windows(2).all(|w| w[0].start_ns <= w[1].start_ns), "{file} sorted");
    assert!(trace.processes.iter().all(|p| p.rank.is_none()), "{file}: no rank is recorded in nsys exports");
    assert!(trace.clock_offset_ns.is_some(), "{file} session start");
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn every_real_export_loads_with_the_counted_contents() {
    let dir = nsys_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sqlite"))
        .collect();
    files.sort();
    let mut expected: Vec<&str> = EXPECTED.iter().map(|e| e.file).collect();
    expected.sort();
    assert_eq!(files, expected, "a new export in {} needs expected counts here", dir.display());
    for e in EXPECTED {
        let trace = nsys::read(&dir.join(e.file)).unwrap_or_else(|err| panic!("{err}"));
        check(&trace, e);
        assert!(trace.warnings.iter().all(|w| !w.what.contains("missing from StringIds")), "{:?}", trace.warnings);
    }
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn processes_devices_and_names_are_decoded() {
    let dir = nsys_dir();
    let trace = nsys::read(&dir.join("mfu_2gpu_before.sqlite")).unwrap();
    // PROCESSES: globalPid 281477392629760 = pid 144, 281477409406976 = pid 145, both python3.
    let pids: Vec<(u32, u64, &str)> = trace.processes.iter().map(|p| (p.pid, p.global_pid, p.name.as_str())).collect();
    assert_eq!(pids, vec![(144, 281477392629760, "python3"), (145, 281477409406976, "python3")]);
    // One process per GPU: device 0 ← pid 144, device 1 ← pid 145 (checked with GROUP BY deviceId, globalPid).
    let owners: Vec<(u32, Option<u32>)> =
        trace.devices.iter().map(|d| (d.ordinal, d.process.map(|p| trace.processes[p.0 as usize].pid))).collect();
    assert_eq!(owners, vec![(0, Some(144)), (1, Some(145))]);
    // 66 ncclDevKernel_SendRecv kernels (shortName), their demangled name with template arguments.
    let sendrecv: Vec<_> =
        trace.kernels.iter().filter(|k| trace.names.get(k.short_name) == "ncclDevKernel_SendRecv").collect();
    assert_eq!(sendrecv.len(), 66);
    assert_eq!(trace.kernel_name(sendrecv[0]), "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)");
    // Runtime names lose nsys' version suffix: 3604 cudaLaunchKernel_v7000 rows, 402 cuLaunchKernelEx (driver).
    let count_api = |name: &str| trace.api_calls.iter().filter(|a| trace.names.get(a.name) == name).count();
    assert_eq!(count_api("cudaLaunchKernel"), 3604);
    assert_eq!(count_api("cuLaunchKernelEx"), 402);
    assert!(
        trace
            .api_calls
            .iter()
            .filter(|a| trace.names.get(a.name) == "cuLaunchKernelEx")
            .all(|a| a.kind == ApiKind::Driver)
    );
    // Inline NVTX text and registered strings (textId) both give names; 132 ncclSend ranges use textId.
    let count_range = |name: &str| trace.ranges.iter().filter(|r| trace.names.get(r.name) == name).count();
    assert_eq!(count_range("ncclSend"), 132);
    assert_eq!(count_range("AllToAll4D, seq = 45440, op_id = 990760"), 1);
    assert!(trace.ranges.iter().all(|r| r.kind == RangeKind::PushPop));
    // 1020 memcpys: 34 Host-to-Device, 986 Device-to-Device (GROUP BY copyKind).
    let copies = |kind| trace.memops.iter().filter(|m| m.copy_kind == Some(kind)).count();
    assert_eq!(copies(shardscope_model::CopyKind::HtoD), 34);
    assert_eq!(copies(shardscope_model::CopyKind::DtoD), 986);
    assert_eq!(trace.clock_offset_ns, Some(1_779_782_330_176_752_435));
    assert_eq!(trace.source.producer.as_deref(), Some("NVIDIA Nsight Systems 2026.2.1.210"));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn gpu_table_fills_device_properties() {
    let dir = nsys_dir();
    let trace = nsys::read(&dir.join("perlmutter-cloverleaf-cuda.sqlite")).unwrap();
    let ordinals: Vec<u32> = trace.devices.iter().map(|d| d.ordinal).collect();
    assert_eq!(ordinals, vec![0, 1, 2, 3]);
    let gpu0 = &trace.devices[0];
    assert_eq!(gpu0.name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(gpu0.bus_location.as_deref(), Some("0000:c1:00.0"));
    assert_eq!(gpu0.sm_count, Some(108));
    assert_eq!(gpu0.memory_bytes, Some(84_990_623_744));
    assert_eq!(gpu0.memory_bandwidth_bytes_per_s, Some(2_039_040_000_000));
    assert_eq!(gpu0.clock_rate_khz, Some(1_410_000));
    // Only GPU 0 ran kernels, all from cuda-cloverleaf (pid 1701896).
    let owner = gpu0.process.map(|p| trace.processes[p.0 as usize].name.as_str());
    assert_eq!(owner, Some("cuda-cloverleaf"));
    assert!(trace.devices[1..].iter().all(|d| d.process.is_none()));
}

/// Copies a real export into a temp folder and changes it with `sql`.
fn modified_copy(dir: &Path, temp: &TempDir, file: &str, sql: &str) -> PathBuf {
    let copy = temp.path().join(file);
    std::fs::copy(dir.join(file), &copy).unwrap();
    let mut perms = std::fs::metadata(&copy).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&copy, perms).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    conn.execute_batch(sql).unwrap();
    drop(conn);
    copy
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn nvtx_domains_are_named_by_their_create_row() {
    let dir = nsys_dir();
    // As exported, domain 1's NvtxDomainCreate row lies before the window: 462 ranges keep the id.
    let trace = nsys::read(&dir.join("mfu_2gpu_before.sqlite")).unwrap();
    let in_domain = |t: &Trace, name: &str| t.ranges.iter().filter(|r| t.names.get(r.domain) == name).count();
    assert_eq!(in_domain(&trace, "domain 1"), 462);
    assert_eq!(in_domain(&trace, ""), 18656);
    assert!(trace.warnings.iter().any(|w| w.what.contains("NvtxDomainCreate") && w.count == 1));

    // With the row NCCL writes when it creates its domain, the same ranges belong to `NCCL`.
    let temp = TempDir::new("nvtx-domain");
    let copy = modified_copy(
        &dir,
        &temp,
        "mfu_2gpu_before.sqlite",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) \
         VALUES (1, NULL, (SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxDomainCreate'), 'NCCL', 281477392629904, 1);",
    );
    let trace = nsys::read(&copy).unwrap();
    assert_eq!(in_domain(&trace, "NCCL"), 462);
    assert_eq!(trace.ranges.len(), 19118, "the domain row is not a range");
    let nccl_send = trace.ranges.iter().filter(|r| trace.names.get(r.name) == "ncclSend").collect::<Vec<_>>();
    assert_eq!(nccl_send.len(), 132);
    assert!(nccl_send.iter().all(|r| trace.names.get(r.domain) == "NCCL"));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn unterminated_ranges_are_counted_not_kept() {
    let dir = nsys_dir();
    let temp = TempDir::new("unterminated");
    // 10 of the 16782 push/pop ranges lose their end.
    let copy = modified_copy(
        &dir,
        &temp,
        "h100_2gpu_1s.sqlite",
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS LIMIT 10);",
    );
    let trace = nsys::read(&copy).unwrap();
    assert_eq!(trace.ranges.len(), 16772);
    let warning = trace.warnings.iter().find(|w| w.what.contains("unterminated")).expect("a warning");
    assert_eq!(warning.count, 10);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn export_without_metadata_table_loads() {
    let dir = nsys_dir();
    let temp = TempDir::new("no-meta");
    let copy = modified_copy(&dir, &temp, "mfu_2gpu_after.sqlite", "DROP TABLE META_DATA_EXPORT;");
    let trace = nsys::read(&copy).unwrap();
    assert_eq!(trace.source.schema_version, None);
    assert_eq!(trace.source.producer, None);
    assert_eq!(trace.kernels.len(), 3587);
    assert_eq!(trace.ranges.len(), 17113);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn export_without_enum_tables_uses_documented_ids() {
    let dir = nsys_dir();
    let temp = TempDir::new("no-enums");
    let copy = modified_copy(
        &dir,
        &temp,
        "mfu_2gpu_after.sqlite",
        "DROP TABLE ENUM_NSYS_EVENT_TYPE; DROP TABLE ENUM_NSYS_EVENT_CLASS; DROP TABLE PROCESSES; \
         ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName;",
    );
    let trace = nsys::read(&copy).unwrap();
    assert_eq!(trace.ranges.len(), 17113);
    assert_eq!(trace.api_calls.iter().filter(|a| a.kind == ApiKind::Driver).count(), 960);
    // Without shortName the short name falls back to the demangled one.
    assert!(trace.kernels.iter().all(|k| k.short_name == k.name));
    // Without PROCESSES the pids still come from globalPid.
    let pids: Vec<u32> = trace.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![148, 149]);
}

/// Asserts a one-line error that names `path`.
fn assert_one_line_naming(err: &Error, path: &Path) {
    let text = err.to_string();
    assert!(!text.contains('\n'), "one line: {text}");
    assert!(text.contains(&path.display().to_string()), "names the file: {text}");
}

#[test]
fn bad_files_give_one_line_errors_naming_the_file() {
    let temp = TempDir::new("bad");
    let missing = temp.path().join("missing.sqlite");
    let err = nsys::read(&missing).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_one_line_naming(&err, &missing);

    let empty = temp.path().join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap();
    let err = nsys::read(&empty).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert_one_line_naming(&err, &empty);

    // The SQLite magic followed by noise.
    let noise = temp.path().join("noise.sqlite");
    let mut bytes = b"SQLite format 3\0".to_vec();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..16384 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.push(state as u8);
    }
    std::fs::write(&noise, &bytes).unwrap();
    let err = nsys::read(&noise).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert_one_line_naming(&err, &noise);

    // A healthy SQLite database of something else.
    let foreign = temp.path().join("foreign.sqlite");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ada');").unwrap();
    drop(conn);
    let err = nsys::read(&foreign).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert!(err.to_string().contains("without Nsight Systems tables"), "{err}");
    assert_one_line_naming(&err, &foreign);

    // Through the format-sniffing entry point too.
    let err = shardscope_io::load(&foreign).unwrap_err();
    assert_one_line_naming(&err, &foreign);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn truncated_and_future_exports_are_refused() {
    let dir = nsys_dir();
    let temp = TempDir::new("refused");
    for (file, keep) in [("mfu_2gpu_before.sqlite", 4096), ("h100_2gpu_1s.sqlite", 1 << 20)] {
        let truncated = temp.path().join(format!("truncated-{keep}-{file}"));
        let bytes = std::fs::read(dir.join(file)).unwrap();
        std::fs::write(&truncated, &bytes[..keep]).unwrap();
        let err = nsys::read(&truncated).unwrap_err();
        assert!(matches!(err, Error::Format { .. }), "{err}");
        assert_one_line_naming(&err, &truncated);
    }

    let future = modified_copy(
        &dir,
        &temp,
        "mock.sqlite",
        "UPDATE META_DATA_EXPORT SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION';",
    );
    let err = nsys::read(&future).unwrap_err();
    match &err {
        Error::UnsupportedVersion { version, .. } => assert_eq!(version, "9.0.0"),
        other => panic!("expected UnsupportedVersion, got {other}"),
    }
    assert_one_line_naming(&err, &future);
}

/// nsys keeps each copy's source and destination memory kind (`srcKind`, `dstKind`, `ENUM_CUDA_MEM_KIND`): the
/// sample's 292 host-to-device copies (63,440 bytes) all come from pageable memory into device memory
/// (`SELECT srcKind, dstKind, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2`: `0|2|292|63440`).
#[test]
fn committed_export_keeps_the_copies_memory_kinds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/tp2_nsys.sqlite.gz");
    let trace = shardscope_io::load(&path).unwrap().remove(0);
    let copies: Vec<_> = trace.memops.iter().filter(|m| !m.is_memset()).collect();
    assert_eq!(copies.len(), 292);
    assert_eq!(copies.iter().map(|m| m.bytes).sum::<u64>(), 63_440);
    let kinds = (Some(MemoryKind::Pageable), Some(MemoryKind::Device));
    assert!(copies.iter().all(|m| (m.src_memory, m.dst_memory) == kinds && m.host_memory() == kinds.0));
}

#[test]
fn committed_two_rank_export_matches_nsys_stats() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/tp2_nsys.sqlite.gz");
    // A committed sample: every checkout has it.
    assert!(path.is_file(), "{} is committed", path.display());
    let traces = shardscope_io::load(&path).unwrap();
    let trace = &traces[0];
    assert_eq!(trace.source.schema_version.as_deref(), Some("3.20.3"));
    // nsys stats --report cuda_gpu_kern_sum (sample-traces/nsys-reference): 1184 instances, 47,296,657 ns in all,
    // of which the bf16 ring all-reduce kernel ran 144 times for 37,383,781 ns.
    assert_eq!(trace.kernels.len(), 1184);
    assert_eq!(trace.kernels.iter().map(|k| k.duration_ns()).sum::<i64>(), 47_296_657);
    let all_reduce: Vec<_> = trace
        .kernels
        .iter()
        .filter(|k| {
            trace.kernel_name(k)
                == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
        })
        .collect();
    assert_eq!(all_reduce.len(), 144);
    assert_eq!(all_reduce.iter().map(|k| k.duration_ns()).sum::<i64>(), 37_383_781);
    // Both ranks create the NCCL domain (two NvtxDomainCreate rows, domainId 1): 152 ranges, 146 ncclAllReduce.
    let nccl: Vec<_> = trace.ranges.iter().filter(|r| trace.names.get(r.domain) == "NCCL").collect();
    assert_eq!(nccl.len(), 152);
    assert_eq!(nccl.iter().filter(|r| trace.names.get(r.name) == "ncclAllReduce").count(), 146);
    let default_domain =
        |name: &str| trace.ranges.iter().filter(|r| r.domain.0 == 0 && trace.names.get(r.name) == name).count();
    assert_eq!((default_domain("prefill"), default_domain("decode")), (4, 32));
    // Processes with events: the launcher (pid 582, one driver call) and the two ranks (606, 607).
    let pids: Vec<u32> = trace.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![582, 606, 607]);
    let gpus: Vec<(u32, &str, Option<u32>, Option<u32>)> = trace
        .devices
        .iter()
        .map(|d| (d.ordinal, d.name.as_str(), d.sm_count, d.process.map(|p| trace.processes[p.0 as usize].pid)))
        .collect();
    assert_eq!(gpus, vec![(0, "NVIDIA H200", Some(132), Some(606)), (1, "NVIDIA H200", Some(132), Some(607))]);
    assert_eq!(trace.api_calls.len(), 16781);
    assert_eq!(trace.api_calls.iter().filter(|a| a.kind == ApiKind::Driver).count(), 10545);
    assert_eq!(trace.memops.len(), 500);
    assert_eq!(trace.kernels.iter().filter(|k| k.launch.is_some()).count(), 1184);
    assert_eq!(trace.memops.iter().filter(|m| m.launch.is_some()).count(), 500);
    assert_eq!(trace.threads.len(), 37);
    assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
}

/// `Extent::GpuWork` (what `analyzer kern-sum` reads) keeps every kernel, copy and graph launch of the whole read,
/// with the same times, names, processes and devices, and reads no host call or NVTX range, nor a kernel's stream,
/// correlation id, grid, block or graph ids; other formats are read whole.
/// Processes are numbered as they are met, so a process seen only in host calls is missing and the numbers may
/// differ: events are compared by process id and device ordinal.
#[test]
fn reading_gpu_work_only_keeps_the_gpu_work_of_the_whole_read() {
    type Event = (i64, i64, String, String, u32, u32);
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces");
    for name in ["tp2_nsys.sqlite.gz", "tp2_capture.sqlite.gz", "engines/hf_server_static_2windows.sqlite.gz"] {
        let path = samples.join(name);
        let whole = shardscope_io::load(&path).unwrap().remove(0);
        let gpu = shardscope_io::load_extent(&path, shardscope_io::Extent::GpuWork).unwrap().remove(0);
        let at = |t: &Trace, process: shardscope_model::ProcessIdx, device: shardscope_model::DeviceIdx| {
            (t.processes[process.0 as usize].pid, t.devices[device.0 as usize].ordinal)
        };
        let kernels = |t: &Trace| -> Vec<Event> {
            let row = |k: &shardscope_model::Kernel| {
                let (pid, ordinal) = at(t, k.process, k.device);
                let short = t.names.get(k.short_name).to_string();
                (k.start_ns, k.end_ns, t.kernel_name(k).to_string(), short, pid, ordinal)
            };
            t.kernels.iter().map(row).collect()
        };
        let memops = |t: &Trace| -> Vec<(i64, i64, u64, u32, u32)> {
            let row = |m: &shardscope_model::MemOp| {
                let (pid, ordinal) = at(t, m.process, m.device);
                (m.start_ns, m.end_ns, m.bytes, pid, ordinal)
            };
            t.memops.iter().map(row).collect()
        };
        let graphs = |t: &Trace| -> Vec<(i64, i64, u32, u32)> {
            let row = |g: &shardscope_model::GraphLaunch| {
                let (pid, ordinal) = at(t, g.process, g.device);
                (g.start_ns, g.end_ns, pid, ordinal)
            };
            t.graph_launches.iter().map(row).collect()
        };
        assert!(!whole.kernels.is_empty() && !whole.api_calls.is_empty(), "{name}");
        assert!(kernels(&gpu) == kernels(&whole), "{name}: the kernels differ");
        assert!(memops(&gpu) == memops(&whole), "{name}: the copies differ");
        assert!(graphs(&gpu) == graphs(&whole), "{name}: the graph launches differ");
        assert!(gpu.api_calls.is_empty() && gpu.ranges.is_empty(), "{name}");
        let details = |k: &shardscope_model::Kernel| (k.stream, k.correlation_id, k.grid, k.block, k.graph_id);
        assert!(gpu.kernels.iter().all(|k| details(k) == (0, 0, [0; 3], [0; 3], None)), "{name}: details were read");
        assert!(whole.kernels.iter().any(|k| k.correlation_id != 0 && k.grid != [0; 3]), "{name}");
    }
    let kineto = samples.join("kineto_tp2");
    let whole = shardscope_io::load(&kineto).unwrap();
    let gpu = shardscope_io::load_extent(&kineto, shardscope_io::Extent::GpuWork).unwrap();
    let api_calls = |traces: &[Trace]| traces.iter().map(|t| t.api_calls.len()).sum::<usize>();
    assert!(api_calls(&whole) > 0);
    assert_eq!(api_calls(&gpu), api_calls(&whole));
}
