//! Segment memory: a buffer is an extent of a large mapping, not a mapping.
//!
//! ```text
//!  anonymous (no -e): Region = chunks of reserved address space (1 GiB at -m 200g)
//!   chunk ┌────────┬────────┬──────┬────────┬─────────────── never touched ──┐
//!         │ seg 1M │ seg 1M │ 300K │ (free) │  ...                             │
//!         └────────┴────────┴──────┴────────┴──────────────────────────────────┘
//!  memory file (-e): the whole arena is one shared mapping; a buffer is an
//!  extent of it at a page offset the file's directory records
//! ```
//!
//! A `Buffer` is a pointer and a length into one of those mappings plus a
//! handle (`Arc`) that keeps the mapping alive while the buffer exists. The
//! process holds a few mappings however many segments there are, so `-m` is
//! no longer bounded by `vm.max_map_count` (65,530 mappings; one per 1 MiB
//! segment used to cap `-m` near 60 GiB, and churn split merged ones).
//!
//! Unsafe code, and why it is sound: a buffer's extent is handed out by
//! exactly one allocator (`region.rs`'s free map, or the memory file's) and
//! not handed out again until the buffer is gone, so the `&mut [u8]` a buffer
//! gives out never aliases another buffer's; the mapping it points into is
//! unmapped only when the last `Arc` to it drops, which is after every
//! buffer into it. That makes a buffer like a `Box<[u8]>`: `Send` and `Sync`.
//! Dropping an anonymous buffer returns its extent to its region, whose
//! pages go back to the kernel (`MADV_DONTNEED`), so RSS follows what the
//! store holds. Buffers for freed segments go to the store's pool first, so
//! steady state makes no system calls.

#![allow(unsafe_code)]

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::MmapRaw;

use super::region::Region;

/// The mapping a buffer lies in.
enum Home {
    /// The empty buffer of a free segment slot.
    None,
    /// An extent of an anonymous region; given back to it on drop.
    Region(Arc<Region>),
    /// An extent of the memory file's arena mapping, at this byte offset.
    File(Arc<MmapRaw>, u64),
}

pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    home: Home,
}

// SAFETY: a buffer owns its extent exclusively (module docs), as a Box<[u8]>
// owns its bytes; the Arc'd mapping it points into is itself Send + Sync.
unsafe impl Send for Buffer {}
// SAFETY: as above; `&Buffer` only gives out `&[u8]`.
unsafe impl Sync for Buffer {}

impl Default for Buffer {
    fn default() -> Buffer {
        Buffer { ptr: NonNull::dangling(), len: 0, home: Home::None }
    }
}

impl Buffer {
    /// An extent of `region` at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` lies in a mapping `region` keeps alive, and nothing
    /// else uses it until this buffer drops (which hands it back to `region`).
    pub unsafe fn in_region(ptr: NonNull<u8>, len: usize, region: Arc<Region>) -> Buffer {
        Buffer { ptr, len, home: Home::Region(region) }
    }

    /// The extent of `arena` at byte `offset`, `len` bytes long.
    ///
    /// # Safety
    /// The extent is inside `arena` and handed out to no other buffer while
    /// this one exists (the memory file's free map guarantees it).
    pub unsafe fn in_file(arena: Arc<MmapRaw>, offset: u64, len: usize) -> Buffer {
        assert!(offset as usize + len <= arena.len(), "extent past the arena");
        // SAFETY: in bounds (asserted); the caller guarantees exclusivity.
        let ptr = unsafe { NonNull::new_unchecked(arena.as_mut_ptr().add(offset as usize)) };
        Buffer { ptr, len, home: Home::File(arena, offset) }
    }

    /// Offset of the extent in the memory file's arena.
    pub fn file_offset(&self) -> Option<u64> {
        match self.home {
            Home::File(_, offset) => Some(offset),
            _ => None,
        }
    }

    /// Write a file-backed buffer's dirty pages back (graceful stop).
    pub fn flush(&self) -> std::io::Result<()> {
        match &self.home {
            Home::File(arena, offset) => arena.flush_range(*offset as usize, self.len),
            _ => Ok(()),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Home::Region(region) = &self.home {
            region.release(self.ptr, self.len);
        }
    }
}

impl Deref for Buffer {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is a live extent this buffer owns (module
        // docs), or a dangling pointer with len 0, which is a valid empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Buffer {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// The copy size [`copy_racy`] inlines.
pub const RACY_LINE: usize = 64;
const _: () = assert!(RACY_LINE == 4 * 16, "copy_racy's unrolled copy");

/// Copy `out.len()` bytes from `src` while a writer may be changing them:
/// an optimistic read (`seg/read.rs`), whose caller uses the copy only
/// once the shard's sequence shows no writer ran meanwhile (`seqlock.rs`),
/// as a seqlock's reader does. One `memcpy` (vector moves), then a
/// compiler fence, so nothing after the copy reads `src` in place of
/// `out`: every later use is of this copy, taken once. (Volatile reads of
/// 8-byte arrays, the first version, compile to a byte load and store
/// each: 2,048 instructions for a 1 KiB value, 9% of memaslap's CPU per
/// request.)
///
/// # Safety
/// `src..src + out.len()` lies inside a mapping that stays mapped while
/// the store lives: an extent a region or the memory file handed out
/// (chunks and the arena are unmapped only when the store drops; a freed
/// extent reads back as zeros or as its next owner's bytes, never faults).
#[inline]
pub unsafe fn copy_racy(src: *const u8, out: &mut [u8]) {
    // SAFETY: `src..src + out.len()` is mapped (caller) and cannot overlap
    // `out`, a thread's own scratch; the bytes may be torn, which the
    // caller's validation detects before it trusts any of them.
    unsafe {
        if out.len() == RACY_LINE {
            // An item's first line (`seg/read.rs`), the common case: four
            // 16-byte moves, not a call. Spelled out because LLVM folds a
            // `copy_nonoverlapping` of the constant into the other
            // branch's (`len` is 64 here), which is a `memcpy` call; a
            // loop would be turned back into one too.
            let (s, d) = (src as *const u128, out.as_mut_ptr() as *mut u128);
            let (a, b, c, e) = (s.read_unaligned(), s.add(1).read_unaligned(), s.add(2).read_unaligned(), s.add(3).read_unaligned());
            d.write_unaligned(a);
            d.add(1).write_unaligned(b);
            d.add(2).write_unaligned(c);
            d.add(3).write_unaligned(e);
        } else {
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len());
        }
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// Read the 8-byte index slot at `slot` while a writer may be changing it
/// (an optimistic read, validated as in [`copy_racy`]).
///
/// # Safety
/// `slot` is aligned and inside a slot array that is not unmapped before
/// the caller's epoch guard drops (`Table`'s old arrays are dropped
/// through the epoch, `seg/read.rs`).
#[inline]
pub unsafe fn read_slot_racy(slot: *const u64) -> u64 {
    // SAFETY: aligned and mapped (caller).
    unsafe { std::ptr::read_volatile(slot) }
}
