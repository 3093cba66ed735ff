//! `export --format parquet` writes the module table of `analyzer modules` as the dataset's `modules` table: the
//! same rows (rank, phase, path, GPU time, kernels, calls, allocator figures) as `analyzer modules --format json`,
//! on the eager Qwen3 module capture; a run without module ranges gets no `modules` table, and the dataset still
//! reads back.

use crate::common;

use std::path::Path;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use common::{analyzer, repo_root};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

fn export(dataset: &Path, input: &Path) {
    let output = analyzer(&["export", "--format", "parquet", dataset.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// The one batch of a small table file (one rank's module table).
fn read(file: &Path) -> RecordBatch {
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap()).unwrap().build().unwrap();
    let mut batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1, "one batch");
    batches.remove(0)
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch.column_by_name(name).unwrap_or_else(|| panic!("column {name}")).as_any().downcast_ref::<T>().unwrap()
}

#[test]
fn the_module_table_is_in_the_dataset_as_analyzer_modules_gives_it() {
    let input = repo_root().join("sample-traces/modules/qwen3_eager.sqlite.gz");
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    export(&dataset, &input);
    let output = analyzer(&["modules", "--format", "json", input.to_str().unwrap()]);
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut expected = Vec::new();
    for rank in report["ranks"].as_array().unwrap() {
        for phase in rank["phases"].as_array().unwrap() {
            for row in phase["rows"].as_array().unwrap() {
                let memory = &row["memory"];
                expected.push((
                    rank["rank"].as_u64().unwrap() as u32,
                    phase["phase"].as_str().unwrap().to_string(),
                    row["path"].as_str().unwrap().to_string(),
                    row["gpu_ns"].as_i64().unwrap(),
                    row["kernels"].as_u64().unwrap(),
                    row["calls"].as_u64().unwrap(),
                    memory["allocated_delta_max_bytes"].as_i64(),
                ));
            }
        }
    }
    assert!(expected.len() > 50, "the eager capture has many module rows");
    let run = "qwen3_eager";
    let batch = read(&dataset.join(format!("modules/run={run}/rank=0/part-0.parquet")));
    let rank = column::<UInt32Array>(&batch, "rank");
    let phase = column::<StringArray>(&batch, "phase");
    let path = column::<StringArray>(&batch, "path");
    let gpu_ns = column::<Int64Array>(&batch, "gpuNs");
    let kernels = column::<UInt64Array>(&batch, "kernels");
    let calls = column::<UInt64Array>(&batch, "calls");
    let allocated = column::<Int64Array>(&batch, "allocatedDeltaMaxBytes");
    let got: Vec<_> = (0..batch.num_rows())
        .map(|i| {
            (
                rank.value(i),
                phase.value(i).to_string(),
                path.value(i).to_string(),
                gpu_ns.value(i),
                kernels.value(i),
                calls.value(i),
                (!allocated.is_null(i)).then(|| allocated.value(i)),
            )
        })
        .collect();
    assert_eq!(got, expected);
    assert!(got.iter().any(|row| row.6.is_some()), "the eager capture recorded allocator counters");
    let share = column::<Float64Array>(&batch, "share");
    let shares: f64 = (0..batch.num_rows()).filter(|&i| phase.value(i) == phase.value(0)).map(|i| share.value(i)).sum();
    assert!((shares - 1.0).abs() < 1e-6 || (shares - 100.0).abs() < 1e-4, "shares of a phase add up: {shares}");
    // The dataset still reads back.
    let report = analyzer(&["report", dataset.to_str().unwrap()]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
}

#[test]
fn a_run_without_module_ranges_has_no_module_table() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    export(&dataset, &repo_root().join("sample-traces/tp2_nsys.sqlite.gz"));
    assert!(dataset.join("kernels").is_dir());
    assert!(!dataset.join("modules").exists());
}
