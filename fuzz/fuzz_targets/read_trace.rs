//! Any bytes as a trace file (SQLite, JSON, gzip of either): the reader returns a trace or a
//! one-line error naming the file, and never panics.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(data).expect("written");
    match shardscope_io::load_file(file.path()) {
        Ok(trace) => assert!(trace.kernels.iter().all(|k| k.end_ns >= k.start_ns)),
        Err(error) => assert!(!error.to_string().contains('\n')),
    }
});
