//! Feeds the decoder CUPTI memory (`MEMORY2`, `CUpti_ActivityMemory4`) and memory pool (`MEMORY_POOL`,
//! `CUpti_ActivityMemoryPool2`/`3`) records written byte by byte at the offsets of CUDA 13.0's
//! `cupti_activity.h` (64-bit), not through the decoder's own structs, so that a wrong field order or size in
//! those structs fails here.

use shardscope_cupti_sys::v13;
use shardscope_inject::decode::{Decoder, Layout, walk_records};
use shardscope_spool::cupti::{MemoryPoolRecord, MemoryRecord, SpoolRecord};

/// A record of `size` bytes with `fields` (`(offset, value, width in bytes)`) written little-endian.
fn record(size: usize, fields: &[(usize, u64, usize)]) -> Vec<u8> {
    let mut bytes = vec![0u8; size];
    for &(offset, value, width) in fields {
        bytes[offset..offset + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }
    bytes
}

/// A `CUpti_ActivityMemory4` (128 bytes): a 2 MiB device allocation from a local pool.
fn memory4(operation: u64, address: u64, timestamp: u64) -> Vec<u8> {
    record(
        128,
        &[
            (0, u64::from(v13::CUPTI_ACTIVITY_KIND_MEMORY2), 4),
            (4, operation, 4),
            (8, 3, 4), // CUPTI_ACTIVITY_MEMORY_KIND_DEVICE
            (12, 77, 4),
            (16, address, 8),
            (24, 2 << 20, 8),
            (32, timestamp, 8),
            (40, 0xdead_beef, 8),
            (48, 4321, 4),
            (52, 1, 4),
            (56, 9, 4),
            (60, 13, 4),
            (72, 1, 4), // isAsync
            (80, 1, 4), // CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL
            (88, 0x7f00_0000_0000, 8),
            (96, 1 << 30, 8),
            (104, 32 << 20, 8),
            (112, 6 << 20, 8),
        ],
    )
}

/// A memory pool record: the `MemoryPool2` fields (72 bytes), padded to `size`.
fn memory_pool(size: usize) -> Vec<u8> {
    record(
        size,
        &[
            (0, u64::from(v13::CUPTI_ACTIVITY_KIND_MEMORY_POOL), 4),
            (4, 3, 4), // trimmed
            (8, 1, 4), // local
            (12, 88, 4),
            (16, 4321, 4),
            (20, 1, 4),
            (24, 4 << 20, 8),
            (32, 0x7f00_0000_0000, 8),
            (40, 64 << 20, 8),
            (48, 1 << 30, 8),
            (56, 5_000, 8),
            (64, 8 << 20, 8),
        ],
    )
}

fn decode(layout: Layout, buffer: &[u8]) -> (usize, Vec<SpoolRecord>, u64) {
    let mut decoder = Decoder::new(layout, Box::new(|_, _| None));
    let mut out = Vec::new();
    // SAFETY: walk_records hands out pointers to whole records inside `buffer`.
    let walked = walk_records(layout, buffer, |r| unsafe { decoder.decode(r, &mut out) });
    (walked, out, decoder.undecoded)
}

fn expected_allocation() -> MemoryRecord {
    MemoryRecord {
        timestamp_ns: 1_000,
        operation: 1,
        memory_kind: 3,
        address: 0x7f00_0020_0000,
        bytes: 2 << 20,
        pc: 0xdead_beef,
        device_id: 1,
        context_id: 9,
        stream_id: 13,
        correlation_id: 77,
        is_async: true,
        pool_type: 1,
        pool_address: 0x7f00_0000_0000,
        pool_release_threshold: 1 << 30,
        pool_size_or_pid: 32 << 20,
        pool_utilized_bytes: 6 << 20,
    }
}

fn expected_pool() -> MemoryPoolRecord {
    MemoryPoolRecord {
        timestamp_ns: 5_000,
        operation: 3,
        pool_type: 1,
        device_id: 1,
        correlation_id: 88,
        address: 0x7f00_0000_0000,
        min_bytes_to_keep: 4 << 20,
        size: 64 << 20,
        release_threshold: 1 << 30,
        utilized_bytes: 8 << 20,
    }
}

#[test]
fn memory_and_pool_records_decode_in_both_layouts() {
    for (layout, pool_bytes) in [(Layout::Cuda12, 72), (Layout::Cuda13, 80)] {
        let mut buffer = memory4(1, 0x7f00_0020_0000, 1_000);
        buffer.extend(memory4(2, 0x7f00_0020_0000, 2_000));
        buffer.extend(memory_pool(pool_bytes));
        // A trailing record shows the walk kept its place after the pool record.
        buffer.extend(memory4(1, 0x7f00_0040_0000, 6_000));
        let (walked, records, undecoded) = decode(layout, &buffer);
        assert_eq!((walked, undecoded), (4, 0), "{layout:?}");
        let memory: Vec<MemoryRecord> =
            records.iter().filter_map(|r| if let SpoolRecord::Memory(m) = r { Some(*m) } else { None }).collect();
        assert_eq!(memory.len(), 3);
        assert_eq!(memory[0], expected_allocation());
        assert_eq!((memory[1].operation, memory[1].timestamp_ns), (2, 2_000));
        assert_eq!((memory[2].address, memory[2].timestamp_ns), (0x7f00_0040_0000, 6_000));
        let pools: Vec<MemoryPoolRecord> =
            records.iter().filter_map(|r| if let SpoolRecord::MemoryPool(p) = r { Some(*p) } else { None }).collect();
        assert_eq!(pools, vec![expected_pool()]);
    }
}

#[test]
fn memory_records_round_trip_through_the_spool_codec() {
    let records = vec![SpoolRecord::Memory(expected_allocation()), SpoolRecord::MemoryPool(expected_pool())];
    for record in records {
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        let mut input = bytes.as_slice();
        assert_eq!(SpoolRecord::decode(&mut input), Some(record));
        assert!(input.is_empty());
    }
}

#[test]
fn memory_kinds_are_switched_on_only_by_the_memory_group() {
    use shardscope_inject::decode::activity_kinds;
    use shardscope_spool::config::TraceKinds;
    let default = activity_kinds(&TraceKinds::default());
    assert!(!default.contains(&v13::CUPTI_ACTIVITY_KIND_MEMORY2));
    let kinds = TraceKinds::parse("kernel,memory").unwrap();
    let with_memory = activity_kinds(&kinds);
    assert!(with_memory.contains(&v13::CUPTI_ACTIVITY_KIND_MEMORY2));
    assert!(with_memory.contains(&v13::CUPTI_ACTIVITY_KIND_MEMORY_POOL));
    assert_eq!(TraceKinds::parse(&kinds.to_list()).unwrap(), kinds);
    assert!(!TraceKinds::parse("all").unwrap().memory, "all keeps memory off, as it keeps the costly groups");
}
