//! Why a step takes as long as it does: the dependency graph of kernels, copies, launches and collectives across
//! ranks, its critical path, the what-if replay on it, and the straggler artifact's format that the replay can
//! read and write.

pub mod critical_path;
pub mod graph;
pub mod straggler_artifact;
pub mod whatif;
