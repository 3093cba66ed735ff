//! NCCL operations as the capture's NCCL profiler plugin recorded them: read from its spool
//! files ([`ops`]), linked to the kernels that ran them ([`attach`]) or, where no kernel was recorded,
//! made into kernels from NCCL's own GPU timers ([`timers`]), and stored in and read
//! back from a capture file's `SHARDSCOPE_NCCL_*` tables ([`tables`]).
//!
//! The plugin itself (`shardscope-nccl-profiler`) only writes spools; everything that needs the
//! trace model or SQLite lives here, so the plugin stays a leaf.

pub mod attach;
pub mod ops;
pub mod tables;
pub mod timers;

pub use attach::{AttachStats, KernelLink, attach_linked, attach_to_kernels, kernel_links, to_collectives};
pub use ops::{
    ChannelTiming, CommDevice, NcclOperation, NcclProcess, OpKind, ReadError, element_bytes, read_process,
    read_spool_dir, torch_dtype_name,
};
pub use tables::{StoredOperation, TableOptions, read_tables, write_tables};
pub use timers::{GpuClock, TimerKernelStats, add_timer_kernels, estimate_gpu_clock};
