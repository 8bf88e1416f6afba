//! The log's compaction: the larger items' pages are emptied by moving
//! their live records forward, so the file keeps its live bytes, not its
//! newest pages.
//!
//! ```text
//!  server thread strata-flash-compact: FlashTier::flash_compact in a loop,
//!  waiting on the tier's bell (a page taken with few left ready) or 100 ms
//!  while it returns false
//!
//!  plan (tier/compaction.rs): which page, if any, and how
//!    Expired: every record of a page expired or was flushed: nothing read,
//!             its live count dropped (its entries go stale with the page)
//!    Defrag: the sealed page with the fewest live bytes, under ext_max_frag
//!    Evict:  nothing under it and few pages ready: the oldest page
//!  one step: read on through the page (scan.rs: 2 MiB at a time, no lock
//!    held), for each record the key's shard locked once:
//!      its index entry no longer names this record ─► dead: nothing to do
//!      expired or flushed                          ─► entry dropped
//!      Evict, not read since written               ─► left: evicted with the page
//!      else ─► re-encoded into the write buffer (the compactor's pages),
//!              the entry moved to it, the old record forgotten
//!  the page's end: finished (tier: takeable now, what is left evicted)
//! ```
//!
//! The move keeps every field of the item (CAS, flags, TTL, access time,
//! its bits); a record keeps its read count when defragmented and starts
//! again at 0 when rescued from an evicted page (a second chance, as a
//! clock's hand). Lock order is the demotion's: the shard's mutex, then
//! the writer's. A move is the demotion's write and link (the entry names
//! the new record, in a write buffer or on the device) done under the
//! shard lock, so a reader sees the old record or the new one, both the
//! key's current value; the old one goes stale only when its page is
//! reclaimed, after the move.
//!
//! Pace: the compactor waits for a free write buffer before each step
//! (no shard lock held), so it never makes a request wait for the device
//! more than a demotion does, and pauses 1 ms between pages, as
//! memcached's compaction thread does.

use std::sync::atomic::Ordering;

use super::index::Entry;
use super::record;
use super::scan::{PageCursor, Step};
use super::tier::{Plan, Taker, Tier, Times};
use crate::seg::item::FETCHED;
use crate::seg::{hash_key, SegStore};
use crate::RelTime;

/// Device bytes a step reads at most before it returns (a scan read is
/// 2 MiB).
const STEP_BYTES: usize = 4 << 20;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// The compactor's state, owned by its thread
/// ([`FlashTier::flash_compact`](crate::FlashTier::flash_compact)).
#[derive(Debug)]
pub struct FlashCompact {
    cursor: PageCursor,
    /// The page being compacted and whether unread records are left.
    job: Option<(u32, u32, bool)>,
    /// Pages this compactor finished.
    pub pages: u64,
    /// Ready pages when defragmenting began, and pages defragmented since
    /// without one more ready.
    gains: Option<(usize, u32)>,
    /// Defragmenting paid nothing: held until the tier's fresh bytes
    /// (written by others than the compactor) pass this and a page more.
    hold: Option<u64>,
}

/// Pages defragmented in a row with no page more ready, after which the
/// compactor holds off (a page under `ext_max_frag` 0.875 gains one in 8):
/// with records of nearly a page, or an estimate gone wrong, moving them
/// would rewrite the same pages for ever.
const FRUITLESS_PAGES: u32 = 8;

impl Default for FlashCompact {
    fn default() -> FlashCompact {
        FlashCompact { cursor: PageCursor::new(), job: None, pages: 0, gains: None, hold: None }
    }
}

impl FlashCompact {
    /// A page was defragmented: count whether the ready pages grew.
    fn defragged(&mut self, tier: &Tier) {
        let ready = tier.ready();
        match &mut self.gains {
            Some((before, _)) if ready > *before => self.gains = None,
            Some((_, pages)) if *pages + 1 >= FRUITLESS_PAGES => {
                self.gains = None;
                self.hold = Some(tier.fresh_bytes());
            }
            Some((_, pages)) => *pages += 1,
            None => {}
        }
    }
}

/// What became of one record.
enum Moved {
    Dead,
    Expired,
    Left,
    Rescued(usize),
    Lost,
}

impl SegStore {
    /// One step of the compactor (module docs): true if it did some work
    /// (the caller steps again at once), false if no page needs it.
    pub fn flash_compact(&self, now: RelTime, state: &mut FlashCompact) -> bool {
        let Some(tier) = &self.g.flash else { return false };
        if !tier.compactor.swap(true, relaxed()) {
            // From now on pages are taken only once emptied here.
            tier.ring_compactor();
        }
        let (page, version, evict) = match state.job {
            Some(job) => job,
            None => {
                let flushed_until = self.g.flush_in_force(now).then(|| self.g.oldest_live.load(relaxed()));
                let fresh = tier.fresh_bytes();
                if state.hold.is_some_and(|at| fresh >= at + tier.page_size) {
                    state.hold = None;
                }
                let (page, version, evict) = match tier.plan(now, flushed_until, state.hold.is_none()) {
                    Plan::Idle => return false,
                    Plan::Expired { page, version } => {
                        let dropped = tier.finish_expired(page, version);
                        tier.c.compact_expired.fetch_add(dropped, relaxed());
                        tier.c.compact_pages.fetch_add(1, relaxed());
                        state.pages += 1;
                        return true;
                    }
                    Plan::Defrag { page, version } => (page, version, false),
                    Plan::Evict { page, version } => (page, version, true),
                };
                state.cursor.enter(tier, page);
                if state.cursor.version != version {
                    return true; // taken meanwhile: plan again
                }
                state.job = Some((page, version, evict));
                if !evict && state.gains.is_none() {
                    state.gains = Some((tier.ready(), 0));
                }
                (page, version, evict)
            }
        };
        tier.wait_for_spare();
        let mut read = 0;
        while read < STEP_BYTES {
            let (offset, rec) = match state.cursor.step(tier) {
                Step::End => {
                    tier.finish(page, version);
                    tier.c.compact_pages.fetch_add(1, relaxed());
                    if evict {
                        tier.c.compact_evict_pages.fetch_add(1, relaxed());
                    } else {
                        state.defragged(tier);
                    }
                    state.pages += 1;
                    state.job = None;
                    return true;
                }
                Step::Skipped { read: n } => {
                    read += n;
                    tier.c.compact_bytes_read.fetch_add(n as u64, relaxed());
                    continue;
                }
                Step::Record { offset, rec, read: n } => {
                    read += n;
                    tier.c.compact_bytes_read.fetch_add(n as u64, relaxed());
                    (offset, rec)
                }
            };
            let c = &tier.c;
            match self.move_record(tier, (page, version, offset), &rec, evict, now) {
                Moved::Dead => {}
                Moved::Expired => {
                    c.compact_expired.fetch_add(1, relaxed());
                }
                Moved::Left => {
                    c.compact_skipped.fetch_add(1, relaxed());
                }
                Moved::Rescued(len) => {
                    c.compact_rescues.fetch_add(1, relaxed());
                    c.compact_bytes_moved.fetch_add(len as u64, relaxed());
                }
                Moved::Lost => {
                    c.compact_lost.fetch_add(1, relaxed());
                }
            }
        }
        true
    }

    /// Wait for the compactor's bell, at most `max`.
    pub fn flash_compact_wait(&self, max: std::time::Duration) {
        if let Some(tier) = &self.g.flash {
            tier.wait_compactor(max);
        }
    }

    /// Move `rec`, found at (`page`, `version`, `offset`), if it is still
    /// its key's current copy (module docs).
    fn move_record(&self, tier: &Tier, (page, version, offset): (u32, u32, u64), rec: &record::Record<'_>, evict: bool, now: RelTime) -> Moved {
        let hash = hash_key(rec.key);
        let mut guard = self.lock(hash);
        let Some(fi) = guard.flash.as_mut() else { return Moved::Dead };
        let Some(i) = fi.find_at(hash, page, offset) else { return Moved::Dead };
        if tier.version(page) != version {
            return Moved::Dead;
        }
        let e = fi.get(i);
        let m = rec.meta;
        if self.g.is_flushed(m.access, m.cas, now) || (m.exptime != 0 && m.exptime <= now) {
            fi.remove(i);
            tier.forget(e.page, e.version4);
            return Moved::Expired;
        }
        if evict && e.freq == 0 {
            return Moved::Left;
        }
        let meta = record::Meta { bits: if e.freq > 0 { m.bits | FETCHED } else { m.bits }, ..m };
        let times = Times { exptime: m.exptime, access: m.access };
        let placed = tier.append(Taker::Compaction, rec.len, times, |out, seed| {
            record::encode(out, rec.key, rec.value, &meta, seed);
        });
        let Some(p) = placed else { return Moved::Lost };
        tier.forget(e.page, e.version4);
        let freq = if evict { 0 } else { e.freq };
        fi.set(i, hash, &Entry { page: p.page, offset: p.offset, blocks: p.blocks, version4: (p.version & 0xf) as u8, freq });
        Moved::Rescued(rec.len)
    }
}
