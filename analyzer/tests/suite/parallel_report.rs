//! The report on many threads is the report on one: `analyze` spreads ranks, devices, phases and collective
//! instances over worker threads, and must print the same bytes as when every step runs in turn; on the sample
//! traces, and on a generated multi-rank nsys file (written and read back) with collectives matched across ranks.
//! Also: two phases that first run GPU work at the same nanosecond are ordered the same way by `analyze` and by the
//! report in parts, whatever order the phase names were first seen in across traces.

use crate::common;

use common::repo_root;
use shardscope_analyzer::output::render;
use shardscope_analyzer::report::partial;
use shardscope_analyzer::report::{Options, analyze, analyze_on_threads};
use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, Device, Kernel, Process, ProcessIdx, Range, RangeKind, Trace,
};

/// The report as `report --format json` prints it, on 1 thread, on 3 and on the shared pool: all three the same.
fn check_threads(name: &str, traces: &[Trace], options: &Options) -> String {
    let one = render::json(&analyze_on_threads(traces, options, 1));
    for (label, parallel) in [
        ("3 threads", render::json(&analyze_on_threads(traces, options, 3))),
        ("the pool", render::json(&analyze(traces, options))),
    ] {
        assert!(
            parallel == one,
            "{name}: the report on {label} differs from 1 thread:\n{}",
            first_difference(&parallel, &one)
        );
    }
    one
}

/// The report in parts, merged, through JSON as a worker sends a part.
fn merged_parts(traces: &[Trace], options: &Options) -> String {
    let parts: Vec<partial::TracePart> = traces
        .iter()
        .map(|trace| {
            let text = serde_json::to_string(&partial::trace_part(trace, options)).expect("a part serialises");
            serde_json::from_str(&text).expect("a part reads back")
        })
        .collect();
    serde_json::to_string_pretty(&partial::merge(&parts, options)).expect("serialises")
}

fn first_difference(a: &str, b: &str) -> String {
    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(a.lines().count().min(b.lines().count()));
    format!("line {line}: {:?}\n   vs  {:?}", a.lines().nth(line), b.lines().nth(line))
}

#[test]
fn every_sample_reports_the_same_on_one_thread_and_many() {
    let dir = repo_root().join("sample-traces");
    for name in [
        "tp1_nsys.sqlite.gz",
        "tp1_capture.sqlite.gz",
        "tp2_nsys.sqlite.gz",
        "tp2_capture.sqlite.gz",
        "tp2_full_capture.sqlite.gz",
        "tp2_skew_capture.sqlite.gz",
        "kineto_tp2",
    ] {
        let traces = shardscope_io::load(&dir.join(name)).expect("sample trace loads");
        check_threads(name, &traces, &Options::default());
        check_threads(name, &traces, &Options { keep_instances: true, ..Options::default() });
    }
}

/// One process per GPU, `ranks` of them in one trace: per step a prefill or decode NVTX range on the main thread
/// around GEMMs and an NCCL all-reduce whose arrival differs by rank (so that ranks wait), each kernel with its
/// launch call.
fn multi_rank_trace(ranks: u32, steps: u32) -> Trace {
    ranks_trace(0..ranks, ranks, steps)
}

/// [`multi_rank_trace`]'s ranks each in a trace of its own, as a job writes one file per rank.
pub(crate) fn one_rank_traces(ranks: u32, steps: u32) -> Vec<Trace> {
    (0..ranks).map(|rank| ranks_trace(rank..rank + 1, ranks, steps)).collect()
}

/// The ranks `which` of [`multi_rank_trace`] with `world` ranks.
fn ranks_trace(which: std::ops::Range<u32>, world: u32, steps: u32) -> Trace {
    let mut trace = Trace::default();
    let gemm = trace.names.intern("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT");
    let all_reduce = trace.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
    let launch = trace.names.intern("cudaLaunchKernel");
    let (prefill, decode) = (trace.names.intern("prefill"), trace.names.intern("decode"));
    let mut correlation_id = 0u32;
    for rank in which {
        let process = trace.add_process(Process { pid: 1000 + rank, rank: Some(rank), ..Process::default() });
        let device = trace.add_device(Device { ordinal: rank, process: Some(process), ..Device::default() });
        let tid = 1000 + rank;
        for step in 0..steps {
            let step_start_ns = i64::from(step) * 1_000_000;
            let name = if step % 4 == 0 { prefill } else { decode };
            let end_ns = step_start_ns + 900_000;
            let (domain, kind, stream) = (Default::default(), RangeKind::PushPop, None);
            trace.ranges.push(Range {
                start_ns: step_start_ns,
                end_ns,
                name,
                domain,
                kind,
                process,
                tid,
                device: None,
                stream,
                depth: 0,
            });
            for layer in 0..4i64 {
                let at_ns = step_start_ns + 10_000 + layer * 200_000;
                // Rank r arrives (r × 3 + step) µs late at the all-reduce.
                let skew_ns = i64::from(rank * 3 + step % 5) * 1_000;
                let kernels = [
                    (gemm, at_ns, at_ns + 80_000, None),
                    (all_reduce, at_ns + 90_000 + skew_ns, at_ns + 150_000, Some(layer)),
                ];
                for (kernel_name, start_ns, end_ns, seq) in kernels {
                    correlation_id += 1;
                    let call_ns = start_ns - 5_000;
                    trace.api_calls.push(ApiCall {
                        start_ns: call_ns,
                        end_ns: call_ns + 2_000,
                        name: launch,
                        kind: ApiKind::Runtime,
                        process,
                        tid,
                        correlation_id,
                    });
                    let collective = seq.map(|_| {
                        trace.collectives.push(Collective {
                            op: CollectiveOp::AllReduce,
                            bytes: Some(8 << 20),
                            communicator: Some(0xfeed),
                            group_size: Some(world),
                            ..Collective::default()
                        });
                        trace.collectives.len() as u32 - 1
                    });
                    trace.kernels.push(Kernel {
                        start_ns,
                        end_ns,
                        name: kernel_name,
                        short_name: kernel_name,
                        device,
                        process,
                        stream: 7,
                        correlation_id,
                        collective,
                        ..Kernel::default()
                    });
                }
            }
        }
    }
    trace.finish();
    trace
}

#[test]
fn a_generated_multi_rank_file_reports_the_same_on_one_thread_and_many_and_in_parts() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("ranks8.sqlite");
    shardscope_io::nsys_writer::write(&multi_rank_trace(8, 24), &path).expect("the nsys writer writes it");
    let traces = shardscope_io::load(&path).expect("the written file reads back");
    assert_eq!(traces.iter().map(|t| t.devices.len()).sum::<usize>(), 8);
    let whole = check_threads("ranks8", &traces, &Options::default());
    let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
    // The check would hold for a report that matched nothing: this one matches every all-reduce, with waiting.
    assert_eq!(report["collectives"]["matched_instances"].as_u64(), Some(24 * 4));
    let waited: i64 = report["ranks"].as_array().unwrap().iter().map(|r| r["comm_wait_ns"].as_i64().unwrap()).sum();
    assert!(waited > 0, "ranks arrive at different times, so some wait");
    let merged = merged_parts(&traces, &Options::default());
    assert!(merged == whole, "merged parts differ:\n{}", first_difference(&merged, &whole));
}

/// A rank whose prefill and decode first run GPU work at the same nanosecond (kernels launched from two threads
/// inside the two ranges); `first` is the phase range this trace lists first, which numbers the phases when the
/// trace is analysed alone.
pub(crate) fn tied_phases_trace(rank: u32, first: &str, second: &str) -> Trace {
    let mut trace = Trace::default();
    let process = trace.add_process(Process { pid: 10 + rank, rank: Some(rank), ..Process::default() });
    let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
    let gemm = trace.names.intern("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT");
    let launch = trace.names.intern("cudaLaunchKernel");
    for (index, phase) in [first, second].into_iter().enumerate() {
        let name = trace.names.intern(phase);
        let tid = 1 + index as u32;
        // The range listed first starts first.
        let start_ns = index as i64 * 10;
        let (domain, kind) = (Default::default(), RangeKind::PushPop);
        trace.ranges.push(Range {
            start_ns,
            end_ns: 100_000,
            name,
            domain,
            kind,
            process,
            tid,
            device: None,
            stream: None,
            depth: 0,
        });
        let correlation_id = 1 + index as u32;
        trace.api_calls.push(ApiCall {
            start_ns: 100,
            end_ns: 200,
            name: launch,
            kind: ApiKind::Runtime,
            process,
            tid,
            correlation_id,
        });
        // Both kernels start at 5 µs, on two streams.
        let (start_ns, end_ns) = (5_000, 9_000 + index as i64 * 1_000);
        let stream = 7 + index as u32;
        trace.kernels.push(Kernel {
            start_ns,
            end_ns,
            name: gemm,
            short_name: gemm,
            device,
            process: ProcessIdx(0),
            stream,
            correlation_id,
            ..Kernel::default()
        });
    }
    trace.finish();
    trace
}

#[test]
fn phases_that_start_at_the_same_nanosecond_are_in_name_order_in_both_paths() {
    // Across the two traces `decode` is seen first; the second trace alone sees `prefill` first.
    let traces = [tied_phases_trace(0, "decode", "prefill"), tied_phases_trace(1, "prefill", "decode")];
    let options = Options::default();
    let whole = check_threads("tied phases", &traces, &options);
    let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
    for rank in report["ranks"].as_array().unwrap() {
        let phases: Vec<&String> = rank["phases"].as_object().expect("phases").keys().collect();
        assert_eq!(phases, ["decode", "prefill"], "rank {}: tied phases in name order", rank["rank"]);
    }
    let merged = merged_parts(&traces, &options);
    assert!(merged == whole, "merged parts differ:\n{}", first_difference(&merged, &whole));
}
