//! The model's topological order made a stretch of time per worker: the same order as Kahn's loop over the whole
//! model (earliest measured time first, then vertex), which tens of millions of vertices keep on one thread for
//! most of a second.
//!
//! Why it is the same order: cut the vertices into segments by measured time, at times that no *backward* edge
//! (one whose source comes after its target in (time, vertex)) reaches across. Then every edge runs within a segment
//! or into a later one, and the whole loop hands out every vertex of a segment before any of a later one: were a
//! later vertex handed out while one of an earlier segment waits, that one's unfinished predecessors, and theirs,
//! all lie in its segment or before, and the first of them with none left unfinished was ready and earlier in time.
//! While a segment is handed out, its ready vertices are those whose predecessors in the segment are done (those of
//! earlier segments are), so Kahn's loop on the segment alone, counting only its own edges, hands them out in the
//! same order. A cycle (which the whole loop breaks by forcing a vertex) lies within one segment, since no edge
//! runs back across a cut: a segment whose loop runs dry before its end gives up, and the caller runs the whole
//! loop instead. Where too few cuts are allowed, the caller runs the whole loop on one worker while the others lay
//! out the incoming lists, which the loop does not read (unless it meets a cycle).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering};

use rayon::prelude::*;

use super::{IncomingLists, PAR_MIN_LEN, atomic_zeros, hold_earliest, next_past_heap};

/// Fewest vertices worth cutting into segments: below it, the passes that set the cuts cost more than the loop.
/// The unit tests cut models of a few vertices, so that their small cases take this path too.
#[cfg(not(test))]
const SEGMENTED_MIN_VERTICES: usize = 1 << 18;
#[cfg(test)]
const SEGMENTED_MIN_VERTICES: usize = 4;

/// Fewest worker threads for which segments pay: their passes to place the cuts and count each segment's own
/// edges cost about as much CPU time as the whole loop (at 10 M kernels × 8 ranks on 2 cores, 2.3 s of CPU for the
/// segments against 1.3 s for the loop), so on 2 or 3 threads the loop is as fast. The unit tests cut on 2.
#[cfg(not(test))]
const SEGMENTED_MIN_THREADS: usize = 4;
#[cfg(test)]
const SEGMENTED_MIN_THREADS: usize = 2;

/// The fullest segment may hold one vertex in this many, or the whole loop runs instead.
const MOST_IN_ONE_SEGMENT: usize = 4;

/// Segments per worker thread: more than one, so that a segment longer than the others does not leave the rest idle.
const SEGMENTS_PER_THREAD: usize = 8;

/// One vertex in every this many is sampled to place the cuts (by the times of the sample); every one in the unit
/// tests' small models.
#[cfg(not(test))]
const SAMPLE_EVERY: usize = 64;
#[cfg(test)]
const SAMPLE_EVERY: usize = 1;

/// The times at which the whole loop's order may be cut into segments of time, one stretch per worker, read from
/// every edge (`edges`: source and target vertex); `None` where that does not pay (few vertices or threads, or
/// too few cuts allowed by edges backwards in time).
pub(super) fn cuts_worth_making(
    measured_ns: &[i64],
    edges: impl ParallelIterator<Item = (u32, u32)>,
) -> Option<Vec<i64>> {
    if !order_worth_sharing_out(measured_ns.len()) {
        return None;
    }
    let threads = rayon::current_num_threads();
    let sample = time_sample(measured_ns);
    let cuts = cuts_ns(&sample, &backward_spans(measured_ns, edges), threads * SEGMENTS_PER_THREAD);
    // Where edges backwards in time lie close together across the whole run (ranks whose collectives end before
    // the last rank arrives: clocks of different hosts, or a generated run), few cuts are allowed: with a segment
    // of more than a quarter of the vertices, the loop would gain little for the passes below.
    (largest_segment_in(&sample, &cuts) <= sample.len() / MOST_IN_ONE_SEGMENT).then_some(cuts)
}

/// The topological order of the `measured_ns.len()` vertices with `incoming` edges and successor lists
/// `outgoing[outgoing_offsets[v]..outgoing_offsets[v + 1]]`, as Kahn's loop over the whole model gives it, made a
/// segment of time per worker between `cuts` (from [`cuts_worth_making`]); `None` where a cycle was met.
pub(super) fn segmented_order(
    measured_ns: &[i64],
    incoming: &IncomingLists,
    outgoing_offsets: &[u32],
    outgoing: &[AtomicU32],
    cuts: &[i64],
) -> Option<Vec<u32>> {
    let n = measured_ns.len();
    let segments = cuts.len() + 1;
    let indegree = atomic_zeros(n);
    let (sizes, mut ready) = counts_sizes_and_ready(measured_ns, incoming, cuts, &indegree);
    let mut order = vec![0u32; n];
    let mut rooms: Vec<&mut [u32]> = Vec::with_capacity(segments);
    let mut rest: &mut [u32] = &mut order;
    for &size in &sizes {
        let (room, after) = rest.split_at_mut(size);
        rooms.push(room);
        rest = after;
    }
    let complete = (rooms.into_par_iter().zip(ready.par_drain(..)).enumerate())
        .with_max_len(1)
        .map(|(segment, (room, ready))| {
            let walk =
                Walk { measured_ns, indegree: &indegree, outgoing_offsets, outgoing, span: bounds(cuts, segment) };
            walk.fill(ready, room)
        })
        .all(|filled| filled);
    complete.then_some(order)
}

/// Whether ordering `vertex_count` vertices pays for passes beside Kahn's loop on this pool: placing cuts between
/// segments of time, or laying out the incoming lists while the loop runs (on 2 cores, where the other core is busy
/// anyway, that took more CPU time than one after the other: 5.3 s against 4.2 at 10 M kernels × 8 ranks, one run
/// each).
pub(super) fn order_worth_sharing_out(vertex_count: usize) -> bool {
    vertex_count >= SEGMENTED_MIN_VERTICES && rayon::current_num_threads() >= SEGMENTED_MIN_THREADS
}

/// `[start, end)` of measured times of `segment` between `cuts`.
fn bounds(cuts: &[i64], segment: usize) -> (i64, i64) {
    let start = if segment == 0 { i64::MIN } else { cuts[segment - 1] };
    (start, cuts.get(segment).copied().unwrap_or(i64::MAX))
}

/// The measured times of one vertex in [`SAMPLE_EVERY`], sorted.
fn time_sample(measured_ns: &[i64]) -> Vec<i64> {
    let mut sample: Vec<i64> = measured_ns.par_iter().step_by(SAMPLE_EVERY).copied().collect();
    sample.par_sort_unstable();
    sample
}

/// How many of `sample` (sorted) the fullest segment between `cuts` holds.
fn largest_segment_in(sample: &[i64], cuts: &[i64]) -> usize {
    let mut start = 0;
    let mut largest = 0;
    for &cut in cuts.iter().chain([&i64::MAX]) {
        let end = start + sample[start..].partition_point(|&t| t < cut);
        largest = largest.max(end - start);
        start = end;
    }
    largest.max(sample.len() - start)
}

/// About `wanted - 1` cut times, rising, that split the vertices into about equal segments (by `sample`, sorted
/// times of some of them) and that lie in none of the backward edges' `spans` (see [`backward_spans`]): a cut `c`
/// lies across an edge from a source at `s` to a target at `t < s` when `t < c <= s`; such a cut moves to just after
/// the latest source time of the edges it lies across.
pub(super) fn cuts_ns(sample: &[i64], spans: &[(i64, i64)], wanted: usize) -> Vec<i64> {
    let mut cuts: Vec<i64> = Vec::with_capacity(wanted);
    for k in 1..wanted {
        let Some(&proposed) = sample.get(k * sample.len() / wanted) else { break };
        // The merged span holding the cut, if one does: spans are disjoint and sorted, so one search finds it.
        let after = spans.partition_point(|&(first, _)| first <= proposed);
        let cut = match after.checked_sub(1).map(|i| spans[i]) {
            Some((_, last)) if proposed <= last => match last.checked_add(1) {
                Some(cut) => cut,
                None => continue,
            },
            _ => proposed,
        };
        if cuts.last().is_none_or(|&previous| cut > previous) {
            cuts.push(cut);
        }
    }
    cuts
}

/// The cut times no backward edge allows, merged: per backward edge (of `edges`: source and target vertex) from a
/// source at `s` to a target at `t < s`, the times `t + 1 ..= s`, as disjoint rising `(first, last)` spans (touching
/// ones joined).
pub(super) fn backward_spans(measured_ns: &[i64], edges: impl ParallelIterator<Item = (u32, u32)>) -> Vec<(i64, i64)> {
    let mut spans: Vec<(i64, i64)> = edges
        .filter_map(|(source, target)| {
            let (source_ns, target_ns) = (measured_ns[source as usize], measured_ns[target as usize]);
            (source_ns > target_ns).then(|| (target_ns + 1, source_ns))
        })
        .collect();
    spans.par_sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (first, last) in spans {
        match merged.last_mut() {
            Some(open) if first <= open.1.saturating_add(1) => open.1 = open.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
}

/// Vertices per segment, and per segment its vertices with no predecessor in it, as the loop's heap takes them.
type SizesAndReady = (Vec<usize>, Vec<Vec<Reverse<(i64, u32)>>>);

/// In one pass on worker threads: sets each vertex's `indegree` to its predecessors in its own segment between
/// `cuts` (those of earlier segments are done when it is handed out), counts each segment's vertices and lists the
/// ready ones of each.
fn counts_sizes_and_ready(
    measured_ns: &[i64],
    incoming: &IncomingLists,
    cuts: &[i64],
    indegree: &[AtomicU32],
) -> SizesAndReady {
    let segments = cuts.len() + 1;
    let empty = || (vec![0usize; segments], vec![Vec::new(); segments]);
    (0..measured_ns.len() as u32)
        .into_par_iter()
        .with_min_len(PAR_MIN_LEN)
        .fold(empty, |(mut sizes, mut ready), v| {
            let t = measured_ns[v as usize];
            let segment = cuts.partition_point(|&cut| cut <= t);
            let (start, end) = bounds(cuts, segment);
            let inside = incoming.of(v).filter(|e| (start..end).contains(&measured_ns[e.source as usize])).count();
            indegree[v as usize].store(inside as u32, Ordering::Relaxed);
            sizes[segment] += 1;
            if inside == 0 {
                ready[segment].push(Reverse((t, v)));
            }
            (sizes, ready)
        })
        .reduce(empty, |(mut sizes, mut ready), (more_sizes, more_ready)| {
            for (size, more) in sizes.iter_mut().zip(more_sizes) {
                *size += more;
            }
            for (list, more) in ready.iter_mut().zip(more_ready) {
                list.extend(more);
            }
            (sizes, ready)
        })
}

/// Kahn's loop over one segment: what it reads, and the segment's span of measured times.
struct Walk<'a> {
    measured_ns: &'a [i64],
    /// In-segment predecessors not yet handed out. Each segment reads and writes only its own vertices' counts, so
    /// plain loads and stores suffice (no read-modify-write).
    indegree: &'a [AtomicU32],
    outgoing_offsets: &'a [u32],
    outgoing: &'a [AtomicU32],
    span: (i64, i64),
}

impl Walk<'_> {
    /// Hands the segment's vertices out into `room` (exactly its size) from its `ready` ones, earliest
    /// (time, vertex) first, as the whole loop does; false where the loop ran dry before `room` was full (a cycle).
    fn fill(&self, ready: Vec<Reverse<(i64, u32)>>, room: &mut [u32]) -> bool {
        let mut heap = BinaryHeap::from(ready);
        let mut filled = 0;
        // As in the whole loop: a vertex made ready that sorts before everything in the heap skips it.
        let mut next: Option<u32> = None;
        while let Some(v) = next.take().or_else(|| heap.pop().map(|Reverse((_, v))| v)) {
            let Some(slot) = room.get_mut(filled) else { return false };
            *slot = v;
            filled += 1;
            let earliest = self.release_successors(v, &mut heap);
            next = next_past_heap(earliest, &mut heap);
        }
        filled == room.len()
    }

    /// Counts `v` done for its successors in the segment: the earliest one it makes ready is returned, the others
    /// go to the heap.
    fn release_successors(&self, v: u32, heap: &mut BinaryHeap<Reverse<(i64, u32)>>) -> Option<(i64, u32)> {
        let (start, end) = self.span;
        let list = self.outgoing_offsets[v as usize] as usize..self.outgoing_offsets[v as usize + 1] as usize;
        let mut earliest: Option<(i64, u32)> = None;
        for w in &self.outgoing[list] {
            let w = w.load(Ordering::Relaxed);
            let t = self.measured_ns[w as usize];
            if t < start || t >= end {
                continue;
            }
            let slot = &self.indegree[w as usize];
            let left = slot.load(Ordering::Relaxed);
            if left == 0 {
                continue;
            }
            slot.store(left - 1, Ordering::Relaxed);
            if left == 1 {
                hold_earliest(&mut earliest, (t, w), heap);
            }
        }
        earliest
    }
}
