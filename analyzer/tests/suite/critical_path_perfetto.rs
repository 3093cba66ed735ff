//! `critical-path --perfetto`: the written file, decoded again, holds the path as a process of its own (one row
//! per rank it visits, each segment a slice at its times, an arrow wherever it crosses ranks) and each rank's
//! no-straggler replay beside the real tracks, ending where `what-if` says the ideal step ends.

use crate::common;

use std::collections::HashMap;

use common::{analyzer, repo_root};
use serde_json::Value;
use shardscope::perfetto::proto::{self, trace_packet, track_event};

struct Slice {
    track: u64,
    name: String,
    start_ns: u64,
    end_ns: u64,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// Track descriptors by uuid and the slices with inline names (the extra processes' slices).
fn decode(bytes: &[u8]) -> (HashMap<u64, proto::TrackDescriptor>, Vec<Slice>) {
    let trace = shardscope::perfetto::decode(bytes).expect("decodes");
    let mut tracks = HashMap::new();
    let mut open: HashMap<u64, Vec<Slice>> = HashMap::new();
    let mut slices = Vec::new();
    for packet in trace.packet {
        match packet.data {
            Some(trace_packet::Data::TrackDescriptor(d)) => {
                tracks.insert(d.uuid.unwrap(), d);
            }
            Some(trace_packet::Data::TrackEvent(event)) => {
                let track = event.track_uuid.unwrap();
                let at = packet.timestamp.unwrap();
                match event.r#type() {
                    track_event::Type::SliceBegin => {
                        let name = match event.name_field {
                            Some(track_event::NameField::Name(name)) => name,
                            _ => String::new(),
                        };
                        open.entry(track).or_default().push(Slice {
                            track,
                            name,
                            start_ns: at,
                            end_ns: at,
                            flows_out: event.flow_ids,
                            flows_in: event.terminating_flow_ids,
                        });
                    }
                    track_event::Type::SliceEnd => {
                        let mut slice = open.get_mut(&track).and_then(Vec::pop).expect("an open slice");
                        assert!(at >= slice.start_ns, "slice ends before it begins");
                        slice.end_ns = at;
                        slices.push(slice);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    assert!(open.values().all(Vec::is_empty), "every slice is closed");
    (tracks, slices)
}

fn name(tracks: &HashMap<u64, proto::TrackDescriptor>, uuid: u64) -> String {
    let d = &tracks[&uuid];
    if let Some(p) = &d.process {
        return p.process_name.clone().unwrap_or_default();
    }
    match &d.static_or_dynamic_name {
        Some(proto::track_descriptor::StaticOrDynamicName::Name(n)) => n.clone(),
        _ => String::new(),
    }
}

fn json(args: &[&str]) -> Value {
    let output = analyzer(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_path_and_the_ideal_replay_are_written_beside_the_real_tracks() {
    let sample = repo_root().join("sample-traces/tp2_skew_capture.sqlite.gz");
    let sample = sample.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("path.pftrace");
    let path = json(&["critical-path", "--format", "json", "--perfetto", out.to_str().unwrap(), sample]);
    let ideal = json(&["what-if", "--no-straggler", "--whole-trace", "--format", "json", sample]);
    let (tracks, slices) = decode(&std::fs::read(&out).unwrap());
    let parent_name = |uuid: u64| tracks[&uuid].parent_uuid.map(|p| name(&tracks, p)).unwrap_or_default();

    // The real tracks are there too: the plain export's process tracks of both ranks.
    let processes: Vec<String> = tracks
        .values()
        .filter(|d| d.process.is_some())
        .map(|d| d.process.as_ref().unwrap().process_name.clone().unwrap_or_default())
        .collect();
    assert!(processes.iter().filter(|p| p.contains("rank")).count() >= 4, "{processes:?}");

    // Every segment of the path is a slice of the critical-path process, on its rank's row, at its times.
    let segments = path["segments"].as_array().unwrap();
    let on_path: Vec<&Slice> = slices.iter().filter(|s| parent_name(s.track).starts_with("critical path")).collect();
    assert_eq!(on_path.len(), segments.len());
    for segment in segments {
        let (start, end) = (segment["start_ns"].as_u64().unwrap(), segment["end_ns"].as_u64().unwrap());
        let row = format!("rank {}", segment["rank"]);
        let op = segment["op"].as_str().unwrap();
        assert!(
            on_path.iter().any(|s| s.start_ns == start
                && s.end_ns == end
                && name(&tracks, s.track) == row
                && s.name.contains(op)),
            "segment {op} {start}..{end} on {row}"
        );
    }
    // An arrow for each crossing between ranks: leaving the last slice before it, ending at the first after it.
    let crossings = segments.windows(2).filter(|w| w[0]["rank"] != w[1]["rank"]).count();
    assert!(crossings > 0, "the skewed sample's path crosses ranks");
    let mut outgoing: Vec<u64> = on_path.iter().flat_map(|s| s.flows_out.clone()).collect();
    let mut incoming: Vec<u64> = on_path.iter().flat_map(|s| s.flows_in.clone()).collect();
    outgoing.sort_unstable();
    incoming.sort_unstable();
    assert_eq!(outgoing.len(), crossings);
    assert_eq!(outgoing, incoming);
    // Each arrow leaves a slice that ends where the slice it enters starts, on another rank's row.
    for id in &outgoing {
        let from = on_path.iter().find(|s| s.flows_out.contains(id)).unwrap();
        let to = on_path.iter().find(|s| s.flows_in.contains(id)).unwrap();
        assert_ne!(from.track, to.track);
        assert!(from.start_ns <= to.start_ns);
    }

    // The no-straggler replay: one process per rank; its last GPU end is the ideal the what-if reports.
    let replay: Vec<&Slice> =
        slices.iter().filter(|s| parent_name(s.track).contains("· no-straggler replay")).collect();
    let replay_ranks: std::collections::BTreeSet<String> = replay.iter().map(|s| parent_name(s.track)).collect();
    assert_eq!(replay_ranks.len(), 2, "{replay_ranks:?}");
    let last_gpu_end =
        replay.iter().filter(|s| name(&tracks, s.track).starts_with("stream")).map(|s| s.end_ns).max().unwrap();
    let start = path["start_ns"].as_u64().unwrap();
    assert_eq!(last_gpu_end - start, ideal["ideal_ns"].as_u64().unwrap());
    assert!(ideal["ideal_ns"].as_u64().unwrap() < path["measured_ns"].as_u64().unwrap());
}
