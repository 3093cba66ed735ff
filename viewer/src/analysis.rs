//! The one place where the viewer asks the analyzer for op categories and per-rank figures.
//!
//! Panels never call `shardscope_analyzer` directly: they use [`Categories`] to colour and
//! label kernels and [`analyze_window`] for the figures of a time range, so the figures the
//! viewer shows are by construction the ones `analyzer report` prints (same classifier, same
//! phase pattern, same definitions of busy, communication and exposed time). The viewer's
//! `--rules` and `--phase-pattern` are the analyzer's, and reach it through [`Categories`].

use std::path::Path;

use regex::Regex;
use shardscope_analyzer::figures::categories::{CategoryId as AnalyzerCategoryId, Classifier};
use shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN;
use shardscope_analyzer::llm::steps::DEFAULT_STEP_PATTERN;
use shardscope_analyzer::report::{Figures, Options, PHASES_INFERRED, analyze};
use shardscope_model::Trace;

/// Index of an op category in [`Categories::names`].
pub type CategoryId = u16;

/// The analyzer's settings the viewer shows figures with: the op-category rules (which also
/// give each category its colour) and the phase pattern.
#[derive(Debug, Clone)]
pub struct Categories {
    classifier: Classifier,
    phase_pattern: Regex,
    /// The analyzer's default step pattern (the viewer has no option for it).
    step_pattern: Regex,
}

impl Categories {
    /// The analyzer's built-in rules and default phase pattern.
    pub fn builtin() -> Categories {
        Categories {
            classifier: Classifier::builtin(),
            phase_pattern: Regex::new(DEFAULT_PHASE_PATTERN).expect("the default phase pattern is valid"),
            step_pattern: default_step_pattern(),
        }
    }

    /// A rules file (the built-in rules when `None`) and a phase pattern, as `analyzer report
    /// --rules FILE --phase-pattern REGEX` takes them; the error is one line.
    pub fn from_options(rules: Option<&Path>, phase_pattern: &str) -> Result<Categories, String> {
        let classifier = match rules {
            Some(path) => Classifier::load(path).map_err(|e| e.to_string())?,
            None => Classifier::builtin(),
        };
        let phase_pattern = Regex::new(phase_pattern)
            .map_err(|e| format!("--phase-pattern: {}", e.to_string().lines().last().unwrap_or("")))?;
        Ok(Categories { classifier, phase_pattern, step_pattern: default_step_pattern() })
    }

    /// The colour of a category or of a report label (`comm.<type>` takes communication's): the
    /// rules file's, else one derived from the name.
    pub fn color_rgb(&self, label: &str) -> Option<[u8; 3]> {
        let id = if label.starts_with("comm.") {
            self.classifier.communication()?
        } else {
            AnalyzerCategoryId(self.classifier.categories().iter().position(|c| c == label)? as u16)
        };
        self.classifier.color(id)
    }

    /// The category of a kernel name.
    pub fn classify(&self, kernel_name: &str) -> CategoryId {
        self.classifier.classify(kernel_name).category.0
    }

    /// The name of a category.
    pub fn name(&self, id: CategoryId) -> &str {
        self.classifier.categories().get(usize::from(id)).map_or("other", String::as_str)
    }

    /// All category names, in id order.
    pub fn names(&self) -> &[String] {
        self.classifier.categories()
    }

    /// True for the communication category.
    pub fn is_communication(&self, id: CategoryId) -> bool {
        self.classifier.is_communication(AnalyzerCategoryId(id))
    }

    /// The analyzer classifier behind these categories.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// The phase pattern.
    pub fn phase_pattern(&self) -> &Regex {
        &self.phase_pattern
    }

    /// The step pattern.
    pub fn step_pattern(&self) -> &Regex {
        &self.step_pattern
    }

    /// The analyzer's options with these settings, for `window_ns`.
    pub fn options(&self, window_ns: Option<(i64, i64)>) -> Options {
        Options {
            classifier: self.classifier.clone(),
            phase_pattern: self.phase_pattern.clone(),
            step_pattern: self.step_pattern.clone(),
            window_ns,
            ..Options::default()
        }
    }
}

fn default_step_pattern() -> Regex {
    Regex::new(DEFAULT_STEP_PATTERN).expect("the default step pattern is valid")
}

/// Figures for one rank over a time window, as the panels show them.
#[derive(Debug, Clone, PartialEq)]
pub struct RankFigures {
    /// What the panels call this rank, e.g. `rank 3`.
    pub label: String,
    /// The analyzer's rank number.
    pub rank: u32,
    /// First to last GPU activity inside the window.
    pub span_ns: i64,
    /// Union of kernel, copy and set intervals.
    pub gpu_busy_ns: i64,
    /// Union of communication-kernel intervals.
    pub comm_ns: i64,
    /// Communication time that no compute kernel overlaps.
    pub exposed_comm_ns: i64,
    /// Share of communication time overlapped by compute, in percent.
    pub comm_comp_overlap_pct: f64,
    /// Kernel time per category label (`gemm`, `comm.all_reduce`, …), largest first.
    pub categories: Vec<(String, i64)>,
    /// Category time within each phase.
    pub phases: Vec<PhaseFigures>,
}

/// Category shares inside one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseFigures {
    /// Phase name.
    pub name: String,
    /// Time per category label.
    pub categories: Vec<(String, i64)>,
}

fn sorted_categories(figures: &Figures) -> Vec<(String, i64)> {
    let mut categories: Vec<(String, i64)> =
        figures.categories.iter().filter(|(_, ns)| **ns > 0).map(|(name, ns)| (name.clone(), *ns)).collect();
    categories.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    categories
}

/// Per-rank figures of `traces`, limited to `window_ns` (start, end) when given, computed by
/// `shardscope_analyzer::report::analyze` with its default options and `categories`' rules.
pub fn analyze_window(traces: &[Trace], categories: &Categories, window_ns: Option<(i64, i64)>) -> Vec<RankFigures> {
    analyze_window_with_verdict(traces, categories, window_ns).0
}

/// [`analyze_window`] and the report's late-rank verdict for the same window (the sentence `analyzer report`
/// prints under its summary).
pub fn analyze_window_with_verdict(
    traces: &[Trace],
    categories: &Categories,
    window_ns: Option<(i64, i64)>,
) -> (Vec<RankFigures>, String) {
    let report = analyze(traces, &categories.options(window_ns));
    let verdict = shardscope_analyzer::output::summary::late_rank_verdict(&report);
    let ranks = report
        .ranks
        .iter()
        .map(|rank| {
            let mut label = format!("rank {}", rank.rank);
            if rank.device != rank.rank || !rank.rank_recorded {
                label.push_str(&format!(" · GPU {}", rank.device));
            }
            RankFigures {
                label,
                rank: rank.rank,
                span_ns: rank.figures.span_ns,
                gpu_busy_ns: rank.figures.gpu_busy_ns,
                comm_ns: rank.figures.comm_ns,
                exposed_comm_ns: rank.figures.exposed_comm_ns,
                comm_comp_overlap_pct: rank.figures.comm_comp_overlap_pct,
                categories: sorted_categories(&rank.figures),
                phases: rank
                    .phases
                    .iter()
                    .map(|phase| PhaseFigures {
                        // Phases found from the kernel pattern, not recorded ranges, say so as the report does.
                        name: if phase.source == PHASES_INFERRED {
                            format!("{} (inferred)", phase.name)
                        } else {
                            phase.name.clone()
                        },
                        categories: sorted_categories(&phase.figures),
                    })
                    .collect(),
            }
        })
        .collect();
    (ranks, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{SyntheticSpec, generate};

    #[test]
    fn figures_follow_the_rules_and_phase_pattern_given() {
        let traces = generate(SyntheticSpec::default());
        let phase_names = |categories: &Categories| -> Vec<String> {
            analyze_window(&traces, categories, None)[0].phases.iter().map(|p| p.name.clone()).collect()
        };
        assert_eq!(phase_names(&Categories::builtin()), ["prefill", "decode"]);
        let decode_only = Categories::from_options(None, "^(decode)$").unwrap();
        assert_eq!(phase_names(&decode_only), ["decode"]);

        // A rules file of one category: every kernel that is not NCCL's is `other`, coloured as given.
        let dir = std::env::temp_dir().join(format!("viewer-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = dir.join("rules.toml");
        std::fs::write(
            &rules,
            "[[rule]]\ncategory = \"communication\"\npattern = '^nccl'\n\n[[category]]\nname = \"other\"\ncolor = \"#010203\"\n",
        )
        .unwrap();
        let mine = Categories::from_options(Some(&rules), "^(decode)$").unwrap();
        let figures = &analyze_window(&traces, &mine, None)[0];
        let labels: Vec<&str> = figures.categories.iter().map(|(label, _)| label.as_str()).collect();
        assert!(labels.iter().all(|l| *l == "other" || l.starts_with("comm.") || l.starts_with("wait.")), "{labels:?}");
        assert_eq!(mine.color_rgb("other"), Some([1, 2, 3]));
        assert_eq!(mine.color_rgb("comm.all_reduce"), None, "no colour given for communication");
        assert_eq!(Categories::builtin().color_rgb("comm.all_reduce"), Some([0xe1, 0x57, 0x59]));
        assert!(Categories::from_options(None, "(").unwrap_err().starts_with("--phase-pattern"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn phases_found_without_ranges_are_labelled_inferred() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/kineto_tp2");
        let traces = shardscope_io::load(&path).expect("the bundled Kineto sample loads");
        let names: Vec<String> =
            analyze_window(&traces, &Categories::builtin(), None)[0].phases.iter().map(|p| p.name.clone()).collect();
        assert!(!names.is_empty(), "the sample's phases are inferred");
        assert!(names.iter().all(|n| n.ends_with(" (inferred)")), "{names:?}");
    }
}
