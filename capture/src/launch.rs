//! Running the workload: its own process group, signals forwarded, exit status returned.
//!
//! The workload runs in a new process group so that a forwarded SIGINT or SIGTERM reaches
//! every process of the job (a launcher such as `torchrun` and all its ranks), while
//! `capture` itself survives to merge what they recorded. Its stdin, stdout and stderr are
//! inherited unchanged.

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
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot run {}: {e}", program.to_string_lossy())))?;
    let group = child.id() as libc::pid_t;
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
    handle.close();
    let _ = forwarder.join();
    let status = status?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ChildExit::Code(code),
        (None, Some(signal)) => ChildExit::Signal(signal),
        (None, None) => ChildExit::Code(1),
    })
}
