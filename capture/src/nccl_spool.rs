//! The join of one process's NCCL plugin spool (`nccl-<pid>.bin`): its records made into one
//! [`NcclProcess`], with one [`NcclOperation`] per collective or point-to-point (communicator, sizes,
//! CPU and GPU times joined in), its kernel-channel times, communicators, clock pairs and what was lost.
//!
//! [`read_spool_dir`] reads every `nccl-<pid>.bin` of a capture. Only the launcher reads spools: it
//! places the GPU timers ([`crate::nccl_timers`]), links the operations to kernels
//! ([`crate::nccl_merge`]) and writes them into the capture file ([`crate::nccl_tables`]), whose readers
//! get [`NcclOperation`]s back from `shardscope_io::nccl`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use shardscope_io::nccl::{KernelLink, NcclOperation, OpKind};
use shardscope_spool::nccl::{self as spool, CommunicatorRecord, NcclRecord, ProcessRecord};
use shardscope_spool::{SpoolContents, SpoolError};

use crate::nccl_timers::GpuClock;

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
    /// The kernel each operation ran in, parallel to `operations` (set on the first operation of
    /// each launch once linked, see [`shardscope_io::nccl::kernel_links`]; empty before linking).
    pub kernel_links: Vec<Option<KernelLink>>,
    /// Every kernel-channel event with a known operation, in file order.
    pub channels: Vec<ChannelTiming>,
    /// The GPU each communicator ran on, by communicator context (`comm_ref`), where the plugin
    /// could ask the driver.
    pub comm_devices: Vec<CommDevice>,
    /// How this process's GPU timer relates to wall-clock time, once estimated
    /// ([`crate::nccl_timers::estimate_gpu_clock`]); the channel table places channels with it.
    pub gpu_clock: Option<GpuClock>,
}

/// One channel of an operation's kernel, as NCCL's kernel timed it and the plugin heard of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelTiming {
    /// The operation's event number ([`NcclOperation::event`]).
    pub operation_event: u64,
    /// Channel index.
    pub channel: u8,
    /// GPU `%globaltimer` at the channel's start, ns.
    pub gpu_start_ns: i64,
    /// GPU `%globaltimer` at the channel's end; `None` when its stop was never reported.
    pub gpu_stop_ns: Option<i64>,
    /// `CLOCK_MONOTONIC` when the plugin was told of the start (always after the GPU wrote it).
    pub reported_start_ns: i64,
    /// `CLOCK_MONOTONIC` when the plugin was told of the stop.
    pub reported_stop_ns: Option<i64>,
}

/// The GPU of one communicator of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommDevice {
    /// Communicator context ([`CommunicatorRecord::comm_ref`]).
    pub comm_ref: u64,
    /// NCCL communicator id of that context.
    pub comm_id: u64,
    /// CUDA device ordinal in the process.
    pub cuda_ordinal: i32,
    /// GPU UUID; all zero if unknown.
    pub uuid: [u8; 16],
}

impl NcclProcess {
    /// Joins the records of one spool.
    pub fn from_contents(path: &Path, contents: &SpoolContents<NcclRecord>) -> NcclProcess {
        let mut process = NcclProcess {
            path: path.to_path_buf(),
            pid: spool::pid_from_file_name(path).unwrap_or(0),
            truncated_bytes: contents.truncated_bytes,
            bad_records: contents.bad_records,
            ..NcclProcess::default()
        };
        let mut comm_by_ref: HashMap<u64, usize> = HashMap::new();
        let mut op_by_event: HashMap<u64, usize> = HashMap::new();
        // Kernel-channel event → its operation, and its entry in `channels`.
        let mut channel_parent: HashMap<u64, (usize, usize)> = HashMap::new();
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
                    op_by_event.insert(c.event, process.operations.len());
                    let started = Started {
                        kind: OpKind::Collective,
                        event: c.event,
                        comm_id: c.comm_id,
                        rank: c.rank,
                        func: c.func.as_str().into_owned(),
                        datatype: c.datatype.as_str().into_owned(),
                        count: c.count,
                        n_channels: c.n_channels,
                        group: c.group,
                        cpu_ns: c.cpu_ns,
                    };
                    process.operations.push(NcclOperation {
                        seq: Some(c.seq),
                        root: Some(c.root),
                        algo: c.algo.as_str().into_owned(),
                        proto: c.proto.as_str().into_owned(),
                        n_warps: u32::from(c.n_warps),
                        ..started.into_operation(comm)
                    });
                }
                NcclRecord::P2pStart(p) => {
                    let comm = comm_by_ref.get(&p.comm_ref).map(|&i| &process.communicators[i]);
                    op_by_event.insert(p.event, process.operations.len());
                    let started = Started {
                        kind: OpKind::P2p,
                        event: p.event,
                        comm_id: p.comm_id,
                        rank: p.rank,
                        func: p.func.as_str().into_owned(),
                        datatype: p.datatype.as_str().into_owned(),
                        count: p.count,
                        n_channels: p.n_channels,
                        group: p.group,
                        cpu_ns: p.cpu_ns,
                    };
                    process.operations.push(NcclOperation { peer: Some(p.peer), ..started.into_operation(comm) });
                }
                NcclRecord::OpStop { event, cpu_ns } => match op_by_event.get(event) {
                    Some(&i) => process.operations[i].cpu_end_ns = Some(*cpu_ns as i64),
                    None => process.orphan_records += 1,
                },
                NcclRecord::KernelChStart { event, parent, gpu_start_ns, cpu_ns, channel } => {
                    match op_by_event.get(parent) {
                        Some(&i) => {
                            channel_parent.insert(*event, (i, process.channels.len()));
                            process.channels.push(ChannelTiming {
                                operation_event: *parent,
                                channel: *channel,
                                gpu_start_ns: *gpu_start_ns as i64,
                                gpu_stop_ns: None,
                                reported_start_ns: *cpu_ns as i64,
                                reported_stop_ns: None,
                            });
                            let op = &mut process.operations[i];
                            op.kernel_channels += 1;
                            let start = *gpu_start_ns as i64;
                            op.gpu_start_ns = Some(op.gpu_start_ns.map_or(start, |s| s.min(start)));
                        }
                        None => process.orphan_records += 1,
                    }
                }
                NcclRecord::KernelChStop { event, gpu_stop_ns, cpu_ns } => match channel_parent.get(event) {
                    Some(&(i, c)) => {
                        process.channels[c].gpu_stop_ns = Some(*gpu_stop_ns as i64);
                        process.channels[c].reported_stop_ns = Some(*cpu_ns as i64);
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
                NcclRecord::CommDevice { comm_ref, cuda_ordinal, uuid } => {
                    let comm_id = comm_by_ref.get(comm_ref).map_or(0, |&i| process.communicators[i].comm_id);
                    process.comm_devices.push(CommDevice {
                        comm_ref: *comm_ref,
                        comm_id,
                        cuda_ordinal: *cuda_ordinal,
                        uuid: *uuid,
                    });
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

/// What a collective's and a point-to-point operation's start records share.
struct Started {
    kind: OpKind,
    event: u64,
    comm_id: u64,
    rank: i32,
    func: String,
    datatype: String,
    count: u64,
    n_channels: u8,
    group: u64,
    cpu_ns: u64,
}

impl Started {
    /// The operation as far as its start record and communicator tell; the fields only a collective has
    /// (sequence number, root, algorithm, protocol, warps) and only a point-to-point has (peer) are left empty.
    /// A zero communicator id in the record is taken from the communicator record. The size saturates rather
    /// than overflow on a count no real operation has.
    fn into_operation(self, comm: Option<&CommunicatorRecord>) -> NcclOperation {
        let element_bytes = element_bytes(&self.datatype);
        NcclOperation {
            kind: self.kind,
            event: self.event,
            comm_id: if self.comm_id != 0 { self.comm_id } else { comm.map_or(0, |m| m.comm_id) },
            comm_name: comm.map(|m| m.name.as_str().into_owned()).unwrap_or_default(),
            rank: self.rank,
            n_ranks: comm.map_or(0, |m| m.n_ranks),
            seq: None,
            func: self.func,
            count: self.count,
            element_bytes,
            bytes: element_bytes.map(|b| b.saturating_mul(self.count)),
            datatype: self.datatype,
            root: None,
            peer: None,
            algo: String::new(),
            proto: String::new(),
            n_channels: u32::from(self.n_channels),
            n_warps: 0,
            group: self.group,
            cpu_start_ns: self.cpu_ns as i64,
            cpu_end_ns: None,
            gpu_start_ns: None,
            gpu_end_ns: None,
            kernel_channels: 0,
            interface_version: comm.map_or(0, |m| m.interface_version),
        }
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
    let contents = shardscope_spool::read_spool(path).map_err(|e| ReadError::File(path.to_path_buf(), e))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_spool::nccl::{CollStart, FixedName, P2pStart};

    fn contents(records: Vec<NcclRecord>) -> SpoolContents<NcclRecord> {
        SpoolContents { records, frames: 1, ..SpoolContents::default() }
    }

    #[test]
    fn collective_and_point_to_point_share_their_fields_and_keep_their_own() {
        let comm = CommunicatorRecord {
            comm_ref: 1,
            comm_id: 0xabc,
            n_ranks: 2,
            interface_version: 5,
            name: FixedName::from_text("pp"),
            ..CommunicatorRecord::default()
        };
        let coll = CollStart {
            event: 3,
            comm_ref: 1,
            seq: 7,
            count: 1024,
            rank: 1,
            root: 0,
            n_warps: 16,
            func: FixedName::from_text("AllReduce"),
            datatype: FixedName::from_text("ncclBfloat16"),
            algo: FixedName::from_text("RING"),
            proto: FixedName::from_text("LL"),
            ..CollStart::default()
        };
        // A count no real operation has: the size saturates instead of overflowing.
        let p2p = P2pStart {
            event: 4,
            comm_ref: 1,
            comm_id: 0xdef,
            count: u64::MAX,
            peer: 0,
            rank: 1,
            func: FixedName::from_text("Send"),
            datatype: FixedName::from_text("ncclFloat32"),
            ..P2pStart::default()
        };
        let records = vec![NcclRecord::Communicator(comm), NcclRecord::CollStart(coll), NcclRecord::P2pStart(p2p)];
        let process = NcclProcess::from_contents(Path::new("nccl-7.bin"), &contents(records));
        let [c, p] = &process.operations[..] else { panic!("{:?}", process.operations) };
        assert_eq!((c.kind, c.comm_id, c.comm_name.as_str(), c.n_ranks), (OpKind::Collective, 0xabc, "pp", 2));
        assert_eq!((c.seq, c.root, c.peer, c.bytes, c.n_warps), (Some(7), Some(0), None, Some(2048), 16));
        assert_eq!((c.algo.as_str(), c.proto.as_str(), c.interface_version), ("RING", "LL", 5));
        assert_eq!((p.kind, p.comm_id, p.comm_name.as_str(), p.seq, p.root), (OpKind::P2p, 0xdef, "pp", None, None));
        assert_eq!((p.peer, p.bytes, p.algo.as_str(), p.n_warps), (Some(0), Some(u64::MAX), "", 0));
    }
}
