//! The findings' model built beside the report, as soon as every rank's steps are found
//! (`critical_path::report_and_steady_model`, here from any size of run), is the model built after the whole
//! report: the same report, the same steps, notes and excluded work, and the same findings, on the sample traces (one
//! and two ranks, a capture in two windows, Kineto), on ranks given out of rank order, with warm-up steps given, and
//! on a run with no GPU work.

use crate::common;

use common::repo_root;
use shardscope_analyzer::dependency::critical_path::{self, Model, ModelError};
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
    let (after, beside) = (model_words(traces, &report, &after), model_words(traces, &report, &beside));
    assert_eq!(beside, after, "{name}: the model built beside the report differs from the one built after it");
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
