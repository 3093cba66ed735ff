//! Build script of the Python package's extension module. With the `tools` feature, which `pyproject.toml` turns
//! on (so `pip install ./python` and `maturin build` have it; `cargo check` and `cargo clippy --workspace` do not),
//! it also builds the workspace's other commands, `capture` with its injection library and NCCL profiler plugin
//! (which it loads from beside its own binary) and `viewer`, and copies them into `pysrc/shardscope/_bin/`: maturin
//! packs that folder with the Python sources once cargo is done, and `shardscope._commands` runs the binaries
//! from there as the `capture` and `viewer` commands.
//!
//! An extension-module build makes one `cdylib`, so the commands come from a nested `cargo build` with the outer
//! build's cargo, profile and target, `--locked`, in a build folder of its own (`python-tools` beside the outer
//! one's profile folders): the outer cargo holds the lock of its own build folder while this script runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// The packages the nested build makes: the capture binary, its two libraries, the viewer.
const PACKAGES: [&str; 4] =
    ["shardscope-capture", "shardscope-inject", "shardscope-nccl-profiler", "shardscope-viewer"];
/// Whose changes rebuild the commands: their crates, the workspace crates they use, and the lock file.
const SOURCES: [&str; 8] =
    ["capture", "viewer", "analyzer", "trace-io", "trace-model", "spool", "Cargo.toml", "Cargo.lock"];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TOOLS").is_none() {
        return;
    }
    if let Err(error) = build_tools() {
        eprintln!("shardscope-python build script: {error}");
        std::process::exit(1);
    }
}

/// The files the package carries in `_bin/`: the names the nested build gives them (and `shardscope._commands`
/// looks for). The capture and its libraries are Linux-only (LD_PRELOAD, CUDA injection).
fn artifacts() -> Vec<String> {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let exe_suffix = if target_os == "windows" { ".exe" } else { "" };
    let mut names = vec![format!("viewer{exe_suffix}")];
    if target_os == "linux" {
        names.extend(["capture", "libshardscope_inject.so", "libshardscope_nccl_profiler.so"].map(String::from));
    }
    names
}

fn build_tools() -> Result<(), String> {
    // Before anything is written: the copies get a modification time before it, so that watching them (below)
    // reruns this script when one is deleted, not on every build.
    let started = SystemTime::now();
    let env = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set (not run by cargo?)"));
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir.parent().ok_or("the python crate has no parent folder")?;
    let out_dir = PathBuf::from(env("OUT_DIR")?);
    let (target, host) = (env("TARGET")?, env("HOST")?);
    let cross = target != host;
    // OUT_DIR is <build folder>[/<target>]/<profile folder>/build/<package>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).ok_or("unexpected OUT_DIR")?;
    let profile_folder = profile_dir.file_name().and_then(|name| name.to_str()).ok_or("unexpected OUT_DIR")?;
    let build_root = out_dir.ancestors().nth(if cross { 5 } else { 4 }).ok_or("unexpected OUT_DIR")?;
    let tools_target = build_root.join("python-tools");
    // The profile's folder is its name, except for `dev` (`debug`).
    let profile = if profile_folder == "debug" { "dev" } else { profile_folder };

    let mut cargo = Command::new(env("CARGO")?);
    cargo.current_dir(workspace).args(["build", "--locked", "--profile", profile, "--target-dir"]).arg(&tools_target);
    for package in PACKAGES {
        cargo.args(["-p", package]);
    }
    if cross {
        cargo.args(["--target", &target]);
    }
    // The commands a wheel ships carry no debug information, whatever the profile: it would only make the wheel and
    // the nested build folder several times larger (a dev build's line tables of the viewer's graphics stack alone
    // run to hundreds of megabytes).
    let profile_env = profile.to_ascii_uppercase().replace('-', "_");
    cargo.env(format!("CARGO_PROFILE_{profile_env}_DEBUG"), "false");
    cargo.env(format!("CARGO_PROFILE_{profile_env}_STRIP"), "debuginfo");
    // Cargo reads this script's stdout for instructions: the nested build's output goes to stderr, shown on failure.
    let status =
        cargo.stdout(Stdio::from(std::io::stderr())).status().map_err(|error| format!("cannot run cargo: {error}"))?;
    if !status.success() {
        return Err(format!("the nested build of capture and viewer failed ({status}); its output is above"));
    }

    let built = if cross { tools_target.join(&target) } else { tools_target.clone() }.join(profile_folder);
    let bin = manifest_dir.join("pysrc/shardscope/_bin");
    std::fs::create_dir_all(&bin).map_err(|error| format!("{}: {error}", bin.display()))?;
    for name in artifacts() {
        copy(&built.join(&name), &bin.join(&name), started - Duration::from_secs(2))?;
        println!("cargo::rerun-if-changed={}", bin.join(&name).display());
    }
    for source in SOURCES {
        println!("cargo::rerun-if-changed={}", workspace.join(source).display());
    }
    // The nested build's intermediate files (about 1.5 GB, most of it the viewer's graphics stack) are of no use once
    // the commands are in the package: removed, so that an install does not leave them on the disk. A later install
    // that needs the commands again builds them again.
    if let Err(error) = std::fs::remove_dir_all(&tools_target) {
        println!("cargo::warning=could not remove {}: {error}", tools_target.display());
    }
    Ok(())
}

/// Copies `from` to `to` through a temporary file renamed over it (a running copy of the old binary keeps its
/// file), with modification time `modified`.
fn copy(from: &Path, to: &Path, modified: SystemTime) -> Result<(), String> {
    let partial = to.with_extension("partial");
    let fail = |path: &Path, error: std::io::Error| format!("{}: {error}", path.display());
    std::fs::copy(from, &partial).map_err(|error| fail(from, error))?;
    let file = std::fs::File::options().write(true).open(&partial).map_err(|error| fail(&partial, error))?;
    file.set_modified(modified).map_err(|error| fail(&partial, error))?;
    drop(file);
    std::fs::rename(&partial, to).map_err(|error| fail(to, error))
}
