//! `shardscope-nccl-profiler`: an NCCL profiler plugin that records every collective and
//! point-to-point operation of a process.
//!
//! Built as a shared library (`libshardscope_nccl_profiler.so`), it is what
//! `NCCL_PROFILER_PLUGIN=<path>` loads. It exports `ncclProfiler_v5`, `_v4` and `_v3` (NCCL
//! 2.25 to 2.28 and later pick the newest they know; see [`ffi`]) and writes one
//! crash-safe spool file `nccl-<pid>.bin` per process into `$SHARDSCOPE_SPOOL_DIR` ([`plugin`]).
//!
//! The records and the file layout are `shardscope_spool::nccl`'s; reading the files back into
//! operations, linking those to the NCCL kernels of a trace and the capture file's NCCL tables
//! are `shardscope_io::nccl`'s. So this crate is a leaf: nothing depends on it, and it depends on
//! neither the trace model nor SQLite.
//!
//! Clocks: CPU times are `CLOCK_MONOTONIC`, converted to wall-clock time with the clock pairs
//! each spool records; GPU times are the GPU's `%globaltimer` that NCCL's kernel reads.

pub mod ffi;
pub mod plugin;
