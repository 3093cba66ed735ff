//! GPU memory over time, drawn as a counter row under each GPU's streams.
//!
//! A GPU's row holds up to three step series, each the analyzer's ([`shardscope_analyzer::figures::memory`]): the
//! CUDA-level bytes in use (device memory the driver allocated minus what it released, `capture --trace memory`,
//! nsys `--cuda-memory-usage=true`), and, where the trace has the framework allocator's counters (Kineto's
//! `[memory]` events), its allocated and reserved bytes. A level holds from its point until the next one; the last
//! holds to the end of the timeline.
//!
//! Drawn per pixel column: the lowest and highest level the column's time saw (the level carried into it and every
//! point inside it). The points are indexed by a min/max pyramid over blocks of [`BLOCK`] points, so a column costs
//! two binary searches and a walk of at most `2 × BLOCK` points plus two entries per pyramid level, whatever the
//! number of points in it: tens of millions of allocations stay a few thousand steps a frame.

use shardscope_analyzer::figures::memory::{MemoryPoint, cuda_series, framework_series};
use shardscope_analyzer::output::render::{DurationDecimals, format_duration};
use shardscope_model::{DeviceIdx, ProcessIdx, Trace};

/// Points per leaf of the min/max pyramid: short runs are scanned, longer ones read from the pyramid.
pub const BLOCK: usize = 32;

/// Lowest and highest of a run of levels, bytes.
pub type MinMax = (u64, u64);

fn combine(a: MinMax, b: MinMax) -> MinMax {
    (a.0.min(b.0), a.1.max(b.1))
}

/// Lowest and highest of any run of values in a few steps: `levels[0]` holds each block of [`BLOCK`] values,
/// `levels[k + 1][i]` the two entries `2i` and `2i + 1` of `levels[k]`.
#[derive(Debug, Clone, Default)]
struct Pyramid {
    levels: Vec<Vec<MinMax>>,
}

impl Pyramid {
    fn build(values: &[u64]) -> Pyramid {
        let mut levels = Vec::new();
        let mut level: Vec<MinMax> = values
            .chunks(BLOCK)
            .map(|chunk| chunk.iter().fold((u64::MAX, 0), |acc, &v| combine(acc, (v, v))))
            .collect();
        while level.len() > 1 {
            let next = level.chunks(2).map(|pair| pair.iter().copied().fold((u64::MAX, 0), combine)).collect();
            levels.push(std::mem::replace(&mut level, next));
        }
        levels.push(level);
        Pyramid { levels }
    }

    /// Lowest and highest of `values[from..to]` (`values` as built); `None` for an empty run.
    fn query(&self, values: &[u64], from: usize, to: usize) -> Option<MinMax> {
        let to = to.min(values.len());
        if from >= to {
            return None;
        }
        let scan =
            |range: std::ops::Range<usize>, acc: MinMax| values[range].iter().fold(acc, |a, &v| combine(a, (v, v)));
        let (first_block, end_block) = (from.div_ceil(BLOCK), to / BLOCK);
        if end_block <= first_block {
            return Some(scan(from..to, (u64::MAX, 0)));
        }
        let mut acc = scan(from..first_block * BLOCK, (u64::MAX, 0));
        acc = scan(end_block * BLOCK..to, acc);
        // Whole blocks, bottom-up: an odd edge is taken at its level, the rest move up to their parents.
        let (mut lo, mut hi) = (first_block, end_block);
        for level in &self.levels {
            if lo >= hi {
                break;
            }
            if lo % 2 == 1 {
                acc = combine(acc, level[lo]);
                lo += 1;
            }
            if hi % 2 == 1 {
                hi -= 1;
                acc = combine(acc, level[hi]);
            }
            lo /= 2;
            hi /= 2;
        }
        Some(acc)
    }
}

/// One step series of a GPU's memory row.
#[derive(Debug, Clone)]
pub struct CounterSeries {
    /// What it counts, as the hover text names it: `CUDA`, `allocated` or `reserved`.
    pub label: &'static str,
    /// Point times, sorted.
    times_ns: Vec<i64>,
    /// Bytes in use from each point until the next.
    bytes: Vec<u64>,
    pyramid: Pyramid,
}

impl CounterSeries {
    /// A series from `points` (time order, as the analyzer gives them).
    pub fn new(label: &'static str, points: &[MemoryPoint]) -> CounterSeries {
        let mut sorted = points.to_vec();
        sorted.sort_by_key(|p| p.time_ns);
        let times_ns: Vec<i64> = sorted.iter().map(|p| p.time_ns).collect();
        let bytes: Vec<u64> = sorted.iter().map(|p| p.bytes).collect();
        let pyramid = Pyramid::build(&bytes);
        CounterSeries { label, times_ns, bytes, pyramid }
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.times_ns.len()
    }

    /// True without points.
    pub fn is_empty(&self) -> bool {
        self.times_ns.is_empty()
    }

    /// Time of the first point.
    pub fn first_ns(&self) -> Option<i64> {
        self.times_ns.first().copied()
    }

    /// Time of the last point.
    pub fn last_ns(&self) -> Option<i64> {
        self.times_ns.last().copied()
    }

    /// The highest level.
    pub fn max_bytes(&self) -> u64 {
        self.pyramid.levels.last().and_then(|l| l.first()).map_or(0, |m| m.1)
    }

    /// The level at `t_ns` (the last point at or before it); `None` before the first point or after `end_ns`.
    pub fn value_at(&self, t_ns: i64, end_ns: i64) -> Option<u64> {
        if t_ns > end_ns {
            return None;
        }
        let after = self.times_ns.partition_point(|&t| t <= t_ns);
        after.checked_sub(1).map(|i| self.bytes[i])
    }

    /// Lowest and highest level within `[from_ns, to_ns)`: the level carried in at `from_ns` and every point
    /// before `to_ns`. `None` where the series has no level (before its first point, after `end_ns`).
    pub fn min_max(&self, from_ns: f64, to_ns: f64, end_ns: i64) -> Option<MinMax> {
        if from_ns > end_ns as f64 || to_ns <= from_ns {
            return None;
        }
        // Times are whole nanoseconds: t ≤ x ⇔ t ≤ ⌊x⌋, and t < y ⇔ t < ⌈y⌉.
        let (from, to) = (from_ns.floor() as i64, to_ns.ceil() as i64);
        let carried_from = self.times_ns.partition_point(|&t| t <= from).saturating_sub(1);
        let end = self.times_ns.partition_point(|&t| t < to);
        self.pyramid.query(&self.bytes, carried_from, end)
    }

    /// [`Self::min_max`] of each of `columns` equal columns from `start_ns`, each `column_ns` long.
    pub fn columns(&self, start_ns: f64, column_ns: f64, columns: usize, end_ns: i64) -> Vec<Option<MinMax>> {
        (0..columns)
            .map(|c| {
                let from = start_ns + c as f64 * column_ns;
                self.min_max(from, from + column_ns, end_ns)
            })
            .collect()
    }
}

/// The memory row of one GPU of one trace.
#[derive(Debug, Clone)]
pub struct MemoryCounter {
    /// Trace index.
    pub trace: usize,
    /// The GPU.
    pub device: DeviceIdx,
    /// The process of its first point (the rows go under the first process that shows the GPU).
    pub process: ProcessIdx,
    /// The series it has, in the order `CUDA`, `allocated`, `reserved`; at least one, none empty.
    pub series: Vec<CounterSeries>,
    /// The last level of every series holds until here: the end of the timeline.
    pub end_ns: i64,
}

impl MemoryCounter {
    /// The memory row of every GPU of `trace` with CUDA-level or framework memory points, in device order.
    pub fn of_trace(trace: &Trace, trace_index: usize) -> Vec<MemoryCounter> {
        let mut devices: Vec<DeviceIdx> = trace.memory_events.iter().map(|e| e.device).collect();
        devices.extend(trace.framework_memory.iter().filter_map(|s| s.device));
        devices.sort_unstable_by_key(|d| d.0);
        devices.dedup();
        devices.into_iter().filter_map(|device| MemoryCounter::of_device(trace, trace_index, device)).collect()
    }

    /// The memory row of `device`, if it has any level.
    pub fn of_device(trace: &Trace, trace_index: usize, device: DeviceIdx) -> Option<MemoryCounter> {
        let cuda = cuda_series(trace, device);
        let (allocated, reserved) = framework_series(trace, device);
        let series: Vec<CounterSeries> =
            [("CUDA", cuda.points.as_slice()), ("allocated", allocated.as_slice()), ("reserved", reserved.as_slice())]
                .into_iter()
                .filter(|(_, points)| !points.is_empty())
                .map(|(label, points)| CounterSeries::new(label, points))
                .collect();
        let end_ns = series.iter().filter_map(CounterSeries::last_ns).max()?;
        let cuda_process = cuda.events.first().and_then(|&e| trace.memory_events.get(e as usize)).map(|e| e.process);
        let framework_process = || trace.framework_memory.iter().find(|s| s.device == Some(device)).map(|s| s.process);
        let process = cuda_process.or_else(framework_process).unwrap_or_default();
        Some(MemoryCounter { trace: trace_index, device, process, series, end_ns })
    }

    /// First and last point over all series.
    pub fn span_ns(&self) -> (i64, i64) {
        let first = self.series.iter().filter_map(CounterSeries::first_ns).min().unwrap_or(self.end_ns);
        (first, self.end_ns)
    }

    /// The highest level of any series: the top of the row.
    pub fn max_bytes(&self) -> u64 {
        self.series.iter().map(CounterSeries::max_bytes).max().unwrap_or(0)
    }

    /// What the row's hover shows at `t_ns`: each series' level (`CUDA 1.500 GiB · reserved 1.000 GiB`), then the
    /// time as the axis gives it (from `origin_ns`). `None` where no series has a level.
    pub fn hover_text(&self, t_ns: i64, origin_ns: i64) -> Option<String> {
        let levels: Vec<String> = self
            .series
            .iter()
            .filter_map(|s| s.value_at(t_ns, self.end_ns).map(|bytes| format!("{} {}", s.label, format_bytes(bytes))))
            .collect();
        if levels.is_empty() {
            return None;
        }
        let at = format_duration((t_ns - origin_ns) as f64, DurationDecimals::FINE);
        Some(format!("{}\nat {at}", levels.join(" · ")))
    }
}

/// A byte count in binary units: three decimals of GiB, one of MiB or KiB, whole bytes below.
pub fn format_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.3} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{Device, FrameworkMemorySample, MemoryEvent, MemoryKind, MemoryOperation};

    const MIB: u64 = 1 << 20;

    fn points(list: &[(i64, u64)]) -> Vec<MemoryPoint> {
        list.iter().map(|&(time_ns, bytes)| MemoryPoint { time_ns, bytes }).collect()
    }

    /// Levels 10 at 100, 30 at 150, 20 at 160, 50 at 330, 0 at 340, 40 at 520, to the end at 600, in columns of
    /// 100 ns from 0: nothing before the first point, then the level carried in and every point inside, the last
    /// level up to and including the end.
    #[test]
    fn columns_hold_the_carried_level_and_every_point_inside() {
        let series =
            CounterSeries::new("CUDA", &points(&[(100, 10), (150, 30), (160, 20), (330, 50), (340, 0), (520, 40)]));
        let columns = series.columns(0.0, 100.0, 8, 600);
        assert_eq!(
            columns,
            [None, Some((10, 30)), Some((20, 20)), Some((0, 50)), Some((0, 0)), Some((0, 40)), Some((40, 40)), None]
        );
        // Column borders between whole nanoseconds: a point at 150 belongs to the column [149.5, 150.5).
        assert_eq!(series.min_max(149.5, 150.5, 600), Some((10, 30)));
        assert_eq!(series.min_max(150.5, 159.5, 600), Some((30, 30)));
        assert_eq!(series.max_bytes(), 50);
    }

    /// Against a plain scan on many points and random columns: the pyramid's answer is the same.
    #[test]
    fn the_pyramid_answers_as_a_scan_does() {
        // A deterministic walk: 10,000 points, levels going up and down.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let list: Vec<(i64, u64)> = (0..10_000).map(|i| (i * 7 + (next() % 5) as i64, next() % 1_000_000)).collect();
        let series = CounterSeries::new("CUDA", &points(&list));
        for _ in 0..2_000 {
            let a = (next() % 10_000) as usize;
            let b = a + (next() % 3_000) as usize;
            let scan = series.bytes[a..b.min(series.bytes.len())]
                .iter()
                .fold(None, |acc: Option<MinMax>, &v| Some(acc.map_or((v, v), |m| combine(m, (v, v)))));
            assert_eq!(series.pyramid.query(&series.bytes, a, b), scan, "{a}..{b}");
        }
        assert_eq!(series.max_bytes(), *series.bytes.iter().max().unwrap());
    }

    fn memory_trace() -> Trace {
        let mut trace = Trace::default();
        let device = trace.add_device(Device::default());
        let event = |time_ns, operation, address, bytes| MemoryEvent {
            time_ns,
            device,
            operation,
            kind: MemoryKind::Device,
            address,
            bytes,
            ..MemoryEvent::default()
        };
        trace.memory_events = vec![
            event(1_000, MemoryOperation::Allocation, 0xa, 512 * MIB),
            event(2_000, MemoryOperation::Allocation, 0xb, 1024 * MIB),
            event(5_000, MemoryOperation::Release, 0xa, 512 * MIB),
        ];
        let sample = |time_ns, allocated, reserved| FrameworkMemorySample {
            time_ns,
            device: Some(device),
            total_allocated_bytes: allocated,
            total_reserved_bytes: reserved,
            ..FrameworkMemorySample::default()
        };
        trace.framework_memory = vec![sample(1_500, 100 * MIB, 512 * MIB), sample(2_500, 300 * MIB, 1536 * MIB)];
        trace.finish();
        trace
    }

    #[test]
    fn hover_gives_each_level_at_the_time_under_the_pointer() {
        let counter = MemoryCounter::of_device(&memory_trace(), 0, DeviceIdx(0)).expect("the GPU has memory");
        assert_eq!(counter.series.iter().map(|s| s.label).collect::<Vec<_>>(), ["CUDA", "allocated", "reserved"]);
        assert_eq!(counter.max_bytes(), 1536 * MIB);
        assert_eq!(counter.span_ns(), (1_000, 5_000));
        // At 3 µs: both allocations live (1.5 GiB), the allocator's second sample.
        assert_eq!(
            counter.hover_text(3_000, 0).as_deref(),
            Some("CUDA 1.500 GiB · allocated 300.0 MiB · reserved 1.500 GiB\nat 3.000 µs")
        );
        // At 1.2 µs, counted from 1 µs: the first allocation only, before the allocator's first sample.
        assert_eq!(counter.hover_text(1_200, 1_000).as_deref(), Some("CUDA 512.0 MiB\nat 200 ns"));
        assert_eq!(counter.hover_text(999, 0), None);
        assert_eq!(counter.hover_text(5_001, 0), None, "past the end of the timeline");
        // After the release the levels hold until the end of the timeline.
        let mut later = counter.clone();
        later.end_ns = 9_000;
        assert_eq!(
            later.hover_text(8_000, 0).as_deref(),
            Some("CUDA 1.000 GiB · allocated 300.0 MiB · reserved 1.500 GiB\nat 8.000 µs")
        );
    }

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(300 * MIB), "300.0 MiB");
        assert_eq!(format_bytes(3 * 1024 * MIB / 2), "1.500 GiB");
    }
}
