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
use shardscope_io::parquet::{
    DatasetWriter, WriteStats, bools, column, f64s, i64s, opt_f64s, opt_i64s, opt_strs, opt_u32s, opt_u64s, strs, u32s,
    u64s,
};
use shardscope_model::{DeviceIdx, Trace};

use crate::report::{self, Figures, Options, Report};

/// Per rank and phase: the scalar figures of the report (`phase` null for the whole rank).
pub const RANK_FIGURES: &str = "rank_figures";
/// Per rank and phase: time per op category.
pub const CATEGORIES: &str = "categories";
/// Per rank and phase: the `cuda_gpu_kern_sum` rows.
pub const KERNEL_SUMMARY: &str = "kernel_summary";
/// Per matched collective instance and rank taking part: its wait and transfer.
pub const COLLECTIVE_INSTANCES: &str = "collective_instances";

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
    crate::output::parquet_modules::write_modules(&writer, traces, &mut stats)?;
    writer.finish()?;
    Ok(stats)
}

/// One row of the figures tables: a rank's whole figures or one phase's.
struct FigureRow<'a> {
    rank: &'a report::RankReport,
    phase: Option<&'a str>,
    figures: &'a Figures,
}

fn note(stats: &mut WriteStats, table: &'static str, rows: u64) {
    if rows > 0 {
        stats.files += 1;
        *stats.rows.entry(table).or_default() += rows;
    }
}

fn write_figures(writer: &DatasetWriter, report: &Report, stats: &mut WriteStats) -> Result<(), Error> {
    let mut by_rank: BTreeMap<u32, Vec<FigureRow>> = BTreeMap::new();
    for rank in &report.ranks {
        let rows = by_rank.entry(rank.rank).or_default();
        rows.push(FigureRow { rank, phase: None, figures: &rank.figures });
        rows.extend(rank.phases.iter().map(|p| FigureRow { rank, phase: Some(&p.name), figures: &p.figures }));
    }
    for (&rank, rows) in &by_rank {
        let written = writer.write_rows(RANK_FIGURES, Some(i64::from(rank)), 0, rows, figure_columns)?;
        note(stats, RANK_FIGURES, written);

        let categories: Vec<(&FigureRow, &str, i64)> =
            rows.iter().flat_map(|r| r.figures.categories.iter().map(move |(c, &ns)| (r, c.as_str(), ns))).collect();
        let written = writer.write_rows(CATEGORIES, Some(i64::from(rank)), 0, &categories, |rows| {
            vec![
                column("rank", u32s(rows.iter().map(|r| r.0.rank.rank)), false),
                column("phase", opt_strs(rows.iter().map(|r| r.0.phase)), true),
                column("category", strs(rows.iter().map(|r| r.1)), false),
                column("durationNs", i64s(rows.iter().map(|r| r.2)), false),
            ]
        })?;
        note(stats, CATEGORIES, written);

        let kernels: Vec<(&FigureRow, &crate::figures::kernel_summary::KernelSummaryRow)> =
            rows.iter().flat_map(|r| r.figures.kernels.iter().map(move |k| (r, k))).collect();
        let written = writer.write_rows(KERNEL_SUMMARY, Some(i64::from(rank)), 0, &kernels, |rows| {
            vec![
                column("rank", u32s(rows.iter().map(|r| r.0.rank.rank)), false),
                column("phase", opt_strs(rows.iter().map(|r| r.0.phase)), true),
                column("name", strs(rows.iter().map(|r| r.1.name.as_str())), false),
                column("timePct", f64s(rows.iter().map(|r| r.1.time_pct)), false),
                column("totalNs", i64s(rows.iter().map(|r| r.1.total_ns)), false),
                column("instances", u64s(rows.iter().map(|r| r.1.instances)), false),
                column("avgNs", f64s(rows.iter().map(|r| r.1.avg_ns)), false),
                column("medNs", f64s(rows.iter().map(|r| r.1.med_ns)), false),
                column("minNs", i64s(rows.iter().map(|r| r.1.min_ns)), false),
                column("maxNs", i64s(rows.iter().map(|r| r.1.max_ns)), false),
                column("stdDevNs", f64s(rows.iter().map(|r| r.1.stddev_ns)), false),
            ]
        })?;
        note(stats, KERNEL_SUMMARY, written);
    }
    Ok(())
}

fn figure_columns(rows: &[FigureRow]) -> Vec<shardscope_io::parquet::Column> {
    let f = |pick: fn(&Figures) -> i64| i64s(rows.iter().map(|r| pick(r.figures)));
    let pct = |pick: fn(&Figures) -> f64| f64s(rows.iter().map(|r| pick(r.figures)));
    let count = |pick: fn(&Figures) -> u64| u64s(rows.iter().map(|r| pick(r.figures)));
    let instances = |pick: fn(&crate::llm::steps::Distribution) -> i64| {
        opt_i64s(rows.iter().map(|r| r.figures.instances.as_ref().map(pick)))
    };
    // Steps belong to the whole rank: on its row only.
    fn steps<'r>(r: &FigureRow<'r>) -> Option<&'r crate::llm::steps::Steps> {
        r.rank.steps.as_ref().filter(|_| r.phase.is_none())
    }
    let step_time = |pick: fn(&crate::llm::steps::Distribution) -> i64| {
        opt_i64s(rows.iter().map(|r| steps(r).map(|s| pick(&s.time))))
    };
    let step_source: Vec<Option<String>> = rows
        .iter()
        .map(|r| steps(r).and_then(|s| serde_json::to_value(s.source).ok()?.as_str().map(str::to_string)))
        .collect();
    vec![
        column("rank", u32s(rows.iter().map(|r| r.rank.rank)), false),
        column("rankRecorded", bools(rows.iter().map(|r| r.rank.rank_recorded)), false),
        column("source", strs(rows.iter().map(|r| r.rank.source.as_str())), false),
        column("deviceId", u32s(rows.iter().map(|r| r.rank.device)), false),
        column("gpuName", strs(rows.iter().map(|r| r.rank.gpu_name.as_str())), false),
        column("pid", opt_u32s(rows.iter().map(|r| r.rank.pid)), true),
        column("phase", opt_strs(rows.iter().map(|r| r.phase)), true),
        column("spanNs", f(|f| f.span_ns), false),
        column("gpuBusyNs", f(|f| f.gpu_busy_ns), false),
        column("idleNs", f(|f| f.idle_ns), false),
        column("commNs", f(|f| f.comm_ns), false),
        column("exposedCommNs", f(|f| f.exposed_comm_ns), false),
        column("commCompOverlapPct", pct(|f| f.comm_comp_overlap_pct), false),
        column("commOverBusyPct", pct(|f| f.comm_over_busy_pct), false),
        column("exposedCommOverSpanPct", pct(|f| f.exposed_comm_over_span_pct), false),
        column("commWaitNs", f(|f| f.comm_wait_ns), false),
        column("commTransferNs", f(|f| f.comm_transfer_ns), false),
        column("lateCount", count(|f| f.late_count), false),
        column("kernelCount", count(|f| f.kernel_count), false),
        column("memopCount", count(|f| f.memop_count), false),
        column("cudaGraphCount", count(|f| f.cuda_graph_count), false),
        column("annotationRanges", u64s(rows.iter().map(|r| r.rank.annotation_ranges)), false),
        column(
            "instanceCount",
            opt_i64s(rows.iter().map(|r| r.figures.instances.as_ref().map(|d| d.count as i64))),
            true,
        ),
        column("instanceMinNs", instances(|d| d.min_ns), true),
        column("instanceP50Ns", instances(|d| d.p50_ns), true),
        column("instanceP90Ns", instances(|d| d.p90_ns), true),
        column("instanceP99Ns", instances(|d| d.p99_ns), true),
        column("instanceMaxNs", instances(|d| d.max_ns), true),
        column("instanceTotalNs", instances(|d| d.total_ns), true),
        column("stepSource", opt_strs(step_source.iter().map(|s| s.as_deref())), true),
        column("stepsFound", opt_u64s(rows.iter().map(|r| steps(r).map(|s| s.found))), true),
        column("stepsSkipped", opt_u64s(rows.iter().map(|r| steps(r).map(|s| s.skipped))), true),
        column("stepMinNs", step_time(|d| d.min_ns), true),
        column("stepP50Ns", step_time(|d| d.p50_ns), true),
        column("stepP90Ns", step_time(|d| d.p90_ns), true),
        column("stepP99Ns", step_time(|d| d.p99_ns), true),
        column("stepMaxNs", step_time(|d| d.max_ns), true),
        column("stepTotalNs", step_time(|d| d.total_ns), true),
    ]
}

/// One rank's part in a matched instance.
struct InstanceRow<'a> {
    id: u32,
    instance: &'a crate::figures::collectives::Instance,
    rank: u32,
    device: u32,
    start_ns: i64,
    end_ns: i64,
    share: crate::figures::collectives::RankShare,
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
    for (&rank, rows) in &by_rank {
        let written = writer.write_rows(COLLECTIVE_INSTANCES, Some(i64::from(rank)), 0, rows, |rows| {
            fn i<'r>(r: &InstanceRow<'r>) -> &'r crate::figures::collectives::Instance {
                r.instance
            }
            vec![
                column("instanceId", u32s(rows.iter().map(|r| r.id)), false),
                column("rank", u32s(rows.iter().map(|r| r.rank)), false),
                column("deviceId", u32s(rows.iter().map(|r| r.device)), false),
                column("communicator", strs(rows.iter().map(|r| i(r).communicator.as_str())), false),
                column("op", strs(rows.iter().map(|r| i(r).op.name())), false),
                column("seq", u64s(rows.iter().map(|r| i(r).seq)), false),
                column("bytes", opt_u64s(rows.iter().map(|r| i(r).bytes)), true),
                column("nRanks", u32s(rows.iter().map(|r| i(r).nranks)), false),
                column("phase", opt_strs(rows.iter().map(|r| i(r).phase.as_deref())), true),
                column("start", i64s(rows.iter().map(|r| r.start_ns)), false),
                column("end", i64s(rows.iter().map(|r| r.end_ns)), false),
                column("waitNs", i64s(rows.iter().map(|r| r.share.wait_ns)), false),
                column("transferNs", i64s(rows.iter().map(|r| r.share.transfer_ns)), false),
                column("late", bools(rows.iter().map(|r| r.share.late)), false),
                column("lateRank", u32s(rows.iter().map(|r| i(r).late_rank)), false),
                column("instanceTransferNs", i64s(rows.iter().map(|r| i(r).transfer_ns)), false),
                column("instanceMaxWaitNs", i64s(rows.iter().map(|r| i(r).max_wait_ns)), false),
                column("instanceWaitTotalNs", i64s(rows.iter().map(|r| i(r).wait_total_ns)), false),
                column("algbwGbps", opt_f64s(rows.iter().map(|r| i(r).algbw_gbps)), true),
                column("busbwGbps", opt_f64s(rows.iter().map(|r| i(r).busbw_gbps)), true),
            ]
        })?;
        note(stats, COLLECTIVE_INSTANCES, written);
    }
    Ok(())
}
