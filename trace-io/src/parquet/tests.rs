//! Round trips of a small trace that uses every field of the model, and what a damaged dataset gets.

use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, CopyKind, Device, GraphLaunch, Kernel, MemOp, Process, Range,
    RangeKind, SourceFormat, ThreadName, Trace,
};

use super::{DatasetWriter, read_dataset};

/// Two processes with the same pid on two hosts (no `globalPid` recorded, as in Kineto), each driving one GPU,
/// and a third process with no GPU; every kind of event, copy kind, range kind and collective field.
fn trace_with_everything() -> Trace {
    let mut t = Trace::default();
    t.source.path = "job/rank-pair.json".into();
    t.source.format = SourceFormat::KinetoJson;
    t.source.schema_version = Some("1.1".into());
    t.clock_offset_ns = Some(1_700_000_000_000_000_000);
    let p0 = t.add_process(Process {
        pid: 7,
        host: Some("a".into()),
        rank: Some(3),
        world_size: Some(4),
        ..Default::default()
    });
    let p1 = t.add_process(Process {
        pid: 7,
        host: Some("b".into()),
        rank: Some(1),
        world_size: Some(4),
        ..Default::default()
    });
    let launcher = t.add_process(Process { pid: 99, name: "torchrun".into(), ..Default::default() });
    let d0 = t.add_device(Device {
        ordinal: 0,
        process: Some(p0),
        name: "NVIDIA H200".into(),
        sm_count: Some(132),
        memory_bytes: Some(150_000_000_000),
        memory_bandwidth_bytes_per_s: Some(4_800_000_000_000),
        clock_rate_khz: Some(1_980_000),
        bus_location: Some("0000:19:00.0".into()),
    });
    let d1 = t.add_device(Device { ordinal: 5, process: Some(p1), ..Default::default() });
    let _idle = t.add_device(Device { ordinal: 6, ..Default::default() });
    t.threads.push(ThreadName { process: p0, tid: 11, name: "main".into() });
    let gemm = t.names.intern("void gemm<float>(int)");
    let gemm_short = t.names.intern("gemm");
    let nccl = t.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    let launch = t.names.intern("cudaLaunchKernel");
    let bf16 = t.names.intern("bf16");
    let group = t.names.intern("tp");
    let decode = t.names.intern("decode");
    let domain = t.names.intern("vllm");
    for (process, device, offset) in [(p0, d0, 0), (p1, d1, 5)] {
        t.api_calls.push(ApiCall {
            start_ns: 100 + offset,
            end_ns: 110 + offset,
            name: launch,
            kind: ApiKind::Runtime,
            process,
            tid: 11,
            correlation_id: 1,
        });
        t.api_calls.push(ApiCall {
            start_ns: 120 + offset,
            end_ns: 125 + offset,
            name: launch,
            kind: ApiKind::Driver,
            process,
            tid: 11,
            correlation_id: 2,
        });
        t.kernels.push(Kernel {
            start_ns: 200 + offset,
            end_ns: 300 + offset,
            name: gemm,
            short_name: gemm_short,
            device,
            process,
            stream: 7,
            correlation_id: 1,
            grid: [1, 2, 3],
            block: [128, 1, 1],
            ..Default::default()
        });
        t.collectives.push(Collective {
            op: CollectiveOp::AllReduce,
            bytes: Some(1 << 20),
            in_elems: Some(512),
            out_elems: Some(512),
            dtype: bf16,
            group_name: group,
            group_size: Some(2),
            group_ranks: vec![1, 3],
            communicator: Some(0xdead_beef),
            seq: Some(4),
            ..Default::default()
        });
        t.kernels.push(Kernel {
            start_ns: 310 + offset,
            end_ns: 400,
            name: nccl,
            short_name: nccl,
            device,
            process,
            stream: 9,
            correlation_id: 2,
            collective: Some(t.collectives.len() as u32 - 1),
            ..Default::default()
        });
        for (i, copy_kind) in
            [None, Some(CopyKind::HtoD), Some(CopyKind::PtoP), Some(CopyKind::Other)].into_iter().enumerate()
        {
            t.memops.push(MemOp {
                start_ns: 400 + i as i64,
                end_ns: 410 + i as i64,
                copy_kind,
                bytes: 1 << 33,
                device,
                process,
                stream: 3,
                src_device: copy_kind.map(|_| 0),
                dst_device: copy_kind.map(|_| 5),
                ..Default::default()
            });
        }
        t.graph_launches.push(GraphLaunch {
            start_ns: 500,
            end_ns: 600,
            device,
            process,
            stream: 2,
            correlation_id: 3,
            graph_id: 42,
            launch: None,
        });
        t.ranges.push(Range { start_ns: 90, end_ns: 700, name: decode, process, tid: 11, ..Default::default() });
        t.ranges.push(Range {
            start_ns: 95,
            end_ns: 130,
            name: decode,
            domain,
            kind: RangeKind::StartEnd,
            process,
            tid: 11,
            ..Default::default()
        });
        t.ranges.push(Range {
            start_ns: 200,
            end_ns: 400,
            name: decode,
            kind: RangeKind::GpuAnnotation,
            process,
            device: Some(device),
            stream: Some(7),
            ..Default::default()
        });
    }
    t.ranges.push(Range {
        start_ns: 0,
        end_ns: 1000,
        name: t.names.intern("job"),
        kind: RangeKind::CpuAnnotation,
        process: launcher,
        tid: 1,
        ..Default::default()
    });
    t.warn_n("kernel event without 'dur'", 3);
    t.finish();
    t
}

/// Everything the model holds, in a comparable form (names by text).
fn summary(t: &Trace) -> String {
    let names: Vec<&str> = t.names.iter().map(|(_, s)| s).collect();
    format!(
        "{:?}\n{names:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        t.source,
        t.processes,
        t.threads,
        t.devices,
        t.kernels,
        t.memops,
        t.api_calls,
        t.ranges,
        t.collectives,
        t.clock_offset_ns,
        t.warnings,
        t.graph_launches
    )
}

#[test]
fn a_trace_comes_back_as_it_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let trace = trace_with_everything();
    let empty = Trace {
        source: shardscope_model::SourceInfo { path: "idle.sqlite".into(), ..Default::default() },
        ..Default::default()
    };
    let writer = DatasetWriter::create(&root, "r1").unwrap();
    let stats = writer.write_traces(&[trace.clone(), empty.clone()], &[vec![Some(3), Some(1), None], vec![]]).unwrap();
    assert_eq!(stats.rows["kernels"], 4);
    // Rank partitions: each GPU's rows under its rank, the launcher's range under the trace's lowest rank, and the
    // input without GPUs under rank=-1.
    assert!(root.join("kernels/run=r1/rank=3/part-0.parquet").is_file());
    assert!(root.join("kernels/run=r1/rank=1/part-0.parquet").is_file());
    assert!(root.join("traces/run=r1/part-1.parquet").is_file());
    let read = read_dataset(&root).unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(summary(&read[0]), summary(&trace));
    assert_eq!(summary(&read[1]), summary(&empty));
    // Names keep their ids, so anything keyed by them is unchanged.
    assert_eq!(read[0].names.lookup("gemm"), trace.names.lookup("gemm"));
}

#[test]
fn rewriting_a_run_replaces_only_that_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let trace = trace_with_everything();
    DatasetWriter::create(&root, "a")
        .unwrap()
        .write_traces(std::slice::from_ref(&trace), &[vec![Some(3), Some(1)]])
        .unwrap();
    DatasetWriter::create(&root, "b")
        .unwrap()
        .write_traces(std::slice::from_ref(&trace), &[vec![Some(0), Some(2)]])
        .unwrap();
    DatasetWriter::create(&root, "b").unwrap().write_traces(&[trace], &[vec![Some(4), Some(5)]]).unwrap();
    assert!(root.join("kernels/run=a/rank=3").is_dir());
    assert!(!root.join("kernels/run=b/rank=0").exists(), "the old partitions of run b are gone");
    assert!(root.join("kernels/run=b/rank=4").is_dir());
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("holds 2 runs (a, b)"), "{error}");
}

#[test]
fn a_row_of_an_unlisted_input_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let trace = trace_with_everything();
    DatasetWriter::create(&root, "a")
        .unwrap()
        .write_traces(&[trace.clone(), trace], &[vec![Some(0)], vec![None, Some(1)]])
        .unwrap();
    std::fs::remove_file(root.join("traces/run=a/part-1.parquet")).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("part-1.parquet: row 0 names traceId 1"), "{error}");
}

#[test]
fn damaged_files_are_errors_naming_them_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let mut trace = trace_with_everything();
    // Enough kernels for several data pages with dictionaries and run-length encoded indices.
    let template = trace.kernels[0];
    for i in 0..5000 {
        trace.kernels.push(Kernel {
            start_ns: 1000 + i,
            end_ns: 1001 + i,
            stream: (i % 7) as u32,
            name: trace.names.intern(&format!("kernel_{}", i % 13)),
            ..template
        });
    }
    trace.finish();
    DatasetWriter::create(&root, "a").unwrap().write_traces(&[trace], &[vec![Some(0), Some(1)]]).unwrap();
    let file = root.join("kernels/run=a/rank=0/part-0.parquet");
    let original = std::fs::read(&file).unwrap();
    // A fixed pseudo-random sequence of damages: flipped bytes anywhere, in the footer, and truncations.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let mut errors = 0;
    for trial in 0..400 {
        let mut bytes = original.clone();
        match trial % 3 {
            0 => bytes.truncate(next(bytes.len())),
            1 => {
                for _ in 0..1 + next(8) {
                    let at = next(bytes.len());
                    bytes[at] ^= 1 + next(255) as u8;
                }
            }
            _ => {
                let tail = bytes.len().min(600);
                for _ in 0..1 + next(4) {
                    let at = bytes.len() - 1 - next(tail);
                    bytes[at] ^= 1 + next(255) as u8;
                }
            }
        }
        std::fs::write(&file, &bytes).unwrap();
        if let Err(error) = read_dataset(&root) {
            let text = error.to_string();
            assert!(text.starts_with(&file.display().to_string()), "{text}");
            assert_eq!(text.lines().count(), 1, "{text}");
            errors += 1;
        }
    }
    assert!(errors > 100, "most damages are found: {errors} of 400");
}
