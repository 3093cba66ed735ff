//! The Kineto reader on the real PyTorch-profiler traces in `../shared/traces/kineto`.
//!
//! Every expected number here was computed independently with Python's `json` module
//! (`parse_float=decimal.Decimal` for exact times) over the same files.

use std::path::{Path, PathBuf};

use shardscope_io::kineto;
use shardscope_model::{ApiKind, CollectiveOp, CopyKind, RangeKind, Trace};

/// The shared Kineto folder. Tests that call this carry `#[cfg_attr(not(shared_traces), ignore = …)]`: the build
/// script sets that cfg, and the path, when `../shared/traces` is beside the checkout, so without it `cargo test`
/// lists them as ignored rather than passed.
fn kineto_dir() -> PathBuf {
    match option_env!("SHARDSCOPE_SHARED_TRACES") {
        Some(dir) => Path::new(dir).join("kineto"),
        None => panic!("../shared/traces was not there when this test was built (see trace-io/build.rs)"),
    }
}

fn read(dir: &Path, file: &str) -> Trace {
    let path = dir.join(file);
    kineto::read(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// What Python counts in one file.
struct Expected {
    file: &'static str,
    kernels: usize,
    memcpys: usize,
    memsets: usize,
    memcpy_bytes: u64,
    runtime_calls: usize,
    driver_calls: usize,
    cpu_ranges: usize,
    gpu_ranges: usize,
    profiler_steps: usize,
    /// Kernels whose correlation id finds a CUDA call of the launching process.
    kernel_launch_links: usize,
    memop_launch_links: usize,
    device_ordinals: &'static [u32],
    rank: Option<u32>,
    world_size: Option<u32>,
    /// Sum of kernel durations, ns.
    kernel_ns: i64,
    /// Counted import warnings.
    warnings: &'static [(&'static str, u64)],
}

const EXPECTED: &[Expected] = &[
    Expected {
        file: "backward_thread.json",
        kernels: 1,
        memcpys: 0,
        memsets: 0,
        memcpy_bytes: 0,
        runtime_calls: 1,
        driver_calls: 0,
        cpu_ranges: 2,
        gpu_ranges: 0,
        profiler_steps: 1,
        kernel_launch_links: 1,
        memop_launch_links: 0,
        device_ordinals: &[0],
        rank: Some(0),
        world_size: None,
        kernel_ns: 45_000,
        warnings: &[],
    },
    Expected {
        file: "benchmark_result_2869224_1695835535_trace.json.gz",
        kernels: 79,
        memcpys: 16,
        memsets: 3,
        memcpy_bytes: 244_403_360,
        runtime_calls: 361,
        driver_calls: 0,
        cpu_ranges: 8,
        gpu_ranges: 0,
        profiler_steps: 0,
        kernel_launch_links: 79,
        memop_launch_links: 19,
        device_ordinals: &[0],
        rank: Some(0),
        world_size: None,
        kernel_ns: 10_692_000,
        warnings: &[],
    },
    Expected {
        file: "df_index_resolver.json.gz",
        kernels: 19_370,
        memcpys: 2040,
        memsets: 880,
        memcpy_bytes: 5_892_787_600,
        runtime_calls: 42_373,
        driver_calls: 0,
        cpu_ranges: 2035,
        gpu_ranges: 0,
        profiler_steps: 5,
        kernel_launch_links: 19_370,
        memop_launch_links: 2920,
        device_ordinals: &[1],
        rank: Some(1),
        world_size: Some(2),
        kernel_ns: 977_859_000,
        warnings: &[],
    },
    Expected {
        file: "inference_rank_1.json.gz",
        kernels: 4,
        memcpys: 0,
        memsets: 0,
        memcpy_bytes: 0,
        runtime_calls: 8,
        driver_calls: 0,
        cpu_ranges: 0,
        gpu_ranges: 0,
        profiler_steps: 0,
        kernel_launch_links: 4,
        memop_launch_links: 0,
        device_ordinals: &[0],
        rank: Some(1),
        world_size: None,
        kernel_ns: 30_000,
        warnings: &[],
    },
    Expected {
        file: "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        kernels: 14,
        memcpys: 2,
        memsets: 0,
        memcpy_bytes: 0,
        runtime_calls: 21,
        driver_calls: 0,
        cpu_ranges: 3,
        gpu_ranges: 2,
        profiler_steps: 2,
        kernel_launch_links: 14,
        memop_launch_links: 2,
        device_ordinals: &[2],
        rank: None,
        world_size: None,
        kernel_ns: 110_881,
        // ROCm copies carry no `bytes` arg.
        warnings: &[("gpu_memcpy event without 'bytes' (counted as 0 bytes)", 2)],
    },
    Expected {
        file: "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        kernels: 4350,
        memcpys: 1600,
        memsets: 145,
        memcpy_bytes: 512_205_160,
        runtime_calls: 15_329,
        driver_calls: 0,
        cpu_ranges: 70,
        gpu_ranges: 15,
        profiler_steps: 5,
        kernel_launch_links: 4350,
        memop_launch_links: 1745,
        device_ordinals: &[0],
        rank: Some(0),
        world_size: Some(1),
        kernel_ns: 468_153_602,
        warnings: &[],
    },
    Expected {
        file: "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        kernels: 0,
        memcpys: 0,
        memsets: 0,
        memcpy_bytes: 0,
        runtime_calls: 0,
        driver_calls: 0,
        cpu_ranges: 11,
        gpu_ranges: 0,
        profiler_steps: 1,
        kernel_launch_links: 0,
        memop_launch_links: 0,
        device_ordinals: &[],
        rank: Some(34),
        world_size: Some(300),
        kernel_ns: 0,
        warnings: &[],
    },
    Expected {
        file: "triton_example.json.gz",
        kernels: 1,
        memcpys: 0,
        memsets: 0,
        memcpy_bytes: 0,
        runtime_calls: 1,
        driver_calls: 1,
        cpu_ranges: 1,
        gpu_ranges: 0,
        profiler_steps: 1,
        kernel_launch_links: 1,
        memop_launch_links: 0,
        device_ordinals: &[0],
        rank: None,
        world_size: None,
        kernel_ns: 1760,
        warnings: &[],
    },
    Expected {
        file: "dlrm_8rank/worker1_step_12.1694128201556.pt.trace.json.gz",
        kernels: 310,
        memcpys: 16,
        memsets: 0,
        memcpy_bytes: 77_984,
        runtime_calls: 527,
        driver_calls: 0,
        cpu_ranges: 40,
        gpu_ranges: 0,
        profiler_steps: 1,
        kernel_launch_links: 246,
        memop_launch_links: 16,
        device_ordinals: &[1],
        rank: Some(1),
        world_size: Some(8),
        kernel_ns: 12_582_000,
        warnings: &[],
    },
    Expected {
        file: "dlrm_8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
        kernels: 315,
        memcpys: 16,
        memsets: 6,
        memcpy_bytes: 77_984,
        runtime_calls: 541,
        driver_calls: 0,
        cpu_ranges: 40,
        gpu_ranges: 0,
        profiler_steps: 1,
        kernel_launch_links: 251,
        memop_launch_links: 22,
        device_ordinals: &[3],
        rank: Some(3),
        world_size: Some(8),
        kernel_ns: 11_014_000,
        warnings: &[],
    },
    Expected {
        file: "sampled_2rank/sampled_rank-0.json.gz",
        kernels: 1154,
        memcpys: 40,
        memsets: 10,
        memcpy_bytes: 214_067_131,
        runtime_calls: 1204,
        driver_calls: 0,
        cpu_ranges: 73,
        gpu_ranges: 0,
        profiler_steps: 2,
        kernel_launch_links: 1154,
        memop_launch_links: 50,
        device_ordinals: &[0],
        rank: Some(0),
        world_size: Some(128),
        kernel_ns: 606_519_000,
        warnings: &[],
    },
];

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn every_file_loads_with_the_counts_python_finds() {
    let dir = kineto_dir();
    for expected in EXPECTED {
        let trace = read(&dir, expected.file);
        let file = expected.file;
        let memcpys: Vec<_> = trace.memops.iter().filter(|m| !m.is_memset()).collect();
        let count_ranges = |kind| trace.ranges.iter().filter(|r| r.kind == kind).count();
        let count_calls = |kind| trace.api_calls.iter().filter(|c| c.kind == kind).count();
        assert_eq!(trace.kernels.len(), expected.kernels, "{file}: kernels");
        assert_eq!(memcpys.len(), expected.memcpys, "{file}: memcpys");
        assert_eq!(trace.memops.len() - memcpys.len(), expected.memsets, "{file}: memsets");
        assert_eq!(memcpys.iter().map(|m| m.bytes).sum::<u64>(), expected.memcpy_bytes, "{file}: memcpy bytes");
        assert_eq!(count_calls(ApiKind::Runtime), expected.runtime_calls, "{file}: runtime calls");
        assert_eq!(count_calls(ApiKind::Driver), expected.driver_calls, "{file}: driver calls");
        assert_eq!(count_ranges(RangeKind::CpuAnnotation), expected.cpu_ranges, "{file}: CPU ranges");
        assert_eq!(count_ranges(RangeKind::GpuAnnotation), expected.gpu_ranges, "{file}: GPU ranges");
        let is_step = |r: &&shardscope_model::Range| {
            r.kind == RangeKind::CpuAnnotation && trace.names.get(r.name).starts_with("ProfilerStep#")
        };
        let steps = trace.ranges.iter().filter(is_step).count();
        assert_eq!(steps, expected.profiler_steps, "{file}: ProfilerStep ranges");
        let kernel_links = trace.kernels.iter().filter(|k| k.launch.is_some()).count();
        assert_eq!(kernel_links, expected.kernel_launch_links, "{file}: kernel launch links");
        let memop_links = trace.memops.iter().filter(|m| m.launch.is_some()).count();
        assert_eq!(memop_links, expected.memop_launch_links, "{file}: memop launch links");
        let ordinals: Vec<u32> = trace.devices.iter().map(|d| d.ordinal).collect();
        assert_eq!(ordinals, expected.device_ordinals, "{file}: devices");
        assert_eq!(trace.kernels.iter().map(|k| k.duration_ns()).sum::<i64>(), expected.kernel_ns, "{file}: kernel ns");
        assert!(!trace.processes.is_empty(), "{file}: a process");
        for process in &trace.processes {
            assert_eq!(process.rank, expected.rank, "{file}: rank");
            assert_eq!(process.world_size, expected.world_size, "{file}: world size");
        }
        for device in &trace.devices {
            let process = device.process.expect("device has its process");
            // The process that launched the GPU work: the one with the CUDA calls.
            assert!(trace.api_calls.iter().all(|c| c.process == process), "{file}: device process");
        }
        let warnings: Vec<(&str, u64)> = trace.warnings.iter().map(|w| (w.what.as_str(), w.count)).collect();
        assert_eq!(warnings, expected.warnings, "{file}: warnings");
        assert!(trace.kernels.windows(2).all(|w| w[0].start_ns <= w[1].start_ns), "{file}: kernels sorted");
    }
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn launch_links_point_at_the_call_with_the_same_correlation() {
    let dir = kineto_dir();
    let trace = read(&dir, "triton_example.json.gz");
    let kernel = &trace.kernels[0];
    assert_eq!(trace.kernel_name(kernel), "triton_poi_fused_add_cos_sin_0");
    assert_eq!(kernel.correlation_id, 35);
    let call = &trace.api_calls[kernel.launch.expect("linked") as usize];
    assert_eq!(trace.names.get(call.name), "cuLaunchKernel");
    assert_eq!(call.kind, ApiKind::Driver);
    assert_eq!(call.correlation_id, 35);
    assert_eq!((kernel.grid, kernel.block, kernel.stream), ([1, 1, 1], [128, 1, 1], 7));
    // Two CPU pids in this file: the ProfilerStep annotation sits on a second one.
    assert_eq!(trace.processes.len(), 2);
    assert_eq!(trace.processes[trace.devices[0].process.unwrap().0 as usize].pid, 1_670_242);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn nccl_kernels_get_the_collective_of_the_annotation_around_their_launch() {
    let dir = kineto_dir();
    // DLRM: every rank runs 3 all-reduces of 394241, 112 and 226960 floats (2,485,252 bytes) and
    // 5 all-to-alls of 6144 + 6144 floats, 24 longs, 384 + 3392 ints (64,448 bytes), the latter
    // as SendRecv kernels.
    let traces = shardscope_io::load(&dir.join("dlrm_8rank")).unwrap();
    for trace in &traces {
        let of = |op| trace.collectives.iter().filter(|c| c.op == op).collect::<Vec<_>>();
        let all_reduces = of(CollectiveOp::AllReduce);
        let all_to_alls = of(CollectiveOp::AllToAll);
        assert_eq!((all_reduces.len(), all_to_alls.len(), trace.collectives.len()), (3, 5, 8));
        assert_eq!(all_reduces.iter().map(|c| c.bytes.unwrap()).sum::<u64>(), 2_485_252);
        assert_eq!(all_to_alls.iter().map(|c| c.bytes.unwrap()).sum::<u64>(), 64_448);
        for collective in &all_reduces {
            assert_eq!(trace.names.get(collective.dtype), "float");
            assert_eq!(collective.bytes, collective.in_elems.map(|n| n * 4));
        }
        let mut dtypes: Vec<&str> = all_to_alls.iter().map(|c| trace.names.get(c.dtype)).collect();
        dtypes.sort();
        assert_eq!(dtypes, ["float", "float", "int", "int", "long int"]);
        for collective in &trace.collectives {
            let kernel = &trace.kernels[collective.kernel.expect("collective has its kernel") as usize];
            assert_eq!(kernel.collective.map(|c| &trace.collectives[c as usize]), Some(collective));
            assert!(trace.kernel_name(kernel).starts_with("ncclKernel_"));
        }
        let nccl_kernels = trace.kernels.iter().filter(|k| trace.kernel_name(k).starts_with("nccl")).count();
        assert_eq!(nccl_kernels, 8);
    }
    // The sampled 128-rank job: element types other than float.
    let trace = read(&dir, "sampled_2rank/sampled_rank-0.json.gz");
    let bytes_of = |op| trace.collectives.iter().filter(|c| c.op == op).map(|c| c.bytes.unwrap()).sum::<u64>();
    assert_eq!(trace.collectives.len(), 10);
    assert_eq!(bytes_of(CollectiveOp::AllToAll), 850_250_752);
    assert_eq!(bytes_of(CollectiveOp::AllReduce), 314_195_708);
    assert_eq!(bytes_of(CollectiveOp::AllGather), 33_554_432);
    // df_index_resolver: the annotations carry no shapes, so only the operation is known.
    let trace = read(&dir, "df_index_resolver.json.gz");
    assert_eq!(trace.collectives.len(), 2020);
    assert!(trace.collectives.iter().all(|c| c.op == CollectiveOp::AllReduce && c.bytes.is_none()));
    assert!(trace.collectives.iter().all(|c| c.kernel.is_some()));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn timestamps_keep_every_nanosecond() {
    let dir = kineto_dir();
    // The first kernel: "ts": 1712195495505582.988, "dur": 4.928 (an f64 reads 1712195495505583.0).
    let trace = read(&dir, "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    let first = &trace.kernels[0];
    assert_eq!(first.start_ns, 1_712_195_495_505_582_988);
    assert_eq!(first.end_ns, 1_712_195_495_505_587_916);
    assert_eq!(first.correlation_id, 135_071);
    assert_eq!(trace.names.get(first.short_name), "CatArrayBatchedCopy_aligned16_contig");
    // Epoch microseconds without baseTimeNanoseconds: already absolute.
    assert_eq!(trace.clock_offset_ns, Some(0));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn base_time_becomes_the_clock_offset() {
    let dir = kineto_dir();
    let trace = read(&dir, "mi250_minitoy_train_ROCm6_2_kineto.json.gz");
    assert_eq!(trace.clock_offset_ns, Some(1_735_632_360_000_000_000));
    assert_eq!(trace.source.schema_version.as_deref(), Some("1"));
    // "ts": 4203669603187.439 for ProfilerStep#1, relative to the base time.
    let step = trace.ranges.iter().find(|r| trace.names.get(r.name) == "ProfilerStep#1").unwrap();
    assert_eq!((step.start_ns, step.duration_ns()), (4_203_669_603_187_439, 9_288_291));
    let device = &trace.devices[0];
    assert_eq!((device.ordinal, device.name.as_str()), (2, "AMD Radeon Graphics"));
    assert_eq!((device.sm_count, device.memory_bytes), (Some(104), Some(68_702_699_520)));
    // AMD copies carry no byte count: counted, not dropped.
    assert_eq!(trace.memops.len(), 2);
    assert_eq!(trace.memops[0].copy_kind, Some(CopyKind::HtoD));
    let gpu_ranges: Vec<_> = trace.ranges.iter().filter(|r| r.kind == RangeKind::GpuAnnotation).collect();
    assert!(gpu_ranges.iter().all(|r| r.device == Some(shardscope_model::DeviceIdx(0)) && r.stream == Some(0)));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn cpu_only_trace_has_a_ranked_process_and_no_gpu() {
    let dir = kineto_dir();
    let trace = read(&dir, "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz");
    assert!(trace.kernels.is_empty() && trace.devices.is_empty() && trace.collectives.is_empty());
    assert_eq!(trace.processes.len(), 1);
    let process = &trace.processes[0];
    assert_eq!((process.pid, process.name.as_str()), (1074, "pyper:trainer:8:2"));
    assert_eq!((process.rank, process.world_size), (Some(34), Some(300)));
    let threads: Vec<(u32, &str)> = trace.threads.iter().map(|t| (t.tid, t.name.as_str())).collect();
    assert_eq!(
        threads,
        vec![
            (1074, "thread 1074 (pt_main_thread)"),
            (3553, "thread 3553 (pt_main_thread)"),
            (3554, "thread 3554 (pt_main_thread)")
        ]
    );
    assert_eq!(trace.clock_offset_ns, Some(1_719_853_884_000_000_000));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn devices_take_their_properties_and_process_names_their_metadata() {
    let dir = kineto_dir();
    let trace = read(&dir, "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz");
    assert_eq!(trace.devices.len(), 1);
    let device = &trace.devices[0];
    assert_eq!(device.name, "Tesla V100-SXM2-32GB");
    assert_eq!((device.sm_count, device.memory_bytes), (Some(80), Some(34_079_899_648)));
    assert_eq!(trace.device_rank(shardscope_model::DeviceIdx(0)), Some(0));
    assert_eq!((trace.processes[0].pid, trace.processes[0].name.as_str()), (59811, "python3"));
    let host = read(&dir, "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    assert_eq!(host.processes[0].host.as_deref(), Some("twshared39868.02.pnb3.facebook.com"));
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn a_folder_of_ranks_loads_as_one_trace_per_rank() {
    let dir = kineto_dir();
    let traces = shardscope_io::load(&dir.join("dlrm_8rank")).unwrap();
    let ranks: Vec<Option<u32>> = traces.iter().map(|t| t.processes[0].rank).collect();
    assert_eq!(ranks, (0..8).map(Some).collect::<Vec<_>>());
    assert!(traces.iter().all(|t| t.processes[0].world_size == Some(8)));
    let kernels: usize = traces.iter().map(|t| t.kernels.len()).sum();
    assert_eq!(kernels, 245 + 310 + 246 + 315 + 251 + 245 + 246 + 246);
}

/// A scratch file under the system temp dir, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!("shardscope-kineto-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn assert_one_line_error(path: &Path, expect_in_message: &str) {
    let error = kineto::read(path).err().unwrap_or_else(|| panic!("{} should not load", path.display()));
    let message = format!("{error:#}");
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(message.contains(&path.display().to_string()), "names the file: {message}");
    assert!(message.contains(expect_in_message), "says '{expect_in_message}': {message}");
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn bad_inputs_fail_with_one_line_naming_the_file() {
    assert_one_line_error(Path::new("/nonexistent/trace.json.gz"), "No such file");
    assert_one_line_error(&TempFile::new("empty.json", b"").0, "empty");
    assert_one_line_error(&TempFile::new("array.json", b"[{\"ph\": \"X\"}]").0, "expected a Chrome trace JSON object");
    assert_one_line_error(&TempFile::new("no-events.json", b"{\"schemaVersion\": 1}").0, "no 'traceEvents'");
    assert_one_line_error(&TempFile::new("events-object.json", b"{\"traceEvents\": {}}").0, "is not an array");
    assert_one_line_error(&TempFile::new("not-utf8.json", b"{\"traceEvents\": [\"\xff\"]}").0, "UTF-8");
    assert_one_line_error(&TempFile::new("number.json", b"42").0, "expected a Chrome trace JSON object");
    let dir = kineto_dir();
    // Truncated plain JSON: cut in the middle of an event.
    let plain = std::fs::read(dir.join("backward_thread.json")).unwrap();
    assert_one_line_error(&TempFile::new("cut.json", &plain[..plain.len() / 2]).0, "unexpected end of the JSON text");
    // The first half of a real gzip file.
    let gzip = std::fs::read(dir.join("dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz")).unwrap();
    assert_one_line_error(&TempFile::new("cut.json.gz", &gzip[..gzip.len() / 2]).0, "truncated gzip");
    // A gzip whose content is a truncated trace.
    let text = gunzip(&gzip);
    let half = TempFile::new("half-text.json.gz", &gzip_bytes(&text[..text.len() / 2]));
    assert_one_line_error(&half.0, "not valid Kineto JSON");
    // Through the content-sniffing entry point, by content and not by name.
    let renamed = TempFile::new("really-gzip.txt", &gzip);
    assert_eq!(shardscope_io::load(&renamed.0).unwrap()[0].kernels.len(), 245);
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn every_prefix_and_corruption_of_a_trace_fails_cleanly() {
    let dir = kineto_dir();
    let text = std::fs::read(dir.join("backward_thread.json")).unwrap();
    let file = TempFile::new("prefix.json", b"");
    // Every cut of the text either loads (only the whole file does) or gives a one-line error.
    for cut in 1..text.len() {
        std::fs::write(&file.0, &text[..cut]).unwrap();
        match kineto::read(&file.0) {
            Ok(_) => assert!(text[cut..].iter().all(u8::is_ascii_whitespace), "cut {cut} loaded"),
            Err(e) => assert!(!e.to_string().contains('\n'), "cut {cut}: {e}"),
        }
    }
    // Overwriting any one byte with a quote, a bracket or garbage never panics.
    for at in (0..text.len()).step_by(7) {
        for replacement in [b'"', b'}', b'[', 0xff, b'x'] {
            let mut corrupt = text.clone();
            corrupt[at] = replacement;
            std::fs::write(&file.0, &corrupt).unwrap();
            if let Err(e) = kineto::read(&file.0) {
                assert!(!e.to_string().contains('\n'));
            }
        }
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut text).unwrap();
    text
}

fn gzip_bytes(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn malformed_events_are_counted_and_flows_stand_in_for_missing_correlations() {
    let json = br#"{
      "schemaVersion": "2.0-experimental",
      "distributedInfo": {"rank": 3, "world_size": 4, "pg_config": [{"pg_name": "7", "ranks": [2, 3]}]},
      "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
         "ts": 100.0005, "dur": 2, "args": {"correlation": 77}},
        {"ph": "s", "cat": "ac2g", "id": 77, "pid": 10, "tid": 11, "ts": 100.0005},
        {"ph": "f", "cat": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 105.25, "bp": "e"},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "pid": 0, "tid": 7, "ts": 105.25, "dur": 10,
         "args": {"device": 0, "stream": 7, "Collective name": "allgather", "In msg nelems": 1024,
                  "Out msg nelems": 2048, "Group size": 2, "dtype": "BFloat16", "Process Group Name": "7"}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 120, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7,
         "ts": 130, "dur": 1, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 140, "dur": -1},
        17,
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 1, "dur": 1}
      ]
    }"#;
    let file = TempFile::new("synthetic.json", json);
    let trace = kineto::read(&file.0).unwrap();
    assert_eq!(trace.source.schema_version.as_deref(), Some("2.0-experimental"));
    assert_eq!(trace.clock_offset_ns, None);
    assert_eq!(trace.kernels.len(), 1);
    let kernel = &trace.kernels[0];
    assert_eq!((kernel.start_ns, kernel.end_ns, kernel.correlation_id), (105_250, 115_250, 77));
    assert_eq!(trace.api_calls[kernel.launch.unwrap() as usize].start_ns, 100_001);
    let collective = &trace.collectives[kernel.collective.unwrap() as usize];
    assert_eq!(collective.op, CollectiveOp::AllGather);
    assert_eq!((collective.in_elems, collective.out_elems, collective.bytes), (Some(1024), Some(2048), Some(2048)));
    assert_eq!(trace.names.get(collective.dtype), "BFloat16");
    assert_eq!(collective.group_ranks, vec![2, 3]);
    assert_eq!(collective.group_size, Some(2));
    assert_eq!(trace.memops[0].copy_kind, Some(CopyKind::DtoH));
    let warnings: Vec<(&str, u64)> = trace.warnings.iter().map(|w| (w.what.as_str(), w.count)).collect();
    assert_eq!(
        warnings,
        vec![
            ("kernel event without a valid 'dur' skipped", 1),
            ("kernel event without a valid 'ts' skipped", 1),
            ("gpu_memcpy event without 'bytes' (counted as 0 bytes)", 1),
            ("kernel event with a negative 'dur' skipped", 1),
            ("traceEvents element that is not an object skipped", 1),
            ("GPU event without args.correlation, linked to its launch by its ac2g flow", 1),
        ]
    );
    assert_eq!(trace.processes[0].rank, Some(3));
}
