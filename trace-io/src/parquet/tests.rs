//! Round trips of a small trace that uses every field of the model, and what a damaged dataset gets.

use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, CopyKind, Device, DeviceIdx, FrameworkMemorySample, GraphLaunch,
    Kernel, MemOp, MemoryEvent, MemoryKind, MemoryOperation, MemoryPoolEvent, MemoryPoolState, Process, ProcessIdx,
    Range, RangeKind, SourceFormat, ThreadName, Trace,
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
                // Pageable, then pinned, then none: every state of the 1.2 columns comes back.
                src_memory: [None, Some(MemoryKind::Pageable), Some(MemoryKind::Pinned), None][i],
                dst_memory: copy_kind.filter(|_| i < 3).map(|_| MemoryKind::Device),
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
    add_memory(&mut t, [p0, p1], [d0, d1]);
    t.warn_n("kernel event without 'dur'", 3);
    t.finish();
    t
}

/// Memory of every kind: on each GPU a plain allocation, one from a local pool and one from an imported pool (two
/// at one time, so that their order matters), a release, a pool trimmed, and framework samples of device and host
/// memory.
fn add_memory(t: &mut Trace, processes: [ProcessIdx; 2], devices: [DeviceIdx; 2]) {
    for (process, device) in processes.into_iter().zip(devices) {
        let event = MemoryEvent {
            time_ns: 150,
            process,
            device,
            context_id: 1,
            operation: MemoryOperation::Allocation,
            kind: MemoryKind::Device,
            address: 0x7f00_0000_0000 + u64::from(device.0),
            bytes: 1 << 30,
            pc: 0xdead_beef,
            stream: None,
            correlation_id: 77,
            pool: None,
        };
        let local = MemoryPoolState {
            imported: false,
            address: 0x7e00_0000_0000,
            release_threshold_bytes: Some(u64::MAX),
            size_bytes: Some(64 << 20),
            utilized_bytes: Some(32 << 20),
            imported_pid: None,
        };
        let imported = MemoryPoolState { imported: true, imported_pid: Some(4242), ..MemoryPoolState::default() };
        t.memory_events.extend([
            event,
            MemoryEvent { address: 0x10, stream: Some(7), pool: Some(local), ..event },
            MemoryEvent { address: 0x20, kind: MemoryKind::Pinned, pool: Some(imported), ..event },
            MemoryEvent { time_ns: 300, operation: MemoryOperation::Release, ..event },
        ]);
        t.memory_pool_events.push(MemoryPoolEvent {
            time_ns: 160,
            process,
            device,
            operation: 3,
            pool_type: 1,
            address: local.address,
            correlation_id: 78,
            min_bytes_to_keep: 1 << 20,
            size_bytes: 64 << 20,
            release_threshold_bytes: u64::MAX,
            utilized_bytes: 32 << 20,
        });
        let sample = FrameworkMemorySample {
            time_ns: 170,
            process,
            tid: 11,
            device: Some(device),
            address: 0x30,
            bytes: 512,
            total_allocated_bytes: 512,
            total_reserved_bytes: 2 << 20,
        };
        t.framework_memory.extend([
            sample,
            FrameworkMemorySample {
                device: None,
                bytes: -64,
                total_allocated_bytes: 0,
                total_reserved_bytes: 0,
                ..sample
            },
        ]);
    }
}

/// Everything the model holds, in a comparable form (names by text).
fn summary(t: &Trace) -> String {
    let names: Vec<&str> = t.names.iter().map(|(_, s)| s).collect();
    format!(
        "{:?}\n{names:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
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
        t.graph_launches,
        t.memory_events,
        t.memory_pool_events,
        t.framework_memory
    )
}

/// Makes the dataset at `root` look like one written before manifests existed.
fn without_manifest(root: &std::path::Path) {
    std::fs::remove_file(root.join(super::MANIFEST_FILE)).unwrap();
    std::fs::write(root.join(super::MARKER_FILE), r#"{"format": "shardscope-parquet", "schema_version": "1.1"}"#)
        .unwrap();
}

/// Writes a whole dataset run.
fn write(root: &std::path::Path, run: &str, traces: &[Trace], ranks: &[Vec<Option<u32>>]) {
    let writer = DatasetWriter::create(root, run).unwrap();
    writer.write_traces(traces, ranks).unwrap();
    writer.finish().unwrap();
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
    assert!(!root.exists(), "nothing is at the dataset's path before the writer finishes");
    writer.finish().unwrap();
    assert_eq!(stats.rows["kernels"], 4);
    assert_eq!((stats.rows["cuda_memory"], stats.rows["cuda_memory_pools"], stats.rows["framework_memory"]), (8, 2, 4));
    assert!(root.join("cuda_memory/run=r1/rank=1/part-0.parquet").is_file(), "memory goes to its GPU's rank");
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
    write(&root, "a", std::slice::from_ref(&trace), &[vec![Some(3), Some(1)]]);
    write(&root, "b", std::slice::from_ref(&trace), &[vec![Some(0), Some(2)]]);
    write(&root, "b", &[trace], &[vec![Some(4), Some(5)]]);
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
    write(&root, "a", &[trace.clone(), trace], &[vec![Some(0)], vec![None, Some(1)]]);
    std::fs::remove_file(root.join("traces/run=a/part-1.parquet")).unwrap();
    // The manifest finds the missing part first; without it, the rows of the input it listed are refused.
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("traces/run=a/part-1.parquet is missing"), "{error}");
    std::fs::remove_file(root.join(super::MANIFEST_FILE)).unwrap();
    std::fs::write(root.join(super::MARKER_FILE), r#"{"format": "shardscope-parquet", "schema_version": "1.1"}"#)
        .unwrap();
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
    write(&root, "a", &[trace], &[vec![Some(0), Some(1)]]);
    let file = root.join("kernels/run=a/rank=0/part-0.parquet");
    let original = std::fs::read(&file).unwrap();
    // The manifest's checksum finds any damage: one changed byte, the size kept.
    let mut changed = original.clone();
    changed[original.len() / 2] ^= 0x40;
    std::fs::write(&file, &changed).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("kernels/run=a/rank=0/part-0.parquet has other bytes than written"), "{error}");
    // Without it (a dataset of an older version), the damage reaches the decoder, which must not panic.
    without_manifest(&root);
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

#[test]
fn a_deleted_partition_or_table_and_a_duplicated_part_are_errors_naming_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace_with_everything();
    let fresh = |name: &str| {
        let root = dir.path().join(name);
        write(&root, "a", std::slice::from_ref(&trace), &[vec![Some(0), Some(1)]]);
        assert!(read_dataset(&root).is_ok());
        root
    };
    let root = fresh("rank");
    std::fs::remove_dir_all(root.join("kernels/run=a/rank=1")).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.starts_with(&root.display().to_string()), "{error}");
    assert!(error.contains("kernels/run=a/rank=1/part-0.parquet is missing"), "{error}");

    let root = fresh("table");
    std::fs::remove_dir_all(root.join("nvtx")).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("nvtx/run=a/") && error.contains("is missing"), "{error}");

    let root = fresh("copy");
    let part = root.join("kernels/run=a/rank=0/part-0.parquet");
    std::fs::copy(&part, part.with_file_name("part-0 (copy).parquet")).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("part-0 (copy).parquet is not in its manifest"), "{error}");

    let root = fresh("manifest");
    std::fs::remove_file(root.join(super::MANIFEST_FILE)).unwrap();
    let error = read_dataset(&root).unwrap_err().to_string();
    assert!(error.contains("incomplete dataset"), "{error}");
}

#[test]
fn a_dataset_without_a_manifest_is_read_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("old");
    let trace = trace_with_everything();
    write(&root, "a", std::slice::from_ref(&trace), &[vec![Some(0), Some(1)]]);
    // The layout an older version wrote: the marker without a manifest.
    std::fs::remove_file(root.join(super::MANIFEST_FILE)).unwrap();
    std::fs::write(root.join(super::MARKER_FILE), r#"{"format": "shardscope-parquet", "schema_version": "1.1"}"#)
        .unwrap();
    let read = read_dataset(&root).unwrap();
    assert_eq!(read[0].kernels, trace.kernels);
    assert!(
        read[0].warnings.iter().any(|w| w.what.contains("without a manifest") && w.count == 1),
        "{:?}",
        read[0].warnings
    );
    // Exporting another run beside it gives the dataset a manifest of both.
    write(&root, "b", std::slice::from_ref(&trace), &[vec![Some(0), Some(1)]]);
    let manifest = std::fs::read_to_string(root.join(super::MANIFEST_FILE)).unwrap();
    assert!(manifest.contains("kernels/run=a/rank=0/part-0.parquet"), "{manifest}");
    assert!(manifest.contains("kernels/run=b/rank=0/part-0.parquet"), "{manifest}");
}

#[test]
fn a_writer_that_does_not_finish_leaves_the_dataset_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let trace = trace_with_everything();
    write(&root, "a", std::slice::from_ref(&trace), &[vec![Some(0), Some(1)]]);
    let before = std::fs::read_to_string(root.join(super::MANIFEST_FILE)).unwrap();
    let writer = DatasetWriter::create(&root, "a").unwrap();
    writer.write_traces(std::slice::from_ref(&trace), &[vec![Some(5), Some(6)]]).unwrap();
    drop(writer);
    assert_eq!(std::fs::read_to_string(root.join(super::MANIFEST_FILE)).unwrap(), before);
    assert!(root.join("kernels/run=a/rank=0").is_dir());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("ds")], "the private folder is removed");
}

#[test]
fn concurrent_writers_leave_one_whole_dataset_with_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let trace = trace_with_everything();
    std::thread::scope(|scope| {
        for run in ["a", "b", "c", "d"] {
            let (root, trace) = (&root, &trace);
            std::thread::Builder::new()
                .name(format!("writer-{run}"))
                .spawn_scoped(scope, move || write(root, run, std::slice::from_ref(trace), &[vec![Some(0), Some(1)]]))
                .unwrap();
        }
    });
    let manifest = std::fs::read_to_string(root.join(super::MANIFEST_FILE)).unwrap();
    for run in ["a", "b", "c", "d"] {
        assert!(manifest.contains(&format!("kernels/run={run}/rank=1/part-0.parquet")), "{manifest}");
        assert!(root.join(format!("kernels/run={run}/rank=1/part-0.parquet")).is_file());
    }
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(left, 1, "no private folder is left");
}

#[test]
fn a_huge_collective_id_is_renumbered_not_allocated() {
    use std::sync::Arc;

    use arrow_array::types::UInt32Type;
    use arrow_array::{ArrayRef, ListArray};

    use super::{column, opt_u32s, opt_u64s, strs, u32s};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let mut trace = trace_with_everything();
    let huge = 2_000_000_000u32;
    trace.kernels[0].collective = Some(huge);
    let writer = DatasetWriter::create(&root, "a").unwrap();
    writer.write_traces(std::slice::from_ref(&trace), &[vec![Some(0), Some(1)]]).unwrap();
    writer
        .write_rows(super::tables::COLLECTIVES, Some(0), 9, &[huge], |rows| {
            let ranks: ArrayRef = Arc::new(ListArray::from_iter_primitive::<UInt32Type, _, _>(
                rows.iter().map(|_| Some(vec![Some(0u32), Some(1)])),
            ));
            vec![
                column("traceId", u32s(rows.iter().map(|_| 0)), false),
                column("collectiveId", u32s(rows.iter().copied()), false),
                column("op", strs(rows.iter().map(|_| "AllGather")), false),
                column("bytes", opt_u64s(rows.iter().map(|_| Some(64))), true),
                column("inElems", opt_u64s(rows.iter().map(|_| None)), true),
                column("outElems", opt_u64s(rows.iter().map(|_| None)), true),
                column("datatype", strs(rows.iter().map(|_| "bf16")), false),
                column("commName", strs(rows.iter().map(|_| "tp")), false),
                column("nRanks", opt_u32s(rows.iter().map(|_| Some(2))), true),
                column("groupRanks", ranks, false),
                column("commId", opt_u64s(rows.iter().map(|_| None)), true),
                column("seqNumber", opt_u64s(rows.iter().map(|_| None)), true),
            ]
        })
        .unwrap();
    writer.finish().unwrap();
    let read = read_dataset(&root).unwrap();
    assert_eq!(read[0].collectives.len(), trace.collectives.len() + 1);
    let linked = read[0].kernels.iter().find(|k| k.start_ns == trace.kernels[0].start_ns).unwrap();
    let collective = &read[0].collectives[linked.collective.unwrap() as usize];
    assert_eq!(collective.bytes, Some(64), "the kernel still points at the collective it named");
    assert!(read[0].warnings.iter().any(|w| w.what.contains("renumbered")), "{:?}", read[0].warnings);
}
