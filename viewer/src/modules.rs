//! Which module of the model a GPU's kernels ran in, as a row of labelled spans under the GPU.
//!
//! Every kernel gets the module the analyzer attributes it to ([`shardscope_analyzer::llm::modules::kernel_modules`],
//! what `analyzer modules` counts: the innermost module range open on its launching thread when the launch began,
//! or where its graph node was captured). Paths are folded to the row's depth: one part below the layer
//! (`model.layers.0.self_attn`, `model.layers.0.mlp`; Kineto's `…Qwen3DecoderLayer_0.Qwen3Attention_0`), found
//! from the first path in a layer; without layers, two parts (`model.embed_tokens`). Consecutive kernels of one
//! process on one GPU (in start order) with the same folded path make one span, from the first start to the
//! latest end; a kernel outside every module ends a span and is left blank.

use std::collections::HashMap;

use shardscope_analyzer::llm::modules::{kernel_modules, layer_of};
use shardscope_model::{DeviceIdx, ProcessIdx, Trace};

/// Path parts a row keeps when no path is in a layer.
const DEPTH_WITHOUT_LAYERS: usize = 2;

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
}

/// The module spans of one trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleSpans {
    /// Folded paths, each once.
    pub paths: Vec<String>,
    /// Per path, what picks its colour: the path below the layer (`self_attn`), so that a module looks the same in
    /// every layer.
    pub color_keys: Vec<String>,
    /// The spans, in order of their first kernel.
    pub spans: Vec<ModuleSpan>,
}

/// How many path parts the rows keep: one below the layer part of the first path in a layer.
pub fn row_depth<'a>(paths: impl IntoIterator<Item = &'a str>) -> usize {
    for path in paths {
        if let (Some(_), below) = layer_of(path) {
            let parts = path.split('.').count();
            let below_parts = if below.is_empty() { 0 } else { below.split('.').count() };
            // The layer part is `parts - below_parts - 1`; keep it and one part more.
            return parts - below_parts + 1;
        }
    }
    DEPTH_WITHOUT_LAYERS
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
        let depth = row_depth(modules.paths.iter().map(String::as_str));
        let mut out = ModuleSpans::default();
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let folded_id: Vec<u32> = modules
            .paths
            .iter()
            .map(|path| {
                let path = folded(path, depth);
                *ids.entry(path).or_insert_with(|| {
                    out.paths.push(path.to_string());
                    let (layer, below) = layer_of(path);
                    out.color_keys.push(match layer {
                        Some(_) if below.is_empty() => "layer".to_string(),
                        _ => below,
                    });
                    out.paths.len() as u32 - 1
                })
            })
            .collect();
        // The span still growing on each (process, GPU).
        let mut open: HashMap<(ProcessIdx, DeviceIdx), usize> = HashMap::new();
        for (index, (kernel, module)) in trace.kernels.iter().zip(&modules.of_kernel).enumerate() {
            let key = (kernel.process, kernel.device);
            let Some(path) = module.map(|m| folded_id[m as usize]) else {
                open.remove(&key);
                continue;
            };
            match open.get(&key).map(|&s| &mut out.spans[s]) {
                Some(span) if span.path == path => {
                    span.end_ns = span.end_ns.max(kernel.end_ns);
                    span.kernels += 1;
                }
                _ => {
                    open.insert(key, out.spans.len());
                    out.spans.push(ModuleSpan {
                        start_ns: kernel.start_ns,
                        end_ns: kernel.end_ns.max(kernel.start_ns),
                        process: kernel.process,
                        device: kernel.device,
                        path,
                        kernels: 1,
                        first_kernel: index as u32,
                    });
                }
            }
        }
        out
    }

    /// The folded path of a span.
    pub fn path_of(&self, span: &ModuleSpan) -> &str {
        self.paths.get(span.path as usize).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{ApiCall, Device, Kernel, Process, Range};

    #[test]
    fn rows_keep_one_part_below_the_layer() {
        assert_eq!(row_depth(["lm_head", "model.layers.0.self_attn.q_proj"]), 4);
        assert_eq!(row_depth(["Qwen3ForCausalLM_0.Qwen3Model_0.Qwen3DecoderLayer_2.Qwen3MLP_2.Linear_5"]), 4);
        assert_eq!(row_depth(["encoder.conv", "head"]), DEPTH_WITHOUT_LAYERS);
        assert_eq!(folded("model.layers.0.self_attn.q_proj", 4), "model.layers.0.self_attn");
        assert_eq!(folded("model.layers.0", 4), "model.layers.0");
        assert_eq!(folded("(Qwen3Model)", 4), "(Qwen3Model)");
        assert_eq!(folded("a.b.c", 1), "a");
    }

    /// Six kernels launched inside q_proj, k_proj (both attention), outside every module, the layer's MLP, the MLP
    /// again on another GPU, and lm_head: attention's two kernels are one span, the MLP's kernels on two GPUs two.
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
        let shown: Vec<(&str, i64, i64, u32, u32)> =
            spans.spans.iter().map(|s| (spans.path_of(s), s.start_ns, s.end_ns, s.device.0, s.kernels)).collect();
        assert_eq!(
            shown,
            [
                ("model.layers.0.self_attn", 10_000, 19_000, 0, 2),
                ("model.layers.0.mlp", 25_000, 29_000, 0, 1),
                ("model.layers.0.mlp", 30_000, 34_000, 1, 1),
                ("lm_head", 35_000, 39_000, 0, 1),
            ]
        );
        assert_eq!(spans.spans[1].first_kernel, 3);
        let key = |path: &str| &spans.color_keys[spans.paths.iter().position(|p| p == path).unwrap()];
        assert_eq!(key("model.layers.0.self_attn"), "self_attn");
        assert_eq!(key("lm_head"), "lm_head");
        // A trace without module ranges has none.
        let mut plain = Trace { kernels: trace.kernels.clone(), ..Trace::default() };
        plain.finish();
        assert_eq!(ModuleSpans::of_trace(&plain), ModuleSpans::default());
    }
}
