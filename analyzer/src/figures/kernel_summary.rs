//! The kernel summary with the fields and numbers of Nsight Systems' `cuda_gpu_kern_sum` report.
//!
//! Rows group kernels by demangled name. `Time %` is a share of the summed time of all rows (not of wall time);
//! `Med` is the mean of the two middle values for an even count; `StdDev` is the sample standard deviation
//! (n − 1 in the denominator, 0 for one instance). Rows are ordered by total time, largest first.

use rayon::prelude::*;

use serde::Serialize;
use shardscope_model::NameId;

/// One row of the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelSummaryRow {
    /// Share of the summed kernel time of all rows, in percent.
    pub time_pct: f64,
    /// Summed duration.
    pub total_ns: i64,
    /// Number of launches.
    pub instances: u64,
    /// Mean duration.
    pub avg_ns: f64,
    /// Median duration.
    pub med_ns: f64,
    /// Shortest.
    pub min_ns: i64,
    /// Longest.
    pub max_ns: i64,
    /// Sample standard deviation.
    pub stddev_ns: f64,
    /// Demangled kernel name.
    pub name: String,
    /// The true total is beyond `i64::MAX` ns (durations near 2⁶³ from a damaged input): `total_ns` is
    /// `i64::MAX`, while the mean and shares are computed exactly.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub total_saturated: bool,
}

/// How many rows of `rows` have a saturated total: the count for the warning that says so.
pub fn saturated_rows(rows: &[KernelSummaryRow]) -> usize {
    rows.iter().filter(|r| r.total_saturated).count()
}

/// Builds the summary from `(name, duration_ns)` pairs, in any order.
pub fn summarize(mut kernels: Vec<(NameId, i64)>, name_of: impl Fn(NameId) -> String + Sync) -> Vec<KernelSummaryRow> {
    // Sorted by name, then duration: each name's durations end up together and in order, sorted on worker threads.
    crate::figures::workers::run(|| kernels.par_sort_unstable());
    // Sums in i128: n durations of up to 2⁶³ ns each cannot overflow it for any n that fits in memory.
    let grand_total_ns: i128 = kernels.iter().map(|&(_, d)| i128::from(d)).sum();
    let groups: Vec<&[(NameId, i64)]> = kernels.chunk_by(|a, b| a.0 == b.0).collect();
    let row = |group: &&[(NameId, i64)]| {
        let durations = || group.iter().map(|&(_, d)| d);
        let n = group.len();
        let exact_total_ns: i128 = durations().map(i128::from).sum();
        let total_ns = i64::try_from(exact_total_ns).unwrap_or(if exact_total_ns > 0 { i64::MAX } else { i64::MIN });
        let avg_ns = exact_total_ns as f64 / n as f64;
        let med_ns =
            if n % 2 == 1 { group[n / 2].1 as f64 } else { (group[n / 2 - 1].1 as f64 + group[n / 2].1 as f64) / 2.0 };
        let stddev_ns = if n > 1 {
            let squares: f64 = durations().map(|d| (d as f64 - avg_ns).powi(2)).sum();
            (squares / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        KernelSummaryRow {
            time_pct: if grand_total_ns > 0 { 100.0 * exact_total_ns as f64 / grand_total_ns as f64 } else { 0.0 },
            total_ns,
            instances: n as u64,
            avg_ns,
            med_ns,
            min_ns: group[0].1,
            max_ns: group[n - 1].1,
            stddev_ns,
            name: name_of(group[0].0),
            total_saturated: i128::from(total_ns) != exact_total_ns,
        }
    };
    let mut rows: Vec<KernelSummaryRow> = crate::figures::workers::run(|| groups.par_iter().map(row).collect());
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_follow_nsys_definitions() {
        let kernels = [(NameId(1), 10), (NameId(1), 30), (NameId(1), 20), (NameId(1), 40), (NameId(2), 100)];
        let rows = summarize(kernels.to_vec(), |id| format!("k{}", id.0));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].name, "k1");
        assert_eq!(rows[0].total_ns, 100);
        assert_eq!(rows[0].med_ns, 25.0);
        assert_eq!(rows[0].avg_ns, 25.0);
        assert!((rows[0].stddev_ns - 12.909944).abs() < 1e-5);
        assert_eq!((rows[0].min_ns, rows[0].max_ns, rows[0].instances), (10, 40, 4));
        assert_eq!(rows[0].time_pct, 50.0);
        assert_eq!(rows[1].stddev_ns, 0.0);
    }

    #[test]
    fn totals_beyond_i64_saturate_with_an_exact_mean_and_are_counted() {
        let near = i64::MAX - 10;
        let kernels = [(NameId(1), near), (NameId(1), near), (NameId(2), 5)];
        let rows = summarize(kernels.to_vec(), |id| format!("k{}", id.0));
        assert_eq!(rows[0].total_ns, i64::MAX);
        assert!(rows[0].total_saturated && !rows[1].total_saturated);
        assert_eq!(rows[0].avg_ns, near as f64, "the mean is not the saturated total halved");
        assert_eq!(saturated_rows(&rows), 1);
    }
}
