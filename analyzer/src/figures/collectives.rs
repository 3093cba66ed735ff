//! Collectives across ranks: the same collective instance found on every rank, and for each rank how long it
//! waited for the others and how long data actually moved.
//!
//! A collective's kernel starts on each rank when that rank gets there, and can only finish once the last rank
//! has arrived. So for one instance, with `latest` the latest kernel start over the ranks:
//! - `wait_r = min(latest, end_r) − start_r` (time rank r spent waiting for its peers);
//! - `transfer_r = end_r − min(latest, end_r)` (time the data moved); wait + transfer = the kernel's duration;
//! - the rank that arrived last is the *late rank*.
//!
//! Matching: by communicator and sequence number when the trace records them (NCCL profiler plugin);
//! otherwise by order: the k-th kernel of a collective type on a process group is the k-th on every member.
//! Order matching is right for collectives and for all-to-all style grouped send/receive; for pipeline-parallel
//! point-to-point pairs it is only approximate.
//!
//! Clocks: ranks recorded on one host share its clock. When the traces say the ranks ran on different hosts,
//! each rank's clock is shifted so that collective *ends* line up (the median over instances), and the residual
//! spread of ends is reported.
//!
//! Bandwidth (nccl-tests conventions): `algbw = S / t`, `busbw = algbw × f`, with f = 2(n−1)/n for all-reduce,
//! (n−1)/n for all-gather, reduce-scatter and all-to-all (S = the whole gathered or scattered buffer), 1 otherwise;
//! t = the instance's transfer time (latest start to last end).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use shardscope_model::{CollectiveOp, DeviceIdx, NameId, Trace};

use crate::figures::bench_peaks::BenchPeaks;
use crate::figures::categories::{Classifier, KernelClass};

/// One rank of the run: a GPU in one of the traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RankKey {
    /// Index of the trace in the input list.
    pub trace: usize,
    /// The GPU in that trace.
    pub device: DeviceIdx,
}

/// Wait and transfer of one rank's part in a matched collective instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankShare {
    /// Time spent waiting for the last rank.
    pub wait_ns: i64,
    /// Time spent moving data.
    pub transfer_ns: i64,
    /// True when this rank arrived last.
    pub late: bool,
}

/// One collective instance, matched across ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Instance {
    /// Communicator (id or process-group name; `default` when the trace has neither).
    pub communicator: String,
    /// Collective type.
    pub op: CollectiveOp,
    /// Position of this instance among those of its communicator and type (or its sequence number).
    pub seq: u64,
    /// Message size S in bytes (nccl-tests convention), where known.
    pub bytes: Option<u64>,
    /// Ranks taking part.
    pub nranks: u32,
    /// The rank that arrived last.
    pub late_rank: u32,
    /// Latest start to last end.
    pub transfer_ns: i64,
    /// The longest wait of any rank.
    pub max_wait_ns: i64,
    /// Summed wait of all ranks.
    pub wait_total_ns: i64,
    /// S / transfer time, in GB/s (1e9 bytes per second).
    pub algbw_gbps: Option<f64>,
    /// algbw × the collective's bus factor, in GB/s.
    pub busbw_gbps: Option<f64>,
    /// Phase of the instance (the phase most of its ranks launched it in), if any.
    pub phase: Option<String>,
    /// Each taking rank's wait for the last rank, by rank number (the heatmap of waiting is drawn from these).
    pub rank_wait_ns: BTreeMap<u32, i64>,
    /// Each taking rank's kernel as `[start_ns, end_ns]`, by rank number, on that rank's trace clock (as recorded,
    /// before any alignment of clocks across hosts: the clock `--window` takes).
    pub rank_times_ns: BTreeMap<u32, [i64; 2]>,
    /// Its kernels: (index of the trace in the input, index of the kernel in that trace).
    #[serde(skip)]
    pub members: Vec<(usize, u32)>,
    /// Each member's wait and transfer, in the order of `members`.
    #[serde(skip)]
    pub shares: Vec<RankShare>,
}

/// Per-group statistics: one row per communicator, type, size bucket and phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Communicator.
    pub communicator: String,
    /// Collective type.
    pub op: CollectiveOp,
    /// Message-size bucket, e.g. `1-16 MiB`.
    pub size_bucket: &'static str,
    /// Phase, or empty.
    pub phase: String,
    /// Number of instances.
    pub count: u64,
    /// Summed message size.
    pub bytes: u64,
    /// Summed transfer time of the instances.
    pub transfer_total_ns: i64,
    /// Median transfer time.
    pub transfer_median_ns: i64,
    /// Summed wait over every rank of every instance.
    pub wait_total_ns: i64,
    /// Median over instances of the longest wait.
    pub wait_median_ns: i64,
    /// Median bus bandwidth, GB/s.
    pub busbw_median_gbps: Option<f64>,
    /// Median busbw as a share of the best busbw `bench` measured for this collective type, percent.
    pub busbw_pct_of_peak: Option<f64>,
    /// Median over instances of busbw ÷ the busbw `bench` measured at the same size and rank count, percent.
    pub busbw_pct_of_bench_same_size: Option<f64>,
    /// How often each rank arrived last.
    pub late_rank_counts: BTreeMap<u32, u64>,
}

/// What one rank's late arrivals cost the others: the collectives it arrived last at, and the waiting of the other
/// members there. The late rank is the one whose lateness caused the most waiting, not the one most often last:
/// many short waits can weigh less than a few long ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankLateness {
    /// The rank.
    pub rank: u32,
    /// Matched collectives this rank arrived at last.
    pub arrived_last: u64,
    /// Summed wait of the other members of those collectives (the late member itself waits 0).
    pub caused_wait_ns: i64,
    /// The most waiting one of those collectives caused.
    pub largest_wait_ns: i64,
}

/// Per rank that arrived last at least once, what its lateness cost; ordered by the waiting caused, most first
/// (ties: the lower rank first).
pub fn lateness(instances: &[Instance]) -> Vec<RankLateness> {
    let mut by_rank: BTreeMap<u32, RankLateness> = BTreeMap::new();
    for instance in instances {
        let entry = by_rank.entry(instance.late_rank).or_insert(RankLateness {
            rank: instance.late_rank,
            arrived_last: 0,
            caused_wait_ns: 0,
            largest_wait_ns: 0,
        });
        entry.arrived_last += 1;
        // The late member's own wait is zero (its start is the latest), so the instance's summed wait is the
        // others' waiting.
        entry.caused_wait_ns = entry.caused_wait_ns.saturating_add(instance.wait_total_ns);
        entry.largest_wait_ns = entry.largest_wait_ns.max(instance.wait_total_ns);
    }
    let mut list: Vec<RankLateness> = by_rank.into_values().collect();
    list.sort_by(|a, b| b.caused_wait_ns.cmp(&a.caused_wait_ns).then(a.rank.cmp(&b.rank)));
    list
}

/// The result of matching.
#[derive(Debug, Clone, Default)]
pub struct Matching {
    /// Every instance seen on two or more ranks.
    pub instances: Vec<Instance>,
    /// Wait and transfer per (rank, kernel index in its trace).
    pub shares: Shares,
    /// Communication kernels that could not be matched to another rank.
    pub unmatched_kernels: u64,
    /// Whether clocks were aligned on collective ends.
    pub clocks_aligned: bool,
    /// Median spread of collective end times across ranks after any alignment (ns).
    pub end_spread_median_ns: Option<i64>,
}

/// Wait and transfer per (rank input, kernel index in its trace) of every matched kernel: a map per shard of kernel
/// indices, so that worker threads fill the shards side by side (one map filled on one thread took 0.15 s at the end
/// of each matching of a 10 M-kernel run, with the other cores idle).
#[derive(Debug, Clone, Default)]
pub struct Shares {
    shards: Vec<foldhash::HashMap<(usize, u32), RankShare>>,
}

/// Shards of [`Shares`]: a few per worker of a large machine.
const SHARE_SHARDS: usize = 64;

/// Instances whose members a worker sorts by shard at a time in [`Shares::of`].
const INSTANCES_PER_RUN: usize = 1 << 12;

/// A matched kernel, (rank input, kernel index), and its share.
type ShareEntry = ((usize, u32), RankShare);

impl Shares {
    /// The shares of `instances`' members; a member of two instances keeps the later one's. Each run of instances
    /// has its members sorted by shard on a worker, then each shard takes its members from every run in turn.
    pub fn of(instances: &[Instance]) -> Shares {
        let members: usize = instances.iter().map(|i| i.members.len()).sum();
        // A small matching is filled on the calling thread, in one shard.
        let shards = if members < 1 << 16 { 1 } else { SHARE_SHARDS };
        let runs: Vec<Vec<Vec<ShareEntry>>> = instances
            .par_chunks(INSTANCES_PER_RUN)
            .map(|run| {
                let mut by_shard: Vec<Vec<ShareEntry>> = vec![Vec::new(); shards];
                for instance in run {
                    for (&member, &share) in instance.members.iter().zip(&instance.shares) {
                        by_shard[Self::shard_of(member, shards)].push((member, share));
                    }
                }
                by_shard
            })
            .collect();
        let shards = (0..shards)
            .into_par_iter()
            .map(|shard| {
                let mut map = foldhash::HashMap::default();
                map.reserve(runs.iter().map(|run| run[shard].len()).sum());
                for run in &runs {
                    map.extend(run[shard].iter().copied());
                }
                map
            })
            .collect();
        Shares { shards }
    }

    fn shard_of(key: (usize, u32), shards: usize) -> usize {
        key.1 as usize % shards
    }

    fn shard(&self, key: &(usize, u32)) -> Option<&foldhash::HashMap<(usize, u32), RankShare>> {
        self.shards.get(Self::shard_of(*key, self.shards.len().max(1)))
    }

    /// The share of kernel `key.1` of rank input `key.0`, where it was matched.
    pub fn get(&self, key: &(usize, u32)) -> Option<&RankShare> {
        self.shard(key)?.get(key)
    }

    /// Whether kernel `key.1` of rank input `key.0` was matched.
    pub fn contains_key(&self, key: &(usize, u32)) -> bool {
        self.get(key).is_some()
    }

    /// Every matched kernel and its share, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&(usize, u32), &RankShare)> {
        self.shards.iter().flatten()
    }

    /// How many kernels were matched.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.len()).sum()
    }

    /// Whether no kernel was matched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Index<&(usize, u32)> for Shares {
    type Output = RankShare;

    fn index(&self, key: &(usize, u32)) -> &RankShare {
        self.get(key).expect("a matched kernel")
    }
}

/// A communication kernel of one rank, as the matcher sees it: small and serialisable, so that ranks analysed
/// apart (see [`crate::report::partial`]) can be matched together. It is written as an array of its fields in
/// order (a job has one per collective per rank, so field names would be most of the bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "CommKernelFields", try_from = "CommKernelFields")]
pub struct CommKernel {
    /// Index of the kernel in its trace.
    pub kernel: u32,
    /// Kernel start on the rank's clock.
    pub start_ns: i64,
    /// Kernel end on the rank's clock.
    pub end_ns: i64,
    /// Collective type.
    pub op: CollectiveOp,
    /// Communicator (id or process-group name, else `default`); shared by the rows of one rank that name it (a job
    /// keeps a row per collective kernel of every rank, tens of millions in a large one).
    pub communicator: Arc<str>,
    /// Sequence number recorded by the NCCL profiler plugin, if any.
    pub seq: Option<u64>,
    /// Message size S (nccl-tests convention), if known.
    pub bytes: Option<u64>,
    /// Ranks of the communicator, if recorded.
    pub group_size: Option<u32>,
    /// Phase the kernel was launched in; shared like the communicator.
    pub phase: Option<Arc<str>>,
}

/// [`CommKernel`]'s fields in order, the collective type by its position in [`ALL_OPS`] (one byte where its name
/// took ten: a job has a third of its kernels in these rows, and the rows are most of what a distributed analysis
/// moves between workers).
type CommKernelFields = (u32, i64, i64, u8, String, Option<u64>, Option<u64>, Option<u32>, Option<String>);

impl From<CommKernel> for CommKernelFields {
    fn from(k: CommKernel) -> CommKernelFields {
        // The discriminant, which covers every variant; `ALL_OPS` lists them in declaration order (tested), so
        // it reads back as the same type.
        let (communicator, phase) = (k.communicator.to_string(), k.phase.map(|p| p.to_string()));
        (k.kernel, k.start_ns, k.end_ns, k.op as u8, communicator, k.seq, k.bytes, k.group_size, phase)
    }
}

/// A collective type number outside [`ALL_OPS`] in a row read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown collective type number {0}")]
pub struct UnknownCollectiveType(pub u8);

impl TryFrom<CommKernelFields> for CommKernel {
    type Error = UnknownCollectiveType;

    fn try_from(f: CommKernelFields) -> Result<CommKernel, UnknownCollectiveType> {
        let op = *ALL_OPS.get(usize::from(f.3)).ok_or(UnknownCollectiveType(f.3))?;
        Ok(CommKernel {
            kernel: f.0,
            start_ns: f.1,
            end_ns: f.2,
            op,
            communicator: Arc::from(f.4),
            seq: f.5,
            bytes: f.6,
            group_size: f.7,
            phase: f.8.map(Arc::from),
        })
    }
}

/// Every collective type, in the order the matcher sorts them.
pub const ALL_OPS: [CollectiveOp; 10] = CollectiveOp::ALL;

/// A [`CollectiveOp`] as its variant name (as the report writes it), read back by the same name.
pub mod op_by_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use shardscope_model::CollectiveOp;

    /// The variant's name.
    pub fn serialize<S: Serializer>(op: &CollectiveOp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{op:?}"))
    }

    /// The variant of that name.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<CollectiveOp, D::Error> {
        let name = String::deserialize(deserializer)?;
        super::ALL_OPS
            .into_iter()
            .find(|op| format!("{op:?}") == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown collective type {name:?}")))
    }
}

/// Input for [`match_collectives`]: one entry per rank.
pub struct RankInput<'a> {
    /// Which rank.
    pub key: RankKey,
    /// Its rank number.
    pub rank: u32,
    /// The trace it is in.
    pub trace: &'a Trace,
    /// Indices in `trace.kernels` of this rank's kernels, in time order.
    pub kernel_indices: &'a [u32],
    /// Classes of the trace's names (from [`Classifier::classify_names`]).
    pub classes: &'a [KernelClass],
    /// Phase of a kernel, by index.
    pub phase_of_kernel: &'a (dyn Fn(u32) -> Option<String> + Sync),
}

/// The bus factor of nccl-tests for `op` over `n` ranks.
pub fn bus_factor(op: CollectiveOp, n: u32) -> f64 {
    let n = f64::from(n.max(1));
    match op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Message size S of nccl-tests from a trace's per-rank input bytes: all-gather's S is the gathered output.
fn message_bytes(
    op: CollectiveOp,
    input_bytes: Option<u64>,
    in_elems: Option<u64>,
    out_elems: Option<u64>,
) -> Option<u64> {
    let input_bytes = input_bytes?;
    match (op, in_elems, out_elems) {
        (CollectiveOp::AllGather, Some(i), Some(o)) if i > 0 && o > i => Some(input_bytes / i * o),
        _ => Some(input_bytes),
    }
}

/// Named message-size buckets, by powers of 16.
pub fn size_bucket(bytes: Option<u64>) -> &'static str {
    match bytes {
        None => "unknown",
        Some(b) if b < 64 << 10 => "<64 KiB",
        Some(b) if b < 1 << 20 => "64 KiB-1 MiB",
        Some(b) if b < 16 << 20 => "1-16 MiB",
        Some(b) if b < 256 << 20 => "16-256 MiB",
        Some(_) => ">=256 MiB",
    }
}

/// Kernels of one rank read per task by [`comm_kernels`].
const KERNELS_PER_TASK: usize = 1 << 16;

/// The communication kernels of one rank, in time order: a run of its kernels per task on worker threads (a rank of a
/// large file has millions of kernels, and a task per rank kept half of 16 cores idle while an 8-rank run was
/// matched), the runs joined in order.
pub fn comm_kernels(input: &RankInput, classifier: &Classifier) -> Vec<CommKernel> {
    let runs: Vec<Vec<CommKernel>> = (input.kernel_indices.par_chunks(KERNELS_PER_TASK))
        .map(|run| comm_kernels_of_run(input, run, classifier))
        .collect();
    runs.concat()
}

/// The communication kernels among `run` (indices into the rank's trace), in the run's order.
fn comm_kernels_of_run(input: &RankInput, run: &[u32], classifier: &Classifier) -> Vec<CommKernel> {
    let trace = input.trace;
    let mut out = Vec::new();
    // Each communicator and phase named once per run, its rows sharing the name (rows are told apart by the
    // names' text, never by which copy they share).
    let mut communicators: HashMap<CommunicatorName, Arc<str>> = HashMap::new();
    let mut phases: HashMap<String, Arc<str>> = HashMap::new();
    for &index in run {
        let kernel = &trace.kernels[index as usize];
        let class = Classifier::lookup(input.classes, kernel.name);
        if !classifier.is_communication(class.category) {
            continue;
        }
        let meta = kernel.collective.and_then(|c| trace.collectives.get(c as usize));
        let op = class.collective.or(meta.map(|m| m.op)).unwrap_or(CollectiveOp::Other);
        let name = match meta {
            Some(m) if m.communicator.is_some() => CommunicatorName::Id(m.communicator.unwrap_or_default()),
            Some(m) if !trace.names.get(m.group_name).is_empty() => CommunicatorName::Group(m.group_name),
            _ => CommunicatorName::Default,
        };
        let communicator = communicators
            .entry(name)
            .or_insert_with(|| match name {
                CommunicatorName::Id(id) => Arc::from(format!("{id:#x}")),
                CommunicatorName::Group(group) => Arc::from(trace.names.get(group)),
                CommunicatorName::Default => Arc::from("default"),
            })
            .clone();
        let phase = (input.phase_of_kernel)(index)
            .map(|phase| phases.entry(phase).or_insert_with_key(|n| Arc::from(n.as_str())).clone());
        out.push(CommKernel {
            kernel: index,
            start_ns: kernel.start_ns,
            end_ns: kernel.end_ns,
            op,
            communicator,
            seq: meta.and_then(|m| m.seq),
            bytes: meta.and_then(|m| message_bytes(op, m.bytes, m.in_elems, m.out_elems)),
            group_size: meta.and_then(|m| m.group_size),
            phase,
        });
    }
    out
}

/// How a kernel's communicator is named: its recorded id, its process group's name, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CommunicatorName {
    Id(u64),
    Group(NameId),
    Default,
}

/// Matches the communication kernels of all ranks and computes wait, transfer and bandwidth.
pub fn match_collectives(inputs: &[RankInput], classifier: &Classifier, hosts_differ: bool) -> Matching {
    let ranks: Vec<(RankKey, u32)> = inputs.iter().map(|input| (input.key, input.rank)).collect();
    crate::figures::workers::run(|| {
        let kernels: Vec<Vec<CommKernel>> = inputs.par_iter().map(|input| comm_kernels(input, classifier)).collect();
        match_comm_kernels(&ranks, kernels, hosts_differ)
    })
}

/// The instance slot of each kernel of one rank: its sequence number when recorded, else its position among the
/// rank's kernels of the same communicator and type.
pub fn slots(kernels: &[CommKernel]) -> Vec<u64> {
    let mut ordinal: HashMap<(&str, CollectiveOp), u64> = HashMap::new();
    kernels
        .iter()
        .map(|kernel| {
            let next = ordinal.entry((&*kernel.communicator, kernel.op)).or_default();
            let slot = kernel.seq.unwrap_or(*next);
            *next += 1;
            slot
        })
        .collect()
}

/// Where one communication kernel falls in instance order, in a few integers: communicator (its position among
/// the job's communicators by name) and collective type, slot, then rank input and position in that rank's list.
/// Sorting these sorts the kernels by (communicator, type, slot, rank input, time) without reading the rows.
type InstanceKey = (u64, u64, u64);

/// Every rank's communication kernels in instance order: by communicator, collective type and slot, and within one
/// instance by rank input (then time). Returns each kernel's key and (rank input, kernel), in that order, so that
/// the kernels of one instance are one run of the list. The rows stay where they are (a large job has tens of
/// millions): only their keys and references are sorted, and every list is written by all the worker threads.
fn in_instance_order(kernels: &[Vec<CommKernel>]) -> (Vec<InstanceKey>, Vec<(usize, &CommKernel)>) {
    let names = communicator_names(kernels);
    let slots: Vec<Vec<u64>> = kernels.par_iter().map(|rank| slots(rank)).collect();
    let starts: Vec<usize> = kernels
        .iter()
        .scan(0, |next, rank| {
            let start = *next;
            *next += rank.len();
            Some(start)
        })
        .collect();
    let total = kernels.iter().map(Vec::len).sum::<usize>();
    // Indexed, so that the list is written in place by every worker rather than joined on one thread.
    let mut keys: Vec<InstanceKey> = (0..total)
        .into_par_iter()
        .map(|i| {
            let input = starts.partition_point(|&start| start <= i) - 1;
            let position = i - starts[input];
            let kernel = &kernels[input][position];
            let communicator = names.binary_search(&kernel.communicator).unwrap_or(0) as u64;
            // A rank's list fits 32 bits of position many times over (a row takes about 100 bytes).
            (communicator << 8 | kernel.op as u64, slots[input][position], (input as u64) << 32 | position as u64)
        })
        .collect();
    drop(slots);
    // Keys are unique (rank input and position are in them), so an unstable sort gives the stable order.
    keys.par_sort_unstable();
    let members = keys
        .par_iter()
        .map(|&(_, _, place)| {
            let (input, position) = ((place >> 32) as usize, (place & u64::from(u32::MAX)) as usize);
            (input, &kernels[input][position])
        })
        .collect();
    (keys, members)
}

/// The job's communicator names, sorted: a kernel's position here stands for its communicator in [`InstanceKey`].
fn communicator_names(kernels: &[Vec<CommKernel>]) -> Vec<Arc<str>> {
    let per_rank: Vec<BTreeSet<Arc<str>>> = kernels
        .par_iter()
        .map(|rank| {
            let mut names = BTreeSet::new();
            let mut last: Option<&Arc<str>> = None;
            // A rank's rows share their communicator's string, so most rows are the last one seen.
            for kernel in rank {
                if !last.is_some_and(|l| Arc::ptr_eq(l, &kernel.communicator)) {
                    names.insert(kernel.communicator.clone());
                    last = Some(&kernel.communicator);
                }
            }
            names
        })
        .collect();
    per_rank.into_iter().flatten().collect::<BTreeSet<_>>().into_iter().collect()
}

/// The runs of one instance each in [`in_instance_order`]'s list, as index ranges with the instance's slot: kernels
/// of one communicator, type and slot.
fn instance_runs(keys: &[InstanceKey]) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=keys.len() {
        if i == keys.len() || keys[i].0 != keys[start].0 || keys[i].1 != keys[start].1 {
            runs.push((start..i, keys[start].1));
            start = i;
        }
    }
    runs
}

/// [`match_collectives`] on kernels already taken from their ranks: `ranks[i]` is rank input i (its key and rank
/// number) and `kernels[i]` its communication kernels in time order. Instances are matched in parallel, each from
/// its own run of the sorted kernels, and kept in (communicator, type, slot) order.
pub fn match_comm_kernels(ranks: &[(RankKey, u32)], kernels: Vec<Vec<CommKernel>>, hosts_differ: bool) -> Matching {
    crate::figures::workers::run(|| match_sorted(ranks, kernels, hosts_differ))
}

fn match_sorted(ranks: &[(RankKey, u32)], kernels: Vec<Vec<CommKernel>>, hosts_differ: bool) -> Matching {
    let total_comm_kernels: u64 = kernels.iter().map(|k| k.len() as u64).sum();
    let (keys, members) = in_instance_order(&kernels);
    let runs = instance_runs(&keys);
    drop(keys);
    let offsets = if hosts_differ {
        let differences: Vec<Vec<(usize, i64)>> =
            runs.par_iter().map(|(run, _)| alignment_differences(&members[run.clone()])).collect();
        alignment_offsets(ranks.len(), differences.into_iter().flatten())
    } else {
        vec![0; ranks.len()]
    };
    let matched: Vec<Option<(Instance, i64)>> = runs
        .par_iter()
        .map(|(run, slot)| {
            let first = members[run.start].1;
            match_instance(&first.communicator, first.op, *slot, &members[run.clone()], ranks, &offsets)
        })
        .collect();
    // The kernels (a row per collective kernel of every rank) are the largest thing held here: gone before the map
    // of shares is made. Each rank's rows are freed on a worker, and the instances gathered by every worker (in
    // order): on one thread, both kept the other cores of a 10 M-kernel run idle for 50 ms.
    drop((members, runs));
    kernels.into_par_iter().for_each(drop);
    let (instances, mut spreads): (Vec<Instance>, Vec<i64>) = matched.into_par_iter().flatten().unzip();
    let matched_kernels: u64 = instances.par_iter().map(|instance| instance.members.len() as u64).sum();
    let mut matching = Matching { instances, clocks_aligned: hosts_differ, ..Matching::default() };
    matching.shares = Shares::of(&matching.instances);
    matching.unmatched_kernels = total_comm_kernels - matched_kernels;
    matching.end_spread_median_ns = median_i64(&mut spreads);
    matching
}

/// Of one instance's kernels (rank input index, kernel), what each rank's clock differs from rank input 0's at the
/// collective's end: the observations from which [`alignment_offsets`] shifts clocks across hosts.
pub fn alignment_differences<K: Borrow<CommKernel>>(members: &[(usize, K)]) -> Vec<(usize, i64)> {
    let Some(reference_end) = members.iter().find(|(i, _)| *i == 0).map(|(_, k)| k.borrow().end_ns) else {
        return Vec::new();
    };
    members.iter().map(|(i, kernel)| (*i, reference_end - kernel.borrow().end_ns)).collect()
}

/// Per rank input (of `n`), the clock shift that best lines up collective ends with rank input 0: the median of
/// its [`alignment_differences`].
pub fn alignment_offsets(n: usize, differences: impl IntoIterator<Item = (usize, i64)>) -> Vec<i64> {
    let mut by_input: Vec<Vec<i64>> = vec![Vec::new(); n];
    for (input, difference) in differences {
        if let Some(list) = by_input.get_mut(input) {
            list.push(difference);
        }
    }
    by_input.iter_mut().map(|d| median_i64(d).unwrap_or(0)).collect()
}

/// One collective instance from the kernels that share its communicator, type and slot (rank input index, kernel;
/// in rank input order), with the spread of its ends across ranks; `None` when fewer than two ranks took part.
pub fn match_instance<K: Borrow<CommKernel>>(
    communicator: &str,
    op: CollectiveOp,
    seq: u64,
    members: &[(usize, K)],
    ranks: &[(RankKey, u32)],
    offsets: &[i64],
) -> Option<(Instance, i64)> {
    if members.len() < 2 {
        return None;
    }
    let offset = |input: usize| offsets.get(input).copied().unwrap_or(0);
    let shifted: Vec<(i64, i64)> =
        members.iter().map(|(i, k)| (k.borrow().start_ns + offset(*i), k.borrow().end_ns + offset(*i))).collect();
    let latest = shifted.iter().map(|s| s.0).max().unwrap_or(0);
    let last_end = shifted.iter().map(|s| s.1).max().unwrap_or(0);
    let first_end = shifted.iter().map(|s| s.1).min().unwrap_or(0);
    let late_member = shifted.iter().enumerate().max_by_key(|(_, s)| s.0).map_or(0, |(m, _)| m);
    let (mut max_wait_ns, mut wait_total_ns) = (0, 0);
    let mut shares = Vec::with_capacity(members.len());
    let mut rank_wait_ns = BTreeMap::new();
    let mut rank_times_ns = BTreeMap::new();
    for (member, &(start, end)) in shifted.iter().enumerate() {
        let arrival_done = latest.min(end);
        let share =
            RankShare { wait_ns: arrival_done - start, transfer_ns: end - arrival_done, late: member == late_member };
        max_wait_ns = max_wait_ns.max(share.wait_ns);
        wait_total_ns += share.wait_ns;
        rank_wait_ns.insert(ranks[members[member].0].1, share.wait_ns);
        let recorded = members[member].1.borrow();
        rank_times_ns.insert(ranks[members[member].0].1, [recorded.start_ns, recorded.end_ns]);
        shares.push(share);
    }
    let transfer_ns = (last_end - latest).max(0);
    let nranks = members[0].1.borrow().group_size.unwrap_or(members.len() as u32).max(members.len() as u32);
    let bytes = members.iter().find_map(|(_, k)| k.borrow().bytes);
    let algbw_gbps = bytes.filter(|_| transfer_ns > 0).map(|b| b as f64 / transfer_ns as f64);
    let mut phases: Vec<&str> = members.iter().filter_map(|(_, k)| k.borrow().phase.as_deref()).collect();
    phases.sort();
    let phase = most_common(&phases).map(|p| p.to_string());
    let instance = Instance {
        communicator: communicator.to_string(),
        op,
        seq,
        bytes,
        nranks,
        late_rank: ranks[members[late_member].0].1,
        transfer_ns,
        max_wait_ns,
        wait_total_ns,
        algbw_gbps,
        busbw_gbps: algbw_gbps.map(|a| a * bus_factor(op, nranks)),
        phase,
        rank_wait_ns,
        rank_times_ns,
        members: members.iter().map(|(i, k)| (ranks[*i].0.trace, k.borrow().kernel)).collect(),
        shares,
    };
    Some((instance, last_end - first_end))
}

/// True when the traces say their processes ran on more than one host (their clocks then need aligning).
pub fn ranks_on_different_hosts(traces: &[Trace]) -> bool {
    let hosts: BTreeSet<&str> =
        traces.iter().flat_map(|t| t.processes.iter().filter_map(|p| p.host.as_deref())).collect();
    hosts.len() > 1
}

/// Matches the collectives of a run without a report: every GPU with kernels is a rank (numbered by its recorded
/// rank, else in input order), and instances carry no phase. For callers such as the viewer that only need to know
/// which kernels are one collective.
pub fn match_traces(traces: &[Trace], classifier: &Classifier) -> Matching {
    let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| classifier.classify_names(&t.names)).collect();
    // Each trace's kernels sorted out by device on worker threads: a file of eight ranks holds tens of millions.
    let by_device: Vec<Vec<Vec<u32>>> = (traces.iter())
        .map(|t| crate::figures::workers::indices_by_owner(&t.kernels, t.devices.len(), |k| Some(k.device.0 as usize)))
        .collect();
    let ranks = ranks_with_kernels(traces, |trace| &by_device[trace]);
    let no_phase = |_: u32| None;
    let inputs: Vec<RankInput> = ranks
        .iter()
        .map(|&(key, rank)| RankInput {
            key,
            rank,
            trace: &traces[key.trace],
            kernel_indices: &by_device[key.trace][key.device.0 as usize],
            classes: &classes[key.trace],
            phase_of_kernel: &no_phase,
        })
        .collect();
    match_collectives(&inputs, classifier, ranks_on_different_hosts(traces))
}

/// The ranks [`match_traces`] matches across: every GPU with kernels, trace by trace in device order, each numbered
/// by its recorded rank, else by its position in this list. `kernels_by_device(trace)` lists each device's kernels
/// (indices into the trace's list) by device index. A report whose ranks are these, in this order, matches the same
/// instances from the same kernels (its phases aside), so a model may be built on its matching.
pub fn ranks_with_kernels<'a>(
    traces: &[Trace],
    kernels_by_device: impl Fn(usize) -> &'a [Vec<u32>],
) -> Vec<(RankKey, u32)> {
    let with_kernels = (0..traces.len()).flat_map(|trace| {
        let devices = kernels_by_device(trace).iter().enumerate().filter(|(_, list)| !list.is_empty());
        devices.map(move |(device, _)| RankKey { trace, device: DeviceIdx(device as u32) })
    });
    (with_kernels.enumerate())
        .map(|(position, key)| (key, traces[key.trace].device_rank(key.device).unwrap_or(position as u32)))
        .collect()
}

/// The median (the mean of the middle two for an even count), `None` for no values.
pub fn median_i64(values: &mut [i64]) -> Option<i64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    // The middle values selected, not the whole list sorted: a large run's instances number in the millions.
    let (below, &mut upper, _) = values.select_nth_unstable(n / 2);
    Some(if n % 2 == 1 { upper } else { (below.iter().copied().max().unwrap_or(upper) + upper) / 2 })
}

fn median_f64(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

fn most_common<'a>(sorted: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(&str, usize)> = None;
    let mut i = 0;
    while i < sorted.len() {
        let run = sorted[i..].iter().take_while(|s| **s == sorted[i]).count();
        if best.is_none_or(|(_, n)| run > n) {
            best = Some((sorted[i], run));
        }
        i += run;
    }
    best.map(|(s, _)| s)
}

/// Groups instances by communicator, type, size bucket and phase, comparing with `bench`'s measurements if given.
pub fn summarize(matching: &Matching, bench: Option<&BenchPeaks>) -> Vec<GroupSummary> {
    type Key = (String, CollectiveOp, &'static str, String);
    let mut rows: BTreeMap<Key, Vec<&Instance>> = BTreeMap::new();
    for instance in &matching.instances {
        let key = (
            instance.communicator.clone(),
            instance.op,
            size_bucket(instance.bytes),
            instance.phase.clone().unwrap_or_default(),
        );
        rows.entry(key).or_default().push(instance);
    }
    rows.into_iter()
        .map(|((communicator, op, size_bucket, phase), instances)| {
            let mut transfers: Vec<i64> = instances.iter().map(|i| i.transfer_ns).collect();
            let mut waits: Vec<i64> = instances.iter().map(|i| i.max_wait_ns).collect();
            let mut busbw: Vec<f64> = instances.iter().filter_map(|i| i.busbw_gbps).collect();
            let busbw_median_gbps = median_f64(&mut busbw);
            let mut same_size: Vec<f64> = instances
                .iter()
                .filter_map(|i| {
                    let measured = bench?.at_size(i.op, i.nranks, i.bytes?)?;
                    Some(100.0 * i.busbw_gbps? / measured)
                })
                .collect();
            let mut late_rank_counts = BTreeMap::new();
            for instance in &instances {
                *late_rank_counts.entry(instance.late_rank).or_default() += 1;
            }
            GroupSummary {
                communicator,
                op,
                size_bucket,
                phase,
                count: instances.len() as u64,
                bytes: instances.iter().filter_map(|i| i.bytes).sum(),
                transfer_total_ns: transfers.iter().sum(),
                transfer_median_ns: median_i64(&mut transfers).unwrap_or(0),
                wait_total_ns: instances.iter().map(|i| i.wait_total_ns).sum(),
                wait_median_ns: median_i64(&mut waits).unwrap_or(0),
                busbw_pct_of_peak: busbw_median_gbps.zip(bench.and_then(|b| b.peak(op))).map(|(b, p)| 100.0 * b / p),
                busbw_pct_of_bench_same_size: median_f64(&mut same_size),
                busbw_median_gbps,
                late_rank_counts,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance of `members` (rank input, kernel), each member's wait its kernel index plus `wait_offset_ns`.
    fn instance_of(members: Vec<(usize, u32)>, wait_offset_ns: i64) -> Instance {
        let shares =
            members.iter().map(|&(_, k)| RankShare { wait_ns: k as i64 + wait_offset_ns, transfer_ns: 1, late: false });
        Instance {
            communicator: "default".into(),
            op: CollectiveOp::AllReduce,
            seq: 0,
            bytes: None,
            nranks: 2,
            late_rank: 0,
            transfer_ns: 1,
            max_wait_ns: 0,
            wait_total_ns: 0,
            algbw_gbps: None,
            busbw_gbps: None,
            phase: None,
            rank_wait_ns: BTreeMap::new(),
            rank_times_ns: BTreeMap::new(),
            shares: shares.collect(),
            members,
        }
    }

    /// The shares in shards hold what one map filled instance after instance holds (a kernel in two instances keeps
    /// the later one's share), on matchings small (one shard) and large (every shard, instances in two runs).
    #[test]
    fn shares_in_shards_are_one_map_filled_in_instance_order() {
        for (instances, per_instance) in [(3usize, 4u32), (5000, 20)] {
            let mut list: Vec<Instance> = (0..instances as u32)
                .map(|i| instance_of((0..per_instance).map(|k| ((k % 2) as usize, i * per_instance + k)).collect(), 0))
                .collect();
            // The first instance's kernels again, later, with other shares.
            list.push(instance_of(list[0].members.clone(), 1_000_000));
            let mut one_map: HashMap<(usize, u32), RankShare> = HashMap::new();
            for instance in &list {
                one_map.extend(instance.members.iter().copied().zip(instance.shares.iter().copied()));
            }
            let shares = Shares::of(&list);
            assert_eq!(shares.len(), one_map.len());
            assert!(one_map.iter().all(|(key, share)| shares.get(key) == Some(share)));
            assert_eq!(shares[&(0, 0)].wait_ns, 1_000_000, "the later instance's share");
            assert!(!shares.contains_key(&(0, 1)) && !shares.contains_key(&(2, 0)), "no such member");
        }
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(bus_factor(CollectiveOp::AllReduce, 2), 1.0);
        assert_eq!(bus_factor(CollectiveOp::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(CollectiveOp::AllGather, 4), 0.75);
        assert_eq!(bus_factor(CollectiveOp::ReduceScatter, 8), 0.875);
        assert_eq!(bus_factor(CollectiveOp::Broadcast, 8), 1.0);
    }

    #[test]
    fn all_gather_message_is_the_gathered_buffer() {
        assert_eq!(message_bytes(CollectiveOp::AllGather, Some(2048), Some(1024), Some(4096)), Some(8192));
        assert_eq!(message_bytes(CollectiveOp::AllReduce, Some(2048), Some(1024), Some(1024)), Some(2048));
        assert_eq!(message_bytes(CollectiveOp::AllReduce, None, Some(1024), Some(1024)), None);
    }

    #[test]
    fn every_collective_type_travels_as_itself() {
        for (position, op) in ALL_OPS.into_iter().enumerate() {
            assert_eq!(op as usize, position, "ALL_OPS is in declaration order");
            let kernel = CommKernel {
                kernel: 7,
                start_ns: 1,
                end_ns: 2,
                op,
                communicator: "c".into(),
                seq: Some(3),
                bytes: None,
                group_size: Some(2),
                phase: None,
            };
            let fields = CommKernelFields::from(kernel.clone());
            assert_eq!(CommKernel::try_from(fields), Ok(kernel));
        }
        let unknown: CommKernelFields = (0, 0, 0, ALL_OPS.len() as u8, String::new(), None, None, None, None);
        assert!(CommKernel::try_from(unknown).is_err());
    }

    #[test]
    fn buckets_are_powers_of_sixteen() {
        assert_eq!(size_bucket(Some(4096)), "<64 KiB");
        assert_eq!(size_bucket(Some(16 << 20)), "16-256 MiB");
        assert_eq!(size_bucket(Some(1 << 30)), ">=256 MiB");
        assert_eq!(size_bucket(None), "unknown");
    }
}

/// Matching on fabricated traces: what the plugin records (communicator, sequence number) and a skewed run.
#[cfg(test)]
mod fabricated {
    use super::*;
    use shardscope_model::{Collective, Device, Kernel, Process};

    /// One rank: a trace with one GPU and the given all-reduce kernels `(start_ns, end_ns, seq)`.
    fn rank_trace(rank: u32, kernels: &[(i64, i64, Option<u64>)]) -> Trace {
        let mut trace = Trace::default();
        let process = trace.add_process(Process { pid: 100 + rank, rank: Some(rank), ..Process::default() });
        let device = trace.add_device(Device { ordinal: rank, process: Some(process), ..Device::default() });
        let name = trace.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        for (i, &(start_ns, end_ns, seq)) in kernels.iter().enumerate() {
            trace.collectives.push(Collective {
                op: CollectiveOp::AllReduce,
                bytes: Some(64 << 20),
                communicator: Some(0xabc),
                seq,
                group_size: Some(2),
                ..Collective::default()
            });
            let collective = Some(i as u32);
            trace.kernels.push(Kernel { start_ns, end_ns, name, device, process, collective, ..Kernel::default() });
        }
        trace.finish();
        trace
    }

    fn run(traces: &[Trace]) -> Matching {
        let classifier = Classifier::builtin();
        let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| classifier.classify_names(&t.names)).collect();
        let no_phase = |_: u32| None;
        let indices: Vec<Vec<u32>> = traces.iter().map(|t| (0..t.kernels.len() as u32).collect()).collect();
        let inputs: Vec<RankInput> = traces
            .iter()
            .enumerate()
            .map(|(i, t)| RankInput {
                key: RankKey { trace: i, device: DeviceIdx(0) },
                rank: i as u32,
                trace: t,
                kernel_indices: &indices[i],
                classes: &classes[i],
                phase_of_kernel: &no_phase,
            })
            .collect();
        match_collectives(&inputs, &classifier, false)
    }

    /// A communication row of the matcher: kernel `kernel` of its rank on `communicator`, with sequence `seq`.
    fn row(kernel: u32, start_ns: i64, communicator: &str, op: CollectiveOp, seq: Option<u64>) -> CommKernel {
        CommKernel {
            kernel,
            start_ns,
            end_ns: start_ns + 10,
            op,
            communicator: Arc::from(communicator),
            seq,
            bytes: None,
            group_size: None,
            phase: None,
        }
    }

    /// Instances come in (communicator by name, type, slot) order whatever order the ranks list them in and
    /// whichever string allocation a row holds; within an instance the members go by rank input, then time (a
    /// sequence number seen twice on one rank keeps both kernels in time order).
    #[test]
    fn instances_and_their_members_come_in_name_type_slot_then_rank_order() {
        use CollectiveOp::{AllGather, AllReduce};
        let rank0 = vec![
            row(0, 0, "tp", AllReduce, None),
            row(1, 10, "dp", AllReduce, None),
            row(2, 20, "tp", AllGather, None),
            row(3, 30, "ep", AllReduce, Some(5)),
            row(4, 40, "ep", AllReduce, Some(5)),
        ];
        let rank1 = vec![
            row(0, 0, "ep", AllReduce, Some(5)),
            row(1, 5, "dp", AllReduce, None),
            row(2, 15, "tp", AllGather, None),
            row(3, 25, "tp", AllReduce, None),
        ];
        let ranks: Vec<(RankKey, u32)> =
            (0..2).map(|i| (RankKey { trace: i, device: DeviceIdx(0) }, i as u32)).collect();
        let m = match_comm_kernels(&ranks, vec![rank0, rank1], false);
        let order: Vec<String> =
            m.instances.iter().map(|i| format!("{} {:?} {} {:?}", i.communicator, i.op, i.seq, i.members)).collect();
        assert_eq!(
            order,
            [
                "dp AllReduce 0 [(0, 1), (1, 1)]",
                "ep AllReduce 5 [(0, 3), (0, 4), (1, 0)]",
                "tp AllReduce 0 [(0, 0), (1, 3)]",
                "tp AllGather 0 [(0, 2), (1, 2)]",
            ]
        );
        assert_eq!(m.unmatched_kernels, 0);
    }

    /// Rank 1 sleeps 1 ms before the second all-reduce: rank 0 waits 1 ms there, rank 1 is the late rank.
    #[test]
    fn a_sleeping_rank_is_late_and_its_peer_waits() {
        let rank0 = rank_trace(0, &[(0, 100_000, None), (200_000, 1_300_000, None)]);
        let rank1 = rank_trace(1, &[(10_000, 100_000, None), (1_200_000, 1_300_000, None)]);
        let m = run(&[rank0, rank1]);
        assert_eq!(m.instances.len(), 2);
        let second = &m.instances[1];
        assert_eq!((second.late_rank, second.transfer_ns, second.max_wait_ns), (1, 100_000, 1_000_000));
        assert_eq!(m.shares[&(0, 1)], RankShare { wait_ns: 1_000_000, transfer_ns: 100_000, late: false });
        assert_eq!(m.shares[&(1, 1)], RankShare { wait_ns: 0, transfer_ns: 100_000, late: true });
        // 64 MiB over 100 µs on 2 ranks: busbw = algbw = 671.1 GB/s.
        assert!((second.busbw_gbps.unwrap() - (64u64 << 20) as f64 / 100_000.0).abs() < 1e-9);
        assert_eq!(m.unmatched_kernels, 0);
    }

    /// Rank 0 is last three times by 10 µs, rank 1 once by 1 ms: rank 1's lateness caused the most waiting, and
    /// the late rank is rank 1 though rank 0 was last more often.
    #[test]
    fn the_rank_whose_lateness_cost_most_comes_first_not_the_one_most_often_last() {
        let rank0 = rank_trace(
            0,
            &[(10_000, 50_000, None), (110_000, 150_000, None), (210_000, 250_000, None), (300_000, 1_350_000, None)],
        );
        let rank1 = rank_trace(
            1,
            &[(0, 50_000, None), (100_000, 150_000, None), (200_000, 250_000, None), (1_300_000, 1_350_000, None)],
        );
        let m = run(&[rank0, rank1]);
        let late: Vec<u32> = m.instances.iter().map(|i| i.late_rank).collect();
        assert_eq!(late, [0, 0, 0, 1]);
        assert_eq!(
            lateness(&m.instances),
            [
                RankLateness { rank: 1, arrived_last: 1, caused_wait_ns: 1_000_000, largest_wait_ns: 1_000_000 },
                RankLateness { rank: 0, arrived_last: 3, caused_wait_ns: 30_000, largest_wait_ns: 10_000 },
            ]
        );
    }

    /// With sequence numbers recorded, instances pair by them even when one rank's kernels ran in another order
    /// (two streams) or a rank is missing one.
    #[test]
    fn sequence_numbers_decide_the_pairing() {
        let rank0 = rank_trace(0, &[(0, 50, Some(1)), (100, 150, Some(2)), (300, 350, Some(3))]);
        let rank1 = rank_trace(1, &[(10, 50, Some(2)), (120, 150, Some(1))]);
        let m = run(&[rank0, rank1]);
        let seqs: Vec<u64> = m.instances.iter().map(|i| i.seq).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(m.unmatched_kernels, 1, "seq 3 exists on rank 0 only");
        // seq 1: rank 0 at 0, rank 1 at 120 → rank 0 waits 120 − 0 = 120 ns... capped by its own end (50).
        assert_eq!(m.shares[&(0, 0)], RankShare { wait_ns: 50, transfer_ns: 0, late: false });
    }

    /// Ranks on different hosts: clocks are aligned on collective ends and the residual spread reported.
    #[test]
    fn clocks_are_aligned_on_collective_ends_across_hosts() {
        // Rank 1's clock runs 5 ms ahead.
        let offset = 5_000_000;
        let rank0 = rank_trace(0, &[(0, 1_000, None), (10_000, 12_000, None), (20_000, 20_500, None)]);
        let rank1 = rank_trace(
            1,
            &[
                (offset + 500, offset + 1_000, None),
                (offset + 11_000, offset + 12_010, None),
                (offset + 20_100, offset + 20_500, None),
            ],
        );
        let classifier = Classifier::builtin();
        let traces = [rank0, rank1];
        let classes: Vec<Vec<KernelClass>> = traces.iter().map(|t| classifier.classify_names(&t.names)).collect();
        let no_phase = |_: u32| None;
        let indices: Vec<Vec<u32>> = traces.iter().map(|t| (0..t.kernels.len() as u32).collect()).collect();
        let inputs: Vec<RankInput> = (0..2)
            .map(|i| RankInput {
                key: RankKey { trace: i, device: DeviceIdx(0) },
                rank: i as u32,
                trace: &traces[i],
                kernel_indices: &indices[i],
                classes: &classes[i],
                phase_of_kernel: &no_phase,
            })
            .collect();
        let m = match_collectives(&inputs, &classifier, true);
        assert!(m.clocks_aligned);
        let late: Vec<u32> = m.instances.iter().map(|i| i.late_rank).collect();
        assert_eq!(late, [1, 1, 1]);
        assert_eq!(m.instances[0].transfer_ns, 500);
        assert_eq!(m.end_spread_median_ns, Some(0));
    }

    /// A rank of more kernels than one task reads gives the rows of one pass over all of them, in order: compute
    /// kernels skipped, communicators and phases named alike across the runs' boundaries.
    #[test]
    fn comm_kernels_read_in_runs_are_those_of_one_pass() {
        let count = 3 * KERNELS_PER_TASK + 123;
        let mut trace = rank_trace(0, &[]);
        let gemm = trace.names.intern("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT");
        let all_reduce =
            trace.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        let (device, process) = (DeviceIdx(0), Some(shardscope_model::ProcessIdx(0)));
        for i in 0..count as i64 {
            // Every third kernel communicates, on one of two communicators, every fifth with a sequence number.
            let collective = (i % 3 == 0).then(|| {
                trace.collectives.push(Collective {
                    op: CollectiveOp::AllReduce,
                    communicator: Some(0xa0 + (i % 2) as u64),
                    seq: (i % 5 == 0).then_some(i as u64),
                    ..Collective::default()
                });
                trace.collectives.len() as u32 - 1
            });
            let name = if collective.is_some() { all_reduce } else { gemm };
            let process = process.unwrap_or_default();
            trace.kernels.push(Kernel {
                start_ns: 10 * i,
                end_ns: 10 * i + 5,
                name,
                device,
                process,
                collective,
                ..Kernel::default()
            });
        }
        trace.finish();
        let classifier = Classifier::builtin();
        let classes = classifier.classify_names(&trace.names);
        let indices: Vec<u32> = (0..trace.kernels.len() as u32).collect();
        let phase_of = |kernel: u32| Some(if kernel < 70_000 { "prefill".to_string() } else { "decode".to_string() });
        let input = RankInput {
            key: RankKey { trace: 0, device },
            rank: 0,
            trace: &trace,
            kernel_indices: &indices,
            classes: &classes,
            phase_of_kernel: &phase_of,
        };
        let rows = comm_kernels(&input, &classifier);
        assert_eq!(rows.len(), count.div_ceil(3));
        assert_eq!(rows, comm_kernels_of_run(&input, &indices, &classifier));
        assert!(rows.iter().any(|row| row.phase.as_deref() == Some("decode")));
    }

    /// The median by selection is the middle value (the mean of the middle two, rounded toward zero, for an even
    /// count) of the values sorted.
    #[test]
    fn the_median_is_the_middle_of_the_sorted_values() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..200usize {
            let values: Vec<i64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    (state >> 33) as i64 % 1_000 - 500
                })
                .collect();
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let expected =
                (n > 0).then(|| if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2 });
            assert_eq!(median_i64(&mut values.clone()), expected, "{values:?}");
        }
    }
}
