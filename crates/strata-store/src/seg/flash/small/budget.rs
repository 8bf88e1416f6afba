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
//! - The small index grows only within its share, and while the flash
//!   tier's RAM stays within ⅞ of `-m`; past either, a small item leaving
//!   RAM goes to the log as a larger one or is evicted. A tombstone is
//!   never refused (without it an old copy could come back): it may take
//!   the table past its share, and is paid for by segments.
//! - A partition's rewrite sizes its sets within the summaries' share and
//!   what the ⅞ leaves (`summary_room`), split evenly between partitions.
//! - So the segments keep at least ⅛ of `-m` (a store into a full cache
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

/// Whether `extra` more bytes keep the flash tier's RAM within its share.
pub fn meta_room(g: &Globals, tier: &Tier, extra: u64) -> bool {
    meta_bytes(tier, g.small.as_ref()) + extra <= g.memory_limit.load(relaxed()) / 8 * META_EIGHTHS
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
/// share (or `force`), else take a slot while under 95% full.
pub fn index_room(g: &Globals, tier: &Tier, index: &mut SmallIndex, force: bool) -> bool {
    let Some(small) = g.small.as_ref() else { return false };
    let Some(capacity) = index.growth() else { return true };
    let extra = ((capacity - index.slot_bytes() / SLOT_BYTES) * SLOT_BYTES) as u64;
    let cap = g.memory_limit.load(relaxed()) / 8 * INDEX_EIGHTHS;
    let fits = force || meta_room(g, tier, extra);
    let granted = small.index_bytes.fetch_update(relaxed(), relaxed(), |held| (force || (fits && held + extra <= cap)).then_some(held + extra)).is_ok();
    if !granted {
        small.ring();
        return index.has_room();
    }
    let before = index.slot_bytes();
    index.resize(capacity);
    charge(g, small, (index.slot_bytes() - before) as i64);
    true
}

/// Shrink a sparse index and pay its bytes back.
pub fn shrink_index(g: &Globals, index: &mut SmallIndex) {
    let Some(small) = g.small.as_ref() else { return };
    if let Some(capacity) = index.shrinkage() {
        let before = index.slot_bytes();
        index.resize(capacity);
        let freed = before - index.slot_bytes();
        small.index_bytes.fetch_sub(freed as u64, relaxed());
        charge(g, small, -(freed as i64));
    }
}

/// Sets a partition may have by the summaries' share of `-m`, and by
/// what the flash tier's other RAM leaves of its ⅞.
pub fn summary_room(g: &Globals, tier: &Tier, small: &Small, summaries_now: u64) -> u32 {
    let limit = g.memory_limit.load(relaxed());
    let others = meta_bytes(tier, Some(small)).saturating_sub(summaries_now);
    let cap = (limit / 8 * SUMMARY_EIGHTHS).min((limit / 8 * META_EIGHTHS).saturating_sub(others));
    let per_set = small.geo.shape.bytes_per_set() as u64;
    (cap / per_set / small.geo.parts() as u64).min(u64::from(u32::MAX)) as u32
}

/// Whether `entries` in the small indexes (grown to hold them at 75%
/// full) pass ¾ of their share (or of what the flash tier's ⅞ leaves
/// them): the rewrite thread then merges the partitions with the longest
/// logs (`sched.rs`).
pub fn index_pressed(g: &Globals, tier: &Tier, small: &Small, entries: usize) -> bool {
    let limit = g.memory_limit.load(relaxed());
    let others = meta_bytes(tier, Some(small)).saturating_sub(small.index_bytes.load(relaxed()));
    let cap = (limit / 8 * INDEX_EIGHTHS).min((limit / 8 * META_EIGHTHS).saturating_sub(others));
    (entries * SLOT_BYTES * 4 / 3) as u64 >= cap / 4 * 3
}
