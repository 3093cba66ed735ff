//! The per-process spool file `nccl-<pid>.bin`: a header, then self-delimiting frames.
//!
//! ```text
//! file    := magic "SSNCCL01" (8 bytes) frame*
//! frame   := payload_len: u32 LE, checksum: u32 LE (32-bit FNV-1a of payload), payload
//! payload := record*            (see `record.rs`)
//! ```
//!
//! The frames are `shardscope_spool_frame`'s, shared with the CUPTI injection library's spool.
//!
//! The plugin appends each frame with one `write` on a file opened for appending and never
//! seeks, so a process killed at any moment (SIGKILL included) leaves every earlier frame
//! intact; at worst the last frame is cut short. [`read_spool`] stops at the first incomplete or
//! corrupt frame and reports how many bytes it left, because a cut tail is what a crash
//! leaves, not a broken file.

use std::io::{self, Read};
use std::path::Path;

use shardscope_spool_frame::Frames;
pub use shardscope_spool_frame::seal_frame;

use crate::record::NcclRecord;

/// First bytes of every spool file; the digits are the format version.
pub const MAGIC: &[u8; 8] = b"SSNCCL01";

/// File name prefix; the full name is `nccl-<pid>.bin`.
pub const FILE_PREFIX: &str = "nccl-";
/// File name suffix.
pub const FILE_SUFFIX: &str = ".bin";

/// Frames larger than this are taken as corrupt (the plugin flushes far smaller batches).
const MAX_FRAME_BYTES: u32 = 64 << 20;

/// What reading a spool file found.
#[derive(Debug, Default, Clone)]
pub struct SpoolContents {
    /// Every record of every complete frame, in file order.
    pub records: Vec<NcclRecord>,
    /// Complete frames read.
    pub frames: u64,
    /// Bytes at the end that did not form a complete, valid frame (a crash's cut tail).
    pub truncated_bytes: u64,
    /// Frames whose checksum held but whose records could not all be delimited.
    pub bad_records: u64,
}

/// Why a spool file could not be read at all.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpoolError {
    /// Opening or reading failed.
    Io(io::Error),
    /// The file does not start with [`MAGIC`].
    NotASpool,
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::Io(e) => write!(f, "{e}"),
            SpoolError::NotASpool => write!(f, "not a shardscope NCCL spool file (bad magic)"),
        }
    }
}

impl std::error::Error for SpoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpoolError::Io(e) => Some(e),
            SpoolError::NotASpool => None,
        }
    }
}

/// Reads a whole spool file, stopping quietly at a cut or corrupt tail.
pub fn read_spool(path: &Path) -> Result<SpoolContents, SpoolError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(SpoolError::Io)?;
    parse_spool(&bytes)
}

/// Parses spool bytes (see [`read_spool`]).
pub fn parse_spool(bytes: &[u8]) -> Result<SpoolContents, SpoolError> {
    let mut frames = Frames::new(bytes, MAGIC, MAX_FRAME_BYTES).ok_or(SpoolError::NotASpool)?;
    let mut contents = SpoolContents::default();
    for mut input in frames.by_ref() {
        while !input.is_empty() {
            match NcclRecord::decode(&mut input) {
                Ok(Some(record)) => contents.records.push(record),
                Ok(None) => {}
                Err(()) => {
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
    Ok(contents)
}

/// The process id in a spool file name `nccl-<pid>.bin`.
pub fn pid_from_file_name(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?.parse().ok()
}
