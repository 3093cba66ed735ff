//! The wall time of each stage of a command on standard error, one line per stage, when `SHARDSCOPE_STAGE_TIMES`
//! is set (to anything): where a large report spends its time (reading, the figures, the dependency model and
//! its parts, the findings, writing), for sizing a machine and for the benchmarks. Each line also gives the CPU
//! time the whole process used meanwhile (user and system, all threads: over the wall time, the cores the stage kept
//! busy, where nothing ran beside it), and, where the system says (Linux's `/proc/self/status`), the process's
//! resident memory when the stage ended and the peak so far, which says which stage sets the command's peak.
//! Without the variable nothing is timed or printed, and the output is the same bytes either way.

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
/// `(cpu C.CC s, resident R MiB, peak P MiB)`, each figure where the system gives it.
pub fn stage<T>(name: &str, work: impl FnOnce() -> T) -> T {
    if !enabled() {
        return work();
    }
    let (started, cpu_before) = (Instant::now(), process_cpu_s());
    let result = work();
    let seconds = started.elapsed().as_secs_f64();
    let mut figures = Vec::new();
    if let (Some(before), Some(after)) = (cpu_before, process_cpu_s()) {
        figures.push(format!("cpu {:.2} s", after - before));
    }
    if let Some((resident, peak)) = memory_mib() {
        figures.push(format!("resident {resident} MiB, peak {peak} MiB"));
    }
    let figures = if figures.is_empty() { String::new() } else { format!(" ({})", figures.join(", ")) };
    // A lost line of timing is no reason to fail the command.
    let _ = writeln!(std::io::stderr(), "analyzer: stage {name} {seconds:.3} s{figures}");
    result
}

/// The user and system CPU time of the whole process so far, seconds (`None` where the system does not say).
fn process_cpu_s() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes one `rusage` into the memory given, which is large enough and zeroed.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: it returned 0, so it filled the struct (and a zeroed `rusage` is a valid value anyway).
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
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
    fn the_process_cpu_time_grows_with_work() {
        // Spins until the process has used 10 ms more CPU time; a clock that never moved would spin for 10 s.
        let before = process_cpu_s().expect("getrusage answers on the platforms tested");
        let started = Instant::now();
        let mut x = 0u64;
        let mut grown = false;
        while !grown && started.elapsed().as_secs() < 10 {
            x = std::hint::black_box(x.wrapping_add(1));
            grown = x.is_multiple_of(1 << 16) && process_cpu_s().expect("getrusage answers") - before >= 0.01;
        }
        assert!(grown, "no CPU time counted after {:?} of spinning", started.elapsed());
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
