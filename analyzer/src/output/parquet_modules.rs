//! The module table of `analyzer modules` (GPU time, kernels, calls and allocator figures per module path, rank
//! and phase) as the `modules` table of a Parquet dataset, partitioned by run and rank like the report's tables.
//! Written with the built-in phase pattern and no folding (innermost modules, as `analyzer modules` without
//! options); a run without module ranges gets no such table. Like the other figures tables it is never read back.

use std::collections::BTreeMap;

use regex::Regex;
use shardscope_io::Error;
use shardscope_io::parquet::{
    Column, DatasetWriter, WriteStats, column, f64s, i64s, opt_f64s, opt_i64s, opt_u32s, opt_u64s, strs, u32s, u64s,
};
use shardscope_model::Trace;

use crate::llm::modules::{self, MemoryFigures, ModuleOptions, ModuleRow, NO_MODULE};
use crate::llm::phases::DEFAULT_PHASE_PATTERN;

/// Per rank, phase and module path: the figures of `analyzer modules`.
pub const MODULES: &str = "modules";

/// One row: a module path of one phase on one rank.
struct Row<'a> {
    rank: u32,
    phase: &'a str,
    phase_instances: u64,
    module: &'a ModuleRow,
}

/// Writes the module table of `traces` (one run) to `writer`, one file per rank, and counts it in `stats`.
pub fn write_modules(writer: &DatasetWriter, traces: &[Trace], stats: &mut WriteStats) -> Result<(), Error> {
    let phase_pattern = Regex::new(DEFAULT_PHASE_PATTERN).expect("the built-in phase pattern compiles");
    let report = modules::module_report(
        traces,
        &ModuleOptions { depth: None, phase_pattern, window_ns: None, skip_steps: None },
    );
    let mut by_rank: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
    for rank in &report.ranks {
        let rows = by_rank.entry(rank.rank).or_default();
        for phase in &rank.phases {
            let phase_rows = phase.rows.iter().map(|module| Row {
                rank: rank.rank,
                phase: &phase.phase,
                phase_instances: phase.instances,
                module,
            });
            rows.extend(phase_rows);
        }
    }
    // Kernels outside every module range are the only rows of a trace without module ranges: nothing to write.
    if by_rank.values().flatten().all(|row| row.module.path == NO_MODULE) {
        return Ok(());
    }
    for (&rank, rows) in &by_rank {
        let written = writer.write_rows(MODULES, Some(i64::from(rank)), 0, rows, module_columns)?;
        if written > 0 {
            stats.files += 1;
            *stats.rows.entry(MODULES).or_default() += written;
        }
    }
    Ok(())
}

/// The columns of the `modules` table (names as the dataset's other tables spell them).
fn module_columns(rows: &[Row]) -> Vec<Column> {
    let memory = |pick: fn(&MemoryFigures) -> i64| opt_i64s(rows.iter().map(|r| r.module.memory.as_ref().map(pick)));
    vec![
        column("rank", u32s(rows.iter().map(|r| r.rank)), false),
        column("phase", strs(rows.iter().map(|r| r.phase)), false),
        column("phaseInstances", u64s(rows.iter().map(|r| r.phase_instances)), false),
        column("path", strs(rows.iter().map(|r| r.module.path.as_str())), false),
        column("class", strs(rows.iter().map(|r| r.module.class.as_str())), false),
        column("layer", opt_u32s(rows.iter().map(|r| r.module.layer)), true),
        column("withinLayer", strs(rows.iter().map(|r| r.module.within_layer.as_str())), false),
        column("gpuNs", i64s(rows.iter().map(|r| r.module.gpu_ns)), false),
        column("share", f64s(rows.iter().map(|r| r.module.share)), false),
        column("kernels", u64s(rows.iter().map(|r| r.module.kernels)), false),
        column("graphKernels", u64s(rows.iter().map(|r| r.module.graph_kernels)), false),
        column("calls", u64s(rows.iter().map(|r| r.module.calls)), false),
        column("perStepNs", f64s(rows.iter().map(|r| r.module.per_step_ns)), false),
        column(
            "memoryCallsMeasured",
            opt_u64s(rows.iter().map(|r| r.module.memory.as_ref().map(|m| m.calls_measured))),
            true,
        ),
        column(
            "allocatedDeltaMeanBytes",
            opt_f64s(rows.iter().map(|r| r.module.memory.as_ref().map(|m| m.allocated_delta_mean_bytes))),
            true,
        ),
        column("allocatedDeltaMaxBytes", memory(|m| m.allocated_delta_max_bytes), true),
        column("peakAboveEntryMaxBytes", memory(|m| m.peak_above_entry_max_bytes), true),
        column("reservedDeltaMaxBytes", memory(|m| m.reserved_delta_max_bytes), true),
    ]
}
