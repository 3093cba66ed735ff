//! Any bytes as a straggler artifact trace (`what-if --straggler-artifact`): reading and modelling it give a model
//! or a one-line error naming the file, never a panic (the Parquet decoder runs under the dataset reader's guard)
//! nor an allocation sized from a value in it (`dp_rank`, `stage`). Seed the corpus with
//! `analyzer/tests/data/straggler-artifact/trace-*.parquet`.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use shardscope_analyzer::dependency::straggler_artifact::{ArtifactTrace, JobMeta, StragglerModel};

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(data).expect("written");
    let result = ArtifactTrace::load(file.path())
        .and_then(|trace| StragglerModel::build(&trace, &JobMeta::default()).map(|_| ()));
    if let Err(error) = result {
        let error = error.to_string();
        assert!(!error.contains('\n'), "{error}");
        assert!(error.starts_with(&file.path().display().to_string()), "{error}");
    }
});
