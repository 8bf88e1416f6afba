//! `stats latency`: how long each request spent inside the server, per
//! command family, as count, p50, p90, p99, p99.9 and max in microseconds.
//!
//! Where the time is taken: a connection's [`ConnTiming`] notes the time of
//! the read that brought bytes into an empty input buffer (with no earlier
//! request still waiting for its reply to go out); every request that
//! completes after it is one of that batch (pipelined requests in one read
//! share its time). When the worker hands the batch's replies to the kernel
//! (epoll: the `write` that leaves nothing pending; io_uring: the send
//! pushed into the submission ring) each of them is recorded with the time
//! since that read. So the figure covers parsing, the engine, waiting for a
//! `-R` yield or a flash read, and building the reply; not the network.
//!
//! The data structure: per worker, one log-linear histogram per family in a
//! flat array of relaxed atomics, each written only by its worker (a load
//! and a store, no lock, no RMW), read and summed by `stats latency` on any
//! worker. Values are ticks of `sys/tsc.rs` (the CPU's invariant time-stamp
//! counter: one instruction, where a `clock_gettime` is a vDSO call),
//! turned into nanoseconds when read; bucket `i < 16` holds exactly `i`, above
//! that each power of two is split into 16 buckets, so a bucket spans at
//! most 1/16 (6.25 %) of its value. A percentile is reported as its
//! bucket's upper bound (capped by the exact max).
//!
//! ```text
//!  buckets: [family 0: 976 counters][family 1: 976]...[family 6: 976]
//!  sum_ticks: [f0][f1]...        max_ticks: [f0][f1]...
//! ```
//!
//! `stats reset` cannot zero another worker's counters (its next load and
//! store would bring the old value back), so it records a baseline, as
//! `stats.rs` does, and zeroes the maxima (a racing store of a new maximum
//! there is still a true post-reset value).
//!
//! Families (Strata's own names; memcached has no latency stats):
//! `get` (get, gets, mg, binary GET*), `set` (set, add, replace, append,
//! prepend, cas, ms, binary SET* ...), `delete` (delete, md), `arith` (incr,
//! decr, ma), `touch` (touch, gat, gats), `noop` (mn, binary NOOP), `other`
//! (stats, version, me, flush_all, errors, ...).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::protocol::Protocol;

/// Command families, in report order.
pub const FAMILIES: [&str; 7] = ["get", "set", "delete", "arith", "touch", "noop", "other"];
const GET: u8 = 0;
const SET: u8 = 1;
const DELETE: u8 = 2;
const ARITH: u8 = 3;
const TOUCH: u8 = 4;
const NOOP: u8 = 5;
const OTHER: u8 = 6;
const NFAM: usize = FAMILIES.len();

/// Sub-buckets per power of two (log2 of).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Buckets per family: exact 0..16, then 16 per power of two up to 2^64.
pub const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// The bucket of `v` (ticks).
#[inline]
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = ((v >> (e - SUB_BITS)) as usize) & (SUB - 1);
    (e - SUB_BITS + 1) as usize * SUB + sub
}

/// The largest value bucket `i` holds.
fn upper_bound(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let e = (i / SUB) as u32 + SUB_BITS - 1;
    let sub = (i % SUB) as u64;
    let shift = e - SUB_BITS;
    let lower = (SUB as u64 + sub) << shift;
    lower.saturating_add((1u64 << shift) - 1)
}

/// One worker's histograms, written by that worker only.
pub struct WorkerLatency {
    buckets: Box<[AtomicU64]>,
    sum_ticks: [AtomicU64; NFAM],
    max_ticks: [AtomicU64; NFAM],
    /// Counts at the last `stats reset`.
    baseline: Mutex<Option<Snapshot>>,
}

impl Default for WorkerLatency {
    fn default() -> Self {
        WorkerLatency {
            buckets: (0..NFAM * BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ticks: Default::default(),
            max_ticks: Default::default(),
            baseline: Mutex::new(None),
        }
    }
}

#[inline]
fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl WorkerLatency {
    /// Record `n` requests of `family` that took `ticks` each. Only the
    /// owning worker calls this.
    #[inline]
    fn record(&self, family: usize, ticks: u64, n: u64) {
        add(&self.buckets[family * BUCKETS + bucket(ticks)], n);
        add(&self.sum_ticks[family], ticks.wrapping_mul(n));
        if ticks > self.max_ticks[family].load(Ordering::Relaxed) {
            self.max_ticks[family].store(ticks, Ordering::Relaxed);
        }
    }

    fn raw(&self) -> Snapshot {
        Snapshot {
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum_ticks: std::array::from_fn(|f| self.sum_ticks[f].load(Ordering::Relaxed)),
            max_ticks: std::array::from_fn(|f| self.max_ticks[f].load(Ordering::Relaxed)),
        }
    }

    /// Add this worker's counts since the last reset to `into`.
    fn add_to(&self, into: &mut Snapshot) {
        let base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.raw();
        for (i, (sum, v)) in into.buckets.iter_mut().zip(now.buckets.iter()).enumerate() {
            *sum += v.wrapping_sub(base.as_ref().map_or(0, |b| b.buckets[i]));
        }
        for f in 0..NFAM {
            into.sum_ticks[f] += now.sum_ticks[f].wrapping_sub(base.as_ref().map_or(0, |b| b.sum_ticks[f]));
            into.max_ticks[f] = into.max_ticks[f].max(now.max_ticks[f]);
        }
    }

    fn reset(&self) {
        let mut base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        *base = Some(self.raw());
        for m in &self.max_ticks {
            m.store(0, Ordering::Relaxed);
        }
    }
}

/// Histograms summed over workers.
pub struct Snapshot {
    buckets: Box<[u64]>,
    sum_ticks: [u64; NFAM],
    max_ticks: [u64; NFAM],
}

impl Snapshot {
    fn empty() -> Snapshot {
        Snapshot { buckets: vec![0; NFAM * BUCKETS].into_boxed_slice(), sum_ticks: [0; NFAM], max_ticks: [0; NFAM] }
    }

    fn family(&self, f: usize) -> &[u64] {
        &self.buckets[f * BUCKETS..(f + 1) * BUCKETS]
    }

    pub fn count(&self, f: usize) -> u64 {
        self.family(f).iter().sum()
    }

    /// The value at quantile `q` (0..=1), in ticks.
    pub fn quantile(&self, f: usize, q: f64) -> u64 {
        let count = self.count(f);
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, &n) in self.family(f).iter().enumerate() {
            seen += n;
            if seen >= rank {
                let bound = upper_bound(i);
                let max = self.max_ticks[f];
                return if max > 0 { bound.min(max) } else { bound };
            }
        }
        self.max_ticks[f]
    }

    /// The exact max since reset, or (a reset raced it) the upper bound
    /// of the highest non-empty bucket.
    pub fn max(&self, f: usize) -> u64 {
        let top = self.family(f).iter().rposition(|&n| n > 0).map_or(0, upper_bound);
        let max = self.max_ticks[f];
        if max > 0 { max.min(top) } else { top }
    }
}

/// The per-worker request statistics: latency histograms and the hot-key
/// sketch (`hotkeys.rs`), with their on/off switches.
#[derive(Default)]
pub struct WorkerRequests {
    latency_on: AtomicBool,
    pub hotkeys: super::hotkeys::WorkerHotkeys,
    latency: WorkerLatency,
}

impl std::fmt::Debug for WorkerRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerRequests")
    }
}

impl WorkerRequests {
    /// Turn the collectors on as `settings` says (at start).
    pub fn configure(&self, settings: &crate::settings::Settings) {
        crate::sys::tsc::init();
        self.latency_on.store(settings.latency_stats, Ordering::Relaxed);
        self.hotkeys.configure(settings);
    }

    /// Heap bytes of this worker's latency histograms and their `stats
    /// reset` baseline (`stats memory` `latency_bytes`); allocated at
    /// start whether or not they are collected.
    pub fn latency_bytes(&self) -> usize {
        let l = &self.latency;
        let baseline = l.baseline.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |b| b.buckets.len() * 8 + std::mem::size_of::<Snapshot>());
        l.buckets.len() * std::mem::size_of::<AtomicU64>() + baseline
    }

    #[inline]
    fn latency_on(&self) -> bool {
        self.latency_on.load(Ordering::Relaxed)
    }
}

/// One connection's batch in flight: when its first bytes were read (in
/// `sys/tsc.rs` ticks) and how many requests of each family completed
/// since, their replies not yet handed to the kernel (`families`: a bit per
/// family with a count).
#[derive(Default)]
pub struct ConnTiming {
    start: u64,
    pending: [u32; NFAM],
    families: u8,
}

impl ConnTiming {
    /// Bytes were read; `was_empty`: the input buffer held nothing before.
    #[inline]
    pub fn read(&mut self, was_empty: bool, w: &WorkerRequests) {
        if was_empty && self.families == 0 && w.latency_on() {
            self.start = crate::sys::tsc::now();
        }
    }

    /// The replies of every completed request were handed to the kernel.
    #[inline]
    pub fn replied(&mut self, w: &WorkerRequests) {
        if self.families != 0 {
            self.record(w);
        }
    }

    fn record(&mut self, w: &WorkerRequests) {
        let ticks = crate::sys::tsc::now().saturating_sub(self.start);
        let mut families = std::mem::take(&mut self.families);
        while families != 0 {
            let f = families.trailing_zeros() as usize;
            families &= families - 1;
            w.latency.record(f, ticks, u64::from(std::mem::take(&mut self.pending[f])));
        }
    }
}

/// A request of `advance` bytes at the front of `buf` completed: count it
/// in its family's batch and offer it to the hot-key sampler.
#[inline]
pub fn served(timing: &mut ConnTiming, w: &WorkerRequests, buf: &[u8], advance: usize, protocol: Protocol, clock: &strata_store::Clock) {
    let latency = w.latency_on();
    let hot = w.hotkeys.on();
    if !(latency || hot) || advance == 0 {
        return;
    }
    let request = &buf[..advance.min(buf.len())];
    let family = match protocol {
        Protocol::Binary => binary_family(request),
        _ => text_family(request),
    };
    if latency {
        timing.pending[usize::from(family)] += 1;
        timing.families |= 1 << family;
    }
    if hot && family <= TOUCH && w.hotkeys.tick() {
        super::hotkeys::sample(&w.hotkeys, request, protocol, family == GET, family == TOUCH, clock);
    }
}

/// The family of a text or meta request, by its command word.
#[inline]
fn text_family(request: &[u8]) -> u8 {
    // The commonest first, from their first 4 bytes.
    match request.get(..4) {
        Some(b"get ") => return GET,
        Some(b"set ") => return SET,
        Some([b'm', b'g', b' ', _]) => return GET,
        Some([b'm', b's', b' ', _]) => return SET,
        _ => {}
    }
    other_text_family(request)
}

#[inline(never)]
fn other_text_family(request: &[u8]) -> u8 {
    let end = request.iter().take(16).position(|&b| b == b' ' || b == b'\r' || b == b'\n').unwrap_or(request.len().min(16));
    match &request[..end] {
        b"get" | b"gets" | b"mg" => GET,
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"ms" => SET,
        b"delete" | b"md" => DELETE,
        b"incr" | b"decr" | b"ma" => ARITH,
        b"touch" | b"gat" | b"gats" => TOUCH,
        b"mn" => NOOP,
        _ => OTHER,
    }
}

/// The family of a binary request, by its opcode.
fn binary_family(request: &[u8]) -> u8 {
    match request.get(1).copied().unwrap_or(0xff) {
        0x00 | 0x09 | 0x0c | 0x0d => GET,
        0x01..=0x03 | 0x0e | 0x0f | 0x11..=0x13 | 0x19 | 0x1a => SET,
        0x04 | 0x14 => DELETE,
        0x05 | 0x06 | 0x15 | 0x16 => ARITH,
        0x1c..=0x1e => TOUCH,
        0x0a => NOOP,
        _ => OTHER,
    }
}

/// Every worker's histograms summed, since start or the last reset.
pub fn snapshot(workers: &[WorkerRequests]) -> Snapshot {
    let mut sum = Snapshot::empty();
    for w in workers {
        w.latency.add_to(&mut sum);
    }
    sum
}

/// `stats reset`.
pub fn reset(workers: &[WorkerRequests]) {
    for w in workers {
        w.latency.reset();
        w.hotkeys.reset();
    }
}

/// Ticks as microseconds, one decimal.
fn micros(ticks: u64, ns_per_tick: f64) -> String {
    format!("{:.1}", ticks as f64 * ns_per_tick / 1000.0)
}

/// `stats latency`: `STAT <family>_count`, `_p50_us`, `_p90_us`, `_p99_us`,
/// `_p999_us`, `_max_us` for every family.
pub fn stats(workers: &[WorkerRequests], on: bool, t: &mut Vec<(String, String)>) {
    t.push(("enabled".into(), u8::from(on).to_string()));
    let s = snapshot(workers);
    let rate = crate::sys::tsc::ns_per_tick();
    for (f, name) in FAMILIES.iter().enumerate() {
        t.push((format!("{name}_count"), s.count(f).to_string()));
        for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
            t.push((format!("{name}_{label}_us"), micros(s.quantile(f, q), rate)));
        }
        t.push((format!("{name}_max_us"), micros(s.max(f), rate)));
    }
}

/// Upper bounds of the Prometheus buckets, in seconds.
const PROMETHEUS_LE_S: [f64; 17] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0,
];

/// One command family's histogram for Prometheus: cumulative counts at
/// the `le` bounds in seconds, the sum of the times, the count.
pub struct PromHistogram {
    pub family: &'static str,
    pub buckets: Vec<(f64, u64)>,
    pub sum_seconds: f64,
    pub count: u64,
}

/// The histograms behind `stats latency`, one per command family, at the
/// Prometheus bounds (`/metrics` writes them as the histogram family
/// `strata_request_duration_seconds{family="..."}`). A fine bucket is
/// counted under `le` when its upper bound is at most `le` (so a bucket
/// edge may place a value one Prometheus bucket up).
pub fn prometheus_histograms(workers: &[WorkerRequests]) -> Vec<PromHistogram> {
    let s = snapshot(workers);
    let rate = crate::sys::tsc::ns_per_tick();
    FAMILIES
        .iter()
        .enumerate()
        .map(|(f, name)| {
            let fine = s.family(f);
            let mut i = 0;
            let mut cumulative = 0u64;
            let buckets = PROMETHEUS_LE_S
                .iter()
                .map(|&le| {
                    let le_ticks = (le * 1e9 / rate) as u64;
                    while i < fine.len() && upper_bound(i) <= le_ticks {
                        cumulative += fine[i];
                        i += 1;
                    }
                    (le, cumulative)
                })
                .collect();
            PromHistogram { family: name, buckets, sum_seconds: s.sum_ticks[f] as f64 * rate / 1e9, count: s.count(f) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_within_a_sixteenth() {
        for v in [0u64, 1, 15, 16, 17, 31, 32, 1000, 123_456, 1 << 40, u64::MAX] {
            let b = bucket(v);
            assert!(b < BUCKETS, "{v}");
            assert!(upper_bound(b) >= v, "{v}");
            assert!(b == 0 || upper_bound(b - 1) < v, "{v}");
            assert!((upper_bound(b) - v) as f64 <= v as f64 / 16.0 + 1.0, "{v}");
        }
    }

    #[test]
    fn quantiles_and_reset() {
        let w = WorkerLatency::default();
        for i in 1..=1000u64 {
            w.record(0, i * 1000, 1);
        }
        w.record(1, 5_000_000, 3);
        let mut s = Snapshot::empty();
        w.add_to(&mut s);
        assert_eq!((s.count(0), s.count(1)), (1000, 3));
        let p50 = s.quantile(0, 0.5);
        assert!((500_000..=532_000).contains(&p50), "{p50}");
        assert_eq!(s.max(0), 1_000_000);
        assert_eq!(s.quantile(1, 0.999), 5_000_000);
        w.reset();
        w.record(0, 7_000, 1);
        let mut s = Snapshot::empty();
        w.add_to(&mut s);
        assert_eq!((s.count(0), s.count(1), s.max(0)), (1, 0, 7_000));
    }

    #[test]
    fn families_by_command_word() {
        assert_eq!(text_family(b"get a\r\n"), GET);
        assert_eq!(text_family(b"gets a b\r\n"), GET);
        assert_eq!(text_family(b"gat 1 a\r\n"), TOUCH);
        assert_eq!(text_family(b"ms a 1\r\nx\r\n"), SET);
        assert_eq!(text_family(b"mn\r\n"), NOOP);
        assert_eq!(text_family(b"getx a\r\n"), OTHER);
        assert_eq!(text_family(b"stats\r\n"), OTHER);
        assert_eq!(binary_family(&[0x80, 0x0d]), GET);
        assert_eq!(binary_family(&[0x80]), OTHER);
    }
}
