//! NCCL operations in capture files: [`NcclOperation`] ([`ops`]), linked to the kernels that ran
//! them ([`attach`]), and read back from a capture file's `SHARDSCOPE_NCCL_*` tables ([`tables`]).
//!
//! The NCCL profiler plugin (`shardscope-nccl-profiler`) only writes spools; the capture launcher
//! (`shardscope-capture`) joins them into operations, places NCCL's GPU timers, links the operations to
//! kernels with [`attach_to_kernels`] and writes the tables. Readers of capture files need only what is
//! here: the tables, and the link applied again ([`attach_linked`], or [`attach_to_kernels`] for files
//! written before the link was stored).

pub mod attach;
pub mod ops;
pub mod tables;

pub use attach::{AttachStats, KernelLink, attach_linked, attach_to_kernels, kernel_links, to_collectives};
pub use ops::{NcclOperation, OpKind, torch_dtype_name};
pub use tables::{StoredOperation, read_tables};
