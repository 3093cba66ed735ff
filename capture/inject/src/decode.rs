//! Turning CUPTI activity records into [`SpoolRecord`]s.
//!
//! [`Decoder::decode`] is the one place that reads CUPTI's structs. It reads each record
//! through the struct of the CUPTI major that wrote it ([`Layout`], chosen from
//! `cuptiGetVersion` at run time), copies every string the record points to, and replaces
//! pointers by ids of [`SpoolRecord::Name`] records it emits the first time it meets a string.
//! The background thread calls it on buffers CUPTI completed; the tests call it on fabricated
//! buffers laid out with the same structs.

use std::collections::HashMap;
use std::ffi::{CStr, c_char};

use shardscope_cupti_sys::{v12, v13};

use shardscope_spool::config::TraceKinds;
use shardscope_spool::cupti::{
    ApiRecord, DeviceRecord, GraphTraceRecord, KernelRecord, MarkerRecord, MemcpyRecord, MemoryPoolRecord,
    MemoryRecord, MemsetRecord, SpoolRecord, SyncRecord,
};

/// Builds a [`SpoolRecord::Kernel`] from either major's kernel struct (same field names).
macro_rules! kernel_record {
    ($k:expr, $name_id:expr, $cache_config:expr) => {
        SpoolRecord::Kernel(KernelRecord {
            start_ns: $k.start,
            end_ns: $k.end,
            device_id: $k.deviceId,
            context_id: $k.contextId,
            stream_id: $k.streamId,
            correlation_id: $k.correlationId,
            grid: [$k.gridX, $k.gridY, $k.gridZ],
            block: [$k.blockX, $k.blockY, $k.blockZ],
            registers_per_thread: $k.registersPerThread,
            static_shared_bytes: $k.staticSharedMemory,
            dynamic_shared_bytes: $k.dynamicSharedMemory,
            local_bytes_per_thread: $k.localMemoryPerThread,
            local_bytes_total: $k.localMemoryTotal,
            shared_executed_bytes: $k.sharedMemoryExecuted,
            grid_id: $k.gridId,
            launch_type: $k.launchType,
            cache_config: $cache_config,
            graph_node_id: $k.graphNodeId,
            name_id: $name_id,
        })
    };
}

/// Kinds on for the whole life of the process, windows or not: one record per GPU, nothing per event.
pub const ALWAYS_ON_KINDS: [v13::CUpti_ActivityKind; 1] = [v13::CUPTI_ACTIVITY_KIND_DEVICE];

/// `CUpti_ActivityGraphTrace2` (CUDA 12.x and 13.x; `CUpti_ActivityGraphTrace` before it has the same
/// layout): one CUDA graph launch recorded whole. Not in the generated bindings, so declared here.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct ActivityGraphTrace2 {
    /// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`.
    pub kind: v13::CUpti_ActivityKind,
    /// Correlation id of the launching API call.
    pub correlationId: u32,
    /// GPU start of the first node, ns.
    pub start: u64,
    /// GPU end of the last node, ns.
    pub end: u64,
    /// Device of the first node.
    pub deviceId: u32,
    /// The graph's id.
    pub graphId: u32,
    /// Context of the first node.
    pub contextId: u32,
    /// Stream of the launch.
    pub streamId: u32,
    /// Reserved for CUPTI.
    pub reserved: *mut std::ffi::c_void,
}

/// `CUpti_ActivityMemory4` (CUDA 12.6+ and 13.x, kind `MEMORY2`): one allocation or release. Not in the
/// generated bindings, so declared here with the header's field order; the 8-byte fields after the two pads sit
/// where the header's 64-bit layout puts them (the size and offsets are checked below).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct ActivityMemory4 {
    /// `CUPTI_ACTIVITY_KIND_MEMORY2`.
    pub kind: v13::CUpti_ActivityKind,
    /// 1 allocation, 2 release.
    pub memoryOperationType: u32,
    /// `CUpti_ActivityMemoryKind`.
    pub memoryKind: u32,
    /// Correlation id of the API call.
    pub correlationId: u32,
    /// Virtual address.
    pub address: u64,
    /// Bytes.
    pub bytes: u64,
    /// CPU time, ns.
    pub timestamp: u64,
    /// Program counter of the call.
    pub PC: u64,
    /// Process id.
    pub processId: u32,
    /// Device ordinal.
    pub deviceId: u32,
    /// Context id.
    pub contextId: u32,
    /// Stream id.
    pub streamId: u32,
    /// Variable name, when CUPTI has one.
    pub name: *const c_char,
    /// Stream-ordered operation.
    pub isAsync: u32,
    /// Padding of the 64-bit layout.
    pub pad1: u32,
    /// `CUpti_ActivityMemoryPoolType`.
    pub memoryPoolType: u32,
    /// Padding of the 64-bit layout.
    pub pad2: u32,
    /// Pool base address.
    pub poolAddress: u64,
    /// Pool release threshold.
    pub poolReleaseThreshold: u64,
    /// Local pool size, or imported pool's process id.
    pub poolSizeOrProcessId: u64,
    /// Pool bytes in use.
    pub poolUtilizedSize: u64,
    /// Source of the allocation (CUDA 12.6+), unused here.
    pub source: *const c_char,
}

/// `CUpti_ActivityMemoryPool2` (CUDA 12.x; `MemoryPool3` of CUDA 13 appends `isManagedPool` and padding): one
/// stream-ordered pool made, destroyed or trimmed. Declared here for the same reason as [`ActivityMemory4`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct ActivityMemoryPool2 {
    /// `CUPTI_ACTIVITY_KIND_MEMORY_POOL`.
    pub kind: v13::CUpti_ActivityKind,
    /// 1 created, 2 destroyed, 3 trimmed.
    pub memoryPoolOperationType: u32,
    /// 1 local, 2 imported.
    pub memoryPoolType: u32,
    /// Correlation id of the API call.
    pub correlationId: u32,
    /// Process id.
    pub processId: u32,
    /// Device ordinal.
    pub deviceId: u32,
    /// Bytes a trim keeps.
    pub minBytesToKeep: u64,
    /// Pool base address.
    pub address: u64,
    /// Pool size.
    pub size: u64,
    /// Release threshold.
    pub releaseThreshold: u64,
    /// CPU time, ns.
    pub timestamp: u64,
    /// Bytes in use.
    pub utilizedSize: u64,
}

/// Size of CUDA 13's `CUpti_ActivityMemoryPool3`: [`ActivityMemoryPool2`] plus `isManagedPool` and 7 pad bytes.
const MEMORY_POOL3_BYTES: usize = std::mem::size_of::<ActivityMemoryPool2>() + 8;

// The header's 64-bit sizes and offsets (cupti_activity.h of CUDA 13.0).
const _: () = assert!(std::mem::size_of::<ActivityMemory4>() == 128);
const _: () = assert!(std::mem::offset_of!(ActivityMemory4, memoryPoolType) == 80);
const _: () = assert!(std::mem::offset_of!(ActivityMemory4, poolUtilizedSize) == 112);
const _: () = assert!(std::mem::size_of::<ActivityMemoryPool2>() == 72);

/// The activity kinds to enable for `kinds`, beside the decoders that read them, so that a new kind is
/// switched on and read in this one file. The runtime and driver API kinds are not here: the injection
/// library selects those one callback id at a time (`live.rs`).
pub fn activity_kinds(kinds: &TraceKinds) -> Vec<v13::CUpti_ActivityKind> {
    let mut wanted = vec![v13::CUPTI_ACTIVITY_KIND_DEVICE];
    if kinds.kernel {
        // Never KERNEL: it serialises kernels and changes what we measure.
        wanted.push(v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if kinds.memcpy {
        wanted.push(v13::CUPTI_ACTIVITY_KIND_MEMCPY);
    }
    if kinds.memset {
        wanted.push(v13::CUPTI_ACTIVITY_KIND_MEMSET);
    }
    if kinds.nvtx {
        wanted.push(v13::CUPTI_ACTIVITY_KIND_MARKER);
    }
    if kinds.sync {
        wanted.push(v13::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    }
    if kinds.memory {
        wanted.push(v13::CUPTI_ACTIVITY_KIND_MEMORY2);
        wanted.push(v13::CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    }
    wanted
}

/// Which CUPTI major's struct layouts a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// CUDA 12.x: `CUpti_ActivityKernel9`, `Memcpy6`, `Memset4` with no `isDeviceLaunched`.
    Cuda12,
    /// CUDA 13.x: `CUpti_ActivityKernel10`.
    Cuda13,
}

impl Layout {
    /// The layout written by a CUPTI that reports `version` from `cuptiGetVersion`.
    ///
    /// CUDA 12.x CUPTI reports small API numbers (18 for 12.0 … 28 for 12.9); CUDA 13 switched
    /// to `major * 10000 + minor * 100 + patch` style numbers (130001 for 13.0).
    pub fn for_cupti_version(version: u32) -> Layout {
        if version >= 130_000 { Layout::Cuda13 } else { Layout::Cuda12 }
    }

    /// Size in bytes of one record of `kind` in this layout, or `None` for kinds the decoder
    /// does not read. CUPTI places records at 8-byte aligned offsets.
    pub fn record_size(self, kind: u32) -> Option<usize> {
        use std::mem::size_of;
        Some(match kind {
            v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | v13::CUPTI_ACTIVITY_KIND_KERNEL => match self {
                Layout::Cuda12 => size_of::<v12::CUpti_ActivityKernel9>(),
                Layout::Cuda13 => size_of::<v13::CUpti_ActivityKernel10>(),
            },
            v13::CUPTI_ACTIVITY_KIND_MEMCPY => size_of::<v13::CUpti_ActivityMemcpy6>(),
            v13::CUPTI_ACTIVITY_KIND_MEMSET => size_of::<v13::CUpti_ActivityMemset4>(),
            v13::CUPTI_ACTIVITY_KIND_RUNTIME | v13::CUPTI_ACTIVITY_KIND_DRIVER => size_of::<v13::CUpti_ActivityAPI>(),
            v13::CUPTI_ACTIVITY_KIND_MARKER => size_of::<v13::CUpti_ActivityMarker2>(),
            v13::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => size_of::<v13::CUpti_ActivitySynchronization2>(),
            v13::CUPTI_ACTIVITY_KIND_DEVICE => size_of::<v13::CUpti_ActivityDevice5>(),
            v13::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => size_of::<ActivityGraphTrace2>(),
            v13::CUPTI_ACTIVITY_KIND_MEMORY2 => size_of::<ActivityMemory4>(),
            v13::CUPTI_ACTIVITY_KIND_MEMORY_POOL => match self {
                Layout::Cuda12 => size_of::<ActivityMemoryPool2>(),
                Layout::Cuda13 => MEMORY_POOL3_BYTES,
            },
            _ => return None,
        })
    }
}

/// Looks up a CUDA API function name: `(driver, cbid)` → name. The live library answers with
/// `cuptiGetCallbackName`; tests pass a table.
pub type CallbackNamer = Box<dyn FnMut(bool, u32) -> Option<String> + Send>;

/// Decodes CUPTI records of one process, interning the strings they point to.
pub struct Decoder {
    layout: Layout,
    callback_namer: CallbackNamer,
    ids_by_text: HashMap<String, u32>,
    // CUPTI documents that a kernel's name pointer is shared by all records of that kernel and
    // stays valid, so the pointer itself is a cheap key that saves reading the string each time.
    ids_by_kernel_name_ptr: HashMap<usize, u32>,
    ids_by_callback: HashMap<(bool, u32), u32>,
    /// Records of kinds the decoder does not read, or with unusable fields.
    pub undecoded: u64,
    /// Driver callback id whose records come from the library's own cost measurement at exit; they
    /// are counted in [`Self::calibration_records`] and left out.
    pub calibration_driver_cbid: Option<u32>,
    /// Records left out because of [`Self::calibration_driver_cbid`].
    pub calibration_records: u32,
}

impl Decoder {
    /// A decoder for records written in `layout`.
    pub fn new(layout: Layout, callback_namer: CallbackNamer) -> Decoder {
        Decoder {
            layout,
            callback_namer,
            ids_by_text: HashMap::new(),
            ids_by_kernel_name_ptr: HashMap::new(),
            ids_by_callback: HashMap::new(),
            undecoded: 0,
            calibration_driver_cbid: None,
            calibration_records: 0,
        }
    }

    /// The layout this decoder reads.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn intern(&mut self, text: &str, out: &mut Vec<SpoolRecord>) -> u32 {
        if let Some(&id) = self.ids_by_text.get(text) {
            return id;
        }
        let id = self.ids_by_text.len() as u32 + 1;
        self.ids_by_text.insert(text.to_owned(), id);
        out.push(SpoolRecord::Name { id, text: text.to_owned() });
        id
    }

    /// Interns the C string at `ptr`; 0 for a null pointer.
    ///
    /// # Safety
    /// `ptr` is null or points to a NUL-terminated string.
    unsafe fn intern_c(&mut self, ptr: *const c_char, out: &mut Vec<SpoolRecord>) -> u32 {
        if ptr.is_null() {
            return 0;
        }
        // SAFETY: the caller promises a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(ptr) }.to_string_lossy();
        self.intern(&text, out)
    }

    /// Decodes the record at `record`, appending it (and any new names) to `out`.
    ///
    /// # Safety
    /// `record` points to a complete, readable CUPTI activity record written in this decoder's
    /// layout, and every string pointer inside it is null or valid for the duration of the call.
    pub unsafe fn decode(&mut self, record: *const v13::CUpti_Activity, out: &mut Vec<SpoolRecord>) {
        // SAFETY: the caller guarantees a whole record of the kind stated in its first field (this
        // holds for every read below); `read_unaligned` makes no alignment assumption.
        let kind = unsafe { std::ptr::read_unaligned(record) }.kind;
        match kind {
            v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | v13::CUPTI_ACTIVITY_KIND_KERNEL => match self.layout {
                Layout::Cuda12 => {
                    // SAFETY: the record is a kernel record (its kind says so) of the loaded CUPTI's layout.
                    let k = unsafe { std::ptr::read_unaligned(record as *const v12::CUpti_ActivityKernel9) };
                    // SAFETY: `k.name` is CUPTI's NUL-terminated name, valid while the buffer is.
                    let name_id = unsafe { self.kernel_name_id(k.name, out) };
                    // SAFETY: the union's both views are one byte; `both` is always initialised.
                    let cache_config = unsafe { k.cacheConfig.both };
                    out.push(kernel_record!(k, name_id, cache_config));
                }
                Layout::Cuda13 => {
                    // SAFETY: as for the CUDA 12 layout above.
                    let k = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityKernel10) };
                    // SAFETY: as above.
                    let name_id = unsafe { self.kernel_name_id(k.name, out) };
                    // SAFETY: as above.
                    let cache_config = unsafe { k.cacheConfig.both };
                    out.push(kernel_record!(k, name_id, cache_config));
                }
            },
            v13::CUPTI_ACTIVITY_KIND_MEMCPY => {
                // Memcpy6 is the same up to `channelType` in both majors; 13 only names a pad byte.
                // SAFETY: the record is a memcpy record (its kind says so).
                let m = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityMemcpy6) };
                out.push(SpoolRecord::Memcpy(MemcpyRecord {
                    start_ns: m.start,
                    end_ns: m.end,
                    bytes: m.bytes,
                    copy_kind: m.copyKind,
                    src_kind: m.srcKind,
                    dst_kind: m.dstKind,
                    device_id: m.deviceId,
                    context_id: m.contextId,
                    stream_id: m.streamId,
                    correlation_id: m.correlationId,
                    graph_node_id: m.graphNodeId,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_MEMSET => {
                // SAFETY: the record is a memset record (its kind says so).
                let m = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityMemset4) };
                out.push(SpoolRecord::Memset(MemsetRecord {
                    start_ns: m.start,
                    end_ns: m.end,
                    bytes: m.bytes,
                    value: m.value,
                    memory_kind: m.memoryKind,
                    device_id: m.deviceId,
                    context_id: m.contextId,
                    stream_id: m.streamId,
                    correlation_id: m.correlationId,
                    graph_node_id: m.graphNodeId,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_RUNTIME | v13::CUPTI_ACTIVITY_KIND_DRIVER => {
                // SAFETY: the record is an API record (its kind says so).
                let a = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityAPI) };
                let driver = kind == v13::CUPTI_ACTIVITY_KIND_DRIVER;
                if driver && self.calibration_driver_cbid == Some(a.cbid) {
                    self.calibration_records += 1;
                    return;
                }
                let name_id = self.callback_name_id(driver, a.cbid, out);
                out.push(SpoolRecord::Api(ApiRecord {
                    driver,
                    cbid: a.cbid,
                    start_ns: a.start,
                    end_ns: a.end,
                    pid: a.processId,
                    tid: a.threadId,
                    correlation_id: a.correlationId,
                    return_value: a.returnValue,
                    name_id,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_MARKER => {
                // SAFETY: the record is a marker record (its kind says so).
                let m = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityMarker2) };
                // SAFETY: markers name a thread (process and thread id view of the union).
                let thread = unsafe { m.objectId.pt };
                // SAFETY: `m.name` is null or CUPTI's NUL-terminated message, valid while the buffer is.
                let name_id = unsafe { self.intern_c(m.name, out) };
                // SAFETY: `m.domain` is null or CUPTI's NUL-terminated domain name, valid while the buffer is.
                let domain_id = unsafe { self.intern_c(m.domain, out) };
                out.push(SpoolRecord::Marker(MarkerRecord {
                    flags: m.flags,
                    timestamp_ns: m.timestamp,
                    id: m.id,
                    pid: thread.processId,
                    tid: thread.threadId,
                    name_id,
                    domain_id,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => {
                // SAFETY: the record is a synchronisation record (its kind says so).
                let s = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivitySynchronization2) };
                out.push(SpoolRecord::Sync(SyncRecord {
                    sync_type: s.type_,
                    start_ns: s.start,
                    end_ns: s.end,
                    correlation_id: s.correlationId,
                    context_id: s.contextId,
                    stream_id: s.streamId,
                    event_id: s.cudaEventId,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_DEVICE => {
                // SAFETY: the record is a device record (its kind says so).
                let d = unsafe { std::ptr::read_unaligned(record as *const v13::CUpti_ActivityDevice5) };
                let name = if d.name.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null device names are NUL-terminated.
                    unsafe { CStr::from_ptr(d.name) }.to_string_lossy().into_owned()
                };
                out.push(SpoolRecord::Device(DeviceRecord {
                    device_id: d.id,
                    name,
                    uuid: d.uuid.bytes.map(|b| b as u8),
                    memory_bytes: d.globalMemorySize,
                    memory_bandwidth_kib_per_s: d.globalMemoryBandwidth,
                    clock_rate_khz: d.coreClockRate,
                    sm_count: d.numMultiprocessors,
                    cc_major: d.computeCapabilityMajor,
                    cc_minor: d.computeCapabilityMinor,
                    l2_cache_bytes: d.l2CacheSize,
                    copy_engines: d.numMemcpyEngines,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => {
                // SAFETY: the record is a graph trace record (its kind says so).
                let g = unsafe { std::ptr::read_unaligned(record as *const ActivityGraphTrace2) };
                out.push(SpoolRecord::GraphTrace(GraphTraceRecord {
                    start_ns: g.start,
                    end_ns: g.end,
                    device_id: g.deviceId,
                    context_id: g.contextId,
                    stream_id: g.streamId,
                    correlation_id: g.correlationId,
                    graph_id: g.graphId,
                }));
            }
            v13::CUPTI_ACTIVITY_KIND_MEMORY2 => {
                // SAFETY: the record is a memory record (its kind says so).
                let m = unsafe { std::ptr::read_unaligned(record as *const ActivityMemory4) };
                out.push(memory_record(&m));
            }
            v13::CUPTI_ACTIVITY_KIND_MEMORY_POOL => {
                // Both majors share the `MemoryPool2` prefix; CUDA 13 only appends fields.
                // SAFETY: the record is a memory pool record (its kind says so).
                let p = unsafe { std::ptr::read_unaligned(record as *const ActivityMemoryPool2) };
                out.push(SpoolRecord::MemoryPool(MemoryPoolRecord {
                    timestamp_ns: p.timestamp,
                    operation: small(p.memoryPoolOperationType),
                    pool_type: small(p.memoryPoolType),
                    device_id: p.deviceId,
                    correlation_id: p.correlationId,
                    address: p.address,
                    min_bytes_to_keep: p.minBytesToKeep,
                    size: p.size,
                    release_threshold: p.releaseThreshold,
                    utilized_bytes: p.utilizedSize,
                }));
            }
            _ => self.undecoded += 1,
        }
    }

    /// # Safety
    /// `ptr` is null or a kernel name pointer from a CUPTI kernel record.
    unsafe fn kernel_name_id(&mut self, ptr: *const c_char, out: &mut Vec<SpoolRecord>) -> u32 {
        if let Some(&id) = self.ids_by_kernel_name_ptr.get(&(ptr as usize)) {
            return id;
        }
        // SAFETY: forwarded from the caller.
        let id = unsafe { self.intern_c(ptr, out) };
        self.ids_by_kernel_name_ptr.insert(ptr as usize, id);
        id
    }

    fn callback_name_id(&mut self, driver: bool, cbid: u32, out: &mut Vec<SpoolRecord>) -> u32 {
        if let Some(&id) = self.ids_by_callback.get(&(driver, cbid)) {
            return id;
        }
        let id = match (self.callback_namer)(driver, cbid) {
            Some(name) => self.intern(&name, out),
            None => 0,
        };
        self.ids_by_callback.insert((driver, cbid), id);
        id
    }
}

/// CUPTI enums stored in a byte; a value beyond one (none is defined) becomes 255 so it reads as unknown.
fn small(value: u32) -> u8 {
    u8::try_from(value).unwrap_or(u8::MAX)
}

/// The spool record of one CUPTI memory record.
fn memory_record(m: &ActivityMemory4) -> SpoolRecord {
    SpoolRecord::Memory(MemoryRecord {
        timestamp_ns: m.timestamp,
        operation: small(m.memoryOperationType),
        memory_kind: small(m.memoryKind),
        address: m.address,
        bytes: m.bytes,
        pc: m.PC,
        device_id: m.deviceId,
        context_id: m.contextId,
        stream_id: m.streamId,
        correlation_id: m.correlationId,
        is_async: m.isAsync != 0,
        pool_type: small(m.memoryPoolType),
        pool_address: m.poolAddress,
        pool_release_threshold: m.poolReleaseThreshold,
        pool_size_or_pid: m.poolSizeOrProcessId,
        pool_utilized_bytes: m.poolUtilizedSize,
    })
}

/// Walks a buffer of records by their sizes in `layout`, calling `visit` on each, the way
/// `cuptiActivityGetNextRecord` does for the kinds shardscope reads. Stops at the first
/// unknown kind (its size is unknown) and returns the number of records visited.
///
/// The live library uses CUPTI's own iterator; this one serves buffers built without CUPTI
/// (the tests) and documents the packing the tests rely on.
pub fn walk_records(layout: Layout, buffer: &[u8], mut visit: impl FnMut(*const v13::CUpti_Activity)) -> usize {
    let mut at = 0;
    let mut count = 0;
    while at + 4 <= buffer.len() {
        let kind = u32::from_le_bytes(buffer[at..at + 4].try_into().unwrap());
        let Some(size) = layout.record_size(kind) else { break };
        if at + size > buffer.len() {
            break;
        }
        visit(buffer[at..].as_ptr() as *const v13::CUpti_Activity);
        count += 1;
        at += size.next_multiple_of(8);
    }
    count
}
