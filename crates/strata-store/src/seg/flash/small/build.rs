//! A partition's new sets, built front to back from its old sets (read in
//! order) and its log's records (sorted by place): the part of a merge that
//! touches no lock and no device, so it is tested on its own.
//!
//! ```text
//!  old set t (records, each with its hit bit) ─► pending, by new set
//!  log records (sorted by place)              ─┐
//!  every new set whose range of places the old sets read so far cover:
//!     its candidates: the pending old ones and its log ones
//!     ─► under the threshold: the log ones not read since written stay out
//!     ─► by rrpv (hit: 0; old: aged by one; new: 2), new before old
//!     ─► as many as fit into the set's block; the rest are dropped
//!     ─► block handed to `emit` (a chunk of the extent), keys into its filter
//! ```
//!
//! Old set t holds places [start(t, N), start(t + 1, N)); new set t' is done
//! once every old set below start(t' + 1, N') was read (both are ranges of
//! the same 32-bit place, `geometry.rs`).

use std::collections::VecDeque;

use super::block::{Builder, Kind, Meta, RRPV_MAX};
use super::geometry::set_of;
use super::index::key_bits;
use super::summary::{Shape, Summaries};

/// Re-reference prediction of a record just moved from the log (RRIP's
/// "long"): it goes before old unread records, after read ones.
pub const RRPV_NEW: u8 = 2;

/// A record going into a new set.
#[derive(Clone, Debug)]
pub struct Cand<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: Meta,
    pub hash: u64,
    pub frac: u32,
    /// From the log: its ring slot and record index.
    pub from_log: Option<(u16, u8)>,
    /// Read since written (log: its entry's count; old: its hit bit).
    pub read: bool,
}

/// An old record kept until its new set is built: its key and value at
/// `at` in its set's `Pending::bytes`.
struct Held {
    at: usize,
    key_len: usize,
    len: usize,
    meta: Meta,
    hash: u64,
    frac: u32,
    read: bool,
}

/// The first place of set `t` among `n`.
pub fn start(t: u64, n: u32) -> u64 {
    (t << 32).div_ceil(u64::from(n))
}

/// What a build produced besides its blocks.
#[derive(Debug, Default)]
pub struct Built {
    pub summaries: Summaries,
    /// Hash bits (`index::key_bits`, packed) of every key the new sets hold, sorted.
    pub kept: Vec<u64>,
    /// Log records placed into a set.
    pub placed: Vec<(u16, u8)>,
    pub items: u64,
    pub item_bytes: u64,
    /// Records that found no room (or were under the threshold).
    pub dropped: u64,
    /// With `spill`: the records a set had no room for while the partition
    /// could still grow (its sets' sizes vary around the mean), to go back
    /// to its log rather than be lost.
    pub spilled: Vec<Spilled>,
}

/// A record a set had no room for, kept to go back to the log.
#[derive(Debug)]
pub struct Spilled {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub meta: Meta,
    pub hash: u64,
}

/// Packed `key_bits`.
pub fn packed_bits(hash: u64) -> u64 {
    let (h32, filter) = key_bits(hash);
    u64::from(h32) | u64::from(filter) << 32
}

/// The old records of one new set, their bytes in one buffer (reused from
/// set to set: a merge copies ~100k records).
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    held: Vec<Held>,
}

/// The builder (module docs).
pub struct Sets<'a> {
    sets: u32,
    set_bytes: usize,
    max_records: usize,
    threshold: usize,
    log: Vec<Cand<'a>>,
    log_at: usize,
    pending: VecDeque<Pending>,
    /// Emptied `Pending`s, for the sets to come.
    spare: Vec<Pending>,
    /// The new set at the front of `pending`.
    next: u32,
    built: Built,
    block: Vec<u8>,
    spill: bool,
}

impl<'a> Sets<'a> {
    /// A build of `sets` sets of `set_bytes` from `log` (any order);
    /// `spill`: keep what finds no room (`Built::spilled`).
    pub fn new(sets: u32, set_bytes: usize, shape: Shape, max_records: usize, threshold: u32, spill: bool, mut log: Vec<Cand<'a>>) -> Sets<'a> {
        log.sort_by_key(|c| c.frac);
        Sets {
            sets,
            set_bytes,
            max_records,
            threshold: threshold as usize,
            log,
            log_at: 0,
            pending: VecDeque::new(),
            spare: Vec::new(),
            next: 0,
            built: Built { summaries: Summaries::new(shape, sets as usize), ..Built::default() },
            block: vec![0; set_bytes],
            spill,
        }
    }

    /// An old record, in the order of the old sets (its `rrpv` is aged here).
    pub fn old(&mut self, key: &[u8], value: &[u8], meta: Meta, hash: u64, frac: u32, read: bool) {
        let t = set_of(frac, self.sets) as u32;
        debug_assert!(t >= self.next, "old records come in place order");
        while self.next + (self.pending.len() as u32) <= t {
            let spare = self.spare.pop().unwrap_or_default();
            self.pending.push_back(spare);
        }
        let meta = Meta { rrpv: if read { 0 } else { (meta.rrpv + 1).min(RRPV_MAX) }, ..meta };
        let p = &mut self.pending[(t - self.next) as usize];
        let at = p.bytes.len();
        p.bytes.extend_from_slice(key);
        p.bytes.extend_from_slice(value);
        p.held.push(Held { at, key_len: key.len(), len: key.len() + value.len(), meta, hash, frac, read });
    }

    /// Every place below `end` was read: build the new sets it completes,
    /// each block handed to `emit` (false: stop, the build failed).
    pub fn done_below(&mut self, end: u64, emit: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        while self.next < self.sets && start(u64::from(self.next) + 1, self.sets) <= end {
            if !self.build_next(emit) {
                return false;
            }
        }
        true
    }

    /// Build the remaining sets; what the build produced.
    pub fn finish(mut self, emit: &mut dyn FnMut(&[u8]) -> bool) -> Option<Built> {
        if !self.done_below(1 << 32, emit) {
            return None;
        }
        self.built.kept.sort_unstable();
        Some(self.built)
    }

    fn build_next(&mut self, emit: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let t = self.next;
        let mut old = self.pending.pop_front().unwrap_or_default();
        self.next += 1;
        let mut cands: Vec<Cand<'_>> = old
            .held
            .iter()
            .map(|h| {
                let (key, value) = old.bytes[h.at..h.at + h.len].split_at(h.key_len);
                Cand { key, value, meta: h.meta, hash: h.hash, frac: h.frac, from_log: None, read: h.read }
            })
            .collect();
        let first_log = self.log_at;
        while self.log_at < self.log.len() && set_of(self.log[self.log_at].frac, self.sets) as u32 == t {
            self.log_at += 1;
        }
        let new = &self.log[first_log..self.log_at];
        let under = new.len() < self.threshold;
        for c in new {
            if under && !c.read {
                self.built.dropped += 1;
                continue;
            }
            let rrpv = if c.read { 0 } else { RRPV_NEW };
            cands.push(Cand { meta: Meta { rrpv, ..c.meta }, ..c.clone() });
        }
        // Keep the likeliest to be read again: low rrpv first, new before old.
        cands.sort_by_key(|c| (c.meta.rrpv, c.from_log.is_none()));
        let mut b = Builder::new(&mut self.block, Kind::Set, self.max_records);
        for c in &cands {
            match b.push(c.key, c.value, &c.meta) {
                Some(_) => {
                    self.built.summaries.add(t as usize, c.hash);
                    self.built.kept.push(packed_bits(c.hash));
                    if let Some(at) = c.from_log {
                        self.built.placed.push(at);
                    }
                    self.built.items += 1;
                    self.built.item_bytes += (c.key.len() + c.value.len()) as u64;
                }
                None if self.spill => self.built.spilled.push(Spilled { key: c.key.to_vec(), value: c.value.to_vec(), meta: c.meta, hash: c.hash }),
                None => self.built.dropped += 1,
            }
        }
        // The block is sealed where it lands (its check needs its place).
        let used = b.used();
        self.block[used..].fill(0);
        drop(cands);
        old.bytes.clear();
        old.held.clear();
        self.spare.push(old);
        emit(&self.block[..self.set_bytes])
    }
}

#[cfg(test)]
mod tests {
    use super::super::block::View;
    use super::*;

    fn hash(n: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&n.to_le_bytes())
    }

    /// A record as a rewrite stored it: moved from the log, not read since.
    fn meta(n: u64) -> Meta {
        Meta { cas: n, access: 100, rrpv: RRPV_NEW, ..Meta::default() }
    }

    /// Old records of `old_sets` sets, each key in its set by place.
    fn build(old: &[(u64, bool)], old_sets: u32, log: &[(u64, bool)], sets: u32, threshold: u32) -> (Vec<Vec<(u64, u8)>>, Built) {
        let shape = Shape::new(320, 4096, 35);
        let keys: Vec<[u8; 8]> = (0..2000u64).map(|n| n.to_be_bytes()).collect();
        let value = [7u8; 60];
        let cands = log
            .iter()
            .map(|&(n, read)| Cand { key: &keys[n as usize], value: &value, meta: meta(n), hash: hash(n), frac: hash(n) as u32, from_log: Some((n as u16, 0)), read })
            .collect();
        let mut s = Sets::new(sets, 4096, shape, 64, threshold, false, cands);
        let mut old: Vec<_> = old.to_vec();
        old.sort_by_key(|&(n, _)| set_of(hash(n) as u32, old_sets));
        let mut blocks = Vec::new();
        let mut emit = |b: &[u8]| {
            blocks.push(b.to_vec());
            true
        };
        let mut t = 0;
        for &(n, read) in &old {
            let ot = set_of(hash(n) as u32, old_sets) as u64;
            while t < ot {
                t += 1;
                assert!(s.done_below(start(t, old_sets), &mut emit));
            }
            s.old(&keys[n as usize], &value, meta(n), hash(n), hash(n) as u32, read);
        }
        let built = s.finish(&mut emit).expect("built");
        let sets: Vec<Vec<(u64, u8)>> = blocks
            .iter()
            .map(|b| View::unchecked(b).expect("a set").records().map(|r| (u64::from_be_bytes(r.key.try_into().unwrap()), r.meta.rrpv)).collect())
            .collect();
        (sets, built)
    }

    #[test]
    fn every_key_lands_in_its_set_and_its_filter() {
        let old: Vec<(u64, bool)> = (0..600).map(|n| (n, n % 10 == 0)).collect();
        let log: Vec<(u64, bool)> = (600..900).map(|n| (n, false)).collect();
        for (old_sets, sets) in [(20, 20), (20, 37), (37, 20), (1, 64)] {
            let (got, built) = build(&old, old_sets, &log, sets, 1);
            assert_eq!(got.len(), sets as usize);
            assert_eq!(built.items + built.dropped, 900);
            for (t, set) in got.iter().enumerate() {
                for &(n, rrpv) in set {
                    assert_eq!(set_of(hash(n) as u32, sets), t, "key {n} in its set");
                    assert!(built.summaries.may_contain(t, hash(n)));
                    let want = if n >= 600 { RRPV_NEW } else if n % 10 == 0 { 0 } else { RRPV_NEW + 1 };
                    assert_eq!(rrpv, want, "key {n}");
                }
            }
            if sets >= 37 {
                assert_eq!(built.dropped, 0, "{old_sets} -> {sets}: room for all");
                assert_eq!(built.placed.len(), 300);
            }
        }
    }

    #[test]
    fn a_full_set_keeps_the_read_and_the_new_over_old_unread() {
        // One set: 60 old (10 read), 40 new (5 read): about 44 fit.
        let old: Vec<(u64, bool)> = (0..60).map(|n| (n, n < 10)).collect();
        let log: Vec<(u64, bool)> = (100..140).map(|n| (n, n < 105)).collect();
        let (got, built) = build(&old, 1, &log, 1, 1);
        let kept: Vec<u64> = got[0].iter().map(|k| k.0).collect();
        assert!(kept.len() >= 40 && built.dropped as usize == 100 - kept.len());
        for n in (0..10).chain(100..140) {
            assert!(kept.contains(&n), "key {n}: read or new");
        }
        assert_eq!(built.kept.len(), kept.len());
        // Threshold 2 with one new record a set: only read ones go in.
        let (got, built) = build(&[], 1, &[(7, false)], 1, 2);
        assert!(got[0].is_empty() && built.dropped == 1);
        let (got, _) = build(&[], 1, &[(7, true)], 1, 2);
        assert_eq!(got[0].len(), 1);
    }
}
