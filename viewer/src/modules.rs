//! Which module of the model a GPU's kernels ran in, as stacked rows of labelled spans under the GPU, one row per
//! nesting depth: the layer (`model.layers.0`), the module below it (`self_attn`), the one below that (`q_proj`), …
//!
//! Every kernel gets the module the analyzer attributes it to ([`shardscope_analyzer::llm::modules::kernel_modules`],
//! what `analyzer modules` counts: the innermost module range open on its launching thread when the launch began,
//! or where its graph node was captured). The first row keeps a path's parts up to the layer part, found from the
//! first path in a layer (`model.layers.0`; Kineto's `…Qwen3Model_0.Qwen3DecoderLayer_0`); without layers one part
//! (`model`, `lm_head`); shorter paths stay whole there. Each further row keeps one part more, and shows only the
//! kernels whose path is that deep (a layer's own kernels, such as its residual adds, leave the rows below the
//! layer blank). Consecutive kernels of one process on one GPU (in start order) with the same cut path make one
//! span, from the first start to the latest end; a kernel outside every module (or not that deep) ends a span and is
//! left blank. So a span lies inside the span of the row above that holds its kernels: the rows nest.

use std::collections::HashMap;

use shardscope_analyzer::llm::modules::{kernel_modules, layer_of};
use shardscope_model::{DeviceIdx, ProcessIdx, Trace};

/// Path parts the first row keeps when no path is in a layer.
const DEPTH_WITHOUT_LAYERS: usize = 1;
/// Most rows a GPU's modules get: the first and up to three nesting levels below it.
pub const MAX_LEVELS: usize = 4;

/// A run of consecutive kernels in one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleSpan {
    /// First kernel's start, ns.
    pub start_ns: i64,
    /// Latest end among its kernels, ns.
    pub end_ns: i64,
    /// Process of the kernels.
    pub process: ProcessIdx,
    /// GPU of the kernels.
    pub device: DeviceIdx,
    /// Index in [`ModuleSpans::paths`].
    pub path: u32,
    /// Kernels in the run.
    pub kernels: u32,
    /// Index in [`Trace::kernels`] of its first kernel.
    pub first_kernel: u32,
    /// Its row: 0 for the layer row, one more per nesting level (index in [`ModuleSpans::depths`]).
    pub level: u16,
}

/// The module spans of one trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleSpans {
    /// Cut paths, each once.
    pub paths: Vec<String>,
    /// Per path, the text on its spans: the path on the first row, its last part on the rows below (the row above
    /// names the rest).
    pub labels: Vec<String>,
    /// Per path, what picks its colour: the path below the layer (`self_attn`, `self_attn.q_proj`), so that a module
    /// looks the same in every layer.
    pub color_keys: Vec<String>,
    /// Per row, the path parts it keeps (non-decreasing; one more per row).
    pub depths: Vec<usize>,
    /// The spans, row by row, each row in order of its first kernel.
    pub spans: Vec<ModuleSpan>,
}

/// The parts of a module path; a root module, shown as its class in parentheses, has none.
fn parts(path: &str) -> usize {
    if path.is_empty() || path.starts_with('(') { 0 } else { path.split('.').count() }
}

/// How many path parts the first row keeps: up to the layer part of the first path in a layer.
pub fn layer_depth<'a>(paths: impl IntoIterator<Item = &'a str>) -> usize {
    for path in paths {
        if let (Some(_), below) = layer_of(path) {
            // The layer part is the last one above `below`.
            return parts(path) - parts(&below);
        }
    }
    DEPTH_WITHOUT_LAYERS
}

/// The path parts each row keeps: the layer depth, then one more per row down to the deepest path, at most
/// [`MAX_LEVELS`] rows.
pub fn level_depths(paths: &[String]) -> Vec<usize> {
    let first = layer_depth(paths.iter().map(String::as_str));
    let deepest = paths.iter().map(|p| parts(p)).max().unwrap_or(0).max(first);
    (first..=deepest).take(MAX_LEVELS).collect()
}

/// `path` cut to its first `depth` parts.
pub fn folded(path: &str, depth: usize) -> &str {
    match path.match_indices('.').nth(depth.saturating_sub(1)) {
        Some((cut, _)) if depth > 0 => &path[..cut],
        _ => path,
    }
}

impl ModuleSpans {
    /// The spans of `trace`; empty when it has no module ranges.
    pub fn of_trace(trace: &Trace) -> ModuleSpans {
        let modules = kernel_modules(trace);
        if modules.of_kernel.is_empty() {
            return ModuleSpans::default();
        }
        let depths = level_depths(&modules.paths);
        let mut out = ModuleSpans { depths: depths.clone(), ..ModuleSpans::default() };
        let mut ids: HashMap<String, u32> = HashMap::new();
        for (level, &depth) in depths.iter().enumerate() {
            // Per path of the analyzer's list: its cut path on this row, none when it is not that deep.
            let cut: Vec<Option<u32>> = modules
                .paths
                .iter()
                .map(|path| {
                    (level == 0 || parts(path) >= depth).then(|| out.path_id(&mut ids, folded(path, depth), level))
                })
                .collect();
            out.add_runs(trace, &modules.of_kernel, &cut, level as u16);
        }
        out
    }

    /// The id of a cut path, added on first sight with its label and colour key.
    fn path_id(&mut self, ids: &mut HashMap<String, u32>, path: &str, level: usize) -> u32 {
        if let Some(&id) = ids.get(path) {
            return id;
        }
        self.paths.push(path.to_string());
        let label = if level == 0 { path } else { path.rsplit('.').next().unwrap_or(path) };
        self.labels.push(label.to_string());
        let (layer, below) = layer_of(path);
        self.color_keys.push(match layer {
            Some(_) if below.is_empty() => "layer".to_string(),
            _ => below,
        });
        let id = self.paths.len() as u32 - 1;
        ids.insert(path.to_string(), id);
        id
    }

    /// The spans of one row: runs of consecutive kernels (per process and GPU) with the same cut path.
    fn add_runs(&mut self, trace: &Trace, of_kernel: &[Option<u32>], cut: &[Option<u32>], level: u16) {
        // The span still growing on each (process, GPU).
        let mut open: HashMap<(ProcessIdx, DeviceIdx), usize> = HashMap::new();
        for (index, (kernel, module)) in trace.kernels.iter().zip(of_kernel).enumerate() {
            let key = (kernel.process, kernel.device);
            let Some(path) = module.and_then(|m| cut.get(m as usize).copied().flatten()) else {
                open.remove(&key);
                continue;
            };
            match open.get(&key).map(|&s| &mut self.spans[s]) {
                Some(span) if span.path == path => {
                    span.end_ns = span.end_ns.max(kernel.end_ns);
                    span.kernels += 1;
                }
                _ => {
                    open.insert(key, self.spans.len());
                    self.spans.push(ModuleSpan {
                        start_ns: kernel.start_ns,
                        end_ns: kernel.end_ns.max(kernel.start_ns),
                        process: kernel.process,
                        device: kernel.device,
                        path,
                        kernels: 1,
                        first_kernel: index as u32,
                        level,
                    });
                }
            }
        }
    }

    /// The cut path of a span.
    pub fn path_of(&self, span: &ModuleSpan) -> &str {
        self.paths.get(span.path as usize).map_or("", String::as_str)
    }

    /// The text on a span.
    pub fn label_of(&self, span: &ModuleSpan) -> &str {
        self.labels.get(span.path as usize).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{ApiCall, Device, Kernel, Process, Range};

    #[test]
    fn rows_start_at_the_layer_and_go_one_part_deeper_each() {
        assert_eq!(layer_depth(["lm_head", "model.layers.0.self_attn.q_proj"]), 3);
        assert_eq!(layer_depth(["Qwen3ForCausalLM_0.Qwen3Model_0.Qwen3DecoderLayer_2.Qwen3MLP_2.Linear_5"]), 3);
        assert_eq!(layer_depth(["encoder.conv", "head"]), DEPTH_WITHOUT_LAYERS);
        let paths = |list: &[&str]| list.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(level_depths(&paths(&["(Model)", "lm_head", "model.layers.0.self_attn.q_proj"])), [3, 4, 5]);
        assert_eq!(level_depths(&paths(&["model.layers.0"])), [3]);
        assert_eq!(level_depths(&paths(&["a.layers.0.b.c.d.e.f"])), [3, 4, 5, 6], "at most four rows");
        assert_eq!(level_depths(&paths(&["encoder.conv", "head"])), [1, 2]);
        assert_eq!(folded("model.layers.0.self_attn.q_proj", 4), "model.layers.0.self_attn");
        assert_eq!(folded("model.layers.0", 4), "model.layers.0");
        assert_eq!(folded("(Qwen3Model)", 4), "(Qwen3Model)");
        assert_eq!(folded("a.b.c", 1), "a");
    }

    /// Six kernels launched inside q_proj, k_proj (both attention), outside every module, the layer's MLP, the MLP
    /// again on another GPU, and lm_head: three rows (layer, module, projection) of runs.
    #[test]
    fn consecutive_kernels_of_one_module_make_one_span() {
        let mut trace = Trace::default();
        let p = trace.add_process(Process { pid: 3, ..Process::default() });
        let gpu0 = trace.add_device(Device::default());
        let gpu1 = trace.add_device(Device { ordinal: 1, ..Device::default() });
        for (start_ns, end_ns, text) in [
            (0, 1000, "(Model)"),
            (10, 500, "model.layers.0 (Layer)"),
            (10, 200, "model.layers.0.self_attn (Attention)"),
            (10, 100, "model.layers.0.self_attn.q_proj (Linear)"),
            (100, 200, "model.layers.0.self_attn.k_proj (Linear)"),
            (300, 500, "model.layers.0.mlp (MLP)"),
            (600, 700, "lm_head (Linear)"),
        ] {
            let name = trace.names.intern(text);
            trace.ranges.push(Range { start_ns, end_ns, name, process: p, tid: 1, ..Range::default() });
        }
        let launch = trace.names.intern("cudaLaunchKernel");
        // (launch time, GPU); kernels run 10 µs later, 5 µs each, one after another.
        let launches = [(50, gpu0), (150, gpu0), (1500, gpu0), (350, gpu0), (360, gpu1), (650, gpu0)];
        for (i, (launch_ns, device)) in launches.into_iter().enumerate() {
            let correlation_id = i as u32 + 1;
            trace.api_calls.push(ApiCall {
                start_ns: launch_ns,
                end_ns: launch_ns + 1,
                name: launch,
                process: p,
                tid: 1,
                correlation_id,
                ..ApiCall::default()
            });
            let start_ns = 10_000 + 5_000 * i as i64;
            trace.kernels.push(Kernel {
                start_ns,
                end_ns: start_ns + 4_000,
                device,
                process: p,
                correlation_id,
                ..Kernel::default()
            });
        }
        trace.finish();
        let spans = ModuleSpans::of_trace(&trace);
        assert_eq!(spans.depths, [3, 4, 5]);
        let row = |level: u16| -> Vec<(&str, &str, i64, i64, u32, u32)> {
            spans
                .spans
                .iter()
                .filter(|s| s.level == level)
                .map(|s| (spans.path_of(s), spans.label_of(s), s.start_ns, s.end_ns, s.device.0, s.kernels))
                .collect()
        };
        // The layer: its first two kernels and, after the one outside every module, the MLP's on GPU 0; GPU 1's
        // apart; lm_head is shorter than the layer depth and stays whole.
        assert_eq!(
            row(0),
            [
                ("model.layers.0", "model.layers.0", 10_000, 19_000, 0, 2),
                ("model.layers.0", "model.layers.0", 25_000, 29_000, 0, 1),
                ("model.layers.0", "model.layers.0", 30_000, 34_000, 1, 1),
                ("lm_head", "lm_head", 35_000, 39_000, 0, 1),
            ]
        );
        // One part below: attention's two kernels are one span, the MLP's kernels on two GPUs two.
        assert_eq!(
            row(1),
            [
                ("model.layers.0.self_attn", "self_attn", 10_000, 19_000, 0, 2),
                ("model.layers.0.mlp", "mlp", 25_000, 29_000, 0, 1),
                ("model.layers.0.mlp", "mlp", 30_000, 34_000, 1, 1),
            ]
        );
        // Two parts below: q_proj and k_proj apart, inside the attention span above them.
        assert_eq!(
            row(2),
            [
                ("model.layers.0.self_attn.q_proj", "q_proj", 10_000, 14_000, 0, 1),
                ("model.layers.0.self_attn.k_proj", "k_proj", 15_000, 19_000, 0, 1),
            ]
        );
        assert_eq!(spans.spans.iter().find(|s| s.level == 1 && s.kernels == 1).unwrap().first_kernel, 3);
        let key = |path: &str| &spans.color_keys[spans.paths.iter().position(|p| p == path).unwrap()];
        assert_eq!(key("model.layers.0.self_attn"), "self_attn");
        assert_eq!(key("model.layers.0.self_attn.q_proj"), "self_attn.q_proj");
        assert_eq!(key("model.layers.0"), "layer");
        assert_eq!(key("lm_head"), "lm_head");
        // A trace without module ranges has none.
        let mut plain = Trace { kernels: trace.kernels.clone(), ..Trace::default() };
        plain.finish();
        assert_eq!(ModuleSpans::of_trace(&plain), ModuleSpans::default());
    }
}
