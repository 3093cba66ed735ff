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

// The wings, each using only those listed before it (`tests/suite/wings.rs` checks it; the comments between them keep
// rustfmt from sorting them).
// The allocator of the binaries: large blocks on transparent huge pages.
pub mod huge_pages;
// The wall time of each stage of a command, on standard error when asked for.
pub mod stage_times;
// Figures of one trace: op categories, intervals, kernel summary, matched collectives, window, run identity.
pub mod figures;
// The LLM structure read from a trace: phases, steps, generate calls, layers, modules.
pub mod llm;
// The report per rank and phase, MFU, and the comparison of runs.
pub mod report;
// What a report becomes: table, JSON, CSV, charts, HTML, Parquet.
pub mod output;
// The dependency model: graph, critical path, what-if, the straggler artifact.
pub mod dependency;
// What limits the run, each cause with the time removing it saves (replayed on the dependency model).
pub mod findings;
// Studies over a grid of configurations.
pub mod study;
