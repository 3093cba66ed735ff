//! The command line against hostile inputs and hostile outputs: a reader that goes away early,
//! a full disk, escape sequences in the input, an output that is also an input, and the memory
//! a small input may take.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{analyzer, assert_one_line_error, repo_root};

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-hostile-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sample() -> PathBuf {
    repo_root().join("sample-traces/tp1_nsys.sqlite.gz")
}

fn unpacked_sample(dir: &Path) -> PathBuf {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(sample()).unwrap()).read_to_end(&mut bytes).unwrap();
    let path = dir.join("sample.sqlite");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_reader_that_closes_the_pipe_early_ends_the_run_quietly() {
    for format in ["json", "table", "csv"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_analyzer"))
            .args(["report", "--format", format, sample().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the reading end before the report is written (`analyzer … | true`).
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{format}: {stderr}");
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
}

#[test]
fn a_full_disk_is_one_error_line_and_exit_2() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else { return };
    let output = Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["report", "--format", "json", sample().to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    assert_one_line_error(&output, "standard output");
    assert!(String::from_utf8_lossy(&output.stderr).contains("No space left on device"));
}

#[test]
fn escape_sequences_from_the_input_are_not_sent_to_the_terminal() {
    let dir = scratch("escape");
    let file = unpacked_sample(&dir);
    let conn = rusqlite::Connection::open(&file).unwrap();
    conn.execute(
        "UPDATE META_DATA_EXPORT SET value = ?1 WHERE name = 'EXPORT_SCHEMA_VERSION'",
        ["9\x1b[2J\x1b]0;owned\x07"],
    )
    .unwrap();
    drop(conn);
    let output = analyzer(&["report", file.to_str().unwrap()]);
    assert_one_line_error(&output, "unsupported schema version");
    assert!(!output.stderr.contains(&0x1b) && !output.stderr.contains(&0x07), "raw control bytes on stderr");
    assert!(String::from_utf8_lossy(&output.stderr).contains("\\u{1b}[2J"));
}

#[test]
fn an_io_error_names_its_cause_once() {
    let output = analyzer(&["report", "/nonexistent/trace.sqlite"]);
    assert_one_line_error(&output, "/nonexistent/trace.sqlite");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
}

#[test]
fn export_refuses_to_overwrite_its_input() {
    let dir = scratch("export-in-place");
    let file = unpacked_sample(&dir);
    let before = std::fs::read(&file).unwrap();
    let output = analyzer(&["export", "-o", file.to_str().unwrap(), file.to_str().unwrap()]);
    assert_one_line_error(&output, "refusing to write over an input");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // Nor a member of a folder given as input.
    let output = analyzer(&["export", "-o", file.to_str().unwrap(), dir.to_str().unwrap()]);
    assert_one_line_error(&output, "refusing to write over an input");
}

#[test]
fn export_of_many_overlapping_kernels_that_do_not_nest_keeps_every_slice() {
    // Each kernel starts inside the previous one and ends after it: no two nest, so each needs
    // a row of its own while the previous ones are open.
    let dir = scratch("export-overlap");
    let mut events = Vec::new();
    for i in 0..300 {
        events.push(format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": 0, "tid": 7, "ts": {}, "dur": 100, "args": {{"device": 0, "stream": 7}}}}"#,
            i * 10
        ));
    }
    let input = dir.join("overlap.json");
    std::fs::write(&input, format!("{{\"traceEvents\": [{}]}}", events.join(",\n"))).unwrap();
    let out = dir.join("overlap.pftrace");
    let output = analyzer(&["export", "-o", out.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Ten kernels are open at any time: nine rows beside the stream's own.
    assert!(stderr.contains("; 9 extra row(s) for slices that overlap without nesting"), "{stderr}");
}

#[test]
fn folder_members_that_are_skipped_are_warned_about() {
    let dir = scratch("folder");
    let folder = dir.join("ranks");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(sample(), folder.join("rank0.sqlite.gz")).unwrap();
    std::fs::write(folder.join("README"), b"notes").unwrap();
    let output = analyzer(&["report", "--format", "json", folder.to_str().unwrap()]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning:") && stderr.contains("(not a trace) in") && stderr.contains(": README"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w["what"].as_str().unwrap().ends_with(&format!("(not a trace) in {}: README", folder.display())))
    );
}

/// Peak resident memory of a child run under an address-space limit, in bytes, its exit code and its
/// standard error. The peak is the one the child reads for itself at its end (`VmHWM`, on the stage-times
/// line of the whole command), not the one `wait4` gives: a forked child's peak starts at the resident memory
/// of the process it was forked from, and this one runs other tests in its threads (one of them held
/// 140 MB at such a fork once).
fn run_bounded(args: &[&str], address_space_bytes: u64) -> (u64, Option<i32>, String) {
    // SAFETY: the closure run between fork and exec only calls setrlimit, which is async-signal-safe.
    let output = unsafe {
        Command::new(env!("CARGO_BIN_EXE_analyzer"))
            .args(args)
            .env(shardscope_analyzer::stage_times::STAGE_TIMES_ENV, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .pre_exec(move || {
                let limit = libc::rlimit { rlim_cur: address_space_bytes, rlim_max: address_space_bytes };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
            .output()
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let peak_mib =
        whole_command_peak_mib(&stderr).unwrap_or_else(|| panic!("no peak on the last stage line: {stderr}"));
    (peak_mib << 20, output.status.code(), stderr)
}

/// The peak of `analyzer: stage whole command S s (resident R MiB, peak P MiB)` in `stderr`, in MiB.
fn whole_command_peak_mib(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|line| line.starts_with("analyzer: stage whole command "))?;
    let peak = line.rsplit_once("peak ")?.1.strip_suffix(" MiB)")?;
    peak.parse().ok()
}

#[test]
fn small_hostile_inputs_stay_within_a_memory_bound() {
    // Stated bound: under 200 MB resident for any input under 10 MB, checked under a 2 GiB
    // address-space limit (threads reserve address space they never touch).
    const RESIDENT_BYTES: u64 = 200_000_000;
    const ADDRESS_SPACE_BYTES: u64 = 2 << 30;
    let dir = scratch("memory");
    // Inputs are written a block at a time: a child's peak includes what this process held when
    // it forked, so this process must stay small.
    let mut cases: Vec<(PathBuf, bool)> = Vec::new();
    let gzip_file = |name: &str, head: &[u8], fill: u8, fill_bytes: usize, tail: &[u8]| -> PathBuf {
        let path = dir.join(name);
        let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        encoder.write_all(head).unwrap();
        let block = vec![fill; 1 << 20];
        for _ in 0..fill_bytes >> 20 {
            encoder.write_all(&block).unwrap();
        }
        encoder.write_all(tail).unwrap();
        encoder.finish().unwrap().flush().unwrap();
        path
    };
    // An event array opened and then 120 MiB of spaces (under the unpacking bound), then an event.
    let event = br#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}}]}"#;
    cases.push((gzip_file("spaces.json.gz", b"{\"traceEvents\": [", b' ', 120 << 20, event), true));
    // One string of 120 MiB.
    cases.push((gzip_file("string.json.gz", b"{\"traceEvents\": [], \"note\": \"", b'a', 120 << 20, b"\"}"), false));
    // A gzip bomb around an SQLite header: 256 MiB of zeros, over the unpacking bound.
    cases.push((gzip_file("bomb.sqlite.gz", b"SQLite format 3\0", 0, 256 << 20, b""), false));

    // A kernel row at rowid 2^62.
    let file = unpacked_sample(&dir);
    rusqlite::Connection::open(&file)
        .unwrap()
        .execute_batch(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = 4611686018427387904
             WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);
             UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = 300000000
             WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME);",
        )
        .unwrap();
    cases.push((file, true));

    for (input, readable) in cases {
        let size = std::fs::metadata(&input).unwrap().len();
        assert!(size < 10_000_000, "{} is {size} bytes", input.display());
        let (resident, code, stderr) =
            run_bounded(&["report", "--format", "json", input.to_str().unwrap()], ADDRESS_SPACE_BYTES);
        assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation"), "{stderr}");
        assert_eq!(code, Some(if readable { 0 } else { 2 }), "{}: {stderr}", input.display());
        assert!(resident < RESIDENT_BYTES, "{}: {resident} bytes resident", input.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_device_is_refused_and_a_pipe_without_a_writer_does_not_block() {
    let output = analyzer(&["report", "/dev/zero"]);
    assert_one_line_error(&output, "/dev/zero: is a device, not a trace file");
    let dir = scratch("fifo-wait");
    let fifo = dir.join("pipe");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["report", fifo.to_str().unwrap()])
        .env("SHARDSCOPE_PIPE_WAIT_S", "1")
        .output()
        .unwrap();
    assert_one_line_error(&output, "no writer opened the pipe within 1 s");
    assert!(started.elapsed().as_secs() < 20);
}

#[test]
fn a_signal_or_a_kill_leaves_no_private_copy_behind() {
    let dir = scratch("signal-copies");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A copy left by a process killed with SIGKILL (its pid no longer runs) is removed by the next run.
    let stale = tmp.join("shardscope-4194303-abcdef");
    std::fs::write(&stale, b"left behind").unwrap();
    // A pipe that delivers part of a trace and then stalls: the copy is being written when SIGTERM comes.
    let fifo = dir.join("pipe");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["report", fifo.to_str().unwrap()])
        .env("TMPDIR", &tmp)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    std::io::Write::write_all(&mut writer, &std::fs::read(unpacked_sample(&dir)).unwrap()[..1 << 16]).unwrap();
    // Wait until the copy exists, then stop the run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let copies = || std::fs::read_dir(&tmp).unwrap().count();
    while (copies() != 1 || stale.exists()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!stale.exists(), "the stale copy is removed");
    assert_eq!(copies(), 1, "the run's own copy exists");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    drop(writer);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGTERM));
    assert_eq!(copies(), 0, "the copy is removed on SIGTERM");
}

#[test]
fn no_output_is_written_over_an_input_or_through_a_planted_link() {
    let dir = scratch("outputs-over-inputs");
    let file = unpacked_sample(&dir);
    let before = std::fs::read(&file).unwrap();
    let input = file.to_str().unwrap();
    // Another name for the input: a hard link.
    let alias = dir.join("alias.html");
    std::fs::hard_link(&file, &alias).unwrap();
    let cases: [&[&str]; 5] = [
        &["report", "--html", input, input],
        &["report", "--html", alias.to_str().unwrap(), input],
        &["report", "--charts", dir.to_str().unwrap(), input],
        &["critical-path", "--perfetto", input, input],
        &["export", "--format", "parquet", dir.to_str().unwrap(), input],
    ];
    for args in cases {
        let output = analyzer(args);
        assert_one_line_error(&output, "refusing to write over an input");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{args:?}");
    }
    let artifact = repo_root().join("analyzer/tests/data/straggler-artifact/trace-ST.parquet");
    let copy = dir.join("trace-ST.png");
    std::fs::copy(&artifact, &copy).unwrap();
    let output =
        analyzer(&["what-if", "--straggler-artifact", copy.to_str().unwrap(), "--heatmap", copy.to_str().unwrap()]);
    assert_one_line_error(&output, "refusing to write over an input");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&artifact).unwrap());

    // A link planted at the output's name (as another user could in a shared folder) is replaced, not followed.
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let planted = dir.join("report.html");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let output = analyzer(&["report", "--html", planted.to_str().unwrap(), input]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::read_to_string(&planted).unwrap().contains("<html"));
    let linked_charts = dir.join("charts");
    std::os::unix::fs::symlink(dir.join("elsewhere"), &linked_charts).unwrap();
    let output = analyzer(&["report", "--charts", linked_charts.to_str().unwrap(), input]);
    assert_one_line_error(&output, "is a symbolic link");
}

#[test]
fn a_capture_files_own_warnings_are_in_the_report() {
    let dir = scratch("capture-warnings");
    let mut bytes = Vec::new();
    let capture = repo_root().join("sample-traces/tp1_capture.sqlite.gz");
    flate2::read::GzDecoder::new(std::fs::File::open(capture).unwrap()).read_to_end(&mut bytes).unwrap();
    let file = dir.join("capture.sqlite");
    std::fs::write(&file, bytes).unwrap();
    let conn = rusqlite::Connection::open(&file).unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS SHARDSCOPE_CAPTURE_WARNINGS (what TEXT NOT NULL, count INTEGER NOT NULL);
         INSERT INTO SHARDSCOPE_CAPTURE_WARNINGS VALUES ('damaged spool bytes skipped', 4096);",
    )
    .unwrap();
    drop(conn);
    let output = analyzer(&["report", "--format", "json", file.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w["what"] == "capture: damaged spool bytes skipped" && w["count"] == 4096),
        "{warnings:?}"
    );
}
