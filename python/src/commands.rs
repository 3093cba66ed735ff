//! The `analyzer` command inside the extension module, so that `pip install` puts it on PATH (the package's
//! `analyzer` console script calls [`run_analyzer`]) without building the analyzer a second time: the wheel carries
//! one copy of the Rust code, shared by the library and the command.
//!
//! The command line is the binary's own `analyzer/src/main.rs`, compiled here as a module; its `main` is unused.

use std::ffi::OsString;
use std::process::ExitCode;

use pyo3::prelude::*;

#[allow(dead_code)]
#[path = "../../analyzer/src/main.rs"]
mod analyzer_main;

/// Runs `analyzer` with `argv` (the program's name first, as `sys.argv`) and returns its exit status: 0, or 2 for
/// an input or option it cannot use. Errors and `--help` exit the process from within, as the binary does.
#[pyfunction]
pub fn run_analyzer(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    // The analysis holds no Python objects: let other Python threads run meanwhile.
    let status = py.detach(|| analyzer_main::main_with_args(argv));
    if status == ExitCode::SUCCESS { 0 } else { 2 }
}
