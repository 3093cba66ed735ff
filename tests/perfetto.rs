//! Round trip of the Perfetto exporter: traces are written, decoded again with the crate's own
//! protobuf types, and the decoded timeline (tracks, nested slices, interned names, flows,
//! timestamps) is compared with the model it came from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use prost::Message;
use shardscope::model::{
    ApiCall, Collective, CollectiveOp, CopyKind, Device, Kernel, MemOp, Process, Range, RangeKind, ThreadName, Trace,
};
use shardscope::perfetto::proto::{self, debug_annotation, trace_packet, track_event};
use shardscope::perfetto::{ExportStats, write_trace};

/// A slice as read back: where it is, what it is called, and its arguments and flows.
#[derive(Debug, Clone, PartialEq)]
struct Slice {
    track: u64,
    start_ns: u64,
    end_ns: u64,
    name: String,
    args: Vec<(String, String)>,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// What kind of row a track is, as the exporter lays them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrackKind {
    Process,
    Thread,
    GpuGroup,
    Stream,
    Other,
}

/// A decoded trace: every descriptor by uuid, and every slice.
struct Decoded {
    tracks: HashMap<u64, proto::TrackDescriptor>,
    /// Sequence id of the packet that described each track.
    track_sequence: HashMap<u64, u32>,
    slices: Vec<Slice>,
}

impl Decoded {
    fn kind(&self, uuid: u64) -> TrackKind {
        let Some(track) = self.tracks.get(&uuid) else { return TrackKind::Other };
        if track.process.is_some() {
            return TrackKind::Process;
        }
        if track.thread.is_some() {
            return TrackKind::Thread;
        }
        let name = self.name(uuid);
        let parent_is_process = track.parent_uuid.is_some_and(|p| self.kind(p) == TrackKind::Process);
        if name.starts_with("GPU ") && (track.parent_uuid.is_none() || parent_is_process) {
            TrackKind::GpuGroup
        } else if name.starts_with("Stream ") && track.parent_uuid.is_some_and(|p| self.kind(p) == TrackKind::GpuGroup)
        {
            TrackKind::Stream
        } else {
            TrackKind::Other
        }
    }

    fn name(&self, uuid: u64) -> &str {
        match self.tracks.get(&uuid).and_then(|t| t.static_or_dynamic_name.as_ref()) {
            Some(proto::track_descriptor::StaticOrDynamicName::Name(name)) => name,
            None => "",
        }
    }

    fn slices_on(&self, kind: TrackKind) -> Vec<&Slice> {
        self.slices.iter().filter(|s| self.kind(s.track) == kind).collect()
    }
}

/// Per packet sequence: interned event names, annotation names and annotation string values.
#[derive(Default)]
struct SequenceState {
    event_names: HashMap<u64, String>,
    annotation_names: HashMap<u64, String>,
    annotation_values: HashMap<u64, String>,
    cleared: bool,
}

/// Decodes a written trace, pairing slice ends with the innermost open slice of their track
/// (what Perfetto does) and resolving every interned id; panics on anything unresolved.
fn decode(bytes: &[u8]) -> Decoded {
    let trace = proto::Trace::decode(bytes).expect("the output decodes as a Perfetto Trace");
    let mut sequences: HashMap<u32, SequenceState> = HashMap::new();
    let mut tracks = HashMap::new();
    let mut track_sequence = HashMap::new();
    let mut open: HashMap<u64, Vec<Slice>> = HashMap::new();
    let mut slices = Vec::new();
    for packet in trace.packet {
        let sequence_id = match packet.optional_trusted_packet_sequence_id {
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(id)) => id,
            None => 0,
        };
        let flags = packet.sequence_flags.unwrap_or(0);
        let state = sequences.entry(sequence_id).or_default();
        if flags & proto::trace_packet::SequenceFlags::SeqIncrementalStateCleared as u32 != 0 {
            *state = SequenceState { cleared: true, ..SequenceState::default() };
        }
        if let Some(interned) = packet.interned_data {
            assert!(state.cleared, "interned data before the sequence's state was cleared");
            for entry in interned.event_names {
                assert!(state.event_names.insert(entry.iid(), entry.name().to_string()).is_none(), "event iid reused");
            }
            for entry in interned.debug_annotation_names {
                state.annotation_names.insert(entry.iid(), entry.name().to_string());
            }
            for entry in interned.debug_annotation_string_values {
                state.annotation_values.insert(entry.iid(), String::from_utf8(entry.str().to_vec()).unwrap());
            }
        }
        match packet.data {
            Some(trace_packet::Data::TrackDescriptor(descriptor)) => {
                let uuid = descriptor.uuid();
                assert!(tracks.insert(uuid, descriptor).is_none(), "track uuid {uuid} described twice");
                track_sequence.insert(uuid, sequence_id);
            }
            Some(trace_packet::Data::TrackEvent(event)) => {
                let track = event.track_uuid();
                let timestamp = packet.timestamp.expect("every event has a timestamp");
                match event.r#type() {
                    track_event::Type::SliceBegin => {
                        assert!(flags & proto::trace_packet::SequenceFlags::SeqNeedsIncrementalState as u32 != 0);
                        let name = match event.name_field {
                            Some(track_event::NameField::NameIid(iid)) => {
                                state.event_names.get(&iid).cloned().expect("event name iid resolves")
                            }
                            Some(track_event::NameField::Name(name)) => name,
                            None => panic!("slice without a name"),
                        };
                        let args = event
                            .debug_annotations
                            .iter()
                            .map(|a| {
                                let key = match a.name_field {
                                    Some(debug_annotation::NameField::NameIid(iid)) => {
                                        state.annotation_names[&iid].clone()
                                    }
                                    Some(debug_annotation::NameField::Name(ref name)) => name.clone(),
                                    None => panic!("annotation without a name"),
                                };
                                let value = match a.value {
                                    Some(debug_annotation::Value::UintValue(v)) => v.to_string(),
                                    Some(debug_annotation::Value::StringValueIid(iid)) => state
                                        .annotation_values
                                        .get(&iid)
                                        .cloned()
                                        .expect("annotation value iid resolves"),
                                    ref other => panic!("unexpected annotation value {other:?}"),
                                };
                                (key, value)
                            })
                            .collect();
                        open.entry(track).or_default().push(Slice {
                            track,
                            start_ns: timestamp,
                            end_ns: 0,
                            name,
                            args,
                            flows_out: event.flow_ids.clone(),
                            flows_in: event.terminating_flow_ids.clone(),
                        });
                    }
                    track_event::Type::SliceEnd => {
                        let mut slice =
                            open.get_mut(&track).and_then(|s| s.pop()).expect("an end closes an open slice");
                        assert!(timestamp >= slice.start_ns, "slice ends before it starts");
                        if let Some(parent) = open[&track].last() {
                            assert!(parent.start_ns <= slice.start_ns, "inner slice starts before its parent");
                        }
                        slice.end_ns = timestamp;
                        slices.push(slice);
                    }
                    other => panic!("unexpected event type {other:?}"),
                }
            }
            None => panic!("packet without data"),
        }
    }
    assert!(open.values().all(|s| s.is_empty()), "slices left open");
    for slice in &slices {
        assert!(tracks.contains_key(&slice.track), "slice on an undescribed track");
    }
    Decoded { tracks, track_sequence, slices }
}

fn export(traces: &[Trace]) -> (Vec<u8>, ExportStats) {
    let mut bytes = Vec::new();
    let stats = write_trace(traces, &mut bytes).expect("writing to memory");
    assert_eq!(stats.bytes, bytes.len() as u64);
    (bytes, stats)
}

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-traces").join(name)
}

/// Start, end and name of every slice of the given tracks, sorted.
fn spans(slices: &[&Slice]) -> Vec<(u64, u64, String)> {
    let mut spans: Vec<_> = slices.iter().map(|s| (s.start_ns, s.end_ns, s.name.clone())).collect();
    spans.sort();
    spans
}

#[test]
fn sample_two_rank_trace_round_trips() {
    let traces = shardscope::io::load(&sample("tp2_nsys.sqlite.gz")).expect("sample loads");
    assert_eq!(traces.len(), 1);
    let trace = &traces[0];
    // Counted in the SQLite file: CUPTI_ACTIVITY_KIND_KERNEL 1184 rows, MEMCPY 292, MEMSET 208,
    // RUNTIME 16781, NVTX_EVENTS push/pop ranges (eventType 59) 188; every kernel, copy and set
    // has a runtime call with its correlation id in its process.
    assert_eq!(trace.kernels.len(), 1184);
    assert_eq!(trace.memops.len(), 292 + 208);
    assert_eq!(trace.api_calls.len(), 16781);
    assert_eq!(trace.ranges.len(), 188);

    let (bytes, stats) = export(&traces);
    assert_eq!(stats.kernel_slices, 1184);
    assert_eq!(stats.memop_slices, 500);
    assert_eq!(stats.api_slices, 16781);
    assert_eq!(stats.range_slices, 188);
    assert_eq!(stats.kernel_flows, 1184);
    assert_eq!(stats.memop_flows, 500);
    eprintln!("tp2 sample: {} bytes, {:.1} bytes per kernel, {stats:?}", bytes.len(), bytes.len() as f64 / 1184.0);

    let decoded = decode(&bytes);
    let stream_slices = decoded.slices_on(TrackKind::Stream);
    let thread_slices = decoded.slices_on(TrackKind::Thread);
    // Overlap rows sit beside their row, under the same parent.
    let overlap_slices: Vec<&Slice> = decoded.slices_on(TrackKind::Other);
    let overlap_rows = decoded.tracks.keys().filter(|&&u| decoded.name(u).contains(" (overlap ")).count();
    assert_eq!(stats.overlap_rows as usize, overlap_rows);
    assert_eq!(stream_slices.len() + thread_slices.len() + overlap_slices.len(), 1184 + 500 + 16781 + 188);

    // GPU rows hold exactly the kernels and copies, with their times and resolved names.
    let offset = trace.clock_offset_ns.unwrap_or(0);
    let mut expected_gpu: Vec<(u64, u64, String)> = trace
        .kernels
        .iter()
        .map(|k| {
            ((k.start_ns + offset) as u64, (k.end_ns.max(k.start_ns) + offset) as u64, trace.kernel_name(k).to_string())
        })
        .collect();
    let memop_label = |m: &MemOp| match m.copy_kind {
        None => "[CUDA memset]".to_string(),
        Some(kind) => format!("[CUDA memcpy {}]", kind.label()),
    };
    expected_gpu.extend(
        trace
            .memops
            .iter()
            .map(|m| ((m.start_ns + offset) as u64, (m.end_ns.max(m.start_ns) + offset) as u64, memop_label(m))),
    );
    expected_gpu.sort();
    let gpu_rows: Vec<&Slice> = decoded
        .slices
        .iter()
        .filter(|s| {
            decoded.kind(s.track) == TrackKind::Stream
                || decoded.tracks[&s.track].parent_uuid.is_some_and(|p| decoded.kind(p) == TrackKind::GpuGroup)
        })
        .collect();
    assert_eq!(spans(&gpu_rows), expected_gpu);
    // Both GPUs (ordinals 0 and 1) have a group with streams 7, 14, 30 and 31 (kernels on 7,
    // sets on 7, 14 and 30, copies on 30 and 31, per GPU in the SQLite file).
    let mut groups: Vec<&str> =
        decoded.tracks.keys().filter(|&&u| decoded.kind(u) == TrackKind::GpuGroup).map(|&u| decoded.name(u)).collect();
    groups.sort();
    assert_eq!(groups.len(), 2);
    assert!(groups[0].starts_with("GPU 0") && groups[1].starts_with("GPU 1"), "{groups:?}");
    let mut streams: Vec<&str> =
        decoded.tracks.keys().filter(|&&u| decoded.kind(u) == TrackKind::Stream).map(|&u| decoded.name(u)).collect();
    streams.sort();
    let per_gpu = ["Stream 14", "Stream 30", "Stream 31", "Stream 7", "Stream 7 (overlap 1)"];
    assert_eq!(streams, per_gpu.iter().flat_map(|s| [*s, *s]).collect::<Vec<_>>());
    // 30 splitKreduce kernels on GPU 0 and 31 on GPU 1 start about 100 ns before the GEMM
    // before them on stream 7 ends (found by sorting the SQLite kernel, copy and set rows per
    // device and stream and counting rows that start before and end after the latest end so
    // far): they cannot nest, so they are the overlap rows' slices.
    let overlapping: Vec<&Slice> =
        gpu_rows.iter().copied().filter(|s| decoded.name(s.track).contains("(overlap")).collect();
    assert_eq!(overlapping.len(), 61);
    assert!(overlapping.iter().all(|s| s.name.contains("splitKreduce_kernel")));
    assert_eq!(stats.overlap_rows, 2);

    // Thread rows hold the API calls and ranges.
    let mut expected_cpu: Vec<(u64, u64, String)> = trace
        .api_calls
        .iter()
        .map(|a| {
            (
                (a.start_ns + offset) as u64,
                (a.end_ns.max(a.start_ns) + offset) as u64,
                trace.names.get(a.name).to_string(),
            )
        })
        .collect();
    expected_cpu.extend(trace.ranges.iter().map(|r| {
        ((r.start_ns + offset) as u64, (r.end_ns.max(r.start_ns) + offset) as u64, trace.names.get(r.name).to_string())
    }));
    expected_cpu.sort();
    let cpu_rows: Vec<&Slice> = decoded
        .slices
        .iter()
        .filter(|s| {
            decoded.kind(s.track) == TrackKind::Thread
                || decoded.tracks[&s.track].parent_uuid.is_some_and(|p| decoded.kind(p) == TrackKind::Process)
                    && decoded.kind(s.track) == TrackKind::Other
        })
        .collect();
    assert_eq!(spans(&cpu_rows), expected_cpu);

    // One process track per rank, named with the rank.
    let mut process_names: Vec<String> =
        decoded.tracks.values().filter_map(|t| t.process.as_ref()).map(|p| p.process_name().to_string()).collect();
    process_names.sort();
    assert_eq!(process_names.len(), trace.processes.len());
    for (process, name) in trace.processes.iter().zip(&process_names) {
        if let Some(rank) = process.rank {
            assert!(name.starts_with(&format!("rank {rank}")), "{name}");
        }
    }

    // Every kernel and copy is the end of exactly one flow that leaves an API call.
    let flow_starts: HashMap<u64, &Slice> =
        decoded.slices.iter().flat_map(|s| s.flows_out.iter().map(move |&id| (id, s))).collect();
    let mut linked_kernels = 0;
    for slice in &gpu_rows {
        for id in &slice.flows_in {
            let launch = flow_starts.get(id).expect("flow end has a start");
            assert!(launch.start_ns <= slice.start_ns, "{} launched after it ran", slice.name);
            assert!(decoded.kind(launch.track) == TrackKind::Thread);
            if !slice.name.starts_with("[CUDA mem") {
                linked_kernels += 1;
                assert!(launch.name.contains("Launch"), "kernel launched by {}", launch.name);
            }
        }
    }
    assert_eq!(linked_kernels, 1184);
    assert_eq!(flow_starts.len(), 1184 + 500);

    // Kernel arguments: grid, block and correlation id of the model's kernel.
    let first = &trace.kernels[0];
    let first_slice = gpu_rows
        .iter()
        .find(|s| s.start_ns == (first.start_ns + offset) as u64 && s.name == trace.kernel_name(first))
        .unwrap();
    let arg = |key: &str| first_slice.args.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    assert_eq!(arg("grid"), Some(format!("{}x{}x{}", first.grid[0], first.grid[1], first.grid[2])));
    assert_eq!(arg("block"), Some(format!("{}x{}x{}", first.block[0], first.block[1], first.block[2])));
    assert_eq!(arg("correlation_id"), Some(first.correlation_id.to_string()));
}

#[test]
fn several_traces_share_one_file_without_clashes() {
    let traces = shardscope::io::load(&sample("tp2_nsys.sqlite.gz")).expect("sample loads");
    // The same trace twice: same pids, tids and correlation ids, which must still stay apart.
    let twice = vec![traces[0].clone(), traces[0].clone()];
    let (bytes, stats) = export(&twice);
    assert_eq!(stats.traces, 2);
    assert_eq!(stats.kernel_flows, 2 * 1184);
    let decoded = decode(&bytes);
    assert_eq!(
        decoded.slices_on(TrackKind::Stream).len() + decoded.slices_on(TrackKind::Thread).len(),
        decoded.slices.len() - decoded.slices_on(TrackKind::Other).len()
    );
    let mut pids: Vec<i32> = decoded.tracks.values().filter_map(|t| t.process.as_ref()).map(|p| p.pid()).collect();
    let process_count = pids.len();
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), process_count, "each process track has its own pid");
    assert_eq!(process_count, 2 * traces[0].processes.len());
    let mut threads: Vec<(i32, i64)> =
        decoded.tracks.values().filter_map(|t| t.thread.as_ref()).map(|t| (t.pid(), t.tid())).collect();
    let thread_count = threads.len();
    threads.sort();
    threads.dedup();
    assert_eq!(threads.len(), thread_count, "each thread track has its own pid and tid");
    // 9 distinct globalTid values in the SQLite file's runtime calls and NVTX ranges, per copy.
    assert_eq!(thread_count, 2 * 9);
    let mut sequences: Vec<u32> =
        decoded.track_sequence.iter().filter(|&(&uuid, _)| uuid != 0).map(|(_, &sequence)| sequence).collect();
    sequences.sort();
    sequences.dedup();
    assert_eq!(sequences, [1, 2]);
    let flow_ids: Vec<u64> = decoded.slices.iter().flat_map(|s| s.flows_in.iter().copied()).collect();
    let mut unique = flow_ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), flow_ids.len(), "flow ids are unique across traces");
}

/// A small trace with every case the exporter treats specially.
fn fabricated() -> Trace {
    let mut t = Trace { clock_offset_ns: Some(1_000_000), ..Trace::default() };
    let p = t.add_process(Process { pid: 4242, name: "python3".into(), rank: Some(3), ..Process::default() });
    let d = t.add_device(Device { ordinal: 2, process: Some(p), name: "NVIDIA H200".into(), ..Device::default() });
    t.threads.push(ThreadName { process: p, tid: 4243, name: "main".into() });
    let launch = t.names.intern("cudaLaunchKernel");
    let graph = t.names.intern("cudaGraphLaunch");
    let copy = t.names.intern("cudaMemcpyAsync");
    let gemm = t.names.intern("gemm");
    let nccl = t.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    let call = |start_ns, end_ns, name, correlation_id| ApiCall {
        start_ns,
        end_ns,
        name,
        process: p,
        tid: 4243,
        correlation_id,
        ..ApiCall::default()
    };
    t.api_calls =
        vec![call(100, 120, launch, 1), call(130, 150, graph, 2), call(160, 170, copy, 3), call(180, 190, launch, 0)];
    let kernel = |start_ns, end_ns, name, correlation_id| Kernel {
        start_ns,
        end_ns,
        name,
        short_name: name,
        device: d,
        process: p,
        stream: 7,
        correlation_id,
        grid: [128, 2, 1],
        block: [256, 1, 1],
        ..Kernel::default()
    };
    t.kernels = vec![
        kernel(200, 300, gemm, 1),
        // A graph launch runs two kernels for one call; the second overlaps the first's end
        // without nesting (timer jitter), so it needs an overlap row.
        kernel(310, 400, nccl, 2),
        kernel(390, 450, gemm, 2),
        // A kernel whose launch is unknown.
        kernel(500, 510, gemm, 99),
    ];
    t.kernels[1].collective = Some(0);
    t.collectives.push(Collective { op: CollectiveOp::AllReduce, bytes: Some(1 << 20), ..Collective::default() });
    t.memops.push(MemOp {
        start_ns: 460,
        end_ns: 480,
        copy_kind: Some(CopyKind::HtoD),
        bytes: 4096,
        device: d,
        process: p,
        stream: 9,
        correlation_id: 3,
        ..MemOp::default()
    });
    let step = t.names.intern("decode");
    let layer = t.names.intern("layer 0");
    let spanning = t.names.intern("request");
    t.ranges = vec![
        Range { start_ns: 90, end_ns: 200, name: step, process: p, tid: 4243, ..Range::default() },
        Range { start_ns: 95, end_ns: 155, name: layer, process: p, tid: 4243, ..Range::default() },
        Range {
            start_ns: 50,
            end_ns: 600,
            name: spanning,
            kind: RangeKind::StartEnd,
            process: p,
            tid: 4243,
            ..Range::default()
        },
    ];
    t.finish();
    t
}

#[test]
fn fabricated_trace_round_trips_exactly() {
    let trace = fabricated();
    let (bytes, stats) = export(std::slice::from_ref(&trace));
    assert_eq!(
        stats,
        ExportStats {
            traces: 1,
            packets: stats.packets,
            bytes: bytes.len() as u64,
            // Process, thread, GPU group, streams 7 and 9, start/end row, one overlap row.
            tracks: 7,
            kernel_slices: 4,
            memop_slices: 1,
            api_slices: 4,
            range_slices: 3,
            kernel_flows: 3,
            memop_flows: 1,
            overlap_rows: 1,
            // 5 model names used + 3 range names + the copy label.
            interned_names: 9,
            clamped_timestamps: 0,
            // Without notes, no categories and no parts.
            categorised_slices: 0,
            split_collectives: 0,
        }
    );
    // Root descriptor, 7 track descriptors, and a begin and an end per slice.
    assert_eq!(stats.packets, 1 + 7 + 2 * 12);
    let decoded = decode(&bytes);
    let by_name = |name: &str| -> Vec<&Slice> {
        let mut slices: Vec<&Slice> = decoded.slices.iter().filter(|s| s.name == name).collect();
        slices.sort_by_key(|s| s.start_ns);
        slices
    };

    let process = decoded.tracks.values().find_map(|t| t.process.as_ref()).unwrap();
    assert_eq!((process.pid(), process.process_name()), (4242, "rank 3: python3"));
    let thread = decoded.tracks.values().find_map(|t| t.thread.as_ref()).unwrap();
    assert_eq!((thread.pid(), thread.tid(), thread.thread_name()), (4242, 4243, "main"));

    // Timestamps carry the clock offset; the graph kernel that overlaps goes to the overlap row.
    let gemms = by_name("gemm");
    assert_eq!(
        gemms.iter().map(|s| (s.start_ns, s.end_ns)).collect::<Vec<_>>(),
        [(1_000_200, 1_000_300), (1_000_390, 1_000_450), (1_000_500, 1_000_510)]
    );
    assert_eq!(decoded.name(gemms[0].track), "Stream 7");
    assert_eq!(decoded.name(gemms[1].track), "Stream 7 (overlap 1)");
    // The overlap row sorts with its stream: same parent, same rank.
    let (row, overlap) = (&decoded.tracks[&gemms[0].track], &decoded.tracks[&gemms[1].track]);
    assert_eq!((overlap.parent_uuid, overlap.sibling_order_rank), (row.parent_uuid, Some(7)));
    assert_eq!(row.sibling_order_rank, Some(7));
    let nccl = by_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    assert_eq!(
        nccl[0].args,
        [
            ("grid".to_string(), "128x2x1".to_string()),
            ("block".to_string(), "256x1x1".to_string()),
            ("correlation_id".to_string(), "2".to_string()),
            ("collective".to_string(), "all_reduce".to_string()),
            ("collective_bytes".to_string(), (1u64 << 20).to_string()),
        ]
    );
    let group = decoded.tracks[&gemms[0].track].parent_uuid.unwrap();
    assert_eq!(decoded.name(group), "GPU 2 (NVIDIA H200)");

    // Flows: the graph launch starts two flows ending at its two kernels; the unknown launch none.
    let graph_launch = &by_name("cudaGraphLaunch")[0];
    assert_eq!(graph_launch.flows_out.len(), 2);
    assert_eq!(graph_launch.flows_out[0], nccl[0].flows_in[0]);
    assert_eq!(graph_launch.flows_out[1], gemms[1].flows_in[0]);
    assert_eq!(by_name("cudaLaunchKernel")[0].flows_out, gemms[0].flows_in);
    assert!(by_name("cudaLaunchKernel")[1].flows_out.is_empty());
    assert!(gemms[2].flows_in.is_empty());
    let copy = &by_name("[CUDA memcpy Host-to-Device]")[0];
    assert_eq!(copy.args, [("bytes".to_string(), "4096".to_string()), ("correlation_id".to_string(), "3".to_string())]);
    assert_eq!(by_name("cudaMemcpyAsync")[0].flows_out, copy.flows_in);
    assert_eq!(decoded.name(copy.track), "Stream 9");

    // Push/pop ranges nest with the API calls on the thread track; start/end ranges get their own row.
    let decode_range = &by_name("decode")[0];
    let layer = &by_name("layer 0")[0];
    assert_eq!(decode_range.track, layer.track);
    assert_eq!(decoded.tracks[&layer.track].thread.as_ref().map(|t| t.tid()), Some(4243));
    assert_eq!((layer.start_ns, layer.end_ns), (1_000_095, 1_000_155));
    let request = &by_name("request")[0];
    assert_eq!(decoded.name(request.track), "NVTX start/end ranges");
}

#[test]
fn export_file_names_the_bad_input() {
    let missing = PathBuf::from("/nonexistent/rank0.sqlite");
    let output = std::env::temp_dir().join(format!("shardscope-perfetto-{}.pftrace", std::process::id()));
    let error = shardscope::perfetto::export_file(&[missing], &output).unwrap_err().to_string();
    assert!(error.contains("/nonexistent/rank0.sqlite"), "{error}");
    assert!(!error.contains('\n'));

    let stats = shardscope::perfetto::export_file(&[sample("tp1_nsys.sqlite.gz")], &output).unwrap();
    let written = std::fs::read(&output).unwrap();
    std::fs::remove_file(&output).unwrap();
    assert_eq!(written.len() as u64, stats.bytes);
    assert_eq!(
        decode(&written).slices.len() as u64,
        stats.kernel_slices + stats.memop_slices + stats.api_slices + stats.range_slices
    );
}
