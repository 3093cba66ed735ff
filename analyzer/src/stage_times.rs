//! The wall time of each stage of a command on standard error, one line per stage, when `SHARDSCOPE_STAGE_TIMES`
//! is set (to anything): where a large report spends its time (reading, the figures, the dependency model and
//! its parts, the findings, writing), for sizing a machine and for the benchmarks. Without it nothing is timed or
//! printed, and the output is the same bytes either way.

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

/// Runs `work`; when timing is on, writes `analyzer: stage NAME S.SSS s` after it.
pub fn stage<T>(name: &str, work: impl FnOnce() -> T) -> T {
    if !enabled() {
        return work();
    }
    let started = Instant::now();
    let result = work();
    let seconds = started.elapsed().as_secs_f64();
    // A lost line of timing is no reason to fail the command.
    let _ = writeln!(std::io::stderr(), "analyzer: stage {name} {seconds:.3} s");
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_returns_what_its_work_returns() {
        assert_eq!(stage("sum", || 2 + 3), 5);
    }
}
