//! The record types of a trace, and [`Trace::finish`], which orders them and links launches.

use std::collections::HashMap;

use serde::Serialize;

use crate::memory::MemoryKind;
use crate::names::{NameId, Names};

/// Index of a [`Process`] in [`Trace::processes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct ProcessIdx(pub u32);

/// Index of a [`Device`] in [`Trace::devices`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct DeviceIdx(pub u32);

/// Which reader produced a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum SourceFormat {
    /// An Nsight Systems SQLite export, or a `capture` file that uses the same schema.
    #[default]
    NsysSqlite,
    /// A PyTorch-profiler (Kineto) Chrome-trace JSON file, optionally gzipped.
    KinetoJson,
}

/// Where a trace came from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceInfo {
    /// The file as the user named it.
    pub path: String,
    /// The reader that understood it.
    pub format: SourceFormat,
    /// The schema version the file declares (`EXPORT_SCHEMA_VERSION`, Kineto `schemaVersion`).
    pub schema_version: Option<String>,
    /// The tool that wrote it, when the file says (for example `shardscope-capture 0.1.0`).
    pub producer: Option<String>,
    /// How a capture was taken, when the file says (`full`, or `comm-only`: only NCCL's collectives,
    /// timed by NCCL's own GPU timers, and NVTX ranges).
    pub capture_mode: Option<String>,
    /// A communication-only capture's kernel sample, as the file states it (JSON, per process: what its NCCL
    /// kernels ran longer than their channel timers); read and checked where it is used.
    pub nccl_kernel_sample: Option<String>,
}

/// One OS process that ran CUDA work or recorded ranges.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Process {
    /// OS process id.
    pub pid: u32,
    /// The nsys `globalPid` (`pid << 24` plus host bits) when the source has one; correlation
    /// ids are unique only within it.
    pub global_pid: u64,
    /// Process name or command line.
    pub name: String,
    /// Host name where known.
    pub host: Option<String>,
    /// Distributed rank (torch `RANK`, MPI, SLURM or Kineto `distributedInfo.rank`).
    pub rank: Option<u32>,
    /// Number of ranks in the job where known.
    pub world_size: Option<u32>,
}

/// One GPU as seen by the trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Device {
    /// The CUDA device ordinal the source uses for it (`deviceId`, Kineto `device`).
    pub ordinal: u32,
    /// The process that drove it, when one process owns it (one rank per GPU).
    pub process: Option<ProcessIdx>,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: Option<u32>,
    /// Global memory in bytes.
    pub memory_bytes: Option<u64>,
    /// Peak memory bandwidth in bytes per second.
    pub memory_bandwidth_bytes_per_s: Option<u64>,
    /// SM clock in kHz.
    pub clock_rate_khz: Option<u32>,
    /// PCI bus location, e.g. `0000:19:00.0`.
    pub bus_location: Option<String>,
}

/// A GPU kernel execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kernel {
    /// GPU start time.
    pub start_ns: i64,
    /// GPU end time.
    pub end_ns: i64,
    /// Demangled name (what nsys groups `cuda_gpu_kern_sum` by).
    pub name: NameId,
    /// Short name (function name without arguments) where the source has it, else `name`.
    pub short_name: NameId,
    /// GPU it ran on.
    pub device: DeviceIdx,
    /// Process that launched it.
    pub process: ProcessIdx,
    /// CUDA stream id.
    pub stream: u32,
    /// CUPTI correlation id linking it to its launch call; 0 when unknown.
    pub correlation_id: u32,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Index in [`Trace::api_calls`] of the launching call; set by [`Trace::finish`].
    pub launch: Option<u32>,
    /// Index in [`Trace::collectives`] when this kernel ran a collective.
    pub collective: Option<u32>,
    /// The CUDA graph it ran in as a node (CUPTI's `graphId`), when the source records it; `None` for a kernel
    /// launched on its own.
    pub graph_id: Option<u32>,
    /// Its node in that graph (CUPTI's `graphNodeId`); `None` for a kernel launched on its own.
    pub graph_node_id: Option<u64>,
}

impl Kernel {
    /// End minus start, never negative.
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns).max(0)
    }
}

/// Direction of a memory copy (CUPTI's `copyKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum CopyKind {
    /// Host to device.
    HtoD,
    /// Device to host.
    DtoH,
    /// Device to device, same GPU.
    DtoD,
    /// Host to host.
    HtoH,
    /// Peer to peer, between two GPUs.
    PtoP,
    /// Any other CUPTI copy kind (arrays, unknown).
    #[default]
    Other,
}

impl CopyKind {
    /// From CUPTI's `CUpti_ActivityMemcpyKind` value as stored in nsys' `copyKind` column.
    pub fn from_cupti(kind: i64) -> CopyKind {
        match kind {
            1 => CopyKind::HtoD,
            2 => CopyKind::DtoH,
            8 => CopyKind::DtoD,
            9 => CopyKind::HtoH,
            10 => CopyKind::PtoP,
            _ => CopyKind::Other,
        }
    }

    /// CUPTI's `CUpti_ActivityMemcpyKind` value for this direction, as nsys' `copyKind` column and the Parquet
    /// dataset store it; [`CopyKind::from_cupti`] inverts it (every kind CUPTI has and this model folds into
    /// [`CopyKind::Other`] comes back as 0, unknown).
    pub fn to_cupti(self) -> u32 {
        match self {
            CopyKind::HtoD => 1,
            CopyKind::DtoH => 2,
            CopyKind::DtoD => 8,
            CopyKind::HtoH => 9,
            CopyKind::PtoP => 10,
            CopyKind::Other => 0,
        }
    }

    /// The label nsys uses (`[CUDA memcpy Host-to-Device]` …).
    pub fn label(self) -> &'static str {
        match self {
            CopyKind::HtoD => "Host-to-Device",
            CopyKind::DtoH => "Device-to-Host",
            CopyKind::DtoD => "Device-to-Device",
            CopyKind::HtoH => "Host-to-Host",
            CopyKind::PtoP => "Peer-to-Peer",
            CopyKind::Other => "Other",
        }
    }
}

/// One execution of a CUDA graph recorded as a whole (Nsight Systems' default `--cuda-graph-trace=graph`): the
/// GPU was busy with the graph's nodes from `start_ns` to `end_ns`, but the nodes' kernels, copies and sets are
/// not recorded one by one and are not in [`Trace::kernels`] or [`Trace::memops`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphLaunch {
    /// GPU start of the graph's first node.
    pub start_ns: i64,
    /// GPU end of the graph's last node.
    pub end_ns: i64,
    /// GPU it ran on (of its first node).
    pub device: DeviceIdx,
    /// Process that launched it.
    pub process: ProcessIdx,
    /// CUDA stream it was launched on.
    pub stream: u32,
    /// CUPTI correlation id of the launch call; 0 when unknown.
    pub correlation_id: u32,
    /// The graph's id (CUPTI `graphId`): launches of one graph share it.
    pub graph_id: u32,
    /// Index in [`Trace::api_calls`] of the launch call; set by [`Trace::finish`].
    pub launch: Option<u32>,
}

/// A stretch of time during which one process recorded (a capture window): outside it the process ran
/// unrecorded, so nothing measured may reach across the gap between two windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureWindow {
    /// The process that recorded.
    pub process: ProcessIdx,
    /// Recording switched on.
    pub start_ns: i64,
    /// Recording switched off (work launched before this and running past it is still recorded).
    pub end_ns: i64,
    /// What switched it on.
    pub start_trigger: WindowTrigger,
    /// What switched it off.
    pub end_trigger: WindowTrigger,
}

/// What opened or closed a [`CaptureWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowTrigger {
    /// Recording was on from the process's start.
    ProcessStart,
    /// `cudaProfilerStart` / `cudaProfilerStop`.
    CudaProfilerApi,
    /// A named NVTX range.
    Nvtx,
    /// The clock (`--delay`, `--duration`, `--every`).
    Time,
    /// A command from outside the workload (`capture start` / `capture stop`).
    External,
    /// The process exited with recording on.
    ProcessExit,
}

impl WindowTrigger {
    /// Every trigger.
    pub const ALL: [WindowTrigger; 6] = [
        WindowTrigger::ProcessStart,
        WindowTrigger::CudaProfilerApi,
        WindowTrigger::Nvtx,
        WindowTrigger::Time,
        WindowTrigger::External,
        WindowTrigger::ProcessExit,
    ];

    /// The name capture files store.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowTrigger::ProcessStart => "process-start",
            WindowTrigger::CudaProfilerApi => "cuda-profiler-api",
            WindowTrigger::Nvtx => "nvtx",
            WindowTrigger::Time => "time",
            WindowTrigger::External => "external",
            WindowTrigger::ProcessExit => "process-exit",
        }
    }

    /// The trigger named `text` ([`WindowTrigger::as_str`]).
    pub fn from_name(text: &str) -> Option<WindowTrigger> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl GraphLaunch {
    /// End minus start, never negative.
    pub fn duration_ns(&self) -> i64 {
        (self.end_ns - self.start_ns).max(0)
    }
}

/// Where a CUDA graph node came from (recorded by the capture): made on a thread at a time (by stream capture or a
/// graph API call), or cloned from another node when a graph was instantiated. A kernel replayed from a graph
/// names its node ([`Kernel::graph_node_id`]); following clones back to the made node gives the thread and time of
/// its capture, so that the ranges open then (modules, phases) can stand for the replay's launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphNodeOrigin {
    /// Process the node belongs to (node ids are per process).
    pub process: ProcessIdx,
    /// The node's id (CUPTI's `graphNodeId`).
    pub node_id: u64,
    /// The node it was cloned from; `None` for a node made on `tid` at `created_ns`.
    pub cloned_from: Option<u64>,
    /// Thread that made or cloned it.
    pub tid: u32,
    /// When it was made or cloned (CPU time).
    pub created_ns: i64,
}

/// A memory copy or a memory set on the GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemOp {
    /// GPU start time.
    pub start_ns: i64,
    /// GPU end time.
    pub end_ns: i64,
    /// `None` for a memset, the copy direction for a memcpy.
    pub copy_kind: Option<CopyKind>,
    /// Bytes copied or set.
    pub bytes: u64,
    /// GPU whose engine ran it.
    pub device: DeviceIdx,
    /// Process that issued it.
    pub process: ProcessIdx,
    /// CUDA stream id.
    pub stream: u32,
    /// CUPTI correlation id; 0 when unknown.
    pub correlation_id: u32,
    /// Source GPU ordinal of a device-side copy.
    pub src_device: Option<u32>,
    /// Destination GPU ordinal of a device-side copy.
    pub dst_device: Option<u32>,
    /// Index in [`Trace::api_calls`] of the issuing call; set by [`Trace::finish`].
    pub launch: Option<u32>,
    /// Where a copy's source lives (CUPTI's `srcKind`, nsys' `srcKind`, Kineto's `(Pageable -> Device)`); `None`
    /// for a set and where the source does not record it.
    pub src_memory: Option<MemoryKind>,
    /// Where a copy's destination lives (`dstKind`); `None` as for [`MemOp::src_memory`].
    pub dst_memory: Option<MemoryKind>,
}

impl MemOp {
    /// End minus start, never negative.
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns).max(0)
    }

    /// True for a memset.
    pub fn is_memset(&self) -> bool {
        self.copy_kind.is_none()
    }

    /// The memory kind of a host-device copy's host end (the source of a host-to-device copy, the destination of
    /// a device-to-host one): pageable host memory makes the copy staged and synchronous with the host. `None` for
    /// other copies, sets, and where the source does not record it.
    pub fn host_memory(&self) -> Option<MemoryKind> {
        match self.copy_kind? {
            CopyKind::HtoD => self.src_memory,
            CopyKind::DtoH => self.dst_memory,
            _ => None,
        }
    }
}

/// Which API a host call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ApiKind {
    /// CUDA runtime (`cuda*`).
    #[default]
    Runtime,
    /// CUDA driver (`cu*`).
    Driver,
}

/// A CUDA runtime or driver API call on a host thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiCall {
    /// CPU start time.
    pub start_ns: i64,
    /// CPU end time.
    pub end_ns: i64,
    /// Function name, e.g. `cudaLaunchKernel`.
    pub name: NameId,
    /// Runtime or driver.
    pub kind: ApiKind,
    /// Calling process.
    pub process: ProcessIdx,
    /// Calling OS thread id.
    pub tid: u32,
    /// CUPTI correlation id; 0 when the call launched nothing.
    pub correlation_id: u32,
}

/// What kind of range a [`Range`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum RangeKind {
    /// NVTX push/pop on one thread.
    #[default]
    PushPop,
    /// NVTX start/end, may cross threads.
    StartEnd,
    /// A PyTorch `record_function` / `user_annotation` on a CPU thread.
    CpuAnnotation,
    /// A PyTorch `gpu_user_annotation`, drawn on a GPU stream.
    GpuAnnotation,
}

/// A named time range: NVTX, or a PyTorch annotation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Range {
    /// Start time.
    pub start_ns: i64,
    /// End time.
    pub end_ns: i64,
    /// The range's message.
    pub name: NameId,
    /// NVTX domain name; empty for the default domain and for PyTorch annotations.
    pub domain: NameId,
    /// How it was recorded.
    pub kind: RangeKind,
    /// Process that recorded it.
    pub process: ProcessIdx,
    /// Thread that opened it (CPU ranges); 0 for GPU annotations.
    pub tid: u32,
    /// For GPU annotations: the GPU and stream.
    pub device: Option<DeviceIdx>,
    /// For GPU annotations: the stream.
    pub stream: Option<u32>,
    /// Nesting depth among the ranges of the same thread (0 = outermost); set by [`Trace::finish`].
    pub depth: u16,
}

impl Range {
    /// End minus start, never negative.
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns).max(0)
    }
}

/// The collective operation a NCCL kernel or call performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub enum CollectiveOp {
    /// `ncclAllReduce`.
    AllReduce,
    /// `ncclAllGather`.
    AllGather,
    /// `ncclReduceScatter`.
    ReduceScatter,
    /// `ncclBroadcast`.
    Broadcast,
    /// `ncclReduce`.
    Reduce,
    /// All-to-all (built from grouped send/recv).
    AllToAll,
    /// Grouped point-to-point send/receive.
    SendRecv,
    /// `ncclSend`.
    Send,
    /// `ncclRecv`.
    Recv,
    /// Something else NCCL-like.
    #[default]
    Other,
}

impl CollectiveOp {
    /// Every collective type, in the order the analyzer's matcher sorts them.
    pub const ALL: [CollectiveOp; 10] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::Broadcast,
        CollectiveOp::Reduce,
        CollectiveOp::AllToAll,
        CollectiveOp::SendRecv,
        CollectiveOp::Send,
        CollectiveOp::Recv,
        CollectiveOp::Other,
    ];

    /// Recognises `allreduce`, `AllReduce`, `all_reduce`, `ncclAllReduce`, `_allgather_base`, … .
    pub fn parse(text: &str) -> CollectiveOp {
        let t: String = text.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
        let t = t.strip_prefix("nccl").unwrap_or(&t);
        if t.contains("allreduce") {
            CollectiveOp::AllReduce
        } else if t.contains("allgather") {
            CollectiveOp::AllGather
        } else if t.contains("reducescatter") {
            CollectiveOp::ReduceScatter
        } else if t.contains("alltoall") {
            CollectiveOp::AllToAll
        } else if t.contains("broadcast") || t.contains("bcast") {
            CollectiveOp::Broadcast
        } else if t.contains("sendrecv") {
            CollectiveOp::SendRecv
        } else if t.contains("reduce") {
            CollectiveOp::Reduce
        } else if t.contains("send") {
            CollectiveOp::Send
        } else if t.contains("recv") {
            CollectiveOp::Recv
        } else {
            CollectiveOp::Other
        }
    }

    /// The variant's name as the report's JSON writes it (`AllReduce`, …): what `Serialize` writes.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "AllReduce",
            CollectiveOp::AllGather => "AllGather",
            CollectiveOp::ReduceScatter => "ReduceScatter",
            CollectiveOp::Broadcast => "Broadcast",
            CollectiveOp::Reduce => "Reduce",
            CollectiveOp::AllToAll => "AllToAll",
            CollectiveOp::SendRecv => "SendRecv",
            CollectiveOp::Send => "Send",
            CollectiveOp::Recv => "Recv",
            CollectiveOp::Other => "Other",
        }
    }

    /// A stable lower-case label, used as a category suffix and in JSON.
    pub fn label(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::Reduce => "reduce",
            CollectiveOp::AllToAll => "all_to_all",
            CollectiveOp::SendRecv => "send_recv",
            CollectiveOp::Send => "send",
            CollectiveOp::Recv => "recv",
            CollectiveOp::Other => "other",
        }
    }
}

/// Metadata of one collective or point-to-point operation, as far as the source records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collective {
    /// Index in [`Trace::kernels`] of the kernel that ran it; set by [`Trace::finish`].
    pub kernel: Option<u32>,
    /// The operation.
    pub op: CollectiveOp,
    /// Message size in bytes (input buffer per rank) where known.
    pub bytes: Option<u64>,
    /// Input element count.
    pub in_elems: Option<u64>,
    /// Output element count.
    pub out_elems: Option<u64>,
    /// Element type, e.g. `BFloat16`.
    pub dtype: NameId,
    /// Process group / communicator name.
    pub group_name: NameId,
    /// Ranks in the group.
    pub group_size: Option<u32>,
    /// Global ranks of the group members, where recorded.
    pub group_ranks: Vec<u32>,
    /// NCCL communicator id (profiler plugin) where recorded.
    pub communicator: Option<u64>,
    /// Sequence number of this collective in its communicator where recorded.
    pub seq: Option<u64>,
}

/// Thread name of one OS thread.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadName {
    /// Owning process.
    pub process: ProcessIdx,
    /// OS thread id.
    pub tid: u32,
    /// Name.
    pub name: String,
}

/// The largest magnitude of a time the model keeps, in ns (2^62 − 1, about 146 years): the
/// difference of any two such times fits in an `i64`. [`Trace::finish`] drops events beyond it.
pub const MAX_TIMESTAMP_NS: i64 = (1 << 62) - 1;

/// Something an importer met and could not use, counted rather than dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportWarning {
    /// What was wrong, e.g. `kernel event without 'dur'`.
    pub what: String,
    /// How many times.
    pub count: u64,
}

/// One imported trace file (or one rank of a job).
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Where it came from.
    pub source: SourceInfo,
    /// Interned strings.
    pub names: Names,
    /// Processes.
    pub processes: Vec<Process>,
    /// Thread names.
    pub threads: Vec<ThreadName>,
    /// GPUs.
    pub devices: Vec<Device>,
    /// Kernels, sorted by start after [`Trace::finish`].
    pub kernels: Vec<Kernel>,
    /// Memory copies and sets, sorted by start after [`Trace::finish`].
    pub memops: Vec<MemOp>,
    /// CUDA API calls, sorted by start after [`Trace::finish`].
    pub api_calls: Vec<ApiCall>,
    /// Ranges, sorted by start (outer before inner) after [`Trace::finish`].
    pub ranges: Vec<Range>,
    /// Collective metadata; kernels point here through [`Kernel::collective`].
    pub collectives: Vec<Collective>,
    /// Add this to a timestamp to get ns since the Unix epoch, when known.
    pub clock_offset_ns: Option<i64>,
    /// Malformed or unusable input, counted per cause.
    pub warnings: Vec<ImportWarning>,
    /// CUDA graphs recorded as whole executions, sorted by start after [`Trace::finish`].
    pub graph_launches: Vec<GraphLaunch>,
    /// When recording was on, per process, for a capture taken in windows (empty: the whole run, or
    /// unknown); sorted by process and start after [`Trace::finish`].
    pub capture_windows: Vec<CaptureWindow>,
    /// Where the CUDA graph nodes of replayed kernels came from, where the source records it (captures).
    pub graph_nodes: Vec<GraphNodeOrigin>,
    /// CUDA-level allocations and releases (`memory.rs`), sorted by time after [`Trace::finish`].
    pub memory_events: Vec<crate::MemoryEvent>,
    /// Stream-ordered memory pools made, destroyed or trimmed, sorted by time after [`Trace::finish`].
    pub memory_pool_events: Vec<crate::MemoryPoolEvent>,
    /// The framework allocator's events (Kineto `[memory]`), sorted by time after [`Trace::finish`].
    pub framework_memory: Vec<crate::FrameworkMemorySample>,
}

impl Trace {
    /// Adds a process and returns its index.
    pub fn add_process(&mut self, process: Process) -> ProcessIdx {
        self.processes.push(process);
        ProcessIdx(self.processes.len() as u32 - 1)
    }

    /// Adds a device and returns its index.
    pub fn add_device(&mut self, device: Device) -> DeviceIdx {
        self.devices.push(device);
        DeviceIdx(self.devices.len() as u32 - 1)
    }

    /// Counts one more occurrence of the warning `what`.
    pub fn warn(&mut self, what: &str) {
        self.warn_n(what, 1);
    }

    /// Counts `count` more occurrences of the warning `what`.
    pub fn warn_n(&mut self, what: &str, count: u64) {
        if count == 0 {
            return;
        }
        match self.warnings.iter_mut().find(|w| w.what == what) {
            Some(w) => w.count += count,
            None => self.warnings.push(ImportWarning { what: what.to_string(), count }),
        }
    }

    /// The demangled name of a kernel.
    pub fn kernel_name(&self, kernel: &Kernel) -> &str {
        self.names.get(kernel.name)
    }

    /// The rank a device belongs to: its process's rank where recorded.
    pub fn device_rank(&self, device: DeviceIdx) -> Option<u32> {
        let process = self.devices.get(device.0 as usize)?.process?;
        self.processes.get(process.0 as usize)?.rank
    }

    /// Orders every event list by time, links kernels and copies to the API call that launched
    /// them (on process and correlation id), points collectives back at their kernel, and
    /// computes range nesting depths. Importers call it once, last.
    pub fn finish(&mut self) {
        self.check_times();
        // Sorting kernels moves them, so carry each collective's kernel through the sort.
        sort_by_times(&mut self.kernels, |k| (k.start_ns, k.end_ns));
        sort_by_times(&mut self.memops, |m| (m.start_ns, m.end_ns));
        sort_by_times(&mut self.api_calls, |a| (a.start_ns, a.end_ns));
        // Outer ranges first at equal start: longer before shorter.
        self.ranges.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.end_ns)));

        let launches = LaunchIndex::new(&self.api_calls);
        crate::parallel::for_each_mut(&mut self.kernels, crate::parallel::MIN_CHUNK, |kernel| {
            if kernel.correlation_id != 0 {
                kernel.launch = launches.get(kernel.process, kernel.correlation_id);
            }
        });
        for memop in &mut self.memops {
            if memop.correlation_id != 0 {
                memop.launch = launches.get(memop.process, memop.correlation_id);
            }
        }
        self.graph_launches.sort_by_key(|g| (g.start_ns, g.end_ns));
        // Stable: events at one time keep their recorded order (an allocation right after a release).
        self.memory_events.sort_by_key(|m| m.time_ns);
        self.memory_pool_events.sort_by_key(|m| m.time_ns);
        self.framework_memory.sort_by_key(|m| m.time_ns);
        self.capture_windows.sort_by_key(|w| (w.process, w.start_ns, w.end_ns));
        for graph in &mut self.graph_launches {
            if graph.correlation_id != 0 {
                graph.launch = launches.get(graph.process, graph.correlation_id);
            }
        }
        for collective in &mut self.collectives {
            collective.kernel = None;
        }
        // Without collectives there is nothing to point at (a gigabyte of kernels not walked for nothing).
        let kernels = if self.collectives.is_empty() { &[][..] } else { &self.kernels[..] };
        for (index, kernel) in kernels.iter().enumerate() {
            if let Some(c) = kernel.collective.and_then(|c| self.collectives.get_mut(c as usize)) {
                c.kernel = Some(index as u32);
            }
        }
        self.compute_range_depths();
    }

    /// Makes every event's times usable by plain `i64` arithmetic, and says what it changed.
    ///
    /// Times come from the input. Events with a time beyond ±[`MAX_TIMESTAMP_NS`] are dropped
    /// (the difference of two times within it always fits in an `i64`, so spans and durations
    /// cannot wrap); events that end before they start are kept with zero length. Both are
    /// counted as warnings, never dropped in silence.
    fn check_times(&mut self) {
        /// Drops the events out of range and zeroes inverted ones; returns how many of each. Usually nothing is
        /// wrong, which one look on several threads tells.
        fn check<T: Send + Sync>(
            events: &mut Vec<T>,
            times: impl Fn(&T) -> (i64, i64) + Sync,
            set_end: impl Fn(&mut T, i64),
        ) -> (u64, u64) {
            let in_range = |t: i64| t.unsigned_abs() <= MAX_TIMESTAMP_NS as u64;
            let fine = |event: &T| {
                let (start, end) = times(event);
                in_range(start) && in_range(end) && end >= start
            };
            if crate::parallel::all(events, fine) {
                return (0, 0);
            }
            let before = events.len();
            events.retain(|event| {
                let (start, end) = times(event);
                in_range(start) && in_range(end)
            });
            let mut inverted = 0;
            for event in events.iter_mut() {
                let (start, end) = times(event);
                if end < start {
                    set_end(event, start);
                    inverted += 1;
                }
            }
            ((before - events.len()) as u64, inverted)
        }
        let kernels = check(&mut self.kernels, |k| (k.start_ns, k.end_ns), |k, t| k.end_ns = t);
        let memops = check(&mut self.memops, |m| (m.start_ns, m.end_ns), |m, t| m.end_ns = t);
        let api_calls = check(&mut self.api_calls, |a| (a.start_ns, a.end_ns), |a, t| a.end_ns = t);
        let ranges = check(&mut self.ranges, |r| (r.start_ns, r.end_ns), |r, t| r.end_ns = t);
        for (what, (out_of_range, inverted)) in
            [("kernel", kernels), ("memory operation", memops), ("CUDA API call", api_calls), ("range", ranges)]
        {
            self.warn_n(&format!("{what} with a time beyond ±2^62 ns (skipped)"), out_of_range);
            self.warn_n(&format!("{what} that ends before it starts (counted as zero length)"), inverted);
        }
    }

    fn compute_range_depths(&mut self) {
        // Per track (process, thread, and for GPU annotations device and stream): a stack of open range ends. The
        // ranges are sorted out to their tracks a chunk per thread, then each track walked on a thread of its own
        // (a million ranges on one thread were most of a tenth of a second of every import).
        type Track = (ProcessIdx, u32, Option<DeviceIdx>, Option<u32>);
        let track_of = |range: &Range| (range.process, range.tid, range.device, range.stream);
        let by_chunk = crate::parallel::map_chunks(&self.ranges, crate::parallel::MIN_CHUNK, |first, part| {
            let mut tracks: HashMap<Track, Vec<u32>> = HashMap::new();
            for (offset, range) in part.iter().enumerate() {
                tracks.entry(track_of(range)).or_default().push((first + offset) as u32);
            }
            tracks
        });
        // Chunks in order: each track's ranges stay in order.
        let mut per_track: HashMap<Track, Vec<u32>> = HashMap::new();
        for chunk in by_chunk {
            for (track, indices) in chunk {
                per_track.entry(track).or_default().extend(indices);
            }
        }
        let mut tracks: Vec<(Vec<u32>, Vec<u16>)> =
            per_track.into_values().map(|ranges| (ranges, Vec::new())).collect();
        let ranges = &self.ranges;
        let per_thread = owners_per_thread(ranges.len(), tracks.len());
        crate::parallel::for_each_mut(&mut tracks, per_thread, |(indices, depths)| {
            let mut open: Vec<i64> = Vec::new();
            for range in indices.iter().map(|&i| &ranges[i as usize]) {
                while open.last().is_some_and(|&end| end <= range.start_ns) {
                    open.pop();
                }
                depths.push(open.len().min(u16::MAX as usize) as u16);
                open.push(range.end_ns);
            }
        });
        for (indices, depths) in tracks {
            for (index, depth) in indices.into_iter().zip(depths) {
                self.ranges[index as usize].depth = depth;
            }
        }
    }
}

/// Sorts `events` by `times` (start, end), stably, unless a check on several threads finds them in that order
/// already: readers mostly give them so, and a gigabyte of events is then not walked again (the stable sort of a
/// list in order would leave it as it is).
fn sort_by_times<T: Send + Sync>(events: &mut [T], times: impl Fn(&T) -> (i64, i64) + Sync) {
    if !crate::parallel::all_pairs(events, |a, b| times(a) <= times(b)) {
        events.sort_by_key(|event| times(event));
    }
}

/// How many of `owners` (processes, tracks) one thread takes when they share `events` between them: all of them
/// where the events are too few to pay for a thread (each started thread costs memory, too: its stack and its
/// allocator arena), else one each.
fn owners_per_thread(events: usize, owners: usize) -> usize {
    if events < 2 * crate::parallel::MIN_CHUNK { owners.max(1) } else { 1 }
}

/// A process's table of call positions by id (every entry none, `u32::MAX`) and its first id, where its `ids` fill
/// their range densely enough (at most four entries per call, and a thousand more); `None` where they are sparse or
/// there are none.
fn dense_table(ids: impl Iterator<Item = u32>) -> Option<(u32, Vec<u32>)> {
    let (low, high, count) = ids.fold(None, |bounds, id| match bounds {
        None => Some((id, id, 1usize)),
        Some((low, high, count)) => Some((id.min(low), id.max(high), count + 1)),
    })?;
    let span = (high - low) as usize + 1;
    (span <= count.saturating_mul(4).saturating_add(1024)).then(|| (low, vec![u32::MAX; span]))
}

/// API calls by (process, correlation id), for linking launches; a later call wins over an
/// earlier one with the same key.
///
/// CUPTI hands out correlation ids in sequence, so per process they fill a narrow range: a
/// table indexed by `id - first` links ten million kernels several times faster than hashing
/// (each hash probe is a cache miss). A process whose ids are sparse falls back to a map.
struct LaunchIndex {
    /// Per process index: the first id and the call index of each id from it (`u32::MAX`: none).
    dense: Vec<Option<(u32, Vec<u32>)>>,
    sparse: HashMap<(ProcessIdx, u32), u32>,
}

impl LaunchIndex {
    /// Made on several threads: the calls' positions sorted out to their processes a chunk of calls per thread, then
    /// each process's table filled from its positions in order (ten million calls on one thread were a fifth of a
    /// second of every import).
    fn new(calls: &[ApiCall]) -> LaunchIndex {
        let by_chunk = crate::parallel::map_chunks(calls, crate::parallel::MIN_CHUNK, |first, part| {
            let mut positions: Vec<Vec<u32>> = Vec::new();
            for (offset, call) in part.iter().enumerate().filter(|(_, c)| c.correlation_id != 0) {
                let process = call.process.0 as usize;
                if positions.len() <= process {
                    positions.resize_with(process + 1, Vec::new);
                }
                positions[process].push((first + offset) as u32);
            }
            positions
        });
        let processes = by_chunk.iter().map(Vec::len).max().unwrap_or(0);
        // Per process, its calls with an id in order (a chunk's positions after the chunk's before it).
        let mut per_process: Vec<Vec<&[u32]>> = vec![Vec::new(); processes];
        for chunk in &by_chunk {
            for (process, positions) in chunk.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
                per_process[process].push(positions);
            }
        }
        let id_at = |position: u32| calls[position as usize].correlation_id;
        // Per process: its table, once made, and its calls' positions, a run per chunk.
        type Table<'a> = (Option<(u32, Vec<u32>)>, &'a [&'a [u32]]);
        let mut tables: Vec<Table> = per_process.iter().map(|runs| (None, runs.as_slice())).collect();
        // Each process's table on a thread (where the calls are many enough to pay for one); later calls win over
        // earlier ones with the same id, as the positions come in order.
        let per_thread = owners_per_thread(calls.len(), tables.len());
        crate::parallel::for_each_mut(&mut tables, per_thread, |(table, runs)| {
            let positions = || runs.iter().flat_map(|run| run.iter().copied());
            *table = dense_table(positions().map(id_at));
            if let Some((first, table)) = table {
                for position in positions() {
                    table[(id_at(position) - *first) as usize] = position;
                }
            }
        });
        let mut sparse = HashMap::new();
        for (process, (_, runs)) in tables.iter().enumerate().filter(|(_, (table, _))| table.is_none()) {
            for &position in runs.iter().flat_map(|run| run.iter()) {
                sparse.insert((ProcessIdx(process as u32), id_at(position)), position);
            }
        }
        LaunchIndex { dense: tables.into_iter().map(|(table, _)| table).collect(), sparse }
    }

    fn get(&self, process: ProcessIdx, correlation_id: u32) -> Option<u32> {
        match self.dense.get(process.0 as usize) {
            Some(Some((first, table))) => {
                let offset = correlation_id.checked_sub(*first)?;
                table.get(offset as usize).copied().filter(|&position| position != u32::MAX)
            }
            _ => self.sparse.get(&(process, correlation_id)).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_op_names_are_the_variant_names_and_parse_back() {
        use CollectiveOp::*;
        for op in [AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv, Send, Recv, Other] {
            // The unit variant's name is what `Serialize` writes into the report's JSON.
            assert_eq!(op.name(), format!("{op:?}"));
            assert_eq!(CollectiveOp::parse(op.name()), op);
        }
    }

    #[test]
    fn copy_kinds_go_to_cupti_values_and_back() {
        use CopyKind::*;
        for kind in [HtoD, DtoH, DtoD, HtoH, PtoP, Other] {
            assert_eq!(CopyKind::from_cupti(i64::from(kind.to_cupti())), kind);
        }
        // CUPTI's own numbers (`CUPTI_ACTIVITY_MEMCPY_KIND_*`), which the nsys export and the dataset store.
        assert_eq!((HtoD.to_cupti(), DtoH.to_cupti(), DtoD.to_cupti(), PtoP.to_cupti()), (1, 2, 8, 10));
    }

    #[test]
    fn collective_names_parse() {
        assert_eq!(CollectiveOp::parse("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), CollectiveOp::AllReduce);
        assert_eq!(CollectiveOp::parse("allreduce"), CollectiveOp::AllReduce);
        assert_eq!(CollectiveOp::parse("_allgather_base"), CollectiveOp::AllGather);
        assert_eq!(CollectiveOp::parse("reduce_scatter_tensor"), CollectiveOp::ReduceScatter);
        assert_eq!(CollectiveOp::parse("SendRecv"), CollectiveOp::SendRecv);
        assert_eq!(CollectiveOp::parse("ncclKernel_Broadcast_RING_LL_Sum_int8_t"), CollectiveOp::Broadcast);
        assert_eq!(CollectiveOp::parse("all_to_all"), CollectiveOp::AllToAll);
        assert_eq!(CollectiveOp::parse("Reduce"), CollectiveOp::Reduce);
        assert_eq!(CollectiveOp::parse("barrier"), CollectiveOp::Other);
    }

    #[test]
    fn finish_links_launches_by_process_and_correlation() {
        let mut t = Trace::default();
        let p0 = t.add_process(Process { pid: 1, ..Process::default() });
        let p1 = t.add_process(Process { pid: 2, ..Process::default() });
        let d = t.add_device(Device::default());
        let launch = t.names.intern("cudaLaunchKernel");
        // Same correlation id in two processes: each kernel must find its own process's call.
        t.api_calls.push(ApiCall {
            start_ns: 10,
            end_ns: 12,
            name: launch,
            process: p1,
            correlation_id: 7,
            ..ApiCall::default()
        });
        t.api_calls.push(ApiCall {
            start_ns: 5,
            end_ns: 6,
            name: launch,
            process: p0,
            correlation_id: 7,
            ..ApiCall::default()
        });
        t.kernels.push(Kernel {
            start_ns: 30,
            end_ns: 40,
            device: d,
            process: p0,
            correlation_id: 7,
            collective: Some(0),
            ..Kernel::default()
        });
        t.kernels.push(Kernel {
            start_ns: 20,
            end_ns: 25,
            device: d,
            process: p1,
            correlation_id: 7,
            ..Kernel::default()
        });
        t.collectives.push(Collective { op: CollectiveOp::AllReduce, ..Collective::default() });
        t.finish();
        // Sorted: p1's kernel (20) first, then p0's (30); calls: p0's (5) first.
        assert_eq!(t.kernels[0].process, p1);
        assert_eq!(t.kernels[0].launch, Some(1));
        assert_eq!(t.kernels[1].launch, Some(0));
        assert_eq!(t.collectives[0].kernel, Some(1));
    }

    #[test]
    fn launch_index_handles_sparse_ids_and_repeats() {
        let call =
            |process, correlation_id| ApiCall { process: ProcessIdx(process), correlation_id, ..ApiCall::default() };
        // Process 0: dense ids with a repeat (the later call wins); process 1: ids far apart.
        let calls = vec![call(0, 5), call(0, 6), call(1, 1), call(1, 4_000_000_000), call(0, 6), call(0, 0)];
        let index = LaunchIndex::new(&calls);
        assert_eq!(index.get(ProcessIdx(0), 5), Some(0));
        assert_eq!(index.get(ProcessIdx(0), 6), Some(4));
        assert_eq!(index.get(ProcessIdx(0), 4), None);
        assert_eq!(index.get(ProcessIdx(0), 7), None);
        assert_eq!(index.get(ProcessIdx(1), 4_000_000_000), Some(3));
        assert_eq!(index.get(ProcessIdx(1), 1), Some(2));
        assert_eq!(index.get(ProcessIdx(1), 2), None);
        assert_eq!(index.get(ProcessIdx(2), 5), None);
    }

    /// Deterministic pseudo-random numbers for the tests over many chunks.
    fn lcg(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        *state >> 33
    }

    #[test]
    fn launch_index_over_many_chunks_equals_one_map_with_later_calls_winning() {
        // Three dense processes (ids in sequence, some repeated, some 0), one sparse (ids far apart), over several
        // chunks of calls, processes interleaved: every lookup as a map filled call after call gives it.
        let mut state = 7;
        let mut next_id = [1u32; 3];
        let calls: Vec<ApiCall> = (0..5 * crate::parallel::MIN_CHUNK + 11)
            .map(|_| {
                let process = (lcg(&mut state) % 4) as u32;
                let correlation_id = match process {
                    3 => (lcg(&mut state) as u32).wrapping_mul(977) | 1,
                    p if lcg(&mut state).is_multiple_of(50) => next_id[p as usize].saturating_sub(3),
                    _ if lcg(&mut state).is_multiple_of(40) => 0,
                    p => {
                        next_id[p as usize] += 1;
                        next_id[p as usize]
                    }
                };
                ApiCall { process: ProcessIdx(process), correlation_id, ..ApiCall::default() }
            })
            .collect();
        let mut expected: HashMap<(ProcessIdx, u32), u32> = HashMap::new();
        for (position, call) in calls.iter().enumerate().filter(|(_, c)| c.correlation_id != 0) {
            expected.insert((call.process, call.correlation_id), position as u32);
        }
        let index = LaunchIndex::new(&calls);
        assert!(index.dense[..3].iter().all(Option::is_some) && index.dense[3].is_none(), "three dense, one sparse");
        for (&(process, id), &position) in &expected {
            assert_eq!(index.get(process, id), Some(position), "process {process:?}, id {id}");
        }
        for process in 0..5 {
            assert_eq!(index.get(ProcessIdx(process), 0), None);
            assert_eq!(index.get(ProcessIdx(process), u32::MAX - 1), None);
        }
    }

    #[test]
    fn nesting_depths_over_many_chunks_equal_one_stack_per_track() {
        let mut t = Trace::default();
        let p = t.add_process(Process::default());
        let mut state = 11;
        // Ranges of five threads and a GPU stream, nested and overlapping, sorted as `finish` sorts them.
        let mut ranges: Vec<Range> = (0..3 * crate::parallel::MIN_CHUNK + 5)
            .map(|_| {
                let start_ns = (lcg(&mut state) % 1_000_000) as i64;
                let end_ns = start_ns + (lcg(&mut state) % 500) as i64;
                let tid = (lcg(&mut state) % 6) as u32;
                let stream = (tid == 5).then_some(7);
                Range { start_ns, end_ns, tid, stream, process: p, ..Range::default() }
            })
            .collect();
        ranges.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.end_ns)));
        let mut open: HashMap<(u32, Option<u32>), Vec<i64>> = HashMap::new();
        let expected: Vec<u16> = ranges
            .iter()
            .map(|range| {
                let stack = open.entry((range.tid, range.stream)).or_default();
                while stack.last().is_some_and(|&end| end <= range.start_ns) {
                    stack.pop();
                }
                stack.push(range.end_ns);
                (stack.len() - 1) as u16
            })
            .collect();
        t.ranges = ranges;
        t.finish();
        let depths: Vec<u16> = t.ranges.iter().map(|r| r.depth).collect();
        assert_eq!(depths, expected);
        assert!(depths.iter().any(|&d| d > 1), "some ranges nest");
    }

    #[test]
    fn finish_computes_nesting_depth_per_thread() {
        let mut t = Trace::default();
        let p = t.add_process(Process::default());
        let r = |start_ns, end_ns, tid| Range { start_ns, end_ns, tid, process: p, ..Range::default() };
        t.ranges = vec![r(0, 100, 1), r(10, 50, 1), r(20, 30, 1), r(60, 70, 1), r(15, 25, 2), r(100, 110, 1)];
        t.finish();
        let depths: Vec<(i64, u32, u16)> = t.ranges.iter().map(|r| (r.start_ns, r.tid, r.depth)).collect();
        assert_eq!(depths, vec![(0, 1, 0), (10, 1, 1), (15, 2, 0), (20, 1, 2), (60, 1, 1), (100, 1, 0)]);
    }
}
