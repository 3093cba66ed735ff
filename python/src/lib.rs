//! `shardscope._native`: the analyzer as a Python extension module.
//!
//! Everything here calls `shardscope-io` and `shardscope-analyzer`; nothing is analysed in Python. Tables cross
//! into Python as Arrow record batches through the Arrow C data interface (`arrow-pyarrow`): pyarrow takes the
//! buffers over without copying, and pandas and polars read the pyarrow tables. The report crosses as the JSON
//! text `analyzer report --format json` prints. For Dask, the report in parts (`report::partial`) crosses as
//! bytes (JSON), so that a part made on one worker can be merged on another.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_pyarrow::{IntoPyArrow, Table};
use arrow_schema::{Field, Schema};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};
use regex::Regex;
use serde_json::Value;
use shardscope_analyzer::figures::bench_peaks::BenchPeaks;
use shardscope_analyzer::figures::categories::{self, Classifier};
use shardscope_analyzer::figures::run::{self, RunIdentity};
use shardscope_analyzer::findings::{self, rules::FindingsRules};
use shardscope_analyzer::output::figure_tables::{self, CategoryRow, FigureRow, InstanceRow, KernelRow, MemoryRow};
use shardscope_analyzer::report::partial::{
    self, FinishedTrace, KeyedRow, MatchedInstance, RankEntry, TracePart, TraceTallies,
};
use shardscope_analyzer::report::{self, Options, Report};
use shardscope_analyzer::{dependency::critical_path, dependency::whatif, figures::hta, output::render};
use shardscope_io::parquet::{f64s, i64s, opt_f64s, opt_i64s, opt_strs, opt_u32s, opt_u64s, strs, u32s, u64s};
use shardscope_model::{DeviceIdx, Trace};

mod commands;
mod memory;

create_exception!(
    _native,
    ShardscopeError,
    PyValueError,
    "An input shardscope cannot use: one line naming it and why."
);

fn fail(message: impl std::fmt::Display) -> PyErr {
    ShardscopeError::new_err(message.to_string())
}

/// The analysis options, from the JSON object the Python side builds (the names of `analyzer report`'s flags).
fn options_from_json(text: &str) -> PyResult<Options> {
    let value: Value = serde_json::from_str(text).map_err(|e| fail(format!("options: {e}")))?;
    let text_of = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let pattern = |key: &str| -> PyResult<Option<Regex>> {
        text_of(key)
            .map(|p| Regex::new(&p).map_err(|e| fail(format!("{key}: {}", e.to_string().lines().last().unwrap_or("")))))
            .transpose()
    };
    let mut options = Options::default();
    if let Some(path) = text_of("rules") {
        options.classifier = Classifier::load(Path::new(&path)).map_err(fail)?;
    }
    if let Some(p) = pattern("phase_pattern")? {
        options.phase_pattern = p;
    }
    if let Some(p) = pattern("step_pattern")? {
        options.step_pattern = p;
    }
    if let Some(window) = value.get("window_ns").and_then(Value::as_array) {
        match (window.first().and_then(Value::as_i64), window.get(1).and_then(Value::as_i64)) {
            (Some(start), Some(end)) if start < end => options.window_ns = Some((start, end)),
            _ => return Err(fail("window_ns: two integers, start before end")),
        }
    }
    if let Some(n) = value.get("skip_steps").and_then(Value::as_u64) {
        // As `--skip-steps N`: given, it replaces the detected warm-up (0: nothing is left out).
        options.skip_steps = n as usize;
        options.detect_warmup = false;
    }
    if value.get("hta_include_last_step").and_then(Value::as_bool) == Some(true) {
        options.hta_step_mode = hta::StepMode::IncludeLastStep;
    }
    if let Some(path) = text_of("bench") {
        options.bench_peaks = Some(BenchPeaks::load(Path::new(&path)).map_err(fail)?);
    }
    options.allow_mixed = value.get("allow_mixed").and_then(Value::as_bool) == Some(true);
    options.keep_instances = value.get("keep_instances").and_then(Value::as_bool) == Some(true);
    Ok(options)
}

/// Loads every path as `analyzer` does: a file, a folder of per-rank files, or a Parquet dataset.
fn load_paths(paths: &[PathBuf]) -> PyResult<Vec<Trace>> {
    let mut traces = Vec::new();
    for path in paths {
        traces.extend(shardscope_io::load(path).map_err(|e| fail(one_line(&e)))?);
    }
    Ok(traces)
}

fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    shardscope_io::error_text::causes(std::iter::successors(Some(error), |e| e.source()))
}

/// The traces of one run, loaded and analysed; tables and the report are taken from it.
#[pyclass(module = "shardscope._native")]
struct Run {
    traces: Vec<Trace>,
    options: Options,
    /// The report with every matched instance kept (the printed report leaves them out, as the CLI does).
    report: Report,
    /// Rank of each GPU with work: (trace index, device) → rank.
    ranks: HashMap<(usize, DeviceIdx), u32>,
}

/// Loads the traces of one run and analyses them (`options`: JSON, see `shardscope.Options`).
#[pyfunction]
fn load(py: Python<'_>, paths: Vec<PathBuf>, options: &str) -> PyResult<Run> {
    let options = options_from_json(options)?;
    py.detach(|| {
        if paths.is_empty() {
            return Err(fail("no inputs"));
        }
        let traces = load_paths(&paths)?;
        if traces.iter().all(|t| t.kernels.is_empty() && t.memops.is_empty() && t.graph_launches.is_empty()) {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            return Err(fail(format!("{}: no GPU kernels or memory operations in the input", names.join(", "))));
        }
        let identities: Vec<RunIdentity> = traces.iter().map(RunIdentity::of).collect();
        if !options.allow_mixed
            && let Some(why) = run::mixed_runs(&identities)
        {
            return Err(fail(format!("inputs are not one run: {why} (allow_mixed=True analyses them together)")));
        }
        let report = report::analyze(&traces, &Options { keep_instances: true, ..options.clone() });
        let ranks = shardscope_analyzer::figures::run::assign_ranks(&traces)
            .into_iter()
            .map(|(key, rank, _)| ((key.trace, key.device), rank))
            .collect();
        Ok(Run { traces, options, report, ranks })
    })
}

/// Builds a pyarrow table from named columns (`nullable` per column).
fn table(py: Python<'_>, columns: Vec<(&str, ArrayRef, bool)>) -> PyResult<Py<PyAny>> {
    let fields: Vec<Field> =
        columns.iter().map(|(name, array, nullable)| Field::new(*name, array.data_type().clone(), *nullable)).collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|(_, array, _)| array).collect())
        .map_err(|e| fail(format!("building a table: {e}")))?;
    let table = Table::try_new(vec![batch], schema).map_err(|e| fail(format!("building a table: {e}")))?;
    Ok(table.into_pyarrow(py)?.unbind())
}

#[pymethods]
impl Run {
    /// The report as `analyzer report --format json` prints it (without the trailing newline).
    fn report_json(&self, py: Python<'_>) -> String {
        py.detach(|| {
            let printed = Report {
                instances: if self.options.keep_instances { self.report.instances.clone() } else { Vec::new() },
                ..self.report.clone()
            };
            // The findings first, as `analyzer report` prints them.
            let rules = FindingsRules::builtin();
            let found =
                findings::findings(&self.traces, &printed, &self.options, self.options.bench_peaks.as_ref(), &rules);
            findings::report_json(found.ok().as_ref(), &printed).unwrap_or_else(|_| render::json(&printed))
        })
    }

    /// `analyzer findings`: what limits the run, ranked by the time removing each cause saves, as the JSON the CLI
    /// prints. `rules` names a findings rules file, as `--findings-rules`.
    #[pyo3(signature = (rules=None))]
    fn findings(&self, py: Python<'_>, rules: Option<PathBuf>) -> PyResult<String> {
        let rules = rules
            .map(|path| FindingsRules::load(&path))
            .transpose()
            .map_err(fail)?
            .unwrap_or_else(FindingsRules::builtin);
        py.detach(|| {
            let bench = self.options.bench_peaks.as_ref();
            let found = findings::findings(&self.traces, &self.report, &self.options, bench, &rules).map_err(fail)?;
            serde_json::to_string_pretty(&found).map_err(fail)
        })
    }

    /// The input files, one per trace.
    fn inputs(&self) -> Vec<String> {
        self.traces.iter().map(|t| t.source.path.clone()).collect()
    }

    /// Every kernel of every rank: times in ns on the trace's clock, names, op category as the report labels it.
    fn kernels(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let (mut rank, mut source, mut device, mut stream, mut start, mut end, mut name, mut short, mut category) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut correlation = vec![];
        for (index, trace) in self.traces.iter().enumerate() {
            let classes = self.options.classifier.classify_names(&trace.names);
            for kernel in &trace.kernels {
                rank.push(self.ranks.get(&(index, kernel.device)).copied());
                source.push(trace.source.path.as_str());
                device.push(trace.devices.get(kernel.device.0 as usize).map_or(kernel.device.0, |d| d.ordinal));
                stream.push(kernel.stream);
                start.push(kernel.start_ns);
                end.push(kernel.end_ns);
                name.push(trace.names.get(kernel.name));
                short.push(trace.names.get(kernel.short_name));
                correlation.push(kernel.correlation_id);
                let collective = kernel.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op);
                let class = Classifier::lookup(&classes, kernel.name);
                category.push(categories::report_label(&self.options.classifier, class, collective));
            }
        }
        let duration: Vec<i64> = start.iter().zip(&end).map(|(s, e)| e - s).collect();
        table(
            py,
            vec![
                ("rank", opt_u32s(rank), true),
                ("source", strs(source), false),
                ("device", u32s(device), false),
                ("stream", u32s(stream), false),
                ("start_ns", i64s(start), false),
                ("end_ns", i64s(end), false),
                ("duration_ns", i64s(duration), false),
                ("name", strs(name), false),
                ("short_name", strs(short), false),
                ("category", strs(category), false),
                ("correlation_id", u32s(correlation), false),
            ],
        )
    }

    /// Every memory event of every rank: CUDA-level allocations and releases with the device's level after each,
    /// and the framework allocator's samples (see `docs/memory.md`).
    fn memory(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        memory::memory_table(py, &self.traces, &self.ranks)
    }

    /// Every collective operation the traces record (NCCL profiler plugin, Kineto's collective records), with the
    /// kernel that ran it where known.
    fn collectives(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut rows = Vec::new();
        for (index, trace) in self.traces.iter().enumerate() {
            for collective in &trace.collectives {
                let kernel = collective.kernel.and_then(|k| trace.kernels.get(k as usize));
                rows.push((
                    kernel.and_then(|k| self.ranks.get(&(index, k.device)).copied()),
                    trace.source.path.clone(),
                    collective.op.name().to_string(),
                    collective.communicator.map(|c| format!("{c:#x}")),
                    trace.names.get(collective.group_name).to_string(),
                    collective.seq,
                    collective.bytes,
                    collective.group_size,
                    kernel.map(|k| k.start_ns),
                    kernel.map(|k| k.end_ns),
                ));
            }
        }
        table(
            py,
            vec![
                ("rank", opt_u32s(rows.iter().map(|r| r.0)), true),
                ("source", strs(rows.iter().map(|r| r.1.as_str())), false),
                ("op", strs(rows.iter().map(|r| r.2.as_str())), false),
                ("communicator", opt_strs(rows.iter().map(|r| r.3.as_deref())), true),
                ("group_name", strs(rows.iter().map(|r| r.4.as_str())), false),
                ("seq", opt_u64s(rows.iter().map(|r| r.5)), true),
                ("bytes", opt_u64s(rows.iter().map(|r| r.6)), true),
                ("group_size", opt_u32s(rows.iter().map(|r| r.7)), true),
                ("kernel_start_ns", opt_i64s(rows.iter().map(|r| r.8)), true),
                ("kernel_end_ns", opt_i64s(rows.iter().map(|r| r.9)), true),
            ],
        )
    }

    /// Every collective instance matched across ranks, one row per rank taking part: its wait for the last rank
    /// and its transfer, with the instance's figures.
    fn instances(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut rows = Vec::new();
        for (id, instance) in self.report.instances.iter().enumerate() {
            for (&(trace, kernel), &share) in instance.members.iter().zip(&instance.shares) {
                let recorded = &self.traces[trace].kernels[kernel as usize];
                let device = recorded.device;
                rows.push(InstanceRow {
                    id: id as u32,
                    instance,
                    rank: self.ranks.get(&(trace, device)).copied().unwrap_or_default(),
                    device: self.traces[trace].devices.get(device.0 as usize).map_or(device.0, |d| d.ordinal),
                    start_ns: recorded.start_ns,
                    end_ns: recorded.end_ns,
                    share,
                });
            }
        }
        table(py, figure_tables::collective_instances().python_columns(&rows))
    }

    /// The report's tables: `rank_figures` (per rank, and per rank and phase), `categories`, `kernel_summary`,
    /// `memory_figures` (the `memory` section, per rank and phase; no rows without memory events) and
    /// `collective_groups`.
    fn report_tables<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = &self.report;
        let rows = FigureRow::of_report(report);
        let out = PyDict::new(py);
        let figures = figure_tables::rank_figures();
        out.set_item(figures.name, table(py, figures.python_columns(&rows))?)?;
        let categories = figure_tables::categories();
        out.set_item(categories.name, table(py, categories.python_columns(&CategoryRow::of_figures(&rows)))?)?;
        let kernels = figure_tables::kernel_summary();
        out.set_item(kernels.name, table(py, kernels.python_columns(&KernelRow::of_figures(&rows)))?)?;
        let memory = figure_tables::memory_figures();
        out.set_item(memory.name, table(py, memory.python_columns(&MemoryRow::of_section(&report.memory)))?)?;
        let groups = &report.collectives.groups;
        out.set_item(
            "collective_groups",
            table(
                py,
                vec![
                    ("communicator", strs(groups.iter().map(|g| g.communicator.as_str())), false),
                    ("op", strs(groups.iter().map(|g| g.op.name())), false),
                    ("size_bucket", strs(groups.iter().map(|g| g.size_bucket)), false),
                    ("phase", strs(groups.iter().map(|g| g.phase.as_str())), false),
                    ("count", u64s(groups.iter().map(|g| g.count)), false),
                    ("bytes", u64s(groups.iter().map(|g| g.bytes)), false),
                    ("transfer_total_ns", i64s(groups.iter().map(|g| g.transfer_total_ns)), false),
                    ("transfer_median_ns", i64s(groups.iter().map(|g| g.transfer_median_ns)), false),
                    ("wait_total_ns", i64s(groups.iter().map(|g| g.wait_total_ns)), false),
                    ("wait_median_ns", i64s(groups.iter().map(|g| g.wait_median_ns)), false),
                    ("busbw_median_gbps", opt_f64s(groups.iter().map(|g| g.busbw_median_gbps)), true),
                ],
            )?,
        )?;
        Ok(out)
    }

    /// `analyzer what-if`: the run replayed with changed durations. Returns the JSON the CLI prints and its
    /// tables (`by_category`, `by_rank`, `rank_waits`). `comm_at_peak` names `bench` results, as `--comm-at-peak`.
    #[pyo3(signature = (no_straggler=false, comm_overlapped=false, scales=Vec::new(), step=None, window_ns=None,
                        comm_at_peak=None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one per CLI option.
    fn what_if<'py>(
        &self,
        py: Python<'py>,
        no_straggler: bool,
        comm_overlapped: bool,
        scales: Vec<String>,
        step: Option<usize>,
        window_ns: Option<(i64, i64)>,
        comm_at_peak: Option<String>,
    ) -> PyResult<(String, Bound<'py, PyDict>)> {
        let scales = scales.iter().map(|s| whatif::parse_scale(s)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
        let no_straggler = no_straggler || (!comm_overlapped && scales.is_empty() && comm_at_peak.is_none());
        let bench = comm_at_peak.map(|path| BenchPeaks::load(Path::new(&path))).transpose().map_err(fail)?;
        // As `analyzer what-if`: the model is built with the options' rules and patterns, not its window.
        let options = Options { window_ns: None, keep_instances: false, ..self.options.clone() };
        let result = py.detach(|| {
            // Without a step or window, the steady-state steps, as the CLI.
            let model = if step.is_none() && window_ns.is_none() {
                critical_path::build_steady_model(&self.traces, &options)
            } else {
                critical_path::build_model(&self.traces, &options, window_ns, step)
            }
            .map_err(fail)?;
            whatif::check_scales(&model.graph, &scales).map_err(fail)?;
            let comm_at_peak = bench.map(|bench| whatif::peak_transfers(&model, &bench));
            let scenario = whatif::Scenario { no_straggler, comm_overlapped, scales, comm_at_peak };
            Ok::<_, PyErr>(whatif::what_if(&model, &scenario))
        })?;
        let tables = PyDict::new(py);
        for (key, rows) in [("by_category", &result.by_category), ("by_rank", &result.by_rank)] {
            tables.set_item(
                key,
                table(
                    py,
                    vec![
                        ("name", strs(rows.iter().map(|a| a.name.as_str())), false),
                        ("simulated_ns", i64s(rows.iter().map(|a| a.simulated_ns)), false),
                        ("slowdown", f64s(rows.iter().map(|a| a.slowdown)), false),
                        ("removed_pct", f64s(rows.iter().map(|a| a.removed_pct)), false),
                    ],
                )?,
            )?;
        }
        let waits = &result.rank_waits;
        tables.set_item(
            "rank_waits",
            table(
                py,
                vec![
                    ("rank", u32s(waits.iter().map(|w| w.rank)), false),
                    ("measured_wait_ns", i64s(waits.iter().map(|w| w.measured_wait_ns)), false),
                    ("simulated_wait_ns", i64s(waits.iter().map(|w| w.simulated_wait_ns)), false),
                ],
            )?,
        )?;
        let text = serde_json::to_string_pretty(&result).map_err(fail)?;
        Ok((text, tables))
    }
}

// --- The report in parts, for Dask: bytes in, bytes out. ---
//
// What is one row per communication kernel (a part's kernel rows, a bucket's keyed rows, a bucket's shares) travels
// in postcard, a compact binary serde format: on a job of hundreds of ranks these rows are nearly all of what the
// workers exchange, and as JSON they were most of the time. What holds rank reports (JSON values whose floats must
// survive exactly) stays JSON: a part's header and report, a finished trace. Bytes come in as `PyBackedBytes`, a
// view of the Python object's buffer: extracting them as `Vec<u8>` would convert them one integer at a time.

fn from_bytes<T: serde::de::DeserializeOwned>(data: &[u8], what: &str) -> PyResult<T> {
    serde_json::from_slice(data).map_err(|e| fail(format!("{what}: {e}")))
}

fn to_binary<T: serde::Serialize>(value: &T) -> PyResult<Vec<u8>> {
    postcard::to_stdvec(value).map_err(fail)
}

fn from_binary<T: serde::de::DeserializeOwned>(data: &[u8], what: &str) -> PyResult<T> {
    postcard::from_bytes(data).map_err(|e| fail(format!("{what}: {e}")))
}

/// A part as it travels to the task that finishes its trace: JSON, rank reports included, kernel rows left out (they
/// travel to the buckets as keyed rows, and finishing needs only their tallies).
fn part_from_wire(data: &[u8]) -> PyResult<TracePart> {
    from_bytes(data, "a report part")
}

fn headers_from(data: &[PyBackedBytes]) -> PyResult<Vec<TracePart>> {
    data.iter().map(|d| from_bytes(d, "a part header")).collect()
}

/// What one trace gives the distributed merge: its part without kernel rows (see [`part_from_wire`]), the part's
/// header (JSON, without rank reports either, small enough to gather), and its keyed kernel rows hashed into
/// `buckets` by key (communicator, type, slot), with rank inputs counted from the trace's first GPU (0), in postcard.
type Pieces = (Vec<u8>, Vec<u8>, Vec<Vec<u8>>);

fn pieces(mut part: TracePart, buckets: usize) -> PyResult<Pieces> {
    let mut by_bucket: Vec<Vec<KeyedRow>> = vec![Vec::new(); buckets.max(1)];
    for row in partial::keyed_rows(&part, 0) {
        // SipHash with fixed keys: the same key lands in the same bucket on every worker.
        let mut hasher = DefaultHasher::new();
        row.key().hash(&mut hasher);
        let bucket = (hasher.finish() % by_bucket.len() as u64) as usize;
        by_bucket[bucket].push(row);
    }
    for device in &mut part.devices {
        device.comm = Vec::new();
    }
    let wire = serde_json::to_vec(&part).map_err(fail)?;
    let mut header = part;
    for device in &mut header.devices {
        device.report = Value::Null;
        device.hta_if_job_has_steps = None;
        device.memory = None;
    }
    Ok((wire, serde_json::to_vec(&header).map_err(fail)?, by_bucket.iter().map(to_binary).collect::<PyResult<_>>()?))
}

/// [`Pieces`] as Python bytes.
type PyPieces<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<Bound<'py, PyBytes>>);

/// Reads `path` (a file, a folder or a dataset) and analyses each of its traces alone: per trace, its part, the
/// part's header and its kernel rows in `buckets` (see [`Pieces`]).
#[pyfunction]
fn trace_pieces<'py>(py: Python<'py>, path: PathBuf, options: &str, buckets: usize) -> PyResult<Vec<PyPieces<'py>>> {
    let options = options_from_json(options)?;
    let encoded = py.detach(|| {
        let traces = load_paths(std::slice::from_ref(&path))?;
        traces.iter().map(|trace| pieces(partial::trace_part(trace, &options), buckets)).collect::<PyResult<Vec<_>>>()
    })?;
    Ok(encoded
        .iter()
        .map(|(part, header, rows)| {
            (PyBytes::new(py, part), PyBytes::new(py, header), rows.iter().map(|r| PyBytes::new(py, r)).collect())
        })
        .collect())
}

/// The ranks of the run the parts (or their headers) make, in rank input order, as JSON.
#[pyfunction]
fn rank_entries(headers: Vec<PyBackedBytes>) -> PyResult<String> {
    serde_json::to_string(&partial::rank_entries(&headers_from(&headers)?)).map_err(fail)
}

/// Whether the parts' ranks ran on several hosts (their clocks are then aligned on collective ends).
#[pyfunction]
fn hosts_differ(headers: Vec<PyBackedBytes>) -> PyResult<bool> {
    Ok(partial::hosts_differ(&headers_from(&headers)?))
}

/// Whether the parts together have profiler steps.
#[pyfunction]
fn job_has_steps(headers: Vec<PyBackedBytes>) -> PyResult<bool> {
    Ok(partial::job_has_steps(&headers_from(&headers)?))
}

/// The rows of one bucket from several traces: (rank input of the trace's first GPU, the trace's rows).
fn rows_from(buckets: &[(usize, PyBackedBytes)]) -> PyResult<Vec<KeyedRow>> {
    let mut rows = Vec::new();
    for (first_input, bucket) in buckets {
        rows.extend(from_binary::<Vec<KeyedRow>>(bucket, "keyed rows")?.into_iter().map(|mut row| {
            row.input += first_input;
            row
        }));
    }
    Ok(rows)
}

/// The clock observations of the instances in one bucket (its rows from every trace, see `rows_from`).
#[pyfunction]
fn bucket_differences<'py>(py: Python<'py>, buckets: Vec<(usize, PyBackedBytes)>) -> PyResult<Bound<'py, PyBytes>> {
    let rows = rows_from(&buckets)?;
    let differences = py.detach(|| to_binary(&partial::row_differences(rows)))?;
    Ok(PyBytes::new(py, &differences))
}

/// Per rank input, the clock shift that lines its collective ends up with rank input 0.
#[pyfunction]
fn alignment_offsets(inputs: usize, differences: Vec<PyBackedBytes>) -> PyResult<Vec<i64>> {
    let mut all: Vec<(usize, i64)> = Vec::new();
    for d in &differences {
        all.extend(from_binary::<Vec<(usize, i64)>>(d, "clock differences")?);
    }
    Ok(shardscope_analyzer::figures::collectives::alignment_offsets(inputs, all))
}

/// Matches the rows of one bucket (its rows from every trace, see `rows_from`) into collective instances: returns
/// the instances, and the members' shares split into `groups` by `group_of_trace` (trace index → group), each group's
/// for the task that finishes those traces.
#[pyfunction]
#[pyo3(signature = (buckets, ranks, offsets, keep_rank_waits, group_of_trace, groups))]
fn match_bucket<'py>(
    py: Python<'py>,
    buckets: Vec<(usize, PyBackedBytes)>,
    ranks: &str,
    offsets: Vec<i64>,
    keep_rank_waits: bool,
    group_of_trace: Vec<usize>,
    groups: usize,
) -> PyResult<(Bound<'py, PyBytes>, Vec<Bound<'py, PyBytes>>)> {
    let ranks: Vec<RankEntry> = serde_json::from_str(ranks).map_err(|e| fail(format!("ranks: {e}")))?;
    let rows = rows_from(&buckets)?;
    let (instances, shares) = py.detach(|| {
        let matched = partial::match_rows(rows, &ranks, &offsets, keep_rank_waits);
        let mut by_group: Vec<Vec<(usize, TraceTallies)>> = vec![Vec::new(); groups.max(1)];
        for (trace, shares) in matched.shares {
            let group = group_of_trace.get(trace).copied().ok_or_else(|| fail("a share of an unknown trace"))?;
            by_group.get_mut(group).ok_or_else(|| fail("a trace of an unknown group"))?.push((trace, shares));
        }
        Ok::<_, PyErr>((to_binary(&matched.instances)?, by_group.iter().map(to_binary).collect::<PyResult<Vec<_>>>()?))
    })?;
    Ok((PyBytes::new(py, &instances), shares.iter().map(|s| PyBytes::new(py, s)).collect()))
}

/// Finishes traces: `parts` are (trace index, part), `shares` every bucket's shares for a group holding these traces.
/// Returns each trace's finished ranks (JSON), in the order of `parts`.
#[pyfunction]
fn finish_traces<'py>(
    py: Python<'py>,
    parts: Vec<(usize, PyBackedBytes)>,
    ranks: &str,
    job_has_steps: bool,
    shares: Vec<PyBackedBytes>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let ranks: Vec<RankEntry> = serde_json::from_str(ranks).map_err(|e| fail(format!("ranks: {e}")))?;
    let finished = py.detach(|| {
        let mut by_trace: HashMap<usize, Vec<TraceTallies>> = HashMap::new();
        for bytes in &shares {
            for (trace, of_trace) in from_binary::<Vec<(usize, TraceTallies)>>(bytes, "shares")? {
                by_trace.entry(trace).or_default().push(of_trace);
            }
        }
        parts
            .iter()
            .map(|(trace, data)| {
                let part = part_from_wire(data)?;
                let of_trace = by_trace.get(trace).map(Vec::as_slice).unwrap_or_default();
                let finished = partial::finish_trace(&part, *trace, &ranks, job_has_steps, of_trace).map_err(fail)?;
                serde_json::to_vec(&finished).map_err(fail)
            })
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(finished.iter().map(|f| PyBytes::new(py, f)).collect())
}

/// The report JSON from the parts' headers, every trace finished (in input order) and every bucket's instances.
#[pyfunction]
fn assemble(
    py: Python<'_>,
    headers: Vec<PyBackedBytes>,
    finished: Vec<PyBackedBytes>,
    instances: Vec<PyBackedBytes>,
    options: &str,
) -> PyResult<String> {
    let options = options_from_json(options)?;
    let headers = headers_from(&headers)?;
    py.detach(|| {
        let finished: Vec<FinishedTrace> =
            finished.iter().map(|f| from_bytes(f, "a finished trace")).collect::<PyResult<_>>()?;
        let mut all: Vec<MatchedInstance> = Vec::new();
        for i in &instances {
            all.extend(from_binary::<Vec<MatchedInstance>>(i, "matched instances")?);
        }
        serde_json::to_string_pretty(&partial::assemble(&headers, finished, all, &options)).map_err(fail)
    })
}

/// Refuses parts from different runs unless asked, as `analyzer report` refuses such files.
#[pyfunction]
fn check_one_run(headers: Vec<PyBackedBytes>, allow_mixed: bool) -> PyResult<()> {
    let parts = headers_from(&headers)?;
    if parts.iter().all(|p| p.devices.is_empty()) {
        let names: Vec<&str> = parts.iter().map(|p| p.source.as_str()).collect();
        return Err(fail(format!("{}: no GPU kernels or memory operations in the input", names.join(", "))));
    }
    let identities: Vec<RunIdentity> = parts.iter().map(|p| p.identity.clone()).collect();
    match run::mixed_runs(&identities) {
        Some(why) if !allow_mixed => {
            Err(fail(format!("inputs are not one run: {why} (allow_mixed=True analyses them together)")))
        }
        _ => Ok(()),
    }
}

/// The module tables of the run in `paths`, as `analyzer modules --format json` prints them.
#[pyfunction]
#[pyo3(signature = (paths, depth=None, phase_pattern=None, skip_steps=None))]
fn modules_json(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    depth: Option<usize>,
    phase_pattern: Option<String>,
    skip_steps: Option<usize>,
) -> PyResult<String> {
    let pattern = phase_pattern.as_deref().unwrap_or(shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN);
    let phase_pattern = Regex::new(pattern).map_err(|e| fail(format!("phase_pattern: {e}")))?;
    py.detach(|| {
        let traces = load_paths(&paths)?;
        let options =
            shardscope_analyzer::llm::modules::ModuleOptions { depth, phase_pattern, window_ns: None, skip_steps };
        serde_json::to_string_pretty(&shardscope_analyzer::llm::modules::module_report(&traces, &options)).map_err(fail)
    })
}

/// The `memory_figures` table (as `Run.report_tables()` gives it) of a report's JSON, for the report of the Dask path.
#[pyfunction]
fn memory_figures(py: Python<'_>, report_json: &str) -> PyResult<Py<PyAny>> {
    #[derive(serde::Deserialize)]
    struct MemorySection {
        #[serde(default)]
        memory: Vec<shardscope_analyzer::report::memory::RankMemory>,
    }
    let section: MemorySection = serde_json::from_str(report_json).map_err(|e| fail(format!("a report: {e}")))?;
    table(py, figure_tables::memory_figures().python_columns(&MemoryRow::of_section(&section.memory)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ShardscopeError", m.py().get_type::<ShardscopeError>())?;
    m.add_class::<Run>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(trace_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(rank_entries, m)?)?;
    m.add_function(wrap_pyfunction!(hosts_differ, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_differences, m)?)?;
    m.add_function(wrap_pyfunction!(alignment_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(job_has_steps, m)?)?;
    m.add_function(wrap_pyfunction!(match_bucket, m)?)?;
    m.add_function(wrap_pyfunction!(finish_traces, m)?)?;
    m.add_function(wrap_pyfunction!(assemble, m)?)?;
    m.add_function(wrap_pyfunction!(check_one_run, m)?)?;
    m.add_function(wrap_pyfunction!(memory_figures, m)?)?;
    m.add_function(wrap_pyfunction!(commands::run_analyzer, m)?)?;
    m.add_function(wrap_pyfunction!(modules_json, m)?)?;
    Ok(())
}
