//! Level of detail: turns the events of one track inside the visible window into a short
//! draw list whose length depends on the width in pixels, not on the number of events.
//!
//! Events at least [`LodParams::min_event_px`] wide are drawn one by one. A run of narrower
//! events is folded into one counted block: starting at a narrow event, the block swallows
//! (by binary search, never one event at a time) every event that starts within
//! `min_event_px` of its current end, and stops growing at [`LodParams::max_block_px`] so
//! that zoomed-out tracks keep some texture of what ran where. Each step of the loop moves
//! at least `min_event_px` to the right or emits an event that is itself that wide, so the
//! work per track is bounded by its width in pixels times a binary search.

use super::layout::{EventRef, Track};

/// Thresholds of the folding, in screen points.
#[derive(Debug, Clone, Copy)]
pub struct LodParams {
    /// Events narrower than this are folded into blocks. Two points: below that a
    /// rectangle's colour is mostly anti-aliasing and the gap between events disappears.
    pub min_event_px: f32,
    /// A folded block never grows wider than this.
    pub max_block_px: f32,
}

impl Default for LodParams {
    fn default() -> Self {
        LodParams { min_event_px: 2.0, max_block_px: 6.0 }
    }
}

/// One thing to draw in a track.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrawItem {
    /// Left edge in points from the left of the plot area (may be negative when clipped).
    pub x0: f32,
    /// Right edge in points.
    pub x1: f32,
    /// The event (the first one of a folded block).
    pub event: EventRef,
    /// Position of `event` in its track.
    pub position: u32,
    /// 1 for a single event, more for a folded block.
    pub count: u32,
}

/// Maps time to points for one frame.
#[derive(Debug, Clone, Copy)]
pub struct TimeToScreen {
    /// Time at the left edge of the plot, ns.
    pub start_ns: f64,
    /// Nanoseconds per point.
    pub ns_per_px: f64,
    /// Width of the plot area in points.
    pub width_px: f32,
}

impl TimeToScreen {
    /// x (points from the left edge) of time `t_ns`.
    pub fn x(&self, t_ns: i64) -> f32 {
        ((t_ns as f64 - self.start_ns) / self.ns_per_px) as f32
    }

    /// Time at x.
    pub fn t(&self, x: f32) -> f64 {
        self.start_ns + f64::from(x) * self.ns_per_px
    }

    /// Time at the right edge.
    pub fn end_ns(&self) -> f64 {
        self.t(self.width_px)
    }
}

/// First index at or after `from` whose start is `>= limit`: doubles the step from `from`, then
/// bisects the last step. The answer is usually a few thousand events ahead, so this touches
/// nearby memory only, where a bisection of the whole track would miss the cache at each of
/// its first dozen probes (1M kernels over 8 ranks at fit-all, 2-core box: prepare p50 6.5 → 0.7 ms).
fn gallop(starts: &[i64], from: usize, limit: i64) -> usize {
    let mut low = from;
    let mut step = 1;
    let mut high = from;
    while high < starts.len() && starts[high] < limit {
        low = high + 1;
        high = from + step;
        step *= 2;
    }
    let high = high.min(starts.len());
    low + starts[low..high].partition_point(|&s| s < limit)
}

/// Appends the draw items of `track` for the window of `view` to `out`.
pub fn prepare_track(track: &Track, view: &TimeToScreen, params: &LodParams, out: &mut Vec<DrawItem>) {
    let window_start = view.start_ns.floor() as i64;
    let window_end = view.end_ns().ceil() as i64;
    let range = track.visible_range(window_start, window_end);
    let last = range.end;
    let starts = &track.starts_ns[..last];
    let min_ns = (f64::from(params.min_event_px) * view.ns_per_px).max(1.0) as i64;
    let max_block_ns = (f64::from(params.max_block_px) * view.ns_per_px).max(1.0) as i64;
    let mut i = range.start;
    while i < last {
        let start = starts[i];
        let end = track.ends_ns[i];
        if end - start >= min_ns {
            out.push(DrawItem {
                x0: view.x(start),
                x1: view.x(end),
                event: track.events[i],
                position: i as u32,
                count: 1,
            });
            i += 1;
            continue;
        }
        let mut block_end = end;
        let mut j = i + 1;
        let block_limit = start.saturating_add(max_block_ns);
        while j < last {
            let reach = block_end.saturating_add(min_ns).min(block_limit);
            if starts[j] >= reach {
                break;
            }
            // The next event is wide: let it be drawn on its own rather than hidden in a block.
            if track.ends_ns[j] - starts[j] >= min_ns {
                break;
            }
            let k = gallop(starts, j, reach);
            block_end = block_end.max(track.max_end_ns[k - 1]).min(block_limit.max(end));
            j = k;
        }
        let x0 = view.x(start);
        // A lone tiny event still gets a visible sliver.
        let x1 = view.x(block_end).max(x0 + 1.0);
        out.push(DrawItem { x0, x1, event: track.events[i], position: i as u32, count: (j - i) as u32 });
        // A wide event that started within reach of a narrow one was swallowed by the gallop: it reaches past the
        // block by at least `min_ns` (only a wide event can). Draw it on its own too, on top of the block: the
        // first event of the block with the block's largest end is one binary search on the running maximum.
        let reach_ns = track.max_end_ns[j - 1];
        let from_block = i == 0 || reach_ns > track.max_end_ns[i - 1];
        if from_block && reach_ns >= block_end.saturating_add(min_ns) {
            let wide = i + track.max_end_ns[i..j].partition_point(|&e| e < reach_ns);
            out.push(DrawItem {
                x0: view.x(starts[wide]),
                x1: view.x(track.ends_ns[wide]),
                event: track.events[wide],
                position: wide as u32,
                count: 1,
            });
        }
        i = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::layout::{EventKind, TrackKind};
    use shardscope_model::ProcessIdx;

    fn track_of(events: &[(i64, i64)]) -> Track {
        let mut track = Track {
            label: String::new(),
            trace: 0,
            process: ProcessIdx(0),
            kind: TrackKind::Api { tid: 0 },
            starts_ns: events.iter().map(|e| e.0).collect(),
            ends_ns: events.iter().map(|e| e.1).collect(),
            max_end_ns: Vec::new(),
            events: (0..events.len()).map(|i| EventRef::new(EventKind::Api, i)).collect(),
        };
        let mut running = i64::MIN;
        track.max_end_ns = track
            .ends_ns
            .iter()
            .map(|&e| {
                running = running.max(e);
                running
            })
            .collect();
        track
    }

    #[test]
    fn wide_events_are_drawn_alone_and_narrow_runs_fold_into_counted_blocks() {
        // 1 ns per point. Ten 1-ns events back to back at 0..10 (narrow), one wide event 20..120,
        // then a lone narrow one at 500.
        let mut events: Vec<(i64, i64)> = (0..10).map(|i| (i, i + 1)).collect();
        events.push((20, 120));
        events.push((500, 501));
        let track = track_of(&events);
        let view = TimeToScreen { start_ns: 0.0, ns_per_px: 1.0, width_px: 1000.0 };
        let params = LodParams { min_event_px: 2.0, max_block_px: 6.0 };
        let mut out = Vec::new();
        prepare_track(&track, &view, &params, &mut out);
        let counts: Vec<u32> = out.iter().map(|d| d.count).collect();
        // Blocks are capped at 6 points: 0..6 holds six events, 6..10 the other four.
        assert_eq!(counts, vec![6, 4, 1, 1]);
        assert_eq!(counts.iter().sum::<u32>(), 12);
        assert_eq!((out[2].x0, out[2].x1), (20.0, 120.0));
        assert_eq!(out[3].x1 - out[3].x0, 1.0);
    }

    /// A long kernel that starts right after two short ones (a collective after its launch's small kernels) is not
    /// hidden in their block.
    #[test]
    fn a_wide_event_right_after_narrow_ones_is_drawn_on_its_own() {
        // 1 ns per point: narrow 0..1 and 1..2, then the wide 2..100, then narrow 100..101.
        let track = track_of(&[(0, 1), (1, 2), (2, 100), (100, 101)]);
        let view = TimeToScreen { start_ns: 0.0, ns_per_px: 1.0, width_px: 1000.0 };
        let mut out = Vec::new();
        prepare_track(&track, &view, &LodParams::default(), &mut out);
        let wide: Vec<&DrawItem> = out.iter().filter(|d| d.position == 2 && d.count == 1).collect();
        assert_eq!(wide.len(), 1, "{out:?}");
        assert_eq!((wide[0].x0, wide[0].x1), (2.0, 100.0));
        // Every event is counted once in blocks and single items, the wide one besides its block.
        let blocks: u32 = out.iter().filter(|d| !(d.position == 2 && d.count == 1)).map(|d| d.count).sum();
        assert_eq!(blocks, 4);
    }

    #[test]
    fn gallop_agrees_with_bisection() {
        let starts: Vec<i64> = (0..1000).map(|i| i * 3).collect();
        for from in [0, 1, 7, 500, 999, 1000] {
            for limit in [-5, 0, 1, 3, 4, 100, 1500, 2997, 2998, 5000] {
                let expected = from + starts[from..].partition_point(|&s| s < limit);
                assert_eq!(gallop(&starts, from, limit), expected, "from {from} limit {limit}");
            }
        }
    }

    #[test]
    fn draw_list_length_is_bounded_by_pixels_not_events() {
        // One million 10-ns events back to back, seen whole on 1000 points.
        let events: Vec<(i64, i64)> = (0..1_000_000).map(|i| (i * 10, i * 10 + 10)).collect();
        let track = track_of(&events);
        let view = TimeToScreen { start_ns: 0.0, ns_per_px: 10_000.0, width_px: 1000.0 };
        let mut out = Vec::new();
        prepare_track(&track, &view, &LodParams::default(), &mut out);
        assert!(out.len() <= 1000 / 6 + 2, "{} items", out.len());
        assert_eq!(out.iter().map(|d| d.count as usize).sum::<usize>(), 1_000_000);
    }
}
