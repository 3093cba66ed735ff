//! From spooled records to operations: one [`NcclOperation`] per collective or point-to-point,
//! with its communicator, sizes, CPU and GPU times joined in.
//!
//! [`read_spool_dir`] reads every `nccl-<pid>.bin` of a capture; [`to_collectives`] turns
//! operations into model [`Collective`]s and [`attach_to_kernels`] links them to the NCCL kernels
//! of a [`Trace`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use shardscope_model::{ApiCall, Collective, CollectiveOp, Kernel, ProcessIdx, Trace};

use crate::record::{CommunicatorRecord, NcclRecord, ProcessRecord};
use crate::spool::{self, SpoolContents, SpoolError};

/// Collective or point-to-point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A collective (all-reduce, all-gather, …).
    Collective,
    /// A point-to-point send or receive.
    P2p,
}

impl OpKind {
    /// `coll` or `p2p`, as stored in the tables.
    pub fn label(self) -> &'static str {
        match self {
            OpKind::Collective => "coll",
            OpKind::P2p => "p2p",
        }
    }
}

/// One NCCL operation of one rank, as the plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclOperation {
    /// Collective or point-to-point.
    pub kind: OpKind,
    /// The plugin's event number (unique within the process).
    pub event: u64,
    /// NCCL communicator id (`commHash`), equal on all ranks of the communicator.
    pub comm_id: u64,
    /// User-assigned communicator name (often empty).
    pub comm_name: String,
    /// This rank in the communicator.
    pub rank: i32,
    /// Ranks in the communicator; 0 if unknown (interface v3).
    pub n_ranks: i32,
    /// NCCL sequence number, counted per function within the communicator (collectives only).
    pub seq: Option<u64>,
    /// NCCL function name: `AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Reduce`,
    /// `Send`, `Recv`, ….
    pub func: String,
    /// NCCL data type name, e.g. `ncclBfloat16`.
    pub datatype: String,
    /// The count argument of the NCCL call (all-gather: per-rank send count; reduce-scatter:
    /// per-rank receive count).
    pub count: u64,
    /// Bytes of one element, where the data type is known.
    pub element_bytes: Option<u64>,
    /// `count` × element size.
    pub bytes: Option<u64>,
    /// Root rank (collectives).
    pub root: Option<i32>,
    /// Peer rank (point-to-point).
    pub peer: Option<i32>,
    /// Algorithm (collectives), e.g. `RING`.
    pub algo: String,
    /// Protocol (collectives), e.g. `LL`, `LL128`, `SIMPLE`.
    pub proto: String,
    /// Channels NCCL assigned.
    pub n_channels: u32,
    /// Warps per channel (collectives).
    pub n_warps: u32,
    /// Group (kernel plan) event number: operations with the same nonzero group ran in one kernel.
    pub group: u64,
    /// When NCCL started the event: right after it launched the operation's kernel (or, when
    /// NCCL defers proxy work to a host callback, when the stream reached it). Read from a
    /// spool: `CLOCK_MONOTONIC` ns; read from the tables: trace ns (since the session start).
    pub cpu_start_ns: i64,
    /// When NCCL stopped the event (same clock as `cpu_start_ns`); `None` if not recorded.
    pub cpu_end_ns: Option<i64>,
    /// Earliest kernel-channel start: GPU `%globaltimer` ns.
    pub gpu_start_ns: Option<i64>,
    /// Latest kernel-channel end: GPU `%globaltimer` ns.
    pub gpu_end_ns: Option<i64>,
    /// Kernel-channel events seen for it.
    pub kernel_channels: u32,
    /// Profiler interface version NCCL used.
    pub interface_version: u32,
}

/// Everything one process's spool holds, joined.
#[derive(Debug, Clone, Default)]
pub struct NcclProcess {
    /// The spool file.
    pub path: PathBuf,
    /// OS process id (from the process record, else the file name).
    pub pid: u32,
    /// The process record, if the file has one.
    pub info: Option<ProcessRecord>,
    /// Communicators initialised in the process.
    pub communicators: Vec<CommunicatorRecord>,
    /// Operations, in start order.
    pub operations: Vec<NcclOperation>,
    /// `(CLOCK_MONOTONIC, CLOCK_REALTIME)` pairs, in file order.
    pub clock_syncs: Vec<(u64, u64)>,
    /// Bytes of a cut last frame.
    pub truncated_bytes: u64,
    /// Frames with undecodable records.
    pub bad_records: u64,
    /// Records the plugin dropped because its buffer was full.
    pub dropped_records: u64,
    /// Stop or kernel-channel records whose start record is missing.
    pub orphan_records: u64,
    /// Wall time NCCL's threads spent in the plugin's event callbacks, ns, and how many callbacks ran
    /// (the last cumulative note in the spool; zero for spools written before the plugin measured it).
    pub callback_ns: u64,
    /// See `callback_ns`.
    pub callbacks: u64,
}

impl NcclProcess {
    /// Joins the records of one spool.
    pub fn from_contents(path: &Path, contents: &SpoolContents) -> NcclProcess {
        let mut process = NcclProcess {
            path: path.to_path_buf(),
            pid: spool::pid_from_file_name(path).unwrap_or(0),
            truncated_bytes: contents.truncated_bytes,
            bad_records: contents.bad_records,
            ..NcclProcess::default()
        };
        let mut comm_by_ref: HashMap<u64, usize> = HashMap::new();
        let mut op_by_event: HashMap<u64, usize> = HashMap::new();
        // Kernel-channel event → its operation.
        let mut channel_parent: HashMap<u64, usize> = HashMap::new();
        for record in &contents.records {
            match record {
                NcclRecord::Process(p) => {
                    process.pid = p.pid;
                    process.clock_syncs.push((p.monotonic_ns, p.realtime_ns));
                    process.info = Some(p.clone());
                }
                NcclRecord::Communicator(c) => {
                    comm_by_ref.insert(c.comm_ref, process.communicators.len());
                    process.communicators.push(c.clone());
                }
                NcclRecord::CommunicatorEnd { .. } => {}
                NcclRecord::CollStart(c) => {
                    let comm = comm_by_ref.get(&c.comm_ref).map(|&i| &process.communicators[i]);
                    let datatype = c.datatype.as_str().into_owned();
                    let element_bytes = element_bytes(&datatype);
                    op_by_event.insert(c.event, process.operations.len());
                    process.operations.push(NcclOperation {
                        kind: OpKind::Collective,
                        event: c.event,
                        comm_id: if c.comm_id != 0 { c.comm_id } else { comm.map_or(0, |m| m.comm_id) },
                        comm_name: comm.map(|m| m.name.as_str().into_owned()).unwrap_or_default(),
                        rank: c.rank,
                        n_ranks: comm.map_or(0, |m| m.n_ranks),
                        seq: Some(c.seq),
                        func: c.func.as_str().into_owned(),
                        count: c.count,
                        element_bytes,
                        bytes: element_bytes.map(|b| b * c.count),
                        datatype,
                        root: Some(c.root),
                        peer: None,
                        algo: c.algo.as_str().into_owned(),
                        proto: c.proto.as_str().into_owned(),
                        n_channels: u32::from(c.n_channels),
                        n_warps: u32::from(c.n_warps),
                        group: c.group,
                        cpu_start_ns: c.cpu_ns as i64,
                        cpu_end_ns: None,
                        gpu_start_ns: None,
                        gpu_end_ns: None,
                        kernel_channels: 0,
                        interface_version: comm.map_or(0, |m| m.interface_version),
                    });
                }
                NcclRecord::P2pStart(p) => {
                    let comm = comm_by_ref.get(&p.comm_ref).map(|&i| &process.communicators[i]);
                    let datatype = p.datatype.as_str().into_owned();
                    let element_bytes = element_bytes(&datatype);
                    op_by_event.insert(p.event, process.operations.len());
                    process.operations.push(NcclOperation {
                        kind: OpKind::P2p,
                        event: p.event,
                        comm_id: if p.comm_id != 0 { p.comm_id } else { comm.map_or(0, |m| m.comm_id) },
                        comm_name: comm.map(|m| m.name.as_str().into_owned()).unwrap_or_default(),
                        rank: p.rank,
                        n_ranks: comm.map_or(0, |m| m.n_ranks),
                        seq: None,
                        func: p.func.as_str().into_owned(),
                        count: p.count,
                        element_bytes,
                        bytes: element_bytes.map(|b| b * p.count),
                        datatype,
                        root: None,
                        peer: Some(p.peer),
                        algo: String::new(),
                        proto: String::new(),
                        n_channels: u32::from(p.n_channels),
                        n_warps: 0,
                        group: p.group,
                        cpu_start_ns: p.cpu_ns as i64,
                        cpu_end_ns: None,
                        gpu_start_ns: None,
                        gpu_end_ns: None,
                        kernel_channels: 0,
                        interface_version: comm.map_or(0, |m| m.interface_version),
                    });
                }
                NcclRecord::OpStop { event, cpu_ns } => match op_by_event.get(event) {
                    Some(&i) => process.operations[i].cpu_end_ns = Some(*cpu_ns as i64),
                    None => process.orphan_records += 1,
                },
                NcclRecord::KernelChStart { event, parent, gpu_start_ns, .. } => match op_by_event.get(parent) {
                    Some(&i) => {
                        channel_parent.insert(*event, i);
                        let op = &mut process.operations[i];
                        op.kernel_channels += 1;
                        let start = *gpu_start_ns as i64;
                        op.gpu_start_ns = Some(op.gpu_start_ns.map_or(start, |s| s.min(start)));
                    }
                    None => process.orphan_records += 1,
                },
                NcclRecord::KernelChStop { event, gpu_stop_ns, .. } => match channel_parent.get(event) {
                    Some(&i) => {
                        let op = &mut process.operations[i];
                        let stop = *gpu_stop_ns as i64;
                        op.gpu_end_ns = Some(op.gpu_end_ns.map_or(stop, |e| e.max(stop)));
                    }
                    None => process.orphan_records += 1,
                },
                NcclRecord::ClockSync { monotonic_ns, realtime_ns } => {
                    process.clock_syncs.push((*monotonic_ns, *realtime_ns))
                }
                NcclRecord::Dropped { records } => process.dropped_records += records,
                NcclRecord::CallbackCost { callback_ns, callbacks } => {
                    process.callback_ns = *callback_ns;
                    process.callbacks = *callbacks;
                }
            }
        }
        process.operations.sort_by_key(|o| (o.cpu_start_ns, o.event));
        process
    }

    /// Converts a `CLOCK_MONOTONIC` time of this process to ns since the Unix epoch, with the
    /// clock pair recorded closest before it (the first pair for earlier times).
    pub fn realtime_ns(&self, monotonic_ns: i64) -> Option<i64> {
        let index = self.clock_syncs.partition_point(|&(m, _)| m as i64 <= monotonic_ns);
        let &(m, r) = self.clock_syncs.get(index.saturating_sub(1))?;
        Some((r as i128 + monotonic_ns as i128 - m as i128) as i64)
    }
}

/// Bytes per element of an NCCL data type name (`ncclBfloat16`, `ncclFloat32`, …).
pub fn element_bytes(datatype: &str) -> Option<u64> {
    let name = datatype.strip_prefix("nccl").unwrap_or(datatype).to_ascii_lowercase();
    Some(match name.as_str() {
        "int8" | "char" | "uint8" | "float8e4m3" | "float8e5m2" => 1,
        "float16" | "half" | "bfloat16" => 2,
        "int32" | "int" | "uint32" | "float32" | "float" => 4,
        "int64" | "uint64" | "float64" | "double" => 8,
        _ => return None,
    })
}

/// The PyTorch name of an NCCL data type (what Kineto traces write), e.g. `BFloat16`.
pub fn torch_dtype_name(datatype: &str) -> &str {
    match datatype {
        "ncclInt8" | "ncclChar" => "Char",
        "ncclUint8" => "Byte",
        "ncclInt32" | "ncclInt" => "Int",
        "ncclUint32" => "UInt32",
        "ncclInt64" => "Long",
        "ncclUint64" => "UInt64",
        "ncclFloat16" | "ncclHalf" => "Half",
        "ncclFloat32" | "ncclFloat" => "Float",
        "ncclFloat64" | "ncclDouble" => "Double",
        "ncclBfloat16" => "BFloat16",
        "ncclFloat8e4m3" => "Float8_e4m3fn",
        "ncclFloat8e5m2" => "Float8_e5m2",
        other => other,
    }
}

/// Why a spool folder could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// Listing the folder failed.
    Folder(PathBuf, std::io::Error),
    /// One spool file could not be read.
    File(PathBuf, SpoolError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Folder(path, e) => write!(f, "{}: cannot list folder: {e}", path.display()),
            ReadError::File(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads one spool file and joins its records.
pub fn read_process(path: &Path) -> Result<NcclProcess, ReadError> {
    let contents = spool::read_spool(path).map_err(|e| ReadError::File(path.to_path_buf(), e))?;
    Ok(NcclProcess::from_contents(path, &contents))
}

/// Reads every `nccl-<pid>.bin` in `dir`, ordered by process start. Other files are ignored.
pub fn read_spool_dir(dir: &Path) -> Result<Vec<NcclProcess>, ReadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ReadError::Folder(dir.to_path_buf(), e))?;
    let mut processes = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| ReadError::Folder(dir.to_path_buf(), e))?.path();
        // Only regular files: opening a pipe would block (the caller reports what was skipped).
        if spool::pid_from_file_name(&path).is_some() && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            processes.push(read_process(&path)?);
        }
    }
    processes.sort_by_key(|p| (p.info.as_ref().map_or(u64::MAX, |i| i.realtime_ns), p.pid));
    Ok(processes)
}

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

/// NCCL's device kernels: `ncclDevKernel_*` (2.19 and later), `ncclKernel_*` (earlier), also
/// when a name stayed mangled (`_Z…ncclDevKernel_…`).
fn is_nccl_kernel(trace: &Trace, kernel: &Kernel) -> bool {
    let name = trace.names.get(kernel.name);
    name.contains("ncclDevKernel")
        || name.contains("ncclKernel")
        || name.trim_start_matches("void ").starts_with("nccl")
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
