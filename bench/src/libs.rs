//! Makes NCCL and cuBLAS loadable under the file names the CUDA bindings look for.
//!
//! The bindings (cudarc with `dynamic-loading`) `dlopen` a fixed list of names: for NCCL `libnccl.so`,
//! `libnccl.so.13`, `.12`, `.11`, `.10`, `.9`, `.1`, but not `libnccl.so.2`, which is the only name a runtime-only
//! NCCL install (the `libnccl2` package, or a Python wheel) provides. cuBLAS may sit in a CUDA toolkit directory
//! that is not on the loader's path. glibc reads `LD_LIBRARY_PATH` once at process start, so the fix is:
//! find the real library, make a private directory with a `libnccl.so` (or `libcublas.so`) link to it, put that
//! directory (and the real library's own directory, for its dependencies such as `libcublasLt`) in front of
//! `LD_LIBRARY_PATH`, and re-execute this program once. [`REEXEC_MARKER`] stops a second round.

use std::ffi::{CStr, OsString, c_void};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Set in the re-executed process so that it does not try again.
pub const REEXEC_MARKER: &str = "SHARDSCOPE_BENCH_LIBS_PREPARED";

/// A library the bindings could not open by any of their names, and where it really is.
struct Relink {
    /// The name the bindings try first (`libnccl.so`).
    link_name: &'static str,
    /// The library file that exists on this machine.
    target: PathBuf,
}

/// Directories where CUDA toolkits and NCCL usually live, searched when the loader's path lacks a library.
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for variable in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(variable) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("targets/x86_64-linux/lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    // Versioned toolkits, newest name last so that it wins when both hold the library.
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("cuda-")))
            .collect();
        versioned.sort();
        versioned.reverse();
        for root in versioned {
            dirs.push(root.join("targets/x86_64-linux/lib"));
            dirs.push(root.join("lib64"));
        }
    }
    dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    dirs.push(PathBuf::from("/usr/lib64"));
    dirs.push(PathBuf::from("/usr/lib"));
    dirs
}

/// Where the dynamic loader finds `soname` (by its own search rules), found by opening it and asking
/// `dladdr` which file holds `symbol`.
fn loader_path_of(soname: &str, symbol: &CStr) -> Option<PathBuf> {
    // SAFETY: loading NCCL or cuBLAS runs only their initialisers, which have no preconditions.
    let library = unsafe { libloading::Library::new(soname) }.ok()?;
    // SAFETY: the symbol is only used as an address, never called.
    let address: *mut c_void = unsafe { library.get::<*mut c_void>(symbol.to_bytes_with_nul()) }.ok().map(|s| *s)?;
    // SAFETY: `Dl_info` is plain data (pointers and integers); all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `address` lies inside a loaded object; `info` is a valid out-parameter.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
    // The library stays loaded on purpose: unloading NCCL after its initialisers ran is not supported.
    std::mem::forget(library);
    Some(std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path)))
}

/// The first of `file_names` found by the loader or in [`candidate_dirs`].
fn find_library(file_names: &[&str], symbol: &CStr) -> Option<PathBuf> {
    for name in file_names {
        if let Some(path) = loader_path_of(name, symbol) {
            return Some(path);
        }
    }
    for dir in candidate_dirs() {
        for name in file_names {
            let path = dir.join(name);
            if path.is_file() {
                return Some(path);
            }
        }
    }
    None
}

/// Per-user directory that holds the links; reused between runs.
fn link_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("shardscope-bench-libs-{uid}"))
}

/// Points `dir/link_name` at `target`, replacing an older link atomically (another run may be reading it).
fn place_link(dir: &Path, link_name: &str, target: &Path) -> Result<()> {
    let link = dir.join(link_name);
    if std::fs::read_link(&link).is_ok_and(|existing| existing == target) {
        return Ok(());
    }
    let temporary = dir.join(format!(".{link_name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    std::os::unix::fs::symlink(target, &temporary)
        .with_context(|| format!("cannot create link {}", temporary.display()))?;
    std::fs::rename(&temporary, &link).with_context(|| format!("cannot create link {}", link.display()))
}

/// Checks that NCCL and cuBLAS load under the bindings' names; if not, links them and re-executes this
/// program (this call then does not return). Returns normally when nothing needed doing, when the
/// libraries cannot be found at all (the sections that need them then report it), or in the re-executed
/// process. The driver itself is checked by the caller, before this.
pub fn prepare_and_maybe_reexec() -> Result<()> {
    if std::env::var_os(REEXEC_MARKER).is_some() {
        return Ok(());
    }
    let mut relinks = Vec::new();
    // SAFETY: probing only opens and closes the library.
    if !unsafe { cudarc::nccl::sys::is_culib_present() }
        && let Some(target) = find_library(&["libnccl.so.2"], c"ncclGetVersion")
    {
        relinks.push(Relink { link_name: "libnccl.so", target });
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() }
        && let Some(target) = find_library(&["libcublas.so.13", "libcublas.so.12"], c"cublasCreate_v2")
    {
        relinks.push(Relink { link_name: "libcublas.so", target });
    }
    if relinks.is_empty() {
        return Ok(());
    }
    let dir = link_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut search_path: Vec<PathBuf> = vec![dir.clone()];
    for relink in &relinks {
        place_link(&dir, relink.link_name, &relink.target)?;
        if let Some(parent) = relink.target.parent()
            && !search_path.iter().any(|known| known == parent)
        {
            search_path.push(parent.to_path_buf());
        }
    }
    if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH") {
        search_path.extend(std::env::split_paths(&existing));
    }
    let joined: OsString = std::env::join_paths(search_path).context("library path contains ':'")?;
    let executable = std::env::current_exe().context("cannot find this program's own path to re-run it")?;
    let error = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(&executable)
            .args(std::env::args_os().skip(1))
            .env("LD_LIBRARY_PATH", joined)
            .env(REEXEC_MARKER, "1"),
    );
    Err(error).with_context(|| format!("cannot re-run {} with NCCL/cuBLAS on the library path", executable.display()))
}
