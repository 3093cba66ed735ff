//! Helpers shared by the nsys test files: finding `../shared/traces` and scratch folders.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The `shared/traces` folder beside the checkout (or beside any parent of this crate), or
/// `None` after printing that the tests needing it are skipped.
pub fn shared_traces() -> Option<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = manifest.ancestors().map(|dir| dir.join("shared/traces")).find(|dir| dir.is_dir());
    if found.is_none() {
        // Not eprintln!: the test harness hides that output when the test passes.
        let _ =
            std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("skipped: ../shared/traces not found\n"));
    }
    found
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
