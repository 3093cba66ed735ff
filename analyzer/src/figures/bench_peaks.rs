//! Measured link limits from the `bench` program's results, so the report can say "x % of what this machine
//! can do": against the best bus bandwidth measured for the collective type, and against the bus bandwidth
//! measured at the same message size and rank count (interpolated over bench's size sweep).

use std::path::Path;

use shardscope_bench::results::{BenchResults, CollectiveOp as BenchOp};
use shardscope_model::CollectiveOp;

/// `bench` results, read for comparisons.
#[derive(Debug, Clone)]
pub struct BenchPeaks {
    /// The file they came from.
    pub source: String,
    results: BenchResults,
}

fn bench_op(op: CollectiveOp) -> Option<BenchOp> {
    match op {
        CollectiveOp::AllReduce => Some(BenchOp::AllReduce),
        CollectiveOp::AllGather => Some(BenchOp::AllGather),
        CollectiveOp::ReduceScatter => Some(BenchOp::ReduceScatter),
        _ => None,
    }
}

/// Why a `bench` results file cannot be used: the reader's reason, which names the file, on one line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.to_string().replace('\n', " "))]
pub struct LoadError(pub shardscope_bench::results::Error);

impl BenchPeaks {
    /// Reads a `bench` results file. Errors are one line naming the file.
    pub fn load(path: &Path) -> Result<BenchPeaks, LoadError> {
        let results = BenchResults::load(path).map_err(LoadError)?;
        Ok(BenchPeaks { source: path.display().to_string(), results })
    }

    /// The results as read (the GEMM peak of the FLOP-rate finding comes from them).
    pub fn results(&self) -> &BenchResults {
        &self.results
    }

    /// The best bus bandwidth bench measured for a collective type (any size), GB/s.
    pub fn peak(&self, op: CollectiveOp) -> Option<f64> {
        let op = bench_op(op)?;
        self.results.collectives.iter().filter(|c| c.op == op).map(|c| c.busbw_gbps).reduce(f64::max)
    }

    /// The bus bandwidth bench measured for this type, rank count and message size, GB/s.
    pub fn at_size(&self, op: CollectiveOp, nranks: u32, bytes: u64) -> Option<f64> {
        self.results.busbw_gbps(bench_op(op)?, nranks, bytes)
    }

    /// The bus bandwidth bench measured for this type and rank count over its size sweep: (bytes, GB/s), by size.
    pub fn curve(&self, op: CollectiveOp, nranks: u32) -> Vec<(u64, f64)> {
        let Some(op) = bench_op(op) else { return Vec::new() };
        let mut points: Vec<(u64, f64)> = self
            .results
            .collectives
            .iter()
            .filter(|c| c.op == op && c.nranks == nranks)
            .map(|c| (c.bytes, c.busbw_gbps))
            .collect();
        points.sort_by_key(|p| p.0);
        points
    }
}
