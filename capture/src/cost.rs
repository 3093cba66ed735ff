//! What recording cost the workload: the capture's own perturbation, per process and in all.
//!
//! Every added microsecond on a rank's launch path shows up in a sharded run as GPU idle time and as
//! "waiting for the late rank", so each capture says what it added. The figures come from inside the
//! workload ([`shardscope_spool::cupti::CaptureCost`], the NCCL plugin's callback timer) and from the
//! records themselves:
//!
//! ```text
//! added host ns per launch = ((recorded API calls + NVTX markers + sync records) × ns per recorded call
//!                             + ns in CUPTI's buffer callbacks + ns in NCCL profiler callbacks) ÷ launch calls
//! ```
//!
//! "ns per recorded call" is measured by the injection library at exit (a cheap driver call timed with
//! its record off and on). What CUPTI's kernel timing adds to each launch is not in the estimate: CUPTI
//! does that work inside the launch call, where no callback of ours can time it. Measured apart
//! (`benchmarks/scripts/launch_cost.py`, kernels only against uncaptured), it was the larger part, about 1.1 µs
//! per PyTorch operator on an H200 host; the summary line says the estimate leaves it out.

use serde::Serialize;
use shardscope_model::{Trace, WindowTrigger};
use shardscope_spool::cupti::ApiSelection;

use crate::merge::{CaptureExtras, RecordCounts};
use crate::nccl_spool::NcclProcess;

/// One process's recording cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessCost {
    /// OS process id.
    pub pid: u32,
    /// Records per kind.
    pub kernels: u64,
    /// Copies and sets.
    pub memops: u64,
    /// Runtime and driver API calls recorded.
    pub api_calls: u64,
    /// Of those, kernel and graph launches.
    pub launch_calls: u64,
    /// NVTX markers (two per range).
    pub nvtx_markers: u64,
    /// Synchronisation records.
    pub syncs: u64,
    /// NCCL operations the plugin recorded.
    pub nccl_operations: u64,
    /// Measured host cost of one recorded API call, ns.
    pub ns_per_recorded_call: Option<u32>,
    /// Wall time in CUPTI's buffer callbacks, ns.
    pub buffer_callback_ns: u64,
    /// Wall time NCCL's threads spent in the plugin's callbacks, ns.
    pub nccl_callback_ns: u64,
    /// NCCL plugin callbacks.
    pub nccl_callbacks: u64,
    /// CPU time of the spool writer threads (off the workload's threads), ns.
    pub writer_cpu_ns: u64,
    /// The estimate of host time added per launch call, ns (see the module notes); `None` when the
    /// per-call cost could not be measured or nothing was launched.
    pub added_ns_per_launch: Option<f64>,
}

impl ProcessCost {
    fn new(pid: u32, counts: &RecordCounts) -> ProcessCost {
        ProcessCost {
            pid,
            kernels: counts.kernels,
            memops: counts.memops,
            api_calls: counts.api_calls,
            launch_calls: counts.launch_calls,
            nvtx_markers: counts.markers,
            syncs: counts.syncs,
            ..ProcessCost::default()
        }
    }

    /// Host ns the capture added on this process's threads in all (numerator of the estimate).
    fn added_ns(&self) -> Option<f64> {
        let per_call = f64::from(self.ns_per_recorded_call?);
        Some(
            (self.api_calls + self.nvtx_markers + self.syncs) as f64 * per_call
                + self.buffer_callback_ns as f64
                + self.nccl_callback_ns as f64,
        )
    }
}

/// How the processes selected API calls, in words, from what they noted in their spools; `fallback`
/// (the launcher's `--trace`) when none noted it (spools from before the selection was recorded).
///
/// CUPTI takes a selection of single calls only at the start of a process, so a window a trigger opened later
/// records every runtime and driver call (see the injection library's `switch.rs`): when `trace` has such a
/// window, the words say so.
pub fn recorded_api_mode(trace: &Trace, extras: &CaptureExtras, fallback: &str) -> String {
    let selections: Vec<_> = extras.processes.iter().filter_map(|p| p.api_selection).collect();
    if selections.is_empty() {
        return fallback.to_string();
    }
    if selections.iter().all(|s| s.every_call) {
        return "every runtime and driver call".into();
    }
    let selected_at_start = api_mode_at_start(&selections);
    let opened_later = trace.capture_windows.iter().any(|w| w.start_trigger != WindowTrigger::ProcessStart);
    if opened_later && selections.iter().any(|s| s.runtime_cbids + s.driver_cbids > 0) {
        return format!(
            "every runtime and driver call in windows opened after the start (CUPTI takes a selection of single \
             calls only at the start); {selected_at_start} in a window open from the start"
        );
    }
    selected_at_start
}

/// The words for the selection as the processes made it at their start.
fn api_mode_at_start(selections: &[ApiSelection]) -> String {
    let whole: Vec<&str> = [
        selections.iter().any(|s| s.runtime_whole_kind).then_some("runtime"),
        selections.iter().any(|s| s.driver_whole_kind).then_some("driver"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let cbids = selections.iter().map(|s| s.runtime_cbids + s.driver_cbids).max().unwrap_or(0);
    if whole.is_empty() {
        format!("work calls only ({cbids} callback ids)")
    } else {
        format!("work calls, but every {} call (this CUPTI cannot select single calls there)", whole.join(" and "))
    }
}

/// Every process's cost and the capture's in all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureCostReport {
    /// Per process, in `Trace::processes` order.
    pub processes: Vec<ProcessCost>,
}

impl CaptureCostReport {
    /// Collects the figures of `trace`'s processes (`extras.processes` is aligned with them) and of the
    /// NCCL plugin's spools (matched by pid).
    pub fn collect(trace: &Trace, extras: &CaptureExtras, nccl: &[NcclProcess]) -> CaptureCostReport {
        let processes = trace
            .processes
            .iter()
            .zip(&extras.processes)
            .map(|(process, extra)| {
                let mut cost = ProcessCost::new(process.pid, &extra.record_counts);
                if let Some(measured) = &extra.cost {
                    cost.ns_per_recorded_call = measured.ns_per_recorded_call;
                    cost.buffer_callback_ns = measured.buffer_callback_ns;
                    cost.writer_cpu_ns = measured.writer_cpu_ns;
                }
                if let Some(plugin) = nccl.iter().find(|n| n.pid == process.pid) {
                    cost.nccl_operations = plugin.operations.len() as u64;
                    cost.nccl_callback_ns = plugin.callback_ns;
                    cost.nccl_callbacks = plugin.callbacks;
                }
                if cost.launch_calls > 0 {
                    cost.added_ns_per_launch = cost.added_ns().map(|ns| ns / cost.launch_calls as f64);
                }
                cost
            })
            .collect();
        CaptureCostReport { processes }
    }

    /// Sum of a per-process figure.
    fn total(&self, figure: impl Fn(&ProcessCost) -> u64) -> u64 {
        self.processes.iter().map(figure).sum()
    }

    /// Records per kind over all processes, as a JSON object (for `SHARDSCOPE_CAPTURE_META`).
    pub fn record_counts_json(&self) -> String {
        serde_json::json!({
            "kernels": self.total(|p| p.kernels),
            "memops": self.total(|p| p.memops),
            "apiCalls": self.total(|p| p.api_calls),
            "launchCalls": self.total(|p| p.launch_calls),
            "nvtxMarkers": self.total(|p| p.nvtx_markers),
            "syncs": self.total(|p| p.syncs),
            "ncclOperations": self.total(|p| p.nccl_operations),
        })
        .to_string()
    }

    /// Per-process figures as a JSON array (for `SHARDSCOPE_CAPTURE_META`).
    pub fn processes_json(&self) -> String {
        serde_json::to_string(&self.processes).unwrap_or_else(|_| "[]".into())
    }

    /// The estimate over the processes that measured it: total added ns ÷ their launch calls.
    pub fn added_ns_per_launch(&self) -> Option<f64> {
        let measured: Vec<&ProcessCost> =
            self.processes.iter().filter(|p| p.added_ns().is_some() && p.launch_calls > 0).collect();
        let launches: u64 = measured.iter().map(|p| p.launch_calls).sum();
        (launches > 0).then(|| measured.iter().filter_map(|p| p.added_ns()).sum::<f64>() / launches as f64)
    }

    /// The summary lines `capture` prints: records per kind, then the estimate of the added host time.
    pub fn summary(&self, api_mode: &str) -> Vec<String> {
        let launches = self.total(|p| p.launch_calls);
        let per_launch = |n: u64| if launches > 0 { format!("{:.2}", n as f64 / launches as f64) } else { "-".into() };
        let api_calls = self.total(|p| p.api_calls);
        let markers = self.total(|p| p.nvtx_markers);
        let syncs = self.total(|p| p.syncs);
        let mut lines = vec![format!(
            "records: {} kernels, {} copies/sets, {} API calls ({api_mode}; {} per launch), {} NVTX markers, \
             {} syncs, {} NCCL operations",
            self.total(|p| p.kernels),
            self.total(|p| p.memops),
            api_calls,
            per_launch(api_calls),
            markers,
            syncs,
            self.total(|p| p.nccl_operations),
        )];
        let writer_s = self.total(|p| p.writer_cpu_ns) as f64 / 1e9;
        match self.added_ns_per_launch() {
            Some(added) => {
                let measured: Vec<u32> = self.processes.iter().filter_map(|p| p.ns_per_recorded_call).collect();
                let (low, high) = (measured.iter().min().unwrap_or(&0), measured.iter().max().unwrap_or(&0));
                let per_call = if low == high { format!("{low} ns") } else { format!("{low}–{high} ns") };
                lines.push(format!(
                    "host time added per launch ≈ {:.2} µs by recorded calls and callbacks ({} recorded calls, \
                     markers and syncs per launch at {per_call} each, {:.0} ns in buffer callbacks, {:.0} ns in NCCL \
                     profiler callbacks), plus CUPTI's kernel timing inside each launch, which this cannot measure; \
                     spool writers used {writer_s:.2} s of CPU on their own threads",
                    added / 1000.0,
                    per_launch(api_calls + markers + syncs),
                    self.total(|p| p.buffer_callback_ns) as f64 / launches.max(1) as f64,
                    self.total(|p| p.nccl_callback_ns) as f64 / launches.max(1) as f64,
                ));
            }
            None => lines.push(format!(
                "host time added per launch: not measured (no process exited cleanly with a measurement, or none \
                 launched a kernel); spool writers used {writer_s:.2} s of CPU on their own threads"
            )),
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, api_calls: u64, markers: u64, launches: u64, per_call: Option<u32>) -> ProcessCost {
        ProcessCost {
            pid,
            api_calls,
            nvtx_markers: markers,
            launch_calls: launches,
            ns_per_recorded_call: per_call,
            buffer_callback_ns: 1_000,
            nccl_callback_ns: 9_000,
            ..ProcessCost::default()
        }
    }

    #[test]
    fn estimate_weighs_processes_by_their_launches_and_skips_unmeasured_ones() {
        let report = CaptureCostReport {
            processes: vec![
                process(1, 100, 0, 100, Some(100)),  // (100×100 + 10 000) / 100 = 200 ns per launch
                process(2, 300, 100, 200, Some(50)), // (400×50 + 10 000) / 200 = 150 ns per launch
                process(3, 500, 0, 500, None),
            ],
        };
        let added = report.added_ns_per_launch().unwrap();
        assert!((added - (20_000.0 + 30_000.0) / 300.0).abs() < 1e-9, "{added}");
        let lines = report.summary("work calls");
        assert!(lines[0].contains("900 API calls (work calls; 1.12 per launch)"), "{}", lines[0]);
        assert!(lines[1].contains("≈ 0.17 µs") && lines[1].contains("50–100 ns"), "{}", lines[1]);
    }

    #[test]
    fn nothing_measured_is_said_plainly() {
        let report = CaptureCostReport { processes: vec![process(1, 10, 0, 10, None)] };
        assert_eq!(report.added_ns_per_launch(), None);
        assert!(report.summary("none")[1].contains("not measured"));
    }

    #[test]
    fn a_window_opened_after_the_start_says_every_call_was_recorded() {
        let selection = ApiSelection { runtime_cbids: 120, driver_cbids: 115, ..ApiSelection::default() };
        let extras = CaptureExtras {
            processes: vec![crate::merge::ProcessExtra { api_selection: Some(selection), ..Default::default() }],
            ..CaptureExtras::default()
        };
        let mut trace = Trace::default();
        assert_eq!(recorded_api_mode(&trace, &extras, "-"), "work calls only (235 callback ids)");
        let window = |start_trigger| shardscope_model::CaptureWindow {
            process: shardscope_model::ProcessIdx(0),
            start_ns: 0,
            end_ns: 10,
            start_trigger,
            end_trigger: WindowTrigger::ProcessExit,
        };
        trace.capture_windows.push(window(WindowTrigger::ProcessStart));
        assert_eq!(recorded_api_mode(&trace, &extras, "-"), "work calls only (235 callback ids)");
        trace.capture_windows.push(window(WindowTrigger::CudaProfilerApi));
        let words = recorded_api_mode(&trace, &extras, "-");
        assert!(words.starts_with("every runtime and driver call in windows opened after the start"), "{words}");
        assert!(words.ends_with("work calls only (235 callback ids) in a window open from the start"), "{words}");
    }
}
