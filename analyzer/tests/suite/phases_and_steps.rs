//! Phases summed over their instances, and step (iteration) times, on real traces. Expected values were computed
//! independently: in Python over the SQLite rows (kernels and copies attributed to the innermost prefill range open
//! on the launching thread when the launch call started) and over the Kineto JSON's `ProfilerStep#N` events.

use crate::common;

use common::{analyzer, repo_root, shared_traces};
use serde_json::Value;

fn report(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Prefill's span used to run from its first instance to its last (3.269 s on rank 0, idle 3.209 s) although its
/// four ranges add up to 1.31 s: it is now the union of the instances' GPU spans.
#[test]
fn phase_span_is_the_sum_of_its_instances() {
    let path = repo_root().join("sample-traces/tp2_full_capture.sqlite.gz");
    let r = report(&["report", "--format", "json", path.to_str().unwrap()]);
    let expected = [
        // (rank, prefill span, per-instance spans sorted)
        (0, 1_339_834_339i64, [12_994_858i64, 13_014_666, 13_100_139, 1_300_724_676]),
        (1, 1_353_235_678, [13_016_121, 13_073_528, 13_174_072, 1_313_971_957]),
    ];
    for (rank, span, instances) in expected {
        let prefill = &r["ranks"][rank]["phases"]["prefill"];
        assert_eq!(prefill["span_ns"], span, "rank {rank}");
        assert_eq!(prefill["idle_ns"], span - prefill["gpu_busy_ns"].as_i64().unwrap(), "rank {rank}");
        let i = &prefill["instances"];
        assert_eq!(i["count"], 4, "rank {rank}");
        assert_eq!(i["total_ns"], span, "rank {rank}: instances do not overlap");
        assert_eq!((i["min_ns"].clone(), i["p50_ns"].clone()), (instances[0].into(), instances[1].into()));
        assert_eq!(i["max_ns"], instances[3], "rank {rank}");
        assert_eq!(r["ranks"][rank]["phases"]["decode"]["instances"]["count"], 128, "rank {rank}");
    }
    // Serving traces without step ranges: each phase range is one engine step.
    let steps = &r["ranks"][0]["steps"];
    assert_eq!(steps["source"], "phase_instances");
    assert_eq!(steps["found"], 4 + 128);
    let table = String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("4 instance(s), summed span 1.340 s"), "{table}");
    assert!(table.contains("steps (phase ranges): 132 found"), "{table}");
}

/// `ProfilerStep#2..6` of a V100 training rank: durations 345.770, 365.256, 346.097, 344.269, 336.328 ms.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn profiler_steps_give_step_times_and_warm_up_can_be_skipped() {
    let shared = shared_traces();
    let path = shared.join("kineto/df_index_resolver.json.gz");
    let r = report(&["report", "--format", "json", path.to_str().unwrap()]);
    let steps = &r["ranks"][0]["steps"];
    assert_eq!(steps["source"], "step_ranges");
    assert_eq!(steps["found"], 5);
    let t = &steps["time"];
    assert_eq!((t["min_ns"].as_i64(), t["p50_ns"].as_i64()), (Some(336_328_000), Some(345_770_000)));
    assert_eq!((t["p90_ns"].as_i64(), t["max_ns"].as_i64()), (Some(365_256_000), Some(365_256_000)));
    let skipped = report(&["report", "--format", "json", "--skip-steps", "2", path.to_str().unwrap()]);
    let steps = &skipped["ranks"][0]["steps"];
    assert_eq!((steps["found"].as_u64(), steps["skipped"].as_u64()), (Some(5), Some(2)));
    assert_eq!(steps["time"]["count"], 3);
    assert_eq!(steps["time"]["p50_ns"], 344_269_000);
    assert_eq!(steps["time"]["max_ns"], 346_097_000);
    let all_skipped = analyzer(&["report", "--skip-steps", "9", path.to_str().unwrap()]);
    let table = String::from_utf8(all_skipped.stdout).unwrap();
    assert!(table.contains("steps (step ranges): 5 found, all left out as warm-up"), "{table}");
}

/// Two data-parallel GPUs of one nsys export with NVTX but no step ranges: steps are inferred from the repeating
/// kernel sequence, marked so, and both ranks find about the same step time.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn steps_are_inferred_from_kernels_without_step_ranges() {
    let shared = shared_traces();
    let path = shared.join("nsys/mfu_2gpu_before.sqlite");
    let r = report(&["report", "--format", "json", path.to_str().unwrap()]);
    let medians: Vec<f64> = (0..2)
        .map(|rank| {
            let steps = &r["ranks"][rank]["steps"];
            assert_eq!(steps["source"], "inferred_from_kernels", "rank {rank}");
            assert!(steps["found"].as_u64().unwrap() >= 10, "rank {rank}: {steps}");
            steps["time"]["p50_ns"].as_f64().unwrap()
        })
        .collect();
    assert!((medians[0] / medians[1] - 1.0).abs() < 0.02, "{medians:?}");
    let table = String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("steps (inferred from a repeating kernel sequence)"), "{table}");
}

/// Without any NVTX or annotation range, the report says so instead of showing no phases.
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn traces_without_ranges_say_so() {
    let shared = shared_traces();
    let path = shared.join("nsys/mock.sqlite");
    let table = String::from_utf8(analyzer(&["report", path.to_str().unwrap()]).stdout).unwrap();
    assert!(table.contains("phases: none (the trace has no NVTX or annotation ranges)"), "{table}");
    assert!(table.contains("steps: none found"), "{table}");
    let r = report(&["report", "--format", "json", path.to_str().unwrap()]);
    assert_eq!(r["ranks"][0]["annotation_ranges"], 0);
    assert_eq!(r["ranks"][0]["steps"], Value::Null);
}
