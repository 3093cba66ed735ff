//! Figures computed the way Holistic Trace Analysis (HTA) 0.5.0 computes them, so users can check one against the
//! other. `docs/hta-definitions.md` gives the definitions with their sources; in short:
//!
//! - Type by name (case-sensitive, anchored): COMMUNICATION = `^nccl.*Kernel`; MEMORY = `^(Memcpy|Memset|dma)`;
//!   OTHER (ignored) = contains `Memcpy` or `Sync`; COMPUTATION = the rest. Copies and sets are MEMORY.
//! - Times are rounded inwards to whole microseconds (start up, end down), as HTA does for traces whose
//!   timestamps have fractions of a microsecond; on whole-microsecond traces this changes nothing.
//! - Step window (HTA's default `include_last_profiler_step=False`): when the job as a whole has two or more
//!   distinct `ProfilerStep#N` names, a rank keeps only GPU work whose launch call started before its last
//!   `ProfilerStep` range started (with the last step included: at or before it ended); work without a known
//!   launch call is dropped. Otherwise everything is kept.
//! - `comm_ns`, `comp_ns`, `mem_ns`: time during which only that type runs; percentages are of the union of all
//!   three. Overlap = |comm ∩ comp| / |comm| on unions of intervals.

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;
use serde::Serialize;
use shardscope_model::{Kernel, MemOp, Range, Trace};

use crate::figures::intervals::IntervalUnion;

/// Which profiler steps the HTA-compatible figures keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum StepMode {
    /// HTA's default: the last `ProfilerStep` of each rank is dropped.
    #[default]
    DropLastStep,
    /// HTA with `include_last_profiler_step=True`.
    IncludeLastStep,
}

/// HTA's kernel-type figures for one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HtaFigures {
    /// Time only COMMUNICATION runs.
    pub comm_ns: i64,
    /// Time only COMPUTATION runs.
    pub comp_ns: i64,
    /// Time only MEMORY runs.
    pub mem_ns: i64,
    /// `comm_ns` as a share of `union_ns`, in percent.
    pub comm_pct: f64,
    /// `comp_ns` as a share of `union_ns`, in percent.
    pub comp_pct: f64,
    /// `mem_ns` as a share of `union_ns`, in percent.
    pub mem_pct: f64,
    /// Time in each state where several types run, keyed by HTA's labels.
    pub overlap_states_ns: BTreeMap<&'static str, i64>,
    /// The same as shares of `union_ns`, in percent.
    pub overlap_states_pct: BTreeMap<&'static str, f64>,
    /// Union of all COMMUNICATION, COMPUTATION and MEMORY time.
    pub union_ns: i64,
    /// |comm ∩ comp| / |comm| in percent; `None` without communication (HTA gives NaN).
    pub comm_comp_overlap_pct: Option<f64>,
    /// GPU events kept by the step window.
    pub gpu_events_kept: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HtaType {
    Communication,
    Computation,
    Memory,
    Other,
}

fn hta_type(name: &str) -> HtaType {
    if name.strip_prefix("nccl").is_some_and(|rest| rest.contains("Kernel")) {
        HtaType::Communication
    } else if name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma") {
        HtaType::Memory
    } else if name.contains("Memcpy") || name.contains("Sync") {
        HtaType::Other
    } else {
        HtaType::Computation
    }
}

/// The mark in the names of PyTorch profiler step ranges (`ProfilerStep#12`).
pub const STEP_MARK: &str = "ProfilerStep";

/// True when the job's traces hold two or more distinct `ProfilerStep` names: only then does HTA filter steps.
pub fn job_has_steps(traces: &[Trace]) -> bool {
    let names: BTreeSet<&str> = traces.iter().flat_map(step_names).collect();
    names.len() >= 2
}

/// The distinct names of `trace`'s step ranges. The ranges are read on worker threads, as in
/// [`launch_limit_ns`]: a large trace holds millions, each name searched for the mark.
pub fn step_names(trace: &Trace) -> BTreeSet<&str> {
    step_ranges(trace)
        .map(|r| trace.names.get(r.name))
        .fold(BTreeSet::new, |mut names, name| {
            names.insert(name);
            names
        })
        .reduce(BTreeSet::new, |mut names, more| {
            names.extend(more);
            names
        })
}

/// `trace`'s step ranges, on worker threads.
fn step_ranges(trace: &Trace) -> impl ParallelIterator<Item = &Range> {
    trace.ranges.par_iter().with_min_len(1 << 16).filter(|r| trace.names.get(r.name).contains(STEP_MARK))
}

/// The latest launch time a rank keeps, or `None` when it keeps nothing (it has no steps of its own).
fn launch_limit_ns(trace: &Trace, mode: StepMode) -> Option<i64> {
    match mode {
        // Launches strictly before the last step's start: the limit is start − 1.
        StepMode::DropLastStep => step_ranges(trace).map(|r| r.start_ns).max().map(|start| start - 1),
        StepMode::IncludeLastStep => step_ranges(trace).map(|r| r.end_ns).max(),
    }
}

/// Rounds an event inwards to whole microseconds.
fn inward_us(start_ns: i64, end_ns: i64) -> (i64, i64) {
    let start = start_ns.div_euclid(1000) * 1000 + if start_ns.rem_euclid(1000) > 0 { 1000 } else { 0 };
    (start, end_ns.div_euclid(1000) * 1000)
}

/// HTA's figures for one rank's kernels and memory operations.
pub fn figures(
    trace: &Trace,
    kernels: &[&Kernel],
    memops: &[&MemOp],
    filter_steps: bool,
    mode: StepMode,
    window_ns: Option<(i64, i64)>,
) -> HtaFigures {
    let limit = if filter_steps { Some(launch_limit_ns(trace, mode)) } else { None };
    let kept = |launch: Option<u32>, start_ns: i64, end_ns: i64| -> bool {
        if window_ns.is_some_and(|(w0, w1)| start_ns < w0 || end_ns > w1) {
            return false;
        }
        match limit {
            None => true,
            Some(None) => false,
            Some(Some(limit_ns)) => {
                launch.and_then(|l| trace.api_calls.get(l as usize)).is_some_and(|call| call.start_ns <= limit_ns)
            }
        }
    };
    let (mut comm, mut comp, mut mem) = (Vec::new(), Vec::new(), Vec::new());
    let mut gpu_events_kept = 0;
    // Type each distinct name once.
    let mut types: Vec<Option<HtaType>> = vec![None; trace.names.len()];
    for kernel in kernels.iter().filter(|k| kept(k.launch, k.start_ns, k.end_ns)) {
        gpu_events_kept += 1;
        let interval = inward_us(kernel.start_ns, kernel.end_ns);
        let slot = &mut types[kernel.name.0 as usize];
        match *slot.get_or_insert_with(|| hta_type(trace.names.get(kernel.name))) {
            HtaType::Communication => comm.push(interval),
            HtaType::Computation => comp.push(interval),
            HtaType::Memory => mem.push(interval),
            HtaType::Other => {}
        }
    }
    for memop in memops.iter().filter(|m| kept(m.launch, m.start_ns, m.end_ns)) {
        gpu_events_kept += 1;
        mem.push(inward_us(memop.start_ns, memop.end_ns));
    }
    let comm = IntervalUnion::from_intervals(comm);
    let comp = IntervalUnion::from_intervals(comp);
    let mem = IntervalUnion::from_intervals(mem);
    let comm_comp = comm.intersection(&comp);
    let all_three = comm_comp.intersection_ns(&mem);
    let comm_mem = comm.intersection_ns(&mem);
    let comp_mem = comp.intersection_ns(&mem);
    let union_ns = comm.union(&comp).union(&mem).length_ns();
    let comm_ns = comm.length_ns() - comm_comp.length_ns() - comm_mem + all_three;
    let comp_ns = comp.length_ns() - comm_comp.length_ns() - comp_mem + all_three;
    let mem_ns = mem.length_ns() - comm_mem - comp_mem + all_three;
    let pct = |part: i64| if union_ns > 0 { 100.0 * part as f64 / union_ns as f64 } else { 0.0 };
    let overlap_states_ns: BTreeMap<&'static str, i64> = [
        ("COMPUTATION overlapping COMMUNICATION", comm_comp.length_ns() - all_three),
        ("COMPUTATION overlapping MEMORY", comp_mem - all_three),
        ("COMMUNICATION overlapping MEMORY", comm_mem - all_three),
        ("COMPUTATION overlapping COMMUNICATION overlapping MEMORY", all_three),
    ]
    .into_iter()
    .filter(|&(_, ns)| ns > 0)
    .collect();
    HtaFigures {
        comm_ns,
        comp_ns,
        mem_ns,
        comm_pct: pct(comm_ns),
        comp_pct: pct(comp_ns),
        mem_pct: pct(mem_ns),
        overlap_states_pct: overlap_states_ns.iter().map(|(&k, &v)| (k, pct(v))).collect(),
        overlap_states_ns,
        union_ns,
        comm_comp_overlap_pct: (comm.length_ns() > 0)
            .then(|| 100.0 * comm_comp.length_ns() as f64 / comm.length_ns() as f64),
        gpu_events_kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_hta_name_rules() {
        assert_eq!(hta_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"), HtaType::Communication);
        assert_eq!(hta_type("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), HtaType::Communication);
        assert_eq!(hta_type("ncclAllReduce"), HtaType::Computation);
        assert_eq!(hta_type("NCCLKernel"), HtaType::Computation);
        assert_eq!(hta_type("Memcpy HtoD (Pageable -> Device)"), HtaType::Memory);
        assert_eq!(hta_type("Memset (Device)"), HtaType::Memory);
        assert_eq!(hta_type("Context Sync"), HtaType::Other);
        assert_eq!(hta_type("void cudnn::bn_fw_SyncBatchNorm"), HtaType::Other);
        assert_eq!(hta_type("memcpy_kernel"), HtaType::Computation);
    }

    #[test]
    fn rounding_is_inwards_to_whole_microseconds() {
        assert_eq!(inward_us(1_000, 5_000), (1_000, 5_000));
        assert_eq!(inward_us(1_001, 4_999), (2_000, 4_000));
        assert_eq!(inward_us(1_500, 1_900), (2_000, 1_000));
        assert_eq!(inward_us(-1_500, 0), (-1_000, 0));
    }
}
