//! `viewer [TRACE...]`: the shardscope timeline.
//!
//! With `--screenshot out.png` it renders the loaded traces once, headless, and exits (exit code 2 for bad input,
//! any trace that fails to load included, 1 where no renderer can draw headless, each with one line on standard
//! error naming the file). `--window`, `--tab`, `--critical-path` and `--ideal` say what to show, with or without
//! `--screenshot`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use shardscope_analyzer::figures::window;
use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
use shardscope_viewer::analysis::Categories;
use shardscope_viewer::app::{SideTab, StartOptions, ViewerApp};

/// Timeline of every rank, GPU and stream of nsys SQLite and Kineto JSON traces.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Trace files or folders (several files = several ranks).
    traces: Vec<PathBuf>,
    /// Render one frame to this PNG file without opening a window, then exit.
    #[arg(long, value_name = "PNG")]
    screenshot: Option<PathBuf>,
    /// Window or screenshot size in points, `WIDTHxHEIGHT`.
    #[arg(long, default_value = "1600x1000", value_parser = parse_size)]
    size: (f32, f32),
    /// Op-category rules file replacing the built-in rules, as `analyzer report --rules` takes it
    /// (its `[[category]]` tables also give the colours).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// Regex selecting phase ranges, as `analyzer report --phase-pattern` takes it.
    #[arg(long, value_name = "REGEX", default_value = DEFAULT_PHASE_PATTERN)]
    phase_pattern: String,
    /// Show exactly this part of the trace clock, `START_NS:END_NS` as `analyzer report --window` takes it,
    /// instead of the region of interest (the phase and step ranges).
    #[arg(long, value_name = "START:END", value_parser = window::parse)]
    window: Option<(i64, i64)>,
    /// The side-panel page to open: `details`, `range` (the figures of the window shown) or `summary`.
    #[arg(long, value_enum)]
    tab: Option<Tab>,
    /// Outline the critical path across ranks, as `analyzer critical-path` finds it: of step STEP (counted from
    /// 0 on each rank; the view moves to the step unless --window is given), else of --window, else of the whole
    /// trace. A value that is not a number is taken as the first trace.
    #[arg(long, value_name = "STEP", num_args = 0..=1, default_missing_value = "")]
    critical_path: Option<String>,
    /// Draw the no-straggler replay (as `analyzer what-if --no-straggler` computes it) in a row under each stream:
    /// of step STEP (the view moves to the step unless --window or --critical-path is given), else of --window,
    /// else of the whole trace. A value that is not a number is taken as the first trace.
    #[arg(long, value_name = "STEP", num_args = 0..=1, default_missing_value = "")]
    ideal: Option<String>,
}

/// The side-panel pages, as `--tab` names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Tab {
    Details,
    Range,
    Summary,
}

impl Args {
    /// What the app shows first; a `--critical-path` or `--ideal` value that is no step number is moved to the traces.
    fn start_options(&mut self) -> StartOptions {
        let critical_path = self.critical_path.take().map(|value| self.step_or_trace(value));
        let ideal = self.ideal.take().map(|value| self.step_or_trace(value));
        StartOptions {
            window_ns: self.window,
            tab: self.tab.map(|tab| match tab {
                Tab::Details => SideTab::Details,
                Tab::Range => SideTab::Range,
                Tab::Summary => SideTab::Summary,
            }),
            critical_path,
            ideal,
        }
    }

    /// The step an optional `STEP` value names; a value that is no number is a trace, moved to the front.
    fn step_or_trace(&mut self, value: String) -> Option<usize> {
        if value.is_empty() {
            return None;
        }
        value.parse::<usize>().ok().or_else(|| {
            self.traces.insert(0, PathBuf::from(value));
            None
        })
    }
}

fn parse_size(text: &str) -> Result<(f32, f32), String> {
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(|| format!("expected WIDTHxHEIGHT, got {text:?}"))?;
    let parse = |s: &str| s.trim().parse::<f32>().ok().filter(|v| *v >= 100.0 && *v <= 16384.0);
    match (parse(w), parse(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => Err(format!("expected WIDTHxHEIGHT between 100 and 16384, got {text:?}")),
    }
}

fn screenshot(args: &Args, categories: Categories, start: StartOptions, out: &std::path::Path) -> Result<()> {
    if args.traces.is_empty() {
        bail!("--screenshot needs at least one trace");
    }
    let loaded = shardscope_viewer::load::load_paths_with(&args.traces, categories, |_, _| {})
        .map_err(|errors| anyhow::anyhow!(errors.join("; ")))?;
    // A picture that leaves out a trace it was asked for is a failed screenshot, not a smaller one: the window shows
    // such files in a list, a PNG cannot.
    if !loaded.errors.is_empty() {
        bail!("{}", loaded.errors.join("; "));
    }
    let mut app = ViewerApp::with_loaded_and(loaded, start);
    app.compute_now(&egui::Context::default());
    // A path that cannot be found (no such step) is an error here, not a line in a picture nobody reads.
    if let Some(error) = app.critical_path.error() {
        bail!("{}: critical path: {error}", args.traces[0].display());
    }
    if let Some(error) = app.ideal.error() {
        bail!("{}: ideal replay: {error}", args.traces[0].display());
    }
    shardscope_viewer::screenshot::render_png(app, egui::vec2(args.size.0, args.size.1), out)
}

fn run(mut args: Args) -> Result<()> {
    let categories =
        Categories::from_options(args.rules.as_deref(), &args.phase_pattern).map_err(anyhow::Error::msg)?;
    let start = args.start_options();
    if let Some(out) = &args.screenshot {
        return screenshot(&args, categories, start, out);
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_inner_size([args.size.0, args.size.1]).with_drag_and_drop(true),
        ..Default::default()
    };
    let paths = args.traces.clone();
    eframe::run_native(
        "shardscope viewer",
        options,
        Box::new(move |cc| {
            let mut app = ViewerApp::new(paths, categories, &cc.egui_ctx);
            app.set_start(start);
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("cannot open the window")
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("viewer: {e:#}");
            // A machine that cannot draw headless is not bad input.
            let no_renderer = e.downcast_ref::<shardscope_viewer::screenshot::NoRenderer>().is_some();
            ExitCode::from(if no_renderer { 1 } else { 2 })
        }
    }
}
