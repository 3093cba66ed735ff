//! A resumable scanner for the Chrome-trace document, written for speed and small memory.
//!
//! The text arrives in chunks (the reader decompresses a block at a time), and the scanner turns
//! each chunk's complete parts into builder calls: one top-level entry or one trace event at a
//! time. When a chunk ends inside such a unit, [`Document::scan`] reports how far it got; the
//! reader keeps the rest, appends the next block and calls again, and the unit is scanned anew.
//! Nothing is handed to the builder before its unit is complete, so a retry has no side effects.
//!
//! Most of a Kineto file is events the model skips (`cpu_op`, flows, instants) and `args` keys
//! nobody reads. A general JSON deserializer still has to decode all of it; this scanner instead
//! decodes only the keys of each event it needs, and for everything else only finds where the
//! value ends (strings, and nesting of objects and arrays, are tracked exactly; the inside of a
//! skipped value is not otherwise validated). The few small parts that need real decoding
//! (`args` of kept events, `deviceProperties`, `distributedInfo`) go through serde_json on their
//! own slice of the text. Errors carry the line and column where reading stopped.

use std::borrow::Cow;

use super::builder::Builder;
use super::raw::{
    Dim3, LooseInt, LooseStr, RawArgs, RawDeviceProperties, RawDistributedInfo, RawEvent, trailing_integer,
};

/// Where and why the text stopped making sense, or that the chunk ended inside a unit. Boxed:
/// results travel through every scanning call, and the error case is rare.
#[derive(Debug)]
pub struct ScanError(Box<ScanErrorDetail>);

#[derive(Debug)]
struct ScanErrorDetail {
    /// Byte offset in the chunk.
    offset: usize,
    what: String,
    /// The chunk ended before the unit did; more text may complete it.
    need_more: bool,
}

impl ScanError {
    fn new(offset: usize, what: String, need_more: bool) -> ScanError {
        ScanError(Box::new(ScanErrorDetail { offset, what, need_more }))
    }

    /// Byte offset in the chunk where reading stopped.
    pub fn offset(&self) -> usize {
        self.0.offset
    }

    /// What went wrong, without position.
    pub fn what(&self) -> &str {
        &self.0.what
    }

    fn need_more(&self) -> bool {
        self.0.need_more
    }
}

type Scan<T> = Result<T, ScanError>;

/// Message of a `traceEvents` element that is not an object.
pub const NOT_AN_OBJECT: &str = "traceEvents element that is not an object skipped";

/// Reads the keys of an event's `args` the reader uses; `None` when `text` is not an object.
pub fn parse_args(text: &str) -> Option<RawArgs<'_>> {
    let mut scanner = Scanner { text, bytes: text.as_bytes(), pos: 0, nesting: Vec::new(), is_final: true };
    scanner.skip_whitespace();
    if scanner.peek() != Some(b'{') {
        return None;
    }
    let mut args = RawArgs::default();
    scanner
        .object(|s, key| {
            match key.as_ref() {
                "device" => args.device = s.loose_int()?,
                "stream" => args.stream = s.loose_int()?,
                "correlation" => args.correlation = s.loose_int()?,
                "grid" => args.grid = Dim3::parse(s.skip_value()?),
                "block" => args.block = Dim3::parse(s.skip_value()?),
                "bytes" => args.bytes = s.loose_int()?,
                "kind" => args.kind = s.loose_str()?,
                "name" => args.name = s.loose_str()?,
                "Collective name" => args.collective_name = s.loose_str()?,
                "In msg nelems" => args.in_msg_nelems = s.loose_int()?,
                "Out msg nelems" => args.out_msg_nelems = s.loose_int()?,
                "Group size" => args.group_size = s.loose_int()?,
                "dtype" => args.dtype = s.loose_str()?,
                "Process Group Name" => args.process_group_name = s.loose_str()?,
                "Process Group Ranks" => args.process_group_ranks = Some(s.skip_value()?),
                "Input Dims" => args.input_dims = Some(s.skip_value()?),
                "Input type" => args.input_type = Some(s.skip_value()?),
                "Device Type" => args.memory.device_type = s.loose_int()?,
                "Device Id" => args.memory.device_id = s.loose_int()?,
                "Addr" => args.memory.addr = s.loose_int()?,
                "Bytes" => args.memory.bytes = s.loose_int()?,
                "Total Allocated" => args.memory.total_allocated = s.loose_int()?,
                "Total Reserved" => args.memory.total_reserved = s.loose_int()?,
                _ => {
                    s.skip_value()?;
                }
            }
            Ok(())
        })
        .ok()?;
    Some(args)
}

/// Where the scan stands between two units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the top-level `{`.
    Start,
    /// After `{`: a key or `}`.
    FirstEntry,
    /// After `,` in the top-level object: a key.
    NextEntry,
    /// After a top-level value: `,` or `}`.
    AfterEntry,
    /// After `[` of `traceEvents`: an element or `]`.
    FirstEvent,
    /// After `,` in `traceEvents`: an element.
    NextEvent,
    /// After an element: `,` or `]`.
    AfterEvent,
    /// After the closing `}`: only whitespace may follow.
    End,
}

/// How far one call to [`Document::scan`] got.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// The chunk ended inside a unit: keep the text from this offset and call again with more.
    NeedMore { consumed: usize },
    /// The document is complete.
    Done,
}

/// The scan of one document, carried across chunks.
#[derive(Debug)]
pub struct Document {
    state: State,
    saw_events: bool,
    nesting: Vec<u8>,
}

impl Document {
    /// A scan at the start of a document.
    pub fn new() -> Document {
        Document { state: State::Start, saw_events: false, nesting: Vec::new() }
    }

    /// Whether the document had a `traceEvents` array.
    pub fn saw_events(&self) -> bool {
        self.saw_events
    }

    /// Scans the units of `text` that are complete. `is_final` says that no text follows.
    pub fn scan(&mut self, text: &str, is_final: bool, builder: &mut Builder) -> Scan<Progress> {
        let nesting = std::mem::take(&mut self.nesting);
        let mut scanner = Scanner { text, bytes: text.as_bytes(), pos: 0, nesting, is_final };
        let result = loop {
            // Whitespace between units is consumed here, so that a long run of it never has to be
            // kept for the next chunk (the buffer would otherwise grow with it).
            scanner.skip_whitespace();
            let unit_start = scanner.pos;
            match self.step(&mut scanner, builder) {
                Ok(true) => {}
                Ok(false) => break Ok(Progress::Done),
                Err(e) if e.need_more() => break Ok(Progress::NeedMore { consumed: unit_start }),
                Err(e) => break Err(e),
            }
        };
        self.nesting = scanner.nesting;
        result
    }

    /// Scans one unit and moves to the next state; `false` once the document is complete.
    fn step(&mut self, s: &mut Scanner, builder: &mut Builder) -> Scan<bool> {
        s.skip_whitespace();
        self.state = match self.state {
            State::Start => {
                if s.peek() != Some(b'{') {
                    return Err(s.error_here("expected a Chrome trace JSON object"));
                }
                s.pos += 1;
                State::FirstEntry
            }
            State::FirstEntry if s.peek() == Some(b'}') => {
                s.pos += 1;
                State::End
            }
            State::FirstEntry | State::NextEntry => {
                if self.entry(s, builder)? {
                    self.saw_events = true;
                    State::FirstEvent
                } else {
                    State::AfterEntry
                }
            }
            State::AfterEntry => match s.peek() {
                Some(b',') => {
                    s.pos += 1;
                    State::NextEntry
                }
                Some(b'}') => {
                    s.pos += 1;
                    State::End
                }
                _ => return Err(s.error_here("expected ',' or '}' in the trace object")),
            },
            State::FirstEvent if s.peek() == Some(b']') => {
                s.pos += 1;
                State::AfterEntry
            }
            State::FirstEvent | State::NextEvent => {
                if s.peek() == Some(b'{') {
                    let event = s.event()?;
                    builder.add_event(&event);
                } else {
                    s.skip_value()?;
                    builder.warn(NOT_AN_OBJECT);
                }
                State::AfterEvent
            }
            State::AfterEvent => match s.peek() {
                Some(b',') => {
                    s.pos += 1;
                    State::NextEvent
                }
                Some(b']') => {
                    s.pos += 1;
                    State::AfterEntry
                }
                _ => return Err(s.error_here("expected ',' or ']' in traceEvents")),
            },
            State::End => {
                if s.pos < s.bytes.len() {
                    return Err(s.error_here("unexpected text after the trace object"));
                }
                if !s.is_final {
                    return Err(s.need_more());
                }
                return Ok(false);
            }
        };
        Ok(true)
    }

    /// One top-level `"key": value`; for `traceEvents` only up to and including its `[`
    /// (returns `true`), the events being units of their own.
    fn entry(&mut self, s: &mut Scanner, builder: &mut Builder) -> Scan<bool> {
        if s.peek() != Some(b'"') {
            return Err(s.error_here("expected a key string"));
        }
        let key = s.string()?;
        s.skip_whitespace();
        if s.peek() != Some(b':') {
            return Err(s.error_here("expected ':' after a key"));
        }
        s.pos += 1;
        s.skip_whitespace();
        match key.as_ref() {
            "traceEvents" => {
                if s.peek() != Some(b'[') {
                    return Err(s.error_here("'traceEvents' is not an array"));
                }
                s.pos += 1;
                return Ok(true);
            }
            "schemaVersion" => builder.set_schema_version(s.skip_value()?),
            "baseTimeNanoseconds" => {
                let base = s.loose_int()?;
                builder.set_base_time_ns(base.get());
            }
            "host_name" | "hostname" => {
                let host = s.loose_str()?;
                builder.set_host_name(host.as_str().unwrap_or(""));
            }
            "deviceProperties" => match serde_json::from_str::<Vec<RawDeviceProperties>>(s.skip_value()?) {
                Ok(devices) => builder.set_device_properties(devices),
                Err(_) => builder.warn("'deviceProperties' is not a list of objects (ignored)"),
            },
            "distributedInfo" => match serde_json::from_str::<RawDistributedInfo>(s.skip_value()?) {
                Ok(info) => builder.set_distributed_info(info),
                Err(_) => builder.warn("'distributedInfo' has an unexpected shape (ignored)"),
            },
            _ => {
                s.skip_value()?;
            }
        }
        Ok(false)
    }
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// Open brackets while skipping a nested value (reused to avoid allocations).
    nesting: Vec<u8>,
    /// No text follows this chunk: its end is the end of the document.
    is_final: bool,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// An error at the cursor; at the end of a chunk that is not the last, a request for more.
    fn error_here(&self, what: &str) -> ScanError {
        if self.pos >= self.bytes.len() {
            if !self.is_final {
                return self.need_more();
            }
            let what = format!("{what}: unexpected end of the JSON text (truncated file?)");
            return ScanError::new(self.pos, what, false);
        }
        ScanError::new(self.pos, what.to_owned(), false)
    }

    fn need_more(&self) -> ScanError {
        ScanError::new(self.pos, String::new(), true)
    }

    fn skip_whitespace(&mut self) {
        let mut at = self.pos;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(at) {
            at += 1;
        }
        self.pos = at;
    }

    /// Calls `entry` for each key of the object at the cursor, with the cursor on its value;
    /// `entry` must consume exactly that value.
    fn object(&mut self, mut entry: impl FnMut(&mut Self, Cow<'a, str>) -> Scan<()>) -> Scan<()> {
        debug_assert_eq!(self.peek(), Some(b'{'));
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.error_here("expected a key string"));
            }
            let key = self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error_here("expected ':' after a key"));
            }
            self.pos += 1;
            self.skip_whitespace();
            entry(self, key)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.error_here("expected ',' or '}' in an object")),
            }
        }
    }

    /// One event object: the keys the reader uses, raw text for times and `args`.
    fn event(&mut self) -> Scan<RawEvent<'a>> {
        let mut event = RawEvent::default();
        self.object(|s, key| {
            match key.as_ref() {
                "ph" => event.ph = s.loose_str()?,
                "cat" => event.cat = s.loose_str()?,
                "name" => event.name = s.loose_str()?,
                "pid" => event.pid = s.loose_int()?,
                "tid" => event.tid = s.loose_int()?,
                "id" => event.id = s.loose_int()?,
                "ts" => event.ts = Some(s.skip_value()?),
                "dur" => event.dur = Some(s.skip_value()?),
                "args" => event.args = Some(s.skip_value()?),
                _ => {
                    s.skip_value()?;
                }
            }
            Ok(())
        })?;
        Ok(event)
    }

    /// The string at the cursor, borrowed unless it has escapes.
    fn string(&mut self) -> Scan<Cow<'a, str>> {
        let start = self.pos;
        let (end, escaped) = self.string_end()?;
        if !escaped {
            return Ok(Cow::Borrowed(&self.text[start + 1..end - 1]));
        }
        serde_json::from_str::<String>(&self.text[start..end])
            .map(Cow::Owned)
            .map_err(|e| ScanError::new(start, format!("bad string: {e}"), false))
    }

    /// Moves past the string at the cursor; returns its end (after the closing quote) and
    /// whether it has escapes.
    fn string_end(&mut self) -> Scan<(usize, bool)> {
        let bytes = self.bytes;
        let mut at = self.pos + 1;
        let mut escaped = false;
        loop {
            match find_quote_or_backslash(bytes, at).map(|i| (i, bytes[i])) {
                Some((quote, b'"')) => {
                    self.pos = quote + 1;
                    return Ok((self.pos, escaped));
                }
                Some((backslash, _)) => {
                    escaped = true;
                    at = backslash + 2;
                }
                None => {
                    self.pos = bytes.len();
                    return Err(self.error_here("unterminated string"));
                }
            }
        }
    }

    /// Moves past the value at the cursor and returns its text.
    fn skip_value(&mut self) -> Scan<&'a str> {
        let start = self.pos;
        match self.peek() {
            Some(b'"') => {
                self.string_end()?;
            }
            Some(b'{' | b'[') => self.skip_nested()?,
            Some(b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
                let bytes = self.bytes;
                let mut end = start;
                let mut is_number = true;
                while let Some(&b) = bytes.get(end) {
                    match SCALAR_BYTE[usize::from(b)] {
                        ScalarByte::Delimiter => break,
                        ScalarByte::Numeric => {}
                        ScalarByte::Other => is_number = false,
                    }
                    end += 1;
                }
                self.pos = end;
                if end == bytes.len() && !self.is_final {
                    // A number cut by the chunk's end.
                    return Err(self.need_more());
                }
                let scalar = &self.text[start..end];
                if !is_number && !matches!(scalar, "true" | "false" | "null") {
                    let what = format!("invalid value '{scalar}'");
                    return Err(ScanError::new(start, what, false));
                }
            }
            _ => return Err(self.error_here("expected a value")),
        }
        Ok(&self.text[start..self.pos])
    }

    /// Moves past the object or array at the cursor, checking that brackets pair up.
    fn skip_nested(&mut self) -> Scan<()> {
        let bytes = self.bytes;
        let mut nesting = std::mem::take(&mut self.nesting);
        nesting.clear();
        let mut at = self.pos;
        let result = loop {
            let Some(next) = find_structural(bytes, at) else {
                self.pos = bytes.len();
                break Err(self.error_here("unclosed object or array"));
            };
            at = next;
            match bytes[at] {
                b'"' => {
                    self.pos = at;
                    if let Err(e) = self.string_end() {
                        break Err(e);
                    }
                    at = self.pos;
                    continue;
                }
                open @ (b'{' | b'[') => nesting.push(open),
                close => {
                    let expected_open = if close == b'}' { b'{' } else { b'[' };
                    if nesting.pop() != Some(expected_open) {
                        self.pos = at;
                        break Err(self.error_here("mismatched bracket"));
                    }
                    if nesting.is_empty() {
                        self.pos = at + 1;
                        break Ok(());
                    }
                }
            }
            at += 1;
        };
        self.nesting = nesting;
        result
    }

    /// A string value (numbers kept as their text; anything else reads as absent).
    fn loose_str(&mut self) -> Scan<LooseStr<'a>> {
        if self.peek() == Some(b'"') {
            return Ok(LooseStr(Some(self.string()?)));
        }
        let raw = self.skip_value()?;
        let is_number = raw.starts_with(|c: char| c == '-' || c.is_ascii_digit());
        Ok(LooseStr(is_number.then_some(Cow::Borrowed(raw))))
    }

    /// An integer written as a number or inside a string (`"stream 7"`); else absent.
    fn loose_int(&mut self) -> Scan<LooseInt> {
        if self.peek() == Some(b'"') {
            let text = self.string()?;
            return Ok(LooseInt(trailing_integer(&text)));
        }
        let raw = self.skip_value()?;
        if let Ok(value) = raw.parse::<i64>() {
            return Ok(LooseInt(Some(value)));
        }
        let value = raw.parse::<f64>().ok().filter(|v| v.is_finite() && v.abs() < 9.0e18);
        Ok(LooseInt(value.map(|v| v.round() as i64)))
    }
}

/// Index of the first `"` or `\\` at or after `from`. Reads eight bytes at a time: strings
/// (kernel and op names) are most of a trace's text.
fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    // A byte of `x` is zero exactly where the high bit of this is set (lowest such byte exact).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let hits = has_zero(word ^ QUOTES) | has_zero(word ^ BACKSLASHES);
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes.get(at..)?.iter().position(|&b| b == b'"' || b == b'\\').map(|i| at + i)
}

/// How the scalar scan treats a byte.
#[derive(Clone, Copy)]
enum ScalarByte {
    /// Ends a number or literal.
    Delimiter,
    /// May appear in a number.
    Numeric,
    /// Anything else (letters of `true`, `false`, `null`, or garbage).
    Other,
}

/// [`ScalarByte`] of every byte value, looked up once per byte of every number in the file.
static SCALAR_BYTE: [ScalarByte; 256] = {
    let mut table = [ScalarByte::Other; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t' => ScalarByte::Delimiter,
            b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' => ScalarByte::Numeric,
            _ => ScalarByte::Other,
        };
        b += 1;
    }
    table
};

/// Eight copies of a byte.
const fn repeated(byte: u8) -> u64 {
    0x0101_0101_0101_0101 * byte as u64
}

/// High bit of each byte of `x` that is zero; the lowest such bit is exact (higher ones may be
/// false after a zero byte, which no caller looks at).
const fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(repeated(1)) & !x & repeated(0x80)
}

/// Index of the first `"`, `{`, `}`, `[` or `]` at or after `from`, eight bytes at a time:
/// what skipping a nested value has to stop at.
fn find_structural(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        // Setting bit 5 turns `[` into `{` and `]` into `}` and no other byte into either.
        let folded = word | repeated(0x20);
        let hits = zero_bytes(word ^ repeated(b'"'))
            | zero_bytes(folded ^ repeated(b'{'))
            | zero_bytes(folded ^ repeated(b'}'));
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']')).map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_event(text: &str) -> RawEvent<'_> {
        let mut scanner = Scanner { text, bytes: text.as_bytes(), pos: 0, nesting: Vec::new(), is_final: true };
        scanner.event().unwrap()
    }

    /// Scans `text` whole and returns the error message with its offset.
    fn error_of(text: &str) -> (String, usize) {
        let error = Document::new().scan(text, true, &mut Builder::new("x")).unwrap_err();
        (error.what().to_owned(), error.offset())
    }

    #[test]
    fn events_keep_raw_times_and_args() {
        let event = one_event(
            r#"{"ph": "X", "cat": "kernel", "name": "a\"b", "pid": "Spans", "tid": "stream 7", "id": 3.0,
                "ts": 1712195495505582.988, "dur": 4.928, "extra": [{"x": "]}"}, [1, 2]],
                "args": {"grid": [2, 3], "stream": "0x1f"}}"#,
        );
        assert_eq!(event.ph.as_str(), Some("X"));
        assert!(matches!(event.cat.0, Some(Cow::Borrowed("kernel"))));
        assert_eq!(event.name.as_str(), Some("a\"b"));
        assert_eq!((event.pid.get(), event.tid.get(), event.id.get()), (None, Some(7), Some(3)));
        assert_eq!((event.ts, event.dur), (Some("1712195495505582.988"), Some("4.928")));
        assert_eq!(event.args, Some(r#"{"grid": [2, 3], "stream": "0x1f"}"#));
        let args = event.parse_args().unwrap();
        assert_eq!((args.grid.0, args.stream.get()), (Some([2, 3, 1]), Some(31)));
        let args = parse_args(
            r#"{"correlation": {"a": [1]}, "block": "x", "name": 5, "device": 3.0, "bytes": null,
                "Process Group Ranks": "[0, 1]", "Input Dims": [[4], []], "dtype": "BFloat16"}"#,
        )
        .unwrap();
        assert_eq!((args.correlation.get(), args.block.0, args.name.as_str()), (None, None, Some("5")));
        assert_eq!((args.device.get(), args.bytes.get(), args.dtype.as_str()), (Some(3), None, Some("BFloat16")));
        assert_eq!((args.process_group_ranks, args.input_dims), (Some("\"[0, 1]\""), Some("[[4], []]")));
        assert!(parse_args("[1]").is_none() && parse_args("{\"a\": }").is_none());
    }

    #[test]
    fn finds_quotes_and_backslashes_at_every_offset() {
        for length in 0..20 {
            for target in 0..length {
                for special in [b'"', b'\\'] {
                    let mut bytes = vec![b'a'; length];
                    bytes[target] = special;
                    for from in 0..=target {
                        assert_eq!(find_quote_or_backslash(&bytes, from), Some(target));
                    }
                    assert_eq!(find_quote_or_backslash(&bytes, target + 1), None);
                }
            }
        }
        // Bytes above 0x7f next to a quote must not hide it or fake one.
        let text = "é\"ü".as_bytes();
        assert_eq!(find_quote_or_backslash(text, 0), Some(2));
        assert_eq!(find_quote_or_backslash("ééééé\\".as_bytes(), 0), Some(10));
    }

    #[test]
    fn finds_brackets_and_quotes_at_every_offset() {
        for length in 0..20 {
            for target in 0..length {
                for special in [b'"', b'{', b'}', b'[', b']'] {
                    // Fill with bytes one bit away from the targets, and non-ASCII.
                    let mut bytes: Vec<u8> = (0..length).map(|i| [b'a', b';', b'=', 0xfb, 0x7f][i % 5]).collect();
                    bytes[target] = special;
                    for from in 0..=target {
                        assert_eq!(find_structural(&bytes, from), Some(target), "{bytes:?} from {from}");
                    }
                    assert_eq!(find_structural(&bytes, target + 1), None, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn broken_text_reports_where() {
        let text = "{\"traceEvents\": [\n {\"ph\": \"X\", \"ts\": 1";
        assert_eq!(
            error_of(text),
            ("expected ',' or '}' in an object: unexpected end of the JSON text (truncated file?)".into(), text.len())
        );
        let (what, offset) = error_of("{\"traceEvents\": [{\"args\": {\"a\": [1}}]}");
        assert_eq!((what.as_str(), offset), ("mismatched bracket", 34));
        let (what, offset) = error_of("{\"traceEvents\": [{\"ts\": nope}]}");
        assert_eq!((what.as_str(), offset), ("invalid value 'nope'", 24));
        let (what, offset) = error_of("{\"traceEvents\": []} x");
        assert_eq!((what.as_str(), offset), ("unexpected text after the trace object", 20));
        let (what, _) = error_of("[]");
        assert_eq!(what, "expected a Chrome trace JSON object");
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        let text = r#"{"schemaVersion": 1, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k\u00e9", "pid": 0, "tid": 7, "ts": 12.5, "dur": 1,
             "args": {"correlation": 5, "grid": [1, 2, 3]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9,
             "ts": 10.25, "dur": 3, "args": {"correlation": 5}},
            17
        ], "distributedInfo": {"rank": 2}}"#;
        let whole = {
            let mut builder = Builder::new("x");
            assert_eq!(Document::new().scan(text, true, &mut builder).unwrap(), Progress::Done);
            builder.finish()
        };
        assert_eq!(whole.kernels.len(), 1);
        assert_eq!(whole.names.get(whole.kernels[0].name), "ké");
        for chunk in [1, 2, 3, 7, 16, 50] {
            // Feed `chunk` more bytes at a time, keeping what the scanner did not consume.
            let mut builder = Builder::new("x");
            let mut document = Document::new();
            let mut kept = 0;
            let mut end = 0;
            loop {
                end = (end + chunk).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                let is_final = end == text.len();
                match document.scan(&text[kept..end], is_final, &mut builder).unwrap() {
                    Progress::Done => break,
                    Progress::NeedMore { consumed } => kept += consumed,
                }
            }
            let trace = builder.finish();
            assert_eq!(trace.kernels, whole.kernels, "chunk {chunk}");
            assert_eq!(trace.api_calls, whole.api_calls, "chunk {chunk}");
            assert_eq!(trace.processes[0].rank, Some(2));
            assert_eq!(trace.warnings, whole.warnings);
        }
    }
}
