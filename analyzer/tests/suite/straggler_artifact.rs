//! The straggler what-if on the three traces published with the OSDI 2025 paper reproduces the paper artifact's
//! expected results: `S` and its decompositions per operation type, DP rank and stage within 1 % (relative), and
//! `M_W` / `M_S` within 1 percentage point.

use std::path::{Path, PathBuf};

use serde_json::Value;
use shardscope_analyzer::dependency::straggler_artifact::{self, GroupSlowdown, JobMeta, StragglerReport};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/straggler-artifact").join(name)
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

fn analyse(trial: &str) -> StragglerReport {
    let meta = JobMeta::load(&data(&format!("meta-{trial}.yaml"))).unwrap();
    straggler_artifact::run(&data(&format!("trace-{trial}.parquet")), &meta).unwrap()
}

/// Compares one decomposition with the expected `{name: slowdown}` object, every key present on both sides.
fn check_groups(trial: &str, what: &str, ours: &[GroupSlowdown], expected: &Value, failures: &mut Vec<String>) {
    let expected = expected.as_object().unwrap_or_else(|| panic!("{trial}: {what} is not an object"));
    assert_eq!(
        ours.len(),
        expected.len(),
        "{trial}: {what}: groups {:?} vs {:?}",
        ours.iter().map(|g| &g.name).collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (name, value) in expected {
        let want = value.as_f64().unwrap();
        let Some(got) = ours.iter().find(|g| &g.name == name) else {
            failures.push(format!("{trial}: {what}: no group {name}"));
            continue;
        };
        let error = (got.slowdown - want).abs() / want;
        if error > 0.01 {
            failures.push(format!(
                "{trial}: {what} {name}: {:.5} vs expected {want:.5} ({:.2} %)",
                got.slowdown,
                error * 100.0
            ));
        }
    }
}

fn check(trial: &str) {
    let report = analyse(trial);
    let result = json(&format!("result-{trial}.json"));
    let mut failures = Vec::new();
    let want = result["blocking_slowdown"].as_f64().unwrap();
    let error = (report.slowdown - want).abs() / want;
    if error > 0.01 {
        failures.push(format!("{trial}: S {:.5} vs expected {want:.5}", report.slowdown));
    }
    check_groups(trial, "S_t", &report.by_optype, &result["blocking_decompose_by_optype"], &mut failures);
    check_groups(trial, "S_w per DP rank", &report.by_dp_rank, &result["blocking_decompose_by_dp_rank"], &mut failures);
    check_groups(trial, "S_w per stage", &report.by_stage, &result["blocking_decompose_by_stage"], &mut failures);
    for (name, ours, file, key) in
        [("M_W", &report.m_w, format!("mw-{trial}.json"), "Mw"), ("M_S", &report.m_s, format!("ms-{trial}.json"), "Ms")]
    {
        let want = json(&file)[key].as_f64().unwrap();
        if (ours.removed - want).abs() > 0.01 {
            failures.push(format!("{trial}: {name} {:.4} vs expected {want:.4}", ours.removed));
        }
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), straggler_artifact::table(&report));
    // The per-step slowdowns are those of the expected result too (the same keys, each within 1 %).
    let per_step = result["blocking_step_slowdown"].as_object().unwrap();
    assert_eq!(per_step.len(), report.per_step.len(), "{trial}: steps");
    for step in &report.per_step {
        let want = per_step[&step.step.to_string()].as_f64().unwrap();
        assert!(
            (step.slowdown - want).abs() / want <= 0.01,
            "{trial}: step {}: {} vs {want}",
            step.step,
            step.slowdown
        );
    }
}

#[test]
fn artifact_trace_st_stage_imbalance() {
    check("ST");
}

#[test]
fn artifact_trace_ar_slow_worker() {
    check("AR");
}

#[test]
fn artifact_trace_se_sequence_imbalance() {
    check("SE");
}

use crate::common;

/// `what-if --heatmap` draws the slowdown of every worker and step: the SVG's cells carry exactly the report's
/// `min(S_dp, S_stage) − 1` per step, and the PNG matches the committed image of trace ST.
///
/// After an intended change of the look: `UPDATE_SNAPSHOTS=1 cargo test -p shardscope-analyzer --test
/// suite straggler_artifact::` rewrites `analyzer/tests/snapshots/straggler/heatmap-ST.png` (look at it before committing).
#[test]
fn heatmap_cells_are_the_reports_figures_and_the_png_matches_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let png_path = dir.path().join("heatmap.png");
    let trace = data("trace-ST.parquet");
    let output = common::analyzer(&[
        "what-if",
        "--straggler-artifact",
        trace.to_str().unwrap(),
        "--format",
        "json",
        "--heatmap",
        png_path.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();

    // Expected cells from the JSON report: per worker, per step index.
    let per_step = |key: &str, name: u64| -> Vec<f64> {
        let group = report[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"].as_str().and_then(|n| n.parse::<u64>().ok()) == Some(name))
            .unwrap();
        group["per_step"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    };
    let svg = std::fs::read_to_string(dir.path().join("heatmap.svg")).unwrap();
    let cell = regex::Regex::new(r#"data-kind="cell"[^>]*data-row="([^"]*)" data-column="(\d+)" data-value="([^"]*)""#)
        .unwrap();
    let drawn: Vec<(String, usize, f64)> =
        cell.captures_iter(&svg).map(|c| (c[1].to_string(), c[2].parse().unwrap(), c[3].parse().unwrap())).collect();
    let workers = report["worker_places"].as_array().unwrap();
    let steps = report["per_step"].as_array().unwrap().len();
    assert_eq!(drawn.len(), workers.len() * steps, "one cell per worker and step");
    for worker in workers {
        let (dp, stage) = (worker["dp_rank"].as_u64().unwrap(), worker["stage"].as_u64().unwrap());
        let row = format!("DP{dp} PP{stage}");
        let (by_dp, by_stage) = (per_step("by_dp_rank", dp), per_step("by_stage", stage));
        for (column, (a, b)) in by_dp.iter().zip(&by_stage).enumerate() {
            let want = (a.min(*b) - 1.0) * 100.0;
            let got = drawn.iter().find(|d| d.0 == row && d.1 == column).map(|d| d.2);
            // Equal but for the last bits that JSON text parsing may round differently.
            assert!(got.is_some_and(|g| (g - want).abs() <= 1e-9), "{row}, step index {column}: {got:?} vs {want}");
        }
    }
    // ST is slowed by its last stage: averaged over the steps, each row of stage 3 shows more slowdown than any
    // row of another stage.
    let row_mean = |row: &str| drawn.iter().filter(|d| d.0 == row).map(|d| d.2).sum::<f64>() / steps as f64;
    let rows: Vec<String> = workers.iter().map(|w| format!("DP{} PP{}", w["dp_rank"], w["stage"])).collect();
    let last = rows.iter().filter(|r| r.ends_with("PP3")).map(|r| row_mean(r)).fold(f64::INFINITY, f64::min);
    let others = rows.iter().filter(|r| !r.ends_with("PP3")).map(|r| row_mean(r)).fold(f64::NEG_INFINITY, f64::max);
    assert!(last > others + 10.0, "last stage {last} % vs others {others} %");

    let drawn_png = std::fs::read(&png_path).unwrap();
    let golden_path = common::repo_root().join("analyzer/tests/snapshots/straggler/heatmap-ST.png");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::create_dir_all(golden_path.parent().unwrap()).unwrap();
        std::fs::write(&golden_path, &drawn_png).unwrap();
        return;
    }
    let golden = std::fs::read(&golden_path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", golden_path.display()));
    let (w0, h0, a) = common::decode_png(&drawn_png);
    let (w1, h1, b) = common::decode_png(&golden);
    assert_eq!((w0, h0), (w1, h1), "size");
    // Anti-aliasing may differ by a few levels between builds: a pixel counts as changed beyond 24 levels, and at
    // most 0.5 % of the pixels may change.
    let changed =
        a.chunks(3).zip(b.chunks(3)).filter(|(p, q)| p.iter().zip(*q).any(|(x, y)| x.abs_diff(*y) > 24)).count();
    let allowed = (w0 * h0) as usize / 200;
    assert!(changed <= allowed, "{changed} pixels differ from the snapshot (at most {allowed})");
}

#[test]
fn a_file_that_is_not_an_artifact_trace_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("trace.parquet");
    std::fs::write(&bogus, b"not parquet at all").unwrap();
    let output = common::analyzer(&["what-if", "--straggler-artifact", bogus.to_str().unwrap()]);
    common::assert_one_line_error(&output, "trace.parquet: not a readable Parquet file");
    let meta = data("meta-ST.yaml");
    let output = common::analyzer(&["what-if", "--straggler-artifact", meta.to_str().unwrap()]);
    common::assert_one_line_error(&output, "meta-ST.yaml");
    let trace = data("trace-ST.parquet");
    let output = common::analyzer(&["what-if", "--straggler-artifact", trace.to_str().unwrap(), "--step", "2"]);
    common::assert_one_line_error(&output, "--step and --window do not apply");
    // A metadata file with none of the artifact's keys (a wrong file, broken YAML) is refused, not ignored.
    let not_meta = dir.path().join("meta.yaml");
    std::fs::write(&not_meta, "not: [yaml\n").unwrap();
    let output = common::analyzer(&[
        "what-if",
        "--straggler-artifact",
        trace.to_str().unwrap(),
        "--artifact-meta",
        not_meta.to_str().unwrap(),
    ]);
    common::assert_one_line_error(&output, "meta.yaml: not an artifact metadata file");
}

/// `trace-ST.parquet` with one column replaced: `dp_rank` of `row` set to `value` (as Int64).
fn with_dp_rank(dir: &Path, row: usize, value: i64) -> PathBuf {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
    };
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let file = std::fs::File::open(data("trace-ST.parquet")).unwrap();
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap().map(Result::unwrap).collect();
    let out = dir.join(format!("dp-{value}.parquet"));
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    let mut first = 0;
    for batch in batches {
        let schema = batch.schema();
        let at = schema.index_of("dp_rank").unwrap();
        let old = batch.column(at);
        macro_rules! ints {
            ($t:ty) => {
                old.as_primitive::<$t>().iter().map(|v| v.map(|v| v as i64)).collect()
            };
        }
        let mut values: Vec<Option<i64>> = match old.data_type() {
            DataType::Int64 => ints!(Int64Type),
            DataType::Int32 => ints!(Int32Type),
            DataType::Int16 => ints!(Int16Type),
            DataType::Int8 => ints!(Int8Type),
            DataType::UInt64 => ints!(UInt64Type),
            DataType::UInt32 => ints!(UInt32Type),
            DataType::UInt16 => ints!(UInt16Type),
            DataType::UInt8 => ints!(UInt8Type),
            other => panic!("dp_rank is {other}"),
        };
        if (first..first + values.len()).contains(&row) {
            values[row - first] = Some(value);
        }
        first += values.len();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[at] = Field::new("dp_rank", DataType::Int64, true);
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[at] = Arc::new(Int64Array::from(values));
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let writer = writer.get_or_insert_with(|| {
            ArrowWriter::try_new(std::fs::File::create(&out).unwrap(), batch.schema(), None).unwrap()
        });
        writer.write(&batch).unwrap();
    }
    writer.unwrap().close().unwrap();
    out
}

#[test]
fn a_huge_dp_rank_is_one_line_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let rows = straggler_artifact::ArtifactTrace::load(&data("trace-ST.parquet")).unwrap().rows();
    // A row of the last step: the first step (the template) stays intact.
    let trace = with_dp_rank(dir.path(), rows - 1, 2_000_000_000);
    let output = common::analyzer(&["what-if", "--straggler-artifact", trace.to_str().unwrap()]);
    common::assert_one_line_error(&output, "has no rows, but DP rank 2000000000 has (they must be 0..n)");
}

#[test]
fn damaged_artifact_traces_are_errors_never_panics() {
    let original = std::fs::read(data("trace-ST.parquet")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trace.parquet");
    let meta = JobMeta::default();
    // A fixed pseudo-random sequence of single-byte changes and truncations over the whole file.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let mut errors = 0;
    for trial in 0..150 {
        let mut bytes = original.clone();
        if trial % 5 == 0 {
            bytes.truncate(next(bytes.len()));
        } else {
            let at = next(bytes.len());
            bytes[at] ^= 1 + next(255) as u8;
        }
        std::fs::write(&file, &bytes).unwrap();
        let result = straggler_artifact::ArtifactTrace::load(&file)
            .and_then(|trace| straggler_artifact::StragglerModel::build(&trace, &meta).map(|_| ()));
        if let Err(error) = result {
            let error = error.to_string();
            assert!(error.starts_with(&file.display().to_string()), "{error}");
            assert_eq!(error.lines().count(), 1, "{error}");
            errors += 1;
        }
    }
    assert!(errors > 20, "damages are found: {errors} of 150");
}
