//! The one place where the viewer asks for op categories and per-rank figures.
//!
//! Everything the panels show about categories and time shares goes through [`Categories`]
//! and [`analyze_window`], so the source of those figures can change in one file. The
//! figures follow the analyzer's definitions: busy time is the union of kernel intervals,
//! communication time the union of communication kernels, exposed communication the part of
//! it that no compute kernel overlaps.

use shardscope_model::{Kernel, ProcessIdx, Trace};

/// Index of an op category in [`Categories::names`].
pub type CategoryId = u16;

/// Classifies kernel names into op categories.
#[derive(Debug, Clone)]
pub struct Categories {
    names: Vec<String>,
    communication: CategoryId,
}

/// Keyword rules, first match wins; kept short because they only have to colour the timeline
/// until a name's real category is known.
const RULES: [(&str, &[&str]); 7] = [
    ("communication", &["nccl", "allreduce", "all_reduce", "allgather", "reducescatter", "sendrecv", "c10d"]),
    ("attention", &["flash", "fmha", "attention", "attn", "softmax"]),
    ("gemm", &["gemm", "matmul", "xmma", "cutlass", "cublas", "s16816", "wgmma", "conv"]),
    ("norm", &["norm"]),
    ("reduction", &["reduce"]),
    ("elementwise", &["elementwise", "triton_poi", "unrolled", "copy_kernel", "fill"]),
    ("memory", &["memcpy", "memset"]),
];

impl Categories {
    /// The built-in category list.
    pub fn builtin() -> Categories {
        let mut names: Vec<String> = RULES.iter().map(|(name, _)| name.to_string()).collect();
        names.push("other".into());
        Categories { names, communication: 0 }
    }

    /// The category of a kernel name.
    pub fn classify(&self, kernel_name: &str) -> CategoryId {
        let lower = kernel_name.to_ascii_lowercase();
        RULES.iter().position(|(_, keys)| keys.iter().any(|k| lower.contains(k))).unwrap_or(RULES.len()) as CategoryId
    }

    /// The name of a category.
    pub fn name(&self, id: CategoryId) -> &str {
        self.names.get(usize::from(id)).map_or("other", String::as_str)
    }

    /// All category names, in id order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// True for the communication category.
    pub fn is_communication(&self, id: CategoryId) -> bool {
        id == self.communication
    }
}

/// Figures for one rank (one process of one trace) over a time window.
#[derive(Debug, Clone, PartialEq)]
pub struct RankFigures {
    /// What the panels call this rank, e.g. `rank 3`.
    pub label: String,
    /// Distributed rank where known.
    pub rank: Option<u32>,
    /// Length of the window, or of the rank's kernels when no window was given.
    pub span_ns: i64,
    /// Union of kernel intervals.
    pub gpu_busy_ns: i64,
    /// Union of communication-kernel intervals.
    pub comm_ns: i64,
    /// Communication time that no compute kernel overlaps.
    pub exposed_comm_ns: i64,
    /// Share of communication time overlapped by compute, in percent.
    pub comm_comp_overlap_pct: f64,
    /// Kernel time per category (sum of durations clipped to the window), largest first.
    pub categories: Vec<(String, i64)>,
    /// Kernel time per category within each phase.
    pub phases: Vec<PhaseFigures>,
}

/// Category shares inside one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseFigures {
    /// Phase name.
    pub name: String,
    /// Kernel time per category.
    pub categories: Vec<(String, i64)>,
}

/// Per-rank figures of `traces`, limited to `window_ns` (start, end) when given.
pub fn analyze_window(traces: &[Trace], categories: &Categories, window_ns: Option<(i64, i64)>) -> Vec<RankFigures> {
    let mut out = Vec::new();
    for (trace_index, trace) in traces.iter().enumerate() {
        let kernel_category: Vec<CategoryId> = trace.names.iter().map(|(_, name)| categories.classify(name)).collect();
        for (process_index, process) in trace.processes.iter().enumerate() {
            let process_idx = ProcessIdx(process_index as u32);
            let kernels: Vec<&Kernel> = trace.kernels.iter().filter(|k| k.process == process_idx).collect();
            if kernels.is_empty() && trace.processes.len() > 1 {
                continue;
            }
            let label = match process.rank {
                Some(rank) => format!("rank {rank}"),
                None if traces.len() > 1 || trace.processes.len() > 1 => {
                    format!("file {trace_index} pid {}", process.pid)
                }
                None => format!("pid {}", process.pid),
            };
            out.push(figures_for(label, process.rank, &kernels, &kernel_category, categories, window_ns));
        }
    }
    out
}

fn clip(kernel: &Kernel, window_ns: Option<(i64, i64)>) -> Option<(i64, i64)> {
    let (start, end) = match window_ns {
        Some((a, b)) => (kernel.start_ns.max(a), kernel.end_ns.min(b)),
        None => (kernel.start_ns, kernel.end_ns),
    };
    (end > start).then_some((start, end))
}

/// Merges sorted-by-start intervals into disjoint ones.
fn union(mut intervals: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    intervals.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
    for (start, end) in intervals {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

fn total(intervals: &[(i64, i64)]) -> i64 {
    intervals.iter().map(|(a, b)| b - a).sum()
}

fn intersection_ns(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut sum) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].0.max(b[j].0);
        let end = a[i].1.min(b[j].1);
        if end > start {
            sum += end - start;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

fn figures_for(
    label: String,
    rank: Option<u32>,
    kernels: &[&Kernel],
    kernel_category: &[CategoryId],
    categories: &Categories,
    window_ns: Option<(i64, i64)>,
) -> RankFigures {
    let mut all = Vec::new();
    let mut comm = Vec::new();
    let mut compute = Vec::new();
    let mut per_category = vec![0i64; categories.names().len()];
    for kernel in kernels {
        let Some(interval) = clip(kernel, window_ns) else { continue };
        let category = kernel_category.get(kernel.name.0 as usize).copied().unwrap_or(0);
        per_category[usize::from(category)] += interval.1 - interval.0;
        all.push(interval);
        if kernel.collective.is_some() || categories.is_communication(category) {
            comm.push(interval);
        } else {
            compute.push(interval);
        }
    }
    let span_ns = match window_ns {
        Some((a, b)) => b - a,
        None => {
            let first = kernels.iter().map(|k| k.start_ns).min().unwrap_or(0);
            let last = kernels.iter().map(|k| k.end_ns).max().unwrap_or(0);
            last - first
        }
    };
    let busy = union(all);
    let comm = union(comm);
    let compute = union(compute);
    let comm_ns = total(&comm);
    let overlap_ns = intersection_ns(&comm, &compute);
    let mut category_ns: Vec<(String, i64)> = per_category
        .iter()
        .enumerate()
        .filter(|(_, ns)| **ns > 0)
        .map(|(id, ns)| (categories.name(id as CategoryId).to_string(), *ns))
        .collect();
    category_ns.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    RankFigures {
        label,
        rank,
        span_ns,
        gpu_busy_ns: total(&busy),
        comm_ns,
        exposed_comm_ns: comm_ns - overlap_ns,
        comm_comp_overlap_pct: if comm_ns > 0 { 100.0 * overlap_ns as f64 / comm_ns as f64 } else { 0.0 },
        categories: category_ns,
        phases: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{Device, Process};

    #[test]
    fn overlap_and_exposure_follow_the_interval_unions() {
        let mut trace = Trace::default();
        let process = trace.add_process(Process { pid: 1, rank: Some(0), ..Process::default() });
        let device = trace.add_device(Device { process: Some(process), ..Device::default() });
        let gemm = trace.names.intern("ampere_gemm");
        let nccl = trace.names.intern("ncclDevKernel_AllReduce");
        let k = |start_ns, end_ns, name| Kernel { start_ns, end_ns, name, device, process, ..Kernel::default() };
        // Compute 0..100 and 150..200; communication 80..180 overlaps compute for 20 + 30 ns.
        trace.kernels = vec![k(0, 100, gemm), k(80, 180, nccl), k(150, 200, gemm)];
        trace.finish();
        let categories = Categories::builtin();
        let figures = analyze_window(&[trace.clone()], &categories, None);
        assert_eq!(figures.len(), 1);
        let f = &figures[0];
        assert_eq!((f.span_ns, f.gpu_busy_ns, f.comm_ns, f.exposed_comm_ns), (200, 200, 100, 50));
        assert!((f.comm_comp_overlap_pct - 50.0).abs() < 1e-9);
        assert_eq!(f.categories, vec![("gemm".to_string(), 150), ("communication".to_string(), 100)]);
        // A window clips every interval to it.
        let windowed = analyze_window(&[trace], &categories, Some((90, 160)));
        let w = &windowed[0];
        assert_eq!((w.span_ns, w.gpu_busy_ns, w.comm_ns, w.exposed_comm_ns), (70, 70, 70, 50));
    }
}
