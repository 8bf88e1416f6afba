//! Eviction: S3-FIFO at segment granularity, paid for as items are written.
//!
//! A victim is a sealed segment taken off its queue ([`Shard::next_victim`]).
//! Walking it, each item still linked is settled ([`Shard::settle`]): an
//! expired or flushed one is dropped, one read since it was written
//! (frequency > 0) is kept and rewritten into the `Main` segment of its TTL
//! bucket (at most [`KEEP_PERCENT`] of the victim), and the rest go to flash
//! (`-o ext_path`) or are evicted, each told to `watch evictions`.
//!
//! When memory is full (no pooled segment, no room under `-m` for another),
//! a shard takes its next victim ahead of need and every store pays for
//! itself ([`Shard::pay_for_write`]): a store of N bytes walks at least N
//! bytes of the victim, as a store into a full memcached evicts about its
//! own size, and prefetches the index line of the victim's next item for
//! the next store. By the time the shard's open segment is full its victim is
//! walked and its buffer is back in the pool, so no store waits while a
//! whole segment is walked (a 256 KiB segment of small items is thousands of
//! index updates under the shard's lock) and evictions come as a steady
//! stream. The price: while a victim drains, half a segment per shard on
//! average holds no items. A store that needs a segment before its victim
//! is walked finishes the walk ([`Shard::evict_one`]), as does a hot item
//! that finds no room in a `Main` segment to move to.
//!
//! ```text
//!   store of N bytes ──► open Small segment ──► pay_for_write(N)
//!                                                 │ walk >= N bytes
//!   drain: victim [settled | settled | next ─► ... end]  ──► pool when walked
//! ```

use super::*;

/// A victim walked a store at a time (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct Drain {
    id: u32,
    /// Where its next item starts.
    offset: usize,
    /// Bytes of its hot items rewritten so far.
    kept: usize,
    /// Bytes walked ahead of the stores that owed them.
    credit: usize,
}

/// What [`Shard::settle`] did with an item.
enum Settled {
    /// Dropped, evicted, sent to flash, or no longer linked there.
    Gone,
    /// To be rewritten (the caller copies it), with this frequency; `hash`
    /// is its key's.
    Keep { freq: u8, hash: u64 },
}

impl Shard {
    /// The next victim in S3-FIFO order, taken off its queue: the oldest
    /// `Small` segment while those are over their share, else the oldest
    /// `Main` one.
    fn next_victim(&mut self, keep: Option<u32>) -> Option<u32> {
        let sealed = self.small_count + self.main_count;
        let from_small = self.main_count == 0 || self.small_count * 100 > sealed * SMALL_SHARE_PERCENT;
        self.pop_victim(from_small, keep).or_else(|| self.pop_victim(!from_small, keep))
    }

    fn pop_victim(&mut self, small: bool, keep: Option<u32>) -> Option<u32> {
        let queue = if small { &mut self.small } else { &mut self.main };
        let mut i = 0;
        while i < queue.len() {
            let (id, gen) = queue[i];
            let seg = &self.segs[id as usize];
            if seg.gen != gen || seg.state != State::Sealed {
                queue.remove(i);
                continue;
            }
            if Some(id) == keep {
                i += 1;
                continue;
            }
            queue.remove(i);
            self.take_sealed(id);
            return Some(id);
        }
        None
    }

    /// Free a segment now: finish the victim being drained, else evict one
    /// whole (S3-FIFO order). True once a buffer went back to the pool.
    pub fn evict_one(&mut self, g: &Globals, keep: Option<u32>, now: RelTime) -> bool {
        if let Some(d) = self.drain.filter(|d| Some(d.id) != keep) {
            self.drain = None;
            if self.evict_segment(g, d.id, now, Mode::Evict { keep_hot: true }, d.kept) {
                return true;
            }
        }
        for attempt in 0..EVICT_ATTEMPTS {
            let Some(victim) = self.next_victim(keep) else {
                return false;
            };
            let keep_hot = attempt + 1 < EVICT_ATTEMPTS;
            if self.evict_segment(g, victim, now, Mode::Evict { keep_hot }, 0) {
                return true;
            }
        }
        false
    }

    /// A store just wrote `bytes` into segment `written` of this shard.
    /// While memory is full, walk at least as many bytes of the victim
    /// (taken now if none is). An item with a buffer of its own (jumbo)
    /// pays nothing: its buffer is found when it is written, as memcached
    /// evicts for each item, and evicting ahead would only leave one idle.
    pub fn pay_for_write(&mut self, g: &Globals, bytes: usize, written: u32, now: RelTime) {
        if self.segs[written as usize].jumbo {
            return;
        }
        if self.drain.is_none() {
            if g.config.evictions_disabled || !g.segments_short() {
                return;
            }
            let Some(id) = self.next_victim(None) else { return };
            self.drain = Some(Drain { id, offset: g.data_start, kept: 0, credit: 0 });
        }
        let Some(mut d) = self.drain else { return };
        if d.credit >= bytes {
            d.credit -= bytes;
            self.drain = Some(d);
            return;
        }
        let (owed, end) = (bytes - d.credit, self.segs[d.id as usize].write_offset);
        let mut walked = 0;
        while walked < owed && d.offset < end {
            let Some(len) = self.drain_item(g, &mut d, now) else { break };
            walked += len;
        }
        d.credit = walked.saturating_sub(owed);
        if d.offset < end {
            self.drain = Some(d);
            return;
        }
        debug_assert_eq!(self.segs[d.id as usize].live_items, 0);
        self.drain = None;
        let buf = self.release(d.id);
        g.give_back(buf);
    }

    /// Settle the drained victim's next item; its length, or None when it
    /// is hot and no `Main` segment has room (it then waits, linked, for
    /// the store that finishes the walk).
    fn drain_item(&mut self, g: &Globals, d: &mut Drain, now: RelTime) -> Option<usize> {
        let v = d.id;
        let room = (self.segs[v as usize].buf.len() * KEEP_PERCENT / 100).saturating_sub(d.kept);
        let (len, settled) = self.settle(g, v, d.offset, now, Mode::Evict { keep_hot: true }, room);
        if let Settled::Keep { freq, hash } = settled {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&self.segs[v as usize].buf[d.offset..d.offset + len]);
            let (bucket, cas_base, create_time) = {
                let s = &self.segs[v as usize];
                (s.bucket, s.cas_base, s.create_time)
            };
            let spec = spec_of(&scratch, self.checked, cas_base, create_time);
            let target = self.main_with_room(g, bucket, &spec, now);
            if let Some(id) = target {
                let old = Loc { seg: v, offset: d.offset as u32 };
                let from = self.segs[v as usize].class;
                self.relink(g, id, &scratch, &spec, (old, hash), freq, Some(from));
                d.kept += len;
            }
            self.scratch = scratch;
            target?;
        }
        d.offset += len;
        self.prefetch_next(d);
        Some(len)
    }

    /// Prefetch the index line (and, from `Small`, the ghost bucket) of the
    /// victim's next item, so that its settling, a store later, finds them
    /// cached: walked a store at a time, one item's misses no longer overlap
    /// the next one's as in a whole-segment walk (`examples/lab/store_latency.rs`,
    /// docs/bench/store.md "Eviction paid store by store"; prefetching the
    /// victim's bytes ahead as well changed nothing measurable).
    fn prefetch_next(&self, d: &Drain) {
        let seg = &self.segs[d.id as usize];
        if d.offset < seg.write_offset {
            let item = &seg.buf[d.offset..];
            let h = Header::decode(item, self.checked);
            let hash = hash_key(h.key(item));
            self.table.prefetch_home(hash);
            if seg.class == Class::Small {
                self.ghost.prefetch(hash);
            }
        }
    }

    /// The open `Main` segment of `bucket` if `spec` fits there, else a
    /// new one from the pool (sealing the full one); None if the pool is empty.
    fn main_with_room(&mut self, g: &Globals, bucket: u8, spec: &Spec, now: RelTime) -> Option<u32> {
        let open = self.active_for(bucket, Class::Main);
        if let Some(id) = open {
            if self.fits(id, spec) {
                return Some(id);
            }
        }
        let buf = g.take(g.segment_size)?;
        if let Some(id) = open {
            self.seal(g, id);
        }
        Some(self.open(g, buf, bucket, Class::Main, now, false))
    }

    fn fits(&self, id: u32, spec: &Spec) -> bool {
        let seg = &self.segs[id as usize];
        seg.write_offset + spec.encode(seg, self.checked).encoded_len() <= seg.buf.len()
    }

    /// Settle the item at `offset` of victim `v` (see the module comment);
    /// `room` is how many bytes of hot items it may still keep. Returns the
    /// item's length and what became of it.
    fn settle(&mut self, g: &Globals, v: u32, offset: usize, now: RelTime, mode: Mode, room: usize) -> (usize, Settled) {
        let (cas_base, create_time) = (self.segs[v as usize].cas_base, self.segs[v as usize].create_time);
        let item = &self.segs[v as usize].buf[offset..];
        let h = Header::decode(item, self.checked);
        let len = h.total_len();
        let hash = hash_key(h.key(item));
        let loc = Loc { seg: v, offset: offset as u32 };
        let Some(slot) = self.table.find(hash, |l| l == loc) else {
            return (len, Settled::Gone);
        };
        let exptime = h.exptime(item);
        let flushed = g.is_flushed(h.access(item, create_time), h.cas(item, cas_base), now);
        let freq = slot_freq(self.table.slot(slot));
        let hot = mode == Mode::Compact || freq > 0;
        if flushed {
            self.unlink(g, slot, loc, &h, Gone::Flushed);
        } else if exptime != 0 && exptime <= now {
            self.unlink(g, slot, loc, &h, Gone::Expired);
        } else if hot && len <= room {
            let freq = if mode == Mode::Compact { freq } else { freq.saturating_sub(1) };
            return (len, Settled::Keep { freq, hash });
        } else if self.demote_to_flash(g, loc, &h, hash, now) {
            self.unlink(g, slot, loc, &h, Gone::Replaced);
        } else {
            if self.segs[v as usize].class == Class::Small && !hot {
                // Ghost hook: remember a key evicted unread from Small.
                self.ghost.remember(hash, self.curr_items as usize);
                self.recharge(g);
            }
            let item = &self.segs[v as usize].buf[offset..];
            let last_access = h.access(item, create_time);
            log_eviction(g, h.key(item), &h, exptime, last_access, now);
            let e = Eviction { had_ttl: exptime != 0, fetched: false, active: hot, last_access, now };
            self.unlink(g, slot, loc, &h, Gone::Evicted(e));
        }
        (len, Settled::Gone)
    }

    /// Rewrite the kept item `bytes` (a copy of the one at `old`, which the
    /// index still points to, with its key's `hash`) into segment `id` with
    /// frequency `freq`; `from` is the class it moves from, for memcached's
    /// move counters.
    fn relink(&mut self, g: &Globals, id: u32, bytes: &[u8], spec: &Spec, (old, hash): (Loc, u64), freq: u8, from: Option<Class>) {
        let h = Header::decode(bytes, self.checked);
        let key = h.key(bytes);
        let slot = self.table.find(hash, |l| l == old).expect("kept item is linked");
        let (loc, value_at, new_len) = self.place(id, spec, key);
        self.segs[id as usize].buf[value_at..value_at + h.value_len].copy_from_slice(h.value(bytes));
        self.write_check(loc);
        self.table.update(slot, hash, loc, freq);
        self.count_live(loc, new_len, g.item_class(&h));
        if let Some(from) = from {
            let (cls, _) = g.item_class(&h);
            let c = self.classes.class(cls);
            match from {
                Class::Small => c.moves_to_warm += 1,
                Class::Main => c.moves_within_lru += 1,
            }
        }
        self.forget(g, old, &h);
    }

    /// Walk segment `v` (already taken off its queues) whole: settle every
    /// item still linked there (`kept` bytes of it were kept already),
    /// rewrite the kept ones (into the Main segment of `v`'s TTL bucket,
    /// or `v`'s own class when compacting), and free `v`. True if `v`'s
    /// buffer went back to the pool; false if it became the open segment
    /// the kept items went to.
    pub(super) fn evict_segment(&mut self, g: &Globals, v: u32, now: RelTime, mode: Mode, kept: usize) -> bool {
        let (end, cas_base, create_time, bucket, class) = {
            let s = &self.segs[v as usize];
            (s.write_offset, s.cas_base, s.create_time, s.bucket, s.class)
        };
        let keep_limit = match mode {
            Mode::Evict { keep_hot: true } => (self.segs[v as usize].buf.len() * KEEP_PERCENT / 100).saturating_sub(kept),
            Mode::Evict { keep_hot: false } => 0,
            Mode::Compact => usize::MAX,
        };
        let mut scratch = g.take_walk_buffer();
        let capacity_before = scratch.capacity();
        // (offset, frequency, key hash) of each kept item, by offset.
        let mut kept: Vec<(u32, u8, u64)> = Vec::new();
        let mut offset = g.data_start;
        while offset < end {
            let (len, settled) = self.settle(g, v, offset, now, mode, keep_limit.saturating_sub(scratch.len()));
            if let Settled::Keep { freq, hash } = settled {
                scratch.extend_from_slice(&self.segs[v as usize].buf[offset..offset + len]);
                kept.push((offset as u32, freq, hash));
            }
            offset += len;
        }
        // The victim's buffer is free to reuse; its id stays taken until the
        // kept items are relinked, so old and new locations never collide.
        let mut spare = Some(std::mem::take(&mut self.segs[v as usize].buf));
        let target = if mode == Mode::Compact { class } else { Class::Main };
        let mut at = 0;
        for &(old_offset, freq, hash) in &kept {
            let bytes = &scratch[at..];
            let h = Header::decode(bytes, self.checked);
            let len = h.total_len();
            let bytes = &scratch[at..at + len];
            at += len;
            let spec = spec_of(bytes, self.checked, cas_base, create_time);
            let old = Loc { seg: v, offset: old_offset };
            let id = match self.active_for(bucket, target) {
                Some(id) if self.fits(id, &spec) => Some(id),
                open => {
                    if let Some(id) = open {
                        self.seal(g, id);
                    }
                    spare.take().map(|buf| self.open(g, buf, bucket, target, now, false))
                }
            };
            let Some(id) = id.filter(|&id| self.fits(id, &spec)) else {
                // The victim's bytes are being reused: the table must get the
                // hashes of items still pointing there from the kept list.
                let slot = self.table.find(hash, |l| l == old).expect("kept item is linked");
                let (segs, kept, checked) = (&self.segs, &kept, self.checked);
                self.table.remove(slot, |l| {
                    if l.seg == v {
                        kept[kept.binary_search_by_key(&l.offset, |k| k.0).expect("kept item")].2
                    } else {
                        Self::loc_hash(segs, checked, l)
                    }
                });
                log_eviction(g, h.key(bytes), &h, spec.exptime, spec.access, now);
                let e = Eviction { had_ttl: spec.exptime != 0, fetched: false, active: true, last_access: spec.access, now };
                self.count_gone(g, &h, Gone::Evicted(e));
                self.forget(g, old, &h);
                continue;
            };
            let from = (mode != Mode::Compact).then_some(class);
            self.relink(g, id, bytes, &spec, (old, hash), freq, from);
        }
        g.give_walk_buffer(scratch, capacity_before);
        debug_assert_eq!(self.segs[v as usize].live_items, 0);
        self.release(v);
        match spare {
            Some(buf) => {
                g.give_back(buf);
                true
            }
            None => false,
        }
    }

    /// The victim being drained, if any (`check_integrity`).
    pub(super) fn draining(&self) -> Option<u32> {
        self.drain.map(|d| d.id)
    }
}

/// How to rewrite the item in `bytes` (a copy of one written in a segment
/// with `cas_base` and `create_time`) elsewhere.
fn spec_of(bytes: &[u8], checked: bool, cas_base: u64, create_time: RelTime) -> Spec {
    let h = Header::decode(bytes, checked);
    Spec {
        bits: h.bits,
        key_len: h.key_len,
        value_len: h.value_len,
        cas: h.cas(bytes, cas_base),
        access: h.access(bytes, create_time),
        flags: h.flags,
        exptime: h.exptime(bytes),
    }
}

/// Tell `watch evictions` of an evicted item, if someone watches.
#[inline]
fn log_eviction(g: &Globals, key: &[u8], h: &Header, exptime: RelTime, last_access: RelTime, now: RelTime) {
    if let Some(log) = g.eviction_log.get() {
        if log.wants() {
            let fetched = h.bits & FETCHED != 0;
            let item = crate::Evicted { key, flags: h.flags, value_len: h.value_len, exptime, last_access, fetched, now };
            log.evicted(&item);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, SegStore, StoreRequest, StoreResult};

    fn set(store: &SegStore, key: &[u8], value: &[u8], exptime: crate::RelTime, now: crate::RelTime) -> StoreResult {
        let req = StoreRequest::set(key, value).with_exptime(exptime);
        store.store(&req, now)
    }

    /// The case `matches_the_model_with_flash` found: at -m 1 MiB (16
    /// segments, 4 shards) one shard holds a single segment, sealed and
    /// holding the key being set (so it may not be evicted), and the other
    /// shards hold the rest of memory in open segments, one per TTL bucket.
    /// The set must take one of those, not answer out of memory.
    #[test]
    fn a_store_takes_another_shards_open_segment() {
        let store = SegStore::new(EngineConfig { memory_limit_bytes: 1 << 20, ..EngineConfig::default() });
        let (shards, segment) = (store.shard_count(), store.segment_size());
        assert_eq!((shards, segment), (4, 64 << 10));
        let now = 100;
        let mut keys: Vec<Vec<Vec<u8>>> = vec![Vec::new(); shards];
        for i in 0..10_000 {
            let key = format!("key:{i}").into_bytes();
            keys[store.shard_of(super::hash_key(&key))].push(key);
        }
        // Shard 0: one segment nearly full of items that never expire (50:
        // its index keeps its first 64 slots, so nothing is charged to -m
        // besides the segments, charge.rs).
        let value = vec![b'v'; 1200];
        for key in &keys[0][..50] {
            assert!(matches!(set(&store, key, &value, 0, now), StoreResult::Stored { .. }));
        }
        // Shards 1..3: every other segment open, one item each, TTL buckets 1..5.
        let open = (1 << 20) / segment - 1;
        for n in 0..open {
            let (shard, bucket) = (1 + n % (shards - 1), n / (shards - 1));
            let key = &keys[shard][bucket];
            assert!(matches!(set(&store, key, b"x", now + (1 << bucket), now), StoreResult::Stored { .. }));
        }
        assert_eq!(store.allocated_bytes(), 1 << 20);
        assert_eq!(store.queue_counts(), (0, 0, open + 1), "every segment open");
        let big = vec![b'b'; 13_464];
        let stored = set(&store, &keys[0][0], &big, 0, now);
        assert!(matches!(stored, StoreResult::Stored { .. }), "{stored:?}");
        assert!(store.stats().evictions > 0);
        store.check_integrity();
    }
}
