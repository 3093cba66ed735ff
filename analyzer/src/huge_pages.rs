//! The analyzer's allocator: the system's, with every large block asked to be backed by transparent huge pages;
//! and [`return_large_blocks_when_freed`], which a streamed report calls so that the memory of the traces it has
//! dropped goes back to the system.
//!
//! Why: the report's dependency model, its replays and the import fill arrays of hundreds of megabytes once, each
//! fresh from the kernel, so every 4 KiB page costs a fault on first touch, mostly on one thread. Profiled on the
//! 2-core machine (10 M kernels × 8 ranks, `perf record`), a third of the report's wall time had one thread busy,
//! and half of that thread's samples were the kernel zeroing fresh pages. Where the kernel hands out huge pages on
//! request (`/sys/kernel/mm/transparent_hugepage/enabled` at `madvise`, the common default), a 2 MiB page is one
//! fault instead of 512; elsewhere the advice changes nothing. A block grown past the size is moved here rather
//! than by the system's `realloc`, which would copy into fresh pages before they could be advised. The figures are
//! in BENCHMARKS.md (the report on every core, sitting 11).

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, advising `MADV_HUGEPAGE` on blocks of at least [`LARGE_BLOCK_BYTES`].
pub struct HugePagesForLargeBlocks;

/// Blocks from this size on are advised: a huge page is 2 MiB, and a smaller block holds at most part of one.
pub const LARGE_BLOCK_BYTES: usize = 2 << 20;

// SAFETY: every call is the system allocator's own, with the caller's arguments; the advice only changes how the
// kernel backs pages of a block the caller owns, never its contents or bounds.
unsafe impl GlobalAlloc for HugePagesForLargeBlocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let block = unsafe { System.alloc(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let block = unsafe { System.alloc_zeroed(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: the caller's block and layout, from this allocator, which is the system's.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A shrinking block is the system's to shrink: it gives the tail back where it lies, with no copy.
        if new_size < LARGE_BLOCK_BYTES || new_size <= layout.size() {
            // SAFETY: as above.
            return unsafe { System.realloc(block, layout, new_size) };
        }
        // A growing vector: the system's realloc would copy into fresh pages before they could be advised (most of
        // the faults left with advice after the fact), so the new block is advised first and the copy made here.
        // SAFETY: `new_size` is non-zero and, as `GlobalAlloc::realloc` requires, does not overflow with the align.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a non-zero layout.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe { std::ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size)) };
            // SAFETY: the caller's block, with its layout.
            unsafe { self.dealloc(block, layout) };
        }
        moved
    }
}

/// The whole pages inside `[address, address + size)` for pages of `page_bytes`: start and length, `None` when the
/// block is smaller than [`LARGE_BLOCK_BYTES`] or holds no whole page.
pub fn advised_range(address: usize, size: usize, page_bytes: usize) -> Option<(usize, usize)> {
    if size < LARGE_BLOCK_BYTES || page_bytes == 0 || !page_bytes.is_power_of_two() {
        return None;
    }
    let start = address.checked_next_multiple_of(page_bytes)?;
    let end = address.checked_add(size)? & !(page_bytes - 1);
    (end > start).then(|| (start, end - start))
}

#[cfg(target_os = "linux")]
fn advise(block: *mut u8, size: usize) {
    if block.is_null() || size < LARGE_BLOCK_BYTES {
        return;
    }
    // SAFETY: sysconf has no preconditions.
    let page_bytes = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
    if let Some((start, length)) = advised_range(block as usize, size, page_bytes) {
        // SAFETY: whole pages inside a block the allocator just handed out; the advice cannot fail in a way that
        // matters (a kernel without huge pages answers EINVAL and backs the pages as before).
        unsafe { libc::madvise(start as *mut libc::c_void, length, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_block: *mut u8, _size: usize) {}

/// Blocks from this size on are given back to the system as soon as they are freed, once
/// [`return_large_blocks_when_freed`] has been called: glibc's own starting threshold.
pub const RETURNED_BLOCK_BYTES: usize = 128 << 10;

/// Makes the system allocator (glibc; nothing elsewhere) map every block of [`RETURNED_BLOCK_BYTES`] or more on its
/// own and unmap it when it is freed, for the rest of the process. Why: glibc raises that threshold each time a
/// mapped block is freed (up to 32 MiB), after which the large, short-lived blocks of reading and analysing one
/// trace stay in the heaps once freed, and the peak of a streamed report grows with the garbage of the traces
/// already read, not only with the traces in memory. The price is a fault per page of every such block.
pub fn return_large_blocks_when_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt has no preconditions; this parameter only moves the size from which blocks are mapped.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, RETURNED_BLOCK_BYTES as libc::c_int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_pages_of_large_blocks_are_advised() {
        let page = 4096;
        assert_eq!(advised_range(10 * page, LARGE_BLOCK_BYTES, page), Some((10 * page, LARGE_BLOCK_BYTES)));
        // A block that starts 16 bytes into a page (an allocator's header before it) loses that page's head and
        // the tail of its last page.
        let (start, length) = advised_range(10 * page + 16, LARGE_BLOCK_BYTES, page).unwrap();
        assert_eq!((start, length), (11 * page, LARGE_BLOCK_BYTES - page));
        assert_eq!(advised_range(0, LARGE_BLOCK_BYTES - 1, page), None);
        assert_eq!(advised_range(usize::MAX - 10, LARGE_BLOCK_BYTES, page), None);
        assert_eq!(advised_range(0, LARGE_BLOCK_BYTES, 0), None);
        assert_eq!(advised_range(0, LARGE_BLOCK_BYTES, 3000), None);
    }

    #[test]
    fn large_blocks_keep_their_contents_through_growth() {
        let allocator = HugePagesForLargeBlocks;
        let layout = Layout::from_size_align(LARGE_BLOCK_BYTES, 64).unwrap();
        // SAFETY: a non-zero layout; the block is written within its size and freed with the same layout.
        unsafe {
            let block = allocator.alloc_zeroed(layout);
            assert!(!block.is_null());
            assert!(std::slice::from_raw_parts(block, LARGE_BLOCK_BYTES).iter().all(|&b| b == 0));
            block.write_bytes(7, LARGE_BLOCK_BYTES);
            let grown = allocator.realloc(block, layout, 2 * LARGE_BLOCK_BYTES);
            assert!(!grown.is_null());
            assert!(std::slice::from_raw_parts(grown, LARGE_BLOCK_BYTES).iter().all(|&b| b == 7));
            allocator.dealloc(grown, Layout::from_size_align(2 * LARGE_BLOCK_BYTES, 64).unwrap());
        }
    }

    /// A large block shrunk stays where it is, its head unchanged (the model packs its edge list in place and gives
    /// the tail back: a copy would hold the list twice).
    #[test]
    fn a_large_block_shrinks_in_place() {
        let allocator = HugePagesForLargeBlocks;
        let layout = Layout::from_size_align(3 * LARGE_BLOCK_BYTES, 8).unwrap();
        // SAFETY: a non-zero layout; the block is written within its size and freed with the layout it has then.
        unsafe {
            let block = allocator.alloc(layout);
            assert!(!block.is_null());
            for i in 0..3 * LARGE_BLOCK_BYTES {
                block.add(i).write(i as u8);
            }
            let shrunk = allocator.realloc(block, layout, 2 * LARGE_BLOCK_BYTES);
            assert_eq!(shrunk, block, "moved");
            assert!((0..2 * LARGE_BLOCK_BYTES).all(|i| shrunk.add(i).read() == i as u8));
            allocator.dealloc(shrunk, Layout::from_size_align(2 * LARGE_BLOCK_BYTES, 8).unwrap());
        }
    }

    #[test]
    fn a_small_block_grown_large_and_shrunk_again_keeps_its_contents() {
        let allocator = HugePagesForLargeBlocks;
        let small = Layout::from_size_align(1000, 8).unwrap();
        let large = Layout::from_size_align(LARGE_BLOCK_BYTES + 3, 8).unwrap();
        // SAFETY: non-zero layouts; each block is used within its size and freed with the layout it has then.
        unsafe {
            let block = allocator.alloc(small);
            for i in 0..1000 {
                block.add(i).write(i as u8);
            }
            let grown = allocator.realloc(block, small, large.size());
            assert!(!grown.is_null() && (grown as usize).is_multiple_of(8));
            assert!((0..1000).all(|i| grown.add(i).read() == i as u8));
            grown.add(LARGE_BLOCK_BYTES + 2).write(9);
            let shrunk = allocator.realloc(grown, large, 500);
            assert!((0..500).all(|i| shrunk.add(i).read() == i as u8));
            allocator.dealloc(shrunk, Layout::from_size_align(500, 8).unwrap());
        }
    }
}
