//! Host-device copies in the step loop: host-to-device and device-to-host copies inside the modelled steps,
//! replayed at no time (as keeping the data on the GPU, or prefetching it on a side stream, would). Whether a
//! copy used pageable host memory is not in the trace model; their achieved bandwidth is given as evidence.

use crate::dependency::graph::OpKind;
use crate::findings::rules::SavingRule;
use crate::findings::{Context, Outcome, Quiet};
use crate::output::render::duration as human_ns;
use shardscope_model::CopyKind;

const KIND: &str = "host_device_copies";

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &SavingRule) -> Outcome {
    let graph = &context.model.graph;
    let copies: Vec<(usize, CopyKind, u64)> = graph
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.kind == OpKind::Copy)
        .filter_map(|(o, op)| {
            let memop = context.traces[graph.trace_of(op)].memops.get(op.index as usize)?;
            let kind = memop.copy_kind.filter(|k| matches!(k, CopyKind::HtoD | CopyKind::DtoH))?;
            Some((o, kind, memop.bytes))
        })
        .collect();
    if copies.is_empty() {
        return Err(Quiet { kind: KIND, why: "no host-device copies in the window".into() });
    }
    let removed = graph.op_flags(copies.iter().map(|c| c.0));
    let saving_ns = context.saving_with_ends_free(|op| removed[op as usize], &[]);
    if context.pct(saving_ns) < rule.min_saving_pct {
        let what = format!("removing {} host-device copies", copies.len());
        return Err(context.below(KIND, &what, saving_ns, rule.min_saving_pct));
    }
    let mut evidence = Vec::new();
    for (label, wanted) in [("host to device", CopyKind::HtoD), ("device to host", CopyKind::DtoH)] {
        let of_kind: Vec<&(usize, CopyKind, u64)> = copies.iter().filter(|c| c.1 == wanted).collect();
        if of_kind.is_empty() {
            continue;
        }
        let bytes: u64 = of_kind.iter().map(|c| c.2).sum();
        let busy_ns: i64 = of_kind.iter().map(|c| graph.ops[c.0].end_ns - graph.ops[c.0].start_ns).sum();
        let gbps = if busy_ns > 0 { bytes as f64 / busy_ns as f64 } else { 0.0 };
        evidence.push(format!(
            "{} copies {label}: {:.1} MB in {} ({gbps:.2} GB/s)",
            of_kind.len(),
            bytes as f64 / 1e6,
            human_ns(busy_ns)
        ));
    }
    Ok(context.replayed_saving(
        KIND,
        "host-device copies inside the step loop hold up the step".into(),
        evidence,
        "every host-to-device and device-to-host copy in the window replayed at no time".into(),
        saving_ns,
    ))
}
