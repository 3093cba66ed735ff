//! The C interface of NCCL's profiler plugin, versions 3 to 5, as `#[repr(C)]` Rust types.
//!
//! NCCL publishes these only as headers in its source tree (`profiler_v3.h` … `profiler_v5.h`);
//! the types below follow their field lists and C layout rules. NCCL owns every descriptor
//! passed in: the plugin only reads them, during the call. Which NCCL resolves which version:
//!
//! | interface | exported symbol   | NCCL releases that pick it first |
//! | --------- | ----------------- | -------------------------------- |
//! | v5        | `ncclProfiler_v5` | 2.28 (2.29 and later fall back to it when v6 is absent) |
//! | v4        | `ncclProfiler_v4` | 2.26, 2.27 |
//! | v3        | `ncclProfiler_v3` | 2.25 |
//!
//! Layout tests at the end pin every field offset the plugin reads.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`: a C enum, passed as `int`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;

/// Event type bits (`ncclProfileGroup`, …): the activation mask and the descriptor's `type`.
pub mod event {
    /// A group of operations NCCL launches together (one kernel plan).
    pub const GROUP: u64 = 1 << 0;
    /// A collective, seen when NCCL hands it to its proxy and kernel.
    pub const COLL: u64 = 1 << 1;
    /// A point-to-point send or receive.
    pub const P2P: u64 = 1 << 2;
    /// A proxy operation (network progress of one channel).
    pub const PROXY_OP: u64 = 1 << 3;
    /// One network transfer step of a proxy operation.
    pub const PROXY_STEP: u64 = 1 << 4;
    /// Proxy thread state changes.
    pub const PROXY_CTRL: u64 = 1 << 5;
    /// One channel of an operation's kernel, with GPU timer values (v4 and later).
    pub const KERNEL_CH: u64 = 1 << 6;
    /// Events defined by a network plugin.
    pub const NET_PLUGIN: u64 = 1 << 7;
    /// `ncclGroupStart`/`ncclGroupEnd` API calls (v5).
    pub const GROUP_API: u64 = 1 << 8;
    /// Collective API calls (v5).
    pub const COLL_API: u64 = 1 << 9;
    /// Point-to-point API calls (v5).
    pub const P2P_API: u64 = 1 << 10;
    /// Kernel launches (v5).
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
}

/// `ncclProfilerKernelChStop`: the state NCCL records when a kernel channel finishes.
pub const STATE_KERNEL_CH_STOP: c_int = 22;

/// `ncclDebugLogger_t`: `(level, subsystem flags, file, line, printf format, ...)`.
pub type NcclDebugLogger = Option<
    unsafe extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...),
>;
/// `NCCL_LOG_INFO`.
pub const NCCL_LOG_INFO: c_int = 3;
/// `NCCL_INIT` debug subsystem.
pub const NCCL_SUBSYS_INIT: c_ulong = 1;

// ---------------------------------------------------------------- v5 (NCCL 2.28)

/// Collective descriptor fields (v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV5 {
    /// Sequence number of this collective in its communicator, counted per function.
    pub seq_number: u64,
    /// Function name, e.g. `AllReduce`.
    pub func: *const c_char,
    /// Send buffer address.
    pub send_buff: *const c_void,
    /// Receive buffer address.
    pub recv_buff: *mut c_void,
    /// Element count as passed to the NCCL call.
    pub count: usize,
    /// Root rank (broadcast, reduce).
    pub root: c_int,
    /// Data type name, e.g. `ncclBfloat16`.
    pub datatype: *const c_char,
    /// Channels the kernel uses for it.
    pub n_channels: u8,
    /// Warps per channel.
    pub n_warps: u8,
    /// Algorithm name, e.g. `RING`.
    pub algo: *const c_char,
    /// Protocol name, e.g. `LL`.
    pub proto: *const c_char,
    /// The group (kernel plan) event handle, as v4 passed it in `parentObj`.
    pub parent_group: *mut c_void,
}

/// Point-to-point descriptor fields (v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV5 {
    /// `Send` or `Recv`.
    pub func: *const c_char,
    /// Buffer address.
    pub buff: *mut c_void,
    /// Data type name.
    pub datatype: *const c_char,
    /// Element count.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
    /// Channels used.
    pub n_channels: u8,
    /// The group (kernel plan) event handle.
    pub parent_group: *mut c_void,
}

/// Kernel channel descriptor fields (v4, v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV4 {
    /// Channel index.
    pub channel_id: u8,
    /// GPU `%globaltimer` value (ns) when the channel started the operation.
    pub p_timer: u64,
}

/// Group API descriptor fields (v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApiV5 {
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
    /// Group nesting depth; 1 is NCCL's own implicit group.
    pub group_depth: c_int,
}

/// Collective API descriptor fields (v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV5 {
    /// Function name.
    pub func: *const c_char,
    /// Element count.
    pub count: usize,
    /// Data type name.
    pub datatype: *const c_char,
    /// Root rank.
    pub root: c_int,
    /// The `cudaStream_t`.
    pub stream: *mut c_void,
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
}

/// Point-to-point API descriptor fields (v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV5 {
    /// Function name.
    pub func: *const c_char,
    /// Element count.
    pub count: usize,
    /// Data type name.
    pub datatype: *const c_char,
    /// The `cudaStream_t`.
    pub stream: *mut c_void,
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
}

/// Proxy operation descriptor fields (v3–v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    /// Process that created the operation.
    pub pid: libc::pid_t,
    /// Channel index.
    pub channel_id: u8,
    /// Remote rank.
    pub peer: c_int,
    /// Network steps.
    pub n_steps: c_int,
    /// Bytes per step.
    pub chunk_size: c_int,
    /// 1 for a send.
    pub is_send: c_int,
}

/// Network plugin event descriptor fields (v3–v5).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    /// Plugin type and version.
    pub id: i64,
    /// Plugin-defined data.
    pub data: *mut c_void,
}

/// The per-type part of a v5 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV5 {
    /// [`event::GROUP_API`].
    pub group_api: GroupApiV5,
    /// [`event::COLL_API`].
    pub coll_api: CollApiV5,
    /// [`event::P2P_API`].
    pub p2p_api: P2pApiV5,
    /// [`event::KERNEL_LAUNCH`]: the stream.
    pub kernel_launch_stream: *mut c_void,
    /// [`event::COLL`].
    pub coll: CollV5,
    /// [`event::P2P`].
    pub p2p: P2pV5,
    /// [`event::PROXY_OP`].
    pub proxy_op: ProxyOp,
    /// [`event::PROXY_STEP`]: the step.
    pub proxy_step: c_int,
    /// [`event::KERNEL_CH`].
    pub kernel_ch: KernelChV4,
    /// [`event::NET_PLUGIN`].
    pub net_plugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV5 {
    /// One [`event`] bit.
    pub event_type: u64,
    /// Handle of the parent event (for a kernel channel: its collective or p2p).
    pub parent_obj: *mut c_void,
    /// Rank that generated the event.
    pub rank: c_int,
    /// Fields of `event_type`.
    pub u: DescrUnionV5,
}

/// `ncclProfilerEventStateArgs_v4_t` / `_v5_t`: only the kernel-channel member is read.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV4 {
    /// Proxy step transfer size.
    pub trans_size: usize,
    /// Appended proxy operations.
    pub appended_proxy_ops: c_int,
    /// Network plugin data.
    pub net_plugin_data: *mut c_void,
    /// GPU `%globaltimer` value (ns) at [`STATE_KERNEL_CH_STOP`].
    pub kernel_ch_p_timer: u64,
}

/// `init` of v5: `(context, commId, activation mask, commName, nNodes, nRanks, rank, logger)`.
pub type InitV5 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    comm_id: u64,
    activation_mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: NcclDebugLogger,
) -> NcclResult;
/// `startEvent` of v5.
pub type StartEventV5 =
    unsafe extern "C" fn(context: *mut c_void, handle: *mut *mut c_void, descr: *mut EventDescrV5) -> NcclResult;
/// `stopEvent` (all versions).
pub type StopEvent = unsafe extern "C" fn(handle: *mut c_void) -> NcclResult;
/// `recordEventState` of v4 and v5.
pub type RecordEventStateV4 =
    unsafe extern "C" fn(handle: *mut c_void, state: c_int, args: *mut StateArgsV4) -> NcclResult;
/// `finalize` (all versions).
pub type Finalize = unsafe extern "C" fn(context: *mut c_void) -> NcclResult;

/// `ncclProfiler_v5_t`: the table NCCL looks up as `ncclProfiler_v5`.
#[repr(C)]
pub struct ProfilerV5 {
    /// Plugin name for NCCL's log.
    pub name: *const c_char,
    /// Called once per communicator.
    pub init: InitV5,
    /// Starts an event and returns its handle.
    pub start_event: StartEventV5,
    /// Stops an event.
    pub stop_event: StopEvent,
    /// Records a state change of an event.
    pub record_event_state: RecordEventStateV4,
    /// Called when a communicator is destroyed.
    pub finalize: Finalize,
}

// ---------------------------------------------------------------- v4 (NCCL 2.26, 2.27)

/// Collective descriptor fields (v4): v5 without `parent_group`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
    /// See [`CollV5::seq_number`].
    pub seq_number: u64,
    /// Function name.
    pub func: *const c_char,
    /// Send buffer.
    pub send_buff: *const c_void,
    /// Receive buffer.
    pub recv_buff: *mut c_void,
    /// Element count.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// Data type name.
    pub datatype: *const c_char,
    /// Channels.
    pub n_channels: u8,
    /// Warps.
    pub n_warps: u8,
    /// Algorithm name.
    pub algo: *const c_char,
    /// Protocol name.
    pub proto: *const c_char,
}

/// Point-to-point descriptor fields (v4).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    /// Function name.
    pub func: *const c_char,
    /// Buffer.
    pub buff: *mut c_void,
    /// Data type name.
    pub datatype: *const c_char,
    /// Element count.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
    /// Channels.
    pub n_channels: u8,
}

/// The per-type part of a v4 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV4 {
    /// [`event::COLL`].
    pub coll: CollV4,
    /// [`event::P2P`].
    pub p2p: P2pV4,
    /// [`event::PROXY_OP`].
    pub proxy_op: ProxyOp,
    /// [`event::PROXY_STEP`]: the step.
    pub proxy_step: c_int,
    /// [`event::KERNEL_CH`].
    pub kernel_ch: KernelChV4,
    /// [`event::NET_PLUGIN`].
    pub net_plugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v4_t`: a one-byte type; a collective's parent is its group.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV4 {
    /// One [`event`] bit.
    pub event_type: u8,
    /// Parent event handle.
    pub parent_obj: *mut c_void,
    /// Rank.
    pub rank: c_int,
    /// Fields of `event_type`.
    pub u: DescrUnionV4,
}

/// `init` of v4: `(context, activation mask, commName, commHash, nNodes, nRanks, rank, logger)`.
pub type InitV4 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    activation_mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: NcclDebugLogger,
) -> NcclResult;
/// `startEvent` of v4.
pub type StartEventV4 =
    unsafe extern "C" fn(context: *mut c_void, handle: *mut *mut c_void, descr: *mut EventDescrV4) -> NcclResult;

/// `ncclProfiler_v4_t`.
#[repr(C)]
pub struct ProfilerV4 {
    /// Plugin name.
    pub name: *const c_char,
    /// Called once per communicator.
    pub init: InitV4,
    /// Starts an event.
    pub start_event: StartEventV4,
    /// Stops an event.
    pub stop_event: StopEvent,
    /// Records a state change.
    pub record_event_state: RecordEventStateV4,
    /// Called when a communicator is destroyed.
    pub finalize: Finalize,
}

// ---------------------------------------------------------------- v3 (NCCL 2.25)

/// Collective descriptor fields (v3): the communicator travels with every event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV3 {
    /// Communicator name.
    pub name: *const c_char,
    /// Communicator hash.
    pub comm_hash: u64,
    /// Sequence number.
    pub seq_number: u64,
    /// Function name.
    pub func: *const c_char,
    /// Send buffer.
    pub send_buff: *const c_void,
    /// Receive buffer.
    pub recv_buff: *mut c_void,
    /// Element count.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// Data type name.
    pub datatype: *const c_char,
    /// Most channels the operation may use.
    pub n_max_channels: u8,
    /// Warps.
    pub n_warps: u8,
    /// Algorithm name.
    pub algo: *const c_char,
    /// Protocol name.
    pub proto: *const c_char,
}

/// Point-to-point descriptor fields (v3).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV3 {
    /// Communicator name.
    pub name: *const c_char,
    /// Communicator hash.
    pub comm_hash: u64,
    /// Function name.
    pub func: *const c_char,
    /// Buffer.
    pub buff: *mut c_void,
    /// Data type name.
    pub datatype: *const c_char,
    /// Element count.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
}

/// The per-type part of a v3 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV3 {
    /// [`event::COLL`].
    pub coll: CollV3,
    /// [`event::P2P`].
    pub p2p: P2pV3,
    /// [`event::PROXY_OP`].
    pub proxy_op: ProxyOp,
    /// [`event::PROXY_STEP`]: the step.
    pub proxy_step: c_int,
    /// [`event::KERNEL_CH`]: the channel (v3 has no GPU timers).
    pub kernel_ch_channel_id: u8,
    /// [`event::NET_PLUGIN`].
    pub net_plugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v3_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV3 {
    /// One [`event`] bit.
    pub event_type: u8,
    /// Parent event handle.
    pub parent_obj: *mut c_void,
    /// Rank.
    pub rank: c_int,
    /// Fields of `event_type`.
    pub u: DescrUnionV3,
}

/// `init` of v3: no communicator information.
pub type InitV3 = unsafe extern "C" fn(context: *mut *mut c_void, activation_mask: *mut c_int) -> NcclResult;
/// `startEvent` of v3.
pub type StartEventV3 =
    unsafe extern "C" fn(context: *mut c_void, handle: *mut *mut c_void, descr: *mut EventDescrV3) -> NcclResult;
/// `recordEventState` of v3 (its state arguments are never read).
pub type RecordEventStateV3 = unsafe extern "C" fn(handle: *mut c_void, state: c_int, args: *mut c_void) -> NcclResult;

/// `ncclProfiler_v3_t`.
#[repr(C)]
pub struct ProfilerV3 {
    /// Plugin name.
    pub name: *const c_char,
    /// Called once per communicator.
    pub init: InitV3,
    /// Starts an event.
    pub start_event: StartEventV3,
    /// Stops an event.
    pub stop_event: StopEvent,
    /// Records a state change.
    pub record_event_state: RecordEventStateV3,
    /// Called when a communicator is destroyed.
    pub finalize: Finalize,
}

// The tables hold only function pointers and a pointer to a static string, so sharing them
// between threads is sound.
// SAFETY: function pointers and a pointer to a static string only (see above).
unsafe impl Sync for ProfilerV5 {}
// SAFETY: as above.
unsafe impl Sync for ProfilerV4 {}
// SAFETY: as above.
unsafe impl Sync for ProfilerV3 {}

#[cfg(all(test, target_pointer_width = "64"))]
mod layout_tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Offsets worked out by hand from the C headers under the x86-64/aarch64 System V rules
    // (8-byte pointers and size_t, 4-byte int, natural alignment).
    #[test]
    fn v5_offsets_match_the_c_header() {
        assert_eq!(offset_of!(EventDescrV5, parent_obj), 8);
        assert_eq!(offset_of!(EventDescrV5, rank), 16);
        assert_eq!(offset_of!(EventDescrV5, u), 24);
        assert_eq!(offset_of!(CollV5, func), 8);
        assert_eq!(offset_of!(CollV5, count), 32);
        assert_eq!(offset_of!(CollV5, root), 40);
        assert_eq!(offset_of!(CollV5, datatype), 48);
        assert_eq!(offset_of!(CollV5, n_channels), 56);
        assert_eq!(offset_of!(CollV5, n_warps), 57);
        assert_eq!(offset_of!(CollV5, algo), 64);
        assert_eq!(offset_of!(CollV5, proto), 72);
        assert_eq!(offset_of!(CollV5, parent_group), 80);
        assert_eq!(offset_of!(P2pV5, count), 24);
        assert_eq!(offset_of!(P2pV5, peer), 32);
        assert_eq!(offset_of!(P2pV5, n_channels), 36);
        assert_eq!(offset_of!(P2pV5, parent_group), 40);
        assert_eq!(offset_of!(KernelChV4, p_timer), 8);
        assert_eq!(size_of::<DescrUnionV5>(), 88);
        assert_eq!(offset_of!(ProfilerV5, finalize), 40);
    }

    #[test]
    fn v4_and_v3_offsets_match_the_c_headers() {
        assert_eq!(offset_of!(EventDescrV4, parent_obj), 8);
        assert_eq!(offset_of!(EventDescrV4, u), 24);
        assert_eq!(size_of::<CollV4>(), 80);
        assert_eq!(offset_of!(P2pV4, n_channels), 36);
        assert_eq!(offset_of!(EventDescrV3, u), 24);
        assert_eq!(offset_of!(CollV3, seq_number), 16);
        assert_eq!(offset_of!(CollV3, count), 48);
        assert_eq!(offset_of!(CollV3, root), 56);
        assert_eq!(offset_of!(CollV3, datatype), 64);
        assert_eq!(offset_of!(CollV3, n_max_channels), 72);
        assert_eq!(offset_of!(CollV3, algo), 80);
        assert_eq!(offset_of!(CollV3, proto), 88);
        assert_eq!(offset_of!(P2pV3, peer), 48);
    }
}
