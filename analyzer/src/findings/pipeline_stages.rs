//! Imbalance between pipeline stages. The trace model records no parallel layout, so the stages are inferred from
//! the point-to-point transfers (`SendRecv`, `Send`, `Recv`) matched between two ranks: ranks so linked form chains
//! (each rank with at most two partners, no ring), and a rank's place in its chain is its stage, counted from the
//! end with the lower rank number (data-parallel or tensor-parallel copies of the pipeline are parallel chains of the
//! same length). Anything else (a rank exchanging with three or more, a ring, chains of different lengths) is no
//! pipeline, and the type is not evaluated, with the reason.
//!
//! A stage's compute is the mean over its ranks of their GPU busy time less communication (the union of their
//! non-communication GPU operations) in the modelled window, per step. The busiest stage fires when it exceeds the
//! stages' mean by the rule's share; its worth is the replay with that stage's non-communication GPU durations
//! scaled to the mean (each by mean ÷ busiest). Where the model does not fit the window no replay is given: the worth
//! is then the bound "(busiest − mean) compute per step × steps".

use std::collections::{BTreeMap, BTreeSet};

use shardscope_model::CollectiveOp;

use crate::dependency::graph::{Graph, Op};
use crate::figures::collectives::Matching;
use crate::findings::rules::PipelineRule;
use crate::findings::{Basis, Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;

pub(crate) const KIND: &str = "pipeline_stage_imbalance";

/// Why the ranks form no pipeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPipeline {
    /// No send/recv between two ranks.
    #[error("no point-to-point transfers matched between two ranks: no pipeline stages")]
    NoTransfers,
    /// A rank exchanges with three or more ranks.
    #[error("rank {rank} exchanges point-to-point with {partners} ranks: an exchange pattern, not a pipeline chain")]
    Exchange {
        /// The rank.
        rank: u32,
        /// How many ranks it exchanges with.
        partners: usize,
    },
    /// A rank outside every chain.
    #[error("rank {0} has no point-to-point partner: not every rank is in a pipeline chain")]
    Alone(u32),
    /// The partners close a ring.
    #[error("point-to-point partners form a ring: not pipeline stages")]
    Ring,
    /// Chains of different lengths (their lengths, joined by ", ").
    #[error("point-to-point chains of different lengths ({0}): not pipeline stages")]
    UnequalChains(String),
}

/// The pipeline stages of `ranks` (rank numbers) from the point-to-point instances of `matching`: rank numbers per
/// stage, stage 0 first, and the number of transfers seen; or why the ranks form no pipeline.
pub fn infer_stages(matching: &Matching, ranks: &[u32]) -> Result<(Vec<Vec<u32>>, u64), NoPipeline> {
    let point_to_point = [CollectiveOp::SendRecv, CollectiveOp::Send, CollectiveOp::Recv];
    let mut pairs: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut transfers = 0u64;
    for instance in matching.instances.iter().filter(|i| point_to_point.contains(&i.op)) {
        let members: Vec<u32> = instance.rank_times_ns.keys().copied().filter(|r| ranks.contains(r)).collect();
        if let [a, b] = members[..] {
            pairs.insert((a.min(b), a.max(b)));
            transfers += 1;
        }
    }
    if pairs.is_empty() {
        return Err(NoPipeline::NoTransfers);
    }
    let mut partners: BTreeMap<u32, Vec<u32>> = ranks.iter().map(|&r| (r, Vec::new())).collect();
    for &(a, b) in &pairs {
        partners.entry(a).or_default().push(b);
        partners.entry(b).or_default().push(a);
    }
    if let Some((rank, list)) = partners.iter().find(|(_, list)| list.len() > 2) {
        return Err(NoPipeline::Exchange { rank: *rank, partners: list.len() });
    }
    if let Some((rank, _)) = partners.iter().find(|(_, list)| list.is_empty()) {
        return Err(NoPipeline::Alone(*rank));
    }
    let mut chains: Vec<Vec<u32>> = Vec::new();
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    // From each chain's end with the lower rank number (ends are visited in rank order).
    for (&end, _) in partners.iter().filter(|(_, list)| list.len() == 1) {
        if seen.contains(&end) {
            continue;
        }
        let mut chain = vec![end];
        seen.insert(end);
        while let Some(&next) = partners[chain.last().expect("not empty")].iter().find(|r| !seen.contains(r)) {
            chain.push(next);
            seen.insert(next);
        }
        chains.push(chain);
    }
    if seen.len() < partners.len() {
        return Err(NoPipeline::Ring);
    }
    let stages = chains[0].len();
    if chains.iter().any(|c| c.len() != stages) {
        let lengths: Vec<String> = chains.iter().map(|c| c.len().to_string()).collect();
        return Err(NoPipeline::UnequalChains(lengths.join(", ")));
    }
    Ok(((0..stages).map(|s| chains.iter().map(|c| c[s]).collect()).collect(), transfers))
}

/// Per rank of the graph: the union of its non-communication GPU operations' intervals, ns.
fn compute_busy_ns(graph: &Graph) -> Vec<i64> {
    let mut spans: Vec<Vec<(i64, i64)>> = vec![Vec::new(); graph.ranks.len()];
    for op in graph.ops.iter().filter(|o| o.kind.on_gpu() && !o.comm) {
        spans[op.rank_index as usize].push((op.start_ns, op.end_ns));
    }
    spans
        .iter_mut()
        .map(|list| {
            list.sort_unstable();
            let (mut total, mut reach) = (0i64, i64::MIN);
            for &(start, end) in list.iter() {
                let from = start.max(reach);
                if end > from {
                    total += end - from;
                }
                reach = reach.max(end);
            }
            total
        })
        .collect()
}

/// See the module documentation; `fits`: whether the model fits the window (the what-if's fit checks).
pub fn evaluate(context: &Context, fits: bool, rule: &PipelineRule) -> Outcome {
    let quiet = |why: String| Err(Quiet { kind: KIND, why });
    let graph = &context.model.graph;
    let rank_numbers: Vec<u32> = graph.ranks.iter().map(|r| r.rank).collect();
    if rank_numbers.len() < 2 {
        return quiet("not evaluated: one rank".into());
    }
    let (stages, transfers) = match infer_stages(&context.model.matching, &rank_numbers) {
        Ok(found) => found,
        Err(why) => return quiet(format!("not evaluated: {why}")),
    };
    let busy = compute_busy_ns(graph);
    let index_of = |rank: u32| rank_numbers.iter().position(|&r| r == rank).expect("a rank of the graph");
    let stage_ns: Vec<i64> =
        stages.iter().map(|ranks| ranks.iter().map(|&r| busy[index_of(r)]).sum::<i64>() / ranks.len() as i64).collect();
    let mean_ns = stage_ns.iter().sum::<i64>() / stage_ns.len() as i64;
    let (slow, &slow_ns) =
        stage_ns.iter().enumerate().max_by_key(|&(s, ns)| (*ns, std::cmp::Reverse(s))).expect("stages");
    let steps = context.window_steps.filter(|&n| n > 0).unwrap_or(1) as i64;
    let per_step = |ns: i64| {
        if context.window_steps.is_some() { format!("{} per step", human_ns(ns / steps)) } else { human_ns(ns) }
    };
    let listing: Vec<String> = stages
        .iter()
        .zip(&stage_ns)
        .enumerate()
        .map(|(s, (ranks, &ns))| {
            let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
            format!("stage {s} (rank {}) {}", ranks.join(", "), per_step(ns))
        })
        .collect();
    let excess_pct = if mean_ns > 0 { 100.0 * (slow_ns - mean_ns) as f64 / mean_ns as f64 } else { 0.0 };
    if excess_pct < rule.min_excess_over_mean_pct {
        return quiet(format!(
            "the busiest stage's compute exceeds the stages' mean by {excess_pct:.1} %, below the {} % threshold ({})",
            rule.min_excess_over_mean_pct,
            listing.join("; ")
        ));
    }
    let factor = mean_ns as f64 / slow_ns as f64;
    let slow_ranks: Vec<usize> = stages[slow].iter().map(|&r| index_of(r)).collect();
    let (basis, saving_ns, how) = if fits {
        let own = graph.own_ns();
        let scaled = |op: &Op| op.kind.on_gpu() && !op.comm && slow_ranks.contains(&(op.rank_index as usize));
        let own_of = |v: u32| match graph.op_ended_at(v) {
            Some(op) if scaled(&graph.ops[op as usize]) => (own[v as usize] as f64 * factor).round() as i64,
            _ => own[v as usize],
        };
        let how =
            format!("stage {slow}'s non-communication GPU durations replayed × {factor:.3} (its compute at the mean)");
        (Basis::Replay, context.replay_saving_ns(own_of, &[]), how)
    } else {
        let how = "bound: (busiest − mean) stage compute per step × steps; the model does not fit this window, so no \
                   replay"
            .to_string();
        (Basis::Bound, slow_ns - mean_ns, how)
    };
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(
            KIND,
            &format!("stage {slow}'s compute at the mean"),
            saving_ns,
            rule.min_saving_pct,
        ));
    }
    let evidence = vec![
        format!("stages inferred from {transfers} point-to-point transfers between ranks: {}", listing.join("; ")),
        format!(
            "stage {slow} computes {excess_pct:.1} % more than the mean of the stages ({} against {})",
            per_step(slow_ns),
            per_step(mean_ns)
        ),
    ];
    let title = format!("pipeline stage {slow} is the busiest, {excess_pct:.0} % above the stages' mean");
    Ok(context.finding(KIND, title, evidence, how, basis, saving_ns))
}
