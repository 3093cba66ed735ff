//! shardscope: where the time goes in sharded GPU runs.
//!
//! This crate is the front door of the workspace. It re-exports the trace model
//! ([`model`], the `shardscope-model` crate) and the readers ([`io`], `shardscope-io`), and
//! holds [`perfetto`], which writes traces as Perfetto protobuf files for
//! [ui.perfetto.dev](https://ui.perfetto.dev) and `trace_processor`.
//!
//! ```no_run
//! use std::path::PathBuf;
//!
//! let inputs = [PathBuf::from("rank0.sqlite"), PathBuf::from("rank1.sqlite")];
//! let stats = shardscope::perfetto::export_file(&inputs, "run.pftrace".as_ref())?;
//! println!("{} kernels written", stats.kernel_slices);
//! # Ok::<(), shardscope::perfetto::Error>(())
//! ```

pub mod perfetto;

pub use shardscope_io as io;
pub use shardscope_model as model;
