//! Phase instances one by one: their times after the warm-up (time to first token, time per output token) and,
//! inside them, the time per transformer layer and op category.
//!
//! The report keeps only each phase's distribution of instance times; here every recorded phase range (NVTX or
//! annotation, as the report finds them) is kept with its kernels, in the order they ran, so that a rank's
//! warm-up can be left out (its first `skip` instances over all phases in time order; the report's figures count
//! those whose range opened before the rank's steady state, [`RankInstances::warmup_before`]) and the kernels of
//! one instance can be split into layers:
//!
//! 1. **recorded**: ranges named like a layer (`layer`, `layers.3`, `model.layers.3`, `h.3`, `blocks.3`,
//!    `LlamaDecoderLayer`, `nn.Module: DecoderLayer_3`, `TransformerBlock`, `layer 3`) open on the launching thread:
//!    each kernel belongs to the outermost such range, and the layers are numbered in their order in the instance;
//! 2. **inferred**: without such ranges, the kernel-name sequence of an instance is searched for its shortest
//!    period that repeats at least twice and covers at least half of the instance (kernels before the first and
//!    after the last repetition are `outside` the layers): one period is one layer.
//!
//! A phase's layer table is the mean over ranks and instances (those with the phase's most common layer count) of
//! each layer's kernel time per op category.

use std::collections::{BTreeMap, HashMap};

use regex::Regex;
use serde::Serialize;
use shardscope_model::{NameId, RangeKind, Trace};

use crate::figures::categories::{self, Classifier};
use crate::llm::phases::PhaseIndex;
use crate::llm::steps::Distribution;

/// Names of layer ranges (module paths ending in a layer index, or a decoder-layer class name).
pub const LAYER_PATTERN: &str = r"(?i)^layer$|(^|[.:/ ])(layers?|h|blocks?)[._ ]?\d+$|(decoderlayer|transformerblock|transformerlayer|encoderlayer|decoderblock)(_\d+)?$";

/// Instances longer than this many kernels are not searched for a period (the search tries every length and
/// offset; 5,000 kernels is 250 layers of 20).
pub const MAX_KERNELS_FOR_PERIOD: usize = 5_000;

/// The fewest kernels one inferred layer may have: shorter periods are element-wise repetition, not layers.
pub const MIN_KERNELS_PER_LAYER: usize = 3;

/// One kernel of an instance.
#[derive(Debug, Clone, PartialEq)]
struct InstanceKernel {
    start_ns: i64,
    end_ns: i64,
    name: NameId,
    label: String,
    /// Index of the outermost layer range of its launch, if any.
    layer_range: Option<u32>,
}

/// One phase instance of one rank.
#[derive(Debug, Clone)]
struct Instance {
    phase: String,
    /// Host start of its phase range: warm-up is told on the clock the steps are timed by.
    range_start_ns: i64,
    start_ns: i64,
    end_ns: i64,
    kernels: Vec<InstanceKernel>,
}

/// A rank's phase instances, in time order.
#[derive(Debug, Clone)]
pub struct RankInstances {
    /// The rank.
    pub rank: u32,
    instances: Vec<Instance>,
}

impl RankInstances {
    /// How many of its instances are warm-up when the steady state starts at `steady_start_ns` (`None`: every
    /// step was warm-up): those whose range opened before it.
    pub fn warmup_before(&self, steady_start_ns: Option<i64>) -> usize {
        match steady_start_ns {
            Some(start_ns) => self.instances.iter().filter(|i| i.range_start_ns < start_ns).count(),
            None => self.instances.len(),
        }
    }
}

/// The instances of every rank of a run (recorded phase ranges only; without any, empty).
pub fn instances(
    traces: &[Trace],
    classifier: &Classifier,
    phase_pattern: &Regex,
    window_ns: Option<(i64, i64)>,
) -> Vec<RankInstances> {
    let layer_pattern = Regex::new(LAYER_PATTERN).unwrap_or_else(|_| unreachable!("the layer pattern is valid"));
    let mut names = Vec::new();
    let indexes: Vec<PhaseIndex> = traces.iter().map(|t| PhaseIndex::build(t, phase_pattern, &mut names)).collect();
    let mut out = Vec::new();
    for (key, rank, _) in crate::figures::run::assign_ranks(traces) {
        let trace = &traces[key.trace];
        let index = &indexes[key.trace];
        if index.is_empty() {
            continue;
        }
        let classes = classifier.classify_names(&trace.names);
        let layers = LayerRanges::build(trace, &layer_pattern);
        let inside = |start: i64, end: i64| window_ns.is_none_or(|(a, b)| start >= a && end <= b);
        let mut by_range: HashMap<u32, Instance> = HashMap::new();
        let mut add = |launch: Option<u32>, start: i64, end: i64, kernel: Option<InstanceKernel>| {
            let call = launch.and_then(|l| trace.api_calls.get(l as usize));
            let hit = match call {
                Some(call) => index.hit_on_thread(call.process, call.tid, call.start_ns),
                None => index.hit_on_device(key.device, start),
            };
            let Some(hit) = hit else { return };
            let instance = by_range.entry(hit.range).or_insert_with(|| Instance {
                phase: index.names()[hit.phase as usize].clone(),
                range_start_ns: trace.ranges.get(hit.range as usize).map_or(start, |r| r.start_ns),
                start_ns: start,
                end_ns: end,
                kernels: Vec::new(),
            });
            instance.start_ns = instance.start_ns.min(start);
            instance.end_ns = instance.end_ns.max(end);
            if let Some(mut kernel) = kernel {
                kernel.layer_range = call.and_then(|c| layers.outermost(c.process.0, c.tid, c.start_ns));
                instance.kernels.push(kernel);
            }
        };
        for kernel in trace.kernels.iter().filter(|k| k.device == key.device && inside(k.start_ns, k.end_ns)) {
            let class = Classifier::lookup(&classes, kernel.name);
            let collective = kernel.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op);
            let label = categories::report_label(classifier, class, collective);
            let row = InstanceKernel {
                start_ns: kernel.start_ns,
                end_ns: kernel.end_ns,
                name: kernel.name,
                label,
                layer_range: None,
            };
            add(kernel.launch, kernel.start_ns, kernel.end_ns, Some(row));
        }
        for memop in trace.memops.iter().filter(|m| m.device == key.device && inside(m.start_ns, m.end_ns)) {
            add(memop.launch, memop.start_ns, memop.end_ns, None);
        }
        for graph in trace.graph_launches.iter().filter(|g| g.device == key.device && inside(g.start_ns, g.end_ns)) {
            add(graph.launch, graph.start_ns, graph.end_ns, None);
        }
        let mut instances: Vec<Instance> = by_range.into_values().collect();
        instances.sort_by_key(|i| (i.start_ns, i.end_ns));
        for instance in &mut instances {
            instance.kernels.sort_by_key(|k| (k.start_ns, k.end_ns));
        }
        out.push(RankInstances { rank, instances });
    }
    out.sort_by_key(|r| r.rank);
    out
}

/// A range's start, end and index in [`Trace::ranges`].
type RangeSpan = (i64, i64, u32);

/// Layer ranges per thread, for the lookup of a launch call.
struct LayerRanges {
    /// (process, tid) → layer ranges, outermost first among equal starts.
    by_thread: HashMap<(u32, u32), Vec<RangeSpan>>,
}

impl LayerRanges {
    fn build(trace: &Trace, pattern: &Regex) -> LayerRanges {
        let mut by_thread: HashMap<(u32, u32), Vec<RangeSpan>> = HashMap::new();
        for (i, range) in trace.ranges.iter().enumerate() {
            if range.kind == RangeKind::GpuAnnotation || !pattern.is_match(trace.names.get(range.name)) {
                continue;
            }
            by_thread.entry((range.process.0, range.tid)).or_default().push((range.start_ns, range.end_ns, i as u32));
        }
        for list in by_thread.values_mut() {
            list.sort_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
        }
        LayerRanges { by_thread }
    }

    /// The outermost layer range open at `time_ns` on the thread.
    fn outermost(&self, process: u32, tid: u32, time_ns: i64) -> Option<u32> {
        let list = self.by_thread.get(&(process, tid))?;
        // Ranges starting at or before the time; the earliest-starting one that still contains it is outermost.
        let end = list.partition_point(|r| r.0 <= time_ns);
        list[..end].iter().find(|r| r.1 >= time_ns).map(|r| r.2)
    }
}

/// The instance times of one phase after the warm-up, on its slowest rank (largest median).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseLatency {
    /// The phase.
    pub phase: String,
    /// The rank with the largest median instance time.
    pub rank: u32,
    /// Its instances left out as warm-up.
    pub skipped: usize,
    /// Its instance times (first GPU start to last GPU end of the work launched in the range).
    pub time: Distribution,
}

/// Per phase, the instance times on the slowest rank, leaving out each rank's first `skip` instances (all phases
/// together, in time order).
pub fn latencies(ranks: &[RankInstances], skip: usize) -> Vec<PhaseLatency> {
    latencies_after(ranks, &vec![skip; ranks.len()])
}

/// [`latencies`] with each rank's own warm-up: `skips[i]` leading instances of `ranks[i]` left out.
pub fn latencies_after(ranks: &[RankInstances], skips: &[usize]) -> Vec<PhaseLatency> {
    let mut by_phase: BTreeMap<&str, Vec<PhaseLatency>> = BTreeMap::new();
    for (rank, &skip) in ranks.iter().zip(skips) {
        let kept = &rank.instances[skip.min(rank.instances.len())..];
        let mut times: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for instance in kept {
            times.entry(&instance.phase).or_default().push(instance.end_ns - instance.start_ns);
        }
        for (phase, list) in times {
            let skipped = rank.instances[..skip.min(rank.instances.len())].iter().filter(|i| i.phase == phase).count();
            by_phase.entry(phase).or_default().push(PhaseLatency {
                phase: phase.to_string(),
                rank: rank.rank,
                skipped,
                time: Distribution::of(list),
            });
        }
    }
    let mut out: Vec<PhaseLatency> = by_phase
        .into_values()
        .filter_map(|list| list.into_iter().max_by_key(|l| (l.time.p50_ns, std::cmp::Reverse(l.rank))))
        .collect();
    // prefill before decode, as they run.
    out.sort_by_key(|l| (l.phase != "prefill", l.phase != "decode", l.phase.clone()));
    out
}

/// The time per layer and op category of one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseLayers {
    /// The phase.
    pub phase: String,
    /// `recorded` (layer ranges) or `inferred` (the repeating kernel sequence).
    pub source: &'static str,
    /// Layers per instance.
    pub layers: usize,
    /// Kernels of one layer (inferred only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels_per_layer: Option<usize>,
    /// (rank, instance) pairs the means are over.
    pub instances: usize,
    /// Instances of the phase left aside: their layer count differed, or no layers were found in them.
    pub instances_left_out: usize,
    /// Op categories (columns), largest total first.
    pub ops: Vec<String>,
    /// Per layer, per op: mean kernel time per instance, ns.
    pub time_ns: Vec<Vec<i64>>,
    /// Mean kernel time per instance outside every layer (before the first, after the last), ns.
    pub outside_ns: i64,
}

/// How the kernels of one instance split into layers.
struct LayerSplit {
    /// `recorded` or `inferred`.
    source: &'static str,
    /// Layers found.
    layers: usize,
    /// Kernels per layer (inferred only).
    kernels_per_layer: Option<usize>,
    /// Per kernel its layer, or `None` outside the layers.
    assigned: Vec<Option<usize>>,
}

fn split_instance(instance: &Instance) -> Option<LayerSplit> {
    if instance.kernels.iter().any(|k| k.layer_range.is_some()) {
        let mut order: Vec<u32> = Vec::new();
        let assigned = instance
            .kernels
            .iter()
            .map(|k| {
                let range = k.layer_range?;
                Some(match order.iter().position(|&r| r == range) {
                    Some(at) => at,
                    None => {
                        order.push(range);
                        order.len() - 1
                    }
                })
            })
            .collect();
        return Some(LayerSplit { source: "recorded", layers: order.len(), kernels_per_layer: None, assigned });
    }
    let names: Vec<NameId> = instance.kernels.iter().map(|k| k.name).collect();
    let period = find_period(&names)?;
    let assigned = (0..names.len())
        .map(|i| {
            (i >= period.offset && i < period.offset + period.length * period.repeats)
                .then(|| (i - period.offset) / period.length)
        })
        .collect();
    Some(LayerSplit { source: "inferred", layers: period.repeats, kernels_per_layer: Some(period.length), assigned })
}

/// A repeating stretch of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// Where the first repetition starts.
    pub offset: usize,
    /// Elements per repetition.
    pub length: usize,
    /// Repetitions in a row.
    pub repeats: usize,
}

/// The shortest period (at least [`MIN_KERNELS_PER_LAYER`] long) that repeats at least twice in a row and covers
/// at least half of the sequence, with the offset that gives it the most repetitions.
pub fn find_period<T: PartialEq>(sequence: &[T]) -> Option<Period> {
    let n = sequence.len();
    if n > MAX_KERNELS_FOR_PERIOD {
        return None;
    }
    for length in MIN_KERNELS_PER_LAYER..=n / 2 {
        let mut best: Option<Period> = None;
        // The first repetition starts within one period of the start (a prefix shorter than a layer).
        for offset in 0..length.min(n - 2 * length + 1) {
            // The cheap test first: the next repetition starts with the same element.
            if sequence[offset] != sequence[offset + length] {
                continue;
            }
            let mut repeats = 1;
            while offset + (repeats + 1) * length <= n
                && sequence[offset..offset + length]
                    == sequence[offset + repeats * length..offset + (repeats + 1) * length]
            {
                repeats += 1;
            }
            if repeats >= 2 && best.is_none_or(|b| repeats > b.repeats) {
                best = Some(Period { offset, length, repeats });
            }
        }
        if let Some(p) = best.filter(|p| 2 * p.length * p.repeats >= n) {
            // A period that is itself a repetition of a shorter block was found at the shorter length already.
            return Some(p);
        }
    }
    None
}

/// The layer tables of every phase, leaving out each rank's first `skip` instances.
pub fn phase_layers(ranks: &[RankInstances], skip: usize) -> Vec<PhaseLayers> {
    phase_layers_after(ranks, &vec![skip; ranks.len()])
}

/// [`phase_layers`] with each rank's own warm-up: `skips[i]` leading instances of `ranks[i]` left out.
pub fn phase_layers_after(ranks: &[RankInstances], skips: &[usize]) -> Vec<PhaseLayers> {
    struct Split<'a> {
        instance: &'a Instance,
        split: LayerSplit,
    }
    let mut by_phase: BTreeMap<&str, (Vec<Split>, usize)> = BTreeMap::new();
    for (rank, &skip) in ranks.iter().zip(skips) {
        for instance in rank.instances.iter().skip(skip) {
            let entry = by_phase.entry(&instance.phase).or_default();
            match split_instance(instance) {
                Some(split) if split.layers > 0 => entry.0.push(Split { instance, split }),
                _ => entry.1 += 1,
            }
        }
    }
    let mut out = Vec::new();
    for (phase, (splits, unsplit)) in by_phase {
        // The most common (source, layer count), the larger count on a tie.
        let mut counts: BTreeMap<(&str, usize), usize> = BTreeMap::new();
        for s in &splits {
            *counts.entry((s.split.source, s.split.layers)).or_default() += 1;
        }
        let Some((&(source, layers), _)) = counts.iter().max_by_key(|(k, n)| (**n, k.1)) else { continue };
        let used: Vec<&Split> =
            splits.iter().filter(|s| s.split.source == source && s.split.layers == layers).collect();
        let mut totals: BTreeMap<&str, i64> = BTreeMap::new();
        let mut cells: Vec<BTreeMap<&str, i64>> = vec![BTreeMap::new(); layers];
        let mut outside: i64 = 0;
        for s in &used {
            for (kernel, layer) in s.instance.kernels.iter().zip(&s.split.assigned) {
                let ns = kernel.end_ns - kernel.start_ns;
                match layer {
                    Some(l) => {
                        *cells[*l].entry(&kernel.label).or_default() += ns;
                        *totals.entry(&kernel.label).or_default() += ns;
                    }
                    None => outside += ns,
                }
            }
        }
        let mut ops: Vec<(&str, i64)> = totals.into_iter().collect();
        ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let n = used.len() as i64;
        let kernels_per_layer = used.iter().find_map(|s| s.split.kernels_per_layer).filter(|_| source == "inferred");
        out.push(PhaseLayers {
            phase: phase.to_string(),
            source,
            layers,
            kernels_per_layer,
            instances: used.len(),
            instances_left_out: splits.len() - used.len() + unsplit,
            ops: ops.iter().map(|(l, _)| l.to_string()).collect(),
            time_ns: cells
                .iter()
                .map(|row| ops.iter().map(|(l, _)| row.get(l).copied().unwrap_or(0) / n).collect())
                .collect(),
            outside_ns: outside / n,
        });
    }
    out.sort_by_key(|l| (l.phase != "prefill", l.phase != "decode", l.phase.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_of_a_repeating_sequence_is_found_with_its_prefix_and_suffix() {
        let layer = [1, 2, 3, 4, 2, 5];
        let mut seq = vec![9, 8];
        for _ in 0..8 {
            seq.extend(layer);
        }
        seq.push(7);
        assert_eq!(find_period(&seq), Some(Period { offset: 2, length: 6, repeats: 8 }));
        assert_eq!(find_period(&[1, 2, 3, 4, 5, 6, 7]), None);
        // Too short a period is element-wise repetition, not layers.
        assert_eq!(find_period(&[1, 2, 1, 2]), None);
    }

    #[test]
    fn layer_names_match_module_paths_and_classes_but_not_their_parts() {
        let p = Regex::new(LAYER_PATTERN).unwrap();
        for name in [
            "layers.3",
            "model.layers.12",
            "h.0",
            "transformer.blocks.7",
            "LlamaDecoderLayer",
            "nn.Module: LlamaDecoderLayer_3",
            "layer 2",
        ] {
            assert!(p.is_match(name), "{name}");
        }
        for name in ["model.layers.3.self_attn", "layers.3.mlp", "prefill", "decode", "layernorm", "aten::linear", "h"]
        {
            assert!(!p.is_match(name), "{name}");
        }
    }
}
