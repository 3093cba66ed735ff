//! Side panels: event details, range statistics, search and the summary charts.

pub mod details;
pub mod range_stats;
pub mod search;
pub mod summary;
