//! `shardscope-spool`: the spool files that `capture`'s two in-workload libraries write and its
//! launcher reads, in one place, so the libraries stay leaves the launcher never links.
//!
//! ```text
//! shardscope-inject (cdylib) ──┐                      ┌── capture (launcher: merge)
//!                              ├── shardscope-spool ──┤
//! shardscope-nccl-profiler ────┘                      └── shardscope-io (NCCL operations)
//! ```
//!
//! - [`frame`]: the crash-safe frame format both files share (length, checksum, payload).
//! - [`codec`]: the one field encoding, and the macros that declare a record once and derive both
//!   its encoder and its decoder from that one field list.
//! - [`cupti`]: the injection library's records (`<host>.<pid>.spool`); [`nccl`]: the NCCL
//!   profiler plugin's (`nccl-<pid>.bin`).
//! - [`read_spool`] / [`parse_spool`]: one reader for both, generic over the [`SpoolFormat`], with
//!   one error type, [`SpoolError`].
//! - [`config`]: the environment variables through which the launcher configures both libraries.
//!
//! Reading a spool back:
//!
//! ```
//! use shardscope_spool::cupti::{SpoolRecord, SpoolWriter};
//! let path = std::env::temp_dir().join(format!("doc-{}.spool", std::process::id()));
//! let mut writer = SpoolWriter::create(&path).unwrap();
//! writer.write_batch(&[SpoolRecord::BuffersRefused { count: 3 }]).unwrap();
//! let contents = shardscope_spool::read_spool::<SpoolRecord>(&path).unwrap();
//! assert_eq!(contents.records, [SpoolRecord::BuffersRefused { count: 3 }]);
//! # std::fs::remove_file(&path).unwrap();
//! ```

pub mod codec;
pub mod config;
pub mod cupti;
pub mod frame;
pub mod nccl;

use std::io::{self, Read};
use std::path::Path;

/// One kind of spool file: its magic, its frame size limit and how one record is cut from a frame.
pub trait SpoolFormat: Sized {
    /// First bytes of every file of this kind; its digits are the format version.
    const MAGIC: &'static [u8; 8];
    /// Frames larger than this are taken as corrupt.
    const MAX_FRAME_BYTES: u32;
    /// What the reader calls this kind of file in errors.
    const DESCRIPTION: &'static str;

    /// Decodes the record at the start of `input` and advances past it.
    fn decode_next(input: &mut &[u8]) -> Decoded<Self>;
}

/// What decoding one record found.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<R> {
    /// A record.
    Record(R),
    /// A well-delimited record of a kind this reader does not know, skipped.
    Skipped,
    /// The input cannot be delimited any more (unknown tag where records carry no length, or a
    /// record shorter than its kind needs).
    Undelimited,
}

/// What reading a spool file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolContents<R> {
    /// Every record of every complete frame, in file order.
    pub records: Vec<R>,
    /// Complete frames read.
    pub frames: u64,
    /// Bytes at the end that did not form a complete, valid frame (a crash's cut tail).
    pub truncated_bytes: u64,
    /// Frames whose checksum held but whose records could not all be delimited (a writer newer
    /// than this reader): each such frame counts once and its rest is skipped.
    pub bad_records: u64,
    /// Bytes skipped between complete frames (damage in the middle of the file); the records in
    /// them are lost, those after them are read.
    pub damaged_bytes: u64,
}

impl<R> Default for SpoolContents<R> {
    fn default() -> Self {
        SpoolContents { records: Vec::new(), frames: 0, truncated_bytes: 0, bad_records: 0, damaged_bytes: 0 }
    }
}

/// Why a spool file could not be read at all.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpoolError {
    /// Opening or reading failed.
    Io(io::Error),
    /// The file does not start with the magic of the kind asked for.
    NotASpool {
        /// [`SpoolFormat::DESCRIPTION`] of the kind asked for.
        expected: &'static str,
    },
    /// The path is not a regular file (a pipe or a device put in its place).
    NotAFile,
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::Io(e) => write!(f, "{e}"),
            SpoolError::NotASpool { expected } => write!(f, "not a {expected} (bad magic)"),
            SpoolError::NotAFile => write!(f, "not a regular file"),
        }
    }
}

impl std::error::Error for SpoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpoolError::Io(e) => Some(e),
            SpoolError::NotASpool { .. } | SpoolError::NotAFile => None,
        }
    }
}

/// Reads a whole spool file, stopping quietly at a cut or corrupt tail: a cut tail is what a
/// crash leaves, not a broken file. Only a regular file is read: it is opened without blocking,
/// so that a pipe put in its place cannot hang the reader.
pub fn read_spool<R: SpoolFormat>(path: &Path) -> Result<SpoolContents<R>, SpoolError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(SpoolError::Io)?;
    if !file.metadata().map_err(SpoolError::Io)?.is_file() {
        return Err(SpoolError::NotAFile);
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(SpoolError::Io)?;
    parse_spool(&bytes)
}

/// Parses spool bytes (see [`read_spool`]).
pub fn parse_spool<R: SpoolFormat>(bytes: &[u8]) -> Result<SpoolContents<R>, SpoolError> {
    let mut frames = frame::Frames::new(bytes, R::MAGIC, R::MAX_FRAME_BYTES)
        .ok_or(SpoolError::NotASpool { expected: R::DESCRIPTION })?;
    let mut contents = SpoolContents::default();
    for mut payload in frames.by_ref() {
        while !payload.is_empty() {
            match R::decode_next(&mut payload) {
                Decoded::Record(record) => contents.records.push(record),
                Decoded::Skipped => {}
                Decoded::Undelimited => {
                    // The checksum held, so the writer wrote this; the rest of the frame can no
                    // longer be delimited.
                    contents.bad_records += 1;
                    break;
                }
            }
        }
        contents.frames += 1;
    }
    contents.truncated_bytes = frames.leftover_bytes();
    contents.damaged_bytes = frames.skipped_bytes();
    Ok(contents)
}

/// This machine's host name (`gethostname`), empty when it cannot be read. Both libraries
/// record it so the launcher can tell the nodes of a multi-node job apart.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf, which lives for the call.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
