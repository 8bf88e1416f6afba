//! `stats mrc`: an online miss-ratio curve, the miss ratio Strata would have
//! had at 0.25x .. 8x its current memory limit, from miniature simulations
//! (ATC'17) fed a spatially hashed sample of the keys (SHARDS, FAST'15).
//!
//! ```text
//!  Engine::get / store (strata-store seg/sample.rs): the key's xxh3 hash,
//!     mixed, below the threshold? ──no──► nothing more (one multiply, one compare)
//!                                  │ yes (rate R = threshold / 2^32)
//!                                  ▼
//!  Mrc (AccessSampler) ── the thread's lane of the Feed (mrc_feed.rs);
//!     a full lane (64 events) ──► Mutex<Curve>: one mrc_sim::Sim per scale in
//!     SCALES_QUARTERS, fed the events of its own rate R_s (R up to 1x,
//!     R / scale above), capacity scale x limit x R_s, S3-FIFO at segment
//!     granularity (a get: a hit or a miss; a store: a new copy)
//!  readers (stats mrc, /metrics, stats reset, the tick) drain every lane first
//!  tick (acceptor, once a second): roll the window, follow the limit
//! ```
//!
//! The sample is spatial: a key is in it or not by its hash, so every
//! request of a sampled key is seen and the sampled keys' reuse is exact.
//! The store already hashes every key, so the request path pays one
//! multiply and a compare for the decision (nothing with `-o no_mrc`: the
//! threshold is 0). `R` keeps the 1x simulation near [`SIM_BYTES_AT_1X`]
//! whatever `-m` is (1/64 at `-m 64`, 1/1024 at 1 GiB; at most 1/16). The
//! sizes above 1x keep a sub-sample of that sample (the same mixed hash
//! under a lower threshold), at `R x 1x / size`, so every simulation holds
//! about `SIM_BYTES_AT_1X` of items (fixed-size SHARDS): 4.75x that in all
//! where sampling every size at `R` simulated 15.75x, and the 8x size alone
//! took half of it (at `-m 64`, about 0.6 MB of heap instead of 1.9 MB:
//! memory outside `-m`, which a node sized by its RSS pays for in items).
//! Estimates use SHARDS' adjustment: a size's misses are divided by its
//! rate x all gets counted in `stats` (not by its sampled gets), so a hot
//! key that happens to be in (or out of) the sample does not tilt the
//! curve.
//!
//! Window: counts cover the current and the previous [`WINDOW_S`]-second
//! window (60-120 s of traffic); `stats reset` restarts them (the simulated
//! caches stay warm). A limit that moves by more than an eighth
//! (`cache_memlimit`, `-m auto`) rebuilds the simulations for the new size
//! at the next tick.
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

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use strata_store::seg::in_sample;
use strata_store::{AccessSampler, Engine};

use super::mrc_feed::{Event, Feed};
use super::mrc_sim::{segments_per_shard, Sim};
use crate::core::Core;

/// Cache sizes simulated, in quarters of the limit: 0.25x .. 8x.
pub const SCALES_QUARTERS: [u64; 6] = [1, 2, 4, 8, 16, 32];
/// Simulated bytes at 1x: about 4,500 items of 230 bytes.
pub const SIM_BYTES_AT_1X: u64 = 1 << 20;
pub const WINDOW_S: u32 = 60;

pub struct Mrc {
    feed: Feed,
    curve: Mutex<Curve>,
}

struct Curve {
    limit_bytes: u64,
    /// The sample's rate (1 in this): the 1x simulation's and the smaller
    /// ones'; each size's own is [`sim_one_in`] of it.
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

fn threshold(one_in: u64) -> u64 {
    (1u64 << 32) / one_in
}

/// The rate (1 in this) of the simulation of `quarters` x the limit: the
/// sample's up to 1x, a sub-sample above, so it simulates as many bytes as
/// the 1x one.
fn sim_one_in(one_in: u64, quarters: u64) -> u64 {
    one_in * (quarters / 4).max(1)
}

impl Curve {
    fn new(limit_bytes: u64, now_s: u32, gets: u64) -> Curve {
        let one_in = sample_one_in(limit_bytes);
        let sims = SCALES_QUARTERS
            .iter()
            .map(|&q| {
                let real = limit_bytes * q / 4;
                Sim::new((real / sim_one_in(one_in, q)) as usize, segments_per_shard(real))
            })
            .collect();
        let n = SCALES_QUARTERS.len();
        Curve {
            limit_bytes,
            sample_one_in: one_in,
            sims,
            window_start_s: now_s,
            base_prev: vec![0; n],
            base_cur: vec![0; n],
            gets_prev: gets,
            gets_cur: gets,
        }
    }

    fn apply(&mut self, events: &[Event]) {
        for (sim, q) in self.sims.iter_mut().zip(SCALES_QUARTERS) {
            let threshold = threshold(sim_one_in(self.sample_one_in, q));
            for &e in events {
                match e {
                    Event::Get(hash) if in_sample(hash, threshold) => {
                        sim.get(hash);
                    }
                    Event::Stored(hash, bytes) if in_sample(hash, threshold) => sim.set(hash, bytes as usize),
                    _ => {}
                }
            }
        }
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

impl Mrc {
    /// An `Mrc` sized for `limit_bytes`, installed as `engine`'s sampler.
    pub fn install(engine: &dyn Engine, limit_bytes: u64) -> Arc<Mrc> {
        let curve = Curve::new(limit_bytes, 0, 0);
        let one_in = curve.sample_one_in;
        let mrc = Arc::new(Mrc { feed: Feed::default(), curve: Mutex::new(curve) });
        engine.set_access_sampler(mrc.clone());
        engine.set_sample_threshold(threshold(one_in));
        mrc
    }

    fn lock_curve(&self) -> std::sync::MutexGuard<'_, Curve> {
        self.curve.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The curve with every queued event applied.
    fn curve(&self) -> std::sync::MutexGuard<'_, Curve> {
        self.feed.drain(|events| self.lock_curve().apply(events));
        self.lock_curve()
    }

    fn push(&self, event: Event) {
        self.feed.push(event, |events| self.lock_curve().apply(events));
    }
}

impl AccessSampler for Mrc {
    fn get(&self, hash: u64) {
        self.push(Event::Get(hash));
    }

    fn stored(&self, hash: u64, bytes: usize) {
        self.push(Event::Stored(hash, bytes.min(u32::MAX as usize) as u32));
    }
}

fn gets(shared: &Core) -> u64 {
    let s = shared.stats();
    s.get_hits + s.get_misses
}

/// Once a second (the acceptor's tick): follow the limit, roll the window.
pub fn tick(mrc: Option<&Arc<Mrc>>, shared: &Core) {
    let Some(mrc) = mrc else { return };
    let now_s = shared.clock.now();
    let limit = shared.memory_limit_bytes.load(Ordering::Relaxed);
    let mut c = mrc.curve();
    if limit.abs_diff(c.limit_bytes) > c.limit_bytes / 8 {
        *c = Curve::new(limit, now_s, gets(shared));
        shared.engine.set_sample_threshold(threshold(c.sample_one_in));
    } else if now_s.saturating_sub(c.window_start_s) >= WINDOW_S {
        let gets = gets(shared);
        c.window_start_s = now_s;
        c.base_prev = std::mem::take(&mut c.base_cur);
        c.base_cur = c.sims.iter().map(|s| s.misses).collect();
        c.gets_prev = c.gets_cur;
        c.gets_cur = gets;
    }
}

/// Heap bytes of the simulations (`stats memory` `mrc_bytes`; 0 with
/// `-o no_mrc`).
pub fn bytes(mrc: Option<&Arc<Mrc>>) -> u64 {
    let Some(mrc) = mrc else { return 0 };
    (mrc.feed.bytes() + mrc.curve().sims.iter().map(|s| s.bytes()).sum::<usize>()) as u64
}

/// `stats reset`: count from now (the simulated caches stay warm).
pub fn reset(mrc: Option<&Arc<Mrc>>, shared: &Core) {
    if let Some(mrc) = mrc {
        mrc.curve().restart(gets(shared));
    }
}

/// (megabytes of `-m`, estimated miss ratio) for each simulated size.
pub fn curve(mrc: Option<&Arc<Mrc>>, shared: &Core) -> Vec<(f64, f64)> {
    let Some(mrc) = mrc else { return Vec::new() };
    let c = mrc.curve();
    let all_gets = gets(shared).saturating_sub(c.gets_prev);
    SCALES_QUARTERS
        .iter()
        .zip(&c.sims)
        .zip(&c.base_prev)
        .map(|((&q, sim), &base)| {
            let mb = (c.limit_bytes * q / 4) as f64 / (1 << 20) as f64;
            let expected_sampled = all_gets as f64 / sim_one_in(c.sample_one_in, q) as f64;
            let misses = sim.misses.saturating_sub(base) as f64;
            let ratio = if expected_sampled > 0.0 { (misses / expected_sampled).min(1.0) } else { 0.0 };
            (mb, ratio)
        })
        .collect()
}

pub fn megabytes(mb: f64) -> String {
    if mb.fract() == 0.0 {
        format!("{}", mb as u64)
    } else {
        format!("{mb:.2}")
    }
}

/// `stats mrc`.
pub fn stats(mrc: Option<&Arc<Mrc>>, shared: &Core, t: &mut Vec<(String, String)>) {
    t.push(("enabled".into(), u8::from(mrc.is_some()).to_string()));
    let Some(mrc) = mrc else { return };
    let one_in = mrc.curve().sample_one_in;
    t.push(("sample_one_in".into(), one_in.to_string()));
    t.push(("window_seconds".into(), WINDOW_S.to_string()));
    for (mb, ratio) in curve(Some(mrc), shared) {
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
    fn sizes_above_1x_keep_a_sub_sample_as_big_as_the_1x_one() {
        let rates: Vec<u64> = SCALES_QUARTERS.iter().map(|&q| sim_one_in(64, q)).collect();
        assert_eq!(rates, [64, 64, 64, 128, 256, 512]);
        let c = Curve::new(64 << 20, 0, 0);
        let capacities: Vec<u64> = SCALES_QUARTERS.iter().map(|&q| (64 << 20) * q / 4 / sim_one_in(c.sample_one_in, q)).collect();
        assert_eq!(capacities, [1 << 18, 1 << 19, 1 << 20, 1 << 20, 1 << 20, 1 << 20]);
        // A sub-sample's keys are all in the sample (the same mixed hash, a lower threshold).
        let (all, sub) = (threshold(64), threshold(512));
        for h in (0..100_000u64).map(|i| strata_store::seg::hash_key(&i.to_le_bytes())) {
            assert!(!in_sample(h, sub) || in_sample(h, all));
        }
    }
}
