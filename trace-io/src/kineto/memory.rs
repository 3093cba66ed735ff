//! Kineto's `[memory]` instant events (`torch.profiler.profile(profile_memory=True)`): one per tensor allocation or
//! free by PyTorch's allocator, with the allocator's totals right after it. These count tensors (`Total Allocated`)
//! and what the caching allocator holds from CUDA (`Total Reserved`); CUDA's own allocations are not in a Kineto
//! trace.

use shardscope_model::{FrameworkMemorySample, ProcessIdx};

use super::raw::{MemoryArgs, RawEvent};
use super::time::micros_text_to_ns;

/// The event's name.
pub const MEMORY_EVENT_NAME: &str = "[memory]";

/// c10's `DeviceType::CUDA`.
const DEVICE_TYPE_CUDA: i64 = 1;

/// Why a `[memory]` event was skipped (the builder counts each as a warning).
pub const UNUSABLE: &str = "[memory] event without a valid 'ts', 'Bytes' or totals skipped";

/// The sample of one `[memory]` event, with the GPU ordinal it names (`None` for host memory); its `device`
/// field is left for the builder to fill once GPUs are known.
pub fn sample(
    event: &RawEvent,
    args: &MemoryArgs,
    process: ProcessIdx,
) -> Option<(Option<u32>, FrameworkMemorySample)> {
    let time_ns = event.ts.and_then(micros_text_to_ns)?;
    let bytes = args.bytes.get()?;
    let unsigned = |value: Option<i64>| value.and_then(|v| u64::try_from(v).ok());
    let total_allocated_bytes = unsigned(args.total_allocated.get())?;
    let total_reserved_bytes = unsigned(args.total_reserved.get())?;
    let ordinal = (args.device_type.get() == Some(DEVICE_TYPE_CUDA))
        .then(|| args.device_id.get().and_then(|d| u32::try_from(d).ok()))
        .flatten();
    let sample = FrameworkMemorySample {
        time_ns,
        process,
        tid: event.tid.get().map_or(0, |t| t as u32),
        device: None,
        address: args.addr.get().map_or(0, |a| a as u64),
        bytes,
        total_allocated_bytes,
        total_reserved_bytes,
    };
    Some((ordinal, sample))
}
