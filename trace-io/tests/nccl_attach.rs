//! Linking operations to NCCL kernels in a fabricated trace: two communicators on two streams,
//! a grouped send/receive that ran as one kernel, and a cropped capture that lost a kernel.

use shardscope_io::nccl::{NcclOperation, OpKind, attach_to_kernels, to_collectives};
use shardscope_model::{ApiCall, CollectiveOp, Kernel, Process, Trace};

fn op(comm_id: u64, func: &str, group: u64, cpu_start_ns: i64, seq: Option<u64>) -> NcclOperation {
    NcclOperation {
        kind: if seq.is_some() { OpKind::Collective } else { OpKind::P2p },
        event: group * 10 + cpu_start_ns as u64 % 10,
        comm_id,
        comm_name: String::new(),
        rank: 0,
        n_ranks: 2,
        seq,
        func: func.to_string(),
        datatype: "ncclBfloat16".into(),
        count: 1000,
        element_bytes: Some(2),
        bytes: Some(2000),
        root: None,
        peer: None,
        algo: "RING".into(),
        proto: "LL".into(),
        n_channels: 2,
        n_warps: 16,
        group,
        cpu_start_ns,
        cpu_end_ns: Some(cpu_start_ns + 5),
        gpu_start_ns: None,
        gpu_end_ns: None,
        kernel_channels: 0,
        interface_version: 5,
    }
}

fn add_kernel(trace: &mut Trace, name: &str, stream: u32, start_ns: i64, correlation_id: u32) {
    let name = trace.names.intern(name);
    let process = shardscope_model::ProcessIdx(0);
    trace.kernels.push(Kernel {
        start_ns,
        end_ns: start_ns + 50,
        name,
        short_name: name,
        process,
        stream,
        correlation_id,
        ..Kernel::default()
    });
    let launch = trace.names.intern("cuLaunchKernelEx");
    trace.api_calls.push(ApiCall {
        start_ns: start_ns - 30,
        end_ns: start_ns - 20,
        name: launch,
        process,
        correlation_id,
        ..ApiCall::default()
    });
}

#[test]
fn two_communicators_on_two_streams_link_in_order() {
    let mut trace = Trace::default();
    let p = trace.add_process(Process { pid: 1, ..Process::default() });
    let ops = vec![
        op(0xA, "AllReduce", 1, 100, Some(0)),
        op(0xB, "Send", 2, 150, None),
        op(0xB, "Recv", 2, 151, None),
        op(0xA, "AllReduce", 3, 200, Some(1)),
        op(0xB, "AllGather", 4, 250, Some(0)),
        op(0xA, "AllReduce", 5, 300, Some(2)),
    ];
    add_kernel(&mut trace, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 7, 120, 1);
    add_kernel(&mut trace, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 13, 170, 2);
    add_kernel(&mut trace, "ampere_bf16_gemm", 7, 180, 3);
    add_kernel(&mut trace, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 7, 220, 4);
    // A name the demangler left alone.
    add_kernel(&mut trace, "_Z30ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE", 13, 270, 5);
    add_kernel(&mut trace, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 7, 320, 6);

    let stats = attach_to_kernels(&mut trace, p, &ops, &|t| Some(t));
    assert_eq!((stats.launches_linked, stats.launches_unlinked, stats.kernels_unlinked), (5, 0, 0));
    assert_eq!(trace.collectives.len(), 6, "every operation becomes a collective, grouped ones too");
    trace.finish();
    let linked: Vec<(String, Option<u64>, u64)> = trace
        .kernels
        .iter()
        .filter_map(|k| {
            let c = &trace.collectives[k.collective? as usize];
            Some((format!("{:?}", c.op), c.seq, c.communicator.unwrap()))
        })
        .collect();
    assert_eq!(
        linked,
        [
            ("AllReduce".to_string(), Some(0), 0xA),
            ("Send".to_string(), None, 0xB),
            ("AllReduce".to_string(), Some(1), 0xA),
            ("AllGather".to_string(), Some(0), 0xB),
            ("AllReduce".to_string(), Some(2), 0xA),
        ]
    );
    // The gemm stays unlinked; finish pointed collectives back at their kernels.
    assert_eq!(trace.kernels.iter().filter(|k| k.collective.is_none()).count(), 1);
    assert_eq!(trace.collectives.iter().filter(|c| c.kernel.is_some()).count(), 5);
}

#[test]
fn a_cropped_capture_is_aligned_by_launch_time() {
    let mut trace = Trace::default();
    let p = trace.add_process(Process { pid: 1, ..Process::default() });
    // Three launches; the capture window kept only the last two kernels.
    let ops = vec![
        op(0xA, "AllReduce", 1, 100, Some(0)),
        op(0xA, "AllReduce", 2, 200, Some(1)),
        op(0xA, "AllReduce", 3, 300, Some(2)),
    ];
    add_kernel(&mut trace, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 7, 215, 1);
    add_kernel(&mut trace, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 7, 315, 2);
    let stats = attach_to_kernels(&mut trace, p, &ops, &|t| Some(t));
    assert_eq!((stats.launches_linked, stats.launches_unlinked), (2, 1));
    let seqs: Vec<Option<u64>> =
        trace.kernels.iter().map(|k| trace.collectives[k.collective.unwrap() as usize].seq).collect();
    assert_eq!(seqs, [Some(1), Some(2)]);
}

#[test]
fn collectives_carry_input_bytes_and_torch_dtype_names() {
    let mut trace = Trace::default();
    let mut gather = op(0xA, "AllGather", 1, 0, Some(0));
    gather.n_ranks = 4;
    let mut scatter = op(0xA, "ReduceScatter", 2, 0, Some(0));
    scatter.n_ranks = 4;
    let collectives = to_collectives(&[gather, scatter, op(0xA, "Recv", 3, 0, None)], &mut trace);
    assert_eq!(collectives[0].op, CollectiveOp::AllGather);
    assert_eq!(
        (collectives[0].in_elems, collectives[0].out_elems, collectives[0].bytes),
        (Some(1000), Some(4000), Some(2000))
    );
    assert_eq!(
        (collectives[1].in_elems, collectives[1].out_elems, collectives[1].bytes),
        (Some(4000), Some(1000), Some(8000))
    );
    assert_eq!(collectives[2].op, CollectiveOp::Recv);
    assert_eq!(trace.names.get(collectives[0].dtype), "BFloat16");
    assert_eq!((collectives[0].group_size, collectives[0].communicator), (Some(4), Some(0xA)));
}
