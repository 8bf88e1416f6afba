//! [`crate::Engine::walk`] for [`SegStore`]: shard by shard, segment by
//! segment, item by item, in the order items were appended.
//!
//! A segment is entered by recording its generation; a later step that
//! finds another generation (the segment was freed and reused meanwhile)
//! leaves it, since its offsets now belong to other items. An item is
//! shown only if the index still points at it (dead copies of deleted or
//! replaced items stay in segments until the segment is reclaimed), which
//! costs one hash and one probe per item, as eviction's walk does.

use super::item::Header;
use super::shard::{Gone, Shard};
use super::table::Loc;
use super::{hash_key, SegStore};
use crate::walk::{Visit, WalkCursor};
use crate::{ItemView, RelTime};

/// Items whose index slots a walk reads ahead, at once.
const TOUCH_GROUP: usize = 16;

impl SegStore {
    pub(super) fn walk_step(
        &self,
        cursor: &mut WalkCursor,
        budget: usize,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool,
    ) -> bool {
        // One shard's lock per step: the next shard waits for the next step.
        let Some(padded) = self.shards.get(cursor.shard) else {
            cursor.done = cursor.flash.as_mut().is_none_or(|scan| self.walk_flash_step(scan, budget.max(1), now, visit));
            return cursor.done;
        };
        let mut shard = padded.lock();
        self.walk_shard(&mut shard, cursor, budget.max(1), now, visit);
        if cursor.segment as usize >= shard.segs.len() {
            cursor.shard += 1;
            cursor.segment = 0;
            cursor.gen = None;
            cursor.done = cursor.shard == self.shards.len() && (cursor.flash.is_none() || self.g.flash.is_none());
        }
        cursor.done
    }

    /// Walk `shard` from the cursor for up to `budget` items.
    fn walk_shard(
        &self,
        shard: &mut Shard,
        cursor: &mut WalkCursor,
        budget: usize,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool,
    ) {
        let mut looked = 0;
        while looked < budget && (cursor.segment as usize) < shard.segs.len() {
            let id = cursor.segment;
            let (gen, end, live) = shard.segment_extent(id);
            if !live || cursor.gen.is_some_and(|g| g != gen) {
                cursor.segment += 1;
                cursor.gen = None;
                continue;
            }
            if cursor.gen.is_none() {
                cursor.gen = Some(gen);
                cursor.offset = self.g.data_start;
            }
            while looked < budget && cursor.offset < end {
                // The next few items' index slots first, all at once: each
                // is a cache miss (the index is larger than the caches),
                // and misses the CPU can overlap (a loop of nothing but
                // these reads, so they all fit in its window) cost about one.
                let mut group = [(Loc { seg: id, offset: 0 }, 0u64); TOUCH_GROUP];
                let (mut n, mut offset) = (0, cursor.offset);
                while n < TOUCH_GROUP && looked + n < budget && offset < end {
                    let loc = Loc { seg: id, offset: offset as u32 };
                    let item = shard.item(loc);
                    let h = Header::decode(item, shard.checked);
                    offset += h.total_len();
                    group[n] = (loc, hash_key(h.key(item)));
                    n += 1;
                }
                let touched = group[..n].iter().fold(0, |acc, &(_, hash)| acc ^ shard.table.touch(hash));
                std::hint::black_box(touched);
                looked += n;
                for &(loc, hash) in &group[..n] {
                    if !self.visit_one(shard, cursor, loc, hash, now, visit) {
                        break;
                    }
                }
                if cursor.gen.is_none() {
                    break;
                }
            }
            if cursor.gen.is_some() && cursor.offset >= end {
                // An open segment may grow after this step; items appended
                // later are new since the walk began, so moving on is fine.
                cursor.segment += 1;
                cursor.gen = None;
            }
        }
    }

    /// Show the item at `loc` (hashed to `hash`) if the index still points
    /// at it, and move the cursor past it. False when unlinking it freed
    /// its segment (its last live item): the cursor is then on the next.
    fn visit_one(
        &self,
        shard: &mut Shard,
        cursor: &mut WalkCursor,
        loc: Loc,
        hash: u64,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool,
    ) -> bool {
        let h = Header::decode(shard.item(loc), shard.checked);
        cursor.offset += h.total_len();
        let Some(slot) = shard.table.find(hash, |l| l == loc) else { return true };
        let meta = self.meta(shard, loc, &h);
        let flushed = self.g.is_flushed(meta.last_access, meta.cas, now);
        let expired = meta.exptime != 0 && meta.exptime <= now;
        let item = shard.item(loc);
        let view = ItemView { key: h.key(item), value: h.value(item), meta };
        if !(flushed || expired) {
            visit(view, Visit::Live);
        } else if visit(view, Visit::Expired) {
            let why = if flushed { Gone::Flushed } else { Gone::Expired };
            shard.unlink(&self.g, slot, loc, &h, why);
            let (gen, _, live) = shard.segment_extent(loc.seg);
            if !live || Some(gen) != cursor.gen {
                // Its offsets are no item's any more.
                cursor.segment += 1;
                cursor.gen = None;
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, MapStore, SegStore, StoreRequest, Visit, WalkCursor};
    use std::collections::HashSet;

    fn set(e: &dyn Engine, key: &[u8], exptime: u32) {
        let req = StoreRequest::set(key, b"value").with_exptime(exptime);
        e.store(&req, 10);
    }

    fn walk(e: &dyn Engine, now: u32, reclaim: bool) -> (HashSet<Vec<u8>>, usize, usize) {
        let (mut live, mut reclaimed, mut steps) = (HashSet::new(), 0, 0);
        let mut cursor = WalkCursor::default();
        while !e.walk(&mut cursor, 7, now, &mut |item, how| match how {
            Visit::Live => {
                assert!(live.insert(item.key.to_vec()), "visited twice");
                false
            }
            Visit::Expired => {
                reclaimed += usize::from(reclaim);
                reclaim
            }
        }) {
            steps += 1;
        }
        (live, reclaimed, steps)
    }

    #[test]
    fn walks_every_live_item_once_and_reclaims_expired() {
        let engines: [Box<dyn Engine>; 2] = [Box::new(SegStore::new(EngineConfig::default())), Box::new(MapStore::new(EngineConfig::default()))];
        for e in engines {
            for i in 0..5000u32 {
                set(&*e, format!("key{i}").as_bytes(), if i % 5 == 0 { 20 } else { 0 });
            }
            // Dead copies stay in segments: the walk skips them.
            for i in 0..100u32 {
                set(&*e, format!("key{i}").as_bytes(), if i % 5 == 0 { 20 } else { 0 });
            }
            let (live, reclaimed, steps) = walk(&*e, 15, false);
            assert_eq!((live.len(), reclaimed), (5000, 0));
            assert!(steps > 5000 / 7, "bounded steps");
            let (live, reclaimed, _) = walk(&*e, 30, false);
            assert_eq!((live.len(), reclaimed, e.stats().curr_items), (4000, 0, 5000), "expired items are left");
            let (live, reclaimed, _) = walk(&*e, 30, true);
            assert_eq!((live.len(), reclaimed), (4000, 1000));
            assert_eq!(e.stats().curr_items, 4000);
            let (_, reclaimed, _) = walk(&*e, 30, true);
            assert_eq!(reclaimed, 0);
        }
    }

    /// A crawl that reclaims the last live item of a sealed segment frees
    /// that segment mid-walk: the walk leaves it instead of reading on
    /// into its (now dead) items' offsets.
    #[test]
    fn reclaiming_a_segments_last_item_moves_on() {
        let store = SegStore::new(EngineConfig::default());
        let value = vec![b'v'; 1000];
        let put = |key: &[u8], exptime: u32| {
            let req = StoreRequest::set(key, &value).with_exptime(exptime);
            store.store(&req, 10);
        };
        // Segments (of the TTL's bucket) whose first items expire and whose
        // others are written again, with no TTL, elsewhere (dead copies).
        for i in 0..64u32 {
            put(format!("expires{i}").as_bytes(), 20);
        }
        for exptime in [20, 0] {
            for i in 0..20_000u32 {
                put(format!("key{i}").as_bytes(), exptime);
            }
        }
        let before = store.stats().curr_items;
        let (live, reclaimed, _) = walk(&store, 30, true);
        assert_eq!((live.len(), reclaimed), (20_000, 64));
        assert_eq!(store.stats().curr_items, before - 64);
    }

    /// Walks racing stores, deletes and evictions (a 4 MiB store churned
    /// by 16 MiB of values): every item shown is whole (its value is the
    /// one written for its key) and no walk step panics.
    #[test]
    fn walks_survive_churn() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let store = SegStore::new(EngineConfig { memory_limit_bytes: 4 << 20, ..EngineConfig::default() });
        let stop = AtomicBool::new(false);
        let value_of = |key: &[u8]| -> Vec<u8> {
            let n = key.iter().map(|&b| usize::from(b)).sum::<usize>() % 3000 + 1;
            vec![key[key.len() - 1]; n]
        };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut x = 1u64;
                for _ in 0..200_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let key = format!("churn{}", x >> 50).into_bytes();
                    if x.is_multiple_of(7) {
                        store.delete(&crate::DeleteRequest { key: &key, ..Default::default() }, 10);
                    } else {
                        let value = value_of(&key);
                        let req = StoreRequest::set(&key, &value);
                        store.store(&req, 10);
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
            let mut walks = 0;
            while !stop.load(Ordering::Relaxed) || walks == 0 {
                let mut cursor = WalkCursor::default();
                while !store.walk(&mut cursor, 50, 10, &mut |item, _| {
                    assert_eq!(item.value, &value_of(item.key)[..], "a torn item");
                    false
                }) {}
                walks += 1;
            }
        });
    }
}
