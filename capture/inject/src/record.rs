//! The records a spool file holds, and their byte encoding.
//!
//! These are CUPTI's activity records reduced to the fields shardscope uses, with every
//! pointer (kernel names, NVTX messages) replaced by the id of a [`SpoolRecord::Name`] that
//! appears earlier in the same file. Encoding: one tag byte, then the fields in declaration
//! order as little-endian integers; strings are a `u32` byte length and UTF-8 bytes; an
//! `Option` is a `u8` (0 or 1) followed by the value when present. The tag values are part of
//! the file format: append new ones, never renumber.

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
    /// CUPTI times can be placed on the calendar.
    pub cupti_clock_ns: u64,
    /// See `cupti_clock_ns`.
    pub realtime_ns: u64,
}

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

/// One item of a spool file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolRecord {
    /// Who wrote this file; first in every file.
    Process(ProcessInfo),
    /// A string that later records refer to by `id` (ids start at 1; 0 means "none").
    Name {
        /// The id.
        id: u32,
        /// The text.
        text: String,
    },
    /// A kernel.
    Kernel(KernelRecord),
    /// A copy.
    Memcpy(MemcpyRecord),
    /// A set.
    Memset(MemsetRecord),
    /// An API call.
    Api(ApiRecord),
    /// An NVTX marker.
    Marker(MarkerRecord),
    /// A synchronisation.
    Sync(SyncRecord),
    /// A GPU.
    Device(DeviceRecord),
    /// Records CUPTI dropped.
    Dropped(DroppedRecord),
    /// Buffers the injection library refused to hand to CUPTI because its pool was full
    /// (CUPTI then drops the records it could not store and reports them as [`Self::Dropped`]).
    BuffersRefused {
        /// Total so far.
        count: u64,
    },
    /// Which API calls this process records, written once when recording starts.
    ApiSelection(ApiSelection),
    /// What recording cost this process, written at a clean exit just before [`Self::End`].
    Cost(CaptureCost),
    /// Another CUPTI client of the workload (its own profiler: torch.profiler, …) was refused because this
    /// library holds the process's one CUPTI subscription; written when it happens.
    RefusedClient {
        /// Refusals so far in this process.
        count: u32,
    },
    /// Written by a clean exit: how many records the process wrote in all.
    End {
        /// Records written before this one.
        records: u64,
        /// Activity records the decoder could not use (unknown kind, bad field).
        undecoded: u64,
    },
}

mod tag {
    pub const PROCESS: u8 = 1;
    pub const NAME: u8 = 2;
    pub const KERNEL: u8 = 3;
    pub const MEMCPY: u8 = 4;
    pub const MEMSET: u8 = 5;
    pub const API: u8 = 6;
    pub const MARKER: u8 = 7;
    pub const SYNC: u8 = 8;
    pub const DEVICE: u8 = 9;
    pub const DROPPED: u8 = 10;
    pub const BUFFERS_REFUSED: u8 = 11;
    pub const END: u8 = 12;
    pub const API_SELECTION: u8 = 13;
    pub const COST: u8 = 14;
    pub const REFUSED_CLIENT: u8 = 15;
}

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

/// Little-endian field writer.
struct Put<'a>(&'a mut Vec<u8>);

impl Put<'_> {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.u32(v as u32)
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.u64(v as u64)
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v.as_bytes());
        self
    }
    fn opt_u32(&mut self, v: Option<u32>) -> &mut Self {
        match v {
            Some(v) => self.u8(1).u32(v),
            None => self.u8(0),
        }
    }
}

/// Little-endian field reader; every method returns `None` when the input is too short.
struct Get<'a, 'b>(&'a mut &'b [u8]);

impl Get<'_, '_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        *self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
    fn str(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        if self.0.len() < len {
            return None;
        }
        let (head, rest) = self.0.split_at(len);
        *self.0 = rest;
        Some(String::from_utf8_lossy(head).into_owned())
    }
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.u32()?)),
            _ => None,
        }
    }
}

impl SpoolRecord {
    /// Appends this record's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut p = Put(out);
        match self {
            SpoolRecord::Process(i) => {
                p.u8(tag::PROCESS).u32(i.pid).u32(i.ppid).u32(i.command_line.len() as u32);
                for arg in &i.command_line {
                    p.str(arg);
                }
                p.str(&i.hostname).opt_u32(i.rank).opt_u32(i.local_rank).opt_u32(i.world_size);
                p.u32(i.env.len() as u32);
                for (k, v) in &i.env {
                    p.str(k).str(v);
                }
                p.u32(i.cupti_version).u64(i.cupti_clock_ns).u64(i.realtime_ns);
            }
            SpoolRecord::Name { id, text } => {
                p.u8(tag::NAME).u32(*id).str(text);
            }
            SpoolRecord::Kernel(k) => {
                p.u8(tag::KERNEL).u64(k.start_ns).u64(k.end_ns).u32(k.device_id).u32(k.context_id);
                p.u32(k.stream_id).u32(k.correlation_id);
                for v in k.grid.iter().chain(&k.block) {
                    p.i32(*v);
                }
                p.u16(k.registers_per_thread).i32(k.static_shared_bytes).i32(k.dynamic_shared_bytes);
                p.u32(k.local_bytes_per_thread).u32(k.local_bytes_total).u32(k.shared_executed_bytes);
                p.i64(k.grid_id).u8(k.launch_type).u8(k.cache_config).u64(k.graph_node_id).u32(k.name_id);
            }
            SpoolRecord::Memcpy(m) => {
                p.u8(tag::MEMCPY).u64(m.start_ns).u64(m.end_ns).u64(m.bytes);
                p.u8(m.copy_kind).u8(m.src_kind).u8(m.dst_kind);
                p.u32(m.device_id).u32(m.context_id).u32(m.stream_id).u32(m.correlation_id).u64(m.graph_node_id);
            }
            SpoolRecord::Memset(m) => {
                p.u8(tag::MEMSET).u64(m.start_ns).u64(m.end_ns).u64(m.bytes).u32(m.value).u16(m.memory_kind);
                p.u32(m.device_id).u32(m.context_id).u32(m.stream_id).u32(m.correlation_id).u64(m.graph_node_id);
            }
            SpoolRecord::Api(a) => {
                p.u8(tag::API).u8(a.driver as u8).u32(a.cbid).u64(a.start_ns).u64(a.end_ns);
                p.u32(a.pid).u32(a.tid).u32(a.correlation_id).u32(a.return_value).u32(a.name_id);
            }
            SpoolRecord::Marker(m) => {
                p.u8(tag::MARKER).u32(m.flags).u64(m.timestamp_ns).u32(m.id).u32(m.pid).u32(m.tid);
                p.u32(m.name_id).u32(m.domain_id);
            }
            SpoolRecord::Sync(s) => {
                p.u8(tag::SYNC).u32(s.sync_type).u64(s.start_ns).u64(s.end_ns).u32(s.correlation_id);
                p.u32(s.context_id).u32(s.stream_id).u32(s.event_id);
            }
            SpoolRecord::Device(d) => {
                p.u8(tag::DEVICE).u32(d.device_id).str(&d.name);
                p.0.extend_from_slice(&d.uuid);
                p.u64(d.memory_bytes).u64(d.memory_bandwidth_kib_per_s).u32(d.clock_rate_khz).u32(d.sm_count);
                p.u32(d.cc_major).u32(d.cc_minor).u32(d.l2_cache_bytes).u32(d.copy_engines);
            }
            SpoolRecord::Dropped(d) => {
                p.u8(tag::DROPPED).u32(d.context_id).u32(d.stream_id).u64(d.count);
            }
            SpoolRecord::BuffersRefused { count } => {
                p.u8(tag::BUFFERS_REFUSED).u64(*count);
            }
            SpoolRecord::End { records, undecoded } => {
                p.u8(tag::END).u64(*records).u64(*undecoded);
            }
            SpoolRecord::ApiSelection(a) => {
                p.u8(tag::API_SELECTION).u8(a.every_call as u8).u32(a.runtime_cbids).u32(a.driver_cbids);
                p.u8(a.runtime_whole_kind as u8).u8(a.driver_whole_kind as u8);
            }
            SpoolRecord::RefusedClient { count } => {
                p.u8(tag::REFUSED_CLIENT).u32(*count);
            }
            SpoolRecord::Cost(c) => {
                p.u8(tag::COST).u64(c.buffer_callback_ns).u64(c.buffer_callbacks).u64(c.writer_cpu_ns);
                p.opt_u32(c.ns_per_recorded_call).u32(c.calibration_records);
            }
        }
    }

    /// Decodes one record from the front of `input` and advances it; `None` when the tag is
    /// unknown or the input ends inside the record.
    pub fn decode(input: &mut &[u8]) -> Option<SpoolRecord> {
        let mut g = Get(input);
        let record = match g.u8()? {
            tag::PROCESS => {
                let pid = g.u32()?;
                let ppid = g.u32()?;
                let argc = g.u32()?;
                let mut command_line = Vec::new();
                for _ in 0..argc {
                    command_line.push(g.str()?);
                }
                let hostname = g.str()?;
                let rank = g.opt_u32()?;
                let local_rank = g.opt_u32()?;
                let world_size = g.opt_u32()?;
                let env_len = g.u32()?;
                let mut env = Vec::new();
                for _ in 0..env_len {
                    env.push((g.str()?, g.str()?));
                }
                SpoolRecord::Process(ProcessInfo {
                    pid,
                    ppid,
                    command_line,
                    hostname,
                    rank,
                    local_rank,
                    world_size,
                    env,
                    cupti_version: g.u32()?,
                    cupti_clock_ns: g.u64()?,
                    realtime_ns: g.u64()?,
                })
            }
            tag::NAME => SpoolRecord::Name { id: g.u32()?, text: g.str()? },
            tag::KERNEL => SpoolRecord::Kernel(KernelRecord {
                start_ns: g.u64()?,
                end_ns: g.u64()?,
                device_id: g.u32()?,
                context_id: g.u32()?,
                stream_id: g.u32()?,
                correlation_id: g.u32()?,
                grid: [g.i32()?, g.i32()?, g.i32()?],
                block: [g.i32()?, g.i32()?, g.i32()?],
                registers_per_thread: g.u16()?,
                static_shared_bytes: g.i32()?,
                dynamic_shared_bytes: g.i32()?,
                local_bytes_per_thread: g.u32()?,
                local_bytes_total: g.u32()?,
                shared_executed_bytes: g.u32()?,
                grid_id: g.i64()?,
                launch_type: g.u8()?,
                cache_config: g.u8()?,
                graph_node_id: g.u64()?,
                name_id: g.u32()?,
            }),
            tag::MEMCPY => SpoolRecord::Memcpy(MemcpyRecord {
                start_ns: g.u64()?,
                end_ns: g.u64()?,
                bytes: g.u64()?,
                copy_kind: g.u8()?,
                src_kind: g.u8()?,
                dst_kind: g.u8()?,
                device_id: g.u32()?,
                context_id: g.u32()?,
                stream_id: g.u32()?,
                correlation_id: g.u32()?,
                graph_node_id: g.u64()?,
            }),
            tag::MEMSET => SpoolRecord::Memset(MemsetRecord {
                start_ns: g.u64()?,
                end_ns: g.u64()?,
                bytes: g.u64()?,
                value: g.u32()?,
                memory_kind: g.u16()?,
                device_id: g.u32()?,
                context_id: g.u32()?,
                stream_id: g.u32()?,
                correlation_id: g.u32()?,
                graph_node_id: g.u64()?,
            }),
            tag::API => SpoolRecord::Api(ApiRecord {
                driver: g.u8()? != 0,
                cbid: g.u32()?,
                start_ns: g.u64()?,
                end_ns: g.u64()?,
                pid: g.u32()?,
                tid: g.u32()?,
                correlation_id: g.u32()?,
                return_value: g.u32()?,
                name_id: g.u32()?,
            }),
            tag::MARKER => SpoolRecord::Marker(MarkerRecord {
                flags: g.u32()?,
                timestamp_ns: g.u64()?,
                id: g.u32()?,
                pid: g.u32()?,
                tid: g.u32()?,
                name_id: g.u32()?,
                domain_id: g.u32()?,
            }),
            tag::SYNC => SpoolRecord::Sync(SyncRecord {
                sync_type: g.u32()?,
                start_ns: g.u64()?,
                end_ns: g.u64()?,
                correlation_id: g.u32()?,
                context_id: g.u32()?,
                stream_id: g.u32()?,
                event_id: g.u32()?,
            }),
            tag::DEVICE => SpoolRecord::Device(DeviceRecord {
                device_id: g.u32()?,
                name: g.str()?,
                uuid: g.take::<16>()?,
                memory_bytes: g.u64()?,
                memory_bandwidth_kib_per_s: g.u64()?,
                clock_rate_khz: g.u32()?,
                sm_count: g.u32()?,
                cc_major: g.u32()?,
                cc_minor: g.u32()?,
                l2_cache_bytes: g.u32()?,
                copy_engines: g.u32()?,
            }),
            tag::DROPPED => {
                SpoolRecord::Dropped(DroppedRecord { context_id: g.u32()?, stream_id: g.u32()?, count: g.u64()? })
            }
            tag::BUFFERS_REFUSED => SpoolRecord::BuffersRefused { count: g.u64()? },
            tag::END => SpoolRecord::End { records: g.u64()?, undecoded: g.u64()? },
            tag::API_SELECTION => SpoolRecord::ApiSelection(ApiSelection {
                every_call: g.u8()? != 0,
                runtime_cbids: g.u32()?,
                driver_cbids: g.u32()?,
                runtime_whole_kind: g.u8()? != 0,
                driver_whole_kind: g.u8()? != 0,
            }),
            tag::REFUSED_CLIENT => SpoolRecord::RefusedClient { count: g.u32()? },
            tag::COST => SpoolRecord::Cost(CaptureCost {
                buffer_callback_ns: g.u64()?,
                buffer_callbacks: g.u64()?,
                writer_cpu_ns: g.u64()?,
                ns_per_recorded_call: g.opt_u32()?,
                calibration_records: g.u32()?,
            }),
            _ => return None,
        };
        Some(record)
    }
}
