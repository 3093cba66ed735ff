//! The charts of `report --html` / `--charts`: every number drawn equals the JSON report's figure it comes from,
//! the HTML page loads nothing from anywhere, and the PNG charts of a bundled sample match committed images.
//!
//! After an intended change of the charts' look: `UPDATE_SNAPSHOTS=1 cargo test -p shardscope-analyzer --test
//! suite charts::` rewrites `analyzer/tests/snapshots/charts/*.png` (look at them before committing).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{analyzer, assert_one_line_error, repo_root};
use regex::Regex;
use serde_json::Value;

/// The bundled two-rank capture with the NCCL plugin's message sizes: every chart kind has data.
const SAMPLE: &str = "sample-traces/tp2_full_capture.sqlite.gz";
const BENCH: &str = "bench/results/h200x2.json";
const CHARTS: [&str; 5] = ["shares", "step_times", "phase_times", "busbw", "wait_heatmap"];

fn path(relative: &str) -> String {
    repo_root().join(relative).display().to_string()
}

fn json_of(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

/// The charts of the sample, drawn once into a temporary folder (SVG, PNG and the HTML page).
fn draw_sample(dir: &Path) -> PathBuf {
    let html = dir.join("report.html");
    let output = analyzer(&[
        "report",
        "--bench",
        &path(BENCH),
        "--html",
        html.to_str().unwrap(),
        "--charts",
        dir.to_str().unwrap(),
        &path(SAMPLE),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    html
}

/// One overlay element of a chart: its `data-*` attributes.
type Mark = BTreeMap<String, String>;

/// The overlay marks of an SVG document, by kind.
fn marks(svg: &str) -> Vec<Mark> {
    let element = Regex::new(r#"<rect class="mark"([^>]*)>"#).unwrap();
    let attribute = Regex::new(r#"data-([a-z_]+)="([^"]*)""#).unwrap();
    element
        .captures_iter(svg)
        .map(|c| {
            attribute.captures_iter(&c[1]).map(|a| (a[1].to_string(), unescape(&a[2]))).collect::<BTreeMap<_, _>>()
        })
        .collect()
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

fn number(mark: &Mark, key: &str) -> f64 {
    mark[key].parse().unwrap_or_else(|_| panic!("{key} of {mark:?} is a number"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The figures the charts draw of a rank: its steady state where warm-up steps were left out, else the whole run.
fn drawn_figures(rank: &Value) -> &Value {
    rank.get("steady_state").unwrap_or(rank)
}

/// Every figure of a set (whole rank or phase) and column label, from the JSON report.
fn figure_sets(report: &Value) -> Vec<(String, &Value)> {
    let mut sets = Vec::new();
    for rank in report["ranks"].as_array().unwrap() {
        let n = rank["rank"].as_u64().unwrap();
        sets.push((format!("r{n}"), drawn_figures(rank)));
        for (phase, figures) in drawn_figures(rank)["phases"].as_object().unwrap() {
            sets.push((format!("r{n} {phase}"), figures));
        }
    }
    sets
}

#[test]
fn every_number_drawn_equals_the_json_report() {
    let dir = tempfile::tempdir().unwrap();
    draw_sample(dir.path());
    let report = json_of(&["report", "--format", "json", "--bench", &path(BENCH), &path(SAMPLE)]);
    let collectives = json_of(&["collectives", "--format", "json", "--bench", &path(BENCH), &path(SAMPLE)]);

    // Shares: one bar segment per non-zero category of every rank and phase, with the report's nanoseconds, and
    // its height that category's share of the summed category time.
    let bars = marks(&read(dir.path(), "shares.svg"));
    let mut expected = BTreeSet::new();
    for (column, figures) in figure_sets(&report) {
        let categories = figures["categories"].as_object().unwrap();
        let total: i64 = categories.values().map(|v| v.as_i64().unwrap()).sum();
        for (label, ns) in categories {
            let ns = ns.as_i64().unwrap();
            if ns > 0 {
                expected.insert((column.clone(), label.clone()));
            }
            let Some(bar) = bars.iter().find(|m| m["column"] == column && m["series"] == *label) else { continue };
            assert_eq!(bar["ns"].parse::<i64>().unwrap(), ns, "{column} {label}");
            assert!(close(number(bar, "value"), 100.0 * ns as f64 / total as f64), "{column} {label}: {bar:?}");
        }
    }
    let drawn: BTreeSet<(String, String)> = bars.iter().map(|m| (m["column"].clone(), m["series"].clone())).collect();
    assert_eq!(drawn, expected, "one segment per non-zero category");
    assert!(drawn.iter().any(|(_, s)| s.starts_with("wait.")) && drawn.iter().any(|(_, s)| s.starts_with("comm.")));

    // Step times: p50 with the min–max spread, and p90, per rank, in ms.
    let points = marks(&read(dir.path(), "step_times.svg"));
    for rank in report["ranks"].as_array().unwrap() {
        let x = format!("r{}", rank["rank"]);
        let time = &rank["steps"]["time"];
        let ms = |key: &str| time[key].as_i64().unwrap() as f64 / 1e6;
        let p50 = points.iter().find(|m| m["x"] == x && m["series"].starts_with("step p50")).expect("p50 point");
        assert!(close(number(p50, "value"), ms("p50_ns")) && close(number(p50, "low"), ms("min_ns")));
        assert!(close(number(p50, "high"), ms("max_ns")), "{p50:?}");
        let p90 = points.iter().find(|m| m["x"] == x && m["series"] == "step p90").expect("p90 point");
        assert!(close(number(p90, "value"), ms("p90_ns")));
    }

    // Phase instance times.
    let points = marks(&read(dir.path(), "phase_times.svg"));
    let mut phase_points = 0;
    for rank in report["ranks"].as_array().unwrap() {
        let x = format!("r{}", rank["rank"]);
        for (phase, figures) in drawn_figures(rank)["phases"].as_object().unwrap() {
            let instances = &figures["instances"];
            let point = points.iter().find(|m| m["x"] == x && m["series"].starts_with(&format!("{phase} p50")));
            let point = point.unwrap_or_else(|| panic!("{x} {phase}"));
            assert!(close(number(point, "value"), instances["p50_ns"].as_i64().unwrap() as f64 / 1e6));
            assert!(close(number(point, "low"), instances["min_ns"].as_i64().unwrap() as f64 / 1e6));
            assert!(close(number(point, "high"), instances["max_ns"].as_i64().unwrap() as f64 / 1e6));
            phase_points += 1;
        }
    }
    assert_eq!(points.len(), phase_points);

    // Bus bandwidth: one point per matched instance with a size, at (bytes, busbw); bench's curve beside it.
    let marks_busbw = marks(&read(dir.path(), "busbw.svg"));
    let instances = collectives["instances"].as_array().unwrap();
    let mut expected: Vec<(u64, f64)> = instances
        .iter()
        .filter(|i| i["bytes"].is_u64() && i["busbw_gbps"].is_f64())
        .map(|i| (i["bytes"].as_u64().unwrap(), i["busbw_gbps"].as_f64().unwrap()))
        .collect();
    let mut drawn: Vec<(u64, f64)> = marks_busbw
        .iter()
        .filter(|m| m["kind"] == "point")
        .map(|m| (number(m, "x") as u64, number(m, "value")))
        .collect();
    expected.sort_by(|a, b| a.partial_cmp(b).unwrap());
    drawn.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert!(!expected.is_empty());
    assert_eq!(drawn.len(), expected.len());
    for (d, e) in drawn.iter().zip(&expected) {
        assert!(d.0 == e.0 && close(d.1, e.1), "{d:?} vs {e:?}");
    }
    let bench: Value = serde_json::from_str(&std::fs::read_to_string(path(BENCH)).unwrap()).unwrap();
    let curve: Vec<&Mark> = marks_busbw.iter().filter(|m| m["kind"] == "curve").collect();
    assert!(!curve.is_empty(), "bench's curve is drawn");
    for point in curve {
        let found = bench["collectives"].as_array().unwrap().iter().any(|c| {
            c["op"] == "all_reduce"
                && c["nranks"] == 2
                && c["bytes"].as_f64() == Some(number(point, "x"))
                && close(c["busbw_gbps"].as_f64().unwrap(), number(point, "value"))
        });
        assert!(found, "curve point {point:?} is a bench result");
    }

    // Waiting heatmap: rank × column, every instance in a column of consecutive instances (one each where they fit),
    // the cell the rank's largest wait among them, in µs.
    let cells = marks(&read(dir.path(), "wait_heatmap.svg"));
    let ranks: Vec<u64> = report["ranks"].as_array().unwrap().iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    let columns = cells.iter().map(|c| c["column"].parse::<usize>().unwrap()).max().unwrap() + 1;
    let per_column = instances.len().div_ceil(columns);
    assert!(instances.len() > 1000 && per_column > 1, "the sample's {} instances share columns", instances.len());
    assert_eq!(instances.len().div_ceil(per_column), columns, "every instance is drawn");
    assert_eq!(cells.len(), columns * ranks.len());
    for cell in &cells {
        let column: usize = cell["column"].parse().unwrap();
        let rank = cell["row"].trim_start_matches('r');
        let run = &instances[column * per_column..((column + 1) * per_column).min(instances.len())];
        let wait_ns = run.iter().filter_map(|i| i["rank_wait_ns"][rank].as_i64()).max().unwrap();
        assert!(close(number(cell, "value"), wait_ns as f64 / 1e3), "{cell:?} vs {wait_ns} ns");
    }
    // The JSON's own consistency: each instance's largest rank wait is its max_wait_ns.
    for instance in instances {
        let waits = instance["rank_wait_ns"].as_object().unwrap();
        assert_eq!(waits.values().map(|v| v.as_i64().unwrap()).max(), instance["max_wait_ns"].as_i64());
    }
}

#[test]
fn html_page_is_self_contained_and_holds_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let html = std::fs::read_to_string(draw_sample(dir.path())).unwrap();
    for name in CHARTS {
        let start = html.find(&format!("<section class=\"chart\" id=\"chart-{name}\">")).expect(name);
        let section = &html[start..start + html[start..].find("</section>").unwrap()];
        assert!(section.contains("<svg"), "{name} is inline SVG");
        assert!(!marks(section).is_empty(), "{name} draws something");
    }
    // Nothing to fetch: no scripts, no external references, no URLs other than the SVG namespace.
    let without_namespaces = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for forbidden in ["<script", " src=", "href=", "url(", "@import", "http://", "https://", "<?xml"] {
        assert!(!without_namespaces.contains(forbidden), "the page contains {forbidden}");
    }
    assert!(html.contains("Content-Security-Policy"));
}

#[test]
fn pages_and_charts_are_light_unless_dark_is_asked_for_and_fit_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let sample = path("sample-traces/tp2_skew_capture.sqlite.gz");
    for (theme, page_background, chart_background) in
        [(None, "#ffffff", "#FFFFFF"), (Some("dark"), "#1b1b1b", "#1B1B1B")]
    {
        let html = dir.path().join(format!("{}.html", theme.unwrap_or("default")));
        let mut args = vec!["report", "--html", html.to_str().unwrap(), &sample];
        args.extend(theme.iter().flat_map(|t| ["--chart-theme", *t]));
        let output = analyzer(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains(&format!("background: {page_background}")), "{theme:?}: the page's background");
        let svg = &page[page.find("<svg").unwrap()..];
        let first_fill = &svg[svg.find("fill=\"").unwrap() + 6..][..7];
        assert_eq!(first_fill, chart_background, "{theme:?}: the chart's background");
        // Charts scale down to the window; a wide table scrolls within its own box.
        assert!(page.contains("section.chart svg { display: block; width: 100%;"));
        assert!(page.contains("table { border-collapse: collapse; margin: 8px 0 20px; display: block; max-width: 100%; overflow-x: auto; }"));
        // Ranks are bars, each with its value written above it.
        let steps = &page[page.find("id=\"chart-step_times\"").unwrap()..];
        let steps = &steps[..steps.find("</section>").unwrap()];
        assert!(steps.contains("data-kind=\"bar\"") && !steps.contains("data-kind=\"point\""));
    }
    let output = analyzer(&["report", "--chart-theme", "sepia", "--html", "x.html", &sample]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn a_single_rank_gets_no_collective_charts_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("one.html");
    let output = analyzer(&["report", "--html", html.to_str().unwrap(), &path("sample-traces/tp1_nsys.sqlite.gz")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let page = std::fs::read_to_string(html).unwrap();
    assert!(page.contains("id=\"chart-shares\"") && !page.contains("id=\"chart-wait_heatmap\""));
    assert!(page.contains("no collective was matched"));
}

#[test]
fn an_unwritable_chart_folder_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let output = analyzer(&["report", "--charts", file.to_str().unwrap(), &path("sample-traces/tp1_nsys.sqlite.gz")]);
    // Charts are drawn before the report is printed: nothing on stdout, one line naming the folder.
    assert_one_line_error(&output, "a-file");
}

#[test]
fn png_charts_match_the_committed_images() {
    let dir = tempfile::tempdir().unwrap();
    draw_sample(dir.path());
    assert_match_committed_images(dir.path(), &CHARTS);
}

#[test]
fn llm_png_charts_match_the_committed_images() {
    let dir = tempfile::tempdir().unwrap();
    draw_llm(dir.path(), "33");
    assert_match_committed_images(dir.path(), &["latency", "mfu", "layers_prefill", "layers_decode"]);
}

/// Compares each `NAME.png` drawn into `dir` with `analyzer/tests/snapshots/charts/NAME.png`
/// (`UPDATE_SNAPSHOTS=1` rewrites them).
fn assert_match_committed_images(dir: &Path, names: &[&str]) {
    let snapshots = repo_root().join("analyzer/tests/snapshots/charts");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| !v.is_empty() && v != "0");
    for name in names {
        let drawn = std::fs::read(dir.join(format!("{name}.png"))).unwrap();
        let golden_path = snapshots.join(format!("{name}.png"));
        if update {
            std::fs::create_dir_all(&snapshots).unwrap();
            std::fs::write(&golden_path, &drawn).unwrap();
            continue;
        }
        let golden = std::fs::read(&golden_path).unwrap_or_else(|e| {
            panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", golden_path.display());
        });
        let (w0, h0, a) = common::decode_png(&drawn);
        let (w1, h1, b) = common::decode_png(&golden);
        assert_eq!((w0, h0), (w1, h1), "{name}: size");
        // Anti-aliasing may differ by a few levels between builds; a pixel counts as changed beyond 24 levels,
        // and at most 0.5 % of pixels may change.
        let changed = a.chunks(3).zip(b.chunks(3)).filter(|(p, q)| p.iter().zip(*q).any(|(x, y)| x.abs_diff(*y) > 24));
        let changed = changed.count();
        let allowed = (w0 * h0) as usize / 200;
        if changed > allowed {
            let out = std::env::temp_dir().join(format!("shardscope-chart-{name}.png"));
            let _ = std::fs::write(&out, &drawn);
            panic!("{name}: {changed} pixels differ (at most {allowed}); drawn: {}", out.display());
        }
    }
}

#[test]
fn drawing_charts_leaves_the_printed_report_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let plain = analyzer(&["report", "--format", "json", &path(SAMPLE)]);
    let with_html = analyzer(&["report", "--format", "json", "--html", html.to_str().unwrap(), &path(SAMPLE)]);
    assert!(plain.status.success() && with_html.status.success());
    assert_eq!(plain.stdout, with_html.stdout);
    assert!(html.is_file());
}

/// `--model` and `--tokens` with the shape and configuration the full sample was recorded with.
const FULL_MODEL: &str = "layers=8,hidden=4096,ffn=11008,heads=32,dtype=bf16";
const FULL_TOKENS: &str = "batch=4,seq=1024,decode_steps=32";

fn draw_llm(dir: &Path, skip: &str) -> Value {
    let output = analyzer(&[
        "report",
        "--skip-steps",
        skip,
        "--bench",
        &path(BENCH),
        "--model",
        FULL_MODEL,
        "--tokens",
        FULL_TOKENS,
        "--html",
        dir.join("report.html").to_str().unwrap(),
        "--charts",
        dir.to_str().unwrap(),
        &path(SAMPLE),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(&read(dir, "llm.json")).unwrap()
}

#[test]
fn latency_mfu_and_layer_charts_draw_the_figures_of_llm_json() {
    let dir = tempfile::tempdir().unwrap();
    let llm = draw_llm(dir.path(), "33");
    let ms = |v: &Value| v.as_i64().unwrap() as f64 / 1e6;

    // Latency: per phase, p50 with the min–max spread and p90, of the slowest rank after the warm-up.
    let points = marks(&read(dir.path(), "latency.svg"));
    let latency = llm["latency"].as_array().unwrap();
    assert_eq!(latency.len(), 2);
    assert_eq!(points.len(), 2 * latency.len());
    for l in latency {
        let x = if l["phase"] == "prefill" { "TTFT (prefill)" } else { "TPOT (decode)" };
        let t = &l["time"];
        let p50 = points.iter().find(|m| m["x"] == x && m["series"].starts_with("p50")).unwrap();
        assert!(close(number(p50, "value"), ms(&t["p50_ns"])) && close(number(p50, "low"), ms(&t["min_ns"])));
        assert!(close(number(p50, "high"), ms(&t["max_ns"])));
        let p90 = points.iter().find(|m| m["x"] == x && m["series"] == "p90").unwrap();
        assert!(close(number(p90, "value"), ms(&t["p90_ns"])));
        // 3 timed passes of 1 prefill and 32 decode steps each, on every rank.
        assert_eq!(t["count"], if l["phase"] == "prefill" { 3 } else { 96 });
    }

    // MFU: one point per phase at llm.json's figure, which is achieved ÷ (peak × GPUs) of its own numbers.
    let points = marks(&read(dir.path(), "mfu.svg"));
    let mfu = llm["mfu"].as_array().unwrap();
    assert_eq!(points.len(), mfu.len());
    for m in mfu {
        let phase = m["phase"].as_str().unwrap();
        let point = points.iter().find(|p| p["x"] == phase).unwrap();
        let pct = m["mfu_pct"].as_f64().unwrap();
        assert!(close(number(point, "value"), pct));
        assert!(pct > 0.0 && pct <= 100.0, "{phase}: {pct}");
        let time_s = m["instance_p50_ns"].as_f64().unwrap() * 1e-9;
        let achieved = m["flops_per_instance"].as_f64().unwrap() / time_s / 1e12;
        assert!(close(achieved, m["achieved_tflops"].as_f64().unwrap()));
        let peak = m["peak"]["tflops"].as_f64().unwrap();
        assert!(close(pct, 100.0 * achieved / (peak * m["gpus"].as_f64().unwrap())));
        // The time is the latency chart's p50 of the phase.
        let l = latency.iter().find(|l| l["phase"] == phase).unwrap();
        assert_eq!(m["instance_p50_ns"], l["time"]["p50_ns"]);
    }
    let bench: Value = serde_json::from_str(&std::fs::read_to_string(path(BENCH)).unwrap()).unwrap();
    assert_eq!(mfu[0]["peak"]["tflops"], bench["peaks"]["gemm_bf16_tflops"], "bench's measured bf16 GEMM peak");

    // Layers: one heatmap per phase, op × layer, the mean kernel time in µs.
    for table in llm["layers"].as_array().unwrap() {
        let phase = table["phase"].as_str().unwrap();
        let cells = marks(&read(dir.path(), &format!("layers_{phase}.svg")));
        let ops: Vec<&str> = table["ops"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
        let rows = table["time_ns"].as_array().unwrap();
        assert_eq!(rows.len(), 8, "{phase}: the reference workload's 8 layers");
        assert_eq!(cells.len(), 8 * ops.len());
        for cell in &cells {
            let layer: usize = cell["column"].parse().unwrap();
            let op = ops.iter().position(|o| *o == cell["row"]).unwrap();
            assert!(close(number(cell, "value"), rows[layer][op].as_i64().unwrap() as f64 / 1e3), "{cell:?}");
        }
    }
}

#[test]
fn without_warm_up_left_out_the_llm_figures_are_the_json_reports() {
    let dir = tempfile::tempdir().unwrap();
    let llm = draw_llm(dir.path(), "0");
    let report = json_of(&["report", "--format", "json", &path(SAMPLE)]);
    for l in llm["latency"].as_array().unwrap() {
        let phase = l["phase"].as_str().unwrap();
        // The slowest rank's instance distribution is the report's `phases.<phase>.instances` of that rank.
        let rank = report["ranks"].as_array().unwrap().iter().find(|r| r["rank"] == l["rank"]).unwrap();
        assert_eq!(l["time"], rank["phases"][phase]["instances"], "{phase}");
        let slowest = report["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["phases"][phase]["instances"]["p50_ns"].as_i64().unwrap())
            .max()
            .unwrap();
        assert_eq!(l["time"]["p50_ns"].as_i64(), Some(slowest));
    }
    // The layers' GEMM time adds up to the phase's GEMM time in the report (per instance, all ranks).
    for table in llm["layers"].as_array().unwrap() {
        if table["instances_left_out"] != 0 {
            continue;
        }
        let phase = table["phase"].as_str().unwrap();
        let gemm = table["ops"].as_array().unwrap().iter().position(|o| o == "gemm").unwrap();
        let per_instance: i64 = table["time_ns"].as_array().unwrap().iter().map(|r| r[gemm].as_i64().unwrap()).sum();
        let summed: i64 = report["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["phases"][phase]["categories"]["gemm"].as_i64().unwrap())
            .sum();
        let expected = summed as f64 / table["instances"].as_f64().unwrap();
        assert!((per_instance as f64 - expected).abs() <= 8.0, "{phase}: {per_instance} vs {expected}");
    }
}

#[test]
fn model_options_without_charts_or_with_a_bad_shape_are_refused() {
    let sample = path("sample-traces/tp1_nsys.sqlite.gz");
    // The findings read them too: only a report without findings and charts refuses them.
    let output = analyzer(&["report", "--no-findings", "--model", FULL_MODEL, "--tokens", FULL_TOKENS, &sample]);
    assert_one_line_error(&output, "--html or --charts");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let output =
        analyzer(&["report", "--html", html.to_str().unwrap(), "--model", "layers=8", "--tokens", "batch=1", &sample]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("parameters"));
}
