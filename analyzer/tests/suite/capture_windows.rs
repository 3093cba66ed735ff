//! A capture taken in windows: the time between two windows of a rank was not recorded, so it is neither span
//! nor idle time, and no step reaches across it. One process, one GPU, the same three-kernel step repeated in
//! two windows far apart; the same trace without its windows table is the reference.

use shardscope_analyzer::report::{self, Options};
use shardscope_model::{CaptureWindow, Device, Kernel, Process, ProcessIdx, Trace, WindowTrigger};

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
