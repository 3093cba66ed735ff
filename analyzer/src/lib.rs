//! Where the GPU time of a sharded run goes.
//!
//! [`report::analyze`] takes the traces of one run (one per rank, or one file holding several GPUs) and
//! gives, per rank and per phase: span, GPU busy and idle time, op-category shares from the rules in
//! [`figures::categories`], communication time, exposed communication, communication–computation overlap and the
//! kernel summary of Nsight Systems' `cuda_gpu_kern_sum`. [`output::render`] prints it as a table, JSON or CSV.
//!
//! ```no_run
//! use shardscope_analyzer::report::{analyze, Options};
//! let traces = shardscope_io::load(std::path::Path::new("run.sqlite"))?;
//! let report = analyze(&traces, &Options::default());
//! for rank in &report.ranks {
//!     println!("rank {}: {:.1}% of busy time in communication", rank.rank, rank.figures.comm_over_busy_pct);
//! }
//! # Ok::<(), shardscope_io::Error>(())
//! ```

// The wings, in their order: figures, llm, report, output, dependency, findings, study; each depends only on those
// before it (the declarations below are in rustfmt's alphabetical order).
pub mod dependency;
pub mod figures;
pub mod findings;
pub mod llm;
pub mod output;
pub mod report;
pub mod study;
