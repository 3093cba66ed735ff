//! `what-if --comm-at-peak`: collectives replayed at the bus bandwidth `bench` measured for their size, on a
//! synthetic two-rank trace whose answer is worked out by hand.

use std::path::Path;

use crate::rank_builder::{ALL_REDUCE, ALL_REDUCE_BYTES as BYTES, RankBuilder};

use shardscope_analyzer::dependency::critical_path;
use shardscope_analyzer::dependency::whatif::{self, Scenario};
use shardscope_analyzer::figures::bench_peaks::BenchPeaks;
use shardscope_analyzer::report::Options;
use shardscope_bench::results::{BenchResults, CollectiveOp as BenchOp, CollectiveResult};
use shardscope_model::{CollectiveOp, Trace};

const GEMM: &str = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn";
const ELEMENTWISE: &str = "void at::native::vectorized_elementwise_kernel<4>(int)";

/// One rank: kernels, each launched by a `cudaLaunchKernel` call 10 ns long (`(call_ns, name, start_ns, end_ns)`).
fn rank(rank: u32, kernels: &[(i64, &str, i64, i64)]) -> Trace {
    let mut b = RankBuilder::new(rank);
    for &(call_ns, name, start_ns, end_ns) in kernels {
        b.launch(call_ns, name, start_ns, end_ns);
    }
    b.finish()
}

/// `bench` results measuring a 2-rank all-reduce of `BYTES` in `time_us` (a second size, 4 MiB in 4 × `time_us`,
/// keeps the interpolation honest), written to `dir`.
fn bench_file(dir: &Path, time_us: f64) -> BenchPeaks {
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results/h200x2.json");
    let mut results = BenchResults::load(&template).expect("the bundled bench results load");
    let row = |bytes: u64, time_us: f64| {
        let algbw_gbps = bytes as f64 / (time_us * 1e3);
        // Two ranks: the all-reduce's bus factor 2 (n − 1) / n is 1.
        CollectiveResult {
            op: BenchOp::AllReduce,
            nranks: 2,
            dtype: "bf16".into(),
            bytes,
            time_us,
            algbw_gbps,
            busbw_gbps: algbw_gbps,
        }
    };
    results.collectives = vec![row(BYTES, time_us), row(4 * BYTES, 4.0 * time_us)];
    let path = dir.join("bench.json");
    std::fs::write(&path, serde_json::to_string(&results).unwrap()).unwrap();
    BenchPeaks::load(&path).expect("written results load")
}

#[test]
fn collectives_take_the_time_the_measured_bus_bandwidth_allows() {
    // Rank 1 launches its all-reduce X ns late; the all-reduce moves data for 200 ns once both arrived.
    const X: i64 = 5_000;
    let traces = [
        rank(0, &[(0, GEMM, 10, 1_010), (20, ALL_REDUCE, 1_010, 1_210 + X), (40, ELEMENTWISE, 1_210 + X, 1_710 + X)]),
        rank(1, &[(0, GEMM, 10, 1_010), (1_000 + X, ALL_REDUCE, 1_010 + X, 1_210 + X)]),
    ];
    let model = critical_path::build_model(&traces, &Options::default(), None, None).expect("model builds");
    assert_eq!(model.graph.stats.collective_instances, 1);
    let dir = tempfile::tempdir().unwrap();

    // The machine moves 1 MiB in 10 µs: the all-reduce takes 10,000 ns instead of 200.
    let bench = bench_file(dir.path(), 10.0);
    let peak = whatif::peak_transfers(&model, &bench);
    assert_eq!(peak.per_barrier_ns, [Some(10_000)]);
    let at_peak = whatif::what_if(&model, &Scenario { comm_at_peak: Some(peak.clone()), ..Scenario::default() });
    assert_eq!(at_peak.measured_ns, 1_710 + X);
    // Rank 1 still arrives at 1,010 + X; then 10,000 ns of transfer and rank 0's 500 ns elementwise kernel.
    assert_eq!(at_peak.simulated_ns, 1_010 + X + 10_000 + 500);
    assert_eq!(at_peak.collectives_without_peak, 0);
    // Without the straggler as well: the ranks arrive together at 1,010.
    let both =
        whatif::what_if(&model, &Scenario { no_straggler: true, comm_at_peak: Some(peak), ..Scenario::default() });
    assert_eq!(both.simulated_ns, 1_010 + 10_000 + 500);

    // A faster machine (1 MiB in 0.1 µs): the transfer shrinks to 100 ns and the step by 100 ns.
    let fast = whatif::peak_transfers(&model, &bench_file(dir.path(), 0.1));
    assert_eq!(fast.per_barrier_ns, [Some(100)]);
    let report = whatif::what_if(&model, &Scenario { comm_at_peak: Some(fast), ..Scenario::default() });
    assert_eq!(report.simulated_ns, 1_710 + X - 100);
}

#[test]
fn collectives_without_a_measurement_keep_their_transfer_and_are_counted() {
    let traces = [
        rank(0, &[(0, GEMM, 10, 1_010), (20, ALL_REDUCE, 1_010, 1_210)]),
        rank(1, &[(0, GEMM, 10, 1_010), (20, ALL_REDUCE, 1_010, 1_210)]),
    ];
    let model = critical_path::build_model(&traces, &Options::default(), None, None).expect("model builds");
    let dir = tempfile::tempdir().unwrap();
    let bench = bench_file(dir.path(), 10.0);
    // Measurements of 2 ranks only: pretend the instance had 4 by asking for another rank count directly.
    assert_eq!(bench.at_size(CollectiveOp::AllReduce, 4, BYTES), None);
    // Both members have a measurement here; an all-to-all (not measured by bench) would not.
    assert_eq!(bench.at_size(CollectiveOp::AllToAll, 2, BYTES), None);
    let peak = whatif::PeakTransfers { source: "none".into(), per_barrier_ns: vec![None] };
    let report = whatif::what_if(&model, &Scenario { comm_at_peak: Some(peak), ..Scenario::default() });
    assert_eq!(report.collectives_without_peak, 2);
    assert_eq!(report.simulated_ns, report.measured_ns);
}
