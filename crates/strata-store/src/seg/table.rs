//! A shard's hash index: open addressing over 8-byte slots, linear probing,
//! backward-shift deletion (no tombstones).
//!
//! ```text
//!  slot (u64): 63     62..50    49..48   47..26        25..6        5..0
//!             ┌──────┬─────────┬────────┬─────────────┬────────────┬─────────┐
//!             │ used │ tag 13b │ freq 2b│ segment 22b │ offset 20b │ dist 6b │
//!             └──────┴─────────┴────────┴─────────────┴────────────┴─────────┘
//! ```
//!
//! Eight slots fill one cache line, so a hit usually touches one line of the
//! index and one of the segment. The 13-bit tag (from bits of the key's hash
//! not used for the slot position or the shard) lets a probe skip other keys
//! without reading their items: a false match costs one item read in 8,192.
//!
//! `dist` is how far the slot sits from its key's home slot (saturating at
//! 63: at 82% full, 0.23% of slots sit that far; at 71%, 0.01%). It makes
//! removal read slots only: backward-shift deletion must know, for each
//! later slot of the cluster, whether its home lies before the hole, and
//! without `dist` it rehashed each one's key, a cache miss into its segment
//! per slot (an eviction removes thousands of items, and a removal shifted
//! a cluster of ~10 at 85% full). A saturated slot falls back to that rehash.
//!
//! Slots live in an anonymous memory mapping (see [`Slots`]); those past the
//! table's first size count in `-m` (`shard/charge.rs`). The table grows by 1.25x when it passes 85% full, so it is always between
//! 68% and 85% full once past its first size: 9.4 to 11.8 bytes of index per
//! item. Positions come from `fastrange` (`hash32 * capacity >> 32`), so the
//! capacity need not be a power of two. At 85% a miss probes about 23 slots
//! (three cache lines) and a hit about four.

/// Where an item lives: its segment (shard-local id) and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    pub offset: u32,
}

/// Segment ids per shard: 4 Mi segments of at least 64 KiB is 256 GiB.
pub const MAX_SEGMENTS: u32 = 1 << 22;
pub const MAX_OFFSET: u32 = 1 << 20;
pub const MAX_FREQ: u8 = 3;

pub const USED: u64 = 1 << 63;
pub const TAG_SHIFT: u32 = 50;
pub const TAG_MASK: u64 = 0x1fff;
const FREQ_SHIFT: u32 = 48;
const SEG_SHIFT: u32 = 26;
const OFFSET_SHIFT: u32 = 6;
const DIST_MASK: u64 = 0x3f;
/// A `dist` this large means "this far or farther": rehash to know.
const DIST_SATURATED: usize = 0x3f;

const MIN_CAPACITY: usize = 64;

pub fn tag_of(hash: u64) -> u64 {
    (hash >> 32) & TAG_MASK
}

/// The home slot of `hash` in a table of `capacity` slots (fastrange).
#[inline]
pub fn home_of(hash: u64, capacity: usize) -> usize {
    ((hash & 0xffff_ffff) * capacity as u64 >> 32) as usize
}

pub fn slot_loc(slot: u64) -> Loc {
    Loc {
        seg: ((slot >> SEG_SHIFT) & u64::from(MAX_SEGMENTS - 1)) as u32,
        offset: ((slot >> OFFSET_SHIFT) & u64::from(MAX_OFFSET - 1)) as u32,
    }
}

pub fn slot_freq(slot: u64) -> u8 {
    ((slot >> FREQ_SHIFT) & 3) as u8
}

fn slot_dist(slot: u64) -> usize {
    (slot & DIST_MASK) as usize
}

/// A slot with `dist` 0: [`Table::place`] sets the distance.
fn make_slot(hash: u64, loc: Loc, freq: u8) -> u64 {
    debug_assert!(loc.seg < MAX_SEGMENTS && loc.offset < MAX_OFFSET && freq <= MAX_FREQ);
    USED | tag_of(hash) << TAG_SHIFT
        | u64::from(freq) << FREQ_SHIFT
        | u64::from(loc.seg) << SEG_SHIFT
        | u64::from(loc.offset) << OFFSET_SHIFT
}

/// Slot memory: an anonymous mapping, so a table the index has outgrown
/// goes back to the kernel when dropped (from the heap, glibc would keep the
/// freed tables in RSS: about four old tables for each live one).
struct Slots {
    map: memmap2::MmapMut,
    capacity: usize,
}

impl Slots {
    fn new(capacity: usize) -> Slots {
        let map = memmap2::MmapMut::map_anon(capacity * 8).expect("mapping memory for the hash index");
        Slots { map, capacity }
    }

    fn len(&self) -> usize {
        self.capacity
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = u64;
    fn index(&self, i: usize) -> &u64 {
        &bytemuck::cast_slice::<u8, u64>(&self.map[..self.capacity * 8])[i]
    }
}

impl std::ops::IndexMut<usize> for Slots {
    fn index_mut(&mut self, i: usize) -> &mut u64 {
        &mut bytemuck::cast_slice_mut::<u8, u64>(&mut self.map[..self.capacity * 8])[i]
    }
}

pub struct Table {
    slots: Slots,
    len: usize,
}

impl Table {
    pub fn new() -> Table {
        Table { slots: Slots::new(MIN_CAPACITY), len: 0 }
    }

    /// One shard's share of an index presized to `total_slots` over
    /// `shards` (memcached's `-o hashpower`; untouched slots are zero pages
    /// of the mapping, so the size costs RSS only as keys land in it).
    pub fn presized(total_slots: u64, shards: usize) -> Table {
        let per_shard = usize::try_from(total_slots / shards.max(1) as u64).unwrap_or(usize::MAX);
        Table { slots: Slots::new(per_shard.max(MIN_CAPACITY)), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of the slot array (`stats` `hash_bytes`).
    pub fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<u64>()
    }

    fn home(&self, hash: u64) -> usize {
        home_of(hash, self.slots.len())
    }

    /// Read `hash`'s home slot, so that a later [`Table::find`] of it hits
    /// the cache: a walk touches a group of items' slots first, and the
    /// CPU overlaps their misses (`seg/walk.rs`).
    pub fn touch(&self, hash: u64) -> u64 {
        self.slots[self.home(hash)]
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `hash` whose location satisfies `is_it` (the caller
    /// compares keys, or a location when unlinking a known item).
    pub fn find(&self, hash: u64, mut is_it: impl FnMut(Loc) -> bool) -> Option<usize> {
        let tag = tag_of(hash);
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot & USED == 0 {
                return None;
            }
            if (slot >> TAG_SHIFT) & TAG_MASK == tag && is_it(slot_loc(slot)) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// Prefetch the line of `hash`'s home slot.
    pub fn prefetch_home(&self, hash: u64) {
        crate::prefetch::line(&self.slots[self.home(hash)]);
    }

    pub fn slot(&self, i: usize) -> u64 {
        self.slots[i]
    }

    /// Point slot `i` (same key) at a new location with a new frequency.
    pub fn update(&mut self, i: usize, hash: u64, loc: Loc, freq: u8) {
        debug_assert_eq!((self.slots[i] >> TAG_SHIFT) & TAG_MASK, tag_of(hash));
        self.slots[i] = make_slot(hash, loc, freq) | self.slots[i] & DIST_MASK;
    }

    pub fn set_freq(&mut self, i: usize, freq: u8) {
        let slot = self.slots[i] & !(3 << FREQ_SHIFT);
        self.slots[i] = slot | u64::from(freq.min(MAX_FREQ)) << FREQ_SHIFT;
    }

    /// Add a key that is not in the table. Grows first when past 85%;
    /// `rehash` gives the hash of the item at a location (growth rehashes).
    pub fn insert(&mut self, hash: u64, loc: Loc, freq: u8, rehash: impl Fn(Loc) -> u64) {
        if (self.len + 1) * 100 > self.slots.len() * 85 {
            self.grow(rehash);
        }
        self.place(make_slot(hash, loc, freq), hash);
        self.len += 1;
    }

    /// Put `slot` (its `dist` ignored) in the first free slot from
    /// `hash`'s home, recording how far that is.
    fn place(&mut self, slot: u64, hash: u64) {
        let mut i = self.home(hash);
        let mut dist = 0;
        while self.slots[i] & USED != 0 {
            i = self.next(i);
            dist += 1;
        }
        self.slots[i] = slot & !DIST_MASK | dist.min(DIST_SATURATED) as u64;
    }

    /// Cyclic distance from slot `from` forward to slot `to`.
    fn gap(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.slots.len() - from
        }
    }

    /// Make room for `items` in all without growing again (recovery, which
    /// knows how many items it is about to insert).
    pub fn reserve(&mut self, items: usize, rehash: impl Fn(Loc) -> u64) {
        let capacity = items * 100 / 80 + 1;
        if capacity > self.slots.len() {
            self.resize(capacity, rehash);
        }
    }

    fn grow(&mut self, rehash: impl Fn(Loc) -> u64) {
        let capacity = (self.slots.len() + self.slots.len() / 4).max(MIN_CAPACITY);
        self.resize(capacity, rehash);
    }

    fn resize(&mut self, capacity: usize, rehash: impl Fn(Loc) -> u64) {
        let old_slots = std::mem::replace(&mut self.slots, Slots::new(capacity));
        let old: &[u64] = bytemuck::cast_slice(&old_slots.map[..old_slots.capacity * 8]);
        for &slot in old.iter().filter(|&&s| s & USED != 0) {
            let hash = rehash(slot_loc(slot));
            self.place(slot, hash);
        }
        // A reader that found the old array before this write section
        // (seg/view.rs) may still probe it: unmap it once every thread
        // pinned now has moved on.
        let guard = crossbeam_epoch::pin();
        guard.defer(move || drop(old_slots));
        guard.flush();
    }

    /// The slot array's address and length, for readers without the lock
    /// (seg/view.rs, seg/read.rs), and the tag of a hash.
    pub fn raw_slots(&self) -> (*const u64, usize) {
        (self.slots.map.as_ptr().cast::<u64>(), self.slots.capacity)
    }

    /// Remove slot `i`, shifting later entries of its cluster back so that no
    /// probe sequence is broken. `rehash` gives the hash of a located item,
    /// needed only for a slot whose `dist` saturated.
    pub fn remove(&mut self, i: usize, rehash: impl Fn(Loc) -> u64) {
        let mut hole = i;
        let mut j = self.next(i);
        loop {
            let slot = self.slots[j];
            if slot & USED == 0 {
                break;
            }
            let mut dist = slot_dist(slot);
            if dist == DIST_SATURATED {
                dist = self.gap(self.home(rehash(slot_loc(slot))), j);
            }
            // Move j into the hole unless its home lies cyclically in (hole, j].
            let gap = self.gap(hole, j);
            if dist >= gap {
                self.slots[hole] = slot & !DIST_MASK | (dist - gap).min(DIST_SATURATED) as u64;
                hole = j;
            }
            j = self.next(j);
        }
        self.slots[hole] = 0;
        self.len -= 1;
    }

    /// Every used slot, for integrity walks.
    pub fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let slots: &[u64] = bytemuck::cast_slice(&self.slots.map[..self.slots.capacity * 8]);
        slots.iter().copied().enumerate().filter(|(_, s)| s & USED != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Model: location → hash, so `rehash` can answer.
    fn hash_of(l: Loc) -> u64 {
        // A deliberately clustering hash: few distinct homes.
        let x = u64::from(l.offset).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (x & 0xff00_0000_0000_0000) >> 8 | (x & 0xf) | (u64::from(l.offset) << 32 & (0x7fff << 32))
    }

    /// Every slot's `dist` is its distance from home (or saturated and
    /// at least that far), and no empty slot lies between home and slot.
    fn check_dists(t: &Table, hash: impl Fn(Loc) -> u64) -> usize {
        let mut saturated = 0;
        for (i, slot) in t.iter() {
            let true_dist = t.gap(t.home(hash(slot_loc(slot))), i);
            if slot_dist(slot) == DIST_SATURATED {
                assert!(true_dist >= DIST_SATURATED, "slot {i}: saturated at {true_dist}");
                saturated += 1;
            } else {
                assert_eq!(slot_dist(slot), true_dist, "slot {i}");
            }
            for k in 0..true_dist {
                let between = (t.home(hash(slot_loc(slot))) + k) % t.capacity();
                assert_ne!(t.slot(between) & USED, 0, "hole at {between} before slot {i}");
            }
        }
        saturated
    }

    /// A well spread hash (the store's keys hash with xxh3).
    fn spread_hash(l: Loc) -> u64 {
        let x = (u64::from(l.seg) << 20 | u64::from(l.offset)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let x = (x ^ x >> 30).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ x >> 31
    }

    #[test]
    fn distances_stay_exact_through_inserts_removes_and_growth() {
        let mut t = Table::new();
        let mut live: Vec<Loc> = Vec::new();
        let mut x: u64 = 11;
        for step in 0..60_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Grow to ~20k items, then churn at a steady size.
            if live.len() < 20_000 && (step < 30_000 || (x >> 40) % 2 == 0) {
                let loc = Loc { seg: step >> 10, offset: step & 1023 };
                t.insert(spread_hash(loc), loc, 0, spread_hash);
                live.push(loc);
            } else {
                let loc = live.swap_remove((x >> 33) as usize % live.len());
                let i = t.find(spread_hash(loc), |l| l == loc).expect("live");
                t.remove(i, spread_hash);
            }
            if step % 5_000 == 0 {
                // At 80% full, about 1 slot in 400 sits 63 or more from home.
                assert!(check_dists(&t, spread_hash) * 100 < t.len());
            }
        }
        for loc in &live {
            assert!(t.find(spread_hash(*loc), |l| l == *loc).is_some());
        }
        assert!(check_dists(&t, spread_hash) * 100 < t.len());
    }

    #[test]
    fn insert_find_remove_against_a_model() {
        let mut t = Table::new();
        let mut model: HashMap<u32, ()> = HashMap::new();
        let mut x: u64 = 7;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let offset = ((x >> 33) % 3000) as u32;
            let loc = Loc { seg: 1, offset };
            let h = hash_of(loc);
            let found = t.find(h, |l| l == loc);
            assert_eq!(found.is_some(), model.contains_key(&offset), "step {step}");
            match found {
                Some(i) => {
                    t.remove(i, hash_of);
                    model.remove(&offset);
                }
                None => {
                    t.insert(h, loc, (offset % 4) as u8, hash_of);
                    model.insert(offset, ());
                }
            }
            assert_eq!(t.len(), model.len());
            if step % 1_000 == 0 {
                check_dists(&t, hash_of);
            }
        }
        // Every key homes at slot 0, so most distances saturate.
        assert!(check_dists(&t, hash_of) > 100);
        for offset in model.keys() {
            let loc = Loc { seg: 1, offset: *offset };
            let i = t.find(hash_of(loc), |l| l == loc).expect("present");
            assert_eq!(slot_freq(t.slot(i)), (offset % 4) as u8);
        }
        assert!(t.len() * 100 <= t.capacity() * 85);
    }
}
