//! Joining a table's shares, each sorted, into one sorted list on several threads.
//!
//! The readers decode a big table in shares of rowids, and each sorts its rows by time. nsys writes tables roughly
//! in time order, so the shares mostly follow one another and their concatenation is the answer; where they
//! overlap (an export's host calls of several processes interleave), the rows are merged. Either way the result is
//! what a stable sort of the concatenation gives (equal keys keep the earlier share's row first), so that
//! `Trace::finish` finds its work done. The merge splits the keys into pieces, each piece merged on its own thread:
//! ten million host calls are half a gigabyte, which one thread merged in 0.7 s on the 2-core machine.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Pieces of the merge per thread: more than one, so that a piece where many shares overlap does not hold the rest
/// back.
const PIECES_PER_THREAD: usize = 4;

/// Keys sampled per piece when choosing where pieces split.
const SAMPLES_PER_PIECE: usize = 4;

/// Joins `runs`, each sorted by `order` and holding consecutive shares of a table, into one list sorted by `order`:
/// what a stable sort of their concatenation gives. A run that is not sorted leaves the result out of order, never
/// short of a row.
pub(super) fn join_sorted<T: Send, K: Ord>(mut runs: Vec<Vec<T>>, order: impl Fn(&T) -> K + Sync) -> Vec<T> {
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    if in_order(&runs, &order) {
        return concatenated(runs);
    }
    merged(runs, &order)
}

/// Whether each run starts at or after the end of the runs before it (its first row sorts no earlier than their
/// last): then their concatenation is already in order, and stable (equal keys keep the earlier share first).
fn in_order<T, K: Ord>(runs: &[Vec<T>], order: impl Fn(&T) -> K) -> bool {
    let mut last: Option<K> = None;
    runs.iter().all(|run| {
        let follows = match (&last, run.first()) {
            (Some(last), Some(first)) => *last <= order(first),
            _ => true,
        };
        if let Some(row) = run.last() {
            last = Some(order(row));
        }
        follows
    })
}

/// The runs one after the other, moved into place on several threads (a ten-million-kernel table is a gigabyte).
fn concatenated<T: Send>(runs: Vec<Vec<T>>) -> Vec<T> {
    let total: usize = runs.iter().map(Vec::len).sum();
    let mut joined: Vec<T> = Vec::with_capacity(total);
    let mut free = &mut joined.spare_capacity_mut()[..total];
    let mut moves = Vec::with_capacity(runs.len());
    for run in runs {
        let (slots, rest) = free.split_at_mut(run.len());
        free = rest;
        moves.push((slots, run));
    }
    shardscope_model::parallel::for_each_mut(&mut moves, 1, |(slots, run)| {
        for (slot, row) in slots.iter_mut().zip(std::mem::take(run)) {
            slot.write(row);
        }
    });
    // SAFETY: the runs' lengths sum to `total`, and each run's rows were written to its own slots of the first
    // `total`: every slot below `total` holds a row.
    unsafe { joined.set_len(total) };
    joined
}

/// The address of a run's first row, to be read on a worker thread.
struct RunStart<T>(*const T);

// By hand: derived, these would ask `T: Clone`, and only the address is copied.
impl<T> Clone for RunStart<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RunStart<T> {}

// SAFETY: a `RunStart` only lets a piece move out rows of a run whose rows are `Send`; each row is moved by exactly
// one piece (the pieces' ranges of a run are disjoint), and the run no longer owns them (see `merged`).
unsafe impl<T: Send> Send for RunStart<T> {}

/// One piece of the merge: the slots it fills, and per run the range of rows whose keys fall in the piece.
struct Piece<'a, T> {
    slots: &'a mut [MaybeUninit<T>],
    sources: Vec<(RunStart<T>, std::ops::Range<usize>)>,
    /// The runs the piece reads from.
    runs: Vec<usize>,
}

/// The stable merge of `runs` (see [`join_sorted`]), piece by piece on several threads.
fn merged<T: Send, K: Ord>(mut runs: Vec<Vec<T>>, order: &(impl Fn(&T) -> K + Sync)) -> Vec<T> {
    let total: usize = runs.iter().map(Vec::len).sum();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let bounds = piece_bounds(&runs, order, threads * PIECES_PER_THREAD);
    let mut joined: Vec<T> = Vec::with_capacity(total);
    let mut free = &mut joined.spare_capacity_mut()[..total];
    let mut pieces = Vec::with_capacity(bounds.len() - 1);
    // Per run, the pieces still to read from it: the last one done frees its memory, so that the runs go as the
    // joined list fills rather than all at the end (at ten million kernels both are a gigabyte).
    let mut pieces_left: Vec<AtomicUsize> = runs.iter().map(|_| AtomicUsize::new(0)).collect();
    for (from, to) in bounds.iter().zip(&bounds[1..]) {
        let runs_read: Vec<usize> = (0..runs.len()).filter(|&r| from[r] < to[r]).collect();
        let sources: Vec<_> = runs_read.iter().map(|&r| (RunStart(runs[r].as_ptr()), from[r]..to[r])).collect();
        for &r in &runs_read {
            *pieces_left[r].get_mut() += 1;
        }
        let (slots, rest) = free.split_at_mut(sources.iter().map(|(_, range)| range.len()).sum());
        free = rest;
        pieces.push(Piece { slots, sources, runs: runs_read });
    }
    // The rows are moved out below: the runs give up owning them first, so that a panic leaks rows rather than
    // dropping one twice.
    for run in &mut runs {
        // SAFETY: 0 is within capacity, and no row is dropped (they are moved out, or leaked on a panic).
        unsafe { run.set_len(0) };
    }
    let runs: Vec<Mutex<Vec<T>>> = runs.into_iter().map(Mutex::new).collect();
    shardscope_model::parallel::for_each_mut(&mut pieces, 1, |piece| {
        merge_piece(piece, order);
        for &r in &piece.runs {
            if pieces_left[r].fetch_sub(1, Ordering::AcqRel) == 1 {
                // No piece reads this run any more (its rows are all moved): its memory goes.
                drop(std::mem::take(&mut *runs[r].lock().unwrap_or_else(PoisonError::into_inner)));
            }
        }
    });
    // SAFETY: the pieces' ranges of each run are disjoint and cover it (`piece_bounds`), so the pieces' slots,
    // consecutive from the start, are `total` in all, and `merge_piece` wrote every slot of its piece.
    unsafe { joined.set_len(total) };
    joined
}

/// Where each piece starts in each run: `pieces` + 1 rows of run indices, the first all 0 and the last the runs'
/// lengths, never decreasing down a column (so the pieces' ranges of a run are disjoint and cover it, whatever the
/// rows). Pieces split at keys sampled evenly from the runs, so that they hold about as many rows each.
fn piece_bounds<T, K: Ord>(runs: &[Vec<T>], order: impl Fn(&T) -> K, pieces: usize) -> Vec<Vec<usize>> {
    let total: usize = runs.iter().map(Vec::len).sum();
    let stride = total.div_ceil(pieces.max(1) * SAMPLES_PER_PIECE).max(1);
    let mut samples: Vec<K> = runs.iter().flat_map(|run| run.iter().step_by(stride).map(&order)).collect();
    samples.sort_unstable();
    samples.dedup();
    let every = samples.len().div_ceil(pieces.max(1)).max(1);
    let splits = samples.into_iter().skip(every).step_by(every);
    let mut bounds = vec![vec![0; runs.len()]];
    for split in splits {
        let previous = &bounds[bounds.len() - 1];
        let row = (runs.iter().zip(previous))
            .map(|(run, &at)| run.partition_point(|row| order(row) < split).max(at))
            .collect();
        bounds.push(row);
    }
    bounds.push(runs.iter().map(Vec::len).collect());
    bounds
}

/// Fills a piece's slots with its rows in order; on equal keys the earlier run's row first.
fn merge_piece<T, K: Ord>(piece: &mut Piece<'_, T>, order: impl Fn(&T) -> K) {
    let Piece { slots, sources, .. } = piece;
    let mut slots = slots.iter_mut();
    // A look at a row not yet moved: `at` is always the start of a source's range, within its run's former length.
    let row_at = |start: RunStart<T>, at: usize| {
        // SAFETY: the row at `at` is initialised and not yet moved out (ranges only shrink from the front as rows
        // are moved), and no one else reads or writes it (the pieces' ranges are disjoint).
        unsafe { &*start.0.add(at) }
    };
    while sources.len() > 1 {
        let mut best = 0;
        let mut best_key = order(row_at(sources[0].0, sources[0].1.start));
        for (index, (start, range)) in sources.iter().enumerate().skip(1) {
            let key = order(row_at(*start, range.start));
            if key < best_key {
                (best, best_key) = (index, key);
            }
        }
        let (start, range) = &mut sources[best];
        let slot = slots.next().expect("a slot for every row of the piece");
        // SAFETY: as for `row_at`; the row is moved once (the range then starts after it), and its run no longer
        // owns it.
        slot.write(unsafe { std::ptr::read(start.0.add(range.start)) });
        range.start += 1;
        if range.start == range.end {
            sources.remove(best);
        }
    }
    if let Some((start, range)) = sources.pop() {
        for (slot, at) in slots.zip(range) {
            // SAFETY: as for `row_at`; each row of the last range is moved once.
            slot.write(unsafe { std::ptr::read(start.0.add(at)) });
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn stable_sort_of_concatenation(runs: &[Vec<(i32, String)>]) -> Vec<(i32, String)> {
        let mut expected = runs.concat();
        expected.sort_by_key(|row| row.0);
        expected
    }

    #[test]
    fn joining_shares_equals_a_stable_sort_of_their_concatenation() {
        let key = |&(key, _): &(i32, char)| key;
        let check = |runs: Vec<Vec<(i32, char)>>| {
            let mut expected = runs.concat();
            expected.sort_by_key(key);
            assert_eq!(join_sorted(runs, key), expected);
        };
        // Disjoint, touching with equal keys, overlapping a little, empty, reaching far back.
        check(vec![vec![(1, 'a'), (2, 'b')], vec![(3, 'c')], vec![(3, 'd'), (5, 'e')]]);
        check(vec![vec![(1, 'a'), (4, 'b'), (6, 'c')], vec![(4, 'd'), (5, 'e'), (9, 'f')], vec![], vec![(9, 'g')]]);
        check(vec![vec![(5, 'a'), (6, 'b'), (7, 'c')], vec![(1, 'd')], vec![(2, 'e'), (8, 'f')]]);
        check(vec![]);
        // Many shares in order, of owned rows (moved, not copied), some empty: the parallel concatenation.
        let runs: Vec<Vec<(i32, String)>> =
            (0..40).map(|r| (0..r % 7).map(|i| (r * 10 + i, format!("row {r}.{i}"))).collect()).collect();
        let expected: Vec<(i32, String)> = runs.concat();
        assert_eq!(join_sorted(runs, |row| row.0), expected);
    }

    #[test]
    fn a_merge_of_many_overlapping_shares_keeps_every_owned_row_in_stable_order() {
        // 30 shares of 2,000 rows each, every share overlapping its neighbours, few distinct keys: many pieces,
        // ties across shares, and rows that own memory (a row moved twice or dropped twice would show).
        let runs: Vec<Vec<(i32, String)>> = (0..30)
            .map(|r| (0..2000).map(|i| ((r * 37 + i) / 50, format!("{r}.{i}"))).collect::<Vec<_>>())
            .map(|mut run| {
                run.sort_by_key(|row| row.0);
                run
            })
            .collect();
        let expected = stable_sort_of_concatenation(&runs);
        let joined = join_sorted(runs, |row| row.0);
        assert_eq!(joined.len(), expected.len());
        assert_eq!(joined, expected);
    }

    #[test]
    fn shares_out_of_order_inside_lose_no_row() {
        // The readers sort each share; were one not sorted, the result may be out of order but keeps every row.
        let runs =
            vec![vec![(5, "a".to_string()), (1, "b".into()), (9, "c".into())], vec![(0, "d".into()), (3, "e".into())]];
        let mut joined = join_sorted(runs.clone(), |row| row.0);
        let mut all = runs.concat();
        joined.sort();
        all.sort();
        assert_eq!(joined, all);
    }

    proptest! {
        #[test]
        fn any_sorted_shares_join_as_a_stable_sort(
            shares in prop::collection::vec(prop::collection::vec(0i32..60, 0..300), 0..12),
        ) {
            let runs: Vec<Vec<(i32, String)>> = shares
                .into_iter()
                .enumerate()
                .map(|(r, mut keys)| {
                    keys.sort_unstable();
                    keys.into_iter().enumerate().map(|(i, k)| (k, format!("{r}.{i}"))).collect()
                })
                .collect();
            let expected = stable_sort_of_concatenation(&runs);
            prop_assert_eq!(join_sorted(runs, |row| row.0), expected);
        }
    }
}
