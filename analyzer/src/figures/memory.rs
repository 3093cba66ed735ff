//! GPU memory over time on one device, from the two sources a trace may hold:
//!
//! - CUDA level ([`cuda_series`]): the running sum of the device memory the CUDA driver allocated minus what it
//!   released (`capture --trace memory`, nsys `--cuda-memory-usage=true`). Under PyTorch this is the caching
//!   allocator's segments plus what libraries (cuBLAS workspaces, NCCL buffers) allocate themselves: it does not
//!   fall when a tensor is freed, only when the allocator gives a segment back.
//! - Framework level ([`framework_series`]): the allocator's own counters after each tensor allocation or free
//!   (Kineto's `Total Allocated`, bytes in tensors, and `Total Reserved`, bytes held from CUDA).
//!
//! Both are step functions: a point is the level right after an event. [`peak_in`] finds the highest level in a
//! time window (the level carried into the window counts), and [`live_at`] the allocations alive at a moment.

use std::collections::HashMap;

use shardscope_model::{DeviceIdx, MemoryEvent, MemoryKind, MemoryOperation, Trace};

/// The level after one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    /// When (CPU time of the call).
    pub time_ns: i64,
    /// Bytes in use after it.
    pub bytes: u64,
}

/// The CUDA-level series of one device, and what it could not place.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CudaSeries {
    /// Level after each counted event, in time order.
    pub points: Vec<MemoryPoint>,
    /// Indices in [`Trace::memory_events`] of the counted events, one per point.
    pub events: Vec<u32>,
    /// Allocations counted.
    pub allocations: u64,
    /// Releases counted.
    pub releases: u64,
    /// Releases of an address with no recorded allocation (made before recording began): not subtracted, so the
    /// level never counts memory it never saw allocated.
    pub unmatched_releases: u64,
}

/// The memory kind the level counts: device memory allocated at run time (`cudaMalloc`, `cudaMallocAsync`,
/// `cuMemAlloc`), what nsys users sum as `memKind = 2` and what an allocator's reserved bytes are made of. Host
/// memory (pinned, pageable), managed memory (it migrates), arrays and static `__device__` variables (a few hundred
/// bytes per loaded module, never released) stay in the tables but out of the level.
pub fn counts_on_gpu(kind: MemoryKind) -> bool {
    kind == MemoryKind::Device
}

/// The CUDA-level series of `device`: device memory allocated minus released, after each event.
pub fn cuda_series(trace: &Trace, device: DeviceIdx) -> CudaSeries {
    let mut series = CudaSeries::default();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut level: u64 = 0;
    for (index, event) in trace.memory_events.iter().enumerate() {
        if event.device != device || !counts_on_gpu(event.kind) {
            continue;
        }
        match event.operation {
            MemoryOperation::Allocation => {
                live.insert(event.address, event.bytes);
                level = level.saturating_add(event.bytes);
                series.allocations += 1;
            }
            MemoryOperation::Release => match live.remove(&event.address) {
                Some(bytes) => {
                    level = level.saturating_sub(bytes);
                    series.releases += 1;
                }
                None => {
                    series.unmatched_releases += 1;
                    continue;
                }
            },
        }
        series.points.push(MemoryPoint { time_ns: event.time_ns, bytes: level });
        series.events.push(index as u32);
    }
    series
}

/// The framework allocator's series of `device`: (`Total Allocated`, `Total Reserved`) after each sample.
pub fn framework_series(trace: &Trace, device: DeviceIdx) -> (Vec<MemoryPoint>, Vec<MemoryPoint>) {
    let samples = trace.framework_memory.iter().filter(|s| s.device == Some(device));
    samples
        .map(|s| {
            (
                MemoryPoint { time_ns: s.time_ns, bytes: s.total_allocated_bytes },
                MemoryPoint { time_ns: s.time_ns, bytes: s.total_reserved_bytes },
            )
        })
        .unzip()
}

/// The highest level of `points` within `[start_ns, end_ns)`, with its time and index in `points`: the level
/// carried in from before the window counts (at `start_ns`, with no index). `None` when nothing was allocated by
/// the end of the window.
pub fn peak_in(points: &[MemoryPoint], start_ns: i64, end_ns: i64) -> Option<(MemoryPoint, Option<usize>)> {
    let first = points.partition_point(|p| p.time_ns < start_ns);
    let carried = first.checked_sub(1).map(|i| (MemoryPoint { time_ns: start_ns, bytes: points[i].bytes }, None));
    let inside = points[first..].iter().take_while(|p| p.time_ns < end_ns).enumerate();
    // The first point of the highest level: `max_by_key` keeps the last of equals, so compare reversed indices.
    let best_inside = inside.map(|(i, p)| (*p, Some(first + i))).max_by_key(|(p, i)| (p.bytes, std::cmp::Reverse(*i)));
    match (carried, best_inside) {
        (Some(c), Some(b)) if c.0.bytes >= b.0.bytes => Some(c),
        (_, Some(b)) => Some(b),
        (c, None) => c,
    }
    .filter(|(p, _)| p.bytes > 0)
}

/// The allocations of `series` still alive right after its point `index`, largest first (at most `limit`).
pub fn live_at(trace: &Trace, series: &CudaSeries, index: usize, limit: usize) -> Vec<MemoryEvent> {
    let mut live: HashMap<u64, &MemoryEvent> = HashMap::new();
    for &event_index in &series.events[..=index.min(series.events.len().saturating_sub(1))] {
        let event = &trace.memory_events[event_index as usize];
        match event.operation {
            MemoryOperation::Allocation => {
                live.insert(event.address, event);
            }
            MemoryOperation::Release => {
                live.remove(&event.address);
            }
        }
    }
    largest(live.into_values().copied(), limit)
}

/// The `limit` largest of `events` by bytes (earlier first among equals).
pub fn largest(events: impl Iterator<Item = MemoryEvent>, limit: usize) -> Vec<MemoryEvent> {
    let mut all: Vec<MemoryEvent> = events.collect();
    all.sort_by_key(|e| (std::cmp::Reverse(e.bytes), e.time_ns, e.address));
    all.truncate(limit);
    all
}

/// The kernels running on `device` at `time_ns` (started at or before it, not yet ended), as indices in
/// [`Trace::kernels`], longest-running first. `kernels` must be sorted by start, as [`Trace::finish`] leaves them.
pub fn kernels_running_at(trace: &Trace, device: DeviceIdx, time_ns: i64) -> Vec<u32> {
    let started = trace.kernels.partition_point(|k| k.start_ns <= time_ns);
    let mut running: Vec<u32> = (0..started)
        .filter(|&i| {
            let k = &trace.kernels[i];
            k.device == device && k.end_ns > time_ns
        })
        .map(|i| i as u32)
        .collect();
    running.sort_by_key(|&i| trace.kernels[i as usize].start_ns);
    running
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{Kernel, ProcessIdx};

    fn event(time_ns: i64, operation: MemoryOperation, address: u64, bytes: u64) -> MemoryEvent {
        MemoryEvent { time_ns, operation, address, bytes, kind: MemoryKind::Device, ..MemoryEvent::default() }
    }

    fn trace() -> Trace {
        let mut trace = Trace {
            memory_events: vec![
                event(10, MemoryOperation::Release, 0x9, 50), // allocated before recording
                event(20, MemoryOperation::Allocation, 0x1, 100),
                event(30, MemoryOperation::Allocation, 0x2, 300),
                MemoryEvent { kind: MemoryKind::Pinned, ..event(35, MemoryOperation::Allocation, 0x3, 1000) },
                event(40, MemoryOperation::Release, 0x1, 100),
                event(50, MemoryOperation::Allocation, 0x4, 200),
                event(60, MemoryOperation::Release, 0x2, 300),
            ],
            ..Trace::default()
        };
        let name = trace.names.intern("gemm");
        trace.kernels = vec![
            Kernel { start_ns: 0, end_ns: 45, name, process: ProcessIdx(0), ..Kernel::default() },
            Kernel { start_ns: 42, end_ns: 70, name, ..Kernel::default() },
        ];
        trace
    }

    #[test]
    fn the_series_counts_device_memory_and_skips_releases_it_never_saw_allocated() {
        let trace = trace();
        let series = cuda_series(&trace, DeviceIdx(0));
        let levels: Vec<(i64, u64)> = series.points.iter().map(|p| (p.time_ns, p.bytes)).collect();
        assert_eq!(levels, [(20, 100), (30, 400), (40, 300), (50, 500), (60, 200)]);
        assert_eq!((series.allocations, series.releases, series.unmatched_releases), (3, 2, 1));
    }

    #[test]
    fn the_peak_of_a_window_counts_the_level_carried_into_it() {
        let series = cuda_series(&trace(), DeviceIdx(0));
        let (whole, index) = peak_in(&series.points, 0, 100).unwrap();
        assert_eq!((whole.time_ns, whole.bytes, index), (50, 500, Some(3)));
        // From 55 on, only the level 500 carried in and the release to 200.
        let (late, index) = peak_in(&series.points, 55, 100).unwrap();
        assert_eq!((late.time_ns, late.bytes, index), (55, 500, None));
        assert_eq!(peak_in(&series.points, 0, 15), None, "nothing allocated yet");
    }

    #[test]
    fn live_allocations_and_running_kernels_at_the_peak() {
        let trace = trace();
        let series = cuda_series(&trace, DeviceIdx(0));
        let live = live_at(&trace, &series, 3, 5);
        assert_eq!(live.iter().map(|e| (e.address, e.bytes)).collect::<Vec<_>>(), [(0x2, 300), (0x4, 200)]);
        assert_eq!(kernels_running_at(&trace, DeviceIdx(0), 44), [0, 1]);
        assert_eq!(kernels_running_at(&trace, DeviceIdx(0), 50), [1]);
        assert!(kernels_running_at(&trace, DeviceIdx(0), 80).is_empty());
    }
}
