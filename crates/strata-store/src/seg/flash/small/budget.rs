//! The small store's RAM, counted in `-m` like the flash index
//! (`../budget.rs`): its index's slots, every partition's filters and hit
//! bits, and the directories (rings and open blocks). What they take is
//! added to the store's allocated bytes, so RAM segments give way.
//!
//! ```text
//!  -m ┌──────── allocated ────────────────────────────────────────────────────┐
//!     │ write buffers │ flash index │ small index │ summaries │ dirs │ segments ≥ ⅛ │
//!     └───────────────┴─────────────┴─────────────┴───────────┴──────┴──────────────┘
//!                       ≤ ½           ≤ ⅜           ≤ ½         ≤ 1/32
//!     └──────────────── the flash tier's RAM: ≤ ⅞ (`META_EIGHTHS`) ──┘
//! ```
//!
//! - A partition's rewrite sizes its sets within the summaries' share and
//!   what the ⅞ leaves after the rest (`summary_room`), split evenly
//!   between partitions.
//! - The small index grows only within its share, within what the ⅞
//!   leaves after the summaries and a reserve for the summaries its log
//!   items will take once merged (`index_cap`), never under 1/16 of `-m`.
//!   So the summaries come first: nearing its cap the index has the
//!   rewrite thread merge (`index_pressed`), and past it its sparse
//!   tables shrink (`shrink_index`);
//!   at it, a small item leaving RAM goes to the log as a larger one or
//!   is evicted. A tombstone is never refused (without it an old copy
//!   could come back): at a full table it grows it past the cap, the new
//!   slots for tombstones only, paid for by segments.
//! - The flash tier's ⅞ is less what the RAM index and the ghost take, so
//!   the segments keep at least ⅛ of `-m` (a store into a full cache
//!   always finds a segment to evict).

use std::sync::atomic::Ordering;

use super::index::{SmallIndex, SLOT_BYTES};
use super::Small;
use crate::seg::flash::tier::Tier;
use crate::seg::globals::Globals;

/// The small index may take at most this share of `-m` (numerator, over 8).
const INDEX_EIGHTHS: u64 = 3;
/// The summaries may take at most this share of `-m` (over 8).
const SUMMARY_EIGHTHS: u64 = 4;
/// The flash tier's RAM in all (write buffers, both indexes, summaries,
/// directories) may take at most this share of `-m` (over 8).
pub const META_EIGHTHS: u64 = 7;

/// Bytes of `-m` the flash tier's RAM takes now.
pub fn meta_bytes(tier: &Tier, small: Option<&Small>) -> u64 {
    tier.buffer_bytes() + tier.index_bytes.load(relaxed()) + small.map_or(0, |s| s.bytes.load(relaxed()))
}

/// Whether `extra` more bytes keep the flash tier's RAM within its share,
/// less what the RAM index and the ghost take (charged in `-m` too:
/// `shard/charge.rs`), so the segments keep their eighth.
pub fn meta_room(g: &Globals, tier: &Tier, extra: u64) -> bool {
    meta_bytes(tier, g.small.as_ref()) + extra <= meta_cap(g)
}

/// The flash tier's RAM may take this much of `-m` now (`meta_room`).
fn meta_cap(g: &Globals) -> u64 {
    (g.memory_limit.load(relaxed()) / 8 * META_EIGHTHS).saturating_sub(g.per_item_charged.load(relaxed()))
}

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Count `bytes` more (or fewer) of the small store's RAM.
pub fn charge(g: &Globals, small: &Small, delta: i64) {
    if delta >= 0 {
        small.bytes.fetch_add(delta as u64, relaxed());
        g.allocated.fetch_add(delta as u64, relaxed());
    } else {
        small.bytes.fetch_sub(delta.unsigned_abs(), relaxed());
        g.allocated.fetch_sub(delta.unsigned_abs(), relaxed());
    }
}

/// Make room in `index` for one more entry: grow it if due and within the
/// share, else take a slot while under its full mark. `force` (a
/// tombstone, never refused) grows it past the share only when it is at
/// that mark: were it to grow whenever growth is due, every tombstone
/// into an index at its share would add an eighth to it.
pub fn index_room(g: &Globals, tier: &Tier, index: &mut SmallIndex, force: bool) -> bool {
    let Some(small) = g.small.as_ref() else { return false };
    let Some(capacity) = index.growth() else { return true };
    let extra = ((capacity - index.slot_bytes() / SLOT_BYTES) * SLOT_BYTES) as u64;
    let cap = index_cap_now(g, tier, small);
    let fits = meta_room(g, tier, extra);
    let must = force && !index.has_room();
    let granted = small.index_bytes.fetch_update(relaxed(), relaxed(), |held| (must || (fits && held + extra <= cap)).then_some(held + extra)).is_ok();
    if !granted {
        small.ring();
        // A table that a tombstone grew past the cap lends its new slots
        // to tombstones only.
        return (force || small.index_bytes.load(relaxed()) <= cap) && index.has_room();
    }
    let before = index.slot_bytes();
    index.resize(capacity);
    charge(g, small, (index.slot_bytes() - before) as i64);
    true
}

/// Shrink a sparse index and pay its bytes back; while the indexes are
/// over their cap, also one under 60% full, to 70% (the shards' logs are
/// uneven: a table a merge just emptied gives its slots to the full ones).
pub fn shrink_index(g: &Globals, tier: &Tier, index: &mut SmallIndex) {
    let Some(small) = g.small.as_ref() else { return };
    let slots = index.slot_bytes() / SLOT_BYTES;
    let over = || small.index_bytes.load(relaxed()) > index_cap_now(g, tier, small);
    let capacity = index.shrinkage().or_else(|| (index.len() * 100 < slots * 60 && over()).then(|| index.fit(70)));
    if let Some(capacity) = capacity {
        let before = index.slot_bytes();
        index.resize(capacity);
        let freed = before - index.slot_bytes();
        small.index_bytes.fetch_sub(freed as u64, relaxed());
        charge(g, small, -(freed as i64));
    }
}

/// The flash tier's RAM besides the small store's indexes and summaries:
/// write buffers, the larger items' index, the directories.
fn fixed_bytes(tier: &Tier, small: &Small) -> u64 {
    meta_bytes(tier, Some(small)).saturating_sub(small.index_bytes.load(relaxed()) + small.summary_bytes.load(relaxed()))
}

/// Sets a partition may have by the summaries' share of `-m`, and by what
/// the flash tier's ⅞ leaves them. The summaries come first, but only
/// through the index's cap: what it holds is theirs once merges and
/// `shrink_index` give it back (taken sooner, `-m` would be exceeded).
pub fn summary_room(g: &Globals, tier: &Tier, small: &Small) -> u32 {
    let limit = g.memory_limit.load(relaxed());
    let cap = (limit / 8 * SUMMARY_EIGHTHS).min(meta_cap(g).saturating_sub(fixed_bytes(tier, small) + small.index_bytes.load(relaxed())));
    let per_set = small.geo.shape.bytes_per_set() as u64;
    (cap / per_set / small.geo.parts() as u64).min(u64::from(u32::MAX)) as u32
}

/// The small indexes' cap now: their share of `-m`, within what the
/// flash tier's ⅞ leaves after the summaries and a reserve for the
/// summaries the log's `entries` will take once in sets; at least 1/16 of
/// `-m`.
fn index_cap(g: &Globals, tier: &Tier, small: &Small, entries: u64) -> u64 {
    let limit = g.memory_limit.load(relaxed());
    let reserve = entries * small.geo.summary_per_item_1024() / 1024;
    let left = meta_cap(g).saturating_sub(fixed_bytes(tier, small) + small.summary_bytes.load(relaxed()) + reserve);
    (limit / 8 * INDEX_EIGHTHS).min(left).max(limit / 16)
}

/// `index_cap` for the entries every shard's table holds, about (without
/// their locks): their slots at 80% full.
fn index_cap_now(g: &Globals, tier: &Tier, small: &Small) -> u64 {
    let entries = small.index_bytes.load(relaxed()) / SLOT_BYTES as u64 * 4 / 5;
    index_cap(g, tier, small, entries)
}

/// Whether `entries` in the small indexes would fill the slots of their
/// cap to 70% (the tables grow at 75% and are full at 85%): the rewrite
/// thread then merges the partitions with the longest logs (`sched.rs`).
/// Sooner, the slots the cap grants would go unused (at ¾ of tables 75%
/// full, the log's items cost 13 bytes each instead of 9-10).
pub fn index_pressed(g: &Globals, tier: &Tier, small: &Small, entries: usize) -> bool {
    let cap = index_cap(g, tier, small, entries as u64);
    (entries * SLOT_BYTES * 10 / 7) as u64 >= cap
}
