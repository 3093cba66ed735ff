//! Synchronising calls in the step loop: blocking calls (stream, device and event synchronise, synchronous
//! `cudaMemcpy`) inside the modelled steps. The replay drops the host's wait on the GPU at each of them (their
//! host-sync edges skipped, the calls at no time), as making them asynchronous or moving them out of the loop
//! would; work that truly needs the result (a value read on the host) keeps a wait the trace cannot tell apart.

use crate::dependency::critical_path::op_name;
use crate::dependency::graph::{EdgeKind, OpKind, host_call_name, is_blocking_call};
use crate::findings::rules::SavingRule;
use crate::findings::{Context, Outcome, Quiet, top_names};
use crate::output::render::duration as human_ns;
use rayon::prelude::*;

const KIND: &str = "synchronising_calls";

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &SavingRule) -> Outcome {
    let graph = &context.model.graph;
    // Every host call's name, read in place on worker threads (ten million calls on a large run).
    let blocking: Vec<usize> = (graph.ops.par_iter().enumerate().with_min_len(1 << 14))
        .filter(|(_, op)| {
            op.kind == OpKind::HostCall && is_blocking_call(host_call_name(&context.traces[graph.trace_of(op)], op))
        })
        .map(|(o, _)| o)
        .collect();
    if blocking.is_empty() {
        return Err(Quiet { kind: KIND, why: "no blocking calls in the window".into() });
    }
    let blocked_ns: i64 = blocking.iter().map(|&o| graph.ops[o].end_ns - graph.ops[o].start_ns).sum();
    let unblocked = graph.op_flags(blocking.iter().copied());
    let saving_ns = context.saving_with_ends_free(|op| unblocked[op as usize], &[EdgeKind::HostSync]);
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(
            KIND,
            &format!("dropping the host's wait at {} blocking calls", blocking.len()),
            saving_ns,
            rule.min_saving_pct,
        ));
    }
    let per_step = context
        .window_steps
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| format!(" ({:.1} per step)", blocking.len() as f64 / n as f64));
    let names = top_names(blocking.iter().map(|&o| op_name(context.traces, graph, o as u32)), 4);
    Ok(context.replayed_saving(
        KIND,
        "the host waits for the GPU inside the step loop (synchronising calls)".into(),
        vec![
            format!("{} blocking calls in the window{per_step}: {names}", blocking.len()),
            format!("the host spent {} inside them", human_ns(blocked_ns)),
        ],
        "the host no longer waits for the GPU at the blocking calls (their host-sync edges dropped, the calls at \
         no time)"
            .into(),
        saving_ns,
    ))
}
