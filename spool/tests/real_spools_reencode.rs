//! Spool files written by earlier versions of the libraries, on GPUs, decode and encode back to
//! the very same bytes: the records declared through the codec macros keep the on-disk format.

use std::io::Read;
use std::path::{Path, PathBuf};

use shardscope_spool::cupti::SpoolRecord;
use shardscope_spool::frame::Frames;
use shardscope_spool::nccl::NcclRecord;

fn capture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../capture")
}

/// Re-encodes every record of every frame and compares the frame payloads byte for byte.
fn assert_reencodes<R>(
    bytes: &[u8],
    magic: &[u8; 8],
    decode: impl Fn(&mut &[u8]) -> R,
    encode: impl Fn(&R, &mut Vec<u8>),
) -> u64 {
    let mut records = 0;
    let mut frames = Frames::new(bytes, magic, u32::MAX).expect("magic");
    for payload in frames.by_ref() {
        let mut input = payload;
        let mut again = Vec::new();
        while !input.is_empty() {
            encode(&decode(&mut input), &mut again);
            records += 1;
        }
        assert_eq!(again, payload);
    }
    assert_eq!(frames.leftover_bytes(), 0);
    records
}

fn read_gz(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut bytes).unwrap();
    bytes
}

#[test]
fn injection_library_spools_reencode_byte_for_byte() {
    let mut records = 0;
    for name in ["vm.697.spool.gz", "vm.712.spool.gz", "vm.713.spool.gz"] {
        let bytes = read_gz(&capture_dir().join("tests/data/tp2_spool").join(name));
        records += assert_reencodes(
            &bytes,
            shardscope_spool::cupti::MAGIC,
            |input| SpoolRecord::decode(input).expect("a known record"),
            SpoolRecord::encode,
        );
    }
    assert!(records > 40_000, "{records} records");
}

#[test]
fn nccl_plugin_spools_reencode_byte_for_byte() {
    let data = capture_dir().join("nccl-profiler/tests/data");
    for path in
        [data.join("tp2-h200/nccl-624.bin"), data.join("tp2-h200/nccl-625.bin"), data.join("nccl-2.28.3/nccl-678.bin")]
    {
        let bytes = std::fs::read(&path).unwrap();
        let records = assert_reencodes(
            &bytes,
            shardscope_spool::nccl::MAGIC,
            |input| NcclRecord::decode(input).expect("delimited").expect("a known kind"),
            NcclRecord::encode,
        );
        assert!(records > 0, "{}", path.display());
    }
}
