//! Phases (prefill, decode, …): which NVTX or annotation range a kernel's launch happened in.
//!
//! A phase range is any range whose name matches the phase pattern; the phase's name is the
//! pattern's first capture group (lower-cased) when it has one, else the range's name. A kernel
//! belongs to the innermost phase range that was open on the launching thread when its launch
//! call started. Kernels without a known launch call fall back to GPU-side annotation ranges on
//! their device that contain the kernel's start.

use std::collections::HashMap;

use regex::Regex;
use shardscope_model::{DeviceIdx, ProcessIdx, RangeKind, Trace};

/// The default phase pattern: ranges named prefill or decode (any case, as a word).
pub const DEFAULT_PHASE_PATTERN: &str = r"(?i)\b(prefill|decode)\b";

/// Index of a phase name in [`PhaseIndex::names`].
pub type PhaseId = u16;

#[derive(Debug, Clone, Copy)]
struct OpenRange {
    start_ns: i64,
    end_ns: i64,
    phase: PhaseId,
    /// Index of the innermost phase range of the same track that contains this one.
    parent: Option<u32>,
}

/// Phase ranges of one trace, ready for lookups.
#[derive(Debug, Default)]
pub struct PhaseIndex {
    names: Vec<String>,
    by_thread: HashMap<(ProcessIdx, u32), Vec<OpenRange>>,
    by_device: HashMap<DeviceIdx, Vec<OpenRange>>,
}

impl PhaseIndex {
    /// Collects the phase ranges of `trace`; `names` is shared across traces so phase ids agree.
    pub fn build(trace: &Trace, pattern: &Regex, names: &mut Vec<String>) -> PhaseIndex {
        let mut index = PhaseIndex::default();
        let mut phase_of_name: HashMap<u32, Option<PhaseId>> = HashMap::new();
        for range in &trace.ranges {
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
            let open = OpenRange { start_ns: range.start_ns, end_ns: range.end_ns, phase, parent: None };
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

    /// True when the trace has no phase ranges.
    pub fn is_empty(&self) -> bool {
        self.by_thread.is_empty() && self.by_device.is_empty()
    }

    /// Phase of a launch made at `time_ns` on thread `tid` of `process`.
    pub fn phase_on_thread(&self, process: ProcessIdx, tid: u32, time_ns: i64) -> Option<PhaseId> {
        innermost(self.by_thread.get(&(process, tid))?, time_ns)
    }

    /// Phase of GPU work starting at `time_ns` on `device`, from GPU-side annotations.
    pub fn phase_on_device(&self, device: DeviceIdx, time_ns: i64) -> Option<PhaseId> {
        innermost(self.by_device.get(&device)?, time_ns)
    }

    /// All phase names seen so far.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// Sorts a track's ranges by start (outer first) and points each at its enclosing range.
fn link_parents(track: &mut [OpenRange]) {
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
fn innermost(track: &[OpenRange], time_ns: i64) -> Option<PhaseId> {
    let after = track.partition_point(|r| r.start_ns <= time_ns);
    let mut candidate = after.checked_sub(1)?;
    loop {
        let range = track[candidate];
        if range.end_ns > time_ns {
            return Some(range.phase);
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
    fn nested_phases_resolve_through_parents() {
        let mut track = vec![
            OpenRange { start_ns: 0, end_ns: 100, phase: 0, parent: None },
            OpenRange { start_ns: 10, end_ns: 20, phase: 1, parent: None },
            OpenRange { start_ns: 30, end_ns: 40, phase: 1, parent: None },
        ];
        link_parents(&mut track);
        assert_eq!(innermost(&track, 15), Some(1));
        assert_eq!(innermost(&track, 50), Some(0));
        assert_eq!(innermost(&track, 100), None);
    }
}
