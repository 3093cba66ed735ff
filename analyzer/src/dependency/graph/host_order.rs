//! Host order: each host thread's calls in order of start (the longer of calls that start together first), and the
//! edges between them: a call starts after the previous one on its thread ends, or, nested in another, after its
//! parent starts.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use rayon::prelude::*;

use super::operations::IntHasher;
use super::{
    EdgeKind, ListedEdge, Op, OpKind, PAR_MIN_LEN, RankSpec, edge_between, end_vertex, start_vertex, trace_of,
};
use crate::figures::workers::indices_by_owner;

/// A host thread: (trace, rank index, thread id).
type Thread = (u32, u32, u32);

/// Each host thread's calls among `ops`: threads in order of (trace, rank index, thread id), each one's calls by
/// start, the longer first, then by operation id. The calls are sorted out to their threads in one pass on worker
/// threads, so each thread's list comes in operation order; a stable sort then puts it in order, a walk where the
/// operations come in their trace's order of (start, end), as the model adds them.
pub(super) fn host_threads(ops: &[Op], ranks: &[RankSpec]) -> Vec<Vec<u32>> {
    let thread_of = |op: &Op| (trace_of(ranks, op) as u32, op.rank_index, op.lane);
    let calls = || ops.par_iter().with_min_len(PAR_MIN_LEN).filter(|op| op.kind == OpKind::HostCall);
    let mut threads: Vec<Thread> = calls()
        .fold(HashSet::<Thread, IntHasher>::default, |mut seen, op| {
            seen.insert(thread_of(op));
            seen
        })
        .reduce(HashSet::default, |mut a, b| {
            a.extend(b);
            a
        })
        .into_iter()
        .collect();
    threads.sort_unstable();
    let index: HashMap<Thread, usize, IntHasher> = threads.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let mut per_thread = indices_by_owner(ops, threads.len(), |op| {
        (op.kind == OpKind::HostCall).then(|| index.get(&thread_of(op)).copied()).flatten()
    });
    per_thread.par_iter_mut().for_each(|calls| {
        calls.sort_by_key(|&o| (ops[o as usize].start_ns, Reverse(ops[o as usize].end_ns)));
    });
    per_thread
}

/// The host order and nested-call edges of one host thread's calls (`calls`: sorted by start, the longer first).
pub(super) fn edges_of_thread(ops: &[Op], calls: &[u32]) -> Vec<ListedEdge> {
    let mut edges = Vec::with_capacity(calls.len());
    let mut open: Vec<u32> = Vec::new();
    for &op in calls {
        let o = ops[op as usize];
        let mut closed = None;
        while let Some(&top) = open.last() {
            if ops[top as usize].end_ns <= o.start_ns {
                closed = Some(top);
                open.pop();
            } else {
                break;
            }
        }
        match (closed, open.last()) {
            (Some(previous), _) => {
                let p = ops[previous as usize];
                edges.push(edge_between(
                    end_vertex(previous),
                    start_vertex(op),
                    p.end_ns,
                    o.start_ns,
                    EdgeKind::HostOrder,
                ));
            }
            (None, Some(&parent)) => {
                let p = ops[parent as usize];
                let kind = EdgeKind::NestedCall;
                edges.push(edge_between(start_vertex(parent), start_vertex(op), p.start_ns, o.start_ns, kind));
            }
            (None, None) => {}
        }
        open.push(op);
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::collectives::RankKey;
    use shardscope_model::DeviceIdx;

    /// Host calls of three ranks in two traces (threads with ids from small to the largest), with GPU work between
    /// them, come per thread in the order of the tuple (trace, rank, thread, start, end later first, operation):
    /// in their trace's order of (start, end) as the model adds them, and shuffled, over lists long enough for
    /// several tasks; times negative and extreme.
    #[test]
    fn threads_and_their_calls_come_in_tuple_order() {
        let ranks: Vec<RankSpec> = [(1, 0), (0, 0), (1, 1)]
            .iter()
            .enumerate()
            .map(|(r, &(trace, device))| RankSpec { key: RankKey { trace, device: DeviceIdx(device) }, rank: r as u32 })
            .collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let times = [i64::MIN, -1_000_000_007, -1, 0, 1, 17, 1_000_000_007, i64::MAX - 3];
        for (count, in_order) in [(1_000usize, true), (300_000, true), (300_000, false)] {
            let mut ops: Vec<Op> = (0..count)
                .map(|_| {
                    let r = next();
                    let start_ns =
                        if r >> 20 & 1 == 0 { times[(r >> 24) as usize % 8] } else { (r >> 28) as i64 % 5_000 - 2_500 };
                    Op {
                        kind: if r % 5 == 0 { OpKind::Kernel } else { OpKind::HostCall },
                        rank_index: (r >> 8) as u32 % 3,
                        lane: [7, 300, 70_000, u32::MAX][(r >> 16) as usize % 4],
                        start_ns,
                        end_ns: start_ns.saturating_add((r >> 40) as i64 % 3),
                        ..bytemuck::Zeroable::zeroed()
                    }
                })
                .collect();
            if in_order {
                ops.sort_by_key(|op| (op.start_ns, op.end_ns));
            }
            let tuple = |o: u32| {
                let op = &ops[o as usize];
                (trace_of(&ranks, op), op.rank_index, op.lane, op.start_ns, Reverse(op.end_ns), o)
            };
            let mut expected: Vec<u32> =
                (0..count as u32).filter(|&o| ops[o as usize].kind == OpKind::HostCall).collect();
            expected.sort_by_key(|&o| tuple(o));
            let threads = host_threads(&ops, &ranks);
            let thread = |o: u32| (tuple(o).0, tuple(o).1, tuple(o).2);
            for calls in &threads {
                assert!(!calls.is_empty() && calls.iter().all(|&o| thread(o) == thread(calls[0])), "one thread a list");
            }
            assert_eq!(threads.concat(), expected, "{count} operations, in order: {in_order}");
        }
    }
}
