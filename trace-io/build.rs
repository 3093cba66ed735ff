//! Build script: tells the tests whether the public traces in `../shared/traces` (beside the checkout) are here, so
//! that a test without them is listed by `cargo test` as ignored with its reason instead of passing unchecked.
//! Nothing in the library uses it.
//!
//! Sets `cfg(shared_traces)` and `SHARDSCOPE_SHARED_TRACES` (the folder's path) when `<workspace>/../shared/traces`,
//! or `$SHARDSCOPE_SHARED_DIR/traces` where that variable is set, is a folder. A missing folder is not watched
//! (cargo would rebuild the crate on every run): after adding it, `cargo clean -p shardscope-io` has it seen. The
//! probe is `build-support/shared_traces.rs`, the one the analyzer and viewer build scripts include too.

// The shared-traces probe (`emit_shared_traces`), one file for every crate that looks for the traces.
include!("../build-support/shared_traces.rs");

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces)");
    println!("cargo::rerun-if-changed=build.rs");
    emit_shared_traces();
}
