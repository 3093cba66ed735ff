//! Which CUPTI activity the injection library switches on, checked without a GPU against a stand-in
//! libcupti (`tests/data/fake_cupti.c`, compiled here with the system C compiler) that logs every
//! enabling call. By default only the runtime and driver calls that launch, copy, set, synchronise or
//! order streams are switched on, one callback id at a time, and neither API kind as a whole; `--trace
//! api-all` and `sync` switch the whole kinds on; a CUPTI without single-call selection falls back to
//! the whole kinds and the spool says so. A second CUPTI client of the workload (its own profiler) that CUPTI
//! refuses is noted in the spool and on stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::cupti::{ApiSelection, SpoolRecord};

const CHILD_ENV: &str = "SHARDSCOPE_TEST_FAKE_CUPTI_CHILD";

const SECOND_CLIENT_ENV: &str = "SHARDSCOPE_TEST_FAKE_CUPTI_SECOND_CLIENT";

/// Run in a child process (the library's state is per process): start recording, optionally play the
/// workload's own profiler subscribing too, then exit, which runs the library's exit flush.
#[test]
fn child_entry() {
    if std::env::var_os(CHILD_ENV).is_some() {
        assert_eq!(shardscope_inject::InitializeInjection(), 1);
        if std::env::var_os(SECOND_CLIENT_ENV).is_some() {
            let mut handle: shardscope_cupti_sys::v13::CUpti_SubscriberHandle = std::ptr::null_mut();
            // SAFETY: a valid out-pointer, no callback, no user data: what a profiler passes.
            let result = unsafe { shardscope_inject::cuptiSubscribe(&mut handle, None, std::ptr::null_mut()) };
            assert_eq!(result, cupti::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-api-selection-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the stand-in libcupti; `extra` are compiler flags (e.g. `-DNO_SINGLE_CALLS`).
fn fake_cupti(dir: &Path, extra: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_cupti.c");
    let library = dir.join("libcupti_fake.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("this test needs a C compiler ({compiler}): {e}"));
    assert!(status.success(), "{compiler} failed on {}", source.display());
    library
}

/// What one child run switched on.
struct Enabled {
    kinds: Vec<u32>,
    runtime_cbids: Vec<u32>,
    driver_cbids: Vec<u32>,
    selection: Option<ApiSelection>,
    refused_clients: Option<u32>,
    stderr: String,
}

fn run_child(name: &str, trace: Option<&str>, compiler_flags: &[&str]) -> Enabled {
    run_child_with(name, trace, compiler_flags, false)
}

fn run_child_with(name: &str, trace: Option<&str>, compiler_flags: &[&str], second_client: bool) -> Enabled {
    let dir = scratch(name);
    let library = fake_cupti(&dir, compiler_flags);
    let log = dir.join("calls.log");
    let spool_dir = dir.join("spool");
    std::fs::create_dir_all(&spool_dir).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("FAKE_CUPTI_LOG", &log)
        .env("SHARDSCOPE_CUPTI_LIB", &library)
        .env("SHARDSCOPE_SPOOL_DIR", &spool_dir)
        .env_remove("SHARDSCOPE_TRACE");
    if let Some(trace) = trace {
        child.env("SHARDSCOPE_TRACE", trace);
    }
    if second_client {
        child.env(SECOND_CLIENT_ENV, "1");
    }
    let output = child.output().unwrap();
    assert!(output.status.success(), "child failed: {}", String::from_utf8_lossy(&output.stderr));

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut enabled = Enabled {
        kinds: Vec::new(),
        runtime_cbids: Vec::new(),
        driver_cbids: Vec::new(),
        selection: None,
        refused_clients: None,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["kind", kind] => enabled.kinds.push(kind.parse().unwrap()),
            ["runtime", cbid, "1"] => enabled.runtime_cbids.push(cbid.parse().unwrap()),
            ["driver", cbid, "1"] => enabled.driver_cbids.push(cbid.parse().unwrap()),
            _ => {}
        }
    }
    let spool = std::fs::read_dir(&spool_dir).unwrap().next().expect("no spool written").unwrap().path();
    let contents = shardscope_spool::read_spool::<SpoolRecord>(&spool).unwrap();
    enabled.selection = contents.records.iter().find_map(|r| match r {
        SpoolRecord::ApiSelection(s) => Some(*s),
        _ => None,
    });
    enabled.refused_clients = contents.records.iter().rev().find_map(|r| match r {
        SpoolRecord::RefusedClient { count } => Some(*count),
        _ => None,
    });
    let _ = std::fs::remove_dir_all(&dir);
    enabled
}

// The stand-in's callback ids (see fake_cupti.c).
const RUNTIME_LAUNCH_KERNEL: u32 = 2;
const RUNTIME_MEMCPY_ASYNC: u32 = 4;
const RUNTIME_STREAM_SYNCHRONIZE: u32 = 5;
const RUNTIME_PROFILER_START: u32 = 7;
const RUNTIME_PROFILER_STOP: u32 = 8;
const RUNTIME_GRAPH_LAUNCH: u32 = 9;
const DRIVER_LAUNCH_KERNEL_EX: u32 = 2;
const DRIVER_STREAM_WAIT_EVENT: u32 = 5;
const DRIVER_PROFILER_START: u32 = 6;
const DRIVER_PROFILER_STOP: u32 = 7;
const DRIVER_GRAPH_LAUNCH: u32 = 8;

#[test]
fn by_default_only_work_calls_are_switched_on_one_by_one() {
    let enabled = run_child("default", None, &[]);
    assert_eq!(
        enabled.runtime_cbids,
        [
            RUNTIME_LAUNCH_KERNEL,
            RUNTIME_MEMCPY_ASYNC,
            RUNTIME_STREAM_SYNCHRONIZE,
            RUNTIME_PROFILER_START,
            RUNTIME_PROFILER_STOP,
            RUNTIME_GRAPH_LAUNCH
        ]
    );
    assert_eq!(
        enabled.driver_cbids,
        [
            DRIVER_LAUNCH_KERNEL_EX,
            DRIVER_STREAM_WAIT_EVENT,
            DRIVER_PROFILER_START,
            DRIVER_PROFILER_STOP,
            DRIVER_GRAPH_LAUNCH
        ]
    );
    for kind in [cupti::CUPTI_ACTIVITY_KIND_RUNTIME, cupti::CUPTI_ACTIVITY_KIND_DRIVER] {
        assert!(!enabled.kinds.contains(&kind), "whole API kind {kind} switched on: {:?}", enabled.kinds);
    }
    assert!(!enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), "{:?}", enabled.kinds);
    assert!(!enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_KERNEL), "the serialising kernel kind");
    for kind in [
        cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        cupti::CUPTI_ACTIVITY_KIND_MEMCPY,
        cupti::CUPTI_ACTIVITY_KIND_MEMSET,
        cupti::CUPTI_ACTIVITY_KIND_MARKER,
    ] {
        assert!(enabled.kinds.contains(&kind), "kind {kind} missing: {:?}", enabled.kinds);
    }
    let selection = enabled.selection.expect("the spool notes the API selection");
    assert_eq!(
        selection,
        ApiSelection {
            every_call: false,
            runtime_cbids: 6,
            driver_cbids: 5,
            runtime_whole_kind: false,
            driver_whole_kind: false
        }
    );
}

#[test]
fn every_call_and_sync_records_are_there_when_asked_for() {
    let enabled = run_child("api-all", Some("all,api-all,sync"), &[]);
    for kind in [
        cupti::CUPTI_ACTIVITY_KIND_RUNTIME,
        cupti::CUPTI_ACTIVITY_KIND_DRIVER,
        cupti::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    ] {
        assert!(enabled.kinds.contains(&kind), "kind {kind} missing: {:?}", enabled.kinds);
    }
    assert!(enabled.runtime_cbids.is_empty() && enabled.driver_cbids.is_empty());
    assert!(enabled.selection.expect("selection noted").every_call);
}

#[test]
fn without_single_call_selection_the_whole_kinds_are_recorded_and_said_so() {
    let enabled = run_child("old-cupti", None, &["-DNO_SINGLE_CALLS"]);
    assert!(enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_RUNTIME), "{:?}", enabled.kinds);
    assert!(enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_DRIVER), "{:?}", enabled.kinds);
    let selection = enabled.selection.expect("selection noted");
    assert!(selection.runtime_whole_kind && selection.driver_whole_kind && !selection.every_call);
}

#[test]
fn no_api_kind_records_no_calls() {
    let enabled = run_child("no-api", Some("kernel"), &[]);
    assert!(enabled.runtime_cbids.is_empty() && enabled.driver_cbids.is_empty());
    assert!(!enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_RUNTIME));
    assert!(!enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_DRIVER));
    assert!(enabled.kinds.contains(&cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

#[test]
fn a_refused_second_cupti_client_is_noted_in_the_spool_and_on_stderr() {
    let quiet = run_child("one-client", None, &[]);
    assert_eq!(quiet.refused_clients, None);
    assert!(!quiet.stderr.contains("its own CUPTI profiler"), "{}", quiet.stderr);

    let refused = run_child_with("two-clients", None, &[], true);
    assert_eq!(refused.refused_clients, Some(1));
    assert!(refused.stderr.contains("started its own CUPTI profiler"), "{}", refused.stderr);
}
