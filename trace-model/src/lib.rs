//! The canonical in-memory trace that every importer fills and every consumer reads.
//!
//! A [`Trace`] is what one input file (or one folder of per-rank files) holds after import:
//! processes with their rank, GPUs, kernels, memory copies and sets, CUDA API calls, NVTX /
//! annotation ranges and NCCL collective metadata. Names are interned once in [`Names`] and
//! referred to by [`NameId`], so ten million kernels with a few thousand distinct names cost
//! four bytes of name each.
//!
//! All times are integer nanoseconds on the trace's own clock (`*_ns`). Within one file every
//! event uses the same clock; [`Trace::clock_offset_ns`] says how to put it on the Unix epoch
//! when the source told us.
//!
//! ```
//! use shardscope_model::{Trace, Kernel, Device, Process};
//! let mut trace = Trace::default();
//! let process = trace.add_process(Process { pid: 42, rank: Some(0), ..Process::default() });
//! let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
//! let name = trace.names.intern("ampere_bf16_gemm");
//! trace.kernels.push(Kernel { start_ns: 100, end_ns: 350, name, device, process, ..Kernel::default() });
//! trace.finish();
//! assert_eq!(trace.kernels[0].duration_ns(), 250);
//! ```

pub mod kernel_names;
mod memory;
mod names;
pub mod parallel;
mod types;

pub use memory::*;
pub use names::{NameId, Names};
pub use types::*;
