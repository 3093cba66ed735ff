//! `analyzer export --format parquet`: the traces of a run as a Parquet dataset (written by
//! [`shardscope_io::parquet`]), plus the report's figures and the matched collective instances as tables of
//! their own, partitioned the same way (by run and rank), so that SQL over the dataset sees what the report says.
//!
//! The module table of `analyzer modules` is the `modules` table (`parquet_modules.rs`).
//!
//! The report tables are derived: reading the dataset back (`analyzer report OUT_DIR`) rebuilds the traces from
//! the trace tables and analyses them again; the figures tables are never read back.

use std::collections::BTreeMap;
use std::path::Path;

use shardscope_io::Error;
use shardscope_io::parquet::{DatasetWriter, WriteStats};
use shardscope_model::{DeviceIdx, Trace};

use crate::output::figure_tables::{self, CategoryRow, FigureRow, InstanceRow, KernelRow, MemoryRow};
pub use crate::output::figure_tables::{
    CATEGORIES, COLLECTIVE_INSTANCES, KERNEL_SUMMARY, MEMORY_FIGURES, RANK_FIGURES,
};
use crate::report::{self, Options, Report};

/// Writes `traces` (the inputs of one run) as run `run` of the dataset at `root`, with the report that `options`
/// give. Returns what was written.
pub fn export(root: &Path, run: &str, traces: &[Trace], options: &Options) -> Result<WriteStats, Error> {
    let options = Options { keep_instances: true, ..options.clone() };
    let report = report::analyze(traces, &options);
    let mut device_ranks: Vec<Vec<Option<u32>>> = traces.iter().map(|t| vec![None; t.devices.len()]).collect();
    for (key, rank, _) in crate::figures::run::assign_ranks(traces) {
        if let Some(slot) = device_ranks.get_mut(key.trace).and_then(|d| d.get_mut(key.device.0 as usize)) {
            *slot = Some(rank);
        }
    }
    let writer = DatasetWriter::create(root, run)?;
    let mut stats = writer.write_traces(traces, &device_ranks)?;
    write_figures(&writer, &report, &mut stats)?;
    write_instances(&writer, &report, traces, &device_ranks, &mut stats)?;
    write_memory_figures(&writer, &report, &mut stats)?;
    crate::output::parquet_modules::write_modules(&writer, traces, &mut stats)?;
    writer.finish()?;
    Ok(stats)
}

fn note(stats: &mut WriteStats, table: &'static str, rows: u64) {
    if rows > 0 {
        stats.files += 1;
        *stats.rows.entry(table).or_default() += rows;
    }
}

fn write_figures(writer: &DatasetWriter, report: &Report, stats: &mut WriteStats) -> Result<(), Error> {
    let mut by_rank: BTreeMap<u32, Vec<FigureRow>> = BTreeMap::new();
    for row in FigureRow::of_report(report) {
        by_rank.entry(row.rank.rank).or_default().push(row);
    }
    let (figures, categories, kernels) =
        (figure_tables::rank_figures(), figure_tables::categories(), figure_tables::kernel_summary());
    for (&rank, rows) in &by_rank {
        let partition = Some(i64::from(rank));
        let written = writer.write_rows(RANK_FIGURES, partition, 0, rows, |rows| figures.dataset_columns(rows))?;
        note(stats, RANK_FIGURES, written);
        let category_rows = CategoryRow::of_figures(rows);
        let written =
            writer.write_rows(CATEGORIES, partition, 0, &category_rows, |rows| categories.dataset_columns(rows))?;
        note(stats, CATEGORIES, written);
        let kernel_rows = KernelRow::of_figures(rows);
        let written =
            writer.write_rows(KERNEL_SUMMARY, partition, 0, &kernel_rows, |rows| kernels.dataset_columns(rows))?;
        note(stats, KERNEL_SUMMARY, written);
    }
    Ok(())
}

/// The report's `memory` section, a row per rank and per (rank, phase), in each rank's partition.
fn write_memory_figures(writer: &DatasetWriter, report: &Report, stats: &mut WriteStats) -> Result<(), Error> {
    let mut by_rank: BTreeMap<u32, Vec<MemoryRow>> = BTreeMap::new();
    for row in MemoryRow::of_report(report) {
        by_rank.entry(row.rank.rank).or_default().push(row);
    }
    let table = figure_tables::memory_figures();
    for (&rank, rows) in &by_rank {
        let written =
            writer.write_rows(MEMORY_FIGURES, Some(i64::from(rank)), 0, rows, |rows| table.dataset_columns(rows))?;
        note(stats, MEMORY_FIGURES, written);
    }
    Ok(())
}

fn write_instances(
    writer: &DatasetWriter,
    report: &Report,
    traces: &[Trace],
    device_ranks: &[Vec<Option<u32>>],
    stats: &mut WriteStats,
) -> Result<(), Error> {
    let mut by_rank: BTreeMap<u32, Vec<InstanceRow>> = BTreeMap::new();
    for (id, instance) in report.instances.iter().enumerate() {
        for (&(trace, kernel), &share) in instance.members.iter().zip(&instance.shares) {
            let Some(kernel) = traces.get(trace).and_then(|t| t.kernels.get(kernel as usize)) else { continue };
            let DeviceIdx(device) = kernel.device;
            let Some(rank) = device_ranks.get(trace).and_then(|d| d.get(device as usize)).copied().flatten() else {
                continue;
            };
            let ordinal = traces[trace].devices.get(device as usize).map_or(0, |d| d.ordinal);
            by_rank.entry(rank).or_default().push(InstanceRow {
                id: id as u32,
                instance,
                rank,
                device: ordinal,
                start_ns: kernel.start_ns,
                end_ns: kernel.end_ns,
                share,
            });
        }
    }
    let table = figure_tables::collective_instances();
    for (&rank, rows) in &by_rank {
        let written = writer
            .write_rows(COLLECTIVE_INSTANCES, Some(i64::from(rank)), 0, rows, |rows| table.dataset_columns(rows))?;
        note(stats, COLLECTIVE_INSTANCES, written);
    }
    Ok(())
}
