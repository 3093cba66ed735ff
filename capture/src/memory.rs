//! CUPTI's memory records (`--trace memory`) as the trace model's memory events: the operation and memory kind
//! renumbered the way nsys numbers them, the time on the session clock, the pool state where the allocation came
//! from a stream-ordered pool. `merge.rs` calls these for each `Memory` and `MemoryPool` spool record.

use shardscope_model::{
    DeviceIdx, MemoryEvent, MemoryKind, MemoryOperation, MemoryPoolEvent, MemoryPoolState, ProcessIdx,
};
use shardscope_spool::cupti::{MemoryPoolRecord, MemoryRecord};

/// CUPTI's `CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED`.
const POOL_TYPE_IMPORTED: u8 = 2;

/// CUPTI's "no stream" value of `streamId`.
const NO_STREAM: u32 = u32::MAX;

/// The model event of `record`, at `time_ns` on the session clock; `None` for an operation CUPTI marks invalid
/// (neither allocation nor release), which the caller counts.
pub fn memory_event(
    record: &MemoryRecord,
    process: ProcessIdx,
    device: DeviceIdx,
    time_ns: i64,
) -> Option<MemoryEvent> {
    let operation = MemoryOperation::from_cupti(record.operation)?;
    let pool = (record.pool_type != 0).then(|| {
        let imported = record.pool_type == POOL_TYPE_IMPORTED;
        let local = |value: u64| (!imported).then_some(value);
        MemoryPoolState {
            imported,
            address: record.pool_address,
            release_threshold_bytes: local(record.pool_release_threshold),
            size_bytes: local(record.pool_size_or_pid),
            utilized_bytes: local(record.pool_utilized_bytes),
            imported_pid: imported.then_some(record.pool_size_or_pid),
        }
    });
    Some(MemoryEvent {
        time_ns,
        process,
        device,
        context_id: record.context_id,
        operation,
        kind: MemoryKind::from_cupti(record.memory_kind),
        address: record.address,
        bytes: record.bytes,
        pc: record.pc,
        stream: (record.stream_id != NO_STREAM).then_some(record.stream_id),
        correlation_id: record.correlation_id,
        pool,
    })
}

/// The model event of a pool record, at `time_ns` on the session clock.
pub fn pool_event(record: &MemoryPoolRecord, process: ProcessIdx, device: DeviceIdx, time_ns: i64) -> MemoryPoolEvent {
    MemoryPoolEvent {
        time_ns,
        process,
        device,
        operation: record.operation,
        pool_type: record.pool_type,
        address: record.address,
        correlation_id: record.correlation_id,
        min_bytes_to_keep: record.min_bytes_to_keep,
        size_bytes: record.size,
        release_threshold_bytes: record.release_threshold,
        utilized_bytes: record.utilized_bytes,
    }
}
