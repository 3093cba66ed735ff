//! Writing a dataset: the marker, the trace tables of each input, and tables of the caller's own (the analyzer's
//! report figures) in the same layout.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::types::UInt32Type;
use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use shardscope_model::{ApiKind, CopyKind, DeviceIdx, MemoryKind, MemoryPoolState, RangeKind, SourceFormat, Trace};

use super::arrays::{bools, i64s, opt_i64s, opt_strs, opt_u32s, opt_u64s, strs, u32s, u64s};
use super::manifest::{self, ManifestPart, PartialDir, check_destination, parent_of};
use super::{FORMAT_NAME, MARKER_FILE, METADATA_SCHEMA_VERSION, METADATA_TABLE, SCHEMA_VERSION, tables};
use crate::Error;

/// Rows per record batch: bounds the memory of the columns being built for a large table.
const CHUNK_ROWS: usize = 1 << 20;

/// One column of a table being written.
pub struct Column {
    name: &'static str,
    array: ArrayRef,
    nullable: bool,
}

/// A column named `name` holding `array`; `nullable` is part of the schema (the same for every file of a table).
pub fn column(name: &'static str, array: ArrayRef, nullable: bool) -> Column {
    Column { name, array, nullable }
}

/// What [`DatasetWriter::write_traces`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Files written.
    pub files: u64,
    /// Rows written per table.
    pub rows: BTreeMap<&'static str, u64>,
}

impl WriteStats {
    /// Adds another writer's counts.
    pub fn add(&mut self, other: &WriteStats) {
        self.files += other.files;
        for (table, rows) in &other.rows {
            *self.rows.entry(table).or_default() += rows;
        }
    }
}

/// A dataset folder opened for writing one run.
///
/// Nothing is written at the dataset's own path until [`DatasetWriter::finish`]: the files go into a private
/// sibling folder (`.<name>.partial-<pid>-<n>`), which `finish` completes (the other runs of the dataset there,
/// linked in; the manifest; the marker last) and renames into place. A writer dropped without `finish` (an error
/// on the way) removes its folder, so the dataset is either the one before or the one after, never a mix.
pub struct DatasetWriter {
    /// The dataset's path, as the user named it.
    root: PathBuf,
    /// The private folder being written.
    partial: PartialDir,
    run: String,
    /// Every file written, for the manifest.
    parts: RefCell<Vec<ManifestPart>>,
}

impl DatasetWriter {
    /// Opens `root` for the run named `run`. `root` may be missing, an empty folder or a dataset (its other runs
    /// are kept, this run's partitions replaced, by [`DatasetWriter::finish`]); a folder that is neither empty nor
    /// a dataset is refused, so that nothing of the user's is mixed into the dataset or removed.
    pub fn create(root: &Path, run: &str) -> Result<DatasetWriter, Error> {
        check_run_name(run).map_err(|cause| Error::format(root, cause))?;
        check_destination(root)?;
        let partial = PartialDir::create(root)?;
        Ok(DatasetWriter { root: root.to_path_buf(), partial, run: run.to_string(), parts: RefCell::new(Vec::new()) })
    }

    /// The dataset folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The run being written.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// Where the file of `table` for input `part` goes, relative to the dataset folder: in the rank's partition
    /// (or the run's, for `rank` `None`).
    pub fn file_path(&self, table: &str, rank: Option<i64>, part: usize) -> PathBuf {
        let mut path = PathBuf::from(table).join(format!("run={}", self.run));
        if let Some(rank) = rank {
            path.push(format!("rank={rank}"));
        }
        path.join(format!("part-{part}.parquet"))
    }

    /// Completes the dataset and puts it in place: links the other runs of the dataset now at the path into the
    /// new folder, writes the manifest of every part and then the marker, and swaps the folders. Exports into
    /// folders of one parent take turns here (a lock on the parent folder), so two exports of different runs both
    /// end up in the dataset and two of the same run leave the later one whole.
    pub fn finish(self) -> Result<(), Error> {
        let parent = parent_of(&self.root);
        let lock_handle = File::open(&parent).map_err(|e| Error::io(&parent, e))?;
        lock_handle.lock().map_err(|e| Error::io(&parent, e))?;
        check_destination(&self.root)?;
        let mut parts = self.parts.take();
        parts.extend(manifest::link_other_runs(&self.root, self.partial.path(), &self.run)?);
        manifest::write(self.partial.path(), &parts)?;
        let marker = self.partial.path().join(MARKER_FILE);
        let text = format!(
            "{{\"format\": \"{FORMAT_NAME}\", \"schema_version\": \"{SCHEMA_VERSION}\", \"manifest\": \"{}\"}}\n",
            manifest::MANIFEST_FILE
        );
        std::fs::write(&marker, text).map_err(|e| Error::io(&marker, e))?;
        self.partial.put_in_place(&self.root)
    }

    /// Writes `rows` as one file of `table` (nothing when there are no rows), building the columns of up to
    /// [`CHUNK_ROWS`] rows at a time with `build`. Returns the number of rows written.
    pub fn write_rows<T>(
        &self,
        table: &'static str,
        rank: Option<i64>,
        part: usize,
        rows: &[T],
        build: impl Fn(&[T]) -> Vec<Column>,
    ) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let relative = self.file_path(table, rank, part);
        let path = self.partial.path().join(&relative);
        let folder = path.parent().unwrap_or(self.partial.path());
        std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
        let parquet_error =
            |e: parquet::errors::ParquetError| Error::format(&path, format!("cannot write Parquet: {e}"));
        let mut writer: Option<ArrowWriter<File>> = None;
        for chunk in rows.chunks(CHUNK_ROWS) {
            let columns = build(chunk);
            let fields: Vec<Field> =
                columns.iter().map(|c| Field::new(c.name, c.array.data_type().clone(), c.nullable)).collect();
            let schema = Arc::new(Schema::new(fields));
            let arrays = columns.into_iter().map(|c| c.array).collect();
            let batch = RecordBatch::try_new(schema.clone(), arrays)
                .map_err(|e| Error::format(&path, format!("cannot build the {table} columns: {e}")))?;
            if writer.is_none() {
                let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
                let properties = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_key_value_metadata(Some(vec![
                        KeyValue::new(METADATA_SCHEMA_VERSION.to_string(), SCHEMA_VERSION.to_string()),
                        KeyValue::new(METADATA_TABLE.to_string(), table.to_string()),
                    ]))
                    .build();
                writer = Some(ArrowWriter::try_new(file, schema, Some(properties)).map_err(parquet_error)?);
            }
            if let Some(writer) = writer.as_mut() {
                writer.write(&batch).map_err(parquet_error)?;
            }
        }
        if let Some(writer) = writer {
            writer.close().map_err(parquet_error)?;
        }
        self.parts.borrow_mut().push(ManifestPart::of_file(&relative, &path, rows.len() as u64)?);
        Ok(rows.len() as u64)
    }

    /// Writes every table of `traces` (the inputs of this run, in order). `device_ranks[t][d]` is the rank of
    /// device `d` of trace `t` (the analyzer's numbering), or `None` for a GPU without work: event rows of a GPU
    /// go to its rank's partition, host rows (API calls, ranges) to the lowest rank of their process's GPUs, and
    /// rows of an input with no GPU work to `rank=-1`.
    pub fn write_traces(&self, traces: &[Trace], device_ranks: &[Vec<Option<u32>>]) -> Result<WriteStats, Error> {
        let mut stats = WriteStats::default();
        for (part, trace) in traces.iter().enumerate() {
            let ranks = device_ranks.get(part).map_or(&[][..], Vec::as_slice);
            stats.add(&self.write_trace(part, trace, ranks)?);
        }
        Ok(stats)
    }

    fn write_trace(&self, part: usize, trace: &Trace, device_ranks: &[Option<u32>]) -> Result<WriteStats, Error> {
        let source = Path::new(&trace.source.path);
        let mut seen = HashSet::new();
        if let Some(device) = trace.devices.iter().find(|d| !seen.insert(d.ordinal)) {
            return Err(Error::format(source, format!("two GPUs share device ordinal {}", device.ordinal)));
        }
        let layout = Layout::new(trace, device_ranks);
        // Rows name their process by `globalPid`: two processes with one would be merged on reading.
        let mut seen = HashSet::new();
        if let Some(global_pid) = layout.global_pids.iter().find(|&&g| !seen.insert(g)) {
            return Err(Error::format(source, format!("two processes share globalPid {global_pid}")));
        }
        let mut rows =
            TraceRows { dataset: self, part, trace, layout: &layout, device_ranks, stats: WriteStats::default() };
        rows.traces()?;
        rows.string_ids()?;
        rows.processes()?;
        rows.threads()?;
        rows.devices()?;
        rows.warnings()?;
        rows.kernels()?;
        rows.memops()?;
        rows.cuda_api()?;
        rows.nvtx()?;
        rows.collectives()?;
        rows.cuda_graphs()?;
        rows.cuda_memory()?;
        rows.cuda_memory_pools()?;
        rows.framework_memory()?;
        Ok(rows.stats)
    }
}

/// The rows of one trace on their way into the dataset's tables, one method per table.
struct TraceRows<'a> {
    dataset: &'a DatasetWriter,
    /// The trace's position among the run's inputs (its `traceId`).
    part: usize,
    trace: &'a Trace,
    layout: &'a Layout,
    device_ranks: &'a [Option<u32>],
    stats: WriteStats,
}

impl TraceRows<'_> {
    /// Counts a table file of `rows` rows.
    fn note(&mut self, table: &'static str, rows: u64) {
        if rows > 0 {
            self.stats.files += 1;
            *self.stats.rows.entry(table).or_default() += rows;
        }
    }

    /// The `traceId` column of `n` rows.
    fn trace_ids(&self, n: usize) -> ArrayRef {
        Arc::new(UInt32Array::from_iter_values(std::iter::repeat_n(self.part as u32, n)))
    }

    /// The `globalPid` of process `p`.
    fn gpid(&self, p: shardscope_model::ProcessIdx) -> i64 {
        self.layout.global_pids.get(p.0 as usize).copied().unwrap_or(0)
    }

    fn name(&self, id: shardscope_model::NameId) -> &str {
        self.trace.names.get(id)
    }

    /// The device ordinal of GPU `d`.
    fn ordinal(&self, d: DeviceIdx) -> u32 {
        self.trace.devices.get(d.0 as usize).map_or(0, |d| d.ordinal)
    }

    /// The traces table: this input.
    fn traces(&mut self) -> Result<(), Error> {
        let rows = self.dataset.write_rows(tables::TRACES, None, self.part, &[self.trace], |rows| {
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("path", strs(rows.iter().map(|t| t.source.path.as_str())), false),
                column("format", strs(rows.iter().map(|t| format_name(t.source.format))), false),
                column("schemaVersion", opt_strs(rows.iter().map(|t| t.source.schema_version.as_deref())), true),
                column("producer", opt_strs(rows.iter().map(|t| t.source.producer.as_deref())), true),
                column("clockOffsetNs", Arc::new(Int64Array::from_iter(rows.iter().map(|t| t.clock_offset_ns))), true),
            ]
        })?;
        self.note(tables::TRACES, rows);
        Ok(())
    }

    /// The string table.
    fn string_ids(&mut self) -> Result<(), Error> {
        let names: Vec<(u32, &str)> = self.trace.names.iter().map(|(id, s)| (id.0, s)).collect();
        let rows = self.dataset.write_rows(tables::STRING_IDS, None, self.part, &names, |rows| {
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("id", u32s(rows.iter().map(|r| r.0)), false),
                column("value", strs(rows.iter().map(|r| r.1)), false),
            ]
        })?;
        self.note(tables::STRING_IDS, rows);
        Ok(())
    }

    /// The processes, by `globalPid`.
    fn processes(&mut self) -> Result<(), Error> {
        let indices: Vec<usize> = (0..self.trace.processes.len()).collect();
        let rows = self.dataset.write_rows(tables::PROCESSES, None, self.part, &indices, |rows| {
            let p = |i: &usize| &self.trace.processes[*i];
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("globalPid", i64s(rows.iter().map(|&i| self.layout.global_pids[i])), false),
                column("pid", u32s(rows.iter().map(|i| p(i).pid)), false),
                column("name", strs(rows.iter().map(|i| p(i).name.as_str())), false),
                column("host", opt_strs(rows.iter().map(|i| p(i).host.as_deref())), true),
                column("rank", opt_u32s(rows.iter().map(|i| p(i).rank)), true),
                column("worldSize", opt_u32s(rows.iter().map(|i| p(i).world_size)), true),
                column("globalPidRecorded", bools(rows.iter().map(|i| p(i).global_pid != 0)), false),
            ]
        })?;
        self.note(tables::PROCESSES, rows);
        Ok(())
    }

    /// The thread names.
    fn threads(&mut self) -> Result<(), Error> {
        let rows = self.dataset.write_rows(tables::THREADS, None, self.part, &self.trace.threads, |rows| {
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("globalPid", i64s(rows.iter().map(|t| self.gpid(t.process))), false),
                column("tid", u32s(rows.iter().map(|t| t.tid)), false),
                column("name", strs(rows.iter().map(|t| t.name.as_str())), false),
            ]
        })?;
        self.note(tables::THREADS, rows);
        Ok(())
    }

    /// The GPUs, with their ranks.
    fn devices(&mut self) -> Result<(), Error> {
        let indices: Vec<usize> = (0..self.trace.devices.len()).collect();
        let rows = self.dataset.write_rows(tables::DEVICES, None, self.part, &indices, |rows| {
            let d = |i: &usize| &self.trace.devices[*i];
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("deviceId", u32s(rows.iter().map(|i| d(i).ordinal)), false),
                column("rank", opt_u32s(rows.iter().map(|&i| self.device_ranks.get(i).copied().flatten())), true),
                column("globalPid", opt_i64s(rows.iter().map(|i| d(i).process.map(|p| self.gpid(p)))), true),
                column("name", strs(rows.iter().map(|i| d(i).name.as_str())), false),
                column("smCount", opt_u32s(rows.iter().map(|i| d(i).sm_count)), true),
                column("totalMemory", opt_u64s(rows.iter().map(|i| d(i).memory_bytes)), true),
                column("memoryBandwidth", opt_u64s(rows.iter().map(|i| d(i).memory_bandwidth_bytes_per_s)), true),
                column("clockRateKhz", opt_u32s(rows.iter().map(|i| d(i).clock_rate_khz)), true),
                column("busLocation", opt_strs(rows.iter().map(|i| d(i).bus_location.as_deref())), true),
            ]
        })?;
        self.note(tables::DEVICES, rows);
        Ok(())
    }

    /// The input's warnings.
    fn warnings(&mut self) -> Result<(), Error> {
        let rows = self.dataset.write_rows(tables::WARNINGS, None, self.part, &self.trace.warnings, |rows| {
            vec![
                column("traceId", self.trace_ids(rows.len()), false),
                column("what", strs(rows.iter().map(|w| w.what.as_str())), false),
                column("count", u64s(rows.iter().map(|w| w.count)), false),
            ]
        })?;
        self.note(tables::WARNINGS, rows);
        Ok(())
    }

    /// The kernels, partitioned by the rank of their GPU.
    fn kernels(&mut self) -> Result<(), Error> {
        for (rank, rows) in self.layout.partition(self.trace.kernels.iter().map(|k| self.layout.device_rank(k.device)))
        {
            let rows = self.dataset.write_rows(tables::KERNELS, Some(rank), self.part, &rows, |rows| {
                let k = |i: &usize| &self.trace.kernels[*i];
                let dims = |pick: fn(&shardscope_model::Kernel) -> u32| u32s(rows.iter().map(|i| pick(k(i))));
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| k(i).start_ns)), false),
                    column("end", i64s(rows.iter().map(|i| k(i).end_ns)), false),
                    column("deviceId", u32s(rows.iter().map(|i| self.ordinal(k(i).device))), false),
                    column("streamId", u32s(rows.iter().map(|i| k(i).stream)), false),
                    column("correlationId", u32s(rows.iter().map(|i| k(i).correlation_id)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(k(i).process))), false),
                    column("demangledName", strs(rows.iter().map(|i| self.name(k(i).name))), false),
                    column("shortName", strs(rows.iter().map(|i| self.name(k(i).short_name))), false),
                    column("gridX", dims(|k| k.grid[0]), false),
                    column("gridY", dims(|k| k.grid[1]), false),
                    column("gridZ", dims(|k| k.grid[2]), false),
                    column("blockX", dims(|k| k.block[0]), false),
                    column("blockY", dims(|k| k.block[1]), false),
                    column("blockZ", dims(|k| k.block[2]), false),
                    column("collectiveId", opt_u32s(rows.iter().map(|i| k(i).collective)), true),
                    column("graphId", opt_u32s(rows.iter().map(|i| k(i).graph_id)), true),
                    column("graphNodeId", opt_u64s(rows.iter().map(|i| k(i).graph_node_id)), true),
                ]
            })?;
            self.note(tables::KERNELS, rows);
        }
        Ok(())
    }

    /// The memory copies and sets, partitioned by the rank of their GPU.
    fn memops(&mut self) -> Result<(), Error> {
        for (rank, rows) in self.layout.partition(self.trace.memops.iter().map(|m| self.layout.device_rank(m.device))) {
            let rows = self.dataset.write_rows(tables::MEMOPS, Some(rank), self.part, &rows, |rows| {
                let m = |i: &usize| &self.trace.memops[*i];
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| m(i).start_ns)), false),
                    column("end", i64s(rows.iter().map(|i| m(i).end_ns)), false),
                    column("deviceId", u32s(rows.iter().map(|i| self.ordinal(m(i).device))), false),
                    column("streamId", u32s(rows.iter().map(|i| m(i).stream)), false),
                    column("correlationId", u32s(rows.iter().map(|i| m(i).correlation_id)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(m(i).process))), false),
                    column("bytes", u64s(rows.iter().map(|i| m(i).bytes)), false),
                    column("copyKind", opt_u32s(rows.iter().map(|i| m(i).copy_kind.map(CopyKind::to_cupti))), true),
                    column("srcDeviceId", opt_u32s(rows.iter().map(|i| m(i).src_device)), true),
                    column("dstDeviceId", opt_u32s(rows.iter().map(|i| m(i).dst_device)), true),
                    column("srcKind", opt_u32s(rows.iter().map(|i| memory_id(m(i).src_memory))), true),
                    column("dstKind", opt_u32s(rows.iter().map(|i| memory_id(m(i).dst_memory))), true),
                ]
            })?;
            self.note(tables::MEMOPS, rows);
        }
        Ok(())
    }

    /// The CUDA API calls, partitioned by the rank of their process.
    fn cuda_api(&mut self) -> Result<(), Error> {
        for (rank, rows) in
            self.layout.partition(self.trace.api_calls.iter().map(|a| self.layout.process_rank(a.process)))
        {
            let rows = self.dataset.write_rows(tables::CUDA_API, Some(rank), self.part, &rows, |rows| {
                let a = |i: &usize| &self.trace.api_calls[*i];
                let class = |kind| match kind {
                    ApiKind::Runtime => EVENT_CLASS_CUDA_RUNTIME,
                    ApiKind::Driver => EVENT_CLASS_CUDA_DRIVER,
                };
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| a(i).start_ns)), false),
                    column("end", i64s(rows.iter().map(|i| a(i).end_ns)), false),
                    column("eventClass", u32s(rows.iter().map(|i| class(a(i).kind))), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(a(i).process))), false),
                    column("tid", u32s(rows.iter().map(|i| a(i).tid)), false),
                    column("correlationId", u32s(rows.iter().map(|i| a(i).correlation_id)), false),
                    column("name", strs(rows.iter().map(|i| self.name(a(i).name))), false),
                ]
            })?;
            self.note(tables::CUDA_API, rows);
        }
        Ok(())
    }

    /// The ranges, partitioned by the rank of their GPU, else of their process.
    fn nvtx(&mut self) -> Result<(), Error> {
        let range_rank = |r: &shardscope_model::Range| match r.device {
            Some(device) if self.layout.device_rank(device) >= 0 => self.layout.device_rank(device),
            _ => self.layout.process_rank(r.process),
        };
        for (rank, rows) in self.layout.partition(self.trace.ranges.iter().map(range_rank)) {
            let rows = self.dataset.write_rows(tables::NVTX, Some(rank), self.part, &rows, |rows| {
                let r = |i: &usize| &self.trace.ranges[*i];
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| r(i).start_ns)), false),
                    column("end", i64s(rows.iter().map(|i| r(i).end_ns)), false),
                    column("text", strs(rows.iter().map(|i| self.name(r(i).name))), false),
                    column("domain", strs(rows.iter().map(|i| self.name(r(i).domain))), false),
                    column("rangeKind", strs(rows.iter().map(|i| range_kind_name(r(i).kind))), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(r(i).process))), false),
                    column("tid", u32s(rows.iter().map(|i| r(i).tid)), false),
                    column("deviceId", opt_u32s(rows.iter().map(|i| r(i).device.map(|d| self.ordinal(d)))), true),
                    column("streamId", opt_u32s(rows.iter().map(|i| r(i).stream)), true),
                ]
            })?;
            self.note(tables::NVTX, rows);
        }
        Ok(())
    }

    /// The collectives, partitioned by the rank of their kernel's GPU.
    fn collectives(&mut self) -> Result<(), Error> {
        let collective_rank = |c: &shardscope_model::Collective| {
            c.kernel
                .and_then(|k| self.trace.kernels.get(k as usize))
                .map_or(self.layout.trace_rank, |k| self.layout.device_rank(k.device))
        };
        for (rank, rows) in self.layout.partition(self.trace.collectives.iter().map(collective_rank)) {
            let rows = self.dataset.write_rows(tables::COLLECTIVES, Some(rank), self.part, &rows, |rows| {
                let c = |i: &usize| &self.trace.collectives[*i];
                let ranks = rows.iter().map(|i| Some(c(i).group_ranks.iter().map(|&r| Some(r))));
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("collectiveId", u32s(rows.iter().map(|&i| i as u32)), false),
                    column("op", strs(rows.iter().map(|i| c(i).op.name())), false),
                    column("bytes", opt_u64s(rows.iter().map(|i| c(i).bytes)), true),
                    column("inElems", opt_u64s(rows.iter().map(|i| c(i).in_elems)), true),
                    column("outElems", opt_u64s(rows.iter().map(|i| c(i).out_elems)), true),
                    column("datatype", strs(rows.iter().map(|i| self.name(c(i).dtype))), false),
                    column("commName", strs(rows.iter().map(|i| self.name(c(i).group_name))), false),
                    column("nRanks", opt_u32s(rows.iter().map(|i| c(i).group_size)), true),
                    column("groupRanks", Arc::new(ListArray::from_iter_primitive::<UInt32Type, _, _>(ranks)), false),
                    column("commId", opt_u64s(rows.iter().map(|i| c(i).communicator)), true),
                    column("seqNumber", opt_u64s(rows.iter().map(|i| c(i).seq)), true),
                ]
            })?;
            self.note(tables::COLLECTIVES, rows);
        }
        Ok(())
    }

    /// The CUDA graph launches, partitioned by the rank of their GPU.
    fn cuda_graphs(&mut self) -> Result<(), Error> {
        for (rank, rows) in
            self.layout.partition(self.trace.graph_launches.iter().map(|g| self.layout.device_rank(g.device)))
        {
            let rows = self.dataset.write_rows(tables::CUDA_GRAPHS, Some(rank), self.part, &rows, |rows| {
                let g = |i: &usize| &self.trace.graph_launches[*i];
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| g(i).start_ns)), false),
                    column("end", i64s(rows.iter().map(|i| g(i).end_ns)), false),
                    column("deviceId", u32s(rows.iter().map(|i| self.ordinal(g(i).device))), false),
                    column("streamId", u32s(rows.iter().map(|i| g(i).stream)), false),
                    column("correlationId", u32s(rows.iter().map(|i| g(i).correlation_id)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(g(i).process))), false),
                    column("graphId", u32s(rows.iter().map(|i| g(i).graph_id)), false),
                ]
            })?;
            self.note(tables::CUDA_GRAPHS, rows);
        }
        Ok(())
    }
}

/// The memory tables: the model's three memory event lists, each partitioned by the rank of its GPU (a framework
/// sample of host memory by the rank of its process).
impl TraceRows<'_> {
    /// The CUDA-level allocations and releases, with nsys' enum ids for the memory kind and the operation.
    fn cuda_memory(&mut self) -> Result<(), Error> {
        let events = &self.trace.memory_events;
        for (rank, rows) in self.layout.partition(events.iter().map(|m| self.layout.device_rank(m.device))) {
            let rows = self.dataset.write_rows(tables::CUDA_MEMORY, Some(rank), self.part, &rows, |rows| {
                let m = |i: &usize| &events[*i];
                let pool = |pick: fn(&MemoryPoolState) -> Option<u64>| {
                    opt_u64s(rows.iter().map(|i| m(i).pool.as_ref().and_then(pick)))
                };
                let pool_type = |p: &MemoryPoolState| if p.imported { POOL_IMPORTED } else { POOL_LOCAL };
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| m(i).time_ns)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(m(i).process))), false),
                    column("deviceId", u32s(rows.iter().map(|i| self.ordinal(m(i).device))), false),
                    column("contextId", u32s(rows.iter().map(|i| m(i).context_id)), false),
                    column("address", u64s(rows.iter().map(|i| m(i).address)), false),
                    column("pc", u64s(rows.iter().map(|i| m(i).pc)), false),
                    column("bytes", u64s(rows.iter().map(|i| m(i).bytes)), false),
                    column("memKind", u32s(rows.iter().map(|i| m(i).kind.nsys_id() as u32)), false),
                    column("memoryOperationType", u32s(rows.iter().map(|i| m(i).operation.nsys_id() as u32)), false),
                    column("correlationId", u32s(rows.iter().map(|i| m(i).correlation_id)), false),
                    column("streamId", opt_u32s(rows.iter().map(|i| m(i).stream)), true),
                    column("memoryPoolType", opt_strs(rows.iter().map(|i| m(i).pool.as_ref().map(pool_type))), true),
                    column("memoryPoolAddress", pool(|p| Some(p.address)), true),
                    column("memoryPoolReleaseThreshold", pool(|p| p.release_threshold_bytes), true),
                    column("memoryPoolSize", pool(|p| p.size_bytes), true),
                    column("memoryPoolUtilizedSize", pool(|p| p.utilized_bytes), true),
                    column("memoryPoolProcessId", pool(|p| p.imported_pid), true),
                ]
            })?;
            self.note(tables::CUDA_MEMORY, rows);
        }
        Ok(())
    }

    /// The stream-ordered pools made, destroyed or trimmed (CUPTI's operation and pool type numbers, nsys' too).
    fn cuda_memory_pools(&mut self) -> Result<(), Error> {
        let events = &self.trace.memory_pool_events;
        for (rank, rows) in self.layout.partition(events.iter().map(|p| self.layout.device_rank(p.device))) {
            let rows = self.dataset.write_rows(tables::CUDA_MEMORY_POOLS, Some(rank), self.part, &rows, |rows| {
                let p = |i: &usize| &events[*i];
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| p(i).time_ns)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(p(i).process))), false),
                    column("deviceId", u32s(rows.iter().map(|i| self.ordinal(p(i).device))), false),
                    column("address", u64s(rows.iter().map(|i| p(i).address)), false),
                    column("operationType", u32s(rows.iter().map(|i| u32::from(p(i).operation))), false),
                    column("poolType", u32s(rows.iter().map(|i| u32::from(p(i).pool_type))), false),
                    column("correlationId", u32s(rows.iter().map(|i| p(i).correlation_id)), false),
                    column("minBytesToKeep", u64s(rows.iter().map(|i| p(i).min_bytes_to_keep)), false),
                    column("releaseThreshold", u64s(rows.iter().map(|i| p(i).release_threshold_bytes)), false),
                    column("size", u64s(rows.iter().map(|i| p(i).size_bytes)), false),
                    column("utilizedSize", u64s(rows.iter().map(|i| p(i).utilized_bytes)), false),
                ]
            })?;
            self.note(tables::CUDA_MEMORY_POOLS, rows);
        }
        Ok(())
    }

    /// The framework allocator's samples: a tensor's signed bytes and the allocator's totals after it.
    fn framework_memory(&mut self) -> Result<(), Error> {
        let samples = &self.trace.framework_memory;
        let sample_rank = |s: &shardscope_model::FrameworkMemorySample| match s.device {
            Some(device) => self.layout.device_rank(device),
            None => self.layout.process_rank(s.process),
        };
        for (rank, rows) in self.layout.partition(samples.iter().map(sample_rank)) {
            let rows = self.dataset.write_rows(tables::FRAMEWORK_MEMORY, Some(rank), self.part, &rows, |rows| {
                let s = |i: &usize| &samples[*i];
                vec![
                    column("traceId", self.trace_ids(rows.len()), false),
                    column("eventIndex", u64s(rows.iter().map(|&i| i as u64)), false),
                    column("start", i64s(rows.iter().map(|i| s(i).time_ns)), false),
                    column("globalPid", i64s(rows.iter().map(|i| self.gpid(s(i).process))), false),
                    column("tid", u32s(rows.iter().map(|i| s(i).tid)), false),
                    column("deviceId", opt_u32s(rows.iter().map(|i| s(i).device.map(|d| self.ordinal(d)))), true),
                    column("address", u64s(rows.iter().map(|i| s(i).address)), false),
                    column("bytes", i64s(rows.iter().map(|i| s(i).bytes)), false),
                    column("totalAllocated", u64s(rows.iter().map(|i| s(i).total_allocated_bytes)), false),
                    column("totalReserved", u64s(rows.iter().map(|i| s(i).total_reserved_bytes)), false),
                ]
            })?;
            self.note(tables::FRAMEWORK_MEMORY, rows);
        }
        Ok(())
    }
}

/// `cuda_memory.memoryPoolType` of an allocation from a pool of this process, and from one imported from another.
pub(super) const POOL_LOCAL: &str = "local";
pub(super) const POOL_IMPORTED: &str = "imported";

/// `ENUM_NSYS_EVENT_CLASS` ids of CUDA runtime and driver calls, as Nsight Systems numbers them.
pub(super) const EVENT_CLASS_CUDA_RUNTIME: u32 = 0;
pub(super) const EVENT_CLASS_CUDA_DRIVER: u32 = 1;

/// Where each row of one trace goes: the partition ranks of its GPUs and processes, and each process's
/// `globalPid`.
struct Layout {
    device_ranks: Vec<i64>,
    process_ranks: Vec<i64>,
    /// The lowest rank of the trace's GPUs, or -1 when none has one.
    trace_rank: i64,
    global_pids: Vec<i64>,
}

impl Layout {
    fn new(trace: &Trace, device_ranks: &[Option<u32>]) -> Layout {
        let device_rank: Vec<Option<i64>> =
            (0..trace.devices.len()).map(|d| device_ranks.get(d).copied().flatten().map(i64::from)).collect();
        let trace_rank = device_rank.iter().flatten().copied().min().unwrap_or(-1);
        let mut process_rank: Vec<Option<i64>> = vec![None; trace.processes.len()];
        let lower = |slot: &mut Option<i64>, rank: i64| *slot = Some(slot.map_or(rank, |r| r.min(rank)));
        for (device, rank) in trace.devices.iter().zip(&device_rank) {
            if let (Some(process), Some(rank)) = (device.process, rank)
                && let Some(slot) = process_rank.get_mut(process.0 as usize)
            {
                lower(slot, *rank);
            }
        }
        // A process that drives no GPU of its own (several processes sharing one) takes the rank of the GPUs its
        // kernels ran on.
        if process_rank.iter().any(Option::is_none) {
            let mut from_kernels: Vec<Option<i64>> = vec![None; trace.processes.len()];
            for kernel in &trace.kernels {
                if let (Some(slot), Some(Some(rank))) =
                    (from_kernels.get_mut(kernel.process.0 as usize), device_rank.get(kernel.device.0 as usize))
                {
                    lower(slot, *rank);
                }
            }
            for (slot, fallback) in process_rank.iter_mut().zip(from_kernels) {
                if slot.is_none() {
                    *slot = fallback;
                }
            }
        }
        Layout {
            device_ranks: device_rank.into_iter().map(|r| r.unwrap_or(trace_rank)).collect(),
            process_ranks: process_rank.into_iter().map(|r| r.unwrap_or(trace_rank)).collect(),
            trace_rank,
            global_pids: global_pids(trace),
        }
    }

    fn device_rank(&self, device: DeviceIdx) -> i64 {
        self.device_ranks.get(device.0 as usize).copied().unwrap_or(self.trace_rank)
    }

    fn process_rank(&self, process: shardscope_model::ProcessIdx) -> i64 {
        self.process_ranks.get(process.0 as usize).copied().unwrap_or(self.trace_rank)
    }

    /// Row indices per partition rank, each list in row order.
    fn partition(&self, ranks: impl Iterator<Item = i64>) -> BTreeMap<i64, Vec<usize>> {
        let mut out: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (index, rank) in ranks.enumerate() {
            out.entry(rank).or_default().push(index);
        }
        out
    }
}

/// Each process's `globalPid`: its own where the source recorded one, else Nsight Systems' form made from its pid
/// (`pid << 24`), kept unique by setting high bits when two processes share a pid (as on different hosts).
fn global_pids(trace: &Trace) -> Vec<i64> {
    let mut used: HashSet<u64> = trace.processes.iter().map(|p| p.global_pid).filter(|&g| g != 0).collect();
    trace
        .processes
        .iter()
        .map(|p| {
            if p.global_pid != 0 {
                return p.global_pid as i64;
            }
            let mut candidate = u64::from(p.pid & 0xFF_FFFF) << 24;
            while candidate == 0 || !used.insert(candidate) {
                candidate = candidate.wrapping_add(1 << 56);
            }
            candidate as i64
        })
        .collect()
}

/// A run name that can be a partition folder name: letters, digits, `.`, `_`, `-` and `+`, not starting with a dot.
pub(super) fn check_run_name(run: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+');
    if run.is_empty() || run.len() > 200 || run.starts_with('.') || !run.chars().all(allowed) {
        return Err(format!(
            "run name {run:?} cannot be a partition folder: use 1 to 200 letters, digits, '.', '_', '-' or '+', \
             not starting with '.'"
        ));
    }
    Ok(())
}

/// `text` made into a valid run name: other characters become `_`.
pub fn sanitize_run_name(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+') { c } else { '_' })
        .collect();
    name.truncate(200);
    let name = name.trim_start_matches('.').to_string();
    if name.is_empty() { "run".to_string() } else { name }
}

pub(super) fn format_name(format: SourceFormat) -> &'static str {
    match format {
        SourceFormat::NsysSqlite => "nsys_sqlite",
        SourceFormat::KinetoJson => "kineto_json",
    }
}

pub(super) fn range_kind_name(kind: RangeKind) -> &'static str {
    match kind {
        RangeKind::PushPop => "push_pop",
        RangeKind::StartEnd => "start_end",
        RangeKind::CpuAnnotation => "cpu_annotation",
        RangeKind::GpuAnnotation => "gpu_annotation",
    }
}

/// A copy end's memory kind as nsys' `ENUM_CUDA_MEM_KIND` id (0 pageable … 7 unknown).
fn memory_id(kind: Option<MemoryKind>) -> Option<u32> {
    kind.map(|k| k.nsys_id() as u32)
}
