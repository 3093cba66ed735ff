//! The NCCL kernel sample of `capture --comm-only`, turned into what NCCL's channel timers leave out.
//!
//! NCCL's kernel-channel timers start when a channel begins its work and stop when it is done: the kernel's
//! start-up before the first channel and its wind-down after the last are not in them (about 3.3 µs per
//! collective on H100s, whatever the size), so a channel-timed small all-reduce looks half as long as the
//! kernel CUPTI times. Under `--comm-only` CUPTI times the kernels of the first collectives of each process
//! (the sample, see `NcclKernelSample`). Here the sampled NCCL kernels are paired in launch order with the
//! first channel-timed kernels (a pair whose starts lie more than 50 µs apart does not count, nor a sampled kernel
//! outside the process's capture windows), the median of (kernel duration − channel span) is taken per kernel name
//! (algorithm and protocol) or, with too few of a name, over the process, and every channel-timed kernel is
//! widened by it, half before and half after.
//!
//! Why durations and halves: a duration does not depend on where the GPU timer was placed on the host clock,
//! but the split between start-up and wind-down does. Early in a run the placement can be off by several µs
//! (on two H100s one process's sample put 9.3 µs before the channels and −6.0 µs after, summing to the same
//! 3.3 µs as the others' 1.5–1.9 and 1.2–1.8 µs), and pairing by overlap then misses small kernels; so the
//! pairing follows launch order and the split is even, which moves a start by a few hundred ns at most.
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
/// `--comm-only` every CUPTI kernel is one of the sample's. The NCCL ones launched outside the process's capture
/// windows (the sample starts with the process, the plugin records only inside windows) have no channel times to
/// pair with and are not kept for the fit.
pub fn take_kernels(trace: &mut Trace, extras: &mut CaptureExtras, process: ProcessIdx) -> SampledKernels {
    let aligned = extras.kernels.len() == trace.kernels.len();
    let windows: Vec<(i64, i64)> =
        trace.capture_windows.iter().filter(|w| w.process == process).map(|w| (w.start_ns, w.end_ns)).collect();
    let in_windows = |t: i64| windows.is_empty() || windows.iter().any(|&(start, end)| (start..end).contains(&t));
    let mut sampled = SampledKernels::default();
    let mut keep = Vec::with_capacity(trace.kernels.len());
    for kernel in &trace.kernels {
        let ours = kernel.process == process;
        keep.push(!ours);
        if ours {
            sampled.removed += 1;
            if kernel_names::is_nccl_kernel(trace.names.get(kernel.name)) && in_windows(kernel.start_ns) {
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

/// How much longer a kernel runs than its channels, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Widening {
    /// Kernel duration minus channel span (median), ns: start-up plus wind-down.
    pub kernel_minus_channels_ns: i64,
    /// Pairs it rests on.
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
    /// Over the process: what widened the kernels of names with too few pairs of their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Widening>,
    /// Kernel names (algorithm and protocol) with enough pairs of their own.
    pub names_fitted: u64,
    /// Channel-timed kernels widened.
    pub kernels_widened: u64,
}

/// Longest start-up plus wind-down a pair may show; more means the pair is not one collective.
const MAX_EXTRA_NS: i64 = 1_000_000;

/// Farthest apart a sampled kernel's start and its channel-timed kernel's may be for the two to be one collective:
/// more than the GPU clock's placement errs (up to about 11 µs was seen), less than collectives are apart in a
/// decode.
const MAX_START_GAP_NS: i64 = 50_000;

/// Pairs the sampled NCCL kernels (start order) with the channel-timed kernels `timer` of the same process in
/// launch order and returns the widening per kernel name and over the process (`None` with fewer than
/// [`MIN_MATCHES`] pairs). A pair whose starts lie more than [`MAX_START_GAP_NS`] apart is not counted (the GPU
/// clock's placement is worst at the first collectives; a list with a launch missing pairs nothing after it, which
/// leaves the kernels unwidened rather than widened wrongly), nor one whose kernel is shorter than its channels (by
/// more than 1 µs) or longer by more than [`MAX_EXTRA_NS`].
pub fn fit(sampled: &[(i64, i64)], timer: &[Kernel]) -> (HashMap<NameId, Widening>, Option<Widening>) {
    let mut order: Vec<usize> = (0..timer.len()).collect();
    order.sort_unstable_by_key(|&i| (timer[i].start_ns, i));
    let mut by_name: HashMap<NameId, Vec<i64>> = HashMap::new();
    let mut all = Vec::new();
    for (&(start, end), &index) in sampled.iter().zip(&order) {
        let kernel = &timer[index];
        let extra = (end - start) - (kernel.end_ns - kernel.start_ns);
        if (kernel.start_ns - start).abs() > MAX_START_GAP_NS || !(-1_000..=MAX_EXTRA_NS).contains(&extra) {
            continue;
        }
        by_name.entry(kernel.name).or_default().push(extra);
        all.push(extra);
    }
    let named = by_name.into_iter().filter_map(|(name, mut extras)| Some((name, widening(&mut extras)?))).collect();
    (named, widening(&mut all))
}

fn widening(extras: &mut [i64]) -> Option<Widening> {
    if extras.len() < MIN_MATCHES {
        return None;
    }
    let middle = extras.len() / 2;
    let kernel_minus_channels_ns = (*extras.select_nth_unstable(middle).1).max(0);
    Some(Widening { kernel_minus_channels_ns, matches: extras.len() as u64 })
}

/// Widens every kernel of `timer` by its name's widening or the process's, half before and half after; returns
/// how many were widened.
pub fn widen(timer: &mut [Kernel], named: &HashMap<NameId, Widening>, process: Option<Widening>) -> u64 {
    let mut widened = 0;
    for kernel in timer {
        let Some(w) = named.get(&kernel.name).copied().or(process) else { continue };
        let before = w.kernel_minus_channels_ns / 2;
        let start = kernel.start_ns.saturating_sub(before);
        let end = kernel.end_ns.saturating_add(w.kernel_minus_channels_ns - before).max(start);
        (kernel.start_ns, kernel.end_ns) = (start, end);
        widened += 1;
    }
    widened
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(trace: &mut Trace, name: &str, start_ns: i64, end_ns: i64, process: u32) -> Kernel {
        let name = trace.names.intern(name);
        Kernel {
            start_ns,
            end_ns,
            name,
            short_name: name,
            process: ProcessIdx(process),
            stream: 7,
            ..Kernel::default()
        }
    }

    /// Ten collectives 100 µs apart, each kernel 7 µs; its channels 3.5 µs, placed 2 µs after the kernel start,
    /// or (the first three: a poor early clock placement) 9 µs after it.
    fn sample_and_timers(trace: &mut Trace) -> (Vec<(i64, i64)>, Vec<Kernel>) {
        let mut sampled = Vec::new();
        let mut timer = Vec::new();
        for i in 0..10 {
            let start = 1_000_000 + i * 100_000;
            sampled.push((start, start + 7_000));
            let name =
                if i % 2 == 0 { "nccl:AllReduce RING LL (kernel-channel timers)" } else { "nccl:AllGather RING LL" };
            let placed = start + if i < 3 { 9_000 } else { 2_000 };
            timer.push(kernel(trace, name, placed, placed + 3_500, 0));
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
    fn the_sample_gives_the_kernels_extra_length_per_name_and_over_the_process() {
        let mut trace = Trace::default();
        let (sampled, timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled, &timer);
        let expected = |matches| Widening { kernel_minus_channels_ns: 3_500, matches };
        // The poorly placed ones pair all the same: pairs follow launch order, not overlap.
        assert_eq!(process, Some(expected(10)));
        // Five of each name: both fitted on their own.
        assert_eq!(named.len(), 2);
        assert!(named.values().all(|w| *w == expected(5)));
    }

    #[test]
    fn every_timer_kernel_is_widened_half_before_and_half_after() {
        let mut trace = Trace::default();
        let (sampled, mut timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled, &timer);
        assert_eq!(widen(&mut timer, &named, process), 20);
        // After the sample: 3.5 µs of channels become a 7 µs kernel, 1.75 µs either side.
        assert_eq!((timer[15].start_ns, timer[15].end_ns), (2_500_250, 2_507_250));
    }

    #[test]
    fn too_few_pairs_fit_nothing_and_kernels_stay() {
        let mut trace = Trace::default();
        let (sampled, mut timer) = sample_and_timers(&mut trace);
        let (named, process) = fit(&sampled[..MIN_MATCHES - 1], &timer);
        assert!(named.is_empty() && process.is_none());
        let before: Vec<(i64, i64)> = timer.iter().map(|k| (k.start_ns, k.end_ns)).collect();
        assert_eq!(widen(&mut timer, &named, process), 0);
        assert_eq!(timer.iter().map(|k| (k.start_ns, k.end_ns)).collect::<Vec<_>>(), before);
    }

    #[test]
    fn a_pair_that_cannot_be_one_collective_is_not_counted() {
        let mut trace = Trace::default();
        let (mut sampled, timer) = sample_and_timers(&mut trace);
        // A kernel shorter than the channels it is paired with, and one 2 ms longer.
        sampled[8].1 = sampled[8].0 + 1_000;
        sampled[9].1 = sampled[9].0 + 2_000_000;
        let (_, process) = fit(&sampled, &timer);
        assert_eq!(process, Some(Widening { kernel_minus_channels_ns: 3_500, matches: 8 }));
    }

    #[test]
    fn a_launch_missing_from_the_channel_times_pairs_nothing_after_it() {
        let mut trace = Trace::default();
        let (sampled, mut timer) = sample_and_timers(&mut trace);
        // The sixth collective's channels never came: every later pair is 100 µs apart, and none counts.
        timer.remove(5);
        let (_, process) = fit(&sampled, &timer);
        assert_eq!(process, Some(Widening { kernel_minus_channels_ns: 3_500, matches: 5 }));
        timer.remove(1);
        assert_eq!(fit(&sampled, &timer).1, None, "one pair left: too few to fit, so nothing is widened");
    }

    #[test]
    fn sampled_kernels_outside_the_capture_windows_are_not_paired() {
        let mut trace = Trace::default();
        let mut extras = CaptureExtras::default();
        let nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
        for start in [100, 5_000, 6_000] {
            let k = kernel(&mut trace, nccl, start, start + 50, 0);
            trace.kernels.push(k);
        }
        trace.capture_windows.push(shardscope_model::CaptureWindow {
            process: ProcessIdx(0),
            start_ns: 4_000,
            end_ns: 10_000,
            start_trigger: shardscope_model::WindowTrigger::CudaProfilerApi,
            end_trigger: shardscope_model::WindowTrigger::CudaProfilerApi,
        });
        let sampled = take_kernels(&mut trace, &mut extras, ProcessIdx(0));
        assert_eq!((sampled.removed, sampled.nccl.as_slice()), (3, &[(5_000, 5_050), (6_000, 6_050)][..]));
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
