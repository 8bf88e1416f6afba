//! What RAM knows of a partition's sets: per set a Bloom filter of the keys
//! it holds and one hit bit per record. Nothing else per item: an item in
//! a set costs its share of these (about 1.4 bytes at 35 items a set).
//!
//! ```text
//!  bloom: sets x bloom_words u64   (ext_set_bloom_bits bits per set, k probes)
//!  hits:  sets x hit_words u64     (bit i: record i of the set was read since
//!                                   the set was written; set size / 64 records)
//! ```
//!
//! - Probes: Kirsch-Mitzenmacher double hashing of the key's 64-bit hash,
//!   remixed (the set is chosen from its low 32 bits, so they are nearly
//!   the same for every key of a set), each position by fastrange over the
//!   set's bits.
//! - A filter is never cleared bit by bit: a deleted or replaced key is
//!   shadowed by an entry of the small index (a tombstone, or its newer
//!   record) until its set is rewritten, which builds a new filter from the
//!   keys it keeps (`merge.rs`).
//! - The filters of an extent are written to the device ahead of its sets,
//!   so a restart reads them back instead of every set; the hit bits start
//!   at zero.

/// The shape of a partition's summaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub bloom_words: usize,
    pub hit_words: usize,
    pub probes: u32,
}

impl Shape {
    /// `bloom_bits` per set (rounded up to 64), sets of `set_bytes`, and
    /// `expected` items in a set for the number of probes.
    pub fn new(bloom_bits: u32, set_bytes: usize, expected: usize) -> Shape {
        let bloom_words = (bloom_bits as usize).div_ceil(64).max(1);
        let bits = bloom_words * 64;
        // The optimal count, ln 2 x bits / items, rounded; at least one.
        let probes = ((bits as f64 * std::f64::consts::LN_2 / expected.max(1) as f64).round() as u32).clamp(1, 16);
        Shape { bloom_words, hit_words: max_records(set_bytes).div_ceil(64), probes }
    }

    /// RAM a set's summary takes.
    pub fn bytes_per_set(&self) -> usize {
        (self.bloom_words + self.hit_words) * 8
    }

    /// Bytes of the filters written ahead of an extent of `sets` sets.
    pub fn bloom_bytes(&self, sets: usize) -> usize {
        sets * self.bloom_words * 8
    }
}

/// The most records a set of `set_bytes` may hold (one hit bit each):
/// one per 64 bytes.
pub fn max_records(set_bytes: usize) -> usize {
    set_bytes / 64
}

/// The two halves of the double hash of `hash`.
fn halves(hash: u64) -> (u32, u32) {
    let x = (hash ^ (hash >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = x ^ (x >> 32);
    ((x >> 32) as u32, (x as u32) | 1)
}

/// `n` zero words, written (not the allocator's lazily zeroed pages: the
/// summaries are charged to -m whole, so they are resident whole, and
/// `stats memory` names what they take).
fn zeroed(n: usize) -> Vec<u64> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0);
    v
}

/// Probe `i`'s bit among `bits`.
fn position(h1: u32, h2: u32, i: u32, bits: u64) -> usize {
    ((u64::from(h1.wrapping_add(i.wrapping_mul(h2))) * bits) >> 32) as usize
}

/// A partition's summaries (module docs).
#[derive(Clone, Debug, Default)]
pub struct Summaries {
    bloom: Vec<u64>,
    hits: Vec<u64>,
    bloom_words: usize,
    hit_words: usize,
    probes: u32,
}

impl Summaries {
    pub fn new(shape: Shape, sets: usize) -> Summaries {
        Summaries {
            bloom: zeroed(sets * shape.bloom_words),
            hits: zeroed(sets * shape.hit_words),
            bloom_words: shape.bloom_words,
            hit_words: shape.hit_words,
            probes: shape.probes,
        }
    }

    /// Summaries whose filters are `bloom` (read back from the device).
    pub fn from_bloom(shape: Shape, sets: usize, bloom: Vec<u64>) -> Option<Summaries> {
        (bloom.len() == sets * shape.bloom_words).then(|| Summaries { hits: zeroed(sets * shape.hit_words), bloom, ..Summaries::new(shape, 0) })
    }

    /// RAM the summaries take.
    pub fn bytes(&self) -> usize {
        (self.bloom.len() + self.hits.len()) * 8
    }

    fn bits(&self) -> u64 {
        self.bloom_words as u64 * 64
    }

    /// Note `hash` in set `set`'s filter.
    pub fn add(&mut self, set: usize, hash: u64) {
        let (h1, h2) = halves(hash);
        let (bits, base) = (self.bits(), set * self.bloom_words);
        for i in 0..self.probes {
            let p = position(h1, h2, i, bits);
            self.bloom[base + p / 64] |= 1 << (p % 64);
        }
    }

    /// Whether set `set` may hold `hash` (false: it certainly does not).
    pub fn may_contain(&self, set: usize, hash: u64) -> bool {
        let (h1, h2) = halves(hash);
        let bits = self.bits();
        let words = &self.bloom[set * self.bloom_words..(set + 1) * self.bloom_words];
        (0..self.probes).all(|i| {
            let p = position(h1, h2, i, bits);
            words[p / 64] & (1 << (p % 64)) != 0
        })
    }

    /// Record `index` of set `set` was read.
    pub fn hit(&mut self, set: usize, index: usize) {
        if index < self.hit_words * 64 {
            self.hits[set * self.hit_words + index / 64] |= 1 << (index % 64);
        }
    }

    /// Whether record `index` of set `set` was read since the set was written.
    pub fn was_hit(&self, set: usize, index: usize) -> bool {
        index < self.hit_words * 64 && self.hits[set * self.hit_words + index / 64] & (1 << (index % 64)) != 0
    }

    /// The filters, for writing ahead of their extent.
    pub fn bloom_words(&self) -> &[u64] {
        &self.bloom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&n.to_le_bytes())
    }

    #[test]
    fn no_false_negatives_and_false_positives_as_expected() {
        let shape = Shape::new(320, 4096, 35);
        assert_eq!((shape.bloom_words, shape.hit_words, shape.probes), (5, 1, 6));
        assert_eq!(shape.bytes_per_set(), 48);
        let sets = 1000;
        let mut s = Summaries::new(shape, sets);
        for set in 0..sets {
            for i in 0..35 {
                s.add(set, hash((set * 100 + i) as u64));
            }
        }
        for set in 0..sets {
            for i in 0..35 {
                assert!(s.may_contain(set, hash((set * 100 + i) as u64)));
            }
        }
        let mut fp = 0;
        for n in 0..100_000u64 {
            fp += usize::from(s.may_contain(n as usize % sets, hash(1 << 40 | n)));
        }
        // Theory at 9.1 bits an item and 6 probes: 1.3%.
        let rate = fp as f64 / 100_000.0;
        assert!((0.005..0.025).contains(&rate), "false positive rate {rate}");
        s.hit(3, 40);
        assert!(s.was_hit(3, 40) && !s.was_hit(3, 41) && !s.was_hit(4, 40));
        s.hit(3, 64); // past the hit bits: ignored
        assert!(!s.was_hit(3, 64));
        let back = Summaries::from_bloom(shape, sets, s.bloom_words().to_vec()).expect("same size");
        assert!(back.may_contain(7, hash(705)) && !back.was_hit(3, 40));
    }
}
