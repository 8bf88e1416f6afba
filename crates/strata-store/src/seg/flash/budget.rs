//! The flash indexes' memory, counted in `-m`.
//!
//! memcached keeps a flash item's header (item struct, key, flash address)
//! in slab memory, inside `-m`. Strata's flash entry is 12 bytes in a
//! per-shard table (`index.rs`), and it is counted in `-m` the same way:
//! every byte of slot memory a table holds is added to the store's
//! allocated bytes (`Globals::allocated`, which also holds the segment
//! buffers and the two write buffers), so RAM segments give way as the
//! index grows and the process stays near `-m` whatever the item count.
//!
//! ```text
//!  -m ┌──────────────────────────────── allocated ──────────────────────────┐
//!     │ write buffers (2 x ext_wbuf_size) │ flash indexes │ RAM segments ...  │
//!     └───────────────────────────────────┴───────────────┴───────────────────┘
//!                                          ≤ -m / 2 (INDEX_SHARE_DIVISOR)
//! ```
//!
//! - A table grows (1.125x at 90% full) only if the charge keeps every
//!   shard's tables together within half of `-m`; otherwise it fills up to
//!   95%, and past that an item evicted from RAM is evicted as without
//!   flash (counted in `extstore_write_fallbacks`), as memcached drops
//!   items once its headers fill `-m`. At `-m 64` half is 32 MiB: ~2.5
//!   million entries, more than a 2 GiB `ext_path` holds of 1 KiB values.
//! - A charge above the limit is paid back by the segments: the store's
//!   next buffer request finds `-m` taken, evicts (to flash) instead, and
//!   a segment freed while over the limit goes back to the kernel.
//! - A table shrinks (to half, under 20% full) in `maintain`, and the
//!   charge goes down with it.
//! - Checked: `SegStore::check_integrity` takes the charge out of the
//!   allocated bytes and `check` compares it with the tables.

use std::sync::atomic::Ordering;

use super::index::FlashIndex;
use super::tier::Tier;
use crate::seg::Globals;

/// The indexes may take at most `-m` / this.
const INDEX_SHARE_DIVISOR: u64 = 2;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Count `bytes` of a table that already holds them (recovery at start).
pub fn charge(g: &Globals, tier: &Tier, bytes: usize) {
    tier.index_bytes.fetch_add(bytes as u64, relaxed());
    g.allocated.fetch_add(bytes as u64, relaxed());
}

fn discharge(g: &Globals, tier: &Tier, bytes: usize) {
    tier.index_bytes.fetch_sub(bytes as u64, relaxed());
    g.allocated.fetch_sub(bytes as u64, relaxed());
}

/// Make room in `fi` for one more entry: grow it if due and the budget
/// allows, else take the slot if the table is under 95% full. False: the
/// entry may not go in (the item is evicted as without flash).
pub fn make_room(g: &Globals, tier: &Tier, fi: &mut FlashIndex) -> bool {
    let Some(capacity) = fi.growth() else { return true };
    let (old, new) = (fi.slot_bytes(), capacity * super::index::SLOT_BYTES);
    let extra = (new - old) as u64;
    let cap = g.memory_limit.load(relaxed()) / INDEX_SHARE_DIVISOR;
    // And within the flash tier's share of -m with the small store's RAM.
    let fits = super::small::meta_room(g, tier, extra);
    let granted = tier.index_bytes.fetch_update(relaxed(), relaxed(), |held| (fits && held + extra <= cap).then_some(held + extra)).is_ok();
    if !granted {
        return fi.has_room();
    }
    g.allocated.fetch_add(extra, relaxed());
    fi.resize(capacity);
    debug_assert_eq!(fi.slot_bytes(), new);
    true
}

/// Shrink a sparse table and pay its bytes back.
pub fn shrink(g: &Globals, tier: &Tier, fi: &mut FlashIndex) {
    if let Some(capacity) = fi.shrinkage() {
        let old = fi.slot_bytes();
        fi.resize(capacity);
        discharge(g, tier, old - fi.slot_bytes());
    }
}

/// Bytes charged for the indexes; `check_integrity` compares it with
/// `tables` (the sum of every table's `slot_bytes`).
pub fn check(tier: &Tier, tables: usize) -> u64 {
    let charged = tier.index_bytes.load(relaxed());
    assert_eq!(charged, tables as u64, "flash index bytes charged to -m");
    charged
}
