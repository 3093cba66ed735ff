//! The report one trace at a time (`report::streaming`, `analyzer report --streaming`): every trace digested alone
//! and dropped, the collectives matched from the kept rows, must give the report of all traces analysed together,
//! byte for byte as `report --format json` prints it: on every sample, on the real multi-rank sets of
//! `../shared/traces`, on generated rank files with matched collectives, with a window, with tied phases; and
//! through the command, whose output with `--streaming on` is that of `--streaming off` less the findings.

use crate::common;
use crate::parallel_report::{one_rank_traces, tied_phases_trace};

use std::path::{Path, PathBuf};

use common::{analyzer, repo_root};
use shardscope_analyzer::output::render;
use shardscope_analyzer::report::streaming::{self, Streaming};
use shardscope_analyzer::report::{Options, analyze, analyze_on_threads};
use shardscope_model::Trace;

/// The report made trace by trace, each trace moved in and dropped after its digest.
fn streamed(traces: Vec<Trace>, options: &Options) -> String {
    let report = streaming::analyze_each(traces.into_iter().map(Ok::<Trace, ()>), options).expect("no read errors");
    render::json(&report)
}

fn first_difference(a: &str, b: &str) -> String {
    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(a.lines().count().min(b.lines().count()));
    format!("line {line}: {:?}\n   vs  {:?}", a.lines().nth(line), b.lines().nth(line))
}

/// Streamed equals whole (on the pool and on one thread); returns the whole report's JSON.
fn check(name: &str, traces: Vec<Trace>, options: &Options) -> String {
    let whole = render::json(&analyze(&traces, options));
    let one_thread = render::json(&analyze_on_threads(&traces, options, 1));
    assert!(one_thread == whole, "{name}: one thread differs");
    let streamed = streamed(traces, options);
    assert!(
        streamed == whole,
        "{name}: the streamed report differs from the whole one:\n{}",
        first_difference(&streamed, &whole)
    );
    whole
}

fn sample(name: &str) -> Vec<Trace> {
    shardscope_io::load(&repo_root().join("sample-traces").join(name)).expect("sample trace loads")
}

#[test]
fn streamed_report_is_the_whole_report_on_every_sample() {
    for name in [
        "tp1_nsys.sqlite.gz",
        "tp1_capture.sqlite.gz",
        "tp2_nsys.sqlite.gz",
        "tp2_capture.sqlite.gz",
        "tp2_full_capture.sqlite.gz",
        "tp2_skew_capture.sqlite.gz",
        "kineto_tp2",
    ] {
        check(name, sample(name), &Options::default());
        check(name, sample(name), &Options { keep_instances: true, ..Options::default() });
    }
    // The samples with memory events: the memory section is made per rank while its trace is in memory.
    let memory_dir = repo_root().join("sample-traces/memory");
    let mut with_memory = 0;
    for entry in std::fs::read_dir(&memory_dir).expect("sample-traces/memory") {
        let path = entry.expect("an entry").path();
        let Ok(traces) = shardscope_io::load(&path) else { continue };
        let whole = check(&path.display().to_string(), traces, &Options::default());
        with_memory += usize::from(whole.contains("\"memory\""));
    }
    assert!(with_memory > 0, "a memory sample gives a memory section");
}

#[test]
fn matched_waits_reach_ranks_phases_and_the_steady_state() {
    // The skewed capture has matched collectives with waiting: a streamed report that never applied the shares
    // would differ from the whole one only if the whole one has some.
    let whole = check("tp2_skew_capture", sample("tp2_skew_capture.sqlite.gz"), &Options::default());
    let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
    assert!(report["collectives"]["matched_instances"].as_u64().unwrap() > 0);
    let ranks = report["ranks"].as_array().unwrap();
    assert!(ranks.iter().map(|r| r["comm_wait_ns"].as_i64().unwrap()).sum::<i64>() > 0);
    let phase_waits: i64 = ranks
        .iter()
        .flat_map(|r| r["phases"].as_object().unwrap().values())
        .map(|p| p["comm_wait_ns"].as_i64().unwrap())
        .sum();
    assert!(phase_waits > 0, "phases get their matched kernels' waits");
    // Generated rank files (one trace per rank, eight ranks arriving at different times at every all-reduce).
    let whole = check("8 rank traces", one_rank_traces(8, 24), &Options::default());
    let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
    assert_eq!(report["collectives"]["matched_instances"].as_u64(), Some(24 * 4));
    assert_eq!(report["ranks"].as_array().unwrap().len(), 8);
    // Two steps left out as warm-up: each rank has a steady state, whose matched kernels wait too.
    let options = Options { skip_steps: 2, ..Options::default() };
    let whole = check("8 rank traces, 2 warm-up steps", one_rank_traces(8, 24), &options);
    let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
    for rank in report["ranks"].as_array().unwrap() {
        let steady = &rank["steady_state"];
        assert!(steady.is_object(), "rank {}: a steady state", rank["rank"]);
        let (steady_wait, wait) = (steady["comm_wait_ns"].as_i64().unwrap(), rank["comm_wait_ns"].as_i64().unwrap());
        // The last rank to arrive (rank 7) never waits; every other one waits, in the steady state too.
        if rank["rank"] != 7 {
            assert!(
                steady_wait > 0 && steady_wait < wait,
                "rank {}: steady wait {steady_wait} of {wait}",
                rank["rank"]
            );
        }
    }
}

#[test]
fn a_window_and_keep_instances_stream_the_same() {
    let traces = one_rank_traces(4, 12);
    let (first, last) = traces
        .iter()
        .flat_map(|t| t.kernels.iter().map(|k| (k.start_ns, k.end_ns)))
        .fold((i64::MAX, i64::MIN), |(a, b), (s, e)| (a.min(s), b.max(e)));
    // A window through kernels: those cut by it are matched but not split into wait and transfer.
    let window = Some((first + (last - first) / 3 + 123_456, first + 2 * (last - first) / 3));
    check("4 rank traces windowed", traces.clone(), &Options { window_ns: window, ..Options::default() });
    check("4 rank traces with instances", traces, &Options { keep_instances: true, ..Options::default() });
    let mut traces = sample("kineto_tp2");
    for (index, trace) in traces.iter_mut().enumerate() {
        for process in &mut trace.processes {
            process.host = Some(format!("node{index}"));
        }
    }
    let whole = check("kineto_tp2 on two hosts", traces, &Options::default());
    assert!(whole.contains("\"clocks_aligned\": true"), "ranks on two hosts are aligned");
}

#[test]
fn phases_that_start_at_the_same_nanosecond_stream_in_name_order() {
    // Across the two traces `decode` is seen first; the second trace alone sees `prefill` first.
    for order in [["decode", "prefill"], ["prefill", "decode"]] {
        let traces = vec![tied_phases_trace(0, order[0], order[1]), tied_phases_trace(1, order[1], order[0])];
        let whole = check("tied phases", traces, &Options::default());
        let report: serde_json::Value = serde_json::from_str(&whole).expect("JSON");
        for rank in report["ranks"].as_array().unwrap() {
            let phases: Vec<&String> = rank["phases"].as_object().expect("phases").keys().collect();
            assert_eq!(phases, ["decode", "prefill"], "rank {}: tied phases in name order", rank["rank"]);
        }
    }
}

#[test]
fn digests_keep_only_the_communication_kernels() {
    let traces = one_rank_traces(2, 6);
    let kernels: usize = traces.iter().map(|t| t.kernels.len()).sum();
    let mut streaming = Streaming::new();
    for trace in &traces {
        streaming.push(streaming::digest(trace, &Options::default()));
    }
    // Per step four GEMMs and four all-reduces per rank: half the kernels are kept, as rows.
    let kept: u64 = streaming.digests().iter().map(|d| d.comm_kernels()).sum();
    assert_eq!(kept, kernels as u64 / 2);
}

#[test]
fn the_choice_follows_the_inputs_size_and_the_memory() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (a, b) = (dir.path().join("a.sqlite"), dir.path().join("b.json.gz"));
    std::fs::write(&a, vec![0u8; 1000]).unwrap();
    std::fs::write(&b, vec![0u8; 100]).unwrap();
    let both = vec![a.clone(), b.clone()];
    let estimate = 1000 * streaming::MEMORY_PER_FILE_BYTE + 100 * streaming::MEMORY_PER_GZIP_BYTE;
    assert_eq!(streaming::estimated_memory_bytes(&both), estimate);
    assert_eq!(streaming::estimated_memory_bytes(&[dir.path().to_path_buf()]), estimate, "a folder: its files");
    assert!(streaming::should_stream(&both, Some(2 * estimate - 1)), "more than half the free memory");
    assert!(!streaming::should_stream(&both, Some(2 * estimate)), "half of it fits");
    assert!(!streaming::should_stream(&[a], Some(0)), "one file is read whole");
    assert!(!streaming::should_stream(&both, None), "memory not known");
}

/// The files read at once: as asked (within 1 and the files), else one per core, fewer where that many of the largest
/// file's traces would take more than half the memory available.
#[test]
fn the_files_read_at_once_follow_the_cores_and_the_memory() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let files: Vec<streaming::StreamedFile> = [1000usize, 400, 10]
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let path = dir.path().join(format!("rank{i}.sqlite"));
            std::fs::write(&path, vec![0u8; *bytes]).unwrap();
            streaming::StreamedFile { path, folder_warnings: Vec::new() }
        })
        .collect();
    let largest = 1000 * streaming::MEMORY_PER_FILE_BYTE;
    assert_eq!(streaming::files_at_once(None, 16, &files, None), 3, "no more than the files");
    assert_eq!(streaming::files_at_once(None, 2, &files, None), 2, "one per core");
    assert_eq!(streaming::files_at_once(None, 16, &files, Some(2 * largest * 2)), 2, "two of the largest fit");
    assert_eq!(streaming::files_at_once(None, 16, &files, Some(2 * largest * 2 - 1)), 1, "one of them fits");
    assert_eq!(streaming::files_at_once(None, 16, &files, Some(0)), 1, "at least one");
    assert_eq!(streaming::files_at_once(Some(1), 16, &files, None), 1, "as asked");
    assert_eq!(streaming::files_at_once(Some(2), 1, &files, Some(0)), 2, "as asked, whatever the memory");
    assert_eq!(streaming::files_at_once(Some(9), 16, &files, None), 3, "no more than the files");
    assert_eq!(streaming::files_at_once(None, 4, &[], None), 1, "no files: one");
}

/// `analyzer report FILES --format FORMAT --streaming MODE` (MODE may carry more options after a space), stdout
/// (success asserted).
fn report(files: &[PathBuf], format: &str, mode: &str) -> String {
    let mut args = vec!["report"];
    args.extend(files.iter().map(|p| p.to_str().expect("UTF-8 path")));
    args.extend(["--format", format, "--streaming"]);
    args.extend(mode.split(' '));
    let output = analyzer(&args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The command's JSON without its findings (which only the whole path makes), and its CSV.
fn compare_command(name: &str, files: &[PathBuf]) {
    let json = |mode: &str| {
        let mut value: serde_json::Value = serde_json::from_str(&report(files, "json", mode)).expect("JSON");
        value.as_object_mut().expect("an object").remove("findings");
        serde_json::to_string_pretty(&value).expect("serialises")
    };
    let (on, off) = (json("on"), json("off"));
    assert!(on == off, "{name}: --streaming on differs from off:\n{}", first_difference(&on, &off));
    let one_at_a_time = json("on --streaming-files 1");
    assert!(on == one_at_a_time, "{name}: one file at a time differs:\n{}", first_difference(&on, &one_at_a_time));
    let (on, off) = (report(files, "csv", "on"), report(files, "csv", "off"));
    assert!(on == off, "{name}: CSV differs:\n{}", first_difference(&on, &off));
}

#[test]
fn the_command_streams_the_same_report_without_findings() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let files: Vec<PathBuf> = one_rank_traces(4, 12)
        .iter()
        .enumerate()
        .map(|(rank, trace)| {
            let path = dir.path().join(format!("rank{rank}.sqlite"));
            shardscope_io::nsys_writer::write(trace, &path).expect("the nsys writer writes it");
            path
        })
        .collect();
    compare_command("4 rank files", &files);
    let kineto = repo_root().join("sample-traces/kineto_tp2");
    compare_command("kineto_tp2", &[kineto]);
    // The table: the same after the findings block, which only the whole path prints.
    let table = |mode: &str| report(&files, "table", mode);
    let (on, off) = (table("on"), table("off"));
    let summary_at = |text: &str| text.find("\n\n").map_or(0, |i| i + 2);
    assert!(off.starts_with("findings for "), "the whole path opens with its findings");
    assert_eq!(on, off[summary_at(&off)..], "--streaming on prints the table of --streaming off, less the findings");
    // Charts need the traces: refused with one line, not streamed.
    let html = dir.path().join("r.html");
    let refused =
        analyzer(&["report", files[0].to_str().unwrap(), "--streaming", "on", "--html", html.to_str().unwrap()]);
    common::assert_one_line_error(&refused, "--html");
    // A count of files at once means nothing when every trace is read at once: refused, not ignored.
    let refused = analyzer(&["report", files[0].to_str().unwrap(), "--streaming", "off", "--streaming-files", "2"]);
    common::assert_one_line_error(&refused, "--streaming-files");
}

/// A folder of rank files given as one argument is read file by file too (it used to be one unit, read whole, and
/// never chosen for streaming): the same report as the folder read whole, its skipped members warned about once.
#[test]
fn a_folder_of_rank_files_streams_file_by_file() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (rank, trace) in one_rank_traces(3, 12).iter().enumerate() {
        let path = dir.path().join(format!("rank{rank}.sqlite"));
        shardscope_io::nsys_writer::write(trace, &path).expect("the nsys writer writes it");
    }
    std::fs::write(dir.path().join("notes.txt"), "not a trace").unwrap();
    let folder = dir.path().to_path_buf();
    let files = streaming::streamed_files(std::slice::from_ref(&folder)).expect("the folder lists");
    let names: Vec<String> = files.iter().map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["rank0.sqlite", "rank1.sqlite", "rank2.sqlite"]);
    assert_eq!(files[0].folder_warnings.len(), 1, "the skipped member, with the first file");
    assert!(files[1..].iter().all(|f| f.folder_warnings.is_empty()));
    assert!(streaming::should_stream(std::slice::from_ref(&folder), Some(0)), "a folder counts its rank files");
    compare_command("a folder of 3 rank files", std::slice::from_ref(&folder));
    let warned = |mode: &str| {
        let output = analyzer(&["report", folder.to_str().unwrap(), "--format", "csv", "--streaming", mode]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        stderr.lines().filter(|l| l.contains("folder member skipped (not a trace)")).count()
    };
    assert_eq!((warned("on"), warned("off")), (1, 1), "the skipped member is warned about once either way");
    let empty = tempfile::tempdir().expect("a temporary folder");
    let error = streaming::streamed_files(&[empty.path().to_path_buf()]).expect_err("no trace in it");
    assert!(error.to_string().contains("holds no SQLite or JSON trace"), "{error}");
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("a folder").map(|e| e.expect("an entry").path()).collect();
    files.sort();
    files
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn streamed_report_is_the_whole_report_on_the_real_multi_rank_sets() {
    let shared = common::shared_traces();
    for set in ["kineto/dlrm_8rank", "kineto/sampled_2rank"] {
        let files = files_in(&shared.join(set));
        let traces: Vec<Trace> = files.iter().flat_map(|f| shardscope_io::load(f).expect("loads")).collect();
        assert!(traces.len() >= 2, "{set}: several ranks");
        let options = Options { allow_mixed: true, ..Options::default() };
        check(set, traces.clone(), &options);
        check(set, traces, &Options { keep_instances: true, ..options });
    }
    for file in ["nsys/mfu_2gpu_before.sqlite", "nsys/mfu_2gpu_after.sqlite", "nsys/h100_2gpu_1s.sqlite"] {
        let traces = shardscope_io::load(&shared.join(file)).expect("loads");
        check(file, traces, &Options::default());
    }
    compare_command("dlrm_8rank", &files_in(&shared.join("kineto/dlrm_8rank")));
}
