//! Prefill and decode told apart without annotations, for inference traces that record no phase ranges.
//!
//! A serving engine repeats one decode step (one token per sequence) many times; a prefill runs the same model over
//! every prompt token at once, so it takes much longer and launches its kernels with larger grids. From one GPU's
//! kernels in start order:
//! 1. the repeating kernel sequence of [`steps::infer_from_kernels`] cuts the kernels into segments: the kernels
//!    before the first step, then one segment per step (a step may be one layer when layers repeat the same
//!    kernels);
//! 2. a segment holds a prefill when its GEMM time is at least [`PREFILL_GEMM_FACTOR`] × the median step's, and a
//!    kernel name that also runs in the typical step runs in it with at least [`PREFILL_GRID_FACTOR`] × the grid
//!    blocks (more token rows at once); when no segment passes both, nothing is inferred;
//! 3. the other steps are decode; at least [`steps::MIN_INFERRED_STEPS`] of them are needed, and at least
//!    [`TYPICAL_SHARE`] of them must run the typical step's kernel sequence exactly (the most common one): decode
//!    repeats one step, where the parts of a training iteration differ from each other;
//! 4. inside a prefill segment, the kernels that continue the typical step's sequence from its start are the end of
//!    the decode step the segment began with; of the rest, the kernels from the first to the last GEMM or attention
//!    kernel are the prefill, the kernels after it open the next decode step, and the kernels before it (set-up
//!    between requests) get no phase.
//!
//! Each prefill and each step is one instance of its phase. The result is marked inferred wherever it is shown.
//!
//! Programs whose decode steps are served from CUDA graphs or compiled programs (torch.compile, XLA) repeat no
//! kernel sequence that covers prefill and decode alike: there [`from_steps`] comes first. It takes the rank's
//! steps (see [`steps::infer_from_work`]: graph launches with the kernels around them), tells prefill steps by
//! their GEMM time ([`crate::llm::generate_calls::prefill_steps`]) and makes each step one instance: a prefill from its
//! start to its last kernel's end, a decode step from its start to the next step's. Steps of the warm-up (given
//! or detected) get no phase, so that the phase figures are the steady state's.

use std::collections::HashMap;

use shardscope_model::NameId;

use crate::llm::generate_calls::{self, StepWork};
use crate::llm::steps::{self, Distribution};

/// A segment holds a prefill only with at least this many times the median step's GEMM time.
pub const PREFILL_GEMM_FACTOR: i64 = 4;

/// ... and with a kernel of the typical step launched with at least this many times its grid blocks.
pub const PREFILL_GRID_FACTOR: u64 = 4;

/// At least this share (numerator, denominator) of the decode steps must run the typical step's kernel sequence
/// exactly.
pub const TYPICAL_SHARE: (usize, usize) = (3, 4);

/// What a kernel computes, as far as telling prefill from decode needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeKind {
    /// Matrix multiplication (category `gemm`).
    Gemm,
    /// Attention (category `attention`).
    Attention,
    /// Anything else.
    Other,
}

/// One kernel of one GPU, in start order.
#[derive(Debug, Clone, Copy)]
pub struct KernelShape {
    /// GPU start.
    pub start_ns: i64,
    /// GPU end.
    pub end_ns: i64,
    /// Kernel name.
    pub name: NameId,
    /// Thread blocks in its grid (x × y × z; 0 when the trace does not record grids).
    pub grid_blocks: u64,
    /// What it computes.
    pub kind: ComputeKind,
}

/// An inferred phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InferredPhase {
    /// Prompt processing.
    Prefill,
    /// Token generation.
    Decode,
}

impl InferredPhase {
    /// The phase's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            InferredPhase::Prefill => "prefill",
            InferredPhase::Decode => "decode",
        }
    }
}

/// A stretch of GPU time given one phase instance: from its first kernel's start to the next kernel's start after
/// its last (or, at the end, to its last kernel's end). Stretches are in time order and do not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stretch {
    /// Start.
    pub start_ns: i64,
    /// End.
    pub end_ns: i64,
    /// The phase.
    pub phase: InferredPhase,
    /// Which instance of its phase (stretches of one instance share it).
    pub instance: u32,
}

/// Phase stretches from a rank's steps (in order, warm-up included; the first `warmup_steps` get no phase): empty
/// unless a prefill step is followed by a decode step and at least [`steps::MIN_INFERRED_STEPS`] decode steps are
/// kept.
pub fn from_steps(work: &[StepWork], warmup_steps: usize) -> Vec<Stretch> {
    let Some(is_prefill) = generate_calls::prefill_steps(work) else { return Vec::new() };
    let opens_a_call = (1..work.len()).any(|j| is_prefill[j - 1] && !is_prefill[j]);
    let kept = warmup_steps.min(work.len())..work.len();
    let decode_steps = kept.clone().filter(|&j| !is_prefill[j]).count();
    if !opens_a_call || decode_steps < steps::MIN_INFERRED_STEPS {
        return Vec::new();
    }
    kept.map(|j| {
        let step = &work[j];
        let instance = u32::try_from(j).unwrap_or(u32::MAX);
        if is_prefill[j] {
            let end_ns = step.last_end_ns.max(step.start_ns);
            Stretch { start_ns: step.start_ns, end_ns, phase: InferredPhase::Prefill, instance }
        } else {
            Stretch { start_ns: step.start_ns, end_ns: step.end_ns, phase: InferredPhase::Decode, instance }
        }
    })
    .collect()
}

/// The phase stretches of one GPU's kernels (in start order); empty when no prefill/decode split is evident.
pub fn infer(kernels: &[KernelShape]) -> Vec<Stretch> {
    let named: Vec<(i64, i64, NameId)> = kernels.iter().map(|k| (k.start_ns, k.end_ns, k.name)).collect();
    let step_intervals = steps::infer_from_kernels(&named);
    if step_intervals.is_empty() {
        return Vec::new();
    }
    // Segment 0 holds the kernels before the first step; segment j ≥ 1 the kernels of step j − 1.
    let step_starts: Vec<i64> = step_intervals.iter().map(|s| s.0).collect();
    let mut segments: Vec<Vec<usize>> = vec![Vec::new(); step_starts.len() + 1];
    for (index, kernel) in kernels.iter().enumerate() {
        segments[step_starts.partition_point(|&start| start <= kernel.start_ns)].push(index);
    }
    let gemm_ns = |segment: &[usize]| -> i64 {
        segment
            .iter()
            .map(|&i| &kernels[i])
            .filter(|k| k.kind == ComputeKind::Gemm)
            .fold(0i64, |total, k| total.saturating_add(k.end_ns.saturating_sub(k.start_ns)))
    };
    let median_step_gemm_ns = Distribution::of(segments[1..].iter().map(|s| gemm_ns(s)).collect()).p50_ns;
    if median_step_gemm_ns <= 0 {
        return Vec::new();
    }
    let heavy: Vec<bool> = segments
        .iter()
        .map(|s| !s.is_empty() && gemm_ns(s) >= PREFILL_GEMM_FACTOR.saturating_mul(median_step_gemm_ns))
        .collect();
    let light_steps: Vec<usize> = (1..segments.len()).filter(|&j| !heavy[j]).collect();
    if light_steps.len() < steps::MIN_INFERRED_STEPS {
        return Vec::new();
    }
    // The typical step: the name sequence most light steps have (the earliest such step on a tie), and the largest
    // grid each of its kernel names is launched with in light steps.
    let mut sequences: HashMap<Vec<NameId>, (usize, usize)> = HashMap::new();
    let mut typical_grid_blocks: HashMap<NameId, u64> = HashMap::new();
    for &j in &light_steps {
        let sequence: Vec<NameId> = segments[j].iter().map(|&i| kernels[i].name).collect();
        sequences.entry(sequence).or_insert((0, j)).0 += 1;
        for &i in &segments[j] {
            let blocks = typical_grid_blocks.entry(kernels[i].name).or_default();
            *blocks = (*blocks).max(kernels[i].grid_blocks);
        }
    }
    let typical: Vec<NameId> = sequences
        .into_iter()
        .max_by_key(|(_, (count, first))| (*count, std::cmp::Reverse(*first)))
        .map(|(sequence, _)| sequence)
        .unwrap_or_default();

    // A kernel of the typical step launched with many more blocks than there: more tokens at once.
    let larger = |kernel: &KernelShape| {
        typical_grid_blocks
            .get(&kernel.name)
            .is_some_and(|&blocks| blocks > 0 && kernel.grid_blocks >= PREFILL_GRID_FACTOR.saturating_mul(blocks))
    };
    // Decode repeats one step: most light steps run exactly the typical sequence. A loop whose steps vary (the
    // parts of a training iteration) is not a decode loop.
    let typical_steps = light_steps
        .iter()
        .filter(|&&j| segments[j].iter().map(|&i| kernels[i].name).eq(typical.iter().copied()))
        .count();
    if typical_steps * TYPICAL_SHARE.1 < light_steps.len() * TYPICAL_SHARE.0 {
        return Vec::new();
    }
    let mut assigned: Vec<Option<(InferredPhase, u32)>> = vec![None; kernels.len()];
    // Three numbers per segment: its decode part, its prefill, and (for the next segment) the next step's head.
    let instance =
        |segment: usize, part: u32| u32::try_from(segment).unwrap_or(u32::MAX).saturating_mul(3).saturating_add(part);
    for &j in &light_steps {
        for &i in &segments[j] {
            assigned[i] = Some((InferredPhase::Decode, instance(j, 0)));
        }
    }
    let mut any_prefill = false;
    for (j, segment) in segments.iter().enumerate().filter(|(j, _)| heavy[*j]) {
        // A step's segment opens with the rest of that decode step; the kernels before the first step do not.
        let prefix = if j == 0 {
            0
        } else {
            segment
                .iter()
                .zip(&typical)
                .take_while(|&(&i, &name)| kernels[i].name == name && !larger(&kernels[i]))
                .count()
        };
        let rest = &segment[prefix..];
        let compute: Vec<usize> = (0..rest.len()).filter(|&p| kernels[rest[p]].kind != ComputeKind::Other).collect();
        let (Some(&first), Some(&last)) = (compute.first(), compute.last()) else { continue };
        if !rest[first..=last].iter().any(|&i| larger(&kernels[i])) {
            continue;
        }
        any_prefill = true;
        for &i in &segment[..prefix] {
            assigned[i] = Some((InferredPhase::Decode, instance(j, 0)));
        }
        for (position, &i) in rest.iter().enumerate() {
            assigned[i] = if position < first {
                None
            } else if position <= last {
                Some((InferredPhase::Prefill, instance(j, 1)))
            } else {
                // The head of the next decode step, before its first repeating kernel.
                Some((InferredPhase::Decode, instance(j + 1, 0)))
            };
        }
    }
    if !any_prefill {
        return Vec::new();
    }
    let mut stretches: Vec<Stretch> = Vec::new();
    let mut open: Option<Stretch> = None;
    for (kernel, phase) in kernels.iter().zip(&assigned) {
        let continues = open.is_some_and(|s| phase.is_some_and(|(p, n)| (s.phase, s.instance) == (p, n)));
        if continues {
            if let Some(stretch) = open.as_mut() {
                stretch.end_ns = stretch.end_ns.max(kernel.end_ns);
            }
            continue;
        }
        if let Some(mut done) = open.take() {
            done.end_ns = kernel.start_ns.max(done.start_ns);
            stretches.push(done);
        }
        open = phase.map(|(phase, instance)| Stretch {
            start_ns: kernel.start_ns,
            end_ns: kernel.end_ns,
            phase,
            instance,
        });
    }
    stretches.extend(open);
    stretches
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels laid end to end, 10 ns apart: `(name, kind, grid, duration)`.
    fn laid_out(kernels: &[(u32, ComputeKind, u64, i64)]) -> Vec<KernelShape> {
        let mut time = 0;
        kernels
            .iter()
            .map(|&(name, kind, grid_blocks, duration)| {
                let kernel =
                    KernelShape { start_ns: time, end_ns: time + duration, name: NameId(name), grid_blocks, kind };
                time += duration + 10;
                kernel
            })
            .collect()
    }

    const NORM: u32 = 1;
    const GEMM_A: u32 = 2;
    const GEMM_B: u32 = 3;
    const ATTN: u32 = 4;

    fn decode_step() -> Vec<(u32, ComputeKind, u64, i64)> {
        vec![
            (NORM, ComputeKind::Other, 2, 5),
            (GEMM_A, ComputeKind::Gemm, 100, 50),
            (ATTN, ComputeKind::Attention, 8, 20),
            (GEMM_B, ComputeKind::Gemm, 100, 50),
        ]
    }

    fn prefill() -> Vec<(u32, ComputeKind, u64, i64)> {
        vec![
            (NORM, ComputeKind::Other, 512, 40),
            (GEMM_A, ComputeKind::Gemm, 132, 400),
            (ATTN, ComputeKind::Attention, 256, 300),
            (GEMM_B, ComputeKind::Gemm, 132, 400),
        ]
    }

    #[test]
    fn prefill_then_decode_steps() {
        let mut kernels = vec![(9, ComputeKind::Other, 1, 5)];
        kernels.extend(prefill());
        for _ in 0..5 {
            kernels.extend(decode_step());
        }
        kernels.extend(prefill());
        for _ in 0..4 {
            kernels.extend(decode_step());
        }
        let shapes = laid_out(&kernels);
        let stretches = infer(&shapes);
        let phase_of = |k: &KernelShape| {
            stretches
                .iter()
                .find(|s| s.start_ns <= k.start_ns && k.start_ns < s.end_ns.max(s.start_ns + 1))
                .map(|s| s.phase)
        };
        let phases: Vec<Option<InferredPhase>> = shapes.iter().map(phase_of).collect();
        let count = |p: InferredPhase| phases.iter().filter(|&&q| q == Some(p)).count();
        // The leading set-up kernel and each prefill's first norm (before its first GEMM) get no phase.
        assert_eq!((phases[0], phases[1]), (None, None));
        assert_eq!(phases[2], Some(InferredPhase::Prefill));
        assert_eq!(count(InferredPhase::Prefill), 2 * 3);
        assert_eq!(count(InferredPhase::Decode), 9 * 4);
        let prefills: std::collections::HashSet<u32> =
            stretches.iter().filter(|s| s.phase == InferredPhase::Prefill).map(|s| s.instance).collect();
        assert_eq!(prefills.len(), 2);
    }

    #[test]
    fn steps_of_one_shape_are_not_split() {
        // A training-like loop: a slow first step (warm-up) of the same shapes is not a prefill.
        let mut kernels = vec![(9, ComputeKind::Other, 1, 5)];
        kernels.extend(decode_step().into_iter().map(|(n, kind, grid, duration)| (n, kind, grid, duration * 10)));
        for _ in 0..6 {
            kernels.extend(decode_step());
        }
        assert!(infer(&laid_out(&kernels)).is_empty());
        // Nor is a loop whose light steps differ from each other (the parts of a training iteration).
        let mut varied = Vec::new();
        for _ in 0..4 {
            varied.extend(decode_step());
            varied.extend(decode_step().into_iter().chain([(7, ComputeKind::Other, 1, 5)]));
            varied.extend(decode_step().into_iter().chain([(8, ComputeKind::Other, 1, 5)]));
            varied.extend(prefill());
        }
        assert!(infer(&laid_out(&varied)).is_empty());
        // Nor are decode steps alone.
        let decode_only: Vec<_> = (0..6).flat_map(|_| decode_step()).collect();
        assert!(infer(&laid_out(&decode_only)).is_empty());
    }

    #[test]
    fn graph_served_steps_give_one_instance_each_after_the_warm_up() {
        // Steps of (duration, GEMM time): a warm-up prefill and decode step, then two calls of a prefill and three
        // decode steps; each step's last kernel ends 10 ns before the next step starts.
        let shape = [(900, 900), (500, 10), (900, 900), (100, 10), (100, 10), (100, 10), (800, 900)];
        let mut time = 0;
        let mut work: Vec<StepWork> = shape
            .iter()
            .chain(&[(100, 10), (100, 10), (100, 10)])
            .map(|&(duration, gemm_ns)| {
                let step = StepWork {
                    start_ns: time,
                    end_ns: time + duration,
                    last_end_ns: time + duration - 10,
                    gemm_ns,
                    kernel_ns: gemm_ns,
                };
                time += duration;
                step
            })
            .collect();
        let stretches = from_steps(&work, 2);
        assert_eq!(stretches.len(), 8);
        let prefills: Vec<&Stretch> = stretches.iter().filter(|s| s.phase == InferredPhase::Prefill).collect();
        assert_eq!(prefills.len(), 2);
        assert_eq!((prefills[0].start_ns, prefills[0].end_ns), (1400, 2290), "a prefill ends with its last kernel");
        assert!(stretches.iter().all(|s| s.start_ns >= 1400), "the warm-up steps get no phase");
        let decode = stretches.iter().find(|s| s.phase == InferredPhase::Decode).unwrap();
        assert_eq!((decode.start_ns, decode.end_ns), (2300, 2400));
        // Decode steps alone, or prefills alone: no split.
        work.retain(|s| s.gemm_ns < 900);
        assert!(from_steps(&work, 0).is_empty());
    }
}
