//! `shardscope-viewer`: an egui timeline of every rank, GPU and stream of a sharded GPU run.
//!
//! The binary (`viewer`) is a thin shell around [`app::ViewerApp`]; everything lives in this
//! library so tests and the frame benchmark drive the same code.
//!
//! - [`load`]: background loading with progress.
//! - [`timeline`]: track layout, level of detail, painting, input.
//! - [`panels`]: details, range statistics, search, summary charts.
//! - [`analysis`]: the one adapter for op categories and per-rank figures.
//! - [`collectives`]: the same collective on every rank.
//! - [`critical`]: the analyzer's critical path across ranks, placed on the tracks.
//! - [`ideal`]: the no-straggler replay of every GPU operation, in a row under its stream.
//! - [`memory`]: each GPU's memory in use over time, lowest and highest per pixel column.
//! - [`modules`]: which module of the model each run of a GPU's kernels belongs to.
//! - [`roi`]: the region of interest a run opens at.
//! - [`utilization`]: each GPU's busy fraction per pixel column.
//! - [`screenshot`]: headless rendering to PNG.
//! - [`synthetic`]: deterministic multi-rank traces for tests and benchmarks.
//!
//! ```no_run
//! let loaded = shardscope_viewer::load::load_paths(&["trace.sqlite".into()], |_, _| {}).unwrap();
//! let app = shardscope_viewer::app::ViewerApp::with_loaded(loaded);
//! # let _ = app;
//! ```

pub mod analysis;
pub mod app;
pub mod collectives;
pub mod critical;
pub mod ideal;
pub mod load;
pub mod memory;
pub mod modules;
pub mod panels;
pub mod roi;
pub mod screenshot;
pub mod synthetic;
pub mod timeline;
pub mod utilization;
