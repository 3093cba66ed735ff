//! Interval arithmetic on `[start_ns, end_ns)` spans: unions and the length of intersections.
//!
//! Busy time, communication time and overlap are all measured on unions of intervals, because
//! kernels on different streams of one GPU run at the same time and must not be counted twice.

/// A set of disjoint, sorted intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntervalUnion {
    spans: Vec<(i64, i64)>,
}

impl IntervalUnion {
    /// The union of `intervals` (any order; empty and inverted ones are ignored).
    pub fn from_intervals(mut intervals: Vec<(i64, i64)>) -> IntervalUnion {
        intervals.retain(|&(s, e)| e > s);
        // Kernels arrive sorted by start from `Trace::finish`, so this sort is usually a cheap pass.
        intervals.sort_unstable();
        let mut spans: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
        for (start, end) in intervals {
            match spans.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => spans.push((start, end)),
            }
        }
        IntervalUnion { spans }
    }

    /// Total covered length.
    pub fn length_ns(&self) -> i64 {
        // Times come from the input: saturate rather than wrap.
        self.spans.iter().fold(0i64, |total, (s, e)| total.saturating_add(e.saturating_sub(*s)))
    }

    /// Length of the time covered by both `self` and `other`.
    pub fn intersection_ns(&self, other: &IntervalUnion) -> i64 {
        self.intersection(other).length_ns()
    }

    /// The time covered by both `self` and `other`.
    pub fn intersection(&self, other: &IntervalUnion) -> IntervalUnion {
        let (a, b) = (&self.spans, &other.spans);
        let (mut i, mut j) = (0, 0);
        let mut spans = Vec::new();
        while i < a.len() && j < b.len() {
            let start = a[i].0.max(b[j].0);
            let end = a[i].1.min(b[j].1);
            if end > start {
                spans.push((start, end));
            }
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        IntervalUnion { spans }
    }

    /// The time covered by `self` or `other`.
    pub fn union(&self, other: &IntervalUnion) -> IntervalUnion {
        IntervalUnion::from_intervals(self.spans.iter().chain(&other.spans).copied().collect())
    }

    /// The disjoint spans, sorted.
    pub fn spans(&self) -> &[(i64, i64)] {
        &self.spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlapping_and_touching_spans() {
        let u = IntervalUnion::from_intervals(vec![(10, 20), (0, 5), (15, 30), (30, 35), (40, 40), (50, 45)]);
        assert_eq!(u.spans(), &[(0, 5), (10, 35)]);
        assert_eq!(u.length_ns(), 30);
    }

    #[test]
    fn intersection_counts_shared_time_only() {
        let a = IntervalUnion::from_intervals(vec![(0, 10), (20, 30), (40, 50)]);
        let b = IntervalUnion::from_intervals(vec![(5, 25), (45, 100)]);
        assert_eq!(a.intersection_ns(&b), 5 + 5 + 5);
        assert_eq!(b.intersection_ns(&a), 15);
        assert_eq!(a.intersection_ns(&IntervalUnion::default()), 0);
    }
}
