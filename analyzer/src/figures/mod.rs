//! Figures of one rank's trace that every report is built from: op categories by kernel name, intervals
//! (busy time as a union), the kernel summary of `nsys stats`, collectives matched across ranks (wait against
//! transfer, late rank, bus bandwidth), HTA's definitions, the measured link peaks, the analysis window, gaps
//! between capture windows and the identity of the run a file belongs to.

pub mod bench_peaks;
pub mod capture_gaps;
pub mod categories;
pub mod collectives;
pub mod hta;
pub mod intervals;
pub mod kernel_summary;
pub mod memory;
pub mod memory_origin;
pub mod run;
pub mod window;
pub mod workers;
