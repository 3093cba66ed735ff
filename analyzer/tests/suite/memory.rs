//! The report's `memory` section: the framework allocator's peaks of a real Kineto trace (`profile_memory=True`)
//! against the same trace's `[memory]` events read here with serde_json, and the CUDA-level peak, its kernels,
//! live allocations and phases on a trace built by hand.

use crate::common;

use std::io::Read;

use common::{analyzer, shared_traces};
use serde_json::Value;
use shardscope_analyzer::report::{Options, analyze};
use shardscope_model::{Device, Kernel, MemoryEvent, MemoryKind, MemoryOperation, Process, Range, RangeKind, Trace};

/// rank 1 of 2 (V100) with 28,010 `[memory]` events: the report's framework peak is the highest `Total Allocated`
/// and `Total Reserved` of the GPU's events, as the file states them.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn kineto_framework_peaks_are_the_files_own_totals() {
    let path = shared_traces().join("kineto/df_index_resolver.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_string(&mut text).unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    let gpu_events: Vec<&Value> = file["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "[memory]" && e["args"]["Device Type"] == 1)
        .collect();
    let max_of = |key: &str| gpu_events.iter().map(|e| e["args"][key].as_u64().unwrap()).max().unwrap();
    let (allocated, reserved) = (max_of("Total Allocated"), max_of("Total Reserved"));

    let output = analyzer(&["report", "--format", "json", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let memory = report["memory"].as_array().expect("a memory section");
    assert_eq!(memory.len(), 1);
    let framework = &memory[0]["framework"];
    assert_eq!(framework["samples"].as_u64().unwrap(), gpu_events.len() as u64);
    assert_eq!(framework["peak_allocated_bytes"].as_u64().unwrap(), allocated);
    assert_eq!(framework["peak_reserved_bytes"].as_u64().unwrap(), reserved);
    assert!(memory[0]["cuda"].is_null(), "a Kineto trace holds no CUDA-level allocations");
}

fn event(time_ns: i64, operation: MemoryOperation, address: u64, bytes: u64) -> MemoryEvent {
    MemoryEvent { time_ns, operation, address, bytes, kind: MemoryKind::Device, ..MemoryEvent::default() }
}

/// One GPU: weights (1 GiB) in `load`, then in `decode` a 512 MiB activation during a GEMM, released, and a
/// 256 MiB one.
fn built_trace() -> Trace {
    let mut trace = Trace::default();
    let process = trace.add_process(Process { pid: 7, rank: Some(0), ..Process::default() });
    let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
    let gemm = trace.names.intern("gemm_kernel");
    let other = trace.names.intern("elementwise");
    for (start_ns, end_ns, name) in [(1_000, 1_900, other), (2_000, 3_000, gemm), (3_100, 3_200, other)] {
        trace.kernels.push(Kernel { start_ns, end_ns, name, short_name: name, device, process, ..Kernel::default() });
    }
    for (name, start_ns, end_ns) in [("load", 0, 1_500), ("decode", 1_500, 4_000)] {
        let name = trace.names.intern(name);
        trace.ranges.push(Range { start_ns, end_ns, name, kind: RangeKind::default(), process, ..Range::default() });
    }
    trace.memory_events = vec![
        event(100, MemoryOperation::Allocation, 0x1000, 1 << 30),
        MemoryEvent { kind: MemoryKind::Pinned, ..event(200, MemoryOperation::Allocation, 0x9000, 8 << 30) },
        event(2_500, MemoryOperation::Allocation, 0x2000, 512 << 20),
        event(2_800, MemoryOperation::Release, 0x2000, 512 << 20),
        event(3_150, MemoryOperation::Allocation, 0x3000, 256 << 20),
    ];
    trace.finish();
    trace
}

#[test]
fn cuda_peak_names_its_kernels_allocations_and_phases() {
    let options = Options { phase_pattern: regex::Regex::new("^(load|decode)$").unwrap(), ..Options::default() };
    let report = analyze(&[built_trace()], &options);
    let json = serde_json::to_value(&report).unwrap();
    let rank = &json["memory"][0];
    let cuda = &rank["cuda"];
    assert_eq!(cuda["peak_bytes"].as_u64(), Some((1 << 30) + (512 << 20)), "pinned host memory is not counted");
    assert_eq!(cuda["peak_ns"].as_i64(), Some(2_500));
    assert_eq!(cuda["kernels_at_peak"], serde_json::json!(["gemm_kernel"]));
    assert_eq!(cuda["end_bytes"].as_u64(), Some((1 << 30) + (256 << 20)));
    let live: Vec<u64> =
        cuda["live_at_peak"].as_array().unwrap().iter().map(|a| a["bytes"].as_u64().unwrap()).collect();
    assert_eq!(live, [1 << 30, 512 << 20]);
    assert_eq!((cuda["allocations"].as_u64(), cuda["releases"].as_u64()), (Some(3), Some(1)));

    let phases = rank["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["load", "decode"]);
    assert_eq!(phases[0]["cuda"]["peak_bytes"].as_u64(), Some(1 << 30));
    assert_eq!(phases[0]["cuda"]["kernels_at_peak"], serde_json::json!([]));
    let decode = &phases[1]["cuda"];
    assert_eq!(decode["peak_bytes"].as_u64(), Some((1 << 30) + (512 << 20)));
    let made: Vec<u64> =
        decode["largest_allocations"].as_array().unwrap().iter().map(|a| a["bytes"].as_u64().unwrap()).collect();
    assert_eq!(made, [512 << 20, 256 << 20], "the weights were made in load, not decode");
}

#[test]
fn a_trace_without_memory_events_has_no_memory_section() {
    let mut trace = built_trace();
    trace.memory_events.clear();
    let json = serde_json::to_value(analyze(&[trace], &Options::default())).unwrap();
    assert!(json.get("memory").is_none());
}

/// Reads `sample-traces/memory/<capture>` and `<nsys>` (two recorders of one run) and checks that both hold the
/// same `events` CUDA memory events: kind, operation and bytes, in order.
fn assert_recorders_agree(capture: &str, nsys: &str, events: usize) {
    let dir = common::repo_root().join("sample-traces/memory");
    let shape = |name: &str| -> Vec<(MemoryKind, MemoryOperation, u64)> {
        let trace = shardscope_io::load(&dir.join(name)).unwrap().remove(0);
        trace.memory_events.iter().map(|e| (e.kind, e.operation, e.bytes)).collect()
    };
    let (ours, theirs) = (shape(capture), shape(nsys));
    assert_eq!(ours.len(), events, "{capture}");
    assert_eq!(ours, theirs, "event for event");
}

/// The wide probe (`MEMORY_PROBE_HIDDEN=12288`): the capture and Nsight Systems' export of the same program read to
/// the same 514 CUDA memory events, kind, operation and bytes in order.
#[test]
fn the_wide_probe_reads_the_same_from_capture_and_nsys() {
    assert_recorders_agree("memory_probe_wide_capture.sqlite.gz", "memory_probe_wide_nsys.sqlite.gz", 514);
}

/// `sample-traces/memory/`: one program (`workloads/memory_probe.py`, one H100) captured with `capture --trace
/// all,memory` and with Nsight Systems `--cuda-memory-usage=true`, and run under torch.profiler. Both SQLite files
/// read to the same CUDA memory events (kind, operation, bytes, in order) and the same peak; the Kineto trace's
/// framework peaks are what PyTorch printed for the run (`torch.cuda.max_memory_allocated()` 419,433,984 and
/// `max_memory_reserved()` 654,311,424, `benchmarks/results/memory-check-h100-sitting1.json.gz`).
#[test]
fn the_probe_reads_the_same_from_capture_and_nsys_and_kineto_matches_torch() {
    assert_recorders_agree("memory_probe_capture.sqlite.gz", "memory_probe_nsys.sqlite.gz", 504);
    let dir = common::repo_root().join("sample-traces/memory");

    let peak = |path: &str| -> Value {
        let input = dir.join(path);
        let args =
            ["report", "--format", "json", "--phase-pattern", "^(load|grow|trim|steady)$", input.to_str().unwrap()];
        let output = analyzer(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        report["memory"][0].clone()
    };
    let (ours, nsys) = (peak("memory_probe_capture.sqlite.gz"), peak("memory_probe_nsys.sqlite.gz"));
    for rank in [&ours, &nsys] {
        // 654,311,424 reserved by PyTorch's allocator plus 64 MiB + 128 KiB + 1 KiB allocated outside it.
        assert_eq!(rank["cuda"]["peak_bytes"].as_u64(), Some(721_552_384));
        assert_eq!(rank["cuda"]["end_bytes"].as_u64(), Some(241_304_576));
        let grow = rank["phases"].as_array().unwrap().iter().find(|p| p["name"] == "grow").expect("grow phase");
        assert_eq!(grow["cuda"]["peak_bytes"].as_u64(), Some(721_552_384));
    }
    let kineto = peak("memory_probe_kineto.json.gz");
    assert_eq!(kineto["framework"]["peak_allocated_bytes"].as_u64(), Some(419_433_984));
    assert_eq!(kineto["framework"]["peak_reserved_bytes"].as_u64(), Some(654_311_424));
}

/// Memory over time: 120 buckets at most, each the highest level in it, drawn as one chart per rank in the HTML
/// report's charts.
#[test]
fn memory_over_time_is_bucketed_and_drawn_per_rank() {
    let options = Options { phase_pattern: regex::Regex::new("^(load|decode)$").unwrap(), ..Options::default() };
    let report = analyze(&[built_trace()], &options);
    let buckets = &report.memory[0].over_time;
    assert!(!buckets.is_empty() && buckets.len() <= 120);
    assert_eq!(buckets[0].start_ns, 100, "from the first memory event");
    let highest = buckets.iter().filter_map(|b| b.cuda_bytes).max();
    assert_eq!(highest, Some((1 << 30) + (512 << 20)), "the peak falls in a bucket");
    // The bucket holding 2,500 ns reaches the peak; the one just after the release at 2,800 holds 1 GiB.
    let at = |t: i64| buckets.iter().rev().find(|b| b.start_ns <= t).unwrap();
    assert_eq!(at(2_500).cuda_bytes, Some((1 << 30) + (512 << 20)));
    assert_eq!(at(2_900).cuda_bytes, Some(1 << 30));

    let charts = shardscope_analyzer::output::html::report_charts(&report, &options.classifier, None);
    let section = charts.sections.iter().find(|s| s.chart.name == "memory_rank0").expect("a memory chart");
    let shardscope_analyzer::output::charts::ChartKind::Series { lines, x_labels, .. } = &section.chart.kind else {
        panic!("a line chart")
    };
    assert_eq!(x_labels.len(), buckets.len());
    assert_eq!(lines.len(), 1, "CUDA level only: the trace has no framework samples");
    let drawn_peak = lines[0].points.iter().flatten().map(|p| p.value).fold(0.0, f64::max);
    assert_eq!(drawn_peak, 1.5, "GiB");
}

/// `report --format csv`: the memory section's figures in `mem_*` columns of the rank's and phases' rows, empty for
/// a trace without memory events.
#[test]
fn csv_rows_carry_the_memory_figures() {
    let input = common::repo_root().join("sample-traces/memory/memory_probe_capture.sqlite.gz");
    let args = ["report", "--format", "csv", "--phase-pattern", "^(load|grow|trim|steady)$", input.to_str().unwrap()];
    let output = analyzer(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name} column"));
    let (phase, peak, end) = (column("phase"), column("mem_peak_bytes"), column("mem_end_bytes"));
    let rows: Vec<Vec<String>> = lines.map(csv_cells).collect();
    assert!(rows.iter().all(|r| r.len() == header.len()), "every row has every column");
    let row = |name: &str| rows.iter().find(|r| r[phase] == name).unwrap_or_else(|| panic!("row {name:?}"));
    assert_eq!((row("")[peak].as_str(), row("")[end].as_str()), ("721552384", "241304576"), "the whole rank");
    assert_eq!(row("grow")[peak], "721552384");
    assert_eq!(row("")[column("mem_framework_peak_allocated_bytes")], "", "no framework samples in a capture");

    let plain = String::from_utf8(analyzer(&["report", "--format", "csv"]).stdout).unwrap();
    let first_row: Vec<&str> = plain.lines().nth(1).unwrap().split(',').collect();
    let header: Vec<&str> = plain.lines().next().unwrap().split(',').collect();
    let at = header.iter().position(|h| *h == "mem_peak_bytes").unwrap();
    assert_eq!(first_row[at], "", "the built-in sample has no memory events");
}

/// The cells of one CSV line: a quoted cell may hold commas (kernel names do), `""` is a quote.
fn csv_cells(line: &str) -> Vec<String> {
    let (mut cells, mut cell, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}
