//! Launch-bound steps: the GPU waits for the host on the critical path (host gaps between calls, launch delays,
//! host calls themselves), and replaying with a host launch path that costs nothing (every host call and host gap
//! at no time, so every launch is issued at once, as one CUDA graph launch per step would) saves time. The GPU
//! delays before each kernel (launch latency, unrecorded waits) are kept, so the saving is what removing the
//! host's share gives, not a GPU that never idles.

use crate::dependency::graph::{GPU_DELAY, HOST, HOST_GAP};
use crate::findings::rules::LaunchRule;
use crate::findings::{Context, Outcome, top_by_time};
use crate::output::render::duration as human_ns;

const KIND: &str = "launch_bound";

/// See the module documentation.
pub fn evaluate(context: &Context, rule: &LaunchRule) -> Outcome {
    let graph = &context.model.graph;
    // The replay: every host call and host gap at no time.
    let own = graph.own_ns();
    let own_of = |v: u32| match graph.op_of_vertex(v) {
        Some(op) if !graph.ops[op as usize].kind.on_gpu() => 0,
        _ => own[v as usize],
    };
    let replay = || context.replay_saving_ns(own_of, &[]);
    let on_path = |category: &str| context.path().by_category.iter().find(|s| s.name == category).map_or(0, |s| s.ns);
    let host_on_path = || (on_path(HOST_GAP), on_path(GPU_DELAY), on_path(HOST));
    // Where the path is still being made (beside the finding types, on many cores), the replay runs meanwhile, and
    // is dropped where the path shows too little of the host: waiting first left the replay last, on one core.
    let ((host_gap, gpu_delay, host), replayed_ns) = if context.path_is_made() {
        (host_on_path(), None)
    } else {
        let (saving_ns, on_path) = rayon::join(replay, host_on_path);
        (on_path, Some(saving_ns))
    };
    let idle_ns = host_gap + gpu_delay + host;
    if context.pct(idle_ns) < rule.min_idle_on_path_pct {
        return Err(crate::findings::Quiet {
            kind: KIND,
            why: format!(
                "the GPU waits for the host {} ({:.2} %) on the critical path, below the {} % threshold",
                human_ns(idle_ns),
                context.pct(idle_ns),
                rule.min_idle_on_path_pct
            ),
        });
    }
    let saving_ns = replayed_ns.unwrap_or_else(replay);
    if context.pct(saving_ns) < rule.min_saving_pct {
        return Err(context.below(KIND, "a free host launch path", saving_ns, rule.min_saving_pct));
    }
    let gpu_ops = graph.ops.iter().filter(|o| o.kind.on_gpu()).count() as u64;
    let per_step =
        context.window_steps.filter(|&n| n > 0).map_or(String::new(), |n| format!(", {} per step", gpu_ops / n));
    let gaps = context.path().segments.iter().filter(|s| s.category == HOST_GAP || s.category == GPU_DELAY);
    let before: Vec<(String, i64)> = gaps.map(|s| (s.op.clone(), s.duration_ns)).collect();
    Ok(context.replayed_saving(
        KIND,
        "the GPU waits for the host: launches and host work between them (launch-bound)".into(),
        vec![
            format!(
                "on the critical path: host gaps {}, GPU launch delays {}, host calls {} ({:.1} % of the window)",
                human_ns(host_gap),
                human_ns(gpu_delay),
                human_ns(host),
                context.pct(idle_ns)
            ),
            format!("{gpu_ops} GPU operations launched in the window{per_step}"),
            format!("on the path, the longest waits for the host come before: {}", top_by_time(before, 3)),
        ],
        "every host call and host gap replayed at no time (all launches issued at once, as CUDA graphs or fewer \
         launches would)"
            .into(),
        saving_ns,
    ))
}
