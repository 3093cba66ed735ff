//! CUDA graphs recorded whole (nsys' default `--cuda-graph-trace=graph`): the `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`
//! rows are GPU activity. Tested on a copy of the two-rank sample export in which one decode step's kernels on
//! GPU 0 are replaced by one graph execution spanning them, as a graph-level export records a graph launch.

use crate::common;

use std::io::Read;
use std::path::PathBuf;

use common::{analyzer, repo_root};
use rusqlite::Connection;
use serde_json::Value;

/// The decode range whose kernels become a graph (a third decode step of the sample, on GPU 0's timeline).
const GRAPH_WINDOW_NS: (i64, i64) = (9_746_389_624, 9_787_250_698);

fn graph_level_copy() -> (PathBuf, (i64, i64)) {
    let mut bytes = Vec::new();
    let file = std::fs::File::open(repo_root().join("sample-traces/tp2_nsys.sqlite.gz")).unwrap();
    flate2::read::GzDecoder::new(file).read_to_end(&mut bytes).unwrap();
    let path = std::env::temp_dir().join(format!("shardscope-graph-{}.sqlite", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let conn = Connection::open(&path).unwrap();
    let (w0, w1) = GRAPH_WINDOW_NS;
    let (start, end, correlation, global_pid): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT min(start), max(end), (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 \
             AND start >= ?1 AND start < ?2 ORDER BY start LIMIT 1), max(globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL \
             WHERE deviceId = 0 AND start >= ?1 AND start < ?2",
            [w0, w1],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 AND start >= ?1 AND start < ?2", [w0, w1])
        .unwrap();
    conn.execute_batch(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, \
         deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, \
         correlationId INTEGER NOT NULL, globalPid INTEGER NOT NULL, graphId INTEGER NOT NULL, \
         graphExecId INTEGER NOT NULL);",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?1, ?2, 0, 1, 7, ?3, ?4, 5, 6)",
        [start, end, correlation, global_pid],
    )
    .unwrap();
    // A row CUPTI could not time: skipped and counted.
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (0, 0, 0, 1, 7, 0, ?1, 5, 6)", [global_pid])
        .unwrap();
    (path, (start, end))
}

/// Busy time of GPU 0 computed independently: the union of its kernel, copy and set rows and the graph.
fn expected_busy_ns(path: &PathBuf, graph: (i64, i64)) -> i64 {
    let conn = Connection::open(path).unwrap();
    let mut spans: Vec<(i64, i64)> = vec![graph];
    for table in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
        let mut statement = conn.prepare(&format!("SELECT start, end FROM {table} WHERE deviceId = 0")).unwrap();
        spans.extend(statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).unwrap().map(Result::unwrap));
    }
    spans.sort_unstable();
    let (mut total, mut current): (i64, Option<(i64, i64)>) = (0, None);
    for (start, end) in spans {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

#[test]
fn graph_level_records_count_as_busy_time_in_their_category() {
    let (path, (start, end)) = graph_level_copy();
    let output = analyzer(&["report", "--format", "json", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rank0 = &report["ranks"][0];
    assert_eq!(rank0["device"], 0);
    assert_eq!(rank0["cuda_graph_count"], 1);
    assert_eq!(rank0["categories"]["cuda_graph"], end - start);
    assert_eq!(rank0["gpu_busy_ns"], expected_busy_ns(&path, (start, end)));
    // The graph's launch call lies in a decode range: the graph is decode work.
    assert_eq!(rank0["phases"]["decode"]["categories"]["cuda_graph"], end - start);
    assert_eq!(report["ranks"][1]["cuda_graph_count"], 0);
    let warnings = report["warnings"].as_array().unwrap();
    let whole = warnings.iter().find(|w| w["what"].as_str().unwrap().contains("--cuda-graph-trace=node")).unwrap();
    assert_eq!(whole["count"], 1);
    let untimed = warnings.iter().find(|w| w["what"].as_str().unwrap().contains("without GPU start/end")).unwrap();
    assert_eq!(untimed["count"], 1);
    // kern-sum stays a summary of kernels, as `nsys stats` has it: no graph rows.
    let kern_sum =
        String::from_utf8(analyzer(&["kern-sum", "--format", "csv", path.to_str().unwrap()]).stdout).unwrap();
    assert!(!kern_sum.to_lowercase().contains("graph"), "{kern_sum}");
    // Grouped by graph.
    let replays = &rank0["graph_replays"];
    assert_eq!(replays["source"], "graph_records");
    assert_eq!(replays["replay_ns"]["count"], 1);
    assert_eq!(replays["by_graph"][0]["graph_id"], 5);
    assert_eq!(replays["by_graph"][0]["total_ns"], end - start);
    assert_eq!(report["ranks"][1]["graph_replays"], Value::Null);
    let table = String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("CUDA graphs (recorded whole) 1"), "{table}");
    assert!(table.contains("CUDA graph replays (recorded whole): 1;"), "{table}");
    let _ = std::fs::remove_file(&path);
}

/// Node-level recording (`--cuda-graph-trace=node`): the kernels of one replay share the correlation id of the
/// `cudaGraphLaunch` call. Fabricated from the sample: the same decode step's kernels on GPU 0 become the nodes of
/// one replay launched by one call.
#[test]
fn node_level_graph_kernels_are_grouped_by_replay() {
    let mut bytes = Vec::new();
    let file = std::fs::File::open(repo_root().join("sample-traces/tp2_nsys.sqlite.gz")).unwrap();
    flate2::read::GzDecoder::new(file).read_to_end(&mut bytes).unwrap();
    let path = std::env::temp_dir().join(format!("shardscope-graph-nodes-{}.sqlite", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let conn = Connection::open(&path).unwrap();
    let (w0, w1) = GRAPH_WINDOW_NS;
    let (count, start, end, correlation): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT count(*), min(start), max(end), (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE \
             deviceId = 0 AND start >= ?1 AND start < ?2 ORDER BY start LIMIT 1) FROM CUPTI_ACTIVITY_KIND_KERNEL \
             WHERE deviceId = 0 AND start >= ?1 AND start < ?2",
            [w0, w1],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    assert!(count > 1);
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ?3 WHERE deviceId = 0 AND start >= ?1 AND start < ?2",
        [w0, w1, correlation],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO StringIds (id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), 'cudaGraphLaunch_v10000')",
        [],
    )
    .unwrap();
    // The launch call of the first kernel (GPU 0's process) becomes the graph launch.
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = (SELECT id FROM StringIds WHERE value = 'cudaGraphLaunch_v10000') \
         WHERE correlationId = ?1 AND globalTid / 16777216 % 16777216 = \
         (SELECT globalPid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 LIMIT 1)",
        [correlation],
    )
    .unwrap();
    // Node ids as CUPTI gives them (64-bit handles, here above 2^32), numbered in start order from FIRST_NODE.
    const FIRST_NODE: i64 = 0x1_0000_0000;
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = ?3 + (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL \
         AS k WHERE k.deviceId = 0 AND k.start >= ?1 AND k.start < CUPTI_ACTIVITY_KIND_KERNEL.start) \
         WHERE deviceId = 0 AND start >= ?1 AND start < ?2",
        [w0, w1, FIRST_NODE],
    )
    .unwrap();
    drop(conn);
    let report_of = |path: &PathBuf| -> Value {
        let output = analyzer(&["report", "--format", "json", path.to_str().unwrap()]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).unwrap()
    };

    // Node ids only, as a capture keeps them: the graph is named by its smallest node id.
    let report = report_of(&path);
    let replays = &report["ranks"][0]["graph_replays"];
    assert_eq!(replays["source"], "node_kernels");
    assert_eq!(replays["node_activities"], count);
    assert_eq!(replays["replay_ns"]["count"], 1);
    assert_eq!(replays["replay_ns"]["max_ns"], end - start);
    assert_eq!(replays["by_graph"][0]["graph_id"], Value::Null);
    assert_eq!(replays["by_graph"][0]["first_node_id"], FIRST_NODE);
    assert_eq!(replays["by_graph"][0]["nodes_per_replay"], count);
    assert_eq!(replays["by_graph"][0]["total_ns"], end - start);
    assert_eq!(report["ranks"][1]["graph_replays"], Value::Null);
    let table = String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains(&format!("graph of node {FIRST_NODE} ({count} nodes): 1 ×")), "{table}");

    // With nsys' graph id as well, the graph is named by it (the sample's nsys version has no such column: the
    // versions that write it add it to the same table).
    let conn = Connection::open(&path).unwrap();
    let has_graph_id: bool = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('CUPTI_ACTIVITY_KIND_KERNEL') WHERE name = 'graphId'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
        .unwrap();
    if !has_graph_id {
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER", []).unwrap();
    }
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = 7 WHERE graphNodeId IS NOT NULL", []).unwrap();
    drop(conn);
    let report = report_of(&path);
    let by_graph = &report["ranks"][0]["graph_replays"]["by_graph"];
    assert_eq!(by_graph[0]["graph_id"], 7);
    assert_eq!(by_graph[0]["first_node_id"], FIRST_NODE);
    assert_eq!(by_graph.as_array().unwrap().len(), 1);

    // The Parquet dataset keeps the graph and node ids: the same figures read back.
    let dataset = std::env::temp_dir().join(format!("shardscope-graph-nodes-{}.parquet.d", std::process::id()));
    let _ = std::fs::remove_dir_all(&dataset);
    let export = analyzer(&["export", "--format", "parquet", dataset.to_str().unwrap(), path.to_str().unwrap()]);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let back = report_of(&dataset);
    assert_eq!(back["ranks"][0]["graph_replays"], report["ranks"][0]["graph_replays"]);
    let _ = std::fs::remove_dir_all(&dataset);
    let _ = std::fs::remove_file(&path);
}
