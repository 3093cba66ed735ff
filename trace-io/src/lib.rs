//! Reading traces into the [`shardscope_model::Trace`] model.
//!
//! [`load`] looks at a file's first bytes (never its extension) and hands it to the right
//! reader: SQLite files go to [`nsys`], JSON (plain or gzipped) to [`kineto`]. A folder is
//! read as one trace per file inside it, which is how PyTorch writes one file per rank.
//! [`nsys_writer`] writes the nsys schema; [`nccl`] reads the NCCL profiler plugin's spools into
//! operations, links them to kernels and keeps them in a capture file's `SHARDSCOPE_NCCL_*` tables.
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
pub mod nccl;
pub mod nsys;
pub mod nsys_writer;

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
        Format::GzipSqlite => read_gzipped_sqlite(path),
    }
}

/// SQLite needs a real file: unpack into a private temporary file, read it, delete it.
fn read_gzipped_sqlite(path: &Path) -> Result<Trace, Error> {
    let unpacked = unpack_gzip_to_temp(path)?;
    let result = nsys::read(unpacked.path()).map_err(|e| rename_path(e, unpacked.path(), path));
    let mut trace = result?;
    trace.source.path = path.display().to_string();
    Ok(trace)
}

/// Errors from reading the unpacked copy should name the file the user gave.
fn rename_path(error: Error, from: &Path, to: &Path) -> Error {
    let from = from.display().to_string();
    let to = to.display().to_string();
    match error {
        Error::Io { path, source } if path == from => Error::Io { path: to, source },
        Error::Format { path, cause } if path == from => Error::Format { cause: cause.replace(&from, &to), path: to },
        Error::UnsupportedVersion { path, version, cause } if path == from => {
            Error::UnsupportedVersion { path: to, version, cause }
        }
        other => other,
    }
}

/// A temporary file removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn unpack_gzip_to_temp(path: &Path) -> Result<TempFile, Error> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = TempFile(std::env::temp_dir().join(format!("shardscope-{}-{n}.sqlite", std::process::id())));
    let input = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut decoder = flate2::read::GzDecoder::new(std::io::BufReader::new(input));
    let mut output = std::fs::File::create(temp.path()).map_err(|e| Error::io(temp.path(), e))?;
    std::io::copy(&mut decoder, &mut output).map_err(|e| Error::format(path, format!("cannot unpack gzip: {e}")))?;
    Ok(temp)
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
