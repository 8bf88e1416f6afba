//! What the tier tells its compactor (`seg/flash/compact.rs`): whether a
//! page is needed, which page to empty next, and its bell.
//!
//! ```text
//!  ready = free pages + sealed pages nothing live is left on (pages.rs)
//!  ready ≥ ext_compact_under (+ the small store's reserve) ─► Idle
//!  a page all of whose records expired or were flushed
//!    (the latest expiry and access of its records)  ─► Expired: nothing to read
//!  the sealed page with the fewest live bytes,
//!    under ext_max_frag of a page, while the live
//!    bytes leave the file room for the target     ─► Defrag: move every live record
//!  none (the file is nearly full of live data),
//!    ready < ext_drop_under                       ─► Evict: the oldest page; its
//!                                                    records read since written
//!                                                    are moved, the rest evicted
//!  else                                           ─► Idle
//! ```
//!
//! Only sealed pages the small store holds nothing on are looked at (its
//! merges empty its pages, `small/sched.rs`), never one with a write in
//! flight, nor one the compactor already finished under its version.
//! Live bytes are estimated from the page's live records and their mean
//! length (`pages.rs`' `live_bytes`). Ties go to the older page.
//!
//! The thresholds count pages: `ext_compact_under` and `ext_drop_under`
//! as set, else 1% of the pages (memcached's defaults), in both cases at
//! least [`MIN_UNDER`]: one page for the write buffers to take while the
//! compactor works, one that only its moves may take, and one to spare.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pages::COMPACT_RESERVE_PAGES;
use super::{lock, Inner, Writer};
use crate::RelTime;

/// The fewest ready pages the compactor keeps.
pub const MIN_UNDER: u32 = COMPACT_RESERVE_PAGES as u32 + 2;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// The compactor's next job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Enough pages are ready, or none can be made so.
    Idle,
    /// Every record of `page` expired or was flushed: nothing to read.
    Expired { page: u32, version: u32 },
    /// Move every live record off `page` (written under `version`).
    Defrag { page: u32, version: u32 },
    /// Move the records read since written off `page`; evict the rest.
    Evict { page: u32, version: u32 },
}

impl Inner {
    /// Ready pages below which the compactor works.
    pub fn compact_under(&self) -> u32 {
        self.tunables.compact_under.load(relaxed()).max(MIN_UNDER)
    }

    /// Ready pages below which, with nothing under `ext_max_frag`, it evicts.
    pub fn drop_under(&self) -> u32 {
        self.tunables.drop_under.load(relaxed()).max(MIN_UNDER)
    }

    /// The compactor's next job (module docs) at `now`; `flushed_until`:
    /// items last accessed then or before are flushed (a flush_all in
    /// force); `defrag`: false while defragmenting is held off
    /// (`compact.rs`).
    pub fn plan(&self, now: RelTime, flushed_until: Option<RelTime>, defrag: bool) -> Plan {
        let w = lock(&self.writer);
        let ready = self.ready_pages(&w, true);
        // The small store's rewrites keep pages of their own back.
        let stream = self.stream_reserve.load(relaxed()) as usize;
        if ready >= self.compact_under() as usize + stream {
            return Plan::Idle;
        }
        let mut oldest = None;
        for (page, version) in self.candidates(&w) {
            let p = page as usize;
            let expiry = self.expiry_max[p].load(relaxed());
            if (expiry != u32::MAX && expiry <= now) || flushed_until.is_some_and(|until| self.access_max[p].load(relaxed()) <= until) {
                return Plan::Expired { page, version };
            }
            // `sealed` is oldest first: the first of equals stays.
            oldest = oldest.or(Some((page, version)));
        }
        if let Some(page) = self.emptiest(&w).filter(|_| defrag) {
            return Plan::Defrag { page, version: self.version(page) };
        }
        match oldest {
            Some((page, version)) if ready < self.drop_under() as usize + stream => Plan::Evict { page, version },
            _ => Plan::Idle,
        }
    }

    /// Live bytes under which a page is worth emptying: `ext_max_frag` of
    /// a page.
    fn frag_limit(&self) -> u64 {
        (self.tunables.max_frag() * self.page_size as f64) as u64
    }

    /// The pages the compactor may take up, oldest first, with their
    /// versions ([`Self::is_candidate`]).
    fn candidates<'a>(&'a self, w: &'a Writer) -> impl Iterator<Item = (u32, u32)> + 'a {
        w.sealed.iter().copied().filter(move |&page| self.is_candidate(w, page)).map(|page| (page, self.version(page)))
    }

    /// Whether the compactor may take up sealed `page`: nothing of the
    /// small store's on it, something live left, not finished under its
    /// version, no write in flight.
    fn is_candidate(&self, w: &Writer, page: u32) -> bool {
        let p = page as usize;
        self.small_live[p].load(relaxed()) == 0
            && self.finished[p].load(relaxed()) != self.version(page)
            && self.live_items[p].load(relaxed()) > 0
            && !w.inflight.iter().any(|job| job.page == page)
    }

    /// The page to defragment: the candidate with the fewest live bytes
    /// under `ext_max_frag` of a page, if emptying pages can still make
    /// the target ready (`compact_under` + the small store's reserve).
    /// Records do not span pages, so a page holds its size less up to a
    /// record: when the live bytes of the pages not ready, with the open
    /// one, need more pages of that than the file has beside the target,
    /// moving them around only rewrites the same pages (None: evict, if
    /// pages are wanted). Ties go to the older page.
    fn emptiest(&self, w: &Writer) -> Option<u32> {
        let limit = self.frag_limit();
        let (mut live, mut written, mut records) = (0, 0, 0);
        let mut pick: Option<(u64, u32)> = None;
        for &page in w.sealed.iter() {
            let p = page as usize;
            let small = self.small_live[p].load(relaxed()) > 0;
            let bytes = if self.takeable(w, page, true) { 0 } else { self.live_bytes(p) };
            // The small store's pages count as full.
            live += if small { self.page_size } else { bytes };
            written += self.written_bytes[p].load(relaxed());
            records += self.written_items[p].load(relaxed());
            if bytes < limit && self.is_candidate(w, page) && pick.is_none_or(|(least, _)| bytes < least) {
                pick = Some((bytes, page));
            }
        }
        let mean = if records == 0 { 0 } else { written / records };
        let room = self.page_size.saturating_sub(mean).max(1);
        // The open page: what it holds so far.
        live += w.page_off + w.fill as u64;
        let needed = live.div_ceil(room);
        let target = u64::from(self.compact_under()) + u64::from(self.stream_reserve.load(relaxed()));
        let pages = (w.free.len() + w.sealed.len()) as u64 + 1;
        (needed + target <= pages).then_some(pick?.1)
    }

    /// Whether a page is left to defragment ([`Self::emptiest`]): if not,
    /// the file is full of live data and a page wanted now is evicted
    /// (`pages.rs`) rather than the item going nowhere.
    pub(super) fn defraggable(&self, w: &Writer) -> bool {
        self.emptiest(w).is_some()
    }

    /// The compactor is done with `page` (entered under `version`): what
    /// is left on it may go when the page is taken.
    pub fn finish(&self, page: u32, version: u32) {
        let _w = lock(&self.writer);
        if self.version(page) == version {
            self.finished[page as usize].store(version, relaxed());
        }
    }

    /// Every record of `page` (under `version`) expired or was flushed:
    /// counted as dropped, and the page finished with nothing read (the
    /// entries still naming it go stale when it is taken).
    pub fn finish_expired(&self, page: u32, version: u32) -> u64 {
        let _w = lock(&self.writer);
        if self.version(page) != version {
            return 0;
        }
        self.finished[page as usize].store(version, relaxed());
        self.live_items[page as usize].swap(0, relaxed())
    }

    /// Pages ready now (free, or sealed with nothing live left).
    pub fn ready(&self) -> usize {
        self.ready_pages(&lock(&self.writer), true)
    }

    /// Bytes written to the device by others than the compactor's moves.
    pub fn fresh_bytes(&self) -> u64 {
        self.c.bytes_written.load(relaxed()).saturating_sub(self.c.compact_bytes_moved.load(relaxed()))
    }

    /// Wake the compactor.
    pub fn ring_compactor(&self) {
        *lock(&self.compact_bell.0) = true;
        self.compact_bell.1.notify_all();
    }

    /// The compactor waits for its bell, at most `max`.
    pub fn wait_compactor(&self, max: Duration) {
        let rung = lock(&self.compact_bell.0);
        let (mut rung, _) = self.compact_bell.1.wait_timeout_while(rung, max, |r| !*r).unwrap_or_else(|e| e.into_inner());
        *rung = false;
    }
}
