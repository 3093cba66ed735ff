//! The analyzer's worker threads: one pool of named threads (`shardscope-analyze-N`) that the report's parallel
//! steps run on, so that a stack dump or `top -H` says whose threads they are.
//!
//! Work is split by rank, by device and by collective instance; every parallel step collects its results in input
//! order, so the report is the same bytes on any number of threads ([`with_threads`] with 1 runs every step in
//! turn, which the tests compare against).

use std::sync::OnceLock;

use rayon::{ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};

/// Builds a pool of `threads` named workers (0: one per available core).
fn build(threads: usize) -> Result<ThreadPool, ThreadPoolBuildError> {
    ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("shardscope-analyze-{i}")).build()
}

/// Runs `work` on the shared pool (one worker per core, made on first use); on a worker of any pool already (a step
/// inside another), where it is. Where no thread can be started, `work` runs on the calling thread alone.
pub fn run<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<ThreadPool>> = OnceLock::new();
    if rayon::current_thread_index().is_some() {
        return work();
    }
    match POOL.get_or_init(|| build(0).ok()) {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// Runs `a` and `b` on the shared pool (as [`run`]): side by side where the pool has more workers than `a_width`
/// (the most `a` keeps busy at once, such as one per rank), else `a` then `b`. Without idle workers, running both at
/// once only makes them compete for caches and memory (on 2 cores the 10 M-kernel report took 3–5 % more CPU time).
pub fn side_by_side<A: Send, B: Send>(
    a_width: usize,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    run(|| {
        if rayon::current_num_threads() > a_width {
            rayon::join(a, b)
        } else {
            let first = a();
            (first, b())
        }
    })
}

/// Runs `work` on a pool of its own with `threads` workers (1: every parallel step in turn), or on the calling
/// thread alone where no thread can be started.
pub fn with_threads<R: Send>(threads: usize, work: impl FnOnce() -> R + Send) -> R {
    match build(threads.max(1)) {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
}

/// Drops `value` on a thread of its own: a model or the traces of a large run hold gigabytes, which the system takes
/// back one mapping at a time (about half a second at 10 M kernels, one thread), time the caller need not wait
/// for; a process that ends meanwhile simply leaves it. Dropped on the calling thread where no thread can start.
pub fn drop_in_background<T: Send + 'static>(value: T) {
    // On failure the closure, and `value` with it, is dropped here.
    let _ = std::thread::Builder::new().name("shardscope-free".into()).spawn(move || drop(value));
}
