//! Where the GPU time of a sharded run goes.
//!
//! [`report::analyze`] takes the traces of one run (one per rank, or one file holding several GPUs) and
//! gives, per rank and per phase: span, GPU busy and idle time, op-category shares from the rules in
//! [`categories`], communication time, exposed communication, communication–computation overlap and the
//! kernel summary of Nsight Systems' `cuda_gpu_kern_sum`. [`render`] prints it as a table, JSON or CSV.
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

pub mod bench_peaks;
pub mod capture_gaps;
pub mod categories;
pub mod charts;
pub mod collectives;
pub mod colors;
pub mod compare;
pub mod critical_path;
pub mod depgraph;
pub mod generate_calls;
pub mod hta;
pub mod html;
pub mod inferred_phases;
pub mod intervals;
pub mod kernel_summary;
pub mod layers;
pub mod mfu;
pub mod module_charts;
pub mod modules;
pub mod parquet_export;
pub mod phases;
pub mod progress;
pub mod render;
pub mod report;
pub mod run;
pub mod steps;
pub mod straggler_artifact;
pub mod study;
pub mod study_command;
pub mod summary;
pub mod whatif;
pub mod window;
