//! CUDA graph nodes: the injection library switches CUPTI's node-made and node-cloned callbacks on, and each
//! callback becomes a spool record with the node, the node it was cloned from, its graph, the time and the
//! thread. Played without a GPU through the stand-in libcupti (`tests/data/fake_cupti.c`), whose
//! `fake_cupti_graph_node` calls the subscriber as CUPTI does.

use std::path::{Path, PathBuf};
use std::process::Command;

use shardscope_spool::cupti::{GraphNodeRecord, SpoolRecord};

const CHILD_ENV: &str = "SHARDSCOPE_TEST_GRAPH_NODES_CHILD";

type MakeNode = unsafe extern "C" fn(cbid: u32, graph: usize, node: usize, original: usize) -> i32;

/// Run in a child process: start recording, play a capture of two nodes and an instantiation that clones
/// them, then exit (the exit flush writes the records).
#[test]
fn child_entry() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    assert_eq!(shardscope_inject::InitializeInjection(), 1);
    let path = std::env::var_os("SHARDSCOPE_CUPTI_LIB").unwrap();
    // SAFETY: the stand-in library has no initialisers with preconditions; it is already loaded.
    let library = unsafe { libloading::Library::new(path) }.unwrap();
    // SAFETY: the stand-in exports the function with this signature.
    let make_node = unsafe { library.get::<MakeNode>(b"fake_cupti_graph_node\0") }.unwrap();
    let calls = [(13, 7, 0x100, 0), (13, 7, 0x101, 0), (20, 8, 0x200, 0x100), (20, 8, 0x201, 0x101), (9, 7, 0x300, 0)];
    for (cbid, graph, node, original) in calls {
        // SAFETY: plain integers; the stand-in builds CUPTI's structures from them.
        assert_eq!(unsafe { make_node(cbid, graph, node, original) }, 1, "graph callbacks were not switched on");
    }
}

fn fake_cupti(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_cupti.c");
    let library = dir.join("libcupti_fake.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("this test needs a C compiler ({compiler}): {e}"));
    assert!(status.success(), "{compiler} failed on {}", source.display());
    library
}

#[test]
fn made_and_cloned_nodes_are_spooled_with_their_thread_and_time() {
    let dir = std::env::temp_dir().join(format!("shardscope-graph-nodes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spool_dir = dir.join("spool");
    std::fs::create_dir_all(&spool_dir).unwrap();
    let library = fake_cupti(&dir);
    let log = dir.join("calls.log");
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("FAKE_CUPTI_LOG", &log)
        .env("SHARDSCOPE_CUPTI_LIB", &library)
        .env("SHARDSCOPE_SPOOL_DIR", &spool_dir)
        .env_remove("SHARDSCOPE_TRACE")
        .output()
        .unwrap();
    assert!(output.status.success(), "child failed: {}", String::from_utf8_lossy(&output.stderr));
    let enabled = std::fs::read_to_string(&log).unwrap();
    let resource: Vec<&str> = enabled.lines().filter(|l| l.starts_with("resource-callback")).collect();
    assert_eq!(resource, ["resource-callback 13 1", "resource-callback 20 1"]);

    let spool = std::fs::read_dir(&spool_dir).unwrap().next().expect("no spool written").unwrap().path();
    let contents = shardscope_spool::read_spool::<SpoolRecord>(&spool).unwrap();
    let nodes: Vec<GraphNodeRecord> = contents
        .records
        .iter()
        .filter_map(|r| match r {
            SpoolRecord::GraphNode(node) => Some(*node),
            _ => None,
        })
        .collect();
    let summary: Vec<(u64, u64, u32)> = nodes.iter().map(|n| (n.node_id, n.original_node_id, n.graph_id)).collect();
    // The fifth call is another resource callback (a graph made): not a node, not recorded.
    assert_eq!(summary, [(0x100, 0, 7), (0x101, 0, 7), (0x200, 0x100, 8), (0x201, 0x101, 8)]);
    // The stand-in's clock is CLOCK_MONOTONIC: every node has a time, in the order the callbacks came.
    assert!(nodes.iter().all(|n| n.timestamp_ns > 0), "the stand-in's clock: {nodes:?}");
    assert!(nodes.windows(2).all(|w| w[0].timestamp_ns <= w[1].timestamp_ns), "in callback order: {nodes:?}");
    assert!(nodes.iter().all(|n| n.tid == nodes[0].tid && n.tid != 0), "all made on the child's thread: {nodes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
