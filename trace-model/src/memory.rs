//! GPU memory over time, as two sources see it.
//!
//! - [`MemoryEvent`]: what the CUDA driver allocated and released (CUPTI `MEMORY2`, nsys
//!   `CUDA_GPU_MEMORY_USAGE_EVENTS`). Under PyTorch these are the caching allocator's segments (and the
//!   workspaces libraries such as cuBLAS or NCCL allocate themselves), not tensors: a freed tensor stays in
//!   the cache and is not released here.
//! - [`FrameworkMemorySample`]: what the framework's allocator counted (Kineto's `[memory]` events of
//!   `profile_memory=True`): one tensor allocation or free, with the allocator's totals after it.

use crate::{DeviceIdx, ProcessIdx};

/// Allocation or release.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MemoryOperation {
    /// Memory was allocated.
    #[default]
    Allocation,
    /// Memory was released.
    Release,
}

impl MemoryOperation {
    /// nsys' `ENUM_CUDA_DEV_MEM_EVENT_OPER` id (0 allocation, 1 deallocation).
    pub fn nsys_id(self) -> i64 {
        match self {
            MemoryOperation::Allocation => 0,
            MemoryOperation::Release => 1,
        }
    }

    /// From nsys' `ENUM_CUDA_DEV_MEM_EVENT_OPER` id.
    pub fn from_nsys(id: i64) -> Option<MemoryOperation> {
        match id {
            0 => Some(MemoryOperation::Allocation),
            1 => Some(MemoryOperation::Release),
            _ => None,
        }
    }

    /// From CUPTI's `CUpti_ActivityMemoryOperationType` (1 allocation, 2 release).
    pub fn from_cupti(value: u8) -> Option<MemoryOperation> {
        match value {
            1 => Some(MemoryOperation::Allocation),
            2 => Some(MemoryOperation::Release),
            _ => None,
        }
    }
}

/// Where the memory lives, as nsys' `ENUM_CUDA_MEM_KIND` numbers it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryKind {
    /// Pageable host memory.
    Pageable,
    /// Pinned host memory.
    Pinned,
    /// Device memory (`cudaMalloc`, `cudaMallocAsync`).
    Device,
    /// CUDA array.
    Array,
    /// Managed (unified) memory.
    Managed,
    /// Static device memory (`__device__` variables).
    DeviceStatic,
    /// Static managed memory.
    ManagedStatic,
    /// Not known.
    #[default]
    Unknown,
}

impl MemoryKind {
    const ALL: [MemoryKind; 8] = [
        MemoryKind::Pageable,
        MemoryKind::Pinned,
        MemoryKind::Device,
        MemoryKind::Array,
        MemoryKind::Managed,
        MemoryKind::DeviceStatic,
        MemoryKind::ManagedStatic,
        MemoryKind::Unknown,
    ];

    /// nsys' `ENUM_CUDA_MEM_KIND` id (0 pageable … 7 unknown).
    pub fn nsys_id(self) -> i64 {
        Self::ALL.iter().position(|k| *k == self).unwrap_or(7) as i64
    }

    /// From nsys' `ENUM_CUDA_MEM_KIND` id; anything else is [`MemoryKind::Unknown`].
    pub fn from_nsys(id: i64) -> MemoryKind {
        usize::try_from(id).ok().and_then(|i| Self::ALL.get(i).copied()).unwrap_or(MemoryKind::Unknown)
    }

    /// From CUPTI's `CUpti_ActivityMemoryKind` (0 unknown, 1 pageable … 7 managed static): nsys' ids shifted by one.
    pub fn from_cupti(value: u8) -> MemoryKind {
        match value {
            1..=7 => Self::ALL[usize::from(value) - 1],
            _ => MemoryKind::Unknown,
        }
    }

    /// Lower-case name for reports.
    pub fn label(self) -> &'static str {
        match self {
            MemoryKind::Pageable => "pageable",
            MemoryKind::Pinned => "pinned",
            MemoryKind::Device => "device",
            MemoryKind::Array => "array",
            MemoryKind::Managed => "managed",
            MemoryKind::DeviceStatic => "device static",
            MemoryKind::ManagedStatic => "managed static",
            MemoryKind::Unknown => "unknown",
        }
    }
}

/// The stream-ordered pool an allocation came from, with the pool's state after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPoolState {
    /// True for a pool imported from another process (then `size_bytes` is unknown).
    pub imported: bool,
    /// The pool's base address.
    pub address: u64,
    /// The pool's release threshold, bytes (local pools).
    pub release_threshold_bytes: Option<u64>,
    /// The pool's size, bytes (local pools).
    pub size_bytes: Option<u64>,
    /// Bytes of the pool in use (local pools).
    pub utilized_bytes: Option<u64>,
    /// The owning process of an imported pool.
    pub imported_pid: Option<u64>,
}

/// One allocation or release by the CUDA driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryEvent {
    /// CPU time of the call.
    pub time_ns: i64,
    /// Process that allocated.
    pub process: ProcessIdx,
    /// GPU of the allocation (for host kinds, the GPU of the context).
    pub device: DeviceIdx,
    /// CUDA context id (0 when unknown).
    pub context_id: u32,
    /// Allocation or release.
    pub operation: MemoryOperation,
    /// Where the memory lives.
    pub kind: MemoryKind,
    /// Virtual address.
    pub address: u64,
    /// Bytes allocated or released.
    pub bytes: u64,
    /// Program counter of the call (0 when unknown).
    pub pc: u64,
    /// Stream of a stream-ordered operation.
    pub stream: Option<u32>,
    /// Correlation id of the API call (0 when unknown).
    pub correlation_id: u32,
    /// The stream-ordered pool it came from.
    pub pool: Option<MemoryPoolState>,
}

impl MemoryEvent {
    /// `bytes` with the sign of the operation: positive for an allocation.
    pub fn signed_bytes(&self) -> i64 {
        let bytes = i64::try_from(self.bytes).unwrap_or(i64::MAX);
        match self.operation {
            MemoryOperation::Allocation => bytes,
            MemoryOperation::Release => -bytes,
        }
    }
}

/// A stream-ordered memory pool made, destroyed or trimmed (CUPTI `MEMORY_POOL`, nsys
/// `CUDA_GPU_MEMORY_POOL_EVENTS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPoolEvent {
    /// CPU time of the call.
    pub time_ns: i64,
    /// Process.
    pub process: ProcessIdx,
    /// GPU of the pool.
    pub device: DeviceIdx,
    /// CUPTI's `CUpti_ActivityMemoryPoolOperationType`: 1 created, 2 destroyed, 3 trimmed.
    pub operation: u8,
    /// CUPTI's `CUpti_ActivityMemoryPoolType`: 1 local, 2 imported.
    pub pool_type: u8,
    /// The pool's base address.
    pub address: u64,
    /// Correlation id of the API call.
    pub correlation_id: u32,
    /// Bytes a trim keeps.
    pub min_bytes_to_keep: u64,
    /// The pool's size, bytes.
    pub size_bytes: u64,
    /// The pool's release threshold, bytes.
    pub release_threshold_bytes: u64,
    /// Bytes in use.
    pub utilized_bytes: u64,
}

/// One framework allocator event (Kineto `[memory]`): a tensor's allocation (`bytes` > 0) or free (`bytes` < 0),
/// with the allocator's totals right after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameworkMemorySample {
    /// CPU time.
    pub time_ns: i64,
    /// Process.
    pub process: ProcessIdx,
    /// Thread that allocated.
    pub tid: u32,
    /// The GPU, for device memory; `None` for host memory.
    pub device: Option<DeviceIdx>,
    /// Tensor address.
    pub address: u64,
    /// Bytes allocated (positive) or freed (negative).
    pub bytes: i64,
    /// Bytes in tensors after the event (`Total Allocated`).
    pub total_allocated_bytes: u64,
    /// Bytes the allocator holds from CUDA after the event (`Total Reserved`).
    pub total_reserved_bytes: u64,
}
