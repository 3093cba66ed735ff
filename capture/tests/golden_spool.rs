//! Real spool files, as the injection library wrote them on 2 × H200 (CUDA 13.0 CUPTI) while
//! recording `torchrun --nproc_per_node=2 tp_llm.py` (LAYERS=2 BATCH=2 SEQ=256 DECODE=8 REPS=1):
//! the torchrun parent and two ranks. Guards the spool format (a file written by this version
//! must stay readable) and the merge on real CUPTI output. The expected numbers were counted
//! on the GPU machine with sqlite3 over the file `capture` made from these same spools.

use std::io::Read;
use std::path::PathBuf;

use shardscope_capture::merge::{self, MergeOptions};
use shardscope_capture::sqlite::{self, RunFacts};

fn unpack_spools(test: &str) -> PathBuf {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tp2_spool");
    let dir = std::env::temp_dir().join(format!("shardscope-golden-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
        let name = path.file_stem().unwrap(); // drops ".gz"
        std::fs::write(dir.join("spool").join(name), bytes).unwrap();
    }
    dir
}

#[test]
fn real_two_rank_spools_merge_with_every_record() {
    let dir = unpack_spools("tp2");
    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    assert_eq!(spools.len(), 3);
    assert!(spools.iter().all(|s| s.contents.truncated_bytes == 0 && s.contents.bad_records == 0));
    assert!(spools.iter().all(|s| s.info().unwrap().cupti_version == 130001));
    let (trace, extras) = merge::merge(&spools, &MergeOptions::default());
    assert!(extras.processes.iter().all(|p| p.clean_exit && p.records_dropped == 0));
    let out = dir.join("tp2.sqlite");
    sqlite::write_capture(&out, &trace, &extras, &RunFacts::default()).unwrap();

    let t = &shardscope_io::load(&out).unwrap()[0];
    let mut ranks: Vec<(Option<u32>, Option<u32>)> = t.processes.iter().map(|p| (p.rank, p.world_size)).collect();
    ranks.sort();
    assert_eq!(ranks, vec![(None, None), (Some(0), Some(2)), (Some(1), Some(2))]);
    assert_eq!(t.kernels.len(), 1184);
    for ordinal in [0, 1] {
        let on_device = t.kernels.iter().filter(|k| t.devices[k.device.0 as usize].ordinal == ordinal).count();
        assert_eq!(on_device, 592, "GPU {ordinal}");
    }
    assert_eq!(t.kernels.iter().map(|k| k.duration_ns()).sum::<i64>(), 145_112_878);
    assert_eq!(t.kernels.iter().filter(|k| k.launch.is_some()).count(), 1184, "every kernel finds its launch");
    assert_eq!(t.memops.iter().filter(|m| !m.is_memset()).count(), 292);
    // CUPTI's srcKind and dstKind survive the merge and the file: every copy of this run is pageable to device, as
    // nsys recorded for another run of the workload (`sample-traces/tp2_nsys.sqlite.gz`).
    let pageable = (Some(shardscope_model::MemoryKind::Pageable), Some(shardscope_model::MemoryKind::Device));
    assert!(t.memops.iter().filter(|m| !m.is_memset()).all(|m| (m.src_memory, m.dst_memory) == pageable));
    assert_eq!(t.memops.iter().filter(|m| m.is_memset()).count(), 208);
    assert_eq!(t.api_calls.len(), 43_387);

    let count = |name: &str| t.ranges.iter().filter(|r| t.names.get(r.name) == name).count();
    assert_eq!(t.ranges.len(), 188);
    assert_eq!((count("prefill"), count("decode"), count("ncclAllReduce")), (4, 32, 146));
    // CUPTI sent no end for NCCL's init range: it ends with the enclosing "prefill" range.
    for init in t.ranges.iter().filter(|r| t.names.get(r.name) == "ncclCommInitRankConfig") {
        let prefill = t
            .ranges
            .iter()
            .find(|r| r.process == init.process && t.names.get(r.name) == "prefill" && r.start_ns < init.start_ns)
            .unwrap();
        assert_eq!(init.end_ns, prefill.end_ns);
        assert_eq!(t.names.get(init.domain), "NCCL");
    }
    let conn = rusqlite::Connection::open(&out).unwrap();
    let warnings: Vec<(String, i64)> = conn
        .prepare("SELECT what, count FROM SHARDSCOPE_CAPTURE_WARNINGS ORDER BY what")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        warnings,
        vec![
            ("NVTX range without an end (ended at the process's last event)".to_string(), 2),
            ("NVTX range without an end (ended with its enclosing range)".to_string(), 2),
        ]
    );
    let syncs: i64 =
        conn.query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", [], |r| r.get(0)).unwrap();
    assert_eq!(syncs, 884);
    std::fs::remove_dir_all(&dir).unwrap();
}
