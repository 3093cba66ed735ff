//! Property tests of the interval arithmetic behind busy, communication and overlap time: on any
//! intervals, including inverted ones and times at the ends of the `i64` range, the results match
//! a direct count and never wrap.

use proptest::prelude::*;
use shardscope_analyzer::figures::intervals::IntervalUnion;

/// Time covered by `intervals` (end after start only), counted point by point on a small range.
fn covered(intervals: &[(i64, i64)], at: i64) -> bool {
    intervals.iter().any(|&(s, e)| s <= at && at < e)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn union_and_intersection_match_a_point_count(
        a in prop::collection::vec((-50i64..50, -50i64..50), 0..12),
        b in prop::collection::vec((-50i64..50, -50i64..50), 0..12),
    ) {
        let (ua, ub) = (IntervalUnion::from_intervals(a.clone()), IntervalUnion::from_intervals(b.clone()));
        let points = -50..50;
        prop_assert_eq!(ua.length_ns(), points.clone().filter(|&t| covered(&a, t)).count() as i64);
        prop_assert_eq!(ua.intersection_ns(&ub), points.clone().filter(|&t| covered(&a, t) && covered(&b, t)).count() as i64);
        prop_assert_eq!(ua.union(&ub).length_ns(), points.filter(|&t| covered(&a, t) || covered(&b, t)).count() as i64);
        // Disjoint, sorted, non-empty spans.
        for pair in ua.spans().windows(2) {
            prop_assert!(pair[0].1 < pair[1].0);
        }
        prop_assert!(ua.spans().iter().all(|&(s, e)| s < e));
    }

    #[test]
    fn extreme_times_never_give_negative_lengths(
        intervals in prop::collection::vec((any::<i64>(), any::<i64>()), 0..8),
    ) {
        let union = IntervalUnion::from_intervals(intervals.clone());
        prop_assert!(union.length_ns() >= 0);
        prop_assert!(union.intersection_ns(&union) >= 0);
    }
}
