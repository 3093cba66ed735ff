//! Who made each CUDA-level device allocation: the framework's caching allocator (a segment it holds from CUDA,
//! what `torch.cuda.memory_reserved()` counts), a library allocating for itself (cuBLAS, NCCL, cuDNN workspaces), or
//! nobody the trace can name.
//!
//! A memory record carries the correlation id of the CUDA call that made it; the call (when the trace holds it)
//! gives the API name and the calling thread, and the calls just before it on that thread say who called. The
//! rules, in the order they are tried (the table [`RULES`] and `docs/memory.md` say the same):
//!
//! 1. `framework_segment`, "PyTorch caching allocator": the call right before the allocating call on the same
//!    thread is `cudaStreamIsCapturing`. PyTorch's allocator asks whether the stream is being captured into a graph
//!    before every `cudaMalloc` of a new segment, and nothing else does that.
//! 2. `library`, named by a range: the allocating call lies inside a range of its thread (or an NVTX start/end
//!    range of its process) whose domain or message starts with a library's name (`cublas`, `cudnn`, `nccl`, …,
//!    case-insensitive), as library API tracing and NCCL's own NVTX ranges record them.
//! 3. `library`, "cuBLAS (handle set-up)": a `cudaMalloc` on a thread that called `cudaOccupancyMaxActiveClusters`
//!    since its last kernel launch: cuBLAS(Lt) sizes its cluster kernels that way while it sets up a handle, and
//!    allocates its own default workspace there (the allocations PyTorch's `max_memory_reserved()` leaves out).
//! 4. `unknown` otherwise, still with the API name and thread when the trace holds the call; "no API record" when
//!    it does not (a capture made before the allocating calls were recorded, or a window that missed them).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use shardscope_model::{ApiCall, MemoryEvent, MemoryOperation, ProcessIdx, Range, RangeKind, Trace};

/// What kind of owner an allocation has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginClass {
    /// A segment of the framework's caching allocator: part of its reserved bytes.
    FrameworkSegment,
    /// A library's own allocation (workspace, buffers), outside the framework's allocator.
    Library,
    /// Nothing in the trace names the owner.
    Unknown,
}

/// Who made one allocation, and how the trace says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The class.
    pub class: OriginClass,
    /// The owner's name ("PyTorch caching allocator", "cuBLAS", …); empty when unknown.
    pub owner: String,
    /// The rule that decided ([`RULES`]).
    pub rule: &'static str,
    /// The allocating API call's name, when the trace holds the call.
    pub api: Option<String>,
    /// The calling OS thread, when the trace holds the call.
    pub tid: Option<u32>,
}

/// The rules as `(name, class, what it matches)`, in the order they are tried.
pub const RULES: [(&str, OriginClass, &str); 4] = [
    (
        RULE_ALLOCATOR,
        OriginClass::FrameworkSegment,
        "the call just before it on its thread is cudaStreamIsCapturing (PyTorch's caching allocator)",
    ),
    (RULE_RANGE, OriginClass::Library, "inside a range whose domain or message starts with a library's name"),
    (
        RULE_CUBLAS_SETUP,
        OriginClass::Library,
        "a cudaMalloc after cudaOccupancyMaxActiveClusters on its thread since its last launch (cuBLAS handle set-up)",
    ),
    (RULE_NONE, OriginClass::Unknown, "none of the above"),
];

const RULE_ALLOCATOR: &str = "stream_capture_check";
const RULE_RANGE: &str = "library_range";
const RULE_CUBLAS_SETUP: &str = "cublas_handle_setup";
const RULE_NONE: &str = "none";

/// The framework allocator rule's owner.
pub const PYTORCH_ALLOCATOR: &str = "PyTorch caching allocator";

/// Library name prefixes (lower case) of rule 2 and the name they give; longer prefixes first.
const LIBRARIES: [(&str, &str); 10] = [
    ("cublaslt", "cuBLASLt"),
    ("cublas", "cuBLAS"),
    ("cudnn", "cuDNN"),
    ("nccl", "NCCL"),
    ("nvshmem", "NVSHMEM"),
    ("cufft", "cuFFT"),
    ("cusparse", "cuSPARSE"),
    ("cusolver", "cuSOLVER"),
    ("curand", "cuRAND"),
    ("cutensor", "cuTENSOR"),
];

/// Calls (and library ranges) looked at before an allocating call, at most: the rules need only the calls since the
/// thread's last launch, and a bound keeps a trace of millions of calls from being walked once per allocation.
const LOOK_BACK: usize = 4096;

/// The API calls of a trace arranged for looking up allocations: the allocating calls by (process, correlation
/// id), and the ranges that name a library.
pub struct Origins<'t> {
    trace: &'t Trace,
    by_correlation: HashMap<(ProcessIdx, u32), u32>,
    library_ranges: Vec<(&'t Range, &'static str)>,
}

impl<'t> Origins<'t> {
    /// Indexes the calls that made the device memory events of `trace` (its API calls sorted by start, as
    /// [`Trace::finish`] leaves them).
    pub fn new(trace: &'t Trace) -> Origins<'t> {
        let wanted: HashSet<(ProcessIdx, u32)> = trace
            .memory_events
            .iter()
            .filter(|e| e.operation == MemoryOperation::Allocation && e.correlation_id != 0)
            .map(|e| (e.process, e.correlation_id))
            .collect();
        let mut by_correlation = HashMap::with_capacity(wanted.len());
        for (index, call) in trace.api_calls.iter().enumerate() {
            let key = (call.process, call.correlation_id);
            if wanted.contains(&key) {
                by_correlation.entry(key).or_insert(index as u32);
            }
        }
        let library_ranges = trace
            .ranges
            .iter()
            .filter(|r| r.kind != RangeKind::GpuAnnotation)
            .filter_map(|r| {
                let named = library_named(trace.names.get(r.domain)).or(library_named(trace.names.get(r.name)));
                named.map(|library| (r, library))
            })
            .collect();
        Origins { trace, by_correlation, library_ranges }
    }

    /// Who made `event` (an allocation).
    pub fn of(&self, event: &MemoryEvent) -> Origin {
        let found = (event.correlation_id != 0)
            .then(|| self.by_correlation.get(&(event.process, event.correlation_id)))
            .flatten()
            .copied();
        let Some(index) = found else {
            return Origin { class: OriginClass::Unknown, owner: String::new(), rule: RULE_NONE, api: None, tid: None };
        };
        let call = &self.trace.api_calls[index as usize];
        let name = self.trace.names.get(call.name);
        let (class, owner, rule) = self.classify(index as usize, call, name);
        Origin { class, owner, rule, api: Some(name.to_string()), tid: Some(call.tid) }
    }

    /// Rules 1–4 for the allocating call `index`.
    fn classify(&self, index: usize, call: &ApiCall, name: &str) -> (OriginClass, String, &'static str) {
        let name_of = |c: &ApiCall| self.trace.names.get(c.name);
        // The thread's calls before this one, latest first.
        let mut before = self.trace.api_calls[..index]
            .iter()
            .rev()
            .take(LOOK_BACK)
            .filter(|c| c.process == call.process && c.tid == call.tid)
            .peekable();
        if before.peek().is_some_and(|c| name_of(c).starts_with("cudaStreamIsCapturing")) {
            return (OriginClass::FrameworkSegment, PYTORCH_ALLOCATOR.to_string(), RULE_ALLOCATOR);
        }
        if let Some(library) = self.library_range(call) {
            return (OriginClass::Library, library.to_string(), RULE_RANGE);
        }
        let mut since_launch = before.take_while(|c| !is_launch(name_of(c)));
        if name.starts_with("cudaMalloc") && since_launch.any(|c| is_cluster_query(name_of(c))) {
            return (OriginClass::Library, "cuBLAS (handle set-up)".to_string(), RULE_CUBLAS_SETUP);
        }
        (OriginClass::Unknown, String::new(), RULE_NONE)
    }

    /// The library named by the innermost library range holding `call`: its thread's push/pop ranges and
    /// annotations, its process's start/end ranges. Looks at the [`LOOK_BACK`] latest ranges that started before the
    /// call, which bounds the work where a library records a range per call (NCCL, one per collective).
    fn library_range(&self, call: &ApiCall) -> Option<&'static str> {
        let started = self.library_ranges.partition_point(|(r, _)| r.start_ns <= call.start_ns);
        // Sorted by start: the first holding range walking back is the innermost.
        self.library_ranges[..started]
            .iter()
            .rev()
            .take(LOOK_BACK)
            .find(|(r, _)| {
                r.process == call.process
                    && r.end_ns >= call.end_ns
                    && (r.kind == RangeKind::StartEnd || r.tid == call.tid)
            })
            .map(|&(_, library)| library)
    }
}

/// The library whose name `text` starts with (case-insensitive).
pub fn library_named(text: &str) -> Option<&'static str> {
    let lower = text.trim_start().to_ascii_lowercase();
    LIBRARIES.iter().find(|(prefix, _)| lower.starts_with(prefix)).map(|&(_, name)| name)
}

fn is_launch(name: &str) -> bool {
    name.starts_with("cudaLaunch") || name.starts_with("cuLaunch")
}

fn is_cluster_query(name: &str) -> bool {
    name.starts_with("cudaOccupancyMaxActiveClusters") || name.starts_with("cuOccupancyMaxActiveClusters")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_named_by_prefix() {
        assert_eq!(library_named("cublasLtMatmul"), Some("cuBLASLt"));
        assert_eq!(library_named("cuBLAS"), Some("cuBLAS"));
        assert_eq!(library_named("NCCL"), Some("NCCL"));
        assert_eq!(library_named("ncclAllReduce"), Some("NCCL"));
        assert_eq!(library_named("step3"), None);
        assert_eq!(library_named(""), None);
    }
}
