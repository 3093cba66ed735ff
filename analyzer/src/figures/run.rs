//! Run identity: what each input file says about the run it belongs to, and whether several inputs form one run.
//!
//! Each file's identity is what the trace records: host names, process ids, recorded ranks and world size, and its
//! time range (on the trace clock, and as wall-clock time when the file records the clock's epoch offset).
//! Several files clearly do not form one run when
//! - they record different world sizes;
//! - two files record the same rank (two "rank 0"s are two runs, or one rank given twice);
//! - all record wall-clock time and one file's time range does not overlap any other's (ranks of one run
//!   work at the same time).
//!
//! Files that record none of these cannot be checked and are taken as one run. A run whose recorded world size is
//! larger than the ranks given is analysed as it is, with a note: collectives are matched among the given ranks.

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;
use serde::Serialize;
use shardscope_model::{DeviceIdx, Trace};

use crate::figures::collectives::RankKey;

/// What one input file says about its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RunIdentity {
    /// The file.
    pub source: String,
    /// Host names recorded for its processes.
    pub hosts: Vec<String>,
    /// OS process ids of the processes that ran GPU work or recorded ranges.
    pub pids: Vec<u32>,
    /// Ranks its processes record.
    pub ranks: Vec<u32>,
    /// World size its processes record (the largest, if they differ).
    pub world_size: Option<u32>,
    /// First and last event time on the trace's clock (ns): GPU work, API calls and ranges.
    pub time_range_ns: Option<(i64, i64)>,
    /// The same range as ns since the Unix epoch, when the file records its clock's offset.
    pub wall_clock_ns: Option<(i64, i64)>,
}

impl RunIdentity {
    /// The identity `trace` records.
    pub fn of(trace: &Trace) -> RunIdentity {
        let hosts: BTreeSet<String> = trace.processes.iter().filter_map(|p| p.host.clone()).collect();
        let ranks: BTreeSet<u32> = trace.processes.iter().filter_map(|p| p.rank).collect();
        let pids: BTreeSet<u32> = trace.processes.iter().map(|p| p.pid).filter(|&p| p != 0).collect();
        // On the analyzer's workers (where it is when on one already).
        let time_range_ns = crate::figures::workers::run(|| {
            [
                extent_ns(&trace.kernels, |k| (k.start_ns, k.end_ns)),
                extent_ns(&trace.memops, |m| (m.start_ns, m.end_ns)),
                extent_ns(&trace.graph_launches, |g| (g.start_ns, g.end_ns)),
                extent_ns(&trace.api_calls, |a| (a.start_ns, a.end_ns)),
                extent_ns(&trace.ranges, |r| (r.start_ns, r.end_ns)),
            ]
            .into_iter()
            .flatten()
            .reduce(widest)
        });
        RunIdentity {
            source: trace.source.path.clone(),
            hosts: hosts.into_iter().collect(),
            pids: pids.into_iter().collect(),
            ranks: ranks.into_iter().collect(),
            world_size: trace.processes.iter().filter_map(|p| p.world_size).max(),
            time_range_ns,
            wall_clock_ns: trace
                .clock_offset_ns
                .and_then(|offset| time_range_ns.map(|(start, end)| (start + offset, end + offset))),
        }
    }
}

/// The earliest start and the latest end of `events` (`None` for none), on worker threads: a large trace holds tens
/// of millions, and this runs before anything else of the report can start.
fn extent_ns<T: Sync>(events: &[T], times_ns: impl Fn(&T) -> (i64, i64) + Sync + Send) -> Option<(i64, i64)> {
    events.par_iter().with_min_len(1 << 16).map(times_ns).reduce_with(widest)
}

/// The range from the earlier start to the later end of two.
fn widest(a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
    (a.0.min(b.0), a.1.max(b.1))
}

/// Why several inputs are not one run: one line naming the files.
pub fn mixed_runs(identities: &[RunIdentity]) -> Option<String> {
    if identities.len() < 2 {
        return None;
    }
    let world_sizes: BTreeMap<u32, Vec<&str>> = identities
        .iter()
        .filter_map(|i| Some((i.world_size?, i.source.as_str())))
        .fold(BTreeMap::new(), |mut map, (size, source)| {
            map.entry(size).or_insert_with(Vec::new).push(source);
            map
        });
    if world_sizes.len() > 1 {
        let list: Vec<String> =
            world_sizes.iter().map(|(size, files)| format!("world size {size} in {}", files.join(", "))).collect();
        return Some(format!("inputs record different world sizes: {}", list.join("; ")));
    }
    let mut rank_files: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for identity in identities {
        for &rank in &identity.ranks {
            rank_files.entry(rank).or_default().push(&identity.source);
        }
    }
    if let Some((rank, files)) = rank_files.iter().find(|(_, files)| files.len() > 1) {
        return Some(format!("rank {rank} is recorded by more than one input: {}", files.join(", ")));
    }
    if identities.iter().all(|i| i.wall_clock_ns.is_some()) {
        for (index, identity) in identities.iter().enumerate() {
            let (start, end) = identity.wall_clock_ns.expect("checked above");
            let overlaps_another = identities.iter().enumerate().any(|(other_index, other)| {
                let (other_start, other_end) = other.wall_clock_ns.expect("checked above");
                other_index != index && start < other_end && other_start < end
            });
            if !overlaps_another {
                return Some(format!(
                    "{} ran at another time than the other inputs (its wall-clock range overlaps none of theirs)",
                    identity.source
                ));
            }
        }
    }
    None
}

/// The note for a run given with fewer ranks than its recorded world size.
pub fn partial_run_note(identities: &[RunIdentity], ranks_analysed: usize) -> Option<String> {
    let world_size = identities.iter().filter_map(|i| i.world_size).max()?;
    (ranks_analysed < world_size as usize).then(|| {
        format!(
            "{ranks_analysed} of {world_size} ranks (world size recorded in the trace): collectives are matched among \
             these ranks only, and the slowest rank of the job may be missing"
        )
    })
}

// Rank numbering: which rank each GPU of the inputs is. The report, its parts, layers and modules all number ranks
// this one way.

/// Every GPU with work, with its rank: recorded by the trace, or else numbered in input order, skipping recorded ones.
pub fn assign_ranks(traces: &[Trace]) -> Vec<(RankKey, u32, bool)> {
    let recorded: BTreeSet<u32> =
        traces.iter().flat_map(|t| (0..t.devices.len()).filter_map(|d| t.device_rank(DeviceIdx(d as u32)))).collect();
    let keys: Vec<(RankKey, Option<u32>)> = traces
        .iter()
        .enumerate()
        .flat_map(|(trace_index, trace)| {
            devices_with_gpu_work(trace)
                .into_iter()
                .map(move |device| (RankKey { trace: trace_index, device }, trace.device_rank(device)))
        })
        .collect();
    let numbers = number_ranks(&recorded, keys.iter().map(|(_, rank)| *rank));
    keys.into_iter().zip(numbers).map(|((key, _), (rank, rank_recorded))| (key, rank, rank_recorded)).collect()
}

/// The rank rule, shared with the report in parts: each GPU (in input order) keeps its recorded rank, and one
/// without gets the next number that no GPU recorded. Returns (rank, recorded) per GPU.
pub fn number_ranks(recorded: &BTreeSet<u32>, recorded_per_gpu: impl Iterator<Item = Option<u32>>) -> Vec<(u32, bool)> {
    let mut next_unrecorded_rank = 0u32;
    recorded_per_gpu
        .map(|rank| match rank {
            Some(rank) => (rank, true),
            None => {
                while recorded.contains(&next_unrecorded_rank) {
                    next_unrecorded_rank += 1;
                }
                next_unrecorded_rank += 1;
                (next_unrecorded_rank - 1, false)
            }
        })
        .collect()
}

/// Devices that ran at least one kernel, copy or set, in ordinal order.
pub fn devices_with_gpu_work(trace: &Trace) -> Vec<DeviceIdx> {
    use rayon::prelude::*;
    // Read on worker threads: a file of eight ranks holds tens of millions of kernels, and the report waits here.
    const PER_TASK: usize = 1 << 16;
    let owner = |device: DeviceIdx| (device.0 as usize, ());
    let events = (trace.kernels.par_iter().with_min_len(PER_TASK).map(|k| owner(k.device)))
        .chain(trace.memops.par_iter().with_min_len(PER_TASK).map(|m| owner(m.device)))
        .chain(trace.graph_launches.par_iter().with_min_len(PER_TASK).map(|g| owner(g.device)));
    let used = crate::figures::workers::fold_per_owner(events, trace.devices.len(), |_, _| ());
    let mut devices: Vec<DeviceIdx> =
        (0..trace.devices.len()).filter(|&d| used[d].is_some()).map(|d| DeviceIdx(d as u32)).collect();
    devices.sort_by_key(|d| trace.devices[d.0 as usize].ordinal);
    devices
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(source: &str, ranks: &[u32], world_size: Option<u32>, wall: Option<(i64, i64)>) -> RunIdentity {
        RunIdentity {
            source: source.into(),
            hosts: Vec::new(),
            pids: Vec::new(),
            ranks: ranks.to_vec(),
            world_size,
            time_range_ns: wall,
            wall_clock_ns: wall,
        }
    }

    #[test]
    fn inputs_of_one_run_pass_and_others_are_named() {
        let one_run = [identity("r0", &[0], Some(2), Some((0, 10))), identity("r1", &[1], Some(2), Some((5, 20)))];
        assert_eq!(mixed_runs(&one_run), None);
        let sizes = [identity("a", &[0], Some(2), None), identity("b", &[1], Some(8), None)];
        let why = mixed_runs(&sizes).unwrap();
        assert!(why.contains("world size 2 in a") && why.contains("world size 8 in b"), "{why}");
        let two_zeros = [identity("a", &[0], None, None), identity("b", &[0], None, None)];
        assert_eq!(mixed_runs(&two_zeros).unwrap(), "rank 0 is recorded by more than one input: a, b");
        let apart = [identity("a", &[], None, Some((0, 10))), identity("b", &[], None, Some((50, 60)))];
        assert!(mixed_runs(&apart).unwrap().starts_with("a ran at another time"));
        // Nothing recorded: nothing to object to.
        assert_eq!(mixed_runs(&[identity("a", &[], None, None), identity("b", &[], None, None)]), None);
    }

    #[test]
    fn partial_runs_get_a_note() {
        let two_of_128 = [identity("r0", &[0], Some(128), None), identity("r1", &[1], Some(128), None)];
        assert!(partial_run_note(&two_of_128, 2).unwrap().starts_with("2 of 128 ranks"));
        assert_eq!(partial_run_note(&two_of_128[..1], 128), None);
    }
}
