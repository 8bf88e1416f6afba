//! The small store's index (one per shard): the keys whose newest copy is
//! in a partition's log, and the tombstones of keys whose copy in a set is
//! no longer current. A [`ProbeTable`] (`../probe.rs`) of 8-byte entries.
//!
//! ```text
//!  bits  0..31    32..40      41..42   43..44   45..55        56..63
//!       ┌────────┬───────────┬────────┬────────┬─────────────┬──────────────┐
//!       │ h32    │ hash 40.. │ kind   │ freq   │ ring slot   │ record index │
//!       │        │ 48 (9 b)  │ 1 log, │ reads  │ (11 b: the  │ in its block │
//!       │        │           │ 2 tomb │ 0..3   │ log block)  │ (8 b)        │
//!       └────────┴───────────┴────────┴────────┴─────────────┴──────────────┘
//! ```
//!
//! - 41 bits of hash identify a key. A write of a key replaces every
//!   entry with its bits, so two keys sharing them cost at most an early
//!   eviction; every read compares the full key.
//! - A log entry names its block by the partition's ring slot (`dir.rs`),
//!   not by its place on the device: a key joins its partition's open block
//!   in RAM before that block has a place.
//! - A tombstone says the key's copy in its set, if any, is not current:
//!   lookups stop there, and the partition's next rewrite drops that copy.
//!   A log entry says as much (its record is newer), so a key has at most
//!   one entry of either kind.
//! - The home slot comes from h32 mixed (a bijection, `mix`): a partition
//!   is a range of h32 (`geometry.rs`), and a partition's log fills and
//!   empties at once (its merge), so homes monotone in h32 made a stretch
//!   of the table ~100% full while others idled (probe runs of thousands
//!   of slots at 70% full, on every store). A merge's snapshot reads the
//!   whole table; its commit looks up the entries it saw and those of
//!   the keys changed meanwhile (`Part::changed`).

use std::path::Path;

use crate::seg::flash::probe::{Fill, ProbeTable, Slot};

const FILE_MAGIC: &[u8; 8] = b"STRSMIX2";
/// Bytes of one slot.
pub const SLOT_BYTES: usize = 8;
/// Ring slots a partition's log can name.
pub const RING_SLOTS: usize = 1 << 11;
/// The small index is looked up by every store (a new key mostly misses):
/// kept at 70-80% full, 90% at most (homes spread by `mix`, so the fill is
/// even), so a miss probes ~13-25 slots (2-4 cache lines), not the ~50 of
/// 95%. 8 bytes an entry: 10-11 bytes an item in a log.
const FILL: Fill = Fill { grow_at: 80, full_at: 90 };
/// Records a log block may hold (the record index's 8 bits).
pub const MAX_LOG_RECORDS: usize = 255;

/// What an entry says about its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The key's newest copy is record `index` of the log block in ring
    /// slot `slot`; `freq` counts reads of it (saturating at 3).
    Log { slot: u16, index: u8, freq: u8 },
    /// The key's copy in its set, if any, is not current.
    Tomb,
}

fn filter_of(hash: u64) -> u64 {
    (hash >> 40) & 0x1ff
}

fn pack(hash: u64, e: Entry) -> u64 {
    let base = u64::from(hash as u32) | filter_of(hash) << 32;
    match e {
        Entry::Log { slot, index, freq } => {
            debug_assert!(usize::from(slot) < RING_SLOTS);
            base | 1 << 41 | u64::from(freq & 3) << 43 | u64::from(slot) << 45 | u64::from(index) << 56
        }
        Entry::Tomb => base | 2 << 41,
    }
}

fn unpack(s: u64) -> Entry {
    match (s >> 41) & 3 {
        1 => Entry::Log { freq: ((s >> 43) & 3) as u8, slot: ((s >> 45) & 0x7ff) as u16, index: (s >> 56) as u8 },
        _ => Entry::Tomb,
    }
}

fn matches(s: u64, hash: u64) -> bool {
    (s >> 32) & 0x1ff == filter_of(hash)
}

/// The table's h32 for a key's low 32 hash bits: a bijection that
/// spreads a partition's range over the whole table.
fn mix(h: u32) -> u32 {
    let x = h.wrapping_mul(0x9e37_79b1);
    x ^ (x >> 15)
}

impl Slot for u64 {
    fn used(&self) -> bool {
        (self >> 41) & 3 != 0
    }
    fn h32(&self) -> u32 {
        mix(*self as u32)
    }
}

/// A shard's small-store index (module docs).
pub struct SmallIndex {
    table: ProbeTable<u64>,
    /// Tombstones in the table.
    pub tombs: usize,
}

/// An entry as a range scan sees it: its hash bits and what it says.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub h32: u32,
    /// Hash bits 40..48 (with `h32`, what the index knows of the key).
    pub filter: u16,
    pub entry: Entry,
}

impl Seen {
    /// The packed hash bits (`build::packed_bits` of the key's hash).
    pub fn bits(&self) -> u64 {
        u64::from(self.h32) | u64::from(self.filter) << 32
    }
}

impl SmallIndex {
    pub fn new() -> SmallIndex {
        SmallIndex { table: ProbeTable::new(FILE_MAGIC, FILL), tombs: 0 }
    }

    /// A persistent index at `path`, with the entries an earlier process
    /// left there that `keep` accepts (given each entry's h32).
    pub fn persistent(path: &Path, mut keep: impl FnMut(u32, Entry) -> Option<Entry>) -> std::io::Result<SmallIndex> {
        let table = ProbeTable::persistent(path, FILE_MAGIC, FILL, |s: &u64| {
            let s = *s;
            let hash = (s & 0xffff_ffff) | ((s >> 32) & 0x1ff) << 40;
            keep(s as u32, unpack(s)).map(|e| if e == unpack(s) { s } else { pack(hash, e) })
        })?;
        let mut tombs = 0;
        let mut index = SmallIndex { table, tombs: 0 };
        index.table.scan(|s| tombs += usize::from(unpack(*s) == Entry::Tomb));
        index.tombs = tombs;
        Ok(index)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The entry for `hash`, and its slot.
    pub fn find(&self, hash: u64) -> Option<(usize, Entry)> {
        let i = self.table.find(mix(hash as u32), |s| matches(*s, hash))?;
        Some((i, unpack(self.table.get(i))))
    }

    /// The entry with packed hash bits `bits` (`Seen::h32` | `Seen::filter`
    /// << 32, what a scan gave), and its slot.
    pub fn find_bits(&self, bits: u64) -> Option<(usize, Entry)> {
        self.find(bits & 0xffff_ffff | (bits >> 32 & 0x1ff) << 40)
    }

    /// Rewrite slot `i` (the entry of `hash`).
    pub fn set(&mut self, i: usize, hash: u64, e: Entry) {
        let old = unpack(self.table.get(i));
        self.tombs = self.tombs + usize::from(e == Entry::Tomb) - usize::from(old == Entry::Tomb);
        self.table.set(i, pack(hash, e));
    }

    /// Remove slot `i`.
    pub fn remove(&mut self, i: usize) {
        if unpack(self.table.get(i)) == Entry::Tomb {
            self.tombs -= 1;
        }
        self.table.remove(i);
    }

    /// Put `e` for `hash`, replacing any entry it has; the caller made
    /// room (`growth`, `has_room`) when it has none.
    pub fn put(&mut self, hash: u64, e: Entry) {
        match self.find(hash) {
            Some((i, _)) => self.set(i, hash, e),
            None => self.insert(hash, e),
        }
    }

    /// Put `e` for `hash`, which has no entry (`find` said so, and nothing
    /// changed the table since); the caller made room.
    pub fn insert(&mut self, hash: u64, e: Entry) {
        debug_assert!(self.find(hash).is_none());
        self.tombs += usize::from(e == Entry::Tomb);
        self.table.insert(pack(hash, e));
    }


    pub fn slot_bytes(&self) -> usize {
        self.table.slot_bytes()
    }

    pub fn growth(&self) -> Option<usize> {
        self.table.growth()
    }

    pub fn has_room(&self) -> bool {
        self.table.has_room()
    }

    pub fn shrinkage(&self) -> Option<usize> {
        self.table.shrinkage()
    }

    /// The capacity that holds the entries at `percent` full.
    pub fn fit(&self, percent: usize) -> usize {
        self.table.fit(percent)
    }

    pub fn resize(&mut self, capacity: usize) {
        self.table.resize(capacity);
    }

    /// Every entry of the h32 range `lo..=hi` (a partition), each given to
    /// `visit` (a walk of the whole table).
    pub fn scan(&self, lo: u32, hi: u32, mut visit: impl FnMut(&Seen)) {
        self.table.scan(|s| {
            if (lo..=hi).contains(&(*s as u32)) {
                visit(&Seen { h32: *s as u32, filter: ((s >> 32) & 0x1ff) as u16, entry: unpack(*s) });
            }
        });
    }

    /// Remove the entry of packed hash bits `bits` (a scan's `Seen`).
    #[cfg(test)]
    fn remove_bits(&mut self, bits: u64) {
        let (i, _) = self.find_bits(bits).expect("a scanned entry");
        self.remove(i);
    }
}

/// Where the entry of packed hash bits `bits` lies in a table, as an order
/// (its home slot is monotone in it, whatever the table's size).
pub fn table_order(bits: u64) -> u32 {
    mix(bits as u32)
}

/// The hash bits an index entry keeps of `hash` (`Seen::h32`, `Seen::filter`):
/// what a partition's rewrite compares a set's records with.
pub fn key_bits(hash: u64) -> (u32, u16) {
    (hash as u32, filter_of(hash) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A partition's entries (a range of h32) come and go together, at its
    /// merge: with homes monotone in h32 the table had stretches ~100%
    /// full beside empty ones, and runs of thousands of slots at 75% full.
    #[test]
    fn partitions_emptied_in_turn_leave_no_long_runs() {
        let mut idx = SmallIndex::new();
        let parts = 10u64;
        let mut x: u64 = 3;
        for round in 0..60u64 {
            // One partition's log empties (its merge); all the others grow.
            let part = round % parts;
            let (lo, hi) = ((part << 32) / parts, (((part + 1) << 32) / parts - 1));
            let mut gone = Vec::new();
            idx.scan(lo as u32, hi as u32, |s| gone.push(s.bits()));
            gone.into_iter().for_each(|bits| idx.remove_bits(bits));
            for _ in 0..4000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let hash = x >> 7;
                if (hash as u32 as u64) >= lo && (hash as u32 as u64) <= hi {
                    continue;
                }
                if let Some(c) = idx.growth() {
                    idx.resize(c);
                }
                idx.put(hash, Entry::Log { slot: 1, index: 1, freq: 0 });
            }
        }
        assert!(idx.len() > 15_000, "{}", idx.len());
        assert!(idx.table.longest_run() < 400, "run of {} slots, {} entries in {}", idx.table.longest_run(), idx.len(), idx.slot_bytes() / SLOT_BYTES);
    }

    #[test]
    fn entries_round_trip_and_replace_each_other() {
        for e in [Entry::Log { slot: 2047, index: 255, freq: 3 }, Entry::Log { slot: 0, index: 0, freq: 0 }, Entry::Tomb] {
            let s = pack(u64::MAX, e);
            assert!(s.used());
            assert_eq!(unpack(s), e);
        }
        let mut idx = SmallIndex::new();
        let mut model = HashMap::new();
        let mut x = 1u64;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let hash = xxhash_rust::xxh3::xxh3_64(&(x % 3000).to_le_bytes());
            match step % 3 {
                0 => {
                    let found = idx.find(hash);
                    assert_eq!(found.map(|f| f.1), model.remove(&hash));
                    if let Some((i, _)) = found {
                        idx.remove(i);
                    }
                }
                _ => {
                    let e = if x % 5 == 0 { Entry::Tomb } else { Entry::Log { slot: (x % 2048) as u16, index: (x >> 20) as u8, freq: 0 } };
                    if let Some(c) = idx.growth() {
                        idx.resize(c);
                    }
                    idx.put(hash, e);
                    model.insert(hash, e);
                }
            }
            assert_eq!(idx.len(), model.len());
            assert_eq!(idx.tombs, model.values().filter(|e| **e == Entry::Tomb).count());
        }
        for (hash, e) in &model {
            assert_eq!(idx.find(*hash).map(|f| f.1), Some(*e));
        }
        // A scan turns every tombstone of the lower half into nothing.
        let mut gone = Vec::new();
        idx.scan(0, u32::MAX / 2, |s| {
            if s.entry == Entry::Tomb {
                gone.push(s.bits());
            }
        });
        gone.into_iter().for_each(|bits| idx.remove_bits(bits));
        model.retain(|h, e| !(*h as u32 <= u32::MAX / 2 && *e == Entry::Tomb));
        assert_eq!((idx.len(), idx.tombs), (model.len(), model.values().filter(|e| **e == Entry::Tomb).count()));
    }
}
