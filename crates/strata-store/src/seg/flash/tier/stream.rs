//! The rewrite stream: how the small store's merges write a partition's
//! new extent, beside the write buffers and not through them.
//!
//! ```text
//!  pages:  … │ page k (write buffers: records, log blocks) │ … │ page m (stream) │ …
//!  stream: the merge thread's own open page; it writes whole chunks of
//!          sets (and then the filters) with one pwrite each, in order, so
//!          an extent lies contiguous in at most a few pages (a set never
//!          straddles two), and is on the device before its commit
//! ```
//!
//! The stream takes pages from the same free list and FIFO as the write
//! buffers (`take_page`: a sealed page is reclaimed only when the small
//! store holds nothing on it) and seals a page into the FIFO when a
//! chunk no longer fits. Only one thread writes it (the rewrite thread),
//! so it needs no buffer of its own: the merge's chunk buffer is written
//! as it is (aligned for direct I/O). What it wrote counts as the small
//! store's live data on the page until the small store lets it go.

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::{lock, Inner, Taker, BLOCK, NO_PAGE};
use crate::flash_read::{FlashBuf, FLASH_ALIGN_BYTES};

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// The stream's open page (NO_PAGE: none) and where its next write goes.
#[derive(Debug)]
pub struct Stream {
    page: u32,
    off: u64,
}

impl Default for Stream {
    fn default() -> Stream {
        Stream { page: NO_PAGE, off: 0 }
    }
}

/// A stretch of 4 KiB blocks the stream wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub page: u32,
    pub version: u32,
    pub first_block: u32,
    pub blocks: u32,
}

impl Inner {
    /// Write `data` (whole `unit`s, each a multiple of 4 KiB, never split
    /// across pages) at the stream's place, opening and sealing pages as
    /// needed. Before its write each unit is passed to `seal` with its
    /// page's record seed and its first block's number in the page; each
    /// stretch written is passed to `wrote`. False on a write error or
    /// when no page can be had (what was written stays counted: the
    /// caller lets it go).
    pub fn stream_write(&self, s: &mut Stream, data: &mut [u8], unit: usize, mut seal: impl FnMut(&mut [u8], u64, u32), mut wrote: impl FnMut(Written)) -> bool {
        debug_assert!(unit > 0 && unit % FLASH_ALIGN_BYTES == 0 && data.len() % unit == 0);
        let mut at = 0;
        while at < data.len() {
            if (s.page == NO_PAGE || s.off + unit as u64 > self.page_size) && !self.stream_page(s) {
                return false;
            }
            let room = ((self.page_size - s.off) as usize / unit) * unit;
            let n = room.min(data.len() - at);
            let page = s.page;
            let version = self.version(page);
            let seed = super::record::seed(self.secret, page, version);
            for (i, u) in data[at..at + n].chunks_exact_mut(unit).enumerate() {
                seal(u, seed, ((s.off + (i * unit) as u64) / BLOCK) as u32);
            }
            let spot = &self.spots[page as usize];
            if self.files[spot.file].write_all_at(&data[at..at + n], spot.base + s.off).is_err() {
                self.stream_failed(s);
                return false;
            }
            let blocks = (n / FLASH_ALIGN_BYTES) as u32;
            self.small_live[page as usize].fetch_add(blocks, relaxed());
            self.c.bytes_written.fetch_add(n as u64, relaxed());
            let first_block = (s.off / BLOCK) as u32;
            s.off += n as u64;
            self.written_blocks[page as usize].store((s.off / BLOCK) as u32, relaxed());
            self.persist_page(page);
            wrote(Written { page, version, first_block, blocks });
            at += n;
        }
        true
    }

    /// Seal the stream's page (if any) and open the next one, its header
    /// block written.
    fn stream_page(&self, s: &mut Stream) -> bool {
        let mut w = lock(&self.writer);
        if s.page != NO_PAGE {
            w.sealed.push_back(s.page);
            if w.sealed.len() == 1 {
                self.oldest_seq.store(self.page_seq[s.page as usize].load(relaxed()), relaxed());
            }
            s.page = NO_PAGE;
        }
        let Some(page) = self.take_page(&mut w, Taker::Stream) else { return false };
        let version = self.start_page(&w, page);
        drop(w);
        let mut header = FlashBuf::new(FLASH_ALIGN_BYTES);
        self.page_header(page, version, &mut header);
        let spot = &self.spots[page as usize];
        if self.files[spot.file].write_all_at(&header, spot.base).is_err() {
            s.page = page;
            self.stream_failed(s);
            return false;
        }
        self.written_blocks[page as usize].store(1, relaxed());
        self.persist_page(page);
        *s = Stream { page, off: BLOCK };
        true
    }

    /// A write of the stream failed: its page is retired (a new version:
    /// nothing on it is served) and sealed; the next write opens another.
    fn stream_failed(&self, s: &mut Stream) {
        let page = s.page;
        self.c.write_errors.fetch_add(1, relaxed());
        let mut w = lock(&self.writer);
        self.retire(&mut w, page);
        w.sealed.push_back(page);
        s.page = NO_PAGE;
    }
}
