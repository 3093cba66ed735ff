//! `viewer [TRACE...]`: the shardscope timeline.
//!
//! With `--screenshot out.png` it renders the loaded traces once, headless, and exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use shardscope_analyzer::phases::DEFAULT_PHASE_PATTERN;
use shardscope_viewer::analysis::Categories;
use shardscope_viewer::app::ViewerApp;

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
}

fn parse_size(text: &str) -> Result<(f32, f32), String> {
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(|| format!("expected WIDTHxHEIGHT, got {text:?}"))?;
    let parse = |s: &str| s.trim().parse::<f32>().ok().filter(|v| *v >= 100.0 && *v <= 16384.0);
    match (parse(w), parse(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => Err(format!("expected WIDTHxHEIGHT between 100 and 16384, got {text:?}")),
    }
}

fn screenshot(args: &Args, categories: Categories, out: &std::path::Path) -> Result<()> {
    if args.traces.is_empty() {
        bail!("--screenshot needs at least one trace");
    }
    let loaded = shardscope_viewer::load::load_paths_with(&args.traces, categories, |_, _| {})
        .map_err(|errors| anyhow::anyhow!(errors.join("; ")))?;
    let app = ViewerApp::with_loaded(loaded);
    shardscope_viewer::screenshot::render_png(app, egui::vec2(args.size.0, args.size.1), out)
}

fn run(args: Args) -> Result<()> {
    let categories =
        Categories::from_options(args.rules.as_deref(), &args.phase_pattern).map_err(anyhow::Error::msg)?;
    if let Some(out) = &args.screenshot {
        return screenshot(&args, categories, out);
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_inner_size([args.size.0, args.size.1]).with_drag_and_drop(true),
        ..Default::default()
    };
    let paths = args.traces.clone();
    eframe::run_native(
        "shardscope viewer",
        options,
        Box::new(move |cc| Ok(Box::new(ViewerApp::new(paths, categories, &cc.egui_ctx)))),
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
            ExitCode::from(2)
        }
    }
}
