//! Build script: tells the tests whether this machine has an NVIDIA driver, so that the no-driver test is listed by
//! `cargo test` as ignored with its reason where a driver is installed, instead of passing unchecked. Nothing in
//! `bench` uses it.
//!
//! Sets `cfg(nvidia_driver)` when `libcuda.so` is in the dynamic linker's cache (`ldconfig -p`) or in a folder of
//! `LD_LIBRARY_PATH`, the places the test's own `dlopen` looks.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nvidia_driver)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=LD_LIBRARY_PATH");
    if std::env::var_os("CARGO_FEATURE_GPU").is_some() && driver_found() {
        println!("cargo::rustc-cfg=nvidia_driver");
    }
}

fn driver_found() -> bool {
    let names = ["libcuda.so.1", "libcuda.so"];
    let dirs = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    if std::env::split_paths(&dirs).any(|dir| names.iter().any(|name| dir.join(name).is_file())) {
        return true;
    }
    let cache = std::process::Command::new("ldconfig").arg("-p").output();
    cache.is_ok_and(|out| names.iter().any(|name| String::from_utf8_lossy(&out.stdout).contains(&format!("\t{name} "))))
}
