//! Build script: tells the tests whether the public traces in `../shared/traces` (beside the checkout) are here, so
//! that a test without them is listed by `cargo test` as ignored with its reason instead of passing unchecked.
//! Nothing in the library uses it.
//!
//! Sets `cfg(shared_traces)` and `SHARDSCOPE_SHARED_TRACES` (the folder's path) when `<workspace>/../shared/traces`,
//! or `$SHARDSCOPE_SHARED_DIR/traces` where that variable is set, is a folder. A missing folder is not watched
//! (cargo would rebuild the crate on every run): after adding it, `cargo clean -p shardscope-io` has it seen.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=SHARDSCOPE_SHARED_DIR");
    if let Some(traces) = shared_traces() {
        println!("cargo::rerun-if-changed={}", traces.display());
        println!("cargo::rustc-cfg=shared_traces");
        println!("cargo::rustc-env=SHARDSCOPE_SHARED_TRACES={}", traces.display());
    }
}

/// `traces` in the shared folder, when it is a folder.
fn shared_traces() -> Option<PathBuf> {
    let workspace = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?).join("..");
    let shared =
        std::env::var_os("SHARDSCOPE_SHARED_DIR").map_or(workspace.join("../shared"), |dir| workspace.join(dir));
    let traces = shared.join("traces").canonicalize().ok()?;
    traces.is_dir().then_some(traces)
}
