//! The report in parts (`report::partial`): every trace analysed alone, the parts serialised, and merged again,
//! must give the report of all traces analysed together, byte for byte as `report --format json` prints it; also
//! through the keyed reduction (rows split into buckets by key, matched bucket by bucket, instances shuffled).

use crate::common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use common::repo_root;
use shardscope_analyzer::output::render;
use shardscope_analyzer::report::partial::{self, KeyedRow, TracePart};
use shardscope_analyzer::report::{Options, analyze};
use shardscope_model::Trace;

/// The runs of `sample-traces/`: each file alone, the Kineto folder (two files, two ranks) together, and the memory
/// samples (their reports have a `memory` section).
fn sample_runs() -> Vec<(String, Vec<Trace>)> {
    let dir = repo_root().join("sample-traces");
    let mut runs = Vec::new();
    for name in [
        "tp1_nsys.sqlite.gz",
        "tp1_capture.sqlite.gz",
        "tp2_nsys.sqlite.gz",
        "tp2_capture.sqlite.gz",
        "tp2_skew_capture.sqlite.gz",
        "kineto_tp2",
        "memory/memory_probe_capture.sqlite.gz",
        "memory/memory_probe_nsys.sqlite.gz",
        "memory/memory_probe_kineto.json.gz",
    ] {
        let traces = shardscope_io::load(&dir.join(name)).expect("sample trace loads");
        runs.push((name.to_string(), traces));
    }
    runs
}

/// Parts of `traces`, through JSON and back as a worker would send them.
fn parts_of(traces: &[Trace], options: &Options) -> Vec<TracePart> {
    traces
        .iter()
        .map(|trace| {
            let text = serde_json::to_string(&partial::trace_part(trace, options)).expect("a part serialises");
            serde_json::from_str(&text).expect("a part reads back")
        })
        .collect()
}

/// The merge in steps, as a distributed run does it: keyed rows hashed into `buckets`, clock differences and
/// matches per bucket, each bucket's match through JSON; each trace finished without its kernel rows from its
/// tallies of every bucket (in reverse bucket order) and through JSON; the report assembled from headers that hold neither rank reports nor
/// kernel rows, with the instances in reverse order.
fn keyed_merge(parts: &[TracePart], options: &Options, buckets: usize) -> serde_json::Value {
    let ranks = partial::rank_entries(parts);
    let mut first_input = 0;
    let mut by_bucket: Vec<Vec<KeyedRow>> = vec![Vec::new(); buckets];
    for part in parts {
        for row in partial::keyed_rows(part, first_input) {
            let mut hasher = DefaultHasher::new();
            row.key().hash(&mut hasher);
            by_bucket[(hasher.finish() % buckets as u64) as usize].push(row);
        }
        first_input += part.devices.len();
    }
    let offsets = if partial::hosts_differ(parts) {
        let differences = by_bucket.iter().flat_map(|rows| partial::row_differences(rows.clone()));
        shardscope_analyzer::figures::collectives::alignment_offsets(ranks.len(), differences)
    } else {
        Vec::new()
    };
    let mut instances = Vec::new();
    let mut shares_by_trace: Vec<Vec<partial::TraceTallies>> = vec![Vec::new(); parts.len()];
    for rows in by_bucket.into_iter().rev() {
        let matched = partial::match_rows(rows, &ranks, &offsets, options.keep_instances);
        let text = serde_json::to_string(&matched).expect("a bucket's match serialises");
        let matched: partial::BucketMatch = serde_json::from_str(&text).expect("a bucket's match reads back");
        instances.extend(matched.instances);
        for (trace, shares) in matched.shares {
            shares_by_trace[trace].push(shares);
        }
    }
    instances.reverse();
    let job_has_steps = partial::job_has_steps(parts);
    let finished: Vec<partial::FinishedTrace> = parts
        .iter()
        .enumerate()
        .map(|(trace, part)| {
            // A part is finished where it is, without its kernel rows (they went to the buckets).
            let mut part = part.clone();
            for device in &mut part.devices {
                device.comm.clear();
            }
            let finished = partial::finish_trace(&part, trace, &ranks, job_has_steps, &shares_by_trace[trace])
                .expect("every tally fits its trace");
            let text = serde_json::to_string(&finished).expect("a finished trace serialises");
            serde_json::from_str(&text).expect("a finished trace reads back")
        })
        .collect();
    let headers: Vec<TracePart> = parts
        .iter()
        .map(|part| {
            let mut header = part.clone();
            for device in &mut header.devices {
                device.report = serde_json::Value::Null;
                device.hta_if_job_has_steps = None;
                device.comm.clear();
                device.memory = None;
            }
            header
        })
        .collect();
    partial::assemble(&headers, finished, instances, options)
}

fn check(name: &str, traces: &[Trace], options: &Options) {
    let whole = render::json(&analyze(traces, options));
    let parts = parts_of(traces, options);
    let merged = serde_json::to_string_pretty(&partial::merge(&parts, options)).expect("serialises");
    assert!(
        merged == whole,
        "{name}: merged parts differ from the whole report:\n{}",
        first_difference(&merged, &whole)
    );
    for buckets in [1, 3] {
        let keyed = serde_json::to_string_pretty(&keyed_merge(&parts, options, buckets)).expect("serialises");
        assert!(
            keyed == whole,
            "{name}: keyed merge ({buckets} buckets) differs:\n{}",
            first_difference(&keyed, &whole)
        );
    }
}

fn first_difference(a: &str, b: &str) -> String {
    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(a.lines().count().min(b.lines().count()));
    format!("line {line}: {:?}\n   vs  {:?}", a.lines().nth(line), b.lines().nth(line))
}

#[test]
fn merged_parts_are_the_whole_report_on_every_sample() {
    for (name, traces) in sample_runs() {
        check(&name, &traces, &Options::default());
        // The instances (with every rank's wait) are kept in the report when asked for.
        check(&name, &traces, &Options { keep_instances: true, ..Options::default() });
    }
}

#[test]
fn matched_collectives_move_time_from_transfer_to_wait() {
    // The check above would pass for a merge that never matched anything if the samples had no matched
    // collectives: the skewed capture has them, with waiting.
    let traces = shardscope_io::load(&repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz")).unwrap();
    let parts = parts_of(&traces, &Options::default());
    let merged = partial::merge(&parts, &Options::default());
    assert!(merged["collectives"]["matched_instances"].as_u64().unwrap() > 0);
    let waited: i64 = merged["ranks"].as_array().unwrap().iter().map(|r| r["comm_wait_ns"].as_i64().unwrap()).sum();
    assert!(waited > 0, "the skewed sample has ranks waiting at collectives");
    let unmerged: i64 = parts.iter().flat_map(|p| &p.devices).map(|d| d.report["comm_wait_ns"].as_i64().unwrap()).sum();
    assert_eq!(unmerged, 0, "a part alone knows no waiting");
}

#[test]
fn a_window_and_ranks_on_two_hosts_merge_the_same() {
    let dir = repo_root().join("sample-traces");
    // A window through the middle of the two-rank sample: kernels cut by it are matched but not split.
    let traces = shardscope_io::load(&dir.join("tp2_nsys.sqlite.gz")).unwrap();
    let (first, last) = traces
        .iter()
        .flat_map(|t| t.kernels.iter().map(|k| (k.start_ns, k.end_ns)))
        .fold((i64::MAX, i64::MIN), |(a, b), (s, e)| (a.min(s), b.max(e)));
    let window = Some((first + (last - first) / 3, first + 2 * (last - first) / 3));
    check("tp2_nsys windowed", &traces, &Options { window_ns: window, ..Options::default() });
    // Each Kineto rank said to be on a host of its own: clocks are aligned on collective ends.
    let mut traces = shardscope_io::load(&dir.join("kineto_tp2")).unwrap();
    for (index, trace) in traces.iter_mut().enumerate() {
        for process in &mut trace.processes {
            process.host = Some(format!("node{index}"));
        }
    }
    let whole = analyze(&traces, &Options::default());
    assert!(whole.collectives.clocks_aligned);
    check("kineto_tp2 on two hosts", &traces, &Options::default());
}

#[test]
fn shares_that_do_not_fit_the_part_are_an_error_not_dropped() {
    let traces = shardscope_io::load(&repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz")).unwrap();
    let parts = parts_of(&traces, &Options::default());
    let ranks = partial::rank_entries(&parts);
    let (trace, part) = parts.iter().enumerate().find(|(_, p)| !p.devices.is_empty()).expect("a part with a GPU");
    let input = ranks.iter().position(|r| r.trace == trace).expect("the trace has a rank input");
    let labels = part.devices[0].comm_labels.len() as u32;
    assert!(labels > 0, "the skewed sample has communication kernels");
    let tally = partial::ShareTally { wait_ns: 5, positive_wait_ns: 5, transfer_ns: 7, late: 1 };
    let finish = |key: partial::TallyKey| partial::finish_trace(part, trace, &ranks, false, &[vec![(key, tally)]]);
    assert!(finish((input, 0, None)).is_ok(), "a tally of a label the GPU has is applied");
    let unknown_label = finish((input, labels, None)).unwrap_err().to_string();
    assert!(unknown_label.contains("does not have"), "{unknown_label}");
    let other_gpu = finish((ranks.len() + 3, 0, None)).unwrap_err().to_string();
    assert!(other_gpu.contains("not in this part"), "{other_gpu}");
}

#[test]
fn merged_parts_carry_the_memory_section() {
    // The whole-report comparison above would pass if both left the section out: the merge must give the samples'
    // known peaks (`python/tests/test_memory.py` checks the same numbers against the memory tables).
    let dir = repo_root().join("sample-traces/memory");
    let options = Options::default();
    let merged = |name: &str| {
        let traces = shardscope_io::load(&dir.join(name)).expect("sample trace loads");
        partial::merge(&parts_of(&traces, &options), &options)
    };
    let capture = merged("memory_probe_capture.sqlite.gz");
    assert_eq!(capture["memory"][0]["cuda"]["peak_bytes"], 721_552_384_u64);
    assert_eq!(capture["memory"][0]["rank"], capture["ranks"][0]["rank"]);
    // With the probe's phases, the merge carries the phases' figures too, equal to the whole report's.
    let phases = Options { phase_pattern: regex::Regex::new("^(load|grow|trim|steady)$").unwrap(), ..options.clone() };
    let traces = shardscope_io::load(&dir.join("memory_probe_capture.sqlite.gz")).unwrap();
    check("memory capture with phases", &traces, &phases);
    let with_phases = partial::merge(&parts_of(&traces, &phases), &phases);
    let grow = with_phases["memory"][0]["phases"].as_array().unwrap().iter().find(|p| p["name"] == "grow").cloned();
    assert_eq!(grow.expect("grow phase")["cuda"]["peak_bytes"], 721_552_384_u64);
    let kineto = merged("memory_probe_kineto.json.gz");
    let framework = &kineto["memory"][0]["framework"];
    assert_eq!(framework["peak_allocated_bytes"], 419_433_984_u64);
    assert_eq!(framework["peak_reserved_bytes"], 654_311_424_u64);
}

#[test]
fn matched_waits_reach_the_steady_state_in_parts_too() {
    // Two steps left out as warm-up: each rank's steady state counts the waits of its matched kernels inside it.
    let options = Options { skip_steps: 2, ..Options::default() };
    let traces = crate::parallel_report::one_rank_traces(4, 12);
    check("4 rank traces, 2 warm-up steps", &traces, &options);
    let whole: serde_json::Value = serde_json::from_str(&render::json(&analyze(&traces, &options))).unwrap();
    let steady_wait: i64 =
        whole["ranks"].as_array().unwrap().iter().map(|r| r["steady_state"]["comm_wait_ns"].as_i64().unwrap()).sum();
    assert!(steady_wait > 0, "the steady states wait");
}
