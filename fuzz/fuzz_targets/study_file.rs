//! Any bytes as a study file (`analyzer study`): it loads with at most `MAX_RUNS` points, or is refused with one
//! line naming it; never a panic, never an allocation from a grid or repetition count. Any text as a command
//! template: it reads (and then gives its arguments for any values) or is refused; never a panic.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use shardscope_analyzer::study::{MAX_RUNS, Study};
use shardscope_analyzer::study::command::CommandTemplate;

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().expect("a temporary file");
    file.write_all(data).expect("written");
    match Study::load(file.path(), None) {
        Ok(study) => assert!(study.points.len() as u64 <= MAX_RUNS),
        Err(error) => assert!(!error.to_string().contains('\n'), "{error}"),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for shell in [false, true] {
            if let Ok(template) = CommandTemplate::parse(text, shell) {
                let argv = template.argv(&|_| Some("a b'\"; $(x)".to_string()));
                assert!(argv.is_ok(), "every placeholder has a value");
            }
        }
    }
});
