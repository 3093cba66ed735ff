//! Memory records of a spool (`--trace memory`) → merge → `CUDA_GPU_MEMORY_USAGE_EVENTS` and
//! `CUDA_GPU_MEMORY_POOL_EVENTS` in nsys' columns and enum ids → read back with `shardscope_io::load` to the same
//! model events.

use shardscope_capture::merge::{self, MergeOptions};
use shardscope_capture::sqlite::{self, RunFacts};
use shardscope_model::{MemoryKind, MemoryOperation};
use shardscope_spool::cupti::{
    DeviceRecord, KernelRecord, MemoryPoolRecord, MemoryRecord, ProcessInfo, SpoolRecord, SpoolWriter,
};

const T0_UTC_NS: u64 = 1_800_000_000_000_000_000;

/// One row as the test reads it: start, bytes, memKind, memoryOperationType, streamId, localMemoryPoolSize.
type UsageRow = (i64, i64, i64, i64, Option<i64>, Option<i64>);

fn memory(timestamp_ns: u64, operation: u8, memory_kind: u8, address: u64, bytes: u64) -> SpoolRecord {
    SpoolRecord::Memory(MemoryRecord {
        timestamp_ns,
        operation,
        memory_kind,
        address,
        bytes,
        device_id: 0,
        context_id: 1,
        stream_id: u32::MAX,
        correlation_id: 30,
        ..MemoryRecord::default()
    })
}

fn spool_records() -> Vec<SpoolRecord> {
    let info = ProcessInfo {
        pid: 1000,
        hostname: "node1".into(),
        rank: Some(0),
        cupti_version: 130001,
        cupti_clock_ns: 1_000_000,
        realtime_ns: T0_UTC_NS,
        ..ProcessInfo::default()
    };
    let pooled = SpoolRecord::Memory(MemoryRecord {
        stream_id: 7,
        is_async: true,
        pool_type: 1,
        pool_address: 0x7000_0000,
        pool_release_threshold: 0,
        pool_size_or_pid: 32 << 20,
        pool_utilized_bytes: 1 << 20,
        ..match memory(1_000_400, 1, 3, 0x7000_0000, 1 << 20) {
            SpoolRecord::Memory(m) => m,
            _ => unreachable!(),
        }
    });
    vec![
        SpoolRecord::Process(info),
        SpoolRecord::Device(DeviceRecord { device_id: 0, name: "GPU".into(), uuid: [1; 16], ..Default::default() }),
        SpoolRecord::Name { id: 1, text: "gemm".into() },
        SpoolRecord::Kernel(KernelRecord { start_ns: 1_000_100, end_ns: 1_000_900, name_id: 1, ..Default::default() }),
        memory(1_000_050, 1, 3, 0x1000_0000, 20 << 20),
        memory(1_000_060, 1, 2, 0x2000_0000, 4096),
        memory(1_000_300, 2, 3, 0x1000_0000, 20 << 20),
        pooled,
        memory(1_000_500, 0, 3, 0x3000_0000, 1),
        SpoolRecord::MemoryPool(MemoryPoolRecord {
            timestamp_ns: 1_000_600,
            operation: 3,
            pool_type: 1,
            address: 0x7000_0000,
            size: 32 << 20,
            utilized_bytes: 1 << 20,
            ..Default::default()
        }),
    ]
}

#[test]
fn memory_records_land_in_nsys_tables_and_read_back() {
    let dir = std::env::temp_dir().join(format!("shardscope-memory-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    let mut spool = SpoolWriter::create(&dir.join("spool").join("node1.1000.spool")).unwrap();
    let batch = spool_records();
    spool.write_batch(&batch).unwrap();
    spool.write_batch(&[SpoolRecord::End { records: batch.len() as u64, undecoded: 0 }]).unwrap();
    drop(spool);

    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    let (trace, extras) = merge::merge(&spools, &MergeOptions::default());
    assert_eq!(trace.memory_events.len(), 4, "the invalid operation is skipped");
    assert!(trace.warnings.iter().any(|w| w.what.contains("neither an allocation nor a release") && w.count == 1));
    let out = dir.join("out.sqlite");
    sqlite::write_capture(&out, &trace, &extras, &RunFacts::default()).unwrap();

    // nsys' numbering: memKind 2 device / 1 pinned, memoryOperationType 0 allocation / 1 deallocation.
    let conn = rusqlite::Connection::open(&out).unwrap();
    let rows: Vec<UsageRow> = conn
        .prepare(
            "SELECT start, bytes, memKind, memoryOperationType, streamId, localMemoryPoolSize \
             FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY start",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (50, 20 << 20, 2, 0, None, None),
            (60, 4096, 1, 0, None, None),
            (300, 20 << 20, 2, 1, None, None),
            (400, 1 << 20, 2, 0, Some(7), Some(32 << 20)),
        ]
    );
    let label: String =
        conn.query_row("SELECT label FROM ENUM_CUDA_DEV_MEM_EVENT_OPER WHERE id = 1", [], |r| r.get(0)).unwrap();
    assert_eq!(label, "Deallocation");
    let pool_rows: i64 = conn.query_row("SELECT count(*) FROM CUDA_GPU_MEMORY_POOL_EVENTS", [], |r| r.get(0)).unwrap();
    assert_eq!(pool_rows, 1);

    let read = shardscope_io::load(&out).unwrap();
    let t = &read[0];
    assert_eq!(t.memory_events, trace.memory_events, "what was written reads back the same");
    assert_eq!(t.memory_pool_events.len(), 1);
    assert_eq!(t.memory_events[2].operation, MemoryOperation::Release);
    assert_eq!(t.memory_events[1].kind, MemoryKind::Pinned);
    std::fs::remove_dir_all(&dir).unwrap();
}
