//! Reading traces into the [`shardscope_model::Trace`] model.
//!
//! [`load`] looks at a file's first bytes (never its extension) and hands it to the right
//! reader: SQLite files go to [`nsys`], JSON (plain or gzipped) to [`kineto`]. A folder is
//! read as one trace per file inside it, which is how PyTorch writes one file per rank.
//!
//! Readers never panic on bad input: they return an [`Error`] that names the file and the
//! cause, and they count (in [`shardscope_model::Trace::warnings`]) individual events they
//! had to skip rather than dropping them silently.
//!
//! ```no_run
//! let traces = shardscope_io::load(std::path::Path::new("sample-traces/tp2.sqlite"))?;
//! println!("{} kernels", traces[0].kernels.len());
//! # Ok::<(), shardscope_io::Error>(())
//! ```

pub mod detect;
mod error;
pub mod kineto;
pub mod nsys;

use std::path::Path;

pub use detect::{Format, sniff};
pub use error::Error;
use shardscope_model::Trace;

/// Reads one file, or every trace file in a folder (sorted by name), into traces.
///
/// A Kineto file or an nsys export each give one [`Trace`]; a folder gives one per file.
pub fn load(path: &Path) -> Result<Vec<Trace>, Error> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_dir() {
        return load_folder(path);
    }
    Ok(vec![load_file(path)?])
}

/// Reads a single file, choosing the reader by content.
pub fn load_file(path: &Path) -> Result<Trace, Error> {
    match sniff(path)? {
        Format::Sqlite => nsys::read(path),
        Format::Json | Format::GzipJson => kineto::read(path),
    }
}

fn load_folder(path: &Path) -> Result<Vec<Trace>, Error> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        let file = entry.path();
        if file.is_file() && sniff(&file).is_ok() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(Error::Format {
            path: path.display().to_string(),
            cause: "folder holds no SQLite or JSON trace".into(),
        });
    }
    files.sort();
    files.iter().map(|f| load_file(f)).collect()
}
