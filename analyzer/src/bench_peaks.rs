//! Measured link limits from the `bench` program's JSON, so the report can say "x % of peak".
//!
//! Only the fields the analyzer needs are read: `collectives[]` with `op`, `bytes` and `busbw_gbps`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use shardscope_model::CollectiveOp;

/// The best bus bandwidth `bench` measured per collective type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchPeaks {
    /// The file they came from.
    pub source: String,
    /// Peak busbw per type, GB/s.
    pub busbw_gbps: BTreeMap<CollectiveOp, f64>,
}

#[derive(Deserialize)]
struct BenchFile {
    collectives: Vec<BenchCollective>,
}

#[derive(Deserialize)]
struct BenchCollective {
    op: String,
    busbw_gbps: f64,
}

impl BenchPeaks {
    /// Reads a `bench` results file. Errors are one line naming the file.
    pub fn load(path: &Path) -> Result<BenchPeaks, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: BenchFile =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a bench results file: {e}", path.display()))?;
        let mut busbw_gbps: BTreeMap<CollectiveOp, f64> = BTreeMap::new();
        for row in file.collectives {
            let op = CollectiveOp::parse(&row.op);
            let best = busbw_gbps.entry(op).or_insert(0.0);
            *best = best.max(row.busbw_gbps);
        }
        Ok(BenchPeaks { source: path.display().to_string(), busbw_gbps })
    }

    /// Peak busbw of a collective type, if measured.
    pub fn peak(&self, op: CollectiveOp) -> Option<f64> {
        self.busbw_gbps.get(&op).copied()
    }
}
