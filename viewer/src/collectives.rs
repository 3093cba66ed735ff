//! Finds the same collective on every rank.
//!
//! The analyzer's matching decides which kernels are one collective instance (by communicator and sequence
//! number when the trace records them, else by order per process group and collective type), so the viewer
//! highlights exactly the instances whose wait and transfer the range statistics report.

use std::collections::HashMap;

use shardscope_analyzer::figures::collectives::match_traces;
use shardscope_model::CollectiveOp;

use crate::timeline::Selected;
use crate::timeline::layout::{EventKind, EventRef, TimelineData};

/// Identity of one collective instance across ranks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    /// Communicator id, or group name, or `default` when the trace has neither.
    pub group: String,
    /// The operation.
    pub op: CollectiveOp,
    /// Its sequence number in the communicator when recorded, else its position among the collectives of that
    /// group and type, from 0.
    pub occurrence: u64,
}

/// Collective kernels of all ranks, grouped by instance.
#[derive(Debug, Default)]
pub struct CollectiveIndex {
    by_kernel: HashMap<(usize, u32), usize>,
    instances: Vec<(InstanceKey, Vec<Selected>)>,
    /// (trace, kernel) → time the kernel waited for the last rank, where it waited at all.
    wait_ns: HashMap<(usize, u32), i64>,
}

impl CollectiveIndex {
    /// Indexes every collective kernel of `data` that was matched with the same instance on another rank.
    pub fn build(data: &TimelineData) -> CollectiveIndex {
        let matching = match_traces(&data.traces, data.categories.classifier());
        let wait_ns =
            matching.shares.iter().filter(|(_, s)| s.wait_ns > 0).map(|(&kernel, s)| (kernel, s.wait_ns)).collect();
        let mut index = CollectiveIndex { wait_ns, ..CollectiveIndex::default() };
        for instance in matching.instances {
            let key = InstanceKey { group: instance.communicator, op: instance.op, occurrence: instance.seq };
            let position = index.instances.len();
            let members: Vec<Selected> = instance
                .members
                .iter()
                .map(|&(trace, kernel)| Selected { trace, event: EventRef::new(EventKind::Kernel, kernel as usize) })
                .collect();
            for &(trace, kernel) in &instance.members {
                index.by_kernel.insert((trace, kernel), position);
            }
            index.instances.push((key, members));
        }
        index
    }

    /// The instance a kernel belongs to.
    pub fn instance_of(&self, selected: &Selected) -> Option<&InstanceKey> {
        self.position(selected).map(|p| &self.instances[p].0)
    }

    /// All kernels of the instance `selected` belongs to, itself included.
    pub fn peers(&self, selected: &Selected) -> &[Selected] {
        self.position(selected).map_or(&[], |p| self.instances[p].1.as_slice())
    }

    fn position(&self, selected: &Selected) -> Option<usize> {
        if selected.event.kind() != EventKind::Kernel {
            return None;
        }
        self.by_kernel.get(&(selected.trace, selected.event.index() as u32)).copied()
    }

    /// (trace, kernel) → time that collective kernel spent waiting for the last rank to arrive.
    pub fn wait_ns(&self) -> &HashMap<(usize, u32), i64> {
        &self.wait_ns
    }

    /// Number of indexed collective kernels.
    pub fn len(&self) -> usize {
        self.by_kernel.len()
    }

    /// True when no collective kernels were found.
    pub fn is_empty(&self) -> bool {
        self.by_kernel.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Categories;
    use crate::synthetic::{SyntheticSpec, generate};

    #[test]
    fn the_nth_allreduce_of_each_rank_is_one_instance() {
        let traces =
            generate(SyntheticSpec { ranks: 4, kernels_per_rank: 300, allreduce_every: 10, kernels_per_step: 100 });
        let data = TimelineData::build(traces, Categories::builtin());
        let index = CollectiveIndex::build(&data);
        assert_eq!(index.len(), 4 * 30);
        // The 5th all-reduce of rank 2.
        let trace = &data.traces[2];
        let fifth = trace.kernels.iter().enumerate().filter(|(_, k)| k.collective.is_some()).nth(4).unwrap().0;
        let selected = Selected { trace: 2, event: EventRef::new(EventKind::Kernel, fifth) };
        let peers = index.peers(&selected);
        assert_eq!(peers.len(), 4);
        for peer in peers {
            let kernel = &data.traces[peer.trace].kernels[peer.event.index()];
            let collective = &data.traces[peer.trace].collectives[kernel.collective.unwrap() as usize];
            assert_eq!(collective.seq, Some(4));
        }
        // Every rank but the last to arrive waited for it: wait = latest start − own start (within the kernel).
        let starts: Vec<(usize, u32, i64, i64)> = peers
            .iter()
            .map(|p| {
                let k = &data.traces[p.trace].kernels[p.event.index()];
                (p.trace, p.event.index() as u32, k.start_ns, k.end_ns)
            })
            .collect();
        let latest = starts.iter().map(|s| s.2).max().unwrap();
        for (trace, kernel, start, end) in starts {
            let expected = latest.min(end) - start;
            assert_eq!(index.wait_ns().get(&(trace, kernel)).copied().unwrap_or(0), expected);
        }
    }
}
