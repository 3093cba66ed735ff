//! Any bytes as one part file of a Parquet dataset (the tp2 sample exported once): the dataset reader returns
//! the traces or a one-line error naming the dataset or the file, and never panics or sizes a buffer from the
//! bytes. The first byte picks the part; the manifest is dropped (a dataset of an older version), so that the
//! bytes reach the Parquet decoder instead of stopping at the manifest's size check.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use shardscope_io::parquet::{DatasetWriter, MANIFEST_FILE, read_dataset};

/// The dataset written once, and its part files.
fn dataset() -> &'static (tempfile::TempDir, Vec<PathBuf>) {
    static DATASET: OnceLock<(tempfile::TempDir, Vec<PathBuf>)> = OnceLock::new();
    DATASET.get_or_init(|| {
        let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../sample-traces/tp2_nsys.sqlite.gz");
        let traces = shardscope_io::load(std::path::Path::new(sample)).expect("the sample reads");
        let dir = tempfile::tempdir().expect("a temporary folder");
        let root = dir.path().join("ds");
        let ranks: Vec<Vec<Option<u32>>> =
            traces.iter().map(|t| (0..t.devices.len() as u32).map(Some).collect()).collect();
        let writer = DatasetWriter::create(&root, "fuzz").expect("created");
        writer.write_traces(&traces, &ranks).expect("written");
        writer.finish().expect("finished");
        let manifest = std::fs::read_to_string(root.join(MANIFEST_FILE)).expect("a manifest");
        let parts: Vec<PathBuf> = serde_json::from_str::<serde_json::Value>(&manifest).expect("JSON")["parts"]
            .as_array()
            .expect("parts")
            .iter()
            .map(|p| root.join(p["path"].as_str().expect("a path")))
            .collect();
        std::fs::remove_file(root.join(MANIFEST_FILE)).expect("removed");
        std::fs::write(
            root.join("_shardscope_dataset.json"),
            r#"{"format": "shardscope-parquet", "schema_version": "1.1"}"#,
        )
        .expect("marker");
        (dir, parts)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let (dir, parts) = dataset();
    let part = &parts[usize::from(pick) % parts.len()];
    let original = std::fs::read(part).expect("the part");
    std::fs::write(part, bytes).expect("written");
    let result = read_dataset(&dir.path().join("ds"));
    std::fs::write(part, original).expect("restored");
    if let Err(error) = result {
        let text = error.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.starts_with(&dir.path().join("ds").display().to_string()), "{text}");
    }
});
