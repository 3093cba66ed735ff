//! The crate graph points one way, and nothing links a library that is loaded into the workload.
//!
//! [`ALLOWED`] is the layering of `ARCHITECTURE.md` as data: for every crate of the workspace, the
//! workspace crates it may depend on (normal and build dependencies). The test reads the real
//! graph from `cargo metadata` and fails on
//!
//! - a dependency the table does not allow (an upward edge, or any new edge nobody placed),
//! - a dependency of any kind, tests included, on a crate that builds a `cdylib` (the injection
//!   library and the NCCL plugin are loaded into the workload, never linked by shardscope),
//! - a workspace crate missing from the table, or a table that is not layered (has a cycle).
//!
//! The checker is also run on fabricated graphs with a back edge and a link to a `cdylib`, so a
//! checker that lets those through fails too.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each workspace crate and the workspace crates it may depend on, lowest layer first.
const ALLOWED: &[(&str, &[&str])] = &[
    ("shardscope-model", &[]),
    ("shardscope-spool", &[]),
    ("shardscope-cupti-sys", &[]),
    ("shardscope-bench", &[]),
    ("shardscope-io", &["shardscope-model"]),
    ("shardscope", &["shardscope-model", "shardscope-io"]),
    ("shardscope-analyzer", &["shardscope-model", "shardscope-io", "shardscope", "shardscope-bench"]),
    ("shardscope-viewer", &["shardscope-model", "shardscope-io", "shardscope-analyzer"]),
    // The Python extension module: a leaf over the analyzer, like the viewer. It compiles `analyzer`'s command line
    // in (its `analyzer` command), so it has that binary's dependencies, the Perfetto exporter among them.
    ("shardscope-python", &["shardscope-model", "shardscope-io", "shardscope", "shardscope-analyzer"]),
    ("shardscope-capture", &["shardscope-model", "shardscope-io", "shardscope-spool"]),
    // Loaded into the workload (cdylib): leaves that only know the spool format.
    ("shardscope-inject", &["shardscope-spool", "shardscope-cupti-sys"]),
    ("shardscope-nccl-profiler", &["shardscope-spool"]),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DepKind {
    Normal,
    Build,
    Dev,
}

#[derive(Debug, Clone)]
struct Crate {
    name: String,
    /// Workspace crates it depends on.
    deps: Vec<(String, DepKind)>,
    /// Whether its library target is a `cdylib`.
    cdylib: bool,
}

/// Everything wrong with `crates` against `allowed`, one line each.
fn violations(crates: &[Crate], allowed: &[(&str, &[&str])]) -> Vec<String> {
    let mut problems = Vec::new();
    let table: BTreeMap<&str, &[&str]> = allowed.iter().copied().collect();
    let cdylibs: BTreeSet<&str> = crates.iter().filter(|c| c.cdylib).map(|c| c.name.as_str()).collect();
    if let Some(cycle_at) = first_cycle(&table) {
        problems.push(format!("the allowed-dependency table has a cycle through {cycle_at}"));
    }
    for krate in crates {
        let Some(may_use) = table.get(krate.name.as_str()) else {
            problems.push(format!("{}: not in the allowed-dependency table (place it in a layer)", krate.name));
            continue;
        };
        for (dep, kind) in &krate.deps {
            if cdylibs.contains(dep.as_str()) {
                problems.push(format!(
                    "{} → {dep} ({kind:?}): {dep} is loaded into the workload (cdylib) and must not be linked",
                    krate.name
                ));
            } else if *kind != DepKind::Dev && !may_use.contains(&dep.as_str()) {
                problems.push(format!("{} → {dep}: not allowed (an upward or unplaced dependency)", krate.name));
            }
        }
    }
    problems
}

/// A crate on a cycle of the table, if there is one.
fn first_cycle(table: &BTreeMap<&str, &[&str]>) -> Option<String> {
    fn visit<'a>(
        name: &'a str,
        table: &BTreeMap<&'a str, &'a [&'a str]>,
        on_path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if on_path.contains(&name) {
            return Some(name.to_string());
        }
        if !done.insert(name) {
            return None;
        }
        on_path.push(name);
        for dep in table.get(name).copied().unwrap_or(&[]) {
            if let Some(found) = visit(dep, table, on_path, done) {
                return Some(found);
            }
        }
        on_path.pop();
        None
    }
    let mut done = BTreeSet::new();
    table.keys().find_map(|name| visit(name, table, &mut Vec::new(), &mut done))
}

/// The workspace's crates and their workspace dependencies, from `cargo metadata`.
fn workspace_crates() -> Vec<Crate> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["name"].as_str().is_some_and(|n| names.contains(n)))
                .map(|d| {
                    let kind = match d["kind"].as_str() {
                        Some("dev") => DepKind::Dev,
                        Some("build") => DepKind::Build,
                        _ => DepKind::Normal,
                    };
                    (d["name"].as_str().unwrap_or_default().to_string(), kind)
                })
                .collect();
            let cdylib = package["targets"].as_array().expect("targets").iter().any(|target| {
                target["crate_types"].as_array().is_some_and(|types| types.iter().any(|t| t == "cdylib"))
            });
            Crate { name: package["name"].as_str().unwrap_or_default().to_string(), deps, cdylib }
        })
        .collect()
}

#[test]
fn the_workspace_depends_only_downward_and_links_no_cdylib() {
    let crates = workspace_crates();
    assert!(crates.len() >= ALLOWED.len(), "cargo metadata listed {} crates", crates.len());
    let problems = violations(&crates, ALLOWED);
    assert!(problems.is_empty(), "dependency rules broken:\n{}", problems.join("\n"));
    // The cdylibs are the two in-workload libraries and the Python extension module (loaded by Python, never linked
    // either), and the table has no stale entries.
    let cdylibs: Vec<&str> = crates.iter().filter(|c| c.cdylib).map(|c| c.name.as_str()).collect();
    assert_eq!(cdylibs, ["shardscope-inject", "shardscope-nccl-profiler", "shardscope-python"]);
    for (name, _) in ALLOWED {
        assert!(crates.iter().any(|c| c.name == *name), "{name} is in the table but not in the workspace");
    }
}

fn fabricated(edits: &[(&str, &str, DepKind)]) -> Vec<Crate> {
    let mut crates: Vec<Crate> = ALLOWED
        .iter()
        .map(|(name, deps)| Crate {
            name: name.to_string(),
            deps: deps.iter().map(|d| (d.to_string(), DepKind::Normal)).collect(),
            cdylib: matches!(*name, "shardscope-inject" | "shardscope-nccl-profiler"),
        })
        .collect();
    for (from, to, kind) in edits {
        crates.iter_mut().find(|c| c.name == *from).expect("a crate of the table").deps.push((to.to_string(), *kind));
    }
    crates
}

#[test]
fn the_checker_catches_a_back_edge_a_linked_cdylib_and_an_unplaced_crate() {
    assert_eq!(violations(&fabricated(&[]), ALLOWED), Vec::<String>::new(), "the table itself passes");

    let back_edge = violations(&fabricated(&[("shardscope-model", "shardscope-io", DepKind::Normal)]), ALLOWED);
    assert_eq!(back_edge, ["shardscope-model → shardscope-io: not allowed (an upward or unplaced dependency)"]);
    let reader_on_analyzer =
        violations(&fabricated(&[("shardscope-io", "shardscope-analyzer", DepKind::Build)]), ALLOWED);
    assert_eq!(reader_on_analyzer.len(), 1, "{reader_on_analyzer:?}");

    // The launcher linking the injection library, even only for its tests.
    for kind in [DepKind::Normal, DepKind::Dev] {
        let linked = violations(&fabricated(&[("shardscope-capture", "shardscope-inject", kind)]), ALLOWED);
        assert_eq!(linked.len(), 1, "{linked:?}");
        assert!(linked[0].contains("must not be linked"), "{}", linked[0]);
    }

    let mut with_new_crate = fabricated(&[]);
    with_new_crate.push(Crate { name: "shardscope-new".into(), deps: Vec::new(), cdylib: false });
    assert_eq!(violations(&with_new_crate, ALLOWED).len(), 1);

    let cyclic: &[(&str, &[&str])] = &[("a", &["b"]), ("b", &["c"]), ("c", &["a"])];
    assert!(violations(&[], cyclic)[0].contains("cycle"));
}

/// The viewer's modules that build on the timeline (its overlays, panels, loading and the app): the timeline
/// (`viewer/src/timeline/`) names none of them, so that its files and theirs form no circle.
const ABOVE_THE_TIMELINE: [&str; 7] = [
    "crate::critical",
    "crate::ideal",
    "crate::panels",
    "crate::collectives",
    "crate::load",
    "crate::app",
    "crate::screenshot",
];

/// The lines of `text` that name one of `above`, as `file:line: text`.
fn upward_uses(file: &str, text: &str, above: &[&str]) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| above.iter().any(|module| line.contains(module)))
        .map(|(n, line)| format!("{file}:{}: {}", n + 1, line.trim()))
        .collect()
}

#[test]
fn the_viewer_timeline_uses_nothing_that_builds_on_it() {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("viewer/src/timeline");
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            files += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            found.extend(upward_uses(&path.display().to_string(), &text, &ABOVE_THE_TIMELINE));
        }
    }
    assert!(files >= 5, "the timeline's files are where this test looks");
    assert!(found.is_empty(), "the timeline uses modules that use it:\n{}", found.join("\n"));
    // The check itself: a use of the critical-path module is found.
    let fabricated = "use crate::critical::PathOverlay;\n// crate::ideal in a comment is fine\n";
    assert_eq!(upward_uses("x.rs", fabricated, &ABOVE_THE_TIMELINE).len(), 1);
}
