//! GPU utilisation, as Nsight Systems draws it above a GPU's streams: per pixel column, the fraction of its time
//! during which the GPU was busy.
//!
//! "Busy" is the analyzer's `gpu_busy_ns`: the union of the GPU's kernel, copy and set intervals and of CUDA graphs
//! recorded whole, built with the analyzer's own [`IntervalUnion`], so that kernels running side by side on two
//! streams count once. Averaged over a rank's span (its first GPU start to its last GPU end) the row is exactly the
//! report's busy share, `gpu_busy_ns / span_ns`.
//!
//! A column's busy time is the difference of two values of a running total of covered time, each one binary search
//! away, so a frame costs a few searches per pixel column whatever the number of kernels.

use shardscope_analyzer::figures::intervals::IntervalUnion;
use shardscope_model::{DeviceIdx, Trace};

/// The busy time of one GPU of one trace.
#[derive(Debug, Clone)]
pub struct GpuBusy {
    /// Trace index.
    pub trace: usize,
    /// The GPU.
    pub device: DeviceIdx,
    /// First start and last end of the GPU's work, ns (as the report's `span_ns`); `None` without work.
    pub span_ns: Option<(i64, i64)>,
    /// Busy time: the union of the work's intervals.
    busy: IntervalUnion,
    /// `covered_before_ns[i]` = summed length of the busy spans before span `i`.
    covered_before_ns: Vec<i64>,
}

impl GpuBusy {
    /// The busy time of every GPU of `trace` with work (one pass over its events), in device order.
    pub fn of_trace(trace: &Trace, trace_index: usize) -> Vec<GpuBusy> {
        let mut by_device: Vec<Vec<(i64, i64)>> = vec![Vec::new(); trace.devices.len()];
        let kernels = trace.kernels.iter().map(|k| (k.device, k.start_ns, k.end_ns));
        let memops = trace.memops.iter().map(|m| (m.device, m.start_ns, m.end_ns));
        let graphs = trace.graph_launches.iter().map(|g| (g.device, g.start_ns, g.end_ns));
        for (device, start_ns, end_ns) in kernels.chain(memops).chain(graphs) {
            let slot = device.0 as usize;
            if slot >= by_device.len() {
                by_device.resize(slot + 1, Vec::new());
            }
            by_device[slot].push((start_ns, end_ns));
        }
        by_device
            .into_iter()
            .enumerate()
            .filter(|(_, intervals)| !intervals.is_empty())
            .map(|(device, intervals)| GpuBusy::of_intervals(trace_index, DeviceIdx(device as u32), intervals))
            .collect()
    }

    /// The busy time of `device` in `trace`: its kernels, copies, sets and whole-graph records, as the analyzer's
    /// report counts them.
    pub fn of_device(trace: &Trace, trace_index: usize, device: DeviceIdx) -> GpuBusy {
        let kernels = trace.kernels.iter().filter(|k| k.device == device).map(|k| (k.start_ns, k.end_ns));
        let memops = trace.memops.iter().filter(|m| m.device == device).map(|m| (m.start_ns, m.end_ns));
        let graphs = trace.graph_launches.iter().filter(|g| g.device == device).map(|g| (g.start_ns, g.end_ns));
        GpuBusy::of_intervals(trace_index, device, kernels.chain(memops).chain(graphs).collect())
    }

    fn of_intervals(trace_index: usize, device: DeviceIdx, intervals: Vec<(i64, i64)>) -> GpuBusy {
        let span_ns = match (intervals.iter().map(|i| i.0).min(), intervals.iter().map(|i| i.1).max()) {
            (Some(first), Some(last)) => Some((first, last)),
            _ => None,
        };
        let busy = IntervalUnion::from_intervals(intervals);
        let mut covered = 0i64;
        let covered_before_ns = busy
            .spans()
            .iter()
            .map(|(start, end)| {
                let before = covered;
                covered = covered.saturating_add(end - start);
                before
            })
            .collect();
        GpuBusy { trace: trace_index, device, span_ns, busy, covered_before_ns }
    }

    /// True when the GPU has no busy time at all.
    pub fn is_empty(&self) -> bool {
        self.busy.spans().is_empty()
    }

    /// Where times are counted from inside: the first busy start. Kineto's timestamps are about 4.5e15 ns, where
    /// an `f64` keeps only whole nanoseconds; bucket boundaries added up from such a value would each be off by up
    /// to half a nanosecond, which is a visible error on columns 100 ns wide.
    fn origin_ns(&self) -> i64 {
        self.busy.spans().first().map_or(0, |s| s.0)
    }

    /// Busy time before `t` ns after [`Self::origin_ns`].
    fn covered_before_relative(&self, t: f64) -> f64 {
        let spans = self.busy.spans();
        let origin = self.origin_ns();
        // Spans starting before t; all but the last of them also end before it (they are disjoint and sorted).
        let starting_before = spans.partition_point(|&(start, _)| ((start - origin) as f64) < t);
        let Some(last) = starting_before.checked_sub(1) else { return 0.0 };
        let (start, end) = spans[last];
        self.covered_before_ns[last] as f64 + (t.min((end - origin) as f64) - (start - origin) as f64)
    }

    /// Busy time before `t_ns`, ns (fractional where `t_ns` is).
    pub fn covered_before(&self, t_ns: f64) -> f64 {
        self.covered_before_relative(t_ns - self.origin_ns() as f64)
    }

    /// Busy time within `[start_ns, end_ns)`, ns.
    pub fn busy_ns(&self, start_ns: f64, end_ns: f64) -> f64 {
        (self.covered_before(end_ns) - self.covered_before(start_ns)).max(0.0)
    }

    /// The busy fraction (0 to 1) of each of `buckets` equal buckets from `start_ns`, each `bucket_ns` long.
    pub fn fractions(&self, start_ns: f64, bucket_ns: f64, buckets: usize) -> Vec<f32> {
        if bucket_ns <= 0.0 {
            return vec![0.0; buckets];
        }
        let start = start_ns - self.origin_ns() as f64;
        let mut before = self.covered_before_relative(start);
        (0..buckets)
            .map(|i| {
                let after = self.covered_before_relative(start + (i + 1) as f64 * bucket_ns);
                let fraction = ((after - before) / bucket_ns).clamp(0.0, 1.0);
                before = after;
                fraction as f32
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_analyzer::report::{Options, analyze};
    use shardscope_model::{Kernel, MemOp};

    #[test]
    fn kernels_side_by_side_count_once_and_gaps_are_idle() {
        let mut trace = Trace::default();
        let device = trace.add_device(shardscope_model::Device::default());
        let other = trace.add_device(shardscope_model::Device { ordinal: 1, ..Default::default() });
        let kernel =
            |start_ns, end_ns, stream, device| Kernel { start_ns, end_ns, stream, device, ..Kernel::default() };
        // Two streams overlapping over 0..150, a gap, a copy at 200..300, and another GPU's kernel in the gap.
        trace.kernels = vec![kernel(0, 100, 7, device), kernel(50, 150, 8, device), kernel(150, 200, 7, other)];
        trace.memops = vec![MemOp { start_ns: 200, end_ns: 300, device, ..MemOp::default() }];
        trace.finish();
        let busy = GpuBusy::of_device(&trace, 0, device);
        assert_eq!(busy.span_ns, Some((0, 300)));
        assert_eq!(busy.busy_ns(0.0, 300.0), 250.0);
        assert_eq!(busy.busy_ns(25.0, 75.0), 50.0);
        assert_eq!(busy.busy_ns(150.0, 200.0), 0.0);
        assert_eq!(busy.fractions(0.0, 50.0, 6), [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]);
        assert_eq!(busy.fractions(100.0, 100.0, 2), [0.5, 1.0]);
        // Before and after all work.
        assert_eq!(busy.fractions(-200.0, 100.0, 2), [0.0, 0.0]);
        assert_eq!(busy.fractions(300.0, 10.0, 1), [0.0]);
    }

    /// On every GPU of the bundled two-rank samples (a capture, the skewed capture, an nsys export, per-rank Kineto
    /// files), the utilisation row averaged over the rank's span is the report's busy share, for any number of
    /// columns.
    #[test]
    fn the_row_averages_to_the_reports_busy_share_on_the_samples() {
        for sample in ["tp2_capture.sqlite.gz", "tp2_skew_capture.sqlite.gz", "tp2_nsys.sqlite.gz", "kineto_tp2"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces").join(sample);
            let traces = shardscope_io::load(&path).expect("the bundled sample loads");
            assert_averages_to_busy_share(&traces);
        }
    }

    fn assert_averages_to_busy_share(traces: &[Trace]) {
        let report = analyze(traces, &Options::default());
        assert_eq!(report.ranks.len(), 2);
        for rank in &report.ranks {
            let trace = traces.iter().position(|t| t.source.path == rank.source).unwrap();
            let device = traces[trace].devices.iter().position(|d| d.ordinal == rank.device).unwrap();
            let busy = GpuBusy::of_device(&traces[trace], trace, DeviceIdx(device as u32));
            let from_trace = GpuBusy::of_trace(&traces[trace], trace);
            let same = from_trace.iter().find(|b| b.device.0 as usize == device).expect("the GPU has work");
            assert_eq!((same.span_ns, same.busy.spans()), (busy.span_ns, busy.busy.spans()));
            let (first, last) = busy.span_ns.unwrap();
            assert_eq!(last - first, rank.figures.span_ns);
            let share = rank.figures.gpu_busy_ns as f64 / rank.figures.span_ns as f64;
            assert!(share > 0.0 && share < 1.0, "rank {} share {share}", rank.rank);
            for columns in [1, 977, 1370, 100_000] {
                let bucket_ns = (last - first) as f64 / columns as f64;
                let fractions = busy.fractions(first as f64, bucket_ns, columns);
                let mean = fractions.iter().map(|&f| f64::from(f)).sum::<f64>() / columns as f64;
                // f32 columns: each rounds by at most 2^-24 relative.
                assert!(
                    (mean - share).abs() < 1e-6,
                    "{} rank {} over {columns} columns: {mean} against {share}",
                    rank.source,
                    rank.rank
                );
                assert!(fractions.iter().all(|f| (0.0..=1.0).contains(f)));
            }
        }
    }
}
