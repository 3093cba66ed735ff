//! The region of interest a run opens at: the time its phase and step ranges cover, not the process start-up
//! before them nor the tear-down after them.
//!
//! A whole trace is mostly start-up: in the bundled two-rank capture the ranks' first kernel comes 2.8 s after the
//! launcher started, and NCCL's tear-down adds another 0.7 s after the last one, around 2.4 s of model work. So
//! the timeline opens on, in this order of preference:
//! 1. where the analyzer leaves warm-up steps out (compilation, autotuning; detected among its steps, whether
//!    they come from step ranges, phase ranges or the kernels), the run's steady-state window as the report gives
//!    it (`Report::steady_window_ns`: from the first step after the warm-up to the end of the last step, over all
//!    ranks), so the viewer opens on the same steady state as the report's figures;
//! 2. the NVTX / annotation ranges the analyzer takes as phases (its phase pattern: `prefill`, `decode`, …) and
//!    as steps (its step pattern: `ProfilerStep#N`, `execute_model`, `step N`, …), first start to last end over
//!    all ranks, and on to the end of the GPU work launched inside them (which runs after its host range ends);
//! 3. without either, the GPU work: first start to last end of the kernels, copies and sets of all ranks,
//!    which leaves out the host-only start-up (interpreter, imports, CUDA context creation) and tear-down.
//!
//! "Fit all" (`Home`) still shows everything; "Region of interest" (`R`) comes back here.

use std::collections::HashMap;

use regex::Regex;
use shardscope_analyzer::llm::steps::step_ranges;
use shardscope_analyzer::report::{Options, analyze};
use shardscope_model::{NameId, Trace};

/// Where the region of interest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoiSource {
    /// Ranges matching the phase or the step pattern.
    Ranges,
    /// The steady state after the warm-up steps the analyzer left out.
    SteadySteps,
    /// The GPU work of all ranks (no phase or step ranges, no inferred steps).
    GpuWork,
}

impl RoiSource {
    /// Words for the toolbar.
    pub fn describe(self) -> &'static str {
        match self {
            RoiSource::Ranges => "phase and step ranges",
            RoiSource::SteadySteps => "steady-state steps",
            RoiSource::GpuWork => "GPU work",
        }
    }
}

/// The region of interest of a set of traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionOfInterest {
    /// Start on the trace clock, ns.
    pub start_ns: i64,
    /// End on the trace clock, ns.
    pub end_ns: i64,
    /// What it covers.
    pub source: RoiSource,
}

/// First start and last end of the ranges of `trace` whose names match `phase_pattern`, and of its step ranges
/// (as the analyzer finds them with `step_pattern`), reaching on to the end of the GPU work launched inside them;
/// `None` when it has none with a positive length.
fn range_extent(trace: &Trace, phase_pattern: &Regex, step_pattern: &Regex) -> Option<(i64, i64)> {
    // The pattern runs once per distinct name, not once per range.
    let mut is_phase: HashMap<NameId, bool> = HashMap::new();
    let phases = trace
        .ranges
        .iter()
        .filter(|r| r.end_ns > r.start_ns)
        .filter(|r| *is_phase.entry(r.name).or_insert_with(|| phase_pattern.is_match(trace.names.get(r.name))));
    let spans = phases.map(|r| (r.start_ns, r.end_ns)).chain(step_ranges(trace, None, step_pattern));
    let (start_ns, end_ns) = extent(spans)?;
    // Host ranges end when the last launch returns; the GPU runs what it launched after that.
    let launched_inside = |launch: Option<u32>| {
        launch
            .and_then(|l| trace.api_calls.get(l as usize))
            .is_some_and(|c| c.start_ns >= start_ns && c.start_ns <= end_ns)
    };
    let kernels = trace.kernels.iter().filter(|k| launched_inside(k.launch)).map(|k| k.end_ns);
    let memops = trace.memops.iter().filter(|m| launched_inside(m.launch)).map(|m| m.end_ns);
    Some((start_ns, kernels.chain(memops).fold(end_ns, i64::max)))
}

/// The run's steady-state window as the analyzer's report gives it (the same steps and warm-up), when it left
/// warm-up steps out.
fn steady_extent(traces: &[Trace], phase_pattern: &Regex, step_pattern: &Regex) -> Option<(i64, i64)> {
    let options =
        Options { phase_pattern: phase_pattern.clone(), step_pattern: step_pattern.clone(), ..Options::default() };
    analyze(traces, &options).steady_window_ns()
}

/// First start and last end of the kernels, copies and sets of `trace`.
fn gpu_extent(trace: &Trace) -> Option<(i64, i64)> {
    let kernels = trace.kernels.iter().map(|k| (k.start_ns, k.end_ns));
    let memops = trace.memops.iter().map(|m| (m.start_ns, m.end_ns));
    let graphs = trace.graph_launches.iter().map(|g| (g.start_ns, g.end_ns));
    extent(kernels.chain(memops).chain(graphs))
}

fn extent(spans: impl Iterator<Item = (i64, i64)>) -> Option<(i64, i64)> {
    spans.fold(None, |acc, (start, end)| {
        let end = end.max(start);
        Some(acc.map_or((start, end), |(a, b): (i64, i64)| (a.min(start), b.max(end))))
    })
}

/// The region of interest of `traces` (see the module docs); `None` when they hold neither phase or step ranges
/// nor GPU work.
pub fn region_of_interest(traces: &[Trace], phase_pattern: &Regex, step_pattern: &Regex) -> Option<RegionOfInterest> {
    if let Some((start_ns, end_ns)) = steady_extent(traces, phase_pattern, step_pattern) {
        return Some(RegionOfInterest { start_ns, end_ns, source: RoiSource::SteadySteps });
    }
    let ranges = extent(traces.iter().filter_map(|t| range_extent(t, phase_pattern, step_pattern)));
    if let Some((start_ns, end_ns)) = ranges {
        return Some(RegionOfInterest { start_ns, end_ns, source: RoiSource::Ranges });
    }
    let (start_ns, end_ns) = extent(traces.iter().filter_map(gpu_extent))?;
    (end_ns > start_ns).then_some(RegionOfInterest { start_ns, end_ns, source: RoiSource::GpuWork })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
    use shardscope_analyzer::llm::steps::DEFAULT_STEP_PATTERN;
    use shardscope_model::{ApiCall, Kernel, Process, Range};

    fn patterns() -> (Regex, Regex) {
        (Regex::new(DEFAULT_PHASE_PATTERN).unwrap(), Regex::new(DEFAULT_STEP_PATTERN).unwrap())
    }

    fn sample(name: &str) -> Vec<Trace> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces").join(name);
        shardscope_io::load(&path).expect("the bundled sample loads")
    }

    /// A trace with host-only start-up (an API call at 0), kernels from 1 000 to 9 000 and, when asked, a
    /// `forward_decode` range and a `step 3` range over 4 000..7 000 and a range that is neither.
    fn trace(with_ranges: bool) -> Trace {
        let mut trace = Trace::default();
        let process = trace.add_process(Process { pid: 1, ..Process::default() });
        let call = trace.names.intern("cudaGetDevice");
        trace.api_calls.push(ApiCall { start_ns: 0, end_ns: 10, name: call, process, ..ApiCall::default() });
        let kernel = trace.names.intern("gemm");
        let launch = trace.names.intern("cudaLaunchKernel");
        // (launch call start, kernel start): the kernel at 5 000 runs on past the ranges' end at 7 000 (to 7 800),
        // the one at 8 000 is launched after them.
        for (call_ns, start_ns, end_ns) in [(900, 1_000, 2_000), (4_800, 5_000, 7_800), (7_500, 8_000, 9_000)] {
            let correlation_id = trace.api_calls.len() as u32 + 1;
            trace.api_calls.push(ApiCall {
                start_ns: call_ns,
                end_ns: call_ns + 10,
                name: launch,
                process,
                correlation_id,
                ..ApiCall::default()
            });
            trace.kernels.push(Kernel {
                start_ns,
                end_ns,
                name: kernel,
                short_name: kernel,
                process,
                correlation_id,
                ..Kernel::default()
            });
        }
        if with_ranges {
            for (name, start_ns, end_ns) in [("forward_decode", 4_000, 6_000), ("step 3", 4_500, 7_000)] {
                let name = trace.names.intern(name);
                trace.ranges.push(Range { start_ns, end_ns, name, process, ..Range::default() });
            }
            // Not a phase or a step: it does not widen the region.
            let other = trace.names.intern("load_weights");
            trace.ranges.push(Range { start_ns: 100, end_ns: 9_500, name: other, process, ..Range::default() });
        }
        trace.finish();
        trace
    }

    #[test]
    fn phase_and_step_ranges_come_first_then_gpu_work() {
        let (phase, step) = patterns();
        let roi = region_of_interest(&[trace(true)], &phase, &step).unwrap();
        assert_eq!(roi, RegionOfInterest { start_ns: 4_000, end_ns: 7_800, source: RoiSource::Ranges });
        let roi = region_of_interest(&[trace(false)], &phase, &step).unwrap();
        assert_eq!(roi, RegionOfInterest { start_ns: 1_000, end_ns: 9_000, source: RoiSource::GpuWork });
        // Over several files: the ranges of any of them.
        let roi = region_of_interest(&[trace(false), trace(true)], &phase, &step).unwrap();
        assert_eq!((roi.start_ns, roi.end_ns), (4_000, 7_800));
        assert_eq!(region_of_interest(&[Trace::default()], &phase, &step), None);
    }

    /// The compiled transformers capture has no ranges: it opens on its steady-state steps (after the first
    /// generate call's compilation, 24 s of it), not on the whole 30 s of GPU work.
    #[test]
    fn a_compiled_program_opens_at_its_steady_state() {
        let (phase, step) = patterns();
        let traces = sample("engines/hf_qwen3_static.sqlite.gz");
        let roi = region_of_interest(&traces, &phase, &step).unwrap();
        assert_eq!(roi.source, RoiSource::SteadySteps);
        let report = shardscope_analyzer::report::analyze(&traces, &Default::default());
        let window = report.ranks[0].steps.as_ref().and_then(|s| s.steady_window_ns).unwrap();
        assert_eq!((roi.start_ns, roi.end_ns), window);
        let gpu = gpu_extent(&traces[0]).unwrap();
        assert!(roi.end_ns - roi.start_ns < (gpu.1 - gpu.0) / 100, "{roi:?} of {gpu:?}");
    }

    /// The two-rank capture: its `prefill` / `decode` ranges run from 7.435 s to 9.817 s of the 4.578–10.525 s
    /// the capture covers (sqlite3: `SELECT min(start), max(end) FROM NVTX_EVENTS JOIN StringIds ON textId = id
    /// WHERE value IN ('prefill', 'decode')` → 7434815348, 9817173511). Its first generate call (9 of its 18
    /// ranges, decode steps of tens of ms against about 1 ms after it) is warm-up the report detects: the run
    /// opens on the steady state after it, the report's window, from 9.805 s; without the warm-up detected, on
    /// the ranges.
    #[test]
    fn the_two_rank_capture_opens_at_its_steady_state_else_its_phase_ranges() {
        let (phase, step) = patterns();
        let traces = sample("tp2_capture.sqlite.gz");
        let roi = region_of_interest(&traces, &phase, &step).unwrap();
        assert_eq!(
            roi,
            RegionOfInterest { start_ns: 9_805_166_352, end_ns: 9_817_173_511, source: RoiSource::SteadySteps }
        );
        let report = shardscope_analyzer::report::analyze(&traces, &Default::default());
        assert_eq!(report.steady_window_ns(), Some((roi.start_ns, roi.end_ns)));
        let ranges = extent(traces.iter().filter_map(|t| range_extent(t, &phase, &step)));
        assert_eq!(ranges, Some((7_434_815_348, 9_817_173_511)));
    }

    /// The Kineto sample has no phase or step ranges (its only annotations are `nccl:all_reduce`): it opens at the
    /// GPU work of both ranks, which starts after the profile's first host events.
    #[test]
    fn the_kineto_sample_opens_at_its_gpu_work() {
        let (phase, step) = patterns();
        let traces = sample("kineto_tp2");
        let roi = region_of_interest(&traces, &phase, &step).unwrap();
        assert_eq!(roi.source, RoiSource::GpuWork);
        let gpu = traces.iter().flat_map(|t| {
            t.kernels.iter().map(|k| (k.start_ns, k.end_ns)).chain(t.memops.iter().map(|m| (m.start_ns, m.end_ns)))
        });
        let first = gpu.clone().map(|g| g.0).min().unwrap();
        let last = gpu.map(|g| g.1).max().unwrap();
        assert_eq!((roi.start_ns, roi.end_ns), (first, last));
        let host_first = traces.iter().flat_map(|t| t.api_calls.iter().map(|a| a.start_ns)).min().unwrap();
        assert!(host_first < first, "host start-up before the first GPU work is left out");
    }
}
