//! Bounds on what reading one input may unpack, and private temporary copies.
//!
//! A gzip member can expand about a thousandfold, so a few megabytes of hostile input could fill
//! the disk (gzipped SQLite is unpacked to a temporary file, because SQLite needs a real file) or
//! keep the JSON scanner busy for hours. Real traces compress 2–20×: the default bound, 32 × the
//! compressed size but at least 128 MiB, leaves them room and stops a bomb early with a clear
//! error. `SHARDSCOPE_MAX_UNPACKED_BYTES` sets the bound in bytes instead.
//!
//! Temporary copies come from the `tempfile` crate: created exclusively (`O_EXCL`) with an
//! unpredictable name and mode 0600, so a file or link planted in the temporary folder can
//! neither be overwritten nor read, and removed when dropped, on a signal, or (after SIGKILL) by
//! the next run ([`crate::temp_copies`]).

use std::io::{Read, Write};
use std::path::Path;

use crate::Error;

/// Environment variable that sets the bound on unpacked bytes (a plain integer).
pub const MAX_UNPACKED_ENV: &str = "SHARDSCOPE_MAX_UNPACKED_BYTES";
/// Unpacked bytes allowed per compressed byte by default.
pub const DEFAULT_EXPANSION_RATIO: u64 = 32;
/// Unpacked bytes always allowed by default, however small the input.
pub const DEFAULT_FLOOR_BYTES: u64 = 128 << 20;
/// The default bound for a pipe, whose size is unknown until it has been read.
pub const DEFAULT_PIPE_BYTES: u64 = 8 << 30;

/// The bound on bytes unpacked from an input of `input_bytes` (`None`: a pipe).
pub fn max_unpacked_bytes(input_bytes: Option<u64>) -> u64 {
    if let Some(bytes) = std::env::var(MAX_UNPACKED_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        return bytes;
    }
    match input_bytes {
        Some(n) => n.saturating_mul(DEFAULT_EXPANSION_RATIO).max(DEFAULT_FLOOR_BYTES),
        None => DEFAULT_PIPE_BYTES,
    }
}

/// The error a [`Capped`] reader returns once its bound is passed.
#[derive(Debug)]
pub(crate) struct TooLarge {
    pub(crate) limit_bytes: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unpacks to more than {} bytes (the bound for this input; set {MAX_UNPACKED_ENV} to allow more)",
            self.limit_bytes
        )
    }
}

impl std::error::Error for TooLarge {}

/// The [`TooLarge`] inside an I/O error, if that is what it is.
pub(crate) fn too_large(error: &std::io::Error) -> Option<&TooLarge> {
    error.get_ref().and_then(|inner| inner.downcast_ref::<TooLarge>())
}

/// A reader that fails with [`TooLarge`] once more than `limit_bytes` have come through.
pub(crate) struct Capped<R> {
    inner: R,
    limit_bytes: u64,
    read_bytes: u64,
}

impl<R: Read> Capped<R> {
    pub(crate) fn new(inner: R, limit_bytes: u64) -> Capped<R> {
        Capped { inner, limit_bytes, read_bytes: 0 }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read_bytes = self.read_bytes.saturating_add(n as u64);
        if self.read_bytes > self.limit_bytes {
            return Err(std::io::Error::other(TooLarge { limit_bytes: self.limit_bytes }));
        }
        Ok(n)
    }
}

/// Copies `source` (at most `limit_bytes` of it) into a new private temporary file.
/// Errors name `path`, the input the bytes come from.
pub(crate) fn copy_to_temp(
    path: &Path,
    source: impl Read,
    limit_bytes: u64,
    what: &str,
) -> Result<crate::temp_copies::TempCopy, Error> {
    let mut temp = crate::temp_copies::TempCopy::create()
        .map_err(|e| Error::format(path, format!("cannot create a temporary file to {what}: {e}")))?;
    let mut source = Capped::new(source, limit_bytes);
    let mut writer = std::io::BufWriter::with_capacity(1 << 20, temp.as_file_mut());
    if let Err(e) = std::io::copy(&mut source, &mut writer) {
        let cause = match too_large(&e) {
            Some(too_large) => too_large.to_string(),
            None => format!("cannot {what}: {e}"),
        };
        return Err(Error::format(path, cause));
    }
    writer.flush().map_err(|e| Error::format(path, format!("cannot {what}: {e}")))?;
    drop(writer);
    Ok(temp)
}
