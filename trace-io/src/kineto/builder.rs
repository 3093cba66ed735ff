//! Turns Kineto events, one at a time, into the trace model, then resolves what can only be
//! known at the end of the file: which process launched the GPU work, which device index each
//! GPU gets, flow-based correlation ids, and the collective behind each NCCL kernel.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, CopyKind, Device, DeviceIdx, Kernel, MemOp, MemoryKind, NameId,
    Process, ProcessIdx, Range, RangeKind, SourceFormat, ThreadName, Trace, kernel_names,
};

use super::collective::{self, CommInfo};
use super::raw::{LooseInt, LooseStr, RawArgs, RawDeviceProperties, RawDistributedInfo, RawEvent};
use super::time::micros_text_to_ns;

/// Timestamps above this many ns (about 1973) are taken as ns since the Unix epoch: Kineto wrote
/// epoch microseconds before it introduced `baseTimeNanoseconds`.
const EPOCH_THRESHOLD_NS: i64 = 100_000_000_000_000_000;

/// What the top level says about the GPUs, by ordinal.
#[derive(Debug, Clone, Default)]
struct DeviceProperties {
    name: String,
    sm_count: Option<u32>,
    memory_bytes: Option<u64>,
}

/// `distributedInfo`, reduced to what the model keeps.
#[derive(Debug, Clone, Default)]
struct Distributed {
    rank: Option<u32>,
    world_size: Option<u32>,
    /// Process group name → member ranks, to complete collectives that name only their group.
    group_ranks: HashMap<String, Vec<u32>>,
}

/// A CPU-side range that describes a collective (`nccl:all_reduce`, `record_param_comms`).
#[derive(Debug)]
struct CommRange {
    pid: i64,
    tid: u32,
    start_ns: i64,
    end_ns: i64,
    /// Index in `Builder::comm_infos`: a run repeats a few collectives (same op, size, group)
    /// thousands of times, so each distinct description is stored once.
    info: u32,
}

/// A GPU event with no `args.correlation`: the `ac2g` flow ending on it may still link it.
#[derive(Debug, Clone, Copy)]
struct Uncorrelated {
    is_kernel: bool,
    index: usize,
    pid: i64,
    tid: i64,
    ts_ns: i64,
}

/// Accumulates one file's events.
#[derive(Default)]
pub struct Builder {
    trace: Trace,
    /// CPU pid → process index, in order of first appearance.
    cpu_processes: HashMap<i64, ProcessIdx>,
    /// API calls per process: the one with the most launched the GPU work.
    api_calls_per_process: Vec<u64>,
    process_names: HashMap<i64, String>,
    /// (pid, tid) → thread name; Kineto repeats some `thread_name` records.
    thread_names: BTreeMap<(i64, u32), String>,
    device_properties: HashMap<u32, DeviceProperties>,
    distributed: Distributed,
    base_time_ns: Option<i64>,
    host_name: Option<String>,
    earliest_ts_ns: Option<i64>,
    /// `ac2g` flow ends: (pid, tid, ts) of the GPU event → flow id (= correlation id). Only the ones
    /// that may still be needed: see [`Builder::add_flow_end`].
    flow_ends: Vec<(i64, i64, i64, u64)>,
    /// (pid, tid, start, correlation id) of the latest kept event that has a correlation id.
    last_correlated: Option<(i64, i64, i64, u64)>,
    uncorrelated: Vec<Uncorrelated>,
    comm_ranges: Vec<CommRange>,
    /// The distinct descriptions the comm ranges point to, and the index of each.
    comm_infos: Vec<CommInfo>,
    comm_info_index: HashMap<CommInfo, u32>,
    /// NCCL kernels whose own args do not describe the collective.
    nccl_kernels_without_args: Vec<usize>,
    short_names: HashMap<NameId, NameId>,
    /// `[memory]` samples with the GPU ordinal each names, until GPUs are resolved.
    memory: Vec<(Option<u32>, shardscope_model::FrameworkMemorySample)>,
}

/// The event categories the model keeps; every other category is skipped on purpose.
enum Category {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    Driver,
    CpuAnnotation,
    GpuAnnotation,
    /// `cpu_op`: kept only for `ProfilerStep#N` and `record_param_comms`.
    CpuOp,
    /// `python_function`: kept only for module calls (`nn.Module: Linear_3`, from `with_modules=True`).
    PythonFunction,
}

impl Category {
    fn of(cat: &str) -> Option<Category> {
        // Kineto before PyTorch 1.9 capitalised some categories (`Kernel`, `Runtime`, `Memcpy`).
        Some(match cat {
            "kernel" | "Kernel" => Category::Kernel,
            "gpu_memcpy" | "Memcpy" => Category::Memcpy,
            "gpu_memset" | "Memset" => Category::Memset,
            "cuda_runtime" | "Runtime" => Category::Runtime,
            "cuda_driver" | "Driver" => Category::Driver,
            "user_annotation" => Category::CpuAnnotation,
            "gpu_user_annotation" => Category::GpuAnnotation,
            "cpu_op" | "Operator" => Category::CpuOp,
            "python_function" => Category::PythonFunction,
            _ => return None,
        })
    }

    /// Name used in warnings.
    fn label(&self) -> &'static str {
        match self {
            Category::Kernel => "kernel",
            Category::Memcpy => "gpu_memcpy",
            Category::Memset => "gpu_memset",
            Category::Runtime => "cuda_runtime",
            Category::Driver => "cuda_driver",
            Category::CpuAnnotation => "user_annotation",
            Category::GpuAnnotation => "gpu_user_annotation",
            Category::CpuOp => "cpu_op",
            Category::PythonFunction => "python_function",
        }
    }
}

fn str_of<'s>(value: &'s LooseStr<'_>) -> Option<&'s str> {
    value.as_str()
}

fn int_of(value: LooseInt) -> Option<i64> {
    value.get()
}

fn u32_of(value: LooseInt) -> Option<u32> {
    int_of(value).and_then(|v| u32::try_from(v).ok())
}

impl Builder {
    /// A builder for the file `path`.
    pub fn new(path: &str) -> Builder {
        let mut builder = Builder::default();
        builder.trace.source.path = path.to_owned();
        builder.trace.source.format = SourceFormat::KinetoJson;
        builder
    }

    /// Records `schemaVersion` as written (a number or a string). Every version is accepted:
    /// the reader relies only on keys that Kineto has written since schema 1 and treats each of
    /// them as optional, so a newer file loses at most what it renamed.
    pub fn set_schema_version(&mut self, text: &str) {
        let text = text.trim();
        let text = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text);
        self.trace.source.schema_version = Some(text.to_owned());
    }

    /// Records `baseTimeNanoseconds`.
    pub fn set_base_time_ns(&mut self, base_time_ns: Option<i64>) {
        self.base_time_ns = base_time_ns;
    }

    /// Records the top-level `host_name`.
    pub fn set_host_name(&mut self, host: &str) {
        if !host.is_empty() {
            self.host_name = Some(host.to_owned());
        }
    }

    /// Records `deviceProperties`.
    pub fn set_device_properties(&mut self, devices: Vec<RawDeviceProperties>) {
        for device in devices {
            let Some(ordinal) = u32_of(device.id) else {
                self.trace.warn("deviceProperties entry without a valid 'id'");
                continue;
            };
            let properties = DeviceProperties {
                name: str_of(&device.name).unwrap_or_default().to_owned(),
                sm_count: u32_of(device.num_sms),
                memory_bytes: int_of(device.total_global_mem).and_then(|v| u64::try_from(v).ok()),
            };
            self.device_properties.insert(ordinal, properties);
        }
    }

    /// Records `distributedInfo`.
    pub fn set_distributed_info(&mut self, info: RawDistributedInfo) {
        self.distributed.rank = u32_of(info.rank);
        self.distributed.world_size = u32_of(info.world_size);
        for group in info.pg_config.unwrap_or_default() {
            if let Some(name) = str_of(&group.pg_name) {
                let ranks = group.ranks.unwrap_or_default().into_iter().filter_map(u32_of).collect();
                self.distributed.group_ranks.insert(name.to_owned(), ranks);
            }
        }
    }

    /// Counts a top-level field that had an unusable shape.
    pub fn warn(&mut self, what: &str) {
        self.trace.warn(what);
    }

    /// Takes one element of `traceEvents`.
    pub fn add_event(&mut self, event: &RawEvent) {
        match str_of(&event.ph).unwrap_or("") {
            "X" => {
                if let Some(category) = str_of(&event.cat).and_then(Category::of) {
                    self.add_complete_event(category, event);
                }
            }
            "M" => self.add_metadata(event),
            "f" => self.add_flow_end(event),
            "i" if str_of(&event.name) == Some(super::memory::MEMORY_EVENT_NAME) => self.add_memory(event),
            // Flow starts, instants, counters and async events carry nothing the model keeps.
            _ => {}
        }
    }

    fn add_metadata(&mut self, event: &RawEvent) {
        let Some(pid) = int_of(event.pid) else { return };
        let args = event.parse_args().unwrap_or_default();
        let name = str_of(&args.name).unwrap_or("");
        match str_of(&event.name) {
            Some("process_name") => {
                self.process_names.insert(pid, name.to_owned());
            }
            Some("thread_name") => {
                if let Some(tid) = int_of(event.tid) {
                    self.thread_names.insert((pid, tid as u32), name.trim().to_owned());
                }
            }
            _ => {}
        }
    }

    /// A `[memory]` instant: a framework allocator sample of its CPU process.
    fn add_memory(&mut self, event: &RawEvent) {
        let args = event.parse_args().unwrap_or_default();
        let Some(process) = self.cpu_process(&Category::CpuOp, event) else { return };
        match super::memory::sample(event, &args.memory, process) {
            Some(sample) => self.memory.push(sample),
            None => self.trace.warn(super::memory::UNUSABLE),
        }
    }

    fn add_flow_end(&mut self, event: &RawEvent) {
        // `ac2g` links a CUDA launch to its GPU activity; PyTorch 1.8 called the category `async_gpu`.
        if !matches!(str_of(&event.cat), Some("ac2g" | "async_gpu")) {
            return;
        }
        let (Some(pid), Some(tid), Some(id)) = (int_of(event.pid), int_of(event.tid), int_of(event.id)) else {
            return;
        };
        let Some(ts_ns) = event.ts.and_then(micros_text_to_ns) else { return };
        let Ok(id) = u64::try_from(id) else { return };
        // Kineto writes each flow end right after the event it ends on, which already carries the
        // same id in `args.correlation` (so in every real file at hand): such an end can link
        // nothing more, and keeping it would cost 32 bytes per GPU event and API call of a large
        // trace. Only ends on events without a correlation id are kept for `link_by_flows`.
        if self.last_correlated == Some((pid, tid, ts_ns, id)) {
            return;
        }
        self.flow_ends.push((pid, tid, ts_ns, id));
    }

    /// Notes a kept event with a correlation id, so that the flow end that follows it is not stored.
    fn note_correlated(&mut self, event: &RawEvent, start_ns: i64, correlation_id: u32) {
        if let (Some(pid), Some(tid)) = (int_of(event.pid), int_of(event.tid)) {
            self.last_correlated = Some((pid, tid, start_ns, u64::from(correlation_id)));
        }
    }

    /// Start and end in ns of an `X` event, or a counted warning.
    fn span(&mut self, category: &Category, event: &RawEvent) -> Option<(i64, i64)> {
        let Some(start_ns) = event.ts.and_then(micros_text_to_ns) else {
            self.trace.warn(&format!("{} event without a valid 'ts' skipped", category.label()));
            return None;
        };
        let Some(duration_ns) = event.dur.and_then(micros_text_to_ns) else {
            self.trace.warn(&format!("{} event without a valid 'dur' skipped", category.label()));
            return None;
        };
        if duration_ns < 0 {
            self.trace.warn(&format!("{} event with a negative 'dur' skipped", category.label()));
            return None;
        }
        let Some(end_ns) = start_ns.checked_add(duration_ns) else {
            self.trace.warn(&format!("{} event with an out-of-range 'dur' skipped", category.label()));
            return None;
        };
        self.earliest_ts_ns = Some(self.earliest_ts_ns.map_or(start_ns, |t| t.min(start_ns)));
        Some((start_ns, end_ns))
    }

    /// The process of a CPU-side event, created on first sight.
    fn cpu_process(&mut self, category: &Category, event: &RawEvent) -> Option<ProcessIdx> {
        let Some(pid) = int_of(event.pid) else {
            self.trace.warn(&format!("{} event without a numeric 'pid' skipped", category.label()));
            return None;
        };
        if let Some(&index) = self.cpu_processes.get(&pid) {
            return Some(index);
        }
        // Linux pids fit in u32; wider ids (other OSes) keep their low bits.
        let index = self.trace.add_process(Process { pid: pid as u32, ..Process::default() });
        self.cpu_processes.insert(pid, index);
        self.api_calls_per_process.push(0);
        Some(index)
    }

    /// The GPU ordinal of a GPU-side event: `args.device`, else the `pid` Kineto files it under.
    fn gpu_ordinal(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) -> Option<u32> {
        let from_args = u32_of(args.device);
        let ordinal = from_args.or_else(|| u32_of(event.pid));
        if ordinal.is_none() {
            self.trace.warn(&format!("{} event without a device ordinal skipped", category.label()));
        }
        ordinal
    }

    fn name_id(&mut self, event: &RawEvent) -> NameId {
        self.trace.names.intern(str_of(&event.name).unwrap_or(""))
    }

    fn add_complete_event(&mut self, category: Category, event: &RawEvent) {
        if let Category::PythonFunction = category {
            // Module calls become CPU ranges, which the analyzer's module table reads; other Python calls are
            // too many to keep.
            if str_of(&event.name).is_some_and(|name| name.starts_with("nn.Module: ")) {
                self.add_cpu_annotation(&category, event, &RawArgs::default());
            }
            return;
        }
        if let Category::CpuOp = category {
            let name = str_of(&event.name).unwrap_or("");
            // Older PyTorch recorded the step ranges as ops; the analyzer finds steps by them.
            if name.starts_with("ProfilerStep#") {
                self.add_cpu_annotation(&category, event, &RawArgs::default());
            } else if name == "record_param_comms"
                && let Some(info) = event.parse_args().as_ref().and_then(collective::from_args)
            {
                self.add_comm_range(&category, event, info);
            }
            return;
        }
        let args = event.parse_args().unwrap_or_default();
        match category {
            Category::Kernel => self.add_kernel(&category, event, &args),
            Category::Memcpy | Category::Memset => self.add_memop(&category, event, &args),
            Category::Runtime | Category::Driver => self.add_api_call(&category, event, &args),
            Category::CpuAnnotation => self.add_cpu_annotation(&category, event, &args),
            Category::GpuAnnotation => self.add_gpu_annotation(&category, event, &args),
            // Handled above.
            Category::CpuOp | Category::PythonFunction => {}
        }
    }

    fn add_kernel(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) {
        let Some((start_ns, end_ns)) = self.span(category, event) else { return };
        let Some(ordinal) = self.gpu_ordinal(category, event, args) else { return };
        let name = self.name_id(event);
        let short_name = match self.short_names.get(&name) {
            Some(&short) => short,
            None => {
                let full_name = self.trace.names.get(name).to_owned();
                let short = self.trace.names.intern(kernel_names::short_name(&full_name));
                self.short_names.insert(name, short);
                short
            }
        };
        let index = self.trace.kernels.len();
        let collective = match collective::from_args(args) {
            Some(info) => Some(self.add_collective(info)),
            None => {
                if kernel_names::is_nccl_kernel(self.trace.names.get(name)) {
                    self.nccl_kernels_without_args.push(index);
                }
                None
            }
        };
        let correlation_id = u32_of(args.correlation).unwrap_or(0);
        if correlation_id == 0 {
            self.note_uncorrelated(true, index, event, start_ns);
        } else {
            self.note_correlated(event, start_ns, correlation_id);
        }
        self.trace.kernels.push(Kernel {
            start_ns,
            end_ns,
            name,
            short_name,
            // The ordinal for now; replaced by the device index in `finish`.
            device: DeviceIdx(ordinal),
            process: ProcessIdx::default(),
            stream: stream_of(args, event),
            correlation_id,
            grid: args.grid.0.unwrap_or([0; 3]),
            block: args.block.0.unwrap_or([0; 3]),
            launch: None,
            collective,
            graph_id: None,
            graph_node_id: None,
        });
    }

    fn note_uncorrelated(&mut self, is_kernel: bool, index: usize, event: &RawEvent, ts_ns: i64) {
        if let (Some(pid), Some(tid)) = (int_of(event.pid), int_of(event.tid)) {
            self.uncorrelated.push(Uncorrelated { is_kernel, index, pid, tid, ts_ns });
        } else {
            self.trace.warn("GPU event without a correlation id (not linked to its launch)");
        }
    }

    fn add_memop(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) {
        let Some((start_ns, end_ns)) = self.span(category, event) else { return };
        let Some(ordinal) = self.gpu_ordinal(category, event, args) else { return };
        let copy_kind = match category {
            Category::Memset => None,
            _ => {
                let name = str_of(&event.name).unwrap_or("");
                Some(copy_kind_of(name).or_else(|| str_of(&args.kind).and_then(copy_kind_of)).unwrap_or_default())
            }
        };
        let bytes = match int_of(args.bytes).and_then(|b| u64::try_from(b).ok()) {
            Some(bytes) => bytes,
            None => {
                self.trace.warn(&format!("{} event without 'bytes' (counted as 0 bytes)", category.label()));
                0
            }
        };
        let (src_memory, dst_memory) = match copy_kind {
            Some(_) => memory_kinds_of(str_of(&event.name).unwrap_or("")),
            None => (None, None),
        };
        let (src_device, dst_device) = match copy_kind {
            Some(CopyKind::HtoD) => (None, Some(ordinal)),
            Some(CopyKind::DtoH) => (Some(ordinal), None),
            Some(CopyKind::DtoD) => (Some(ordinal), Some(ordinal)),
            _ => (None, None),
        };
        let correlation_id = u32_of(args.correlation).unwrap_or(0);
        let index = self.trace.memops.len();
        if correlation_id == 0 {
            self.note_uncorrelated(false, index, event, start_ns);
        } else {
            self.note_correlated(event, start_ns, correlation_id);
        }
        self.trace.memops.push(MemOp {
            start_ns,
            end_ns,
            copy_kind,
            bytes,
            device: DeviceIdx(ordinal),
            process: ProcessIdx::default(),
            stream: stream_of(args, event),
            correlation_id,
            src_device,
            dst_device,
            launch: None,
            src_memory,
            dst_memory,
        });
    }

    fn add_api_call(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) {
        let Some((start_ns, end_ns)) = self.span(category, event) else { return };
        let Some(process) = self.cpu_process(category, event) else { return };
        self.api_calls_per_process[process.0 as usize] += 1;
        let name = self.name_id(event);
        let correlation_id = u32_of(args.correlation).unwrap_or(0);
        if correlation_id != 0 {
            self.note_correlated(event, start_ns, correlation_id);
        }
        self.trace.api_calls.push(ApiCall {
            start_ns,
            end_ns,
            name,
            kind: if matches!(category, Category::Driver) { ApiKind::Driver } else { ApiKind::Runtime },
            process,
            tid: int_of(event.tid).unwrap_or(0) as u32,
            correlation_id,
        });
    }

    fn add_cpu_annotation(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) {
        let Some((start_ns, end_ns)) = self.span(category, event) else { return };
        let Some(process) = self.cpu_process(category, event) else { return };
        let name = self.name_id(event);
        self.trace.ranges.push(Range {
            start_ns,
            end_ns,
            name,
            domain: NameId::EMPTY,
            kind: RangeKind::CpuAnnotation,
            process,
            tid: int_of(event.tid).unwrap_or(0) as u32,
            device: None,
            stream: None,
            depth: 0,
        });
        if let Some(info) = collective::from_annotation(str_of(&event.name).unwrap_or(""), args) {
            self.add_comm_range(category, event, info);
        }
    }

    /// Remembers a CPU range that describes a collective, to attach it to the NCCL kernel
    /// launched inside it.
    fn add_comm_range(&mut self, category: &Category, event: &RawEvent, info: CommInfo) {
        let (Some(pid), Some((start_ns, end_ns))) = (int_of(event.pid), self.span(category, event)) else { return };
        let tid = int_of(event.tid).unwrap_or(0) as u32;
        let info = match self.comm_info_index.get(&info) {
            Some(&index) => index,
            None => {
                let index = self.comm_infos.len() as u32;
                self.comm_infos.push(info.clone());
                self.comm_info_index.insert(info, index);
                index
            }
        };
        self.comm_ranges.push(CommRange { pid, tid, start_ns, end_ns, info });
    }

    fn add_gpu_annotation(&mut self, category: &Category, event: &RawEvent, args: &RawArgs) {
        let Some((start_ns, end_ns)) = self.span(category, event) else { return };
        let Some(ordinal) = self.gpu_ordinal(category, event, args) else { return };
        let stream = stream_of(args, event);
        let name = self.name_id(event);
        self.trace.ranges.push(Range {
            start_ns,
            end_ns,
            name,
            domain: NameId::EMPTY,
            kind: RangeKind::GpuAnnotation,
            process: ProcessIdx::default(),
            tid: 0,
            device: Some(DeviceIdx(ordinal)),
            stream: Some(stream),
            depth: 0,
        });
    }

    fn add_collective(&mut self, info: CommInfo) -> u32 {
        let mut group_ranks = info.group_ranks;
        if group_ranks.is_empty()
            && let Some(known) = info.group_name.as_ref().and_then(|g| self.distributed.group_ranks.get(g))
        {
            group_ranks = known.clone();
        }
        let collective = Collective {
            kernel: None,
            op: info.op,
            bytes: info.bytes,
            in_elems: info.in_elems,
            out_elems: info.out_elems,
            dtype: self.trace.names.intern(info.dtype.as_deref().unwrap_or("")),
            group_name: self.trace.names.intern(info.group_name.as_deref().unwrap_or("")),
            group_size: info.group_size.or_else(|| u32::try_from(group_ranks.len()).ok().filter(|&n| n > 0)),
            group_ranks,
            communicator: None,
            seq: None,
        };
        self.trace.collectives.push(collective);
        (self.trace.collectives.len() - 1) as u32
    }

    /// Resolves everything that needed the whole file and returns the finished trace.
    pub fn finish(mut self) -> Trace {
        let main_process = self.resolve_processes();
        self.resolve_devices(main_process);
        self.link_by_flows();
        self.attach_collectives(main_process);
        self.trace.clock_offset_ns = match self.base_time_ns {
            // Since 2023 Kineto writes `ts` relative to `baseTimeNanoseconds` (ns since the epoch),
            // so absolute time = base + ts. Checked on the real files: base + ts lands on the wall
            // time in the file's name and log lines (rank-34: 2024-07-15 17:52 UTC, triton_example:
            // 2024-10-28 23:06 UTC).
            Some(base) => Some(base),
            // Older files write epoch microseconds directly.
            None if self.earliest_ts_ns.is_some_and(|t| t >= EPOCH_THRESHOLD_NS) => Some(0),
            None => None,
        };
        // The side tables (flow ends, comm ranges, name maps) go before the sorts in
        // `Trace::finish`, whose scratch space is the peak of a large read.
        let mut trace = std::mem::take(&mut self.trace);
        drop(self);
        trace.finish();
        trace
    }

    /// Names and ranks the CPU processes and returns the one that launched the GPU work (the one
    /// with the most CUDA API calls), creating a placeholder when the file has no CPU events.
    fn resolve_processes(&mut self) -> ProcessIdx {
        if self.trace.processes.is_empty() {
            self.trace.add_process(Process::default());
            self.api_calls_per_process.push(0);
        }
        let mut main = ProcessIdx(0);
        for (index, &calls) in self.api_calls_per_process.iter().enumerate() {
            if calls > self.api_calls_per_process[main.0 as usize] {
                main = ProcessIdx(index as u32);
            }
        }
        for (&pid, &index) in &self.cpu_processes {
            let process = &mut self.trace.processes[index.0 as usize];
            if let Some(name) = self.process_names.get(&pid) {
                process.name = name.clone();
            }
        }
        for process in &mut self.trace.processes {
            // One Kineto file is one rank: every process in it belongs to that rank.
            process.rank = self.distributed.rank;
            process.world_size = self.distributed.world_size;
            process.host = self.host_name.clone();
        }
        for ((pid, tid), name) in std::mem::take(&mut self.thread_names) {
            if let Some(&process) = self.cpu_processes.get(&pid) {
                self.trace.threads.push(ThreadName { process, tid, name });
            }
        }
        for kernel in &mut self.trace.kernels {
            kernel.process = main;
        }
        for memop in &mut self.trace.memops {
            memop.process = main;
        }
        for range in &mut self.trace.ranges {
            if range.kind == RangeKind::GpuAnnotation {
                range.process = main;
            }
        }
        main
    }

    /// Creates one device per GPU ordinal that has events, in ordinal order, and points the GPU
    /// events at it.
    fn resolve_devices(&mut self, main_process: ProcessIdx) {
        let mut ordinals = BTreeSet::new();
        ordinals.extend(self.trace.kernels.iter().map(|k| k.device.0));
        ordinals.extend(self.trace.memops.iter().map(|m| m.device.0));
        ordinals.extend(self.trace.ranges.iter().filter_map(|r| r.device.map(|d| d.0)));
        ordinals.extend(self.memory.iter().filter_map(|(ordinal, _)| *ordinal));
        let mut index_of = HashMap::new();
        for ordinal in ordinals {
            let properties = self.device_properties.get(&ordinal).cloned().unwrap_or_default();
            let index = self.trace.add_device(Device {
                ordinal,
                process: Some(main_process),
                name: properties.name,
                sm_count: properties.sm_count,
                memory_bytes: properties.memory_bytes,
                ..Device::default()
            });
            index_of.insert(ordinal, index);
        }
        for kernel in &mut self.trace.kernels {
            kernel.device = index_of[&kernel.device.0];
        }
        for memop in &mut self.trace.memops {
            memop.device = index_of[&memop.device.0];
        }
        for range in &mut self.trace.ranges {
            if let Some(device) = range.device {
                range.device = Some(index_of[&device.0]);
            }
        }
        for (ordinal, mut sample) in std::mem::take(&mut self.memory) {
            sample.device = ordinal.map(|o| index_of[&o]);
            self.trace.framework_memory.push(sample);
        }
    }

    /// Gives GPU events without `args.correlation` the id of the `ac2g` flow that ends on them.
    fn link_by_flows(&mut self) {
        if self.uncorrelated.is_empty() {
            return;
        }
        let flow_ids: HashMap<(i64, i64, i64), u64> =
            self.flow_ends.iter().map(|&(pid, tid, ts, id)| ((pid, tid, ts), id)).collect();
        let (mut linked, mut unlinked) = (0u64, 0u64);
        for event in std::mem::take(&mut self.uncorrelated) {
            let correlation = flow_ids.get(&(event.pid, event.tid, event.ts_ns)).and_then(|&id| u32::try_from(id).ok());
            let Some(correlation) = correlation.filter(|&c| c != 0) else {
                unlinked += 1;
                continue;
            };
            linked += 1;
            if event.is_kernel {
                self.trace.kernels[event.index].correlation_id = correlation;
            } else {
                self.trace.memops[event.index].correlation_id = correlation;
            }
        }
        self.trace.warn_n("GPU event without args.correlation, linked to its launch by its ac2g flow", linked);
        self.trace.warn_n("GPU event without a correlation id (not linked to its launch)", unlinked);
    }

    /// Gives every NCCL kernel a collective: from the `nccl:<op>` annotation or
    /// `record_param_comms` op around its launch when there is one, else from its name alone.
    fn attach_collectives(&mut self, main_process: ProcessIdx) {
        let pending = std::mem::take(&mut self.nccl_kernels_without_args);
        if pending.is_empty() {
            return;
        }
        let wanted: HashSet<u32> = pending.iter().map(|&k| self.trace.kernels[k].correlation_id).collect();
        // correlation → (thread, launch time) of the launching call in the main process.
        let main_pid = self.trace.processes[main_process.0 as usize].pid;
        let mut launches = HashMap::new();
        for call in &self.trace.api_calls {
            if call.process == main_process && call.correlation_id != 0 && wanted.contains(&call.correlation_id) {
                launches.insert(call.correlation_id, (call.tid, call.start_ns));
            }
        }
        let pid_of_main = self
            .cpu_processes
            .iter()
            .find(|&(_, &index)| index == main_process)
            .map_or(i64::from(main_pid), |(&pid, _)| pid);
        self.comm_ranges.sort_by_key(|r| (r.pid, r.tid, r.start_ns));
        let longest_ns = self.comm_ranges.iter().map(|r| r.end_ns - r.start_ns).max().unwrap_or(0);
        for kernel_index in pending {
            let kernel = self.trace.kernels[kernel_index];
            let around = launches
                .get(&kernel.correlation_id)
                .filter(|_| kernel.correlation_id != 0)
                .and_then(|&(tid, launch_ns)| self.comm_range_around(pid_of_main, tid, launch_ns, longest_ns));
            let name_op = CollectiveOp::parse(kernel_base_name(self.trace.names.get(kernel.name)));
            let mut info =
                around.map(|r| self.comm_infos[self.comm_ranges[r].info as usize].clone()).unwrap_or_default();
            if around.is_none() || info.op == CollectiveOp::Other {
                info.op = name_op;
            }
            let collective = self.add_collective(info);
            self.trace.kernels[kernel_index].collective = Some(collective);
        }
    }

    /// The innermost collective range on (pid, tid) that contains `at_ns`, preferring one that
    /// knows the message size.
    fn comm_range_around(&self, pid: i64, tid: u32, at_ns: i64, longest_ns: i64) -> Option<usize> {
        let end = self.comm_ranges.partition_point(|r| (r.pid, r.tid, r.start_ns) <= (pid, tid, at_ns));
        let mut innermost = None;
        for index in (0..end).rev() {
            let range = &self.comm_ranges[index];
            if range.pid != pid || range.tid != tid || range.start_ns < at_ns - longest_ns {
                break;
            }
            if range.end_ns >= at_ns {
                if self.comm_infos[range.info as usize].has_sizes() {
                    return Some(index);
                }
                innermost.get_or_insert(index);
            }
        }
        innermost
    }
}

/// The stream of a GPU event: `args.stream`, else the `tid` Kineto files it under.
fn stream_of(args: &RawArgs, event: &RawEvent) -> u32 {
    u32_of(args.stream).or_else(|| u32_of(event.tid)).unwrap_or(0)
}

/// A kernel name without its parameter list, for matching the operation in it.
fn kernel_base_name(name: &str) -> &str {
    name.split('(').next().unwrap_or(name)
}

/// The copy direction named in `Memcpy HtoD (Pageable -> Device)` or in AMD's `kind` arg.
fn copy_kind_of(text: &str) -> Option<CopyKind> {
    [
        ("HtoD", CopyKind::HtoD),
        ("DtoH", CopyKind::DtoH),
        ("DtoD", CopyKind::DtoD),
        ("HtoH", CopyKind::HtoH),
        ("PtoP", CopyKind::PtoP),
    ]
    .into_iter()
    .find(|(label, _)| text.contains(label))
    .map(|(_, kind)| kind)
}

/// The memory kinds named in `Memcpy HtoD (Pageable -> Device)`: source and destination, each `None` when absent
/// or not one of the kinds Kineto writes (AMD's `Host` says nothing of pinning).
fn memory_kinds_of(name: &str) -> (Option<MemoryKind>, Option<MemoryKind>) {
    let Some(inner) = name.rsplit_once('(').and_then(|(_, rest)| rest.strip_suffix(')')) else { return (None, None) };
    let Some((src, dst)) = inner.split_once(" -> ") else { return (None, None) };
    (memory_kind_named(src.trim()), memory_kind_named(dst.trim()))
}

fn memory_kind_named(label: &str) -> Option<MemoryKind> {
    match label {
        "Pageable" => Some(MemoryKind::Pageable),
        "Pinned" => Some(MemoryKind::Pinned),
        "Device" => Some(MemoryKind::Device),
        "Array" => Some(MemoryKind::Array),
        "Managed" => Some(MemoryKind::Managed),
        "Device Static" => Some(MemoryKind::DeviceStatic),
        "Managed Static" => Some(MemoryKind::ManagedStatic),
        "Unknown" => Some(MemoryKind::Unknown),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_kinds_come_from_the_copy_name() {
        let kinds = memory_kinds_of;
        assert_eq!(kinds("Memcpy HtoD (Pageable -> Device)"), (Some(MemoryKind::Pageable), Some(MemoryKind::Device)));
        assert_eq!(kinds("Memcpy DtoH (Device -> Pinned)"), (Some(MemoryKind::Device), Some(MemoryKind::Pinned)));
        assert_eq!(kinds("Memcpy HtoD (Host -> Device)"), (None, Some(MemoryKind::Device)));
        assert_eq!(kinds("Memcpy HtoD"), (None, None));
        assert_eq!(kinds("Memcpy DtoD (Device Static -> Managed)").1, Some(MemoryKind::Managed));
    }

    /// Flow ends that follow the event they end on, which already has their id, are not stored; the
    /// others still link GPU events without `args.correlation`, whichever side comes first.
    #[test]
    fn only_flow_ends_that_can_link_something_are_kept() {
        let text = r#"{"traceEvents": [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 1, "dur": 1,
             "args": {"correlation": 5}},
            {"ph": "f", "cat": "ac2g", "id": 5, "pid": 9, "tid": 9, "ts": 1, "bp": "e"},
            {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 3, "dur": 1, "args": {"correlation": 5}},
            {"ph": "f", "cat": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 3, "bp": "e"},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 4, "dur": 1,
             "args": {"correlation": 6}},
            {"ph": "f", "cat": "ac2g", "id": 6, "pid": 0, "tid": 7, "ts": 6, "bp": "e"},
            {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 6, "dur": 1, "args": {}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 9, "tid": 9, "ts": 7, "dur": 1,
             "args": {"correlation": 8}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 9, "dur": 1,
             "args": {"bytes": 4}},
            {"ph": "f", "cat": "ac2g", "id": 8, "pid": 0, "tid": 7, "ts": 9, "bp": "e"}
        ]}"#;
        let mut builder = Builder::new("x");
        let progress = super::super::scan::Document::new().scan(text, true, &mut builder).unwrap();
        assert_eq!(progress, super::super::scan::Progress::Done);
        assert_eq!(builder.flow_ends, vec![(0, 7, 6_000, 6), (0, 7, 9_000, 8)]);
        let trace = builder.finish();
        let correlations: Vec<u32> = trace.kernels.iter().map(|k| k.correlation_id).collect();
        assert_eq!(correlations, vec![5, 6]);
        assert_eq!(trace.memops[0].correlation_id, 8);
        assert!(trace.kernels.iter().all(|k| k.launch.is_some()));
        assert!(trace.memops[0].launch.is_some());
    }

    #[test]
    fn copy_kinds_come_from_the_name() {
        assert_eq!(copy_kind_of("Memcpy HtoD (Pageable -> Device)"), Some(CopyKind::HtoD));
        assert_eq!(copy_kind_of("Memcpy DtoD (Device -> Device)"), Some(CopyKind::DtoD));
        assert_eq!(copy_kind_of("Memcpy PtoP (Device -> Device)"), Some(CopyKind::PtoP));
        assert_eq!(copy_kind_of("Memcpy"), None);
    }
}
