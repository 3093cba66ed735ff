//! The NCCL profiler plugin's spool (`nccl-<pid>.bin`): its records and its file layout.
//!
//! ```text
//! file    := magic "SSNCCL01" (8 bytes) frame*          (frames: see `frame`)
//! payload := record*
//! record  := kind: u16, len: u16 (total bytes, header included), the fields of its kind
//! ```
//!
//! Fields are little-endian and unpadded, in declaration order (see `codec`). Each kind has one
//! fixed size, so the plugin encodes without allocating; `len` lets a reader skip kinds it does
//! not know and ignore fields a newer writer appended to a kind it knows.
//!
//! Identifiers: the plugin numbers every event it hands to NCCL (`event`) and every
//! communicator context (`comm_ref`) from one per-process counter, so records refer to each
//! other by these numbers. Times: `cpu_ns` values are `CLOCK_MONOTONIC`;
//! [`NcclRecord::ClockSync`] records pair that clock with `CLOCK_REALTIME`. `gpu_*_ns` values are
//! the GPU's `%globaltimer` as NCCL's kernel wrote it.

use std::path::Path;

use crate::codec::Field;
pub use crate::codec::FixedName;
pub use crate::frame::seal_frame;
use crate::{Decoded, SpoolFormat};

/// First bytes of every spool file; the digits are the format version.
pub const MAGIC: &[u8; 8] = b"SSNCCL01";

/// File name prefix; the full name is `nccl-<pid>.bin`.
pub const FILE_PREFIX: &str = "nccl-";
/// File name suffix.
pub const FILE_SUFFIX: &str = ".bin";

/// Frames larger than this are taken as corrupt (the plugin flushes far smaller batches).
const MAX_FRAME_BYTES: u32 = 64 << 20;

/// The process id in a spool file name `nccl-<pid>.bin`.
pub fn pid_from_file_name(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?.parse().ok()
}

/// Short names: function, data type, algorithm, protocol.
pub type ShortName = FixedName<24>;

crate::spool_struct! {
/// Written first in every spool: who wrote it and how its clocks relate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessRecord {
    /// OS process id.
    pub pid: u32,
    /// `CLOCK_MONOTONIC` and `CLOCK_REALTIME`, read back to back.
    pub monotonic_ns: u64,
    /// See `monotonic_ns`.
    pub realtime_ns: u64,
    /// `ncclGetVersion` of the NCCL that loaded the plugin (e.g. 22803 for 2.28.3); 0 if unknown.
    pub nccl_version: u32,
    /// Host name.
    pub hostname: FixedName<64>,
    /// Path of the loaded `libnccl` where found.
    pub nccl_library: FixedName<160>,
}
}

crate::spool_struct! {
/// One communicator the plugin was initialised for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommunicatorRecord {
    /// The plugin's number for this communicator context.
    pub comm_ref: u64,
    /// NCCL's communicator id (`commHash`), the same on every rank of the communicator; 0 under
    /// interface v3, whose operations carry it instead.
    pub comm_id: u64,
    /// When `init` ran (`CLOCK_MONOTONIC`).
    pub cpu_ns: u64,
    /// This process's rank in it.
    pub rank: i32,
    /// Ranks in it.
    pub n_ranks: i32,
    /// Nodes it spans.
    pub n_nodes: i32,
    /// Profiler interface version NCCL called (3, 4 or 5).
    pub interface_version: u32,
    /// The user-assigned communicator name.
    pub name: FixedName<64>,
}
}

crate::spool_struct! {
/// A collective starting (NCCL hands it to proxy and kernel, right after its kernel launch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollStart {
    /// Event number.
    pub event: u64,
    /// Communicator context.
    pub comm_ref: u64,
    /// Communicator id when the descriptor carries it (v3), else 0.
    pub comm_id: u64,
    /// Event number of the group (kernel plan) it belongs to; 0 if none.
    pub group: u64,
    /// NCCL's sequence number, counted per function within the communicator.
    pub seq: u64,
    /// Element count.
    pub count: u64,
    /// `CLOCK_MONOTONIC` at start.
    pub cpu_ns: u64,
    /// Root rank.
    pub root: i32,
    /// Rank that generated it.
    pub rank: i32,
    /// Channels.
    pub n_channels: u8,
    /// Warps per channel.
    pub n_warps: u8,
    /// Function, e.g. `AllReduce`.
    pub func: ShortName,
    /// Data type, e.g. `ncclBfloat16`.
    pub datatype: ShortName,
    /// Algorithm, e.g. `RING`.
    pub algo: ShortName,
    /// Protocol, e.g. `LL`.
    pub proto: ShortName,
}
}

crate::spool_struct! {
/// A point-to-point operation starting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct P2pStart {
    /// Event number.
    pub event: u64,
    /// Communicator context.
    pub comm_ref: u64,
    /// Communicator id when the descriptor carries it (v3), else 0.
    pub comm_id: u64,
    /// Group event number; 0 if none.
    pub group: u64,
    /// Element count.
    pub count: u64,
    /// `CLOCK_MONOTONIC` at start.
    pub cpu_ns: u64,
    /// The other rank.
    pub peer: i32,
    /// Rank that generated it.
    pub rank: i32,
    /// Channels.
    pub n_channels: u8,
    /// `Send` or `Recv`.
    pub func: ShortName,
    /// Data type.
    pub datatype: ShortName,
}
}

crate::spool_records! {
    /// One spooled record.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum NcclRecord: u16 {
        /// See [`ProcessRecord`].
        Process(ProcessRecord) = 1,
        /// See [`CommunicatorRecord`].
        Communicator(CommunicatorRecord) = 2,
        /// NCCL finalised a communicator context.
        CommunicatorEnd {
            /// Communicator context.
            comm_ref: u64,
            /// `CLOCK_MONOTONIC`.
            cpu_ns: u64,
        } = 3,
        /// See [`CollStart`].
        CollStart(CollStart) = 4,
        /// See [`P2pStart`].
        P2pStart(P2pStart) = 5,
        /// A collective or point-to-point event stopped (NCCL finished enqueueing it).
        OpStop {
            /// Event number.
            event: u64,
            /// `CLOCK_MONOTONIC`.
            cpu_ns: u64,
        } = 6,
        /// One channel of an operation's kernel started, as the proxy thread saw it.
        KernelChStart {
            /// This channel event's number.
            event: u64,
            /// The collective's or point-to-point's event number.
            parent: u64,
            /// GPU `%globaltimer` at the channel's start.
            gpu_start_ns: u64,
            /// `CLOCK_MONOTONIC` when the proxy thread reported it.
            cpu_ns: u64,
            /// Channel index.
            channel: u8,
        } = 7,
        /// That channel finished.
        KernelChStop {
            /// The channel event's number.
            event: u64,
            /// GPU `%globaltimer` at the channel's end.
            gpu_stop_ns: u64,
            /// `CLOCK_MONOTONIC` when the proxy thread reported it.
            cpu_ns: u64,
        } = 8,
        /// The two CPU clocks read back to back (written with every flushed batch).
        ClockSync {
            /// `CLOCK_MONOTONIC`.
            monotonic_ns: u64,
            /// `CLOCK_REALTIME`, ns since the Unix epoch.
            realtime_ns: u64,
        } = 9,
        /// Records the plugin could not buffer (its buffer was full) since the previous such note.
        Dropped {
            /// How many.
            records: u64,
        } = 10,
        /// Wall time NCCL's threads spent inside the plugin's event callbacks so far, and how many
        /// callbacks that was (cumulative; written with every flushed batch, the last one counts).
        CallbackCost {
            /// Total ns.
            callback_ns: u64,
            /// Callbacks.
            callbacks: u64,
        } = 11,
        /// The GPU a communicator runs on: the CUDA context current when NCCL initialised it.
        CommDevice {
            /// Communicator context.
            comm_ref: u64,
            /// CUDA device ordinal in this process (`cuCtxGetDevice`).
            cuda_ordinal: i32,
            /// The GPU's UUID (`cuDeviceGetUuid`), all zero if the driver did not give it.
            uuid: [u8; 16],
        } = 12,
    }
}

/// Why kernel-channel timing is known to be costly in this NCCL (`ncclGetVersion` form, e.g. 23102 for
/// 2.31.2), or `None` where it is not known to be.
///
/// In 2.31.x, asking for kernel-channel events also switches on per-phase timestamp writes and a system
/// fence inside the collective kernels: `all_reduce_perf` lost 4–13 % from 128 KiB to 4 MiB messages on
/// 2.31.2 against 0.1–1.1 % on 2.29.7 with the same event mask. No 2.31 release with the correction was
/// known when this was written, so every 2.31.x is reported.
pub fn costly_kernel_timers(nccl_version: u32) -> Option<String> {
    let (major, minor, patch) = (nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
    (major == 2 && minor == 31).then(|| {
        format!(
            "NCCL {major}.{minor}.{patch}: kernel-channel timing is known to slow collectives in 2.31.x \
             (4-13 % on 128 KiB-4 MiB all-reduces in 2.31.2, against 0.1-1.1 % in 2.29.7); \
             compare with an uncaptured run"
        )
    })
}

impl NcclRecord {
    /// Appends this record's encoding to `out` (no allocation beyond `out` growing).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        self.tag().put(out);
        0u16.put(out); // the length, written below
        self.encode_fields(out);
        let len = (out.len() - start) as u16;
        out[start + 2..start + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Decodes the record at the start of `input` and advances past it.
    ///
    /// `Ok(None)`: a well-delimited record of a kind this reader does not know (skipped).
    /// `Err(())`: the input cannot be delimited or the record is shorter than its kind needs.
    #[allow(clippy::result_unit_err)]
    pub fn decode(input: &mut &[u8]) -> Result<Option<NcclRecord>, ()> {
        let mut header = *input;
        let kind = u16::get(&mut header).ok_or(())?;
        let len = u16::get(&mut header).ok_or(())? as usize;
        if len < 4 || len > input.len() {
            return Err(());
        }
        // Fields past those this reader knows (a newer writer's) are ignored with the rest of `len`.
        let mut fields = &input[4..len];
        *input = &input[len..];
        NcclRecord::decode_fields(kind, &mut fields).ok_or(())
    }
}

impl SpoolFormat for NcclRecord {
    const MAGIC: &'static [u8; 8] = MAGIC;
    const MAX_FRAME_BYTES: u32 = MAX_FRAME_BYTES;
    const DESCRIPTION: &'static str = "shardscope NCCL spool file";

    fn decode_next(input: &mut &[u8]) -> Decoded<Self> {
        match NcclRecord::decode(input) {
            Ok(Some(record)) => Decoded::Record(record),
            Ok(None) => Decoded::Skipped,
            Err(()) => Decoded::Undelimited,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_unknown_kinds_are_skipped() {
        let records = vec![
            NcclRecord::Process(ProcessRecord {
                pid: 42,
                monotonic_ns: 5,
                realtime_ns: 6,
                nccl_version: 22803,
                hostname: FixedName::from_text("node1"),
                nccl_library: FixedName::from_text("/usr/lib/libnccl.so.2"),
            }),
            NcclRecord::Communicator(CommunicatorRecord {
                comm_ref: 1,
                comm_id: 0xabcdef,
                cpu_ns: 9,
                rank: 1,
                n_ranks: 2,
                n_nodes: 1,
                interface_version: 5,
                name: FixedName::from_text("tp"),
            }),
            NcclRecord::CollStart(CollStart {
                event: 3,
                comm_ref: 1,
                seq: 7,
                count: 1024,
                func: FixedName::from_text("AllReduce"),
                datatype: FixedName::from_text("ncclBfloat16"),
                algo: FixedName::from_text("RING"),
                proto: FixedName::from_text("LL"),
                n_channels: 2,
                ..CollStart::default()
            }),
            NcclRecord::OpStop { event: 3, cpu_ns: 11 },
            NcclRecord::KernelChStart { event: 4, parent: 3, gpu_start_ns: 100, cpu_ns: 12, channel: 1 },
            NcclRecord::KernelChStop { event: 4, gpu_stop_ns: 150, cpu_ns: 13 },
            NcclRecord::Dropped { records: 2 },
            NcclRecord::CommDevice { comm_ref: 1, cuda_ordinal: 1, uuid: [7; 16] },
        ];
        let mut bytes = Vec::new();
        for r in &records {
            r.encode(&mut bytes);
        }
        // A record of a kind from a newer writer, between known ones: skipped by its length.
        let mut with_unknown = bytes[..0].to_vec();
        with_unknown.extend_from_slice(&[0xff, 0x00, 6, 0, 1, 2]);
        with_unknown.extend_from_slice(&bytes);
        let mut input = &with_unknown[..];
        let mut decoded = Vec::new();
        while !input.is_empty() {
            if let Some(r) = NcclRecord::decode(&mut input).unwrap() {
                decoded.push(r);
            }
        }
        assert_eq!(decoded, records);
        match &decoded[2] {
            NcclRecord::CollStart(c) => assert_eq!(c.func.as_str(), "AllReduce"),
            other => panic!("unexpected {other:?}"),
        }
        // A cut record cannot be delimited.
        let mut cut = &bytes[..10];
        assert!(NcclRecord::decode(&mut cut).is_err());
    }

    #[test]
    fn only_nccl_2_31_is_reported_as_costly_for_kernel_timers() {
        let note = costly_kernel_timers(23102).expect("2.31.2 is costly");
        assert!(note.starts_with("NCCL 2.31.2:"), "{note}");
        assert!(costly_kernel_timers(23100).is_some());
        for fine in [22803, 22809, 22907, 23007, 23200, 0] {
            assert_eq!(costly_kernel_timers(fine), None, "{fine}");
        }
    }
}
