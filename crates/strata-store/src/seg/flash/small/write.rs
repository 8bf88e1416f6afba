//! Writes into the small store, all under the key's shard lock:
//!
//! ```text
//!  admit   an item leaving RAM ─► its partition's open log block (RAM) ─►
//!          index: Log { slot, record }; a full open block is first sealed
//!          and appended to the tier's log (`seal_open`)
//!  shadow  any change of a key ─► its log entry goes; a tombstone takes
//!          its place when the key's set may hold a copy (the filter says
//!          so, or a merge of the partition is under way)
//! ```
//!
//! `admit` refuses (the caller writes the item as a larger one, or evicts
//! it) when the partition's ring is full (its merge is behind) or the
//! index may not grow.

use std::sync::atomic::Ordering;

use super::block::{self, Builder, Kind};
use super::dir::{BlockAt, RING_OPEN};
use super::geometry::{set_of, LOG_BLOCK};
use super::index::{Entry, MAX_LOG_RECORDS, RING_SLOTS};
use super::{budget, slot_of, Part, Small, SmallShard};
use crate::seg::flash::tier::Tier;
use crate::seg::globals::Globals;
use crate::seg::shard::Shard;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Whether `part`'s sets, or the extent a merge under way is building,
/// may hold `hash`.
pub(super) fn maybe_in_set(part: &Part, place_frac: u32, hash: u64) -> bool {
    part.merging || filter_says(part, place_frac, hash)
}

/// Whether the small store may still hold `hash`: a log entry names its
/// record, or (no entry) its set may hold it, in the committed extent (its
/// filter says maybe) or in the one a merge is building (a finished read
/// of an older copy is then read again: `moved_or_absent`).
pub(crate) fn still_there(g: &Globals, shard: &Shard, hash: u64) -> bool {
    let (Some(small), Some(ss)) = (g.small.as_ref(), shard.flash_small.as_deref()) else { return false };
    match ss.index.find(hash) {
        Some((_, Entry::Log { .. })) => true,
        Some((_, Entry::Tomb)) => false,
        None => {
            let place = small.geo.place(hash);
            maybe_in_set(&ss.parts[place.part], place.frac, hash)
        }
    }
}

/// Whether the filter of `hash`'s set in `part`'s committed extent says
/// the set may hold it.
fn filter_says(part: &Part, place_frac: u32, hash: u64) -> bool {
    part.commit.sets > 0 && part.summaries.may_contain(set_of(place_frac, part.commit.sets), hash)
}

/// Why the small store did not take an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a small item, or no room in its partition's log now (ring full,
    /// no page): the larger items' log may take it.
    NotHere,
    /// Its index is at its share of `-m`: the item is evicted, as without
    /// flash (in the larger items' index it would cost 12-14 bytes where a
    /// set costs ~1.4, and take the room the merges give the sets).
    NoRoom,
}

/// Put an item leaving RAM into its partition's open log block (module
/// docs).
pub(crate) fn admit(g: &Globals, ss: &mut SmallShard, hash: u64, key: &[u8], value: &[u8], meta: &block::Meta) -> Result<(), Refused> {
    admit_as(g, ss, hash, key, value, meta, true)
}

/// `admit`; `new`: an item from RAM (counted as admitted), not one a
/// rewrite had no room for (`merge.rs`).
pub(super) fn admit_as(g: &Globals, ss: &mut SmallShard, hash: u64, key: &[u8], value: &[u8], meta: &block::Meta, new: bool) -> Result<(), Refused> {
    let (Some(small), Some(tier)) = (g.small.as_ref(), g.flash.as_ref()) else { return Err(Refused::NotHere) };
    if key.len() + value.len() > small.geo.item_max {
        return Err(Refused::NotHere);
    }
    // Its entry, if any, found once: a lookup of this index misses the
    // caches (hundreds of MB at scale), and every item leaving RAM comes
    // here.
    let found = ss.index.find(hash).map(|(i, _)| i);
    let fresh = found.is_none();
    if fresh && !budget::index_room(g, tier, &mut ss.index, false) {
        small.c.fallbacks.fetch_add(1, relaxed());
        return Err(Refused::NoRoom);
    }
    let place = small.geo.place(hash);
    let index = loop {
        let part = &mut ss.parts[place.part];
        if !part.open {
            if part.ring_len() as usize >= RING_SLOTS - 1 {
                small.ring();
                small.c.fallbacks.fetch_add(1, relaxed());
                return Err(Refused::NotHere);
            }
            ss.dir.ring_mut(place.part)[slot_of(part.tail)] = RING_OPEN;
            part.tail = part.tail.wrapping_add(1);
            part.open = true;
            Builder::new(ss.dir.open_block_mut(place.part), Kind::Log, MAX_LOG_RECORDS);
        }
        let mut b = Builder::resume_fast(ss.dir.open_block_mut(place.part), MAX_LOG_RECORDS);
        if let Some(i) = b.push_open(key, value, meta, block::open_seed(tier.secret, place.part)) {
            break i;
        }
        if b.count() == 0 || !seal_open(small, tier, ss, place.part) {
            small.c.fallbacks.fetch_add(1, relaxed());
            return Err(Refused::NotHere);
        }
    };
    if fresh && maybe_in_set(&ss.parts[place.part], place.frac, hash) {
        ss.parts[place.part].shadowed += 1;
        ss.dir.set_shadowed(place.part, ss.parts[place.part].shadowed);
    }
    let part = &ss.parts[place.part];
    let slot = slot_of(part.tail.wrapping_sub(1)) as u16;
    let entry = Entry::Log { slot, index: index as u8, freq: 0 };
    match found {
        // Where the find left it: only a fresh key may grow the table.
        Some(i) => ss.index.set(i, hash, entry),
        None => ss.index.insert(hash, entry),
    }
    if part.ring_len() as usize > RING_SLOTS * 3 / 4 {
        small.ring();
    }
    if new {
        small.c.admitted.fetch_add(1, relaxed());
        small.c.admitted_bytes.fetch_add((key.len() + value.len()) as u64, relaxed());
    }
    Ok(())
}

/// Append partition `part`'s open block to the tier's log; its ring slot
/// then names its place. False if no page could take it.
pub(super) fn seal_open(small: &Small, tier: &Tier, ss: &mut SmallShard, part: usize) -> bool {
    let p = &mut ss.parts[part];
    if !p.open {
        return true;
    }
    let open = ss.dir.open_block(part);
    let placed = tier.append_block(LOG_BLOCK, |out, page_seed, first| {
        out.copy_from_slice(open);
        Builder::resume_fast(out, MAX_LOG_RECORDS).seal(block::seed(page_seed, first));
    });
    let Some(at) = placed else { return false };
    let slot = slot_of(p.tail.wrapping_sub(1));
    ss.dir.ring_mut(part)[slot] = BlockAt { page: at.page, block: (at.offset / LOG_BLOCK as u64) as u32, version16: at.version as u16 }.pack();
    p.open = false;
    small.c.log_blocks.fetch_add(1, relaxed());
    small.c.bytes_written.fetch_add(LOG_BLOCK as u64, relaxed());
    true
}

/// A change of `hash`'s key (module docs: `shadow`).
pub(crate) fn shadow(g: &Globals, shard: &mut Shard, hash: u64) {
    let (Some(small), Some(tier), Some(ss)) = (g.small.as_ref(), g.flash.as_ref(), shard.flash_small.as_deref_mut()) else { return };
    let place = small.geo.place(hash);
    // A merge's new extent takes a log record only if its key had an entry
    // at the snapshot, which stays (as the record's, or a tombstone) until
    // the commit; and an old set's record only if the filter says so. So a
    // key with no entry needs a tombstone only if the filter says so, and
    // one with an entry keeps it (as a tombstone) while a merge runs.
    let part = &mut ss.parts[place.part];
    if part.merging {
        part.changed.push(super::build::packed_bits(hash));
    }
    let in_sets = filter_says(part, place.frac, hash);
    let maybe = part.merging || in_sets;
    match ss.index.find(hash) {
        Some((i, Entry::Log { .. })) => {
            if maybe {
                ss.index.set(i, hash, Entry::Tomb);
                small.c.tombs_written.fetch_add(1, relaxed());
            } else {
                ss.index.remove(i);
            }
        }
        Some((_, Entry::Tomb)) => {}
        None if in_sets => {
            // Never refused: without it an old copy could come back.
            budget::index_room(g, tier, &mut ss.index, true);
            ss.index.put(hash, Entry::Tomb);
            ss.parts[place.part].shadowed += 1;
            ss.dir.set_shadowed(place.part, ss.parts[place.part].shadowed);
            small.c.tombs_written.fetch_add(1, relaxed());
        }
        None => {}
    }
}

/// An expired or flushed log record was found: its entry goes, leaving a
/// tombstone if the key's set may hold a copy.
pub(crate) fn drop_log_entry(g: &Globals, shard: &mut Shard, hash: u64) {
    shadow(g, shard, hash);
}

/// A log record was read: its entry's read count goes up.
pub(crate) fn bump_log_entry(shard: &mut Shard, hash: u64) {
    let Some(ss) = shard.flash_small.as_deref_mut() else { return };
    if let Some((i, Entry::Log { slot, index, freq })) = ss.index.find(hash) {
        ss.index.set(i, hash, Entry::Log { slot, index, freq: (freq + 1).min(3) });
    }
}

/// Once a tick: a sparse index shrinks (its bytes go back to `-m`).
pub(crate) fn maintain(g: &Globals, shard: &mut Shard) {
    if let (Some(ss), Some(tier)) = (shard.flash_small.as_deref_mut(), g.flash.as_ref()) {
        budget::shrink_index(g, tier, &mut ss.index);
    }
}
