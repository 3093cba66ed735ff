//! `analyzer export` (Perfetto), kernel by kernel: every kernel slice carries its report category, and every
//! matched collective kernel holds its wait for the last rank and its transfer, which add up to the kernel. A
//! synthetic two-rank trace whose waits and transfers are worked out by hand, and the two-rank samples through the
//! command itself.

use std::path::PathBuf;

use shardscope::perfetto::read_back::{self, Slice};
use shardscope_analyzer::figures::categories::Classifier;
use shardscope_analyzer::output::perfetto_notes::slice_notes;
use shardscope_model::{Collective, CollectiveOp, Device, DeviceIdx, Kernel, Process, Trace};

use crate::common;

const GEMM: &str = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn";
const ALL_REDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

/// Kernel slices, and only they, carry the launch's `grid`.
fn is_kernel(slice: &Slice) -> bool {
    slice.arg_names.iter().any(|name| name == "grid")
}

/// Every slice of a Perfetto file.
fn decode(bytes: &[u8]) -> Vec<Slice> {
    read_back::slices(bytes).expect("reads back").slices
}

/// The slices nested directly in slice `parent`, in time order.
fn children(slices: &[Slice], parent: usize) -> Vec<&Slice> {
    let mut list: Vec<&Slice> = slices.iter().filter(|s| s.parent == Some(parent)).collect();
    list.sort_by_key(|s| s.start_ns);
    list
}

/// One rank of the synthetic run: `(name, start_ns, end_ns)` kernels on one GPU, each all-reduce the next of
/// communicator 1 (sequence numbers 0, 1, …).
fn rank(rank: u32, kernels: &[(&str, i64, i64)]) -> Trace {
    let mut trace = Trace::default();
    trace.source.path = format!("synthetic-rank{rank}");
    let process = trace.add_process(Process { pid: 100 + rank, rank: Some(rank), ..Process::default() });
    trace.add_device(Device { ordinal: rank, process: Some(process), ..Device::default() });
    let all_reduce = trace.names.intern(ALL_REDUCE);
    for (i, &(name, start_ns, end_ns)) in kernels.iter().enumerate() {
        let name = trace.names.intern(name);
        let collective = (name == all_reduce).then(|| {
            let seq = trace.collectives.len() as u64;
            trace.collectives.push(Collective {
                op: CollectiveOp::AllReduce,
                communicator: Some(1),
                seq: Some(seq),
                bytes: Some(1 << 20),
                ..Collective::default()
            });
            trace.collectives.len() as u32 - 1
        });
        trace.kernels.push(Kernel {
            start_ns,
            end_ns,
            name,
            short_name: name,
            device: DeviceIdx(0),
            process,
            stream: 7,
            correlation_id: i as u32 + 1,
            collective,
            ..Kernel::default()
        });
    }
    trace.finish();
    trace
}

/// Time zero of the synthetic run, so that no timestamp is near 0.
const T0: i64 = 1_000_000;

/// Two ranks, two all-reduces. The first: rank 0 starts at T0+1000, rank 1 at T0+1300 (last), so rank 0 waits
/// 300 ns and moves data for 300 ns (to T0+1600); rank 1 waits 0 and transfers its whole 350 ns. The second: rank 1
/// starts at T0+2200, rank 0 at T0+2400 (last), so rank 1 waits 200 ns and transfers 100 ns; rank 0 waits 0 and
/// transfers its whole 100 ns.
fn synthetic_run() -> Vec<Trace> {
    vec![
        rank(
            0,
            &[
                (GEMM, T0, T0 + 1000),
                (ALL_REDUCE, T0 + 1000, T0 + 1600),
                (GEMM, T0 + 1600, T0 + 2400),
                (ALL_REDUCE, T0 + 2400, T0 + 2500),
            ],
        ),
        rank(
            1,
            &[
                (GEMM, T0 + 100, T0 + 1300),
                (ALL_REDUCE, T0 + 1300, T0 + 1650),
                (GEMM, T0 + 1650, T0 + 2200),
                (ALL_REDUCE, T0 + 2200, T0 + 2500),
            ],
        ),
    ]
}

/// The kernel slice of `name` starting at `start_ns` (the synthetic run has one of each).
fn kernel_at<'a>(slices: &'a [Slice], name: &str, start_ns: i64) -> (usize, &'a Slice) {
    let found: Vec<(usize, &Slice)> = slices
        .iter()
        .enumerate()
        .filter(|(_, s)| is_kernel(s) && s.name == name && s.start_ns == start_ns as u64)
        .collect();
    assert_eq!(found.len(), 1, "one {name} kernel at {start_ns}");
    found[0]
}

#[test]
fn synthetic_two_ranks_split_each_all_reduce_into_the_hand_computed_wait_and_transfer() {
    let traces = synthetic_run();
    let notes = slice_notes(&traces, &Classifier::builtin());
    let mut bytes = Vec::new();
    let stats = shardscope::perfetto::write_trace_with_notes(&traces, &notes, &[], &mut bytes).expect("writes");
    let slices = decode(&bytes);
    assert_eq!(stats.kernel_slices, 8);
    // Two of the four all-reduce kernels waited: only they get a waiting part.
    assert_eq!(stats.split_collectives, 2);
    for start_ns in [T0, T0 + 1600, T0 + 100, T0 + 1650] {
        let (_, gemm) = kernel_at(&slices, GEMM, start_ns);
        assert_eq!(gemm.categories, ["gemm"], "gemm at {start_ns}");
    }
    // (start, duration, wait, transfer, late rank) of each all-reduce kernel, by hand (see `synthetic_run`).
    let expected = [
        (T0 + 1000, 600, 300, 300, 1),
        (T0 + 1300, 350, 0, 350, 1),
        (T0 + 2200, 300, 200, 100, 0),
        (T0 + 2400, 100, 0, 100, 0),
    ];
    for (start_ns, duration_ns, wait_ns, transfer_ns, late_rank) in expected {
        let (index, kernel) = kernel_at(&slices, ALL_REDUCE, start_ns);
        let at = format!("all-reduce at {start_ns}");
        assert_eq!(kernel.categories, ["comm.all_reduce"], "{at}");
        assert_eq!(kernel.duration_ns(), duration_ns, "{at}");
        let args = (kernel.uint_args["wait_ns"], kernel.uint_args["transfer_ns"], kernel.uint_args["late_rank"]);
        assert_eq!(args, (wait_ns, transfer_ns, late_rank), "{at}");
        let parts: Vec<(&str, u64, u64, &[String])> = children(&slices, index)
            .into_iter()
            .map(|s| (s.name.as_str(), s.start_ns, s.duration_ns(), s.categories.as_slice()))
            .collect();
        let start_ns = start_ns as u64;
        if wait_ns == 0 {
            // Nothing to split: the kernel is all transfer, in its `comm.all_reduce` category.
            assert!(parts.is_empty(), "{at}: {parts:?}");
        } else {
            let waiting = format!("waiting for rank {late_rank}");
            let wait_category = ["wait.all_reduce".to_string()];
            let transfer_category = ["comm.all_reduce".to_string()];
            assert_eq!(
                parts,
                [
                    (waiting.as_str(), start_ns, wait_ns, &wait_category[..]),
                    ("transfer", start_ns + wait_ns, transfer_ns, &transfer_category[..]),
                ],
                "{at}"
            );
        }
    }
}

/// Runs `analyzer export` on `inputs` and checks every kernel slice of what it wrote: one category each, and each
/// matched collective kernel's wait and transfer adding up to it, as its parts where it waited.
fn check_export(name: &str, inputs: &[PathBuf]) {
    let output = std::env::temp_dir().join(format!("shardscope-split-{name}-{}.pftrace", std::process::id()));
    let mut args = vec!["export".to_string(), "-o".to_string(), output.display().to_string()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = common::analyzer(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let bytes = std::fs::read(&output).expect("written");
    std::fs::remove_file(&output).ok();
    let slices = decode(&bytes);

    let traces: Vec<Trace> = inputs.iter().flat_map(|p| shardscope_io::load(p).expect("the sample loads")).collect();
    let kernels: usize = traces.iter().map(|t| t.kernels.len()).sum();
    let matching = shardscope_analyzer::figures::collectives::match_traces(&traces, &Classifier::builtin());
    let matched: usize = matching.instances.iter().map(|i| i.members.len()).sum();

    let kernel_slices: Vec<(usize, &Slice)> = slices.iter().enumerate().filter(|(_, s)| is_kernel(s)).collect();
    assert_eq!(kernel_slices.len(), kernels, "{name}: one slice per kernel");
    let (mut split, mut waited) = (0, 0);
    for (index, kernel) in kernel_slices {
        assert_eq!(
            kernel.categories.len(),
            1,
            "{name}: {} at {}: {:?}",
            kernel.name,
            kernel.start_ns,
            kernel.categories
        );
        let (Some(&wait_ns), Some(&transfer_ns)) =
            (kernel.uint_args.get("wait_ns"), kernel.uint_args.get("transfer_ns"))
        else {
            continue;
        };
        split += 1;
        let at = format!("{name}: {} at {}", kernel.name, kernel.start_ns);
        assert_eq!(wait_ns + transfer_ns, kernel.duration_ns(), "{at}");
        let op = kernel.categories[0].strip_prefix("comm.").unwrap_or_else(|| panic!("{at}: a comm.* category"));
        let parts = children(&slices, index);
        if wait_ns == 0 {
            assert!(parts.is_empty(), "{at}");
            continue;
        }
        waited += 1;
        assert!(parts[0].name.starts_with("waiting for rank "), "{at}: {}", parts[0].name);
        assert_eq!((parts[0].start_ns, parts[0].duration_ns()), (kernel.start_ns, wait_ns), "{at}");
        assert_eq!(parts[0].categories, [format!("wait.{op}")], "{at}");
        if transfer_ns == 0 {
            assert_eq!(parts.len(), 1, "{at}");
            continue;
        }
        assert_eq!(parts.len(), 2, "{at}");
        assert_eq!(parts[1].name, "transfer", "{at}");
        assert_eq!((parts[1].start_ns, parts[1].end_ns), (kernel.start_ns + wait_ns, kernel.end_ns), "{at}");
        assert_eq!(parts[1].categories, [format!("comm.{op}")], "{at}");
    }
    assert_eq!(split, matched, "{name}: every matched collective kernel, and only they, split");
    assert!(waited > 0, "{name}: some collective waited");
}

#[test]
fn skewed_capture_every_kernel_has_a_category_and_wait_plus_transfer_is_the_kernel() {
    check_export("skew", &[common::repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz")]);
}

#[test]
fn kineto_ranks_every_kernel_has_a_category_and_wait_plus_transfer_is_the_kernel() {
    let dir = common::repo_root().join("sample-traces/kineto_tp2");
    check_export("kineto", &[dir.join("rank0.pt.trace.json.gz"), dir.join("rank1.pt.trace.json.gz")]);
}
