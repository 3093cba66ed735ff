//! The measured limits as they are written to and read from a `bench` JSON file, with no CUDA in sight.
//!
//! A consumer (the analyzer) loads a file with [`BenchResults::load`] and asks, for a collective it saw in a
//! trace, what bus bandwidth this machine reaches for the same operation and message size
//! ([`BenchResults::busbw_gbps`]); dividing the trace's bus bandwidth by it gives "x % of peak".
//!
//! Units are in the field names: `bytes`, `gbps` (10⁹ bytes per second), `time_us` (microseconds),
//! `tflops` (10¹² floating-point operations per second). Bandwidth definitions follow nccl-tests:
//! `algbw = S / t`, `busbw = algbw × f` with `f` from [`busbw_factor`].

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Version of the JSON layout written by this crate; bumped when a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one `bench` run measured on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResults {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Host name of the machine that ran the measurements.
    pub host: String,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// CUDA driver version as the driver reports it (e.g. 13000 for 13.0).
    pub cuda_driver_version: Option<i32>,
    /// NCCL version as `ncclGetVersion` reports it (e.g. 22803 for 2.28.3); `None` when NCCL was not loaded.
    pub nccl_version: Option<i32>,
    /// The GPUs that took part, in ordinal order.
    pub gpus: Vec<GpuInfo>,
    /// Copy bandwidth within one GPU and between GPU pairs.
    #[serde(default)]
    pub copy: Vec<CopyResult>,
    /// NCCL collective timings over a message-size sweep.
    #[serde(default)]
    pub collectives: Vec<CollectiveResult>,
    /// Dense matrix-multiply throughput.
    #[serde(default)]
    pub gemm: Vec<GemmResult>,
    /// The best value of each family, for one-line comparisons.
    pub peaks: Peaks,
    /// Sections that could not be measured, one line each (e.g. NCCL missing).
    #[serde(default)]
    pub errors: Vec<String>,
}

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// CUDA device ordinal within the visible devices.
    pub ordinal: u32,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Number of streaming multiprocessors.
    pub sm_count: u32,
    /// Total device memory.
    pub memory_bytes: u64,
    /// Compute capability as `major.minor`, e.g. "9.0".
    pub compute_capability: String,
    /// Size of the L2 cache; copies whose buffers fit in it run faster than device memory allows.
    #[serde(default)]
    pub l2_cache_bytes: Option<u64>,
}

/// Whether a copy stayed on one GPU or crossed between two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    /// Device-to-device copy within one GPU's memory.
    D2d,
    /// Peer-to-peer copy from one GPU's memory to another's (NVLink or PCIe).
    P2p,
}

/// Bandwidth of one copy size between one source and one destination GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyResult {
    /// Same-GPU or cross-GPU copy.
    pub kind: CopyKind,
    /// Source GPU ordinal.
    pub src: u32,
    /// Destination GPU ordinal (equal to `src` for [`CopyKind::D2d`]).
    pub dst: u32,
    /// Bytes moved by one copy (counted once, not read plus write).
    pub bytes: u64,
    /// Mean time of one copy.
    pub time_us: f64,
    /// `bytes / time`, in 10⁹ bytes per second.
    pub gbps: f64,
}

/// The NCCL collectives that are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    /// `ncclAllReduce` (sum).
    AllReduce,
    /// `ncclAllGather`; the size is the whole gathered buffer.
    AllGather,
    /// `ncclReduceScatter` (sum); the size is the whole buffer before scattering.
    ReduceScatter,
}

impl CollectiveOp {
    /// All measured operations, in the order they are run and printed.
    pub const ALL: [CollectiveOp; 3] = [CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::ReduceScatter];

    /// The name used in JSON and tables (`all_reduce`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
        }
    }
}

impl std::fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The nccl-tests factor that turns algorithm bandwidth into bus bandwidth for `nranks` ranks:
/// 2(n−1)/n for all-reduce (every byte crosses the busiest link twice: reduce-scatter then all-gather),
/// (n−1)/n for all-gather and reduce-scatter (each rank sends or receives all but its own share).
/// For one rank nothing crosses a link and the factor is 0.
pub fn busbw_factor(op: CollectiveOp, nranks: u32) -> f64 {
    if nranks == 0 {
        return 0.0;
    }
    let n = f64::from(nranks);
    let share_moved = (n - 1.0) / n;
    match op {
        CollectiveOp::AllReduce => 2.0 * share_moved,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter => share_moved,
    }
}

/// Timing of one collective at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveResult {
    /// Which collective.
    pub op: CollectiveOp,
    /// Number of ranks (GPUs) in the communicator.
    pub nranks: u32,
    /// Element type, e.g. "bf16".
    pub dtype: String,
    /// Message size S: the all-reduce buffer, or the whole gathered / scattered buffer.
    pub bytes: u64,
    /// Mean time of one collective (slowest rank), after warm-up.
    pub time_us: f64,
    /// `bytes / time`, in 10⁹ bytes per second.
    pub algbw_gbps: f64,
    /// `algbw × busbw_factor(op, nranks)`, comparable with a link's peak bandwidth.
    pub busbw_gbps: f64,
}

/// Throughput of one matrix multiply `C[m×n] = A[m×k] · B[k×n]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmResult {
    /// Rows of the output (tokens, for an LLM linear layer).
    pub m: u64,
    /// Columns of the output (output features).
    pub n: u64,
    /// Shared dimension (input features).
    pub k: u64,
    /// Input and output element type, e.g. "bf16" (accumulation is fp32).
    pub dtype: String,
    /// GPU ordinal that ran it.
    pub gpu: u32,
    /// Mean time of one multiply.
    pub time_us: f64,
    /// `2·m·n·k / time`, in 10¹² operations per second.
    pub tflops: f64,
}

/// Best measured value per family; `None` where the family was not measured.
///
/// `d2d_gbps` only considers copies at least as large as the GPU's L2 cache (when the file names it):
/// smaller copies are served partly from L2 and overstate what device memory sustains.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Best same-GPU copy bandwidth.
    pub d2d_gbps: Option<f64>,
    /// Best GPU-to-GPU copy bandwidth (one direction).
    pub p2p_gbps: Option<f64>,
    /// Best all-reduce bus bandwidth.
    pub all_reduce_busbw_gbps: Option<f64>,
    /// Best all-gather bus bandwidth.
    pub all_gather_busbw_gbps: Option<f64>,
    /// Best reduce-scatter bus bandwidth.
    pub reduce_scatter_busbw_gbps: Option<f64>,
    /// Best bf16 GEMM throughput.
    pub gemm_bf16_tflops: Option<f64>,
}

/// Why a results file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file is not valid JSON of this layout.
    #[error("{path}: not a bench results file: {source}")]
    Json {
        /// The file.
        path: String,
        /// Where and why parsing stopped.
        source: serde_json::Error,
    },
    /// The file was written by a newer, incompatible writer.
    #[error("{path}: unsupported bench schema_version {found} (this reader knows {SCHEMA_VERSION})")]
    SchemaVersion {
        /// The file.
        path: String,
        /// The version in the file.
        found: u32,
    },
}

impl BenchResults {
    /// Reads a results file written by `bench -o FILE`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: shown.clone(), source })?;
        Self::from_json(&text).map_err(|error| match error {
            Error::Json { source, .. } => Error::Json { path: shown.clone(), source },
            Error::SchemaVersion { found, .. } => Error::SchemaVersion { path: shown.clone(), found },
            other => other,
        })
    }

    /// Parses results from JSON text (errors name the source as `<json>`).
    pub fn from_json(text: &str) -> Result<Self, Error> {
        let results: BenchResults =
            serde_json::from_str(text).map_err(|source| Error::Json { path: "<json>".into(), source })?;
        if results.schema_version != SCHEMA_VERSION {
            return Err(Error::SchemaVersion { path: "<json>".into(), found: results.schema_version });
        }
        Ok(results)
    }

    /// The measured sweep of one collective on `nranks` ranks, sorted by message size.
    pub fn sweep(&self, op: CollectiveOp, nranks: u32) -> Vec<&CollectiveResult> {
        let mut points: Vec<&CollectiveResult> =
            self.collectives.iter().filter(|row| row.op == op && row.nranks == nranks && row.time_us > 0.0).collect();
        points.sort_by_key(|row| row.bytes);
        points
    }

    /// Expected time of one `op` of `bytes` on `nranks` ranks, in µs, read off the measured sweep.
    ///
    /// Between two measured sizes the time is interpolated linearly in bytes: each segment is then a
    /// latency-plus-bandwidth model `t = a + b·S` fitted through its two end points, which is how
    /// collective time actually grows. Below the smallest measured size the smallest time is used
    /// (latency dominates there, so time stops shrinking); above the largest, time grows in proportion
    /// to size (bandwidth dominates). `None` when the op was not measured at this rank count.
    pub fn time_us(&self, op: CollectiveOp, nranks: u32, bytes: u64) -> Option<f64> {
        let points = self.sweep(op, nranks);
        let first = points.first()?;
        let last = points.last()?;
        if bytes <= first.bytes {
            return Some(first.time_us);
        }
        if bytes >= last.bytes {
            return Some(last.time_us * bytes as f64 / last.bytes as f64);
        }
        let upper_index = points.partition_point(|row| row.bytes < bytes);
        let (lower, upper) = (points[upper_index - 1], points[upper_index]);
        if upper.bytes == bytes {
            return Some(upper.time_us);
        }
        let fraction = (bytes - lower.bytes) as f64 / (upper.bytes - lower.bytes) as f64;
        Some(lower.time_us + fraction * (upper.time_us - lower.time_us))
    }

    /// Bus bandwidth (10⁹ bytes/s) this machine reaches for one `op` of `bytes` on `nranks` ranks:
    /// `bytes / time_us(op, nranks, bytes) × busbw_factor(op, nranks)`.
    pub fn busbw_gbps(&self, op: CollectiveOp, nranks: u32, bytes: u64) -> Option<f64> {
        let time_us = self.time_us(op, nranks, bytes)?;
        Some(bytes as f64 / (time_us * 1e3) * busbw_factor(op, nranks))
    }

    /// Whether a copy's buffers fit in the source GPU's L2 cache (false when the size of L2 is not known).
    pub fn fits_in_l2(&self, row: &CopyResult) -> bool {
        let l2_cache_bytes = self.gpus.iter().find(|gpu| gpu.ordinal == row.src).and_then(|gpu| gpu.l2_cache_bytes);
        l2_cache_bytes.is_some_and(|l2| row.bytes < l2)
    }

    /// Recomputes [`Peaks`] from the measured rows.
    pub fn compute_peaks(&mut self) {
        fn best<'a>(values: impl Iterator<Item = f64> + 'a) -> Option<f64> {
            values.filter(|value| value.is_finite()).reduce(f64::max)
        }
        let collective_peak =
            |op: CollectiveOp| best(self.collectives.iter().filter(|row| row.op == op).map(|row| row.busbw_gbps));
        let peaks = Peaks {
            d2d_gbps: best(
                self.copy.iter().filter(|row| row.kind == CopyKind::D2d && !self.fits_in_l2(row)).map(|row| row.gbps),
            ),
            p2p_gbps: best(self.copy.iter().filter(|row| row.kind == CopyKind::P2p).map(|row| row.gbps)),
            all_reduce_busbw_gbps: collective_peak(CollectiveOp::AllReduce),
            all_gather_busbw_gbps: collective_peak(CollectiveOp::AllGather),
            reduce_scatter_busbw_gbps: collective_peak(CollectiveOp::ReduceScatter),
            gemm_bf16_tflops: best(self.gemm.iter().filter(|row| row.dtype == "bf16").map(|row| row.tflops)),
        };
        self.peaks = peaks;
    }
}
