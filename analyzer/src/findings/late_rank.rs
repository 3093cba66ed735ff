//! A late rank: the rank whose operations, given the typical own times of the same operations on the other ranks
//! (the no-straggler replay of that rank alone), save the most. Its lateness is then split by three more replays
//! of that rank alone: its host launch path (host calls and the host gaps between them), its own kernels (GPU
//! durations) and its input (delays before its GPU work that no recorded dependency explains: waits for data or
//! peers the trace does not record, launch latency). The part whose replay saves most names the cause.

use crate::dependency::graph::Op;
use rayon::prelude::*;

use crate::dependency::whatif::{OwnParts, typical_own_of};
use crate::findings::rules::SavingRule;
use crate::findings::{Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;

const KIND: &str = "late_rank";

/// The saving of replaying rank `rank_index` with the parts `select` names at typical own times.
fn saving(context: &Context, rank_index: u32, select: impl Fn(&Op) -> OwnParts + Sync) -> i64 {
    let graph = &context.model.graph;
    let own_of = typical_own_of(graph, &context.typical, |op| {
        if op.rank_index == rank_index { select(op) } else { OwnParts::default() }
    });
    context.replay_saving_ns(own_of, &[])
}

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &SavingRule) -> Outcome {
    let graph = &context.model.graph;
    if graph.ranks.len() < 2 {
        return Err(Quiet { kind: KIND, why: "not evaluated: one rank".into() });
    }
    let whole = OwnParts { delay: true, duration: true };
    // Each rank's replay on its own (in parallel; collected in rank order).
    let by_rank: Vec<(u32, i64)> =
        (0..graph.ranks.len() as u32).into_par_iter().map(|r| (r, saving(context, r, |_| whole))).collect();
    let (rank_index, saving_ns) =
        by_rank.iter().copied().max_by_key(|&(r, s)| (s, std::cmp::Reverse(r))).expect("two ranks or more");
    let rank = graph.ranks[rank_index as usize].rank;
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(
            KIND,
            &format!("idealising the latest rank (rank {rank})"),
            saving_ns,
            rule.min_saving_pct,
        ));
    }
    let (host, (kernels, input)) = rayon::join(
        || saving(context, rank_index, |op| if op.kind.on_gpu() { OwnParts::default() } else { whole }),
        || {
            rayon::join(
                || saving(context, rank_index, |op| OwnParts { delay: false, duration: op.kind.on_gpu() }),
                || saving(context, rank_index, |op| OwnParts { delay: op.kind.on_gpu(), duration: false }),
            )
        },
    );
    let parts = [("its host launch path", host), ("its own kernels", kernels), ("its input (GPU waits)", input)];
    let (cause, _) = parts.iter().copied().max_by_key(|&(_, s)| s).expect("three parts");
    let mut evidence = vec![format!(
        "replayed alone at typical times: host launch path saves {}, own kernels {}, input {}",
        human_ns(host),
        human_ns(kernels),
        human_ns(input)
    )];
    let others: Vec<String> = by_rank
        .iter()
        .filter(|&&(r, _)| r != rank_index)
        .take(4)
        .map(|&(r, s)| format!("rank {} {}", graph.ranks[r as usize].rank, human_ns(s)))
        .collect();
    evidence.push(format!("the same replay of another rank saves: {}", others.join(", ")));
    if let Some(late) = context.report.collectives.late_ranks.iter().find(|l| l.rank == rank) {
        evidence.push(format!(
            "over the run it arrived last at {} collectives, making the others wait {} (longest {})",
            late.arrived_last,
            human_ns(late.caused_wait_ns),
            human_ns(late.largest_wait_ns)
        ));
    }
    let on_path = context.path().by_rank.iter().find(|s| s.name == format!("rank {rank}"));
    if let Some(share) = on_path {
        evidence.push(format!("{} ({:.1} %) of the critical path runs on rank {rank}", human_ns(share.ns), share.pct));
    }
    Ok(context.replayed_saving(
        KIND,
        format!("rank {rank} is late, mostly through {cause}"),
        evidence,
        format!(
            "rank {rank}'s operations replayed at the typical (median across ranks) own times of the same operations"
        ),
        saving_ns,
    ))
}
