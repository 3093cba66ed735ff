//! `analyzer study` with a stand-in workload: a shell command that copies the bundled one- or two-GPU sample trace
//! to `{out}` depending on `nproc`. Checks the grid, a failing point and resumption, the run under a stand-in
//! `capture`, the figures against `analyzer report`, the charts against `study.json`, and bad study files.

use crate::common;

use std::path::{Path, PathBuf};

use common::{analyzer, assert_one_line_error, repo_root};
use regex::Regex;
use serde_json::Value;

/// The stand-in workload: appends its point to `runs.log`, fails with status 3 for nproc=2 SEQ=512 unless the
/// file `fixed` exists, and otherwise writes the sample trace of its GPU count to `{out}`.
fn study_text(dir: &Path, extra: &str) -> String {
    let samples = repo_root().join("sample-traces");
    format!(
        r#"command = "echo {{point}} >> {log}; if [ {{nproc}} = 2 ] && [ {{SEQ}} = 512 ] && [ ! -e {fixed} ]; then exit 3; fi; cp {samples}/tp{{nproc}}_nsys.sqlite.gz {{out}}"
shell = true
warmup_steps = 2
{extra}
[grid]
nproc = [1, 2]
SEQ = [128, 512]

[env]
SEQ = "{{SEQ}}"
"#,
        log = dir.join("runs.log").display(),
        fixed = dir.join("fixed").display(),
        samples = samples.display(),
    )
}

fn write_study(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("fake.toml");
    std::fs::write(&path, study_text(dir, extra)).unwrap();
    path
}

fn run(args: &[&str]) -> std::process::Output {
    let output = analyzer(args);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn study_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("fake-study/study.json")).unwrap()).unwrap()
}

fn runs_logged(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runs.log")).unwrap_or_default().lines().map(str::to_string).collect()
}

fn point<'a>(study: &'a Value, id: &str) -> &'a Value {
    study["points"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap_or_else(|| panic!("point {id}"))
}

#[test]
fn a_failed_point_is_recorded_the_study_goes_on_and_a_second_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let study = write_study(dir.path(), "");
    run(&["study", "--no-capture", study.to_str().unwrap()]);
    assert_eq!(runs_logged(dir.path()).len(), 4, "every point ran once");
    let results = study_json(dir.path());
    let failed = point(&results, "SEQ-512_nproc-2_r0");
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["run"]["exit_code"], 3);
    assert!(failed["figures"].is_null());
    for id in ["SEQ-128_nproc-1_r0", "SEQ-128_nproc-2_r0", "SEQ-512_nproc-1_r0"] {
        assert_eq!(point(&results, id)["status"], "ok", "{id}");
    }
    assert_eq!(point(&results, "SEQ-128_nproc-2_r0")["figures"]["ranks"], 2);
    let html = std::fs::read_to_string(dir.path().join("fake-study/study.html")).unwrap();
    assert!(html.contains("failed: exit status 3"));

    // Second run: only the failed point runs again; the finished ones are kept.
    std::fs::write(dir.path().join("fixed"), "").unwrap();
    run(&["study", "--no-capture", study.to_str().unwrap()]);
    let runs = runs_logged(dir.path());
    assert_eq!(runs.len(), 5, "{runs:?}");
    assert_eq!(runs[4], "SEQ-512_nproc-2_r0");
    let results = study_json(dir.path());
    assert!(results["points"].as_array().unwrap().iter().all(|p| p["status"] == "ok"));
    // Scaling from 1 to 2 GPUs for each SEQ, from the medians of the step times.
    let scaling = results["scaling"].as_array().unwrap();
    assert_eq!(scaling.len(), 2);
    for s in scaling {
        let base = s["base_step_ns"].as_f64().unwrap();
        let step = s["step_ns"].as_f64().unwrap();
        assert!((s["speedup"].as_f64().unwrap() - base / step).abs() < 1e-9);
        assert!((s["efficiency_pct"].as_f64().unwrap() - 100.0 * base / step / 2.0).abs() < 1e-9);
    }
}

#[test]
fn point_figures_are_the_reports_figures_and_the_charts_draw_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fixed"), "").unwrap();
    let study = write_study(dir.path(), "");
    run(&["study", "--no-capture", study.to_str().unwrap()]);
    let results = study_json(dir.path());
    let trace = repo_root().join("sample-traces/tp2_nsys.sqlite.gz");
    let report = analyzer(&["report", "--format", "json", "--skip-steps", "2", trace.to_str().unwrap()]);
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let figures = &point(&results, "SEQ-128_nproc-2_r0")["figures"];
    let ranks = report["ranks"].as_array().unwrap();
    let slowest_p50 = ranks.iter().map(|r| r["steps"]["time"]["p50_ns"].as_i64().unwrap()).max();
    assert_eq!(figures["step_p50_ns"].as_i64(), slowest_p50);
    let wait: i64 = ranks.iter().map(|r| r["comm_wait_ns"].as_i64().unwrap()).sum();
    assert_eq!(figures["comm_wait_ns"].as_i64(), Some(wait));
    for (label, ns) in figures["categories_ns"].as_object().unwrap() {
        let summed: i64 = ranks.iter().map(|r| r["categories"][label].as_i64().unwrap_or(0)).sum();
        assert_eq!(ns.as_i64(), Some(summed), "{label}");
    }

    // The step time chart against nproc draws, per SEQ, the step p50 of each point in ms.
    let svg = std::fs::read_to_string(dir.path().join("fake-study/charts/step_time_vs_nproc.svg")).unwrap();
    let mark = Regex::new(r#"data-series="([^"]*)" data-x="([^"]*)" data-value="([^"]*)""#).unwrap();
    let mut drawn = 0;
    for c in mark.captures_iter(&svg) {
        let seq = c[1].strip_prefix("SEQ=").unwrap();
        let id = format!("SEQ-{seq}_nproc-{}_r0", &c[2]);
        let p50 = point(&results, &id)["figures"]["step_p50_ns"].as_f64().unwrap();
        assert!((c[3].parse::<f64>().unwrap() - p50 / 1e6).abs() < 1e-9, "{id}");
        drawn += 1;
    }
    assert_eq!(drawn, 4);
    // Scaling efficiency: the baseline at 100 %, the larger count at study.json's figure.
    let svg = std::fs::read_to_string(dir.path().join("fake-study/charts/scaling_efficiency.svg")).unwrap();
    for s in results["scaling"].as_array().unwrap() {
        let series = s["config"].as_str().unwrap();
        let found = mark
            .captures_iter(&svg)
            .find(|c| &c[1] == series && c[2].parse::<u64>().ok() == s["gpus"].as_u64())
            .unwrap();
        assert!((found[3].parse::<f64>().unwrap() - s["efficiency_pct"].as_f64().unwrap()).abs() < 1e-9);
    }
    // Communication and exposed communication against nproc: per SEQ, each point's share of the summed GPU time
    // (one repetition, so the median is the point's own figure).
    let svg = std::fs::read_to_string(dir.path().join("fake-study/charts/comm_vs_gpus.svg")).unwrap();
    let mut drawn = 0;
    for c in mark.captures_iter(&svg) {
        let (config, what) = c[1].rsplit_once(' ').unwrap();
        let seq = config.strip_prefix("SEQ=").unwrap();
        let figures = &point(&results, &format!("SEQ-{seq}_nproc-{}_r0", &c[2]))["figures"];
        let categories = figures["categories_ns"].as_object().unwrap();
        let total: i64 = categories.values().map(|v| v.as_i64().unwrap()).sum();
        let part = match what {
            "communication" => categories
                .iter()
                .filter(|(label, _)| label.starts_with("comm.") || label.starts_with("wait."))
                .map(|(_, v)| v.as_i64().unwrap())
                .sum::<i64>(),
            "exposed" => figures["exposed_comm_ns"].as_i64().unwrap(),
            other => panic!("unexpected series {other}"),
        };
        assert!((c[3].parse::<f64>().unwrap() - 100.0 * part as f64 / total as f64).abs() < 1e-9, "{}", &c[1]);
        drawn += 1;
    }
    assert_eq!(drawn, 8, "2 SEQ × 2 nproc × (communication, exposed)");
    let html = std::fs::read_to_string(dir.path().join("fake-study/study.html")).unwrap();
    for chart in
        ["step_time_vs_nproc", "step_time_vs_SEQ", "shares", "all_reduce_share", "scaling_efficiency", "comm_vs_gpus"]
    {
        assert!(html.contains(&format!("id=\"chart-{chart}\"")), "{chart}");
        assert!(dir.path().join(format!("fake-study/charts/{chart}.png")).is_file(), "{chart}.png");
    }
    assert!(!html.contains("<script") && !html.contains("src="));
}

#[test]
fn points_run_under_capture_by_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fixed"), "").unwrap();
    // A stand-in for `capture -o OUT --force -- COMMAND…`: runs the command, then writes the trace itself, as the
    // real one would; the workload's `{out}` is then not used.
    let capture = dir.path().join("capture");
    std::fs::write(
        &capture,
        format!(
            "#!/bin/sh\n[ \"$1\" = -o ] || exit 64\nout=$2\nshift 2\n[ \"$1\" = --force ] && shift\n[ \"$1\" = -- ] || exit 65\n\
             shift\n\"$@\" || exit $?\necho \"$out\" >> {}\n",
            dir.path().join("captured.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&capture, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let study = write_study(dir.path(), "");
    run(&["study", "--capture", capture.to_str().unwrap(), study.to_str().unwrap()]);
    let captured = std::fs::read_to_string(dir.path().join("captured.log")).unwrap();
    assert_eq!(captured.lines().count(), 4);
    assert!(captured.lines().all(|l| l.ends_with(".sqlite") && l.contains("fake-study/points/")));
    let results = study_json(dir.path());
    assert!(results["points"].as_array().unwrap().iter().all(|p| p["status"] == "ok"));
}

#[test]
fn bad_study_files_are_one_line_naming_the_file_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 8] = [
        ("command = \"run\"\nbench = \"nowhere.json\"\n[grid]\nSEQ = [1]\n", "nowhere.json not found"),
        ("command = \"run {SEQ} {BATCH}\"\n[grid]\nSEQ = [1]\n", "unknown parameter {BATCH}"),
        ("command = \"run {SEQ\"\n[grid]\nSEQ = [1]\n", "unclosed"),
        ("command = \"run\"\n[grid]\n", "names no parameter"),
        ("command = \"run\"\n[grid]\nSEQ = []\n", "has no values"),
        ("command = \"run\"\ncolour = 1\n[grid]\nSEQ = [1]\n", "colour"),
        ("command = \"run\"\n[grid]\nnproc = [0, 2]\n", "positive integers"),
        ("command = \"run\"\n[env]\nX = \"{NOPE}\"\n[grid]\nSEQ = [1]\n", "env X: unknown parameter {NOPE}"),
    ];
    for (index, (text, cause)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{index}.toml"));
        std::fs::write(&path, text).unwrap();
        let output = analyzer(&["study", "--no-capture", path.to_str().unwrap()]);
        assert_one_line_error(&output, &format!("bad{index}.toml"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(cause), "{cause}: {stderr}");
    }
    let missing = dir.path().join("missing.toml");
    assert_one_line_error(&analyzer(&["study", missing.to_str().unwrap()]), "missing.toml");
    assert!(!dir.path().join("bad0-study").exists(), "nothing runs for a bad file");
}

#[test]
fn the_committed_example_study_of_the_reference_workload_is_valid() {
    // Nothing is run (`--analyse-only`): the file is checked and every point is listed as not run.
    let dir = tempfile::tempdir().unwrap();
    let example = repo_root().join("workloads/tp_llm.study.toml");
    run(&["study", "--analyse-only", "--out", dir.path().to_str().unwrap(), example.to_str().unwrap()]);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("study.json")).unwrap()).unwrap();
    let points = results["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * 2 * 2, "nproc × SEQ × repetitions");
    assert!(points.iter().all(|p| p["status"] == "not_run"));
    assert_eq!(results["file"]["model"]["layers"], 8);
}

#[test]
fn a_run_that_exits_0_without_a_trace_is_a_failed_point() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.toml");
    std::fs::write(&path, "command = \"echo no trace for {SEQ}\"\n[grid]\nSEQ = [1]\n").unwrap();
    run(&["study", "--no-capture", path.to_str().unwrap()]);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("empty-study/study.json")).unwrap()).unwrap();
    let point = &results["points"][0];
    assert_eq!(point["status"], "failed");
    assert!(point["run"]["error"].as_str().unwrap().contains("wrote no trace"), "{point}");
    let log = std::fs::read_to_string(dir.path().join("empty-study/points/SEQ-1_r0.log")).unwrap();
    assert_eq!(log, "no trace for 1\n", "the run's output is kept in its log");
}

/// The shape and tokens of the bundled samples (LAYERS=2 BATCH=2 SEQ=256 DECODE=8), with a datasheet peak.
const SAMPLE_MODEL: &str = r#"
[model]
layers = 2
hidden = 4096
ffn = 11008
heads = 32
peak_tflops = 989

[tokens]
batch = "{BATCH}"
seq = "256"
decode_steps = "8"
"#;

fn marks_of(svg: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let element = Regex::new(r#"<rect class="mark"([^>]*)>"#).unwrap();
    let attribute = Regex::new(r#"data-([a-z_]+)="([^"]*)""#).unwrap();
    element
        .captures_iter(svg)
        .map(|c| attribute.captures_iter(&c[1]).map(|a| (a[1].to_string(), a[2].replace("&amp;", "&"))).collect())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn latency_mfu_shares_and_layers_are_in_study_json_and_drawn_from_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fixed"), "").unwrap();
    let study = dir.path().join("fake.toml");
    // BATCH comes from [env]: [tokens] may name it.
    let text = study_text(dir.path(), "").replace("[env]\n", "[env]\nBATCH = \"2\"\n") + SAMPLE_MODEL;
    std::fs::write(&study, text).unwrap();
    let output = run(&["study", "--no-capture", study.to_str().unwrap()]);
    let results = study_json(dir.path());
    let txt = std::fs::read_to_string(dir.path().join("fake-study/study.txt")).unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), txt, "the tables printed are study.txt");
    for title in ["Latency per configuration", "Op shares per configuration and phase", "Scaling", "MFU per phase"] {
        assert!(txt.contains(title), "{title}: {txt}");
    }
    // Scaling of the time to first token and per output token: from the single repetition's p50 on 1 and 2 GPUs.
    for s in results["scaling"].as_array().unwrap() {
        let seq = s["config"].as_str().unwrap().strip_prefix("SEQ=").unwrap();
        for phase in ["prefill", "decode"] {
            let p50 = |nproc: u32| {
                let f = &point(&results, &format!("SEQ-{seq}_nproc-{nproc}_r0"))["figures"];
                let l = f["latency"].as_array().unwrap().iter().find(|l| l["phase"] == phase).unwrap();
                l["time"]["p50_ns"].as_f64().unwrap()
            };
            let scaled = &s["phases"][phase];
            assert_eq!(scaled["base_ns"].as_f64(), Some(p50(1)), "{phase}");
            assert_eq!(scaled["ns"].as_f64(), Some(p50(2)), "{phase}");
            assert!(close(scaled["speedup"].as_f64().unwrap(), p50(1) / p50(2)));
            assert!(close(scaled["efficiency_pct"].as_f64().unwrap(), 100.0 * p50(1) / p50(2) / 2.0));
        }
    }
    let charts = dir.path().join("fake-study/charts");
    let svg = |name: &str| marks_of(&std::fs::read_to_string(charts.join(format!("{name}.svg"))).unwrap());
    let (layers, hidden, ffn) = (2.0, 4096.0, 11008.0);
    let weights = layers * (4.0 * hidden * hidden + 3.0 * hidden * ffn);
    let ttft = svg("ttft_vs_nproc");
    let tpot = svg("tpot_vs_SEQ");
    let mfu_marks = svg("mfu");
    let layer_marks = svg("layers_prefill");
    let share_marks = svg("phase_shares");
    for p in results["points"].as_array().unwrap() {
        let f = &p["figures"];
        let (seq, nproc) = (p["params"]["SEQ"].as_str().unwrap(), p["params"]["nproc"].as_str().unwrap());
        let config = format!("SEQ={seq} nproc={nproc}");
        let latency = |phase: &str| f["latency"].as_array().unwrap().iter().find(|l| l["phase"] == phase).unwrap();
        let ms = |v: &Value| v.as_f64().unwrap() / 1e6;
        // Time to first token against nproc (one line per SEQ) and per output token against SEQ (one per nproc).
        let prefill = &latency("prefill")["time"];
        let point = ttft.iter().find(|m| m["series"] == format!("SEQ={seq}") && m["x"] == nproc).unwrap();
        assert!(close(point["value"].parse().unwrap(), ms(&prefill["p50_ns"])), "{point:?}");
        assert!(close(point["high"].parse().unwrap(), ms(&prefill["p90_ns"])));
        let decode = &latency("decode")["time"];
        let point = tpot.iter().find(|m| m["series"] == format!("nproc={nproc}") && m["x"] == seq).unwrap();
        assert!(close(point["value"].parse().unwrap(), ms(&decode["p50_ns"])));
        assert!(decode["count"].as_u64().unwrap() > 0);

        // MFU: the formula of the README on this point's own numbers, and the chart's point.
        for m in f["mfu"].as_array().unwrap() {
            let phase = m["phase"].as_str().unwrap();
            let (tokens, context) = if phase == "prefill" { (512.0, 128.5) } else { (2.0, 256.0 + 4.5) };
            let flops = tokens * (2.0 * weights + 4.0 * layers * hidden * context);
            assert!(close(m["flops_per_instance"].as_f64().unwrap(), flops), "{phase}");
            assert_eq!(m["instance_p50_ns"], latency(phase)["time"]["p50_ns"]);
            let achieved = flops / ms(&m["instance_p50_ns"]) / 1e9;
            let gpus: f64 = nproc.parse().unwrap();
            let pct = m["mfu_pct"].as_f64().unwrap();
            assert!(close(pct, 100.0 * achieved / (989.0 * gpus)) && pct <= 100.0, "{phase}: {pct}");
            assert_eq!(m["peak"]["kind"], "datasheet");
            let point = mfu_marks.iter().find(|k| k["x"] == config && k["series"] == format!("{phase} MFU")).unwrap();
            assert!(close(point["value"].parse().unwrap(), pct));
        }
        assert_eq!(f["mfu"].as_array().unwrap().len(), 2);

        // Layers: 2 per instance; the heatmap draws each layer's summed op time, µs.
        let table = f["layers"].as_array().unwrap().iter().find(|l| l["phase"] == "prefill").unwrap();
        assert_eq!(table["layers"], 2);
        for (layer, row) in table["time_ns"].as_array().unwrap().iter().enumerate() {
            let total: i64 = row.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).sum();
            let cell = layer_marks.iter().find(|m| m["row"] == config && m["column"] == layer.to_string()).unwrap();
            assert!(close(cell["value"].parse().unwrap(), total as f64 / 1e3), "{cell:?}");
        }

        // Op shares per phase: each bar carries the phase's summed nanoseconds.
        for (phase, categories) in f["phase_categories_ns"].as_object().unwrap() {
            for (label, ns) in categories.as_object().unwrap() {
                let column = format!("{config} · {phase}");
                let bar = share_marks.iter().find(|m| m["column"] == column && m["series"] == *label);
                if ns.as_i64().unwrap() > 0 {
                    assert_eq!(bar.unwrap()["ns"], ns.to_string(), "{column} {label}");
                }
            }
        }
    }
}

#[test]
fn tokens_need_a_model_and_known_placeholders() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("command = \"run\"\n[grid]\nSEQ = [1]\n[tokens]\nbatch = \"4\"\n", "without `[model]`"),
        (
            "command = \"run\"\n[grid]\nSEQ = [1]\n[model]\nparameters = 1e9\n[tokens]\nbatch = \"{B}\"\n",
            "tokens batch",
        ),
        ("command = \"run\"\n[grid]\nSEQ = [1]\n[model]\nlayers = 8\n", "model: the model needs"),
    ];
    for (index, (text, cause)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("tokens{index}.toml"));
        std::fs::write(&path, text).unwrap();
        let output = analyzer(&["study", "--no-capture", path.to_str().unwrap()]);
        assert_one_line_error(&output, &format!("tokens{index}.toml"));
        assert!(String::from_utf8_lossy(&output.stderr).contains(cause), "{cause}");
    }
}

#[test]
fn the_example_studys_tokens_follow_each_points_sequence_length() {
    let example = repo_root().join("workloads/tp_llm.study.toml");
    let study = shardscope_analyzer::study::Study::load(&example, None).unwrap();
    assert_eq!(study.points.len(), 8, "2 GPU counts × 2 sequence lengths × 2 repetitions: within the time budget");
    for point in &study.points {
        let tokens = study.tokens(point).unwrap().expect("[tokens]");
        let seq: f64 = point.params["SEQ"].parse().unwrap();
        assert_eq!((tokens.batch, tokens.seq, tokens.decode_steps), (4.0, Some(seq), Some(32.0)), "{}", point.id);
    }
    let model = study.file.model.as_ref().unwrap();
    // tp_llm.py's defaults: 8 × (4·4096² + 3·4096·11008) weights.
    assert_eq!(model.weights(), Some(8.0 * (4.0 * 4096.0f64.powi(2) + 3.0 * 4096.0 * 11008.0)));
}

#[test]
fn a_huge_grid_or_repetition_count_is_refused_before_anything_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<String> = (0..100).map(|v| v.to_string()).collect();
    let grid: String = (0..8).map(|p| format!("P{p} = [{}]\n", values.join(", "))).collect();
    let cases = [
        (format!("command = \"run\"\n[grid]\n{grid}"), "more than 10000 runs"),
        ("command = \"run\"\nrepetitions = 4294967295\n[grid]\nSEQ = [1]\n".to_string(), "4294967295 repetitions"),
    ];
    for (index, (text, cause)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("huge{index}.toml"));
        std::fs::write(&path, text).unwrap();
        let started = std::time::Instant::now();
        let output = analyzer(&["study", "--analyse-only", path.to_str().unwrap()]);
        assert_one_line_error(&output, &format!("huge{index}.toml"));
        assert!(String::from_utf8_lossy(&output.stderr).contains(cause));
        assert!(started.elapsed().as_secs() < 30, "refused at once");
    }
}

#[test]
fn a_value_is_one_argument_and_never_read_by_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let hostile = format!("x' ; touch {} ; echo '", marker.display());
    let path = dir.path().join("args.toml");
    // printf writes each argument on its own line: the value must come out whole, quotes and all.
    std::fs::write(
        &path,
        format!(
            "command = \"printf '%s\\\\n' '{{X}}' {{X}}\"\n[grid]\nX = [{}]\n",
            toml::Value::from(hostile.as_str())
        ),
    )
    .unwrap();
    let output = analyzer(&["study", "--no-capture", path.to_str().unwrap()]);
    assert!(!marker.exists(), "the value ran as a command: {}", String::from_utf8_lossy(&output.stderr));
    let logs: Vec<_> = std::fs::read_dir(dir.path().join("args-study/points"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert_eq!(log, format!("{hostile}\n{hostile}\n"));
    // Shell syntax without `shell = true` is refused; with it, a placeholder inside the template's quotes is.
    for (text, cause) in [
        ("command = \"run {X} > log\"\n[grid]\nX = [1]\n", "shell = true"),
        ("command = \"run '{X}'\"\nshell = true\n[grid]\nX = [1]\n", "inside quotes"),
    ] {
        std::fs::write(&path, text).unwrap();
        let output = analyzer(&["study", "--analyse-only", path.to_str().unwrap()]);
        assert_one_line_error(&output, "args.toml");
        assert!(String::from_utf8_lossy(&output.stderr).contains(cause), "{cause}");
    }
}

#[test]
fn outputs_stay_inside_the_study_folder_and_never_follow_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let study_dir = dir.path().join("study");
    std::fs::create_dir(&study_dir).unwrap();
    let path = study_dir.join("s.toml");
    for output in ["/tmp/elsewhere", "../outside"] {
        std::fs::write(&path, format!("command = \"run\"\noutput = \"{output}\"\n[grid]\nX = [1]\n")).unwrap();
        let result = analyzer(&["study", "--analyse-only", path.to_str().unwrap()]);
        assert_one_line_error(&result, "s.toml");
        assert!(String::from_utf8_lossy(&result.stderr).contains("inside the study file's folder"));
    }
    // A link shipped inside the study folder, where the charts go.
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(&path, "command = \"run\"\n[grid]\nX = [1]\n").unwrap();
    std::fs::create_dir(study_dir.join("s-study")).unwrap();
    std::os::unix::fs::symlink(&victim, study_dir.join("s-study/charts")).unwrap();
    let result = analyzer(&["study", "--analyse-only", path.to_str().unwrap()]);
    assert_one_line_error(&result, "charts");
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "nothing written through the link");
}

#[test]
fn secrets_in_the_command_and_env_stay_out_of_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.toml");
    std::fs::write(
        &path,
        "command = \"sh -c 'echo run --api-key=sk-abcdefghijkl HF_TOKEN=hf_abcdefghijkl {X}'\"\n\
         [env]\nHF_TOKEN = \"hf_abcdefghijklmnop\"\nEXTRA = \"--token=zq9qsecretvalue\"\n[grid]\nX = [1]\n",
    )
    .unwrap();
    let output = analyzer(&["study", "--no-capture", path.to_str().unwrap()]);
    assert!(output.status.code().is_some(), "{}", String::from_utf8_lossy(&output.stderr));
    for file in ["secret-study/study.json", "secret-study/study.html", "secret-study/points/X-1_r0.status.json"] {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        for secret in ["sk-abcdefghijkl", "hf_abcdefghijkl", "zq9qsecretvalue"] {
            assert!(!text.contains(secret), "{file} holds {secret}");
        }
        assert!(text.contains("redacted"), "{file}");
    }
}

#[test]
fn a_pipe_in_place_of_a_status_file_does_not_block_the_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, "command = \"run\"\n[grid]\nX = [1]\n").unwrap();
    let points = dir.path().join("s-study/points");
    std::fs::create_dir_all(&points).unwrap();
    let fifo = points.join("X-1_r0.status.json");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["study", "--analyse-only", path.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the analysis blocked on the pipe");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s-study/study.json")).unwrap()).unwrap();
    assert_eq!(results["points"][0]["status"], "not_run");
}
