//! Progress on standard error for long loads and for studies, drawn by `indicatif` only when standard error is a
//! terminal: a log file, a pipe or a test sees none of it.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// True when progress is drawn: standard error is a terminal.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// Runs `work` with a spinner that says what is being loaded, cleared when it ends.
pub fn loading<T>(what: &str, work: impl FnOnce() -> T) -> T {
    if !enabled() {
        return work();
    }
    let spinner = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} loading {wide_msg} {elapsed}") {
        spinner.set_style(style);
    }
    spinner.set_message(what.to_string());
    // Ticks from a background thread, so that the spinner moves while the reader works.
    spinner.enable_steady_tick(Duration::from_millis(120));
    let result = work();
    spinner.finish_and_clear();
    result
}

/// A bar over `total` study points (hidden when standard error is not a terminal).
pub fn points(total: u64) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} points  {wide_msg} {elapsed}") {
        bar.set_style(style);
    }
    bar
}
