//! Property test of the Perfetto exporter on kernels that overlap in any way: every kernel comes
//! out exactly once with its own times, and on every track the slices nest (Perfetto pairs an end
//! with the innermost open slice of its track, so slices that overlap without nesting must be on
//! different tracks).

use std::collections::HashMap;

use proptest::prelude::*;
use prost::Message;
use shardscope::model::{Device, Kernel, Process, Trace};
use shardscope::perfetto::proto::{self, trace_packet, track_event};
use shardscope::perfetto::write_trace;

/// Per written slice: its track, start and end, pairing ends with the innermost open slice of
/// their track in file order.
fn written_slices(bytes: &[u8]) -> Vec<(u64, u64, u64)> {
    let trace = proto::Trace::decode(bytes).unwrap();
    let mut open: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut slices = Vec::new();
    for packet in trace.packet {
        let Some(trace_packet::Data::TrackEvent(event)) = packet.data else { continue };
        let (track, timestamp) = (event.track_uuid(), packet.timestamp.unwrap());
        match event.r#type() {
            track_event::Type::SliceBegin => open.entry(track).or_default().push(timestamp),
            track_event::Type::SliceEnd => {
                let start = open.get_mut(&track).and_then(Vec::pop).expect("an end closes an open slice");
                slices.push((track, start, timestamp));
            }
            _ => {}
        }
    }
    assert!(open.values().all(Vec::is_empty), "every slice is closed");
    slices
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn overlapping_kernels_come_out_once_each_and_nest_per_track(
        spans in prop::collection::vec((0i64..200, 0i64..60), 1..60),
    ) {
        let mut trace = Trace::default();
        let process = trace.add_process(Process { pid: 1, ..Process::default() });
        let device = trace.add_device(Device { process: Some(process), ..Device::default() });
        let name = trace.names.intern("k");
        for &(start_ns, length_ns) in &spans {
            trace.kernels.push(Kernel {
                start_ns,
                end_ns: start_ns + length_ns,
                name,
                short_name: name,
                device,
                process,
                stream: 7,
                ..Kernel::default()
            });
        }
        trace.finish();
        let mut bytes = Vec::new();
        write_trace(std::slice::from_ref(&trace), &mut bytes).unwrap();
        let slices = written_slices(&bytes);

        let mut expected: Vec<(u64, u64)> = spans.iter().map(|&(s, l)| (s as u64, (s + l) as u64)).collect();
        let mut got: Vec<(u64, u64)> = slices.iter().map(|&(_, s, e)| (s, e)).collect();
        expected.sort_unstable();
        got.sort_unstable();
        prop_assert_eq!(got, expected);

        let mut by_track: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for (track, start, end) in slices {
            by_track.entry(track).or_default().push((start, end));
        }
        for spans in by_track.values() {
            for (i, a) in spans.iter().enumerate() {
                for b in &spans[i + 1..] {
                    let disjoint = a.1 <= b.0 || b.1 <= a.0;
                    let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
                    prop_assert!(disjoint || nested, "{a:?} and {b:?} share a track");
                }
            }
        }
    }
}
