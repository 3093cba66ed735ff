//! Any bytes after a spool's magic: the frame reader never panics and accounts for every byte
//! once (in a frame, skipped as damage, or left over).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardscope_spool::frame::{Frames, HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    let mut file = b"FUZZSPL1".to_vec();
    file.extend_from_slice(data);
    let mut frames = Frames::new(&file, b"FUZZSPL1", 1 << 20).expect("the magic is there");
    let framed: u64 = frames.by_ref().map(|p| (p.len() + HEADER_BYTES) as u64).sum();
    assert_eq!(framed + frames.skipped_bytes() + frames.leftover_bytes(), data.len() as u64);
});
