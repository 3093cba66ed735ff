//! Work on several threads: passes over an event list (a ten-million-kernel list is a gigabyte, and one thread
//! reads it at a fraction of the machine's memory bandwidth) and a reader's shares of a table. Chunks are taken from
//! a queue by the calling thread and its helpers; a helper that cannot be started leaves its chunks to the others.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Threads for one pass, at most.
const MAX_THREADS: usize = 16;

/// Events per chunk, at least, in the passes over event lists: below this a helper costs more than it saves.
pub const MIN_CHUNK: usize = 1 << 16;

/// Whether `test` holds for every item.
pub(crate) fn all<T: Sync>(items: &[T], test: impl Fn(&T) -> bool + Sync) -> bool {
    let holds = AtomicBool::new(true);
    let chunk = chunk_len(items.len(), MIN_CHUNK);
    run(items.chunks(chunk).collect(), |part: &[T]| {
        if holds.load(Ordering::Relaxed) && !part.iter().all(&test) {
            holds.store(false, Ordering::Relaxed);
        }
    });
    holds.into_inner()
}

/// Whether `in_order(a, b)` holds for every item `a` and the one after it, `b`.
pub(crate) fn all_pairs<T: Sync>(items: &[T], in_order: impl Fn(&T, &T) -> bool + Sync) -> bool {
    let holds = AtomicBool::new(true);
    let chunk = chunk_len(items.len(), MIN_CHUNK);
    // Each part reaches one item into the next, so that the pairs across a boundary are checked too.
    let parts: Vec<&[T]> =
        (0..items.len()).step_by(chunk).map(|at| &items[at..(at + chunk + 1).min(items.len())]).collect();
    run(parts, |part: &[T]| {
        if holds.load(Ordering::Relaxed) && !part.windows(2).all(|w| in_order(&w[0], &w[1])) {
            holds.store(false, Ordering::Relaxed);
        }
    });
    holds.into_inner()
}

/// Runs `work` on every item, in chunks of `min_chunk` items at least (1 where each item is heavy work, such as a
/// reader's share of a table; [`MIN_CHUNK`] for events).
pub fn for_each_mut<T: Send>(items: &mut [T], min_chunk: usize, work: impl Fn(&mut T) + Sync) {
    let chunk = chunk_len(items.len(), min_chunk);
    run(items.chunks_mut(chunk).collect(), |part: &mut [T]| part.iter_mut().for_each(&work));
}

/// `work(first, chunk)` of every chunk of `items` (`first`: the chunk's first item's index), in chunks of
/// `min_chunk` items at least, the results in the chunks' order: a fold of each chunk, to be merged by the caller.
pub fn map_chunks<T: Sync, R: Send>(items: &[T], min_chunk: usize, work: impl Fn(usize, &[T]) -> R + Sync) -> Vec<R> {
    let chunk = chunk_len(items.len(), min_chunk);
    let mut results: Vec<Option<R>> = (0..items.len().div_ceil(chunk)).map(|_| None).collect();
    let jobs: Vec<(usize, &[T], &mut Option<R>)> =
        items.chunks(chunk).zip(&mut results).enumerate().map(|(i, (part, slot))| (i * chunk, part, slot)).collect();
    run(jobs, |(first, part, slot)| *slot = Some(work(first, part)));
    // Every chunk was worked on (`run` drains them all), so every slot is filled.
    results.into_iter().flatten().collect()
}

/// Items per chunk: the items spread over the threads (so there are no more chunks than threads), `min_chunk` at
/// least.
fn chunk_len(items: usize, min_chunk: usize) -> usize {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, MAX_THREADS);
    items.div_ceil(threads).max(min_chunk).max(1)
}

/// Runs `work` on every chunk, on the calling thread and up to one helper per further chunk.
fn run<C: Send>(chunks: Vec<C>, work: impl Fn(C) + Sync) {
    let slots: Vec<Mutex<Option<C>>> = chunks.into_iter().map(|c| Mutex::new(Some(c))).collect();
    let next = AtomicUsize::new(0);
    let drain = || {
        while let Some(slot) = slots.get(next.fetch_add(1, Ordering::Relaxed)) {
            if let Some(chunk) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                work(chunk);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..slots.len() {
            let _ = std::thread::Builder::new().name("shardscope-model-pass".into()).spawn_scoped(s, drain);
        }
        drain();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_passes_see_every_item_and_every_pair_across_chunk_boundaries() {
        let n = 5 * MIN_CHUNK + 7;
        let mut items: Vec<u64> = (0..n as u64).collect();
        assert!(all(&items, |&x| x < n as u64));
        assert!(!all(&items, |&x| x != (n - 1) as u64));
        assert!(all_pairs(&items, |a, b| a < b));
        // Out of order exactly at a chunk boundary, and at the very end.
        for at in [MIN_CHUNK, n - 1] {
            let mut swapped = items.clone();
            swapped.swap(at - 1, at);
            assert!(!all_pairs(&swapped, |a, b| a < b), "swap at {at}");
        }
        for_each_mut(&mut items, MIN_CHUNK, |x| *x *= 2);
        assert!(items.iter().enumerate().all(|(i, &x)| x == 2 * i as u64));
        // One item per chunk at least: heavy items spread over the threads, every one still worked on once.
        let mut heavy: Vec<Vec<u64>> = (0..40).map(|i| vec![i; 3]).collect();
        for_each_mut(&mut heavy, 1, |v| v.iter_mut().for_each(|x| *x += 1));
        assert!(heavy.iter().enumerate().all(|(i, v)| v == &vec![i as u64 + 1; 3]));
        assert!(all::<u64>(&[], |_| false) && all_pairs::<u64>(&[], |_, _| false));
    }

    #[test]
    fn chunks_are_mapped_once_each_in_order() {
        let n = 7 * MIN_CHUNK + 3;
        let items: Vec<u64> = (0..n as u64).collect();
        let sums = map_chunks(&items, MIN_CHUNK, |first, part| (first, part.len(), part.iter().sum::<u64>()));
        // In order, covering every item once, each chunk starting where the one before it ended.
        let mut next = 0;
        for &(first, len, sum) in &sums {
            assert_eq!(first, next);
            assert_eq!(sum, (first as u64..(first + len) as u64).sum::<u64>());
            next = first + len;
        }
        assert_eq!(next, n);
        assert!(map_chunks::<u64, ()>(&[], MIN_CHUNK, |_, _| ()).is_empty());
    }
}
