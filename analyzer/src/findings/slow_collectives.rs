//! Collectives far below the measured link: with `bench` results, every matched collective whose type, rank count
//! and size bench measured is replayed at the bus bandwidth bench got for that size (the what-if
//! `--comm-at-peak` scenario). The saving is what a link working as well as it does under bench would give. The
//! collectives are latency-bound when bench itself, at their time-weighted size, reaches less than a set share of
//! its best bus bandwidth (small messages: fewer, larger ones help), else bandwidth-bound.

use std::collections::{BTreeMap, HashMap};

use crate::dependency::graph::end_vertex;
use crate::dependency::whatif::peak_transfers;
use crate::findings::rules::CollectiveRule;
use crate::findings::{Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;
use shardscope_model::CollectiveOp;

const KIND: &str = "slow_collectives";

/// Per collective type: (measured transfer ns, at-peak ns, time-weighted bytes sum, ranks).
type ByType = BTreeMap<String, (i64, i64, f64, u32, CollectiveOp)>;

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &CollectiveRule) -> Outcome {
    let Some(bench) = context.bench else {
        return Err(Quiet { kind: KIND, why: "not evaluated: needs --bench (the bench program's results)".into() });
    };
    let graph = &context.model.graph;
    let peak = peak_transfers(context.model, bench);
    let first_barrier = 2 * graph.ops.len();
    let own = graph.own_ns();
    // The matched collectives' ends replayed at the peak, by end vertex.
    let mut at_peak: HashMap<u32, i64> = HashMap::new();
    let mut by_type: ByType = BTreeMap::new();
    let mut replaced = 0u64;
    for (op_id, _) in graph.ops.iter().enumerate().filter(|(_, op)| op.matched) {
        let Some(barrier) = graph.barrier_of(op_id as u32) else { continue };
        let slot = (barrier as usize).checked_sub(first_barrier);
        let Some(at_peak_ns) = slot.and_then(|s| peak.per_barrier_ns.get(s).copied().flatten()) else { continue };
        let Some(instance) = graph.barrier_instance(barrier).map(|i| &context.model.matching.instances[i]) else {
            continue;
        };
        let end = end_vertex(op_id as u32);
        let measured_ns = own[end as usize];
        at_peak.insert(end, at_peak_ns);
        replaced += 1;
        let entry = by_type.entry(instance.op.label().to_string()).or_insert((0, 0, 0.0, instance.nranks, instance.op));
        entry.0 += measured_ns;
        entry.1 += at_peak_ns;
        entry.2 += instance.bytes.unwrap_or(0) as f64 * measured_ns as f64;
    }
    if replaced == 0 {
        return Err(Quiet {
            kind: KIND,
            why: format!("not evaluated: no collective in the window has a size and a measurement in {}", bench.source),
        });
    }
    let own_of = |v: u32| match graph.op_ended_at(v) {
        Some(op) if graph.ops[op as usize].matched => at_peak.get(&v).copied().unwrap_or(own[v as usize]),
        _ => own[v as usize],
    };
    let saving_ns = context.replay_saving_ns(own_of, &[]);
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(KIND, "collectives at the measured bus bandwidth", saving_ns, rule.min_saving_pct));
    }
    let mut evidence = Vec::new();
    let mut latency_bound = 0;
    for (label, (measured_ns, at_peak_ns, weighted_bytes, nranks, op)) in &by_type {
        let bytes = if *measured_ns > 0 { (weighted_bytes / *measured_ns as f64) as u64 } else { 0 };
        let at_size = bench.at_size(*op, *nranks, bytes).unwrap_or(0.0);
        let best = bench.peak(*op).unwrap_or(0.0);
        let share = if best > 0.0 { 100.0 * at_size / best } else { 0.0 };
        let regime = if share < rule.latency_bound_below_peak_pct { "latency-bound" } else { "bandwidth-bound" };
        latency_bound += usize::from(share < rule.latency_bound_below_peak_pct);
        evidence.push(format!(
            "{label} on {nranks} ranks, typically {} B: transfer {} measured, {} at bench's {at_size:.1} GB/s for \
             that size ({share:.0} % of its best {best:.1} GB/s: {regime})",
            bytes,
            human_ns(*measured_ns),
            human_ns(*at_peak_ns)
        ));
    }
    let regime = if latency_bound * 2 > by_type.len() { "small, latency-bound messages" } else { "bandwidth-bound" };
    Ok(context.replayed_saving(
        KIND,
        format!("collectives run far below the measured link ({regime})"),
        evidence,
        format!(
            "matched collectives replayed at the bus bandwidth {} measured for their type, ranks and size",
            bench.source
        ),
        saving_ns,
    ))
}
