//! The figures tables of the Parquet dataset and of the Python package come from one definition
//! (`output::figure_tables`): for a real capture, every Python column has a dataset column of the same Arrow type
//! and nullability, named as its snake_case (except the few renames listed here), and the dataset's files hold
//! exactly the defined columns in order.

use crate::common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_schema::{DataType, Schema};
use common::repo_root;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shardscope_analyzer::output::figure_tables::{
    self, CategoryRow, FigureRow, InstanceRow, KernelRow, MemoryRow, TableDef,
};
use shardscope_analyzer::output::parquet_export;
use shardscope_analyzer::report::{self, Options};

/// Python names that are not the snake_case of the dataset's: older names the Python tables keep.
const PYTHON_RENAMES: [(&str, &str); 4] =
    [("stdDevNs", "stddev_ns"), ("nRanks", "nranks"), ("start", "start_ns"), ("end", "end_ns")];

fn snake_case(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The Arrow schema of every Parquet file under `dir` whose path has a folder named `table`.
fn file_schemas(dir: &Path, table: &str, found: &mut Vec<Schema>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        if path.is_dir() {
            file_schemas(&path, table, found);
        } else if path.extension().is_some_and(|e| e == "parquet") && path.iter().any(|p| p == table) {
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
            found.push(reader.schema().as_ref().clone());
        }
    }
}

/// Checks one table: the dataset files against the definition, and the Python columns against the dataset's.
fn check<R>(dataset: &Path, table: &TableDef<R>, rows: &[R]) {
    assert!(!rows.is_empty(), "{}: the sample gives no rows, so nothing is compared", table.name);
    let mut schemas = Vec::new();
    file_schemas(dataset, table.name, &mut schemas);
    assert!(!schemas.is_empty(), "{}: no files written", table.name);
    let defined: Vec<&str> = table.columns.iter().map(|c| c.dataset).collect();
    let mut dataset_fields: BTreeMap<String, (DataType, bool)> = BTreeMap::new();
    for schema in &schemas {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, defined, "{}: the file's columns are the definition's, in order", table.name);
        for field in schema.fields() {
            dataset_fields.insert(field.name().clone(), (field.data_type().clone(), field.is_nullable()));
        }
    }
    let python = table.python_columns(rows);
    assert_eq!(python.len(), table.python_order.len(), "{}: every Python name is defined", table.name);
    for (name, array, nullable) in &python {
        let column = table.columns.iter().find(|c| c.python == Some(*name)).unwrap();
        let expected = PYTHON_RENAMES
            .iter()
            .find(|(d, _)| *d == column.dataset)
            .map_or_else(|| snake_case(column.dataset), |(_, p)| p.to_string());
        assert_eq!(*name, expected, "{}: the Python name of {}", table.name, column.dataset);
        let (data_type, dataset_nullable) = &dataset_fields[column.dataset];
        assert_eq!(
            array.data_type(),
            data_type,
            "{}: type of {name} in Python and {} in the dataset",
            table.name,
            column.dataset
        );
        assert_eq!(nullable, dataset_nullable, "{}: nullability of {name}", table.name);
        assert_eq!(array.len(), rows.len(), "{}: one value per row in {name}", table.name);
    }
}

#[test]
fn python_tables_and_dataset_tables_have_one_schema() {
    let input = repo_root().join("sample-traces/tp2_full_capture.sqlite.gz");
    let traces = shardscope_io::load(&input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    parquet_export::export(&dataset, "run", &traces, &Options::default()).unwrap();

    let report = report::analyze(&traces, &Options { keep_instances: true, ..Options::default() });
    let figures = FigureRow::of_report(&report);
    assert!(figures.iter().any(|r| r.phase.is_some()), "the sample has phases, so phase rows are compared");
    check(&dataset, &figure_tables::rank_figures(), &figures);
    check(&dataset, &figure_tables::categories(), &CategoryRow::of_figures(&figures));
    check(&dataset, &figure_tables::kernel_summary(), &KernelRow::of_figures(&figures));

    let mut instances = Vec::new();
    for (id, instance) in report.instances.iter().enumerate() {
        for (&(trace, kernel), &share) in instance.members.iter().zip(&instance.shares) {
            let kernel = &traces[trace].kernels[kernel as usize];
            let (start_ns, end_ns) = (kernel.start_ns, kernel.end_ns);
            instances.push(InstanceRow { id: id as u32, instance, rank: 0, device: 0, start_ns, end_ns, share });
        }
    }
    check(&dataset, &figure_tables::collective_instances(), &instances);
}

#[test]
fn memory_figures_have_one_schema_and_the_sections_values() {
    let input = repo_root().join("sample-traces/memory/memory_probe_capture.sqlite.gz");
    let traces = shardscope_io::load(&input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    parquet_export::export(&dataset, "run", &traces, &Options::default()).unwrap();
    let report = report::analyze(&traces, &Options { keep_instances: true, ..Options::default() });
    let rows = MemoryRow::of_report(&report);
    check(&dataset, &figure_tables::memory_figures(), &rows);
    // The whole rank's row holds the section's figures (the sample's known peak).
    let whole = rows.iter().find(|r| r.phase.is_none()).expect("a whole-rank row");
    let cuda = whole.cuda.expect("the capture has CUDA-level memory");
    assert_eq!(cuda.peak_bytes, 721_552_384);
    let file = std::fs::read_dir(dataset.join("memory_figures/run=run/rank=0")).unwrap().next().unwrap().unwrap();
    let batch = ParquetRecordBatchReaderBuilder::try_new(File::open(file.path()).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let peak = batch.column_by_name("peakBytes").unwrap();
    let peak = peak.as_any().downcast_ref::<arrow_array::UInt64Array>().unwrap();
    assert_eq!(peak.value(0), 721_552_384, "the dataset's first row is the whole rank's");
    assert_eq!(batch.num_rows(), rows.len());
}
