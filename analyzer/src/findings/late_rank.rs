//! A late rank: the rank whose operations, given the typical own times of the same operations on the other ranks
//! (the no-straggler replay of that rank alone), save the most. Its lateness is then split by three more replays
//! of that rank alone: its host launch path (host calls and the host gaps between them), its own kernels (GPU
//! durations) and its input (delays before its GPU work that no recorded dependency explains: waits for data or
//! peers the trace does not record, launch latency). The part whose replay saves most names the cause.

use crate::dependency::graph::Op;
use rayon::prelude::*;

use crate::dependency::whatif::{OwnParts, typical_own_in_lanes, typical_own_of};
use crate::findings::rules::SavingRule;
use crate::findings::{Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;

const KIND: &str = "late_rank";

/// The savings of `LANES` replays, replay `k` with the parts `select(op)[k]` of each operation at typical own
/// times, in one pass over the model ([`Graph::replayed_last_ends`]: the replays differ only in own times, so the
/// pass reads the model once for all of them); one replay each where the model has no ring plan.
fn savings_in_one_pass<const LANES: usize>(
    context: &Context,
    select: impl Fn(&Op) -> [OwnParts; LANES] + Sync,
) -> [i64; LANES] {
    let graph = &context.model.graph;
    match graph.replayed_last_ends(typical_own_in_lanes(graph, &context.typical, &select), &[]) {
        Some(ends) => ends.map(|end| context.saving_of_end_ns(end)),
        None => std::array::from_fn(|lane| {
            context.replay_saving_ns(typical_own_of(graph, &context.typical, |op| select(op)[lane]), &[])
        }),
    }
}

/// Most ranks replayed alone in one pass: a pass's ring of times per rank still fits in a core's cache (on the
/// 8-rank 1 M-kernel run, one pass of 4 ranks took 1.35 times one replay, one of 8 three times).
const MOST_RANKS_PER_PASS: usize = 4;

/// Ranks replayed alone in one pass on this pool: the passes take about half its workers (the other finding types'
/// replays and the critical path run beside them): where there are workers enough for a replay each, a pass of
/// several ranks would take longer than the other types and end the findings alone (8 ranks on 16 workers are
/// replayed one a pass and end with the others); on fewer workers a pass reads the model once for several ranks.
fn ranks_per_pass(ranks: usize) -> usize {
    let workers_for_passes = (rayon::current_num_threads() / 2).max(1);
    ranks.div_ceil(workers_for_passes).clamp(1, MOST_RANKS_PER_PASS)
}

/// Each rank's saving replayed alone with the parts `whole` of its operations at typical own times, in rank order:
/// [`ranks_per_pass`] ranks a pass, the passes on worker threads.
fn savings_alone(context: &Context, whole: OwnParts) -> Vec<(u32, i64)> {
    match ranks_per_pass(context.model.graph.ranks.len()) {
        1 => savings_in_passes::<1>(context, whole),
        2 => savings_in_passes::<2>(context, whole),
        _ => savings_in_passes::<MOST_RANKS_PER_PASS>(context, whole),
    }
}

/// [`savings_alone`], `LANES` ranks a pass.
fn savings_in_passes<const LANES: usize>(context: &Context, whole: OwnParts) -> Vec<(u32, i64)> {
    let ranks = context.model.graph.ranks.len() as u32;
    let firsts: Vec<u32> = (0..ranks).step_by(LANES).collect();
    let passes: Vec<Vec<(u32, i64)>> = (firsts.into_par_iter())
        .map(|first| {
            let savings = savings_in_one_pass(context, |op: &Op| -> [OwnParts; LANES] {
                std::array::from_fn(
                    |lane| if op.rank_index == first + lane as u32 { whole } else { OwnParts::default() },
                )
            });
            (first..ranks).zip(savings).collect()
        })
        .collect();
    passes.concat()
}

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &SavingRule) -> Outcome {
    let graph = &context.model.graph;
    if graph.ranks.len() < 2 {
        return Err(Quiet { kind: KIND, why: "not evaluated: one rank".into() });
    }
    let whole = OwnParts { delay: true, duration: true };
    let by_rank = savings_alone(context, whole);
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
    let [host, kernels, input] = savings_in_one_pass(context, |op: &Op| {
        if op.rank_index != rank_index {
            return [OwnParts::default(); 3];
        }
        let on_gpu = op.kind.on_gpu();
        [
            if on_gpu { OwnParts::default() } else { whole },
            OwnParts { delay: false, duration: on_gpu },
            OwnParts { delay: on_gpu, duration: false },
        ]
    });
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
