//! `Run.memory()`: every memory event of every rank as one pyarrow table, both sources in one shape (see
//! `docs/memory.md` for what each sees): CUDA-level allocations and releases (`level` = `cuda`, with the device's
//! level after each counted event) and the framework allocator's samples (`level` = `framework`, with its
//! `Total Allocated` and `Total Reserved`).

use std::collections::HashMap;

use pyo3::prelude::*;
use shardscope_analyzer::figures::memory::cuda_series;
use shardscope_model::{DeviceIdx, MemoryOperation, Trace};

use shardscope_io::parquet::{i64s, opt_u32s, opt_u64s, strs, u64s};

use crate::table;

/// The columns of one table, filled row by row.
#[derive(Default)]
struct Columns<'a> {
    rank: Vec<Option<u32>>,
    source: Vec<&'a str>,
    device: Vec<Option<u32>>,
    level: Vec<&'static str>,
    time_ns: Vec<i64>,
    operation: Vec<&'static str>,
    memory_kind: Vec<&'static str>,
    address: Vec<u64>,
    bytes: Vec<i64>,
    in_use_bytes: Vec<Option<u64>>,
    reserved_bytes: Vec<Option<u64>>,
}

/// The table over `traces`, ranks from `ranks` ((trace index, device) → rank).
pub(crate) fn memory_table(
    py: Python<'_>,
    traces: &[Trace],
    ranks: &HashMap<(usize, DeviceIdx), u32>,
) -> PyResult<Py<PyAny>> {
    let mut c = Columns::default();
    for (index, trace) in traces.iter().enumerate() {
        cuda_rows(&mut c, index, trace, ranks);
        framework_rows(&mut c, index, trace, ranks);
    }
    let bytes = c.bytes;
    table(
        py,
        vec![
            ("rank", opt_u32s(c.rank), true),
            ("source", strs(c.source), false),
            ("device", opt_u32s(c.device), true),
            ("level", strs(c.level), false),
            ("time_ns", i64s(c.time_ns), false),
            ("operation", strs(c.operation), false),
            ("memory_kind", strs(c.memory_kind), false),
            ("address", u64s(c.address), false),
            ("bytes", i64s(bytes), false),
            ("in_use_bytes", opt_u64s(c.in_use_bytes), true),
            ("reserved_bytes", opt_u64s(c.reserved_bytes), true),
        ],
    )
}

fn ordinal(trace: &Trace, device: DeviceIdx) -> Option<u32> {
    trace.devices.get(device.0 as usize).map(|d| d.ordinal)
}

fn cuda_rows<'a>(c: &mut Columns<'a>, index: usize, trace: &'a Trace, ranks: &HashMap<(usize, DeviceIdx), u32>) {
    // The device level after each event the level counts (device memory), by event index.
    let mut level_after: HashMap<u32, u64> = HashMap::new();
    for device in 0..trace.devices.len() {
        let series = cuda_series(trace, DeviceIdx(device as u32));
        level_after.extend(series.events.iter().zip(&series.points).map(|(&e, p)| (e, p.bytes)));
    }
    for (event_index, event) in trace.memory_events.iter().enumerate() {
        c.rank.push(ranks.get(&(index, event.device)).copied());
        c.source.push(trace.source.path.as_str());
        c.device.push(ordinal(trace, event.device));
        c.level.push("cuda");
        c.time_ns.push(event.time_ns);
        c.operation.push(match event.operation {
            MemoryOperation::Allocation => "allocation",
            MemoryOperation::Release => "release",
        });
        c.memory_kind.push(event.kind.label());
        c.address.push(event.address);
        c.bytes.push(event.signed_bytes());
        c.in_use_bytes.push(level_after.get(&(event_index as u32)).copied());
        c.reserved_bytes.push(None);
    }
}

fn framework_rows<'a>(c: &mut Columns<'a>, index: usize, trace: &'a Trace, ranks: &HashMap<(usize, DeviceIdx), u32>) {
    for sample in &trace.framework_memory {
        c.rank.push(sample.device.and_then(|d| ranks.get(&(index, d)).copied()));
        c.source.push(trace.source.path.as_str());
        c.device.push(sample.device.and_then(|d| ordinal(trace, d)));
        c.level.push("framework");
        c.time_ns.push(sample.time_ns);
        c.operation.push(if sample.bytes < 0 { "release" } else { "allocation" });
        c.memory_kind.push(if sample.device.is_some() { "device" } else { "host" });
        c.address.push(sample.address);
        c.bytes.push(sample.bytes);
        c.in_use_bytes.push(Some(sample.total_allocated_bytes));
        c.reserved_bytes.push(Some(sample.total_reserved_bytes));
    }
}
