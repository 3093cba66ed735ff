//! Build script: tells the tests what this machine has for them, so that a test that cannot run here is listed by
//! `cargo test` as ignored with its reason instead of passing unchecked. Nothing in the library or `analyzer` uses it.
//!
//! - `cfg(shared_traces)` and `SHARDSCOPE_SHARED_TRACES` (the folder's path): the public traces in
//!   `<workspace>/../shared/traces`, or `$SHARDSCOPE_SHARED_DIR/traces` where that variable is set.
//! - `cfg(headless_browser)` and `SHARDSCOPE_BROWSER`: a Chromium-family browser on PATH, for `tests/suite/browser.rs`.
//!
//! Both are looked for when the crate is first built: PATH is not watched (a changed PATH, as in pip's build
//! environment, would rebuild the crate), nor a missing folder (cargo would rebuild it on every run). After
//! installing a browser or adding `../shared`, `cargo clean -p shardscope-analyzer` has them seen.

// The shared-traces probe (`emit_shared_traces`), one file for every crate that looks for the traces.
include!("../build-support/shared_traces.rs");

/// The names `tests/suite/browser.rs` runs, in order of preference.
const BROWSERS: [&str; 5] = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces, headless_browser)");
    println!("cargo::rerun-if-changed=build.rs");
    emit_shared_traces();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = BROWSERS.iter().flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)));
    if let Some(browser) = found.into_iter().find(|file| file.is_file()) {
        println!("cargo::rustc-cfg=headless_browser");
        println!("cargo::rustc-env=SHARDSCOPE_BROWSER={}", browser.display());
    }
}
