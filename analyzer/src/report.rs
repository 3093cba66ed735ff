//! The report: per rank (one GPU of the job) and per phase, where GPU time goes.
//!
//! Definitions (all on the rank's own GPU, clipped to the analysis window):
//! - `span_ns`: first GPU activity start to last GPU activity end (kernels, copies, sets).
//! - `gpu_busy_ns`: length of the union of kernel, copy and set intervals; `idle_ns = span − busy`.
//! - `comm_ns`: length of the union of communication-kernel intervals.
//! - `exposed_comm_ns`: communication time during which no computation kernel runs (computation =
//!   kernels that are neither communication nor memory operations).
//! - `comm_comp_overlap_pct`: time both run / communication time × 100 (HTA's definition).
//! - `categories`: summed durations per op category (a share of work, so streams add up).
//! - `kernels`: the `cuda_gpu_kern_sum` rows of this rank.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regex::Regex;
use serde::{Serialize, Serializer};
use shardscope_model::{CollectiveOp, DeviceIdx, Kernel, MemOp, NameId, Trace};

use crate::bench_peaks::BenchPeaks;
use crate::categories::{self, Classifier, KernelClass};
use crate::collectives::{self, GroupSummary, Instance, Matching, RankInput, RankKey, RankShare};
use crate::hta::{self, HtaFigures};
use crate::intervals::IntervalUnion;
use crate::kernel_summary::{self, KernelSummaryRow};
use crate::phases::{DEFAULT_PHASE_PATTERN, PhaseId, PhaseIndex};

/// What to analyse and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// Op-category rules.
    pub classifier: Classifier,
    /// Ranges whose name matches are phases.
    pub phase_pattern: Regex,
    /// Only this `[start_ns, end_ns)` window of the trace clock (events are clipped to it).
    pub window_ns: Option<(i64, i64)>,
    /// Which profiler steps the HTA-compatible figures keep.
    pub hta_step_mode: hta::StepMode,
    /// Measured link peaks from `bench`, for "% of peak".
    pub bench_peaks: Option<BenchPeaks>,
    /// Keep every matched collective instance in [`Report::instances`].
    pub keep_instances: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            classifier: Classifier::builtin(),
            phase_pattern: Regex::new(DEFAULT_PHASE_PATTERN).expect("valid default pattern"),
            window_ns: None,
            hta_step_mode: hta::StepMode::default(),
            bench_peaks: None,
            keep_instances: false,
        }
    }
}

/// The figures of one rank, or of one phase of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// First GPU activity start to last end.
    pub span_ns: i64,
    /// Union of kernel, copy and set intervals.
    pub gpu_busy_ns: i64,
    /// `span_ns − gpu_busy_ns`.
    pub idle_ns: i64,
    /// Union of communication-kernel intervals.
    pub comm_ns: i64,
    /// Communication time not overlapped by computation.
    pub exposed_comm_ns: i64,
    /// Share of communication time overlapped by computation, in percent.
    pub comm_comp_overlap_pct: f64,
    /// `comm_ns / gpu_busy_ns` in percent.
    pub comm_over_busy_pct: f64,
    /// `exposed_comm_ns / span_ns` in percent.
    pub exposed_comm_over_span_pct: f64,
    /// Of the communication kernels matched across ranks: time spent waiting for the last rank to arrive.
    pub comm_wait_ns: i64,
    /// Of the communication kernels matched across ranks: time spent moving data.
    pub comm_transfer_ns: i64,
    /// Matched collectives this rank arrived at last.
    pub late_count: u64,
    /// Number of kernels.
    pub kernel_count: u64,
    /// Number of copies and sets.
    pub memop_count: u64,
    /// Summed duration per op category.
    pub categories: BTreeMap<String, i64>,
    /// The `cuda_gpu_kern_sum` rows.
    pub kernels: Vec<KernelSummaryRow>,
}

impl Figures {
    /// Sum of the category times (kernels, copies and sets).
    pub fn category_total_ns(&self) -> i64 {
        self.categories.values().fold(0i64, |total, &ns| total.saturating_add(ns))
    }
}

/// One phase's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Phase name (`prefill`, `decode`, …).
    pub name: String,
    /// Its figures.
    #[serde(flatten)]
    pub figures: Figures,
}

/// One rank: a GPU of the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    /// The rank: recorded by the source, else numbered in input order.
    pub rank: u32,
    /// True when `rank` came from the trace (distributed info, environment) rather than input order.
    pub rank_recorded: bool,
    /// The file it came from.
    pub source: String,
    /// CUDA device ordinal in that file.
    pub device: u32,
    /// GPU name where known.
    pub gpu_name: String,
    /// OS pid of the process that drove it, when one did.
    pub pid: Option<u32>,
    /// Whole-rank figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Per-phase figures, in order of first appearance.
    #[serde(serialize_with = "phases_as_map")]
    pub phases: Vec<Phase>,
    /// Kernel-type totals and overlap as Holistic Trace Analysis computes them.
    pub hta: HtaFigures,
}

fn phases_as_map<S: Serializer>(phases: &[Phase], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(phases.iter().map(|p| (&p.name, &p.figures)))
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The input files.
    pub inputs: Vec<String>,
    /// The phase pattern used.
    pub phase_pattern: String,
    /// The analysis window, if one was given.
    pub window_ns: Option<(i64, i64)>,
    /// How the HTA-compatible figures chose profiler steps: `all` (the job has fewer than two distinct
    /// `ProfilerStep` names, so HTA keeps everything), `last step dropped` (HTA's default) or `last step included`.
    pub hta_step_inclusion: &'static str,
    /// One entry per rank, ordered by rank.
    pub ranks: Vec<RankReport>,
    /// Collectives matched across ranks, grouped.
    pub collectives: CollectiveReport,
    /// Every matched instance (only when [`Options::keep_instances`] is set).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<Instance>,
    /// Import warnings, per input file.
    pub warnings: Vec<FileWarning>,
}

/// Collectives across ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveReport {
    /// Instances found on two or more ranks.
    pub matched_instances: u64,
    /// Communication kernels without a partner on another rank (a single-rank input, or missing ranks).
    pub unmatched_kernels: u64,
    /// Whether rank clocks were aligned on collective ends (ranks on different hosts).
    pub clocks_aligned: bool,
    /// Median over instances of (last end − first end) across ranks: the residual clock error bound.
    pub end_spread_median_ns: Option<i64>,
    /// The `bench` results the peaks came from.
    pub bench: Option<String>,
    /// Per communicator, collective type, message-size bucket and phase.
    pub groups: Vec<GroupSummary>,
}

/// An importer warning, with its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileWarning {
    /// The file.
    pub source: String,
    /// What was wrong.
    pub what: String,
    /// How many times.
    pub count: u64,
}

/// Analyses the traces of one run (several files = several ranks).
pub fn analyze(traces: &[Trace], options: &Options) -> Report {
    let filter_steps = hta::job_has_steps(traces);
    let mut phase_names: Vec<String> = Vec::new();
    let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| options.classifier.classify_names(&t.names)).collect();
    let phase_indexes: Vec<PhaseIndex> =
        traces.iter().map(|t| PhaseIndex::build(t, &options.phase_pattern, &mut phase_names)).collect();
    let ranks_in_input = assign_ranks(traces);
    let by_device: Vec<ByDevice> = traces.iter().map(ByDevice::build).collect();

    // Collectives are matched across all ranks first: each rank's wait and transfer depend on the others.
    let phase_closures: Vec<Box<dyn Fn(u32) -> Option<String> + '_>> = ranks_in_input
        .iter()
        .map(|&(key, _, _)| {
            let trace = &traces[key.trace];
            let index = &phase_indexes[key.trace];
            Box::new(move |kernel: u32| {
                let k = &trace.kernels[kernel as usize];
                phase_of(trace, index, k.launch, k.device, k.start_ns).map(|p| index.names()[p as usize].clone())
            }) as Box<dyn Fn(u32) -> Option<String>>
        })
        .collect();
    let inputs: Vec<RankInput> = ranks_in_input
        .iter()
        .zip(&phase_closures)
        .map(|(&(key, rank, _), phase_of_kernel)| RankInput {
            key,
            rank,
            trace: &traces[key.trace],
            kernel_indices: &by_device[key.trace].kernels[key.device.0 as usize],
            classes: &classes[key.trace],
            phase_of_kernel: phase_of_kernel.as_ref(),
        })
        .collect();
    let hosts_differ = collectives::ranks_on_different_hosts(traces);
    let matching = collectives::match_collectives(&inputs, &options.classifier, hosts_differ);

    let mut ranks: Vec<RankReport> = ranks_in_input
        .iter()
        .map(|&(key, rank, rank_recorded)| {
            let context = DeviceContext {
                trace: &traces[key.trace],
                trace_index: key.trace,
                device: key.device,
                by_device: &by_device[key.trace],
                classes: &classes[key.trace],
                phase_index: &phase_indexes[key.trace],
                filter_steps,
                matching: &matching,
            };
            analyze_device(&context, rank, rank_recorded, options)
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    let warnings = traces
        .iter()
        .flat_map(|t| {
            t.warnings.iter().map(|w| FileWarning {
                source: t.source.path.clone(),
                what: w.what.clone(),
                count: w.count,
            })
        })
        .collect();
    Report {
        inputs: traces.iter().map(|t| t.source.path.clone()).collect(),
        phase_pattern: options.phase_pattern.as_str().to_string(),
        window_ns: options.window_ns,
        hta_step_inclusion: match (filter_steps, options.hta_step_mode) {
            (false, _) => "all",
            (true, hta::StepMode::DropLastStep) => "last step dropped",
            (true, hta::StepMode::IncludeLastStep) => "last step included",
        },
        ranks,
        collectives: CollectiveReport {
            matched_instances: matching.instances.len() as u64,
            unmatched_kernels: matching.unmatched_kernels,
            clocks_aligned: matching.clocks_aligned,
            end_spread_median_ns: matching.end_spread_median_ns,
            bench: options.bench_peaks.as_ref().map(|b| b.source.clone()),
            groups: collectives::summarize(&matching, options.bench_peaks.as_ref()),
        },
        instances: if options.keep_instances { matching.instances } else { Vec::new() },
        warnings,
    }
}

/// Every GPU with work, with its rank: recorded by the trace, or else numbered in input order, skipping recorded ones.
fn assign_ranks(traces: &[Trace]) -> Vec<(RankKey, u32, bool)> {
    let recorded: BTreeSet<u32> =
        traces.iter().flat_map(|t| (0..t.devices.len()).filter_map(|d| t.device_rank(DeviceIdx(d as u32)))).collect();
    let mut next_unrecorded_rank = 0u32;
    let mut out = Vec::new();
    for (trace_index, trace) in traces.iter().enumerate() {
        for device in devices_with_gpu_work(trace) {
            let (rank, rank_recorded) = match trace.device_rank(device) {
                Some(rank) => (rank, true),
                None => {
                    while recorded.contains(&next_unrecorded_rank) {
                        next_unrecorded_rank += 1;
                    }
                    next_unrecorded_rank += 1;
                    (next_unrecorded_rank - 1, false)
                }
            };
            out.push((RankKey { trace: trace_index, device }, rank, rank_recorded));
        }
    }
    out
}

/// Indices of each device's kernels and memory operations, in time order: built in one pass over the trace so that
/// per-rank work never scans the other ranks' events.
struct ByDevice {
    kernels: Vec<Vec<u32>>,
    memops: Vec<Vec<u32>>,
    /// Per device, the longest kernel and the longest memory operation: with them a window's events are found
    /// by binary search on start times.
    longest_kernel_ns: Vec<i64>,
    longest_memop_ns: Vec<i64>,
}

impl ByDevice {
    fn build(trace: &Trace) -> ByDevice {
        let n = trace.devices.len();
        let (mut kernels, mut longest_kernel_ns) = (vec![Vec::new(); n], vec![0; n]);
        for (index, kernel) in trace.kernels.iter().enumerate() {
            let device = kernel.device.0 as usize;
            if let Some(list) = kernels.get_mut(device) {
                list.push(index as u32);
                longest_kernel_ns[device] = longest_kernel_ns[device].max(kernel.duration_ns());
            }
        }
        let (mut memops, mut longest_memop_ns) = (vec![Vec::new(); n], vec![0; n]);
        for (index, memop) in trace.memops.iter().enumerate() {
            let device = memop.device.0 as usize;
            if let Some(list) = memops.get_mut(device) {
                list.push(index as u32);
                longest_memop_ns[device] = longest_memop_ns[device].max(memop.duration_ns());
            }
        }
        ByDevice { kernels, memops, longest_kernel_ns, longest_memop_ns }
    }
}

/// The events (indices sorted by start) that can overlap `window_ns`: none that starts at or after its end, none
/// that starts before its start by more than the longest event lasts.
fn in_window(indices: &[u32], start_ns: impl Fn(u32) -> i64, longest_ns: i64, window_ns: Option<(i64, i64)>) -> &[u32] {
    let Some((w0, w1)) = window_ns else { return indices };
    let first = indices.partition_point(|&i| start_ns(i) < w0.saturating_sub(longest_ns));
    let end = indices.partition_point(|&i| start_ns(i) < w1).max(first);
    &indices[first..end]
}

/// Devices that ran at least one kernel, copy or set, in ordinal order.
fn devices_with_gpu_work(trace: &Trace) -> Vec<DeviceIdx> {
    let mut used = vec![false; trace.devices.len()];
    for device in trace.kernels.iter().map(|k| k.device).chain(trace.memops.iter().map(|m| m.device)) {
        if let Some(slot) = used.get_mut(device.0 as usize) {
            *slot = true;
        }
    }
    let mut devices: Vec<DeviceIdx> =
        (0..trace.devices.len()).filter(|&d| used[d]).map(|d| DeviceIdx(d as u32)).collect();
    devices.sort_by_key(|d| trace.devices[d.0 as usize].ordinal);
    devices
}

/// Clips `[start, end)` to the window; `None` when nothing is left.
fn clip(start_ns: i64, end_ns: i64, window_ns: Option<(i64, i64)>) -> Option<(i64, i64)> {
    let (start, end) = match window_ns {
        Some((w0, w1)) => (start_ns.max(w0), end_ns.min(w1)),
        None => (start_ns, end_ns),
    };
    (end > start || (end == start && window_ns.is_none_or(|(w0, w1)| start >= w0 && start < w1)))
        .then_some((start, end))
}

/// One kernel of a rank after clipping.
#[derive(Clone, Copy)]
struct WorkKernel {
    start_ns: i64,
    end_ns: i64,
    name: NameId,
    class: KernelClass,
    collective: Option<CollectiveOp>,
    /// Wait and transfer when the kernel is a collective matched across ranks.
    share: Option<RankShare>,
}

/// The GPU work of one rank (or phase) after clipping, ready for [`figures`].
#[derive(Default)]
struct Work {
    kernels: Vec<WorkKernel>,
    /// `(start_ns, end_ns, is_memset)`.
    memops: Vec<(i64, i64, bool)>,
}

/// What [`analyze_device`] needs to know about the trace a device belongs to.
struct DeviceContext<'a> {
    trace: &'a Trace,
    trace_index: usize,
    device: DeviceIdx,
    by_device: &'a ByDevice,
    classes: &'a [KernelClass],
    phase_index: &'a PhaseIndex,
    filter_steps: bool,
    matching: &'a Matching,
}

fn analyze_device(context: &DeviceContext, rank: u32, rank_recorded: bool, options: &Options) -> RankReport {
    let DeviceContext { trace, trace_index, device, by_device, classes, phase_index, filter_steps, matching } =
        *context;
    let d = device.0 as usize;
    let kernel_start = |i: u32| trace.kernels[i as usize].start_ns;
    let kernel_indices =
        in_window(&by_device.kernels[d], kernel_start, by_device.longest_kernel_ns[d], options.window_ns);
    let memop_start = |i: u32| trace.memops[i as usize].start_ns;
    let memop_indices = in_window(&by_device.memops[d], memop_start, by_device.longest_memop_ns[d], options.window_ns);
    let mut whole = Work::default();
    let mut by_phase: BTreeMap<PhaseId, Work> = BTreeMap::new();
    let mut first_seen: BTreeMap<PhaseId, i64> = BTreeMap::new();
    for &index in kernel_indices {
        let kernel = &trace.kernels[index as usize];
        let Some((start, end)) = clip(kernel.start_ns, kernel.end_ns, options.window_ns) else { continue };
        let clipped = (start, end) != (kernel.start_ns, kernel.end_ns);
        let row = WorkKernel {
            start_ns: start,
            end_ns: end,
            name: kernel.name,
            class: Classifier::lookup(classes, kernel.name),
            collective: kernel.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op),
            // A kernel cut by the window has no meaningful wait/transfer split.
            share: if clipped { None } else { matching.shares.get(&(trace_index, index)).copied() },
        };
        whole.kernels.push(row);
        if let Some(phase) = phase_of(trace, phase_index, kernel.launch, device, kernel.start_ns) {
            first_seen.entry(phase).or_insert(start);
            by_phase.entry(phase).or_default().kernels.push(row);
        }
    }
    for memop in memop_indices.iter().map(|&i| &trace.memops[i as usize]) {
        let Some((start, end)) = clip(memop.start_ns, memop.end_ns, options.window_ns) else { continue };
        let row = (start, end, memop.is_memset());
        whole.memops.push(row);
        if let Some(phase) = phase_of(trace, phase_index, memop.launch, device, memop.start_ns) {
            first_seen.entry(phase).or_insert(start);
            by_phase.entry(phase).or_default().memops.push(row);
        }
    }
    let mut phase_order: Vec<(i64, PhaseId)> = first_seen.into_iter().map(|(p, t)| (t, p)).collect();
    phase_order.sort();
    let phases = phase_order
        .into_iter()
        .map(|(_, phase)| Phase {
            name: phase_index.names()[phase as usize].clone(),
            figures: figures(&by_phase[&phase], trace, &options.classifier),
        })
        .collect();
    let info = &trace.devices[device.0 as usize];
    let kernels_on_device: Vec<&Kernel> = kernel_indices.iter().map(|&i| &trace.kernels[i as usize]).collect();
    let memops_on_device: Vec<&MemOp> = memop_indices.iter().map(|&i| &trace.memops[i as usize]).collect();
    RankReport {
        rank,
        rank_recorded,
        source: trace.source.path.clone(),
        device: info.ordinal,
        gpu_name: info.name.clone(),
        pid: info.process.and_then(|p| trace.processes.get(p.0 as usize)).map(|p| p.pid),
        figures: figures(&whole, trace, &options.classifier),
        phases,
        hta: hta::figures(
            trace,
            &kernels_on_device,
            &memops_on_device,
            filter_steps,
            options.hta_step_mode,
            options.window_ns,
        ),
    }
}

fn phase_of(
    trace: &Trace,
    index: &PhaseIndex,
    launch: Option<u32>,
    device: DeviceIdx,
    start_ns: i64,
) -> Option<PhaseId> {
    if index.is_empty() {
        return None;
    }
    match launch.and_then(|l| trace.api_calls.get(l as usize)) {
        Some(call) => index.phase_on_thread(call.process, call.tid, call.start_ns),
        None => index.phase_on_device(device, start_ns),
    }
}

fn figures(work: &Work, trace: &Trace, classifier: &Classifier) -> Figures {
    let mut busy = Vec::with_capacity(work.kernels.len() + work.memops.len());
    let mut comm = Vec::new();
    let mut comp = Vec::new();
    // Summed per (category, collective type) first; labels are made once per key at the end.
    type ClassKey = (u16, Option<CollectiveOp>);
    let mut by_class: HashMap<ClassKey, (KernelClass, Option<CollectiveOp>, i64)> = HashMap::new();
    let (mut comm_wait_ns, mut comm_transfer_ns, mut late_count) = (0, 0, 0);
    for kernel in &work.kernels {
        let WorkKernel { start_ns: start, end_ns: end, class, collective, .. } = *kernel;
        if let Some(share) = kernel.share {
            comm_wait_ns = i64::saturating_add(comm_wait_ns, share.wait_ns);
            comm_transfer_ns = i64::saturating_add(comm_transfer_ns, share.transfer_ns);
            late_count += u64::from(share.late);
        }
        busy.push((start, end));
        let summed = &mut by_class
            .entry((class.category.0, class.collective.or(collective)))
            .or_insert((class, collective, 0))
            .2;
        *summed = summed.saturating_add(end.saturating_sub(start));
        if classifier.is_communication(class.category) {
            comm.push((start, end));
        } else if class.category != classifier.memcpy() && class.category != classifier.memset() {
            comp.push((start, end));
        }
    }
    let mut categories: BTreeMap<String, i64> = BTreeMap::new();
    for (class, collective, ns) in by_class.into_values() {
        let total = categories.entry(categories::report_label(classifier, class, collective)).or_default();
        *total = total.saturating_add(ns);
    }
    for &(start, end, is_memset) in &work.memops {
        busy.push((start, end));
        let label = if is_memset { categories::MEMSET } else { categories::MEMCPY };
        let total = categories.entry(label.to_string()).or_default();
        *total = total.saturating_add(end.saturating_sub(start));
    }
    let span_ns = match (busy.iter().map(|b| b.0).min(), busy.iter().map(|b| b.1).max()) {
        (Some(first), Some(last)) => last - first,
        _ => 0,
    };
    let busy = IntervalUnion::from_intervals(busy);
    let comm = IntervalUnion::from_intervals(comm);
    let comp = IntervalUnion::from_intervals(comp);
    let gpu_busy_ns = busy.length_ns();
    let comm_ns = comm.length_ns();
    let overlap_ns = comm.intersection_ns(&comp);
    let exposed_comm_ns = comm_ns - overlap_ns;
    let pct = |part: i64, whole: i64| if whole > 0 { 100.0 * part as f64 / whole as f64 } else { 0.0 };
    Figures {
        span_ns,
        gpu_busy_ns,
        idle_ns: span_ns - gpu_busy_ns,
        comm_ns,
        exposed_comm_ns,
        comm_comp_overlap_pct: pct(overlap_ns, comm_ns),
        comm_over_busy_pct: pct(comm_ns, gpu_busy_ns),
        exposed_comm_over_span_pct: pct(exposed_comm_ns, span_ns),
        kernel_count: work.kernels.len() as u64,
        memop_count: work.memops.len() as u64,
        categories,
        comm_wait_ns,
        comm_transfer_ns,
        late_count,
        kernels: kernel_summary::summarize(work.kernels.iter().map(|k| (k.name, k.end_ns - k.start_ns)), |n| {
            trace.names.get(n).to_string()
        }),
    }
}

/// The `cuda_gpu_kern_sum` of all kernels of all traces together (what `nsys stats` prints for one file).
pub fn kernel_summary(traces: &[Trace]) -> Vec<KernelSummaryRow> {
    // Names are interned per trace: group across traces by the name text.
    let mut names = shardscope_model::Names::default();
    let mut kernels = Vec::new();
    for trace in traces {
        let ids: Vec<NameId> = trace.names.iter().map(|(_, s)| names.intern(s)).collect();
        kernels.extend(trace.kernels.iter().map(|k| (ids[k.name.0 as usize], k.duration_ns())));
    }
    kernel_summary::summarize(kernels.into_iter(), |n| names.get(n).to_string())
}
