//! `export --format parquet` and reading the dataset back: the report and the collectives of the dataset are the
//! report and the collectives of the original traces, byte for byte; damaged datasets are one line and exit 2.

use crate::common;

use std::path::{Path, PathBuf};

use common::{analyzer, assert_one_line_error, repo_root};

fn sample(name: &str) -> String {
    repo_root().join("sample-traces").join(name).display().to_string()
}

/// Exports `inputs` to a fresh dataset and returns its folder (inside `dir`).
fn export(dir: &Path, inputs: &[String]) -> PathBuf {
    let out = dir.join("dataset");
    let mut args = vec!["export", "--format", "parquet", out.to_str().unwrap()];
    args.extend(inputs.iter().map(String::as_str));
    let output = analyzer(&args);
    assert!(output.status.success(), "export failed: {}", String::from_utf8_lossy(&output.stderr));
    out
}

fn json(command: &str, inputs: &[&str]) -> String {
    let mut args = vec![command, "--format", "json"];
    args.extend(inputs);
    let output = analyzer(&args);
    assert!(output.status.success(), "{command} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn round_trip_preserves_every_figure_of_every_sample() {
    let inputs: Vec<Vec<String>> = vec![
        vec![sample("tp1_capture.sqlite.gz")],
        vec![sample("tp1_nsys.sqlite.gz")],
        vec![sample("tp2_capture.sqlite.gz")],
        vec![sample("tp2_full_capture.sqlite.gz")],
        vec![sample("tp2_nsys.sqlite.gz")],
        vec![sample("tp2_skew_capture.sqlite.gz")],
        vec![sample("kineto_tp2")],
        vec![sample("kineto_tp2/rank0.pt.trace.json.gz"), sample("kineto_tp2/rank1.pt.trace.json.gz")],
        vec![sample("memory/memory_probe_capture.sqlite.gz")],
        vec![sample("memory/memory_probe_nsys.sqlite.gz")],
        vec![sample("memory/memory_probe_kineto.json.gz")],
    ];
    for input in inputs {
        let dir = tempfile::tempdir().unwrap();
        let dataset = export(dir.path(), &input);
        let dataset = dataset.to_str().unwrap();
        let originals: Vec<&str> = input.iter().map(String::as_str).collect();
        for command in ["report", "collectives"] {
            let original = json(command, &originals);
            let read_back = json(command, &[dataset]);
            if command == "report" {
                assert!(original.len() > 1000, "the report of {input:?} is too small to prove anything");
            }
            assert!(original == read_back, "{command} of {input:?} differs after the round trip");
        }
    }
}

/// The memory samples through a dataset: the memory event tables are written, and the report read back has the
/// samples' known peaks (the round trip above compares the whole JSON; this makes sure there is a section to compare).
#[test]
fn memory_events_and_figures_survive_the_round_trip() {
    let cases = [
        ("memory_probe_capture.sqlite.gz", "cuda_memory", ["cuda", "peak_bytes"], 721_552_384_u64),
        ("memory_probe_nsys.sqlite.gz", "cuda_memory", ["cuda", "peak_bytes"], 721_552_384),
        ("memory_probe_kineto.json.gz", "framework_memory", ["framework", "peak_allocated_bytes"], 419_433_984),
    ];
    for (name, table, [source, field], peak) in cases {
        let dir = tempfile::tempdir().unwrap();
        let dataset = export(dir.path(), &[sample(&format!("memory/{name}"))]);
        let run = std::fs::read_dir(dataset.join(table)).unwrap().next().unwrap().unwrap().path();
        assert!(run.join("rank=0/part-0.parquet").is_file(), "{name}: {table} written in rank 0's partition");
        assert!(run.parent().unwrap().parent().unwrap().join("memory_figures").is_dir(), "{name}: memory_figures");
        let report: serde_json::Value = serde_json::from_str(&json("report", &[dataset.to_str().unwrap()])).unwrap();
        let read_back = report["memory"][0][source][field].as_u64().expect("a memory section after the round trip");
        assert_eq!(read_back, peak, "{name}");
    }
}

#[test]
fn dataset_is_partitioned_by_run_and_rank_and_carries_the_report_tables() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = export(dir.path(), &[sample("tp2_nsys.sqlite.gz")]);
    assert!(dataset.join("_shardscope_dataset.json").is_file());
    for table in ["kernels", "memops", "cuda_api", "nvtx", "rank_figures", "categories", "collective_instances"] {
        for rank in 0..2 {
            let file = dataset.join(table).join("run=tp2_nsys").join(format!("rank={rank}")).join("part-0.parquet");
            assert!(file.is_file(), "{} missing", file.display());
        }
    }
    for table in ["traces", "processes", "devices", "string_ids"] {
        assert!(dataset.join(table).join("run=tp2_nsys/part-0.parquet").is_file(), "{table} missing");
    }
    // A second run goes beside the first; the report then asks for one run.
    let second = analyzer(&[
        "export",
        "--format",
        "parquet",
        "--run",
        "again",
        dataset.to_str().unwrap(),
        &sample("tp1_nsys.sqlite.gz"),
    ]);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(dataset.join("kernels/run=again/rank=0/part-0.parquet").is_file());
    assert!(dataset.join("kernels/run=tp2_nsys/rank=1/part-0.parquet").is_file());
    let both = analyzer(&["report", dataset.to_str().unwrap()]);
    assert_one_line_error(&both, "2 runs (again, tp2_nsys)");
}

#[test]
fn export_refuses_a_folder_that_is_not_a_dataset_and_bad_run_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let output =
        analyzer(&["export", "--format", "parquet", dir.path().to_str().unwrap(), &sample("tp1_nsys.sqlite.gz")]);
    assert_one_line_error(&output, "is not empty and not a dataset");
    assert!(dir.path().join("notes.txt").is_file());
    let out = dir.path().join("new");
    let output = analyzer(&[
        "export",
        "--format",
        "parquet",
        "--run",
        "../escape",
        out.to_str().unwrap(),
        &sample("tp1_nsys.sqlite.gz"),
    ]);
    assert_one_line_error(&output, "cannot be a partition folder");
}

#[test]
fn damaged_datasets_are_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = export(dir.path(), &[sample("tp2_capture.sqlite.gz")]);
    let dataset_arg = dataset.to_str().unwrap().to_string();

    // A truncated Parquet file: the manifest's size finds it first, naming the dataset; without a manifest (a
    // dataset of an older version) the decoder does, naming the file.
    let kernels = dataset.join("kernels/run=tp2_capture/rank=1/part-0.parquet");
    let bytes = std::fs::read(&kernels).unwrap();
    std::fs::write(&kernels, &bytes[..bytes.len() / 2]).unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "kernels/run=tp2_capture/rank=1/part-0.parquet has");
    without_manifest(&dataset);
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "rank=1/part-0.parquet: not a readable Parquet file");
    std::fs::write(&kernels, &bytes).unwrap();

    // A schema version this build does not know, in the marker.
    let marker = dataset.join("_shardscope_dataset.json");
    let text = std::fs::read_to_string(&marker).unwrap();
    let mut unknown: serde_json::Value = serde_json::from_str(&text).unwrap();
    unknown["schema_version"] = "7.0".into();
    std::fs::write(&marker, unknown.to_string()).unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "unsupported schema version 7.0");
    std::fs::write(&marker, "not json").unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "_shardscope_dataset.json: not a dataset marker");
    std::fs::write(&marker, text).unwrap();

    // A Parquet file of another kind where a table file should be.
    let kernel_summary = dataset.join("kernel_summary/run=tp2_capture/rank=0/part-0.parquet");
    std::fs::copy(&kernel_summary, &kernels).unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "holds table kernel_summary, not kernels");
    std::fs::write(&kernels, &bytes).unwrap();

    // A folder without the marker is an ordinary folder of traces, and this one holds none.
    std::fs::remove_file(dataset.join("_shardscope_dataset.json")).unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "folder holds no SQLite or JSON trace");
}

/// Makes `dataset` look like one of a version before manifests: the manifest removed, the marker without it.
fn without_manifest(dataset: &Path) {
    let _ = std::fs::remove_file(dataset.join("_shardscope_manifest.json"));
    std::fs::write(
        dataset.join("_shardscope_dataset.json"),
        r#"{"format": "shardscope-parquet", "schema_version": "1.1"}"#,
    )
    .unwrap();
}

#[test]
fn rows_that_cannot_be_placed_are_counted_not_dropped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = export(dir.path(), &[sample("kineto_tp2")]);
    let dataset_arg = dataset.to_str().unwrap().to_string();
    let before: serde_json::Value = serde_json::from_str(&json("report", &[&dataset_arg])).unwrap();
    let rank1_kernels = before["ranks"][1]["kernel_count"].as_u64().unwrap();
    assert!(rank1_kernels > 0);
    // Without the second input's GPU table, none of its kernels names a known GPU; without rank 0's collectives,
    // its kernels point at metadata that is not there. The manifest refuses such a dataset; one written without
    // a manifest is read, its rows that cannot be placed counted.
    std::fs::remove_file(dataset.join("devices/run=kineto_tp2/part-1.parquet")).unwrap();
    std::fs::remove_dir_all(dataset.join("collectives/run=kineto_tp2/rank=0")).unwrap();
    assert_one_line_error(&analyzer(&["report", &dataset_arg]), "incomplete or altered dataset");
    without_manifest(&dataset);
    let output = analyzer(&["report", "--format", "json", &dataset_arg]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("analyzer: warning:"), "{stderr}");
    let after: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let warnings = after["warnings"].as_array().unwrap();
    let count = |what: &str| {
        warnings.iter().find(|w| w["what"].as_str().unwrap().starts_with(what)).map(|w| w["count"].as_u64().unwrap())
    };
    assert_eq!(count("dataset kernels row with a missing value or an unknown process or GPU"), Some(rank1_kernels));
    assert!(count("dataset kernel naming a collective the collectives table lacks").unwrap() > 0, "{warnings:?}");
    assert!(count("dataset written without a manifest").is_some(), "{warnings:?}");
    assert_eq!(after["ranks"].as_array().unwrap().len(), 1, "only rank 0 has GPU work left");
}
