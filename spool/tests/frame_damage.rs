//! Property tests of the frame reader on damaged files: whatever the bytes, it never panics, every
//! byte is accounted for exactly once (in a frame, skipped, or left over), and a frame that was
//! written intact and is not touched by the damage is read back.

use proptest::prelude::*;
use shardscope_spool::frame::{Frames, HEADER_BYTES, begin_frame, seal_frame};

const MAGIC: &[u8; 8] = b"TESTSPL1";

fn file_of(payloads: &[Vec<u8>]) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut file = MAGIC.to_vec();
    let mut spans = Vec::new();
    for payload in payloads {
        let mut frame = begin_frame();
        frame.extend_from_slice(payload);
        seal_frame(&mut frame);
        spans.push(file.len()..file.len() + frame.len());
        file.extend(frame);
    }
    (file, spans)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_files_read_without_panic_and_keep_untouched_frames(
        payloads in prop::collection::vec(prop::collection::vec(1u8..=255, 1..64), 1..12),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in prop::option::weighted(0.2, any::<prop::sample::Index>()),
    ) {
        let (mut file, spans) = file_of(&payloads);
        let mut touched = Vec::new();
        for (at, byte) in &edits {
            let index = HEADER_BYTES + at.index(file.len() - HEADER_BYTES);
            if file[index] != *byte {
                file[index] = *byte;
                touched.push(index);
            }
        }
        if let Some(cut) = cut {
            let len = MAGIC.len() + cut.index(file.len() - MAGIC.len() + 1);
            touched.extend(len..file.len());
            file.truncate(len);
        }
        let mut frames = Frames::new(&file, MAGIC, 1 << 16).unwrap();
        let read: Vec<&[u8]> = frames.by_ref().collect();
        let framed: u64 = read.iter().map(|p| (p.len() + HEADER_BYTES) as u64).sum();
        prop_assert_eq!(
            framed + frames.skipped_bytes() + frames.leftover_bytes(),
            (file.len() - MAGIC.len()) as u64
        );
        // Frames untouched by any edit or the cut are all read back, in order.
        let intact: Vec<&[u8]> = spans
            .iter()
            .zip(&payloads)
            .filter(|(span, _)| !touched.iter().any(|t| span.contains(t)))
            .map(|(_, p)| p.as_slice())
            .collect();
        let mut found = read.iter();
        for payload in intact {
            prop_assert!(found.any(|p| *p == payload), "an intact frame was lost");
        }
    }

    #[test]
    fn random_bytes_read_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut file = MAGIC.to_vec();
        file.extend(bytes);
        let mut frames = Frames::new(&file, MAGIC, 1 << 16).unwrap();
        let framed: u64 = frames.by_ref().map(|p| (p.len() + HEADER_BYTES) as u64).sum();
        prop_assert_eq!(framed + frames.skipped_bytes() + frames.leftover_bytes(), (file.len() - MAGIC.len()) as u64);
    }
}
