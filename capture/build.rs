//! Build script: tells the tests whether util-linux `script` (which gives a run a pseudo-terminal) is on PATH, so
//! that the terminal test is listed by `cargo test` as ignored with its reason where it cannot run, instead of passing
//! unchecked. Nothing in `capture` uses it.
//!
//! Sets `cfg(util_linux_script)`. PATH is looked at when the crate is first built and not watched (a changed PATH
//! would rebuild the crate); after installing util-linux, `cargo clean -p shardscope-capture` has it seen.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(util_linux_script)");
    println!("cargo::rerun-if-changed=build.rs");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir.join("script").is_file()) {
        println!("cargo::rustc-cfg=util_linux_script");
    }
}
