// The probe for the public traces beside the checkout, shared by the build scripts of the crates whose tests read
// them (analyzer, trace-io, viewer): each does `include!("../build-support/shared_traces.rs")` and calls
// `emit_shared_traces()` after declaring `cfg(shared_traces)` in its `cargo::rustc-check-cfg` line (with its own
// cfgs beside it). Plain `//` comments: an included file cannot open with inner doc comments.
//
// Sets `cfg(shared_traces)` and `SHARDSCOPE_SHARED_TRACES` (the folder's path) when `<workspace>/../shared/traces`,
// or `$SHARDSCOPE_SHARED_DIR/traces` where that variable is set (relative to the workspace), is a folder. A missing
// folder is not watched (cargo would rebuild the crate on every run): after adding it, `cargo clean -p <crate>` has
// it seen.

/// Tells cargo to watch this file and the variable, and sets the cfg and the path when the folder is there.
fn emit_shared_traces() {
    println!("cargo::rerun-if-changed=../build-support/shared_traces.rs");
    println!("cargo::rerun-if-env-changed=SHARDSCOPE_SHARED_DIR");
    if let Some(traces) = shared_traces() {
        println!("cargo::rerun-if-changed={}", traces.display());
        println!("cargo::rustc-cfg=shared_traces");
        println!("cargo::rustc-env=SHARDSCOPE_SHARED_TRACES={}", traces.display());
    }
}

/// `traces` in the shared folder, when it is a folder.
fn shared_traces() -> Option<std::path::PathBuf> {
    let workspace = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?).join("..");
    let shared =
        std::env::var_os("SHARDSCOPE_SHARED_DIR").map_or(workspace.join("../shared"), |dir| workspace.join(dir));
    let traces = shared.join("traces").canonicalize().ok()?;
    traces.is_dir().then_some(traces)
}
