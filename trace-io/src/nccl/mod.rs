//! NCCL operations as the capture's NCCL profiler plugin recorded them ([`ops`]), linked to the
//! kernels that ran them ([`attach`]), and stored in and read back from a capture file's
//! `SHARDSCOPE_NCCL_*` tables ([`tables`]).
//!
//! The plugin itself (`shardscope-nccl-profiler`) only writes spools, and the launcher
//! (`shardscope-capture`), the only reader of those spools, joins their records into operations;
//! what needs the trace model or SQLite lives here, so the plugin stays a leaf.

pub mod attach;
pub mod ops;
pub mod tables;

pub use attach::{AttachStats, KernelLink, attach_linked, attach_to_kernels, kernel_links, to_collectives};
pub use ops::{NcclOperation, NcclProcess, OpKind, element_bytes, torch_dtype_name};
pub use tables::{StoredOperation, TableOptions, read_tables, write_tables};
