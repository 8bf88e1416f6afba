//! `stats hotkeys`: the keys requested most in the recent past, with an
//! estimate of how many requests each drew.
//!
//! The data structure: per worker, a Space-Saving sketch of [`CAPACITY`]
//! counters fed by about one in [`SAMPLE_ONE_IN`] key-bearing requests
//! (get, set, delete, incr/decr, touch families; a sampled multi-get
//! offers each of its first [`MAX_KEYS_PER_SAMPLE`] keys). A sampled key
//! already in the sketch adds one; a new key takes a free counter, or
//! replaces the smallest one and inherits its count plus one (Space-Saving's
//! rule: a heavy hitter is never lost, counts are over-estimates by at most
//! the replaced count). Counts are fixed-point (x256) and halve every
//! [`HALF_LIFE_S`] seconds, so "hot" means recent: an estimate is about
//! the requests of the last 2 half-lives. The gap between samples is drawn
//! from 1..2N-1 (mean N) so a periodic request pattern cannot alias with it.
//!
//! Only the owning worker writes its sketch, under a mutex that only a
//! sampled request (1 in N) and `stats hotkeys`/`stats reset` take, so the
//! worker's lock is uncontended; the request path between samples is a
//! relaxed load and store of the countdown. `stats hotkeys` sums every
//! worker's sketch by key and reports the top [`TOP`].
//!
//! Reply (Strata's own; memcached has none), in memcached's
//! `STAT <n>:<field>` style of `stats slabs`:
//!
//! ```text
//! STAT enabled 1
//! STAT sample_one_in 128
//! STAT half_life_seconds 10
//! STAT 1:foo 51200        rank:key estimated-requests
//! STAT 2:bar 1024
//! END
//! ```
//!
//! A key byte outside `!`..`~`, and `%`, is shown as `%XX` (binary-protocol
//! keys may hold any byte).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::protocol::Protocol;

pub const SAMPLE_ONE_IN: u32 = 128;
pub const CAPACITY: usize = 64;
pub const HALF_LIFE_S: u32 = 10;
pub const TOP: usize = 20;
const MAX_KEYS_PER_SAMPLE: usize = 16;
/// One sample, in the counters' fixed point.
const ONE: u64 = 256;

#[derive(Default)]
pub struct WorkerHotkeys {
    on: AtomicBool,
    /// Requests until the next sample (its worker's only).
    countdown: AtomicU32,
    rng: AtomicU64,
    sketch: Mutex<Sketch>,
}

/// Space-Saving counters as parallel arrays, so the scans for a key's hash
/// and for the smallest count run over packed `u64`s; a replaced key's
/// buffer is reused, so a full sketch allocates nothing.
#[derive(Default)]
struct Sketch {
    hashes: Vec<u64>,
    counts: Vec<u64>,
    keys: Vec<Vec<u8>>,
    /// When counts were last halved (server clock, seconds).
    decayed_at: u32,
}

impl WorkerHotkeys {
    pub fn configure(&self, settings: &crate::settings::Settings) {
        self.on.store(settings.hotkeys, Ordering::Relaxed);
        self.rng.store(0x9e37_79b9_7f4a_7c15 ^ (self as *const _ as u64), Ordering::Relaxed);
    }

    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Count one key-bearing request; true when it is to be sampled.
    #[inline]
    pub fn tick(&self) -> bool {
        let left = self.countdown.load(Ordering::Relaxed);
        if left > 1 {
            self.countdown.store(left - 1, Ordering::Relaxed);
            return false;
        }
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        self.countdown.store(1 + (x % u64::from(2 * SAMPLE_ONE_IN - 1)) as u32, Ordering::Relaxed);
        true
    }

    /// Heap bytes of the sketch (`stats memory` `hotkeys_bytes`): its
    /// arrays and key buffers at capacity.
    pub fn bytes(&self) -> usize {
        let s = self.sketch.lock().unwrap_or_else(|e| e.into_inner());
        (s.hashes.capacity() + s.counts.capacity()) * 8
            + s.keys.capacity() * std::mem::size_of::<Vec<u8>>()
            + s.keys.iter().map(Vec::capacity).sum::<usize>()
    }

    pub fn reset(&self) {
        let mut sketch = self.sketch.lock().unwrap_or_else(|e| e.into_inner());
        sketch.hashes.clear();
        sketch.counts.clear();
        sketch.keys.clear();
    }
}

impl Sketch {
    fn decay(&mut self, now_s: u32) {
        if self.counts.is_empty() {
            self.decayed_at = now_s;
            return;
        }
        let halvings = now_s.saturating_sub(self.decayed_at) / HALF_LIFE_S;
        if halvings == 0 {
            return;
        }
        self.decayed_at += halvings * HALF_LIFE_S;
        let mut i = 0;
        while i < self.counts.len() {
            self.counts[i] = self.counts[i].checked_shr(halvings).unwrap_or(0);
            if self.counts[i] == 0 {
                self.hashes.swap_remove(i);
                self.counts.swap_remove(i);
                self.keys.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn offer(&mut self, key: &[u8], now_s: u32) {
        self.decay(now_s);
        let hash = strata_store::hash_key(key);
        let found = self.hashes.iter().enumerate().position(|(i, &h)| h == hash && self.keys[i] == key);
        if let Some(i) = found {
            self.counts[i] += ONE;
            return;
        }
        if self.counts.len() < CAPACITY {
            self.hashes.push(hash);
            self.counts.push(ONE);
            self.keys.push(key.to_vec());
            return;
        }
        let mut min = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            if c < self.counts[min] {
                min = i;
            }
        }
        self.hashes[min] = hash;
        self.counts[min] += ONE;
        self.keys[min].clear();
        self.keys[min].extend_from_slice(key);
    }

    #[cfg(test)]
    fn count_of(&self, key: &[u8]) -> Option<u64> {
        self.keys.iter().position(|k| k == key).map(|i| self.counts[i])
    }
}

/// Offer the keys of one sampled request (its bytes, `multi`: a get that
/// may name several keys, `exptime_first`: gat/gats/touch-by-gat).
#[cold]
#[inline(never)]
pub(crate) fn sample(w: &WorkerHotkeys, request: &[u8], protocol: Protocol, multi: bool, gat: bool, clock: &strata_store::Clock) {
    let now_s = clock.now();
    let mut sketch = w.sketch.lock().unwrap_or_else(|e| e.into_inner());
    if protocol == Protocol::Binary {
        if request.len() >= 24 {
            let key_len = usize::from(u16::from_be_bytes([request[2], request[3]]));
            let from = 24 + usize::from(request[4]);
            if let Some(key) = request.get(from..from + key_len).filter(|k| !k.is_empty()) {
                sketch.offer(key, now_s);
            }
        }
        return;
    }
    let mut tokens = Tokens { rest: request };
    let command = tokens.next().unwrap_or(b"");
    // gat/gats <exptime> <key>*; touch <key> <exptime>.
    let gat = gat && command != b"touch";
    if gat {
        tokens.next();
    }
    let max_keys = if multi && (command == b"get" || command == b"gets") || gat { MAX_KEYS_PER_SAMPLE } else { 1 };
    for _ in 0..max_keys {
        let Some(key) = tokens.next() else { break };
        if key.len() <= strata_proto::KEY_MAX_LENGTH {
            sketch.offer(key, now_s);
        }
    }
}

/// The space-separated words of a request's first line.
struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        if rest[0] == b'\r' || rest[0] == b'\n' {
            return None;
        }
        let end = rest.iter().position(|&b| b == b' ' || b == b'\r' || b == b'\n').unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// Every worker's sketch, summed by key, hottest first: (key, estimated
/// requests).
pub fn top<'a>(workers: impl Iterator<Item = &'a WorkerHotkeys>, now_s: u32, n: usize) -> Vec<(Vec<u8>, u64)> {
    let mut sum: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for w in workers {
        let mut sketch = w.sketch.lock().unwrap_or_else(|e| e.into_inner());
        sketch.decay(now_s);
        for (key, &count) in sketch.keys.iter().zip(sketch.counts.iter()) {
            *sum.entry(key.clone()).or_default() += count;
        }
    }
    let mut ranked: Vec<(Vec<u8>, u64)> =
        sum.into_iter().map(|(k, c)| (k, c * u64::from(SAMPLE_ONE_IN) / ONE)).filter(|(_, c)| *c > 0).collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(n);
    ranked
}

fn escaped(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if (b'!'..=b'~').contains(&b) && b != b'%' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// `stats hotkeys`.
pub fn stats<'a>(workers: impl Iterator<Item = &'a WorkerHotkeys>, on: bool, now_s: u32, t: &mut Vec<(String, String)>) {
    t.push(("enabled".into(), u8::from(on).to_string()));
    t.push(("sample_one_in".into(), SAMPLE_ONE_IN.to_string()));
    t.push(("half_life_seconds".into(), HALF_LIFE_S.to_string()));
    for (rank, (key, count)) in top(workers, now_s, TOP).into_iter().enumerate() {
        t.push((format!("{}:{}", rank + 1, escaped(&key)), count.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_saving_keeps_the_heavy_hitter_and_decays() {
        let mut s = Sketch::default();
        for i in 0..10_000u32 {
            s.offer(b"hot", 0);
            s.offer(format!("cold{i}").as_bytes(), 0);
        }
        assert_eq!(s.counts.len(), CAPACITY);
        assert_eq!(s.count_of(b"hot"), Some(10_000 * ONE));
        s.offer(b"hot", 2 * HALF_LIFE_S);
        assert_eq!(s.count_of(b"hot"), Some(2_500 * ONE + ONE));
        assert_eq!(s.hashes.len(), s.keys.len());
    }

    #[test]
    fn sampling_averages_one_in_n() {
        let w = WorkerHotkeys::default();
        w.configure(&crate::settings::Settings { hotkeys: true, ..Default::default() });
        let sampled = (0..160_000).filter(|_| w.tick()).count();
        assert!((1_100..1_400).contains(&sampled), "{sampled}");
    }

    #[test]
    fn keys_escape_unprintable_bytes() {
        assert_eq!(escaped(b"a%b c\x01"), "a%25b%20c%01");
    }
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn words_of_the_first_line_only() {
        let mut t = Tokens { rest: b"get  a b\r\nset c" };
        assert_eq!((t.next(), t.next(), t.next(), t.next()), (Some(&b"get"[..]), Some(&b"a"[..]), Some(&b"b"[..]), None));
        let mut t = Tokens { rest: b"mn\r\n" };
        assert_eq!((t.next(), t.next()), (Some(&b"mn"[..]), None));
    }
}
