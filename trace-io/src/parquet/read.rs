//! Reading a dataset back into one [`Trace`] per input of its run.
//!
//! Each input (`traceId`) comes back as the trace it was: an input that held several ranks (one nsys export of a
//! multi-GPU job) is one trace again, its rows gathered from every rank partition, because what the analyzer says
//! per input (its ranges, warnings, time range) is about the whole file. Rows are checked as any reader checks its
//! input: a file that is not Parquet, lacks a column or has the wrong type, or declares another schema version
//! stops the read with one line naming it; a row with a missing required value or naming a process or GPU its
//! input does not list is skipped and counted in the trace's warnings.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::types::{Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, BooleanArray, ListArray, PrimitiveArray, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shardscope_model::{
    ApiCall, ApiKind, Collective, CollectiveOp, CopyKind, Device, DeviceIdx, FrameworkMemorySample, GraphLaunch,
    Kernel, MemOp, MemoryEvent, MemoryKind, MemoryOperation, MemoryPoolEvent, MemoryPoolState, Process, ProcessIdx,
    Range, RangeKind, SourceFormat, SourceInfo, ThreadName, Trace,
};

use super::manifest;
use super::write::{EVENT_CLASS_CUDA_DRIVER, POOL_IMPORTED, POOL_LOCAL, format_name, range_kind_name};
use super::{FORMAT_NAME, MARKER_FILE, METADATA_SCHEMA_VERSION, METADATA_TABLE, SCHEMA_VERSION, tables};
use crate::Error;

/// The largest marker file read: it holds two short fields.
const MAX_MARKER_BYTES: u64 = 64 << 10;

/// True when `path` is a folder holding a dataset marker.
pub fn is_dataset(path: &Path) -> bool {
    path.join(MARKER_FILE).is_file()
}

/// Reads the dataset at `root` (a folder with [`MARKER_FILE`]) into one trace per input of its run, in input
/// order. A dataset holding several runs is refused with their names: each is a separate analysis.
pub fn read_dataset(root: &Path) -> Result<Vec<Trace>, Error> {
    let has_manifest = check_marker(root)?;
    let run = the_run(root)?;
    let part_rows = if has_manifest { Some(manifest::verify_run(root, &run, &manifest::read(root)?)?) } else { None };
    let source = Source { root, run: run.clone(), part_rows };
    let mut traces = read_traces(&source)?;
    read_string_ids(&source, &mut traces)?;
    read_processes(&source, &mut traces)?;
    read_threads(&source, &mut traces)?;
    read_devices(&source, &mut traces)?;
    read_warnings(&source, &mut traces)?;
    read_kernels(&source, &mut traces)?;
    read_memops(&source, &mut traces)?;
    read_cuda_api(&source, &mut traces)?;
    read_nvtx(&source, &mut traces)?;
    let collectives = read_collectives(&source, &mut traces)?;
    read_cuda_graphs(&source, &mut traces)?;
    read_cuda_memory(&source, &mut traces)?;
    read_cuda_memory_pools(&source, &mut traces)?;
    read_framework_memory(&source, &mut traces)?;
    Ok(finish_traces(traces, collectives, has_manifest))
}

/// The inputs of the run (its traces table), each an empty trace to fill; refuses a run that lists none.
fn read_traces(source: &Source) -> Result<BTreeMap<u32, Reading>, Error> {
    let mut traces: BTreeMap<u32, Reading> = BTreeMap::new();
    for_each_batch(source, tables::TRACES, |file, batch| {
        let b = Columns { batch, file };
        let (id, path, format) = (b.u32("traceId")?, b.str("path")?, b.str("format")?);
        let (schema_version, producer, offset) = (b.str("schemaVersion")?, b.str("producer")?, b.i64("clockOffsetNs")?);
        for row in 0..batch.num_rows() {
            let (Some(id), Some(path), Some(format)) = (value(id, row), text(path, row), text(format, row)) else {
                return Err(Error::format(file, format!("row {row} lacks its traceId, path or format")));
            };
            let format = [SourceFormat::NsysSqlite, SourceFormat::KinetoJson]
                .into_iter()
                .find(|f| format_name(*f) == format)
                .ok_or_else(|| Error::format(file, format!("unknown input format {format:?}")))?;
            let trace = Trace {
                source: SourceInfo {
                    path: path.to_string(),
                    format,
                    schema_version: text(schema_version, row).map(str::to_string),
                    producer: text(producer, row).map(str::to_string),
                    capture_mode: None,
                    nccl_kernel_sample: None,
                },
                clock_offset_ns: value(offset, row),
                ..Trace::default()
            };
            if traces.insert(id, Reading::new(trace)).is_some() {
                return Err(Error::format(file, format!("traceId {id} is listed twice")));
            }
        }
        Ok(())
    })?;
    if traces.is_empty() {
        let (root, run) = (source.root, &source.run);
        return Err(Error::format(root, format!("run {run} lists no input (its {} table is empty)", tables::TRACES)));
    }
    Ok(traces)
}

/// The string table: each input's names, interned in their order.
fn read_string_ids(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    let mut names: BTreeMap<u32, Vec<(u32, String)>> = BTreeMap::new();
    read_rows(source, tables::STRING_IDS, traces, |b, _, row, _| {
        let (Some(id), Some(text)) = (value(b.u32("id")?, row), text(b.str("value")?, row)) else { return Ok(false) };
        names.entry(b.trace_id(row)?).or_default().push((id, text.to_string()));
        Ok(true)
    })?;
    for (id, mut list) in names {
        let reading = traces.get_mut(&id).expect("rows of unknown inputs are refused");
        list.sort_by_key(|(id, _)| *id);
        for (expected, text) in list {
            if reading.trace.names.intern(&text).0 != expected {
                reading.trace.warn("dataset string table is not numbered in order (names renumbered)");
            }
        }
    }
    Ok(())
}

/// The processes of each input, by global pid.
fn read_processes(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::PROCESSES, traces, |b, r, row, _| {
        let (Some(global_pid), Some(pid), Some(name)) =
            (value(b.i64("globalPid")?, row), value(b.u32("pid")?, row), text(b.str("name")?, row))
        else {
            return Ok(false);
        };
        let recorded = b.bool("globalPidRecorded")?;
        let index = r.trace.add_process(Process {
            pid,
            global_pid: if recorded.is_valid(row) && recorded.value(row) { global_pid as u64 } else { 0 },
            name: name.to_string(),
            host: text(b.str("host")?, row).map(str::to_string),
            rank: value(b.u32("rank")?, row),
            world_size: value(b.u32("worldSize")?, row),
        });
        r.processes.insert(global_pid, index);
        Ok(true)
    })
}

/// The thread names.
fn read_threads(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::THREADS, traces, |b, r, row, _| {
        let (Some(process), Some(tid), Some(name)) =
            (r.process(value(b.i64("globalPid")?, row)), value(b.u32("tid")?, row), text(b.str("name")?, row))
        else {
            return Ok(false);
        };
        r.trace.threads.push(ThreadName { process, tid, name: name.to_string() });
        Ok(true)
    })
}

/// The GPUs of each input, by ordinal.
fn read_devices(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::DEVICES, traces, |b, r, row, _| {
        let (Some(ordinal), Some(name)) = (value(b.u32("deviceId")?, row), text(b.str("name")?, row)) else {
            return Ok(false);
        };
        let process = match value(b.i64("globalPid")?, row) {
            None => None,
            Some(global_pid) => match r.processes.get(&global_pid) {
                Some(&p) => Some(p),
                None => return Ok(false),
            },
        };
        let index = r.trace.add_device(Device {
            ordinal,
            process,
            name: name.to_string(),
            sm_count: value(b.u32("smCount")?, row),
            memory_bytes: value(b.u64("totalMemory")?, row),
            memory_bandwidth_bytes_per_s: value(b.u64("memoryBandwidth")?, row),
            clock_rate_khz: value(b.u32("clockRateKhz")?, row),
            bus_location: text(b.str("busLocation")?, row).map(str::to_string),
        });
        r.devices.insert(ordinal, index);
        Ok(true)
    })
}

/// The inputs' own warnings.
fn read_warnings(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::WARNINGS, traces, |b, r, row, _| {
        let (Some(what), Some(count)) = (text(b.str("what")?, row), value(b.u64("count")?, row)) else {
            return Ok(false);
        };
        r.trace.warn_n(what, count);
        Ok(true)
    })
}

/// The kernels. The event tables are the large ones: their columns are looked up once per batch, not once
/// per row.
fn read_kernels(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    for_each_batch(source, tables::KERNELS, |file, batch| {
        let b = Columns { batch, file };
        let event_index = b.u64("eventIndex")?;
        let (start, end, device, stream) = (b.i64("start")?, b.i64("end")?, b.u32("deviceId")?, b.u32("streamId")?);
        let (correlation, global_pid) = (b.u32("correlationId")?, b.i64("globalPid")?);
        let (name, short_name, collective) = (b.str("demangledName")?, b.str("shortName")?, b.u32("collectiveId")?);
        let grid = [b.u32("gridX")?, b.u32("gridY")?, b.u32("gridZ")?];
        let block = [b.u32("blockX")?, b.u32("blockY")?, b.u32("blockZ")?];
        // Added in schema 1.1: absent from files of 1.0.
        let (graph_id, graph_node_id) = (b.optional_u32("graphId")?, b.optional_u64("graphNodeId")?);
        for row in 0..batch.num_rows() {
            let r = b.reading(traces, row)?;
            let dims =
                |d: [&PrimitiveArray<UInt32Type>; 3]| Some([value(d[0], row)?, value(d[1], row)?, value(d[2], row)?]);
            let fields = (|| {
                let kernel = Kernel {
                    start_ns: value(start, row)?,
                    end_ns: value(end, row)?,
                    device: r.device(value(device, row))?,
                    process: r.process(value(global_pid, row))?,
                    stream: value(stream, row)?,
                    correlation_id: value(correlation, row)?,
                    grid: dims(grid)?,
                    block: dims(block)?,
                    collective: value(collective, row),
                    graph_id: graph_id.and_then(|a| value(a, row)),
                    graph_node_id: graph_node_id.and_then(|a| value(a, row)),
                    ..Kernel::default()
                };
                Some((kernel, text(name, row)?, text(short_name, row)?))
            })();
            let Some(((mut kernel, name, short_name), order)) = fields.zip(value(event_index, row)) else {
                r.skip(tables::KERNELS);
                continue;
            };
            kernel.name = r.trace.names.intern(name);
            kernel.short_name = r.trace.names.intern(short_name);
            r.trace.kernels.push(kernel);
            r.order.kernels.push(order);
        }
        Ok(())
    })
}

/// The memory copies and sets.
fn read_memops(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    for_each_batch(source, tables::MEMOPS, |file, batch| {
        let b = Columns { batch, file };
        let event_index = b.u64("eventIndex")?;
        let (start, end, device, stream) = (b.i64("start")?, b.i64("end")?, b.u32("deviceId")?, b.u32("streamId")?);
        let (correlation, global_pid, bytes) = (b.u32("correlationId")?, b.i64("globalPid")?, b.u64("bytes")?);
        let (copy_kind, src, dst) = (b.u32("copyKind")?, b.u32("srcDeviceId")?, b.u32("dstDeviceId")?);
        // Added in schema 1.2: absent from files of 1.0 and 1.1.
        let (src_kind, dst_kind) = (b.optional_u32("srcKind")?, b.optional_u32("dstKind")?);
        let memory = |kinds: Option<&PrimitiveArray<UInt32Type>>, row: usize| {
            kinds.and_then(|k| value(k, row)).map(|id| MemoryKind::from_nsys(i64::from(id)))
        };
        for row in 0..batch.num_rows() {
            let r = b.reading(traces, row)?;
            let memop = (|| {
                Some(MemOp {
                    start_ns: value(start, row)?,
                    end_ns: value(end, row)?,
                    copy_kind: value(copy_kind, row).map(|k| CopyKind::from_cupti(i64::from(k))),
                    bytes: value(bytes, row)?,
                    device: r.device(value(device, row))?,
                    process: r.process(value(global_pid, row))?,
                    stream: value(stream, row)?,
                    correlation_id: value(correlation, row)?,
                    src_device: value(src, row),
                    dst_device: value(dst, row),
                    launch: None,
                    src_memory: memory(src_kind, row),
                    dst_memory: memory(dst_kind, row),
                })
            })();
            match memop.zip(value(event_index, row)) {
                Some((memop, order)) => {
                    r.trace.memops.push(memop);
                    r.order.memops.push(order);
                }
                None => r.skip(tables::MEMOPS),
            }
        }
        Ok(())
    })
}

/// The CUDA API calls.
fn read_cuda_api(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    for_each_batch(source, tables::CUDA_API, |file, batch| {
        let b = Columns { batch, file };
        let event_index = b.u64("eventIndex")?;
        let (start, end, class, global_pid) =
            (b.i64("start")?, b.i64("end")?, b.u32("eventClass")?, b.i64("globalPid")?);
        let (tid, correlation, name) = (b.u32("tid")?, b.u32("correlationId")?, b.str("name")?);
        for row in 0..batch.num_rows() {
            let r = b.reading(traces, row)?;
            let fields = (|| {
                let kind =
                    if value(class, row)? == EVENT_CLASS_CUDA_DRIVER { ApiKind::Driver } else { ApiKind::Runtime };
                let call = ApiCall {
                    start_ns: value(start, row)?,
                    end_ns: value(end, row)?,
                    kind,
                    process: r.process(value(global_pid, row))?,
                    tid: value(tid, row)?,
                    correlation_id: value(correlation, row)?,
                    ..ApiCall::default()
                };
                Some((call, text(name, row)?))
            })();
            let Some(((mut call, name), order)) = fields.zip(value(event_index, row)) else {
                r.skip(tables::CUDA_API);
                continue;
            };
            call.name = r.trace.names.intern(name);
            r.trace.api_calls.push(call);
            r.order.api_calls.push(order);
        }
        Ok(())
    })
}

/// The NVTX and annotation ranges.
fn read_nvtx(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    let range_kinds = [RangeKind::PushPop, RangeKind::StartEnd, RangeKind::CpuAnnotation, RangeKind::GpuAnnotation];
    for_each_batch(source, tables::NVTX, |file, batch| {
        let b = Columns { batch, file };
        let event_index = b.u64("eventIndex")?;
        let (start, end, name, domain, kind) =
            (b.i64("start")?, b.i64("end")?, b.str("text")?, b.str("domain")?, b.str("rangeKind")?);
        let (global_pid, tid, device, stream) =
            (b.i64("globalPid")?, b.u32("tid")?, b.u32("deviceId")?, b.u32("streamId")?);
        for row in 0..batch.num_rows() {
            let r = b.reading(traces, row)?;
            let fields = (|| {
                // A GPU annotation names its GPU; one the input does not list makes the row unusable.
                let device = match value(device, row) {
                    None => None,
                    Some(ordinal) => Some(r.device(Some(ordinal))?),
                };
                let range = Range {
                    start_ns: value(start, row)?,
                    end_ns: value(end, row)?,
                    kind: text(kind, row).and_then(|k| range_kinds.into_iter().find(|r| range_kind_name(*r) == k))?,
                    process: r.process(value(global_pid, row))?,
                    tid: value(tid, row)?,
                    device,
                    stream: value(stream, row),
                    ..Range::default()
                };
                Some((range, text(name, row)?, text(domain, row)?))
            })();
            let Some(((mut range, name, domain), order)) = fields.zip(value(event_index, row)) else {
                r.skip(tables::NVTX);
                continue;
            };
            range.name = r.trace.names.intern(name);
            range.domain = r.trace.names.intern(domain);
            r.trace.ranges.push(range);
            r.order.ranges.push(order);
        }
        Ok(())
    })
}

/// The collectives of each input by `collectiveId`: referred to by position, so gathered first and placed
/// after ([`link_collectives`]).
fn read_collectives(
    source: &Source,
    traces: &mut BTreeMap<u32, Reading>,
) -> Result<BTreeMap<u32, BTreeMap<u32, Collective>>, Error> {
    let ops = CollectiveOp::ALL;
    // Collectives are referred to by position (`collectiveId`): gathered first, placed after.
    let mut collectives: BTreeMap<u32, BTreeMap<u32, Collective>> = BTreeMap::new();
    read_rows(source, tables::COLLECTIVES, traces, |b, r, row, trace_id| {
        let (Some(id), Some(op), Some(dtype), Some(group_name)) = (
            value(b.u32("collectiveId")?, row),
            text(b.str("op")?, row).and_then(|o| ops.into_iter().find(|op| op.name() == o)),
            text(b.str("datatype")?, row),
            text(b.str("commName")?, row),
        ) else {
            return Ok(false);
        };
        let ranks = b.list("groupRanks")?;
        if ranks.is_null(row) {
            return Ok(false);
        }
        let group_ranks: Vec<u32> = match ranks.value(row).as_primitive_opt::<UInt32Type>() {
            Some(values) if values.null_count() == 0 => values.values().to_vec(),
            _ => return Ok(false),
        };
        let collective = Collective {
            kernel: None,
            op,
            bytes: value(b.u64("bytes")?, row),
            in_elems: value(b.u64("inElems")?, row),
            out_elems: value(b.u64("outElems")?, row),
            dtype: r.trace.names.intern(dtype),
            group_name: r.trace.names.intern(group_name),
            group_size: value(b.u32("nRanks")?, row),
            group_ranks,
            communicator: value(b.u64("commId")?, row),
            seq: value(b.u64("seqNumber")?, row),
        };
        Ok(collectives.entry(trace_id).or_default().insert(id, collective).is_none())
    })?;
    Ok(collectives)
}

/// The CUDA graph launches recorded whole.
fn read_cuda_graphs(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::CUDA_GRAPHS, traces, |b, r, row, _| {
        let (Some(start_ns), Some(end_ns), Some(device), Some(stream), Some(correlation_id), Some(process)) = (
            value(b.i64("start")?, row),
            value(b.i64("end")?, row),
            r.device(value(b.u32("deviceId")?, row)),
            value(b.u32("streamId")?, row),
            value(b.u32("correlationId")?, row),
            r.process(value(b.i64("globalPid")?, row)),
        ) else {
            return Ok(false);
        };
        let (Some(graph_id), Some(order)) = (value(b.u32("graphId")?, row), value(b.u64("eventIndex")?, row)) else {
            return Ok(false);
        };
        r.order.graph_launches.push(order);
        r.trace.graph_launches.push(GraphLaunch {
            start_ns,
            end_ns,
            device,
            process,
            stream,
            correlation_id,
            graph_id,
            launch: None,
        });
        Ok(true)
    })
}

/// The CUDA-level allocations and releases (tables of schema 1.2; a dataset of 1.0 or 1.1 has none).
fn read_cuda_memory(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::CUDA_MEMORY, traces, |b, r, row, _| {
        let (Some(time_ns), Some(process), Some(device), Some(order)) = (
            value(b.i64("start")?, row),
            r.process(value(b.i64("globalPid")?, row)),
            r.device(value(b.u32("deviceId")?, row)),
            value(b.u64("eventIndex")?, row),
        ) else {
            return Ok(false);
        };
        let (Some(context_id), Some(address), Some(pc), Some(bytes), Some(correlation_id)) = (
            value(b.u32("contextId")?, row),
            value(b.u64("address")?, row),
            value(b.u64("pc")?, row),
            value(b.u64("bytes")?, row),
            value(b.u32("correlationId")?, row),
        ) else {
            return Ok(false);
        };
        let operation = value(b.u32("memoryOperationType")?, row).and_then(|o| MemoryOperation::from_nsys(o.into()));
        let (Some(operation), Some(kind)) = (operation, value(b.u32("memKind")?, row)) else { return Ok(false) };
        let pool = match text(b.str("memoryPoolType")?, row) {
            None => None,
            Some(kind) if kind == POOL_LOCAL || kind == POOL_IMPORTED => Some(MemoryPoolState {
                imported: kind == POOL_IMPORTED,
                address: value(b.u64("memoryPoolAddress")?, row).unwrap_or(0),
                release_threshold_bytes: value(b.u64("memoryPoolReleaseThreshold")?, row),
                size_bytes: value(b.u64("memoryPoolSize")?, row),
                utilized_bytes: value(b.u64("memoryPoolUtilizedSize")?, row),
                imported_pid: value(b.u64("memoryPoolProcessId")?, row),
            }),
            Some(_) => return Ok(false),
        };
        r.trace.memory_events.push(MemoryEvent {
            time_ns,
            process,
            device,
            context_id,
            operation,
            kind: MemoryKind::from_nsys(kind.into()),
            address,
            bytes,
            pc,
            stream: value(b.u32("streamId")?, row),
            correlation_id,
            pool,
        });
        r.order.memory_events.push(order);
        Ok(true)
    })
}

/// The stream-ordered pools made, destroyed or trimmed.
fn read_cuda_memory_pools(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::CUDA_MEMORY_POOLS, traces, |b, r, row, _| {
        let small = |v: Option<u32>| v.and_then(|v| u8::try_from(v).ok());
        let (Some(time_ns), Some(process), Some(device), Some(order), Some(address)) = (
            value(b.i64("start")?, row),
            r.process(value(b.i64("globalPid")?, row)),
            r.device(value(b.u32("deviceId")?, row)),
            value(b.u64("eventIndex")?, row),
            value(b.u64("address")?, row),
        ) else {
            return Ok(false);
        };
        let (Some(operation), Some(pool_type), Some(correlation_id)) = (
            small(value(b.u32("operationType")?, row)),
            small(value(b.u32("poolType")?, row)),
            value(b.u32("correlationId")?, row),
        ) else {
            return Ok(false);
        };
        let (Some(min_bytes_to_keep), Some(release_threshold_bytes), Some(size_bytes), Some(utilized_bytes)) = (
            value(b.u64("minBytesToKeep")?, row),
            value(b.u64("releaseThreshold")?, row),
            value(b.u64("size")?, row),
            value(b.u64("utilizedSize")?, row),
        ) else {
            return Ok(false);
        };
        r.trace.memory_pool_events.push(MemoryPoolEvent {
            time_ns,
            process,
            device,
            operation,
            pool_type,
            address,
            correlation_id,
            min_bytes_to_keep,
            size_bytes,
            release_threshold_bytes,
            utilized_bytes,
        });
        r.order.memory_pool_events.push(order);
        Ok(true)
    })
}

/// The framework allocator's samples.
fn read_framework_memory(source: &Source, traces: &mut BTreeMap<u32, Reading>) -> Result<(), Error> {
    read_rows(source, tables::FRAMEWORK_MEMORY, traces, |b, r, row, _| {
        let (Some(time_ns), Some(process), Some(tid), Some(order)) = (
            value(b.i64("start")?, row),
            r.process(value(b.i64("globalPid")?, row)),
            value(b.u32("tid")?, row),
            value(b.u64("eventIndex")?, row),
        ) else {
            return Ok(false);
        };
        // Host memory has no GPU; a GPU the input does not list makes the row unusable.
        let device = match value(b.u32("deviceId")?, row) {
            None => None,
            Some(ordinal) => match r.device(Some(ordinal)) {
                Some(device) => Some(device),
                None => return Ok(false),
            },
        };
        let (Some(address), Some(bytes), Some(total_allocated_bytes), Some(total_reserved_bytes)) = (
            value(b.u64("address")?, row),
            value(b.i64("bytes")?, row),
            value(b.u64("totalAllocated")?, row),
            value(b.u64("totalReserved")?, row),
        ) else {
            return Ok(false);
        };
        r.trace.framework_memory.push(FrameworkMemorySample {
            time_ns,
            process,
            tid,
            device,
            address,
            bytes,
            total_allocated_bytes,
            total_reserved_bytes,
        });
        r.order.framework_memory.push(order);
        Ok(true)
    })
}

/// Each input's trace with its events in their recorded order, its collectives linked and the skipped rows
/// counted.
fn finish_traces(
    traces: BTreeMap<u32, Reading>,
    mut collectives: BTreeMap<u32, BTreeMap<u32, Collective>>,
    has_manifest: bool,
) -> Vec<Trace> {
    let mut out = Vec::with_capacity(traces.len());
    for (id, reading) in traces {
        let mut trace = reading.trace;
        restore_order(&mut trace.kernels, &reading.order.kernels);
        restore_order(&mut trace.memops, &reading.order.memops);
        restore_order(&mut trace.api_calls, &reading.order.api_calls);
        restore_order(&mut trace.ranges, &reading.order.ranges);
        restore_order(&mut trace.graph_launches, &reading.order.graph_launches);
        restore_order(&mut trace.memory_events, &reading.order.memory_events);
        restore_order(&mut trace.memory_pool_events, &reading.order.memory_pool_events);
        restore_order(&mut trace.framework_memory, &reading.order.framework_memory);
        link_collectives(&mut trace, collectives.remove(&id).unwrap_or_default());
        if !has_manifest {
            trace.warn(
                "dataset written without a manifest (by an older version): missing, extra or truncated part files \
                 cannot be detected",
            );
        }
        for (table, count) in reading.skipped {
            trace.warn_n(
                &format!("dataset {table} row with a missing value or an unknown process or GPU (skipped)"),
                count,
            );
        }
        trace.finish();
        out.push(trace);
    }
    out
}

/// Puts the collectives of one input in place, numbered by their rows: `collectiveId`s as written are 0..n, but
/// the ids of a damaged or hand-made dataset may have gaps or be huge, and the list is never sized from them
/// (ids are renumbered in order, and kernels follow). A kernel naming an id the table lacks loses its link,
/// counted.
fn link_collectives(trace: &mut Trace, list: BTreeMap<u32, Collective>) {
    let position: HashMap<u32, u32> = list.keys().enumerate().map(|(at, &id)| (id, at as u32)).collect();
    let renumbered = list.keys().enumerate().any(|(at, &id)| at as u32 != id);
    trace.collectives = list.into_values().collect();
    let mut dangling = 0u64;
    for kernel in &mut trace.kernels {
        if let Some(id) = kernel.collective {
            kernel.collective = position.get(&id).copied();
            dangling += u64::from(kernel.collective.is_none());
        }
    }
    trace.warn_n("dataset kernel naming a collective the collectives table lacks (link dropped)", dangling);
    if renumbered {
        trace.warn("dataset collectiveId values are not 0..n (collectives renumbered in order)");
    }
}

/// Each event's position in its input's list, as written (`eventIndex`), per event list.
#[derive(Default)]
struct Order {
    kernels: Vec<u64>,
    memops: Vec<u64>,
    api_calls: Vec<u64>,
    ranges: Vec<u64>,
    graph_launches: Vec<u64>,
    memory_events: Vec<u64>,
    memory_pool_events: Vec<u64>,
    framework_memory: Vec<u64>,
}

/// Puts `events` back in the order they were written: rows of one input come from several rank partitions, and
/// events at the same time on different GPUs must keep their relative order for the trace to be the one written.
fn restore_order<T: Copy>(events: &mut Vec<T>, order: &[u64]) {
    if order.len() != events.len() || order.is_sorted() {
        return;
    }
    let mut positions: Vec<usize> = (0..events.len()).collect();
    positions.sort_by_key(|&i| order[i]);
    *events = positions.iter().map(|&i| events[i]).collect();
}

/// One input being rebuilt.
struct Reading {
    trace: Trace,
    order: Order,
    processes: HashMap<i64, ProcessIdx>,
    devices: HashMap<u32, DeviceIdx>,
    /// Rows skipped per table.
    skipped: BTreeMap<&'static str, u64>,
}

impl Reading {
    fn new(trace: Trace) -> Reading {
        Reading {
            trace,
            order: Order::default(),
            processes: HashMap::new(),
            devices: HashMap::new(),
            skipped: BTreeMap::new(),
        }
    }

    fn process(&self, global_pid: Option<i64>) -> Option<ProcessIdx> {
        self.processes.get(&global_pid?).copied()
    }

    fn device(&self, ordinal: Option<u32>) -> Option<DeviceIdx> {
        self.devices.get(&ordinal?).copied()
    }

    fn skip(&mut self, table: &'static str) {
        *self.skipped.entry(table).or_default() += 1;
    }
}

/// Checks the marker; returns whether it names a manifest (datasets written before manifests existed do not).
fn check_marker(root: &Path) -> Result<bool, Error> {
    let marker = root.join(MARKER_FILE);
    let file = File::open(&marker).map_err(|e| Error::io(&marker, e))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_MARKER_BYTES), &mut text)
        .map_err(|e| Error::io(&marker, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::format(&marker, format!("not a dataset marker: {e}")))?;
    if json.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(Error::format(&marker, format!("not a dataset marker: its format is not {FORMAT_NAME:?}")));
    }
    let version = json.get("schema_version").and_then(|v| v.as_str()).unwrap_or("(none)");
    check_version(&marker, version)?;
    match json.get("manifest") {
        None => Ok(false),
        Some(name) if name.as_str() == Some(manifest::MANIFEST_FILE) => Ok(true),
        Some(name) => Err(Error::format(&marker, format!("names an unknown manifest {name}"))),
    }
}

/// The dataset being read: its folder, the run, and the rows of each part as its manifest lists them.
struct Source<'a> {
    root: &'a Path,
    run: String,
    /// `None` for a dataset without a manifest.
    part_rows: Option<BTreeMap<PathBuf, u64>>,
}

/// Accepts the major version this build reads.
fn check_version(path: &Path, version: &str) -> Result<(), Error> {
    let major = |v: &str| v.split('.').next().map(str::to_string);
    if major(version) != major(SCHEMA_VERSION) || version.split('.').any(|p| p.parse::<u32>().is_err()) {
        return Err(Error::UnsupportedVersion {
            path: path.display().to_string(),
            version: version.to_string(),
            cause: format!(
                "this build reads dataset schema {SCHEMA_VERSION} and other {}.x",
                major(SCHEMA_VERSION).unwrap_or_default()
            ),
        });
    }
    Ok(())
}

/// The one run of the dataset: the `run=` folders of its `traces` table.
fn the_run(root: &Path) -> Result<String, Error> {
    let table = root.join(tables::TRACES);
    let entries = std::fs::read_dir(&table).map_err(|e| Error::io(&table, e))?;
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&table, e))?;
        if let Some(run) = entry.file_name().to_str().and_then(|n| n.strip_prefix("run="))
            && entry.path().is_dir()
        {
            runs.push(run.to_string());
        }
    }
    runs.sort();
    match runs.len() {
        0 => Err(Error::format(root, "the dataset holds no run (no traces/run=… folder)")),
        1 => Ok(runs.remove(0)),
        n => Err(Error::format(
            root,
            format!(
                "the dataset holds {n} runs ({}): a report covers one run; export each to a folder of its own",
                runs.join(", ")
            ),
        )),
    }
}

/// Every Parquet file of `table` for `run`, in path order (rank partitions included).
fn table_files(root: &Path, table: &str, run: &str) -> Result<Vec<PathBuf>, Error> {
    fn walk(folder: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
        for entry in std::fs::read_dir(folder).map_err(|e| Error::io(folder, e))? {
            let path = entry.map_err(|e| Error::io(folder, e))?.path();
            // Follows links, like reading the file would.
            let metadata = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            if metadata.is_dir() {
                walk(&path, out)?;
            } else if metadata.is_file() && path.extension().is_some_and(|e| e == "parquet") {
                out.push(path);
            }
        }
        Ok(())
    }
    let folder = root.join(table).join(format!("run={run}"));
    let mut files = Vec::new();
    if folder.is_dir() {
        walk(&folder, &mut files)?;
    }
    files.sort();
    Ok(files)
}

/// Reads every file of `table`, checking each one's schema version, and hands over its record batches.
fn for_each_batch(
    source: &Source,
    table: &str,
    mut each: impl FnMut(&Path, &RecordBatch) -> Result<(), Error>,
) -> Result<(), Error> {
    for file in table_files(source.root, table, &source.run)? {
        let parquet_error = |e: parquet::errors::ParquetError| {
            Error::format(&file, format!("not a readable Parquet file: {}", e.to_string().replace('\n', " ")))
        };
        let handle = File::open(&file).map_err(|e| Error::io(&file, e))?;
        let builder = guarded(&file, || ParquetRecordBatchReaderBuilder::try_new(handle).map_err(parquet_error))?;
        let version = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == METADATA_SCHEMA_VERSION))
            .and_then(|kv| kv.value.clone());
        match version {
            Some(version) => check_version(&file, &version)?,
            None => return Err(Error::format(&file, format!("no {METADATA_SCHEMA_VERSION} in its metadata"))),
        }
        let holds = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == METADATA_TABLE))
            .and_then(|kv| kv.value.as_deref());
        if holds != Some(table) {
            return Err(Error::format(&file, format!("holds table {}, not {table}", holds.unwrap_or("(unnamed)"))));
        }
        let rows = builder.metadata().file_metadata().num_rows();
        if let Some(expected) = source.part_rows.as_ref().and_then(|p| p.get(&file))
            && u64::try_from(rows).ok() != Some(*expected)
        {
            return Err(Error::format(&file, format!("holds {rows} rows, the dataset's manifest says {expected}")));
        }
        let mut batches = builder.with_batch_size(BATCH_ROWS).build().map_err(parquet_error)?;
        while let Some(batch) = guarded(&file, || Ok(batches.next()))? {
            let batch = batch.map_err(|e| Error::format(&file, format!("not a readable Parquet file: {e}")))?;
            each(&file, &batch)?;
        }
    }
    Ok(())
}

/// Rows decoded at a time.
const BATCH_ROWS: usize = 64 * 1024;

/// Runs one step of the Parquet decoder on `file`. On some damaged files the decoder panics (an index out of
/// bounds while decoding a page) instead of returning an error: that panic is caught and becomes the file's
/// one-line error, and the panic message is kept off stderr meanwhile. Only the decoder runs under the guard, so
/// a fault of this reader's own is never disguised as a damaged file.
///
/// The panic hook is installed once for the process and stays quiet only on a thread inside `guarded`:
/// swapping the process-wide hook around each step would race with other threads (a panic elsewhere printed
/// nothing, and two readers restoring each other's hooks could leave the quiet one installed for good).
pub fn guarded<T>(file: &Path, step: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    thread_local! {
        static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET.replace(true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step));
    QUIET.set(was_quiet);
    result.unwrap_or_else(|_| Err(Error::format(file, "damaged Parquet file: its data cannot be decoded")))
}

/// Reads the rows of `table` into their inputs: `each(columns, input, row, traceId)` returns false for a row it
/// skipped, which is counted.
fn read_rows(
    source: &Source,
    table: &'static str,
    traces: &mut BTreeMap<u32, Reading>,
    mut each: impl FnMut(&Columns, &mut Reading, usize, u32) -> Result<bool, Error>,
) -> Result<(), Error> {
    for_each_batch(source, table, |file, batch| {
        let columns = Columns { batch, file };
        for row in 0..batch.num_rows() {
            let id = columns.trace_id(row)?;
            let reading = columns.reading(traces, row)?;
            if !each(&columns, reading, row, id)? {
                reading.skip(table);
            }
        }
        Ok(())
    })
}

/// The columns of one record batch, looked up by name and type.
struct Columns<'a> {
    batch: &'a RecordBatch,
    file: &'a Path,
}

impl Columns<'_> {
    fn column(&self, name: &str) -> Result<&dyn Array, Error> {
        self.batch
            .column_by_name(name)
            .map(|c| c.as_ref())
            .ok_or_else(|| Error::format(self.file, format!("column {name} is missing")))
    }

    fn typed<'b, A: 'static>(&'b self, name: &str, expected: &str) -> Result<&'b A, Error> {
        let column = self.column(name)?;
        column.as_any().downcast_ref::<A>().ok_or_else(|| {
            Error::format(self.file, format!("column {name} is {}, expected {expected}", column.data_type()))
        })
    }

    fn i64(&self, name: &str) -> Result<&PrimitiveArray<Int64Type>, Error> {
        self.typed(name, "Int64")
    }

    fn u32(&self, name: &str) -> Result<&PrimitiveArray<UInt32Type>, Error> {
        self.typed(name, "UInt32")
    }

    fn u64(&self, name: &str) -> Result<&PrimitiveArray<UInt64Type>, Error> {
        self.typed(name, "UInt64")
    }

    /// A column a later minor version added: `None` in files written before it, an error when mistyped.
    fn optional_u32(&self, name: &str) -> Result<Option<&PrimitiveArray<UInt32Type>>, Error> {
        if self.batch.column_by_name(name).is_none() { Ok(None) } else { self.u32(name).map(Some) }
    }

    /// As [`Columns::optional_u32`].
    fn optional_u64(&self, name: &str) -> Result<Option<&PrimitiveArray<UInt64Type>>, Error> {
        if self.batch.column_by_name(name).is_none() { Ok(None) } else { self.u64(name).map(Some) }
    }

    fn str(&self, name: &str) -> Result<&StringArray, Error> {
        self.typed(name, "Utf8")
    }

    fn bool(&self, name: &str) -> Result<&BooleanArray, Error> {
        self.typed(name, "Boolean")
    }

    fn list(&self, name: &str) -> Result<&ListArray, Error> {
        self.typed(name, "List<UInt32>")
    }

    /// The input that `row` belongs to; a row naming an input the `traces` table lacks makes the file unusable.
    fn reading<'t>(&self, traces: &'t mut BTreeMap<u32, Reading>, row: usize) -> Result<&'t mut Reading, Error> {
        let id = self.trace_id(row)?;
        traces.get_mut(&id).ok_or_else(|| {
            Error::format(
                self.file,
                format!("row {row} names traceId {id}, which the {} table does not list", tables::TRACES),
            )
        })
    }

    fn trace_id(&self, row: usize) -> Result<u32, Error> {
        value(self.u32("traceId")?, row).ok_or_else(|| Error::format(self.file, format!("row {row} has no traceId")))
    }
}

fn value<T: ArrowPrimitiveType>(array: &PrimitiveArray<T>, row: usize) -> Option<T::Native> {
    array.is_valid(row).then(|| array.value(row))
}

fn text(array: &StringArray, row: usize) -> Option<&str> {
    array.is_valid(row).then(|| array.value(row))
}
