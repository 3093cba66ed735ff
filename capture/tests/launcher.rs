//! The launcher with workloads that never touch CUDA: exit codes and signals pass through,
//! forwarded signals reach the whole process group, and a (then empty) trace is still written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn capture_bin() -> &'static str {
    env!("CARGO_BIN_EXE_capture")
}

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-launch-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `capture -o <dir>/out.sqlite -- sh -c script` with a stand-in injection library
/// (these workloads never load it).
fn capture_sh(dir: &Path, script: &str) -> Output {
    let fake_lib = dir.join("libfake_inject.so");
    std::fs::write(&fake_lib, b"").unwrap();
    Command::new(capture_bin())
        .arg("-o")
        .arg(dir.join("out.sqlite"))
        .arg("--inject-lib")
        .arg(&fake_lib)
        .args(["--group-wait", "5", "--", "sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn exit_code_and_output_pass_through() {
    let dir = temp_dir("exit");
    let out = capture_sh(&dir, "echo to-stdout; echo to-stderr >&2; exit 3");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to-stdout\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-stderr"));
    assert!(dir.join("out.sqlite").is_file(), "the trace is written even when the workload fails");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn killed_workload_reports_the_signal_and_exits_128_plus_it() {
    let dir = temp_dir("kill");
    let out = capture_sh(&dir, "kill -9 $$");
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(String::from_utf8_lossy(&out.stderr).contains("workload killed by SIGKILL (signal 9)"));
    assert!(dir.join("out.sqlite").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn existing_output_is_kept_without_force() {
    let dir = temp_dir("force");
    std::fs::write(dir.join("out.sqlite"), b"precious").unwrap();
    let out = capture_sh(&dir, "exit 0");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("output exists (pass --force to replace it)"));
    assert_eq!(std::fs::read(dir.join("out.sqlite")).unwrap(), b"precious");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_outside_windows_mode_is_one_line_and_exit_2_before_the_workload_runs() {
    let dir = temp_dir("outside");
    let marker = dir.join("ran");
    let out = Command::new(capture_bin())
        .arg("-o")
        .arg(dir.join("out.sqlite"))
        .args(["--cuda-profiler-api", "--outside-windows", "sometimes", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--outside-windows") && stderr.contains("'sometimes'"), "{stderr}");
    assert!(!marker.exists(), "the workload ran");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn several_children_and_leftover_group_members_are_waited_for() {
    let dir = temp_dir("children");
    let marker = dir.join("late-child-finished");
    // Two children in parallel, then one left running after the shell exits.
    let script = format!("sleep 0.1 & sleep 0.1; wait; (sleep 0.3; touch {}) & exit 0", marker.display());
    let out = capture_sh(&dir, &script);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(marker.exists(), "capture returned before the group's last process finished");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_is_forwarded_to_the_group_and_the_trace_still_written() {
    let dir = temp_dir("term");
    let ready = dir.join("ready");
    let got = dir.join("grandchild-got-term");
    let fake_lib = dir.join("libfake_inject.so");
    std::fs::write(&fake_lib, b"").unwrap();
    // The shell sets its trap first (it exits 7 on SIGTERM); the grandchild then sets its own
    // (it records the signal) and only then says it is ready, so no signal can come too early.
    let script = format!(
        "trap 'wait; exit 7' TERM; \
         sh -c 'trap \"touch {got}; exit 0\" TERM; touch {ready}; while true; do sleep 0.05; done' & \
         while true; do sleep 0.05; done",
        got = got.display(),
        ready = ready.display()
    );
    let child = Command::new(capture_bin())
        .arg("-o")
        .arg(dir.join("out.sqlite"))
        .arg("--inject-lib")
        .arg(&fake_lib)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&ready);
    // SAFETY: plain signal to the capture process we started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(got.exists(), "the grandchild did not receive the forwarded SIGTERM");
    assert!(dir.join("out.sqlite").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_injection_library_is_preloaded_unless_the_guard_is_off() {
    let dir = temp_dir("preload");
    let out = capture_sh(&dir, "echo \"preload=$LD_PRELOAD\"");
    let fake_lib = std::fs::canonicalize(dir.join("libfake_inject.so")).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("preload={}", fake_lib.display())), "{stdout}");

    let fake_lib = dir.join("libfake_inject.so");
    let out = Command::new(capture_bin())
        .arg("-o")
        .arg(dir.join("off.sqlite"))
        .arg("--inject-lib")
        .arg(&fake_lib)
        .args(["--no-client-guard", "--", "sh", "-c", "echo \"preload=[$LD_PRELOAD]\""])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "preload=[]\n");
    std::fs::remove_dir_all(&dir).unwrap();
}
