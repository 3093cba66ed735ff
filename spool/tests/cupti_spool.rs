//! The spool file survives being cut off anywhere: complete frames read back exactly, a torn
//! last frame is reported, not fatal.

use shardscope_spool::cupti::{ApiRecord, KernelRecord, MAGIC, ProcessInfo, SpoolRecord, SpoolWriter};
use shardscope_spool::{SpoolContents, SpoolError};

fn read_spool(path: &std::path::Path) -> Result<SpoolContents<SpoolRecord>, SpoolError> {
    shardscope_spool::read_spool(path)
}

fn parse_spool(bytes: &[u8]) -> Result<SpoolContents<SpoolRecord>, SpoolError> {
    shardscope_spool::parse_spool(bytes)
}

fn sample_batches() -> Vec<Vec<SpoolRecord>> {
    let process = SpoolRecord::Process(ProcessInfo {
        pid: 4242,
        ppid: 1,
        command_line: vec!["python3".into(), "tp_llm.py".into()],
        hostname: "gpu-node".into(),
        rank: Some(1),
        local_rank: Some(1),
        world_size: Some(2),
        env: vec![("CUDA_VISIBLE_DEVICES".into(), "0,1".into())],
        cupti_version: 130001,
        cupti_clock_ns: 1_000,
        realtime_ns: 1_700_000_000_000_000_000,
    });
    let kernel = |i: u64| {
        SpoolRecord::Kernel(KernelRecord {
            start_ns: 10 * i,
            end_ns: 10 * i + 5,
            correlation_id: i as u32,
            name_id: 1,
            grid: [i as i32, 1, 1],
            ..KernelRecord::default()
        })
    };
    vec![
        vec![process],
        vec![
            SpoolRecord::Name { id: 1, text: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL".into() },
            kernel(1),
            kernel(2),
        ],
        vec![SpoolRecord::Api(ApiRecord { correlation_id: 3, name_id: 1, ..ApiRecord::default() }), kernel(3)],
    ]
}

fn write(path: &std::path::Path, batches: &[Vec<SpoolRecord>]) {
    let mut writer = SpoolWriter::create(path).unwrap();
    for batch in batches {
        writer.write_batch(batch).unwrap();
    }
}

#[test]
fn complete_file_reads_back_exactly() {
    let dir = std::env::temp_dir().join(format!("shardscope-spool-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("complete.spool");
    let batches = sample_batches();
    write(&path, &batches);
    let contents = read_spool(&path).unwrap();
    assert_eq!(contents.frames, 3);
    assert_eq!(contents.truncated_bytes, 0);
    assert_eq!(contents.bad_records, 0);
    assert_eq!(contents.records, batches.concat());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cut_at_every_byte_keeps_every_complete_frame() {
    let dir = std::env::temp_dir().join(format!("shardscope-spool-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.spool");
    let batches = sample_batches();
    write(&path, &batches);
    let bytes = std::fs::read(&path).unwrap();
    // Where each frame ends, so we know how many records a cut at `len` must keep.
    let mut frame_ends = Vec::new();
    let mut at = MAGIC.len();
    while at < bytes.len() {
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        frame_ends.push(at);
    }
    assert_eq!(frame_ends.len(), 3);
    for len in MAGIC.len()..=bytes.len() {
        let contents = parse_spool(&bytes[..len]).unwrap();
        let whole_frames = frame_ends.iter().filter(|&&end| end <= len).count();
        assert_eq!(contents.frames as usize, whole_frames, "cut at {len}");
        assert_eq!(contents.records, batches[..whole_frames].concat(), "cut at {len}");
        let complete_end = if whole_frames == 0 { MAGIC.len() } else { frame_ends[whole_frames - 1] };
        assert_eq!(contents.truncated_bytes as usize, len - complete_end, "cut at {len}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_frame_stops_reading_and_bad_magic_is_an_error() {
    let dir = std::env::temp_dir().join(format!("shardscope-spool-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.spool");
    write(&path, &sample_batches());
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let contents = parse_spool(&bytes).unwrap();
    assert_eq!(contents.frames, 2);
    assert!(contents.truncated_bytes > 0);
    assert!(matches!(parse_spool(b"PK\x03\x04not a spool"), Err(SpoolError::NotASpool { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}
