//! The fixed-size records the plugin spools, and their byte encoding.
//!
//! Every record is `kind: u16, len: u16` (total bytes, header included) followed by its fields,
//! little-endian and unpadded. Each kind has one fixed size, so the plugin encodes without
//! allocating; `len` lets a reader skip kinds it does not know and ignore fields a newer writer
//! appended to a kind it knows.
//!
//! Identifiers: the plugin numbers every event it hands to NCCL (`event`) and every
//! communicator context (`comm_ref`) from one per-process counter, so records refer to each
//! other by these numbers. Times: `cpu_ns` values are `CLOCK_MONOTONIC`; [`ClockSync`] records
//! pair that clock with `CLOCK_REALTIME`. `gpu_*_ns` values are the GPU's `%globaltimer` as
//! NCCL's kernel wrote it.

/// A name stored inline in `N` bytes: the text up to the first NUL, cut to fit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedName<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for FixedName<N> {
    fn default() -> Self {
        FixedName([0; N])
    }
}

impl<const N: usize> FixedName<N> {
    /// Copies `text`, cut to `N` bytes.
    pub fn from_text(text: &str) -> Self {
        let mut bytes = [0; N];
        let len = text.len().min(N);
        bytes[..len].copy_from_slice(&text.as_bytes()[..len]);
        FixedName(bytes)
    }

    /// Copies a C string, cut to `N` bytes; a null pointer gives the empty name.
    ///
    /// # Safety
    /// `ptr` is null or points to a NUL-terminated string, readable during the call.
    pub unsafe fn from_c_str(ptr: *const std::ffi::c_char) -> Self {
        let mut bytes = [0; N];
        if !ptr.is_null() {
            for (i, slot) in bytes.iter_mut().enumerate() {
                // SAFETY: the string is readable up to and including its NUL, and we stop there.
                let b = unsafe { *ptr.add(i) } as u8;
                if b == 0 {
                    break;
                }
                *slot = b;
            }
        }
        FixedName(bytes)
    }

    /// The stored text (invalid UTF-8 replaced).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(N);
        String::from_utf8_lossy(&self.0[..end])
    }
}

impl<const N: usize> std::fmt::Debug for FixedName<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Short names: function, data type, algorithm, protocol.
pub type ShortName = FixedName<24>;

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

/// One spooled record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclRecord {
    /// See [`ProcessRecord`].
    Process(ProcessRecord),
    /// See [`CommunicatorRecord`].
    Communicator(CommunicatorRecord),
    /// NCCL finalised a communicator context.
    CommunicatorEnd {
        /// Communicator context.
        comm_ref: u64,
        /// `CLOCK_MONOTONIC`.
        cpu_ns: u64,
    },
    /// See [`CollStart`].
    CollStart(CollStart),
    /// See [`P2pStart`].
    P2pStart(P2pStart),
    /// A collective or point-to-point event stopped (NCCL finished enqueueing it).
    OpStop {
        /// Event number.
        event: u64,
        /// `CLOCK_MONOTONIC`.
        cpu_ns: u64,
    },
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
    },
    /// That channel finished.
    KernelChStop {
        /// The channel event's number.
        event: u64,
        /// GPU `%globaltimer` at the channel's end.
        gpu_stop_ns: u64,
        /// `CLOCK_MONOTONIC` when the proxy thread reported it.
        cpu_ns: u64,
    },
    /// The two CPU clocks read back to back (written with every flushed batch).
    ClockSync {
        /// `CLOCK_MONOTONIC`.
        monotonic_ns: u64,
        /// `CLOCK_REALTIME`, ns since the Unix epoch.
        realtime_ns: u64,
    },
    /// Wall time NCCL's threads spent inside the plugin's event callbacks so far, and how many
    /// callbacks that was (cumulative; written with every flushed batch, the last one counts).
    CallbackCost {
        /// Total ns.
        callback_ns: u64,
        /// Callbacks.
        callbacks: u64,
    },
    /// Records the plugin could not buffer (its buffer was full) since the previous such note.
    Dropped {
        /// How many.
        records: u64,
    },
}

/// Record kinds on disk.
mod kind {
    pub const PROCESS: u16 = 1;
    pub const COMMUNICATOR: u16 = 2;
    pub const COMMUNICATOR_END: u16 = 3;
    pub const COLL_START: u16 = 4;
    pub const P2P_START: u16 = 5;
    pub const OP_STOP: u16 = 6;
    pub const KERNEL_CH_START: u16 = 7;
    pub const KERNEL_CH_STOP: u16 = 8;
    pub const CLOCK_SYNC: u16 = 9;
    pub const DROPPED: u16 = 10;
    pub const CALLBACK_COST: u16 = 11;
}

/// Appends little-endian fields to a buffer.
struct Encoder<'a>(&'a mut Vec<u8>);

impl Encoder<'_> {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn name<const N: usize>(&mut self, v: &FixedName<N>) -> &mut Self {
        self.0.extend_from_slice(&v.0);
        self
    }
}

/// Reads little-endian fields; `None` when the input is too short.
struct Decoder<'a>(&'a [u8]);

impl Decoder<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take()?))
    }
    fn name<const N: usize>(&mut self) -> Option<FixedName<N>> {
        Some(FixedName(self.take()?))
    }
}

impl NcclRecord {
    /// Appends this record's encoding to `out` (no allocation beyond `out` growing).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut e = Encoder(out);
        e.u16(self.kind()).u16(0);
        match self {
            NcclRecord::Process(p) => {
                e.u32(p.pid).u64(p.monotonic_ns).u64(p.realtime_ns).u32(p.nccl_version);
                e.name(&p.hostname).name(&p.nccl_library);
            }
            NcclRecord::Communicator(c) => {
                e.u64(c.comm_ref).u64(c.comm_id).u64(c.cpu_ns);
                e.i32(c.rank).i32(c.n_ranks).i32(c.n_nodes).u32(c.interface_version).name(&c.name);
            }
            NcclRecord::CommunicatorEnd { comm_ref, cpu_ns } => {
                e.u64(*comm_ref).u64(*cpu_ns);
            }
            NcclRecord::CollStart(c) => {
                e.u64(c.event).u64(c.comm_ref).u64(c.comm_id).u64(c.group).u64(c.seq).u64(c.count).u64(c.cpu_ns);
                e.i32(c.root).i32(c.rank).u8(c.n_channels).u8(c.n_warps);
                e.name(&c.func).name(&c.datatype).name(&c.algo).name(&c.proto);
            }
            NcclRecord::P2pStart(p) => {
                e.u64(p.event).u64(p.comm_ref).u64(p.comm_id).u64(p.group).u64(p.count).u64(p.cpu_ns);
                e.i32(p.peer).i32(p.rank).u8(p.n_channels).name(&p.func).name(&p.datatype);
            }
            NcclRecord::OpStop { event, cpu_ns } => {
                e.u64(*event).u64(*cpu_ns);
            }
            NcclRecord::KernelChStart { event, parent, gpu_start_ns, cpu_ns, channel } => {
                e.u64(*event).u64(*parent).u64(*gpu_start_ns).u64(*cpu_ns).u8(*channel);
            }
            NcclRecord::KernelChStop { event, gpu_stop_ns, cpu_ns } => {
                e.u64(*event).u64(*gpu_stop_ns).u64(*cpu_ns);
            }
            NcclRecord::ClockSync { monotonic_ns, realtime_ns } => {
                e.u64(*monotonic_ns).u64(*realtime_ns);
            }
            NcclRecord::Dropped { records } => {
                e.u64(*records);
            }
            NcclRecord::CallbackCost { callback_ns, callbacks } => {
                e.u64(*callback_ns).u64(*callbacks);
            }
        }
        let len = (out.len() - start) as u16;
        out[start + 2..start + 4].copy_from_slice(&len.to_le_bytes());
    }

    fn kind(&self) -> u16 {
        match self {
            NcclRecord::Process(_) => kind::PROCESS,
            NcclRecord::Communicator(_) => kind::COMMUNICATOR,
            NcclRecord::CommunicatorEnd { .. } => kind::COMMUNICATOR_END,
            NcclRecord::CollStart(_) => kind::COLL_START,
            NcclRecord::P2pStart(_) => kind::P2P_START,
            NcclRecord::OpStop { .. } => kind::OP_STOP,
            NcclRecord::KernelChStart { .. } => kind::KERNEL_CH_START,
            NcclRecord::KernelChStop { .. } => kind::KERNEL_CH_STOP,
            NcclRecord::ClockSync { .. } => kind::CLOCK_SYNC,
            NcclRecord::Dropped { .. } => kind::DROPPED,
            NcclRecord::CallbackCost { .. } => kind::CALLBACK_COST,
        }
    }

    /// Decodes the record at the start of `input` and advances past it.
    ///
    /// `Ok(None)`: a well-delimited record of a kind this reader does not know (skipped).
    /// `Err(())`: the input cannot be delimited or the record is shorter than its kind needs.
    #[allow(clippy::result_unit_err)]
    pub fn decode(input: &mut &[u8]) -> Result<Option<NcclRecord>, ()> {
        let header: [u8; 4] = input.get(..4).ok_or(())?.try_into().map_err(|_| ())?;
        let kind = u16::from_le_bytes([header[0], header[1]]);
        let len = u16::from_le_bytes([header[2], header[3]]) as usize;
        if len < 4 || len > input.len() {
            return Err(());
        }
        let mut d = Decoder(&input[4..len]);
        *input = &input[len..];
        let record = match kind {
            kind::PROCESS => Some(NcclRecord::Process(ProcessRecord {
                pid: d.u32().ok_or(())?,
                monotonic_ns: d.u64().ok_or(())?,
                realtime_ns: d.u64().ok_or(())?,
                nccl_version: d.u32().ok_or(())?,
                hostname: d.name().ok_or(())?,
                nccl_library: d.name().ok_or(())?,
            })),
            kind::COMMUNICATOR => Some(NcclRecord::Communicator(CommunicatorRecord {
                comm_ref: d.u64().ok_or(())?,
                comm_id: d.u64().ok_or(())?,
                cpu_ns: d.u64().ok_or(())?,
                rank: d.i32().ok_or(())?,
                n_ranks: d.i32().ok_or(())?,
                n_nodes: d.i32().ok_or(())?,
                interface_version: d.u32().ok_or(())?,
                name: d.name().ok_or(())?,
            })),
            kind::COMMUNICATOR_END => {
                Some(NcclRecord::CommunicatorEnd { comm_ref: d.u64().ok_or(())?, cpu_ns: d.u64().ok_or(())? })
            }
            kind::COLL_START => Some(NcclRecord::CollStart(CollStart {
                event: d.u64().ok_or(())?,
                comm_ref: d.u64().ok_or(())?,
                comm_id: d.u64().ok_or(())?,
                group: d.u64().ok_or(())?,
                seq: d.u64().ok_or(())?,
                count: d.u64().ok_or(())?,
                cpu_ns: d.u64().ok_or(())?,
                root: d.i32().ok_or(())?,
                rank: d.i32().ok_or(())?,
                n_channels: d.u8().ok_or(())?,
                n_warps: d.u8().ok_or(())?,
                func: d.name().ok_or(())?,
                datatype: d.name().ok_or(())?,
                algo: d.name().ok_or(())?,
                proto: d.name().ok_or(())?,
            })),
            kind::P2P_START => Some(NcclRecord::P2pStart(P2pStart {
                event: d.u64().ok_or(())?,
                comm_ref: d.u64().ok_or(())?,
                comm_id: d.u64().ok_or(())?,
                group: d.u64().ok_or(())?,
                count: d.u64().ok_or(())?,
                cpu_ns: d.u64().ok_or(())?,
                peer: d.i32().ok_or(())?,
                rank: d.i32().ok_or(())?,
                n_channels: d.u8().ok_or(())?,
                func: d.name().ok_or(())?,
                datatype: d.name().ok_or(())?,
            })),
            kind::OP_STOP => Some(NcclRecord::OpStop { event: d.u64().ok_or(())?, cpu_ns: d.u64().ok_or(())? }),
            kind::KERNEL_CH_START => Some(NcclRecord::KernelChStart {
                event: d.u64().ok_or(())?,
                parent: d.u64().ok_or(())?,
                gpu_start_ns: d.u64().ok_or(())?,
                cpu_ns: d.u64().ok_or(())?,
                channel: d.u8().ok_or(())?,
            }),
            kind::KERNEL_CH_STOP => Some(NcclRecord::KernelChStop {
                event: d.u64().ok_or(())?,
                gpu_stop_ns: d.u64().ok_or(())?,
                cpu_ns: d.u64().ok_or(())?,
            }),
            kind::CLOCK_SYNC => {
                Some(NcclRecord::ClockSync { monotonic_ns: d.u64().ok_or(())?, realtime_ns: d.u64().ok_or(())? })
            }
            kind::DROPPED => Some(NcclRecord::Dropped { records: d.u64().ok_or(())? }),
            kind::CALLBACK_COST => {
                Some(NcclRecord::CallbackCost { callback_ns: d.u64().ok_or(())?, callbacks: d.u64().ok_or(())? })
            }
            _ => None,
        };
        Ok(record)
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
    fn fixed_names_cut_long_text() {
        let long = "x".repeat(40);
        assert_eq!(ShortName::from_text(&long).as_str().len(), 24);
        let c = std::ffi::CString::new("ncclFloat8e4m3").unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { ShortName::from_c_str(c.as_ptr()) }.as_str(), "ncclFloat8e4m3");
        // SAFETY: null is allowed.
        assert_eq!(unsafe { ShortName::from_c_str(std::ptr::null()) }.as_str(), "");
    }
}
