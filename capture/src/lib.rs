//! `capture`: record a CUDA workload into an Nsight Systems-schema SQLite file.
//!
//! ```text
//! capture -o run.sqlite -- torchrun --nproc_per_node=2 train.py
//! ```
//!
//! The launcher ([`launch`]) starts the workload with `CUDA_INJECTION64_PATH` naming the
//! injection library (crate `shardscope-inject`), which records every CUDA process of the job
//! into its own spool file. When the workload ends, [`merge`] reads all spools into one
//! [`shardscope_model::Trace`] and [`sqlite`] writes it with the table layout of `nsys export
//! --type sqlite`, so `nsys stats`, the shardscope analyzer and viewer all read the result.
//! Capture-only facts (dropped records, environment, links between GPUs) go into extra
//! `SHARDSCOPE_*` tables documented in [`sqlite`].
//!
//! This crate never links CUPTI; only the injection library loads it, inside the workload.

pub mod control;
pub mod cost;
pub mod launch;
pub mod memory;
pub mod merge;
pub mod names;
pub mod nccl_merge;
pub mod nccl_sample;
pub mod nccl_spool;
pub mod nccl_tables;
pub mod nccl_timers;
pub mod nvml;
pub mod redact;
pub mod side_records;
pub mod sqlite;
pub mod torch_modules;
