//! Linking NCCL operations to the kernels that ran them: [`to_collectives`] turns operations
//! into model [`Collective`]s, [`attach_to_kernels`] matches them with the NCCL kernels of a
//! [`Trace`] (once, at capture time), and [`kernel_links`] / [`attach_linked`] store that match
//! and apply it again when a capture file is read.

use std::collections::{HashMap, HashSet};

use shardscope_model::{ApiCall, Collective, CollectiveOp, Kernel, ProcessIdx, Trace, kernel_names};

use super::ops::{NcclOperation, OpKind, torch_dtype_name};

/// Model [`Collective`]s for `operations`, in the same order.
///
/// `bytes` is the input buffer of one rank: `count` × element size, times the rank count for
/// reduce-scatter (whose `count` is the per-rank output). `dtype` uses PyTorch's names
/// (`BFloat16`) so it compares with Kineto traces; `group_name` is the communicator name.
pub fn to_collectives(operations: &[NcclOperation], trace: &mut Trace) -> Vec<Collective> {
    operations
        .iter()
        .map(|o| {
            let op = match (o.kind, o.func.as_str()) {
                (OpKind::P2p, "Send") => CollectiveOp::Send,
                (OpKind::P2p, "Recv") => CollectiveOp::Recv,
                (_, func) => CollectiveOp::parse(func),
            };
            let n_ranks = u64::try_from(o.n_ranks).ok().filter(|&n| n > 0);
            let (in_elems, out_elems) = match op {
                CollectiveOp::AllGather => (Some(o.count), n_ranks.map(|n| o.count * n)),
                CollectiveOp::ReduceScatter => (n_ranks.map(|n| o.count * n), Some(o.count)),
                _ => (Some(o.count), Some(o.count)),
            };
            Collective {
                kernel: None,
                op,
                bytes: in_elems.zip(o.element_bytes).map(|(n, b)| n * b),
                in_elems,
                out_elems,
                dtype: trace.names.intern(torch_dtype_name(&o.datatype)),
                group_name: trace.names.intern(&o.comm_name),
                group_size: n_ranks.map(|n| n as u32),
                group_ranks: Vec::new(),
                communicator: Some(o.comm_id),
                seq: o.seq,
            }
        })
        .collect()
}

/// What [`attach_to_kernels`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttachStats {
    /// Kernel launches (groups of operations) linked to a kernel.
    pub launches_linked: u64,
    /// Launches left without a kernel (outside the captured window, or no match).
    pub launches_unlinked: u64,
    /// NCCL kernels of the process left without operations.
    pub kernels_unlinked: u64,
    /// GPU `%globaltimer` minus trace time, the median over linked operations with GPU times of
    /// `gpu_start_ns - kernel.start_ns`: subtract it from `gpu_start_ns`/`gpu_end_ns` to place
    /// them in the trace. (On H200s the timer ran about 0.35 ms ahead of CUPTI's times mapped to
    /// wall-clock time, by a different amount per GPU, so it is measured, not assumed.)
    pub gpu_timer_minus_trace_ns: Option<i64>,
}

/// Adds the operations of one process to `trace.collectives` and points that process's NCCL
/// kernels at them (the kernel points at the first operation of its launch; grouped operations
/// that shared one kernel are still all added). Call before [`Trace::finish`], which points
/// each collective back at its kernel.
///
/// Matching: NCCL launches one kernel per group of operations, on one stream per communicator,
/// and its sequence numbers grow in launch order. So per communicator, the operation groups
/// in start order are lined up with the NCCL kernels (name starts with `nccl`) of one stream
/// in start order. The stream chosen is the one whose kernels' collective types agree best.
/// When the trace holds fewer kernels than launches (a cropped capture), the offset is chosen
/// by the same agreement and then by the time between each kernel's launch call and the
/// operation's start (`to_trace_ns` maps `cpu_start_ns` to trace time: for spooled operations
/// `|t| Some(process.realtime_ns(t)? - trace_clock_offset)`, for table rows `Some`).
pub fn attach_to_kernels(
    trace: &mut Trace,
    process: ProcessIdx,
    operations: &[NcclOperation],
    to_trace_ns: &dyn Fn(i64) -> Option<i64>,
) -> AttachStats {
    let mut stats = AttachStats::default();
    let first_collective = trace.collectives.len() as u32;
    let collectives = to_collectives(operations, trace);
    trace.collectives.extend(collectives);

    // Launch groups per communicator, in start order: (first operation index, its op).
    let mut launches: HashMap<u64, Vec<(usize, CollectiveOp)>> = HashMap::new();
    let mut seen_groups: HashSet<(u64, u64)> = HashSet::new();
    for (index, o) in operations.iter().enumerate() {
        if o.group != 0 && !seen_groups.insert((o.comm_id, o.group)) {
            continue;
        }
        let op = trace.collectives[first_collective as usize + index].op;
        launches.entry(o.comm_id).or_default().push((index, op));
    }

    // NCCL kernels of this process per stream, in start order.
    let mut streams: HashMap<u32, Vec<usize>> = HashMap::new();
    for (index, k) in trace.kernels.iter().enumerate() {
        if k.process == process && k.collective.is_none() && is_nccl_kernel(trace, k) {
            streams.entry(k.stream).or_default().push(index);
        }
    }
    for list in streams.values_mut() {
        list.sort_by_key(|&i| (trace.kernels[i].start_ns, i));
    }
    let launch_end: HashMap<u32, i64> = trace
        .api_calls
        .iter()
        .filter(|a: &&ApiCall| a.process == process && a.correlation_id != 0)
        .map(|a| (a.correlation_id, a.end_ns))
        .collect();

    let mut comms: Vec<u64> = launches.keys().copied().collect();
    comms.sort_unstable();
    let mut used_streams: Vec<u32> = Vec::new();
    let mut gpu_offsets: Vec<i64> = Vec::new();
    for comm in comms {
        let groups = &launches[&comm];
        let mut best: Option<(u32, usize, (u64, i64))> = None;
        for (&stream, kernels) in &streams {
            if used_streams.contains(&stream) {
                continue;
            }
            let Some((offset, score)) = best_offset(trace, groups, kernels, operations, &launch_end, to_trace_ns)
            else {
                continue;
            };
            if best.is_none_or(|(_, _, s)| score < s) {
                best = Some((stream, offset, score));
            }
        }
        let Some((stream, offset, _)) = best else {
            stats.launches_unlinked += groups.len() as u64;
            continue;
        };
        used_streams.push(stream);
        let kernels = &streams[&stream];
        for (i, &kernel) in kernels.iter().enumerate() {
            let (op_index, _) = groups[i + offset];
            trace.kernels[kernel].collective = Some(first_collective + op_index as u32);
        }
        stats.launches_linked += kernels.len() as u64;
        stats.launches_unlinked += (groups.len() - kernels.len()) as u64;
        for (i, &kernel) in kernels.iter().enumerate() {
            if let Some(gpu_start) = operations[groups[i + offset].0].gpu_start_ns {
                gpu_offsets.push(gpu_start - trace.kernels[kernel].start_ns);
            }
        }
    }
    if !gpu_offsets.is_empty() {
        let middle = gpu_offsets.len() / 2;
        stats.gpu_timer_minus_trace_ns = Some(*gpu_offsets.select_nth_unstable(middle).1);
    }
    stats.kernels_unlinked =
        streams.iter().filter(|(s, _)| !used_streams.contains(s)).map(|(_, kernels)| kernels.len() as u64).sum();
    stats
}

/// For kernels of one stream against one communicator's launches: the offset into the
/// launches that fits best and its score (type mismatches, then summed launch-to-start time
/// distance in ns). `None` when the stream has more kernels than the communicator has launches.
fn best_offset(
    trace: &Trace,
    groups: &[(usize, CollectiveOp)],
    kernels: &[usize],
    operations: &[NcclOperation],
    launch_end: &HashMap<u32, i64>,
    to_trace_ns: &dyn Fn(i64) -> Option<i64>,
) -> Option<(usize, (u64, i64))> {
    if kernels.len() > groups.len() || kernels.is_empty() {
        return None;
    }
    let kernel_ops: Vec<CollectiveOp> = kernels.iter().map(|&k| kernel_op(trace, &trace.kernels[k])).collect();
    let mut best: Option<(usize, (u64, i64))> = None;
    for offset in 0..=groups.len() - kernels.len() {
        let mismatches =
            kernel_ops.iter().zip(&groups[offset..]).filter(|(k, (_, g))| !ops_compatible(**k, *g)).count() as u64;
        // Only when lengths differ is there a choice of offset for timing to settle.
        let distance = if groups.len() == kernels.len() {
            0
        } else {
            kernels
                .iter()
                .zip(&groups[offset..])
                .filter_map(|(&k, &(op_index, _))| {
                    let launched = *launch_end.get(&trace.kernels[k].correlation_id)?;
                    Some((to_trace_ns(operations[op_index].cpu_start_ns)? - launched).abs())
                })
                .fold(0i64, i64::saturating_add)
        };
        let score = (mismatches, distance);
        if best.is_none_or(|(_, s)| score < s) {
            best = Some((offset, score));
        }
    }
    best
}

/// Whether a kernel's name is one of NCCL's ([`kernel_names::is_nccl_kernel`]).
fn is_nccl_kernel(trace: &Trace, kernel: &Kernel) -> bool {
    kernel_names::is_nccl_kernel(trace.names.get(kernel.name))
}

fn kernel_op(trace: &Trace, kernel: &Kernel) -> CollectiveOp {
    CollectiveOp::parse(trace.names.get(kernel.name))
}

/// A kernel's type (from its name) agrees with an operation's: point-to-point kernels are
/// named `SendRecv` whether they send, receive or both.
fn ops_compatible(kernel: CollectiveOp, op: CollectiveOp) -> bool {
    use CollectiveOp::*;
    kernel == op || matches!((kernel, op), (SendRecv, Send | Recv | SendRecv | AllToAll) | (Other, _))
}

/// The kernel an operation's launch ran in, as a capture file stores it: the launch's correlation
/// id and the kernel's start (trace ns). The start tells apart the kernels of one CUDA-graph
/// launch, which share a correlation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLink {
    /// Correlation id of the kernel (its launch call's).
    pub correlation_id: u32,
    /// The kernel's start, trace ns.
    pub start_ns: i64,
}

/// After [`attach_to_kernels`] added `count` operations of `process` as the collectives from
/// `first_collective` on: the kernel each operation was linked to, parallel to the operations
/// (`Some` on the first operation of each linked launch, the one its kernel points at).
pub fn kernel_links(
    trace: &Trace,
    process: ProcessIdx,
    first_collective: u32,
    count: usize,
) -> Vec<Option<KernelLink>> {
    let mut links = vec![None; count];
    for kernel in trace.kernels.iter().filter(|k| k.process == process) {
        let Some(collective) = kernel.collective else { continue };
        let Some(index) = collective.checked_sub(first_collective).map(|i| i as usize).filter(|&i| i < count) else {
            continue;
        };
        links[index] = Some(KernelLink { correlation_id: kernel.correlation_id, start_ns: kernel.start_ns });
    }
    links
}

/// Adds the operations of one process to `trace.collectives` and points the kernels that
/// `links` (parallel to `operations`, from [`kernel_links`]) name at them: the stored result of
/// [`attach_to_kernels`], applied without matching again. Returns the launches left without a
/// kernel, counted as [`AttachStats::launches_unlinked`] counts them.
pub fn attach_linked(
    trace: &mut Trace,
    process: ProcessIdx,
    operations: &[NcclOperation],
    links: &[Option<KernelLink>],
) -> u64 {
    let first_collective = trace.collectives.len() as u32;
    let collectives = to_collectives(operations, trace);
    trace.collectives.extend(collectives);
    let kernel_at: HashMap<(u32, i64), usize> = trace
        .kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.process == process)
        .map(|(index, k)| ((k.correlation_id, k.start_ns), index))
        .collect();
    let mut seen_groups: HashSet<(u64, u64)> = HashSet::new();
    let mut unlinked = 0;
    for (index, operation) in operations.iter().enumerate() {
        let first_of_launch = operation.group == 0 || seen_groups.insert((operation.comm_id, operation.group));
        let kernel = links
            .get(index)
            .copied()
            .flatten()
            .and_then(|link| kernel_at.get(&(link.correlation_id, link.start_ns)).copied())
            .filter(|&k| trace.kernels[k].collective.is_none());
        match kernel {
            Some(k) => trace.kernels[k].collective = Some(first_collective + index as u32),
            None if first_of_launch => unlinked += 1,
            None => {}
        }
    }
    unlinked
}
