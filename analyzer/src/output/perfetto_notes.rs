//! What the report says of each GPU slice, handed to the Perfetto exporter (`shardscope::perfetto::SliceNotes`) so
//! that a Perfetto user reads the report's verdict off the timeline: every kernel in its report category
//! (`gemm`, `comm.all_reduce`, …, from the same rules), copies and sets as `memcpy` and `memset`, and every matched
//! collective kernel split into its wait for the last rank (`wait.<type>`) and its transfer (`comm.<type>`), with
//! the same matching as the report. Summed per category over the slices without children, the exported GPU time is
//! the report's category time.

use std::collections::HashMap;

use shardscope::perfetto::{CollectiveSplit, SliceNotes};
use shardscope_model::Trace;

use crate::figures::categories::{self, Classifier};
use crate::figures::collectives;

/// Notes for each of `traces` (in order), categories from `classifier`.
pub fn slice_notes(traces: &[Trace], classifier: &Classifier) -> Vec<SliceNotes> {
    let mut notes: Vec<NotesBuilder> = traces.iter().map(|trace| NotesBuilder::new(trace, classifier)).collect();
    let matching = collectives::match_traces(traces, classifier);
    for instance in &matching.instances {
        for (&(trace, kernel), share) in instance.members.iter().zip(&instance.shares) {
            if let Some(builder) = notes.get_mut(trace) {
                builder.split(kernel, share.wait_ns, instance.late_rank);
            }
        }
    }
    notes.into_iter().map(|builder| builder.notes).collect()
}

/// One trace's notes as they are made, with its categories by name.
struct NotesBuilder {
    notes: SliceNotes,
    positions: HashMap<String, u32>,
}

impl NotesBuilder {
    /// Every kernel's report label, and the copy and set categories.
    fn new(trace: &Trace, classifier: &Classifier) -> NotesBuilder {
        let mut builder = NotesBuilder { notes: SliceNotes::default(), positions: HashMap::new() };
        let classes = classifier.classify_names(&trace.names);
        // Labels per (name, collective type): a trace has few of those and many kernels.
        let mut by_class: HashMap<_, u32> = HashMap::new();
        let kernel_categories = trace
            .kernels
            .iter()
            .map(|kernel| {
                let collective = kernel.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op);
                let key = (kernel.name, collective);
                let position = *by_class.entry(key).or_insert_with(|| {
                    let class = Classifier::lookup(&classes, kernel.name);
                    builder.category(&categories::report_label(classifier, class, collective))
                });
                Some(position)
            })
            .collect();
        builder.notes.kernel_categories = kernel_categories;
        builder.notes.memcpy_category = Some(builder.category(categories::MEMCPY));
        builder.notes.memset_category = Some(builder.category(categories::MEMSET));
        builder
    }

    /// The position of category `label`, added when new.
    fn category(&mut self, label: &str) -> u32 {
        if let Some(&position) = self.positions.get(label) {
            return position;
        }
        let position = self.notes.categories.len() as u32;
        self.notes.categories.push(label.to_string());
        self.positions.insert(label.to_string(), position);
        position
    }

    /// Kernel `kernel` (a matched collective) waited `wait_ns` for rank `late_rank`: its transfer keeps the kernel's
    /// `comm.<type>` label and its waiting takes `wait.<type>`, as the report moves it.
    fn split(&mut self, kernel: u32, wait_ns: i64, late_rank: u32) {
        let Some(&Some(transfer_category)) = self.notes.kernel_categories.get(kernel as usize) else { return };
        let label = &self.notes.categories[transfer_category as usize];
        let Some(op) = label.strip_prefix(categories::COMM_PREFIX) else { return };
        let wait_category = self.category(&format!("{}{op}", categories::WAIT_PREFIX));
        let split = CollectiveSplit { wait_ns, wait_category, transfer_category, late_rank };
        self.notes.collective_splits.insert(kernel, split);
    }
}
