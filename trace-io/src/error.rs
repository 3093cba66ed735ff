//! The one error type of the readers: always names the file and the cause.

use std::path::Path;

/// Why a trace could not be read. `Display` gives one line: `<file>: <cause>`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The content is not a trace we understand (unknown format, corrupt or truncated data).
    #[error("{path}: {cause}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong with it.
        cause: String,
    },
    /// The file declares a schema version this build does not read.
    #[error("{path}: unsupported schema version {version} ({cause})")]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// The version it declares.
        version: String,
        /// What this build supports.
        cause: String,
    },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io { path: path.display().to_string(), source }
    }

    /// A content error on `path`.
    pub fn format(path: &Path, cause: impl Into<String>) -> Error {
        Error::Format { path: path.display().to_string(), cause: cause.into() }
    }
}
