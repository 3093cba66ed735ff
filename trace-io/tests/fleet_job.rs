//! The fleet-job generator (`examples/gen_fleet_job.rs`) at a small size, read back through the Kineto reader:
//! every rank's file parses with the expected kernels, rank and collectives, and the all-reduces behave as the
//! job model says (one end for every member, `transfer` after the last arrival, earlier arrivals wait).

// The example is compiled into this test as a module, so the test drives the same code the command runs; its
// `main` is not called here.
#[allow(dead_code)]
#[path = "../examples/gen_fleet_job.rs"]
mod gen_fleet_job;

use std::path::Path;

use gen_fleet_job::{Failure, Job, generate, parse_args};
use shardscope_io::kineto;
use shardscope_model::{CollectiveOp, Trace};

const RANKS: usize = 16;
const STEPS: usize = 2;
const LAYERS: usize = 3;
const TP: usize = 8;
const TP_TRANSFER_NS: i64 = 40_000;
const DP_TRANSFER_NS: i64 = 900_000;

fn small_job(seed: u64) -> Job {
    Job { ranks: RANKS, steps: STEPS, layers: LAYERS, tp: TP, seed }
}

fn read_rank(dir: &Path, rank: usize) -> Trace {
    let path = dir.join(format!("rank{rank:04}.json.gz"));
    kineto::read(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// One NCCL kernel of a rank, in the rank's order.
#[derive(Debug)]
struct AllReduce {
    group: String,
    start_ns: i64,
    end_ns: i64,
}

/// Checks one rank's file on its own and returns its all-reduces in order.
fn check_rank(trace: &Trace, rank: usize) -> Vec<AllReduce> {
    assert!(trace.warnings.is_empty(), "rank {rank}: {:?}", trace.warnings);
    let process = trace.processes.iter().find(|p| p.rank.is_some()).expect("a process with a rank");
    assert_eq!(process.rank, Some(rank as u32));
    assert_eq!(process.world_size, Some(RANKS as u32));
    assert_eq!(process.host.as_deref(), Some(format!("node{:03}", rank / 8).as_str()));

    assert_eq!(trace.kernels.len(), STEPS * (LAYERS * 3 + 1), "rank {rank}: kernels");
    let steps = trace.ranges.iter().filter(|r| trace.names.get(r.name).starts_with("ProfilerStep#")).count();
    assert_eq!(steps, STEPS);

    let group = rank / TP;
    let tp_members: Vec<u32> = (group * TP..(group + 1) * TP).map(|r| r as u32).collect();
    let everyone: Vec<u32> = (0..RANKS as u32).collect();
    let straggler = rank.is_multiple_of(32);
    let mut all_reduces = Vec::new();
    for kernel in &trace.kernels {
        let launch = kernel.launch.expect("every kernel linked to its cudaLaunchKernel");
        let call = &trace.api_calls[launch as usize];
        assert_eq!(trace.names.get(call.name), "cudaLaunchKernel");
        assert!(call.end_ns <= kernel.start_ns);
        let name = trace.names.get(kernel.name);
        let Some(collective) = kernel.collective else {
            // A compute kernel: its mean times the jitter's clip range (and the straggler's factor).
            let mean_ns: f64 = if name.contains("gemm") { 180_000.0 } else { 90_000.0 };
            let slow = if straggler { 1.15 } else { 1.0 };
            let duration_ns = kernel.duration_ns() as f64;
            assert!(duration_ns >= (0.8 * mean_ns * slow).floor() && duration_ns <= (1.2 * mean_ns * slow).ceil());
            continue;
        };
        assert!(name.starts_with("ncclDevKernel_AllReduce"), "{name}");
        let collective = &trace.collectives[collective as usize];
        assert_eq!(collective.op, CollectiveOp::AllReduce);
        assert_eq!(trace.names.get(collective.dtype), "BFloat16");
        let group_name = trace.names.get(collective.group_name).to_owned();
        let (elements, members) = if group_name == "dp" { (1u64 << 24, &everyone) } else { (4096 * 256, &tp_members) };
        if group_name != "dp" {
            assert_eq!(group_name, format!("tp{group}"));
        }
        assert_eq!(collective.in_elems, Some(elements));
        assert_eq!(collective.out_elems, Some(elements));
        assert_eq!(collective.bytes, Some(elements * 2));
        assert_eq!(collective.group_size, Some(members.len() as u32));
        assert_eq!(&collective.group_ranks, members);
        all_reduces.push(AllReduce { group: group_name, start_ns: kernel.start_ns, end_ns: kernel.end_ns });
    }
    assert_eq!(all_reduces.len(), STEPS * (LAYERS + 1));
    all_reduces
}

/// One all-reduce instance seen from its members: every member ends at the same time, `transfer_ns` after the
/// last arrival, and every other member waits (starts earlier than that end less the transfer). Returns the
/// ranks that arrived last (several when they left the previous collective together) and how many waited.
fn check_instance(members: &[(usize, &AllReduce)], transfer_ns: i64) -> (Vec<usize>, usize) {
    let last_start_ns = members.iter().map(|(_, a)| a.start_ns).max().unwrap();
    let mut last = Vec::new();
    let mut waited = 0;
    for (rank, all_reduce) in members {
        assert_eq!(all_reduce.end_ns, last_start_ns + transfer_ns, "rank {rank}: {all_reduce:?}");
        if all_reduce.start_ns == last_start_ns {
            last.push(*rank);
        } else {
            assert!(all_reduce.start_ns < all_reduce.end_ns - transfer_ns, "rank {rank} waits: {all_reduce:?}");
            waited += 1;
        }
    }
    (last, waited)
}

#[test]
fn small_job_reads_back_with_the_job_models_collectives() {
    let dir = tempfile::tempdir().unwrap();
    let kernels = generate(&small_job(1), dir.path(), 3).unwrap_or_else(|f| panic!("{}", f.message()));
    assert_eq!(kernels, (RANKS * STEPS * (LAYERS * 3 + 1)) as u64);
    let mut files: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    files.sort();
    let expected: Vec<_> = (0..RANKS).map(|r| format!("rank{r:04}.json.gz")).collect();
    assert_eq!(files, expected);

    let per_rank: Vec<Vec<AllReduce>> = (0..RANKS).map(|rank| check_rank(&read_rank(dir.path(), rank), rank)).collect();
    let member = |rank: usize, instance: usize| (rank, &per_rank[rank][instance]);
    for instance in 0..STEPS * (LAYERS + 1) {
        let is_dp = instance % (LAYERS + 1) == LAYERS;
        if is_dp {
            let members: Vec<_> = (0..RANKS).map(|r| member(r, instance)).collect();
            assert!(members.iter().all(|(_, a)| a.group == "dp"));
            // A group leaves its last tensor-parallel all-reduce together, so the last arrivals are one whole
            // group, and the other group waits for it.
            let (last, waited) = check_instance(&members, DP_TRANSFER_NS);
            assert_eq!(last.len(), TP, "instance {instance}: {last:?}");
            assert!(last.iter().all(|r| r / TP == last[0] / TP), "instance {instance}: {last:?}");
            assert_eq!(waited, RANKS - TP);
        } else {
            for group in 0..RANKS / TP {
                let members: Vec<_> = (group * TP..(group + 1) * TP).map(|r| member(r, instance)).collect();
                assert!(members.iter().all(|(_, a)| a.group == format!("tp{group}")));
                let (last, waited) = check_instance(&members, TP_TRANSFER_NS);
                assert_eq!((last.len(), waited), (1, TP - 1), "instance {instance}: {last:?}");
                // Rank 0 is the straggler: 15 % slower compute makes it the last of group 0 every time.
                if group == 0 {
                    assert_eq!(last, [0], "instance {instance}");
                }
            }
        }
    }
    // Every rank's next layer starts where its group's all-reduce ended: the data-parallel all-reduce of step 0
    // ends before anything of step 1 starts, for everyone.
    let step_end_ns = per_rank[0][LAYERS].end_ns;
    assert!(per_rank.iter().all(|r| r[LAYERS + 1].start_ns > step_end_ns));
}

#[test]
fn same_seed_same_files_other_seed_other_times() {
    let job = Job { ranks: 8, steps: 1, layers: 2, tp: 4, seed: 7 };
    let (first, second, other) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    generate(&job, first.path(), 2).unwrap_or_else(|f| panic!("{}", f.message()));
    generate(&job, second.path(), 1).unwrap_or_else(|f| panic!("{}", f.message()));
    generate(&Job { seed: 8, ..job.clone() }, other.path(), 2).unwrap_or_else(|f| panic!("{}", f.message()));
    for rank in 0..job.ranks {
        let name = format!("rank{rank:04}.json.gz");
        let bytes = |dir: &Path| std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(bytes(first.path()), bytes(second.path()), "{name}");
        assert_ne!(bytes(first.path()), bytes(other.path()), "{name}");
    }
}

#[test]
fn bad_arguments_and_unwritable_folders_are_refused() {
    let args = |text: &str| parse_args(text.split_whitespace().map(str::to_owned));
    let options = args("--ranks 16 --steps 3 --layers 2 --tp 4 --seed 9 --jobs 2 --out /tmp/x").unwrap();
    assert_eq!(options.job, Job { ranks: 16, steps: 3, layers: 2, tp: 4, seed: 9 });
    assert_eq!(options.jobs, 2);
    assert!(args("--ranks 12 --out /tmp/x").unwrap_err().contains("multiple of --tp"));
    assert!(args("--steps 0 --out /tmp/x").unwrap_err().contains("at least 1"));
    assert!(args("--layers many --out /tmp/x").unwrap_err().contains("whole number"));
    assert!(args("--ranks 16").unwrap_err().contains("--out is required"));
    assert!(args("--out").unwrap_err().contains("needs a value"));
    assert!(args("--rank 16 --out /tmp/x").unwrap_err().contains("unknown argument"));

    // A job whose kernels cannot even be counted is refused before anything is written.
    let dir = tempfile::tempdir().unwrap();
    let huge = Job { ranks: 8, steps: usize::MAX / 2, layers: 4, tp: 8, seed: 1 };
    let failure = generate(&huge, &dir.path().join("job"), 1).unwrap_err();
    assert!(failure.message().starts_with("the job is too large"), "{}", failure.message());
    assert!(!dir.path().join("job").exists());

    // A folder below a plain file cannot be made.
    let file = tempfile::NamedTempFile::new().unwrap();
    let failure = generate(&small_job(1), &file.path().join("job"), 1).unwrap_err();
    assert!(matches!(failure, Failure::Usage(_)), "{failure:?}");
    assert!(failure.message().starts_with("cannot create"), "{}", failure.message());
}
