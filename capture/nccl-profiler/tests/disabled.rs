//! Without `SHARDSCOPE_SPOOL_DIR` the plugin asks NCCL for no events and writes nothing, and
//! every entry point still succeeds.

use std::ffi::{c_int, c_void};

use shardscope_nccl_profiler::ffi::{self, EventDescrV5, event};
use shardscope_nccl_profiler::plugin::{self, ncclProfiler_v5};

#[test]
fn without_a_spool_folder_nothing_is_requested() {
    // SAFETY: no other thread of this test binary reads the environment yet.
    unsafe { std::env::remove_var(plugin::SPOOL_DIR_ENV) };
    let (mut context, mut mask): (*mut c_void, c_int) = (std::ptr::null_mut(), -1);
    // SAFETY: valid out-pointers and a C string.
    let result = unsafe { (ncclProfiler_v5.init)(&mut context, 1, &mut mask, c"x".as_ptr(), 1, 1, 0, None) };
    assert_eq!((result, mask), (ffi::NCCL_SUCCESS, 0));
    assert!(context.is_null());
    // NCCL would not call these with mask 0, but if it did they must be harmless.
    // SAFETY: zeroed descriptor, valid slot.
    unsafe {
        let mut d: EventDescrV5 = std::mem::zeroed();
        d.event_type = event::COLL;
        // Anything but null, to see it cleared.
        let mut handle: *mut c_void = std::ptr::dangling_mut::<c_void>();
        assert_eq!((ncclProfiler_v5.start_event)(context, &mut handle, &mut d), ffi::NCCL_SUCCESS);
        assert!(handle.is_null());
        assert_eq!((ncclProfiler_v5.stop_event)(handle), ffi::NCCL_SUCCESS);
        assert_eq!((ncclProfiler_v5.finalize)(context), ffi::NCCL_SUCCESS);
    }
    assert!(plugin::spool_path().is_none());
}
