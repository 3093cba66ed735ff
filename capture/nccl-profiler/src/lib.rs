//! `shardscope-nccl-profiler`: an NCCL profiler plugin that records every collective and
//! point-to-point operation of a process, and the code that reads what it recorded.
//!
//! Built as a shared library (`libshardscope_nccl_profiler.so`), it is what
//! `NCCL_PROFILER_PLUGIN=<path>` loads. It exports `ncclProfiler_v5`, `_v4` and `_v3` (NCCL
//! 2.25 to 2.28 and later pick the newest they know; see [`ffi`]) and writes one
//! crash-safe spool file `nccl-<pid>.bin` per process into `$SHARDSCOPE_SPOOL_DIR` ([`plugin`],
//! [`spool`], [`record`]).
//!
//! As a Rust library it turns those files into [`NcclOperation`]s ([`read_spool_dir`]), into
//! model [`shardscope_model::Collective`]s linked to NCCL kernels ([`to_collectives`],
//! [`attach_to_kernels`]), and into SQLite tables inside a capture file ([`write_tables`],
//! [`read_tables`]; columns in [`tables`]).
//!
//! Clocks: CPU times are `CLOCK_MONOTONIC`, converted to wall-clock time with the clock pairs
//! each spool records; GPU times are the GPU's `%globaltimer` that NCCL's kernel reads.

pub mod ffi;
pub mod ops;
pub mod plugin;
pub mod record;
pub mod spool;
pub mod tables;

pub use ops::{
    AttachStats, NcclOperation, NcclProcess, OpKind, ReadError, attach_to_kernels, read_process, read_spool_dir,
    to_collectives,
};
pub use record::NcclRecord;
pub use spool::{SpoolContents, SpoolError, read_spool};
pub use tables::{StoredOperation, TableOptions, read_tables, write_tables};
