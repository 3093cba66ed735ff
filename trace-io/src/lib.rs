//! Reading traces into the [`shardscope_model::Trace`] model.
//!
//! [`load`] looks at a file's first bytes (never its extension) and hands it to the right
//! reader: SQLite files go to [`nsys`], JSON (plain or gzipped) to [`kineto`]. A folder is
//! read as one trace per file inside it, which is how PyTorch writes one file per rank, unless it
//! is a Parquet dataset written by `analyzer export --format parquet` ([`parquet`]).
//! [`nsys_writer`] writes the nsys schema; [`nccl`] reads the NCCL operations a capture file keeps in
//! its `SHARDSCOPE_NCCL_*` tables and links them to kernels.
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
pub mod error_text;
pub mod kineto;
pub mod limits;
pub mod nccl;
pub mod nsys;
pub mod nsys_writer;
pub mod output;
pub mod parquet;
pub mod redact;
pub mod temp_copies;

use std::path::{Path, PathBuf};

pub use detect::{Format, sniff};
pub use error::Error;
use shardscope_model::Trace;

/// How much of a trace file to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Extent {
    /// Everything the file holds.
    #[default]
    Whole,
    /// What a summary of GPU work needs (`analyzer kern-sum`): kernels (times, names, device, process), copies and
    /// sets, graph launches, their processes, devices and names, capture windows and warnings. An nsys export's
    /// host calls and NVTX ranges (as many rows as the kernels, or more), memory events, graph nodes and NCCL
    /// operations are not read, nor a kernel's stream, correlation id, grid, block and graph ids (left 0 or
    /// none); processes are numbered among those that ran GPU work. Other formats are read whole.
    GpuWork,
}

/// Reads one file, or every trace file in a folder (sorted by name), into traces. A folder holding a Parquet
/// dataset's marker is read as that dataset instead (see [`parquet`]): one trace per input it was made from.
///
/// A Kineto file or an nsys export each give one [`Trace`]; a folder gives one per file. A pipe
/// (`<(zcat x.json.gz)`, `/dev/stdin`) is copied into a private temporary file first (at most
/// [`limits::max_unpacked_bytes`] of it) and then read like a file.
pub fn load(path: &Path) -> Result<Vec<Trace>, Error> {
    load_extent(path, Extent::Whole)
}

/// [`load`], of what `extent` asks for.
pub fn load_extent(path: &Path, extent: Extent) -> Result<Vec<Trace>, Error> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_dir() {
        if parquet::is_dataset(path) {
            return parquet::read_dataset(path);
        }
        return load_folder(path, extent);
    }
    Ok(vec![load_file_extent(path, extent)?])
}

/// Reads a single file, choosing the reader by content.
pub fn load_file(path: &Path) -> Result<Trace, Error> {
    load_file_extent(path, Extent::Whole)
}

/// [`load_file`], of what `extent` asks for.
pub fn load_file_extent(path: &Path, extent: Extent) -> Result<Trace, Error> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_dir() {
        return Err(Error::format(path, "is a folder, not a trace file"));
    }
    if !metadata.is_file() {
        // A pipe can be read once only, and SQLite needs a file it can seek in. A device is refused, and a named
        // pipe without a writer is given a bounded wait.
        let input = temp_copies::open_special(path, &metadata)?;
        let copy = limits::copy_to_temp(path, input, limits::max_unpacked_bytes(None), "read the pipe")?;
        return read_copy(path, copy.path(), extent);
    }
    match sniff(path)? {
        Format::Sqlite => nsys::read_extent(path, extent),
        Format::Json | Format::GzipJson => kineto::read(path),
        Format::GzipSqlite => read_gzipped_sqlite(path, extent),
    }
}

/// Reads `copy`, a temporary copy of `path`, as if it were `path`.
fn read_copy(path: &Path, copy: &Path, extent: Extent) -> Result<Trace, Error> {
    let mut trace = load_file_extent(copy, extent).map_err(|e| rename_path(e, copy, path))?;
    trace.source.path = path.display().to_string();
    Ok(trace)
}

/// SQLite needs a real file: unpack into a private temporary file, read it, delete it.
fn read_gzipped_sqlite(path: &Path, extent: Extent) -> Result<Trace, Error> {
    let input = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let compressed_bytes = input.metadata().map_err(|e| Error::io(path, e))?.len();
    let decoder = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(input));
    let unpacked =
        limits::copy_to_temp(path, decoder, limits::max_unpacked_bytes(Some(compressed_bytes)), "unpack gzip")?;
    let mut trace = nsys::read_extent(unpacked.path(), extent).map_err(|e| rename_path(e, unpacked.path(), path))?;
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

/// Every trace file in a folder, sorted by name.
///
/// Members that are not regular files (pipes, sockets, devices: opening them could block) and
/// files that are neither SQLite nor JSON are skipped, each counted as a warning of the first
/// trace read, so that a missing rank never goes unnoticed. A member that cannot be opened
/// stops the run: it may well be a rank.
fn load_folder(path: &Path, extent: Extent) -> Result<Vec<Trace>, Error> {
    let members = folder_members(path)?;
    let mut traces =
        members.files.iter().map(|f| load_file_extent(f, extent)).collect::<Result<Vec<Trace>, Error>>()?;
    for (what, count) in &members.skipped {
        traces[0].warn_n(what, *count);
    }
    Ok(traces)
}

/// The trace files of a folder as [`load`] reads them, for a caller that reads them one at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderMembers {
    /// The trace files, sorted by name.
    pub files: Vec<PathBuf>,
    /// (warning, count) per cause of skipping members: [`load`] gives them to the first trace.
    pub skipped: Vec<(String, u64)>,
}

/// The members [`load`] would read from folder `path` (not a Parquet dataset: that is read whole), without reading
/// them. An error where the folder cannot be listed, a member cannot be opened, or no member is a trace.
pub fn folder_members(path: &Path) -> Result<FolderMembers, Error> {
    let mut files = Vec::new();
    // Per cause, the members skipped for it (names sorted and summarised after the scan).
    let mut skipped: std::collections::BTreeMap<&str, Vec<String>> = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        let file = entry.path();
        // Follows links, like reading the file would.
        let metadata = std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?;
        let name = || entry.file_name().to_string_lossy().into_owned();
        if metadata.is_dir() {
            skipped.entry("a folder").or_default().push(name());
        } else if !metadata.is_file() {
            skipped.entry("not a regular file").or_default().push(name());
        } else {
            match sniff(&file) {
                Ok(_) => files.push(file),
                Err(Error::Io { path, source }) => return Err(Error::Io { path, source }),
                Err(_) => skipped.entry("not a trace").or_default().push(name()),
            }
        }
    }
    if files.is_empty() {
        return Err(Error::Format {
            path: path.display().to_string(),
            cause: "folder holds no SQLite or JSON trace".into(),
        });
    }
    files.sort();
    let skipped = (skipped.into_iter())
        .map(|(cause, mut names)| (skipped_members(path, cause, &mut names), names.len() as u64))
        .collect();
    Ok(FolderMembers { files, skipped })
}

/// Members of a folder shown by name in the warning about them; the rest are counted.
const SKIPPED_EXAMPLES: usize = 3;

/// One warning line for every member of `folder` skipped for `cause`: the count is the warning's, a few names
/// are examples, so that a folder of 10⁵ stray files gives one line, not 10⁵.
fn skipped_members(folder: &Path, cause: &str, names: &mut [String]) -> String {
    names.sort();
    let examples = names.iter().take(SKIPPED_EXAMPLES).map(String::as_str).collect::<Vec<_>>().join(", ");
    let more = if names.len() > SKIPPED_EXAMPLES { ", …" } else { "" };
    format!("folder member skipped ({cause}) in {}: {examples}{more}", folder.display())
}
