//! A cursor over the larger items' records of one page as they lie on the
//! device: what a key dump's walk (`walk.rs`) and the log's compaction
//! (`compact.rs`) both read.
//!
//! ```text
//!  page: │ header block │ record record … pad │ record … │ (log blocks) │ …
//!        from its first record block to the bytes known to be on flash,
//!        read SCAN_BYTES at a time (aligned, direct I/O) into the cursor's
//!        buffer, no lock held
//!  at each offset: a record header with the magic, checked (seeded with
//!  the version the cursor entered the page with)
//!    whole in the buffer, check good ─► Step::Record, offset past it
//!    cut by the buffer's end        ─► the buffer read again from its block
//!    anything else (padding, a write buffer's zero tail, a small-store log
//!    block, damage)                 ─► on to the next 4 KiB block
//! ```
//!
//! Records are packed from a block's start and padding only ever fills a
//! block's end, so a bad header means nothing more of this block is a
//! record. A record whose check passes is still only what the page *held*:
//! the caller asks the key's index entry whether it is the key's current
//! copy (the entry points at this offset, the page still has the version
//! the cursor entered it with).

use std::os::unix::fs::FileExt;

use super::index::MAX_BLOCKS;
use super::record;
use super::tier::{Tier, BLOCK};
use crate::flash_read::FlashBuf;

/// A scan read: the longest record (`MAX_BLOCKS` blocks from its aligned
/// start) fits in one, whatever the offset it starts at.
pub const SCAN_BYTES: usize = (MAX_BLOCKS as usize + 1) * BLOCK as usize;

/// Where a cursor stands in its page.
pub struct PageCursor {
    pub page: u32,
    /// The page's version when the cursor entered it.
    pub version: u32,
    /// Page offset of the next record to look at.
    pub offset: u64,
    /// `buf[..filled]` holds the page's bytes from `buf_at`.
    buf: FlashBuf,
    buf_at: u64,
    filled: usize,
}

/// What the next step found.
pub enum Step<'a> {
    /// A checked record at `offset`.
    Record { offset: u64, rec: record::Record<'a>, read: usize },
    /// Bytes that were not a record (`read`: bytes read from the device).
    Skipped { read: usize },
    /// The page is done: its end reached, reclaimed meanwhile, or a read
    /// failed.
    End,
}

impl std::fmt::Debug for PageCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageCursor {{ page: {}, version: {}, offset: {} }}", self.page, self.version, self.offset)
    }
}

impl Clone for PageCursor {
    /// A copy stands at the same record (its buffer is not copied).
    fn clone(&self) -> PageCursor {
        PageCursor { page: self.page, version: self.version, offset: self.offset, ..PageCursor::new() }
    }
}

impl PageCursor {
    /// A cursor with its buffer (`SCAN_BYTES`, outside `-m`), not in a page.
    pub fn new() -> PageCursor {
        PageCursor { page: 0, version: 0, offset: 0, buf: FlashBuf::new(SCAN_BYTES), buf_at: 0, filled: 0 }
    }

    /// Enter `page` at its first record block, under its current version.
    pub fn enter(&mut self, tier: &Tier, page: u32) {
        self.page = page;
        self.version = tier.version(page);
        self.offset = BLOCK;
        self.filled = 0;
    }

    /// Look at the record at the cursor's offset, reading the device when
    /// it is not in the buffer.
    pub fn step(&mut self, tier: &Tier) -> Step<'_> {
        let end = tier.written_bytes_of(self.page);
        if self.offset >= end || tier.version(self.page) != self.version {
            return Step::End;
        }
        let mut read = 0;
        // The record at `offset` must lie in the buffer: read from its block.
        let in_buf = self.offset >= self.buf_at && self.offset + record::HEADER as u64 <= self.buf_at + self.filled as u64;
        if !in_buf {
            match self.fill(tier, end) {
                Some(n) => read = n,
                None => return Step::End,
            }
        }
        let at = (self.offset - self.buf_at) as usize;
        let bytes = &self.buf[at..self.filled];
        let Some(len) = record::peek_len(bytes) else {
            self.next_block();
            return Step::Skipped { read };
        };
        if len > bytes.len() {
            if self.buf_at + self.filled as u64 >= end {
                // Cut short by the end of what is written: damage.
                self.next_block();
            } else {
                self.filled = 0; // read again from this record's block
            }
            return Step::Skipped { read };
        }
        let seed = record::seed(tier.secret, self.page, self.version);
        let offset = self.offset;
        let Some(len) = record::decode(&self.buf[at..self.filled], seed).map(|r| r.len) else {
            self.next_block();
            return Step::Skipped { read };
        };
        self.offset += len as u64;
        let rec = record::parse(&self.buf[at..self.filled]).expect("a record decode checked");
        Step::Record { offset, rec, read }
    }

    fn next_block(&mut self) {
        self.offset = (self.offset / BLOCK + 1) * BLOCK;
    }

    /// Fill the buffer from the block of the cursor's offset, up to `end`:
    /// the bytes read, None on a read error (the page is given up).
    fn fill(&mut self, tier: &Tier, end: u64) -> Option<usize> {
        let spot = &tier.spots[self.page as usize];
        let from = self.offset / BLOCK * BLOCK;
        let len = (end - from).min(SCAN_BYTES as u64) as usize;
        self.buf_at = from;
        self.filled = 0;
        tier.files[spot.file].read_exact_at(&mut self.buf[..len], spot.base + from).ok()?;
        self.filled = len;
        Some(len)
    }
}
