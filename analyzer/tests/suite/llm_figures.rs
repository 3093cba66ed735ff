//! LLM figures on the bundled real traces of the reference workload: model FLOPs utilisation never above the
//! measured GEMM peak (and a property test over random shapes and times), the instance times after the warm-up,
//! and the layers of each step found in the kernel sequence.

use crate::common;

use std::path::Path;

use common::repo_root;
use proptest::prelude::*;
use regex::Regex;
use shardscope_analyzer::figures::categories::Classifier;
use shardscope_analyzer::llm::layers;
use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
use shardscope_analyzer::report::mfu::{self, ModelShape, Tokens};
use shardscope_analyzer::report::{self, Options};

const BENCH: &str = "bench/results/h200x2.json";

/// The reference workload's shape (`tp_llm.py`: hidden 4096, ffn 11008, 32 heads) with `layers`.
fn shape(layers: u32) -> ModelShape {
    ModelShape::parse(&format!("layers={layers},hidden=4096,ffn=11008,heads=32,dtype=bf16")).unwrap()
}

/// The sample traces with the configuration they were recorded with (`sample-traces/README.md`): layers, tokens,
/// instances of the untimed first pass in the trace (1 prefill + DECODE decode steps).
fn samples() -> Vec<(&'static str, u32, Tokens, usize)> {
    let small = Tokens::parse("batch=2,seq=256,decode_steps=8").unwrap();
    let full = Tokens::parse("batch=4,seq=1024,decode_steps=32").unwrap();
    vec![
        ("sample-traces/tp1_nsys.sqlite.gz", 2, small, 9),
        ("sample-traces/tp2_nsys.sqlite.gz", 2, small, 9),
        ("sample-traces/tp1_capture.sqlite.gz", 2, small, 9),
        ("sample-traces/tp2_capture.sqlite.gz", 2, small, 9),
        ("sample-traces/tp2_skew_capture.sqlite.gz", 2, small, 9),
        // The profiler recorded the timed pass only: no warm-up in it.
        ("sample-traces/kineto_tp2", 2, small, 0),
        ("sample-traces/tp2_full_capture.sqlite.gz", 8, full, 33),
    ]
}

fn load(relative: &str) -> Vec<shardscope_model::Trace> {
    shardscope_io::load(&repo_root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

#[test]
fn mfu_of_every_sample_trace_is_below_the_measured_gemm_peak() {
    let bench = repo_root().join(BENCH);
    let pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    for (file, layer_count, tokens, warmup) in samples() {
        let traces = load(file);
        let report = report::analyze(&traces, &Options::default());
        let shape = shape(layer_count);
        let peak = mfu::peak(Some(Path::new(&bench)), &shape, "datasheet").unwrap().expect("bench has a bf16 GEMM");
        assert_eq!(peak.kind, "bench");
        // With the instance times of the report (warm-up included), and after the warm-up as a study takes them.
        let ranks = layers::instances(&traces, &Classifier::builtin(), &pattern, None);
        let after_warmup = layers::latencies(&ranks, warmup).into_iter().map(|l| (l.phase, l.time.p50_ns)).collect();
        let mut phases = mfu::phase_mfu(&report, &shape, &tokens, Some(&peak), &Default::default());
        phases.extend(mfu::phase_mfu(&report, &shape, &tokens, Some(&peak), &after_warmup));
        let names: Vec<&str> = phases.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(names, ["prefill", "decode", "prefill", "decode"], "{file}");
        for phase in &phases {
            assert_eq!(phase.inconsistent, None, "{file} {}", phase.phase);
            let pct = phase.mfu_pct.expect("a figure");
            assert!(pct > 0.0 && pct <= 100.0, "{file} {}: {pct} %", phase.phase);
            assert!(phase.busy_tflops_per_gpu.unwrap() <= peak.tflops, "{file} {}", phase.phase);
            assert!(phase.attention_counted);
        }
    }
}

#[test]
fn a_shape_that_claims_too_many_flops_is_called_inconsistent() {
    let traces = load("sample-traces/tp2_full_capture.sqlite.gz");
    let report = report::analyze(&traces, &Options::default());
    // 100 × the real model: no GPU does that.
    let mut too_big = shape(8);
    too_big.parameters = Some(100.0 * too_big.weights().unwrap());
    let peak = mfu::peak(Some(&repo_root().join(BENCH)), &too_big, "datasheet").unwrap().unwrap();
    let tokens = Tokens::parse("batch=4,seq=1024,decode_steps=32").unwrap();
    let prefill =
        mfu::phase_mfu(&report, &too_big, &tokens, Some(&peak), &Default::default()).into_iter().next().unwrap();
    assert_eq!(prefill.mfu_pct, None);
    assert!(prefill.inconsistent.unwrap().contains("do not describe this run"));
}

proptest! {
    /// Whatever the shape, token counts and measured times, a reported MFU is at most 100 %, and a refused one is
    /// one that would have been above (or whose busy-time throughput is above the peak).
    #[test]
    fn utilisation_is_never_above_the_peak(
        layers in 1u32..200,
        hidden in 1u32..20_000,
        ffn in 1u32..60_000,
        batch in 1u32..512,
        seq in 1u32..200_000,
        gpus in 1u32..16,
        time_ns in 1i64..10_000_000_000,
        busy_fraction in 0.0f64..1.0,
        peak_tflops in 1.0f64..3000.0,
    ) {
        let shape = ModelShape::parse(&format!("layers={layers},hidden={hidden},ffn={ffn}")).unwrap();
        let tokens = Tokens::parse(&format!("batch={batch},seq={seq},decode_steps=16")).unwrap();
        for phase in ["prefill", "decode"] {
            let (count, context) = tokens.of_phase(phase).unwrap();
            let flops = count * shape.flops_per_token(context).unwrap().0;
            let achieved = flops / (time_ns as f64 * 1e-9) / 1e12;
            let busy_ns = (time_ns as f64 * busy_fraction).max(1.0);
            let busy = flops / (busy_ns * 1e-9) / 1e12 / f64::from(gpus);
            match mfu::utilisation(achieved, gpus, Some(busy), peak_tflops) {
                Ok(pct) => {
                    prop_assert!((0.0..=100.0).contains(&pct), "{pct}");
                    prop_assert!((pct - 100.0 * achieved / (peak_tflops * f64::from(gpus))).abs() < 1e-9 * pct.max(1.0));
                }
                Err(_) => prop_assert!(achieved > peak_tflops * f64::from(gpus) || busy > peak_tflops),
            }
        }
    }
}

#[test]
fn the_reference_workload_has_8_layers_per_step_found_in_its_kernels() {
    let traces = load("sample-traces/tp2_full_capture.sqlite.gz");
    let pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    let ranks = layers::instances(&traces, &Classifier::builtin(), &pattern, None);
    let tables = layers::phase_layers(&ranks, 33);
    assert_eq!(tables.iter().map(|t| t.phase.as_str()).collect::<Vec<_>>(), ["prefill", "decode"]);
    for table in &tables {
        assert_eq!((table.source, table.layers), ("inferred", 8), "{}", table.phase);
        assert_eq!(table.outside_ns, 0, "tp_llm.py launches nothing but its layers in a phase");
        assert!(table.instances >= 2 * 3, "{}: {} instances", table.phase, table.instances);
        assert!(table.ops.iter().any(|o| o == "gemm") && table.ops.iter().any(|o| o == "comm.all_reduce"));
        // The layers are identical: each one's GEMM time is within 5 % of their mean.
        let gemm = table.ops.iter().position(|o| o == "gemm").unwrap();
        let mean = table.time_ns.iter().map(|row| row[gemm]).sum::<i64>() as f64 / 8.0;
        for row in &table.time_ns {
            assert!((row[gemm] as f64 - mean).abs() < 0.05 * mean, "{}: {row:?}", table.phase);
        }
    }
    // Prefill: norm, QKV, attention, output projection, all-reduce, …: 13 kernels; decode adds the KV-cache
    // concatenations and more: 17.
    assert_eq!(tables[0].kernels_per_layer, Some(13));
    assert_eq!(tables[1].kernels_per_layer, Some(17));
}

/// With nothing skipped, the instance times are the report's, and the layers' kernel time adds up to the phase's.
#[test]
fn instances_and_layers_agree_with_the_report() {
    let pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    for (file, layer_count, _, warmup) in samples() {
        let traces = load(file);
        let report = report::analyze(&traces, &Options::default());
        let ranks = layers::instances(&traces, &Classifier::builtin(), &pattern, None);
        if ranks.is_empty() {
            // Kineto does not record NVTX: the report inferred the phases, and instances are of recorded ranges only.
            assert!(report.ranks.iter().all(|r| r.phase_source == Some("inferred")), "{file}");
            continue;
        }
        for latency in layers::latencies(&ranks, 0) {
            let slowest = report
                .ranks
                .iter()
                .filter_map(|r| r.phases.iter().find(|p| p.name == latency.phase)?.figures.instances.clone())
                .max_by_key(|d| d.p50_ns)
                .unwrap();
            assert_eq!(latency.time, slowest, "{file} {}", latency.phase);
            assert_eq!(latency.skipped, 0);
        }
        let kept = layers::latencies(&ranks, warmup);
        let prefill = kept.iter().find(|l| l.phase == "prefill").unwrap_or_else(|| panic!("{file}: {kept:?}"));
        assert_eq!(prefill.skipped, usize::from(warmup > 0), "{file}: the untimed first pass's prefill is warm-up");
        for table in layers::phase_layers(&ranks, 0) {
            assert_eq!(table.layers, layer_count as usize, "{file} {}", table.phase);
            if table.instances_left_out > 0 {
                continue;
            }
            let gemm = table.ops.iter().position(|o| o == "gemm").unwrap();
            let per_instance: i64 = table.time_ns.iter().map(|row| row[gemm]).sum();
            let summed: i64 = report
                .ranks
                .iter()
                .filter_map(|r| r.phases.iter().find(|p| p.name == table.phase)?.figures.categories.get("gemm"))
                .sum();
            let expected = summed as f64 / table.instances as f64;
            // Means are whole nanoseconds per cell.
            assert!(
                (per_instance as f64 - expected).abs() <= 8.0 + 1e-6 * expected,
                "{file} {}: {per_instance} vs {expected}",
                table.phase
            );
        }
    }
}

/// Layer ranges recorded around each layer's launches (NVTX `model.layers.N` added to a real nsys export at the
/// boundaries the kernel sequence gives) split the instances exactly as the inferred period does.
#[test]
fn recorded_layer_ranges_split_the_instances_as_the_kernel_sequence_does() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    let gz = std::fs::File::open(repo_root().join("sample-traces/tp1_nsys.sqlite.gz")).unwrap();
    flate2::read::GzDecoder::new(gz).read_to_end(&mut bytes).unwrap();
    let file = dir.path().join("layers.sqlite");
    std::fs::write(&file, &bytes).unwrap();
    let db = rusqlite::Connection::open(&file).unwrap();
    let phases: Vec<(i64, i64, i64)> = db
        .prepare("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text IN ('prefill', 'decode')")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(phases.len(), 18, "2 passes of 1 prefill and 8 decode steps");
    for (start, end, tid) in phases {
        // The launch calls of the instance's kernels and the kernels' names, in the kernels' order.
        let launches: Vec<(i64, i64)> = db
            .prepare(
                "SELECT r.start, k.shortName FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r \
                 ON r.correlationId = k.correlationId WHERE r.globalTid = ?1 AND r.start >= ?2 AND r.start <= ?3 \
                 ORDER BY k.start",
            )
            .unwrap()
            .query_map([tid, start, end], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let names: Vec<i64> = launches.iter().map(|l| l.1).collect();
        // The first decode step of a pass starts from a strided slice of the prefill's output (a copy before the
        // first layer, another add kernel in it): no period, no layer ranges; its instance is left out either way.
        let Some(period) = layers::find_period(&names) else { continue };
        assert_eq!(period.repeats, 2, "LAYERS=2");
        for layer in 0..period.repeats {
            let first = period.offset + layer * period.length;
            let next = first + period.length;
            let to = if next < launches.len() { launches[next].0 - 1 } else { end - 1 };
            db.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?1, ?2, 59, ?3, ?4, 0)",
                rusqlite::params![launches[first].0, to, format!("model.layers.{layer}"), tid],
            )
            .unwrap();
        }
    }
    drop(db);
    let pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
    let classifier = Classifier::builtin();
    let inferred = layers::phase_layers(
        &layers::instances(&load("sample-traces/tp1_nsys.sqlite.gz"), &classifier, &pattern, None),
        0,
    );
    let traces = shardscope_io::load(&file).unwrap();
    let recorded = layers::phase_layers(&layers::instances(&traces, &classifier, &pattern, None), 0);
    assert_eq!(recorded.len(), 2);
    for (r, i) in recorded.iter().zip(&inferred) {
        assert_eq!((r.source, i.source), ("recorded", "inferred"), "{}", r.phase);
        assert_eq!((r.layers, r.instances, r.instances_left_out), (i.layers, i.instances, i.instances_left_out));
        assert_eq!((&r.ops, &r.time_ns, r.outside_ns), (&i.ops, &i.time_ns, i.outside_ns), "{}", r.phase);
    }
}
