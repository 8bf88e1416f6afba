//! A shard's flash index: where each of its keys that live on flash is.
//! Open addressing with linear probing and backward-shift deletion, like the
//! RAM table (`seg/table.rs`), but an entry carries its own hash bits, since
//! rehashing (growth, deletion) cannot read the key from flash.
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
//!   (`<ext_path>.idx/shard.N`: a 64-byte header, then the slots), so a
//!   removed entry is gone from the file at once and a restart finds the
//!   index as it was; a grown table is written to a new file renamed over
//!   the old one. A crash inside a backward shift can leave an entry twice
//!   (both copies identical); recovery keeps one.

use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use super::mapped;

pub const MAX_BLOCKS: u32 = (1 << 9) - 1;
pub const MAX_PAGES: u32 = 1 << 20;
/// Offsets are in 16-byte units, 22 bits.
pub const MAX_PAGE_BYTES: u64 = 16 << 22;

const MIN_CAPACITY: usize = 64;
/// Bytes of one slot.
pub const SLOT_BYTES: usize = 12;
/// Grown at this fill (percent), by an eighth.
const GROW_AT_PERCENT: usize = 90;
/// A table that may not grow takes entries up to this fill.
const FULL_AT_PERCENT: usize = 95;
/// Shrunk to half under this fill.
const SHRINK_UNDER_PERCENT: usize = 20;

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

fn used(s: &[u32; 3]) -> bool {
    s[1] & 1 != 0
}

const FILE_HEAD: usize = 64;
const FILE_MAGIC: &[u8; 8] = b"STRFSHX1";

/// Slot memory: an anonymous mapping (a grown-out table goes back to the
/// kernel whole, where the allocator's heap would keep the old copies'
/// pages: 6 MiB of RSS at 1M flash items), the heap if that mapping
/// fails, or a shared mapping of the shard's index file.
enum Slots {
    Anon { map: MmapMut, capacity: usize },
    Heap(Vec<[u32; 3]>),
    Mapped { map: MmapMut, capacity: usize, path: PathBuf },
}

impl Slots {
    /// Zeroed slots in memory.
    fn anon(capacity: usize) -> Slots {
        match MmapMut::map_anon(capacity * 12) {
            Ok(map) => Slots::Anon { map, capacity },
            Err(_) => Slots::Heap(vec![[0; 3]; capacity]),
        }
    }

    fn mapped(path: &Path, capacity: usize) -> std::io::Result<Slots> {
        let mut map = mapped::create(path, FILE_HEAD + capacity * 12)?;
        map[0..8].copy_from_slice(FILE_MAGIC);
        map[8..16].copy_from_slice(&(capacity as u64).to_le_bytes());
        Ok(Slots::Mapped { map, capacity, path: path.to_path_buf() })
    }

    fn len(&self) -> usize {
        match self {
            Slots::Heap(v) => v.len(),
            Slots::Anon { capacity, .. } => *capacity,
            Slots::Mapped { capacity, .. } => *capacity,
        }
    }
}

impl std::ops::Deref for Slots {
    type Target = [[u32; 3]];
    fn deref(&self) -> &[[u32; 3]] {
        match self {
            Slots::Heap(v) => v,
            Slots::Anon { map, .. } => bytemuck::cast_slice(&map[..]),
            Slots::Mapped { map, capacity, .. } => bytemuck::cast_slice(&map[FILE_HEAD..FILE_HEAD + capacity * 12]),
        }
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut [[u32; 3]] {
        match self {
            Slots::Heap(v) => v,
            Slots::Anon { map, .. } => bytemuck::cast_slice_mut(&mut map[..]),
            Slots::Mapped { map, capacity, .. } => bytemuck::cast_slice_mut(&mut map[FILE_HEAD..FILE_HEAD + *capacity * 12]),
        }
    }
}

/// Where a table is built before it is renamed over `path` (one per shard:
/// shards grow their tables concurrently).
fn new_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// The used slots of an index file left by an earlier process.
fn read_file(path: &Path) -> Vec<[u32; 3]> {
    let Some(map) = mapped::open(path) else { return Vec::new() };
    if map.len() < FILE_HEAD || &map[0..8] != FILE_MAGIC {
        return Vec::new();
    }
    let capacity = u64::from_le_bytes(map[8..16].try_into().expect("8 bytes")) as usize;
    if FILE_HEAD + capacity.saturating_mul(12) > map.len() {
        return Vec::new();
    }
    let slots: &[[u32; 3]] = bytemuck::cast_slice(&map[FILE_HEAD..FILE_HEAD + capacity * 12]);
    slots.iter().copied().filter(used).collect()
}

pub struct FlashIndex {
    slots: Slots,
    len: usize,
    /// Bytes of values clients stored in this shard (write amplification's
    /// denominator), counted under the shard lock.
    pub client_bytes: u64,
    /// Where the background sweep for stale entries goes on.
    pub sweep_at: usize,
}

impl FlashIndex {
    pub fn new() -> FlashIndex {
        FlashIndex { slots: Slots::anon(MIN_CAPACITY), len: 0, client_bytes: 0, sweep_at: 0 }
    }

    /// A persistent index in the file at `path`, holding the entries an
    /// earlier process left there that `keep` accepts (recovery). Built in
    /// `path.new` and renamed over `path`.
    pub fn persistent(path: &Path, mut keep: impl FnMut(&Entry) -> bool) -> std::io::Result<FlashIndex> {
        let old: Vec<[u32; 3]> = read_file(path).into_iter().filter(|s| keep(&unpack(*s))).collect();
        let capacity = (old.len() * 100 / 70 + 1).max(MIN_CAPACITY);
        let fresh = new_path(path);
        let mut index = FlashIndex { slots: Slots::mapped(&fresh, capacity)?, len: 0, client_bytes: 0, sweep_at: 0 };
        for s in old {
            if index.place_unique(s) {
                index.len += 1;
            }
        }
        std::fs::rename(&fresh, path)?;
        if let Slots::Mapped { path: p, .. } = &mut index.slots {
            *p = path.to_path_buf();
        }
        Ok(index)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn home(&self, h32: u32) -> usize {
        ((u64::from(h32) * self.slots.len() as u64) >> 32) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The first slot with `hash`'s bits whose entry satisfies `is_it`.
    pub fn find(&self, hash: u64, mut is_it: impl FnMut(&Entry) -> bool) -> Option<usize> {
        let (h32, filter) = (hash as u32, filter_of(hash));
        let mut i = self.home(h32);
        loop {
            let s = self.slots[i];
            if !used(&s) {
                return None;
            }
            if s[0] == h32 && (s[1] >> 16) & 0x3f == filter && is_it(&unpack(s)) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// The slot of `hash`'s entry for the record at `offset` of `page`:
    /// the key's current copy is that record.
    pub fn find_at(&self, hash: u64, page: u32, offset: u64) -> Option<usize> {
        self.find(hash, |e| e.page == page && e.offset == offset)
    }

    pub fn get(&self, i: usize) -> Entry {
        unpack(self.slots[i])
    }

    /// Rewrite slot `i` (same key) with a new entry.
    pub fn set(&mut self, i: usize, hash: u64, e: &Entry) {
        debug_assert_eq!(self.slots[i][0], hash as u32);
        self.slots[i] = pack(hash, e);
    }

    /// Bytes of slot memory the table holds (what `-m` is charged).
    pub fn slot_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// The capacity to grow to before the next insert, if it is due.
    pub fn growth(&self) -> Option<usize> {
        ((self.len + 1) * 100 > self.slots.len() * GROW_AT_PERCENT).then(|| self.slots.len() + self.slots.len() / 8)
    }

    /// Whether one more entry fits without growing (the fill stays at most
    /// `FULL_AT_PERCENT`).
    pub fn has_room(&self) -> bool {
        (self.len + 1) * 100 <= self.slots.len() * FULL_AT_PERCENT
    }

    /// The capacity to shrink to, if the table is that sparse.
    pub fn shrinkage(&self) -> Option<usize> {
        (self.len * 100 < self.slots.len() * SHRINK_UNDER_PERCENT && self.slots.len() > MIN_CAPACITY * 4).then(|| self.slots.len() / 2)
    }

    /// Insert an entry: the caller made room (`growth`, `has_room`).
    pub fn insert(&mut self, hash: u64, e: &Entry) {
        assert!(self.len < self.slots.len(), "the flash index has a free slot");
        self.place(pack(hash, e));
        self.len += 1;
    }

    fn place(&mut self, s: [u32; 3]) {
        let mut i = self.home(s[0]);
        while used(&self.slots[i]) {
            i = self.next(i);
        }
        self.slots[i] = s;
    }

    /// `place`, unless an identical slot is already in the cluster.
    fn place_unique(&mut self, s: [u32; 3]) -> bool {
        let mut i = self.home(s[0]);
        while used(&self.slots[i]) {
            if self.slots[i] == s {
                return false;
            }
            i = self.next(i);
        }
        self.slots[i] = s;
        true
    }

    /// Move every entry into a table of `capacity` slots (at least the
    /// entries and `MIN_CAPACITY`); the sweep starts over.
    pub fn resize(&mut self, capacity: usize) {
        let capacity = capacity.max(MIN_CAPACITY).max(self.len + 1);
        self.sweep_at = 0;
        let fresh = match &self.slots {
            Slots::Heap(_) | Slots::Anon { .. } => Slots::anon(capacity),
            Slots::Mapped { path, .. } => {
                let tmp = new_path(path);
                match Slots::mapped(&tmp, capacity) {
                    Ok(slots) => slots,
                    // No room for the grown file: go on in memory, and
                    // remove the old file so a restart cannot bring back
                    // entries removed from now on.
                    Err(_) => {
                        let _ = std::fs::remove_file(path);
                        Slots::anon(capacity)
                    }
                }
            }
        };
        let old = std::mem::replace(&mut self.slots, fresh);
        for s in old.iter().copied().filter(used) {
            self.place(s);
        }
        if let (Slots::Mapped { path: old_path, .. }, Slots::Mapped { path, .. }) = (&old, &mut self.slots) {
            if std::fs::rename(&*path, old_path).is_ok() {
                *path = old_path.clone();
            }
        }
    }

    /// Remove slot `i`, shifting later entries of its cluster back.
    pub fn remove(&mut self, i: usize) {
        let mut hole = i;
        let mut j = self.next(i);
        loop {
            let s = self.slots[j];
            if !used(&s) {
                break;
            }
            let home = self.home(s[0]);
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
            j = self.next(j);
        }
        self.slots[hole] = [0; 3];
        self.len -= 1;
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
        let mut looked = 0;
        while looked < budget {
            if self.sweep_at >= self.slots.len() {
                self.sweep_at = 0;
                return true;
            }
            let i = self.sweep_at;
            let s = self.slots[i];
            looked += 1;
            if used(&s) && stale(&unpack(s)) {
                // Something may shift into `i`: look at it again.
                self.remove(i);
                continue;
            }
            self.sweep_at += 1;
        }
        false
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
