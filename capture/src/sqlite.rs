//! Writing the merged capture: nsys' tables through `shardscope_io::nsys_writer`, then what
//! only a capture knows.
//!
//! In one pass and one transaction: the shared writer writes the trace with the kernel columns the
//! model lacks (`contextId`, `mangledName`, `launchType`, `cacheConfig`, `registersPerThread`, shared
//! and local memory, `gridId`, `graphNodeId`, `sharedMemoryExecuted`) in the same rows, and each GPU's
//! `uuid`, `l2CacheSize`, `asyncEngines`, `computeMajor/Minor` in `TARGET_INFO_GPU`; then this module
//! writes the tables of the records only a capture keeps (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` with
//! nsys' columns, through [`crate::side_records`]), the capture-only tables below and the NCCL tables.
//!
//! | table | columns | one row per |
//! | --- | --- | --- |
//! | `SHARDSCOPE_CAPTURE_PROCESS` | `globalPid, pid, ppid, commandLine` (JSON array), `localRank, cuptiVersion, recordsDropped, buffersRefused, recordsUndecoded, cleanExit, truncatedBytes` | recorded process |
//! | `SHARDSCOPE_CAPTURE_ENV` | `globalPid, name, value` | allow-listed environment variable that was set |
//! | `SHARDSCOPE_GPU_LINKS` | `deviceIdA, deviceIdB, uuidA, uuidB, nvlinks, kind` | GPU pair (from NVML) |
//! | `SHARDSCOPE_CAPTURE_META` | `name, value` | fact about the run: command, exit status, trace kinds, API selection (`apiCalls`), NCCL NVTX (`ncclNvtx`), records per kind (`recordCounts`), per-process recording cost (`captureCost`), estimated host ns added per launch by recorded calls and callbacks, CUPTI's kernel timing not included (`addedHostNsPerLaunch`), demangler, capture range |
//! | `SHARDSCOPE_CAPTURE_WARNINGS` | `what, count` | kind of problem met while merging |

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use rusqlite::{Connection, params};
use shardscope_io::nsys_writer::{CuptiColumns, GpuColumns, KernelColumns, WriteOptions, Writer};
use shardscope_model::Trace;

use crate::merge::{CaptureExtras, uuid_text};
use crate::nccl_spool::NcclProcess;
use crate::nccl_tables;
use crate::nvml::GpuLink;

/// Facts about the run itself, for `SHARDSCOPE_CAPTURE_META`.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// `(name, value)` pairs.
    pub meta: Vec<(String, String)>,
    /// GPU pairs and their links.
    pub links: Vec<GpuLink>,
    /// The NCCL profiler plugin's operations per process, linked to their kernels, for the
    /// `SHARDSCOPE_NCCL_*` tables (none when the plugin did not run).
    pub nccl: Vec<NcclProcess>,
}

/// Writes `trace` with `extras` to `path` (replacing it), in one pass and one transaction: the nsys
/// tables with the CUPTI columns the model lacks in the same rows, then the capture's own tables and
/// the NCCL tables.
pub fn write_capture(path: &Path, trace: &Trace, extras: &CaptureExtras, facts: &RunFacts) -> anyhow::Result<()> {
    let options =
        WriteOptions { producer_name: "shardscope-capture".into(), producer_version: env!("CARGO_PKG_VERSION").into() };
    let mut writer = Writer::create_with(path, &options)?;
    writer.write_trace_with(trace, &cupti_columns(extras))?;
    write_extras(writer.connection(), trace, extras, facts)
        .with_context(|| format!("{}: cannot write SQLite", path.display()))?;
    if !facts.nccl.is_empty() {
        let global_pid = |pid: u32| trace.processes.iter().find(|p| p.pid == pid).map_or(0, |p| p.global_pid as i64);
        let table_options = nccl_tables::TableOptions {
            session_start_utc_ns: trace.clock_offset_ns.unwrap_or(0),
            global_pid: &global_pid,
        };
        nccl_tables::write_tables(writer.connection(), &facts.nccl, &table_options)
            .with_context(|| format!("{}: cannot write NCCL tables", path.display()))?;
    }
    if !trace.graph_nodes.is_empty() {
        shardscope_io::nsys::graph_nodes::write_table(writer.connection(), trace)
            .with_context(|| format!("{}: cannot write the graph node table", path.display()))?;
    }
    writer.finish()?;
    Ok(())
}

/// The kernel and GPU columns CUPTI gave that the model has no field for.
fn cupti_columns(extras: &CaptureExtras) -> CuptiColumns {
    let kernels = extras
        .kernels
        .iter()
        .map(|detail| {
            let k = &detail.record;
            KernelColumns {
                context_id: k.context_id,
                mangled_name: detail.mangled_name,
                launch_type: k.launch_type,
                cache_config: k.cache_config,
                registers_per_thread: k.registers_per_thread,
                static_shared_bytes: k.static_shared_bytes,
                dynamic_shared_bytes: k.dynamic_shared_bytes,
                local_bytes_per_thread: k.local_bytes_per_thread,
                local_bytes_total: k.local_bytes_total,
                grid_id: k.grid_id,
                shared_executed_bytes: k.shared_executed_bytes,
            }
        })
        .collect();
    let devices = extras
        .devices
        .iter()
        .map(|extra| {
            (extra.uuid != [0; 16]).then(|| GpuColumns {
                uuid: uuid_text(&extra.uuid),
                l2_cache_bytes: extra.l2_cache_bytes,
                copy_engines: extra.copy_engines,
                compute_capability: extra.compute_capability,
            })
        })
        .collect();
    CuptiColumns { kernels, devices }
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn write_extras(conn: &Connection, trace: &Trace, extras: &CaptureExtras, facts: &RunFacts) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE SHARDSCOPE_CAPTURE_PROCESS (globalPid INTEGER, pid INTEGER, ppid INTEGER, commandLine TEXT, \
         localRank INTEGER, cuptiVersion INTEGER, recordsDropped INTEGER, buffersRefused INTEGER, \
         recordsUndecoded INTEGER, cleanExit INTEGER, truncatedBytes INTEGER);
         CREATE TABLE SHARDSCOPE_CAPTURE_ENV (globalPid INTEGER, name TEXT, value TEXT);
         CREATE TABLE SHARDSCOPE_GPU_LINKS (deviceIdA INTEGER, deviceIdB INTEGER, uuidA TEXT, uuidB TEXT, \
         nvlinks INTEGER, kind TEXT);
         CREATE TABLE SHARDSCOPE_CAPTURE_META (name TEXT NOT NULL, value TEXT);
         CREATE TABLE SHARDSCOPE_CAPTURE_WARNINGS (what TEXT NOT NULL, count INTEGER NOT NULL);",
    )?;
    // Records of the capture-only kinds name a CUDA context; its GPU is the one the process's kernels in
    // that context ran on.
    let mut context_device: HashMap<(u32, u32), u32> = HashMap::new();
    for (kernel, detail) in trace.kernels.iter().zip(&extras.kernels) {
        let ordinal = trace.devices.get(kernel.device.0 as usize).map_or(0, |d| d.ordinal);
        context_device.entry((kernel.process.0, detail.record.context_id)).or_insert(ordinal);
    }
    extras.side.write_tables(conn, trace, &context_device)?;

    let mut process_row =
        conn.prepare("INSERT INTO SHARDSCOPE_CAPTURE_PROCESS VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?;
    let mut env_row = conn.prepare("INSERT INTO SHARDSCOPE_CAPTURE_ENV VALUES (?1, ?2, ?3)")?;
    for (process, extra) in trace.processes.iter().zip(&extras.processes) {
        let command_line =
            format!("[{}]", extra.command_line.iter().map(|a| json_string(a)).collect::<Vec<_>>().join(", "));
        process_row.execute(params![
            process.global_pid as i64,
            process.pid,
            extra.ppid,
            command_line,
            extra.local_rank,
            extra.cupti_version,
            extra.records_dropped as i64,
            extra.buffers_refused as i64,
            extra.records_undecoded as i64,
            extra.clean_exit,
            extra.truncated_bytes as i64,
        ])?;
        for (name, value) in &extra.env {
            env_row.execute(params![process.global_pid as i64, name, value])?;
        }
    }

    let ordinal_of = |uuid: &str| {
        trace.devices.iter().zip(&extras.devices).find(|(_, e)| uuid_text(&e.uuid) == uuid).map(|(d, _)| d.ordinal)
    };
    let mut link_row = conn.prepare("INSERT INTO SHARDSCOPE_GPU_LINKS VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
    for link in &facts.links {
        link_row.execute(params![
            ordinal_of(&link.uuid_a),
            ordinal_of(&link.uuid_b),
            link.uuid_a,
            link.uuid_b,
            link.nvlinks,
            link.kind
        ])?;
    }
    let mut meta_row = conn.prepare("INSERT INTO SHARDSCOPE_CAPTURE_META VALUES (?1, ?2)")?;
    for (name, value) in &facts.meta {
        meta_row.execute(params![name, value])?;
    }
    let mut warning_row = conn.prepare("INSERT INTO SHARDSCOPE_CAPTURE_WARNINGS VALUES (?1, ?2)")?;
    for warning in &trace.warnings {
        warning_row.execute(params![warning.what, warning.count as i64])?;
    }
    Ok(())
}
