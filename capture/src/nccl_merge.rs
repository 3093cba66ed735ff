//! The NCCL profiler plugin's operations joined to the merged trace: linked to the NCCL kernels CUPTI
//! recorded, or, where none was recorded (`capture --comm-only`), made into kernels from NCCL's own
//! kernel-channel timers ([`crate::nccl_timers`]) on the GPU the communicator ran on.
//!
//! Either way each process's GPU timer is placed on the host clock when the spool has channel events, and
//! what could not be timed (launches without channels, partial channels) and NCCL versions whose
//! kernel-channel timing is known to be costly are counted and reported, never passed over.

use serde::Serialize;
use shardscope_io::nccl;
use shardscope_model::{Device, DeviceIdx, ProcessIdx, Trace, kernel_names};
use shardscope_spool::nccl::costly_kernel_timers;

use crate::merge::{CaptureExtras, DeviceExtra};
use crate::nccl_sample::{self, SampleFit};
use crate::nccl_spool::NcclProcess;
use crate::nccl_timers::{self, GpuClock, TimerKernelStats};

/// One process's GPU clock, for the capture file's `ncclGpuClock` fact.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClockNote {
    /// OS process id.
    pub pid: u32,
    /// GPU `%globaltimer` minus wall-clock time, ns, the median over the run (see [`GpuClock`]).
    pub timer_minus_utc_ns: i64,
    /// How fast that offset changed over the run, ns per second.
    pub drift_ns_per_s: i64,
    /// Stretches of GPU time with their own offset.
    pub knots: u64,
    /// Channel reports the estimate rests on.
    pub reports: u64,
    /// Median delay of NCCL's reports against the estimate, ns.
    pub median_report_delay_ns: i64,
    /// Where CUPTI also recorded the NCCL kernels: the estimate placed operations' first channel starts this
    /// many ns after their linked kernels' starts (median), a check of the estimate against CUPTI's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_start_after_kernel_ns: Option<i64>,
}

/// What joining the NCCL operations did, over all processes.
#[derive(Debug, Clone, Default)]
pub struct NcclMergeSummary {
    /// Launches linked to a CUPTI kernel, and launches left without one.
    pub linked: u64,
    /// See `linked`.
    pub unlinked: u64,
    /// Kernels made from GPU timers, and what could not be made.
    pub timers: TimerKernelStats,
    /// Processes whose collectives were timed from GPU timers.
    pub timer_processes: u64,
    /// Per process with channel events, its GPU clock.
    pub clocks: Vec<ClockNote>,
    /// One line per process whose NCCL is known to make kernel-channel timing costly.
    pub costly_versions: Vec<String>,
    /// Under `--comm-only`, per process: what its NCCL kernel sample gave ([`nccl_sample`]).
    pub samples: Vec<SampleFit>,
}

/// Joins every process's operations to `trace` (see the module docs). With `comm_only`, every process is
/// timed from its GPU timers; otherwise only a process without CUPTI's NCCL kernels that has channel events.
pub fn attach_operations(
    trace: &mut Trace,
    extras: &mut CaptureExtras,
    processes: &mut [NcclProcess],
    comm_only: bool,
) -> NcclMergeSummary {
    let mut summary = NcclMergeSummary::default();
    let offset = trace.clock_offset_ns.unwrap_or(0);
    for process in processes.iter_mut() {
        process.gpu_clock = nccl_timers::estimate_gpu_clock(process);
        note_costly_version(process, &mut summary);
        let Some(index) = trace.processes.iter().position(|p| p.pid == process.pid) else {
            trace.warn_n("NCCL operation of a process that recorded no CUDA spool", process.operations.len() as u64);
            continue;
        };
        let process_idx = ProcessIdx(index as u32);
        let has_kernels = trace
            .kernels
            .iter()
            .any(|k| k.process == process_idx && kernel_names::is_nccl_kernel(trace.names.get(k.name)));
        let timed = comm_only || (!has_kernels && !process.channels.is_empty());
        let mut check = None;
        if timed {
            let sampled = comm_only.then(|| nccl_sample::take_kernels(trace, extras, process_idx));
            let device = timer_device(trace, extras, process, process_idx);
            let (first_timer_kernel, first_collective) = (trace.kernels.len(), trace.collectives.len() as u32);
            let (stats, links) =
                nccl_timers::add_timer_kernels(trace, process_idx, device, process, process.gpu_clock.as_ref(), offset);
            process.kernel_links = links;
            // A process with no kernel timed had no sample (`--comm-sample 0`): nothing to fit or to say.
            if let Some(sampled) = sampled.filter(|s| s.removed > 0) {
                let timer_kernels = &mut trace.kernels[first_timer_kernel..];
                let fit = widen_by_sample(timer_kernels, &mut process.kernel_links, first_collective, &sampled);
                summary.samples.push(SampleFit { pid: process.pid, ..fit });
            }
            add_stats(&mut summary.timers, stats);
            summary.timer_processes += 1;
        } else {
            let first_collective = trace.collectives.len() as u32;
            let to_trace_ns = |t: i64| Some(process.realtime_ns(t)? - offset);
            let stats = nccl::attach_to_kernels(trace, process_idx, &process.operations, &to_trace_ns);
            process.kernel_links = nccl::kernel_links(trace, process_idx, first_collective, process.operations.len());
            summary.linked += stats.launches_linked;
            summary.unlinked += stats.launches_unlinked;
            check = process.gpu_clock.as_ref().and_then(|clock| channel_lag(trace, process, first_collective, clock));
        }
        if let Some(clock) = &process.gpu_clock {
            summary.clocks.push(ClockNote {
                pid: process.pid,
                timer_minus_utc_ns: clock.timer_minus_utc_ns,
                drift_ns_per_s: clock.drift_ns_per_s,
                knots: clock.knots.len() as u64,
                reports: clock.reports,
                median_report_delay_ns: clock.median_report_delay_ns,
                channel_start_after_kernel_ns: check,
            });
        }
    }
    report_to_trace(trace, &summary);
    summary
}

/// Widens a process's channel-timed kernels by what its NCCL kernel sample showed; the operations' links
/// (which name their kernel by its start; operation `i` is collective `first_collective + i`) follow.
fn widen_by_sample(
    timer_kernels: &mut [shardscope_model::Kernel],
    links: &mut [Option<nccl::KernelLink>],
    first_collective: u32,
    sampled: &nccl_sample::SampledKernels,
) -> SampleFit {
    let (named, process) = nccl_sample::fit(&sampled.nccl, timer_kernels);
    let kernels_widened = nccl_sample::widen(timer_kernels, &named, process);
    for kernel in timer_kernels.iter() {
        let operation = kernel.collective.and_then(|c| c.checked_sub(first_collective));
        if let Some(Some(link)) = operation.and_then(|i| links.get_mut(i as usize)) {
            link.start_ns = kernel.start_ns;
        }
    }
    SampleFit {
        pid: 0,
        kernels_timed: sampled.removed,
        nccl_kernels: sampled.nccl.len() as u64,
        process,
        names_fitted: named.len() as u64,
        kernels_widened,
    }
}

/// Median over the process's linked kernels of (first channel start, placed by `clock`) − (kernel start).
fn channel_lag(trace: &Trace, process: &NcclProcess, first_collective: u32, clock: &GpuClock) -> Option<i64> {
    let start_utc = trace.clock_offset_ns.unwrap_or(0);
    let mut lags: Vec<i64> = trace
        .kernels
        .iter()
        .filter_map(|kernel| {
            let index = kernel.collective?.checked_sub(first_collective)? as usize;
            let gpu_start = process.operations.get(index)?.gpu_start_ns?;
            Some(clock.to_trace_ns(gpu_start, start_utc) - kernel.start_ns)
        })
        .collect();
    let middle = lags.len() / 2;
    (!lags.is_empty()).then(|| *lags.select_nth_unstable(middle).1)
}

fn add_stats(total: &mut TimerKernelStats, stats: TimerKernelStats) {
    total.launches += stats.launches;
    total.launches_without_channels += stats.launches_without_channels;
    total.launches_partial += stats.launches_partial;
    total.channels_without_stop += stats.channels_without_stop;
}

/// Counts what was lost in the trace's warnings (the capture file keeps them, the report shows them).
fn report_to_trace(trace: &mut Trace, summary: &NcclMergeSummary) {
    trace.warn_n("NCCL operation not linked to a kernel", summary.unlinked);
    trace.warn_n(
        "NCCL launch without kernel-channel times (no GPU start and end: not timed)",
        summary.timers.launches_without_channels,
    );
    trace.warn_n(
        "NCCL launch timed from part of its channels (fewer channel events than channels, or a channel without \
         its stop)",
        summary.timers.launches_partial,
    );
    trace.warn_n("NCCL kernel-channel event without its stop", summary.timers.channels_without_stop);
    for line in &summary.costly_versions {
        trace.warn(line);
    }
}

/// A process whose spool has kernel-channel events from an NCCL where they are known to be costly.
fn note_costly_version(process: &NcclProcess, summary: &mut NcclMergeSummary) {
    let version = process.info.as_ref().map_or(0, |i| i.nccl_version);
    if process.channels.is_empty() {
        return;
    }
    if let Some(note) = costly_kernel_timers(version)
        && !summary.costly_versions.contains(&note)
    {
        summary.costly_versions.push(note);
    }
}

/// The GPU a process's collectives ran on: the one whose UUID the plugin read at communicator init, else
/// the one GPU the process is known to have used, else a GPU made for it (counted).
fn timer_device(trace: &mut Trace, extras: &mut CaptureExtras, process: &NcclProcess, index: ProcessIdx) -> DeviceIdx {
    let recorded = process.comm_devices.iter().find(|d| d.uuid != [0; 16]);
    let by_uuid = recorded.and_then(|d| extras.devices.iter().position(|e| e.uuid == d.uuid));
    let own = || trace.devices.iter().position(|d| d.process == Some(index));
    let device = match by_uuid.or_else(own) {
        Some(found) => found,
        None => {
            trace.warn("GPU of NCCL collectives without a CUPTI device record");
            extras.devices.push(DeviceExtra { uuid: recorded.map_or([0; 16], |d| d.uuid), ..DeviceExtra::default() });
            let ordinal = process.comm_devices.first().map_or(0, |d| d.cuda_ordinal.max(0) as u32);
            trace.add_device(Device { ordinal, ..Device::default() });
            trace.devices.len() - 1
        }
    };
    // A GPU the job shares between processes has no owner (the merge gives one only to a sole user).
    let slot = &mut trace.devices[device].process;
    if slot.is_none() {
        *slot = Some(index);
    }
    DeviceIdx(device as u32)
}

impl NcclMergeSummary {
    /// The `ncclGpuClock` fact: the clocks as JSON.
    pub fn clocks_json(&self) -> String {
        serde_json::to_string(&self.clocks).unwrap_or_default()
    }

    /// Lines for the launcher's stderr.
    pub fn lines(&self, processes: usize) -> Vec<String> {
        let mut lines = Vec::new();
        if processes == 0 {
            return lines;
        }
        if self.timer_processes > 0 {
            let t = &self.timers;
            lines.push(format!(
                "NCCL profiler: {} collective launches timed by NCCL's kernel-channel timers in {} processes; {} \
                 without channel times, {} from part of their channels",
                t.launches, self.timer_processes, t.launches_without_channels, t.launches_partial
            ));
        }
        if self.linked + self.unlinked > 0 {
            lines.push(format!(
                "NCCL profiler: {} collective launches linked to their kernels, {} not",
                self.linked, self.unlinked
            ));
        }
        for clock in &self.clocks {
            lines.push(format!(
                "NCCL GPU timer of pid {}: {:+.1} µs from wall clock, drifting {:+.1} µs/s ({} stretches, {} reports, \
                 median report delay {:.1} µs{})",
                clock.pid,
                clock.timer_minus_utc_ns as f64 / 1e3,
                clock.drift_ns_per_s as f64 / 1e3,
                clock.knots,
                clock.reports,
                clock.median_report_delay_ns as f64 / 1e3,
                clock
                    .channel_start_after_kernel_ns
                    .map(|d| format!("; channel starts {:+.1} µs after CUPTI's kernel starts", d as f64 / 1e3))
                    .unwrap_or_default()
            ));
        }
        lines.extend(self.samples.iter().map(sample_line));
        lines.extend(self.costly_versions.iter().map(|line| format!("warning: {line}")));
        lines
    }

    /// The `ncclKernelSample` fact: per process, what its sample gave, as JSON.
    pub fn samples_json(&self) -> String {
        serde_json::to_string(&self.samples).unwrap_or_default()
    }
}

fn sample_line(fit: &SampleFit) -> String {
    let head = format!(
        "NCCL kernel sample of pid {}: {} kernels timed by CUPTI as recording began ({} NCCL; left out of the trace)",
        fit.pid, fit.kernels_timed, fit.nccl_kernels
    );
    match fit.process {
        Some(w) => format!(
            "{head}; kernels ran {:.1} µs longer than their channels (median of {} pairs; {} kernel names fitted on \
             their own): {} channel-timed kernels widened by that, half before and half after",
            w.kernel_minus_channels_ns as f64 / 1e3,
            w.matches,
            fit.names_fitted,
            fit.kernels_widened
        ),
        None => format!(
            "warning: {head}; fewer than {} paired with their channel times, so kernels keep their channel spans \
             (shorter than CUPTI's by the kernel's start-up and wind-down)",
            nccl_sample::MIN_MATCHES
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_spool::{ChannelTiming, CommDevice};
    use shardscope_io::nccl::{NcclOperation, OpKind};
    use shardscope_model::Process;
    use shardscope_spool::nccl::ProcessRecord;

    const START_UTC_NS: i64 = 1_764_000_000_000_000_000;

    fn operation(event: u64, seq: u64, gpu: Option<(i64, i64)>) -> NcclOperation {
        NcclOperation {
            kind: OpKind::Collective,
            event,
            comm_id: 7,
            comm_name: String::new(),
            rank: 1,
            n_ranks: 2,
            seq: Some(seq),
            func: "AllReduce".into(),
            datatype: "ncclFloat32".into(),
            count: 16,
            element_bytes: Some(4),
            bytes: Some(64),
            root: Some(0),
            peer: None,
            algo: "RING".into(),
            proto: "LL".into(),
            n_channels: 1,
            n_warps: 8,
            group: 0,
            cpu_start_ns: seq as i64,
            cpu_end_ns: None,
            gpu_start_ns: gpu.map(|g| g.0),
            gpu_end_ns: gpu.map(|g| g.1),
            kernel_channels: u32::from(gpu.is_some()),
            interface_version: 5,
        }
    }

    /// A process on the second of two GPUs, with NCCL 2.31.2, one timed collective and one without channels.
    fn setup() -> (Trace, CaptureExtras, Vec<NcclProcess>) {
        let mut trace = Trace { clock_offset_ns: Some(START_UTC_NS), ..Trace::default() };
        trace.add_process(Process { pid: 41, ..Process::default() });
        trace.add_process(Process { pid: 42, ..Process::default() });
        let mut extras = CaptureExtras::default();
        for (ordinal, uuid) in [(0, [1u8; 16]), (1, [2u8; 16])] {
            trace.add_device(Device { ordinal, ..Device::default() });
            extras.devices.push(DeviceExtra { uuid, ..DeviceExtra::default() });
        }
        let gpu = (START_UTC_NS + 2_000_000 + 300_000, START_UTC_NS + 2_010_000 + 300_000);
        let process = NcclProcess {
            pid: 42,
            info: Some(ProcessRecord { pid: 42, nccl_version: 23102, ..ProcessRecord::default() }),
            operations: vec![operation(1, 0, Some(gpu)), operation(2, 1, None)],
            channels: vec![ChannelTiming {
                operation_event: 1,
                channel: 0,
                gpu_start_ns: gpu.0,
                gpu_stop_ns: Some(gpu.1),
                reported_start_ns: 2_000_000,
                reported_stop_ns: Some(2_010_000),
            }],
            comm_devices: vec![CommDevice { comm_ref: 1, comm_id: 7, cuda_ordinal: 1, uuid: [2; 16] }],
            clock_syncs: vec![(0, START_UTC_NS as u64)],
            ..NcclProcess::default()
        };
        (trace, extras, vec![process])
    }

    #[test]
    fn comm_only_times_collectives_on_their_gpu_and_reports_what_it_could_not() {
        let (mut trace, mut extras, mut processes) = setup();
        let summary = attach_operations(&mut trace, &mut extras, &mut processes, true);
        assert_eq!(
            (summary.timer_processes, summary.timers.launches, summary.timers.launches_without_channels),
            (1, 1, 1)
        );
        // On the GPU whose UUID the plugin read, which is now the process's.
        assert_eq!(trace.kernels.len(), 1);
        let kernel = &trace.kernels[0];
        assert_eq!((kernel.device, kernel.process), (DeviceIdx(1), ProcessIdx(1)));
        assert_eq!(trace.devices[1].process, Some(ProcessIdx(1)));
        // Reported at once: placed exactly (2 ms after the session start, 10 µs long).
        assert_eq!((kernel.start_ns, kernel.end_ns), (2_000_000, 2_010_000));
        assert_eq!(processes[0].kernel_links[0].map(|l| l.start_ns), Some(2_000_000));
        assert_eq!(summary.clocks.len(), 1);
        assert_eq!(summary.clocks[0].timer_minus_utc_ns, 300_000);
        assert!(summary.clocks_json().contains("\"timerMinusUtcNs\":300000"), "{}", summary.clocks_json());
        // What was lost and the costly NCCL are in the trace's warnings and the launcher's lines.
        let warning = |text: &str| trace.warnings.iter().find(|w| w.what.starts_with(text)).map(|w| w.count);
        assert_eq!(warning("NCCL launch without kernel-channel times"), Some(1));
        assert_eq!(warning("NCCL 2.31.2: kernel-channel timing is known"), Some(1));
        let lines = summary.lines(1);
        assert!(
            lines.iter().any(|l| l.contains("1 collective launches timed") && l.contains("1 without")),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.starts_with("warning: NCCL 2.31.2")), "{lines:?}");
    }

    /// `count` timed all-reduces 100 µs apart, each 10 µs of channels, reported at once (placed exactly).
    fn timed_process(count: i64) -> NcclProcess {
        let (_, _, mut processes) = setup();
        let process = &mut processes[0];
        process.operations.clear();
        process.channels.clear();
        for i in 0..count {
            let reported = 2_000_000 + i * 100_000;
            let gpu = (START_UTC_NS + reported + 300_000, START_UTC_NS + reported + 310_000);
            process.operations.push(operation(i as u64 + 1, i as u64, Some(gpu)));
            process.channels.push(ChannelTiming {
                operation_event: i as u64 + 1,
                channel: 0,
                gpu_start_ns: gpu.0,
                gpu_stop_ns: Some(gpu.1),
                reported_start_ns: reported,
                reported_stop_ns: Some(reported + 10_000),
            });
        }
        processes.remove(0)
    }

    #[test]
    fn comm_only_widens_channel_times_by_the_kernel_sample_and_drops_the_sample() {
        let (mut trace, mut extras, _) = setup();
        let mut processes = vec![timed_process(12)];
        let nccl = trace.names.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        let gemm = trace.names.intern("sm90_gemm");
        // The sample: the first six collectives' kernels, 3 µs of start-up and 0.5 µs of wind-down, and a gemm.
        for (i, name) in (0..6).map(|i| (i, nccl)).chain([(0, gemm)]) {
            let start_ns = 2_000_000 + i * 100_000 - 3_000;
            trace.kernels.push(shardscope_model::Kernel {
                start_ns,
                end_ns: start_ns + 13_500,
                name,
                short_name: name,
                device: DeviceIdx(1),
                process: ProcessIdx(1),
                stream: 13,
                ..Default::default()
            });
            extras.kernels.push(Default::default());
        }
        let summary = attach_operations(&mut trace, &mut extras, &mut processes, true);
        assert_eq!(trace.kernels.len(), 12, "the sample left the trace: {:?}", trace.kernels);
        assert_eq!(extras.kernels.len(), 0, "the extras stay parallel to the kernels");
        // After the sample too: 10 µs of channels become a 13.5 µs kernel, as long as CUPTI's.
        let last = &trace.kernels[11];
        assert_eq!((last.start_ns, last.end_ns), (3_098_250, 3_111_750));
        assert_eq!(processes[0].kernel_links[11].map(|l| l.start_ns), Some(3_098_250));
        let fit = &summary.samples[0];
        assert_eq!((fit.pid, fit.kernels_timed, fit.nccl_kernels, fit.kernels_widened), (42, 7, 6, 12));
        assert_eq!(fit.process.map(|w| (w.kernel_minus_channels_ns, w.matches)), Some((3_500, 6)));
        assert!(summary.samples_json().contains("\"kernelMinusChannelsNs\":3500"), "{}", summary.samples_json());
        let lines = summary.lines(1);
        assert!(lines.iter().any(|l| l.contains("7 kernels timed") && l.contains("3.5 µs longer")), "{lines:?}");
    }

    #[test]
    fn comm_only_with_too_small_a_sample_keeps_channel_spans_and_says_so() {
        let (mut trace, mut extras, _) = setup();
        let mut processes = vec![timed_process(3)];
        let nccl = trace.names.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        let (device, process) = (DeviceIdx(1), ProcessIdx(1));
        let sampled = shardscope_model::Kernel {
            start_ns: 1_999_000,
            end_ns: 2_012_000,
            name: nccl,
            short_name: nccl,
            device,
            process,
            ..Default::default()
        };
        trace.kernels.push(sampled);
        let summary = attach_operations(&mut trace, &mut extras, &mut processes, true);
        assert_eq!(trace.kernels[2].end_ns - trace.kernels[2].start_ns, 10_000);
        assert_eq!((summary.samples[0].kernels_timed, summary.samples[0].process), (1, None));
        assert!(summary.lines(1).iter().any(|l| l.starts_with("warning: NCCL kernel sample of pid 42")));
    }

    #[test]
    fn comm_only_without_a_sample_says_nothing_of_one() {
        let (mut trace, mut extras, _) = setup();
        let mut processes = vec![timed_process(3)];
        let summary = attach_operations(&mut trace, &mut extras, &mut processes, true);
        assert!(summary.samples.is_empty());
        assert!(!summary.lines(1).iter().any(|l| l.contains("kernel sample")), "{:?}", summary.lines(1));
    }

    #[test]
    fn without_a_known_gpu_one_is_made_and_counted() {
        let (mut trace, mut extras, mut processes) = setup();
        processes[0].comm_devices.clear();
        let _ = attach_operations(&mut trace, &mut extras, &mut processes, true);
        assert_eq!(trace.devices.len(), 3);
        assert_eq!(extras.devices.len(), 3, "the extras stay parallel to the devices");
        assert_eq!(trace.kernels[0].device, DeviceIdx(2));
        assert!(trace.warnings.iter().any(|w| w.what.starts_with("GPU of NCCL collectives without")));
    }

    #[test]
    fn a_full_capture_links_kernels_and_checks_the_clock_against_them() {
        let (mut trace, mut extras, mut processes) = setup();
        let name = trace.names.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        for (start_ns, correlation_id) in [(1_999_000, 5), (3_000_000, 6)] {
            trace.kernels.push(shardscope_model::Kernel {
                start_ns,
                end_ns: start_ns + 12_000,
                name,
                short_name: name,
                device: DeviceIdx(1),
                process: ProcessIdx(1),
                correlation_id,
                ..shardscope_model::Kernel::default()
            });
        }
        let summary = attach_operations(&mut trace, &mut extras, &mut processes, false);
        assert_eq!((summary.timer_processes, summary.linked), (0, 2));
        assert_eq!(trace.kernels.len(), 2, "no kernel made where CUPTI recorded them");
        // The channel started 1 µs after CUPTI's kernel start, as the estimated clock places it.
        assert_eq!(summary.clocks[0].channel_start_after_kernel_ns, Some(1_000));
    }
}
