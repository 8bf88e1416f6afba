//! `stats mrc`: an online miss-ratio curve, the miss ratio Strata would have
//! had at 0.25x .. 8x its current memory limit, from miniature simulations
//! (ATC'17) fed a spatially hashed sample of the keys (SHARDS, FAST'15).
//!
//! ```text
//!  get / mg key ──cheap hash h──► h >> 32 < threshold? ──no──► done (most requests)
//!  set / ms key ─┘                      │ yes (rate R = threshold / 2^32)
//!                                       ▼
//!           Mutex<Curve>: one mrc_sim::Sim per scale s in SCALES,
//!           capacity s x limit x R, S3-FIFO at segment granularity
//!           (a get: hit or miss in each; a set: a new copy in each)
//! ```
//!
//! The sample is spatial: a key is in it or not by its hash, so every
//! request of a sampled key is seen and the sampled keys' reuse is exact.
//! `R` keeps the 1x simulation near [`SIM_BYTES_AT_1X`] whatever `-m` is
//! (1/64 at `-m 64`, 1/1024 at 1 GiB; at most 1/16), so the curve costs a
//! few MiB. Estimates use SHARDS' adjustment: misses are divided by
//! `R x` all gets counted in `stats` (not by the sampled gets), so a hot
//! key that happens to be in (or out of) the sample does not tilt the curve.
//!
//! Window: counts cover the current and the previous [`WINDOW_S`]-second
//! window (60-120 s of traffic); `stats reset` restarts them (the simulated
//! caches stay warm). A limit that moves by more than an eighth
//! (`cache_memlimit`, `-m auto`) rebuilds the simulations for the new size.
//!
//! Reply (Strata's own), sizes in megabytes of `-m`, as `stats hotkeys`:
//!
//! ```text
//! STAT enabled 1
//! STAT sample_one_in 64
//! STAT window_seconds 60
//! STAT mrc:16 0.4512
//! ...
//! STAT mrc:512 0.1020
//! END
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::mrc_sim::{segments_per_shard, Sim};
use crate::shared::Shared;

/// Cache sizes simulated, in quarters of the limit: 0.25x .. 8x.
pub const SCALES_QUARTERS: [u64; 6] = [1, 2, 4, 8, 16, 32];
/// Simulated bytes at 1x: about 4,500 items of 230 bytes.
pub const SIM_BYTES_AT_1X: u64 = 1 << 20;
pub const WINDOW_S: u32 = 60;
/// Bytes an item takes in a segment beyond key and value (header, CAS).
const ITEM_OVERHEAD_BYTES: usize = 10;

pub struct Mrc {
    /// Keys whose hash's high 32 bits are below this are sampled.
    threshold: AtomicU64,
    curve: Mutex<Curve>,
}

struct Curve {
    limit_bytes: u64,
    sample_one_in: u64,
    sims: Vec<Sim>,
    /// Misses of each sim at the start of the current and previous windows.
    window_start_s: u32,
    base_prev: Vec<u64>,
    base_cur: Vec<u64>,
    gets_prev: u64,
    gets_cur: u64,
}

fn sample_one_in(limit_bytes: u64) -> u64 {
    (limit_bytes / SIM_BYTES_AT_1X).max(1).next_power_of_two().clamp(16, 1 << 24)
}

impl Curve {
    fn new(limit_bytes: u64, now_s: u32, gets: u64) -> Curve {
        let one_in = sample_one_in(limit_bytes);
        let sims = SCALES_QUARTERS
            .iter()
            .map(|&q| {
                let real = limit_bytes * q / 4;
                Sim::new((real / one_in) as usize, segments_per_shard(real))
            })
            .collect();
        let n = SCALES_QUARTERS.len();
        Curve { limit_bytes, sample_one_in: one_in, sims, window_start_s: now_s, base_prev: vec![0; n], base_cur: vec![0; n], gets_prev: gets, gets_cur: gets }
    }

    fn restart(&mut self, gets: u64) {
        for (i, sim) in self.sims.iter().enumerate() {
            self.base_prev[i] = sim.misses;
            self.base_cur[i] = sim.misses;
        }
        self.gets_prev = gets;
        self.gets_cur = gets;
    }
}

fn threshold(one_in: u64) -> u64 {
    (1u64 << 32) / one_in
}

/// A fast 64-bit hash of a key for the sampling decision (not the store's
/// xxh3, which costs more on every request): 8 bytes at a time, multiply and
/// rotate, then a final mix so the high bits depend on every byte.
#[inline]
pub fn sample_hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = key.len() as u64 ^ 0x2545_f491_4f6c_dd1d;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ w).wrapping_mul(K).rotate_left(31);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(31);
    }
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 32)
}

impl Mrc {
    pub fn new(limit_bytes: u64) -> Mrc {
        let curve = Curve::new(limit_bytes, 0, 0);
        Mrc { threshold: AtomicU64::new(threshold(curve.sample_one_in)), curve: Mutex::new(curve) }
    }

    fn curve(&self) -> std::sync::MutexGuard<'_, Curve> {
        self.curve.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hash of `key` if it is in the sample.
    #[inline]
    fn sampled(&self, key: &[u8]) -> Option<u64> {
        let h = sample_hash(key);
        ((h >> 32) < self.threshold.load(Ordering::Relaxed)).then_some(h)
    }

    /// A sampled key's request: roll windows, follow the limit, then `f`.
    #[cold]
    fn record(&self, shared: &Shared, f: impl FnOnce(&mut Curve)) {
        let now_s = shared.clock.now();
        let limit = shared.memory_limit_bytes.load(Ordering::Relaxed);
        let mut c = self.curve();
        if limit.abs_diff(c.limit_bytes) > c.limit_bytes / 8 {
            *c = Curve::new(limit, now_s, gets(shared));
            self.threshold.store(threshold(c.sample_one_in), Ordering::Relaxed);
        } else if now_s.saturating_sub(c.window_start_s) >= WINDOW_S {
            let gets = gets(shared);
            c.window_start_s = now_s;
            c.base_prev = std::mem::take(&mut c.base_cur);
            c.base_cur = c.sims.iter().map(|s| s.misses).collect();
            c.gets_prev = c.gets_cur;
            c.gets_cur = gets;
        }
        f(&mut c);
    }
}

fn gets(shared: &Shared) -> u64 {
    let s = shared.stats();
    s.get_hits + s.get_misses
}

/// A get (text `get`/`gets`, meta `mg`) of `key`: one load and a hash
/// compare unless the key is sampled.
#[inline]
pub fn on_get(shared: &Shared, key: &[u8]) {
    if let Some(mrc) = &shared.mrc {
        if let Some(h) = mrc.sampled(key) {
            mrc.record(shared, |c| {
                for sim in &mut c.sims {
                    sim.get(h);
                }
            });
        }
    }
}

/// A store of `key` with a value of `value_len` bytes.
#[inline]
pub fn on_set(shared: &Shared, key: &[u8], value_len: usize) {
    if let Some(mrc) = &shared.mrc {
        if let Some(h) = mrc.sampled(key) {
            let bytes = key.len() + value_len + ITEM_OVERHEAD_BYTES;
            mrc.record(shared, |c| {
                for sim in &mut c.sims {
                    sim.set(h, bytes);
                }
            });
        }
    }
}

/// `stats reset`: count from now (the simulated caches stay warm).
pub fn reset(shared: &Shared) {
    if let Some(mrc) = &shared.mrc {
        mrc.curve().restart(gets(shared));
    }
}

/// (megabytes of `-m`, estimated miss ratio) for each simulated size.
pub fn curve(shared: &Shared) -> Vec<(f64, f64)> {
    let Some(mrc) = &shared.mrc else { return Vec::new() };
    let c = mrc.curve();
    let all_gets = gets(shared).saturating_sub(c.gets_prev);
    let expected_sampled = all_gets as f64 / c.sample_one_in as f64;
    SCALES_QUARTERS
        .iter()
        .zip(&c.sims)
        .zip(&c.base_prev)
        .map(|((&q, sim), &base)| {
            let mb = (c.limit_bytes * q / 4) as f64 / (1 << 20) as f64;
            let misses = sim.misses.saturating_sub(base) as f64;
            let ratio = if expected_sampled > 0.0 { (misses / expected_sampled).min(1.0) } else { 0.0 };
            (mb, ratio)
        })
        .collect()
}

fn megabytes(mb: f64) -> String {
    if mb.fract() == 0.0 {
        format!("{}", mb as u64)
    } else {
        format!("{mb:.2}")
    }
}

/// `stats mrc`.
pub fn stats(shared: &Shared, t: &mut Vec<(String, String)>) {
    t.push(("enabled".into(), u8::from(shared.mrc.is_some()).to_string()));
    let Some(mrc) = &shared.mrc else { return };
    let one_in = mrc.curve().sample_one_in;
    t.push(("sample_one_in".into(), one_in.to_string()));
    t.push(("window_seconds".into(), WINDOW_S.to_string()));
    for (mb, ratio) in curve(shared) {
        t.push((format!("mrc:{}", megabytes(mb)), format!("{ratio:.4}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_rate_follows_the_limit() {
        assert_eq!(sample_one_in(64 << 20), 64);
        assert_eq!(sample_one_in(8 << 20), 16);
        assert_eq!(sample_one_in(1 << 30), 1024);
        assert_eq!(megabytes(16.0), "16");
        assert_eq!(megabytes(2.5), "2.50");
    }

    #[test]
    fn sample_hash_spreads_similar_keys() {
        let one_in = 64;
        let t = threshold(one_in);
        let n = 200_000;
        let sampled = (0..n).filter(|i| (sample_hash(format!("key:{i}").as_bytes()) >> 32) < t).count();
        let expected = n / one_in as usize;
        assert!(sampled.abs_diff(expected) < expected / 10, "{sampled} of {n}, expected {expected}");
    }
}
