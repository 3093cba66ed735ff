//! The per-row sizes that the memory bound of `docs/analyzing.md` for large traces is computed from.
//!
//! A reader keeps one row per kernel, copy, API call and range it imports and nothing per event it
//! skips, so a trace's memory is about these sizes times its row counts. A field added to a row
//! makes every large trace larger: this test fails then, so that the stated bound is revised
//! (`docs/analyzing.md`, "Large Kineto traces") along with the row.

use std::mem::size_of;

use shardscope_model::{ApiCall, Collective, Kernel, MemOp, Range};

/// Bytes per row, as stated in `docs/analyzing.md`.
const KERNEL_BYTES: usize = 104;
const API_CALL_BYTES: usize = 40;
const RANGE_BYTES: usize = 56;
const MEMOP_BYTES: usize = 72;
/// Without the heap block of its `group_ranks`.
const COLLECTIVE_BYTES: usize = 136;

#[test]
fn rows_stay_within_the_stated_sizes() {
    let sizes = [
        ("Kernel", size_of::<Kernel>(), KERNEL_BYTES),
        ("ApiCall", size_of::<ApiCall>(), API_CALL_BYTES),
        ("Range", size_of::<Range>(), RANGE_BYTES),
        ("MemOp", size_of::<MemOp>(), MEMOP_BYTES),
        ("Collective", size_of::<Collective>(), COLLECTIVE_BYTES),
    ];
    for (row, size, stated) in sizes {
        assert!(size <= stated, "{row} is {size} bytes, more than the {stated} docs/analyzing.md states");
    }
}
