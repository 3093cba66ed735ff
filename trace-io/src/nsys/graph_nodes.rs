//! Where CUDA graph nodes came from: `capture`'s `SHARDSCOPE_GRAPH_NODES` table, one row per node made (by stream
//! capture or a graph API call) or cloned (by graph instantiation), with the thread and time it happened at.
//!
//! The analyzer follows a replayed kernel's `graphNodeId` through the clones to the node's making, and takes the
//! ranges open on that thread then (module ranges, phases) as the replay's. nsys exports have no such table and
//! are left as they are.

use rusqlite::{Connection, params};
use shardscope_model::{GraphNodeOrigin, ProcessIdx, Trace};

use super::{Database, global_pid_of, tid_of};
use crate::Error;

/// The table's name.
pub const GRAPH_NODES_TABLE: &str = "SHARDSCOPE_GRAPH_NODES";

/// Writes `trace.graph_nodes` (times on the trace clock, threads as in `NVTX_EVENTS`' `globalTid`).
pub fn write_table(conn: &Connection, trace: &Trace) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE {GRAPH_NODES_TABLE} (globalTid INTEGER NOT NULL, timestamp INTEGER NOT NULL, \
         graphNodeId INTEGER NOT NULL, originalGraphNodeId INTEGER)"
    ))?;
    let mut row = conn.prepare(&format!("INSERT INTO {GRAPH_NODES_TABLE} VALUES (?1, ?2, ?3, ?4)"))?;
    for node in &trace.graph_nodes {
        let global_pid = trace.processes.get(node.process.0 as usize).map_or(0, |p| p.global_pid as i64);
        row.execute(params![
            global_pid | i64::from(node.tid),
            node.created_ns,
            node.node_id as i64,
            node.cloned_from.map(|id| id as i64)
        ])?;
    }
    Ok(())
}

/// Reads the table into `trace.graph_nodes`; rows of a process the trace does not have are counted in a warning.
pub(super) fn attach(db: &Database, trace: &mut Trace) -> Result<(), Error> {
    if !db.tables.contains(GRAPH_NODES_TABLE) {
        return Ok(());
    }
    let table_error = |e: rusqlite::Error| Error::format(db.path, format!("{GRAPH_NODES_TABLE}: {e}"));
    let mut statement = db
        .conn
        .prepare(&format!("SELECT globalTid, timestamp, graphNodeId, originalGraphNodeId FROM {GRAPH_NODES_TABLE}"))
        .map_err(table_error)?;
    let rows = statement
        .query_map([], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?, row.get::<_, Option<i64>>(3)?))
        })
        .map_err(table_error)?;
    let mut orphans = 0u64;
    for row in rows {
        let (global_tid, created_ns, node_id, cloned_from) = row.map_err(table_error)?;
        let global_pid = global_pid_of(global_tid as u64);
        let Some(index) = trace.processes.iter().position(|p| p.global_pid == global_pid) else {
            orphans += 1;
            continue;
        };
        trace.graph_nodes.push(GraphNodeOrigin {
            process: ProcessIdx(index as u32),
            node_id: node_id as u64,
            cloned_from: cloned_from.map(|id| id as u64),
            tid: tid_of(global_tid as u64),
            created_ns,
        });
    }
    trace.warn_n("graph node of a process without events", orphans);
    Ok(())
}
