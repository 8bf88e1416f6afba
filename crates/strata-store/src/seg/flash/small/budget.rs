//! The small store's RAM, counted in `-m` like the flash index
//! (`../budget.rs`): its index's slots, every partition's filters and hit
//! bits, and the directories (rings and open blocks). What they take is
//! added to the store's allocated bytes, so RAM segments give way.
//!
//! ```text
//!  -m ┌──────── allocated ─────────────────────────────────────────────┐
//!     │ write buffers │ flash index ≤ ½ │ small index ≤ ⅜ │ summaries │ segments … │
//!     └───────────────┴─────────────────┴─────────────────┴───────────┴────────────┘
//!                                         summaries ≤ ½ (sets not made past it)
//! ```
//!
//! - The small index grows only within its share; past it a small item
//!   leaving RAM goes to the log as a larger one or is evicted. A
//!   tombstone is never refused (without it an old copy could come back):
//!   it may take the table past its share, and is paid for by segments.
//! - A partition's rewrite sizes its sets within the summaries' share
//!   (`summary_room`), split evenly between partitions.

use std::sync::atomic::Ordering;

use super::index::{SmallIndex, SLOT_BYTES};
use super::Small;
use crate::seg::flash::tier::Tier;
use crate::seg::globals::Globals;

/// The small index may take at most this share of `-m` (numerator, over 8).
const INDEX_EIGHTHS: u64 = 3;
/// The summaries may take at most this share of `-m` (over 8).
const SUMMARY_EIGHTHS: u64 = 4;

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
pub fn index_room(g: &Globals, _tier: &Tier, index: &mut SmallIndex, force: bool) -> bool {
    let Some(small) = g.small.as_ref() else { return false };
    let Some(capacity) = index.growth() else { return true };
    let extra = ((capacity - index.slot_bytes() / SLOT_BYTES) * SLOT_BYTES) as u64;
    let cap = g.memory_limit.load(relaxed()) / 8 * INDEX_EIGHTHS;
    let granted = small.index_bytes.fetch_update(relaxed(), relaxed(), |held| (force || held + extra <= cap).then_some(held + extra)).is_ok();
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

/// Sets a partition may have by the summaries' share of `-m`.
pub fn summary_room(g: &Globals, small: &Small) -> u32 {
    let cap = g.memory_limit.load(relaxed()) / 8 * SUMMARY_EIGHTHS;
    let per_set = small.geo.shape.bytes_per_set() as u64;
    (cap / per_set / small.geo.parts() as u64).min(u64::from(u32::MAX)) as u32
}

/// Whether `entries` in the small indexes (grown to hold them at 90%
/// full) pass ¾ of their share: the rewrite thread then merges the
/// partitions with the longest logs (`sched.rs`).
pub fn index_pressed(g: &Globals, _small: &Small, entries: usize) -> bool {
    let cap = g.memory_limit.load(relaxed()) / 8 * INDEX_EIGHTHS;
    (entries * SLOT_BYTES * 10 / 9) as u64 >= cap / 4 * 3
}
