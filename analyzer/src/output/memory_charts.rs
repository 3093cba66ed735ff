//! The report's memory section drawn: per rank, GPU memory over time (the highest level of each 1/120 of the
//! rank's memory events' time range), one line per source: CUDA-level device memory (the caching allocator's
//! segments and libraries' own allocations) and, where the trace has them, the framework allocator's allocated
//! (tensors) and reserved bytes. Every number drawn is a figure of [`crate::report::memory::RankMemory`].

use crate::output::charts::{self, Chart, ChartKind, Line, SeriesPoint};
use crate::output::html::Section;
use crate::report::Report;
use crate::report::memory::{MemoryBucket, RankMemory};

const GIB: f64 = (1u64 << 30) as f64;

/// Reads one source's value from a bucket.
type BucketValue = fn(&MemoryBucket) -> Option<u64>;

/// One chart per rank with memory figures.
pub fn sections(report: &Report) -> Vec<Section> {
    report.memory.iter().filter(|r| !r.over_time.is_empty()).map(rank_section).collect()
}

fn rank_section(rank: &RankMemory) -> Section {
    let first_ns = rank.over_time[0].start_ns;
    let x_labels = rank.over_time.iter().map(|b| format!("{:.2}", (b.start_ns - first_ns) as f64 / 1e9)).collect();
    let sources: [(&str, BucketValue); 3] = [
        ("CUDA level (allocator segments + library allocations)", |b| b.cuda_bytes),
        ("framework allocated (tensors)", |b| b.allocated_bytes),
        ("framework reserved", |b| b.reserved_bytes),
    ];
    let lines = sources
        .iter()
        .enumerate()
        .filter(|(_, (_, value))| rank.over_time.iter().any(|b| value(b).is_some()))
        .map(|(i, (label, value))| Line {
            label: label.to_string(),
            color: charts::series_color(i),
            points: rank
                .over_time
                .iter()
                .map(|b| value(b).map(|v| v as f64 / GIB).map(|v| SeriesPoint { value: v, low: v, high: v }))
                .collect(),
            joined: true,
        })
        .collect();
    let peak = rank.cuda.as_ref().map(|c| format!(" CUDA-level peak {:.3} GiB.", c.peak_bytes as f64 / GIB));
    Section {
        chart: Chart {
            name: format!("memory_rank{}", rank.rank),
            title: format!("GPU memory over time, rank {}", rank.rank),
            size_px: (1000, 420),
            kind: ChartKind::Series {
                x_labels,
                x_label: "s since the first memory event".into(),
                y_label: "GiB (highest in each interval)".into(),
                lines,
            },
        },
        caption: format!(
            "The highest level in each of {} equal intervals.{} CUDA level: what the driver allocated, for PyTorch \
             the caching allocator's segments, not tensors; framework lines: the allocator's own counters.",
            rank.over_time.len(),
            peak.unwrap_or_default()
        ),
    }
}
