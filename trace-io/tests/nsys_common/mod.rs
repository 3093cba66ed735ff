//! Helpers shared by the nsys test files: finding `../shared/traces` and scratch folders.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The `shared/traces` folder beside the checkout. Tests that call this carry
/// `#[cfg_attr(not(shared_traces), ignore = …)]`: the build script sets that cfg, and the path, when it finds the
/// folder, so without it `cargo test` lists them as ignored rather than passed.
pub fn shared_traces() -> PathBuf {
    match option_env!("SHARDSCOPE_SHARED_TRACES") {
        Some(dir) => PathBuf::from(dir),
        None => panic!("../shared/traces was not there when this test was built (see trace-io/build.rs)"),
    }
}

/// A scratch folder under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh, empty folder whose name includes `label`.
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("shardscope-nsys-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
