//! The analyzer's integration tests, one module per subject, linked into one test binary: each integration test
//! file is otherwise its own executable carrying the whole analyzer, which costs a link per file and gigabytes of
//! disk. Run one subject with `cargo test -p shardscope-analyzer --test suite findings::`.

mod common;

mod bad_input;
mod browser;
mod capture_windows;
mod categories;
mod charts;
mod cli_leftovers;
mod collectives;
mod comm_at_peak;
mod comm_only;
mod compare;
mod critical_path;
mod critical_path_perfetto;
mod cuda_graphs;
mod engines;
mod export;
mod figure_tables;
mod findings;
mod hostile_cli;
mod hta;
mod inferred_phases;
mod interval_properties;
mod llm_figures;
mod memory;
mod memory_origin;
mod model_beside_report;
mod modules;
mod modules_compare;
mod one_run;
mod parallel_report;
mod parquet;
mod parquet_modules;
mod partial;
mod perfetto_split;
mod perfetto_verdict;
mod phases_and_steps;
mod pipeline_real;
mod rank_builder;
mod readme_commands;
mod report;
mod report_threads;
mod straggler_artifact;
mod streaming;
mod study;
mod study_theme;
mod summary;
mod warmup_everywhere;
mod whatif_fit;
mod window;
mod window_everywhere;
mod wings;
