//! The slices of a Perfetto file this crate wrote, read back: what the exporter's tests (and the analyzer's) hold
//! an export to. Interned event names, categories and argument names are resolved per packet sequence, and each
//! slice end closes the innermost open slice of its track, as Perfetto pairs them.

use std::collections::HashMap;

use super::proto::{debug_annotation, trace_packet, track_event};
use super::{Error, decode};

/// One slice as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    /// The track it is on.
    pub track: u64,
    /// Begin and end, trace ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Its name (empty when it has none).
    pub name: String,
    /// Its categories.
    pub categories: Vec<String>,
    /// The names of its arguments.
    pub arg_names: Vec<String>,
    /// Its unsigned arguments, by name.
    pub uint_args: HashMap<String, u64>,
    /// Index of the slice it nests in on its track.
    pub parent: Option<usize>,
}

impl Slice {
    /// Its length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A file's slices and what else it held.
#[derive(Debug, Clone, Default)]
pub struct ReadBack {
    /// Every slice, in the order they began.
    pub slices: Vec<Slice>,
    /// Track events that are not slice begins or ends (counters, instants).
    pub other_events: u64,
}

/// Interned names of one packet sequence: event names, categories, argument names.
type Interned = (HashMap<u64, String>, HashMap<u64, String>, HashMap<u64, String>);

/// Reads every slice of `bytes`. Errors: the bytes are not a Perfetto trace, an interned id that was never
/// defined, a slice end with no slice open on its track, slices left open at the end.
pub fn slices(bytes: &[u8]) -> Result<ReadBack, String> {
    let trace = decode(bytes).map_err(|e: Error| e.to_string())?;
    let mut sequences: HashMap<u32, Interned> = HashMap::new();
    let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut read = ReadBack::default();
    for packet in trace.packet {
        let sequence = match packet.optional_trusted_packet_sequence_id {
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(id)) => id,
            None => 0,
        };
        let (names, categories, arg_names) = sequences.entry(sequence).or_default();
        if let Some(data) = packet.interned_data {
            names.extend(data.event_names.into_iter().map(|e| (e.iid(), e.name().to_string())));
            categories.extend(data.event_categories.into_iter().map(|e| (e.iid(), e.name().to_string())));
            arg_names.extend(data.debug_annotation_names.into_iter().map(|e| (e.iid(), e.name().to_string())));
        }
        let Some(trace_packet::Data::TrackEvent(event)) = packet.data else { continue };
        let track = event.track_uuid();
        let timestamp = packet.timestamp.ok_or("a track event without a timestamp")?;
        let lookup = |table: &HashMap<u64, String>, iid: u64, what: &str| {
            table.get(&iid).cloned().ok_or_else(|| format!("{what} id {iid} was never interned"))
        };
        match event.r#type() {
            track_event::Type::SliceBegin => {
                let name = match event.name_field {
                    Some(track_event::NameField::NameIid(iid)) => lookup(names, iid, "event name")?,
                    Some(track_event::NameField::Name(name)) => name,
                    None => String::new(),
                };
                let mut slice_args = Vec::new();
                let mut uint_args = HashMap::new();
                for annotation in &event.debug_annotations {
                    let Some(debug_annotation::NameField::NameIid(iid)) = annotation.name_field else { continue };
                    let arg = lookup(arg_names, iid, "argument name")?;
                    if let Some(debug_annotation::Value::UintValue(value)) = annotation.value {
                        uint_args.insert(arg.clone(), value);
                    }
                    slice_args.push(arg);
                }
                let categories = event
                    .category_iids
                    .iter()
                    .map(|&iid| lookup(categories, iid, "category"))
                    .collect::<Result<_, _>>()?;
                let stack = open.entry(track).or_default();
                let parent = stack.last().copied();
                stack.push(read.slices.len());
                read.slices.push(Slice {
                    track,
                    start_ns: timestamp,
                    end_ns: timestamp,
                    name,
                    categories,
                    arg_names: slice_args,
                    uint_args,
                    parent,
                });
            }
            track_event::Type::SliceEnd => {
                let index = open.get_mut(&track).and_then(Vec::pop).ok_or("a slice end with no slice open")?;
                read.slices[index].end_ns = timestamp;
            }
            _ => read.other_events += 1,
        }
    }
    if open.values().any(|stack| !stack.is_empty()) {
        return Err("slices left open at the end".into());
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_a_trace_are_an_error_and_an_empty_trace_has_no_slices() {
        assert!(slices(&[0xff, 0xff, 0xff]).is_err());
        let read = slices(&[]).unwrap();
        assert!(read.slices.is_empty() && read.other_events == 0);
    }
}
