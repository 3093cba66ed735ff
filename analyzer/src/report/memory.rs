//! The report's `memory` section: per rank, GPU memory over the whole trace and per phase, from what the trace
//! holds (see `figures::memory` for what each source sees): the CUDA-level peak, when it happened, which kernels
//! were running on the GPU then, the largest allocations alive at the peak and made in the phase; the framework
//! allocator's peaks of allocated and reserved bytes. Ranks whose trace holds no memory events are left out.

use regex::Regex;
use serde::{Deserialize, Serialize};
use shardscope_model::{DeviceIdx, MemoryEvent, Trace};

use crate::figures::collectives::RankKey;
use crate::figures::memory::{self, CudaSeries, MemoryPoint};
use crate::figures::memory_origin::{OriginClass, Origins};

/// Allocations listed per peak or phase.
const LISTED: usize = 5;

/// Time buckets of [`RankMemory::over_time`]: enough for a chart's width, few enough for a JSON report.
const BUCKETS: usize = 120;

/// One rank's memory figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankMemory {
    /// The rank.
    pub rank: u32,
    /// CUDA device ordinal in its file.
    pub device: u32,
    /// CUDA-level figures over the whole trace, when the trace has CUDA memory events.
    pub cuda: Option<CudaMemory>,
    /// Framework allocator figures over the whole trace, when the trace has them.
    pub framework: Option<FrameworkMemory>,
    /// Per recorded phase, in order of first appearance.
    pub phases: Vec<PhaseMemory>,
    /// Memory over time: the highest level of each source in each of up to 120 equal time buckets spanning the
    /// rank's memory events (the level carried into a bucket counts).
    pub over_time: Vec<MemoryBucket>,
}

/// One time bucket of [`RankMemory::over_time`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBucket {
    /// Start of the bucket (trace clock); it ends where the next one starts.
    pub start_ns: i64,
    /// Highest CUDA-level device memory in the bucket.
    pub cuda_bytes: Option<u64>,
    /// Highest framework `Total Allocated`.
    pub allocated_bytes: Option<u64>,
    /// Highest framework `Total Reserved`.
    pub reserved_bytes: Option<u64>,
}

/// CUDA-level memory of a rank (or of a phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CudaMemory {
    /// Allocations and releases counted.
    pub allocations: u64,
    /// See [`CudaSeries::releases`].
    pub releases: u64,
    /// See [`CudaSeries::unmatched_releases`].
    pub unmatched_releases: u64,
    /// Highest level of device memory, bytes.
    pub peak_bytes: u64,
    /// When it was first reached (trace clock).
    pub peak_ns: i64,
    /// Kernels running on the GPU at that moment (demangled names, earliest start first).
    pub kernels_at_peak: Vec<String>,
    /// Level at the end, bytes.
    pub end_bytes: u64,
    /// The largest allocations alive at the peak.
    pub live_at_peak: Vec<Allocation>,
    /// The largest allocations made (in the phase, for a phase).
    pub largest_allocations: Vec<Allocation>,
    /// The peak split by who made the allocations alive then (`figures::memory_origin`): the three sums are the
    /// peak.
    #[serde(default)]
    pub peak_by_origin: OriginSplit,
    /// The allocations alive at the peak that are not framework segments, largest first (at most 5): what the peak
    /// holds beyond the framework's reserved bytes, named where the trace allows.
    #[serde(default)]
    pub outside_framework_at_peak: Vec<OwnedAllocation>,
}

/// Bytes alive at a peak by origin class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginSplit {
    /// Segments of the framework's caching allocator: to compare with `torch.cuda.max_memory_reserved()`.
    pub framework_segment_bytes: u64,
    /// Libraries' own allocations.
    pub library_bytes: u64,
    /// Allocations the trace cannot attribute.
    pub unknown_bytes: u64,
    /// Per library, bytes at the peak, largest first.
    pub libraries: Vec<LibraryBytes>,
}

/// One library's bytes at a peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryBytes {
    /// The owner as the rule named it.
    pub owner: String,
    /// Bytes.
    pub bytes: u64,
}

/// An allocation with its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedAllocation {
    /// When (trace clock).
    pub time_ns: i64,
    /// Bytes.
    pub bytes: u64,
    /// Virtual address.
    pub address: u64,
    /// The class.
    pub class: OriginClass,
    /// The owner's name; empty when unknown.
    pub owner: String,
    /// The rule that decided.
    pub rule: String,
    /// The allocating API call, when the trace holds it.
    pub api: Option<String>,
    /// The calling OS thread, when the trace holds the call.
    pub tid: Option<u32>,
}

/// One allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// When (trace clock).
    pub time_ns: i64,
    /// Bytes.
    pub bytes: u64,
    /// Virtual address.
    pub address: u64,
    /// Stream of a stream-ordered allocation.
    pub stream: Option<u32>,
}

/// Framework allocator peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameworkMemory {
    /// Samples counted.
    pub samples: u64,
    /// Highest `Total Allocated` (bytes in tensors).
    pub peak_allocated_bytes: u64,
    /// When.
    pub peak_allocated_ns: i64,
    /// Highest `Total Reserved` (bytes held from CUDA).
    pub peak_reserved_bytes: u64,
    /// When.
    pub peak_reserved_ns: i64,
}

/// One phase's memory figures, in the one range of the phase (of the rank's process) that holds its peak: a phase
/// recorded as many ranges (a decode step each) is as high as its highest range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseMemory {
    /// Phase name.
    pub name: String,
    /// CUDA-level figures inside the phase.
    pub cuda: Option<CudaMemory>,
    /// Framework figures inside the phase.
    pub framework: Option<FrameworkMemory>,
}

/// The memory section for the ranks `ranks` (as `figures::run::assign_ranks` numbers them).
pub fn section(traces: &[Trace], ranks: &[(RankKey, u32, bool)], phase_pattern: &Regex) -> Vec<RankMemory> {
    let mut out: Vec<RankMemory> = ranks
        .iter()
        .filter_map(|&(key, rank, _)| rank_memory(&traces[key.trace], key.device, rank, phase_pattern))
        .collect();
    out.sort_by_key(|r| r.rank);
    out
}

/// The memory figures of one GPU of `trace` as rank `rank`: `None` when the trace holds no memory events of it. What
/// the section gives for a rank needs only the rank's own trace, so the report in parts (`report::partial`) makes
/// it per trace and sets the rank when the parts are merged.
pub fn rank_memory(trace: &Trace, device: DeviceIdx, rank: u32, phase_pattern: &Regex) -> Option<RankMemory> {
    let series = memory::cuda_series(trace, device);
    let (allocated, reserved) = memory::framework_series(trace, device);
    if series.points.is_empty() && allocated.is_empty() {
        return None;
    }
    let origins = Origins::new(trace);
    let cuda = |start_ns, end_ns| cuda_memory(trace, device, &series, &origins, (start_ns, end_ns));
    let phases = phase_windows(trace, device, phase_pattern)
        .into_iter()
        .map(|(name, windows)| PhaseMemory {
            name,
            cuda: peak_window(&series.points, &windows).and_then(|(s, e)| cuda(s, e)),
            framework: peak_window(&allocated, &windows)
                .and_then(|(s, e)| framework_memory(&allocated, &reserved, s, e)),
        })
        .collect();
    Some(RankMemory {
        rank,
        device: trace.devices.get(device.0 as usize).map_or(0, |d| d.ordinal),
        cuda: cuda(i64::MIN, i64::MAX),
        framework: framework_memory(&allocated, &reserved, i64::MIN, i64::MAX),
        phases,
        over_time: over_time(&[&series.points, &allocated, &reserved]),
    })
}

/// The buckets over the time range of `sources` (CUDA level, allocated, reserved).
fn over_time(sources: &[&[MemoryPoint]; 3]) -> Vec<MemoryBucket> {
    let first = sources.iter().filter_map(|s| s.first()).map(|p| p.time_ns).min();
    let last = sources.iter().filter_map(|s| s.last()).map(|p| p.time_ns).max();
    let (Some(first), Some(last)) = (first, last) else { return Vec::new() };
    let width_ns = ((last - first) / BUCKETS as i64).max(1) + 1;
    let highest =
        |points: &[MemoryPoint], start: i64| memory::peak_in(points, start, start + width_ns).map(|(p, _)| p.bytes);
    (0..BUCKETS as i64)
        .map(|i| first + i * width_ns)
        .take_while(|&start| start <= last)
        .map(|start_ns| MemoryBucket {
            start_ns,
            cuda_bytes: highest(sources[0], start_ns),
            allocated_bytes: highest(sources[1], start_ns),
            reserved_bytes: highest(sources[2], start_ns),
        })
        .collect()
}

/// The window of `windows` in which `points` reach their highest level (the first of equals).
fn peak_window(points: &[MemoryPoint], windows: &[(i64, i64)]) -> Option<(i64, i64)> {
    let peaks = windows.iter().filter_map(|&(s, e)| memory::peak_in(points, s, e).map(|(p, _)| (p, (s, e))));
    peaks.max_by_key(|(p, _)| (p.bytes, std::cmp::Reverse(p.time_ns))).map(|(_, window)| window)
}

/// CUDA-level figures in `[start_ns, end_ns)`.
fn cuda_memory(
    trace: &Trace,
    device: DeviceIdx,
    series: &CudaSeries,
    origins: &Origins<'_>,
    (start_ns, end_ns): (i64, i64),
) -> Option<CudaMemory> {
    let (peak, index) = memory::peak_in(&series.points, start_ns, end_ns)?;
    // A peak carried into the window is the level at its start: alive then is what was alive after the last
    // event before it.
    let live_index = index.or_else(|| series.points.partition_point(|p| p.time_ns < start_ns).checked_sub(1));
    let all_live = live_index.map_or_else(Vec::new, |i| memory::live_at(trace, series, i, usize::MAX));
    let (peak_by_origin, outside_framework_at_peak) = by_origin(origins, &all_live);
    let live = &all_live[..all_live.len().min(LISTED)];
    let inside = |e: &&MemoryEvent| e.time_ns >= start_ns && e.time_ns < end_ns;
    let made = series
        .events
        .iter()
        .map(|&i| &trace.memory_events[i as usize])
        .filter(inside)
        .filter(|e| e.operation == shardscope_model::MemoryOperation::Allocation)
        .copied();
    let counted = series.points.iter().zip(&series.events).filter(|(p, _)| p.time_ns >= start_ns && p.time_ns < end_ns);
    let (mut allocations, mut releases) = (0, 0);
    for (_, &i) in counted {
        match trace.memory_events[i as usize].operation {
            shardscope_model::MemoryOperation::Allocation => allocations += 1,
            shardscope_model::MemoryOperation::Release => releases += 1,
        }
    }
    let end_bytes = series.points.iter().take_while(|p| p.time_ns < end_ns).last().map_or(0, |p| p.bytes);
    let whole = start_ns == i64::MIN;
    Some(CudaMemory {
        allocations,
        releases,
        unmatched_releases: if whole { series.unmatched_releases } else { 0 },
        peak_bytes: peak.bytes,
        peak_ns: peak.time_ns,
        kernels_at_peak: memory::kernels_running_at(trace, device, peak.time_ns)
            .into_iter()
            .map(|k| trace.kernel_name(&trace.kernels[k as usize]).to_string())
            .collect(),
        end_bytes,
        live_at_peak: live.iter().map(allocation).collect(),
        largest_allocations: memory::largest(made, LISTED).iter().map(allocation).collect(),
        peak_by_origin,
        outside_framework_at_peak,
    })
}

/// The split of `live` (largest first) by origin, and its largest allocations outside the framework's segments.
fn by_origin(origins: &Origins<'_>, live: &[MemoryEvent]) -> (OriginSplit, Vec<OwnedAllocation>) {
    let mut split = OriginSplit::default();
    let mut outside = Vec::new();
    for event in live {
        let origin = origins.of(event);
        match origin.class {
            OriginClass::FrameworkSegment => split.framework_segment_bytes += event.bytes,
            OriginClass::Library => {
                split.library_bytes += event.bytes;
                match split.libraries.iter_mut().find(|l| l.owner == origin.owner) {
                    Some(library) => library.bytes += event.bytes,
                    None => split.libraries.push(LibraryBytes { owner: origin.owner.clone(), bytes: event.bytes }),
                }
            }
            OriginClass::Unknown => split.unknown_bytes += event.bytes,
        }
        if origin.class != OriginClass::FrameworkSegment && outside.len() < LISTED {
            outside.push(OwnedAllocation {
                time_ns: event.time_ns,
                bytes: event.bytes,
                address: event.address,
                class: origin.class,
                owner: origin.owner,
                rule: origin.rule.to_string(),
                api: origin.api,
                tid: origin.tid,
            });
        }
    }
    split.libraries.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.owner.cmp(&b.owner)));
    (split, outside)
}

fn allocation(event: &MemoryEvent) -> Allocation {
    Allocation { time_ns: event.time_ns, bytes: event.bytes, address: event.address, stream: event.stream }
}

/// Framework peaks in `[start_ns, end_ns)` (the level carried in counts, as for the CUDA level).
fn framework_memory(
    allocated: &[MemoryPoint],
    reserved: &[MemoryPoint],
    start_ns: i64,
    end_ns: i64,
) -> Option<FrameworkMemory> {
    let (peak_allocated, _) = memory::peak_in(allocated, start_ns, end_ns)?;
    let (peak_reserved, _) =
        memory::peak_in(reserved, start_ns, end_ns).unwrap_or((MemoryPoint { time_ns: 0, bytes: 0 }, None));
    let samples = allocated.iter().filter(|p| p.time_ns >= start_ns && p.time_ns < end_ns).count() as u64;
    Some(FrameworkMemory {
        samples,
        peak_allocated_bytes: peak_allocated.bytes,
        peak_allocated_ns: peak_allocated.time_ns,
        peak_reserved_bytes: peak_reserved.bytes,
        peak_reserved_ns: peak_reserved.time_ns,
    })
}

/// The recorded phase ranges on the process that owns `device` (all processes when it has no owner), per phase
/// name in order of first appearance; names as the report's phases take them (the pattern's first group,
/// lower-cased, else the whole name).
fn phase_windows(trace: &Trace, device: DeviceIdx, pattern: &Regex) -> Vec<(String, Vec<(i64, i64)>)> {
    let owner = trace.devices.get(device.0 as usize).and_then(|d| d.process);
    let mut phases: Vec<(String, Vec<(i64, i64)>)> = Vec::new();
    for range in trace.ranges.iter().filter(|r| owner.is_none_or(|p| p == r.process)) {
        let text = trace.names.get(range.name);
        let Some(captures) = pattern.captures(text) else { continue };
        let name = captures.get(1).map_or(text.to_string(), |m| m.as_str().to_lowercase());
        match phases.iter_mut().find(|(n, _)| *n == name) {
            Some((_, windows)) => windows.push((range.start_ns, range.end_ns)),
            None => phases.push((name, vec![(range.start_ns, range.end_ns)])),
        }
    }
    phases
}
