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

/// Items read per task by [`indices_by_owner`].
const ITEMS_PER_TASK: usize = 1 << 16;

/// Per owner (`0..owners`), the indices of the items `owner` gives it, in order (an owner out of range gets none):
/// one pass over the items, a run per task on the shared pool, then each owner's runs joined. Where several owners
/// share a list (the ranks of one file, the devices of one trace), one pass for all costs one read of the list, not
/// one per owner.
pub fn indices_by_owner<T: Sync>(
    items: &[T],
    owners: usize,
    owner: impl Fn(&T) -> Option<usize> + Sync,
) -> Vec<Vec<u32>> {
    use rayon::prelude::*;
    run(|| {
        let per_run: Vec<Vec<Vec<u32>>> = (items.par_chunks(ITEMS_PER_TASK).enumerate())
            .map(|(run, chunk)| {
                let mut lists = vec![Vec::new(); owners];
                for (i, item) in chunk.iter().enumerate() {
                    if let Some(list) = owner(item).and_then(|o| lists.get_mut(o)) {
                        list.push((run * ITEMS_PER_TASK + i) as u32);
                    }
                }
                lists
            })
            .collect();
        (0..owners)
            .into_par_iter()
            .map(|o| {
                let mut all = Vec::with_capacity(per_run.iter().map(|lists| lists[o].len()).sum());
                for lists in &per_run {
                    all.extend_from_slice(&lists[o]);
                }
                all
            })
            .collect()
    })
}

/// Per owner (`0..owners`), the values `of` gives its items, combined by `combine` (`None`: no item of its), a run of
/// items per task on the shared pool; `items` yields (owner, value), an owner out of range counting for none.
/// `combine` must not depend on the order it meets values in (a minimum, a maximum, a widest extent).
pub fn fold_per_owner<V: Copy + Send>(
    items: impl rayon::iter::ParallelIterator<Item = (usize, V)>,
    owners: usize,
    combine: impl Fn(V, V) -> V + Sync,
) -> Vec<Option<V>> {
    use rayon::prelude::*;
    let add = |mut held: Vec<Option<V>>, (owner, value): (usize, V)| {
        if let Some(slot) = held.get_mut(owner) {
            *slot = Some(slot.map_or(value, |v| combine(v, value)));
        }
        held
    };
    let merge = |a: Vec<Option<V>>, b: Vec<Option<V>>| {
        a.into_iter().zip(b).map(|(a, b)| a.into_iter().chain(b).reduce(&combine)).collect()
    };
    run(|| items.fold(|| vec![None; owners], add).reduce(|| vec![None; owners], merge))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items sorted to their owners a run per task give each owner its items in order, as one filter per owner
    /// would; items of no owner (or an owner out of range) go nowhere.
    #[test]
    fn items_go_to_their_owners_in_order() {
        let items: Vec<u32> = (0..3 * ITEMS_PER_TASK as u32 + 77).map(|i| i.wrapping_mul(2_654_435_761) >> 7).collect();
        let owner = |item: &u32| match item % 11 {
            10 => None,
            9 => Some(99),
            o => Some(o as usize % 4),
        };
        let lists = indices_by_owner(&items, 4, owner);
        for (o, list) in lists.iter().enumerate() {
            let expected: Vec<u32> =
                (0..items.len() as u32).filter(|&i| owner(&items[i as usize]) == Some(o)).collect();
            assert_eq!(list, &expected, "owner {o}");
        }
    }

    /// Values folded per owner over many runs equal one fold per owner; owners with no item, or out of range, none.
    #[test]
    fn values_fold_per_owner_as_one_pass_would() {
        use rayon::prelude::*;
        let items: Vec<u64> =
            (0..3 * ITEMS_PER_TASK as u64 + 5).map(|i| i.wrapping_mul(2_654_435_761) % 1_000).collect();
        let keyed = || items.par_iter().with_min_len(1 << 10).map(|&v| ((v % 7) as usize, v));
        let widest = |a: (u64, u64), b: (u64, u64)| (a.0.min(b.0), a.1.max(b.1));
        let folded = fold_per_owner(keyed().map(|(o, v)| (o, (v, v))), 6, widest);
        for (o, got) in folded.iter().enumerate() {
            let mine = items.iter().filter(|&&v| (v % 7) as usize == o);
            assert_eq!(*got, mine.map(|&v| (v, v)).reduce(widest), "owner {o}");
        }
        assert_eq!(fold_per_owner(keyed(), 9, u64::max)[7..], [None, None]);
    }
}
