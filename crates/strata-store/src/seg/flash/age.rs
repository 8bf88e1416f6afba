//! The idle writer (`ext_item_age`): items idle longer than `ext_item_age`
//! seconds go to flash with no memory pressure, as memcached's storage
//! write thread (`storage.c`, `storage_write`) sends them from the tail of
//! its COLD LRU once `current_time - it->time > ext_item_age`. Under memory
//! pressure memcached writes with an age of 0, which here is eviction's
//! offer to flash (`Shard::demote_to_flash`, no age rule).
//!
//! ```text
//!  server thread strata-flash-age, once a second: FlashTier::flash_write_idle
//!    shard by shard, segment by segment, items in append order (a segment
//!    may hold items older than itself: kept by eviction, or brought back
//!    from flash, with their access times), under the shard's lock
//!    for at most BATCH_ITEMS items looked at or half a write buffer
//!    written, then the lock is let go (and, before the next batch, a
//!    free write buffer awaited with no lock held, so a batch waits for
//!    the device under the lock only if eviction took that buffer first)
//!  each linked item: >= ext_item_size, idle > ext_item_age, not expired or
//!    flushed, ext_low_ttl left -> written to flash, unlinked from RAM
//!    (not an eviction); a sealed segment left empty goes back to the pool
//!  per sealed segment, a memo (generation, due): the earliest second an
//!    item left in it can qualify, so a segment of small or busy items is
//!    not walked again every second (open segments, one per TTL bucket and
//!    queue, are walked every pass)
//! ```
//!
//! With the default `ext_item_age` (unlimited) a pass returns at once; with
//! no `ext_path` the thread does not exist, and requests never see any of
//! this.

use super::super::item::Header;
use super::super::shard::{Gone, Shard};
use super::super::table::Loc;
use super::super::{hash_key, SegStore};
use crate::ext_config::ITEM_AGE_UNLIMITED;
use crate::RelTime;

/// Items looked at per lock hold.
const BATCH_ITEMS: usize = 64;

/// A segment whose items can never qualify (too small, TTL too short).
const NEVER: RelTime = RelTime::MAX;

/// What the idle writer remembers between passes; owned by its thread.
#[derive(Debug, Default)]
pub struct FlashIdle {
    /// Per shard, per segment id: (generation, the first second an item
    /// left in it may qualify).
    memos: Vec<Vec<(u32, RelTime)>>,
    /// The tunables the memos were made under (age, item size, low TTL).
    rules: (u32, u32, u32),
    /// Items written to flash by this writer.
    pub written: u64,
}

/// How a batch of a segment's walk ended.
enum Batch {
    /// More items to look at after letting the lock go.
    More,
    /// The segment's end was reached.
    End,
    /// Its last item left: the segment went back to the pool.
    Freed,
}

/// One segment's walk.
struct SegWalk {
    id: u32,
    gen: u32,
    offset: usize,
    end: usize,
    /// The first second an item left behind may qualify.
    due: RelTime,
}

impl SegStore {
    /// One pass of the idle writer over the whole cache (see the module
    /// docs, and [`FlashTier::flash_write_idle`](crate::FlashTier::flash_write_idle)).
    /// Returns the items it wrote (0 without a tier).
    pub fn flash_write_idle(&self, now: RelTime, state: &mut FlashIdle) -> u64 {
        let Some(tier) = &self.g.flash else { return 0 };
        let t = &tier.tunables;
        let r = std::sync::atomic::Ordering::Relaxed;
        let rules = (t.item_age.load(r), t.item_size.load(r), t.low_ttl.load(r));
        let age = rules.0;
        if age == ITEM_AGE_UNLIMITED {
            return 0;
        }
        if state.rules != rules || state.memos.len() != self.shards.len() {
            state.memos = vec![Vec::new(); self.shards.len()];
            state.rules = rules;
        }
        let mut written = 0;
        for (i, padded) in self.shards.iter().enumerate() {
            let memos = &mut state.memos[i];
            let mut next = 0u32;
            loop {
                tier.wait_for_spare();
                let mut guard = padded.lock();
                // The next segment worth walking.
                let mut walk = None;
                while (next as usize) < guard.segs.len() {
                    let id = next;
                    next += 1;
                    let (gen, end, live) = guard.segment_extent(id);
                    let memo = memos.get(id as usize).copied();
                    if live && !memo.is_some_and(|(g, due)| g == gen && due > now) {
                        // An open segment takes new items, some with an old
                        // access time (brought back from flash, kept by
                        // eviction): walked every pass.
                        let open = guard.segs[id as usize].is_open();
                        let due = if open { now.saturating_add(1) } else { NEVER };
                        walk = Some(SegWalk { id, gen, offset: self.g.data_start, end, due });
                        break;
                    }
                }
                let Some(mut walk) = walk else { break };
                loop {
                    match self.idle_batch(&mut guard, &mut walk, now, rules, &mut written) {
                        Batch::More => {
                            // Let requests in, then go on where this batch stopped.
                            drop(guard);
                            tier.wait_for_spare();
                            guard = padded.lock();
                            let (gen, _, live) = guard.segment_extent(walk.id);
                            if !live || gen != walk.gen {
                                break;
                            }
                        }
                        Batch::End => {
                            if memos.len() <= walk.id as usize {
                                memos.resize(walk.id as usize + 1, (u32::MAX, 0));
                            }
                            memos[walk.id as usize] = (walk.gen, walk.due);
                            break;
                        }
                        Batch::Freed => break,
                    }
                }
            }
        }
        state.written += written;
        written
    }

    /// Look at up to [`BATCH_ITEMS`] items of `walk`'s segment (or fewer,
    /// once half a write buffer went to flash), under the lock held.
    fn idle_batch(&self, shard: &mut Shard, walk: &mut SegWalk, now: RelTime, rules: (u32, u32, u32), written: &mut u64) -> Batch {
        let Some(tier) = &self.g.flash else { return Batch::End };
        let (age, item_size, low_ttl) = rules;
        let (mut looked, mut bytes) = (0, 0);
        while walk.offset < walk.end {
            if looked == BATCH_ITEMS || bytes >= tier.wbuf_size / 2 {
                return Batch::More;
            }
            looked += 1;
            let loc = Loc { seg: walk.id, offset: walk.offset as u32 };
            let item = shard.item(loc);
            let h = Header::decode(item, shard.checked);
            walk.offset += h.total_len();
            let hash = hash_key(h.key(item));
            let Some(slot) = shard.table.find(hash, |l| l == loc) else { continue };
            let seg = shard.seg(loc);
            let access = h.access(item, seg.create_time);
            let exptime = h.exptime(item);
            if self.g.is_flushed(access, h.cas(item, seg.cas_base), now) || (exptime != 0 && exptime <= now) {
                continue; // expiry's to drop, not ours to write
            }
            let (_, size) = self.g.item_class(&h);
            if size < item_size as usize || (exptime != 0 && exptime - now < low_ttl) {
                continue;
            }
            if now.saturating_sub(access) <= age {
                walk.due = walk.due.min(access.saturating_add(age).saturating_add(1));
                continue;
            }
            if !shard.demote_to_flash(&self.g, loc, &h, hash, now) {
                walk.due = walk.due.min(now.saturating_add(1)); // no room on flash now
                continue;
            }
            shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
            *written += 1;
            bytes += h.total_len();
            let (gen, _, live) = shard.segment_extent(walk.id);
            if !live || gen != walk.gen {
                return Batch::Freed;
            }
        }
        Batch::End
    }
}
