//! The pages' lives: free, open (one for the write buffers, one for the
//! small store's rewrite stream), sealed in FIFO order, and taken again.
//!
//! ```text
//!  Free ──take──► Open ──seal──► Sealed (FIFO: oldest first)
//!   ▲                                │ takeable: the small store holds
//!   └──── reclaim (new version) ◄────┘ nothing on it, no write in flight,
//!                                      and with a compactor nothing live
//!                                      left (or the compactor finished it)
//! ```
//!
//! Without a compactor (a store stepped by hand: tests, lab tools) a
//! sealed page is taken as soon as the small store holds nothing on it,
//! oldest first: FIFO eviction of whatever larger records it still holds.
//! With one (`compact.rs`, the server's `strata-flash-compact`), a page
//! is taken only once it holds nothing live; the compactor moves the live
//! records off the emptiest pages ahead of need, and evicts only when no
//! page is under `ext_max_frag` (the file is nearly full of live data).
//! When the write buffers find no page ready the item is not written to
//! flash (`extstore_compact_behind`, and `write_fallbacks` by the caller).
//!
//! Reclaiming bumps the page's version, which makes every index entry
//! and record on it stale at once (`is_stale`; a record's check is seeded
//! with the full version).

use std::sync::atomic::Ordering;

use xxhash_rust::xxh3::xxh3_64;

use super::super::page_table::PageTable;
use super::super::record;
use super::{lock, Inner, Times, Writer, BLOCK, NO_PAGE, PAGE_MAGIC, SEQ_LIMIT};
use crate::flash_read::FLASH_ALIGN_BYTES;

/// Pages the write buffers leave to the compactor's moves.
pub const COMPACT_RESERVE_PAGES: usize = 1;

/// Who asks for a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taker {
    /// The write buffers (items leaving RAM).
    Buffer,
    /// The compactor's moves (through the same write buffers).
    Compaction,
    /// The small store's rewrite stream.
    Stream,
}

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

impl Inner {
    /// Everything on `page` is lost (a failed write): a new version makes
    /// its entries stale (the caller puts it back in the FIFO).
    pub(super) fn retire(&self, w: &mut Writer, page: u32) {
        self.reclaim(page);
        let version = self.versions[page as usize].fetch_add(1, relaxed()) + 1;
        if let Some(t) = &self.table {
            lock(t).set_version(page, version);
        }
        // Every page failing in a row: stop writing (fallback).
        if self.c.write_errors.load(relaxed()) >= 2 * self.spots.len() as u64 + 2 {
            w.failed = true;
        }
    }

    /// Rebuild versions, the FIFO and the written extents from the table.
    pub(super) fn restore(&mut self, table: &PageTable) {
        let w = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut used: Vec<(u64, u32)> = Vec::new();
        w.free.clear();
        for p in 0..self.spots.len() as u32 {
            let (version, written, seq) = match table.page(p) {
                // Damage: the page is lost (a new version makes every entry
                // and log block on it stale) and free.
                (version, _, seq) if seq >= SEQ_LIMIT => (version.wrapping_add(1), 0, 0),
                entry => entry,
            };
            self.versions[p as usize].store(version, relaxed());
            self.written_blocks[p as usize].store(written, relaxed());
            self.page_seq[p as usize].store(seq, relaxed());
            if seq == 0 {
                w.free.push_back(p);
            } else {
                used.push((seq, p));
            }
        }
        used.sort_unstable();
        self.free_pages.store(w.free.len() as u64, relaxed());
        w.sealed = used.iter().map(|&(_, p)| p).collect();
        let next = used.last().map_or(1, |&(seq, _)| seq + 1);
        self.next_seq.store(next, relaxed());
        self.oldest_seq.store(used.first().map_or(next, |&(seq, _)| seq), relaxed());
    }

    /// Recovery: an entry is kept if its page still has its version and
    /// its record was written before the stop (counted live).
    pub fn recover_entry(&self, page: u32, version4: u8, offset: u64, blocks: u32) -> bool {
        let p = page as usize;
        if p >= self.spots.len() || self.is_stale(page, version4) {
            return false;
        }
        let written = u64::from(self.written_blocks[p].load(relaxed())) * BLOCK;
        // The record's header must lie within the blocks its read reads.
        if offset + record::HEADER as u64 > written || offset % BLOCK + record::HEADER as u64 > u64::from(blocks) * BLOCK {
            return false;
        }
        self.live_items[p].fetch_add(1, relaxed());
        self.written_items[p].fetch_add(1, relaxed());
        self.written_bytes[p].store(written, relaxed());
        // Its record's times are not known here: as if it never expired.
        self.expiry_max[p].store(u32::MAX, relaxed());
        self.access_max[p].store(u32::MAX, relaxed());
        true
    }

    pub(super) fn persist_page(&self, page: u32) {
        if let Some(t) = &self.table {
            let p = page as usize;
            lock(t).set_page(page, self.versions[p].load(relaxed()), self.written_blocks[p].load(relaxed()), self.page_seq[p].load(relaxed()));
        }
    }

    pub fn page_count(&self) -> usize {
        self.spots.len()
    }

    /// Pages never written since the start.
    pub fn free_page_count(&self) -> u64 {
        self.free_pages.load(relaxed())
    }

    /// The FIFO sequence of the oldest sealed page (the next reclaimed).
    pub fn oldest_sealed_seq(&self) -> u64 {
        self.oldest_seq.load(relaxed())
    }

    /// Bytes of `page` known to be on flash.
    pub fn written_bytes_of(&self, page: u32) -> u64 {
        u64::from(self.written_blocks[page as usize].load(relaxed())) * BLOCK
    }

    pub fn version(&self, page: u32) -> u32 {
        self.versions[page as usize].load(relaxed())
    }

    /// An entry for (`page`, `version`) that is no longer current.
    pub fn is_stale(&self, page: u32, version4: u8) -> bool {
        (self.version(page) & 0xf) as u8 != version4 & 0xf
    }

    /// Account a live record leaving flash (replaced, deleted, read back).
    pub fn forget(&self, page: u32, version4: u8) {
        if self.is_stale(page, version4) {
            return;
        }
        let _ = self.live_items[page as usize].fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(1)));
    }

    /// Bytes of live records on `page` (estimated from its average record).
    pub(super) fn live_bytes(&self, p: usize) -> u64 {
        let written = self.written_items[p].load(relaxed());
        if written == 0 {
            return 0;
        }
        self.live_items[p].load(relaxed()) * self.written_bytes[p].load(relaxed()) / written
    }

    /// The small store let go of `blocks` 4 KiB blocks on `page` (placed
    /// under `version`: blocks of a page reclaimed since are not counted).
    pub fn release_small(&self, page: u32, version: u32, blocks: u32) {
        if self.version(page) == version {
            let _ = self.small_live[page as usize].fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(blocks)));
        }
    }

    /// Count a record appended to `page`.
    pub(super) fn note_record(&self, page: u32, len: usize, times: Times) {
        let p = page as usize;
        let exptime = if times.exptime == 0 { u32::MAX } else { times.exptime };
        self.expiry_max[p].fetch_max(exptime, relaxed());
        self.access_max[p].fetch_max(times.access, relaxed());
        self.live_items[page as usize].fetch_add(1, relaxed());
        self.written_items[page as usize].fetch_add(1, relaxed());
        self.written_bytes[page as usize].fetch_add(len as u64, relaxed());
        self.c.objects_written.fetch_add(1, relaxed());
    }

    /// Whether `page` (sealed) may be taken for writing now. Without a
    /// compactor: once the small store holds nothing on it (FIFO
    /// eviction, today's records or not). With one: only once nothing
    /// live is left on it either, or the compactor has finished it (what
    /// it left there is evicted). Never while a write to it is in flight.
    pub(super) fn takeable(&self, w: &Writer, page: u32, compactor: bool) -> bool {
        let p = page as usize;
        self.small_live[p].load(relaxed()) == 0
            && (!compactor || self.live_items[p].load(relaxed()) == 0 || self.finished[p].load(relaxed()) == self.version(page))
            && !w.inflight.iter().any(|job| job.page == page)
    }

    /// Whether `page` (sealed) may be taken by FIFO eviction: the small
    /// store holds nothing on it and no write to it is in flight.
    fn evictable(&self, w: &Writer, page: u32) -> bool {
        self.small_live[page as usize].load(relaxed()) == 0 && !w.inflight.iter().any(|job| job.page == page)
    }

    /// Pages that could be written next: free ones and takeable sealed ones.
    pub(super) fn ready_pages(&self, w: &Writer, compactor: bool) -> usize {
        w.free.len() + w.sealed.iter().filter(|&&p| self.takeable(w, p, compactor)).count()
    }

    /// A page to write next (module docs): a free one, else the oldest
    /// takeable sealed one (reclaimed: what it still held is evicted).
    /// Pages are kept back for others: the write buffers leave
    /// `stream_reserve` to the small store's rewrites, which need room to
    /// move data off the pages they free, and, with a compactor, one more
    /// to its moves. None: no page for `who` now (counted).
    pub(super) fn take_page(&self, w: &mut Writer, who: Taker) -> Option<u32> {
        if w.failed {
            return None;
        }
        let compactor = self.compactor.load(relaxed());
        let stream = self.stream_reserve.load(relaxed()) as usize;
        let reserve = match who {
            Taker::Stream => 0,
            Taker::Compaction => stream,
            Taker::Buffer => stream + if compactor { COMPACT_RESERVE_PAGES } else { 0 },
        };
        // Free pages first; a sealed one only when none is left.
        let ready = if w.free.len() > reserve { usize::MAX } else { self.ready_pages(w, compactor) };
        let mut at = if ready <= reserve || !w.free.is_empty() { None } else { w.sealed.iter().position(|&p| self.takeable(w, p, compactor)) };
        // A compactor is behind, or the file is full of live data: with
        // no page under ext_max_frag left to empty, the oldest page is
        // evicted now (FIFO), as without a compactor, rather than the item
        // going nowhere. Its moves still take the reserve.
        let full = at.is_none() && compactor && who == Taker::Buffer && ready <= reserve && !self.defraggable(w);
        if full {
            at = w.sealed.iter().position(|&p| self.evictable(w, p));
        }
        let page = if full || (ready > reserve && w.free.is_empty()) {
            at.map(|at| self.take_sealed(w, at, compactor))
        } else if ready > reserve {
            let p = w.free.pop_front();
            self.free_pages.store(w.free.len() as u64, relaxed());
            p
        } else {
            None
        };
        let Some(page) = page else {
            if w.sealed.iter().any(|&p| self.small_live[p as usize].load(relaxed()) > 0) {
                self.c.tail_blocked.fetch_add(1, relaxed());
            }
            if compactor && who == Taker::Buffer {
                self.c.compact_behind.fetch_add(1, relaxed());
            }
            self.ring_compactor();
            return None;
        };
        if compactor && self.ready_pages(w, true) < self.compact_under() as usize + stream {
            self.ring_compactor();
        }
        Some(page)
    }

    /// Take sealed page number `at` of the FIFO: reclaimed (what it still
    /// holds is evicted).
    fn take_sealed(&self, w: &mut Writer, at: usize, compactor: bool) -> u32 {
        if at > 0 && !compactor {
            self.c.tail_skips.fetch_add(1, relaxed());
        }
        let p = w.sealed.remove(at).expect("a sealed page");
        self.reclaim(p);
        if at == 0 {
            if let Some(&next) = w.sealed.front() {
                self.oldest_seq.store(self.page_seq[next as usize].load(relaxed()), relaxed());
            }
        }
        p
    }

    /// Open `page` for writing: a new version (every entry and record on
    /// it stale), the next FIFO sequence, nothing written. Its version.
    pub(super) fn start_page(&self, w: &Writer, page: u32) -> u32 {
        let version = self.versions[page as usize].fetch_add(1, relaxed()) + 1;
        let seq = self.next_seq.fetch_add(1, relaxed());
        self.page_seq[page as usize].store(seq, relaxed());
        if w.sealed.is_empty() {
            self.oldest_seq.store(seq, relaxed());
        }
        self.written_blocks[page as usize].store(0, relaxed());
        self.expiry_max[page as usize].store(0, relaxed());
        self.access_max[page as usize].store(0, relaxed());
        self.persist_page(page);
        self.c.page_allocs.fetch_add(1, relaxed());
        version
    }

    /// The header block of a page opened under `version`.
    pub(super) fn page_header(&self, page: u32, version: u32, header: &mut [u8]) {
        header.fill(0);
        header[0..8].copy_from_slice(PAGE_MAGIC);
        header[8..12].copy_from_slice(&page.to_le_bytes());
        header[12..16].copy_from_slice(&version.to_le_bytes());
        header[16..24].copy_from_slice(&self.secret.to_le_bytes());
        let check = xxh3_64(&header[0..24]) as u32;
        header[24..28].copy_from_slice(&check.to_le_bytes());
    }

    pub(super) fn open_page(&self, w: &mut Writer, who: Taker) -> Option<()> {
        let page = self.take_page(w, who)?;
        let version = self.start_page(w, page);
        w.page = page;
        w.page_off = 0;
        // The header block goes out with the page's first write.
        let mut header = [0u8; FLASH_ALIGN_BYTES];
        self.page_header(page, version, &mut header);
        w.wbuf[..FLASH_ALIGN_BYTES].copy_from_slice(&header);
        w.fill = FLASH_ALIGN_BYTES;
        self.open_page.store(page, relaxed());
        Some(())
    }

    /// A page leaves the FIFO to be rewritten: everything on it is gone.
    pub(super) fn reclaim(&self, page: u32) {
        let p = page as usize;
        // Whatever the small store still had here is gone (a failed write).
        self.small_live[p].store(0, relaxed());
        let bytes = self.live_bytes(p);
        let items = self.live_items[p].swap(0, relaxed());
        self.written_items[p].store(0, relaxed());
        self.written_bytes[p].store(0, relaxed());
        if items > 0 {
            self.c.page_evictions.fetch_add(1, relaxed());
            self.c.objects_evicted.fetch_add(items, relaxed());
            self.c.bytes_evicted.fetch_add(bytes, relaxed());
        } else {
            self.c.page_reclaims.fetch_add(1, relaxed());
        }
        self.reclaims.fetch_add(1, relaxed());
    }

    pub(super) fn seal(&self, w: &mut Writer) {
        if w.page != NO_PAGE {
            w.sealed.push_back(w.page);
            if w.sealed.len() == 1 {
                self.oldest_seq.store(self.page_seq[w.page as usize].load(relaxed()), relaxed());
            }
        }
        w.page = NO_PAGE;
        self.open_page.store(NO_PAGE, relaxed());
    }
}
