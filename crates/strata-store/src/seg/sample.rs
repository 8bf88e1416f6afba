//! The access sample behind the server's `stats mrc` (`strata-server/src/
//! ops/mrc.rs`): the store already hashes every key (xxh3), so it decides
//! here, for one multiply and a compare, whether a get or store belongs to
//! the spatial sample, and hands sampled ones to the installed
//! [`AccessSampler`](crate::AccessSampler).
//!
//! ```text
//!  hash ──x K (odd), top 32 bits──► < Globals::sample_threshold ? ──► sampler.get(hash)
//!                                     (0 = no sampler: one load, one branch)    sampler.stored(hash, bytes)
//! ```
//!
//! The multiply makes the decision depend on every bit of the hash, so it
//! is independent of the shard (top bits) and of the home slot (low bits).

use std::sync::atomic::Ordering;

use super::SegStore;

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
/// Bytes a stored item is reported with beyond key and value (its header,
/// about 7 bytes with a CAS delta; `item.rs`).
pub const ITEM_HEADER_BYTES: usize = 7;

/// Whether `hash` is in a sample whose threshold is `threshold` (of 2^32).
#[inline]
pub fn in_sample(hash: u64, threshold: u64) -> bool {
    hash.wrapping_mul(MIX) >> 32 < threshold
}

impl SegStore {
    /// A counted read of a key hashing to `hash`.
    #[inline]
    pub(super) fn sample_get(&self, hash: u64) {
        let threshold = self.g.sample_threshold.load(Ordering::Relaxed);
        if threshold != 0 && in_sample(hash, threshold) {
            if let Some(s) = self.g.sampler.get() {
                s.get(hash);
            }
        }
    }

    /// A stored item of `bytes` (key, value, header) for `hash`.
    #[inline]
    pub(super) fn sample_stored(&self, hash: u64, bytes: usize) {
        let threshold = self.g.sample_threshold.load(Ordering::Relaxed);
        if threshold != 0 && in_sample(hash, threshold) {
            if let Some(s) = self.g.sampler.get() {
                s.stored(hash, bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_rate_is_the_threshold_over_2_32() {
        let threshold = (1u64 << 32) / 64;
        let n = 1_000_000u64;
        let sampled = (0..n).filter(|i| in_sample(crate::hash_key(format!("key:{i}").as_bytes()), threshold)).count() as u64;
        assert!(sampled.abs_diff(n / 64) < n / 640, "{sampled}");
    }
}
