//! Exposed communication: the saving of replaying with communication fully overlapped, that is communication
//! kernels taking no time and nothing waiting at a collective's barrier (the what-if `--comm-overlapped`
//! scenario). It is the most any overlap of communication with computation can give; the evidence splits the
//! communication time into waiting for the last rank and transfer.

use crate::dependency::graph::EdgeKind;
use crate::findings::rules::SavingRule;
use crate::findings::{Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;

const KIND: &str = "exposed_communication";

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &SavingRule) -> Outcome {
    let graph = &context.model.graph;
    if !graph.ops.iter().any(|op| op.comm) {
        return Err(Quiet { kind: KIND, why: "not evaluated: no communication kernels in the window".into() });
    }
    let comm = |op: u32| graph.ops[op as usize].comm;
    let saving_ns = context.saving_with_ends_free(comm, &[EdgeKind::CollectiveRelease]);
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(KIND, "full overlap of communication", saving_ns, rule.min_saving_pct));
    }
    let comm_on_path: i64 =
        context.path().by_category.iter().filter(|s| s.name.starts_with("comm")).map(|s| s.ns).sum();
    let mut evidence = vec![format!(
        "{} ({:.1} %) of the critical path is communication",
        human_ns(comm_on_path),
        context.pct(comm_on_path)
    )];
    for rank in &context.report.ranks {
        let f = rank.steady_state.as_ref().map_or(&rank.figures, |s| &s.figures);
        evidence.push(format!(
            "rank {}: communication {} (waiting {}, transfer {}), exposed {} ({:.1} % of its span)",
            rank.rank,
            human_ns(f.comm_ns),
            human_ns(f.comm_wait_ns),
            human_ns(f.comm_transfer_ns),
            human_ns(f.exposed_comm_ns),
            f.exposed_comm_over_span_pct
        ));
    }
    let waiting: i64 = context.report.ranks.iter().map(|r| r.figures.comm_wait_ns).sum();
    let transfer: i64 = context.report.ranks.iter().map(|r| r.figures.comm_transfer_ns).sum();
    let what = if waiting > transfer { "mostly waiting for the last rank" } else { "mostly transfer" };
    Ok(context.replayed_saving(
        KIND,
        format!("communication is exposed on the critical path ({what})"),
        evidence,
        "communication kernels replayed at no time and no rank waiting at a collective (full overlap)".into(),
        saving_ns,
    ))
}
