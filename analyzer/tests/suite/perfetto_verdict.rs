//! A Perfetto export tells what the report tells: per rank, the GPU time of the slices without children summed by
//! their category equals the report's category times (communication split into `wait.<type>` and `comm.<type>`),
//! and the `waiting for rank N` slices add up to the waiting each rank's lateness caused, so the late rank read
//! off the timeline is the report's. On the skewed two-rank capture and on the two-rank Kineto traces.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use shardscope::perfetto::proto::{trace_packet, track_event};
use shardscope_analyzer::figures::categories::Classifier;
use shardscope_analyzer::output::perfetto_notes::slice_notes;
use shardscope_analyzer::report::{self, Options};
use shardscope_model::Trace;

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces").join(name)
}

/// A written slice: its track, times, name and categories, and whether another slice nests in it.
struct Slice {
    track: u64,
    duration_ns: u64,
    name: String,
    categories: Vec<String>,
    has_child: bool,
}

/// The slices of a Perfetto file, and per track the pid of the process it belongs to.
fn decode(bytes: &[u8]) -> (Vec<Slice>, HashMap<u64, i32>) {
    let trace = shardscope::perfetto::decode(bytes).expect("decodes");
    let mut parents: HashMap<u64, u64> = HashMap::new();
    let mut pids: HashMap<u64, i32> = HashMap::new();
    // Per packet sequence: interned event names and categories.
    type Interned = (HashMap<u64, String>, HashMap<u64, String>);
    let mut interned: HashMap<u32, Interned> = HashMap::new();
    let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut slices = Vec::new();
    for packet in trace.packet {
        let sequence = match packet.optional_trusted_packet_sequence_id {
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(id)) => id,
            None => 0,
        };
        let (names, categories) = interned.entry(sequence).or_default();
        if let Some(data) = packet.interned_data {
            names.extend(data.event_names.into_iter().map(|e| (e.iid(), e.name().to_string())));
            categories.extend(data.event_categories.into_iter().map(|e| (e.iid(), e.name().to_string())));
        }
        match packet.data {
            Some(trace_packet::Data::TrackDescriptor(track)) => {
                if let Some(parent) = track.parent_uuid {
                    parents.insert(track.uuid(), parent);
                }
                let pid = track.process.as_ref().and_then(|p| p.pid).or(track.thread.as_ref().and_then(|t| t.pid));
                if let Some(pid) = pid {
                    pids.insert(track.uuid(), pid);
                }
            }
            Some(trace_packet::Data::TrackEvent(event)) => {
                let track = event.track_uuid();
                let stack = open.entry(track).or_default();
                let timestamp = packet.timestamp.unwrap_or_default();
                if event.r#type() == track_event::Type::SliceBegin {
                    if let Some(&parent) = stack.last() {
                        let parent: &mut Slice = &mut slices[parent];
                        parent.has_child = true;
                    }
                    stack.push(slices.len());
                    let name = match event.name_field {
                        Some(track_event::NameField::NameIid(iid)) => names[&iid].clone(),
                        Some(track_event::NameField::Name(name)) => name,
                        None => String::new(),
                    };
                    let categories = event.category_iids.iter().map(|iid| categories[iid].clone()).collect();
                    // The start, until the end comes.
                    slices.push(Slice { track, duration_ns: timestamp, name, categories, has_child: false });
                } else if event.r#type() == track_event::Type::SliceEnd {
                    let index = stack.pop().expect("an end closes an open slice");
                    slices[index].duration_ns = timestamp - slices[index].duration_ns;
                }
            }
            None => {}
        }
    }
    // Every track's process: its own pid, or its nearest ancestor's.
    let tracks: Vec<u64> = parents.keys().copied().collect();
    for track in tracks {
        let mut at = track;
        while !pids.contains_key(&at) {
            let Some(&parent) = parents.get(&at) else { break };
            at = parent;
        }
        if let Some(&pid) = pids.get(&at) {
            pids.insert(track, pid);
        }
    }
    (slices, pids)
}

/// Exports `traces` with the report's notes and checks the written timeline against the report.
fn check_against_report(traces: &[Trace]) {
    let report = report::analyze(traces, &Options::default());
    let notes = slice_notes(traces, &Classifier::builtin());
    let mut bytes = Vec::new();
    let stats = shardscope::perfetto::write_trace_with_notes(traces, &notes, &[], &mut bytes).expect("writes");
    let (slices, pids) = decode(&bytes);
    let mut by_pid: BTreeMap<i32, BTreeMap<String, i64>> = BTreeMap::new();
    let mut caused_wait_ns: BTreeMap<u32, i64> = BTreeMap::new();
    for slice in slices.iter().filter(|s| !s.has_child) {
        for category in &slice.categories {
            let pid = pids[&slice.track];
            *by_pid.entry(pid).or_default().entry(category.clone()).or_default() += slice.duration_ns as i64;
        }
        if let Some(rank) = slice.name.strip_prefix("waiting for rank ") {
            *caused_wait_ns.entry(rank.parse().expect("a rank number")).or_default() += slice.duration_ns as i64;
        }
    }
    assert!(stats.split_collectives > 0, "the sample has collectives that waited");
    assert_eq!(report.ranks.len(), by_pid.len());
    for rank in &report.ranks {
        let pid = rank.pid.expect("the sample's ranks have pids") as i32;
        let mut expected = rank.figures.categories.clone();
        expected.retain(|_, ns| *ns != 0);
        assert_eq!(by_pid[&pid], expected, "rank {}", rank.rank);
    }
    let lateness = &report.collectives.late_ranks;
    let expected: BTreeMap<u32, i64> =
        lateness.iter().filter(|l| l.caused_wait_ns > 0).map(|l| (l.rank, l.caused_wait_ns)).collect();
    assert_eq!(caused_wait_ns, expected);
    let most = caused_wait_ns.iter().max_by_key(|(rank, ns)| (**ns, std::cmp::Reverse(**rank))).map(|(r, _)| *r);
    assert_eq!(most, lateness.first().map(|l| l.rank), "the late rank read off the timeline is the report's");
}

#[test]
fn skewed_capture_exports_the_reports_categories_waiting_and_late_rank() {
    let traces = shardscope_io::load(&sample("tp2_skew_capture.sqlite.gz")).expect("the sample loads");
    check_against_report(&traces);
}

#[test]
fn two_kineto_traces_export_the_reports_categories_waiting_and_late_rank() {
    let mut traces = Vec::new();
    for rank in ["rank0", "rank1"] {
        let path = sample(&format!("kineto_tp2/{rank}.pt.trace.json.gz"));
        traces.extend(shardscope_io::load(&path).expect("the sample loads"));
    }
    check_against_report(&traces);
}

#[test]
fn analyzer_export_writes_categories_and_says_so() {
    let output = std::env::temp_dir().join(format!("shardscope-verdict-{}.pftrace", std::process::id()));
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["export", "-o"])
        .arg(&output)
        .arg(sample("tp2_skew_capture.sqlite.gz"))
        .output()
        .expect("analyzer runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("in their report category") && stderr.contains("split into wait and transfer"), "{stderr}");
    let bytes = std::fs::read(&output).expect("written");
    std::fs::remove_file(&output).ok();
    let trace = shardscope::perfetto::decode(&bytes).expect("decodes");
    let categories: Vec<String> = trace
        .packet
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|d| d.event_categories.iter().map(|c| c.name().to_string()))
        .collect();
    for expected in ["gemm", "comm.all_reduce", "wait.all_reduce"] {
        assert!(categories.iter().any(|c| c == expected), "{expected} in {categories:?}");
    }
}
