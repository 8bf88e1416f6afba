//! What a get may read of a shard without its lock, and the lock that
//! keeps it honest: a shard's mutex, its sequence (`seqlock.rs`), the
//! location of its index slots, and a directory of its segments' buffers.
//!
//! ```text
//!  ShardLock (on cache lines of its own)
//!   mutex: Mutex<Shard>          writers, and reads that must write
//!   view: Arc<ReadView> ───────► ReadView (shared with the Shard)
//!                                 seq      even: stable, odd: a writer is in
//!                                 slots, capacity   the index's slot array
//!                                 dir[chunk][i]: DirEntry (place(id))
//!                                   ptr, len            the segment's buffer
//!                                   cas_base, create_time, main
//! ```
//!
//! The directory's chunks double: chunk 0 holds ids 0..256, chunk k >= 1
//! the next 256 << (k - 1) (ids 2^(7+k) .. 2^(8+k)), 15 chunks up to
//! `MAX_SEGMENTS` (2^22). A shard holds about 128 segments at any `-m`
//! from 32 MiB to 1 GiB (`mod.rs`), so it makes chunk 0 (8 KiB of 32-byte
//! entries) and perhaps 1; the fixed 4096-entry chunks and 1024-slot
//! directory this replaced took 152 KiB a shard from the first segment
//! (1.2 MiB at `-m 64`'s 8 shards: memory outside `-m`).
//!
//! Invariants:
//! - Every `ShardGuard` (the only way to lock a shard) makes the sequence
//!   odd for as long as it is held, and publishes the index's slot array
//!   before making it even again; so any change to the index, to a
//!   directory entry or to item bytes happens while the sequence is odd.
//! - A directory entry is written when its segment gets or loses a buffer
//!   (`Shard::open`, `release`, `recover_segment`), under the guard.
//!   Directory chunks are allocated once and freed only with the view.
//! - A slot array the index replaces is dropped through the epoch
//!   (`crossbeam-epoch`), so a reader pinned before the replacement can
//!   still read it; buffers need no epoch: their memory stays mapped until
//!   the store drops (region chunks, memory-file arena: `buffer.rs`).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};

use super::buffer::Buffer;
use super::seqlock::SeqLock;
use super::shard::Shard;
use super::table::MAX_SEGMENTS;
use crate::RelTime;

/// Ids in chunk 0; chunk k >= 1 holds `FIRST << (k - 1)` (the module doc).
const FIRST_BITS: u32 = 8;
const FIRST: usize = 1 << FIRST_BITS;
const CHUNKS: usize = (MAX_SEGMENTS.trailing_zeros() - FIRST_BITS + 1) as usize;

/// The chunk holding segment `id` and its index there.
#[inline]
fn place(id: u32) -> (usize, usize) {
    let bits = u32::BITS - id.leading_zeros();
    if bits <= FIRST_BITS {
        (0, id as usize)
    } else {
        ((bits - FIRST_BITS) as usize, (id - (1 << (bits - 1))) as usize)
    }
}

/// Entries of chunk `k`.
fn chunk_len(k: usize) -> usize {
    if k == 0 {
        FIRST
    } else {
        FIRST << (k - 1)
    }
}

/// A segment as readers see it.
#[derive(Default)]
pub struct DirEntry {
    ptr: AtomicPtr<u8>,
    len: AtomicUsize,
    cas_base: AtomicU64,
    create_time: AtomicU32,
    main: AtomicBool,
}

/// One load of a [`DirEntry`] (consistent only once the sequence validates).
#[derive(Clone, Copy)]
pub struct SegRef {
    pub ptr: *const u8,
    pub len: usize,
    pub cas_base: u64,
    pub create_time: RelTime,
    pub main: bool,
}

/// On cache lines of its own (128 bytes): readers keep it shared in their
/// caches until a writer takes the shard.
#[repr(align(128))]
pub struct ReadView {
    pub seq: SeqLock,
    slots: AtomicPtr<u64>,
    capacity: AtomicUsize,
    dir: Box<[OnceLock<Box<[DirEntry]>>]>,
}

impl ReadView {
    pub fn new() -> ReadView {
        ReadView {
            seq: SeqLock::new(),
            slots: AtomicPtr::new(std::ptr::null_mut()),
            capacity: AtomicUsize::new(0),
            dir: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Heap bytes held (`stats memory`): the chunk directory and every
    /// chunk of entries made so far (a chunk is made whole, on its first
    /// segment, and kept).
    pub fn bytes(&self) -> usize {
        let entries: usize = self.dir.iter().filter_map(|c| c.get()).map(|c| c.len()).sum();
        self.dir.len() * std::mem::size_of::<OnceLock<Box<[DirEntry]>>>() + entries * std::mem::size_of::<DirEntry>()
    }

    /// The index's slot array (its address and length), as last published.
    #[inline]
    pub fn slots(&self) -> (*const u64, usize) {
        (self.slots.load(Ordering::Relaxed), self.capacity.load(Ordering::Relaxed))
    }

    fn publish_slots(&self, (ptr, capacity): (*const u64, usize)) {
        self.slots.store(ptr.cast_mut(), Ordering::Relaxed);
        self.capacity.store(capacity, Ordering::Relaxed);
    }

    /// Segment `id` as readers see it; None if no chunk holds it yet.
    #[inline]
    pub fn segment(&self, id: u32) -> Option<SegRef> {
        let (chunk, i) = place(id);
        let e = self.dir.get(chunk)?.get()?.get(i)?;
        Some(SegRef {
            ptr: e.ptr.load(Ordering::Relaxed),
            len: e.len.load(Ordering::Relaxed),
            cas_base: e.cas_base.load(Ordering::Relaxed),
            create_time: e.create_time.load(Ordering::Relaxed),
            main: e.main.load(Ordering::Relaxed),
        })
    }

    /// Record segment `id`'s buffer (empty: the segment is free). Called
    /// under the shard's guard.
    pub fn publish_segment(&self, id: u32, buf: &Buffer, cas_base: u64, create_time: RelTime, main: bool) {
        let (k, i) = place(id);
        let chunk = self.dir[k].get_or_init(|| (0..chunk_len(k)).map(|_| DirEntry::default()).collect());
        let e = &chunk[i];
        let ptr = if buf.is_empty() { std::ptr::null_mut() } else { buf.as_ptr().cast_mut() };
        e.ptr.store(ptr, Ordering::Relaxed);
        e.len.store(buf.len(), Ordering::Relaxed);
        e.cas_base.store(cas_base, Ordering::Relaxed);
        e.create_time.store(create_time, Ordering::Relaxed);
        e.main.store(main, Ordering::Relaxed);
    }
}

/// A shard's mutex and what readers see of the shard.
pub struct ShardLock {
    mutex: Mutex<Shard>,
    pub view: Arc<ReadView>,
}

impl ShardLock {
    pub fn new(shard: Shard) -> ShardLock {
        let view = Arc::clone(&shard.view);
        view.publish_slots(shard.table.raw_slots());
        ShardLock { mutex: Mutex::new(shard), view }
    }

    /// Lock the shard for writing (every lock is one: readers retry or
    /// take the lock while it is held).
    pub fn lock(&self) -> ShardGuard<'_> {
        // A panic mid-operation is a bug that already failed a test; keep serving.
        let guard = self.mutex.lock().unwrap_or_else(|e| e.into_inner());
        self.view.seq.write_begin();
        ShardGuard { guard, view: &self.view }
    }

    /// The shard, unless another thread holds it.
    pub fn try_lock(&self) -> Option<ShardGuard<'_>> {
        let guard = match self.mutex.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        self.view.seq.write_begin();
        Some(ShardGuard { guard, view: &self.view })
    }
}

pub struct ShardGuard<'a> {
    guard: MutexGuard<'a, Shard>,
    view: &'a ReadView,
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        self.view.publish_slots(self.guard.table.raw_slots());
        self.view.seq.write_end();
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.guard
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_id_once_in_order() {
        let mut next = (0, 0);
        for id in 0..1u32 << 16 {
            let (k, i) = place(id);
            assert_eq!((k, i), next, "id {id}");
            assert!(i < chunk_len(k));
            next = if i + 1 == chunk_len(k) { (k + 1, 0) } else { (k, i + 1) };
        }
        let (k, i) = place(MAX_SEGMENTS - 1);
        assert_eq!((k, i), (CHUNKS - 1, chunk_len(CHUNKS - 1) - 1), "the last id ends the last chunk");
    }

    #[test]
    fn a_shard_of_a_few_hundred_segments_makes_small_chunks() {
        let view = ReadView::new();
        let buf = Buffer::default();
        for id in [0, 127, 300] {
            view.publish_segment(id, &buf, 7, 0, true);
            assert_eq!(view.segment(id).map(|s| s.cas_base), Some(7));
        }
        assert!(view.segment(1 << 20).is_none(), "no chunk holds it yet");
        let entries = FIRST + chunk_len(1);
        assert_eq!(view.bytes(), CHUNKS * std::mem::size_of::<OnceLock<Box<[DirEntry]>>>() + entries * std::mem::size_of::<DirEntry>());
        assert!(view.bytes() < 20 << 10, "{}", view.bytes());
    }
}
