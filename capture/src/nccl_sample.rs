//! The NCCL kernel sample of `capture --comm-only`, turned into what NCCL's channel timers leave out.
//!
//! NCCL's kernel-channel timers start when a channel begins its work and stop when it is done: the kernel's
//! start-up before the first channel and its wind-down after the last are not in them (about 3.4 µs per
//! collective on H100s, whatever the size), so a channel-timed small all-reduce looks half as long as the
//! kernel CUPTI times. Under `--comm-only` CUPTI times the kernels of the first collectives of each process
//! (the sample, see `NcclKernelSample`); here each sampled NCCL kernel is matched with the channel-timed
//! kernel it overlaps most, the median lead (channel start − kernel start) and lag (kernel end − channel end)
//! are taken per kernel name (algorithm and protocol) or, with too few of a name, over the process, and every
//! channel-timed kernel is widened by them. The lead also absorbs the error of placing the GPU timer on the
//! host clock, so the sample puts the channel-timed kernels where CUPTI's clock would have them.
//!
//! The sampled kernels themselves (compute ones too) leave the trace: they cover only the first moments of
//! the run, and a report that saw compute there and nowhere else would mislead. They are counted.

use std::collections::HashMap;

use serde::Serialize;
use shardscope_model::{Kernel, NameId, ProcessIdx, Trace, kernel_names};

use crate::merge::CaptureExtras;

/// Fewest matched kernels a fit rests on (per name, or over the process).
pub const MIN_MATCHES: usize = 4;

/// The sampled kernels of one process, taken out of the trace.
#[derive(Debug, Clone, Default)]
pub struct SampledKernels {
    /// NCCL kernels' (start, end), trace ns, in start order.
    pub nccl: Vec<(i64, i64)>,
    /// Every kernel taken out (NCCL ones included).
    pub removed: u64,
}

/// Takes every kernel of `process` out of the trace (and its detail out of `extras`, kept aligned): under
/// `--comm-only` every CUPTI kernel is one of the sample's.
pub fn take_kernels(trace: &mut Trace, extras: &mut CaptureExtras, process: ProcessIdx) -> SampledKernels {
    let aligned = extras.kernels.len() == trace.kernels.len();
    let mut sampled = SampledKernels::default();
    let mut keep = Vec::with_capacity(trace.kernels.len());
    for kernel in &trace.kernels {
        let ours = kernel.process == process;
        keep.push(!ours);
        if ours {
            sampled.removed += 1;
            if kernel_names::is_nccl_kernel(trace.names.get(kernel.name)) {
                sampled.nccl.push((kernel.start_ns, kernel.end_ns));
            }
        }
    }
    if sampled.removed > 0 {
        let mut flags = keep.iter();
        trace.kernels.retain(|_| *flags.next().unwrap_or(&true));
        if aligned {
            let mut flags = keep.iter();
            extras.kernels.retain(|_| *flags.next().unwrap_or(&true));
        }
    }
    sampled.nccl.sort_unstable();
    sampled
}

/// Start-up and wind-down around the channel timers, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Widening {
    /// Kernel start before the first channel start (median), ns; negative when the channels were placed early.
    pub lead_ns: i64,
    /// Kernel end after the last channel end (median), ns.
    pub lag_ns: i64,
    /// Matched kernels it rests on.
    pub matches: u64,
}

/// What the sample of one process gave, for the capture file and the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SampleFit {
    /// OS process id.
    pub pid: u32,
    /// Kernels CUPTI timed for the sample (left out of the trace).
    pub kernels_timed: u64,
    /// NCCL kernels among them.
    pub nccl_kernels: u64,
    /// Over the process: what widened the kernels of names with too few matches of their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Widening>,
    /// Kernel names (algorithm and protocol) with enough matches of their own.
    pub names_fitted: u64,
    /// Channel-timed kernels widened.
    pub kernels_widened: u64,
}

/// Matches the sampled NCCL kernels with the channel-timed kernels `timer` (trace kernels of one process)
/// and returns the widening per kernel name and over the process (`None` with fewer than [`MIN_MATCHES`]).
pub fn fit(sampled: &[(i64, i64)], timer: &[Kernel]) -> (HashMap<NameId, Widening>, Option<Widening>) {
    let mut order: Vec<usize> = (0..timer.len()).collect();
    order.sort_unstable_by_key(|&i| (timer[i].start_ns, i));
    let starts: Vec<i64> = order.iter().map(|&i| timer[i].start_ns).collect();
    let mut by_name: HashMap<NameId, (Vec<i64>, Vec<i64>)> = HashMap::new();
    let (mut leads, mut lags) = (Vec::new(), Vec::new());
    for &(start, end) in sampled {
        let Some(best) = best_overlap(start, end, &starts, &order, timer) else { continue };
        let (lead, lag) = (timer[best].start_ns - start, end - timer[best].end_ns);
        let entry = by_name.entry(timer[best].name).or_default();
        entry.0.push(lead);
        entry.1.push(lag);
        leads.push(lead);
        lags.push(lag);
    }
    let named =
        by_name.into_iter().filter_map(|(name, (mut l, mut g))| Some((name, widening(&mut l, &mut g)?))).collect();
    (named, widening(&mut leads, &mut lags))
}

/// The channel-timed kernel overlapping `start..end` most, among the neighbours of `start` in start order.
fn best_overlap(start: i64, end: i64, starts: &[i64], order: &[usize], timer: &[Kernel]) -> Option<usize> {
    let at = starts.partition_point(|&s| s < start);
    let mut best: Option<(i64, usize)> = None;
    for position in at.saturating_sub(2)..(at + 2).min(order.len()) {
        let kernel = &timer[order[position]];
        let overlap = end.min(kernel.end_ns) - start.max(kernel.start_ns);
        if overlap > 0 && best.is_none_or(|(o, _)| overlap > o) {
            best = Some((overlap, order[position]));
        }
    }
    best.map(|(_, index)| index)
}

fn widening(leads: &mut [i64], lags: &mut [i64]) -> Option<Widening> {
    if leads.len() < MIN_MATCHES {
        return None;
    }
    let middle = leads.len() / 2;
    let lead_ns = *leads.select_nth_unstable(middle).1;
    let lag_ns = *lags.select_nth_unstable(middle).1;
    Some(Widening { lead_ns, lag_ns, matches: leads.len() as u64 })
}

/// Widens every kernel of `timer` by its name's widening or the process's; returns how many were widened.
pub fn widen(timer: &mut [Kernel], named: &HashMap<NameId, Widening>, process: Option<Widening>) -> u64 {
    let mut widened = 0;
    for kernel in timer {
        let Some(w) = named.get(&kernel.name).copied().or(process) else { continue };
        let start = kernel.start_ns.saturating_sub(w.lead_ns);
        let end = kernel.end_ns.saturating_add(w.lag_ns).max(start);
        (kernel.start_ns, kernel.end_ns) = (start, end);
        widened += 1;
    }
    widened
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::DeviceIdx;

    fn kernel(trace: &mut Trace, name: &str, start_ns: i64, end_ns: i64, process: u32) -> Kernel {
        let name = trace.names.intern(name);
        Kernel {
            start_ns,
            end_ns,
            name,
            short_name: name,
            device: DeviceIdx(0),
            process: ProcessIdx(process),
            stream: 7,
            correlation_id: 0,
            grid: [0; 3],
            block: [0; 3],
            launch: None,
            collective: None,
            graph_id: None,
            graph_node_id: None,
        }
    }

    /// Ten collectives 100 µs apart; the channels sit 2 µs after the kernel start and 1.5 µs before its end.
    fn sample_and_timers(trace: &mut Trace) -> (Vec<(i64, i64)>, Vec<Kernel>) {
        let mut sampled = Vec::new();
        let mut timer = Vec::new();
        for i in 0..10 {
            let start = 1_000_000 + i * 100_000;
            let end = start + 7_000;
            sampled.push((start, end));
            let name =
                if i % 2 == 0 { "nccl:AllReduce RING LL (kernel-channel timers)" } else { "nccl:AllGather RING LL" };
            timer.push(kernel(trace, name, start + 2_000, end - 1_500, 0));
        }
        // Collectives after the sample: timed by channels only.
        for i in 10..20 {
            let start = 1_000_000 + i * 100_000;
            timer.push(kernel(
                trace,
                "nccl:AllReduce RING LL (kernel-channel timers)",
                start + 2_000,
                start + 5_500,
                0,
            ));
        }
        (sampled, timer)
    }

    #[test]
    fn the_sample_gives_lead_and_lag_per_name_and_over_the_process() {
        let mut trace = Trace::default();
        let (sampled, timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled, &timer);
        let expected = |matches| Widening { lead_ns: 2_000, lag_ns: 1_500, matches };
        assert_eq!(process, Some(expected(10)));
        // Five of each name: both fitted on their own.
        assert_eq!(named.len(), 2);
        assert!(named.values().all(|w| *w == expected(5)));
    }

    #[test]
    fn every_timer_kernel_is_widened_to_the_kernel_cupti_would_time() {
        let mut trace = Trace::default();
        let (sampled, mut timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled, &timer);
        let widened = widen(&mut timer, &named, process);
        assert_eq!(widened, 20);
        assert_eq!((timer[0].start_ns, timer[0].end_ns), sampled[0]);
        // After the sample: 3.5 µs of channels become the 7 µs kernel.
        assert_eq!((timer[15].start_ns, timer[15].end_ns), (2_500_000, 2_507_000));
    }

    #[test]
    fn too_few_matches_fit_nothing_and_kernels_stay() {
        let mut trace = Trace::default();
        let (sampled, mut timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled[..MIN_MATCHES - 1], &timer);
        assert!(named.is_empty() && process.is_none());
        let before: Vec<(i64, i64)> = timer.iter().map(|k| (k.start_ns, k.end_ns)).collect();
        assert_eq!(widen(&mut timer, &named, process), 0);
        assert_eq!(timer.iter().map(|k| (k.start_ns, k.end_ns)).collect::<Vec<_>>(), before);
    }

    #[test]
    fn a_sampled_kernel_overlapping_nothing_is_not_matched() {
        let mut trace = Trace::default();
        let (mut sampled, timer) = sample_and_timers(&mut trace);
        // Launched before the plugin heard of any collective: no channel times overlap it.
        sampled.insert(0, (10_000, 17_000));
        let (_, process) = fit(&sampled, &timer);
        assert_eq!(process.map(|w| w.matches), Some(10));
    }

    #[test]
    fn the_sampled_kernels_leave_the_trace_and_are_counted() {
        let mut trace = Trace::default();
        let mut extras = CaptureExtras::default();
        for (name, process) in [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0), ("ampere_gemm", 0), ("gemm", 1)] {
            let k = kernel(&mut trace, name, 100, 200, process);
            trace.kernels.push(k);
            extras.kernels.push(Default::default());
        }
        let sampled = take_kernels(&mut trace, &mut extras, ProcessIdx(0));
        assert_eq!((sampled.removed, sampled.nccl.as_slice()), (2, &[(100, 200)][..]));
        assert_eq!((trace.kernels.len(), extras.kernels.len()), (1, 1));
        assert_eq!(trace.kernels[0].process, ProcessIdx(1));
    }
}
