//! Scan resistance: S3-FIFO's ghost queue, as fingerprints of keys a shard
//! evicted unread from `Small`.
//!
//! A demand-filled cache sees a key it evicted come back as a miss and then
//! a set. If that key was evicted from `Small` without being read (so it
//! was not promoted to `Main`), the ghost remembers a fingerprint of it;
//! when the key is set again while the ghost still holds it, the new item
//! is linked with frequency 1, so the next eviction of its `Small` segment
//! rewrites it into `Main` instead of dropping it. One-time keys (a scan)
//! never come back and only pass through `Small`; keys that return at
//! intervals longer than a `Small` segment's life, which S3-FIFO without a
//! ghost never promotes, now reach `Main`.
//!
//! ```text
//!  hash ──mix──┬─ bits 32..63 ──► bucket (fastrange over the buckets)
//!              └─ bits 8..17 ───► 10-bit tag (0 = empty)
//!
//!  bucket (u64): 63..60   59..50   ...   19..10   9..0
//!               ┌──────┬────────┬─────┬────────┬────────┐
//!               │ 0000 │ tag 6  │ ... │ tag 2  │ tag 1  │   tag 1 newest
//!               └──────┴────────┴─────┴────────┴────────┘
//! ```
//!
//! Each bucket is a FIFO of six 10-bit tags: remembering shifts the bucket
//! up by one tag (the oldest falls off) and puts the new tag at the bottom;
//! a key found on its set is taken out (the older tags move down). A lookup
//! reads one `u64`; a new key matches a stranger's tag with probability
//! 6/1024 (it is then promoted as if it had returned: harmless).
//!
//! Size: [`BYTES_PER_ITEM`] bytes (2.4 tags) for each item the shard holds
//! when it first evicts, so the ghost covers about 2.4 times the shard's
//! items in evictions: keys that return after up to roughly that many
//! one-time keys passed through. It is allocated on the shard's first
//! eviction (a cache that never fills has none; `docs/bench/store.md`'s
//! density run never allocates it) and re-sized, empty, when the shard's
//! item count has since halved or doubled, so it stays between 1.5 and 6
//! bytes per item held. Like the index past its first size, it is counted
//! in `-m` (`shard/charge.rs`). `stats`
//! reports its bytes (`ghost_bytes`) and the returning keys it caught
//! (`ghost_hits`).
//!
//! Measured with `scripts/bench/hitratio.py --warmup 3000000` (-m 64,
//! replayed in process by `examples/lab/hitreplay.rs`; every figure in
//! docs/bench/store.md): zipf 0.1157 -> 0.1166, zipf + 20% scan 0.3211 ->
//! 0.3063. Tags of 8 bits let scan keys in by false matches (0.3129);
//! 16-bit tags at the same bytes cover fewer evictions (0.3075); sending
//! returning keys straight to a `Main` segment (frequency 0) promotes the
//! same keys but churns `Main` (zipf 0.1183, scan 0.3088 at 2 tags/item).

/// Tags a bucket holds, and their width.
const WAYS: u32 = 6;
const TAG_BITS: u32 = 10;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Ghost bytes per item the shard holds (one bucket, 8 bytes, per 8/3 items).
pub const BYTES_PER_ITEM: usize = 3;

#[derive(Default)]
pub struct Ghost {
    buckets: Vec<u64>,
    /// Keys found again on their set (`ghost_hits`).
    pub hits: u64,
}

/// The bucket and tag of `hash` among `buckets` buckets.
fn place(hash: u64, buckets: usize) -> (usize, u64) {
    // The shard and the index already use the hash's own bits: mix first.
    let m = (hash ^ (hash >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let bucket = (((m >> 32) * buckets as u64) >> 32) as usize;
    let tag = ((m >> 8) & TAG_MASK).max(1);
    (bucket, tag)
}

impl Ghost {
    /// Remember `hash`, a key evicted unread from `Small`; `items` is what
    /// the shard holds now (it sizes the ghost).
    pub fn remember(&mut self, hash: u64, items: usize) {
        let want = (items * BYTES_PER_ITEM / 8).max(1);
        let have = self.buckets.len();
        if have == 0 || want > have * 2 || want * 2 < have {
            self.buckets = vec![0; want];
        }
        let (b, tag) = place(hash, self.buckets.len());
        let bucket = &mut self.buckets[b];
        *bucket = (*bucket << TAG_BITS | tag) & ((1 << (WAYS * TAG_BITS)) - 1);
    }

    /// Whether `hash` was remembered; it is forgotten if so.
    pub fn take(&mut self, hash: u64) -> bool {
        if self.buckets.is_empty() {
            return false;
        }
        let (b, tag) = place(hash, self.buckets.len());
        let bucket = &mut self.buckets[b];
        for way in 0..WAYS {
            let shift = way * TAG_BITS;
            if (*bucket >> shift) & TAG_MASK == tag {
                let newer = *bucket & ((1 << shift) - 1);
                let older = *bucket >> (shift + TAG_BITS) << shift;
                *bucket = newer | older;
                self.hits += 1;
                return true;
            }
        }
        false
    }

    /// Bring `hash`'s bucket into the cache ahead of [`Ghost::remember`].
    pub fn prefetch(&self, hash: u64) {
        if !self.buckets.is_empty() {
            crate::prefetch::line(&self.buckets[place(hash, self.buckets.len()).0]);
        }
    }

    /// Bytes held (`ghost_bytes`).
    pub fn bytes(&self) -> usize {
        self.buckets.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_newest_and_forgets_what_it_returns() {
        let mut g = Ghost::default();
        let hashes: Vec<u64> = (0..40u64).map(|i| i.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x1234).collect();
        for &h in &hashes {
            g.remember(h, 1);
        }
        assert_eq!(g.bytes(), 8, "one item: one bucket");
        // One bucket of six holds the last six remembered.
        for &h in &hashes[34..] {
            assert!(g.take(h), "recent key forgotten");
        }
        for &h in &hashes[34..] {
            assert!(!g.take(h), "a key is taken once");
        }
        let stale = hashes[..34].iter().filter(|&&h| g.take(h)).count();
        assert!(stale <= 1, "old keys fell off ({stale} false matches)");
    }

    #[test]
    fn taking_one_keeps_the_others_in_order() {
        let mut g = Ghost::default();
        g.remember(1, 1);
        for h in [11u64, 22, 33, 44] {
            g.remember(h, 1);
        }
        assert!(g.take(22));
        // Two more fill the bucket again: the oldest (1) is the one pushed out.
        g.remember(55, 1);
        g.remember(66, 1);
        g.remember(77, 1);
        assert!(!g.take(1));
        for h in [11u64, 33, 44, 55, 66, 77] {
            assert!(g.take(h), "{h}");
        }
    }

    #[test]
    fn sized_by_items_and_resized_when_they_change() {
        let mut g = Ghost::default();
        g.remember(5, 80_000);
        assert_eq!(g.bytes(), 80_000 * BYTES_PER_ITEM / 8 * 8);
        g.remember(6, 100_000);
        assert_eq!(g.bytes(), 80_000 * BYTES_PER_ITEM, "within 2x: kept");
        assert!(g.take(5));
        g.remember(7, 10_000);
        assert_eq!(g.bytes(), 10_000 * BYTES_PER_ITEM / 8 * 8, "shrunk");
        assert!(!g.take(6), "a re-sized ghost starts empty");
    }
}
