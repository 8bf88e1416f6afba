//! One miniature cache for `stats mrc` (`mrc.rs`): Strata's eviction, S3-FIFO
//! at segment granularity (`strata-store/src/seg/shard.rs`), run on the
//! sampled keys' hashes and sizes only, at a scaled-down capacity (Waldspurger
//! et al., "Cache Modeling and Optimization using Miniature Simulations",
//! ATC'17: a cache of `size x R` fed a spatial sample at rate `R` misses
//! like the full cache of `size`).
//!
//! ```text
//!  index: key hash -> Entry: seg 24 bits | slot 32 | freq 0..=MAX_FREQ (mrc_index.rs)
//!  segs[id]: hashes Vec<key hash>, sizes Vec<bytes>, used bytes  (capacity seg_bytes)
//!  open:  one Small, one Main segment, appended to
//!  small, main: sealed segment ids in seal order (the two FIFO queues)
//! ```
//!
//! As in a shard: a new item goes to the open Small segment; a read sets
//! freq + 1 (at most `MAX_FREQ`); with every segment taken, the victim is the
//! oldest sealed Small segment while Small holds over `SMALL_SHARE_PERCENT`
//! of the sealed ones, else
//! the oldest Main one; walking it, items read since written (freq > 0) are
//! rewritten into the open Main segment with freq - 1, up to `KEEP_PERCENT` of a
//! segment, the rest leave. An entry whose (seg, slot) no longer matches is
//! a dead copy (the item was rewritten or replaced), skipped. The number of
//! segments is a real shard's at that memory size (`segments_per_shard`),
//! so victims are the same share of the cache as Strata's.

use std::collections::VecDeque;

// The store's own policy constants, so the model follows any retuning.
use strata_store::seg::{KEEP_PERCENT, MAX_FREQ, SMALL_SHARE_PERCENT};

use super::mrc_index::Index;

/// A sampled key's copy: its segment, its slot there and its frequency,
/// packed in one word so an index entry is 16 bytes, not 24 (the
/// simulations are `stats mrc`'s whole memory).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Entry(u64);

impl Entry {
    const SEG_BITS: u32 = 24;

    fn new(seg: u32, slot: u32, freq: u8) -> Entry {
        debug_assert!(seg < 1 << Self::SEG_BITS);
        Entry(u64::from(seg) << 40 | u64::from(slot) << 8 | u64::from(freq))
    }

    fn seg(self) -> u32 {
        (self.0 >> 40) as u32
    }

    fn slot(self) -> u32 {
        (self.0 >> 8) as u32
    }

    fn freq(self) -> u8 {
        self.0 as u8
    }

    fn with_freq(self, freq: u8) -> Entry {
        Entry(self.0 & !0xff | u64::from(freq))
    }
}

/// A segment's items in slot order, hashes and sizes side by side (12
/// bytes an item; a `Vec<(u64, u32)>` pads each to 16).
#[derive(Default)]
struct Seg {
    hashes: Vec<u64>,
    sizes: Vec<u32>,
    used: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Small,
    Main,
}

pub struct Sim {
    seg_bytes: usize,
    max_segs: usize,
    index: Index,
    segs: Vec<Seg>,
    free: Vec<u32>,
    small: VecDeque<u32>,
    main: VecDeque<u32>,
    open_small: Option<u32>,
    open_main: Option<u32>,
    pub hits: u64,
    pub misses: u64,
}

impl Sim {
    /// A miniature cache of `capacity_bytes` in `segments` segments.
    pub fn new(capacity_bytes: usize, segments: usize) -> Sim {
        let max_segs = segments.max(4);
        Sim {
            seg_bytes: (capacity_bytes / max_segs).max(256),
            max_segs,
            index: Index::default(),
            segs: Vec::new(),
            free: Vec::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            open_small: None,
            open_main: None,
            hits: 0,
            misses: 0,
        }
    }

    /// Heap bytes held, at capacity (`stats memory` `mrc_bytes`): the
    /// index's table, the segments' item lists and the queues.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.index.slot_count() * size_of::<(u64, u64)>()
            + self.segs.capacity() * size_of::<Seg>()
            + self.segs.iter().map(|s| s.hashes.capacity() * size_of::<u64>() + s.sizes.capacity() * size_of::<u32>()).sum::<usize>()
            + (self.free.capacity() + self.small.capacity() + self.main.capacity()) * size_of::<u32>()
    }

    /// A read of key `hash`: a hit (and its frequency rises) or a miss.
    pub fn get(&mut self, hash: u64) -> bool {
        match self.index.get_mut(hash) {
            Some(word) => {
                let e = Entry(*word);
                *word = e.with_freq((e.freq() + 1).min(MAX_FREQ)).0;
                self.hits += 1;
                true
            }
            None => {
                self.misses += 1;
                false
            }
        }
    }

    /// A write of key `hash` with an item of `bytes`: a new copy in Small.
    pub fn set(&mut self, hash: u64, bytes: usize) {
        let bytes = bytes.min(self.seg_bytes);
        self.index.remove(hash);
        self.append(Class::Small, hash, bytes, 0);
    }

    fn append(&mut self, class: Class, hash: u64, bytes: usize, freq: u8) {
        let open = match class {
            Class::Small => self.open_small,
            Class::Main => self.open_main,
        };
        let id = match open {
            Some(id) if self.segs[id as usize].used + bytes <= self.seg_bytes => id,
            _ => {
                if let Some(id) = open {
                    let seg = &mut self.segs[id as usize];
                    seg.hashes.shrink_to_fit();
                    seg.sizes.shrink_to_fit();
                    match class {
                        Class::Small => self.small.push_back(id),
                        Class::Main => self.main.push_back(id),
                    }
                }
                // Taken off as open first, so eviction never picks it.
                match class {
                    Class::Small => self.open_small = None,
                    Class::Main => self.open_main = None,
                }
                let id = self.new_segment();
                match class {
                    Class::Small => self.open_small = Some(id),
                    Class::Main => self.open_main = Some(id),
                }
                id
            }
        };
        let seg = &mut self.segs[id as usize];
        seg.hashes.push(hash);
        seg.sizes.push(bytes as u32);
        seg.used += bytes;
        self.index.insert(hash, Entry::new(id, seg.hashes.len() as u32 - 1, freq).0);
    }

    fn in_use(&self) -> usize {
        self.segs.len() - self.free.len()
    }

    fn new_segment(&mut self) -> u32 {
        while self.in_use() >= self.max_segs && self.free.is_empty() {
            if !self.evict_one() {
                break;
            }
        }
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.segs.push(Seg::default());
                self.segs.len() as u32 - 1
            }
        }
    }

    /// Evict the S3-FIFO victim; false if nothing is sealed.
    fn evict_one(&mut self) -> bool {
        let sealed = self.small.len() + self.main.len();
        let from_small = self.main.is_empty() || self.small.len() * 100 > sealed * SMALL_SHARE_PERCENT;
        let victim = if from_small { self.small.pop_front().or_else(|| self.main.pop_front()) } else { self.main.pop_front() };
        let Some(v) = victim else { return false };
        let seg = std::mem::take(&mut self.segs[v as usize]);
        let keep_limit = self.seg_bytes * KEEP_PERCENT / 100;
        let mut kept = Vec::new();
        let mut kept_bytes = 0;
        for (slot, (&hash, &bytes)) in seg.hashes.iter().zip(&seg.sizes).enumerate() {
            let Some(e) = self.index.get(hash).map(Entry) else { continue };
            if e.seg() != v || e.slot() != slot as u32 {
                continue;
            }
            self.index.remove(hash);
            if e.freq() > 0 && kept_bytes + bytes as usize <= keep_limit {
                kept_bytes += bytes as usize;
                kept.push((hash, bytes, e.freq() - 1));
            }
        }
        self.free.push(v);
        for (hash, bytes, freq) in kept {
            self.append(Class::Main, hash, bytes as usize, freq);
        }
        true
    }

    /// Items held (for tests and the memory bound).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// Segments per shard a store of `memory_bytes` has.
pub fn segments_per_shard(memory_bytes: u64) -> usize {
    let (shards, segment) = strata_store::seg::geometry(memory_bytes);
    (memory_bytes.max(1 << 20) as usize / segment / shards).max(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_matches_the_store() {
        assert_eq!(segments_per_shard(64 << 20), 128);
        assert_eq!(segments_per_shard(2 << 20), 8, "4 shards and 64 KiB segments at the least");
        assert_eq!(segments_per_shard(1 << 30), 128, "256 KiB segments from 256 MiB");
        assert_eq!(segments_per_shard(64 << 30), 8192, "32 shards from 1 GiB");
    }

    #[test]
    fn an_entry_packs_its_fields_and_keeps_them_apart() {
        for (seg, slot, freq) in [(0, 0, 0), ((1 << 24) - 1, u32::MAX, MAX_FREQ), (12_345, 678_901, 1)] {
            let e = Entry::new(seg, slot, freq);
            assert_eq!((e.seg(), e.slot(), e.freq()), (seg, slot, freq));
            let f = e.with_freq(2);
            assert_eq!((f.seg(), f.slot(), f.freq()), (seg, slot, 2));
        }
        assert_eq!(std::mem::size_of::<(u64, Entry)>(), 16);
    }

    #[test]
    fn holds_its_capacity_and_keeps_what_is_read() {
        let mut sim = Sim::new(100 * 100, 10);
        for k in 0..1000u64 {
            if !sim.get(k) {
                sim.set(k, 100);
            }
        }
        assert!(sim.len() <= 100 && sim.len() >= 70, "{}", sim.len());
        // A key read again and again survives a one-time scan.
        sim.set(5000, 100);
        for k in 10_000..12_000u64 {
            sim.get(5000);
            sim.set(k, 100);
        }
        assert!(sim.get(5000), "a hot key survives a scan");
    }
}

