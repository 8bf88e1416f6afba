//! Anonymous segment memory (no `-e`): large reservations cut into extents.
//!
//! ```text
//!  Region
//!   chunks:  ┌──────────── chunk 0 (1 GiB + 2 MiB slack) ───────────┐ ┌── chunk 1 ...
//!            │ slack │ seg │ seg │ 300K │   free   │  seg  │  free   │ │
//!            └───────┴─────┴─────┴──────┴──────────┴───────┴─────────┘ └──
//!                    ^ 2 MiB-aligned: the first byte handed out
//!   free:    BTreeMap<start address, bytes>: free extents, coalesced
//! ```
//!
//! A chunk is one anonymous private mapping made with `MAP_NORESERVE`:
//! address space, no memory, and no commit charge (with the kernel's
//! default overcommit heuristic), so `-m 200g` costs nothing until items
//! arrive. Chunks are reserved on demand, `next_pow2(-m)` bytes each
//! (2 MiB to 1 GiB, from the limit at the time; an extent larger than that
//! gets a chunk of its own), so
//! the process holds `-m / 1 GiB` mappings plus what fragmentation adds,
//! instead of one per segment (Linux allows 65,530 mappings per process,
//! which capped `-m` near 60 GiB). Reserved address space is capped at
//! `2 x -m + 2 chunks`: past it an allocation fails as "no memory" and the
//! store evicts, as for any other refusal.
//!
//! Extents are handed out first-fit by address, page-multiple sizes;
//! segments and single-item buffers share the free map, so a freed
//! segment's bytes can hold large items and back. A freed extent's pages
//! go back to the kernel at once (`MADV_DONTNEED`, which keeps the mapping
//! whole and reads back as zeros), so RSS follows the bytes buffers hold, and
//! the store's `-m` accounting (`Globals::allocated`, the sum of live
//! buffer lengths) is unchanged and exact.
//!
//! `-L` (huge pages): each chunk is marked `MADV_HUGEPAGE` and extents start
//! 2 MiB-aligned in it, so the kernel backs touched memory with transparent
//! huge pages. Nothing is preallocated (memcached's `-L` preallocates all of
//! `-m`); freeing part of a huge page splits it back to small pages.
//!
//! Unsafe code: the `MADV_DONTNEED` of a freed extent (which must be used by
//! nothing else: it belongs to the buffer being dropped), and `Buffer`'s
//! construction from an extent (the free map hands each byte out once).
//! See `buffer.rs` for why a buffer's slice is sound.

#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

use super::buffer::Buffer;
use super::lock;

const PAGE_BYTES: usize = 4096;
const HUGE_PAGE_BYTES: usize = 2 << 20;
const MAX_CHUNK_BYTES: usize = 1 << 30;

pub struct Region {
    huge_pages: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Every chunk by its base address; unmapped when the region drops
    /// (after every buffer, each of which holds an `Arc` to it).
    chunks: BTreeMap<usize, Arc<MmapRaw>>,
    reserved_bytes: usize,
    /// Free extents: start address -> bytes; never two adjacent ones.
    free: BTreeMap<usize, usize>,
}

impl Region {
    /// An empty region (no address space yet); `huge_pages` for `-L`.
    pub fn new(huge_pages: bool) -> Arc<Region> {
        Arc::new(Region { huge_pages, inner: Mutex::new(Inner::default()) })
    }

    /// Bytes a chunk reserves under a limit of `limit` bytes: the limit's
    /// next power of two, 2 MiB to 1 GiB (from the current limit, so a
    /// `cache_memlimit` raised at run time gets larger chunks too).
    fn chunk_bytes(limit: usize) -> usize {
        limit.checked_next_power_of_two().unwrap_or(MAX_CHUNK_BYTES).clamp(HUGE_PAGE_BYTES, MAX_CHUNK_BYTES)
    }

    /// A zeroed buffer of `len` bytes (rounded up to pages), from a free
    /// extent or a new chunk; None if the address-space cap for
    /// `limit_bytes` (the current `-m`) or the kernel refuses.
    pub fn alloc(self: &Arc<Self>, len: usize, limit_bytes: u64) -> Option<Buffer> {
        let len = len.next_multiple_of(PAGE_BYTES);
        let start = {
            let mut inner = lock(&self.inner);
            let start = match inner.first_fit(len) {
                Some(start) => start,
                None => {
                    self.grow(&mut inner, len, limit_bytes)?;
                    inner.first_fit(len)?
                }
            };
            let have = inner.free.remove(&start).expect("first fit is free");
            if have > len {
                inner.free.insert(start + len, have - len);
            }
            start
        };
        // SAFETY: the extent was free, so nothing else uses it, and the
        // chunk it lies in lives while the region (which the buffer holds) does.
        Some(unsafe { Buffer::in_region(NonNull::new(start as *mut u8)?, len, Arc::clone(self)) })
    }

    /// Reserve a chunk big enough for `len`, if under the cap.
    fn grow(&self, inner: &mut Inner, len: usize, limit_bytes: u64) -> Option<()> {
        let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
        let chunk_bytes = Self::chunk_bytes(limit);
        let bytes = chunk_bytes.max(len.next_multiple_of(HUGE_PAGE_BYTES));
        let cap = limit.saturating_mul(2).saturating_add(2 * chunk_bytes);
        if inner.reserved_bytes.saturating_add(bytes) > cap {
            return None;
        }
        // The slack lets the first extent start on a huge-page boundary.
        let map = MmapOptions::new().len(bytes + HUGE_PAGE_BYTES).no_reserve_swap().map_anon().ok()?;
        let raw = MmapRaw::from(map);
        if self.huge_pages {
            // Best effort: a kernel without THP leaves small pages.
            let _ = raw.advise(Advice::HugePage);
        }
        let base = raw.as_mut_ptr() as usize;
        inner.free_extent(base.next_multiple_of(HUGE_PAGE_BYTES), bytes);
        inner.reserved_bytes += bytes;
        inner.chunks.insert(base, Arc::new(raw));
        Some(())
    }

    /// Take back a dropped buffer's extent: its pages go to the kernel.
    pub fn release(&self, ptr: NonNull<u8>, len: usize) {
        if len == 0 {
            return;
        }
        let start = ptr.as_ptr() as usize;
        // The system call runs outside the lock (it zaps up to 256 pages a
        // megabyte), so other shards' allocations do not wait on it.
        let chunk = lock(&self.inner).chunks.range(..=start).next_back().map(|(&base, chunk)| (base, Arc::clone(chunk)));
        if let Some((base, chunk)) = chunk {
            // SAFETY: the extent belongs to the buffer being dropped and is
            // not yet back in the free map, so nothing reads or writes it;
            // a private anonymous page reads back as zeros afterwards.
            let _ = unsafe { chunk.unchecked_advise_range(UncheckedAdvice::DontNeed, start - base, len) };
        }
        lock(&self.inner).free_extent(start, len);
    }

    /// Bytes of address space reserved (for tests and `check_integrity`).
    #[cfg(test)]
    pub fn reserved_bytes(&self) -> usize {
        lock(&self.inner).reserved_bytes
    }
}

impl Inner {
    fn first_fit(&self, len: usize) -> Option<usize> {
        self.free.iter().find(|&(_, &have)| have >= len).map(|(&start, _)| start)
    }

    /// Add a free extent, merged with free neighbours. Extents of two
    /// chunks never touch (each chunk's usable part ends before its mapping
    /// does, by the alignment slack), so a merged extent stays in one chunk.
    fn free_extent(&mut self, mut start: usize, mut len: usize) {
        if let Some((&prev, &n)) = self.free.range(..start).next_back() {
            debug_assert!(prev + n <= start, "extent freed twice");
            if prev + n == start {
                self.free.remove(&prev);
                start = prev;
                len += n;
            }
        }
        if let Some(n) = self.free.remove(&(start + len)) {
            len += n;
        }
        self.free.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_reused_zeroed_and_coalesced() {
        let region = Region::new(false);
        let mut a = region.alloc(1 << 20, 8 << 20).expect("a");
        let b = region.alloc(300 << 10, 8 << 20).expect("b");
        assert_eq!(a.len(), 1 << 20);
        assert_eq!(b.len(), 300 << 10);
        a.fill(7);
        let a_at = a.as_ptr() as usize;
        drop(a);
        // The freed megabyte comes back first-fit, zeroed.
        let c = region.alloc(1 << 20, 8 << 20).expect("c");
        assert_eq!(c.as_ptr() as usize, a_at);
        assert!(c.iter().all(|&x| x == 0), "a reused extent reads back as zeros");
        drop((b, c));
        assert_eq!(lock(&region.inner).free.len(), 1, "freed neighbours merge into one extent");
        assert_eq!(region.reserved_bytes(), 8 << 20);
    }

    #[test]
    fn reservations_are_capped_by_the_limit() {
        let region = Region::new(false);
        // 2 x 4 MiB + 2 chunks of 4 MiB: 16 MiB of address space at most.
        let held: Vec<Buffer> = (0..16).map_while(|_| region.alloc(1 << 20, 4 << 20)).collect();
        assert_eq!(held.len(), 16);
        assert!(region.alloc(1 << 20, 4 << 20).is_none());
        assert!(region.reserved_bytes() <= 16 << 20);
    }

    #[test]
    fn an_extent_larger_than_a_chunk_gets_its_own() {
        let region = Region::new(true);
        let big = region.alloc(5 << 20, 2 << 20).expect("big");
        assert_eq!(big.len(), 5 << 20);
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
    }
}
