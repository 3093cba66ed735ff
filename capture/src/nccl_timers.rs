//! NCCL's own GPU times on the trace clock: the kernel-channel events (each channel's start and stop,
//! read from `%globaltimer` by NCCL's kernel) placed on the host clock ([`estimate_gpu_clock`]), and one
//! kernel per launch made from them where no kernel tracer ran ([`add_timer_kernels`], for
//! `capture --comm-only`), so that every figure the analyzer draws from NCCL kernels (wait and transfer,
//! late rank, bus bandwidth) comes out of these records as it does from CUPTI's.
//!
//! Clock: `%globaltimer` counts ns on the GPU's own clock, near the host's wall clock but off by a
//! per-GPU amount (0.35 ms on H200s, 11–12 ms on H100s, different per GPU) that drifts (about 20 µs per
//! second on two H100s). The plugin hears of each channel's start and stop from NCCL's host side, always
//! after the kernel wrote the time, so every report gives a bound on the GPU time in host time:
//! `timer − offset ≤ reported`, i.e. `offset ≥ timer − reported`. Per stretch of GPU time
//! ([`KNOT_SPAN_NS`]) the estimate is the largest of these bounds (the report heard soonest), and between
//! stretches the offset is interpolated; the delays of the other reports against it say how prompt the
//! reports were.

use std::collections::HashMap;

use shardscope_model::{DeviceIdx, Kernel, ProcessIdx, Trace};

use shardscope_io::nccl::{KernelLink, NcclOperation, OpKind, to_collectives};

use crate::nccl_spool::NcclProcess;

/// Stream ids given to the kernels made from GPU timers, one per communicator from this number on: far
/// above the stream ids CUDA hands out, so they never share a timeline row with a recorded stream.
pub const TIMER_STREAM_BASE: u32 = 0x7000_0000;

/// GPU time covered by one knot of a [`GpuClock`]: the timer drifts against the host clock (about 20 µs per
/// second was seen on two H100s, against CUPTI's clock), so the offset is estimated per stretch of this much
/// GPU time and interpolated between stretches.
pub const KNOT_SPAN_NS: i64 = 200_000_000;

/// How one process's GPU timer relates to the host's wall clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuClock {
    /// `(GPU time, GPU timer minus wall time)` in ns, one per stretch of [`KNOT_SPAN_NS`] that had reports,
    /// in GPU-time order: the tightest bound of the stretch, at the GPU time it came from.
    pub knots: Vec<(i64, i64)>,
    /// GPU `%globaltimer` minus `CLOCK_REALTIME` (ns since the Unix epoch), in ns, the median over the knots
    /// (subtract the offset at a GPU time, [`GpuClock::timer_minus_utc_at`], to get wall-clock time).
    pub timer_minus_utc_ns: i64,
    /// How fast the offset changes, in ns per second of GPU time: the median slope between neighbouring knots.
    pub drift_ns_per_s: i64,
    /// Channel starts and stops the estimate was made from.
    pub reports: u64,
    /// Median time between the kernel writing a time and the plugin hearing of it, against the estimate:
    /// how prompt NCCL's reports were (each knot rests on the promptest report of its stretch).
    pub median_report_delay_ns: i64,
}

impl GpuClock {
    /// The timer's offset from wall time at GPU time `gpu_ns`: on the line through the two knots around it,
    /// or, before the first or after the last knot, through the first two or the last two (one knot: its offset).
    pub fn timer_minus_utc_at(&self, gpu_ns: i64) -> i64 {
        let n = self.knots.len();
        if n < 2 {
            return self.knots.first().map_or(self.timer_minus_utc_ns, |k| k.1);
        }
        let after = self.knots.partition_point(|&(t, _)| t <= gpu_ns).clamp(1, n - 1);
        let ((t0, o0), (t1, o1)) = (self.knots[after - 1], self.knots[after]);
        if t1 <= t0 {
            return o0;
        }
        o0 + ((o1 - o0) as i128 * (gpu_ns - t0) as i128 / (t1 - t0) as i128) as i64
    }

    /// A GPU time on a trace clock that starts at `trace_start_utc_ns` (ns since the Unix epoch).
    pub fn to_trace_ns(&self, gpu_ns: i64, trace_start_utc_ns: i64) -> i64 {
        gpu_ns.saturating_sub(self.timer_minus_utc_at(gpu_ns)).saturating_sub(trace_start_utc_ns)
    }
}

/// Estimates the GPU timer's offset from the process's channel reports (see the module docs), per stretch
/// of [`KNOT_SPAN_NS`]; `None` without any report that could be placed on the wall clock.
pub fn estimate_gpu_clock(process: &NcclProcess) -> Option<GpuClock> {
    // (GPU time, bound on the offset) per report.
    let mut bounds: Vec<(i64, i64)> = Vec::with_capacity(process.channels.len() * 2);
    for channel in &process.channels {
        let stop = channel.gpu_stop_ns.zip(channel.reported_stop_ns);
        for (gpu_ns, reported_ns) in std::iter::once((channel.gpu_start_ns, channel.reported_start_ns)).chain(stop) {
            if let Some(reported_utc_ns) = process.realtime_ns(reported_ns) {
                bounds.push((gpu_ns, gpu_ns.saturating_sub(reported_utc_ns)));
            }
        }
    }
    let mut tightest: std::collections::BTreeMap<i64, (i64, i64)> = std::collections::BTreeMap::new();
    for &(gpu_ns, bound) in &bounds {
        let slot = tightest.entry(gpu_ns.div_euclid(KNOT_SPAN_NS)).or_insert((gpu_ns, bound));
        if bound > slot.1 {
            *slot = (gpu_ns, bound);
        }
    }
    let knots: Vec<(i64, i64)> = tightest.into_values().collect();
    if knots.is_empty() {
        return None;
    }
    let mut offsets: Vec<i64> = knots.iter().map(|k| k.1).collect();
    let middle = offsets.len() / 2;
    let timer_minus_utc_ns = *offsets.select_nth_unstable(middle).1;
    // The median slope between neighbouring knots: one knot resting on a late report moves it little.
    let mut slopes: Vec<i64> = knots
        .windows(2)
        .filter(|pair| pair[1].0 > pair[0].0)
        .map(|pair| ((pair[1].1 - pair[0].1) as i128 * 1_000_000_000 / (pair[1].0 - pair[0].0) as i128) as i64)
        .collect();
    let middle = slopes.len() / 2;
    let drift_ns_per_s = if slopes.is_empty() { 0 } else { *slopes.select_nth_unstable(middle).1 };
    let mut clock =
        GpuClock { knots, timer_minus_utc_ns, drift_ns_per_s, reports: bounds.len() as u64, median_report_delay_ns: 0 };
    let mut delays: Vec<i64> = bounds.iter().map(|&(t, b)| clock.timer_minus_utc_at(t) - b).collect();
    let middle = delays.len() / 2;
    clock.median_report_delay_ns = *delays.select_nth_unstable(middle).1;
    Some(clock)
}

/// What [`add_timer_kernels`] made and what it could not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerKernelStats {
    /// Launches (groups of operations that ran in one kernel) given a kernel.
    pub launches: u64,
    /// Launches without a channel start and stop (no kernel-channel events, or no clock): no kernel.
    pub launches_without_channels: u64,
    /// Launches given a kernel from part of their channels: fewer channel events than NCCL's channel
    /// count, or a channel whose stop never came (the kernel spans the channels that were heard of).
    pub launches_partial: u64,
    /// Channel events whose stop never came.
    pub channels_without_stop: u64,
}

/// Adds the operations of one process to `trace.collectives` and, for each launch whose channels were
/// timed, a kernel on `device` spanning its channels (earliest start to latest stop, placed by `clock`
/// on a trace clock starting at `trace_start_utc_ns`), named `nccl:<func> <algo> <proto> (kernel-channel
/// timers)`, on one stream per communicator ([`TIMER_STREAM_BASE`] on), pointing at the launch's first
/// operation. Returns the counts and the link of each operation to its kernel (as
/// [`shardscope_io::nccl::kernel_links`] gives it, for the capture file). Call before [`Trace::finish`].
pub fn add_timer_kernels(
    trace: &mut Trace,
    process: ProcessIdx,
    device: DeviceIdx,
    nccl: &NcclProcess,
    clock: Option<&GpuClock>,
    trace_start_utc_ns: i64,
) -> (TimerKernelStats, Vec<Option<KernelLink>>) {
    let operations = &nccl.operations;
    let first_collective = trace.collectives.len() as u32;
    let collectives = to_collectives(operations, trace);
    trace.collectives.extend(collectives);
    let mut stats = TimerKernelStats::default();
    let mut links = vec![None; operations.len()];
    let unstopped = unstopped_channels(nccl);
    stats.channels_without_stop = unstopped.values().sum();
    let streams = comm_streams(operations);
    for launch in launches(operations) {
        let ops: Vec<&NcclOperation> = launch.iter().map(|&i| &operations[i]).collect();
        let start = ops.iter().filter_map(|o| o.gpu_start_ns).min();
        let end = ops.iter().filter_map(|o| o.gpu_end_ns).max();
        let (Some(clock), Some(start), Some(end)) = (clock, start, end) else {
            stats.launches_without_channels += 1;
            continue;
        };
        let partial = ops.iter().any(|o| {
            o.kernel_channels < o.n_channels
                || o.gpu_end_ns.is_none()
                || unstopped.get(&o.event).is_some_and(|&n| n > 0)
        });
        stats.launches_partial += u64::from(partial);
        stats.launches += 1;
        let first = launch[0];
        let name = trace.names.intern(&timer_kernel_name(&ops));
        let start_ns = clock.to_trace_ns(start, trace_start_utc_ns);
        trace.kernels.push(Kernel {
            start_ns,
            end_ns: clock.to_trace_ns(end, trace_start_utc_ns).max(start_ns),
            name,
            short_name: name,
            device,
            process,
            stream: streams.get(&operations[first].comm_id).copied().unwrap_or(TIMER_STREAM_BASE),
            correlation_id: 0,
            grid: [0; 3],
            block: [0; 3],
            launch: None,
            collective: Some(first_collective + first as u32),
            graph_id: None,
            graph_node_id: None,
        });
        links[first] = Some(KernelLink { correlation_id: 0, start_ns });
    }
    (stats, links)
}

/// Channel events without a stop, per operation event.
fn unstopped_channels(nccl: &NcclProcess) -> HashMap<u64, u64> {
    let mut unstopped: HashMap<u64, u64> = HashMap::new();
    for channel in nccl.channels.iter().filter(|c| c.gpu_stop_ns.is_none()) {
        *unstopped.entry(channel.operation_event).or_default() += 1;
    }
    unstopped
}

/// One stream id per communicator, in id order.
fn comm_streams(operations: &[NcclOperation]) -> HashMap<u64, u32> {
    let mut comms: Vec<u64> = operations.iter().map(|o| o.comm_id).collect();
    comms.sort_unstable();
    comms.dedup();
    comms.into_iter().enumerate().map(|(i, comm)| (comm, TIMER_STREAM_BASE.saturating_add(i as u32))).collect()
}

/// The operations of each launch (indices, in operation order), launches in the order of their first
/// operation: operations of one communicator with the same nonzero group ran in one kernel.
fn launches(operations: &[NcclOperation]) -> Vec<Vec<usize>> {
    let mut list: Vec<Vec<usize>> = Vec::new();
    let mut by_group: HashMap<(u64, u64), usize> = HashMap::new();
    for (index, operation) in operations.iter().enumerate() {
        if operation.group == 0 {
            list.push(vec![index]);
            continue;
        }
        match by_group.get(&(operation.comm_id, operation.group)) {
            Some(&launch) => list[launch].push(index),
            None => {
                by_group.insert((operation.comm_id, operation.group), list.len());
                list.push(vec![index]);
            }
        }
    }
    list
}

/// `nccl:AllReduce RING LL (kernel-channel timers)`: a name the rules file files under communication and
/// whose collective type reads back from it (`SendRecv` for a launch of sends and receives), and that no
/// recorded kernel has.
fn timer_kernel_name(ops: &[&NcclOperation]) -> String {
    let first = ops[0];
    let sends = ops.iter().any(|o| o.kind == OpKind::P2p && o.func == "Send");
    let receives = ops.iter().any(|o| o.kind == OpKind::P2p && o.func == "Recv");
    let func = if sends && receives { "SendRecv" } else { first.func.as_str() };
    let mut name = format!("nccl:{func}");
    for part in [&first.algo, &first.proto] {
        if !part.is_empty() {
            name.push(' ');
            name.push_str(part);
        }
    }
    name.push_str(" (kernel-channel timers)");
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_spool::ChannelTiming;

    /// GPU timer 350 µs ahead of wall time; wall time = monotonic + 1e12.
    const TIMER_AHEAD_NS: i64 = 350_000;
    const WALL_MINUS_MONOTONIC: i64 = 1_000_000_000_000;

    fn operation(event: u64, seq: u64, n_channels: u32) -> NcclOperation {
        NcclOperation {
            kind: OpKind::Collective,
            event,
            comm_id: 0xabc,
            comm_name: String::new(),
            rank: 0,
            n_ranks: 2,
            seq: Some(seq),
            func: "AllReduce".into(),
            datatype: "ncclBfloat16".into(),
            count: 4096,
            element_bytes: Some(2),
            bytes: Some(8192),
            root: Some(0),
            peer: None,
            algo: "RING".into(),
            proto: "LL".into(),
            n_channels,
            n_warps: 16,
            group: 0,
            cpu_start_ns: 0,
            cpu_end_ns: None,
            gpu_start_ns: None,
            gpu_end_ns: None,
            kernel_channels: 0,
            interface_version: 5,
        }
    }

    /// A channel of `op` running from `start` to `stop` (wall ns), heard of `delays` ns later (monotonic clock).
    fn channel(
        process: &mut NcclProcess,
        op: usize,
        channel: u8,
        (start, stop): (i64, Option<i64>),
        delays: (i64, i64),
    ) {
        let o = &mut process.operations[op];
        o.kernel_channels += 1;
        let gpu_start = start + TIMER_AHEAD_NS;
        o.gpu_start_ns = Some(o.gpu_start_ns.map_or(gpu_start, |s| s.min(gpu_start)));
        let gpu_stop = stop.map(|t| t + TIMER_AHEAD_NS);
        if let Some(g) = gpu_stop {
            o.gpu_end_ns = Some(o.gpu_end_ns.map_or(g, |e| e.max(g)));
        }
        process.channels.push(ChannelTiming {
            operation_event: o.event,
            channel,
            gpu_start_ns: gpu_start,
            gpu_stop_ns: gpu_stop,
            reported_start_ns: start + delays.0 - WALL_MINUS_MONOTONIC,
            reported_stop_ns: stop.map(|t| t + delays.1 - WALL_MINUS_MONOTONIC),
        });
    }

    fn process_with(ops: Vec<NcclOperation>) -> NcclProcess {
        NcclProcess { operations: ops, clock_syncs: vec![(0, WALL_MINUS_MONOTONIC as u64)], ..NcclProcess::default() }
    }

    #[test]
    fn the_promptest_report_sets_the_gpu_clock() {
        let t0 = 1_700_000_000_000_000_000i64;
        let mut process = process_with(vec![operation(1, 0, 2), operation(2, 1, 2)]);
        channel(&mut process, 0, 0, (t0, Some(t0 + 10_000)), (4_000, 2_000));
        channel(&mut process, 0, 1, (t0 + 100, Some(t0 + 10_500)), (3_000, 0));
        channel(&mut process, 1, 0, (t0 + 50_000, Some(t0 + 60_000)), (5_000, 7_000));
        channel(&mut process, 1, 1, (t0 + 50_100, Some(t0 + 60_100)), (6_000, 1_000));
        let clock = estimate_gpu_clock(&process).unwrap();
        assert_eq!(clock.timer_minus_utc_ns, TIMER_AHEAD_NS, "one stop was heard of at once");
        assert_eq!(clock.reports, 8);
        // Delays 0, 1000, 2000, 3000, 4000, 5000, 6000, 7000: the upper middle one.
        assert_eq!(clock.median_report_delay_ns, 4_000);
        let session_start = t0 - 1_000_000;
        assert_eq!(clock.to_trace_ns(t0 + TIMER_AHEAD_NS, session_start), 1_000_000);

        // Every report late by at least 800 ns: the times come out that much late, never early.
        let mut late = process_with(vec![operation(1, 0, 1)]);
        channel(&mut late, 0, 0, (t0, Some(t0 + 10_000)), (900, 800));
        let clock = estimate_gpu_clock(&late).unwrap();
        assert_eq!(clock.timer_minus_utc_ns, TIMER_AHEAD_NS - 800);
        // Reports that cannot be placed on the wall clock (no clock pair) give no estimate.
        late.clock_syncs.clear();
        assert_eq!(estimate_gpu_clock(&late), None);
        assert_eq!(estimate_gpu_clock(&process_with(vec![operation(1, 0, 1)])), None);
    }

    /// The timer drifts 20 µs per second against the wall clock over three seconds; in each stretch one report
    /// is heard of within 1 µs: every time comes out within about 1 µs, where one offset would be 60 µs off.
    #[test]
    fn a_drifting_timer_is_followed_stretch_by_stretch() {
        let t0 = 1_700_000_000_000_000_000i64;
        let drift = |wall: i64| TIMER_AHEAD_NS + (wall - t0) / 50_000; // 20 µs per s
        let mut process = process_with(Vec::new());
        for i in 0..300u64 {
            let wall = t0 + i as i64 * 10_000_000;
            let mut op = operation(i + 1, i, 1);
            let gpu = wall + drift(wall);
            (op.gpu_start_ns, op.gpu_end_ns, op.kernel_channels) = (Some(gpu), Some(gpu + 5_000), 1);
            let delay = if i % 10 == 3 { 1_000 } else { 3_000 + (i as i64 % 7) * 2_000 };
            process.channels.push(ChannelTiming {
                operation_event: op.event,
                channel: 0,
                gpu_start_ns: gpu,
                gpu_stop_ns: Some(gpu + 5_000),
                reported_start_ns: wall + delay - WALL_MINUS_MONOTONIC,
                reported_stop_ns: Some(wall + 5_000 + delay + 2_000 - WALL_MINUS_MONOTONIC),
            });
            process.operations.push(op);
        }
        let clock = estimate_gpu_clock(&process).unwrap();
        assert_eq!(clock.knots.len(), 15, "3 s of GPU time in stretches of 0.2 s");
        assert!((clock.drift_ns_per_s - 20_000).abs() < 200, "{}", clock.drift_ns_per_s);
        for op in &process.operations {
            let gpu = op.gpu_start_ns.unwrap();
            let wall = t0 + (op.seq.unwrap() as i64) * 10_000_000;
            let error = clock.to_trace_ns(gpu, t0) - (wall - t0);
            assert!((-300..=1_500).contains(&error), "seq {:?}: {error} ns", op.seq);
        }
    }

    #[test]
    fn launches_become_kernels_and_missing_or_partial_channels_are_counted() {
        let t0 = 1_700_000_000_000_000_000i64;
        let mut ops = vec![operation(1, 0, 2), operation(2, 1, 2), operation(3, 2, 2), operation(4, 3, 2)];
        // A grouped send and receive: one launch.
        for (event, func) in [(5, "Send"), (6, "Recv")] {
            let mut p = operation(event, 0, 1);
            (p.kind, p.func, p.seq, p.group, p.algo, p.proto) =
                (OpKind::P2p, func.into(), None, 9, String::new(), String::new());
            ops.push(p);
        }
        let mut process = process_with(ops);
        channel(&mut process, 0, 0, (t0, Some(t0 + 10_000)), (0, 0));
        channel(&mut process, 0, 1, (t0 + 200, Some(t0 + 12_000)), (0, 0));
        // seq 1: no channel at all. seq 2: one channel of two. seq 3: a channel whose stop never came.
        channel(&mut process, 2, 0, (t0 + 40_000, Some(t0 + 45_000)), (0, 0));
        channel(&mut process, 3, 0, (t0 + 60_000, Some(t0 + 61_000)), (0, 0));
        channel(&mut process, 3, 1, (t0 + 60_000, None), (0, 0));
        channel(&mut process, 4, 0, (t0 + 80_000, Some(t0 + 81_000)), (0, 0));
        channel(&mut process, 5, 0, (t0 + 80_100, Some(t0 + 82_000)), (0, 0));
        let clock = estimate_gpu_clock(&process).unwrap();
        let mut trace = Trace::default();
        let (stats, links) = add_timer_kernels(&mut trace, ProcessIdx(0), DeviceIdx(0), &process, Some(&clock), t0);
        assert_eq!(
            stats,
            TimerKernelStats {
                launches: 4,
                launches_without_channels: 1,
                launches_partial: 2,
                channels_without_stop: 1
            }
        );
        let spans: Vec<(i64, i64)> = trace.kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect();
        assert_eq!(spans, [(0, 12_000), (40_000, 45_000), (60_000, 61_000), (80_000, 82_000)]);
        let names: Vec<&str> = trace.kernels.iter().map(|k| trace.names.get(k.name)).collect();
        assert_eq!(names[0], "nccl:AllReduce RING LL (kernel-channel timers)");
        assert_eq!(names[3], "nccl:SendRecv (kernel-channel timers)");
        for name in &names {
            assert!(shardscope_model::kernel_names::is_nccl_kernel(name));
        }
        assert_eq!(shardscope_model::CollectiveOp::parse(names[0]), shardscope_model::CollectiveOp::AllReduce);
        assert_eq!(shardscope_model::CollectiveOp::parse(names[3]), shardscope_model::CollectiveOp::SendRecv);
        // Every operation is a collective; each kernel points at its launch's first one, and the links say so.
        assert_eq!(trace.collectives.len(), 6);
        let pointed: Vec<Option<u32>> = trace.kernels.iter().map(|k| k.collective).collect();
        assert_eq!(pointed, [Some(0), Some(2), Some(3), Some(4)]);
        let linked: Vec<usize> = links.iter().enumerate().filter(|(_, l)| l.is_some()).map(|(i, _)| i).collect();
        assert_eq!(linked, [0, 2, 3, 4]);
        assert_eq!(links[2], Some(KernelLink { correlation_id: 0, start_ns: 40_000 }));
        assert!(trace.kernels.iter().all(|k| k.stream == TIMER_STREAM_BASE && k.device == DeviceIdx(0)));

        // Without a clock nothing can be placed: every launch is counted as untimed.
        let mut bare = Trace::default();
        let (stats, _) = add_timer_kernels(&mut bare, ProcessIdx(0), DeviceIdx(0), &process, None, t0);
        assert_eq!((stats.launches, stats.launches_without_channels), (0, 5));
        assert!(bare.kernels.is_empty());
        assert_eq!(bare.collectives.len(), 6);
    }
}
