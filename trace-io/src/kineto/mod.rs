//! Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzipped.
//!
//! A background thread decompresses the file a block at a time, and a resumable scanner (module
//! `scan`) reads each block as it arrives, decoding only the keys the model needs: each element
//! of `traceEvents` becomes a small struct of borrowed slices (`raw::RawEvent`) handed at once to
//! the `builder::Builder`, so neither the file's text nor a JSON tree of it is ever held whole.
//! Times are converted from the number's text, exactly (module `time`). What the model keeps:
//!
//! | Kineto | model |
//! | --- | --- |
//! | `kernel` (`Kernel` in old files) | [`Kernel`](shardscope_model::Kernel); NCCL ones get a [`Collective`](shardscope_model::Collective) |
//! | `gpu_memcpy`, `gpu_memset` | [`MemOp`](shardscope_model::MemOp) |
//! | `cuda_runtime`, `cuda_driver` | [`ApiCall`](shardscope_model::ApiCall) |
//! | `user_annotation`, `ProfilerStep#N` ops | CPU-annotation [`Range`](shardscope_model::Range) |
//! | `python_function` module calls (`nn.Module: Linear_0`, `with_modules=True`) | CPU-annotation range |
//! | `gpu_user_annotation` | GPU-annotation range on its device and stream |
//! | `ph: M` `process_name` / `thread_name` | process name / [`ThreadName`](shardscope_model::ThreadName) |
//! | `deviceProperties`, `distributedInfo` | [`Device`](shardscope_model::Device)s, process rank |
//! | `[memory]` instants (`profile_memory=True`) | [`FrameworkMemorySample`](shardscope_model::FrameworkMemorySample) |
//!
//! Other categories (`cpu_op`, other `python_function` events, …) are skipped on purpose.

mod builder;
mod collective;
mod memory;
mod raw;
mod scan;
mod time;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};

use flate2::read::MultiGzDecoder;
use shardscope_model::Trace;

pub use time::micros_text_to_ns;

use crate::{Error, limits};
use builder::Builder;

/// Text is decompressed and scanned this many bytes at a time (the buffer grows only for a
/// single event larger than this): a small buffer stays in cache between the two steps and keeps
/// memory flat however large the file.
const CHUNK_BYTES: usize = 1 << 20;

/// The longest single unit of the document (one event, or one top-level value other than
/// `traceEvents`) the scanner buffers: real events are a few KiB, and the bound keeps one
/// endless string from taking all memory.
const MAX_UNIT_BYTES: usize = 256 << 20;

/// Reads a Kineto JSON file (plain or gzipped, told apart by content) into a trace.
pub fn read(path: &Path) -> Result<Trace, Error> {
    read_in_chunks(path, CHUNK_BYTES)
}

/// [`read`], decompressing and scanning `chunk_bytes` at a time.
fn read_in_chunks(path: &Path, chunk_bytes: usize) -> Result<Trace, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut file = BufReader::with_capacity(64 * 1024, file);
    let head = file.fill_buf().map_err(|e| Error::io(path, e))?;
    if head.is_empty() {
        return Err(Error::format(path, "file is empty"));
    }
    let is_gzip = head.starts_with(&[0x1f, 0x8b]) || head == [0x1f];
    let text: Box<dyn Read + Send> = if is_gzip {
        let compressed_bytes = file.get_ref().metadata().map(|m| m.len()).ok();
        let limit_bytes = limits::max_unpacked_bytes(compressed_bytes);
        Box::new(limits::Capped::new(MultiGzDecoder::new(file), limit_bytes))
    } else {
        Box::new(file)
    };
    let read_error = |e: std::io::Error| {
        if let Some(too_large) = limits::too_large(&e) {
            Error::format(path, too_large.to_string())
        } else if is_gzip {
            Error::format(path, format!("corrupt or truncated gzip data: {e}"))
        } else {
            Error::io(path, e)
        }
    };

    let text_bytes = text_size_hint(path, is_gzip);
    let chunk_bytes = chunk_bytes.min(text_bytes.saturating_add(1)).max(1);
    if text_bytes <= 2 * CHUNK_BYTES {
        // A small file: a second thread would only add hand-over latency.
        let mut blocks = BlockReader::Direct(text);
        return scan_blocks(path, &mut blocks, chunk_bytes, read_error);
    }
    // Decompression runs on its own thread, a block ahead of the scan.
    std::thread::scope(|scope| {
        let mut blocks = BlockReader::spawn(scope, text, CHUNK_BYTES).map_err(|e| Error::io(path, e))?;
        scan_blocks(path, &mut blocks, chunk_bytes, read_error)
    })
}

/// About how many bytes of text the file holds: its size, or for gzip the size its trailer
/// records (modulo 4 GiB; damaged or multi-member files may say less). Only sizes buffers and
/// picks the threading; `usize::MAX` when unknown.
fn text_size_hint(path: &Path, is_gzip: bool) -> usize {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return usize::MAX };
    let Ok(length) = file.metadata().map(|m| m.len()) else { return usize::MAX };
    if !is_gzip {
        return usize::try_from(length).unwrap_or(usize::MAX);
    }
    let mut trailer = [0u8; 4];
    if length < 18 || file.seek(SeekFrom::End(-4)).is_err() || file.read_exact(&mut trailer).is_err() {
        return usize::MAX;
    }
    let recorded = u32::from_le_bytes(trailer) as usize;
    // A 4 GiB wrap or a damaged trailer can understate: never below the compressed size.
    recorded.max(usize::try_from(length).unwrap_or(usize::MAX))
}

/// Scans the text that `blocks` delivers, `chunk_bytes` (or more, for a larger unit) at a time.
fn scan_blocks(
    path: &Path,
    blocks: &mut BlockReader,
    chunk_bytes: usize,
    read_error: impl Fn(std::io::Error) -> Error,
) -> Result<Trace, Error> {
    let mut builder = Builder::new(&path.display().to_string());
    let mut document = scan::Document::new();
    let mut position = TextPosition::default();
    let mut buffer = vec![0u8; chunk_bytes.max(1)];
    let mut filled = 0;
    let mut at_end = false;
    let mut first_chunk = true;
    loop {
        while filled < buffer.len() && !at_end {
            match blocks.read_into(&mut buffer[filled..]) {
                Ok(0) => at_end = true,
                Ok(n) => filled += n,
                Err(e) => return Err(read_error(e)),
            }
        }
        let mut start = 0;
        if first_chunk && buffer[..filled].starts_with(b"\xef\xbb\xbf") {
            start = 3;
        }
        first_chunk = false;
        // A multi-byte character cut by the buffer's end waits for the next block.
        let usable = match std::str::from_utf8(&buffer[start..filled]) {
            Ok(_) => filled,
            Err(e) if e.error_len().is_none() && !at_end => start + e.valid_up_to(),
            Err(e) => {
                let byte = position.consumed + start + e.valid_up_to();
                return Err(Error::format(path, format!("not UTF-8 text (byte {byte})")));
            }
        };
        let chunk = std::str::from_utf8(&buffer[start..usable]).expect("validated above");
        let is_final = at_end && usable == filled;
        match document.scan(chunk, is_final, &mut builder) {
            Ok(scan::Progress::Done) => break,
            Ok(scan::Progress::NeedMore { consumed }) => {
                let consumed = start + consumed;
                position.advance(&buffer[..consumed]);
                buffer.copy_within(consumed..filled, 0);
                filled -= consumed;
                if filled == buffer.len() {
                    // One unit is larger than the buffer.
                    if buffer.len() >= MAX_UNIT_BYTES {
                        let cause = format!(
                            "not valid Kineto JSON: one value (an event, a string) longer than {} MiB at byte {}",
                            MAX_UNIT_BYTES >> 20,
                            position.consumed
                        );
                        return Err(Error::format(path, cause));
                    }
                    buffer.resize((buffer.len() * 2).min(MAX_UNIT_BYTES), 0);
                }
            }
            Err(e) => {
                let (line, column) = position.line_and_column(&buffer[..start + e.offset()]);
                let cause = format!("not valid Kineto JSON: {} at line {line} column {column}", e.what());
                return Err(Error::format(path, cause));
            }
        }
    }
    if !document.saw_events() {
        return Err(Error::format(path, "not a Chrome trace: the JSON object has no 'traceEvents'"));
    }
    Ok(builder.finish())
}

/// Where the scan gets its text: straight from the (decompressing) reader, or from a background
/// thread that reads a block ahead.
enum BlockReader {
    Direct(Box<dyn Read + Send>),
    Threaded {
        full: Receiver<std::io::Result<Vec<u8>>>,
        /// Blocks given back to the thread for reuse, so that memory stays at a few blocks.
        empty: Sender<Vec<u8>>,
        /// The block being copied out, and how much of it is.
        current: Vec<u8>,
        taken: usize,
    },
}

impl BlockReader {
    /// Starts reading `source` in blocks of `block_bytes` on a thread of `scope`.
    fn spawn<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        mut source: Box<dyn Read + Send>,
        block_bytes: usize,
    ) -> std::io::Result<BlockReader> {
        // Two blocks in flight: enough to keep both threads busy.
        let (full_sender, full) = sync_channel::<std::io::Result<Vec<u8>>>(2);
        let (empty, empty_receiver) = channel::<Vec<u8>>();
        std::thread::Builder::new().name("kineto-read".into()).spawn_scoped(scope, move || {
            loop {
                let mut block = empty_receiver.try_recv().unwrap_or_default();
                block.resize(block_bytes, 0);
                let mut filled = 0;
                while filled < block.len() {
                    match source.read(&mut block[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = full_sender.send(Err(e));
                            return;
                        }
                    }
                }
                block.truncate(filled);
                // Stop at the end of the text, or when the scan has stopped listening.
                if filled == 0 || full_sender.send(Ok(block)).is_err() {
                    return;
                }
            }
        })?;
        Ok(BlockReader::Threaded { full, empty, current: Vec::new(), taken: 0 })
    }

    /// Copies the next bytes into `out`; 0 at the end of the text.
    fn read_into(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let (full, empty, current, taken) = match self {
            BlockReader::Direct(source) => loop {
                match source.read(out) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    result => return result,
                }
            },
            BlockReader::Threaded { full, empty, current, taken } => (full, empty, current, taken),
        };
        while *taken == current.len() {
            match full.recv() {
                Ok(block) => {
                    let used = std::mem::replace(current, block?);
                    *taken = 0;
                    let _ = empty.send(used);
                }
                // The thread has ended: every block has been delivered.
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(current.len() - *taken);
        out[..n].copy_from_slice(&current[*taken..*taken + n]);
        *taken += n;
        Ok(n)
    }
}

/// Line bookkeeping for the text already dropped from the buffer, so that errors name the line
/// and column in the whole file.
#[derive(Debug, Default)]
struct TextPosition {
    /// Bytes dropped so far.
    consumed: usize,
    /// Newlines in them.
    lines: usize,
    /// Bytes after the last of those newlines.
    since_newline: usize,
}

impl TextPosition {
    fn advance(&mut self, dropped: &[u8]) {
        self.consumed += dropped.len();
        match dropped.iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                self.lines += count_newlines(dropped);
                self.since_newline = dropped.len() - last - 1;
            }
            None => self.since_newline += dropped.len(),
        }
    }

    /// 1-based line and column of the end of `before`, the buffer's text up to a position.
    fn line_and_column(&self, before: &[u8]) -> (usize, usize) {
        let newlines = count_newlines(before);
        let column = match before.iter().rposition(|&b| b == b'\n') {
            Some(last) => before.len() - last,
            None => self.since_newline + before.len() + 1,
        };
        (self.lines + newlines + 1, column)
    }
}

/// Newlines in `bytes`, eight bytes at a time: it runs over every byte of the file.
fn count_newlines(bytes: &[u8]) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const NEWLINES: u64 = 0x0a0a_0a0a_0a0a_0a0a;
    let mut words = bytes.chunks_exact(8);
    let mut count = 0;
    for word in &mut words {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes")) ^ NEWLINES;
        // High bit set exactly in the bytes of `x` that are zero (no carries between bytes).
        let zero = !(((x & LOW7) + LOW7) | x | LOW7);
        count += zero.count_ones() as usize;
    }
    count + words.remainder().iter().filter(|&&b| b == b'\n').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
    fn small_chunks_read_a_real_trace_the_same() {
        // Built with `cfg(shared_traces)` only where `../shared/traces` is (trace-io/build.rs); ignored elsewhere.
        let Some(traces) = option_env!("SHARDSCOPE_SHARED_TRACES") else { panic!("../shared/traces") };
        let path = Path::new(traces).join("kineto/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
        let whole = read(&path).unwrap();
        // 4093 bytes: a prime, so chunk ends fall everywhere in events, strings and numbers.
        let chunked = read_in_chunks(&path, 4093).unwrap();
        assert_eq!(chunked.kernels, whole.kernels);
        assert_eq!(chunked.memops, whole.memops);
        assert_eq!(chunked.api_calls, whole.api_calls);
        assert_eq!(chunked.ranges, whole.ranges);
        assert_eq!(chunked.collectives, whole.collectives);
        assert_eq!(chunked.names.len(), whole.names.len());
        assert_eq!((chunked.kernels.len(), chunked.api_calls.len()), (4350, 15_329));
        // A single event longer than the chunk makes the buffer grow rather than fail.
        let tiny = read_in_chunks(&path, 7).unwrap();
        assert_eq!(tiny.kernels, whole.kernels);
    }

    #[test]
    fn newline_counts_and_positions_span_dropped_text() {
        let text = b"ab\ncd\n\nefghijklmnop\nq\xc3\xa9\n\n\n\n\n\nrstuvwxyz";
        for cut in 0..text.len() {
            let expected = text[..cut].iter().filter(|&&b| b == b'\n').count();
            assert_eq!(count_newlines(&text[..cut]), expected);
            let mut position = TextPosition::default();
            position.advance(&text[..cut / 2]);
            let whole = {
                let mut p = TextPosition::default();
                p.advance(b"");
                p.line_and_column(&text[..cut])
            };
            assert_eq!(position.line_and_column(&text[cut / 2..cut]), whole, "cut {cut}");
        }
    }
}
