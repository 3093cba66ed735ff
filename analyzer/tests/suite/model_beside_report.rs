//! The findings' model built beside the report, as soon as every rank's steps are found
//! (`critical_path::report_and_steady_model`, here from any size of run), is the model built after the whole
//! report: the same report, the same steps, notes and excluded work, and the same findings, on the sample traces (one
//! and two ranks, a capture in two windows, Kineto), on ranks given out of rank order, with warm-up steps given, and
//! on a run with no GPU work. Where the report's ranks are the model's, the model is built on the report's collective
//! matching, which is the model's own but for the phases it names; where they are not, on a matching of its own.

use crate::common;

use common::repo_root;
use shardscope_analyzer::dependency::critical_path::{self, Model, ModelError};
use shardscope_analyzer::figures::collectives::{Instance, Matching, RankShare};
use shardscope_analyzer::findings::{self, rules::FindingsRules};
use shardscope_analyzer::output::render;
use shardscope_analyzer::report::{self, Options};
use shardscope_model::Trace;

/// What a model gives the findings, as text: its window, steps, notes and left-out work, its ranks (in order) and
/// counts, each operation's rank, and the findings on it.
fn model_words(traces: &[Trace], report: &report::Report, model: &Result<Model, ModelError>) -> String {
    match model {
        Err(e) => format!("no model: {e}"),
        Ok(model) => {
            let found = findings::findings_of_model(traces, report, model, None, &FindingsRules::builtin());
            let found = serde_json::to_string_pretty(&found).expect("findings serialise");
            let graph = &model.graph;
            let op_ranks: Vec<u32> = graph.ops.iter().map(|op| op.rank_index).collect();
            format!(
                "window {:?} steps {:?} step {:?}\nnotes {:?}\nexcluded {:?}\nranks {:?}\nstats {:?}\nop ranks {:?}\n{found}",
                model.window_ns,
                model.steps,
                model.step,
                model.notes,
                model.excluded,
                graph.ranks,
                graph.stats,
                op_ranks
            )
        }
    }
}

/// Builds the model after the report and beside it (width 0 and no fewest events: side by side on any pool and run)
/// and compares the two.
fn check(name: &str, traces: &[Trace], options: &Options) {
    let report = report::analyze(traces, options);
    let matching = critical_path::model_matching(traces, options);
    let after = critical_path::build_steady_model_matched(traces, options, &report, matching);
    let (beside_report, beside) = critical_path::report_and_steady_model_from(traces, options, 0, 0);
    assert!(render::json(&beside_report) == render::json(&report), "{name}: the report made beside the model differs");
    // A report as wide as the pool leaves no worker for the model: then the model comes after it, on its matching.
    let (then_report, then) = critical_path::report_and_steady_model_from(traces, options, usize::MAX, 0);
    assert!(render::json(&then_report) == render::json(&report), "{name}: the report made before the model differs");
    let after = model_words(traces, &report, &after);
    let (beside, then) = (model_words(traces, &report, &beside), model_words(traces, &report, &then));
    assert_eq!(beside, after, "{name}: the model built beside the report differs from the one built after it");
    assert_eq!(then, after, "{name}: the model built on the report's matching differs from the one built after it");
}

#[test]
fn the_model_beside_the_report_is_the_model_after_it_on_the_samples() {
    let dir = repo_root().join("sample-traces");
    for name in [
        "tp1_capture.sqlite.gz",
        "tp2_nsys.sqlite.gz",
        "tp2_skew_capture.sqlite.gz",
        "engines/hf_server_static_2windows.sqlite.gz",
        "engines/jax_blocks.sqlite.gz",
        "kineto_tp2",
    ] {
        let traces = shardscope_io::load(&dir.join(name)).expect("sample trace loads");
        check(name, &traces, &Options::default());
        check(name, &traces, &Options { skip_steps: 2, detect_warmup: false, ..Options::default() });
    }
}

#[test]
fn ranks_given_out_of_order_are_modelled_in_rank_order() {
    // Four one-rank files given last rank first: the steps are told in the report's rank order, not input order.
    let mut traces = crate::parallel_report::one_rank_traces(4, 12);
    traces.reverse();
    for (i, trace) in traces.iter_mut().enumerate() {
        trace.source.path = format!("rank-file-{i}.sqlite");
    }
    check("four ranks, last first", &traces, &Options::default());
}

#[test]
fn a_run_without_gpu_work_has_no_model_either_way() {
    let traces = vec![Trace::default()];
    let (_, beside) = critical_path::report_and_steady_model_from(&traces, &Options::default(), 0, 0);
    assert!(matches!(beside, Err(ModelError::NoGpu)), "{:?}", beside.as_ref().err());
    check("no GPU work", &traces, &Options::default());
}

/// A matching's instances without their phases, its shares in key order, and its counts: what a model reads of it.
fn matching_words(matching: &Matching) -> String {
    let instances: Vec<Instance> = matching.instances.iter().map(|i| Instance { phase: None, ..i.clone() }).collect();
    let mut shares: Vec<(&(usize, u32), &RankShare)> = matching.shares.iter().collect();
    shares.sort_by_key(|(key, _)| **key);
    format!(
        "{instances:?}\n{shares:?}\nunmatched {} aligned {} spread {:?}",
        matching.unmatched_kernels, matching.clocks_aligned, matching.end_spread_median_ns
    )
}

/// The model built beside the report on `traces`, checked against the one after it; whether its matching names
/// phases (then it is the report's: the model's own matching names none), which must otherwise be the model's own.
fn beside_names_phases(name: &str, traces: &[Trace]) -> bool {
    check(name, traces, &Options::default());
    let own = critical_path::model_matching(traces, &Options::default());
    assert!(!own.instances.is_empty(), "{name}: the run has collectives");
    // Beside the report (width 0), and after it where the report leaves no worker to spare (width above the pool).
    let names = [0, usize::MAX].map(|width| {
        let (_, model) = critical_path::report_and_steady_model_from(traces, &Options::default(), width, 0);
        let model = model.expect("the run has a model");
        assert_eq!(matching_words(&model.matching), matching_words(&own), "{name}: the matchings differ ({width})");
        model.matching.instances.iter().any(|i| i.phase.is_some())
    });
    assert_eq!(names[0], names[1], "{name}: one way shares the report's matching, the other not");
    names[0]
}

#[test]
fn the_model_is_built_on_the_reports_matching_where_their_ranks_agree() {
    // Recorded ranks 0..4, one per file: the report's ranks are the model's, so its matching (with phases) serves.
    let traces = crate::parallel_report::one_rank_traces(4, 12);
    assert!(beside_names_phases("four recorded ranks", &traces), "the report's matching was not shared");
    // A file without a recorded rank given first, before ranks 0 and 1: the report numbers it 2 (the first number
    // no file recorded), the model's matching 0 (its place): the model matches the collectives itself.
    let mut traces = crate::parallel_report::one_rank_traces(3, 12);
    traces[2].processes[0].rank = None;
    traces.rotate_right(1);
    assert!(!beside_names_phases("an unrecorded rank first", &traces), "a matching of other ranks was shared");
}
