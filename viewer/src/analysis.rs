//! The one place where the viewer asks the analyzer for op categories and per-rank figures.
//!
//! Panels never call `shardscope_analyzer` directly: they use [`Categories`] to colour and
//! label kernels and [`analyze_window`] for the figures of a time range, so the figures the
//! viewer shows are by construction the ones `analyzer report` prints (same classifier, same
//! phase pattern, same definitions of busy, communication and exposed time).

use shardscope_analyzer::categories::{CategoryId as AnalyzerCategoryId, Classifier};
use shardscope_analyzer::report::{Figures, Options, analyze};
use shardscope_model::Trace;

/// Index of an op category in [`Categories::names`].
pub type CategoryId = u16;

/// Classifies kernel names into the analyzer's op categories.
#[derive(Debug, Clone)]
pub struct Categories {
    classifier: Classifier,
}

impl Categories {
    /// The analyzer's built-in rules.
    pub fn builtin() -> Categories {
        Categories { classifier: Classifier::builtin() }
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
    let options = Options { classifier: categories.classifier().clone(), window_ns, ..Options::default() };
    let report = analyze(traces, &options);
    report
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
                        name: phase.name.clone(),
                        categories: sorted_categories(&phase.figures),
                    })
                    .collect(),
            }
        })
        .collect()
}
