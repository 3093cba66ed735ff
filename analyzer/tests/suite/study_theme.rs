//! `analyzer study --chart-theme`: the study's charts and page follow the same theme option as `report`'s, light
//! unless dark is asked for; an unknown theme is refused. The stand-in workload copies the one-GPU sample to `{out}`.

use crate::common;

use common::{analyzer, repo_root};

#[test]
fn study_charts_and_page_are_light_unless_dark_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let sample = repo_root().join("sample-traces/tp1_nsys.sqlite.gz");
    let study = dir.path().join("theme.toml");
    let text = format!("command = \"cp {} {{out}}\"\nshell = true\n\n[grid]\nnproc = [1]\n", sample.display());
    std::fs::write(&study, text).unwrap();
    for (theme, page_background, chart_background) in
        [(None, "#ffffff", "#FFFFFF"), (Some("dark"), "#1b1b1b", "#1B1B1B")]
    {
        let out = dir.path().join(theme.unwrap_or("default"));
        let mut args = vec!["study", "--no-capture", "--out", out.to_str().unwrap(), study.to_str().unwrap()];
        args.extend(theme.iter().flat_map(|t| ["--chart-theme", *t]));
        let output = analyzer(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let page = std::fs::read_to_string(out.join("study.html")).unwrap();
        assert!(page.contains(&format!("background: {page_background}")), "{theme:?}: the page's background");
        let svg = &page[page.find("<svg").expect("a chart on the page")..];
        let first_fill = &svg[svg.find("fill=\"").unwrap() + 6..][..7];
        assert_eq!(first_fill, chart_background, "{theme:?}: the page's chart background");
        let charts: Vec<_> = std::fs::read_dir(out.join("charts")).unwrap().map(|e| e.unwrap().path()).collect();
        let svgs: Vec<_> = charts.iter().filter(|p| p.extension().is_some_and(|e| e == "svg")).collect();
        assert!(!svgs.is_empty(), "chart files written");
        for path in svgs {
            let svg = std::fs::read_to_string(path).unwrap();
            let first_fill = &svg[svg.find("fill=\"").unwrap() + 6..][..7];
            assert_eq!(first_fill, chart_background, "{theme:?}: {}", path.display());
        }
    }
    let output = analyzer(&["study", "--chart-theme", "sepia", study.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
}
