//! Generate calls told apart in a rank's steps, and from them time to first token (TTFT) and time per output token
//! (TPOT) per call, without annotations.
//!
//! A generate call is one prefill (the forward over the whole prompt) followed by a run of decode steps (one token
//! per sequence each). Among a rank's steps (see [`crate::llm::steps`]) a step holds a prefill when its GEMM time is at
//! least [`PREFILL_WORK_FACTOR`] × the median step's (the prompt's tokens go through the same weights at once);
//! where the trace records no GEMM time (graphs recorded whole), kernel time decides instead. A call runs from its
//! prefill step to the step before the next prefill and needs at least one decode step.
//! - TTFT: the prefill step's first unit start to the end of its last unit (the first token is sampled at the end
//!   of the step, before the host's turn);
//! - TPOT: the mean time between tokens after the first: from the prefill's last kernel end (the first token) to
//!   the last decode step's start, plus the median decode period for the last step (its interval may hold the
//!   host's time until the next call), over the decode steps.
//!
//! Calls that start inside the rank's warm-up steps are marked so and left out of the distributions.

use serde::Serialize;

use crate::llm::steps::Distribution;

/// A step holds a prefill with at least this many times the median step's GEMM (or kernel) time.
pub const PREFILL_WORK_FACTOR: i64 = 4;

/// What one step did, for telling prefills from decode steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepWork {
    /// The step's start (its first unit's start).
    pub start_ns: i64,
    /// The step's end (the next step's start, or the end of the trace's last unit).
    pub end_ns: i64,
    /// The end of the step's last kernel or copy.
    pub last_end_ns: i64,
    /// Summed GEMM kernel time in the step.
    pub gemm_ns: i64,
    /// Summed kernel time in the step.
    pub kernel_ns: i64,
}

/// One generate call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GenerateCall {
    /// Its prefill step's start.
    pub start_ns: i64,
    /// Time to first token.
    pub ttft_ns: i64,
    /// Mean time per output token after the first.
    pub tpot_ns: i64,
    /// Decode steps in it.
    pub decode_steps: u64,
    /// It starts inside the warm-up steps.
    pub warmup: bool,
}

/// The generate calls of a rank and the distributions of TTFT and TPOT over those after the warm-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GenerateCalls {
    /// Every call, in order.
    pub calls: Vec<GenerateCall>,
    /// TTFT of the calls after the warm-up.
    pub ttft: Distribution,
    /// TPOT of the calls after the warm-up.
    pub tpot: Distribution,
}

/// The generate calls among `steps` (in order, warm-up included; the first `warmup_steps` are warm-up); `None` when
/// no step holds a prefill followed by a decode step.
pub fn split(steps: &[StepWork], warmup_steps: usize) -> Option<GenerateCalls> {
    let is_prefill = prefill_steps(steps)?;
    let prefills: Vec<usize> = (0..steps.len()).filter(|&j| is_prefill[j]).collect();
    let mut calls = Vec::new();
    for (k, &first) in prefills.iter().enumerate() {
        let end = prefills.get(k + 1).copied().unwrap_or(steps.len());
        let decode = &steps[first + 1..end];
        let Some(last_decode) = decode.last() else { continue };
        let prefill = &steps[first];
        let decode_ns = decode_time_ns(prefill, decode, last_decode);
        calls.push(GenerateCall {
            start_ns: prefill.start_ns,
            ttft_ns: prefill.last_end_ns - prefill.start_ns,
            tpot_ns: decode_ns / decode.len() as i64,
            decode_steps: decode.len() as u64,
            warmup: first < warmup_steps,
        });
    }
    if calls.is_empty() {
        return None;
    }
    let steady: Vec<&GenerateCall> = calls.iter().filter(|c| !c.warmup).collect();
    Some(GenerateCalls {
        ttft: Distribution::of(steady.iter().map(|c| c.ttft_ns).collect()),
        tpot: Distribution::of(steady.iter().map(|c| c.tpot_ns).collect()),
        calls,
    })
}

/// From the first token (the prefill's last kernel end) to the last: up to the last decode step's start, plus the
/// median period of the call's other decode steps for the last one (whose interval may hold the host's time before
/// the next call and set-up kernels of it); a single decode step counts to its last kernel end.
fn decode_time_ns(prefill: &StepWork, decode: &[StepWork], last_decode: &StepWork) -> i64 {
    if decode.len() < 2 {
        return last_decode.last_end_ns - prefill.last_end_ns;
    }
    let periods: Vec<i64> = decode[..decode.len() - 1].iter().map(|s| s.end_ns - s.start_ns).collect();
    last_decode.start_ns - prefill.last_end_ns + Distribution::of(periods).p50_ns
}

/// Per step: it holds a prefill (see the module's comment). `None` when the steps show no work at all.
pub fn prefill_steps(steps: &[StepWork]) -> Option<Vec<bool>> {
    let use_gemm = steps.iter().any(|s| s.gemm_ns > 0);
    let work = |s: &StepWork| if use_gemm { s.gemm_ns } else { s.kernel_ns };
    let median_ns = Distribution::of(steps.iter().map(work).collect()).p50_ns;
    if median_ns <= 0 {
        return None;
    }
    Some(steps.iter().map(|s| work(s) >= PREFILL_WORK_FACTOR.saturating_mul(median_ns)).collect())
}

/// One GPU's kernels `(start_ns, end_ns, is_gemm)` and copies/sets `(start_ns, end_ns)`, both in start order, summed
/// per step interval (in order): GEMM and kernel time of the kernels that start in it, and its last end.
pub fn step_work(kernels: &[(i64, i64, bool)], memops: &[(i64, i64)], intervals: &[(i64, i64)]) -> Vec<StepWork> {
    intervals
        .iter()
        .map(|&(start_ns, end_ns)| {
            let mut step = StepWork { start_ns, end_ns, last_end_ns: start_ns, gemm_ns: 0, kernel_ns: 0 };
            let first = kernels.partition_point(|k| k.0 < start_ns);
            for &(kernel_start, kernel_end, is_gemm) in kernels[first..].iter().take_while(|k| k.0 < end_ns) {
                let duration_ns = kernel_end.saturating_sub(kernel_start);
                step.kernel_ns = step.kernel_ns.saturating_add(duration_ns);
                if is_gemm {
                    step.gemm_ns = step.gemm_ns.saturating_add(duration_ns);
                }
                step.last_end_ns = step.last_end_ns.max(kernel_end);
            }
            let first = memops.partition_point(|m| m.0 < start_ns);
            for &(_, memop_end) in memops[first..].iter().take_while(|m| m.0 < end_ns) {
                step.last_end_ns = step.last_end_ns.max(memop_end);
            }
            step
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of `(duration, gemm)` laid end to end; each step's last kernel ends 10 ns before the next starts.
    fn laid_out(steps: &[(i64, i64)]) -> Vec<StepWork> {
        let mut time = 0;
        steps
            .iter()
            .map(|&(duration, gemm_ns)| {
                let step = StepWork {
                    start_ns: time,
                    end_ns: time + duration,
                    last_end_ns: time + duration - 10,
                    gemm_ns,
                    kernel_ns: gemm_ns * 2,
                };
                time += duration;
                step
            })
            .collect()
    }

    #[test]
    fn calls_are_a_prefill_and_the_decode_steps_after_it() {
        // Warm-up call: prefill 5000, decode 800 × 3; then two calls: prefill 1000 + decode 100 × 4.
        let mut steps = vec![(5000, 900), (800, 10), (800, 10), (800, 10)];
        for _ in 0..2 {
            steps.push((1000, 900));
            steps.extend([(100, 10); 4]);
        }
        let calls = split(&laid_out(&steps), 4).unwrap();
        assert_eq!(calls.calls.len(), 3);
        assert!(calls.calls[0].warmup);
        // TPOT: from the first token (10 ns before its step ends) over the decode steps: (3 × 800 + 10) / 3.
        assert_eq!((calls.calls[0].ttft_ns, calls.calls[0].tpot_ns, calls.calls[0].decode_steps), (4990, 803, 3));
        assert_eq!((calls.calls[1].ttft_ns, calls.calls[1].tpot_ns, calls.calls[1].decode_steps), (990, 102, 4));
        assert_eq!((calls.ttft.count, calls.ttft.p50_ns, calls.tpot.p50_ns), (2, 990, 102));
        // Decode steps alone, or a prefill with nothing after it: no call.
        assert_eq!(split(&laid_out(&[(100, 10); 5]), 0), None);
        assert_eq!(split(&laid_out(&[(100, 10), (100, 10), (100, 10), (900, 900)]), 0), None);
    }
}
