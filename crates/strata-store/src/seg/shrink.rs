//! Shedding memory down to a lowered limit at once (`-m auto`, `-o
//! memory_pressure_yield`), instead of waiting for stores to evict.
//!
//! `cache_memlimit` only moves the limit: segments go back as stores need
//! room (memcached's behaviour, kept). A memory governor that lowers the
//! limit because the cgroup or the host is short of memory needs the bytes
//! back now, so [`SegStore::shed`] works in this order, each step returning
//! whole extents to the kernel (`MADV_DONTNEED` in `region.rs`, via
//! `Globals::discard`):
//!
//! ```text
//!  1. pooled buffers (segments and single-item buffers no shard holds)
//!  2. round-robin over shards: Shard::evict_one (S3-FIFO order, hot items
//!     rewritten into Main as in any eviction); a freed buffer goes back
//!     through give_back, which discards it while allocated > limit
//!  stop when allocated <= limit, or a round over every shard freed nothing
//!  (what is left is open segments and hot items, bounded by shard count)
//! ```
//!
//! Each shard lock is held for one eviction at a time, so requests keep
//! being served between steps.

use std::sync::atomic::Ordering;

use super::{lock, SegStore};
use crate::RelTime;

impl SegStore {
    /// Evict and give back memory until the buffers' bytes are within the
    /// current limit (or nothing more can go); returns the bytes given back.
    pub fn shed(&self, now: RelTime) -> u64 {
        let g = &self.g;
        let before = g.allocated.load(Ordering::Relaxed);
        let over = || g.allocated.load(Ordering::Relaxed) > g.memory_limit.load(Ordering::Relaxed);
        if !over() {
            return 0;
        }
        let pooled: Vec<_> = lock(&g.pool).drain(..).chain(lock(&g.jumbo_pool).drain(..)).collect();
        for buf in pooled {
            g.discard(buf);
        }
        while over() {
            let mut freed_any = false;
            for shard in self.shards.iter() {
                if !over() {
                    break;
                }
                freed_any |= shard.lock().evict_one(g, None, now);
            }
            if !freed_any {
                break;
            }
        }
        before.saturating_sub(g.allocated.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, StoreRequest};

    use super::*;

    #[test]
    fn shed_gives_back_down_to_a_lowered_limit() {
        let config = EngineConfig { memory_limit_bytes: 32 << 20, ..EngineConfig::default() };
        let store = SegStore::new(config);
        let value = vec![7u8; 1000];
        for i in 0..60_000u32 {
            let key = format!("key{i}");
            let req = StoreRequest::set(key.as_bytes(), &value);
            store.store(&req, 1);
        }
        let full = store.stats().malloced_bytes;
        assert!(full > 28 << 20, "{full}");
        store.set_memory_limit(8 << 20);
        assert_eq!(store.stats().malloced_bytes, full, "a new limit alone frees nothing (cache_memlimit)");
        let freed = store.shed(2);
        let after = store.stats().malloced_bytes;
        assert!(after <= 8 << 20, "{after}");
        assert_eq!(freed, full - after);
        assert!(store.stats().curr_items > 0, "the store keeps what fits");
        store.check_integrity();
        assert_eq!(store.shed(2), 0, "nothing more to give within the limit");
    }
}
