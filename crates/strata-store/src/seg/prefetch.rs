//! Multi-get prefetch (`Engine::prefetch`): two passes over a window of
//! keys before they are read one by one.
//!
//! ```text
//!  pass 1: per key  hash ─► lock shard ─► prefetch home slot line ─► unlock
//!  pass 2: per key  lock shard ─► first tag-matching slot (line now cached)
//!                   ─► prefetch the item's first 64 bytes ─► unlock
//!  then:   the usual Engine::get per key, whose slot and item are cached
//! ```
//!
//! Each pass issues its loads back to back, so the window's cache misses
//! overlap instead of costing one full memory latency each. The locks are
//! taken with `try_lock` and held for a few instructions: a busy shard's
//! keys are just not prefetched, so a prefetch never waits. Nothing is read
//! but the slot: a slot pointing at another key with the same tag only
//! wastes one prefetch.

use std::sync::{Mutex, MutexGuard, TryLockError};

use super::{hash_key, SegStore};

/// The shard, unless another thread holds it: a prefetch is only a hint,
/// so it never waits for a lock.
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl SegStore {
    pub(super) fn prefetch_keys(&self, keys: &[&[u8]]) {
        let mut hashes = [0u64; MAX_WINDOW];
        let keys = &keys[..keys.len().min(MAX_WINDOW)];
        for (key, hash) in keys.iter().zip(hashes.iter_mut()) {
            *hash = hash_key(key);
            if let Some(shard) = try_lock(&self.shards[self.shard_of(*hash)]) {
                shard.table.prefetch_home(*hash);
            }
        }
        for &hash in &hashes[..keys.len()] {
            let Some(shard) = try_lock(&self.shards[self.shard_of(hash)]) else { continue };
            if let Some(loc) = shard.table.first_tag_match(hash) {
                if let Some(seg) = shard.segs.get(loc.seg as usize) {
                    // The item's first 64 bytes (header, key, a short value),
                    // which straddle two lines unless the item starts one.
                    let at = loc.offset as usize;
                    if let Some(item) = seg.buf.get(at..(at + 64).min(seg.buf.len())) {
                        if let (Some(first), Some(last)) = (item.first(), item.last()) {
                            crate::prefetch::line(first);
                            crate::prefetch::line(last);
                        }
                    }
                }
            }
        }
    }
}

/// Keys prefetched per call (a window of a longer multi-get).
pub const MAX_WINDOW: usize = 16;
