//! Every `analyzer` command in the command blocks of README.md and of the `docs/` pages it links runs, on the
//! committed samples: a documented command that no longer parses, or that fails on the input it describes, fails
//! this test.
//!
//! The README's placeholder files (`run.sqlite`, `rank0.json.gz`, ...) stand for samples under `sample-traces/`
//! ([`PLACEHOLDERS`]); each block runs in order in one scratch folder, so that a file one line writes (`out/`,
//! `my-categories.toml`) is there for the next, as for a reader who types them. Commands of other programs
//! (`capture`, `nsys`, `cargo`) and the few `analyzer` commands that need a GPU are listed in [`NOT_RUN`] with the
//! reason: a new README command that is in neither fails the test until it runs or is listed.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::repo_root;

/// README placeholder → committed sample (relative to the repository root) it stands for. Longest first, so that
/// `tp1.sqlite` is not read as `1.sqlite`; matched as whole words.
const PLACEHOLDERS: [(&str, &str); 11] = [
    ("rank0.json.gz", "sample-traces/kineto_tp2/rank0.pt.trace.json.gz"),
    ("rank1.json.gz", "sample-traces/kineto_tp2/rank1.pt.trace.json.gz"),
    ("trace-ST.parquet", "analyzer/tests/data/straggler-artifact/trace-ST.parquet"),
    ("meta-ST.yaml", "analyzer/tests/data/straggler-artifact/meta-ST.yaml"),
    ("decode.sqlite", "sample-traces/modules/qwen3_eager.sqlite.gz"),
    ("run.sqlite", "sample-traces/tp2_skew_capture.sqlite.gz"),
    ("tp1.sqlite", "sample-traces/tp1_capture.sqlite.gz"),
    ("tp2.sqlite", "sample-traces/tp2_capture.sqlite.gz"),
    ("a.sqlite", "sample-traces/tp1_capture.sqlite.gz"),
    ("b.sqlite", "sample-traces/tp2_capture.sqlite.gz"),
    ("traces/", "sample-traces/kineto_tp2/"),
];

/// Repository files the README names by their path from the root.
const REPO_PATHS: [&str; 2] = ["bench/results/", "workloads/"];

/// Command lines of the README's blocks that are not run here (matched by their start), and why.
const NOT_RUN: [(&str, &str); 13] = [
    ("analyzer study ", "runs the study's GPU workload"),
    ("analyzer report --format json ../shared/", "the HTA comparison's input; tests/suite/hta.rs checks these figures"),
    ("capture ", "records a CUDA workload: needs a GPU"),
    ("nsys ", "NVIDIA's tool"),
    ("cargo test ", "the test suite itself"),
    ("cargo install ", "release builds into ~/.cargo/bin"),
    ("cargo build --locked --release", "a release build"),
    ("install -m 755 ", "copies that release build into ~/.cargo/bin"),
    ("cargo run --release -p shardscope-viewer", "opens a window; the viewer's tests render it headless"),
    ("viewer ", "opens a window or renders with a Vulkan driver; the viewer's tests render it headless"),
    ("python3 -m venv /tmp/hta", "installs HTA from PyPI"),
    ("/tmp/hta/bin/python ", "runs HTA"),
    ("python3 scripts/compare_hta.py", "compares with HTA's output"),
];

/// README.md and the pages of `docs/` it links (`](docs/NAME.md)`), in the README's order.
fn documentation() -> Vec<(String, String)> {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut linked: Vec<String> = Vec::new();
    for link in readme.split("](docs/").skip(1) {
        let Some(name) = link.split(')').next().filter(|n| n.ends_with(".md")) else { continue };
        let path = format!("docs/{name}");
        if !linked.contains(&path) {
            linked.push(path);
        }
    }
    let pages = linked.into_iter().map(|path| {
        let text = std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        (path, text)
    });
    std::iter::once(("README.md".to_string(), readme)).chain(pages).collect()
}

/// The command lines of the plain (no language) fenced blocks of the README and its `docs/` pages, block by block,
/// without comments.
fn readme_blocks() -> Vec<Vec<String>> {
    let pages = documentation();
    assert!(pages.len() > 1, "the README links its docs pages");
    pages.iter().flat_map(|(_, text)| command_blocks(text)).collect()
}

/// The command lines of one Markdown text's plain fenced blocks.
fn command_blocks(readme: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    // Inside a fence: `Some(plain)`, and the plain block's lines.
    let (mut inside, mut block): (Option<bool>, Vec<String>) = (None, Vec::new());
    // Blocks indented under a list item count too.
    for line in readme.lines().map(str::trim) {
        match (inside, line.strip_prefix("```")) {
            (None, Some(tag)) => inside = Some(tag.is_empty()),
            (Some(plain), Some(_)) => {
                if plain && !block.first().is_some_and(|first| first.starts_with('{')) {
                    blocks.push(std::mem::take(&mut block));
                }
                block.clear();
                inside = None;
            }
            (Some(true), None) => {
                let command = line.split("  #").next().unwrap_or(line).trim();
                if !command.is_empty() {
                    block.push(command.to_string());
                }
            }
            _ => {}
        }
    }
    blocks
}

/// `command` with the placeholders replaced by absolute sample paths.
fn with_samples(command: &str, root: &Path) -> String {
    let words: Vec<String> = command
        .split(' ')
        .map(|word| {
            let sample = PLACEHOLDERS.iter().find(|(placeholder, _)| word == *placeholder);
            let repo_path = REPO_PATHS.iter().any(|prefix| word.starts_with(prefix));
            match sample {
                Some((_, sample)) => root.join(sample).display().to_string(),
                None if repo_path => root.join(word).display().to_string(),
                None => word.to_string(),
            }
        })
        .collect();
    words.join(" ")
}

#[test]
fn every_analyzer_command_of_the_readme_runs_on_the_samples() {
    let root = repo_root();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_analyzer")).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut ran = 0;
    for block in readme_blocks() {
        let scratch = tempfile::tempdir().unwrap();
        // The rules file `--rules my-categories.toml` edits, made as the README says further down.
        let rules = Command::new(env!("CARGO_BIN_EXE_analyzer")).arg("rules").output().unwrap();
        std::fs::write(scratch.path().join("my-categories.toml"), rules.stdout).unwrap();
        for line in block {
            if NOT_RUN.iter().any(|(start, _)| line.starts_with(start)) {
                continue;
            }
            assert!(line.starts_with("analyzer "), "README command neither run nor listed in NOT_RUN: {line}");
            let command = with_samples(&line, &root);
            let output =
                Command::new("sh").arg("-c").arg(&command).current_dir(scratch.path()).env("PATH", &path).output();
            let output = output.unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "README: {line}\nran: {command}\n{stderr}");
            assert!(!stderr.contains("panicked"), "README: {line}\n{stderr}");
            ran += 1;
        }
    }
    // 25 lines in the usage block less `analyzer study`, 7 under "Critical path and what-if", the artifact, and
    // `analyzer report` of the set-up block.
    assert!(ran >= 33, "only {ran} README commands ran");
}

#[test]
fn the_not_run_list_names_only_commands_the_readme_has() {
    let lines: Vec<String> = readme_blocks().into_iter().flatten().collect();
    for (start, why) in NOT_RUN {
        assert!(lines.iter().any(|line| line.starts_with(start)), "NOT_RUN lists `{start}` ({why}): not in README");
    }
}
