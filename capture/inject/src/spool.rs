//! The per-process spool file: a header, then self-delimiting frames of encoded records.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! file   := magic "SSSPOOL1" (8 bytes) frame*
//! frame  := payload_len: u32, checksum: u32 (FNV-1a of payload), payload
//! payload:= record*              (see `record.rs` for one record's encoding)
//! ```
//!
//! The frames are `shardscope_spool_frame`'s, shared with the NCCL profiler plugin's spool.
//!
//! The writer appends one frame per batch with a single `write` call and never seeks, so a
//! process killed at any point (even SIGKILL) leaves a file whose complete frames are all
//! readable; at worst the last frame is cut short. The reader stops at the first incomplete or
//! corrupt frame and reports it instead of failing, because a cut-off tail is the expected
//! result of a crash, not a broken file.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use shardscope_spool_frame::{Frames, HEADER_BYTES, seal_frame};

use crate::record::SpoolRecord;

/// First bytes of every spool file; the digit is the format version.
pub const MAGIC: &[u8; 8] = b"SSSPOOL1";

/// Frames larger than this are treated as corrupt (a real batch is one CUPTI buffer of
/// at most a few MiB, and records are smaller when encoded than in CUPTI's layout).
const MAX_FRAME_BYTES: u32 = 256 << 20;

/// Appends frames to a spool file.
pub struct SpoolWriter {
    file: File,
    frame: Vec<u8>,
}

impl SpoolWriter {
    /// Creates (or truncates) the spool file and writes the header.
    pub fn create(path: &Path) -> io::Result<SpoolWriter> {
        let mut file = File::create(path)?;
        file.write_all(MAGIC)?;
        Ok(SpoolWriter { file, frame: Vec::with_capacity(1 << 20) })
    }

    /// Writes `records` as one frame; nothing is written for an empty batch.
    pub fn write_batch(&mut self, records: &[SpoolRecord]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.frame.clear();
        self.frame.resize(HEADER_BYTES, 0);
        for record in records {
            record.encode(&mut self.frame);
        }
        seal_frame(&mut self.frame);
        // One write per frame: the kernel keeps it even if the process dies right after.
        self.file.write_all(&self.frame)
    }
}

/// What reading a spool file found.
#[derive(Debug, Default)]
pub struct SpoolContents {
    /// Every record of every complete frame, in file order.
    pub records: Vec<SpoolRecord>,
    /// Complete frames read.
    pub frames: u64,
    /// Bytes at the end that did not form a complete, valid frame (a crash's cut-off tail).
    pub truncated_bytes: u64,
    /// Records inside valid frames that did not decode (unknown tag, short field).
    pub bad_records: u64,
}

/// Why a spool file could not be read at all.
#[derive(Debug)]
pub enum SpoolError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The file does not start with [`MAGIC`].
    NotASpool,
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::Io(e) => write!(f, "{e}"),
            SpoolError::NotASpool => write!(f, "not a shardscope spool file (bad magic)"),
        }
    }
}

impl std::error::Error for SpoolError {}

/// Reads a whole spool file, stopping quietly at a cut-off or corrupt tail.
pub fn read_spool(path: &Path) -> Result<SpoolContents, SpoolError> {
    let mut bytes = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(SpoolError::Io)?;
    parse_spool(&bytes)
}

/// Parses spool bytes (see [`read_spool`]).
pub fn parse_spool(bytes: &[u8]) -> Result<SpoolContents, SpoolError> {
    let mut frames = Frames::new(bytes, MAGIC, MAX_FRAME_BYTES).ok_or(SpoolError::NotASpool)?;
    let mut contents = SpoolContents::default();
    for mut payload in frames.by_ref() {
        while !payload.is_empty() {
            match SpoolRecord::decode(&mut payload) {
                Some(record) => contents.records.push(record),
                None => {
                    // The frame's checksum held, so this is a writer/reader version mismatch:
                    // the rest of the frame cannot be delimited any more.
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
