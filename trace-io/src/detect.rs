//! Format detection by content: the first bytes of a file, never its name.

use std::io::Read;
use std::path::Path;

use crate::Error;

/// What a file's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `SQLite format 3\0` header: an nsys export or a capture.
    Sqlite,
    /// Text starting (after whitespace) with `{`: Chrome-trace JSON.
    Json,
    /// gzip magic `1f 8b` around JSON.
    GzipJson,
    /// gzip magic `1f 8b` around an SQLite database (a compressed nsys export or capture).
    GzipSqlite,
}

/// Reads up to 64 bytes of `path` and classifies them.
pub fn sniff(path: &Path) -> Result<Format, Error> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 64];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    let format = classify(&head[..filled]);
    if format == Some(Format::GzipJson) {
        // Look inside: a gzipped SQLite file must be unpacked before SQLite can open it.
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut inner = [0u8; 16];
        let mut decoder = flate2::read::GzDecoder::new(file);
        if decoder.read_exact(&mut inner).is_ok() && classify(&inner) == Some(Format::Sqlite) {
            return Ok(Format::GzipSqlite);
        }
    }
    format.ok_or_else(|| {
        if filled == 0 {
            Error::format(path, "file is empty")
        } else {
            Error::format(path, "not a trace: expected an SQLite database or (gzipped) JSON")
        }
    })
}

/// Classifies a file's first bytes.
pub fn classify(head: &[u8]) -> Option<Format> {
    if head.starts_with(b"SQLite format 3\0") {
        return Some(Format::Sqlite);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        return Some(Format::GzipJson);
    }
    let text = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | Some(b'[') => Some(Format::Json),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_magic_bytes() {
        assert_eq!(classify(b"SQLite format 3\0rest"), Some(Format::Sqlite));
        assert_eq!(classify(&[0x1f, 0x8b, 8, 0]), Some(Format::GzipJson));
        assert_eq!(classify(b"  \n{\"traceEvents\": []}"), Some(Format::Json));
        assert_eq!(classify(b"\xef\xbb\xbf{}"), Some(Format::Json));
        assert_eq!(classify(b"PK\x03\x04"), None);
        assert_eq!(classify(b""), None);
    }
}
