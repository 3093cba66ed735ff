//! The CUDA injection library of shardscope.
//!
//! The CUDA driver loads this library into every process that initialises CUDA when
//! `CUDA_INJECTION64_PATH` names it, and calls [`InitializeInjection`]. The library then loads
//! CUPTI at run time (it never links it), subscribes, enables the activity kinds that
//! `capture` asked for (`shardscope_spool::config`), and streams decoded records to one spool
//! file per process (`shardscope_spool::cupti`), from which `capture` builds the final trace.
//! The launcher reads those files through `shardscope-spool` alone and never links this crate.
//!
//! ```text
//! CUPTI buffer callbacks ──(queue, bounded pool)──▶ background thread
//!     decode (decode.rs) ──▶ encode and append a frame (shardscope-spool: cupti.rs) ──▶ <host>.<pid>.spool
//! ```
//!
//! The same library, named by `NVTX_INJECTION64_PATH`, forwards NVTX's injection call to
//! CUPTI so that NVTX ranges arrive as CUPTI marker records ([`InitializeInjectionNvtx2`]); where CUPTI is
//! detached outside windows, NVTX's calls reach CUPTI only while it is attached (`nvtx_gate.rs`).
//!
//! Recording can be on for windows only (`window.rs` decides, `switch.rs` switches CUPTI): outside a window
//! nothing but the trigger callbacks is on, or CUPTI is detached altogether where the triggers are seen without
//! it (`attach.rs`). Under `capture --comm-only` kernels are timed only for a sample at
//! the start (`nccl_sample.rs`), which the NCCL profiler plugin ends.
//!
//! Nothing here may hurt the workload: every exported function catches panics, and any
//! failure switches recording off with one line on stderr.

mod attach;
pub mod decode;
mod graph_nodes;
mod live;
pub mod nccl_sample;
mod nvtx_gate;
pub mod omit;
mod switch;
pub mod window;

pub use attach::{cuProfilerStart, cuProfilerStop, cudaProfilerStart, cudaProfilerStop};
pub use live::{InitializeInjection, InitializeInjectionNvtx2, cuptiSubscribe, cuptiSubscribe_v2};
pub use nccl_sample::shardscope_nccl_sample_done;
pub use switch::shardscope_recording_on;
