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
//!                                 dir[id >> 12][id & 4095]: DirEntry
//!                                   ptr, len            the segment's buffer
//!                                   cas_base, create_time, main
//! ```
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

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNKS: usize = (MAX_SEGMENTS as usize) >> CHUNK_BITS;

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
        let chunks = self.dir.iter().filter(|c| c.get().is_some()).count();
        self.dir.len() * std::mem::size_of::<OnceLock<Box<[DirEntry]>>>() + chunks * CHUNK * std::mem::size_of::<DirEntry>()
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
        let e = self.dir.get((id >> CHUNK_BITS) as usize)?.get()?.get(id as usize & (CHUNK - 1))?;
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
        let chunk = self.dir[(id >> CHUNK_BITS) as usize].get_or_init(|| (0..CHUNK).map(|_| DirEntry::default()).collect());
        let e = &chunk[id as usize & (CHUNK - 1)];
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
