//! Parquet datasets: the traces of runs as tables that SQL engines (DuckDB, Spark) and dataframe libraries read,
//! partitioned hive-style by run and rank, and read back into [`Trace`]s without loss.
//!
//! Layout (`docs/parquet-schema.md` lists every table and column):
//!
//! ```text
//! OUT_DIR/_shardscope_dataset.json               marker: format name, schema version, manifest (written last)
//! OUT_DIR/_shardscope_manifest.json              every part file with its rows, bytes and CRC-32
//! OUT_DIR/<table>/run=<run>/rank=<n>/part-<trace>.parquet   event tables (kernels, memops, cuda_api, nvtx, memory, …)
//! OUT_DIR/<table>/run=<run>/part-<trace>.parquet            per-input tables (traces, processes, devices, …)
//! ```
//!
//! `<trace>` is the input's position among the inputs of its run (`traceId` in every table), so a rank recorded
//! by two inputs still gets one file per input. Every file carries the schema version in its key-value metadata
//! ([`METADATA_SCHEMA_VERSION`]), so a file taken out of its folder still says what it is.
//!
//! A dataset is written in a private sibling folder and renamed into place when complete ([`DatasetWriter`]); the
//! reader checks that the run's part files are exactly those of the manifest, with the sizes, checksums and rows
//! written, so a deleted partition, a duplicated or changed part or the leftovers of a killed export are an error
//! naming the dataset.
//! A dataset written before manifests existed is still read, with a warning in every trace that says so.
//!
//! Column names follow Nsight Systems' SQLite export where it has the concept (`start`, `end`, `deviceId`,
//! `streamId`, `correlationId`, `globalPid`, `demangledName`, `shortName`, `gridX`, …); times are ns on the
//! trace's clock. Names are written as text in the event tables, and each input's string table (`string_ids`) is
//! kept too, so that a trace read back interns its names in the same order as the one written.

mod arrays;
mod manifest;
mod read;
mod write;

pub use arrays::{bools, f64s, i64s, opt_f64s, opt_i64s, opt_strs, opt_u32s, opt_u64s, strs, u32s, u64s};
pub use manifest::{MANIFEST_FILE, ManifestPart};
pub use read::{guarded, is_dataset, read_dataset};
pub use write::{Column, DatasetWriter, WriteStats, column, sanitize_run_name};

/// The version of the tables and columns this build writes and reads (`major.minor`). A reader accepts the same
/// major version; a minor version only adds tables or nullable columns.
pub const SCHEMA_VERSION: &str = "1.3";

/// The marker file at the dataset's root: how a folder is recognised as a dataset.
pub const MARKER_FILE: &str = "_shardscope_dataset.json";

/// The format name the marker records.
pub const FORMAT_NAME: &str = "shardscope-parquet";

/// Key-value metadata key of every file: the schema version.
pub const METADATA_SCHEMA_VERSION: &str = "shardscope.schema_version";

/// Key-value metadata key of every file: the table the file belongs to.
pub const METADATA_TABLE: &str = "shardscope.table";

/// Tables written from the traces, one file per input (and per rank where partitioned by rank).
pub mod tables {
    /// One row per input: its path, reader, schema version, producer, clock offset.
    pub const TRACES: &str = "traces";
    /// Each input's interned names in id order.
    pub const STRING_IDS: &str = "string_ids";
    /// Processes.
    pub const PROCESSES: &str = "processes";
    /// Thread names.
    pub const THREADS: &str = "threads";
    /// GPUs.
    pub const DEVICES: &str = "devices";
    /// Reader warnings: what was skipped or changed, counted.
    pub const WARNINGS: &str = "warnings";
    /// Kernels (Nsight Systems: `CUPTI_ACTIVITY_KIND_KERNEL`).
    pub const KERNELS: &str = "kernels";
    /// Copies and sets (`CUPTI_ACTIVITY_KIND_MEMCPY` and `_MEMSET`, one table: `copyKind` is null for a set).
    pub const MEMOPS: &str = "memops";
    /// CUDA runtime and driver calls (`CUPTI_ACTIVITY_KIND_RUNTIME`).
    pub const CUDA_API: &str = "cuda_api";
    /// NVTX ranges and PyTorch annotations (`NVTX_EVENTS`).
    pub const NVTX: &str = "nvtx";
    /// NCCL operation metadata.
    pub const COLLECTIVES: &str = "collectives";
    /// CUDA graphs recorded as whole executions.
    pub const CUDA_GRAPHS: &str = "cuda_graphs";
    /// CUDA-level allocations and releases (Nsight Systems: `CUDA_GPU_MEMORY_USAGE_EVENTS`; since 1.2).
    pub const CUDA_MEMORY: &str = "cuda_memory";
    /// Stream-ordered memory pools made, destroyed or trimmed (`CUDA_GPU_MEMORY_POOL_EVENTS`; since 1.2).
    pub const CUDA_MEMORY_POOLS: &str = "cuda_memory_pools";
    /// The framework allocator's tensor allocations and frees (Kineto `[memory]`; since 1.2).
    pub const FRAMEWORK_MEMORY: &str = "framework_memory";
}

#[cfg(test)]
mod tests;
