//! The report's figures as tables, each defined once: per rank and phase figures, time per op category, the
//! kernel summary, the matched collective instances, and GPU memory per rank and phase.
//!
//! Every column carries its name in the Parquet dataset (`spanNs`, camelCase like the trace tables) and its name in
//! the Python package's tables (`span_ns`, snake_case) side by side, with how its values come from a row. The
//! dataset writer ([`crate::output::parquet_export`]) writes [`TableDef::dataset_columns`], the Python module
//! (`shardscope._native`) hands [`TableDef::python_columns`] to pyarrow; `tests/suite/figure_tables.rs` compares the two
//! schemas. The Python tables keep fewer columns (those the report's JSON does not already carry per rank) and an
//! order of their own, older than this definition: [`TableDef::python_order`].

use arrow_array::ArrayRef;
use shardscope_io::parquet::{
    Column, bools, column, f64s, i64s, opt_f64s, opt_i64s, opt_strs, opt_u32s, opt_u64s, strs, u32s, u64s,
};

use crate::figures::collectives::{Instance, RankShare};
use crate::figures::kernel_summary::KernelSummaryRow;
use crate::llm::steps::{Distribution, Steps};
use crate::report::memory::{Allocation, CudaMemory, FrameworkMemory, RankMemory};
use crate::report::{Figures, RankReport, Report};

/// Per rank and phase: the scalar figures of the report (`phase` null for the whole rank).
pub const RANK_FIGURES: &str = "rank_figures";
/// Per rank and phase: time per op category.
pub const CATEGORIES: &str = "categories";
/// Per rank and phase: the `cuda_gpu_kern_sum` rows.
pub const KERNEL_SUMMARY: &str = "kernel_summary";
/// Per matched collective instance and rank taking part: its wait and transfer.
pub const COLLECTIVE_INSTANCES: &str = "collective_instances";
/// Per rank and phase: GPU memory peaks (the report's `memory` section).
pub const MEMORY_FIGURES: &str = "memory_figures";

/// One column of a figures table.
pub struct ColumnDef<R> {
    /// The column's name in the Parquet dataset.
    pub dataset: &'static str,
    /// Its name in the Python package's table, `None` where that table leaves it out.
    pub python: Option<&'static str>,
    /// Whether values may be null (part of both schemas).
    pub nullable: bool,
    /// The column's values, one per row.
    pub values: fn(&[R]) -> ArrayRef,
}

/// A figures table: its name and columns, in the dataset's order.
pub struct TableDef<R> {
    /// The table's name in the dataset (and the key of `Run.report_tables()` in Python).
    pub name: &'static str,
    /// The columns in the order of the dataset's files.
    pub columns: Vec<ColumnDef<R>>,
    /// The Python names in the order of the Python table's columns.
    pub python_order: &'static [&'static str],
}

impl<R> TableDef<R> {
    /// A table with no columns yet.
    fn new(name: &'static str, python_order: &'static [&'static str]) -> TableDef<R> {
        TableDef { name, columns: Vec::new(), python_order }
    }

    /// Adds a column of the dataset and of Python.
    fn both(
        mut self,
        dataset: &'static str,
        python: &'static str,
        nullable: bool,
        values: fn(&[R]) -> ArrayRef,
    ) -> Self {
        self.columns.push(ColumnDef { dataset, python: Some(python), nullable, values });
        self
    }

    /// Adds a column of the dataset only.
    fn dataset_only(mut self, dataset: &'static str, nullable: bool, values: fn(&[R]) -> ArrayRef) -> Self {
        self.columns.push(ColumnDef { dataset, python: None, nullable, values });
        self
    }

    /// The dataset's columns for `rows`.
    pub fn dataset_columns(&self, rows: &[R]) -> Vec<Column> {
        self.columns.iter().map(|c| column(c.dataset, (c.values)(rows), c.nullable)).collect()
    }

    /// The Python table's columns for `rows`: (Python name, values, nullable), in [`TableDef::python_order`].
    pub fn python_columns(&self, rows: &[R]) -> Vec<(&'static str, ArrayRef, bool)> {
        self.python_order
            .iter()
            .filter_map(|&name| self.columns.iter().find(|c| c.python == Some(name)))
            .map(|c| (c.python.unwrap_or(c.dataset), (c.values)(rows), c.nullable))
            .collect()
    }
}

/// One row of the per rank and phase tables: a rank's whole figures (`phase` `None`) or one phase's.
#[derive(Clone, Copy)]
pub struct FigureRow<'a> {
    /// The rank the figures are of.
    pub rank: &'a RankReport,
    /// The phase, `None` for the whole rank.
    pub phase: Option<&'a str>,
    /// The figures.
    pub figures: &'a Figures,
}

impl<'a> FigureRow<'a> {
    /// Every rank of `report` in its order, each followed by its phases.
    pub fn of_report(report: &'a Report) -> Vec<FigureRow<'a>> {
        report
            .ranks
            .iter()
            .flat_map(|rank| {
                std::iter::once(FigureRow { rank, phase: None, figures: &rank.figures }).chain(
                    rank.phases.iter().map(move |p| FigureRow { rank, phase: Some(&p.name), figures: &p.figures }),
                )
            })
            .collect()
    }

    /// Steps belong to the whole rank: on its row only.
    fn steps(&self) -> Option<&'a Steps> {
        self.rank.steps.as_ref().filter(|_| self.phase.is_none())
    }
}

/// One row of `categories`: the time of one op category on a rank or phase.
pub struct CategoryRow<'a> {
    /// The rank or phase.
    pub of: FigureRow<'a>,
    /// The category's label.
    pub category: &'a str,
    /// Its time.
    pub duration_ns: i64,
}

impl<'a> CategoryRow<'a> {
    /// The categories of every row of `rows`, in order.
    pub fn of_figures(rows: &[FigureRow<'a>]) -> Vec<CategoryRow<'a>> {
        let of_row = |of: &FigureRow<'a>| {
            let of = *of;
            of.figures.categories.iter().map(move |(c, &duration_ns)| CategoryRow { of, category: c, duration_ns })
        };
        rows.iter().flat_map(of_row).collect()
    }
}

/// One row of `kernel_summary`: one kernel name on a rank or phase.
pub struct KernelRow<'a> {
    /// The rank or phase.
    pub of: FigureRow<'a>,
    /// The summary row.
    pub kernel: &'a KernelSummaryRow,
}

impl<'a> KernelRow<'a> {
    /// The kernel summaries of every row of `rows`, in order.
    pub fn of_figures(rows: &[FigureRow<'a>]) -> Vec<KernelRow<'a>> {
        rows.iter().flat_map(|of| of.figures.kernels.iter().map(move |kernel| KernelRow { of: *of, kernel })).collect()
    }
}

/// One row of `collective_instances`: one rank's part in a matched instance.
pub struct InstanceRow<'a> {
    /// The instance's index in the report.
    pub id: u32,
    /// The instance.
    pub instance: &'a Instance,
    /// The rank taking part.
    pub rank: u32,
    /// Its GPU's device ordinal.
    pub device: u32,
    /// The rank's kernel on its trace's clock, as recorded.
    pub start_ns: i64,
    /// The kernel's end.
    pub end_ns: i64,
    /// The rank's wait and transfer.
    pub share: RankShare,
}

/// `rank_figures`.
pub fn rank_figures<'a>() -> TableDef<FigureRow<'a>> {
    let python_order = &[
        "rank",
        "phase",
        "span_ns",
        "gpu_busy_ns",
        "idle_ns",
        "comm_ns",
        "exposed_comm_ns",
        "comm_wait_ns",
        "comm_transfer_ns",
        "comm_comp_overlap_pct",
        "comm_over_busy_pct",
        "exposed_comm_over_span_pct",
        "late_count",
        "kernel_count",
        "memop_count",
        "cuda_graph_count",
    ];
    let table = TableDef::<FigureRow>::new(RANK_FIGURES, python_order)
        .both("rank", "rank", false, |rows| u32s(rows.iter().map(|r| r.rank.rank)))
        .dataset_only("rankRecorded", false, |rows| bools(rows.iter().map(|r| r.rank.rank_recorded)))
        .dataset_only("source", false, |rows| strs(rows.iter().map(|r| r.rank.source.as_str())))
        .dataset_only("deviceId", false, |rows| u32s(rows.iter().map(|r| r.rank.device)))
        .dataset_only("gpuName", false, |rows| strs(rows.iter().map(|r| r.rank.gpu_name.as_str())))
        .dataset_only("pid", true, |rows| opt_u32s(rows.iter().map(|r| r.rank.pid)))
        .both("phase", "phase", true, |rows| opt_strs(rows.iter().map(|r| r.phase)))
        .both("spanNs", "span_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.span_ns)))
        .both("gpuBusyNs", "gpu_busy_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.gpu_busy_ns)))
        .both("idleNs", "idle_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.idle_ns)))
        .both("commNs", "comm_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.comm_ns)))
        .both("exposedCommNs", "exposed_comm_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.exposed_comm_ns)))
        .both("commCompOverlapPct", "comm_comp_overlap_pct", false, |rows| {
            f64s(rows.iter().map(|r| r.figures.comm_comp_overlap_pct))
        })
        .both("commOverBusyPct", "comm_over_busy_pct", false, |rows| {
            f64s(rows.iter().map(|r| r.figures.comm_over_busy_pct))
        })
        .both("exposedCommOverSpanPct", "exposed_comm_over_span_pct", false, |rows| {
            f64s(rows.iter().map(|r| r.figures.exposed_comm_over_span_pct))
        })
        .both("commWaitNs", "comm_wait_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.comm_wait_ns)))
        .both("commTransferNs", "comm_transfer_ns", false, |rows| i64s(rows.iter().map(|r| r.figures.comm_transfer_ns)))
        .both("lateCount", "late_count", false, |rows| u64s(rows.iter().map(|r| r.figures.late_count)))
        .both("kernelCount", "kernel_count", false, |rows| u64s(rows.iter().map(|r| r.figures.kernel_count)))
        .both("memopCount", "memop_count", false, |rows| u64s(rows.iter().map(|r| r.figures.memop_count)))
        .both("cudaGraphCount", "cuda_graph_count", false, |rows| u64s(rows.iter().map(|r| r.figures.cuda_graph_count)))
        .dataset_only("annotationRanges", false, |rows| u64s(rows.iter().map(|r| r.rank.annotation_ranges)));
    with_step_columns(with_distribution_columns(table))
}

/// The durations of the instances a rank or phase counts (null where it counts none).
fn with_distribution_columns(table: TableDef<FigureRow<'_>>) -> TableDef<FigureRow<'_>> {
    fn of(rows: &[FigureRow], pick: fn(&Distribution) -> i64) -> ArrayRef {
        opt_i64s(rows.iter().map(|r| r.figures.instances.as_ref().map(pick)))
    }
    table
        .dataset_only("instanceCount", true, |rows| of(rows, |d| d.count as i64))
        .dataset_only("instanceMinNs", true, |rows| of(rows, |d| d.min_ns))
        .dataset_only("instanceP50Ns", true, |rows| of(rows, |d| d.p50_ns))
        .dataset_only("instanceP90Ns", true, |rows| of(rows, |d| d.p90_ns))
        .dataset_only("instanceP99Ns", true, |rows| of(rows, |d| d.p99_ns))
        .dataset_only("instanceMaxNs", true, |rows| of(rows, |d| d.max_ns))
        .dataset_only("instanceTotalNs", true, |rows| of(rows, |d| d.total_ns))
}

/// The rank's profiler steps, on its whole-rank row only.
fn with_step_columns(table: TableDef<FigureRow<'_>>) -> TableDef<FigureRow<'_>> {
    fn time(rows: &[FigureRow], pick: fn(&Distribution) -> i64) -> ArrayRef {
        opt_i64s(rows.iter().map(|r| r.steps().map(|s| pick(&s.time))))
    }
    fn source(steps: &Steps) -> Option<String> {
        serde_json::to_value(steps.source).ok()?.as_str().map(str::to_string)
    }
    table
        .dataset_only("stepSource", true, |rows| opt_strs(rows.iter().map(|r| r.steps().and_then(source))))
        .dataset_only("stepsFound", true, |rows| opt_u64s(rows.iter().map(|r| r.steps().map(|s| s.found))))
        .dataset_only("stepsSkipped", true, |rows| opt_u64s(rows.iter().map(|r| r.steps().map(|s| s.skipped))))
        .dataset_only("stepMinNs", true, |rows| time(rows, |d| d.min_ns))
        .dataset_only("stepP50Ns", true, |rows| time(rows, |d| d.p50_ns))
        .dataset_only("stepP90Ns", true, |rows| time(rows, |d| d.p90_ns))
        .dataset_only("stepP99Ns", true, |rows| time(rows, |d| d.p99_ns))
        .dataset_only("stepMaxNs", true, |rows| time(rows, |d| d.max_ns))
        .dataset_only("stepTotalNs", true, |rows| time(rows, |d| d.total_ns))
}

/// `categories`.
pub fn categories<'a>() -> TableDef<CategoryRow<'a>> {
    TableDef::<CategoryRow>::new(CATEGORIES, &["rank", "phase", "category", "duration_ns"])
        .both("rank", "rank", false, |rows| u32s(rows.iter().map(|r| r.of.rank.rank)))
        .both("phase", "phase", true, |rows| opt_strs(rows.iter().map(|r| r.of.phase)))
        .both("category", "category", false, |rows| strs(rows.iter().map(|r| r.category)))
        .both("durationNs", "duration_ns", false, |rows| i64s(rows.iter().map(|r| r.duration_ns)))
}

/// `kernel_summary`.
pub fn kernel_summary<'a>() -> TableDef<KernelRow<'a>> {
    let python_order = &[
        "rank",
        "phase",
        "name",
        "time_pct",
        "total_ns",
        "instances",
        "avg_ns",
        "med_ns",
        "min_ns",
        "max_ns",
        "stddev_ns",
    ];
    TableDef::<KernelRow>::new(KERNEL_SUMMARY, python_order)
        .both("rank", "rank", false, |rows| u32s(rows.iter().map(|r| r.of.rank.rank)))
        .both("phase", "phase", true, |rows| opt_strs(rows.iter().map(|r| r.of.phase)))
        .both("name", "name", false, |rows| strs(rows.iter().map(|r| r.kernel.name.as_str())))
        .both("timePct", "time_pct", false, |rows| f64s(rows.iter().map(|r| r.kernel.time_pct)))
        .both("totalNs", "total_ns", false, |rows| i64s(rows.iter().map(|r| r.kernel.total_ns)))
        .both("instances", "instances", false, |rows| u64s(rows.iter().map(|r| r.kernel.instances)))
        .both("avgNs", "avg_ns", false, |rows| f64s(rows.iter().map(|r| r.kernel.avg_ns)))
        .both("medNs", "med_ns", false, |rows| f64s(rows.iter().map(|r| r.kernel.med_ns)))
        .both("minNs", "min_ns", false, |rows| i64s(rows.iter().map(|r| r.kernel.min_ns)))
        .both("maxNs", "max_ns", false, |rows| i64s(rows.iter().map(|r| r.kernel.max_ns)))
        .both("stdDevNs", "stddev_ns", false, |rows| f64s(rows.iter().map(|r| r.kernel.stddev_ns)))
}

/// `collective_instances` (`Run.instances()` in Python).
pub fn collective_instances<'a>() -> TableDef<InstanceRow<'a>> {
    let python_order = &[
        "communicator",
        "op",
        "seq",
        "phase",
        "bytes",
        "nranks",
        "rank",
        "start_ns",
        "end_ns",
        "wait_ns",
        "transfer_ns",
        "late",
        "late_rank",
        "instance_transfer_ns",
        "instance_max_wait_ns",
        "algbw_gbps",
        "busbw_gbps",
    ];
    TableDef::<InstanceRow>::new(COLLECTIVE_INSTANCES, python_order)
        .dataset_only("instanceId", false, |rows| u32s(rows.iter().map(|r| r.id)))
        .both("rank", "rank", false, |rows| u32s(rows.iter().map(|r| r.rank)))
        .dataset_only("deviceId", false, |rows| u32s(rows.iter().map(|r| r.device)))
        .both("communicator", "communicator", false, |rows| strs(rows.iter().map(|r| r.instance.communicator.as_str())))
        .both("op", "op", false, |rows| strs(rows.iter().map(|r| r.instance.op.name())))
        .both("seq", "seq", false, |rows| u64s(rows.iter().map(|r| r.instance.seq)))
        .both("bytes", "bytes", true, |rows| opt_u64s(rows.iter().map(|r| r.instance.bytes)))
        .both("nRanks", "nranks", false, |rows| u32s(rows.iter().map(|r| r.instance.nranks)))
        .both("phase", "phase", true, |rows| opt_strs(rows.iter().map(|r| r.instance.phase.as_deref())))
        .both("start", "start_ns", false, |rows| i64s(rows.iter().map(|r| r.start_ns)))
        .both("end", "end_ns", false, |rows| i64s(rows.iter().map(|r| r.end_ns)))
        .both("waitNs", "wait_ns", false, |rows| i64s(rows.iter().map(|r| r.share.wait_ns)))
        .both("transferNs", "transfer_ns", false, |rows| i64s(rows.iter().map(|r| r.share.transfer_ns)))
        .both("late", "late", false, |rows| bools(rows.iter().map(|r| r.share.late)))
        .both("lateRank", "late_rank", false, |rows| u32s(rows.iter().map(|r| r.instance.late_rank)))
        .both("instanceTransferNs", "instance_transfer_ns", false, |rows| {
            i64s(rows.iter().map(|r| r.instance.transfer_ns))
        })
        .both("instanceMaxWaitNs", "instance_max_wait_ns", false, |rows| {
            i64s(rows.iter().map(|r| r.instance.max_wait_ns))
        })
        .dataset_only("instanceWaitTotalNs", false, |rows| i64s(rows.iter().map(|r| r.instance.wait_total_ns)))
        .both("algbwGbps", "algbw_gbps", true, |rows| opt_f64s(rows.iter().map(|r| r.instance.algbw_gbps)))
        .both("busbwGbps", "busbw_gbps", true, |rows| opt_f64s(rows.iter().map(|r| r.instance.busbw_gbps)))
}

/// One row of `memory_figures`: a rank's memory over the whole trace (`phase` `None`) or in one phase, as the
/// report's `memory` section gives it.
#[derive(Clone, Copy)]
pub struct MemoryRow<'a> {
    /// The rank's memory figures.
    pub rank: &'a RankMemory,
    /// The phase, `None` for the whole rank.
    pub phase: Option<&'a str>,
    /// CUDA-level figures, when the trace has CUDA memory events (in the phase, for a phase).
    pub cuda: Option<&'a CudaMemory>,
    /// Framework allocator figures, when the trace has them.
    pub framework: Option<&'a FrameworkMemory>,
}

impl<'a> MemoryRow<'a> {
    /// Every rank of the report's memory section in its order, each followed by its phases.
    pub fn of_report(report: &'a Report) -> Vec<MemoryRow<'a>> {
        MemoryRow::of_section(&report.memory)
    }

    /// Every rank of a memory section in its order, each followed by its phases.
    pub fn of_section(section: &'a [RankMemory]) -> Vec<MemoryRow<'a>> {
        section
            .iter()
            .flat_map(|rank| {
                let whole =
                    MemoryRow { rank, phase: None, cuda: rank.cuda.as_ref(), framework: rank.framework.as_ref() };
                std::iter::once(whole).chain(rank.phases.iter().map(move |p| MemoryRow {
                    rank,
                    phase: Some(&p.name),
                    cuda: p.cuda.as_ref(),
                    framework: p.framework.as_ref(),
                }))
            })
            .collect()
    }

    /// The largest allocation made (in the phase, for a phase).
    pub fn largest_allocation(&self) -> Option<&'a Allocation> {
        self.cuda.and_then(|c| c.largest_allocations.first())
    }
}

/// `memory_figures`.
pub fn memory_figures<'a>() -> TableDef<MemoryRow<'a>> {
    let python_order = &[
        "rank",
        "device_id",
        "phase",
        "cuda_allocations",
        "cuda_releases",
        "cuda_unmatched_releases",
        "peak_bytes",
        "peak_ns",
        "end_bytes",
        "kernels_at_peak",
        "kernel_at_peak",
        "largest_allocation_bytes",
        "largest_allocation_ns",
        "largest_live_at_peak_bytes",
        "framework_segment_bytes_at_peak",
        "library_bytes_at_peak",
        "unknown_bytes_at_peak",
        "framework_samples",
        "peak_allocated_bytes",
        "peak_allocated_ns",
        "peak_reserved_bytes",
        "peak_reserved_ns",
    ];
    fn cuda_u64(rows: &[MemoryRow], pick: fn(&CudaMemory) -> u64) -> ArrayRef {
        opt_u64s(rows.iter().map(|r| r.cuda.map(pick)))
    }
    fn framework_u64(rows: &[MemoryRow], pick: fn(&FrameworkMemory) -> u64) -> ArrayRef {
        opt_u64s(rows.iter().map(|r| r.framework.map(pick)))
    }
    TableDef::<MemoryRow>::new(MEMORY_FIGURES, python_order)
        .both("rank", "rank", false, |rows| u32s(rows.iter().map(|r| r.rank.rank)))
        .both("deviceId", "device_id", false, |rows| u32s(rows.iter().map(|r| r.rank.device)))
        .both("phase", "phase", true, |rows| opt_strs(rows.iter().map(|r| r.phase)))
        .both("cudaAllocations", "cuda_allocations", true, |rows| cuda_u64(rows, |c| c.allocations))
        .both("cudaReleases", "cuda_releases", true, |rows| cuda_u64(rows, |c| c.releases))
        .both("cudaUnmatchedReleases", "cuda_unmatched_releases", true, |rows| cuda_u64(rows, |c| c.unmatched_releases))
        .both("peakBytes", "peak_bytes", true, |rows| cuda_u64(rows, |c| c.peak_bytes))
        .both("peakNs", "peak_ns", true, |rows| opt_i64s(rows.iter().map(|r| r.cuda.map(|c| c.peak_ns))))
        .both("endBytes", "end_bytes", true, |rows| cuda_u64(rows, |c| c.end_bytes))
        .both("kernelsAtPeak", "kernels_at_peak", true, |rows| cuda_u64(rows, |c| c.kernels_at_peak.len() as u64))
        .both("kernelAtPeak", "kernel_at_peak", true, |rows| {
            opt_strs(rows.iter().map(|r| r.cuda.and_then(|c| c.kernels_at_peak.first())))
        })
        .both("largestAllocationBytes", "largest_allocation_bytes", true, |rows| {
            opt_u64s(rows.iter().map(|r| r.largest_allocation().map(|a| a.bytes)))
        })
        .both("largestAllocationNs", "largest_allocation_ns", true, |rows| {
            opt_i64s(rows.iter().map(|r| r.largest_allocation().map(|a| a.time_ns)))
        })
        .both("largestLiveAtPeakBytes", "largest_live_at_peak_bytes", true, |rows| {
            opt_u64s(rows.iter().map(|r| r.cuda.and_then(|c| c.live_at_peak.first()).map(|a| a.bytes)))
        })
        .both("frameworkSegmentBytesAtPeak", "framework_segment_bytes_at_peak", true, |rows| {
            cuda_u64(rows, |c| c.peak_by_origin.framework_segment_bytes)
        })
        .both("libraryBytesAtPeak", "library_bytes_at_peak", true, |rows| {
            cuda_u64(rows, |c| c.peak_by_origin.library_bytes)
        })
        .both("unknownBytesAtPeak", "unknown_bytes_at_peak", true, |rows| {
            cuda_u64(rows, |c| c.peak_by_origin.unknown_bytes)
        })
        .both("frameworkSamples", "framework_samples", true, |rows| framework_u64(rows, |f| f.samples))
        .both("peakAllocatedBytes", "peak_allocated_bytes", true, |rows| {
            framework_u64(rows, |f| f.peak_allocated_bytes)
        })
        .both("peakAllocatedNs", "peak_allocated_ns", true, |rows| {
            opt_i64s(rows.iter().map(|r| r.framework.map(|f| f.peak_allocated_ns)))
        })
        .both("peakReservedBytes", "peak_reserved_bytes", true, |rows| framework_u64(rows, |f| f.peak_reserved_bytes))
        .both("peakReservedNs", "peak_reserved_ns", true, |rows| {
            opt_i64s(rows.iter().map(|r| r.framework.map(|f| f.peak_reserved_ns)))
        })
}
