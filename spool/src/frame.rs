//! The frame format of every spool file `capture`'s libraries write inside the workload.
//!
//! ```text
//! file  := magic (8 bytes, names the format and its version) frame*
//! frame := payload_len: u32 LE, checksum: u32 LE (32-bit FNV-1a of payload), payload
//! ```
//!
//! Writers append each frame with one `write` and never seek, so a process killed at any moment
//! (SIGKILL included) leaves every earlier frame intact and at worst the last one cut short.
//! [`Frames`] yields the payloads of the complete frames and then says how many bytes were left
//! over, because a cut tail is what a crash leaves, not a broken file.
//!
//! Damage in the middle (a flipped bit, a block of zeros from a filesystem) does not end the
//! file there: the reader looks for the next offset where a frame's length and checksum hold,
//! resumes from it, and counts the bytes it had to skip ([`Frames::skipped_bytes`]). The search
//! is bounded ([`RESYNC_WORK_PER_BYTE`]), so hostile bytes cannot make it quadratic.
//!
//! ```
//! let mut file = b"EXAMPLE1".to_vec();
//! let mut frame = shardscope_spool::frame::begin_frame();
//! frame.extend_from_slice(b"payload");
//! shardscope_spool::frame::seal_frame(&mut frame);
//! file.extend_from_slice(&frame);
//! file.extend_from_slice(&frame[..5]); // a frame cut short by a crash
//! let mut frames = shardscope_spool::frame::Frames::new(&file, b"EXAMPLE1", 1 << 20).unwrap();
//! assert_eq!(frames.next(), Some(&b"payload"[..]));
//! assert_eq!(frames.next(), None);
//! assert_eq!(frames.leftover_bytes(), 5);
//! ```

/// Bytes of a frame header: payload length and checksum.
pub const HEADER_BYTES: usize = 8;

/// 32-bit FNV-1a: cheap, and enough to tell a torn write from a complete frame.
pub fn checksum(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// A frame buffer with its header reserved; append the payload, then [`seal_frame`].
pub fn begin_frame() -> Vec<u8> {
    vec![0; HEADER_BYTES]
}

/// Writes the header of a frame whose payload follows [`HEADER_BYTES`] reserved bytes.
pub fn seal_frame(frame: &mut [u8]) {
    let payload_len = (frame.len() - HEADER_BYTES) as u32;
    let sum = checksum(&frame[HEADER_BYTES..]);
    frame[0..4].copy_from_slice(&payload_len.to_le_bytes());
    frame[4..8].copy_from_slice(&sum.to_le_bytes());
}

/// Payload bytes the resynchronising search may checksum per byte of the file (plus one
/// maximum frame), after which the rest of a damaged file counts as left over.
pub const RESYNC_WORK_PER_BYTE: u64 = 8;

/// The payloads of the complete frames of a spool file, in order.
pub struct Frames<'a> {
    rest: &'a [u8],
    max_frame_bytes: u32,
    leftover_bytes: u64,
    skipped_bytes: u64,
    damaged_regions: u64,
    /// Payload bytes the resynchronising search may still checksum.
    resync_budget: u64,
}

impl<'a> Frames<'a> {
    /// Frames of `bytes`, which must start with `magic` (else `None`). Frames longer than
    /// `max_frame_bytes` count as corrupt.
    pub fn new(bytes: &'a [u8], magic: &[u8; 8], max_frame_bytes: u32) -> Option<Frames<'a>> {
        let rest = bytes.strip_prefix(magic.as_slice())?;
        let resync_budget =
            (rest.len() as u64).saturating_mul(RESYNC_WORK_PER_BYTE).saturating_add(u64::from(max_frame_bytes));
        Some(Frames { rest, max_frame_bytes, leftover_bytes: 0, skipped_bytes: 0, damaged_regions: 0, resync_budget })
    }

    /// Bytes after the last complete frame (0 until iteration has ended).
    pub fn leftover_bytes(&self) -> u64 {
        self.leftover_bytes
    }

    /// Bytes skipped between complete frames because they did not form one (damage).
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped_bytes
    }

    /// Damaged stretches skipped between complete frames.
    pub fn damaged_regions(&self) -> u64 {
        self.damaged_regions
    }

    /// The offset of the next complete frame after a damaged one at the start of `rest`, if
    /// one is found within the search budget.
    fn resync(&mut self) -> Option<usize> {
        for offset in 1..self.rest.len().saturating_sub(HEADER_BYTES - 1) {
            let candidate = &self.rest[offset..];
            let Some(len) = frame_len(candidate, self.max_frame_bytes) else { continue };
            if self.resync_budget < u64::from(len) {
                return None;
            }
            self.resync_budget -= u64::from(len);
            if complete_frame(candidate, self.max_frame_bytes).is_some() {
                return Some(offset);
            }
        }
        None
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        if complete_frame(self.rest, self.max_frame_bytes).is_none() {
            match self.resync() {
                Some(offset) => {
                    self.skipped_bytes += offset as u64;
                    self.damaged_regions += 1;
                    self.rest = &self.rest[offset..];
                }
                None => {
                    self.leftover_bytes = self.rest.len() as u64;
                    self.rest = &[];
                    return None;
                }
            }
        }
        let payload = complete_frame(self.rest, self.max_frame_bytes)?;
        self.rest = &self.rest[HEADER_BYTES + payload.len()..];
        Some(payload)
    }
}

/// The payload length in the header at the start of `bytes`, if the whole frame fits in them.
fn frame_len(bytes: &[u8], max_frame_bytes: u32) -> Option<u32> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let fits = bytes.len().checked_sub(HEADER_BYTES).is_some_and(|room| len as usize <= room);
    (len <= max_frame_bytes && fits).then_some(len)
}

/// The payload of the frame at the start of `bytes`, if it is complete and its checksum holds.
fn complete_frame(bytes: &[u8], max_frame_bytes: u32) -> Option<&[u8]> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let sum = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    if len > max_frame_bytes {
        return None;
    }
    let payload = bytes.get(HEADER_BYTES..HEADER_BYTES + len as usize)?;
    (checksum(payload) == sum).then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut frame = begin_frame();
        frame.extend_from_slice(payload);
        seal_frame(&mut frame);
        frame
    }

    #[test]
    fn checksum_is_fnv1a_32() {
        assert_eq!(checksum(b""), 0x811c_9dc5);
        assert_eq!(checksum(b"a"), 0xe40c_292c);
    }

    #[test]
    fn stops_at_a_cut_corrupt_or_oversized_frame() {
        let mut file = b"MAGIC123".to_vec();
        file.extend(frame(b"one"));
        file.extend(frame(b"two"));
        let complete = file.len();
        let mut bad = frame(b"three");
        bad[9] ^= 1;
        file.extend(&bad);
        let mut frames = Frames::new(&file, b"MAGIC123", 1024).unwrap();
        assert_eq!(frames.by_ref().collect::<Vec<_>>(), [&b"one"[..], b"two"]);
        assert_eq!(frames.leftover_bytes(), (file.len() - complete) as u64);

        let mut frames = Frames::new(&file[..complete], b"MAGIC123", 2).unwrap();
        assert_eq!(frames.next(), None, "a 3-byte payload is over a 2-byte limit");
        assert_eq!(frames.leftover_bytes(), (complete - 8) as u64);

        assert!(Frames::new(&file, b"OTHERMAG", 1024).is_none());
    }

    #[test]
    fn frames_after_a_damaged_one_are_recovered_and_the_damage_counted() {
        let mut file = b"MAGIC123".to_vec();
        file.extend(frame(b"one"));
        let damaged_at = file.len();
        let mut bad = frame(b"two, damaged");
        bad[12] ^= 0x40;
        file.extend(&bad);
        file.extend([0u8; 5]);
        file.extend(frame(b"three"));
        file.extend(frame(b"four"));
        let mut frames = Frames::new(&file, b"MAGIC123", 1024).unwrap();
        assert_eq!(frames.by_ref().collect::<Vec<_>>(), [&b"one"[..], b"three", b"four"]);
        assert_eq!(frames.skipped_bytes(), (bad.len() + 5) as u64);
        assert_eq!(frames.damaged_regions(), 1);
        assert_eq!(frames.leftover_bytes(), 0);
        // A damaged length field, too.
        file[damaged_at] = 0xff;
        let frames = Frames::new(&file, b"MAGIC123", 1024).unwrap();
        assert_eq!(frames.count(), 3);
    }
}
