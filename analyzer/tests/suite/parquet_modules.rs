//! `export --format parquet` writes the module table of `analyzer modules` as the dataset's `modules` table: the
//! same rows (rank, phase, path, GPU time, kernels, calls, allocator figures) as `analyzer modules --format json`,
//! on the eager and the compiled (CUDA graph) Qwen3 module captures, every column equal to the JSON's value; the
//! files and the marker say schema 1.3; a run without module ranges gets no `modules` table, and the dataset still
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

/// One row as JSON values, in the columns of `analyzer modules --format csv` and the two the dataset adds
/// (`phaseInstances`, `memoryCallsMeasured`), in that order.
const COLUMNS: [&str; 18] = [
    "rank",
    "phase",
    "phaseInstances",
    "path",
    "class",
    "layer",
    "withinLayer",
    "gpuNs",
    "share",
    "kernels",
    "graphKernels",
    "calls",
    "perStepNs",
    "memoryCallsMeasured",
    "allocatedDeltaMeanBytes",
    "allocatedDeltaMaxBytes",
    "peakAboveEntryMaxBytes",
    "reservedDeltaMaxBytes",
];

/// The rows of `analyzer modules --format json`, each as the values of [`COLUMNS`].
fn json_rows(input: &Path) -> Vec<Vec<Value>> {
    let output = analyzer(&["modules", "--format", "json", input.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut rows = Vec::new();
    for rank in report["ranks"].as_array().unwrap() {
        for phase in rank["phases"].as_array().unwrap() {
            for row in phase["rows"].as_array().unwrap() {
                let memory = &row["memory"];
                let field = |key: &str| row[key].clone();
                rows.push(vec![
                    rank["rank"].clone(),
                    phase["phase"].clone(),
                    phase["instances"].clone(),
                    field("path"),
                    field("class"),
                    field("layer"),
                    field("within_layer"),
                    field("gpu_ns"),
                    field("share"),
                    field("kernels"),
                    field("graph_kernels"),
                    field("calls"),
                    field("per_step_ns"),
                    memory["calls_measured"].clone(),
                    memory["allocated_delta_mean_bytes"].clone(),
                    memory["allocated_delta_max_bytes"].clone(),
                    memory["peak_above_entry_max_bytes"].clone(),
                    memory["reserved_delta_max_bytes"].clone(),
                ]);
            }
        }
    }
    rows
}

/// The value of row `row` of an Arrow column as JSON (null where null), by the column's type.
fn value_at(array: &dyn Array, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    let any = array.as_any();
    if let Some(a) = any.downcast_ref::<UInt32Array>() {
        Value::from(a.value(row))
    } else if let Some(a) = any.downcast_ref::<UInt64Array>() {
        Value::from(a.value(row))
    } else if let Some(a) = any.downcast_ref::<Int64Array>() {
        Value::from(a.value(row))
    } else if let Some(a) = any.downcast_ref::<Float64Array>() {
        Value::from(a.value(row))
    } else if let Some(a) = any.downcast_ref::<StringArray>() {
        Value::from(a.value(row))
    } else {
        panic!("unexpected column type {:?}", array.data_type())
    }
}

/// Equal values; floats to within the last bit or two that serde_json's text-to-float parsing may change (its
/// default parser rounds some decimal texts to a neighbouring f64).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

/// Exports `sample` and checks that its rank-0 module table holds, column for column and row for row, what
/// `analyzer modules --format json` gives (integers and text exactly, floats to serde_json's parsing precision); returns the rows.
fn round_trip(sample: &str, run: &str) -> Vec<Vec<Value>> {
    let input = repo_root().join("sample-traces/modules").join(sample);
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    export(&dataset, &input);
    let expected = json_rows(&input);
    let file = dataset.join(format!("modules/run={run}/rank=0/part-0.parquet"));
    let batch = read(&file);
    let names: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, COLUMNS, "the columns of the CSV and two more, in order");
    let got: Vec<Vec<Value>> = (0..batch.num_rows())
        .map(|row| COLUMNS.iter().map(|name| value_at(batch.column_by_name(name).unwrap().as_ref(), row)).collect())
        .collect();
    assert_eq!(got.len(), expected.len());
    for (got, expected) in got.iter().zip(&expected) {
        let same = got.iter().zip(expected).all(|(a, b)| same_value(a, b));
        assert!(same, "one row of the table against analyzer modules' JSON:\n{got:?}\n{expected:?}");
    }
    // The file and the dataset say which schema they are: 1.3 added the table.
    let metadata = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&file).unwrap()).unwrap();
    let key_values = metadata.metadata().file_metadata().key_value_metadata().unwrap();
    let version = key_values.iter().find(|kv| kv.key == "shardscope.schema_version").unwrap();
    assert_eq!(version.value.as_deref(), Some("1.3"));
    let marker = std::fs::read_to_string(dataset.join("_shardscope_dataset.json")).unwrap();
    assert!(marker.contains("\"schema_version\": \"1.3\""), "{marker}");
    // The dataset still reads back.
    let report = analyzer(&["report", dataset.to_str().unwrap()]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    got
}

#[test]
fn the_module_table_is_in_the_dataset_as_analyzer_modules_gives_it() {
    let rows = round_trip("qwen3_eager.sqlite.gz", "qwen3_eager");
    assert!(rows.len() > 50, "the eager capture has many module rows");
    let column = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
    assert!(rows.iter().any(|row| !row[column("allocatedDeltaMaxBytes")].is_null()), "allocator counters recorded");
    assert!(rows.iter().any(|row| row[column("layer")] == 3), "layers numbered");
    // The shares of one phase add up to the whole phase.
    let phase = rows[0][column("phase")].clone();
    let shares: f64 =
        rows.iter().filter(|row| row[column("phase")] == phase).map(|row| row[column("share")].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "shares of a phase add up: {shares}");
}

/// The compiled static-cache capture: kernels replayed from CUDA graphs keep their count in `graphKernels`, and no
/// allocator figures were recorded.
#[test]
fn the_module_table_of_graph_replays_round_trips() {
    let rows = round_trip("qwen3_static.sqlite.gz", "qwen3_static");
    let column = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
    assert!(rows.iter().any(|row| row[column("graphKernels")].as_u64().unwrap() > 0), "graph replays attributed");
    assert!(rows.iter().all(|row| row[column("memoryCallsMeasured")].is_null()));
}

#[test]
fn a_run_without_module_ranges_has_no_module_table() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    export(&dataset, &repo_root().join("sample-traces/tp2_nsys.sqlite.gz"));
    assert!(dataset.join("kernels").is_dir());
    assert!(!dataset.join("modules").exists());
}
