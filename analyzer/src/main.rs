//! `analyzer`: the command-line front of the shardscope analyzer.
//!
//! Exit codes: 0 on success, 2 when an input, an option or a rules file cannot be used (one line on
//! stderr names the file and the cause).

use shardscope_io::Extent;
use shardscope_io::error_text::one_line;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use regex::Regex;
use shardscope_analyzer::dependency::critical_path::{Model, ModelError};
use shardscope_analyzer::figures::bench_peaks::BenchPeaks;
use shardscope_analyzer::figures::categories::{BUILTIN_RULES_TOML, Classifier};
use shardscope_analyzer::figures::run::{self, RunIdentity};
use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
use shardscope_analyzer::llm::steps::DEFAULT_STEP_PATTERN;
use shardscope_analyzer::output::render::{self, OutputFormat};
use shardscope_analyzer::report::{self, Options};
use shardscope_analyzer::stage_times::stage;
use shardscope_analyzer::{
    dependency::critical_path, dependency::straggler_artifact, dependency::whatif, figures::hta, figures::window,
    findings, llm::modules, output::html, report::compare,
};
use shardscope_model::Trace;

/// The two-rank sample trace compiled into the binary, used when no trace is named.
const BUILTIN_SAMPLE_NAME: &str = "sample-traces/tp2_nsys.sqlite.gz";
const BUILTIN_SAMPLE: &[u8] = include_bytes!("../../sample-traces/tp2_nsys.sqlite.gz");

/// Large blocks on transparent huge pages, fewer page faults (see `shardscope_analyzer::huge_pages`).
#[global_allocator]
static ALLOCATOR: shardscope_analyzer::huge_pages::HugePagesForLargeBlocks =
    shardscope_analyzer::huge_pages::HugePagesForLargeBlocks;

#[derive(Parser)]
#[command(name = "analyzer", version, about = "Where the GPU time of a sharded run goes, per rank and per phase")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Inputs and options shared by the analyses.
#[derive(clap::Args)]
struct AnalysisArgs {
    /// Trace files or folders (nsys SQLite, capture SQLite, Kineto JSON[.gz]); several = ranks of one run.
    /// Without any, the built-in two-rank sample trace is analysed.
    traces: Vec<PathBuf>,
    /// Regex selecting phase ranges (NVTX or annotations); its first group, if any, names the phase.
    #[arg(long, default_value = DEFAULT_PHASE_PATTERN)]
    phase_pattern: String,
    /// Op-category rules file replacing the built-in rules (see `analyzer rules`).
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Only analyse START_NS:END_NS of the trace clock.
    #[arg(long, value_parser = window::parse)]
    window: Option<(i64, i64)>,
    /// In the HTA-compatible figures, keep the last ProfilerStep (HTA's include_last_profiler_step=True).
    #[arg(long)]
    hta_include_last_step: bool,
    /// Results of the `bench` program: collective busbw is also given as a share of its measured peak.
    #[arg(long)]
    bench: Option<PathBuf>,
    /// Regex selecting step (iteration) ranges; without matches, phase ranges or a repeating kernel sequence
    /// give the steps.
    #[arg(long, default_value = DEFAULT_STEP_PATTERN)]
    step_pattern: String,
    /// Leave each rank's first N steps out as warm-up (of the step times, phases, op shares, TTFT/TPOT, charts and
    /// the what-if model alike); 0: leave nothing out. Without it: the leading warm-up steps found by their time
    /// (more than 1.5 × the steady median), reported as detected.
    #[arg(long, value_name = "N")]
    skip_steps: Option<usize>,
    /// Analyse inputs together even when they record different runs (different world sizes, one rank twice,
    /// times that do not overlap); without it such inputs are refused.
    #[arg(long)]
    allow_mixed: bool,
}

/// Charts of a report (`report --html`, `--charts`).
#[derive(clap::Args)]
struct ChartArgs {
    /// Also write a self-contained HTML report (charts as inline SVG, nothing fetched) to this file.
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
    /// Also write each chart as SVG and PNG into this folder.
    #[arg(long, value_name = "DIR")]
    charts: Option<PathBuf>,
    /// The model's shape, for each phase's FLOP/s and MFU in the charts and the findings (low FLOP rate):
    /// `layers=8,hidden=4096,ffn=11008[,vocab=V][,heads=H][,dtype=bf16][,peak_tflops=989]` or `parameters=N,…`.
    #[arg(long, value_name = "KEY=VALUE,…", requires = "tokens", value_parser = parse_model)]
    model: Option<shardscope_analyzer::report::mfu::ModelShape>,
    /// Tokens per phase instance: `batch=B[,seq=S][,decode_steps=D]` (prefill: B × S tokens, decode: B per step).
    #[arg(long, value_name = "KEY=VALUE,…", requires = "model", value_parser = parse_tokens)]
    tokens: Option<shardscope_analyzer::report::mfu::Tokens>,
    /// Colours of the charts and the HTML page: light (for slides and print) or dark (the viewer's).
    #[arg(long, value_enum, default_value_t)]
    chart_theme: shardscope_analyzer::output::charts::ChartTheme,
}

fn parse_model(text: &str) -> Result<shardscope_analyzer::report::mfu::ModelShape, String> {
    shardscope_analyzer::report::mfu::ModelShape::parse(text).map_err(|e| e.to_string())
}

fn parse_tokens(text: &str) -> Result<shardscope_analyzer::report::mfu::Tokens, String> {
    shardscope_analyzer::report::mfu::Tokens::parse(text).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Per rank and per phase: span, busy, op-category shares, communication (wait and transfer), exposed
    /// communication, overlap, kernel summary.
    Report {
        #[command(flatten)]
        analysis: AnalysisArgs,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
        /// Kernels shown per rank in the table (0: all of them).
        #[arg(long, default_value_t = 10)]
        top: usize,
        #[command(flatten)]
        pictures: ChartArgs,
        /// Findings thresholds replacing the built-in ones (see `analyzer findings --print-rules`).
        #[arg(long, value_name = "FINDINGS.toml")]
        findings_rules: Option<PathBuf>,
        /// Leave the findings out (no dependency model is built or replayed).
        #[arg(long, conflicts_with = "findings_rules")]
        no_findings: bool,
        /// Read and analyse the rank files a few at a time, each dropped once analysed, and match the collectives
        /// from what is kept (the same report, without the findings, which need every trace; a folder's rank files
        /// too): `auto` does so for two or more files whose traces would not fit in half the available memory.
        #[arg(long, value_enum, default_value = "auto")]
        streaming: StreamingMode,
        /// Streamed: rank files read and analysed at once (default: one per core, fewer where they would not fit in
        /// half the available memory). Fewer files at once keep less in memory and take longer.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        streaming_files: Option<u32>,
    },
    /// What limits the run, ranked by the time removing each cause saves (per step and per run), each saving
    /// obtained by replaying the dependency model of the steady-state steps with that cause removed, or a stated
    /// bound where no replay applies. Thresholds: `--findings-rules` (defaults: `--print-rules`).
    Findings {
        #[command(flatten)]
        analysis: AnalysisArgs,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: ModelFormat,
        /// Findings thresholds replacing the built-in ones.
        #[arg(long, value_name = "FINDINGS.toml")]
        findings_rules: Option<PathBuf>,
        /// Print the built-in findings rules (a starting point for `--findings-rules`) and exit.
        #[arg(long)]
        print_rules: bool,
        /// The model's shape, for the FLOP-rate finding (as `report --model`).
        #[arg(long, value_name = "KEY=VALUE,…", requires = "tokens", value_parser = parse_model)]
        model: Option<shardscope_analyzer::report::mfu::ModelShape>,
        /// Tokens per phase instance, for the FLOP-rate finding (as `report --tokens`).
        #[arg(long, value_name = "KEY=VALUE,…", requires = "model", value_parser = parse_tokens)]
        tokens: Option<shardscope_analyzer::report::mfu::Tokens>,
    },
    /// Collectives matched across ranks: wait, transfer, bus bandwidth, late ranks, per communicator, type,
    /// message size and phase.
    Collectives {
        #[command(flatten)]
        analysis: AnalysisArgs,
        /// Output format (`json` also lists every matched instance).
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// Compare runs of one workload at different scales (TP=1 vs TP=2, 4 vs 8 GPUs): per phase and op category,
    /// per-rank time, speedup over the first run and scaling efficiency.
    Compare {
        #[command(flatten)]
        args: CompareArgs,
    },
    /// The kernel summary of all GPUs together, with the fields and numbers of `nsys stats --report cuda_gpu_kern_sum`.
    KernSum {
        /// Trace files or folders; without any, the built-in sample.
        traces: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: KernSumFormat,
        /// Only kernels reaching into START_NS:END_NS of the trace clock, clipped to it (as `report` counts them).
        #[arg(long, value_parser = window::parse)]
        window: Option<(i64, i64)>,
    },
    /// GPU time per PyTorch module and layer, per rank and phase, from module ranges (`capture --torch-modules`,
    /// or torch.profiler's `with_modules=True`); kernels replayed from CUDA graphs count for the modules open when
    /// their node was captured. Allocator memory per module where the capture recorded it (`--torch-modules=memory`).
    Modules {
        /// Trace files or folders; several = ranks of one run.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// Fold modules deeper than this many path parts into their ancestor (`model.layers.3` is 3 deep).
        #[arg(long, value_name = "N")]
        module_depth: Option<usize>,
        /// Regex selecting phase ranges (NVTX or annotations); its first group, if any, names the phase.
        #[arg(long, default_value = DEFAULT_PHASE_PATTERN)]
        phase_pattern: String,
        /// Only kernels inside START_NS:END_NS of the trace clock.
        #[arg(long, value_parser = window::parse)]
        window: Option<(i64, i64)>,
        /// Leave each phase's first N instances on every rank out as warm-up; 0: leave nothing out. Without it:
        /// the leading instances longer than 1.5 × the steady median (a compiled program's first decode step holds
        /// its compilation, autotuning and CUDA graph capture), reported as detected.
        #[arg(long, value_name = "N")]
        skip_steps: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
        /// Also write an HTML page with a layer × module heatmap and the module shares per rank and phase.
        #[arg(long, value_name = "OUT.html")]
        html: Option<PathBuf>,
    },
    /// Write the traces (all ranks) as one Perfetto trace, for ui.perfetto.dev or trace_processor (slices in their
    /// report category, matched collectives split into `waiting for rank N` and `transfer`), or with
    /// `--format parquet OUT_DIR TRACE…` as a Parquet dataset partitioned by run and rank, with the report's figures.
    Export {
        /// Trace files or folders; several = ranks of one run. With `--format parquet` and no `-o`, the first is the
        /// dataset folder to write.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// The Perfetto file (`.pftrace`) or the Parquet dataset folder to write.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only events reaching into START_NS:END_NS of the trace clock, clipped to it (as `report` counts them);
        /// Perfetto only.
        #[arg(long, value_parser = window::parse)]
        window: Option<(i64, i64)>,
        /// What to write.
        #[arg(long, value_enum, default_value = "perfetto")]
        format: ExportFormat,
        /// The run's name in the dataset (its `run=` partition); default: the first input's file name.
        #[arg(long)]
        run: Option<String>,
        /// Op-category rules file replacing the built-in rules, for the slices' categories; Perfetto only.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Print the built-in op-category rules (a starting point for `--rules`).
    Rules,
    // --- dependency model: critical path and what-if ---
    /// The longest dependency path through one step or window across all ranks, as segments (rank, stream or
    /// thread, operation, the edge that made it wait), with its time per category and per rank.
    CriticalPath {
        #[command(flatten)]
        model: ModelArgs,
        /// Segments listed in the table: the longest N, in time order (0: all; JSON has all).
        #[arg(long, default_value_t = 40, value_name = "N")]
        limit: usize,
        /// Also write a Perfetto trace: the traces' own tracks, the path as a track of its own with arrows across
        /// ranks, and each rank's no-straggler replay beside its real timeline.
        #[arg(long, value_name = "OUT.pftrace")]
        perfetto: Option<PathBuf>,
    },
    /// Replay the dependency model with changed durations: simulated against measured time, slowdown S and its
    /// attribution to op categories and ranks. Without --step or --window: the steady-state steps (the report's
    /// warm-up, detected or --skip-steps, else step 0, and what precedes it left out, and said so). No speed-up is given when the model replayed unchanged misses the
    /// measured time by more than 1 % or its no-straggler ideal is slower than measured; it says why instead.
    WhatIf {
        #[command(flatten)]
        model: ModelArgs,
        /// Every operation takes the typical (median across ranks) time of its instance; collectives keep their
        /// transfer. The default scenario when no other is given.
        #[arg(long)]
        no_straggler: bool,
        /// Communication costs nothing and nothing waits at collectives.
        #[arg(long)]
        comm_overlapped: bool,
        /// CATEGORY=F scales that category's durations by F (`gemm=0.8`, `comm=0.5`, `host=1.2`); rankN=F makes
        /// rank N take F × its typical times (`rank1=1.0` removes rank 1's straggling). Repeatable.
        #[arg(long = "scale", value_name = "KEY=F")]
        scales: Vec<String>,
        /// Collectives transfer at the bus bandwidth that `bench` measured for their type, rank count and size
        /// (its results JSON).
        #[arg(long, value_name = "BENCH.json")]
        comm_at_peak: Option<PathBuf>,
        /// Model the whole trace, start-up included, instead of the steady-state steps.
        #[arg(long, conflicts_with_all = ["step", "window"])]
        whole_trace: bool,
        /// Instead of GPU traces: a training-operation trace in the format of the OSDI'25 straggler paper's
        /// artifact (Parquet, one row per operation); prints S, S_t, S_w per DP rank and stage, M_W and M_S.
        #[arg(long, value_name = "TRACE.parquet", conflicts_with_all = ["no_straggler", "comm_overlapped", "scales", "comm_at_peak", "whole_trace"])]
        straggler_artifact: Option<PathBuf>,
        /// The job's metadata file beside an artifact trace (`meta-*.yaml`: parallel sizes, the trial's name).
        #[arg(long, value_name = "META.yaml", requires = "straggler_artifact")]
        artifact_meta: Option<PathBuf>,
        /// With --straggler-artifact: draw the slowdown per worker and step as OUT.png and OUT.svg.
        #[arg(long, value_name = "OUT.png", requires = "straggler_artifact")]
        heatmap: Option<PathBuf>,
    },
    /// Run a workload over a grid of configurations (each run under `capture`), then analyse every run into
    /// `study.json`, `study.html` and charts. Finished points are kept when run again.
    Study {
        /// The study file (TOML: command template, grid, repetitions, environment, …).
        study: PathBuf,
        /// The command writes its own trace to `{out}`: run it as is, not under `capture`.
        #[arg(long)]
        no_capture: bool,
        /// The `capture` program (default: the one beside `analyzer`, else `capture` on PATH).
        #[arg(long, value_name = "PATH")]
        capture: Option<PathBuf>,
        /// The study's folder (default: `output` of the study file, else `<name>-study` beside it).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Run nothing: analyse the points already recorded.
        #[arg(long)]
        analyse_only: bool,
        /// Colours of the study's charts and page: light (for slides and print) or dark (the viewer's), as
        /// `report --chart-theme`.
        #[arg(long, value_enum, default_value_t)]
        chart_theme: shardscope_analyzer::output::charts::ChartTheme,
    },
}

/// The runs and options of `compare`.
#[derive(clap::Args)]
struct CompareArgs {
    /// One run: a trace file or folder, or several comma-separated (its ranks). Give it once per run,
    /// baseline first.
    #[arg(long = "run", required = true, value_name = "TRACE[,TRACE...]")]
    runs: Vec<String>,
    /// A name for each run, in order (default: the file names).
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Regex selecting phase ranges.
    #[arg(long, default_value = DEFAULT_PHASE_PATTERN)]
    phase_pattern: String,
    /// Op-category rules file replacing the built-in rules.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Only analyse START_NS:END_NS of each run's trace clock: given once per run, in order (`-` for a whole
    /// run), as each run has its own clock.
    #[arg(long = "window", value_name = "START_NS:END_NS", value_parser = parse_run_window)]
    windows: Vec<Option<(i64, i64)>>,
    /// How many tokens each run processed in the analysed time, once per run in order (`-` where unknown):
    /// adds a tokens/s row (tokens ÷ the run's mean per-rank span). (`report --tokens` is the batch shape.)
    #[arg(long = "token-count", value_name = "N")]
    tokens: Vec<String>,
    /// Leave each rank's first N steps (warm-up) out, in every run; 0: nothing. Without it: the detected warm-up.
    #[arg(long, value_name = "N")]
    skip_steps: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutputFormat,
}

/// What `kern-sum` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum KernSumFormat {
    /// A readable table.
    Table,
    /// The inputs, the window and one object per kernel name with the table's figures.
    Json,
    /// `nsys stats --report cuda_gpu_kern_sum --format csv`: its header and number formatting.
    Csv,
}

/// What `critical-path` and `what-if` write.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModelFormat {
    /// A readable table.
    Table,
    /// Everything the table shows and more (every segment, the model's counts), as JSON.
    Json,
}

/// What `export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    /// One Perfetto trace of all ranks.
    Perfetto,
    /// A Parquet dataset folder, partitioned by run and rank (see docs/parquet-schema.md).
    Parquet,
}

/// Inputs of the dependency-model commands.
#[derive(clap::Args)]
struct ModelArgs {
    #[command(flatten)]
    analysis: AnalysisArgs,
    /// Only step N (counted from 0 on each rank, after --skip-steps): from its earliest start on any rank to its
    /// latest end.
    #[arg(long, value_name = "N", conflicts_with = "window")]
    step: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: ModelFormat,
}

/// A window for one run of `compare`: `START_NS:END_NS`, or `-` for the whole trace.
fn parse_run_window(text: &str) -> Result<Option<(i64, i64)>, String> {
    if text.trim() == "-" { Ok(None) } else { window::parse(text).map(Some).map_err(|e| e.to_string()) }
}

fn main() -> ExitCode {
    main_with_args(std::env::args_os())
}

/// Runs the command line `args` (the program's name first). The Python package compiles this file into its
/// module (`python/src/commands.rs`), so that its `analyzer` command is this one without a second build.
pub fn main_with_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    // An unpacked `.sqlite.gz` is removed on Ctrl-C and `kill` too, not only on a normal end.
    shardscope_io::temp_copies::remove_copies_on_signals();
    let cli = Cli::parse_from(args);
    // With stage times on, the last line gives the command's whole time and its peak memory, errors included.
    match stage("whole command", || run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output has gone (`| head -1`): like any filter, stop quietly.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the chain of causes joined by ': ', with the input's control characters
            // escaped so that a hostile file cannot drive the terminal.
            let _ = writeln!(std::io::stderr(), "analyzer: {}", one_line(&causes(&error)));
            ExitCode::from(2)
        }
    }
}

/// Whether `error` is a write to a pipe whose reader has gone.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The chain of causes on one line (see [`shardscope_io::error_text::causes`]).
fn causes(error: &anyhow::Error) -> String {
    shardscope_io::error_text::causes(error.chain())
}

/// Writes `text` to standard output, reporting a failure (a full disk, a closed pipe) as an
/// error instead of panicking the way `print!` does.
fn emit(text: &str) -> Result<()> {
    // Names in tables come from the inputs: escape sequences in them are shown, not sent to the terminal.
    let text = shardscope_io::error_text::terminal_safe(text);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("standard output")
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Report {
            analysis,
            format,
            top,
            pictures,
            findings_rules,
            no_findings,
            streaming,
            streaming_files,
        } => {
            let streaming = Streamed { mode: streaming, files_at_once: streaming_files.map(|n| n as usize) };
            report_command(analysis, format, top, pictures, (!no_findings).then_some(findings_rules), streaming)
        }
        Command::Findings { print_rules: true, .. } => emit(findings::rules::BUILTIN_FINDINGS_TOML),
        Command::Findings { analysis, format, findings_rules, model, tokens, .. } => {
            findings_command(analysis, format, findings_rules, model.zip(tokens))
        }
        Command::Collectives { analysis, format } => collectives_command(analysis, format),
        Command::Compare { args } => compare_command(args),
        Command::Modules { traces, module_depth, phase_pattern, window, skip_steps, format, html } => {
            modules_command(traces, module_depth, phase_pattern, window, skip_steps, format, html)
        }
        Command::KernSum { traces, format, window } => kern_sum_command(traces, format, window),
        Command::Export { traces, output, window, format: ExportFormat::Perfetto, rules, .. } => {
            export_perfetto_command(traces, output, window, rules)
        }
        Command::Export { traces, output, window, format: ExportFormat::Parquet, run, rules } => {
            if rules.is_some() {
                bail!("--rules: a Parquet dataset keeps the built-in categories (the rules are for the Perfetto file)");
            }
            export_parquet_command(traces, output, window, run)
        }
        Command::Rules => emit(BUILTIN_RULES_TOML),
        Command::CriticalPath { model, limit, perfetto } => critical_path_command(model, limit, perfetto),
        Command::WhatIf { model, straggler_artifact: Some(trace), artifact_meta, heatmap, .. } => {
            straggler_artifact_command(model, trace, artifact_meta, heatmap)
        }
        Command::WhatIf { model, no_straggler, comm_overlapped, scales, comm_at_peak, whole_trace, .. } => {
            what_if_command(model, no_straggler, comm_overlapped, scales, comm_at_peak, whole_trace)
        }
        Command::Study { study, no_capture, capture, out, analyse_only, chart_theme } => {
            shardscope_analyzer::output::charts::set_theme(chart_theme);
            study_command(study, no_capture, capture, out, analyse_only)
        }
    }
}

/// `report`: the report as a table (after the summary), JSON or CSV, and its charts. `findings_rules` is `None`
/// with `--no-findings`.
fn report_command(
    analysis: AnalysisArgs,
    format: OutputFormat,
    top: usize,
    pictures: ChartArgs,
    findings_rules: Option<Option<PathBuf>>,
    streaming: Streamed,
) -> Result<()> {
    let wants_charts = pictures.html.is_some() || pictures.charts.is_some();
    if streaming.mode == StreamingMode::Off && streaming.files_at_once.is_some() {
        bail!("--streaming-files: the report reads every trace at once with --streaming off; leave it at auto or on");
    }
    if streaming.mode == StreamingMode::On && wants_charts {
        bail!("--streaming on: --html and --charts need every trace in memory; leave --streaming at auto or off");
    }
    shardscope_analyzer::output::charts::set_theme(pictures.chart_theme);
    if !wants_charts && findings_rules.is_none() && (pictures.model.is_some() || pictures.tokens.is_some()) {
        bail!("--model and --tokens are figures of the charts and the findings: give --html or --charts, or findings");
    }
    refuse_outputs_over_inputs(&[pictures.html.as_deref(), pictures.charts.as_deref()], &analysis)?;
    let outputs: Vec<&Path> = [pictures.html.as_deref(), pictures.charts.as_deref()].into_iter().flatten().collect();
    let rules_inputs: Vec<&Path> = findings_rules.iter().flatten().map(PathBuf::as_path).collect();
    shardscope_io::output::check_outputs(&outputs, &rules_inputs)?;
    let chart_inputs = wants_charts.then(|| (analysis.rules.clone(), analysis.bench.clone()));
    let stream = match streaming.mode {
        StreamingMode::On => !analysis.traces.is_empty(),
        StreamingMode::Off => false,
        StreamingMode::Auto => {
            !wants_charts
                && report::streaming::should_stream(&analysis.traces, report::streaming::available_memory_bytes())
        }
    };
    let (mut report, traces, options, model) = if stream {
        let (report, traces, options) = analyse_streaming(analysis, streaming.files_at_once)?;
        (report, traces, options, None)
    } else if findings_rules.is_some() {
        let (report, traces, options, model) = analyse_with_model(analysis, wants_charts)?;
        (report, traces, options, Some(model))
    } else {
        let (report, traces, options) = analyse_keeping_traces(analysis, wants_charts)?;
        (report, traces, options, None)
    };
    let flops = pictures.model.as_ref().zip(pictures.tokens.as_ref());
    let found = match &findings_rules {
        None => None,
        Some(rules) if stream => {
            // The findings replay the dependency model of every event of every rank: they need every trace.
            load_findings_rules(rules.as_deref())?;
            let _ = writeln!(
                std::io::stderr(),
                "analyzer: the report went file by file (--streaming): no findings (`analyzer findings` makes them)"
            );
            None
        }
        Some(rules) => findings_of(&traces, &report, &options, rules.as_deref(), flops, model)?,
    };
    if let Some((rules, bench)) = chart_inputs {
        let inputs = ChartInputs { traces: &traces, options: &options };
        let lead_html = found.as_ref().map(findings::html).unwrap_or_default();
        write_report_charts(&report, rules.as_deref(), bench.as_deref(), &pictures, inputs, lead_html)?;
        // The instances were kept for the charts only: the printed report is the same with or without them.
        report.instances.clear();
    }
    let text = match format {
        // The one-screen summary first, the details after it.
        OutputFormat::Table => {
            found.as_ref().map(|f| findings::table(f) + "\n").unwrap_or_default()
                + &shardscope_analyzer::output::summary::summary(&report)
                + "\n"
                + &render::table(&report, if top == 0 { usize::MAX } else { top })
        }
        OutputFormat::Json => stage("json", || findings::report_json(found.as_ref(), &report))? + "\n",
        OutputFormat::Csv => render::csv(&report),
    };
    emit(&text)?;
    // The traces and the report go with the process, not one page mapping at a time before it ends.
    shardscope_analyzer::figures::workers::drop_in_background((traces, report, found));
    Ok(())
}

/// `findings`: what limits the run, ranked by the time removing each cause saves.
fn findings_command(
    analysis: AnalysisArgs,
    format: ModelFormat,
    findings_rules: Option<PathBuf>,
    model: Option<(shardscope_analyzer::report::mfu::ModelShape, shardscope_analyzer::report::mfu::Tokens)>,
) -> Result<()> {
    let rules = load_findings_rules(findings_rules.as_deref())?;
    let inputs = display_list(&analysis.traces);
    let (report, traces, options, dependency_model) = analyse_with_model(analysis, false)?;
    let dependency_model = dependency_model.map_err(|e| anyhow::anyhow!("{inputs}: {e}"))?;
    let flops =
        model.as_ref().map(|(shape, tokens)| findings::FlopInputs::of(shape, tokens, &traces, &report, &options));
    let bench = options.bench_peaks.as_ref();
    let found = findings::findings_on_model(&traces, &report, dependency_model, bench, &rules, flops.as_ref());
    match format {
        ModelFormat::Json => emit(&(serde_json::to_string_pretty(&found)? + "\n")),
        ModelFormat::Table => emit(&findings::table(&found)),
    }
}

/// `collectives`: the matched collectives.
fn collectives_command(analysis: AnalysisArgs, format: OutputFormat) -> Result<()> {
    let report = run_analysis(analysis, format == OutputFormat::Json)?;
    let text = match format {
        OutputFormat::Table => render::collectives_table(&report),
        OutputFormat::Json => render::collectives_json(&report) + "\n",
        OutputFormat::Csv => render::collectives_csv(&report),
    };
    emit(&text)?;
    Ok(())
}

/// `compare`: runs of one workload side by side.
fn compare_command(args: CompareArgs) -> Result<()> {
    let CompareArgs { runs, labels, phase_pattern, rules, windows, tokens, skip_steps, format } = args;
    if !labels.is_empty() && labels.len() != runs.len() {
        bail!("--label: {} labels for {} runs", labels.len(), runs.len());
    }
    // Each run has its own clock: a window is given per run, never one for all.
    if !windows.is_empty() && windows.len() != runs.len() {
        bail!("--window: {} windows for {} runs (one per run, `-` for a whole run)", windows.len(), runs.len());
    }
    if !tokens.is_empty() && tokens.len() != runs.len() {
        bail!("--token-count: {} counts for {} runs (one per run, `-` where unknown)", tokens.len(), runs.len());
    }
    let tokens: Vec<Option<u64>> = tokens
        .iter()
        .map(|text| match text.trim() {
            "-" => Ok(None),
            number => match number.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(anyhow::anyhow!("--token-count: {number:?} is not a positive whole number or `-`")),
            },
        })
        .collect::<Result<_>>()?;
    let mut reports = Vec::new();
    let mut names = Vec::new();
    for (index, run) in runs.iter().enumerate() {
        let paths: Vec<PathBuf> = run.split(',').filter(|p| !p.is_empty()).map(PathBuf::from).collect();
        let analysis = AnalysisArgs {
            traces: paths,
            phase_pattern: phase_pattern.clone(),
            rules: rules.clone(),
            window: windows.get(index).copied().flatten(),
            hta_include_last_step: false,
            bench: None,
            step_pattern: DEFAULT_STEP_PATTERN.to_string(),
            skip_steps,
            allow_mixed: false,
        };
        reports.push(run_analysis(analysis, false)?);
        names.push(labels.get(index).cloned().unwrap_or_else(|| run_label(run)));
    }
    let comparison = compare::compare(&names, &reports, &tokens);
    match format {
        OutputFormat::Table => emit(&render::comparison_table(&comparison))?,
        OutputFormat::Json => emit(&(serde_json::to_string_pretty(&comparison)? + "\n"))?,
        OutputFormat::Csv => emit(&render::comparison_csv(&comparison))?,
    }
    Ok(())
}

/// `modules`: GPU time per module and layer.
fn modules_command(
    paths: Vec<PathBuf>,
    module_depth: Option<usize>,
    phase_pattern: String,
    window: Option<(i64, i64)>,
    skip_steps: Option<usize>,
    format: OutputFormat,
    html: Option<PathBuf>,
) -> Result<()> {
    if let Some(out) = &html
        && let Ok(out_path) = out.canonicalize()
        && paths.iter().any(|input| input.canonicalize().is_ok_and(|i| out_path.starts_with(i)))
    {
        bail!("{}: --html would overwrite an input", out.display());
    }
    let traces = load_all(&paths)?;
    print_load_warnings(&traces);
    let phase_pattern = Regex::new(&phase_pattern).context("--phase-pattern")?;
    let options = modules::ModuleOptions { depth: module_depth, phase_pattern, window_ns: window, skip_steps };
    let report = modules::module_report(&traces, &options);
    let mut rows = report.ranks.iter().flat_map(|r| &r.phases).flat_map(|p| &p.rows);
    if rows.all(|row| row.path == modules::NO_MODULE) {
        let _ = writeln!(
            std::io::stderr(),
            "analyzer: no module ranges in the input (record with `capture --torch-modules`, or torch.profiler \
             with with_modules=True)"
        );
    }
    if let Some(path) = html {
        let page = shardscope_analyzer::output::module_charts::page(&report).map_err(anyhow::Error::msg)?;
        std::fs::write(&path, page).with_context(|| format!("{}", path.display()))?;
    }
    match format {
        OutputFormat::Table => emit(&modules::table(&report))?,
        OutputFormat::Json => emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        OutputFormat::Csv => emit(&modules::csv(&report))?,
    }
    Ok(())
}

/// `kern-sum`: the kernel summary of all GPUs together.
fn kern_sum_command(traces: Vec<PathBuf>, format: KernSumFormat, window: Option<(i64, i64)>) -> Result<()> {
    // Kernels only: an export's host calls and NVTX ranges are as many rows as its kernels, or more.
    let mut traces = stage("read", || load_all_extent(&traces, Extent::GpuWork))?;
    print_load_warnings(&traces);
    if let Some(window_ns) = window {
        for trace in &mut traces {
            window::restrict(trace, window_ns);
        }
        // The CSV keeps nsys' layout to the byte, so the window is said on stderr there.
        if format == KernSumFormat::Csv {
            let _ = writeln!(std::io::stderr(), "analyzer: {}", render::window_note(window_ns));
        }
    }
    let rows = stage("kernel summary", || report::kernel_summary(&traces));
    let saturated = shardscope_analyzer::figures::kernel_summary::saturated_rows(&rows);
    if saturated > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "analyzer: warning: {saturated} × kernel total time beyond 2^63 ns (shown as {}; mean and shares \
             exact)",
            i64::MAX
        );
    }
    match format {
        // nsys ends its CSV with an empty line; so do we, so that outputs compare byte for byte.
        KernSumFormat::Csv => emit(&(render::kernel_summary_csv(&rows) + "\n"))?,
        KernSumFormat::Table => {
            let note = window.map(|w| render::window_note(w) + "\n").unwrap_or_default();
            emit(&(note + &render::kernel_summary_table(&rows)))?
        }
        KernSumFormat::Json => {
            let inputs: Vec<&str> = traces.iter().map(|t| t.source.path.as_str()).collect();
            let value = serde_json::json!({ "inputs": inputs, "window_ns": window, "kernels": rows });
            emit(&(serde_json::to_string_pretty(&value)? + "\n"))?
        }
    }
    Ok(())
}

/// `export`: one Perfetto trace of all ranks.
fn export_perfetto_command(
    traces: Vec<PathBuf>,
    output: Option<PathBuf>,
    window: Option<(i64, i64)>,
    rules: Option<PathBuf>,
) -> Result<()> {
    let output = output.context("--output: name the Perfetto file to write")?;
    let classifier = rules.map_or_else(|| Ok(Classifier::builtin()), |path| Classifier::load(&path))?;
    let mut kept = window::Kept::default();
    let stats = shardscope::perfetto::export_file_with_notes(&traces, &output, |traces| {
        if let Some(window_ns) = window {
            for trace in traces.iter_mut() {
                kept.add(window::restrict(trace, window_ns));
            }
        }
        shardscope_analyzer::output::perfetto_notes::slice_notes(traces, &classifier)
    })
    .map_err(anyhow::Error::msg)?;
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "analyzer: wrote {}: {}", output.display(), perfetto_export_sentence(&stats));
    if let Some(window_ns) = window {
        let _ = writeln!(
            stderr,
            "analyzer: {}: kept {} of {} kernels, {} of {} copies/sets, {} of {} API calls, {} of {} ranges",
            render::window_note(window_ns),
            kept.kernels.0,
            kept.kernels.1,
            kept.memops.0,
            kept.memops.1,
            kept.api_calls.0,
            kept.api_calls.1,
            kept.ranges.0,
            kept.ranges.1
        );
    }
    Ok(())
}

/// `export --format parquet`: a Parquet dataset of one run.
fn export_parquet_command(
    mut traces: Vec<PathBuf>,
    output: Option<PathBuf>,
    window: Option<(i64, i64)>,
    run: Option<String>,
) -> Result<()> {
    if window.is_some() {
        bail!("--window: a Parquet dataset holds whole traces (the window applies to the Perfetto export)");
    }
    let output = match output {
        Some(output) => output,
        None => traces.remove(0),
    };
    if traces.is_empty() {
        bail!("export --format parquet: name the dataset folder and at least one trace (OUT_DIR TRACE…)");
    }
    let inputs: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    shardscope_io::output::check_outputs(&[&output], &inputs)?;
    let run =
        run.unwrap_or_else(|| shardscope_io::parquet::sanitize_run_name(&run_label(&traces[0].display().to_string())));
    let loaded = load_all(&traces)?;
    let identities: Vec<RunIdentity> = loaded.iter().map(RunIdentity::of).collect();
    if let Some(why) = run::mixed_runs(&identities) {
        bail!("inputs are not one run: {why}");
    }
    print_load_warnings(&loaded);
    let stats = shardscope_analyzer::output::parquet_export::export(&output, &run, &loaded, &Options::default())?;
    let rows: Vec<String> = stats.rows.iter().map(|(table, rows)| format!("{table} {rows}")).collect();
    let _ = writeln!(
        std::io::stderr(),
        "analyzer: wrote run {run} to {} ({} files; rows: {})",
        output.display(),
        stats.files,
        rows.join(", ")
    );
    Ok(())
}

/// `critical-path`: the longest dependency path.
fn critical_path_command(model: ModelArgs, limit: usize, perfetto: Option<PathBuf>) -> Result<()> {
    let format = model.format;
    refuse_outputs_over_inputs(&[perfetto.as_deref()], &model.analysis)?;
    let rules = model.analysis.rules.clone();
    let (traces, model) = load_model(model, false)?;
    let path = critical_path::critical_path(&traces, &model);
    if let Some(out) = perfetto {
        let classifier = rules.map_or_else(|| Ok(Classifier::builtin()), |path| Classifier::load(&path))?;
        let notes = shardscope_analyzer::output::perfetto_notes::slice_notes(&traces, &classifier);
        let ideal = whatif::no_straggler_times(&model);
        let extras = critical_path::perfetto_extras(&traces, &model, &path, &ideal, "no-straggler replay");
        let mut file = std::io::BufWriter::new(shardscope_io::output::OutputFile::create(&out)?);
        shardscope::perfetto::write_trace_with_notes(&traces, &notes, &extras, &mut file)
            .and_then(|_| file.flush())
            .with_context(|| out.display().to_string())?;
        file.into_inner().map_err(|e| e.into_error()).with_context(|| out.display().to_string())?.commit()?;
        let _ = writeln!(std::io::stderr(), "analyzer: wrote {}", out.display());
    }
    match format {
        ModelFormat::Json => emit(&(serde_json::to_string_pretty(&path)? + "\n"))?,
        ModelFormat::Table => emit(&critical_path::table(&path, limit))?,
    }
    Ok(())
}

/// `what-if --straggler-artifact`: the straggler analysis of a training-operation trace.
fn straggler_artifact_command(
    model: ModelArgs,
    trace: PathBuf,
    artifact_meta: Option<PathBuf>,
    heatmap: Option<PathBuf>,
) -> Result<()> {
    let format = model.format;
    if !model.analysis.traces.is_empty() {
        bail!("--straggler-artifact analyses its own trace: name no other input");
    }
    if model.step.is_some() || model.analysis.window.is_some() {
        bail!("--straggler-artifact analyses every step of its trace: --step and --window do not apply");
    }
    if let Some(png) = &heatmap {
        let inputs: Vec<&Path> = std::iter::once(trace.as_path()).chain(artifact_meta.as_deref()).collect();
        shardscope_io::output::check_outputs(&[png, &png.with_extension("svg")], &inputs)?;
    }
    let meta = artifact_meta
        .map(|path| straggler_artifact::JobMeta::load(&path))
        .transpose()
        .map_err(anyhow::Error::msg)?
        .unwrap_or_default();
    let report = straggler_artifact::run(&trace, &meta).map_err(anyhow::Error::msg)?;
    if let Some(path) = heatmap {
        let [png, svg] = straggler_artifact::write_heatmap(&report, &path).map_err(anyhow::Error::msg)?;
        let _ = writeln!(std::io::stderr(), "analyzer: wrote {} and {}", png.display(), svg.display());
    }
    match format {
        ModelFormat::Json => emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        ModelFormat::Table => emit(&straggler_artifact::table(&report))?,
    }
    Ok(())
}

/// `what-if`: the dependency model replayed with changed durations.
fn what_if_command(
    model: ModelArgs,
    no_straggler: bool,
    comm_overlapped: bool,
    scales: Vec<String>,
    comm_at_peak: Option<PathBuf>,
    whole_trace: bool,
) -> Result<()> {
    let format = model.format;
    let scales =
        scales.iter().map(|s| whatif::parse_scale(s)).collect::<Result<Vec<_>, _>>().map_err(anyhow::Error::msg)?;
    let no_straggler = no_straggler || (!comm_overlapped && scales.is_empty() && comm_at_peak.is_none());
    let bench = comm_at_peak.map(|path| BenchPeaks::load(&path)).transpose().map_err(anyhow::Error::msg)?;
    let (_, model) = load_model(model, !whole_trace)?;
    whatif::check_scales(&model.graph, &scales).map_err(anyhow::Error::msg)?;
    let comm_at_peak = bench.map(|bench| whatif::peak_transfers(&model, &bench));
    let scenario = whatif::Scenario { no_straggler, comm_overlapped, scales, comm_at_peak };
    let report = whatif::what_if(&model, &scenario);
    match format {
        ModelFormat::Json => emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        ModelFormat::Table => emit(&whatif::table(&report))?,
    }
    Ok(())
}

/// `study`: runs a grid of configurations and analyses every run.
fn study_command(
    study: PathBuf,
    no_capture: bool,
    capture: Option<PathBuf>,
    out: Option<PathBuf>,
    analyse_only: bool,
) -> Result<()> {
    let study = shardscope_analyzer::study::Study::load(&study, out.as_deref()).map_err(anyhow::Error::msg)?;
    let capture = capture.unwrap_or_else(|| {
        let beside = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("capture")));
        beside.filter(|p| p.is_file()).unwrap_or_else(|| PathBuf::from("capture"))
    });
    let options = shardscope_analyzer::study::RunOptions { no_capture, capture };
    let results = shardscope_analyzer::study::run_study(&study, &options, analyse_only, &mut std::io::stderr())
        .map_err(anyhow::Error::msg)?;
    // The tables LLM scaling studies show (also in study.txt).
    emit(&shardscope_analyzer::study::study_text(&results))?;
    Ok(())
}

/// What a Perfetto export wrote, as a reader would say it.
fn perfetto_export_sentence(stats: &shardscope::perfetto::ExportStats) -> String {
    let mut text = format!(
        "{} trace(s), {} kernel, {} copy/set, {} CUDA API and {} range slices, {} kernels linked to their launch, \
         {:.1} MB",
        stats.traces,
        stats.kernel_slices,
        stats.memop_slices,
        stats.api_slices,
        stats.range_slices,
        stats.kernel_flows,
        stats.bytes as f64 / 1e6
    );
    if stats.overlap_rows > 0 {
        text.push_str(&format!("; {} extra row(s) for slices that overlap without nesting", stats.overlap_rows));
    }
    if stats.categorised_slices > 0 {
        text.push_str(&format!(
            "; {} kernel and copy slices in their report category, {} collective kernels split into wait and \
             transfer",
            stats.categorised_slices, stats.split_collectives
        ));
    }
    if stats.clamped_timestamps > 0 {
        text.push_str(&format!("; {} slice(s) before the clock's zero written at 0", stats.clamped_timestamps));
    }
    text
}

/// The traces and options a report was made from, for the charts' per-instance figures.
struct ChartInputs<'a> {
    traces: &'a [Trace],
    options: &'a Options,
}

/// Draws the report's charts into the HTML page and the chart folder asked for.
fn write_report_charts(
    report: &report::Report,
    rules: Option<&Path>,
    bench_path: Option<&Path>,
    pictures: &ChartArgs,
    inputs: ChartInputs,
    lead_html: String,
) -> Result<()> {
    let classifier = match rules {
        Some(path) => Classifier::load(path)?,
        None => Classifier::builtin(),
    };
    let bench = bench_path.map(BenchPeaks::load).transpose().map_err(anyhow::Error::msg)?;
    let mut drawn = html::report_charts(report, &classifier, bench.as_ref());
    drawn.lead_html = lead_html;
    let peak = match &pictures.model {
        Some(model) => shardscope_analyzer::report::mfu::peak(bench_path, model, "--model peak_tflops")
            .map_err(|e| anyhow::anyhow!("--bench: {e}"))?,
        None => None,
    };
    let model = pictures.model.as_ref().zip(pictures.tokens.as_ref()).map(|(m, t)| (m, t, peak.as_ref()));
    let llm = html::LlmFigures::of(
        report,
        inputs.traces,
        &inputs.options.classifier,
        &inputs.options.phase_pattern,
        inputs.options.skip_steps,
        model,
    );
    html::add_llm_charts(&mut drawn, &llm);
    if let Some(dir) = &pictures.charts {
        // The figures the latency, MFU and layer charts draw (the report's JSON has the rest).
        shardscope_io::output::output_dir(dir)?;
        let path = dir.join("llm.json");
        shardscope_io::output::write_output(&path, (serde_json::to_string_pretty(&llm)? + "\n").as_bytes())?;
    }
    if let Some(dir) = &pictures.charts {
        let files = html::write_chart_files(dir, &drawn.sections).map_err(anyhow::Error::msg)?;
        let _ = writeln!(std::io::stderr(), "analyzer: wrote {} chart files into {}", files.len(), dir.display());
    }
    if let Some(path) = &pictures.html {
        let page = html::report_page(report, &drawn).map_err(anyhow::Error::msg)?;
        shardscope_io::output::write_output(path, page.as_bytes())?;
        let _ = writeln!(std::io::stderr(), "analyzer: wrote {}", path.display());
    }
    Ok(())
}

/// The findings rules of `--findings-rules`, or the built-in ones.
fn load_findings_rules(path: Option<&Path>) -> Result<findings::rules::FindingsRules> {
    Ok(path
        .map(findings::rules::FindingsRules::load)
        .transpose()?
        .unwrap_or_else(findings::rules::FindingsRules::builtin))
}

/// The findings section of `report`: `None` when the run has no dependency model (no GPU work to model).
fn findings_of(
    traces: &[Trace],
    report: &report::Report,
    options: &Options,
    rules_path: Option<&Path>,
    model: Option<(&shardscope_analyzer::report::mfu::ModelShape, &shardscope_analyzer::report::mfu::Tokens)>,
    dependency_model: Option<ModelMade>,
) -> Result<Option<findings::Findings>> {
    let rules = load_findings_rules(rules_path)?;
    let flops = model.map(|(shape, tokens)| findings::FlopInputs::of(shape, tokens, traces, report, options));
    let bench = options.bench_peaks.as_ref();
    // No model (the run has no GPU work to model): the report's findings are `null`.
    let Some(Ok(dependency_model)) = dependency_model else { return Ok(None) };
    Ok(Some(findings::findings_on_model(traces, report, dependency_model, bench, &rules, flops.as_ref())))
}

/// Refuses outputs that are (or hold, or lie inside) a trace, rules or bench file the command reads.
fn refuse_outputs_over_inputs(outputs: &[Option<&Path>], analysis: &AnalysisArgs) -> Result<()> {
    let outputs: Vec<&Path> = outputs.iter().flatten().copied().collect();
    let inputs: Vec<&Path> = analysis
        .traces
        .iter()
        .map(PathBuf::as_path)
        .chain(analysis.rules.as_deref())
        .chain(analysis.bench.as_deref())
        .collect();
    Ok(shardscope_io::output::check_outputs(&outputs, &inputs)?)
}

/// Loads the traces of a dependency-model command and builds the model of its step or window; without either,
/// of the whole trace, or with `steady` of the steady-state steps.
fn load_model(args: ModelArgs, steady: bool) -> Result<(Vec<Trace>, critical_path::Model)> {
    let ModelArgs { analysis, step, .. } = args;
    let classifier = match &analysis.rules {
        Some(path) => Classifier::load(path)?,
        None => Classifier::builtin(),
    };
    let pattern = |flag: &str, text: &str| {
        Regex::new(text).map_err(|e| anyhow::anyhow!("{flag}: {}", e.to_string().lines().last().unwrap_or("")))
    };
    let options = Options {
        classifier,
        phase_pattern: pattern("--phase-pattern", &analysis.phase_pattern)?,
        step_pattern: pattern("--step-pattern", &analysis.step_pattern)?,
        skip_steps: analysis.skip_steps.unwrap_or(0),
        detect_warmup: analysis.skip_steps.is_none(),
        allow_mixed: analysis.allow_mixed,
        ..Options::default()
    };
    let traces = load_all(&analysis.traces)?;
    let identities: Vec<RunIdentity> = traces.iter().map(RunIdentity::of).collect();
    if !analysis.allow_mixed
        && let Some(why) = run::mixed_runs(&identities)
    {
        bail!("inputs are not one run: {why} (--allow-mixed analyses them together)");
    }
    print_load_warnings(&traces);
    let model = if steady && step.is_none() && analysis.window.is_none() {
        critical_path::build_steady_model(&traces, &options)
    } else {
        critical_path::build_model(&traces, &options, analysis.window, step)
    }
    .map_err(|e| anyhow::anyhow!("{}: {e}", display_list(&analysis.traces)))?;
    Ok((traces, model))
}

/// How `report` holds the traces (`--streaming`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StreamingMode {
    /// File by file when all files at once would not fit in memory.
    Auto,
    /// File by file.
    On,
    /// All files at once.
    Off,
}

/// `--streaming` and `--streaming-files`.
#[derive(Clone, Copy)]
struct Streamed {
    mode: StreamingMode,
    /// Files read at once, where given.
    files_at_once: Option<usize>,
}

/// The report made file by file (see `report::streaming`), `files_at_once` files at a time where given: no traces
/// are kept.
fn analyse_streaming(
    args: AnalysisArgs,
    files_at_once: Option<usize>,
) -> Result<(report::Report, Vec<Trace>, Options)> {
    let paths = args.traces.clone();
    let options = analysis_options(args, false)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let files = report::streaming::streamed_files(&paths)?;
    let available = report::streaming::available_memory_bytes();
    let jobs = report::streaming::files_at_once(files_at_once, cores, &files, available);
    // Streamed, memory is the point: the blocks of the traces dropped go back to the system at once.
    shardscope_analyzer::huge_pages::return_large_blocks_when_freed();
    let what = format!("{} files, {jobs} at a time", files.len());
    let digests = shardscope_analyzer::output::progress::loading(&what, || {
        report::streaming::digest_files(&files, &options, jobs)
    })?;
    if !digests.digests().iter().any(|d| d.has_gpu_work()) {
        bail!("{}: no GPU kernels or memory operations in the input", display_list(&paths));
    }
    let identities: Vec<RunIdentity> = digests.digests().iter().map(|d| d.identity().clone()).collect();
    if !options.allow_mixed
        && let Some(why) = run::mixed_runs(&identities)
    {
        bail!("inputs are not one run: {why} (--allow-mixed analyses them together)");
    }
    let mut stderr = std::io::stderr().lock();
    for warning in digests.digests().iter().flat_map(|d| d.warnings()) {
        let line = format!("{}: {} × {}", warning.source, warning.count, warning.what);
        let _ = writeln!(stderr, "analyzer: warning: {}", one_line(&line));
    }
    drop(stderr);
    let report = digests.finish(&options);
    if let Some(window_ns) = options.window_ns {
        warn_if_window_is_empty(&report, window_ns);
    }
    Ok((report, Vec::new(), options))
}

fn run_analysis(args: AnalysisArgs, keep_instances: bool) -> Result<report::Report> {
    analyse_keeping_traces(args, keep_instances).map(|(report, _, _)| report)
}

/// The report with the traces and options it was made from.
fn analyse_keeping_traces(args: AnalysisArgs, keep_instances: bool) -> Result<(report::Report, Vec<Trace>, Options)> {
    let report_alone =
        |traces: &[Trace], options: &Options, _| (stage("report figures", || report::analyze(traces, options)), ());
    analyse_with(args, keep_instances, report_alone).map(|(report, traces, options, ())| (report, traces, options))
}

/// The findings' dependency model of a run, or why there is none.
type ModelMade = Result<Model, ModelError>;

/// The report and the findings' dependency model of the traces, the model made beside the report (see
/// `critical_path::report_and_steady_model`).
fn analyse_with_model(
    args: AnalysisArgs,
    keep_instances: bool,
) -> Result<(report::Report, Vec<Trace>, Options, ModelMade)> {
    analyse_with(args, keep_instances, critical_path::report_and_steady_model)
}

/// [`analyse_keeping_traces`] where `analyse` makes the report (and what else it makes of the traces and options)
/// from the traces read, given the number of ranks (the report's widest step analyses them side by side).
fn analyse_with<T>(
    args: AnalysisArgs,
    keep_instances: bool,
    analyse: impl FnOnce(&[Trace], &Options, usize) -> (report::Report, T),
) -> Result<(report::Report, Vec<Trace>, Options, T)> {
    let paths = args.traces.clone();
    let allow_mixed = args.allow_mixed;
    let options = analysis_options(args, keep_instances)?;
    let traces = stage("read", || load_all(&paths))?;
    let identities: Vec<RunIdentity> = traces.iter().map(RunIdentity::of).collect();
    if !allow_mixed && let Some(why) = run::mixed_runs(&identities) {
        bail!("inputs are not one run: {why} (--allow-mixed analyses them together)");
    }
    print_load_warnings(&traces);
    let ranks: usize = traces.iter().map(|trace| trace.devices.len()).sum();
    let (report, made_beside) = analyse(&traces, &options, ranks);
    if let Some(window_ns) = options.window_ns {
        warn_if_window_is_empty(&report, window_ns);
    }
    Ok((report, traces, options, made_beside))
}

/// The analysis options the arguments give (the traces are not read).
fn analysis_options(args: AnalysisArgs, keep_instances: bool) -> Result<Options> {
    let classifier = match args.rules {
        Some(path) => Classifier::load(&path)?,
        None => Classifier::builtin(),
    };
    let phase_pattern = Regex::new(&args.phase_pattern)
        .map_err(|e| anyhow::anyhow!("--phase-pattern: {}", e.to_string().lines().last().unwrap_or("")))?;
    let step_pattern = Regex::new(&args.step_pattern)
        .map_err(|e| anyhow::anyhow!("--step-pattern: {}", e.to_string().lines().last().unwrap_or("")))?;
    let bench_peaks = args.bench.map(|path| BenchPeaks::load(&path)).transpose().map_err(anyhow::Error::msg)?;
    let hta_step_mode =
        if args.hta_include_last_step { hta::StepMode::IncludeLastStep } else { hta::StepMode::DropLastStep };
    let options = Options {
        classifier,
        phase_pattern,
        window_ns: args.window,
        hta_step_mode,
        bench_peaks,
        keep_instances,
        step_pattern,
        skip_steps: args.skip_steps.unwrap_or(0),
        detect_warmup: args.skip_steps.is_none(),
        allow_mixed: args.allow_mixed,
    };
    Ok(options)
}

/// A window that holds no GPU work of any rank gives all-zero figures: say so, with where the traces lie.
fn warn_if_window_is_empty(report: &report::Report, (start_ns, end_ns): (i64, i64)) {
    let work = |f: &report::Figures| f.kernel_count + f.memop_count + f.cuda_graph_count;
    if report.ranks.iter().map(|r| work(&r.figures)).sum::<u64>() > 0 {
        return;
    }
    let ranges: Vec<(i64, i64)> = report.run_identities.iter().filter_map(|r| r.time_range_ns).collect();
    let lies = match (ranges.iter().map(|r| r.0).min(), ranges.iter().map(|r| r.1).max()) {
        (Some(first), Some(last)) => format!(" (the traces run from {first} to {last} ns)"),
        _ => String::new(),
    };
    let _ = writeln!(
        std::io::stderr(),
        "analyzer: warning: --window {start_ns}:{end_ns} holds no GPU work of any rank{lies}: every figure is zero"
    );
}

/// Loads every named trace, or the built-in sample when none is named.
fn load_all(paths: &[PathBuf]) -> Result<Vec<Trace>> {
    load_all_extent(paths, Extent::Whole)
}

/// [`load_all`], reading of each file what `extent` asks for.
fn load_all_extent(paths: &[PathBuf], extent: Extent) -> Result<Vec<Trace>> {
    if paths.is_empty() {
        return load_builtin_sample();
    }
    let mut traces = Vec::new();
    for path in paths {
        let loaded = shardscope_analyzer::output::progress::loading(&path.display().to_string(), || {
            shardscope_io::load_extent(path, extent)
        });
        traces.extend(loaded?);
    }
    if traces.iter().all(|t| t.kernels.is_empty() && t.memops.is_empty() && t.graph_launches.is_empty()) {
        bail!("{}: no GPU kernels or memory operations in the input", display_list(paths));
    }
    Ok(traces)
}

/// Says on stderr what the readers skipped, so that a report redirected to a file or read by a program
/// is not the only place that says so. Called once the inputs are accepted: a refused run gets its one
/// error line and nothing else.
fn print_load_warnings(traces: &[Trace]) {
    let mut stderr = std::io::stderr().lock();
    for trace in traces {
        for warning in &trace.warnings {
            let line = format!("{}: {} × {}", trace.source.path, warning.count, warning.what);
            let _ = writeln!(stderr, "analyzer: warning: {}", one_line(&line));
        }
    }
}

fn load_builtin_sample() -> Result<Vec<Trace>> {
    // A private file with an unpredictable name: nothing planted in the temporary folder is followed.
    let mut file = tempfile::Builder::new()
        .prefix("shardscope-sample-")
        .suffix(".sqlite.gz")
        .tempfile()
        .context("cannot create a temporary file for the built-in sample")?;
    file.write_all(BUILTIN_SAMPLE).context("cannot write the built-in sample to a temporary file")?;
    let mut traces = shardscope_io::load(file.path())?;
    for trace in &mut traces {
        trace.source.path = format!("{BUILTIN_SAMPLE_NAME} (built in)");
    }
    Ok(traces)
}

fn display_list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| Path::display(p).to_string()).collect::<Vec<_>>().join(", ")
}

/// A run's default label: its files' names without folders and trace extensions (`tp2_nsys`), joined by `+`.
fn run_label(run: &str) -> String {
    const EXTENSIONS: [&str; 6] = [".pt.trace.json.gz", ".json.gz", ".sqlite.gz", ".json", ".sqlite", ".gz"];
    let stems: Vec<String> = run
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|path| {
            let name = Path::new(path).file_name().map_or(path.to_string(), |n| n.to_string_lossy().into_owned());
            EXTENSIONS.iter().find_map(|ext| name.strip_suffix(ext)).map_or(name.clone(), str::to_string)
        })
        .collect();
    if stems.is_empty() { run.to_string() } else { stems.join("+") }
}
