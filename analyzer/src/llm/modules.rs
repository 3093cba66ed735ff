//! Where in the model: GPU time (and allocator memory) per PyTorch module and layer, from module ranges.
//!
//! Module ranges come from `capture --torch-modules` (NVTX ranges named `model.layers.3.mlp (Qwen3MLP)`, with
//! `mem=ALLOCATED,RESERVED` at entry and a zero-length `mem=…` range at exit when memory was recorded) or from a
//! torch.profiler trace made with `with_modules=True` (`nn.Module: Qwen3MLP_3` CPU ranges, whose path is the chain
//! of enclosing module ranges). A kernel belongs to the innermost module range open on its launching thread when
//! its launch call started, with the same lookup that phases use ([`crate::llm::phases`]). A kernel replayed from a CUDA
//! graph belongs to the module ranges open where and when its graph node was captured (the capture's
//! [`shardscope_model::GraphNodeOrigin`]s; node ids of an instantiated graph lead back through their clones).
//!
//! Rows are per rank, phase and module path; `depth` folds deeper modules into their ancestor at that depth, so the
//! rows of one phase always add up to its attributed kernel time. A layer is the number after the path part that
//! holds the layers (`model.layers.3.…`, `transformer.h.3.…` → 3), or a Kineto module name ending in `Layer_N` or
//! `Block_N` (`Qwen3DecoderLayer_3`, `GPT2Block_3`).
//!
//! Each phase's leading warm-up instances are left out and counted (the report's rule, [`steps::detect_warmup`],
//! or a given number): under `torch.compile` the first decode step holds compilation, autotuning (kernels
//! benchmarked inside the module that first uses them) and the CUDA graph's capture, which would otherwise weigh
//! on the modules of the first layer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use shardscope_model::{GraphNodeOrigin, Kernel, ProcessIdx, Trace};

use crate::llm::phases::{OpenRange, PhaseHit, PhaseId, PhaseIndex, innermost, link_parents};
use crate::llm::steps;

/// The capture hook's range names: `path (Class)`, the root as `(Class)`, optionally ` mem=ALLOCATED,RESERVED`.
static HOOK_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:([A-Za-z_][\w.]*) )?\(([A-Za-z_]\w*)\)(?: mem=(\d+),(\d+))?$").expect("valid pattern")
});
/// The hook's exit reading: a zero-length range `mem=ALLOCATED,RESERVED`.
static EXIT_READING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^mem=(\d+),(\d+)$").expect("valid pattern"));
/// torch.profiler's module ranges (`with_modules=True`).
const KINETO_PREFIX: &str = "nn.Module: ";
/// Row name of kernels launched outside every module range.
pub const NO_MODULE: &str = "(no module)";
/// Phase name of kernels launched outside every phase range.
pub const NO_PHASE: &str = "(no phase)";

/// What to tabulate.
#[derive(Debug, Clone)]
pub struct ModuleOptions {
    /// Fold modules deeper than this many path parts into their ancestor (the root module has 0); none: innermost.
    pub depth: Option<usize>,
    /// Phase ranges, as the report finds them.
    pub phase_pattern: Regex,
    /// Only kernels that start and end inside START_NS:END_NS.
    pub window_ns: Option<(i64, i64)>,
    /// Leave out each phase's first N instances on every rank; `None`: the leading warm-up instances found by
    /// their length ([`steps::detect_warmup`]).
    pub skip_steps: Option<usize>,
}

/// The allocator's counters at one moment, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    allocated: u64,
    reserved: u64,
}

/// One module range of a trace.
#[derive(Debug, Clone)]
struct ModuleInfo {
    /// Qualified path (`model.layers.3.mlp`); empty for the root module of the capture hook.
    path: String,
    class: String,
    /// Path parts (the capture hook) or nesting level (Kineto); the root is 0.
    depth: usize,
    /// Index in `Trace::ranges` of the enclosing module range.
    parent: Option<u32>,
    entry: Option<Counters>,
    exit: Option<Counters>,
    /// Most allocated bytes read anywhere inside the range (entries and exits of it and its descendants).
    peak_allocated: Option<u64>,
}

/// The module ranges of one trace, ready for lookups.
struct ModuleIndex {
    by_thread: HashMap<(ProcessIdx, u32), Vec<OpenRange>>,
    info: HashMap<u32, ModuleInfo>,
    /// Graph node origins by process and node id.
    nodes: HashMap<(ProcessIdx, u64), GraphNodeOrigin>,
}

/// Parses a capture-hook range name into (path, class, entry counters).
fn parse_hook_name(text: &str) -> Option<(String, String, Option<Counters>)> {
    let captures = HOOK_NAME.captures(text)?;
    let path = captures.get(1).map_or("", |m| m.as_str()).to_string();
    let counters = match (captures.get(3), captures.get(4)) {
        (Some(a), Some(r)) => {
            Some(Counters { allocated: a.as_str().parse().ok()?, reserved: r.as_str().parse().ok()? })
        }
        _ => None,
    };
    Some((path, captures[2].to_string(), counters))
}

fn parse_exit_reading(text: &str) -> Option<Counters> {
    let captures = EXIT_READING.captures(text)?;
    Some(Counters { allocated: captures[1].parse().ok()?, reserved: captures[2].parse().ok()? })
}

/// A Kineto module name's class: `Qwen3MLP_3` → `Qwen3MLP`.
fn kineto_class(name: &str) -> &str {
    match name.rsplit_once('_') {
        Some((class, number)) if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) => class,
        _ => name,
    }
}

impl ModuleIndex {
    fn build(trace: &Trace) -> ModuleIndex {
        let mut index = ModuleIndex { by_thread: HashMap::new(), info: HashMap::new(), nodes: HashMap::new() };
        // Kineto ranges get their path from their ancestors once the tracks are linked.
        let mut kineto: HashSet<u32> = HashSet::new();
        let mut readings: HashMap<(ProcessIdx, u32), Vec<(i64, u64)>> = HashMap::new();
        let mut exits: HashMap<(ProcessIdx, u32), Vec<(i64, Counters)>> = HashMap::new();
        for (i, range) in trace.ranges.iter().enumerate() {
            let text = trace.names.get(range.name);
            let thread = (range.process, range.tid);
            let (path, class, entry) = if let Some(parsed) = parse_hook_name(text) {
                parsed
            } else if let Some(name) = text.strip_prefix(KINETO_PREFIX) {
                kineto.insert(i as u32);
                (name.to_string(), kineto_class(name).to_string(), None)
            } else {
                if let Some(counters) = parse_exit_reading(text) {
                    exits.entry(thread).or_default().push((range.start_ns, counters));
                    readings.entry(thread).or_default().push((range.start_ns, counters.allocated));
                }
                continue;
            };
            if let Some(counters) = entry {
                readings.entry(thread).or_default().push((range.start_ns, counters.allocated));
            }
            let depth = if path.is_empty() { 0 } else { path.split('.').count() };
            let info = ModuleInfo { path, class, depth, parent: None, entry, exit: None, peak_allocated: None };
            index.info.insert(i as u32, info);
            let open =
                OpenRange { start_ns: range.start_ns, end_ns: range.end_ns, phase: 0, range: i as u32, parent: None };
            index.by_thread.entry(thread).or_default().push(open);
        }
        for track in index.by_thread.values_mut() {
            link_parents(track);
            for position in 0..track.len() {
                let parent = track[position].parent.map(|p| track[p as usize].range);
                let range = track[position].range;
                let parent_path = parent.and_then(|p| index.info.get(&p)).map(|p| (p.path.clone(), p.depth));
                let info = index.info.get_mut(&range).expect("every track entry has its info");
                info.parent = parent;
                if kineto.contains(&range) {
                    // Parents come first in a track sorted by start, so their paths are already whole.
                    if let Some((parent_path, parent_depth)) = parent_path {
                        info.path = format!("{parent_path}.{}", info.path);
                        info.depth = parent_depth + 1;
                    } else {
                        info.depth = 0;
                    }
                }
            }
        }
        index.attach_memory(trace, readings, exits);
        for node in &trace.graph_nodes {
            index.nodes.insert((node.process, node.node_id), *node);
        }
        index
    }

    /// Exit counters (the last exit reading inside each range) and peaks (the most allocated read inside it).
    fn attach_memory(
        &mut self,
        trace: &Trace,
        mut readings: HashMap<(ProcessIdx, u32), Vec<(i64, u64)>>,
        mut exits: HashMap<(ProcessIdx, u32), Vec<(i64, Counters)>>,
    ) {
        for list in readings.values_mut() {
            list.sort_unstable();
        }
        for list in exits.values_mut() {
            list.sort_unstable_by_key(|(time, _)| *time);
        }
        for (&range_index, info) in self.info.iter_mut() {
            if info.entry.is_none() {
                continue;
            }
            let range = &trace.ranges[range_index as usize];
            let thread = (range.process, range.tid);
            let inside = |time: i64| time >= range.start_ns && time <= range.end_ns;
            if let Some(list) = exits.get(&thread) {
                let after = list.partition_point(|(time, _)| *time <= range.end_ns);
                info.exit = after.checked_sub(1).map(|i| list[i]).filter(|(time, _)| inside(*time)).map(|(_, c)| c);
            }
            if let Some(list) = readings.get(&thread) {
                let first = list.partition_point(|(time, _)| *time < range.start_ns);
                let last = list.partition_point(|(time, _)| *time <= range.end_ns);
                info.peak_allocated = list[first..last].iter().map(|(_, allocated)| *allocated).max();
            }
        }
    }

    /// The innermost module range open on `thread` at `time_ns`.
    fn innermost_on(&self, process: ProcessIdx, tid: u32, time_ns: i64) -> Option<u32> {
        innermost(self.by_thread.get(&(process, tid))?, time_ns).map(|hit| hit.range)
    }

    /// Where a graph node was made: its clones followed back (at most a few steps: instantiation clones once).
    fn node_origin(&self, process: ProcessIdx, node_id: u64) -> Option<&GraphNodeOrigin> {
        let mut node = self.nodes.get(&(process, node_id))?;
        for _ in 0..8 {
            match node.cloned_from {
                Some(original) => node = self.nodes.get(&(process, original))?,
                None => return Some(node),
            }
        }
        None
    }

    /// The innermost module range of a kernel: from its graph node's capture, else from its launch call.
    fn module_of(&self, trace: &Trace, kernel: &Kernel) -> (Option<u32>, bool) {
        if let Some(origin) = kernel.graph_node_id.and_then(|id| self.node_origin(kernel.process, id)) {
            return (self.innermost_on(origin.process, origin.tid, origin.created_ns), true);
        }
        let call = kernel.launch.and_then(|l| trace.api_calls.get(l as usize));
        (call.and_then(|c| self.innermost_on(c.process, c.tid, c.start_ns)), false)
    }

    /// `range`, or its ancestor at `depth` when it lies deeper.
    fn folded(&self, mut range: u32, depth: Option<usize>) -> u32 {
        let Some(depth) = depth else { return range };
        while let Some(info) = self.info.get(&range) {
            match info.parent {
                Some(parent) if info.depth > depth => range = parent,
                _ => break,
            }
        }
        range
    }
}

/// The module of every kernel of one trace, as [`module_report`] attributes it (the viewer's module rows).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelModules {
    /// Each module path once; a root module (whose path is empty) as its class in parentheses, `(Qwen3Model)`.
    pub paths: Vec<String>,
    /// Per kernel of [`Trace::kernels`], the index in `paths` of its innermost module; `None` outside every module.
    /// Empty when the trace has no module ranges at all.
    pub of_kernel: Vec<Option<u32>>,
}

/// The innermost module of every kernel of `trace` (launch call or graph node capture, as [`module_report`]). A
/// trace without module ranges costs one look at each distinct name.
pub fn kernel_modules(trace: &Trace) -> KernelModules {
    let has_modules = trace.names.iter().any(|(_, text)| text.starts_with(KINETO_PREFIX) || HOOK_NAME.is_match(text));
    if !has_modules {
        return KernelModules::default();
    }
    let index = ModuleIndex::build(trace);
    let mut paths: Vec<String> = Vec::new();
    let mut path_ids: HashMap<String, u32> = HashMap::new();
    let mut range_ids: HashMap<u32, u32> = HashMap::new();
    let of_kernel = trace
        .kernels
        .iter()
        .map(|kernel| {
            let range = index.module_of(trace, kernel).0?;
            let info = index.info.get(&range)?;
            let id = *range_ids.entry(range).or_insert_with(|| {
                let path = if info.path.is_empty() { format!("({})", info.class) } else { info.path.clone() };
                *path_ids.entry(path.clone()).or_insert_with(|| {
                    paths.push(path);
                    paths.len() as u32 - 1
                })
            });
            Some(id)
        })
        .collect();
    KernelModules { paths, of_kernel }
}

/// Allocator figures of a module's calls, from the counters read at entry and exit.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MemoryFigures {
    /// Calls with both readings.
    pub calls_measured: u64,
    /// Mean of allocated bytes at exit minus at entry.
    pub allocated_delta_mean_bytes: f64,
    /// Largest such difference.
    pub allocated_delta_max_bytes: i64,
    /// Largest of (most allocated bytes read inside the call minus at its entry).
    pub peak_above_entry_max_bytes: i64,
    /// Largest change of reserved bytes over a call.
    pub reserved_delta_max_bytes: i64,
}

/// One module path of one phase on one rank.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ModuleRow {
    /// Qualified path (`model.layers.3.mlp`); empty for the root module, [`NO_MODULE`] for unattributed kernels.
    pub path: String,
    /// The module's class.
    pub class: String,
    /// The layer the path is in, when it is in one.
    pub layer: Option<u32>,
    /// The path below the layer (`mlp.down_proj`), or the whole path outside layers.
    pub within_layer: String,
    /// Kernel time attributed to the module (and to its folded descendants), ns.
    pub gpu_ns: i64,
    /// Share of the phase's kernel time on this rank.
    pub share: f64,
    /// Kernels attributed.
    pub kernels: u64,
    /// Of those, kernels replayed from a CUDA graph.
    pub graph_kernels: u64,
    /// Module calls (ranges) that launched them.
    pub calls: u64,
    /// `gpu_ns` per phase instance (step).
    pub per_step_ns: f64,
    /// Allocator figures, where the capture recorded them.
    pub memory: Option<MemoryFigures>,
}

/// The module rows of one phase.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PhaseModules {
    /// Phase name, or [`NO_PHASE`].
    pub phase: String,
    /// Phase instances (steps) with kernels on this rank, warm-up left out.
    pub instances: u64,
    /// All kernel time of the phase on this rank, warm-up left out, ns.
    pub gpu_ns: i64,
    /// Leading instances left out as warm-up (not in `instances`, `gpu_ns` or the rows).
    pub warmup_instances: u64,
    /// Kernel time of those instances, ns.
    pub warmup_gpu_ns: i64,
    /// How the warm-up was chosen: `detected`, `skip_steps` (given) or `none`.
    pub warmup: &'static str,
    /// Rows in path order.
    pub rows: Vec<ModuleRow>,
}

/// One rank's tables.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RankModules {
    /// The rank.
    pub rank: u32,
    /// Per phase, in order of first kernel.
    pub phases: Vec<PhaseModules>,
}

/// The module tables of a run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ModuleReport {
    /// The folding depth asked for.
    pub depth: Option<usize>,
    /// Per rank.
    pub ranks: Vec<RankModules>,
}

/// The layer a path is in and the path below it: `model.layers.3.mlp` → (3, `mlp`); Kineto `…Layer_3.Qwen3MLP_3`.
pub fn layer_of(path: &str) -> (Option<u32>, String) {
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let number = if i > 0 && part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty() {
            part.parse().ok()
        } else if is_kineto_layer_class(kineto_class(part)) && kineto_class(part) != *part {
            part.rsplit('_').next().and_then(|n| n.parse().ok())
        } else {
            None
        };
        if let Some(number) = number {
            return (Some(number), parts[i + 1..].join("."));
        }
    }
    (None, path.to_string())
}

/// Whether a module class holds one layer of a stack: `Qwen3DecoderLayer`, `BertLayer`; `GPT2Block`, `BloomBlock`.
fn is_kineto_layer_class(class: &str) -> bool {
    class.ends_with("Layer") || class.ends_with("Block")
}

/// Rows being added up: per (phase, folded range's path).
#[derive(Default)]
struct Tally {
    gpu_ns: i64,
    kernels: u64,
    graph_kernels: u64,
    calls: HashSet<u32>,
    class: String,
}

/// One phase being added up: its instances (phase ranges), its kernel time and its rows by path.
#[derive(Default)]
struct PhaseTally {
    instances: HashSet<u32>,
    gpu_ns: i64,
    rows: BTreeMap<String, Tally>,
    warmup_instances: HashSet<u32>,
    warmup_gpu_ns: i64,
}

/// The module tables of `traces` (ranks of one run).
pub fn module_report(traces: &[Trace], options: &ModuleOptions) -> ModuleReport {
    let mut phase_names = Vec::new();
    let phase_indexes: Vec<PhaseIndex> =
        traces.iter().map(|t| PhaseIndex::build(t, &options.phase_pattern, &mut phase_names)).collect();
    let module_indexes: Vec<ModuleIndex> = traces.iter().map(ModuleIndex::build).collect();
    let mut ranks = Vec::new();
    for (key, rank, _) in crate::figures::run::assign_ranks(traces) {
        let (trace, phases, modules) = (&traces[key.trace], &phase_indexes[key.trace], &module_indexes[key.trace]);
        let inside = |k: &Kernel| options.window_ns.is_none_or(|(a, b)| k.start_ns >= a && k.end_ns <= b);
        let kernels: Vec<(&Kernel, Option<PhaseHit>)> = trace
            .kernels
            .iter()
            .filter(|k| k.device == key.device && inside(k))
            .map(|kernel| (kernel, phase_hit(trace, phases, kernel)))
            .collect();
        let (warmup, how) = warmup_instances(trace, kernels.iter().filter_map(|(_, hit)| *hit), options.skip_steps);
        // Per phase (in order of first kernel): its instances, its kernel time and its rows.
        let mut order: Vec<String> = Vec::new();
        let mut tallies: HashMap<String, PhaseTally> = HashMap::new();
        for (kernel, hit) in kernels {
            let phase = hit.map_or(NO_PHASE.to_string(), |h| phases.names()[h.phase as usize].clone());
            if !tallies.contains_key(&phase) {
                order.push(phase.clone());
            }
            let tally = tallies.entry(phase).or_default();
            let instance = hit.map_or(u32::MAX, |h| h.range);
            if warmup.contains(&instance) {
                tally.warmup_instances.insert(instance);
                tally.warmup_gpu_ns += kernel.duration_ns();
                continue;
            }
            tally.instances.insert(instance);
            tally.gpu_ns += kernel.duration_ns();
            add_to_rows(modules, options.depth, trace, kernel, &mut tally.rows);
        }
        let phases_out = order
            .into_iter()
            .map(|phase| {
                let tally = tallies.remove(&phase).unwrap_or_default();
                phase_rows(modules, phase, tally, how)
            })
            .collect();
        ranks.push(RankModules { rank, phases: phases_out });
    }
    ModuleReport { depth: options.depth, ranks }
}

/// The phase instance a kernel belongs to: by its launch call's thread and time, else by GPU-side annotations.
fn phase_hit(trace: &Trace, phases: &PhaseIndex, kernel: &Kernel) -> Option<PhaseHit> {
    match kernel.launch.and_then(|l| trace.api_calls.get(l as usize)) {
        Some(call) => phases.hit_on_thread(call.process, call.tid, call.start_ns),
        None => phases.hit_on_device(kernel.device, kernel.start_ns),
    }
}

/// The phase instances (ranges) one rank leaves out as warm-up, from the instances its kernels are in: per phase,
/// in time order, the leading ones the report's rule picks ([`steps::leading_warmup`]: the first `skip_steps`, or
/// those found by their length), and how they were picked.
fn warmup_instances(
    trace: &Trace,
    hits: impl Iterator<Item = PhaseHit>,
    skip_steps: Option<usize>,
) -> (HashSet<u32>, &'static str) {
    let mut by_phase: HashMap<PhaseId, BTreeMap<(i64, u32), i64>> = HashMap::new();
    for hit in hits {
        let Some(range) = trace.ranges.get(hit.range as usize) else { continue };
        by_phase
            .entry(hit.phase)
            .or_default()
            .insert((range.start_ns, hit.range), range.end_ns.saturating_sub(range.start_ns));
    }
    let (mut left_out, mut how) = (HashSet::new(), "none");
    for instances in by_phase.values() {
        let durations = || instances.values().copied().collect();
        let (count, label) = steps::leading_warmup(durations, &[], skip_steps.unwrap_or(0), skip_steps.is_none());
        if count > 0 {
            how = label;
        }
        left_out.extend(instances.keys().take(count).map(|&(_, range)| range));
    }
    (left_out, how)
}

/// Adds `kernel` to the row of its (folded) module.
fn add_to_rows(
    modules: &ModuleIndex,
    depth: Option<usize>,
    trace: &Trace,
    kernel: &Kernel,
    rows: &mut BTreeMap<String, Tally>,
) {
    let (module, from_graph) = modules.module_of(trace, kernel);
    let folded = module.map(|m| modules.folded(m, depth));
    let info = folded.and_then(|f| modules.info.get(&f));
    let tally = rows.entry(info.map_or(NO_MODULE.to_string(), |i| i.path.clone())).or_default();
    tally.gpu_ns += kernel.duration_ns();
    tally.kernels += 1;
    tally.graph_kernels += u64::from(from_graph);
    if let (Some(folded), Some(info)) = (folded, info) {
        tally.calls.insert(folded);
        tally.class.clone_from(&info.class);
    }
}

fn phase_rows(modules: &ModuleIndex, phase: String, tally: PhaseTally, warmup: &'static str) -> PhaseModules {
    let (instances, gpu_ns) = (tally.instances.len() as u64, tally.gpu_ns);
    let rows = tally
        .rows
        .into_iter()
        .map(|(path, tally)| {
            let (layer, within_layer) = if path == NO_MODULE { (None, path.clone()) } else { layer_of(&path) };
            let memory = memory_figures(modules, &tally.calls);
            ModuleRow {
                layer,
                within_layer,
                class: tally.class,
                gpu_ns: tally.gpu_ns,
                share: if gpu_ns > 0 { tally.gpu_ns as f64 / gpu_ns as f64 } else { 0.0 },
                kernels: tally.kernels,
                graph_kernels: tally.graph_kernels,
                calls: tally.calls.len() as u64,
                per_step_ns: tally.gpu_ns as f64 / instances.max(1) as f64,
                memory,
                path,
            }
        })
        .collect();
    let warmup_instances = tally.warmup_instances.len() as u64;
    PhaseModules {
        phase,
        instances,
        gpu_ns,
        rows,
        warmup_instances,
        warmup_gpu_ns: tally.warmup_gpu_ns,
        warmup: if warmup_instances > 0 { warmup } else { "none" },
    }
}

fn memory_figures(modules: &ModuleIndex, calls: &HashSet<u32>) -> Option<MemoryFigures> {
    let mut figures = MemoryFigures::default();
    let mut delta_sum = 0f64;
    for info in calls.iter().filter_map(|c| modules.info.get(c)) {
        let (Some(entry), Some(exit)) = (info.entry, info.exit) else { continue };
        let delta = exit.allocated as i64 - entry.allocated as i64;
        let reserved = exit.reserved as i64 - entry.reserved as i64;
        let peak = info.peak_allocated.unwrap_or(entry.allocated) as i64 - entry.allocated as i64;
        if figures.calls_measured == 0 {
            (figures.allocated_delta_max_bytes, figures.reserved_delta_max_bytes) = (delta, reserved);
        }
        figures.calls_measured += 1;
        delta_sum += delta as f64;
        figures.allocated_delta_max_bytes = figures.allocated_delta_max_bytes.max(delta);
        figures.reserved_delta_max_bytes = figures.reserved_delta_max_bytes.max(reserved);
        figures.peak_above_entry_max_bytes = figures.peak_above_entry_max_bytes.max(peak);
    }
    (figures.calls_measured > 0).then(|| {
        figures.allocated_delta_mean_bytes = delta_sum / figures.calls_measured as f64;
        figures
    })
}

/// The report as a table: per rank and phase, one line per module path (indented by depth).
pub fn table(report: &ModuleReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for rank in &report.ranks {
        for phase in &rank.phases {
            let _ = writeln!(
                out,
                "rank {} · {} · {} instance(s) · {:.3} ms of kernels{}",
                rank.rank,
                phase.phase,
                phase.instances,
                phase.gpu_ns as f64 / 1e6,
                warmup_note(phase)
            );
            let _ = writeln!(
                out,
                "  {:<56} {:<24} {:>10} {:>7} {:>8} {:>7} {:>12}",
                "module", "class", "GPU ms", "share", "kernels", "calls", "per step µs"
            );
            for row in &phase.rows {
                let indent =
                    if row.path == NO_MODULE || row.path.is_empty() { 0 } else { row.path.matches('.').count() };
                let name = if row.path.is_empty() { format!("({})", row.class) } else { row.path.clone() };
                let _ = writeln!(
                    out,
                    "  {:<56} {:<24} {:>10.3} {:>6.1}% {:>8} {:>7} {:>12.1}",
                    format!("{}{name}", "  ".repeat(indent.min(8))),
                    row.class,
                    row.gpu_ns as f64 / 1e6,
                    row.share * 100.0,
                    row.kernels,
                    row.calls,
                    row.per_step_ns / 1e3
                );
            }
            out.push_str(&layer_summary(phase));
            out.push('\n');
        }
    }
    out
}

/// What the phase left out as warm-up, for its table's title line.
fn warmup_note(phase: &PhaseModules) -> String {
    match phase.warmup_instances {
        0 => String::new(),
        n => format!(
            " · {n} warm-up instance(s) left out ({}, {:.3} ms of kernels)",
            if phase.warmup == "detected" { "detected" } else { "--skip-steps" },
            phase.warmup_gpu_ns as f64 / 1e6
        ),
    }
}

/// Per module below the layer level: its time per layer (mean, min, max over the layers that have it).
fn layer_summary(phase: &PhaseModules) -> String {
    use std::fmt::Write;
    let mut by_module: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for row in phase.rows.iter().filter(|r| r.layer.is_some()) {
        by_module.entry(row.within_layer.as_str()).or_default().push(row.gpu_ns);
    }
    if by_module.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "  per layer: {:<44} {:>7} {:>14} {:>12} {:>12}\n",
        "module in layer", "layers", "mean µs/step", "min µs", "max µs"
    );
    let steps = phase.instances.max(1) as f64;
    for (module, times) in by_module {
        let mean = times.iter().sum::<i64>() as f64 / times.len() as f64;
        let (min, max) = (times.iter().min().copied().unwrap_or(0), times.iter().max().copied().unwrap_or(0));
        let name = if module.is_empty() { "(the layer itself)" } else { module };
        let _ = writeln!(
            out,
            "             {:<44} {:>7} {:>14.1} {:>12.1} {:>12.1}",
            name,
            times.len(),
            mean / steps / 1e3,
            min as f64 / steps / 1e3,
            max as f64 / steps / 1e3
        );
    }
    out
}

/// The report as CSV, one line per rank, phase and module path.
pub fn csv(report: &ModuleReport) -> String {
    let mut out = String::from(
        "rank,phase,path,class,layer,within_layer,gpu_ns,share,kernels,graph_kernels,calls,per_step_ns,\
         allocated_delta_mean_bytes,allocated_delta_max_bytes,peak_above_entry_max_bytes,reserved_delta_max_bytes\n",
    );
    let quote = |text: &str| {
        if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
    };
    for rank in &report.ranks {
        for phase in &rank.phases {
            for row in &phase.rows {
                let memory = row.memory.as_ref().map_or(",,,".to_string(), |m| {
                    format!(
                        "{},{},{},{}",
                        m.allocated_delta_mean_bytes,
                        m.allocated_delta_max_bytes,
                        m.peak_above_entry_max_bytes,
                        m.reserved_delta_max_bytes
                    )
                });
                out.push_str(&format!(
                    "{},{},{},{},{},{},{},{:.6},{},{},{},{:.1},{memory}\n",
                    rank.rank,
                    quote(&phase.phase),
                    quote(&row.path),
                    quote(&row.class),
                    row.layer.map(|l| l.to_string()).unwrap_or_default(),
                    quote(&row.within_layer),
                    row.gpu_ns,
                    row.share,
                    row.kernels,
                    row.graph_kernels,
                    row.calls,
                    row.per_step_ns,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{ApiCall, Device, DeviceIdx, Process, Range};

    /// A decode step on one thread: the root module, layer 0 with a projection (memory recorded), layer 1, and a
    /// graph replayed later whose node was captured inside the projection.
    fn trace() -> Trace {
        let mut trace = Trace::default();
        let p = trace.add_process(Process { pid: 7, rank: Some(0), ..Process::default() });
        let d = trace.add_device(Device { process: Some(p), ..Device::default() });
        let mut range = |start_ns, end_ns, text: &str| Range {
            start_ns,
            end_ns,
            name: trace.names.intern(text),
            process: p,
            tid: 1,
            ..Range::default()
        };
        let ranges = vec![
            range(0, 1000, "decode"),
            range(0, 1000, "(Model)"),
            range(10, 400, "model.layers.0 (Layer) mem=100,1000"),
            range(20, 100, "model.layers.0.q_proj (Linear) mem=100,1000"),
            range(99, 99, "mem=150,1000"),
            range(399, 399, "mem=300,2000"),
            range(400, 800, "model.layers.1 (Layer)"),
        ];
        trace.ranges = ranges;
        for (i, (launch_ns, duration_ns)) in
            [(30, 10), (200, 20), (450, 30), (900, 40), (950, 50)].into_iter().enumerate()
        {
            add_launch(&mut trace, (p, d), launch_ns, 2000 + 100 * i as i64, duration_ns);
        }
        // The last kernel is a graph replay (launched at 950 inside the root only) of a node captured at 50.
        trace.kernels[4].graph_node_id = Some(0x200);
        trace.graph_nodes = vec![
            GraphNodeOrigin { process: p, node_id: 0x100, cloned_from: None, tid: 1, created_ns: 50 },
            GraphNodeOrigin { process: p, node_id: 0x200, cloned_from: Some(0x100), tid: 1, created_ns: 5000 },
        ];
        trace.finish();
        trace
    }

    /// Adds a launch call on thread 1 of process `p` at `launch_ns` and the kernel it launched on device `d`.
    fn add_launch(trace: &mut Trace, (p, d): (ProcessIdx, DeviceIdx), launch_ns: i64, start_ns: i64, duration_ns: i64) {
        let name = trace.names.intern("cudaLaunchKernel");
        let correlation_id = trace.kernels.len() as u32 + 1;
        let end_ns = launch_ns + 1;
        let call =
            ApiCall { start_ns: launch_ns, end_ns, name, process: p, tid: 1, correlation_id, ..ApiCall::default() };
        trace.api_calls.push(call);
        let end_ns = start_ns + duration_ns;
        let kernel = Kernel { start_ns, end_ns, device: d, process: p, correlation_id, ..Kernel::default() };
        trace.kernels.push(kernel);
    }

    fn report(depth: Option<usize>) -> ModuleReport {
        let phase_pattern = Regex::new(crate::llm::phases::DEFAULT_PHASE_PATTERN).unwrap();
        module_report(&[trace()], &ModuleOptions { depth, phase_pattern, window_ns: None, skip_steps: None })
    }

    fn times(report: &ModuleReport) -> Vec<(String, i64, u64)> {
        let phase = &report.ranks[0].phases[0];
        phase.rows.iter().map(|r| (r.path.clone(), r.gpu_ns, r.graph_kernels)).collect()
    }

    #[test]
    fn kernels_go_to_the_innermost_module_of_their_launch_or_graph_node() {
        let report = report(None);
        assert_eq!(report.ranks[0].phases[0].phase, "decode");
        assert_eq!(
            times(&report),
            [
                ("".to_string(), 40, 0),
                ("model.layers.0".to_string(), 20, 0),
                ("model.layers.0.q_proj".to_string(), 10 + 50, 1),
                ("model.layers.1".to_string(), 30, 0),
            ]
        );
        let rows = &report.ranks[0].phases[0].rows;
        assert_eq!(rows[2].layer, Some(0));
        assert_eq!(rows[2].within_layer, "q_proj");
        assert_eq!(rows[2].class, "Linear");
        assert!((rows.iter().map(|r| r.share).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    /// Eight decode steps, each with a layer range and one 10 ns kernel in it; the first step is 9× as long as the
    /// others and launches three more 50 ns kernels (a compiled program's first step: compilation, autotuning).
    fn steps_trace() -> Trace {
        let mut trace = Trace::default();
        let p = trace.add_process(Process { pid: 7, rank: Some(0), ..Process::default() });
        let d = trace.add_device(Device { process: Some(p), ..Device::default() });
        let (decode, layer) = (trace.names.intern("decode"), trace.names.intern("model.layers.0 (Layer)"));
        for step in 0..8i64 {
            let (start_ns, length_ns) = (step * 10_000, if step == 0 { 900 } else { 100 });
            for name in [decode, layer] {
                let end_ns = start_ns + length_ns;
                trace.ranges.push(Range { start_ns, end_ns, name, process: p, tid: 1, ..Range::default() });
            }
            let durations: &[i64] = if step == 0 { &[10, 50, 50, 50] } else { &[10] };
            for (i, &duration_ns) in durations.iter().enumerate() {
                let launch_ns = start_ns + 1 + i as i64;
                add_launch(&mut trace, (p, d), launch_ns, launch_ns + 5, duration_ns);
            }
        }
        trace.finish();
        trace
    }

    fn steps_report(skip_steps: Option<usize>) -> PhaseModules {
        let phase_pattern = Regex::new(crate::llm::phases::DEFAULT_PHASE_PATTERN).unwrap();
        let options = ModuleOptions { depth: None, phase_pattern, window_ns: None, skip_steps };
        module_report(&[steps_trace()], &options).ranks[0].phases[0].clone()
    }

    #[test]
    fn leading_warmup_instances_are_left_out_and_counted() {
        let detected = steps_report(None);
        assert_eq!((detected.instances, detected.gpu_ns, detected.rows[0].kernels), (7, 70, 7));
        assert_eq!((detected.warmup_instances, detected.warmup_gpu_ns, detected.warmup), (1, 160, "detected"));
        assert_eq!(detected.rows[0].per_step_ns, 10.0);
        assert!(
            table(&ModuleReport { depth: None, ranks: vec![RankModules { rank: 0, phases: vec![detected] }] })
                .contains("1 warm-up instance(s) left out (detected, 0.000 ms of kernels)")
        );
        let kept = steps_report(Some(0));
        assert_eq!((kept.instances, kept.gpu_ns, kept.warmup_instances, kept.warmup), (8, 230, 0, "none"));
        let given = steps_report(Some(3));
        assert_eq!((given.instances, given.gpu_ns, given.warmup_instances, given.warmup_gpu_ns), (5, 50, 3, 180));
        assert_eq!(given.warmup, "skip_steps");
        let all = steps_report(Some(100));
        assert_eq!((all.instances, all.gpu_ns, all.warmup_instances, all.rows.len()), (0, 0, 8, 0));
    }

    #[test]
    fn phase_ranges_with_extreme_times_are_measured_without_overflow() {
        let mut trace = steps_trace();
        // The first step's ranges span the whole clock (a damaged file): their length saturates.
        for range in trace.ranges.iter_mut().take(2) {
            (range.start_ns, range.end_ns) = (i64::MIN, i64::MAX);
        }
        let phase_pattern = Regex::new(crate::llm::phases::DEFAULT_PHASE_PATTERN).unwrap();
        let options = ModuleOptions { depth: None, phase_pattern, window_ns: None, skip_steps: None };
        let phase = &module_report(&[trace], &options).ranks[0].phases[0];
        assert_eq!((phase.instances + phase.warmup_instances, phase.warmup), (8, "detected"));
    }

    #[test]
    fn every_kernel_gets_its_innermost_module_path() {
        let modules = kernel_modules(&trace());
        let path = |i: usize| modules.of_kernel[i].map(|id| modules.paths[id as usize].as_str());
        // Launched at 30, 200, 450 and 900; the last one replays a node captured inside q_proj.
        let expected = [
            Some("model.layers.0.q_proj"),
            Some("model.layers.0"),
            Some("model.layers.1"),
            Some("(Model)"),
            Some("model.layers.0.q_proj"),
        ];
        assert_eq!((0..5).map(path).collect::<Vec<_>>(), expected);
        assert_eq!(modules.paths.len(), 4, "each path once: {:?}", modules.paths);
        // Without module ranges: nothing, and no per-kernel list.
        let mut plain = trace();
        plain.ranges.clear();
        plain.names = shardscope_model::Names::default();
        plain.names.intern("decode");
        assert_eq!(kernel_modules(&plain), KernelModules::default());
    }

    #[test]
    fn folding_by_depth_keeps_the_total() {
        let report = report(Some(3));
        assert_eq!(
            times(&report),
            [("".to_string(), 40, 0), ("model.layers.0".to_string(), 80, 1), ("model.layers.1".to_string(), 30, 0)]
        );
        let root_only = self::report(Some(0));
        assert_eq!(times(&root_only), [("".to_string(), 150, 1)]);
    }

    #[test]
    fn memory_deltas_and_peaks_come_from_entry_and_exit_readings() {
        let report = report(Some(3));
        let layer = &report.ranks[0].phases[0].rows[1];
        let memory = layer.memory.clone().expect("layer 0 recorded its counters");
        assert_eq!(memory.calls_measured, 1);
        assert_eq!(memory.allocated_delta_max_bytes, 200);
        assert_eq!(memory.peak_above_entry_max_bytes, 200);
        assert_eq!(memory.reserved_delta_max_bytes, 1000);
        assert!(report.ranks[0].phases[0].rows[2].memory.is_none(), "layer 1 recorded none");
    }

    #[test]
    fn kineto_module_ranges_make_paths_from_their_nesting() {
        let mut trace = Trace::default();
        let p = trace.add_process(Process::default());
        for (start_ns, end_ns, text) in [
            (0, 100, "nn.Module: Qwen3Model_0"),
            (10, 50, "nn.Module: Qwen3DecoderLayer_3"),
            (20, 30, "nn.Module: Linear_7"),
        ] {
            let name = trace.names.intern(text);
            trace.ranges.push(Range { start_ns, end_ns, name, process: p, tid: 1, ..Range::default() });
        }
        trace.finish();
        let index = ModuleIndex::build(&trace);
        let innermost = index.innermost_on(p, 1, 25).unwrap();
        let info = &index.info[&innermost];
        assert_eq!(info.path, "Qwen3Model_0.Qwen3DecoderLayer_3.Linear_7");
        assert_eq!((info.class.as_str(), info.depth), ("Linear", 2));
        assert_eq!(layer_of(&info.path), (Some(3), "Linear_7".to_string()));
        assert_eq!(layer_of("model.layers.12.mlp.down_proj"), (Some(12), "mlp.down_proj".to_string()));
        assert_eq!(layer_of("transformer.h.5.attn.c_attn"), (Some(5), "attn.c_attn".to_string()));
        assert_eq!(layer_of("GPT2Model_0.GPT2Block_5.GPT2Attention_5"), (Some(5), "GPT2Attention_5".to_string()));
        assert_eq!(layer_of("GPT2Model_0.Conv1D_3"), (None, "GPT2Model_0.Conv1D_3".to_string()));
        assert_eq!(layer_of("lm_head"), (None, "lm_head".to_string()));
    }

    #[test]
    fn hook_names_parse_and_others_do_not() {
        assert_eq!(parse_hook_name("(Qwen3ForCausalLM)"), Some((String::new(), "Qwen3ForCausalLM".into(), None)));
        let (path, class, counters) = parse_hook_name("model.layers.3.mlp (Qwen3MLP) mem=5,9").unwrap();
        assert_eq!((path.as_str(), class.as_str()), ("model.layers.3.mlp", "Qwen3MLP"));
        assert_eq!(counters, Some(Counters { allocated: 5, reserved: 9 }));
        assert_eq!(parse_hook_name("decode"), None);
        assert_eq!(parse_hook_name("aten::mm (something else)"), None);
    }
}
