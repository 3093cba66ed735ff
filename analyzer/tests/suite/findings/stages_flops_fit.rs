//! Findings of pipeline-stage imbalance and low FLOP rate, each on a synthetic trace with the saving worked out by
//! hand (in the test's comment) and one without the cause; and findings on a model that does not fit its window:
//! the what-if's own reasons, and no replayed saving.

use super::{ELEMENTWISE, GEMM, RankBuilder, find, fired};

use shardscope_analyzer::dependency::critical_path;
use shardscope_analyzer::dependency::whatif::{self, Scenario};
use shardscope_analyzer::figures::bench_peaks::BenchPeaks;
use shardscope_analyzer::findings::rules::FindingsRules;
use shardscope_analyzer::findings::{self, Basis, Findings, FlopInputs};
use shardscope_analyzer::report::mfu::{ModelShape, Tokens};
use shardscope_analyzer::report::{self, Options};
use shardscope_bench::results::{BenchResults, GemmResult};
use shardscope_model::{Collective, CollectiveOp, Range, RangeKind, Trace};

const SEND_RECV: &str = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)";

impl RankBuilder {
    /// A 10 ns `cudaLaunchKernel` at `call_ns` launching a point-to-point SendRecv of `communicator` at
    /// `[start_ns, end_ns)`, instance `seq` of it.
    fn send_recv(&mut self, call_ns: i64, start_ns: i64, end_ns: i64, communicator: u64, seq: u64) {
        self.launch_on(call_ns, SEND_RECV, 7, start_ns, end_ns);
        self.mark_collective(Collective {
            op: CollectiveOp::SendRecv,
            communicator: Some(communicator),
            seq: Some(seq),
            bytes: Some(1 << 20),
            ..Collective::default()
        });
    }
}

/// Stage 0 (rank `first`) computes `compute_ns`, then sends to stage 1 (rank `second`), which receives and computes
/// 1 µs: a one-microbatch pipeline over `communicator`.
fn two_stages(first: u32, second: u32, compute_ns: i64, communicator: u64) -> [Trace; 2] {
    let c = compute_ns;
    let mut stage0 = RankBuilder::new(first);
    stage0.launch(0, GEMM, 10, 10 + c);
    stage0.send_recv(20, 10 + c, 110 + c, communicator, 0);
    let mut stage1 = RankBuilder::new(second);
    stage1.send_recv(0, 10, 110 + c, communicator, 0);
    stage1.launch(20, GEMM, 110 + c, 1_110 + c);
    [stage0.finish(), stage1.finish()]
}

fn quiet_why<'a>(found: &'a Findings, kind: &str) -> &'a str {
    &found.quiet.iter().find(|q| q.kind == kind).unwrap_or_else(|| panic!("{kind} not listed: {found:#?}")).why
}

/// Stage 0 computes 3 µs (10..3,010), the 100 ns transfer ends at 3,110, stage 1 computes 1 µs: the run is 4,110 ns.
/// The stages' mean is 2 µs, stage 0 is 50 % above it. With stage 0's compute at the mean (× 2/3) its GEMM ends at
/// 2,010, the transfer at 2,110 and stage 1 at 3,110: 1,000 ns saved (24 %). Two copies of the pipeline (ranks 0–2 and
/// 1–3) give two stages of two ranks each and the same saving. Balanced stages (2 µs each) do not fire.
#[test]
fn a_busy_pipeline_stage_is_worth_its_compute_above_the_mean() {
    let found = find(&two_stages(0, 1, 3_000, 2), None);
    assert_eq!(found.measured_ns, 4_110);
    let stage = fired(&found, "pipeline_stage_imbalance").expect("fires");
    assert_eq!((stage.saving_ns, stage.basis), (1_000, Basis::Replay), "{stage:#?}");
    assert_eq!(stage.title, "pipeline stage 0 is the busiest, 50 % above the stages' mean");
    assert!(stage.evidence[0].contains("stage 0 (rank 0) 3.0 µs; stage 1 (rank 1) 1.0 µs"), "{stage:?}");

    let [a, c] = two_stages(0, 2, 3_000, 2);
    let [b, d] = two_stages(1, 3, 3_000, 3);
    let found = find(&[a, b, c, d], None);
    let stage = fired(&found, "pipeline_stage_imbalance").expect("fires on two copies");
    assert_eq!(stage.saving_ns, 1_000);
    assert!(stage.evidence[0].contains("stage 0 (rank 0, 1) 3.0 µs; stage 1 (rank 2, 3) 1.0 µs"), "{stage:?}");

    let balanced = find(&two_stages(0, 1, 1_000, 2), None);
    assert!(fired(&balanced, "pipeline_stage_imbalance").is_none(), "{balanced:#?}");
    assert!(quiet_why(&balanced, "pipeline_stage_imbalance").contains("by 0.0 %, below the 10 % threshold"));
}

/// Ranks that exchange in a ring (0–1, 1–2, 2–0) or that have no point-to-point transfers form no pipeline.
#[test]
fn no_pipeline_without_a_chain_of_point_to_point_transfers() {
    let mut ranks: Vec<RankBuilder> = (0..3).map(RankBuilder::new).collect();
    for r in 0..3u32 {
        let (next, previous) = ((r + 1) % 3, (r + 2) % 3);
        let rank = &mut ranks[r as usize];
        rank.send_recv(0, 10, 1_010, 20 + u64::from(r.min(next)) * 3 + u64::from(r.max(next)), 0);
        rank.send_recv(20, 1_010, 2_010, 20 + u64::from(r.min(previous)) * 3 + u64::from(r.max(previous)), 0);
    }
    let ring = find(&ranks.into_iter().map(RankBuilder::finish).collect::<Vec<_>>(), None);
    assert!(quiet_why(&ring, "pipeline_stage_imbalance").contains("ring"), "{ring:#?}");

    let none = find(&super::two_ranks(0, 200), None);
    assert!(quiet_why(&none, "pipeline_stage_imbalance").contains("no point-to-point transfers"));
}

/// One rank, two `prefill` ranges of 1 ms of GPU work each (10..1,000,010 ns and 2,000,010..3,000,010 ns): a GEMM of
/// 800 µs, then 200 µs of other kernels. The model: 10⁹ weights, 2 × 10⁹ FLOPs a token, 100 tokens an instance, so
/// 2 × 10¹¹ FLOPs in 1 ms: 200 TFLOP/s.
fn prefill_trace() -> Trace {
    let mut r = RankBuilder::new(0);
    for i in 0..2 {
        let at = 2_000_000 * i;
        r.launch(at, GEMM, at + 10, at + 800_010);
        r.launch(at + 20, ELEMENTWISE, at + 800_010, at + 1_000_010);
        let name = r.trace.names.intern("prefill");
        r.trace.ranges.push(Range {
            start_ns: at,
            end_ns: at + 1_000_000,
            name,
            kind: RangeKind::PushPop,
            process: shardscope_model::ProcessIdx(0),
            tid: 1,
            ..Range::default()
        });
    }
    r.finish()
}

fn find_flops(trace: &Trace, shape: &str, bench: Option<&BenchPeaks>) -> Findings {
    let (shape, tokens) = (ModelShape::parse(shape).unwrap(), Tokens::parse("batch=1,seq=100").unwrap());
    let options = Options::default();
    let traces = std::slice::from_ref(trace);
    let report = report::analyze(traces, &options);
    let flops = FlopInputs::of(&shape, &tokens, traces, &report, &options);
    findings::findings_matched(traces, &report, &options, bench, &FindingsRules::builtin(), Some(&flops), None).unwrap()
}

/// `bench` results whose best bf16 GEMM is `tflops`.
fn gemm_bench(dir: &std::path::Path, tflops: f64) -> BenchPeaks {
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results/h200x2.json");
    let mut results = BenchResults::load(&template).expect("the bundled bench results load");
    let (m, n, k) = (8192u64, 8192u64, 8192u64);
    let time_us = 2.0 * (m * n * k) as f64 / (tflops * 1e6);
    results.gemm = vec![GemmResult { m, n, k, dtype: "bf16".into(), gpu: 0, time_us, tflops }];
    let path = dir.join("gemm.json");
    std::fs::write(&path, serde_json::to_string(&results).unwrap()).unwrap();
    BenchPeaks::load(&path).expect("written results load")
}

/// Against a 1,000 TFLOP/s peak the prefill reaches 20 %, below the 40 % threshold. At 40 % its 2 × 10¹¹ FLOPs take
/// 500 µs; its GEMM takes 800 µs: up to 300 µs an instance, 600 µs over the two. Bench's measured peak is taken over
/// the datasheet figure. Against a 300 TFLOP/s peak it reaches 66.7 % and does not fire; without the model's shape
/// the type is silent.
#[test]
fn a_low_flop_rate_is_worth_the_gemm_time_beyond_the_threshold_pace() {
    let trace = prefill_trace();
    let found = find_flops(&trace, "parameters=1e9,peak_tflops=1000", None);
    let low = fired(&found, "low_flop_rate").expect("fires");
    assert_eq!((low.basis, low.saving_per_run_ns, low.saving_ns), (Basis::Bound, 600_000, 600_000), "{low:#?}");
    assert!(low.title.contains("prefill 20.0 %"), "{low:?}");
    assert!(low.evidence[1].contains("rank 0's GEMM kernels take 800.0 µs per instance (2 instances)"), "{low:?}");
    assert!(low.evidence[1].contains("need 500.0 µs per GPU at 40 % of the peak: up to 300.0 µs"), "{low:?}");

    let dir = tempfile::tempdir().unwrap();
    let measured = find_flops(&trace, "parameters=1e9,peak_tflops=300", Some(&gemm_bench(dir.path(), 1_000.0)));
    let low = fired(&measured, "low_flop_rate").expect("the measured peak is taken");
    assert_eq!(low.saving_per_run_ns, 600_000);
    assert!(low.evidence.iter().any(|e| e.contains("(bench)")), "{low:?}");

    let fast = find_flops(&trace, "parameters=1e9,peak_tflops=300", None);
    assert!(fired(&fast, "low_flop_rate").is_none(), "{fast:#?}");
    assert!(quiet_why(&fast, "low_flop_rate").contains("prefill at 66.7 %"));
    let without = find(std::slice::from_ref(&trace), None);
    assert!(quiet_why(&without, "low_flop_rate").starts_with("not evaluated: needs the model's shape and tokens"));
}

/// Three ranks, each a launch, a stream synchronise, a host gap and a last launch; what each rank does slowly
/// differs: rank 0 starts 2 µs late and its GEMM takes 3 µs, rank 1 its GEMM 3 µs and a 2,010 ns host gap, rank 2
/// starts late and has the long gap. Each ends at 5,140 ns, but the typical (median) of each part is the slow one:
/// the no-straggler ideal ends at 7,140 ns, slower than measured, and the ranks start 2 µs apart. The what-if says
/// the model does not fit; the findings say the same, give no replayed saving and list every replayed type as not
/// evaluated with that reason.
#[test]
fn findings_give_no_replayed_saving_when_the_model_does_not_fit() {
    let parts = [(2_000, 3_000, 10), (0, 3_000, 2_010), (2_000, 1_000, 2_010)];
    let traces: Vec<Trace> = parts
        .iter()
        .enumerate()
        .map(|(rank, &(late, gemm, gap))| {
            let mut r = RankBuilder::new(rank as u32);
            r.launch(late, GEMM, late + 10, late + 10 + gemm);
            r.call("cudaStreamSynchronize_v3020", late + 20, late + 20 + gemm);
            let next = late + 20 + gemm + gap;
            r.launch(next, ELEMENTWISE, next + 10, next + 110);
            r.finish()
        })
        .collect();
    let found = find(&traces, None);
    assert_eq!(found.measured_ns, 5_140);
    assert!(!found.fit.fits, "{found:#?}");
    let model = critical_path::build_steady_model(&traces, &Options::default()).unwrap();
    let what_if = whatif::what_if(&model, &Scenario::default());
    assert_eq!((what_if.ideal_ns, what_if.fit.fits), (7_140, false));
    assert_eq!(found.fit, what_if.fit);
    assert!(found.fit.problems[0].contains("slower than measured"), "{:?}", found.fit.problems);
    assert!(found.fit.problems[0].contains("staggered step starts"), "{:?}", found.fit.problems);
    assert!(found.findings.iter().all(|f| f.basis == Basis::Bound), "{found:#?}");
    for kind in ["late_rank", "exposed_communication", "launch_bound", "synchronising_calls"] {
        assert!(
            quiet_why(&found, kind).starts_with("not evaluated: the model does not fit this window: the no-straggler")
        );
    }
    let table = findings::table(&found);
    assert!(table.contains("the model does not fit this window, no replayed saving"), "{table}");
}

/// The full-size sample (8 layers, batch 4, 1,024-token prompts, 32 decode steps) against bench's measured bf16 GEMM
/// peak: decode reaches 0.2 % and fires, with a bound below its GEMM time over its 128 instances; prefill reaches
/// 63.1 % (the report's MFU) and does not. Without `--model` the type is silent.
#[test]
fn on_the_full_sample_decode_has_a_low_flop_rate_and_prefill_not() {
    let trace = super::repo_root().join("sample-traces/tp2_full_capture.sqlite.gz");
    let bench = super::repo_root().join("bench/results/h200x2.json");
    let model = ["--model", "layers=8,hidden=4096,ffn=11008", "--tokens", "batch=4,seq=1024,decode_steps=32"];
    let mut args = vec!["--bench", bench.to_str().unwrap()];
    args.extend_from_slice(&model);
    let found = super::findings_json(&trace, &args);
    let low = super::finding(&found, "low_flop_rate").expect("decode fires");
    assert_eq!(low["basis"], "bound");
    let title = low["title"].as_str().unwrap();
    assert!(title.contains("decode 0.2 %") && !title.contains("prefill"), "{title}");
    let evidence: Vec<&str> = low["evidence"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(evidence.contains(&"not firing: prefill at 63.1 %"), "{evidence:?}");
    assert!(evidence.iter().any(|e| e.contains("(128 instances)")), "{evidence:?}");
    let saving = low["saving_per_run_ns"].as_i64().unwrap();
    assert!(saving > 0 && low["saving_pct"].as_f64().unwrap() < 100.0, "{low}");

    let silent = super::findings_json(&trace, &["--bench", bench.to_str().unwrap()]);
    assert!(super::finding(&silent, "low_flop_rate").is_none());
}

/// Public traces: the two-GPU nsys exports exchange by SendRecv, which makes two "stages" whose compute is within
/// 0.5 % of each other: no imbalance. The two ranks of the sampled 128-rank job differ by 14 %: above the 10 %
/// excess, but replaying rank 1 at the mean saves 0.01 % of a host-bound window, so it fires only when the saving
/// threshold is 0, replayed. DLRM's 8 ranks exchange all-to-all (no pipeline), and its whole-trace model does not fit
/// (staggered starts, an ideal slower than measured): the findings give the what-if's reasons and no replayed saving.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn public_traces_pipeline_stages_and_a_model_that_does_not_fit() {
    let shared = super::shared_traces();
    let before = super::findings_json(&shared.join("nsys/mfu_2gpu_before.sqlite"), &[]);
    assert!(super::finding(&before, "pipeline_stage_imbalance").is_none());
    let why = before["quiet"].as_array().unwrap().iter().find(|q| q["kind"] == "pipeline_stage_imbalance").unwrap();
    assert!(why["why"].as_str().unwrap().contains("stage 0 (rank 0)"), "{why}");

    let sampled = shared.join("kineto/sampled_2rank");
    assert!(super::finding(&super::findings_json(&sampled, &[]), "pipeline_stage_imbalance").is_none());
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    let text = FindingsRules::builtin_text();
    let at = text.find("[pipeline_stage_imbalance]").unwrap();
    let lowered = text[..at].to_string() + &text[at..].replace("min_saving_pct = 2.0", "min_saving_pct = 0.0");
    std::fs::write(&rules, lowered).unwrap();
    let found = super::findings_json(&sampled, &["--findings-rules", rules.to_str().unwrap()]);
    let stage = super::finding(&found, "pipeline_stage_imbalance").expect("fires at a 0 % saving threshold");
    assert_eq!(stage["basis"], "replay");
    assert!(stage["title"].as_str().unwrap().starts_with("pipeline stage 1 is the busiest, 14 %"), "{stage}");
    assert!(stage["saving_ns"].as_i64().unwrap() > 0, "{stage}");

    let dlrm = shared.join("kineto/dlrm_8rank");
    let found = super::findings_json(&dlrm, &[]);
    let what_if = super::what_if_json(&dlrm, &[]);
    assert_eq!(found["fit"]["fits"], false);
    assert_eq!(found["fit"], what_if["fit"]);
    assert!(found["findings"].as_array().unwrap().iter().all(|f| f["basis"] == "bound"), "{found:#}");
    let late = found["quiet"].as_array().unwrap().iter().find(|q| q["kind"] == "late_rank").unwrap();
    assert!(late["why"].as_str().unwrap().contains("staggered step starts"), "{late}");
}
