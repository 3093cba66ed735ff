//! One NCCL operation as a capture file stores it: [`NcclOperation`], one per collective or
//! point-to-point of a rank, with its communicator, sizes, CPU and GPU times.
//!
//! The capture launcher makes these from the NCCL plugin's spool files (the join lives in
//! `shardscope-capture`, `capture/src/nccl_spool.rs`); readers get them back from the
//! `SHARDSCOPE_NCCL_*` tables ([`super::tables`]).

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
