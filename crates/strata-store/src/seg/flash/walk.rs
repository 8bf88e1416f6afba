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

use super::scan::{PageCursor, Step};
use crate::seg::item::{FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use crate::seg::{hash_key, SegStore};
use crate::walk::Visit;
use crate::{ItemMeta, ItemView, RelTime};

/// Where a walk stands on flash.
pub struct FlashScan {
    /// The page the cursor is in (a page past the last: the pages are done).
    page: u32,
    /// The cursor entered `page`.
    entered: bool,
    cursor: PageCursor,
    /// The write buffer was written out before the first step.
    flushed: bool,
    /// Where the walk stands in the small store, after the pages.
    small: super::small::SmallScan,
}

impl std::fmt::Debug for FlashScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlashScan {{ page: {}, offset: {} }}", self.page, self.cursor.offset)
    }
}

impl Clone for FlashScan {
    /// A copy starts over at the same record (its buffer is not copied).
    fn clone(&self) -> FlashScan {
        FlashScan { cursor: self.cursor.clone(), ..*self }
    }
}

impl Default for FlashScan {
    fn default() -> FlashScan {
        FlashScan { page: 0, entered: false, cursor: PageCursor::new(), flushed: false, small: super::small::SmallScan::default() }
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
            if !scan.entered {
                scan.cursor.enter(tier, scan.page);
                scan.entered = true;
            }
            let (page, version) = (scan.cursor.page, scan.cursor.version);
            let (offset, rec) = match scan.cursor.step(tier) {
                Step::End => {
                    scan.page += 1;
                    scan.entered = false;
                    continue;
                }
                Step::Skipped { .. } => {
                    looked += 1;
                    continue;
                }
                Step::Record { offset, rec, .. } => (offset, rec),
            };
            looked += 1;
            if !self.flash_points_at(rec.key, page, version, offset) {
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
