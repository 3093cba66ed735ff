//! NCCL operations: one [`NcclOperation`] per collective or point-to-point, with its communicator, sizes, CPU and
//! GPU times joined in, and one [`NcclProcess`] per spool. The launcher (`shardscope-capture`, `nccl_spool.rs`)
//! joins them from the plugin's spool records; the capture file stores them ([`super::tables`]).

use std::path::PathBuf;

use shardscope_spool::nccl::{CommunicatorRecord, ProcessRecord};

use super::attach::KernelLink;

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
    /// The kernel each operation ran in, parallel to `operations` (set on the first operation of
    /// each launch once linked, see [`super::kernel_links`]; empty before linking).
    pub kernel_links: Vec<Option<KernelLink>>,
}

impl NcclProcess {
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
