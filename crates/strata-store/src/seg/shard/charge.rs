//! The per-item structures' memory, counted in `-m`: the index's growth and
//! the ghost.
//!
//! A shard's index (table.rs, 8-byte slots kept 68-85% full: 9.4 to 11.8
//! bytes per item) and its ghost (ghost.rs, about 3 bytes per item once it
//! evicts) grow with the items it holds, so left outside `-m` they made the
//! process about 14 bytes per item larger than `-m` said (`stats memory` at
//! `-m 64` filled with 200-byte values: index 3.1 MB, ghost 0.9 MB for
//! 288,000 items). They are charged to the store's
//! allocated bytes (`Globals::allocated`, which holds the segment buffers
//! too), as the flash index is (`flash/budget.rs`): when either grows, the
//! shard adds the difference at once; when the ghost is re-sized smaller,
//! it pays it back. Segments give way as for any charge above the limit:
//! pooled buffers go back to the kernel at once, the next buffer request
//! finds `-m` taken and evicts instead, and a segment freed while over the
//! limit goes back to the kernel. So segments alone never pass `-m`, and
//! segments and charge together pass it only by a growth not yet paid for.
//!
//! ```text
//!  -m ┌──────────────────────────── allocated ────────────────────────────┐
//!     │ RAM segments ... │ index slots past the first │ ghost │ (flash index) │
//!     └──────────────────┴────────────────────────────┴───────┴───────────────┘
//! ```
//!
//! Not charged: the index's first size (64 slots, 512 bytes a shard, or
//! the size `-o hashpower` asked for, which memcached keeps outside `-m`
//! too). Invariant: a shard's `charged` equals its table's bytes past that
//! base plus its ghost's bytes after every change (`check_integrity`), and
//! the store's allocated bytes hold the sum over its shards.

use std::sync::atomic::Ordering;

use super::*;

impl Shard {
    /// The bytes this shard's index and ghost hold now that count in `-m`.
    pub fn per_item_bytes(&self) -> usize {
        self.table.bytes().saturating_sub(self.table_base) + self.ghost.bytes()
    }

    /// Bring the charge in `-m` up (or down) to [`Shard::per_item_bytes`];
    /// called after anything that may re-size the index or the ghost. Two
    /// loads and a compare when nothing changed.
    pub fn recharge(&mut self, g: &Globals) {
        let now = self.per_item_bytes();
        if now > self.charged {
            g.allocated.fetch_add((now - self.charged) as u64, Ordering::Relaxed);
            g.per_item_charged.fetch_add((now - self.charged) as u64, Ordering::Relaxed);
            g.shed_pooled();
        } else if now < self.charged {
            g.allocated.fetch_sub((self.charged - now) as u64, Ordering::Relaxed);
            g.per_item_charged.fetch_sub((self.charged - now) as u64, Ordering::Relaxed);
        }
        self.charged = now;
    }

    /// Set the index the store starts with (uncharged: see the module comment).
    pub fn set_base_table(&mut self, table: Table) {
        self.table_base = table.bytes();
        self.table = table;
    }

    /// The bytes charged (`check_integrity` compares them with the structures).
    pub fn charged_bytes(&self) -> usize {
        assert_eq!(self.charged, self.per_item_bytes(), "index and ghost bytes charged to -m");
        self.charged
    }
}
