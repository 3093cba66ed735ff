//! Everything a report becomes for a reader: the table, JSON and CSV renderings, the HTML page, the charts and
//! their one colour rule, the Parquet dataset, progress on a terminal and the stages' times.

pub mod charts;
pub mod colors;
pub mod figure_tables;
pub mod html;
pub mod memory_charts;
pub mod module_charts;
pub mod parquet_export;
pub mod parquet_modules;
pub mod perfetto_notes;
pub mod progress;
pub mod render;
pub mod stage_times;
pub mod summary;
