//! The HTML report of a bundled sample as a browser renders it: headless Chromium (or Chrome) parses the page,
//! every chart section holds its inline SVG with its marks, and the charts are drawn (pixels in the charts' colours,
//! each chart's SVG not a blank panel).
//!
//! Needs a Chromium-family browser on PATH (`chromium`, `chromium-browser`, `google-chrome`, `chrome`) when the crate
//! is built (`analyzer/build.rs` looks); without one `cargo test` lists the test as ignored with that reason.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{analyzer, repo_root};

const SAMPLE: &str = "sample-traces/tp2_full_capture.sqlite.gz";
/// The charts of the sample's page with `--model`, `--tokens` and `--bench`.
const CHARTS: [&str; 9] = [
    "shares",
    "step_times",
    "phase_times",
    "busbw",
    "wait_heatmap",
    "latency",
    "mfu",
    "layers_prefill",
    "layers_decode",
];
/// The light theme's background (the default), which a blank chart is all of.
const BACKGROUND: [u8; 3] = [255, 255, 255];

/// Runs the browser headless on `url` with `args`; returns stdout.
fn headless(browser: &Path, profile: &Path, args: &[&str], url: &str) -> Vec<u8> {
    let output = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("the browser runs");
    assert!(output.status.success(), "{}: {}", browser.display(), String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// 8-bit RGB pixels of a PNG (RGB or RGBA).
fn pixels(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let rgb = buffer[..info.buffer_size()].chunks(channels).map(|p| [p[0], p[1], p[2]]).collect();
    (info.width, info.height, rgb)
}

fn near(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 6)
}

#[test]
#[cfg_attr(not(headless_browser), ignore = "needs a headless Chromium on PATH (chromium, google-chrome, …)")]
fn a_headless_browser_renders_the_html_report_with_every_chart() {
    let Some(browser) = option_env!("SHARDSCOPE_BROWSER").map(PathBuf::from) else {
        panic!("no browser was on PATH when this test was built (see analyzer/build.rs)");
    };
    let dir = tempfile::tempdir().unwrap();
    let profile = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let charts = dir.path().join("charts");
    let output = analyzer(&[
        "report",
        "--skip-steps",
        "33",
        "--bench",
        repo_root().join("bench/results/h200x2.json").to_str().unwrap(),
        "--model",
        "layers=8,hidden=4096,ffn=11008,heads=32",
        "--tokens",
        "batch=4,seq=1024,decode_steps=32",
        "--html",
        html.to_str().unwrap(),
        "--charts",
        charts.to_str().unwrap(),
        repo_root().join(SAMPLE).to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let url = format!("file://{}", html.display());

    // The page as the browser parsed it: each chart's section with its SVG and the SVG's number-carrying marks.
    let dom = String::from_utf8(headless(&browser, profile.path(), &["--dump-dom"], &url)).unwrap();
    for name in CHARTS {
        let start = dom.find(&format!("id=\"chart-{name}\"")).unwrap_or_else(|| panic!("{name} is on the page"));
        let section = &dom[start..start + dom[start..].find("</section>").expect("section closes")];
        let svg = section.find("<svg").unwrap_or_else(|| panic!("{name}: inline SVG"));
        assert!(section[svg..].contains("</svg>"), "{name}: the SVG is whole");
        assert!(section.matches("class=\"mark\"").count() > 0, "{name}: marks");
    }
    assert!(!dom.contains("parsererror"), "the browser parsed every SVG");

    // The whole page drawn: the charts' colours are on screen.
    let shot = dir.path().join("page.png");
    let shot_arg = format!("--screenshot={}", shot.display());
    headless(&browser, profile.path(), &[&shot_arg, "--window-size=1400,9000"], &url);
    let (_, _, page) = pixels(&shot);
    let count = |color: [u8; 3]| page.iter().filter(|p| near(**p, color)).count();
    // gemm (shares), all-reduce transfer (shares), the heatmaps' hottest yellow.
    for (what, color) in
        [("gemm", [0x4e, 0x79, 0xa7]), ("comm.all_reduce", [0xe1, 0x57, 0x59]), ("heat", [253, 231, 37])]
    {
        assert!(count(color) > 500, "{what}: {} pixels of its colour on the page", count(color));
    }

    // Each chart on its own: not a blank panel.
    let size = regex::Regex::new(r#"<svg[^>]*width="(\d+)"[^>]*height="(\d+)""#).unwrap();
    for name in CHARTS {
        let svg = charts.join(format!("{name}.svg"));
        let text = std::fs::read_to_string(&svg).unwrap();
        let c = size.captures(&text).unwrap_or_else(|| panic!("{name}: size"));
        let shot = dir.path().join(format!("{name}.png"));
        let shot_arg = format!("--screenshot={}", shot.display());
        let window = format!("--window-size={},{}", &c[1], &c[2]);
        headless(&browser, profile.path(), &[&shot_arg, &window], &format!("file://{}", svg.display()));
        let (width, height, drawn) = pixels(&shot);
        let ink = drawn.iter().filter(|p| !near(**p, BACKGROUND)).count();
        let share = ink as f64 / f64::from(width * height);
        assert!(share > 0.01, "{name}: only {:.2} % of the pixels are drawn", 100.0 * share);
        // Axes, grid and text are grey; data is coloured. The legend column (190 px at the right) has coloured
        // swatches whatever the data, so only the plot area counts.
        let plot_width = width.saturating_sub(190) as usize;
        let data = drawn
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                (i % width as usize) < plot_width && p.iter().max().unwrap() - p.iter().min().unwrap() > 40
            })
            .count();
        assert!(data >= 60, "{name}: {data} coloured pixels in the plot area");
    }
}
