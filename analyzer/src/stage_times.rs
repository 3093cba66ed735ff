//! The wall time of each stage of a command on standard error, one line per stage, when `SHARDSCOPE_STAGE_TIMES`
//! is set (to anything): where a large report spends its time (reading, the figures, the dependency model and
//! its parts, the findings, writing), for sizing a machine and for the benchmarks. Where the system says (Linux's
//! `/proc/self/status`), each line also gives the process's resident memory when the stage ended and the peak so
//! far, which says which stage sets the command's peak. Without the variable nothing is timed or printed, and the
//! output is the same bytes either way.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

/// The variable that switches the lines on.
pub const STAGE_TIMES_ENV: &str = "SHARDSCOPE_STAGE_TIMES";

/// True when the stages are timed (read once per process).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os(STAGE_TIMES_ENV).is_some())
}

/// Runs `work`; when timing is on, writes `analyzer: stage NAME S.SSS s` after it, followed by
/// `(resident R MiB, peak P MiB)` where the system gives those figures.
pub fn stage<T>(name: &str, work: impl FnOnce() -> T) -> T {
    if !enabled() {
        return work();
    }
    let started = Instant::now();
    let result = work();
    let seconds = started.elapsed().as_secs_f64();
    // A lost line of timing is no reason to fail the command.
    let memory = memory_mib().map(|(resident, peak)| format!(" (resident {resident} MiB, peak {peak} MiB)"));
    let _ = writeln!(std::io::stderr(), "analyzer: stage {name} {seconds:.3} s{}", memory.unwrap_or_default());
    result
}

/// The process's resident memory and its peak so far, in MiB, from `/proc/self/status` (`None` elsewhere).
fn memory_mib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    Some((status_kib(&status, "VmRSS:")? / 1024, status_kib(&status, "VmHWM:")? / 1024))
}

/// The value of a `NAME: N kB` line of a `/proc/PID/status` text.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(name))?;
    line[name.len()..].trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_returns_what_its_work_returns() {
        assert_eq!(stage("sum", || 2 + 3), 5);
    }

    #[test]
    fn status_lines_give_kib() {
        let status = "Name:\tanalyzer\nVmHWM:\t  8123456 kB\nVmRSS:\t   204800 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(8_123_456));
        assert_eq!(status_kib(status, "VmRSS:"), Some(204_800));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        assert_eq!(status_kib("VmRSS:\tlots kB\n", "VmRSS:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_memory_and_a_peak_at_least_as_large() {
        let (resident, peak) = memory_mib().expect("Linux gives /proc/self/status");
        assert!(peak >= resident, "peak {peak} MiB below resident {resident} MiB");
    }
}
