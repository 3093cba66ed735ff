//! Pageable-memory copies in the step loop: host-to-device and device-to-host copies inside the modelled steps
//! whose host end is pageable (unpinned) memory. The driver stages such a copy through a pinned buffer of its own
//! and the issuing call returns only once the data is staged or copied, so the host waits on it even for
//! `cudaMemcpyAsync`, and the copy runs at the staging rate.
//!
//! Where the model fits the window, the worth is replayed: the pageable copies removed, that is their issuing calls
//! and the copies themselves at no time (a blocking call keeps its wait for other GPU work). It is what the copies
//! cost the run on every path through them; pinning the buffers (the call returns at once, the copy runs
//! asynchronously and faster) gets at most that, as a pinned copy still moves its bytes. Where the model does not
//! fit, the worth is the bound "on every rank, each copy's host time in its issuing call or its GPU time, whichever
//! is longer, summed", which also counts time off every path. The bound is given in the evidence either way.

use std::collections::{BTreeMap, BTreeSet};

use crate::dependency::graph::OpKind;
use crate::findings::rules::SavingRule;
use crate::findings::{Basis, Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;
use shardscope_model::{CopyKind, MemoryKind};

pub(crate) const KIND: &str = "pageable_copies";

/// The reason given when no trace records the host memory kind of its copies (the words of the findings before
/// the model kept it, so that such traces give the same output).
pub const NO_KIND_RECORDED: &str =
    "not evaluated: the trace model records no host memory kind (pinned or pageable) of a copy";

/// One host-device copy of the window.
struct Copy {
    rank: u32,
    direction: CopyKind,
    host_memory: Option<MemoryKind>,
    bytes: u64,
    gpu_ns: i64,
    /// Host time of the issuing call, when it is linked.
    call_ns: Option<i64>,
    /// The issuing call: (trace, index in its API calls), when it is linked.
    call: Option<(usize, u32)>,
    /// The copy's operation in the model.
    op: usize,
}

/// Figures of one rank's copies of one memory kind.
#[derive(Default)]
struct Tally {
    count: u64,
    to_device: u64,
    bytes: u64,
    gpu_ns: i64,
    call_ns: i64,
    bound_ns: i64,
}

impl Tally {
    fn add(&mut self, copy: &Copy) {
        self.count += 1;
        self.to_device += u64::from(copy.direction == CopyKind::HtoD);
        self.bytes += copy.bytes;
        self.gpu_ns += copy.gpu_ns;
        self.call_ns += copy.call_ns.unwrap_or(0);
        self.bound_ns += copy.call_ns.unwrap_or(0).max(copy.gpu_ns);
    }

    fn gbps(&self) -> f64 {
        if self.gpu_ns > 0 { self.bytes as f64 / self.gpu_ns as f64 } else { 0.0 }
    }
}

fn window_copies(context: &Context) -> Vec<Copy> {
    let graph = &context.model.graph;
    graph
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.kind == OpKind::Copy)
        .filter_map(|(op_id, op)| {
            let trace = &context.traces[graph.trace_of(op)];
            let memop = trace.memops.get(op.index as usize)?;
            let direction = memop.copy_kind.filter(|k| matches!(k, CopyKind::HtoD | CopyKind::DtoH))?;
            let call = memop.launch.and_then(|l| trace.api_calls.get(l as usize));
            Some(Copy {
                rank: graph.ranks.get(op.rank_index as usize).map_or(op.rank_index, |r| r.rank),
                direction,
                host_memory: memop.host_memory(),
                bytes: memop.bytes,
                gpu_ns: (op.end_ns - op.start_ns).max(0),
                call_ns: call.map(|c| (c.end_ns - c.start_ns).max(0)),
                call: call.and(memop.launch).map(|l| (graph.trace_of(op), l)),
                op: op_id,
            })
        })
        .collect()
}

/// See the module documentation; `fits`: whether the model fits the window (the what-if's fit checks).
pub fn evaluate(context: &Context, fits: bool, rule: &SavingRule) -> Outcome {
    let host_device = |m: &shardscope_model::MemOp| matches!(m.copy_kind, Some(CopyKind::HtoD | CopyKind::DtoH));
    if !context.traces.iter().any(|t| t.memops.iter().any(host_device)) {
        // Nothing to classify: saying the kind is not recorded would send the user looking for a missing record.
        return Err(Quiet { kind: KIND, why: "no host-device copies in the trace".into() });
    }
    let recorded = context.traces.iter().any(|t| t.memops.iter().any(|m| m.host_memory().is_some()));
    if !recorded {
        return Err(Quiet { kind: KIND, why: NO_KIND_RECORDED.into() });
    }
    let copies = window_copies(context);
    if copies.is_empty() {
        return Err(Quiet { kind: KIND, why: "no host-device copies in the window".into() });
    }
    let mut pageable: BTreeMap<u32, Tally> = BTreeMap::new();
    let mut pinned: BTreeMap<u32, Tally> = BTreeMap::new();
    for copy in &copies {
        match copy.host_memory {
            Some(MemoryKind::Pageable) => pageable.entry(copy.rank).or_default().add(copy),
            Some(MemoryKind::Pinned) => pinned.entry(copy.rank).or_default().add(copy),
            _ => {}
        }
    }
    let count: u64 = pageable.values().map(|t| t.count).sum();
    if count == 0 {
        let why = format!("no pageable host-device copies in the window ({} host-device copies)", copies.len());
        return Err(Quiet { kind: KIND, why });
    }
    let bound_ns: i64 = pageable.values().map(|t| t.bound_ns).sum();
    let replay = fits.then(|| replayed_saving(context, &copies));
    let saving_ns = replay.unwrap_or(bound_ns);
    if context.pct(saving_ns) < rule.min_saving_pct {
        if replay.is_some() {
            let what = format!("removing {count} pageable copies (their calls and the copies at no time)");
            return Err(context.below(KIND, &what, saving_ns, rule.min_saving_pct));
        }
        let why = format!(
            "{count} pageable copies cost at most {} ({:.2} % of the window), below the {} % threshold",
            human_ns(bound_ns),
            context.pct(bound_ns),
            rule.min_saving_pct
        );
        return Err(Quiet { kind: KIND, why });
    }
    let per_step = context
        .window_steps
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| format!(" ({:.1} per step)", count as f64 / n as f64));
    let mut evidence = vec![format!("{count} pageable host-device copies in the window{per_step}")];
    for (rank, t) in &pageable {
        evidence.push(format!(
            "rank {rank}: {} copies ({} host to device, {} device to host), {:.1} MB, {} on the GPU ({:.2} GB/s), \
             the host {} inside their calls",
            t.count,
            t.to_device,
            t.count - t.to_device,
            t.bytes as f64 / 1e6,
            human_ns(t.gpu_ns),
            t.gbps(),
            human_ns(t.call_ns)
        ));
        if let Some(p) = pinned.get(rank) {
            evidence.push(format!("rank {rank}: its {} pinned copies reach {:.2} GB/s", p.count, p.gbps()));
        }
    }
    let title =
        "host-device copies from pageable memory block the host inside the step loop (pin the host buffers)".into();
    match replay {
        Some(saving_ns) => {
            evidence.push(format!(
                "the bound without the replay (each call's host time or its copy's GPU time, the longer, summed): {} \
                 ({:.1} % of the window)",
                human_ns(bound_ns),
                context.pct(bound_ns)
            ));
            Ok(context.replayed_saving(
                KIND,
                title,
                evidence,
                "the pageable copies removed: their issuing calls and the copies replayed at no time (pinned, the call \
                 returns at once and the copy runs asynchronously and faster, but still moves its bytes: at most this)"
                    .into(),
                saving_ns,
            ))
        }
        None => Ok(context.finding(
            KIND,
            title,
            evidence,
            "bound: per pageable copy on every rank, the host's time in the issuing call or the copy's GPU time, \
             whichever is longer, summed (pinned, the call returns at once and the copy runs asynchronously)"
                .into(),
            Basis::Bound,
            bound_ns,
        )),
    }
}

/// The saving of replaying the window without its pageable copies: their issuing calls and the copies at no time
/// (their end vertices' own time 0; a blocking call's host-sync edge stays, so it still waits for other GPU work).
fn replayed_saving(context: &Context, copies: &[Copy]) -> i64 {
    let graph = &context.model.graph;
    let pageable = copies.iter().filter(|c| c.host_memory == Some(MemoryKind::Pageable));
    let calls: BTreeSet<(usize, u32)> = pageable.clone().filter_map(|c| c.call).collect();
    let ops: BTreeSet<usize> = pageable.map(|c| c.op).collect();
    let removed = graph.op_flags(graph.ops.iter().enumerate().filter_map(|(op_id, op)| {
        let issuing = op.kind == OpKind::HostCall && calls.contains(&(graph.trace_of(op), op.index));
        (ops.contains(&op_id) || issuing).then_some(op_id)
    }));
    context.saving_with_ends_free(|op| removed[op as usize], &[])
}
