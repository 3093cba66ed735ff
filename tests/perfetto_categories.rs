//! The Perfetto exporter with an analysis' notes (`SliceNotes`): kernels and copies carry their category, and a
//! split collective kernel holds its waiting and transfer parts as child slices with their own categories, so that
//! per-category sums over the slices without children are the analysis' category times.

use std::collections::HashMap;

use proptest::prelude::*;
use shardscope::model::{CopyKind, Device, Kernel, MemOp, Process, Range, RangeKind, Trace};
use shardscope::perfetto::read_back::{self, Slice};
use shardscope::perfetto::{CollectiveSplit, ExportStats, SliceNotes, write_trace, write_trace_with_notes};

/// Every slice of an export; the exporter writes nothing but named slices.
fn decode(bytes: &[u8]) -> Vec<Slice> {
    let read = read_back::slices(bytes).expect("reads back");
    assert_eq!(read.other_events, 0, "only slices");
    assert!(read.slices.iter().all(|s| !s.name.is_empty()), "a slice without a name");
    read.slices
}

/// Summed duration per category of the slices no other slice nests in.
fn leaf_sums(slices: &[Slice]) -> HashMap<String, u64> {
    let has_child: Vec<bool> = {
        let mut flags = vec![false; slices.len()];
        for slice in slices {
            if let Some(parent) = slice.parent {
                flags[parent] = true;
            }
        }
        flags
    };
    let mut sums = HashMap::new();
    for (slice, _) in slices.iter().zip(&has_child).filter(|(_, has)| !**has) {
        for category in &slice.categories {
            *sums.entry(category.clone()).or_default() += slice.end_ns - slice.start_ns;
        }
    }
    sums
}

fn export(trace: &Trace, notes: &SliceNotes) -> (Vec<Slice>, ExportStats) {
    let mut bytes = Vec::new();
    let stats = write_trace_with_notes(std::slice::from_ref(trace), std::slice::from_ref(notes), &[], &mut bytes)
        .expect("writing to memory");
    (decode(&bytes), stats)
}

/// One GPU with kernels `k0`, `k1`, … of the given spans on stream 7, a copy and a set.
fn trace_with_kernels(spans: &[(i64, i64)]) -> Trace {
    let mut trace = Trace::default();
    let process = trace.add_process(Process { pid: 1, rank: Some(0), ..Process::default() });
    let device = trace.add_device(Device { process: Some(process), ..Device::default() });
    for (i, &(start_ns, end_ns)) in spans.iter().enumerate() {
        let name = trace.names.intern(&format!("k{i}"));
        let kernel =
            Kernel { start_ns, end_ns, name, short_name: name, device, process, stream: 7, ..Kernel::default() };
        trace.kernels.push(kernel);
    }
    let memop = |start_ns, copy_kind| MemOp {
        start_ns,
        end_ns: start_ns + 10,
        copy_kind,
        device,
        process,
        stream: 9,
        ..MemOp::default()
    };
    trace.memops = vec![memop(1000, Some(CopyKind::HtoD)), memop(1020, None)];
    trace.finish();
    trace
}

/// Categories `gemm`, `comm.all_reduce`, `wait.all_reduce`, `memcpy`, `memset`.
fn notes_for(kernels: usize) -> SliceNotes {
    SliceNotes {
        categories: ["gemm", "comm.all_reduce", "wait.all_reduce", "memcpy", "memset"].map(String::from).to_vec(),
        kernel_categories: vec![Some(0); kernels],
        memcpy_category: Some(3),
        memset_category: Some(4),
        collective_splits: HashMap::new(),
    }
}

fn split(wait_ns: i64, late_rank: u32) -> CollectiveSplit {
    CollectiveSplit { wait_ns, wait_category: 2, transfer_category: 1, late_rank }
}

#[test]
fn kernels_and_copies_carry_their_category_and_a_collective_its_wait_and_transfer() {
    let trace = trace_with_kernels(&[(100, 200), (300, 500), (600, 700)]);
    let mut notes = notes_for(3);
    notes.kernel_categories[1] = Some(1);
    notes.kernel_categories[2] = Some(1);
    notes.collective_splits.insert(1, split(150, 3));
    // The late rank waits for nobody: no parts, its time stays transfer.
    notes.collective_splits.insert(2, split(0, 0));
    let (slices, stats) = export(&trace, &notes);

    let by_name = |name: &str| slices.iter().position(|s| s.name == name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(slices[by_name("k0")].categories, ["gemm"]);
    assert_eq!(slices[by_name("[CUDA memcpy Host-to-Device]")].categories, ["memcpy"]);
    assert_eq!(slices[by_name("[CUDA memset]")].categories, ["memset"]);
    let collective = by_name("k1");
    assert_eq!(slices[collective].categories, ["comm.all_reduce"]);
    let args = &slices[collective].uint_args;
    assert_eq!((args["wait_ns"], args["transfer_ns"], args["late_rank"]), (150, 50, 3));
    let wait = &slices[by_name("waiting for rank 3")];
    assert_eq!((wait.start_ns, wait.end_ns, wait.parent), (300, 450, Some(collective)));
    assert_eq!(wait.categories, ["wait.all_reduce"]);
    let transfer = &slices[by_name("transfer")];
    assert_eq!((transfer.start_ns, transfer.end_ns, transfer.parent), (450, 500, Some(collective)));
    assert_eq!(transfer.categories, ["comm.all_reduce"]);
    let late = by_name("k2");
    assert_eq!((slices[late].uint_args["wait_ns"], slices[late].uint_args["transfer_ns"]), (0, 100));
    assert!(slices.iter().all(|s| s.parent != Some(late)), "no parts under a collective that did not wait");

    let sums = leaf_sums(&slices);
    let expected: HashMap<String, u64> =
        [("gemm", 100), ("wait.all_reduce", 150), ("comm.all_reduce", 150), ("memcpy", 10), ("memset", 10)]
            .into_iter()
            .map(|(c, ns)| (c.to_string(), ns))
            .collect();
    assert_eq!(sums, expected);
    assert_eq!((stats.categorised_slices, stats.split_collectives), (5, 1));
}

#[test]
fn a_wait_as_long_as_the_kernel_is_all_waiting_and_one_past_it_is_clamped() {
    let trace = trace_with_kernels(&[(100, 200), (300, 400)]);
    let mut notes = notes_for(2);
    notes.kernel_categories = vec![Some(1), Some(1)];
    notes.collective_splits.insert(0, split(100, 1));
    notes.collective_splits.insert(1, split(5_000, 1));
    let (slices, stats) = export(&trace, &notes);
    assert!(!slices.iter().any(|s| s.name == "transfer"), "no empty transfer slice");
    let waits: Vec<(u64, u64)> =
        slices.iter().filter(|s| s.name == "waiting for rank 1").map(|s| (s.start_ns, s.end_ns)).collect();
    assert_eq!(waits, [(100, 200), (300, 400)]);
    assert_eq!(leaf_sums(&slices)["wait.all_reduce"], 200);
    assert!(!leaf_sums(&slices).contains_key("comm.all_reduce"));
    assert_eq!(stats.split_collectives, 2);
}

#[test]
fn nothing_else_nests_in_a_split_kernel_so_its_parts_always_fit() {
    let mut trace = trace_with_kernels(&[(100, 200)]);
    // A GPU-side range on the kernel's stream that opens inside the kernel before its waiting part ends.
    let name = trace.names.intern("annotation");
    let (process, device) = (trace.kernels[0].process, trace.kernels[0].device);
    trace.ranges.push(Range {
        start_ns: 100,
        end_ns: 190,
        name,
        kind: RangeKind::GpuAnnotation,
        device: Some(device),
        stream: Some(7),
        process,
        ..Range::default()
    });
    let mut notes = notes_for(1);
    notes.kernel_categories = vec![Some(1)];
    notes.collective_splits.insert(0, split(50, 1));
    let (slices, stats) = export(&trace, &notes);
    let kernel = slices.iter().position(|s| s.name == "k0").expect("the kernel");
    let parts: Vec<(&str, u64, u64)> =
        slices.iter().filter(|s| s.parent == Some(kernel)).map(|s| (s.name.as_str(), s.start_ns, s.end_ns)).collect();
    assert_eq!(parts, [("waiting for rank 1", 100, 150), ("transfer", 150, 200)]);
    let annotation = slices.iter().find(|s| s.name == "annotation").expect("the range");
    assert_ne!(annotation.track, slices[kernel].track, "the range moved to an overlap row");
    assert_eq!((stats.split_collectives, stats.overlap_rows), (1, 1));
}

#[test]
fn without_notes_nothing_has_a_category_and_bad_positions_are_ignored() {
    let trace = trace_with_kernels(&[(100, 200), (300, 400)]);
    let mut bytes = Vec::new();
    let stats = write_trace(std::slice::from_ref(&trace), &mut bytes).unwrap();
    assert!(decode(&bytes).iter().all(|s| s.categories.is_empty()));
    assert_eq!(stats.categorised_slices, 0);
    // A position past the categories, a kernel past the list, a split of a kernel that does not exist.
    let mut notes = notes_for(1);
    notes.kernel_categories = vec![Some(99)];
    notes.collective_splits.insert(7, split(10, 1));
    let (slices, stats) = export(&trace, &notes);
    assert!(slices.iter().filter(|s| s.name.starts_with('k')).all(|s| s.categories.is_empty()));
    assert_eq!((stats.categorised_slices, stats.split_collectives), (2, 0), "only the copy and the set");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// However kernels overlap, each drawn part lies inside its own kernel with the split's times, every split is
    /// either drawn or counted, and the leaf sums follow.
    #[test]
    fn parts_nest_in_their_own_kernel_however_kernels_overlap(
        kernels in prop::collection::vec((0i64..200, 1i64..60, prop::option::of(0i64..80)), 1..40),
    ) {
        let spans: Vec<(i64, i64)> = kernels.iter().map(|&(start, length, _)| (start, start + length)).collect();
        let trace = trace_with_kernels(&spans);
        // The trace keeps its kernels in time order: kernel `k{i}` is at `index[i]`.
        let index: Vec<u32> = (0..kernels.len())
            .map(|i| trace.kernels.iter().position(|k| trace.names.get(k.name) == format!("k{i}")).unwrap() as u32)
            .collect();
        let mut notes = notes_for(kernels.len());
        for (i, &(_, length, wait)) in kernels.iter().enumerate() {
            if let Some(wait) = wait {
                notes.kernel_categories[index[i] as usize] = Some(1);
                notes.collective_splits.insert(index[i], split(wait.min(length), 1));
            }
        }
        let (slices, stats) = export(&trace, &notes);
        let mut drawn = 0;
        let mut expected: HashMap<String, u64> = HashMap::from([("memcpy".into(), 10), ("memset".into(), 10)]);
        for (i, &(start, end)) in spans.iter().enumerate() {
            let kernel = slices.iter().position(|s| s.name == format!("k{i}")).unwrap();
            // Other kernels may nest in an unsplit kernel; its parts are the rest.
            let parts: Vec<&Slice> =
                slices.iter().filter(|s| s.parent == Some(kernel) && !s.name.starts_with('k')).collect();
            let Some(split) = notes.collective_splits.get(&index[i]).filter(|s| s.wait_ns > 0) else {
                prop_assert!(parts.is_empty());
                let collective = notes.kernel_categories[index[i] as usize] == Some(1);
                let category = if collective { "comm.all_reduce" } else { "gemm" };
                *expected.entry(category.into()).or_default() += (end - start) as u64;
                continue;
            };
            let until = (start + split.wait_ns) as u64;
            let mut want = vec![("waiting for rank 1".to_string(), start as u64, until)];
            if until < end as u64 {
                want.push(("transfer".to_string(), until, end as u64));
            }
            let got: Vec<(String, u64, u64)> = parts.iter().map(|p| (p.name.clone(), p.start_ns, p.end_ns)).collect();
            prop_assert_eq!(&got, &want);
            drawn += 1;
            *expected.entry("wait.all_reduce".into()).or_default() += split.wait_ns as u64;
            if until < end as u64 {
                *expected.entry("comm.all_reduce".into()).or_default() += end as u64 - until;
            }
        }
        let with_wait = notes.collective_splits.values().filter(|s| s.wait_ns > 0).count() as u64;
        prop_assert_eq!(stats.split_collectives, drawn);
        prop_assert_eq!(drawn, with_wait, "every split is drawn");
        // Other kernels may nest in an unsplit kernel (it is then no leaf): compare only where no kernel holds
        // another.
        let kernel_in_kernel = slices
            .iter()
            .any(|s| s.name.starts_with('k') && s.parent.is_some_and(|p| slices[p].name.starts_with('k')));
        if !kernel_in_kernel {
            expected.retain(|_, ns| *ns > 0);
            prop_assert_eq!(leaf_sums(&slices), expected);
        }
    }
}
