//! Phases (prefill, decode, …): which NVTX or annotation range a kernel's launch happened in.
//!
//! A phase range is any range whose name matches the phase pattern; the phase's name is the
//! pattern's first capture group (lower-cased) when it has one, else the range's name. A kernel
//! belongs to the innermost phase range that was open on the launching thread when its launch
//! call started. Kernels without a known launch call fall back to GPU-side annotation ranges on
//! their device that contain the kernel's start. Each phase range is one instance of its phase
//! (one prefill, one decode step): lookups also say which range, so that figures can be made per
//! instance and a phase's span is the sum of its instances' spans, not first instance to last.
//!
//! A trace without phase ranges may get phases inferred from its kernels instead ([`crate::llm::inferred_phases`]):
//! stretches of GPU time per device, looked up by a kernel's GPU start whatever thread launched it.

use std::collections::HashMap;

use regex::Regex;
use shardscope_model::{DeviceIdx, ProcessIdx, RangeKind, Trace};

use crate::llm::inferred_phases::Stretch;

/// The default phase pattern: ranges naming prefill or decode (any case), or SGLang's forward modes `EXTEND`
/// (prefill, possibly chunked), `DECODE` and `MIXED` (prefill and decode batched together), as a word that may
/// be joined to others by `_`, `.` or spaces (`forward_decode`, `ForwardMode.EXTEND`). `EXTEND` and `MIXED`
/// only in capitals: in lower case they name unrelated Python calls (`list.extend`).
pub const DEFAULT_PHASE_PATTERN: &str = r"(?:^|[^A-Za-z])((?i:prefill|decode)|EXTEND|MIXED)(?:[^A-Za-z]|$)";

/// A phase lookup's answer: the phase and the range (index in [`Trace::ranges`]) that is its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseHit {
    /// The phase.
    pub phase: PhaseId,
    /// Index of the phase range in [`Trace::ranges`].
    pub range: u32,
}

/// Index of a phase name in [`PhaseIndex::names`].
pub type PhaseId = u16;

/// A range on one thread's or device's track, as the innermost-range lookup sees it (phases here, module ranges in
/// [`crate::llm::modules`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenRange {
    pub(crate) start_ns: i64,
    pub(crate) end_ns: i64,
    pub(crate) phase: PhaseId,
    /// Index in [`Trace::ranges`].
    pub(crate) range: u32,
    /// Index of the innermost phase range of the same track that contains this one.
    pub(crate) parent: Option<u32>,
}

/// Phase ranges of one trace, ready for lookups.
#[derive(Debug, Default)]
pub struct PhaseIndex {
    names: Vec<String>,
    by_thread: HashMap<(ProcessIdx, u32), Vec<OpenRange>>,
    by_device: HashMap<DeviceIdx, Vec<OpenRange>>,
    /// The phases were inferred from the kernels (see [`crate::llm::inferred_phases`]), not recorded: they are GPU time
    /// stretches per device, and a range's index is the instance number.
    inferred: bool,
}

impl PhaseIndex {
    /// Collects the phase ranges of `trace`; `names` is shared across traces so phase ids agree.
    pub fn build(trace: &Trace, pattern: &Regex, names: &mut Vec<String>) -> PhaseIndex {
        let mut index = PhaseIndex::default();
        let mut phase_of_name: HashMap<u32, Option<PhaseId>> = HashMap::new();
        for (range_index, range) in trace.ranges.iter().enumerate() {
            let phase = *phase_of_name.entry(range.name.0).or_insert_with(|| {
                let text = trace.names.get(range.name);
                let captures = pattern.captures(text)?;
                let name = captures.get(1).map_or(text.to_string(), |m| m.as_str().to_lowercase());
                let id = names.iter().position(|n| *n == name).unwrap_or_else(|| {
                    names.push(name);
                    names.len() - 1
                });
                Some(id as PhaseId)
            });
            let Some(phase) = phase else { continue };
            let open = OpenRange {
                start_ns: range.start_ns,
                end_ns: range.end_ns,
                phase,
                range: range_index as u32,
                parent: None,
            };
            match (range.kind, range.device) {
                (RangeKind::GpuAnnotation, Some(device)) => index.by_device.entry(device).or_default().push(open),
                _ => index.by_thread.entry((range.process, range.tid)).or_default().push(open),
            }
        }
        for track in index.by_thread.values_mut().chain(index.by_device.values_mut()) {
            link_parents(track);
        }
        index.names = names.clone();
        index
    }

    /// Phases inferred per device from the kernels, for a trace without phase ranges; `names` is shared across
    /// traces so phase ids agree.
    pub fn inferred(by_device: Vec<(DeviceIdx, Vec<Stretch>)>, names: &mut Vec<String>) -> PhaseIndex {
        let mut index = PhaseIndex { inferred: true, ..PhaseIndex::default() };
        for (device, stretches) in by_device {
            let track: Vec<OpenRange> = stretches
                .iter()
                .map(|stretch| {
                    let name = stretch.phase.name();
                    let phase = names.iter().position(|n| n == name).unwrap_or_else(|| {
                        names.push(name.to_string());
                        names.len() - 1
                    }) as PhaseId;
                    OpenRange {
                        start_ns: stretch.start_ns,
                        end_ns: stretch.end_ns,
                        phase,
                        range: stretch.instance,
                        parent: None,
                    }
                })
                .collect();
            index.by_device.insert(device, track);
        }
        for track in index.by_device.values_mut() {
            link_parents(track);
        }
        index.names = names.clone();
        index
    }

    /// True when the phases were inferred from the kernels rather than recorded as ranges.
    pub fn is_inferred(&self) -> bool {
        self.inferred
    }

    /// True when the trace has no phase ranges.
    pub fn is_empty(&self) -> bool {
        self.by_thread.is_empty() && self.by_device.is_empty()
    }

    /// Phase of a launch made at `time_ns` on thread `tid` of `process`.
    pub fn phase_on_thread(&self, process: ProcessIdx, tid: u32, time_ns: i64) -> Option<PhaseId> {
        self.hit_on_thread(process, tid, time_ns).map(|hit| hit.phase)
    }

    /// Phase of GPU work starting at `time_ns` on `device`, from GPU-side annotations.
    pub fn phase_on_device(&self, device: DeviceIdx, time_ns: i64) -> Option<PhaseId> {
        self.hit_on_device(device, time_ns).map(|hit| hit.phase)
    }

    /// Phase and phase range of a launch made at `time_ns` on thread `tid` of `process`.
    pub fn hit_on_thread(&self, process: ProcessIdx, tid: u32, time_ns: i64) -> Option<PhaseHit> {
        innermost(self.by_thread.get(&(process, tid))?, time_ns)
    }

    /// Phase and phase range of GPU work starting at `time_ns` on `device`, from GPU-side annotations.
    pub fn hit_on_device(&self, device: DeviceIdx, time_ns: i64) -> Option<PhaseHit> {
        innermost(self.by_device.get(&device)?, time_ns)
    }

    /// All phase names seen so far.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// Sorts a track's ranges by start (outer first) and points each at its enclosing range.
pub(crate) fn link_parents(track: &mut [OpenRange]) {
    track.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.end_ns)));
    let mut stack: Vec<u32> = Vec::new();
    for i in 0..track.len() {
        while let Some(&top) = stack.last() {
            if track[top as usize].end_ns <= track[i].start_ns {
                stack.pop();
            } else {
                break;
            }
        }
        track[i].parent = stack.last().copied();
        stack.push(i as u32);
    }
}

/// The innermost range containing `time_ns`: the last range starting at or before it, or one of its ancestors.
pub(crate) fn innermost(track: &[OpenRange], time_ns: i64) -> Option<PhaseHit> {
    let after = track.partition_point(|r| r.start_ns <= time_ns);
    let mut candidate = after.checked_sub(1)?;
    loop {
        let range = track[candidate];
        if range.end_ns > time_ns {
            return Some(PhaseHit { phase: range.phase, range: range.range });
        }
        candidate = range.parent? as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::{Process, Range};

    #[test]
    fn launches_take_the_innermost_phase_of_their_thread() {
        let mut trace = Trace::default();
        let p = trace.add_process(Process::default());
        let generate = trace.names.intern("generate");
        let prefill = trace.names.intern("Prefill step");
        let decode = trace.names.intern("decode");
        let r = |start_ns, end_ns, name, tid| Range { start_ns, end_ns, name, tid, process: p, ..Range::default() };
        trace.ranges =
            vec![r(0, 1000, generate, 1), r(10, 100, prefill, 1), r(200, 300, decode, 1), r(250, 260, decode, 2)];
        trace.finish();
        let mut names = Vec::new();
        let index = PhaseIndex::build(&trace, &Regex::new(DEFAULT_PHASE_PATTERN).unwrap(), &mut names);
        assert_eq!(names, ["prefill", "decode"]);
        assert_eq!(index.phase_on_thread(p, 1, 50), Some(0));
        assert_eq!(index.phase_on_thread(p, 1, 150), None);
        assert_eq!(index.phase_on_thread(p, 1, 299), Some(1));
        assert_eq!(index.phase_on_thread(p, 1, 300), None);
        assert_eq!(index.phase_on_thread(p, 2, 255), Some(1));
        assert_eq!(index.phase_on_thread(p, 3, 255), None);
    }

    #[test]
    fn default_pattern_finds_serving_engines_phase_names() {
        let pattern = Regex::new(DEFAULT_PHASE_PATTERN).unwrap();
        let phase = |text: &str| pattern.captures(text).map(|c| c[1].to_lowercase());
        assert_eq!(phase("prefill").as_deref(), Some("prefill"));
        assert_eq!(phase("Decode step 3").as_deref(), Some("decode"));
        assert_eq!(phase("forward_decode").as_deref(), Some("decode"));
        assert_eq!(phase("ForwardMode.EXTEND").as_deref(), Some("extend"));
        assert_eq!(phase("forward_batch MIXED bs=8").as_deref(), Some("mixed"));
        assert_eq!(phase("<built-in method extend of list object at 0x7f>"), None);
        assert_eq!(phase("decoder_layer"), None);
        assert_eq!(phase("prefilled"), None);
    }

    #[test]
    fn nested_phases_resolve_through_parents() {
        let mut track = vec![
            OpenRange { start_ns: 0, end_ns: 100, phase: 0, range: 0, parent: None },
            OpenRange { start_ns: 10, end_ns: 20, phase: 1, range: 1, parent: None },
            OpenRange { start_ns: 30, end_ns: 40, phase: 1, range: 2, parent: None },
        ];
        link_parents(&mut track);
        assert_eq!(innermost(&track, 15), Some(PhaseHit { phase: 1, range: 1 }));
        assert_eq!(innermost(&track, 35), Some(PhaseHit { phase: 1, range: 2 }));
        assert_eq!(innermost(&track, 50), Some(PhaseHit { phase: 0, range: 0 }));
        assert_eq!(innermost(&track, 100), None);
    }
}
