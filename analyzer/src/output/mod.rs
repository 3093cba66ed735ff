//! Everything a report becomes for a reader: the table, JSON and CSV renderings, the HTML page, the charts and
//! their one colour rule, the Parquet dataset, and progress on a terminal.

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
pub mod summary;
