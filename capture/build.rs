//! Build script: tells the tests whether util-linux `script` (which gives a run a pseudo-terminal) and `python3` (which
//! runs the module hook's tests) are on PATH, so that a test that needs one is listed by `cargo test` as ignored with
//! its reason where it cannot run, instead of passing unchecked. Nothing in `capture` uses it.
//!
//! Sets `cfg(util_linux_script)` and `cfg(python3_on_path)`. PATH is looked at when the crate is first built and not
//! watched (a changed PATH would rebuild the crate); after installing either, `cargo clean -p shardscope-capture` has
//! it seen.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(util_linux_script)");
    println!("cargo::rustc-check-cfg=cfg(python3_on_path)");
    println!("cargo::rerun-if-changed=build.rs");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = |program: &str| std::env::split_paths(&path).any(|dir| dir.join(program).is_file());
    if on_path("script") {
        println!("cargo::rustc-cfg=util_linux_script");
    }
    if on_path("python3") {
        println!("cargo::rustc-cfg=python3_on_path");
    }
}
