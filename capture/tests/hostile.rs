//! `capture` against broken spools, odd folders, secrets on the command line and interactive
//! workloads: each gives a correct result with a warning, or one error line and exit code 2;
//! never a hang or a silently smaller trace.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use shardscope_capture::merge::{self, MergeOptions};
use shardscope_spool::cupti::{DeviceRecord, KernelRecord, ProcessInfo, SpoolRecord, SpoolWriter};

fn capture_bin() -> &'static str {
    env!("CARGO_BIN_EXE_capture")
}

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-capture-hostile-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `capture` with `args`, killing it after 60 s so that a hang fails the test instead of
/// blocking it.
fn run_capture(args: &[&std::ffi::OsStr]) -> Output {
    let mut child =
        Command::new(capture_bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("capture {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn assert_one_line_error(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "{needle} not in: {stderr}");
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// A spool of one process with one GPU and `frames` frames of ten kernels each.
fn write_spool(path: &Path, frames: u32) {
    let mut writer = SpoolWriter::create(path).unwrap();
    let info = ProcessInfo {
        pid: 4242,
        ppid: 1,
        command_line: vec!["python3".into(), "serve.py".into(), "--api-key=sk-live-123".into()],
        hostname: "node1".into(),
        env: vec![("HF_TOKEN".into(), "hf_secret".into()), ("RANK".into(), "0".into())],
        cupti_version: 130001,
        cupti_clock_ns: 1_000_000,
        realtime_ns: 1_800_000_000_000_000_000,
        ..ProcessInfo::default()
    };
    let first = vec![
        SpoolRecord::Process(info),
        SpoolRecord::Name { id: 1, text: "gemm".into() },
        SpoolRecord::Device(DeviceRecord {
            device_id: 0,
            name: "GPU".into(),
            uuid: [1; 16],
            ..DeviceRecord::default()
        }),
    ];
    writer.write_batch(&first).unwrap();
    for frame in 0..frames {
        let batch: Vec<SpoolRecord> = (0..10)
            .map(|i| {
                let start_ns = 1_000_000 + u64::from(frame * 10 + i) * 1_000;
                SpoolRecord::Kernel(KernelRecord {
                    start_ns,
                    end_ns: start_ns + 500,
                    device_id: 0,
                    context_id: 1,
                    stream_id: 7,
                    correlation_id: frame * 10 + i + 1,
                    name_id: 1,
                    ..KernelRecord::default()
                })
            })
            .collect();
        writer.write_batch(&batch).unwrap();
    }
}

/// Offsets of the frames of a spool file (after its 8-byte magic).
fn frame_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        offsets.push(at);
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    offsets
}

#[test]
fn one_damaged_byte_mid_spool_loses_only_its_frame_and_says_so() {
    let dir = temp_dir("damaged");
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    let spool = spool_dir.join("node1.4242.spool");
    write_spool(&spool, 5);
    let mut bytes = std::fs::read(&spool).unwrap();
    let offsets = frame_offsets(&bytes);
    assert_eq!(offsets.len(), 6);
    // A flipped byte inside the payload of the second kernel frame.
    bytes[offsets[2] + 20] ^= 0xff;
    std::fs::write(&spool, &bytes).unwrap();

    let folder = merge::read_spool_folder(&spool_dir).unwrap();
    let kernels = folder.spools[0].contents.records.iter().filter(|r| matches!(r, SpoolRecord::Kernel(_))).count();
    assert_eq!(kernels, 40, "the frames after the damaged one are read");
    assert_eq!(folder.spools[0].damaged_bytes, (offsets[3] - offsets[2]) as u64);
    let (trace, _) = merge::merge(&folder.spools, &MergeOptions::default());
    assert!(trace.warnings.iter().any(|w| w.what.contains("damaged spool bytes")));

    let out = dir.join("out.sqlite");
    let output = run_capture(&["--merge".as_ref(), spool_dir.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning") && stderr.contains("damaged spool bytes"), "{stderr}");
    assert_eq!(shardscope_io::load(&out).unwrap()[0].kernels.len(), 40);
}

#[test]
fn merging_an_empty_folder_is_an_error() {
    let dir = temp_dir("empty");
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    let out = dir.join("out.sqlite");
    let output = run_capture(&["--merge".as_ref(), spool_dir.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_one_line_error(&output, "no spool files");
    assert!(!out.exists());
}

#[test]
fn pipes_in_the_spool_folder_are_skipped_with_a_warning_not_waited_on() {
    let dir = temp_dir("fifo");
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    write_spool(&spool_dir.join("node1.4242.spool"), 1);
    mkfifo(&spool_dir.join("node1.999.spool"));
    mkfifo(&spool_dir.join("nccl-999.bin"));
    let out = dir.join("out.sqlite");
    let output = run_capture(&["--merge".as_ref(), spool_dir.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("node1.999.spool: not a regular file (skipped)"), "{stderr}");
    assert!(stderr.contains("nccl-999.bin: not a regular file (skipped)"), "{stderr}");
    assert_eq!(shardscope_io::load(&out).unwrap()[0].kernels.len(), 10);
}

/// A stand-in injection library: these workloads never load CUDA.
fn fake_lib(dir: &Path) -> PathBuf {
    let lib = dir.join("libfake_inject.so");
    std::fs::write(&lib, b"").unwrap();
    lib
}

#[test]
fn a_command_that_cannot_start_leaves_no_spool_folder() {
    let dir = temp_dir("nonexistent");
    let lib = fake_lib(&dir);
    let out = dir.join("out.sqlite");
    let output = run_capture(&[
        "--inject-lib".as_ref(),
        lib.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        "/nonexistent/program".as_ref(),
    ]);
    assert_one_line_error(&output, "cannot run /nonexistent/program");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("cannot run").count(), 1, "the cause once: {stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("libfake_inject.so")]);
}

#[test]
fn an_output_in_a_missing_folder_is_an_error_not_a_new_folder() {
    let dir = temp_dir("missing-folder");
    let lib = fake_lib(&dir);
    let out = dir.join("no/such/folder/out.sqlite");
    let output = run_capture(&[
        "--inject-lib".as_ref(),
        lib.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_one_line_error(&output, "folder does not exist");
    assert!(!dir.join("no").exists());
}

/// The stored `command` of a capture's metadata, parsed as JSON.
fn stored_command(file: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(file).unwrap();
    let text: String =
        conn.query_row("SELECT value FROM SHARDSCOPE_CAPTURE_META WHERE name = 'command'", [], |r| r.get(0)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn secrets_on_the_command_line_are_redacted_and_the_stored_command_is_json() {
    let dir = temp_dir("redact");
    let lib = fake_lib(&dir);
    let args = ["true", "--api-key=sk-live-123", "HF_TOKEN=hf_secret", "--password", "hunter2", "tab\there\u{1}"];
    let run = |out: &Path, keep: bool| {
        let mut argv: Vec<&std::ffi::OsStr> =
            vec!["--inject-lib".as_ref(), lib.as_os_str(), "-o".as_ref(), out.as_os_str()];
        if keep {
            argv.push("--keep-cmdline".as_ref());
        }
        argv.push("--".as_ref());
        argv.extend(args.iter().map(std::ffi::OsStr::new));
        let output = run_capture(&argv);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    };
    let out = dir.join("redacted.sqlite");
    run(&out, false);
    assert_eq!(
        stored_command(&out),
        ["true", "--api-key=<redacted>", "HF_TOKEN=<redacted>", "--password", "<redacted>", "tab\there\u{1}"]
    );
    let raw = std::fs::read(&out).unwrap();
    for secret in ["sk-live-123", "hf_secret", "hunter2"] {
        assert!(!raw.windows(secret.len()).any(|w| w == secret.as_bytes()), "{secret} stored");
    }
    let kept = dir.join("kept.sqlite");
    run(&kept, true);
    assert_eq!(stored_command(&kept), args);
}

#[test]
fn secrets_in_spooled_command_lines_and_environment_are_redacted() {
    let dir = temp_dir("redact-spool");
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    write_spool(&spool_dir.join("node1.4242.spool"), 1);
    let out = dir.join("out.sqlite");
    let output = run_capture(&["--merge".as_ref(), spool_dir.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let raw = std::fs::read(&out).unwrap();
    for secret in ["sk-live-123", "hf_secret"] {
        assert!(!raw.windows(secret.len()).any(|w| w == secret.as_bytes()), "{secret} stored");
    }
    let conn = rusqlite::Connection::open(&out).unwrap();
    let rank: String =
        conn.query_row("SELECT value FROM SHARDSCOPE_CAPTURE_ENV WHERE name = 'RANK'", [], |r| r.get(0)).unwrap();
    assert_eq!(rank, "0", "ordinary variables stay");
}

#[test]
#[cfg_attr(not(util_linux_script), ignore = "needs util-linux `script` on PATH")]
fn a_workload_that_reads_the_terminal_is_not_stopped() {
    // `script` gives the run a pseudo-terminal, with capture in its foreground process group.
    let dir = temp_dir("terminal");
    let lib = fake_lib(&dir);
    let out = dir.join("out.sqlite");
    let inner = format!(
        "{} --inject-lib {} -o {} -- sh -c 'read line; echo got:$line'",
        capture_bin(),
        lib.display(),
        out.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        // A workload outside the terminal's foreground group is stopped by SIGTTIN, and capture
        // would wait for it for ever.
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the workload was stopped reading the terminal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("got:hello"), "{stdout}");
}

#[test]
fn a_damaged_header_frame_keeps_the_rank_and_says_so() {
    let dir = temp_dir("damaged-header");
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    let spool = spool_dir.join("node1.4242.spool");
    write_spool(&spool, 5);
    let mut bytes = std::fs::read(&spool).unwrap();
    let offsets = frame_offsets(&bytes);
    // One flipped byte inside the first frame: the process header, the kernel name and the GPU.
    bytes[offsets[0] + 12] ^= 0xff;
    std::fs::write(&spool, &bytes).unwrap();

    let folder = merge::read_spool_folder(&spool_dir).unwrap();
    assert!(folder.spools[0].info().is_none(), "the header frame is lost");
    let (trace, _) = merge::merge(&folder.spools, &MergeOptions::default());
    assert_eq!(trace.processes.len(), 1, "the rank is kept: {:?}", trace.warnings);
    assert_eq!((trace.processes[0].pid, trace.processes[0].host.as_deref()), (4242, Some("node1")));
    assert!(
        trace.warnings.iter().any(|w| w.what.contains("without a readable process header")),
        "{:?}",
        trace.warnings
    );
    // Every kernel is either kept or counted among the warnings: none is lost silently.
    let counted: u64 = trace.warnings.iter().filter(|w| w.what.contains("kernel")).map(|w| w.count).sum();
    assert_eq!(trace.kernels.len() as u64 + counted, 50, "{:?}", trace.warnings);
}
