//! The injection library's spool (`<host>.<pid>.spool`): its records and its file layout.
//!
//! ```text
//! file    := magic "SSSPOOL1" (8 bytes) frame*          (frames: see `frame`)
//! payload := record*
//! record  := tag: u8, the fields of its kind in declaration order (see `codec`)
//! ```
//!
//! These are CUPTI's activity records reduced to the fields shardscope uses, with every
//! pointer (kernel names, NVTX messages) replaced by the id of a [`SpoolRecord::Name`] that
//! appears earlier in the same file. A record carries no length, so a tag this reader does not
//! know ends the frame (counted in `bad_records`). The tag values are part of the file format:
//! append new ones, never renumber.
//!
//! The writer ([`SpoolWriter`]) appends one frame per batch with a single `write` call and never
//! seeks, so a process killed at any point (even SIGKILL) leaves a file whose complete frames are
//! all readable; at worst the last frame is cut short.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use crate::codec::Field;
use crate::frame::{HEADER_BYTES, seal_frame};
use crate::{Decoded, SpoolFormat};

/// First bytes of every spool file; the digit is the format version.
pub const MAGIC: &[u8; 8] = b"SSSPOOL1";

/// Frames larger than this are treated as corrupt (a real batch is one CUPTI buffer of
/// at most a few MiB, and records are smaller when encoded than in CUPTI's layout).
const MAX_FRAME_BYTES: u32 = 256 << 20;

crate::spool_struct! {
/// Identity and environment of the process that wrote a spool, written once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// OS process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Command line, one element per argument.
    pub command_line: Vec<String>,
    /// Host name.
    pub hostname: String,
    /// Rank from `RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK` or `SLURM_PROCID`.
    pub rank: Option<u32>,
    /// Rank on this host from `LOCAL_RANK` (or the MPI/SLURM equivalents).
    pub local_rank: Option<u32>,
    /// Job size from `WORLD_SIZE` (or the MPI/SLURM equivalents).
    pub world_size: Option<u32>,
    /// Allow-listed environment variables that were set, as `(name, value)`.
    pub env: Vec<(String, String)>,
    /// What `cuptiGetVersion` returned (28 for CUDA 12.9, 130001 for CUDA 13.0).
    pub cupti_version: u32,
    /// A CUPTI timestamp and the wall clock (ns since the Unix epoch) read back to back, so
    /// CUPTI times can be placed on the calendar. 0 when the process started with CUPTI detached (reading its
    /// clock would have attached it): a [`SpoolRecord::ClockPair`] follows at the first attach.
    pub cupti_clock_ns: u64,
    /// See `cupti_clock_ns`.
    pub realtime_ns: u64,
}
}

crate::spool_struct! {
/// A GPU kernel execution (`CUpti_ActivityKernel9`/`10`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelRecord {
    /// GPU start, CUPTI clock, ns.
    pub start_ns: u64,
    /// GPU end, CUPTI clock, ns.
    pub end_ns: u64,
    /// CUDA device ordinal in the process.
    pub device_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id.
    pub stream_id: u32,
    /// Correlation id of the launching API call.
    pub correlation_id: u32,
    /// Grid size.
    pub grid: [i32; 3],
    /// Block size.
    pub block: [i32; 3],
    /// Registers per thread.
    pub registers_per_thread: u16,
    /// Static shared memory, bytes.
    pub static_shared_bytes: i32,
    /// Dynamic shared memory, bytes.
    pub dynamic_shared_bytes: i32,
    /// Local memory per thread, bytes.
    pub local_bytes_per_thread: u32,
    /// Local memory of the whole kernel, bytes.
    pub local_bytes_total: u32,
    /// Shared memory the driver configured, bytes.
    pub shared_executed_bytes: u32,
    /// CUPTI's grid id.
    pub grid_id: i64,
    /// Regular, cooperative single-device or multi-device launch.
    pub launch_type: u8,
    /// Requested cache configuration (CUPTI's packed byte).
    pub cache_config: u8,
    /// Graph node that launched it, 0 outside graphs.
    pub graph_node_id: u64,
    /// Mangled (as CUPTI reports it) kernel name, as a [`SpoolRecord::Name`] id.
    pub name_id: u32,
}
}

crate::spool_struct! {
/// A memory copy (`CUpti_ActivityMemcpy6`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemcpyRecord {
    /// GPU start, ns.
    pub start_ns: u64,
    /// GPU end, ns.
    pub end_ns: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// CUPTI `CUpti_ActivityMemcpyKind` (1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, …).
    pub copy_kind: u8,
    /// CUPTI memory kind of the source.
    pub src_kind: u8,
    /// CUPTI memory kind of the destination.
    pub dst_kind: u8,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id.
    pub stream_id: u32,
    /// Correlation id.
    pub correlation_id: u32,
    /// Graph node, 0 outside graphs.
    pub graph_node_id: u64,
}
}

crate::spool_struct! {
/// A memory set (`CUpti_ActivityMemset4`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemsetRecord {
    /// GPU start, ns.
    pub start_ns: u64,
    /// GPU end, ns.
    pub end_ns: u64,
    /// Bytes set.
    pub bytes: u64,
    /// The value written.
    pub value: u32,
    /// CUPTI memory kind.
    pub memory_kind: u16,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id.
    pub stream_id: u32,
    /// Correlation id.
    pub correlation_id: u32,
    /// Graph node, 0 outside graphs.
    pub graph_node_id: u64,
}
}

crate::spool_struct! {
/// A CUDA runtime or driver API call (`CUpti_ActivityAPI`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiRecord {
    /// True for the driver API (`cu*`), false for the runtime (`cuda*`).
    pub driver: bool,
    /// CUPTI callback id of the function.
    pub cbid: u32,
    /// CPU start, ns.
    pub start_ns: u64,
    /// CPU end, ns.
    pub end_ns: u64,
    /// Calling process.
    pub pid: u32,
    /// Calling thread.
    pub tid: u32,
    /// Correlation id.
    pub correlation_id: u32,
    /// The call's return code.
    pub return_value: u32,
    /// Function name as a [`SpoolRecord::Name`] id (0 when CUPTI had no name for it).
    pub name_id: u32,
}
}

crate::spool_struct! {
/// A CUDA graph node made by stream capture or a graph API call (`CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED`), or
/// cloned from another one when a graph is instantiated or cloned (`..._GRAPHNODE_CLONED`). A kernel replayed
/// from an instantiated graph names its node (`graphNodeId`); following clones back to the created node gives
/// the thread and time of its capture, and so the NVTX ranges (modules) that were open then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphNodeRecord {
    /// The node's CUPTI id.
    pub node_id: u64,
    /// For a clone, the id of the node it was cloned from; 0 for a created node.
    pub original_node_id: u64,
    /// CUPTI id of the graph the node belongs to (0 when unknown).
    pub graph_id: u32,
    /// CPU time of the callback, CUPTI clock, ns.
    pub timestamp_ns: u64,
    /// Thread that made the node, as CUPTI names threads in its records (`pthread_self` truncated).
    pub tid: u32,
}
}

crate::spool_struct! {
/// One end of an NVTX range or an NVTX mark (`CUpti_ActivityMarker2`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkerRecord {
    /// CUPTI `CUpti_ActivityFlag` bits: 1 instantaneous, 2 start, 4 end.
    pub flags: u32,
    /// CPU time, ns.
    pub timestamp_ns: u64,
    /// Pairs a start with its end.
    pub id: u32,
    /// Recording process.
    pub pid: u32,
    /// Recording thread.
    pub tid: u32,
    /// Message (only on the start), as a [`SpoolRecord::Name`] id; 0 when absent.
    pub name_id: u32,
    /// Domain name id; 0 for the default domain.
    pub domain_id: u32,
}
}

crate::spool_struct! {
/// A CUDA synchronisation (`CUpti_ActivitySynchronization2`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncRecord {
    /// CUPTI `CUpti_ActivitySynchronizationType` (1 event sync, 2 stream wait event, 3 stream
    /// sync, 4 context sync).
    pub sync_type: u32,
    /// CPU start, ns.
    pub start_ns: u64,
    /// CPU end, ns.
    pub end_ns: u64,
    /// Correlation id of the API call that synchronised.
    pub correlation_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id (`u32::MAX` when not stream-specific).
    pub stream_id: u32,
    /// CUDA event id (`u32::MAX` when not an event sync).
    pub event_id: u32,
}
}

crate::spool_struct! {
/// A GPU's properties (`CUpti_ActivityDevice5`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceRecord {
    /// CUDA device ordinal in the process.
    pub device_id: u32,
    /// Marketing name.
    pub name: String,
    /// Device UUID, 16 bytes.
    pub uuid: [u8; 16],
    /// Global memory, bytes.
    pub memory_bytes: u64,
    /// Peak memory bandwidth, KiB/s as CUPTI reports it.
    pub memory_bandwidth_kib_per_s: u64,
    /// SM clock, kHz.
    pub clock_rate_khz: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Compute capability, major.
    pub cc_major: u32,
    /// Compute capability, minor.
    pub cc_minor: u32,
    /// L2 cache, bytes.
    pub l2_cache_bytes: u32,
    /// Copy engines.
    pub copy_engines: u32,
}
}

crate::spool_struct! {
/// Records CUPTI dropped for one context and stream (`cuptiActivityGetNumDroppedRecords`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DroppedRecord {
    /// CUDA context id (0 for records not tied to a context).
    pub context_id: u32,
    /// CUDA stream id.
    pub stream_id: u32,
    /// Records lost since the previous report for this context and stream.
    pub count: u64,
}
}

crate::spool_struct! {
/// One capture window of a process: recording was on from `start_ns` to `end_ns` (CUPTI clock). Written when
/// the window closes (or at exit, with [`WindowTrigger::ProcessExit`](crate::config::WindowTrigger) as its end).
/// GPU work launched inside the window and finishing after `end_ns` is still recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowRecord {
    /// When recording was switched on, CUPTI clock, ns.
    pub start_ns: u64,
    /// When recording was switched off, CUPTI clock, ns.
    pub end_ns: u64,
    /// What switched it on (`config::WindowTrigger` number).
    pub start_trigger: u8,
    /// What switched it off (`config::WindowTrigger` number).
    pub end_trigger: u8,
}
}

crate::spool_struct! {
/// A CUDA graph launch recorded whole (`CUpti_ActivityGraphTrace2`, `--cuda-graph-trace graph`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphTraceRecord {
    /// GPU start of the graph's first node, CUPTI clock, ns.
    pub start_ns: u64,
    /// GPU end of the graph's last node, CUPTI clock, ns.
    pub end_ns: u64,
    /// CUDA device ordinal in the process (of the first node).
    pub device_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id of the launch.
    pub stream_id: u32,
    /// Correlation id of the launching API call.
    pub correlation_id: u32,
    /// The graph's id: launches of one graph share it.
    pub graph_id: u32,
}
}

crate::spool_struct! {
/// A CUDA memory allocation or release (`CUpti_ActivityMemory4`, kind `MEMORY2`): what the CUDA driver handed
/// out or took back, so for PyTorch the caching allocator's segments, not tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryRecord {
    /// CPU time of the operation, CUPTI clock, ns.
    pub timestamp_ns: u64,
    /// CUPTI `CUpti_ActivityMemoryOperationType`: 1 allocation, 2 release.
    pub operation: u8,
    /// CUPTI `CUpti_ActivityMemoryKind` (1 pageable, 2 pinned, 3 device, 4 array, 5 managed, 6 device static,
    /// 7 managed static, 0 unknown).
    pub memory_kind: u8,
    /// Virtual address of the allocation.
    pub address: u64,
    /// Bytes allocated or released.
    pub bytes: u64,
    /// Program counter of the call.
    pub pc: u64,
    /// CUDA device ordinal in the process.
    pub device_id: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id (`u32::MAX` for a synchronous allocation).
    pub stream_id: u32,
    /// Correlation id of the API call that allocated or released.
    pub correlation_id: u32,
    /// True for a stream-ordered (`cudaMallocAsync`, `cudaFreeAsync`) operation.
    pub is_async: bool,
    /// CUPTI `CUpti_ActivityMemoryPoolType` of the pool it came from: 0 none, 1 local, 2 imported.
    pub pool_type: u8,
    /// The pool's base address (0 outside pools).
    pub pool_address: u64,
    /// The pool's release threshold, bytes.
    pub pool_release_threshold: u64,
    /// A local pool's size, bytes; an imported pool's owning process id.
    pub pool_size_or_pid: u64,
    /// Bytes of the pool in use after the operation.
    pub pool_utilized_bytes: u64,
}
}

crate::spool_struct! {
/// A stream-ordered memory pool made, destroyed or trimmed (`CUpti_ActivityMemoryPool2`/`3`, kind `MEMORY_POOL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPoolRecord {
    /// CPU time of the operation, CUPTI clock, ns.
    pub timestamp_ns: u64,
    /// CUPTI `CUpti_ActivityMemoryPoolOperationType`: 1 created, 2 destroyed, 3 trimmed.
    pub operation: u8,
    /// CUPTI `CUpti_ActivityMemoryPoolType`: 1 local, 2 imported.
    pub pool_type: u8,
    /// CUDA device ordinal in the process.
    pub device_id: u32,
    /// Correlation id of the API call.
    pub correlation_id: u32,
    /// The pool's base address.
    pub address: u64,
    /// Bytes a trim keeps.
    pub min_bytes_to_keep: u64,
    /// The pool's size, bytes.
    pub size: u64,
    /// The pool's release threshold, bytes.
    pub release_threshold: u64,
    /// Bytes of the pool in use.
    pub utilized_bytes: u64,
}
}

crate::spool_records! {
    /// One item of a spool file.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum SpoolRecord: u8 {
        /// Who wrote this file; first in every file.
        Process(ProcessInfo) = 1,
        /// A string that later records refer to by `id` (ids start at 1; 0 means "none").
        Name {
            /// The id.
            id: u32,
            /// The text.
            text: String,
        } = 2,
        /// A kernel.
        Kernel(KernelRecord) = 3,
        /// A copy.
        Memcpy(MemcpyRecord) = 4,
        /// A set.
        Memset(MemsetRecord) = 5,
        /// An API call.
        Api(ApiRecord) = 6,
        /// An NVTX marker.
        Marker(MarkerRecord) = 7,
        /// A synchronisation.
        Sync(SyncRecord) = 8,
        /// A GPU.
        Device(DeviceRecord) = 9,
        /// Records CUPTI dropped.
        Dropped(DroppedRecord) = 10,
        /// Buffers the injection library refused to hand to CUPTI because its pool was full
        /// (CUPTI then drops the records it could not store and reports them as [`Self::Dropped`]).
        BuffersRefused {
            /// Total so far.
            count: u64,
        } = 11,
        /// Written by a clean exit: how many records the process wrote in all.
        End {
            /// Records written before this one.
            records: u64,
            /// Activity records the decoder could not use (unknown kind, bad field).
            undecoded: u64,
        } = 12,
        /// Which API calls this process records, written once when recording starts.
        ApiSelection(ApiSelection) = 13,
        /// What recording cost this process, written at a clean exit just before [`Self::End`].
        Cost(CaptureCost) = 14,
        /// Another CUPTI client of the workload (its own profiler: torch.profiler, …) was refused because the
        /// injection library holds the process's one CUPTI subscription; written when it happens.
        RefusedClient {
            /// Refusals so far in this process.
            count: u32,
        } = 15,
        /// A capture window, written when it closed.
        Window(WindowRecord) = 16,
        /// A stop came while recording was already off (nothing to close); written when it happens.
        WindowStrayStop {
            /// When, CUPTI clock, ns.
            timestamp_ns: u64,
            /// What asked to stop (`config::WindowTrigger` number).
            trigger: u8,
        } = 17,
        /// A CUDA graph launch recorded whole.
        GraphTrace(GraphTraceRecord) = 18,
        /// A CUDA graph node created or cloned, with the thread and time it happened at.
        GraphNode(GraphNodeRecord) = 21,
        /// A CUDA memory allocation or release (`--trace memory`).
        Memory(MemoryRecord) = 22,
        /// A stream-ordered memory pool made, destroyed or trimmed (`--trace memory`).
        MemoryPool(MemoryPoolRecord) = 23,
        /// CUPTI's clock and the wall clock read back to back when CUPTI was first attached, by a process that
        /// started with it detached (its [`ProcessInfo::cupti_clock_ns`] is 0); written then.
        ClockPair {
            /// CUPTI's clock, ns.
            cupti_clock_ns: u64,
            /// The wall clock, ns since the Unix epoch.
            realtime_ns: u64,
        } = 24,
    }
}

impl SpoolRecord {
    /// Appends this record's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.tag().put(out);
        self.encode_fields(out);
    }

    /// Decodes one record from the front of `input` and advances it; `None` when the tag is
    /// unknown or the input ends inside the record.
    pub fn decode(input: &mut &[u8]) -> Option<SpoolRecord> {
        let tag = u8::get(input)?;
        SpoolRecord::decode_fields(tag, input)?
    }
}

impl SpoolFormat for SpoolRecord {
    const MAGIC: &'static [u8; 8] = MAGIC;
    const MAX_FRAME_BYTES: u32 = MAX_FRAME_BYTES;
    const DESCRIPTION: &'static str = "shardscope spool file";

    fn decode_next(input: &mut &[u8]) -> Decoded<Self> {
        match SpoolRecord::decode(input) {
            Some(record) => Decoded::Record(record),
            // Records carry no length: the rest of the frame cannot be delimited.
            None => Decoded::Undelimited,
        }
    }
}

/// Appends frames to a spool file.
pub struct SpoolWriter {
    file: File,
    frame: Vec<u8>,
}

impl SpoolWriter {
    /// Creates (or truncates) the spool file and writes the header.
    pub fn create(path: &Path) -> io::Result<SpoolWriter> {
        let mut file = File::create(path)?;
        file.write_all(MAGIC)?;
        Ok(SpoolWriter { file, frame: Vec::with_capacity(1 << 20) })
    }

    /// Writes `records` as one frame; nothing is written for an empty batch.
    pub fn write_batch(&mut self, records: &[SpoolRecord]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.frame.clear();
        self.frame.resize(HEADER_BYTES, 0);
        for record in records {
            record.encode(&mut self.frame);
        }
        seal_frame(&mut self.frame);
        // One write per frame: the kernel keeps it even if the process dies right after.
        self.file.write_all(&self.frame)
    }
}

crate::spool_struct! {
/// Which CUDA API calls a process records (see `config::is_work_api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiSelection {
    /// Every runtime and driver call is recorded (`--trace api-all`).
    pub every_call: bool,
    /// Runtime callback ids switched on one by one (`cuptiActivityEnableRuntimeApi`).
    pub runtime_cbids: u32,
    /// Driver callback ids switched on one by one (`cuptiActivityEnableDriverApi`).
    pub driver_cbids: u32,
    /// The whole runtime kind had to be switched on (this CUPTI cannot select single calls).
    pub runtime_whole_kind: bool,
    /// The whole driver kind had to be switched on.
    pub driver_whole_kind: bool,
}
}

crate::spool_struct! {
/// What recording cost one process, measured inside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureCost {
    /// Wall time spent in the buffer callbacks CUPTI calls (on the thread that filled a buffer,
    /// which can be a workload thread), ns.
    pub buffer_callback_ns: u64,
    /// Number of buffer callbacks.
    pub buffer_callbacks: u64,
    /// CPU time of the background thread that decodes and writes the spool (its own thread), ns.
    pub writer_cpu_ns: u64,
    /// Measured host cost of one recorded API call, ns (calls to a cheap driver function timed at exit
    /// with and without its record switched on); `None` when it could not be measured.
    pub ns_per_recorded_call: Option<u32>,
    /// Calls recorded by that measurement (their records are left out of the spool).
    pub calibration_records: u32,
}
}
