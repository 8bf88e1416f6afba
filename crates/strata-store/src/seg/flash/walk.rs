//! The flash part of a key dump's walk (`lru_crawler metadump|mgdump`,
//! after every RAM shard): flash items show in a dump as memcached's
//! extstore items do (their headers stay in its LRU).
//!
//! ```text
//!  page 0 .. page N-1, each from its first record block to the bytes known
//!  to be on flash: read 2 MiB at a time (aligned, direct I/O) into the
//!  cursor's buffer, no lock held
//!    record: check (seeded with the page's version) ─ bad or padding: skip
//!            to the next 4 KiB block (a write buffer's tail is zeros)
//!    its key's shard locked for one index probe: the key's entry still
//!    points at this record (not replaced, deleted or brought back to RAM)
//!    and the page still has the version the scan started it with?
//!      yes, not expired or flushed ─► shown as a live item
//! ```
//!
//! The walk's first flash step writes the write buffer out (one partial
//! block), so items evicted before it are on flash to be read. Like the
//! RAM walk it is not a snapshot: an item moved to or from flash while the
//! walk runs may be shown once, twice or not at all. Its reads happen on
//! the dump's own thread, never a worker's; `stats cachedump` and the
//! crawler do not walk flash.

use std::os::unix::fs::FileExt;

use super::index::MAX_BLOCKS;
use super::record;
use super::tier::BLOCK;
use crate::flash_read::FlashBuf;
use crate::seg::item::{FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use crate::seg::{hash_key, SegStore};
use crate::walk::Visit;
use crate::{ItemMeta, ItemView, RelTime};

/// A scan read: the longest record (`MAX_BLOCKS` blocks from its aligned
/// start) fits in one, whatever the offset it starts at.
const SCAN_BYTES: usize = (MAX_BLOCKS as usize + 1) * BLOCK as usize;

/// Where a walk stands on flash.
pub struct FlashScan {
    page: u32,
    /// The page's version when the scan entered it.
    version: u32,
    /// Page offset of the next record to look at (0: page not entered).
    offset: u64,
    /// `buf[..filled]` holds the page's bytes from `buf_at`.
    buf: FlashBuf,
    buf_at: u64,
    filled: usize,
    /// The write buffer was written out before the first step.
    flushed: bool,
    /// Where the walk stands in the small store, after the pages.
    small: super::small::SmallScan,
}

impl std::fmt::Debug for FlashScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlashScan {{ page: {}, offset: {} }}", self.page, self.offset)
    }
}

impl Clone for FlashScan {
    /// A copy starts over at the same record (its buffer is not copied).
    fn clone(&self) -> FlashScan {
        FlashScan { buf: FlashBuf::new(SCAN_BYTES), filled: 0, buf_at: 0, ..*self }
    }
}

impl Default for FlashScan {
    fn default() -> FlashScan {
        FlashScan {
            page: 0,
            version: 0,
            offset: 0,
            buf: FlashBuf::new(SCAN_BYTES),
            buf_at: 0,
            filled: 0,
            flushed: false,
            small: super::small::SmallScan::default(),
        }
    }
}

impl SegStore {
    /// Look at up to `budget` flash records; true when every page is done
    /// (or there is no flash tier).
    pub(crate) fn walk_flash_step(
        &self,
        scan: &mut FlashScan,
        budget: usize,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool,
    ) -> bool {
        let Some(tier) = &self.g.flash else { return true };
        if !scan.flushed {
            tier.flush_now();
            scan.flushed = true;
        }
        let mut looked = 0;
        while looked < budget {
            if scan.page as usize >= tier.page_count() {
                // Then the small store's sets and log blocks.
                return self.walk_small_step(&mut scan.small, budget - looked, now, visit);
            }
            let page = scan.page;
            if scan.offset == 0 {
                // Enter the page: records start after its header block.
                scan.version = tier.version(page);
                scan.offset = BLOCK;
                scan.filled = 0;
            }
            let end = tier.written_bytes_of(page);
            if scan.offset >= end || tier.version(page) != scan.version {
                scan.page += 1;
                scan.offset = 0;
                continue;
            }
            // The record at `offset` must lie in the buffer: read from its block.
            let in_buf = scan.offset >= scan.buf_at && scan.offset + record::HEADER as u64 <= scan.buf_at + scan.filled as u64;
            if !in_buf && !self.scan_read(scan, end) {
                scan.page += 1;
                scan.offset = 0;
                continue;
            }
            looked += 1;
            let at = (scan.offset - scan.buf_at) as usize;
            let bytes = &scan.buf[at..scan.filled];
            let Some(len) = record::peek_len(bytes) else {
                scan.offset = (scan.offset / BLOCK + 1) * BLOCK;
                continue;
            };
            if len > bytes.len() {
                if scan.buf_at + scan.filled as u64 >= end {
                    // Cut short by the end of what is written: damage.
                    scan.offset = (scan.offset / BLOCK + 1) * BLOCK;
                } else {
                    scan.filled = 0; // read again from this record's block
                }
                continue;
            }
            let seed = record::seed(tier.secret, page, scan.version);
            let Some(rec) = record::decode(bytes, seed) else {
                scan.offset = (scan.offset / BLOCK + 1) * BLOCK;
                continue;
            };
            let offset = scan.offset;
            scan.offset += rec.len as u64;
            if !self.flash_points_at(rec.key, page, scan.version, offset) {
                continue;
            }
            let m = rec.meta;
            if self.g.is_flushed(m.access, m.cas, now) || (m.exptime != 0 && m.exptime <= now) {
                continue;
            }
            let meta = ItemMeta {
                flags: m.flags,
                exptime: m.exptime,
                cas: self.g.shown_cas(m.cas),
                last_access: m.access,
                fetched: m.bits & FETCHED != 0,
                stale: m.bits & STALE != 0,
                token_sent: m.bits & TOKEN_SENT != 0,
                key_binary: m.bits & KEY_BINARY != 0,
            };
            visit(ItemView { key: rec.key, value: rec.value, meta }, Visit::Live);
        }
        false
    }

    /// Fill the scan's buffer from the block of its offset, up to `end`;
    /// false on a read error (the page is skipped).
    fn scan_read(&self, scan: &mut FlashScan, end: u64) -> bool {
        let Some(tier) = &self.g.flash else { return false };
        let spot = &tier.spots[scan.page as usize];
        let from = scan.offset / BLOCK * BLOCK;
        let len = (end - from).min(SCAN_BYTES as u64) as usize;
        scan.buf_at = from;
        scan.filled = 0;
        if tier.files[spot.file].read_exact_at(&mut scan.buf[..len], spot.base + from).is_err() {
            return false;
        }
        scan.filled = len;
        true
    }

    /// Whether `key`'s flash entry points at the record at `offset` of
    /// `page`, written under `version`.
    fn flash_points_at(&self, key: &[u8], page: u32, version: u32, offset: u64) -> bool {
        let Some(tier) = &self.g.flash else { return false };
        let hash = hash_key(key);
        let shard = self.lock(hash);
        let Some(fi) = shard.flash.as_ref() else { return false };
        fi.find_at(hash, page, offset).is_some() && tier.version(page) == version
    }
}
