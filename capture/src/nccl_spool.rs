//! The NCCL profiler plugin's spools, joined into operations: every `nccl-<pid>.bin` of the spool folder read
//! ([`read_spool_dir`]) and its records joined into one [`NcclProcess`] ([`join`]): each operation's start, stop and
//! kernel-channel records, with its communicator's facts.
//!
//! The launcher is the only reader of these spools; the joined operations go to `shardscope_io::nccl`, which links
//! them to kernels and stores them in the capture file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use shardscope_io::nccl::{NcclOperation, NcclProcess, OpKind, element_bytes};
use shardscope_spool::nccl::{self as spool, CommunicatorRecord, NcclRecord};
use shardscope_spool::{SpoolContents, SpoolError};

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
    Ok(join(path, &contents))
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

/// Where the join stands: the process so far and the indices that find an operation or communicator by the ids the
/// records use.
struct Join {
    process: NcclProcess,
    comm_by_ref: HashMap<u64, usize>,
    op_by_event: HashMap<u64, usize>,
    /// Kernel-channel event → its operation.
    channel_parent: HashMap<u64, usize>,
}

/// What a collective's and a point-to-point's start records both say.
struct Start<'a> {
    kind: OpKind,
    event: u64,
    comm_ref: u64,
    comm_id: u64,
    rank: i32,
    func: &'a str,
    datatype: String,
    count: u64,
    n_channels: u32,
    group: u64,
    cpu_ns: u64,
}

impl Join {
    /// A new operation from its start record; `fill` sets what only its kind has.
    fn start(&mut self, start: Start, fill: impl FnOnce(&mut NcclOperation)) {
        let comm: Option<&CommunicatorRecord> =
            self.comm_by_ref.get(&start.comm_ref).map(|&i| &self.process.communicators[i]);
        let element_bytes = element_bytes(&start.datatype);
        let mut operation = NcclOperation {
            kind: start.kind,
            event: start.event,
            comm_id: if start.comm_id != 0 { start.comm_id } else { comm.map_or(0, |m| m.comm_id) },
            comm_name: comm.map(|m| m.name.as_str().into_owned()).unwrap_or_default(),
            rank: start.rank,
            n_ranks: comm.map_or(0, |m| m.n_ranks),
            seq: None,
            func: start.func.to_string(),
            count: start.count,
            element_bytes,
            bytes: element_bytes.map(|b| b * start.count),
            datatype: start.datatype,
            root: None,
            peer: None,
            algo: String::new(),
            proto: String::new(),
            n_channels: start.n_channels,
            n_warps: 0,
            group: start.group,
            cpu_start_ns: start.cpu_ns as i64,
            cpu_end_ns: None,
            gpu_start_ns: None,
            gpu_end_ns: None,
            kernel_channels: 0,
            interface_version: comm.map_or(0, |m| m.interface_version),
        };
        fill(&mut operation);
        self.op_by_event.insert(start.event, self.process.operations.len());
        self.process.operations.push(operation);
    }

    /// The operation an event number names, or a count of one more orphan record.
    fn operation(&mut self, index: Option<usize>) -> Option<&mut NcclOperation> {
        match index {
            Some(i) => self.process.operations.get_mut(i),
            None => {
                self.process.orphan_records += 1;
                None
            }
        }
    }

    fn record(&mut self, record: &NcclRecord) {
        let process = &mut self.process;
        match record {
            NcclRecord::Process(p) => {
                process.pid = p.pid;
                process.clock_syncs.push((p.monotonic_ns, p.realtime_ns));
                process.info = Some(p.clone());
            }
            NcclRecord::Communicator(c) => {
                self.comm_by_ref.insert(c.comm_ref, process.communicators.len());
                process.communicators.push(c.clone());
            }
            NcclRecord::CommunicatorEnd { .. } => {}
            NcclRecord::CollStart(c) => {
                let func = c.func.as_str();
                let start = Start {
                    kind: OpKind::Collective,
                    event: c.event,
                    comm_ref: c.comm_ref,
                    comm_id: c.comm_id,
                    rank: c.rank,
                    func: &func,
                    datatype: c.datatype.as_str().into_owned(),
                    count: c.count,
                    n_channels: u32::from(c.n_channels),
                    group: c.group,
                    cpu_ns: c.cpu_ns,
                };
                self.start(start, |op| {
                    op.seq = Some(c.seq);
                    op.root = Some(c.root);
                    op.algo = c.algo.as_str().into_owned();
                    op.proto = c.proto.as_str().into_owned();
                    op.n_warps = u32::from(c.n_warps);
                });
            }
            NcclRecord::P2pStart(p) => {
                let func = p.func.as_str();
                let start = Start {
                    kind: OpKind::P2p,
                    event: p.event,
                    comm_ref: p.comm_ref,
                    comm_id: p.comm_id,
                    rank: p.rank,
                    func: &func,
                    datatype: p.datatype.as_str().into_owned(),
                    count: p.count,
                    n_channels: u32::from(p.n_channels),
                    group: p.group,
                    cpu_ns: p.cpu_ns,
                };
                self.start(start, |op| op.peer = Some(p.peer));
            }
            other => self.progress(other),
        }
    }

    /// The records that follow an operation's start, and the process-wide notes.
    fn progress(&mut self, record: &NcclRecord) {
        match record {
            NcclRecord::OpStop { event, cpu_ns } => {
                let index = self.op_by_event.get(event).copied();
                if let Some(op) = self.operation(index) {
                    op.cpu_end_ns = Some(*cpu_ns as i64);
                }
            }
            NcclRecord::KernelChStart { event, parent, gpu_start_ns, .. } => {
                let index = self.op_by_event.get(parent).copied();
                if let Some(i) = index {
                    self.channel_parent.insert(*event, i);
                }
                if let Some(op) = self.operation(index) {
                    op.kernel_channels += 1;
                    let start = *gpu_start_ns as i64;
                    op.gpu_start_ns = Some(op.gpu_start_ns.map_or(start, |s| s.min(start)));
                }
            }
            NcclRecord::KernelChStop { event, gpu_stop_ns, .. } => {
                let index = self.channel_parent.get(event).copied();
                if let Some(op) = self.operation(index) {
                    let stop = *gpu_stop_ns as i64;
                    op.gpu_end_ns = Some(op.gpu_end_ns.map_or(stop, |e| e.max(stop)));
                }
            }
            NcclRecord::ClockSync { monotonic_ns, realtime_ns } => {
                self.process.clock_syncs.push((*monotonic_ns, *realtime_ns))
            }
            NcclRecord::Dropped { records } => self.process.dropped_records += records,
            NcclRecord::CallbackCost { callback_ns, callbacks } => {
                self.process.callback_ns = *callback_ns;
                self.process.callbacks = *callbacks;
            }
            NcclRecord::Process(_)
            | NcclRecord::Communicator(_)
            | NcclRecord::CommunicatorEnd { .. }
            | NcclRecord::CollStart(_)
            | NcclRecord::P2pStart(_) => {}
        }
    }
}

/// Joins the records of one spool (`path` names it; its pid comes from the file name until a process record says).
pub fn join(path: &Path, contents: &SpoolContents<NcclRecord>) -> NcclProcess {
    let process = NcclProcess {
        path: path.to_path_buf(),
        pid: spool::pid_from_file_name(path).unwrap_or(0),
        truncated_bytes: contents.truncated_bytes,
        bad_records: contents.bad_records,
        ..NcclProcess::default()
    };
    let mut join =
        Join { process, comm_by_ref: HashMap::new(), op_by_event: HashMap::new(), channel_parent: HashMap::new() };
    for record in &contents.records {
        join.record(record);
    }
    let mut process = join.process;
    process.operations.sort_by_key(|o| (o.cpu_start_ns, o.event));
    process
}
