//! A capture taken in windows: the time between two windows of a rank was not recorded, so it is neither span
//! nor idle time, and no step reaches across it. One process, one GPU, the same three-kernel step repeated in
//! two windows far apart; the same trace without its windows table is the reference. Likewise a phase's span
//! leaves the gap out and no phase instance is measured across it, and the critical path cuts a wait that
//! reaches into the gap (known answers, computed by hand in each test's comment).

use crate::rank_builder::RankBuilder;
use shardscope_analyzer::dependency::critical_path;
use shardscope_analyzer::report::{self, Options};
use shardscope_model::{CaptureWindow, Device, Kernel, Process, ProcessIdx, Range, Trace, WindowTrigger};

const STEP_NS: i64 = 1_000;
const STEPS_PER_WINDOW: i64 = 8;
/// The second window opens this long after the first one's start.
const SECOND_WINDOW_NS: i64 = 1_000_000;

fn trace(with_windows: bool) -> Trace {
    let mut trace = Trace::default();
    let process = trace.add_process(Process { pid: 7, name: "server".into(), ..Process::default() });
    let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
    let names: Vec<_> = ["gemm", "norm", "act"].iter().map(|n| trace.names.intern(n)).collect();
    for window_start in [0, SECOND_WINDOW_NS] {
        for step in 0..STEPS_PER_WINDOW {
            for (i, &name) in names.iter().enumerate() {
                let start_ns = window_start + step * STEP_NS + i as i64 * 300;
                trace.kernels.push(Kernel {
                    start_ns,
                    end_ns: start_ns + 200,
                    name,
                    short_name: name,
                    device,
                    process,
                    ..Kernel::default()
                });
            }
        }
        if with_windows {
            trace.capture_windows.push(CaptureWindow {
                process: ProcessIdx(0),
                start_ns: window_start,
                end_ns: window_start + STEPS_PER_WINDOW * STEP_NS,
                start_trigger: WindowTrigger::CudaProfilerApi,
                end_trigger: WindowTrigger::CudaProfilerApi,
            });
        }
    }
    trace.finish();
    trace
}

#[test]
fn the_gap_between_windows_is_neither_span_nor_idle_and_no_step_crosses_it() {
    let whole = report::analyze(&[trace(false)], &Options::default());
    let windowed = report::analyze(&[trace(true)], &Options::default());
    let (whole, windowed) = (&whole.ranks[0], &windowed.ranks[0]);
    assert_eq!(windowed.figures.gpu_busy_ns, whole.figures.gpu_busy_ns);
    // Without the windows the gap counts: first kernel to last, across the gap.
    let last_end = SECOND_WINDOW_NS + (STEPS_PER_WINDOW - 1) * STEP_NS + 800;
    assert_eq!(whole.figures.span_ns, last_end);
    // With them, the gap from the first window's end to the second one's start is left out (the first window's
    // idle tail, from its last kernel to its end, was recorded and stays idle time).
    let gap_ns = SECOND_WINDOW_NS - STEPS_PER_WINDOW * STEP_NS;
    assert_eq!(windowed.figures.span_ns, last_end - gap_ns);
    assert_eq!(windowed.figures.idle_ns, windowed.figures.span_ns - windowed.figures.gpu_busy_ns);
    let (whole_steps, steps) = (whole.steps.as_ref().unwrap(), windowed.steps.as_ref().unwrap());
    assert!(whole_steps.intervals.iter().any(|&(s, e)| s < SECOND_WINDOW_NS && e > SECOND_WINDOW_NS / 2));
    assert!(steps.intervals.iter().all(|&(s, e)| e - s <= STEP_NS), "a step reaches across the gap: {steps:?}");
    assert_eq!(steps.found + 1, whole_steps.found, "exactly the step that crossed the gap is gone");
}

/// Rank 0 (see [`RankBuilder`]) recorded in `windows`.
fn windowed(windows: &[(i64, i64)]) -> RankBuilder {
    windowed_rank(0, windows)
}

/// Rank `rank` recorded in `windows`.
fn windowed_rank(rank: u32, windows: &[(i64, i64)]) -> RankBuilder {
    let mut b = RankBuilder::new(rank);
    let process = ProcessIdx(0);
    for &(start_ns, end_ns) in windows {
        let (start_trigger, end_trigger) = (WindowTrigger::Nvtx, WindowTrigger::Nvtx);
        b.trace.capture_windows.push(CaptureWindow { process, start_ns, end_ns, start_trigger, end_trigger });
    }
    b
}

impl RankBuilder {
    /// A launch call at `[call_ns, call_ns + 10)` of kernel `name` on stream 7 at `[start_ns, end_ns)`.
    fn launch_kernel(&mut self, call_ns: i64, name: &str, start_ns: i64, end_ns: i64) {
        self.launch_on(call_ns, name, 7, start_ns, end_ns);
    }

    /// An NVTX push/pop range on thread 1.
    fn range(&mut self, name: &str, start_ns: i64, end_ns: i64) {
        let name = self.trace.names.intern(name);
        let process = ProcessIdx(0);
        self.trace.ranges.push(Range { start_ns, end_ns, name, process, tid: 1, ..Range::default() });
    }
}

/// Windows `[0, 10 µs)` and `[1 ms, 1.01 ms)`: the gap is `(10 µs, 1 ms)`.
const WINDOWS: [(i64, i64); 2] = [(0, 10_000), (1_000_000, 1_010_000)];

/// Three instances of `decode`: one in the first window (GPU work 200..3_100), one open across the gap (work
/// 8_200..10_500, running 500 ns on into the gap, and 1_001_100..1_002_100), one in the second window
/// (1_003_200..1_003_700). Without windows the phase's span is 2_900 + 993_900 + 500; with them the second
/// instance counts only its recorded time, 8_200..10_500 and 1_000_000..1_002_100 (4_400), and it is no
/// instance length.
fn phase_trace(windows: &[(i64, i64)]) -> Trace {
    let mut b = windowed(windows);
    b.range("decode", 0, 5_000);
    b.launch_kernel(100, "gemm", 200, 1_200);
    b.launch_kernel(2_000, "gemm", 2_100, 3_100);
    b.range("decode", 8_000, 1_002_500);
    b.launch_kernel(8_100, "gemm", 8_200, 10_500);
    b.launch_kernel(1_001_000, "gemm", 1_001_100, 1_002_100);
    b.range("decode", 1_003_000, 1_004_000);
    b.launch_kernel(1_003_100, "gemm", 1_003_200, 1_003_700);
    b.finish()
}

#[test]
fn a_phase_span_leaves_out_the_gap_between_windows_and_no_instance_crosses_it() {
    let phase = |windows: &[(i64, i64)]| {
        let report = report::analyze(&[phase_trace(windows)], &Options::default());
        report.ranks[0].phases.iter().find(|p| p.name == "decode").expect("a decode phase").figures.clone()
    };
    let whole = phase(&[]);
    assert_eq!(whole.span_ns, 2_900 + 993_900 + 500);
    assert_eq!(whole.instances.as_ref().unwrap().count, 3);
    let windowed = phase(&WINDOWS);
    assert_eq!(windowed.gpu_busy_ns, 1_000 + 1_000 + 2_300 + 1_000 + 500);
    assert_eq!(windowed.span_ns, 2_900 + 4_400 + 500);
    assert_eq!(windowed.idle_ns, 7_800 - 5_800);
    let instances = windowed.instances.as_ref().unwrap();
    assert_eq!((instances.count, instances.min_ns, instances.max_ns), (2, 500, 2_900));
}

/// A host chain across the gap: a GEMM launched in the first window, the next launch at 1.001 ms in the second.
/// Without windows the wait before that launch is one host gap, 10..1_001_000; with them it is cut at the gap:
/// 9_990 ns of host gap in the first window, 990_000 ns not recorded, 1_000 ns of host gap in the second window.
/// The path's length is the same either way.
#[test]
fn the_critical_path_splits_a_wait_at_the_gap_between_windows() {
    let path_of = |windows: &[(i64, i64)]| {
        let mut b = windowed(windows);
        b.launch_kernel(0, "gemm", 100, 1_100);
        b.launch_kernel(1_001_000, "elementwise", 1_001_020, 1_001_120);
        let traces = [b.finish()];
        let model = critical_path::build_model(&traces, &Options::default(), None, None).expect("model");
        critical_path::critical_path(&traces, &model)
    };
    // (part, category, start, end) of the segments that are not runs.
    let waits = |path: &critical_path::CriticalPath| -> Vec<(&'static str, String, i64, i64)> {
        path.segments
            .iter()
            .filter(|s| s.part != "run")
            .map(|s| (s.part, s.category.clone(), s.start_ns, s.end_ns))
            .collect()
    };
    let category = |path: &critical_path::CriticalPath, name: &str| {
        path.by_category.iter().find(|s| s.name == name).map_or(0, |s| s.ns)
    };
    let whole = path_of(&[]);
    let windowed = path_of(&WINDOWS);
    assert_eq!((windowed.measured_ns, windowed.path_ns), (whole.measured_ns, whole.path_ns));
    let host_gap = |start, end| ("delay", "host_gap".to_string(), start, end);
    let launch_delay = ("delay", "gpu_delay".to_string(), 1_001_000, 1_001_020);
    assert_eq!(waits(&whole), [host_gap(10, 1_001_000), launch_delay.clone()]);
    assert_eq!(
        waits(&windowed),
        [
            host_gap(10, 10_000),
            ("gap", "capture_gap".to_string(), 10_000, 1_000_000),
            host_gap(1_000_000, 1_001_000),
            launch_delay
        ]
    );
    assert_eq!(category(&windowed, "capture_gap"), 990_000);
    assert_eq!(category(&windowed, "host_gap"), 9_990 + 1_000);
    assert_eq!(category(&whole, "capture_gap"), 0);
}

/// The steady state the findings model is taken inside one capture window: the one with the most steps (the
/// second here: the step that touched the gap left the first one with fewer), numbered as the report numbers steps,
/// and the steps of the other window are said to be left out. Without windows it spans the whole run.
#[test]
fn the_steady_state_model_stays_inside_one_capture_window() {
    let model = critical_path::build_steady_model(&[trace(true)], &Options::default()).expect("model");
    let (start_ns, end_ns) = model.window_ns.expect("a steady window");
    let second = (SECOND_WINDOW_NS, SECOND_WINDOW_NS + STEPS_PER_WINDOW * STEP_NS);
    assert!(second.0 <= start_ns && end_ns <= second.1, "model {start_ns}..{end_ns} outside the second window");
    let (first_step, last_step) = model.steps.expect("steps");
    let report = report::analyze(&[trace(true)], &Options::default());
    let intervals = &report.ranks[0].steps.as_ref().unwrap().intervals;
    assert_eq!(intervals[first_step].0, start_ns, "step numbers are the report's");
    assert_eq!(intervals[last_step].1, end_ns);
    assert!(model.excluded.iter().any(|e| e.contains("other capture windows")), "{:?}", model.excluded);
    let whole = critical_path::build_steady_model(&[trace(false)], &Options::default()).expect("model");
    assert!(whole.window_ns.unwrap().0 < SECOND_WINDOW_NS, "without windows the model spans the run");
}

/// Two ranks in two files whose windows open 500 ns apart (each process switches on its own): each rank's steps are
/// placed in its own windows, so the steady state is the second window on both ranks (eight steps each; the first
/// window lost the step that ran into the gap). Counting one rank's steps against the other's gaps put rank 0's
/// first step of its second window, which starts before rank 1's window does, into the first window.
#[test]
fn the_steady_state_of_two_ranks_is_the_same_window_counted_per_rank() {
    let rank = |rank: u32, offset_ns: i64| {
        let windows: Vec<(i64, i64)> = [0, SECOND_WINDOW_NS]
            .iter()
            .map(|&start| (start + offset_ns, start + offset_ns + STEPS_PER_WINDOW * STEP_NS))
            .collect();
        let mut b = windowed_rank(rank, &windows);
        for &(start, _) in &windows {
            for step in 0..STEPS_PER_WINDOW {
                for (i, name) in ["gemm", "norm", "act"].iter().enumerate() {
                    let at = start + step * STEP_NS + i as i64 * 300;
                    b.launch_kernel(at, name, at + 20, at + 220);
                }
            }
        }
        b.finish()
    };
    let traces = [rank(0, 0), rank(1, 500)];
    let model = critical_path::build_steady_model(&traces, &Options::default()).expect("model");
    let (start_ns, end_ns) = model.window_ns.expect("a steady window");
    assert!(start_ns >= SECOND_WINDOW_NS, "the model starts at {start_ns}, before the second windows");
    assert!(end_ns <= SECOND_WINDOW_NS + 500 + STEPS_PER_WINDOW * STEP_NS, "the model ends at {end_ns}");
}
