//! A shard's flash index: where each of its keys that live on flash is.
//! A [`ProbeTable`] (`probe.rs`: linear probing, backward-shift deletion,
//! slots in memory or in a mapped file) of 12-byte entries; an entry
//! carries its own hash bits, since rehashing cannot read the key from flash.
//!
//! ```text
//!  entry: 3 x u32 = 12 bytes
//!  w0: hash bits 0..31 (home slot by fastrange, and the first filter)
//!  w1:  0      1..2   3..6        7..15        16..21          22..31
//!      ┌─────┬──────┬──────────┬────────────┬───────────────┬─────────────┐
//!      │used │ freq │ version4 │ blocks 9b  │ hash 40..45   │ page 0..9   │
//!      └─────┴──────┴──────────┴────────────┴───────────────┴─────────────┘
//!  w2:  0..9 page 10..19 │ 10..31 offset in the page / 16 (22 bits: 64 MiB pages)
//! ```
//!
//! - 38 bits of hash identify a key: two keys of one shard share them about
//!   once in 2^38 / entries; every key check is exact anyway (a flash read
//!   compares the full key), and a write of a key drops *every* entry with
//!   its bits, so an alias costs at most an early eviction, never an old value.
//! - `version4`: the low 4 bits of the page's version when the item was
//!   written. A reclaimed page gets a new version, so its entries are seen
//!   as stale without visiting them (and swept in the background,
//!   `FlashIndex::sweep`); the record's check is seeded with the full
//!   version, so an alias after 16 reuses still never passes.
//! - `blocks`: 4 KiB blocks the record spans from its aligned start, the
//!   length of its read (records up to 2 MiB).
//! - Grown by 1.125x at 90% full (80-90% full): 13.3-15 bytes per flash
//!   item (a miss probes ~50 entries at 90%: ten sequential cache lines).
//!   Growing and shrinking are the caller's steps, not side effects of
//!   `insert` and `remove`: the slots are counted in `-m` (`budget.rs`),
//!   and a table that may not grow takes entries up to 95% full, then
//!   refuses them (`has_room`).
//! - With a memory file (`-e`) the slots live in a shared file mapping
//!   (`<FILE>.flash/shard.N`: a 64-byte header, then the slots), so a
//!   removed entry is gone from the file at once and a restart finds the
//!   index as it was; a grown table is written to a new file renamed over
//!   the old one. A crash inside a backward shift can leave an entry twice
//!   (both copies identical); recovery keeps one.

use std::path::Path;

use super::probe::{ProbeTable, Slot, DENSE};

pub const MAX_BLOCKS: u32 = (1 << 9) - 1;
pub const MAX_PAGES: u32 = 1 << 20;
/// Offsets are in 16-byte units, 22 bits.
pub const MAX_PAGE_BYTES: u64 = 16 << 22;

/// Bytes of one slot.
pub const SLOT_BYTES: usize = 12;
const FILE_MAGIC: &[u8; 8] = b"STRFSHX1";

/// A flash location with its read length and bookkeeping bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub page: u32,
    /// Byte offset of the record in its page (a multiple of 16).
    pub offset: u64,
    pub blocks: u32,
    pub version4: u8,
    pub freq: u8,
}

fn filter_of(hash: u64) -> u32 {
    ((hash >> 40) & 0x3f) as u32
}

fn pack(hash: u64, e: &Entry) -> [u32; 3] {
    debug_assert!(e.page < MAX_PAGES && e.offset < MAX_PAGE_BYTES && e.offset.is_multiple_of(16) && e.blocks <= MAX_BLOCKS);
    let w1 = 1
        | u32::from(e.freq & 3) << 1
        | u32::from(e.version4 & 0xf) << 3
        | e.blocks << 7
        | filter_of(hash) << 16
        | (e.page & 0x3ff) << 22;
    let w2 = (e.page >> 10) | ((e.offset / 16) as u32) << 10;
    [hash as u32, w1, w2]
}

fn unpack(s: [u32; 3]) -> Entry {
    Entry {
        freq: ((s[1] >> 1) & 3) as u8,
        version4: ((s[1] >> 3) & 0xf) as u8,
        blocks: (s[1] >> 7) & MAX_BLOCKS,
        page: (s[1] >> 22) | (s[2] & 0x3ff) << 10,
        offset: u64::from(s[2] >> 10) * 16,
    }
}

impl Slot for [u32; 3] {
    fn used(&self) -> bool {
        self[1] & 1 != 0
    }
    fn h32(&self) -> u32 {
        self[0]
    }
}

pub struct FlashIndex {
    table: ProbeTable<[u32; 3]>,
    /// Bytes of values clients stored in this shard (write amplification's
    /// denominator), counted under the shard lock.
    pub client_bytes: u64,
}

impl FlashIndex {
    pub fn new() -> FlashIndex {
        FlashIndex { table: ProbeTable::new(FILE_MAGIC, DENSE), client_bytes: 0 }
    }

    /// A persistent index in the file at `path`, holding the entries an
    /// earlier process left there that `keep` accepts (recovery).
    pub fn persistent(path: &Path, mut keep: impl FnMut(&Entry) -> bool) -> std::io::Result<FlashIndex> {
        let table = ProbeTable::persistent(path, FILE_MAGIC, DENSE, |s| keep(&unpack(*s)).then_some(*s))?;
        Ok(FlashIndex { table, client_bytes: 0 })
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The first slot with `hash`'s bits whose entry satisfies `is_it`.
    pub fn find(&self, hash: u64, mut is_it: impl FnMut(&Entry) -> bool) -> Option<usize> {
        let filter = filter_of(hash);
        self.table.find(hash as u32, |s| (s[1] >> 16) & 0x3f == filter && is_it(&unpack(*s)))
    }

    /// The slot of `hash`'s entry for the record at `offset` of `page`:
    /// the key's current copy is that record.
    pub fn find_at(&self, hash: u64, page: u32, offset: u64) -> Option<usize> {
        self.find(hash, |e| e.page == page && e.offset == offset)
    }

    pub fn get(&self, i: usize) -> Entry {
        unpack(self.table.get(i))
    }

    /// Rewrite slot `i` (same key) with a new entry.
    pub fn set(&mut self, i: usize, hash: u64, e: &Entry) {
        self.table.set(i, pack(hash, e));
    }

    /// Bytes of slot memory the table holds (what `-m` is charged).
    pub fn slot_bytes(&self) -> usize {
        self.table.slot_bytes()
    }

    /// The capacity to grow to before the next insert, if it is due.
    pub fn growth(&self) -> Option<usize> {
        self.table.growth()
    }

    /// Whether one more entry fits without growing.
    pub fn has_room(&self) -> bool {
        self.table.has_room()
    }

    /// The capacity to shrink to, if the table is that sparse.
    pub fn shrinkage(&self) -> Option<usize> {
        self.table.shrinkage()
    }

    /// Insert an entry: the caller made room (`growth`, `has_room`).
    pub fn insert(&mut self, hash: u64, e: &Entry) {
        self.table.insert(pack(hash, e));
    }

    /// Move every entry into a table of `capacity` slots.
    pub fn resize(&mut self, capacity: usize) {
        self.table.resize(capacity);
    }

    /// Remove slot `i`, shifting later entries of its cluster back.
    pub fn remove(&mut self, i: usize) {
        self.table.remove(i);
    }

    /// Remove every entry with `hash`'s bits, telling `gone` about each.
    pub fn remove_all(&mut self, hash: u64, mut gone: impl FnMut(&Entry)) {
        while let Some(i) = self.find(hash, |_| true) {
            gone(&self.get(i));
            self.remove(i);
        }
    }

    /// Look at up to `budget` slots from the sweep cursor, removing entries
    /// `stale` says are; true when the cursor wrapped around.
    pub fn sweep(&mut self, budget: usize, mut stale: impl FnMut(&Entry) -> bool) -> bool {
        self.table.sweep(budget, |s| stale(&unpack(*s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn entries_round_trip() {
        let e = Entry { page: MAX_PAGES - 1, offset: MAX_PAGE_BYTES - 16, blocks: MAX_BLOCKS, version4: 15, freq: 3 };
        assert_eq!(unpack(pack(u64::MAX, &e)), e);
        let e = Entry { page: 1234, offset: 4096 + 48, blocks: 2, version4: 5, freq: 1 };
        assert_eq!(unpack(pack(0x1234_5678_9abc_def0, &e)), e);
    }

    #[test]
    fn insert_find_remove_against_a_model() {
        let mut t = FlashIndex::new();
        let mut model: HashMap<u64, Entry> = HashMap::new();
        let mut x: u64 = 11;
        for step in 0..30_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let k = (x >> 33) % 4000;
            // Few distinct homes: long clusters.
            let hash = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) & 0xff00_0000_0000_0000) | (k << 8) | (k & 0xff);
            match t.find(hash, |_| true) {
                Some(i) => {
                    assert_eq!(Some(&t.get(i)), model.get(&hash), "step {step}");
                    t.remove(i);
                    model.remove(&hash);
                }
                None => {
                    assert!(!model.contains_key(&hash), "step {step}");
                    let e = Entry { page: (k % 1000) as u32, offset: k * 16, blocks: 1, version4: (k % 16) as u8, freq: 0 };
                    if let Some(capacity) = t.growth() {
                        t.resize(capacity);
                    }
                    t.insert(hash, &e);
                    model.insert(hash, e);
                }
            }
            assert_eq!(t.len(), model.len());
            if step % 1000 == 999 {
                if let Some(capacity) = t.shrinkage() {
                    t.resize(capacity);
                }
            }
        }
        let before = t.len();
        while !t.sweep(100, |e| e.page % 2 == 0) {}
        assert_eq!(t.len(), model.values().filter(|e| e.page % 2 == 1).count());
        assert!(t.len() < before);
        for (hash, e) in &model {
            assert_eq!(t.find(*hash, |_| true).map(|i| t.get(i)), if e.page % 2 == 1 { Some(*e) } else { None });
        }
    }
}
