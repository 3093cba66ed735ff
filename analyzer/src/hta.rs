//! Figures computed the way Holistic Trace Analysis 0.5 computes them, so users can check one against the other.
//!
//! HTA types each GPU event by name: COMMUNICATION when the name contains `nccl`, MEMORY for memory copies and
//! sets, COMPUTATION otherwise. Its kernel-type shares are summed durations per type over the sum of all three;
//! its communication–computation overlap is the time a COMMUNICATION and a COMPUTATION event run at the same
//! time, over the time a COMMUNICATION event runs, both on unions of intervals per rank.
//! See `docs/hta-definitions.md` for the details, including which profiler steps HTA keeps.

use serde::Serialize;
use shardscope_model::{Kernel, MemOp, Trace};

use crate::intervals::IntervalUnion;

/// HTA's kernel-type totals and overlap for one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HtaFigures {
    /// Summed duration of COMMUNICATION kernels.
    pub comm_ns: i64,
    /// Summed duration of COMPUTATION kernels.
    pub comp_ns: i64,
    /// Summed duration of MEMORY events.
    pub mem_ns: i64,
    /// COMMUNICATION share of the three, in percent.
    pub comm_pct: f64,
    /// COMPUTATION share, in percent.
    pub comp_pct: f64,
    /// MEMORY share, in percent.
    pub mem_pct: f64,
    /// HTA's communication–computation overlap, in percent.
    pub comm_comp_overlap_pct: f64,
}

/// HTA's type of a kernel name.
fn is_hta_communication(name: &str) -> bool {
    name.contains("nccl")
}

fn is_hta_memory(name: &str) -> bool {
    name.starts_with("Memcpy") || name.starts_with("Memset")
}

/// Computes HTA's figures for the kernels and memory operations of one rank.
pub fn figures(trace: &Trace, kernels: &[&Kernel], memops: &[&MemOp], window_ns: Option<(i64, i64)>) -> HtaFigures {
    let in_window = |s: i64, e: i64| window_ns.is_none_or(|(w0, w1)| s >= w0 && e <= w1);
    let mut out = HtaFigures::default();
    let mut comm = Vec::new();
    let mut comp = Vec::new();
    for kernel in kernels.iter().filter(|k| in_window(k.start_ns, k.end_ns)) {
        let name = trace.names.get(kernel.name);
        let interval = (kernel.start_ns, kernel.end_ns);
        if is_hta_communication(name) {
            out.comm_ns += kernel.duration_ns();
            comm.push(interval);
        } else if is_hta_memory(name) {
            out.mem_ns += kernel.duration_ns();
        } else {
            out.comp_ns += kernel.duration_ns();
            comp.push(interval);
        }
    }
    out.mem_ns += memops.iter().filter(|m| in_window(m.start_ns, m.end_ns)).map(|m| m.duration_ns()).sum::<i64>();
    let total = out.comm_ns + out.comp_ns + out.mem_ns;
    let pct = |part: i64, whole: i64| if whole > 0 { 100.0 * part as f64 / whole as f64 } else { 0.0 };
    out.comm_pct = pct(out.comm_ns, total);
    out.comp_pct = pct(out.comp_ns, total);
    out.mem_pct = pct(out.mem_ns, total);
    let comm = IntervalUnion::from_intervals(comm);
    let comp = IntervalUnion::from_intervals(comp);
    out.comm_comp_overlap_pct = pct(comm.intersection_ns(&comp), comm.length_ns());
    out
}
