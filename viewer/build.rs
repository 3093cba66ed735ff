//! Build script: tells the tests what this machine has for them, so that a test that cannot run here is listed by
//! `cargo test` as ignored with its reason instead of passing unchecked. Nothing in the library or `viewer` uses it.
//!
//! - `cfg(shared_traces)` and `SHARDSCOPE_SHARED_TRACES` (the folder's path): the public traces in
//!   `<workspace>/../shared/traces`, or `$SHARDSCOPE_SHARED_DIR/traces` where that variable is set.
//! - `cfg(wgpu_renderer)`: a GPU driver that wgpu can render the snapshot tests with: on Linux a Vulkan driver
//!   manifest (`icd.d/*.json`, as Mesa's `mesa-vulkan-drivers` installs for its software renderer), elsewhere the
//!   system's Metal or Direct3D.
//!
//! Both are looked for when the crate is first built; a missing folder is not watched (cargo would rebuild the
//! crate on every run): after installing a driver or adding `../shared`, `cargo clean -p shardscope-viewer`.

use std::path::Path;

// The shared-traces probe (`emit_shared_traces`), one file for every crate that looks for the traces.
include!("../build-support/shared_traces.rs");

/// Where the Vulkan loader looks for driver manifests on Linux.
const VULKAN_MANIFEST_DIRS: [&str; 4] =
    ["/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/etc/xdg/vulkan/icd.d"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces, wgpu_renderer)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=VK_ICD_FILENAMES");
    println!("cargo::rerun-if-env-changed=VK_DRIVER_FILES");
    emit_shared_traces();
    if renderer_likely() {
        println!("cargo::rustc-cfg=wgpu_renderer");
    }
}

/// True where wgpu should find an adapter: the snapshot tests then fail, rather than being ignored, if it does not.
fn renderer_likely() -> bool {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return true;
    }
    if ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"].iter().any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
    {
        return true;
    }
    VULKAN_MANIFEST_DIRS.iter().any(|dir| has_json(Path::new(dir)))
}

fn has_json(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
}
