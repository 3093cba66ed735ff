//! `analyzer modules` on real captures of a random-weight Qwen3 decoder (transformers, 4 layers, bf16) made with
//! `capture --torch-modules` on one H100 (`sample-traces/modules/`, made by `benchmarks/scripts/torch_modules_device.sh`):
//! eager decode with allocator counters (`qwen3_eager`), and `generate` with a static cache under torch.compile and
//! CUDA graphs (`qwen3_static`, made before the compiled code had module ranges), and the same with module ranges
//! in the compiled code, replayed from CUDA graphs (`qwen3_compiled_graphs`) and launched kernel by kernel
//! (`qwen3_compiled`); on one H200, an eager decode step with a static cache replayed from a CUDA graph
//! (`qwen3_eager_graph`) and the same step launched kernel by kernel (`qwen3_eager_graph_direct`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use shardscope_analyzer::llm::modules::{ModuleOptions, ModuleReport, PhaseModules, module_report};
use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
use shardscope_model::Trace;

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/modules").join(name)
}

fn load(name: &str) -> Vec<Trace> {
    shardscope_io::load(&sample(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn report(traces: &[Trace], depth: Option<usize>) -> ModuleReport {
    let phase_pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    module_report(traces, &ModuleOptions { depth, phase_pattern, window_ns: None, skip_steps: Some(0) })
}

/// Kernel time launched while each decoder layer's range was open, found from the ranges and launch calls alone.
fn time_launched_in_layers(trace: &Trace) -> BTreeMap<u32, i64> {
    let layer = Regex::new(r"^model\.layers\.(\d+) \(").unwrap();
    let layer_ranges: Vec<(u32, &shardscope_model::Range)> = trace
        .ranges
        .iter()
        .filter_map(|r| Some((layer.captures(trace.names.get(r.name))?[1].parse().ok()?, r)))
        .collect();
    let mut launched: BTreeMap<u32, i64> = BTreeMap::new();
    for kernel in &trace.kernels {
        let Some(call) = kernel.launch.map(|l| &trace.api_calls[l as usize]) else { continue };
        let open = layer_ranges.iter().find(|(_, r)| {
            r.process == call.process && r.tid == call.tid && r.start_ns <= call.start_ns && call.start_ns < r.end_ns
        });
        if let Some((number, _)) = open {
            *launched.entry(*number).or_default() += kernel.duration_ns();
        }
    }
    launched
}

#[test]
fn every_kernel_launched_in_a_decoder_layer_is_counted_in_that_layer() {
    let traces = load("qwen3_eager.sqlite.gz");
    let expected = time_launched_in_layers(&traces[0]);
    assert_eq!(expected.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    let mut counted: BTreeMap<u32, i64> = BTreeMap::new();
    for row in report(&traces, None).ranks.iter().flat_map(|r| &r.phases).flat_map(|p| &p.rows) {
        if let Some(layer) = row.layer {
            assert!(row.path.starts_with(&format!("model.layers.{layer}")), "{}", row.path);
            *counted.entry(layer).or_default() += row.gpu_ns;
        }
    }
    assert_eq!(counted, expected);
}

#[test]
fn folded_rows_add_up_to_the_rows_they_hold() {
    let traces = load("qwen3_eager.sqlite.gz");
    let (whole, folded) = (report(&traces, None), report(&traces, Some(3)));
    for (inner, outer) in whole.ranks[0].phases.iter().zip(&folded.ranks[0].phases) {
        assert_eq!(inner.phase, outer.phase);
        assert_eq!(inner.rows.iter().map(|r| r.gpu_ns).sum::<i64>(), inner.gpu_ns);
        assert_eq!(outer.rows.iter().map(|r| r.gpu_ns).sum::<i64>(), outer.gpu_ns);
        for row in &outer.rows {
            // A row at the folding depth holds its descendants; a shallower one only itself.
            let at_depth = !row.path.is_empty() && row.path != "(no module)" && row.path.split('.').count() == 3;
            let below: i64 = inner
                .rows
                .iter()
                .filter(|r| r.path == row.path || (at_depth && r.path.starts_with(&format!("{}.", row.path))))
                .map(|r| r.gpu_ns)
                .sum();
            assert_eq!(row.gpu_ns, below, "{} in {}", row.path, outer.phase);
        }
    }
}

#[test]
fn allocator_deltas_are_the_sizes_of_the_outputs_the_modules_keep() {
    // Decode: one token of bf16; hidden 1024, 8 kv heads of 64, MLP 3072, vocabulary 32000.
    let traces = load("qwen3_eager.sqlite.gz");
    let report = report(&traces, None);
    let decode = report.ranks[0].phases.iter().find(|p| p.phase == "decode").expect("decode phase");
    let expected = [
        ("lm_head", 32000 * 2),
        ("model.embed_tokens", 1024 * 2),
        ("model.layers.2.self_attn.q_proj", 1024 * 2),
        ("model.layers.2.self_attn.k_proj", 512 * 2),
        ("model.layers.2.self_attn.v_proj", 512 * 2),
        ("model.layers.2.mlp.gate_proj", 3072 * 2),
        ("model.layers.2.mlp.up_proj", 3072 * 2),
        ("model.layers.2.mlp.down_proj", 1024 * 2),
    ];
    for (path, bytes) in expected {
        let row = decode.rows.iter().find(|r| r.path == path).unwrap_or_else(|| panic!("{path} missing"));
        let memory = row.memory.as_ref().unwrap_or_else(|| panic!("{path}: no allocator figures"));
        assert_eq!(memory.calls_measured, row.calls, "{path}");
        assert_eq!(
            (memory.allocated_delta_max_bytes, memory.allocated_delta_mean_bytes),
            (bytes, bytes as f64),
            "{path}"
        );
    }
}

#[test]
fn graph_replayed_kernels_are_traced_back_to_their_node_capture() {
    let traces = load("qwen3_static.sqlite.gz");
    let from_graphs = traces[0].kernels.iter().filter(|k| k.graph_node_id.is_some()).count() as u64;
    assert!(from_graphs > 1000, "{from_graphs}");
    assert!(!traces[0].graph_nodes.is_empty());
    let report = report(&traces, None);
    let rows = report.ranks.iter().flat_map(|r| &r.phases).flat_map(|p| &p.rows);
    // Every replayed kernel's node leads back through its clone to where it was captured; torch.compile's
    // decode graph was captured with no module range open, so they count as outside modules.
    let (traced, outside): (u64, u64) = rows
        .fold((0, 0), |(t, o), r| (t + r.graph_kernels, o + if r.path == "(no module)" { r.graph_kernels } else { 0 }));
    assert_eq!(traced, from_graphs);
    assert_eq!(outside, from_graphs);
}

/// Each part's share of the decode phase's decoder-layer time: the projections (`*_proj`), the norms, the rest of
/// the MLP, the rest of attention and the layer's own kernels, read from the path below the layer.
fn layer_split(report: &ModuleReport) -> BTreeMap<&'static str, f64> {
    let decode = report.ranks[0].phases.iter().find(|p| p.phase == "decode").expect("a decode phase");
    let mut parts: BTreeMap<&'static str, i64> = BTreeMap::new();
    for row in decode.rows.iter().filter(|r| r.layer.is_some()) {
        let last = row.within_layer.rsplit('.').next().unwrap_or_default();
        let part = match last {
            _ if last.ends_with("_proj") => "projections",
            _ if last.contains("norm") => "norms",
            _ if row.within_layer.starts_with("mlp") => "mlp",
            _ if row.within_layer.starts_with("self_attn") => "attention",
            _ => "layer",
        };
        *parts.entry(part).or_default() += row.gpu_ns;
    }
    let total: i64 = parts.values().sum();
    assert!(total > 0, "no decoder-layer time in decode");
    parts.into_iter().map(|(part, ns)| (part, ns as f64 / total as f64)).collect()
}

/// The module reports (default options) of a capture replayed from graphs and one of the same program launched.
fn replayed_and_launched(replayed: &str, launched: &str) -> (ModuleReport, ModuleReport) {
    let phase_pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    let options = ModuleOptions { depth: None, phase_pattern, window_ns: None, skip_steps: None };
    (module_report(&load(replayed), &options), module_report(&load(launched), &options))
}

/// The decoder layers' rows of `decode` hold `replays` kernels, every one replayed from a graph, in layers 0–3.
fn assert_layer_kernels_all_replayed(decode: &PhaseModules, replays: u64) {
    let in_layers: Vec<_> = decode.rows.iter().filter(|r| r.layer.is_some()).collect();
    assert_eq!(in_layers.iter().map(|r| r.graph_kernels).sum::<u64>(), replays);
    assert!(in_layers.iter().all(|r| r.graph_kernels == r.kernels), "a layer kernel not from a graph");
    let layers: std::collections::BTreeSet<_> = in_layers.iter().filter_map(|r| r.layer).collect();
    assert_eq!(layers.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
}

/// Every part's share of decoder-layer time in `replayed` within `max_pp` percentage points of `launched`.
fn assert_same_split(replayed: &BTreeMap<&str, f64>, launched: &BTreeMap<&str, f64>, max_pp: f64) {
    assert_eq!(replayed.keys().collect::<Vec<_>>(), launched.keys().collect::<Vec<_>>());
    for (part, share) in replayed {
        let gap_pp = (share - launched[part]).abs() * 100.0;
        assert!(gap_pp < max_pp, "{part}: {share:.4} replayed against {:.4} launched", launched[part]);
    }
}

#[test]
fn eager_decode_step_replayed_from_a_graph_splits_as_the_same_step_launched_kernel_by_kernel() {
    let (graph, direct) = replayed_and_launched("qwen3_eager_graph.sqlite.gz", "qwen3_eager_graph_direct.sqlite.gz");
    let decode = graph.ranks[0].phases.iter().find(|p| p.phase == "decode").unwrap();
    assert_eq!((decode.instances, decode.warmup_instances), (63, 1));
    // Every kernel of a decoder layer in the steady steps is a replay of a node captured while the eager model's
    // module ranges were open, and is attributed through that capture.
    assert_layer_kernels_all_replayed(decode, 63 * 260);
    let launched = direct.ranks[0].phases.iter().find(|p| p.phase == "decode").unwrap();
    assert!(launched.rows.iter().all(|r| r.graph_kernels == 0));
    assert_same_split(&layer_split(&graph), &layer_split(&direct), 2.0);
}

#[test]
fn compiled_decode_replayed_from_graphs_splits_as_the_same_code_launched_kernel_by_kernel() {
    let (graphs, kernels) = replayed_and_launched("qwen3_compiled_graphs.sqlite.gz", "qwen3_compiled.sqlite.gz");
    let decode = graphs.ranks[0].phases.iter().find(|p| p.phase == "decode").unwrap();
    // The first decode step compiled, autotuned (its benchmark kernels inside the first layer's modules) and
    // captured the graphs: detected by its length and left out.
    assert_eq!((decode.instances, decode.warmup_instances, decode.warmup), (62, 2, "detected"));
    assert!(decode.warmup_gpu_ns > decode.gpu_ns, "{} vs {}", decode.warmup_gpu_ns, decode.gpu_ns);
    // Every kernel of a decoder layer is a replay, attributed through its node's capture in the compiled code.
    assert_layer_kernels_all_replayed(decode, 4200);
    let replayed = layer_split(&graphs);
    assert_same_split(&replayed, &layer_split(&kernels), 1.0);
    // Without the warm-up left out, the first layer's attention holds the compile step's autotuning.
    let phase_pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    let whole = ModuleOptions { depth: None, phase_pattern, window_ns: None, skip_steps: Some(0) };
    let whole = module_report(&load("qwen3_compiled_graphs.sqlite.gz"), &whole);
    assert!(layer_split(&whole)["attention"] > replayed["attention"] + 0.2);
}
