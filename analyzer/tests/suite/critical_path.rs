//! The dependency model, its critical path and its what-if replay: synthetic traces with known answers, built
//! here, and the skewed two-rank sample capture.

use crate::common;
use crate::rank_builder::RankBuilder;

use common::{analyzer, assert_one_line_error, repo_root};
use proptest::prelude::*;
use serde_json::Value;
use shardscope_analyzer::dependency::critical_path::{self, CriticalPath, Model};
use shardscope_analyzer::dependency::graph::OpKind;
use shardscope_analyzer::dependency::whatif::{self, ScaleRule, ScaleTarget, Scenario};
use shardscope_analyzer::report::Options;
use shardscope_model::{Collective, CollectiveOp, Kernel, Trace};

const GEMM: &str = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn";
const ALL_REDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
const ELEMENTWISE: &str = "void at::native::vectorized_elementwise_kernel<4>(int)";
const NORM: &str = "void at::native::vectorized_layer_norm_kernel<float>(int)";

impl RankBuilder {
    /// Marks the last kernel as instance `seq` of an all-reduce on communicator 1.
    fn collective(&mut self, seq: u64) {
        let all_reduce =
            Collective { op: CollectiveOp::AllReduce, communicator: Some(1), seq: Some(seq), ..Collective::default() };
        self.mark_collective(all_reduce);
    }
}

fn model(traces: &[Trace]) -> Model {
    critical_path::build_model(traces, &Options::default(), None, None).expect("model builds")
}

fn run(model: &Model, scenario: Scenario) -> whatif::WhatIf {
    whatif::what_if(model, &scenario)
}

fn scale(category: &str, factor: f64) -> Scenario {
    Scenario {
        scales: vec![ScaleRule { target: ScaleTarget::Category(category.into()), factor }],
        ..Scenario::default()
    }
}

/// (rank, part, category, duration, after) of each segment.
fn summary(path: &CriticalPath) -> Vec<(u32, &str, &str, i64, &str)> {
    path.segments.iter().map(|s| (s.rank, s.part, s.category.as_str(), s.duration_ns, s.after.as_str())).collect()
}

/// A chain on one rank: three GEMMs in stream order, a blocking synchronisation that returns 50 ns after the last
/// one ends, then a host gap and one more kernel. The path runs through every GEMM and the sync; halving the GEMMs
/// pulls the sync and everything after it earlier by 1.5 µs.
#[test]
fn a_chain_on_one_rank() {
    let mut r = RankBuilder::new(0);
    r.launch_on(0, GEMM, 7, 100, 1_100);
    r.launch_on(20, GEMM, 7, 1_100, 2_100);
    r.launch_on(40, GEMM, 7, 2_100, 3_100);
    r.call("cudaStreamSynchronize_v3020", 60, 3_150);
    r.launch_on(3_200, ELEMENTWISE, 7, 3_210, 3_310);
    let traces = [r.finish()];
    let model = model(&traces);
    assert_eq!(model.graph.stats.edges["host sync on GPU work"], 1);
    assert_eq!(model.graph.stats.inconsistent_vertices, 0);

    let path = critical_path::critical_path(&traces, &model);
    assert_eq!(path.measured_ns, 3_310);
    assert_eq!(path.path_ns, 3_310);
    assert_eq!(
        summary(&path),
        [
            (0, "delay", "gpu_delay", 100, "launch"),
            (0, "run", "gemm", 1_000, "launch"),
            (0, "run", "gemm", 1_000, "stream order"),
            (0, "run", "gemm", 1_000, "stream order"),
            (0, "run", "host", 50, "host sync on GPU work"),
            (0, "delay", "host_gap", 50, "host order"),
            (0, "delay", "gpu_delay", 10, "launch"),
            (0, "run", "elementwise", 100, "launch"),
        ]
    );
    let gemm = path.by_category.iter().find(|s| s.name == "gemm").unwrap();
    assert_eq!(gemm.ns, 3_000);

    let unchanged = run(&model, Scenario::default());
    assert_eq!((unchanged.measured_ns, unchanged.replay_ns, unchanged.simulated_ns), (3_310, 3_310, 3_310));
    let faster = run(&model, scale("gemm", 0.5));
    assert_eq!(faster.simulated_ns, 3_310 - 1_500);
    // Slower elementwise work is not on the GEMMs' path but at its end: +100 ns.
    assert_eq!(run(&model, scale("elementwise", 2.0)).simulated_ns, 3_410);
}

/// A kernel on another stream that starts 5 ns after a GEMM ends, long after its launch: an inferred cross-stream
/// wait, so a faster GEMM lets it start earlier.
#[test]
fn a_wait_on_another_stream_is_inferred_from_timing() {
    let mut r = RankBuilder::new(0);
    r.launch_on(0, GEMM, 7, 100, 1_100);
    r.launch_on(20, ELEMENTWISE, 8, 1_105, 1_205);
    let traces = [r.finish()];
    let model = model(&traces);
    assert_eq!(model.graph.stats.edges["cross-stream (inferred)"], 1);
    let path = critical_path::critical_path(&traces, &model);
    let afters: Vec<&str> = path.segments.iter().map(|s| s.after.as_str()).collect();
    assert_eq!(afters, ["launch", "launch", "cross-stream (inferred)", "cross-stream (inferred)"]);
    assert_eq!(run(&model, scale("gemm", 0.5)).simulated_ns, 1_205 - 500);
}

/// Fork/join across two ranks through one all-reduce, rank 1 late by X because its host paused before launching
/// it. Rank 0 ends last (one more kernel), so its path waits at the collective for rank 1 and continues on rank 1's
/// host gap. With no straggler the step shrinks by exactly X and rank 0 no longer waits.
#[test]
fn fork_join_across_two_ranks_through_one_collective() {
    const X: i64 = 5_000;
    let mut rank0 = RankBuilder::new(0);
    rank0.launch_on(0, GEMM, 7, 10, 1_010);
    rank0.launch_on(20, ALL_REDUCE, 7, 1_010, 1_210 + X);
    rank0.launch_on(40, ELEMENTWISE, 7, 1_210 + X, 1_710 + X);
    rank0.launch_on(60, NORM, 7, 1_710 + X, 1_810 + X);
    let mut rank1 = RankBuilder::new(1);
    rank1.launch_on(0, GEMM, 7, 10, 1_010);
    rank1.launch_on(1_000 + X, ALL_REDUCE, 7, 1_010 + X, 1_210 + X);
    rank1.launch_on(1_020 + X, ELEMENTWISE, 7, 1_210 + X, 1_710 + X);
    let traces = [rank0.finish(), rank1.finish()];
    let model = model(&traces);
    assert_eq!(model.graph.stats.collective_instances, 1);
    assert_eq!(model.graph.stats.unmatched_comm_kernels, 0);

    let path = critical_path::critical_path(&traces, &model);
    assert_eq!(path.measured_ns, 1_810 + X);
    assert_eq!(
        summary(&path),
        [
            (1, "run", "host", 10, "window start"),
            (1, "delay", "host_gap", 990 + X, "host order"),
            (1, "delay", "gpu_delay", 10, "launch"),
            (0, "run", "comm.all_reduce", 200, "collective wait on rank 1"),
            (0, "run", "elementwise", 500, "stream order"),
            (0, "run", "norm", 100, "stream order"),
        ]
    );
    assert_eq!(path.segments[3].after_rank, Some(1));
    let by_rank: Vec<(&str, i64)> = path.by_rank.iter().map(|s| (s.name.as_str(), s.ns)).collect();
    assert_eq!(by_rank, [("rank 1", 1_010 + X), ("rank 0", 800)]);

    let ideal = run(&model, Scenario { no_straggler: true, ..Scenario::default() });
    assert_eq!(ideal.measured_ns - ideal.simulated_ns, X);
    assert_eq!((ideal.rank_waits[0].measured_wait_ns, ideal.rank_waits[0].simulated_wait_ns), (X, 0));
    assert_eq!(ideal.ideal_ns, 1_810);
    // All of it is rank 1's; all but the 10 ns launch latency of rank 1's all-reduce (rank 0's started at once:
    // a delay of the all-reduce, not of the host) is its host gap.
    let rank1 = ideal.by_rank.iter().find(|a| a.name == "rank 1").unwrap();
    assert!((rank1.removed_pct - 100.0).abs() < 1e-9, "{rank1:?}");
    let host = ideal.by_category.iter().find(|a| a.name == "host").unwrap();
    assert_eq!(host.simulated_ns, 1_820, "{host:?}");
    let rank0 = ideal.by_rank.iter().find(|a| a.name == "rank 0").unwrap();
    assert_eq!(rank0.simulated_ns, ideal.measured_ns, "{rank0:?}");
    // `rank1=1.0` is the same as idealising rank 1 alone.
    let rank_rule =
        Scenario { scales: vec![ScaleRule { target: ScaleTarget::Rank(1), factor: 1.0 }], ..Scenario::default() };
    assert_eq!(run(&model, rank_rule).simulated_ns, 1_810);

    // Communication overlapped: the all-reduce costs nothing and nothing waits for rank 1 at it, so rank 1's own
    // late chain ends last: its elementwise kernel now waits for its own launch at 1020 + X, then runs 500 ns.
    let overlapped = run(&model, Scenario { comm_overlapped: true, ..Scenario::default() });
    assert_eq!(overlapped.simulated_ns, 1_520 + X);
}

/// Sequence numbers pair the two all-reduces crosswise (rank 1 ran them in the other order on one stream): the
/// dependencies form a cycle. It is broken and counted, and the analyses still finish.
#[test]
fn a_cycle_from_crosswise_pairing_is_broken_and_counted() {
    let mut rank0 = RankBuilder::new(0);
    rank0.launch_on(0, ALL_REDUCE, 7, 100, 300);
    rank0.collective(1);
    rank0.launch_on(20, ALL_REDUCE, 7, 300, 500);
    rank0.collective(2);
    let mut rank1 = RankBuilder::new(1);
    rank1.launch_on(0, ALL_REDUCE, 7, 100, 300);
    rank1.collective(2);
    rank1.launch_on(20, ALL_REDUCE, 7, 300, 500);
    rank1.collective(1);
    let traces = [rank0.finish(), rank1.finish()];
    let model = model(&traces);
    assert_eq!(model.graph.stats.collective_instances, 2);
    assert!(model.graph.stats.edges_dropped_for_cycles >= 1, "{:?}", model.graph.stats);
    let path = critical_path::critical_path(&traces, &model);
    assert_eq!(path.measured_ns, 500);
    let report = run(&model, Scenario { no_straggler: true, ..Scenario::default() });
    assert!(report.simulated_ns > 0 && report.simulated_ns <= 500, "{report:?}");
}

fn sample_json(command: &str, extra: &[&str]) -> Value {
    let trace = repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz");
    let mut args = vec![command, trace.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let output = analyzer(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Rank 1 of the skewed sample synchronises and sleeps 2 ms before every 4th all-reduce (18 times): each of those
/// host gaps is on the critical path of the whole trace, and the no-straggler replay removes almost all of rank 0's
/// waiting (measured: 339.05 ms → 5.59 ms, 98.4 %).
#[test]
fn skewed_sample_path_runs_through_rank_1_sleeps() {
    let path = sample_json("critical-path", &[]);
    let segments = path["segments"].as_array().unwrap();
    let sleeps = segments
        .iter()
        .filter(|s| s["rank"] == 1 && s["category"] == "host_gap")
        .filter(|s| (1_900_000..2_600_000).contains(&s["duration_ns"].as_i64().unwrap()))
        .count();
    assert_eq!(sleeps, 18);
    assert_eq!(path["path_ns"], path["measured_ns"]);
    assert_eq!(path["model"]["inconsistent_vertices"], 0);
    assert_eq!(path["model"]["collective_instances"], 73);
    assert_eq!(path["model"]["unmatched_comm_kernels"], 0);

    let whatif = sample_json("what-if", &["--no-straggler", "--whole-trace"]);
    assert_eq!(whatif["replay_ns"], whatif["measured_ns"]);
    let rank0 = &whatif["rank_waits"][0];
    assert_eq!(rank0["rank"], 0);
    let (measured, simulated) =
        (rank0["measured_wait_ns"].as_i64().unwrap(), rank0["simulated_wait_ns"].as_i64().unwrap());
    assert!(measured > 300_000_000, "{measured}");
    let removed = 1.0 - simulated as f64 / measured as f64;
    assert!(removed > 0.95, "removed {removed:.3} of rank 0's waiting");
    // But over the whole trace the ideal saves far more than rank 1's sleeps (start-up, and both ranks' host
    // gaps at different operations): no single rank explains it, so no slowdown is sold.
    assert_eq!(whatif["fit"]["fits"], false, "{}", whatif["fit"]);
    assert!(whatif["slowdown"].is_null() && whatif["by_rank"].as_array().unwrap().is_empty());
}

/// One decode step of the sample: rank 1's sleep is on that step's path too, and the replay without it removes
/// most of rank 0's waiting in that step.
#[test]
fn skewed_sample_step_path() {
    // Step 10 of the run: step 1 after the 9 warm-up steps detected by default, or step 10 with none left out.
    let path = sample_json("critical-path", &["--step", "10", "--skip-steps", "0"]);
    assert_eq!(path["window_ns"], sample_json("critical-path", &["--step", "1"])["window_ns"]);
    let segments = path["segments"].as_array().unwrap();
    assert!(segments.iter().any(|s| s["rank"] == 1
        && s["category"] == "host_gap"
        && (1_900_000..2_600_000).contains(&s["duration_ns"].as_i64().unwrap())));
    assert_eq!(path["path_ns"], path["measured_ns"]);
    // Measured: rank 0 waits 3.49 ms in this step, 0.23 ms without the straggler (93.4 % removed); the step
    // goes from 6.14 ms to 2.82 ms, all of it attributed to rank 1.
    let whatif = sample_json("what-if", &["--step", "1"]);
    assert!(whatif["simulated_ns"].as_i64() < whatif["measured_ns"].as_i64());
    let rank0 = &whatif["rank_waits"][0];
    let removed = 1.0 - rank0["simulated_wait_ns"].as_f64().unwrap() / rank0["measured_wait_ns"].as_f64().unwrap();
    assert!(removed > 0.9, "removed {removed:.3} of rank 0's waiting");
    assert_eq!(whatif["by_rank"][0]["name"], "rank 1");
    assert_eq!(whatif["fit"]["fits"], true, "{}", whatif["fit"]);
    let slowdown = whatif["slowdown"].as_f64().unwrap();
    assert!((slowdown - 2.174).abs() < 0.001, "S = {slowdown}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let trace = repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz");
    let trace = trace.to_str().unwrap();
    assert_one_line_error(&analyzer(&["critical-path", "/nonexistent/trace.sqlite"]), "/nonexistent/trace.sqlite");
    assert_one_line_error(&analyzer(&["what-if", trace, "--step", "99"]), "--step 99");
    assert_one_line_error(&analyzer(&["what-if", trace, "--scale", "gemx=2"]), "gemx");
    assert_one_line_error(&analyzer(&["what-if", trace, "--scale", "gemm"]), "KEY=FACTOR");
    assert_one_line_error(&analyzer(&["what-if", trace, "--scale", "rank7=1"]), "rank 7");
    assert_one_line_error(&analyzer(&["critical-path", trace, "--window", "1:2"]), "no GPU work");
}

/// One random event of a rank: (is a host call, stream 7 or 8, name index, start, duration, launch offset).
type RandomEvent = (bool, bool, usize, i64, i64, Option<i64>);

fn random_rank(rank: u32, events: &[RandomEvent]) -> Trace {
    const NAMES: [&str; 3] = [GEMM, ALL_REDUCE, ELEMENTWISE];
    const CALLS: [&str; 3] = ["cudaStreamSynchronize_v3020", "cudaGetDevice_v3020", "cudaDeviceSynchronize_v3020"];
    let mut r = RankBuilder::new(rank);
    for &(host, stream, name, start_ns, duration_ns, launch) in events {
        if host {
            r.call(CALLS[name], start_ns, start_ns + duration_ns);
        } else {
            let stream = if stream { 8 } else { 7 };
            match launch {
                Some(before_ns) => {
                    r.launch_on(start_ns - before_ns, NAMES[name], stream, start_ns, start_ns + duration_ns)
                }
                None => {
                    let name = r.trace.names.intern(NAMES[name]);
                    r.trace.kernels.push(Kernel {
                        start_ns,
                        end_ns: start_ns + duration_ns,
                        name,
                        short_name: name,
                        stream,
                        ..Kernel::default()
                    });
                }
            }
        }
    }
    r.finish()
}

/// A rank's random events, 1 to 15 of them.
fn random_events() -> impl Strategy<Value = Vec<RandomEvent>> {
    let event = (any::<bool>(), any::<bool>(), 0usize..3, 0i64..5_000, 0i64..1_000, prop::option::of(-50i64..500));
    prop::collection::vec(event, 1..16)
}

/// Two random ranks and their model; `None` when neither ran a kernel (nothing to model).
fn random_model(rank0: &[RandomEvent], rank1: &[RandomEvent]) -> Option<([Trace; 2], Model)> {
    let traces = [random_rank(0, rank0), random_rank(1, rank1)];
    if traces.iter().all(|t| t.kernels.is_empty()) {
        return None;
    }
    let model = model(&traces);
    Some((traces, model))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// On any events (overlapping kernels on one stream, kernels before their launch, nested and overlapping calls,
    /// collectives paired out of order): the model replayed with the measured own times reproduces every recorded
    /// time, and the critical path's segments add up to the measured time.
    #[test]
    fn replay_reproduces_the_record_and_the_path_adds_up(
        rank0 in random_events(),
        rank1 in random_events(),
    ) {
        let Some((traces, model)) = random_model(&rank0, &rank1) else { return Ok(()) };
        let graph = &model.graph;
        prop_assert_eq!(graph.stats.inconsistent_vertices, 0);
        prop_assert!(graph.replays_measured());
        prop_assert_eq!(graph.simulate(graph.own_ns(), false), graph.measured_ns().to_vec());
        prop_assert!(graph.own_ns().iter().all(|&own| own >= 0));
        let path = critical_path::critical_path(&traces, &model);
        prop_assert_eq!(path.path_ns, path.measured_ns);
        let ideal = run(&model, Scenario { no_straggler: true, ..Scenario::default() });
        prop_assert_eq!(ideal.replay_ns, ideal.measured_ns);
        prop_assert!(ideal.simulated_ns >= 0);
    }

    /// The replay that keeps no list of own times or vertex times (the late-rank finding's) finds the same last end
    /// as a full replay with the same own times, for each rank idealised alone and each part of it.
    #[test]
    fn a_replay_keeping_only_the_last_end_agrees_with_the_full_replay(
        rank0 in random_events(),
        rank1 in random_events(),
    ) {
        use shardscope_analyzer::dependency::graph::EdgeKind;
        use whatif::OwnParts;
        let Some((_, model)) = random_model(&rank0, &rank1) else { return Ok(()) };
        let graph = &model.graph;
        let typical = whatif::typical_of(graph);
        let parts = [(true, true), (true, false), (false, true)];
        for rank_index in 0..graph.ranks.len() as u32 {
            for (delay, duration) in parts {
                for skip in [&[][..], &[EdgeKind::HostSync][..]] {
                    let select = |op: &shardscope_analyzer::dependency::graph::Op| {
                        if op.rank_index == rank_index { OwnParts { delay, duration } } else { OwnParts::default() }
                    };
                    let own = whatif::typical_own_ns_with(graph, &typical, select);
                    let full = graph.last_end(&graph.simulate_skipping(&own, skip));
                    let kept = graph.replayed_last_end(whatif::typical_own_of(graph, &typical, select), skip);
                    prop_assert_eq!(kept, full);
                }
            }
        }
    }
}

/// The typical own times are each instance's lower median across its members, also for instances far apart in the
/// list (the medians are taken in runs of instances on worker threads): three ranks, 10,000 instances, every
/// seventh on rank 0 alone (no peer: its own times stay as measured).
#[test]
fn typical_own_times_are_each_instances_median_across_runs_of_instances() {
    use shardscope_analyzer::dependency::graph::{ExplicitModel, Graph, Op, OpKind, RankSpec};
    use shardscope_analyzer::figures::collectives::RankKey;
    use shardscope_model::DeviceIdx;
    const INSTANCES: u32 = 10_000;
    // Deterministic, unordered values: a start and a duration per (rank, instance).
    let value = |rank: u32, instance: u32, salt: u32| i64::from((instance * 7_919 + rank * 104_729 + salt) % 1_000);
    let mut ops = Vec::new();
    for rank in 0..3u32 {
        for instance in (0..INSTANCES).filter(|i| rank == 0 || i % 7 != 0) {
            let start_ns = value(rank, instance, 0);
            let end_ns = start_ns + 1 + value(rank, instance, 1);
            let (lane, category, index) = (0, 0, instance);
            let (comm, matched, rank_index) = (false, false, rank);
            ops.push(Op {
                kind: OpKind::Kernel,
                rank_index,
                index,
                lane,
                category,
                comm,
                matched,
                start_ns,
                end_ns,
                instance,
            });
        }
    }
    let measured_ns: Vec<i64> = ops.iter().flat_map(|op| [op.start_ns, op.end_ns]).collect();
    let external_ns: Vec<i64> = ops.iter().flat_map(|_| [0, i64::MIN]).collect();
    let ranks = (0..3).map(|r| RankSpec { key: RankKey { trace: 0, device: DeviceIdx(r) }, rank: r }).collect();
    let graph = Graph::from_explicit(ExplicitModel {
        ops: ops.clone(),
        ranks,
        categories: vec!["gemm".into()],
        window_start_ns: 0,
        barriers: 0,
        edges: Vec::new(),
        external_ns,
        measured_ns,
        instances: INSTANCES,
    });
    let every_part = |_: &Op| whatif::OwnParts { delay: true, duration: true };
    let own = whatif::typical_own_ns_with(&graph, &whatif::typical_of(&graph), every_part);
    let lower_median = |mut values: Vec<i64>| {
        values.sort_unstable();
        values[(values.len() - 1) / 2]
    };
    let mut by_instance = vec![Vec::new(); INSTANCES as usize];
    for op in &ops {
        by_instance[op.instance as usize].push(op);
    }
    for (o, op) in ops.iter().enumerate() {
        let members = &by_instance[op.instance as usize];
        let (start, duration) = if members.len() < 2 {
            (op.start_ns, op.end_ns - op.start_ns)
        } else {
            let starts = members.iter().map(|m| m.start_ns).collect();
            (lower_median(starts), lower_median(members.iter().map(|m| m.end_ns - m.start_ns).collect()))
        };
        assert_eq!((own[2 * o], own[2 * o + 1]), (start, duration), "operation {o}, instance {}", op.instance);
    }
}

/// The operations' instance ids, on samples of one file with two ranks and of two files: numbered in order of first
/// appearance among the operations (host calls first, then GPU work), so that they run from 0 without a gap; and an
/// instance never mixes kinds or names, nor holds two operations of one rank. Host calls and GPU operations are
/// numbered side by side and the GPU operations' ids moved past the host calls': a wrong move shows here as a gap,
/// an instance of two kinds, or two operations of one rank.
#[test]
fn instance_ids_count_up_in_order_of_first_appearance_and_group_one_operation_per_rank() {
    for sample in ["tp2_skew_capture.sqlite.gz", "kineto_tp2/rank0.pt.trace.json.gz"] {
        let path = repo_root().join("sample-traces").join(sample);
        let mut traces = shardscope_io::load(&path).unwrap();
        if sample.starts_with("kineto_tp2") {
            traces.extend(shardscope_io::load(&path.with_file_name("rank1.pt.trace.json.gz")).unwrap());
        }
        let model = model(&traces);
        let graph = &model.graph;
        let mut members: Vec<Vec<u32>> = Vec::new();
        for (o, op) in graph.ops.iter().enumerate() {
            let instance = op.instance as usize;
            assert!(instance <= members.len(), "{sample}: operation {o} has instance {instance} before it is due");
            if instance == members.len() {
                members.push(Vec::new());
            }
            members[instance].push(o as u32);
        }
        assert_eq!(members.len(), graph.instance_count(), "{sample}");
        let mut shared = 0;
        for (instance, ops) in members.iter().enumerate() {
            let first = &graph.ops[ops[0] as usize];
            let name = critical_path::op_name(&traces, graph, ops[0]);
            let mut ranks: Vec<u32> = ops.iter().map(|&o| graph.ops[o as usize].rank_index).collect();
            ranks.sort_unstable();
            ranks.dedup();
            assert_eq!(ranks.len(), ops.len(), "{sample}: instance {instance} holds two operations of one rank");
            for &o in ops {
                assert_eq!(graph.ops[o as usize].kind, first.kind, "{sample}: instance {instance} mixes kinds");
                if first.kind != OpKind::HostCall {
                    assert_eq!(critical_path::op_name(&traces, graph, o), name, "{sample}: instance {instance}");
                }
            }
            shared += usize::from(ops.len() > 1);
        }
        let host_calls = graph.ops.iter().filter(|op| op.kind == OpKind::HostCall).count();
        assert!(host_calls > 0 && host_calls < graph.ops.len(), "{sample}: both kinds of operations");
        assert!(shared * 4 > members.len(), "{sample}: {shared} of {} instances on both ranks", members.len());
    }
}
