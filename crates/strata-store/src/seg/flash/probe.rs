//! The open-addressing table both flash indexes are built on (the flash
//! tier's `index.rs`, 12-byte entries, and the small store's
//! `small/index.rs`, 8-byte entries): linear probing from a home slot
//! chosen by fastrange on 32 bits of the key's hash (`Slot::h32`, which an
//! index may mix first), backward-shift deletion, no tombstones. Each slot
//! carries its hash bits itself, since rehashing (growth, deletion) cannot
//! read the key from flash.
//!
//! ```text
//!  home(h32) = h32 * capacity >> 32
//!  slots: │ … │ a │ b │ c │ 0 │ … │
//!            ▲ home(a)   ▲ first empty
//! ```
//!
//! Slot memory ([`Slots`]) is an anonymous mapping (a grown-out table goes
//! back to the kernel whole), the heap if that mapping fails, or a shared
//! mapping of a file (`-e`): a 64-byte header (magic, capacity), then the
//! slots, changed in place, so a restart finds the table as it was; a
//! grown table is written to `<path>.new` and renamed over the old one.
//! Growing and shrinking are the caller's steps (the slots are counted in
//! `-m`), never side effects of `insert` and `remove`.

use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use super::mapped;

/// One slot of a table: plain bytes, all zero when empty.
pub trait Slot: bytemuck::Pod + PartialEq {
    fn used(&self) -> bool;
    /// The 32 hash bits the home slot is chosen from.
    fn h32(&self) -> u32;
}

const MIN_CAPACITY: usize = 64;
const FILE_HEAD: usize = 64;

/// Slot memory (module docs).
enum Slots<S> {
    Anon { map: MmapMut, capacity: usize },
    Heap(Vec<S>),
    Mapped { map: MmapMut, capacity: usize, path: PathBuf },
}

impl<S: Slot> Slots<S> {
    fn anon(capacity: usize) -> Slots<S> {
        match MmapMut::map_anon(capacity * size_of::<S>()) {
            Ok(map) => Slots::Anon { map, capacity },
            Err(_) => Slots::Heap(vec![S::zeroed(); capacity]),
        }
    }

    fn mapped(path: &Path, magic: &[u8; 8], capacity: usize) -> std::io::Result<Slots<S>> {
        let mut map = mapped::create(path, FILE_HEAD + capacity * size_of::<S>())?;
        map[0..8].copy_from_slice(magic);
        map[8..16].copy_from_slice(&(capacity as u64).to_le_bytes());
        Ok(Slots::Mapped { map, capacity, path: path.to_path_buf() })
    }

    fn len(&self) -> usize {
        match self {
            Slots::Heap(v) => v.len(),
            Slots::Anon { capacity, .. } | Slots::Mapped { capacity, .. } => *capacity,
        }
    }
}

impl<S: Slot> std::ops::Deref for Slots<S> {
    type Target = [S];
    fn deref(&self) -> &[S] {
        match self {
            Slots::Heap(v) => v,
            Slots::Anon { map, .. } => bytemuck::cast_slice(&map[..]),
            Slots::Mapped { map, capacity, .. } => bytemuck::cast_slice(&map[FILE_HEAD..FILE_HEAD + capacity * size_of::<S>()]),
        }
    }
}

impl<S: Slot> std::ops::DerefMut for Slots<S> {
    fn deref_mut(&mut self) -> &mut [S] {
        match self {
            Slots::Heap(v) => v,
            Slots::Anon { map, .. } => bytemuck::cast_slice_mut(&mut map[..]),
            Slots::Mapped { map, capacity, .. } => {
                let end = FILE_HEAD + *capacity * size_of::<S>();
                bytemuck::cast_slice_mut(&mut map[FILE_HEAD..end])
            }
        }
    }
}

/// Where a table is built before it is renamed over `path` (one per file:
/// shards grow their tables concurrently).
fn new_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// The used slots of a table file an earlier process left (magic checked).
fn read_file<S: Slot>(path: &Path, magic: &[u8; 8]) -> Vec<S> {
    let Some(map) = mapped::open(path) else { return Vec::new() };
    if map.len() < FILE_HEAD || &map[0..8] != magic {
        return Vec::new();
    }
    let capacity = u64::from_le_bytes(map[8..16].try_into().expect("8 bytes")) as usize;
    // Checked: a damaged capacity near usize::MAX must not wrap past the test.
    let Some(end) = capacity.checked_mul(size_of::<S>()).and_then(|b| b.checked_add(FILE_HEAD)).filter(|&end| end <= map.len()) else {
        return Vec::new();
    };
    let slots: &[S] = bytemuck::cast_slice(&map[FILE_HEAD..end]);
    slots.iter().copied().filter(Slot::used).collect()
}

/// The table (module docs). `grow_at` and `full_at` are fills in percent.
pub struct ProbeTable<S: Slot> {
    slots: Slots<S>,
    len: usize,
    magic: &'static [u8; 8],
    /// Where the background sweep for stale entries goes on.
    pub sweep_at: usize,
    fill: Fill,
}

/// How full a table gets: grown (by an eighth) past `grow_at` percent; one
/// that may not grow takes entries up to `full_at` percent. A lookup that
/// misses probes about (1 + 1/(1 - fill)²) / 2 slots: ~13 at 75%, ~50 at
/// 90%, ~200 at 95%.
#[derive(Clone, Copy, Debug)]
pub struct Fill {
    pub grow_at: usize,
    pub full_at: usize,
}

/// The flash index's: memory first (its lookups follow a RAM miss only).
pub const DENSE: Fill = Fill { grow_at: 90, full_at: 95 };
/// Shrunk to half under this fill.
const SHRINK_UNDER_PERCENT: usize = 20;

impl<S: Slot> ProbeTable<S> {
    /// An empty table in memory; `magic` names its file kind if it is
    /// ever made persistent (not here).
    pub fn new(magic: &'static [u8; 8], fill: Fill) -> ProbeTable<S> {
        ProbeTable { slots: Slots::anon(MIN_CAPACITY), len: 0, magic, sweep_at: 0, fill }
    }

    /// A persistent table in the file at `path`, holding the entries an
    /// earlier process left there that `keep` accepts (recovery). Built in
    /// `path.new` and renamed over `path`. A crash inside a backward shift
    /// can leave an entry twice (both copies identical): one is kept.
    pub fn persistent(path: &Path, magic: &'static [u8; 8], fill: Fill, mut keep: impl FnMut(&S) -> Option<S>) -> std::io::Result<ProbeTable<S>> {
        let old: Vec<S> = read_file::<S>(path, magic).into_iter().filter_map(|s| keep(&s)).collect();
        let capacity = (old.len() * 100 / (fill.grow_at - 20) + 1).max(MIN_CAPACITY);
        let fresh = new_path(path);
        let mut table = ProbeTable { slots: Slots::mapped(&fresh, magic, capacity)?, len: 0, magic, sweep_at: 0, fill };
        for s in old {
            if table.place_unique(s) {
                table.len += 1;
            }
        }
        std::fs::rename(&fresh, path)?;
        if let Slots::Mapped { path: p, .. } = &mut table.slots {
            *p = path.to_path_buf();
        }
        Ok(table)
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

    /// The first slot with `h32` whose entry satisfies `is_it`.
    /// The longest run of used slots (tests: how far a lookup may probe).
    #[cfg(test)]
    pub fn longest_run(&self) -> usize {
        let (mut longest, mut run) = (0, 0);
        for s in self.slots.iter() {
            run = if s.used() { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        longest
    }

    pub fn find(&self, h32: u32, mut is_it: impl FnMut(&S) -> bool) -> Option<usize> {
        let slots: &[S] = &self.slots;
        let n = slots.len();
        let mut i = self.home(h32);
        loop {
            let s = &slots[i];
            if !s.used() {
                return None;
            }
            if s.h32() == h32 && is_it(s) {
                return Some(i);
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
    }

    pub fn get(&self, i: usize) -> S {
        self.slots[i]
    }

    /// Rewrite slot `i` with an entry of the same `h32`.
    pub fn set(&mut self, i: usize, s: S) {
        debug_assert_eq!(self.slots[i].h32(), s.h32());
        self.slots[i] = s;
    }

    /// Bytes of slot memory the table holds (what `-m` is charged).
    pub fn slot_bytes(&self) -> usize {
        self.slots.len() * size_of::<S>()
    }

    /// The capacity to grow to before the next insert, if it is due.
    pub fn growth(&self) -> Option<usize> {
        ((self.len + 1) * 100 > self.slots.len() * self.fill.grow_at).then(|| self.slots.len() + self.slots.len() / 8)
    }

    /// Whether one more entry fits without growing (the fill stays at most
    /// `full_at`).
    pub fn has_room(&self) -> bool {
        (self.len + 1) * 100 <= self.slots.len() * self.fill.full_at
    }

    /// The capacity that holds the entries at `percent` full.
    pub fn fit(&self, percent: usize) -> usize {
        ((self.len + 1) * 100 / percent.max(1)).max(MIN_CAPACITY)
    }

    /// The capacity to shrink to, if the table is that sparse.
    pub fn shrinkage(&self) -> Option<usize> {
        (self.len * 100 < self.slots.len() * SHRINK_UNDER_PERCENT && self.slots.len() > MIN_CAPACITY * 4).then(|| self.slots.len() / 2)
    }

    /// Insert an entry: the caller made room (`growth`, `has_room`).
    pub fn insert(&mut self, s: S) {
        assert!(self.len < self.slots.len(), "the flash index has a free slot");
        self.place(s);
        self.len += 1;
    }

    fn place(&mut self, s: S) {
        let mut i = self.home(s.h32());
        while self.slots[i].used() {
            i = self.next(i);
        }
        self.slots[i] = s;
    }

    /// `place`, unless an identical slot is already in the cluster.
    fn place_unique(&mut self, s: S) -> bool {
        let mut i = self.home(s.h32());
        while self.slots[i].used() {
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
            Slots::Mapped { path, .. } => match Slots::mapped(&new_path(path), self.magic, capacity) {
                Ok(slots) => slots,
                // No room for the grown file: go on in memory, and remove
                // the old file so a restart cannot bring back entries
                // removed from now on.
                Err(_) => {
                    let _ = std::fs::remove_file(path);
                    Slots::anon(capacity)
                }
            },
        };
        let old = std::mem::replace(&mut self.slots, fresh);
        for s in old.iter().copied().filter(Slot::used) {
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
            if !s.used() {
                break;
            }
            let home = self.home(s.h32());
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
            j = self.next(j);
        }
        self.slots[hole] = S::zeroed();
        self.len -= 1;
    }

    /// Look at up to `budget` slots from the sweep cursor, removing entries
    /// `stale` says are; true when the cursor wrapped around.
    pub fn sweep(&mut self, budget: usize, mut stale: impl FnMut(&S) -> bool) -> bool {
        let mut looked = 0;
        while looked < budget {
            if self.sweep_at >= self.slots.len() {
                self.sweep_at = 0;
                return true;
            }
            let i = self.sweep_at;
            let s = self.slots[i];
            looked += 1;
            if s.used() && stale(&s) {
                // Something may shift into `i`: look at it again.
                self.remove(i);
                continue;
            }
            self.sweep_at += 1;
        }
        false
    }

    /// Every entry, each passed to `visit`, which keeps or removes it;
    /// those removed then go one by one (each from its home, by value).
    pub fn scan(&self, mut visit: impl FnMut(&S)) {
        for s in self.slots.iter().filter(|s| s.used()) {
            visit(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type T = [u32; 2];

    impl Slot for T {
        fn used(&self) -> bool {
            self[1] != 0
        }
        fn h32(&self) -> u32 {
            self[0]
        }
    }

    /// A table file whose capacity field is damaged to a huge number (so
    /// capacity × slot size + header wraps) is read as empty, not a panic.
    #[test]
    fn a_file_with_a_huge_capacity_reads_as_empty() {
        let dir = std::env::temp_dir().join(format!("strata-probe-capacity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        for capacity in [u64::MAX, u64::MAX / 8 + 1, (u64::MAX - 63) / 8 + 1, 1 << 61] {
            let mut bytes = vec![0u8; FILE_HEAD + 64 * 8];
            bytes[..8].copy_from_slice(b"TESTTST1");
            bytes[8..16].copy_from_slice(&capacity.to_le_bytes());
            std::fs::write(&path, &bytes).unwrap();
            assert!(read_file::<T>(&path, b"TESTTST1").is_empty(), "capacity {capacity:#x}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_range_scan_sees_exactly_the_entries_of_its_range() {
        let mut t: ProbeTable<T> = ProbeTable::new(b"TESTTST1", DENSE);
        let mut x: u64 = 7;
        let mut all = Vec::new();
        for n in 1..=5000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Clustered hashes: long runs, and some near both ends (wrap).
            let h = if n % 7 == 0 { u32::MAX - (n % 50) } else { (x >> 40) as u32 * 97 };
            if let Some(c) = t.growth() {
                t.resize(c);
            }
            t.insert([h, n]);
            all.push((h, n));
        }
        let mut seen = Vec::new();
        t.scan(|s| seen.push((s[0], s[1])));
        seen.sort_unstable();
        let mut want = all.clone();
        want.sort_unstable();
        assert_eq!(seen, want);
        // Remove every odd entry of a range; the rest stays findable.
        let (lo, hi) = (0, u32::MAX / 3);
        let mut gone = Vec::new();
        t.scan(|s| {
            if (lo..=hi).contains(&s[0]) && s[1] % 2 == 1 {
                gone.push(*s);
            }
        });
        for s in gone {
            let i = t.find(s[0], |x| *x == s).expect("a scanned entry");
            t.remove(i);
        }
        for &(h, n) in &all {
            let gone = (lo..=hi).contains(&h) && n % 2 == 1;
            assert_eq!(t.find(h, |s| s[1] == n).is_some(), !gone, "entry {n}");
        }
        assert_eq!(t.len(), all.iter().filter(|(h, n)| !((lo..=hi).contains(h) && n % 2 == 1)).count());
    }
}
