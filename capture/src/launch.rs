//! Running the workload: its own process group, signals forwarded, exit status returned.
//!
//! The workload runs in a new process group so that a forwarded SIGINT or SIGTERM reaches
//! every process of the job (a launcher such as `torchrun` and all its ranks), while
//! `capture` itself survives to merge what they recorded. Its stdin, stdout and stderr are
//! inherited unchanged.
//!
//! A terminal lets only its foreground process group read from it; any other group that tries
//! is stopped (SIGTTIN). So when `capture` runs in the foreground of a terminal, it hands the
//! terminal to the workload's group, as a shell does for a job (the child takes it too, before
//! `exec`, so that it can never read first), and takes it back once the workload has ended.
//! Ctrl-C then reaches the workload's group straight from the terminal.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

/// How the workload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl ChildExit {
    /// The exit code `capture` should end with: the child's code, or 128 + signal like a shell.
    pub fn exit_code(self) -> i32 {
        match self {
            ChildExit::Code(code) => code,
            ChildExit::Signal(signal) => 128 + signal,
        }
    }
}

/// The usual name of a signal, for messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// Runs `command` with `env` added, forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT to its
/// process group, and waits for it. After it ends, waits up to `group_grace` for the rest of
/// its process group (children it left running) so that their spools are complete.
pub fn run(command: &[OsString], env: &[(String, OsString)], group_grace: Duration) -> std::io::Result<ChildExit> {
    let (program, args) = command.split_first().ok_or_else(|| std::io::Error::other("no command given"))?;
    // Listen before spawning, so a signal that arrives early is still forwarded.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    let handle = signals.handle();
    let terminal = foreground_terminal();
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().map(|(k, v)| (k, v))).process_group(0);
    if let Some(fd) = terminal {
        // SAFETY: the closure runs in the forked child before exec and calls only
        // async-signal-safe functions (sigprocmask, getpid, tcsetpgrp) on plain integers.
        unsafe {
            command.pre_exec(move || {
                // The new group is in the background until the terminal is its: block SIGTTOU,
                // which tcsetpgrp from a background group would otherwise raise.
                with_sigttou_blocked(|| libc::tcsetpgrp(fd, libc::getpid()));
                Ok(())
            });
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot run {}: {e}", program.to_string_lossy())))?;
    let group = child.id() as libc::pid_t;
    if let Some(fd) = terminal {
        // Also from here, whichever of the two runs first.
        // SAFETY: tcsetpgrp takes plain integers.
        unsafe { with_sigttou_ignored(|| libc::tcsetpgrp(fd, group)) };
    }
    let forwarder = std::thread::Builder::new()
        .name("capture-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
                unsafe { libc::kill(-group, signal) };
            }
        })
        .expect("cannot start the signal-forwarding thread");
    let status = child.wait();
    let deadline = Instant::now() + group_grace;
    // SAFETY: signal 0 only checks whether any process of the group still exists.
    while unsafe { libc::kill(-group, 0) } == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(fd) = terminal {
        // Take the terminal back: capture's own group is in the background now.
        // SAFETY: tcsetpgrp and getpgrp take and return plain integers.
        unsafe { with_sigttou_ignored(|| libc::tcsetpgrp(fd, libc::getpgrp())) };
    }
    handle.close();
    let _ = forwarder.join();
    let status = status?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ChildExit::Code(code),
        (None, Some(signal)) => ChildExit::Signal(signal),
        (None, None) => ChildExit::Code(1),
    })
}

/// The first of stdin, stdout and stderr that is a terminal in whose foreground `capture` runs.
fn foreground_terminal() -> Option<libc::c_int> {
    (0..3).find(|&fd| {
        // SAFETY: isatty, tcgetpgrp and getpgrp take and return plain integers.
        unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() }
    })
}

/// Runs `f` with SIGTTOU blocked in the calling thread (for the forked child, which has one).
///
/// # Safety
/// Async-signal-safe: only sigprocmask around `f`.
unsafe fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    // SAFETY: the sets are plain memory initialised by sigemptyset before use.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &block, &mut previous);
        f();
        libc::sigprocmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    }
}

/// Runs `f` with SIGTTOU ignored by the whole process (blocking it in one thread would not stop
/// it reaching another), then restores its previous disposition.
///
/// # Safety
/// Changes a process-wide signal disposition for the duration of `f`.
unsafe fn with_sigttou_ignored(f: impl FnOnce() -> libc::c_int) {
    // SAFETY: sigaction structures are plain memory, zeroed and then filled in.
    unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        let mut previous: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTTOU, &ignore, &mut previous);
        f();
        libc::sigaction(libc::SIGTTOU, &previous, std::ptr::null_mut());
    }
}
