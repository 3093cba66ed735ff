//! Graph node records of a spool → merge → `SHARDSCOPE_GRAPH_NODES` → read back with `shardscope_io::load`: the
//! node's thread and time land on the same thread numbering and clock as the process's NVTX ranges, so that the
//! ranges open at the node's capture can be found for a kernel replayed from it.

use shardscope_capture::merge::{self, MergeOptions};
use shardscope_capture::sqlite::{self, RunFacts};
use shardscope_model::GraphNodeOrigin;
use shardscope_spool::cupti::{GraphNodeRecord, KernelRecord, MarkerRecord, ProcessInfo, SpoolRecord, SpoolWriter};

const T0_UTC_NS: u64 = 1_800_000_000_000_000_000;
/// CUPTI names threads by a truncated `pthread_t`.
const MAIN_THREAD: u32 = 0x9ABC_DEF0;
const CAPTURE_THREAD: u32 = 0x9ABC_0000;

fn marker(flags: u32, timestamp_ns: u64, id: u32, name_id: u32) -> SpoolRecord {
    SpoolRecord::Marker(MarkerRecord { flags, timestamp_ns, id, pid: 1000, tid: MAIN_THREAD, name_id, domain_id: 0 })
}

fn node(node_id: u64, original_node_id: u64, timestamp_ns: u64, tid: u32) -> SpoolRecord {
    SpoolRecord::GraphNode(GraphNodeRecord { node_id, original_node_id, graph_id: 3, timestamp_ns, tid })
}

#[test]
fn graph_nodes_keep_the_thread_and_clock_of_the_ranges() {
    let dir = std::env::temp_dir().join(format!("shardscope-graph-node-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    let mut spool = SpoolWriter::create(&dir.join("spool").join("node1.1000.spool")).unwrap();
    let info = ProcessInfo {
        pid: 1000,
        hostname: "node1".into(),
        cupti_version: 130001,
        cupti_clock_ns: 1_000_000,
        realtime_ns: T0_UTC_NS,
        ..ProcessInfo::default()
    };
    let mut batch = vec![
        SpoolRecord::Process(info),
        SpoolRecord::Name { id: 1, text: "(Model)".into() },
        SpoolRecord::Name { id: 2, text: "model.mlp (MLP)".into() },
        SpoolRecord::Name { id: 3, text: "gemm".into() },
        marker(2, 1_000_050, 1, 1),
        marker(2, 1_000_060, 2, 2),
        // Made while `model.mlp` is open on the main thread, then cloned by instantiation on another thread.
        node(0x100, 0, 1_000_070, MAIN_THREAD),
        marker(4, 1_000_090, 2, 0),
        marker(4, 1_003_000, 1, 0),
        node(0x200, 0x100, 1_000_500, CAPTURE_THREAD),
    ];
    batch.push(SpoolRecord::Kernel(KernelRecord {
        start_ns: 1_004_000,
        end_ns: 1_004_100,
        correlation_id: 20,
        graph_node_id: 0x200,
        name_id: 3,
        ..KernelRecord::default()
    }));
    spool.write_batch(&batch).unwrap();
    spool.write_batch(&[SpoolRecord::End { records: batch.len() as u64, undecoded: 0 }]).unwrap();
    drop(spool);

    let spools = merge::read_spool_dir(&dir.join("spool")).unwrap();
    let (trace, extras) = merge::merge(&spools, &MergeOptions::default());
    let out = dir.join("out.sqlite");
    sqlite::write_capture(&out, &trace, &extras, &RunFacts::default()).unwrap();
    let read = shardscope_io::load(&out).unwrap();
    let t = &read[0];
    let mlp = t.ranges.iter().find(|r| t.names.get(r.name) == "model.mlp (MLP)").expect("module range kept");
    assert_eq!((mlp.start_ns, mlp.end_ns), (60, 90));
    let process = mlp.process;
    assert_eq!(
        t.graph_nodes,
        [
            GraphNodeOrigin { process, node_id: 0x100, cloned_from: None, tid: mlp.tid, created_ns: 70 },
            GraphNodeOrigin { process, node_id: 0x200, cloned_from: Some(0x100), tid: mlp.tid + 1, created_ns: 500 },
        ]
    );
    assert_eq!(t.kernels[0].graph_node_id, Some(0x200));
    std::fs::remove_dir_all(&dir).unwrap();
}
