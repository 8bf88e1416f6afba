//! The store's globals: what every shard shares (settings, the `-m`
//! budget and its pools of free segment buffers, the CAS counter, the flush
//! epoch, the memory file and the flash tier), and the small helpers every
//! module of the engine uses (`lock`, `Line`).
//!
//! ```text
//!  Globals
//!   allocated ≤ memory_limit   bytes of every buffer in existence
//!   pool, jumbo_pool           free buffers (segment-sized / single-item)
//!   cas_counter                own cache line (written by every store)
//!   oldest_live, oldest_cas    flush_all's epoch (read by every get)
//!   walk_buffers               copy buffers of victim walks, one per walk
//!                              running at once
//! ```
//!
//! Invariant: `allocated` counts every buffer held by a shard or pooled
//! (`SegStore::check_integrity` checks it); a buffer leaves the count only
//! through `discard`.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::buffer::Buffer;
use super::file::MemFile;
use super::flash;
use super::item::Header;
use super::region::Region;
use crate::{memcached_item_size, EngineConfig, RelTime};

/// Single-item buffers kept for reuse.
const JUMBO_POOL: usize = 64;

/// What all shards share: settings, the memory budget and its pool of free
/// segment buffers, the CAS counter and the flush epoch.
pub(crate) struct Globals {
    pub config: EngineConfig,
    pub segment_size: usize,
    pub jumbo_threshold: usize,
    pub(super) memory_limit: AtomicU64,
    /// Bytes of every segment buffer in existence (held by shards or pooled).
    pub(super) allocated: AtomicU64,
    pub(super) pool: Mutex<Vec<Buffer>>,
    /// How many buffers `pool` holds, read without its lock.
    pub(super) pooled: AtomicUsize,
    pub(super) shard_count: usize,
    /// Freed single-item buffers (sizes rounded to pages), reused for an
    /// item of the same rounded size instead of a new mapping.
    pub(super) jumbo_pool: Mutex<Vec<Buffer>>,
    /// Written by every store: on a cache line of its own, away from the
    /// flush epoch every read checks.
    pub cas_counter: Line<AtomicU64>,
    /// `watch evictions` (`Engine::set_eviction_log`).
    pub eviction_log: std::sync::OnceLock<std::sync::Arc<dyn crate::EvictionLog>>,
    /// `stats mrc`'s sampler and its threshold (0: none; `sample.rs`).
    pub(super) sampler: std::sync::OnceLock<std::sync::Arc<dyn crate::AccessSampler>>,
    pub(super) sample_threshold: AtomicU64,
    pub(super) oldest_live: AtomicU32,
    pub(super) oldest_cas: AtomicU64,
    /// Memory file only: the highest CAS given explicitly (meta `E`) or
    /// found by recovery. A new copy numbered at or below it may not be
    /// newer by CAS than the copy it replaces, which recovery would then
    /// prefer; [`SegStore::put`] retires such an old copy first. Written
    /// only by `E` requests.
    pub(super) explicit_cas_max: AtomicU64,
    /// The memory file (`-e`), if any: segment buffers are its extents.
    pub(super) file: Option<MemFile>,
    /// Without one, buffers are extents of large anonymous reservations.
    pub(super) region: std::sync::Arc<Region>,
    /// The flash tier (`-o ext_path`, `flash/`), if any.
    pub(super) flash: Option<flash::Tier>,
    /// Its small store (`flash/small/`), if on.
    pub(super) small: Option<flash::small::Small>,
    /// Where a segment's first item starts (after its header in a memory file).
    pub data_start: usize,
    /// `-M`: a store was refused for want of memory and nothing has left
    /// since. memcached's memory is then full for every store of the class
    /// (one pool here), so later stores are refused too, even into room an
    /// open segment of another shard still has. Cleared when an item
    /// leaves or the limit grows; written only on those events.
    pub exhausted: std::sync::atomic::AtomicBool,
    /// Copy buffers of victim walks (`shard/evict.rs`: the kept items,
    /// up to `KEEP_PERCENT` of a segment), shared by the shards: as many
    /// as walks ever ran at once, about one per thread that evicts, where
    /// each shard kept one of its own (58 KiB at `-m 64`, 8 of them: memory
    /// outside `-m`).
    pub(super) walk_buffers: Mutex<Vec<Vec<u8>>>,
    /// Their capacity in all (`stats memory` `store_meta_bytes`).
    pub(super) walk_buffer_bytes: AtomicUsize,
    /// Of the allocated bytes, the shards' index and ghost charges
    /// (`shard/charge.rs`): the flash tier's RAM leaves them room
    /// (`flash/small/budget.rs`).
    pub(crate) per_item_charged: AtomicU64,
}

impl Globals {
    pub(super) fn new_buffer(&self, size: usize) -> Option<Buffer> {
        match &self.file {
            Some(file) => file.alloc(size),
            None => self.region.alloc(size, self.memory_limit.load(Ordering::Relaxed)),
        }
    }

    /// Let go of a buffer for good (its extent goes back to the file's free map).
    pub(super) fn discard(&self, buf: Buffer) {
        self.allocated.fetch_sub(buf.len() as u64, Ordering::Relaxed);
        if let Some(file) = &self.file {
            file.free(buf);
        }
    }

    /// A victim walk's copy buffer, empty (capacity kept from earlier walks).
    pub(super) fn take_walk_buffer(&self) -> Vec<u8> {
        lock(&self.walk_buffers).pop().unwrap_or_default()
    }

    /// Return a walk's copy buffer, which had `capacity_before` when taken.
    pub(super) fn give_walk_buffer(&self, mut buf: Vec<u8>, capacity_before: usize) {
        buf.clear();
        self.walk_buffer_bytes.fetch_add(buf.capacity().saturating_sub(capacity_before), Ordering::Relaxed);
        lock(&self.walk_buffers).push(buf);
    }

    /// The CAS a client sees: none with `-C`. A memory file numbers items
    /// even then, so recovery can tell which of two copies is newer.
    pub(super) fn shown_cas(&self, cas: u64) -> u64 {
        if self.config.cas_disabled {
            0
        } else {
            cas
        }
    }

    /// A buffer of `size` bytes from the pool or, under `-m`, a new one.
    pub(super) fn take(&self, size: usize) -> Option<Buffer> {
        let limit = self.memory_limit.load(Ordering::Relaxed);
        {
            let mut pool = lock(&self.pool);
            let mut jumbo = lock(&self.jumbo_pool);
            if size == self.segment_size {
                if let Some(buf) = self.pop_pooled(&mut pool) {
                    return Some(buf);
                }
            } else if let Some(i) = jumbo.iter().position(|b| b.len() == size) {
                return Some(jumbo.swap_remove(i));
            }
            // Make room: cached single-item buffers first, then (for an
            // odd size, which needs bytes, not a segment) pooled segments.
            while self.allocated.load(Ordering::Relaxed) + size as u64 > limit {
                let freed = match jumbo.pop() {
                    Some(buf) => buf,
                    None if size != self.segment_size => match self.pop_pooled(&mut pool) {
                        Some(buf) => buf,
                        None => break,
                    },
                    None => break,
                };
                self.discard(freed);
            }
        }
        if let Some(buf) = self.new_buffer_counted(size, limit) {
            return Some(buf);
        }
        // A memory file also needs the bytes in one piece: pooled buffers
        // are free memory, so give them back to be merged and try again.
        if self.file.is_none() {
            return None;
        }
        self.pooled.store(0, Ordering::Relaxed);
        let pooled: Vec<Buffer> = lock(&self.pool).drain(..).chain(lock(&self.jumbo_pool).drain(..)).collect();
        if pooled.is_empty() {
            return None;
        }
        for buf in pooled {
            self.discard(buf);
        }
        self.new_buffer_counted(size, limit)
    }

    /// A new buffer, counted in `allocated`, if that stays under `limit`.
    pub(super) fn new_buffer_counted(&self, size: usize, limit: u64) -> Option<Buffer> {
        let mut current = self.allocated.load(Ordering::Relaxed);
        loop {
            if current + size as u64 > limit {
                return None;
            }
            match self.allocated.compare_exchange_weak(current, current + size as u64, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let buf = self.new_buffer(size);
        if buf.is_none() {
            self.allocated.fetch_sub(size as u64, Ordering::Relaxed);
        }
        buf
    }

    pub(super) fn give_back(&self, buf: Buffer) {
        if buf.is_empty() {
            return;
        }
        if let Some(file) = &self.file {
            file.set_entry(&buf, 0);
        }
        let limit = self.memory_limit.load(Ordering::Relaxed);
        if self.allocated.load(Ordering::Relaxed) <= limit {
            if buf.len() == self.segment_size {
                let mut pool = lock(&self.pool);
                pool.push(buf);
                self.pooled.store(pool.len(), Ordering::Relaxed);
                return;
            }
            let mut jumbo = lock(&self.jumbo_pool);
            if jumbo.len() < JUMBO_POOL {
                return jumbo.push(buf);
            }
        }
        self.discard(buf);
    }

    /// A charge (the index's growth, the ghost: shard/charge.rs) took the
    /// allocated bytes past the limit: pooled buffers, free memory, go back
    /// at once while it is over. With none pooled, the next segment freed
    /// goes back instead of to the pool ([`Globals::give_back`]).
    pub(super) fn shed_pooled(&self) {
        let limit = self.memory_limit.load(Ordering::Relaxed);
        while self.allocated.load(Ordering::Relaxed) > limit {
            let Some(buf) = self.pop_pooled(&mut lock(&self.pool)) else { return };
            self.discard(buf);
        }
    }

    /// A pooled segment buffer off `pool` (the pool's locked list), with
    /// `pooled` kept equal to the list's length.
    fn pop_pooled(&self, pool: &mut Vec<Buffer>) -> Option<Buffer> {
        let buf = pool.pop()?;
        self.pooled.store(pool.len(), Ordering::Relaxed);
        Some(buf)
    }

    /// Memory is full: no room under `-m` for a new segment, and fewer
    /// pooled than one for each shard. Stores then pay for themselves by
    /// eviction (shard/evict.rs). (A victim walked to its end leaves its
    /// buffer pooled until a shard's open segment fills: were one pooled
    /// buffer enough to stop, the other shards' stores would stop evicting
    /// while it waits, as memcached's never do.)
    pub fn segments_short(&self) -> bool {
        self.pooled.load(Ordering::Relaxed) < self.shard_count
            && self.allocated.load(Ordering::Relaxed) + self.segment_size as u64 > self.memory_limit.load(Ordering::Relaxed)
    }

    /// memcached's class and item size for the item `h` describes.
    #[inline]
    pub fn item_class(&self, h: &Header) -> (u8, usize) {
        let size = memcached_item_size(h.key_len, h.flags, h.value_len, !self.config.cas_disabled);
        (self.config.classes.class_of(size), size)
    }

    /// memcached's class of a new item of these sizes.
    pub(super) fn request_class(&self, key_len: usize, flags: u32, value_len: usize) -> u8 {
        self.config.classes.class_of(memcached_item_size(key_len, flags, value_len, !self.config.cas_disabled))
    }

    pub(super) fn next_cas(&self) -> u64 {
        if self.config.cas_disabled && self.file.is_none() {
            0
        } else {
            self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1
        }
    }

    /// The CAS a new or changed item gets: `explicit` (meta `E`) unless CAS
    /// is disabled, else the next from the counter (which `E` leaves alone,
    /// as in memcached).
    pub(super) fn assign_cas(&self, explicit: Option<u64>) -> u64 {
        match explicit {
            Some(cas) if !self.config.cas_disabled => {
                if self.file.is_some() {
                    self.explicit_cas_max.fetch_max(cas, Ordering::Relaxed);
                }
                cas
            }
            _ => self.next_cas(),
        }
    }

    /// memcached's `item_is_flushed`, on an item's last access and CAS.
    /// Whether a `flush_all` may have flushed items by `now` (else
    /// `is_flushed` is false for every item).
    #[inline]
    pub fn flush_in_force(&self, now: RelTime) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        oldest_live != 0 && oldest_live <= now
    }

    pub fn is_flushed(&self, access: RelTime, cas: u64, now: RelTime) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        // The CAS orders items only within the flush's own second (an item
        // stored later may carry an explicit lower CAS, meta `E`).
        access <= oldest_live || (oldest_cas != 0 && cas != 0 && cas < oldest_cas && access <= oldest_live.saturating_add(1))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic mid-operation is a bug that already failed a test; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A value on cache lines of its own (128 bytes: adjacent-line prefetch
/// pairs lines), so two cores writing neighbours never share a line.
#[repr(align(128))]
pub(crate) struct Line<T>(pub T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
