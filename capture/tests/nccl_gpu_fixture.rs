//! Spools the plugin recorded on two H200 GPUs (see `capture/nccl-profiler/tests/data/README.md`): their content, and
//! linking them to the NCCL kernels of the Kineto traces recorded in the same processes.
//!
//! The expected numbers were counted from the raw files with an independent Python decoder and
//! from the Kineto JSON directly.

use std::path::{Path, PathBuf};

use shardscope_capture::nccl_spool::{NcclProcess, read_process, read_spool_dir};
use shardscope_io::nccl::{OpKind, attach_linked, attach_to_kernels, kernel_links};
use shardscope_model::{CollectiveOp, ProcessIdx};

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("nccl-profiler/tests/data").join(path)
}

const COMM_ID: u64 = 0x0929_271c_ebe3_241d;

fn check_rank(process: &NcclProcess, rank: i32) {
    assert_eq!(
        (process.truncated_bytes, process.bad_records, process.dropped_records, process.orphan_records),
        (0, 0, 0, 0)
    );
    let info = process.info.as_ref().unwrap();
    assert_eq!(info.nccl_version, 22809);
    assert!(info.nccl_library.as_str().ends_with("nvidia/nccl/lib/libnccl.so.2"));
    assert_eq!(process.communicators.len(), 1);
    let comm = &process.communicators[0];
    assert_eq!((comm.comm_id, comm.rank, comm.n_ranks, comm.n_nodes, comm.interface_version), (COMM_ID, rank, 2, 1, 5));

    let ops = &process.operations;
    assert_eq!(ops.len(), 73);
    assert!(ops.iter().all(|o| o.kind == OpKind::Collective && o.func == "AllReduce" && o.algo == "RING"));
    assert!(ops.iter().all(|o| o.comm_id == COMM_ID && o.rank == rank && o.n_ranks == 2));
    assert_eq!(ops.iter().map(|o| o.seq.unwrap()).collect::<Vec<_>>(), (0..73).collect::<Vec<_>>());
    let decode: Vec<_> = ops.iter().filter(|o| o.count == 8192).collect();
    let prefill: Vec<_> = ops.iter().filter(|o| o.count == 2_097_152).collect();
    assert_eq!((decode.len(), prefill.len()), (64, 8));
    assert!(decode.iter().all(|o| o.datatype == "ncclBfloat16" && o.bytes == Some(16_384) && o.proto == "LL"));
    assert!(decode.iter().all(|o| o.n_channels == 2 && o.kernel_channels == 2));
    assert!(prefill.iter().all(|o| o.bytes == Some(4_194_304) && o.proto == "SIMPLE" && o.kernel_channels == 24));
    let barrier: Vec<_> = ops.iter().filter(|o| o.count == 1).collect();
    assert_eq!(barrier.len(), 1);
    assert_eq!((barrier[0].seq, barrier[0].datatype.as_str(), barrier[0].bytes), (Some(36), "ncclFloat32", Some(4)));
    assert_eq!(ops.iter().map(|o| o.kernel_channels).sum::<u32>(), 321);
    // Every operation got GPU times from its kernel channels, and CPU start/stop.
    assert!(ops.iter().all(|o| o.gpu_end_ns.unwrap() > o.gpu_start_ns.unwrap()));
    assert!(ops.iter().all(|o| o.cpu_end_ns.unwrap() >= o.cpu_start_ns));
}

#[test]
fn two_rank_spools_hold_every_all_reduce() {
    let processes = read_spool_dir(&data("tp2-h200")).unwrap();
    assert_eq!(processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [624, 625]);
    check_rank(&processes[0], 0);
    check_rank(&processes[1], 1);
}

#[test]
fn nccl_2_28_3_loads_interface_v5_too() {
    let process = read_process(&data("nccl-2.28.3/nccl-678.bin")).unwrap();
    let info = process.info.as_ref().unwrap();
    assert_eq!(
        (info.nccl_version, info.nccl_library.as_str().as_ref()),
        (22803, "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
    );
    assert_eq!(process.communicators[0].interface_version, 5);
    assert_eq!(process.operations.len(), 73);
}

/// Links one rank's spool to its Kineto trace. Kineto holds only the profiled repetition:
/// 36 all-reduce kernels, which must take sequence numbers 37–72 (after the warm-up run's
/// 0–35 and the barrier's 36), agree with Kineto's own element counts, and show a constant
/// offset between NCCL's GPU timer and CUPTI's kernel start.
fn link_rank(rank: usize, spool: &str, expected_offset_us: f64) {
    let process = read_process(&data(spool)).unwrap();
    let mut trace = shardscope_io::load_file(&data(&format!("tp2-h200/rank{rank}.pt.trace.json.gz"))).unwrap();
    // Kineto's own collective metadata: kept aside as the reference, then removed.
    let kineto_elems: Vec<(i64, Option<u64>)> = trace
        .kernels
        .iter()
        .filter_map(|k| Some((k.start_ns, trace.collectives[k.collective? as usize].in_elems)))
        .collect();
    assert_eq!(kineto_elems.len(), 36);
    let nccl_process: ProcessIdx = trace.kernels.iter().find(|k| k.collective.is_some()).unwrap().process;
    for kernel in &mut trace.kernels {
        kernel.collective = None;
    }
    trace.collectives.clear();

    let offset = trace.clock_offset_ns.unwrap();
    let unlinked_trace = trace.clone();
    let stats =
        attach_to_kernels(&mut trace, nccl_process, &process.operations, &|t| Some(process.realtime_ns(t)? - offset));

    // What a capture file stores of the match, applied to the same kernels, links them alike.
    let links = kernel_links(&trace, nccl_process, 0, process.operations.len());
    assert_eq!(links.iter().flatten().count(), 36);
    let mut relinked = unlinked_trace;
    let unlinked = attach_linked(&mut relinked, nccl_process, &process.operations, &links);
    assert_eq!(unlinked, stats.launches_unlinked);
    assert_eq!(relinked.collectives, trace.collectives);
    assert!(relinked.kernels.iter().zip(&trace.kernels).all(|(a, b)| a.collective == b.collective));

    trace.finish();
    assert_eq!((stats.launches_linked, stats.launches_unlinked, stats.kernels_unlinked), (36, 37, 0));
    let linked: Vec<_> = trace.kernels.iter().filter(|k| k.collective.is_some()).collect();
    assert_eq!(linked.len(), 36);
    let gpu_offset = stats.gpu_timer_minus_trace_ns.unwrap();
    assert!(((gpu_offset - offset) as f64 / 1e3 - expected_offset_us).abs() < 1.0, "offset {gpu_offset}");
    for (i, kernel) in linked.iter().enumerate() {
        let collective = &trace.collectives[kernel.collective.unwrap() as usize];
        assert_eq!(collective.op, CollectiveOp::AllReduce);
        assert_eq!(collective.seq, Some(37 + i as u64));
        assert_eq!(collective.communicator, Some(COMM_ID));
        assert_eq!(collective.group_size, Some(2));
        assert_eq!(trace.names.get(collective.dtype), "BFloat16");
        let (kineto_start, kineto_in_elems) = kineto_elems[i];
        assert_eq!(kernel.start_ns, kineto_start);
        assert_eq!(collective.in_elems, kineto_in_elems);
        // NCCL's timer, moved by the measured offset, brackets inside CUPTI's kernel within 5 µs.
        let op = process.operations.iter().find(|o| o.seq == collective.seq).unwrap();
        let gpu_start = op.gpu_start_ns.unwrap() - gpu_offset;
        let gpu_end = op.gpu_end_ns.unwrap() - gpu_offset;
        assert!((gpu_start - kernel.start_ns).abs() < 5_000, "seq {:?}", collective.seq);
        assert!((gpu_end - kernel.end_ns).abs() < 5_000, "seq {:?}", collective.seq);
    }
}

#[test]
fn rank0_links_to_kineto_kernels() {
    // 353.5 µs: median of NCCL timer − (Kineto base + ts), computed from the JSON in Python.
    link_rank(0, "tp2-h200/nccl-624.bin", 353.5);
}

#[test]
fn rank1_links_to_kineto_kernels() {
    link_rank(1, "tp2-h200/nccl-625.bin", 348.2);
}
