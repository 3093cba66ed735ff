//! Finds the same collective on every rank.
//!
//! Ranks do not share correlation ids or clocks, but every rank runs the collectives of one
//! communicator in the same order. So an instance is keyed by (communicator or group name,
//! operation, how many earlier collectives with that key this rank ran), and the kernels with
//! equal keys on different ranks are one collective.

use std::collections::HashMap;

use shardscope_model::{CollectiveOp, ProcessIdx};

use crate::timeline::Selected;
use crate::timeline::layout::{EventKind, EventRef, TimelineData};

/// Identity of one collective instance across ranks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    /// Communicator id, or group name, or empty when the trace has neither.
    pub group: String,
    /// The operation.
    pub op: CollectiveOp,
    /// Position among this rank's collectives with the same group and op, from 0.
    pub occurrence: u64,
}

/// Collective kernels of all ranks, grouped by instance.
#[derive(Debug, Default)]
pub struct CollectiveIndex {
    by_kernel: HashMap<(usize, u32), InstanceKey>,
    by_instance: HashMap<InstanceKey, Vec<Selected>>,
}

impl CollectiveIndex {
    /// Indexes every collective kernel of `data`: those with collective metadata, and NCCL
    /// kernels recognised by name when the trace has no metadata.
    pub fn build(data: &TimelineData) -> CollectiveIndex {
        let mut index = CollectiveIndex::default();
        for (ti, trace) in data.traces.iter().enumerate() {
            let mut counters: HashMap<(ProcessIdx, String, CollectiveOp), u64> = HashMap::new();
            // Kernels are sorted by start, which is the order each rank ran its collectives in.
            for (ki, kernel) in trace.kernels.iter().enumerate() {
                let (group, op) = match kernel.collective.and_then(|c| trace.collectives.get(c as usize)) {
                    Some(c) => {
                        let group = match c.communicator {
                            Some(id) => format!("comm {id:#x}"),
                            None => trace.names.get(c.group_name).to_string(),
                        };
                        (group, c.op)
                    }
                    None => {
                        let name = trace.names.get(kernel.name);
                        if !name.starts_with("nccl") {
                            continue;
                        }
                        (String::new(), CollectiveOp::parse(name))
                    }
                };
                let counter = counters.entry((kernel.process, group.clone(), op)).or_insert(0);
                let key = InstanceKey { group, op, occurrence: *counter };
                *counter += 1;
                index.by_kernel.insert((ti, ki as u32), key.clone());
                index
                    .by_instance
                    .entry(key)
                    .or_default()
                    .push(Selected { trace: ti, event: EventRef::new(EventKind::Kernel, ki) });
            }
        }
        index
    }

    /// The instance a kernel belongs to.
    pub fn instance_of(&self, selected: &Selected) -> Option<&InstanceKey> {
        if selected.event.kind() != EventKind::Kernel {
            return None;
        }
        self.by_kernel.get(&(selected.trace, selected.event.index() as u32))
    }

    /// All kernels of the instance `selected` belongs to, itself included.
    pub fn peers(&self, selected: &Selected) -> &[Selected] {
        self.instance_of(selected).and_then(|key| self.by_instance.get(key)).map_or(&[], Vec::as_slice)
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
    }
}
