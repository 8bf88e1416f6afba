//! One shard of the segment store: its hash index, its segments, its queues.
//!
//! Everything here runs under the shard's mutex (its `ShardGuard`, which
//! keeps the shard's sequence odd meanwhile: view.rs), so a shard is a
//! small single-threaded cache and needs no unsafe code: items are read and
//! written through safe slices. Gets read without the lock and validate
//! against the sequence (read.rs); for them every segment that gets or
//! loses a buffer is published in the shard's read view (`Shard::publish`).
//!
//! ```text
//!  Shard
//!   table ──slot──► segs[seg].buf[offset..]       (item layout: item.rs)
//!   segs:   Segment { buf, write_offset, live_bytes, live_items,
//!                     create_time, cas_base, max_exptime, bucket, class, state, gen }
//!   active: one open segment per (TTL bucket, class), appended to
//!   small, main: sealed segments in seal order (S3-FIFO's two FIFO queues)
//!   by_ttl[bucket]: sealed segments in seal order, for expiry
//! ```
//!
//! Memory: buffers come from the store-wide pool (or a new allocation while
//! `allocated + size <= -m`, `allocated` holding the index's growth and the
//! ghost too: charge.rs); past that the shard reclaims an expired segment,
//! else evicts one of its own (S3-FIFO at segment granularity), else evicts
//! from another shard it can lock without waiting. Once memory is full,
//! stores pay for eviction as they go (`evict.rs`), so that a buffer is
//! usually back in the pool before it is needed.
//!
//! Eviction (S3-FIFO, SOSP 2023, at segment granularity): new items go to
//! `Small` segments. The victim is the oldest `Small` segment while small
//! segments are over [`SMALL_SHARE_PERCENT`] of the shard's, else the oldest
//! `Main` one. Walking the victim, an item read since it was written
//! (frequency > 0) is kept, the rest are evicted; kept items are rewritten
//! into the `Main` segment of their TTL bucket (frequency - 1 for items
//! already in `Main`). A one-time scan fills `Small` segments whose items are
//! never read again, so they leave without displacing the working set.
//! At most [`KEEP_PERCENT`] of a victim is kept, so every eviction frees space.
//!
//! Scan resistance, S3-FIFO's ghost (`ghost.rs`): a key evicted unread from
//! `Small` leaves a 10-bit fingerprint in the shard's ghost (3 bytes per
//! item held, allocated on the shard's first eviction); set again while
//! remembered, it is linked with frequency 1, so its `Small` segment's
//! eviction promotes it to `Main`. On scripts/bench/hitratio.py's warm half
//! this took the 20% scan stream's miss ratio from 0.3211 to 0.3063 (zipf
//! alone 0.1157 -> 0.1166). Two hook lines, both marked "Ghost hook": in
//! [`Shard::link_found`] and in `evict_segment`'s eviction branch.
//! Readmitting straight into a `Main` segment instead (frequency 0, as the
//! paper does) measured zipf 0.1180, scan 0.3114 at 2 bytes an item: it
//! churns `Main`. (An earlier, unrecorded trial reported under 0.1%.)

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::buffer::Buffer;
use super::file::SegmentHeader;
use super::ghost::Ghost;
use super::item::{access_delta, CasField, Check, Header, NewItem, END_MARK, FETCHED};
use super::table::{slot_freq, slot_loc, Loc, Table, MAX_SEGMENTS};
use super::view::{ReadView, ShardLock};
use super::{hash_key, Globals};
use crate::class_stats::{ClassTally, Eviction, Queue};
use crate::RelTime;

mod charge;
mod evict;

/// Share of a shard's sealed segments that may be `Small` before eviction
/// takes from `Small` (S3-FIFO uses 10%; measured with scripts/bench/hitratio.py).
pub const SMALL_SHARE_PERCENT: usize = 10;
/// TTL buckets: 0 for items that never expire, then one per power of two
/// of seconds to live (1, 2-3, 4-7, ... up to 2^31).
pub const TTL_BUCKETS: usize = 33;
/// An open segment older than this is sealed, so an item's access time
/// (stored relative to its segment's creation) stays within its field.
const MAX_ACTIVE_AGE_S: RelTime = 3600;
/// Share of a victim segment that hot items may take when rewritten: the
/// rest is evicted even if read, so every eviction frees a tenth of a
/// segment. Against 75% (scripts/bench/equalrss.py's seven streams replayed
/// in process, `hitreplay` at -m 58, about equal RSS with memcached -m 64),
/// 90% takes zipf 0.99 from 0.1276 to 0.1243, with the 20% scan 0.3126 ->
/// 0.3107, zipf 0.9 0.2056 -> 0.2022, and leaves the 2M-request streams,
/// zipf 1.1 and the moving working set as they were (0.2266 -> 0.2267);
/// 95-100% gain 0.0004 more, and rewrite up to 19 times what they free.
/// (Earlier, 75% measured 1.4% fewer misses than 50% on the zipf stream.)
pub const KEEP_PERCENT: usize = 90;
/// Victims walked per eviction before giving up on keeping hot items.
const EVICT_ATTEMPTS: usize = 8;
/// Rounds of reclaim / evict / steal before a store gives up with
/// "out of memory" (each round frees a segment or finds every shard busy).
const OBTAIN_ATTEMPTS: usize = 1000;
/// Expired segments a shard reclaims per maintenance tick.
pub const RECLAIM_PER_TICK: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Small,
    Main,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Active,
    Sealed,
    /// Taken off its queue and being walked by eviction, expiry or compaction.
    Evicting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Keep items read since they were written, up to half the segment.
    Evict { keep_hot: bool },
    /// Keep every live item (`-M`: reuse the space of dead ones).
    Compact,
}

pub struct Segment {
    pub buf: Buffer,
    write_offset: usize,
    live_bytes: usize,
    live_items: u32,
    pub create_time: RelTime,
    pub cas_base: u64,
    /// Latest TTL of any item written or touched here; `forever` if one has none.
    max_exptime: RelTime,
    forever: bool,
    bucket: u8,
    class: Class,
    state: State,
    gen: u32,
    jumbo: bool,
    /// Memory file: the segment's sequence number, and the seed of its
    /// items' checks (file secret ^ sequence).
    seq: u64,
    pub seed: u64,
    /// Bit `c` set: an item of memcached class `c` was linked here (for
    /// the per-class ages of `stats items`; never cleared).
    pub class_bits: u64,
}

impl Segment {
    fn free() -> Segment {
        Segment {
            buf: Buffer::default(),
            write_offset: 0,
            live_bytes: 0,
            live_items: 0,
            create_time: 0,
            cas_base: 0,
            max_exptime: 0,
            forever: false,
            bucket: 0,
            class: Class::Small,
            state: State::Free,
            gen: 0,
            jumbo: false,
            seq: 0,
            seed: 0,
            class_bits: 0,
        }
    }

    /// The memcached LRU this segment's items are reported in.
    pub fn queue(&self) -> Queue {
        match self.class {
            Class::Small => Queue::Hot,
            Class::Main => Queue::Warm,
        }
    }

    /// Still appended to (the idle writer, `flash/age.rs`).
    pub fn is_open(&self) -> bool {
        self.state == State::Active
    }

    /// Holds items: open, sealed, or a victim being drained.
    pub fn is_live(&self) -> bool {
        self.state != State::Free
    }

    pub fn note_exptime(&mut self, exptime: RelTime) {
        if exptime == 0 {
            self.forever = true;
        } else {
            self.max_exptime = self.max_exptime.max(exptime);
        }
    }

    fn expired(&self, now: RelTime) -> bool {
        !self.forever && self.max_exptime != 0 && self.max_exptime <= now
    }
}

/// Everything needed to (re)write an item, independent of where it goes.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub bits: u8,
    pub key_len: usize,
    pub value_len: usize,
    pub cas: u64,
    pub access: RelTime,
    pub flags: u32,
    pub exptime: RelTime,
}

impl Spec {
    pub fn encode(&self, seg: &Segment, checked: bool) -> NewItem {
        NewItem {
            checked,
            bits: self.bits,
            key_len: self.key_len,
            value_len: self.value_len,
            cas: CasField::encode(self.cas, seg.cas_base),
            access: access_delta(self.access, seg.create_time),
            flags: self.flags,
            exptime: self.exptime,
        }
    }

    fn bucket(&self, now: RelTime) -> u8 {
        ttl_bucket(self.exptime, now)
    }
}

pub fn ttl_bucket(exptime: RelTime, now: RelTime) -> u8 {
    if exptime == 0 {
        return 0;
    }
    let ttl = exptime.saturating_sub(now).max(1);
    (32 - ttl.leading_zeros()) as u8
}

/// Why an item left the cache, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// Overwritten or deleted: no counter.
    Replaced,
    Evicted(Eviction),
    Expired,
    Flushed,
}

/// Engine counters, memcached's names; kept per shard under its lock (no
/// shared cache line written on every store) and summed by `stats`.
#[derive(Default)]
pub struct Counters {
    pub total_items: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    pub reclaimed: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
}

pub struct Shard {
    pub table: Table,
    pub counters: Counters,
    /// memcached's per-class counters (class_stats.rs).
    pub classes: ClassTally,
    pub segs: Vec<Segment>,
    free_ids: Vec<u32>,
    active: Vec<u32>,
    small: VecDeque<(u32, u32)>,
    main: VecDeque<(u32, u32)>,
    small_count: usize,
    main_count: usize,
    by_ttl: Vec<VecDeque<(u32, u32)>>,
    pub curr_items: u64,
    pub bytes: u64,
    /// A hot item copied out of a drained victim while it is rewritten
    /// (one item; whole walks copy into `Globals::walk_buffers`).
    scratch: Vec<u8>,
    /// A value copied out while the item it came from is rewritten.
    pub scratch_value: Vec<u8>,
    /// This shard's number (written into its segments' headers in a memory file).
    index: u16,
    /// Items carry a check (memory file).
    pub checked: bool,
    /// Where this shard's keys on flash are (`-o ext_path`, flash/index.rs).
    pub flash: Option<Box<super::flash::FlashIndex>>,
    /// Its partitions of the small store (`flash/small/`).
    pub flash_small: Option<Box<super::flash::small::SmallShard>>,
    /// The victim walked ahead of need while memory is full (evict.rs).
    drain: Option<evict::Drain>,
    /// Keys evicted unread from `Small` (scan resistance, ghost.rs).
    pub ghost: Ghost,
    /// Bytes of the index (past `table_base`) and the ghost counted in
    /// `-m` (charge.rs).
    charged: usize,
    /// The index's first size, not charged.
    table_base: usize,
    /// What gets read without the lock (view.rs): every buffer a segment
    /// gets or loses is published there.
    pub view: Arc<ReadView>,
}

/// What recovering a segment found.
#[derive(Default, Debug)]
pub struct Recovered {
    pub damaged: u64,
    pub expired: u64,
    pub max_cas: u64,
    /// CAS numbers above this were given explicitly (meta `E`), not by the
    /// counter: they do not move the counter on.
    pub counter_ceiling: u64,
    /// The highest CAS at or below `counter_ceiling`.
    pub max_counter_cas: u64,
}

impl Recovered {
    pub fn add(&mut self, other: &Recovered) {
        self.damaged += other.damaged;
        self.expired += other.expired;
        self.max_cas = self.max_cas.max(other.max_cas);
        self.max_counter_cas = self.max_counter_cas.max(other.max_counter_cas);
    }
}

impl Shard {
    /// Heap bytes of this shard's bookkeeping outside the segments, the
    /// index and the ghost (`stats memory` `store_meta_bytes`): segment
    /// descriptors, id lists and queues, the per-class tallies and the
    /// scratch buffers, each at its capacity.
    pub fn meta_bytes(&self) -> usize {
        use std::mem::size_of;
        let queue = size_of::<(u32, u32)>();
        self.segs.capacity() * size_of::<Segment>()
            + (self.free_ids.capacity() + self.active.capacity()) * size_of::<u32>()
            + (self.small.capacity() + self.main.capacity()) * queue
            + self.by_ttl.capacity() * size_of::<VecDeque<(u32, u32)>>()
            + self.by_ttl.iter().map(|q| q.capacity() * queue).sum::<usize>()
            + self.scratch.capacity()
            + self.scratch_value.capacity()
            + self.classes.bytes()
    }

    pub fn new(index: u16, checked: bool, track_sizes: bool) -> Shard {
        Shard {
            index,
            checked,
            table: Table::new(),
            table_base: Table::new().bytes(),
            charged: 0,
            counters: Counters::default(),
            classes: ClassTally::new(track_sizes),
            segs: Vec::new(),
            free_ids: Vec::new(),
            active: Vec::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_count: 0,
            main_count: 0,
            by_ttl: (0..TTL_BUCKETS).map(|_| VecDeque::new()).collect(),
            curr_items: 0,
            bytes: 0,
            scratch: Vec::new(),
            scratch_value: Vec::new(),
            flash: None,
            flash_small: None,
            drain: None,
            ghost: Ghost::default(),
            view: Arc::new(ReadView::new()),
        }
    }

    pub fn item(&self, loc: Loc) -> &[u8] {
        &self.segs[loc.seg as usize].buf[loc.offset as usize..]
    }

    pub fn item_mut(&mut self, loc: Loc) -> &mut [u8] {
        &mut self.segs[loc.seg as usize].buf[loc.offset as usize..]
    }

    /// Segment `id`'s generation, append position, and whether it holds
    /// items (for walks: `seg/walk.rs`).
    pub fn segment_extent(&self, id: u32) -> (u32, usize, bool) {
        let s = &self.segs[id as usize];
        (s.gen, s.write_offset, s.state != State::Free && !s.buf.is_empty())
    }

    pub fn seg(&self, loc: Loc) -> &Segment {
        &self.segs[loc.seg as usize]
    }

    pub fn seg_mut(&mut self, loc: Loc) -> &mut Segment {
        &mut self.segs[loc.seg as usize]
    }

    /// Hash of the key stored at `loc` (the table rehashes through this).
    fn loc_hash(segs: &[Segment], checked: bool, loc: Loc) -> u64 {
        let item = &segs[loc.seg as usize].buf[loc.offset as usize..];
        hash_key(Header::decode(item, checked).key(item))
    }

    pub fn header(&self, loc: Loc) -> Header {
        Header::decode(self.item(loc), self.checked)
    }

    /// Memory file: write the check of the item at `loc` as it is now.
    pub fn write_check(&mut self, loc: Loc) {
        if self.checked {
            let h = self.header(loc);
            let seed = self.seg(loc).seed;
            h.write_check(self.item_mut(loc), seed);
        }
    }

    /// Find the slot of `key`, live or not.
    pub fn find(&self, key: &[u8], hash: u64) -> Option<(usize, Loc, Header)> {
        let mut header = None;
        let slot = self.table.find(hash, |loc| {
            let item = self.item(loc);
            let h = Header::decode(item, self.checked);
            let same = super::key_eq::same_key(h.key(item), key);
            if same {
                header = Some(h);
            }
            same
        })?;
        Some((slot, slot_loc(self.table.slot(slot)), header.expect("matched")))
    }

    /// Remove the item in table slot `slot` (at `loc`, with header `h`).
    pub fn unlink(&mut self, g: &Globals, slot: usize, loc: Loc, h: &Header, why: Gone) {
        let (segs, checked) = (&self.segs, self.checked);
        self.table.remove(slot, |l| Self::loc_hash(segs, checked, l));
        self.count_gone(g, h, why);
        self.forget(g, loc, h);
    }

    fn count_gone(&mut self, g: &Globals, h: &Header, why: Gone) {
        let fetched = h.bits & FETCHED != 0;
        let c = &mut self.counters;
        match why {
            Gone::Replaced => return,
            Gone::Evicted(_) => {
                c.evictions += 1;
                c.evicted_unfetched += u64::from(!fetched);
            }
            Gone::Expired => {
                c.reclaimed += 1;
                c.expired_unfetched += u64::from(!fetched);
            }
            Gone::Flushed => c.reclaimed += 1,
        }
        let (cls, _) = g.item_class(h);
        match why {
            Gone::Evicted(e) => self.classes.evicted(cls, Eviction { fetched, ..e }),
            _ => self.classes.reclaimed(cls, fetched, why == Gone::Flushed),
        }
    }

    /// Account a newly placed item's bytes as live; `(cls, size)` is its
    /// memcached class and item size (`Globals::item_class`).
    fn count_live(&mut self, loc: Loc, len: usize, (cls, size): (u8, usize)) {
        self.curr_items += 1;
        self.bytes += len as u64;
        let seg = &mut self.segs[loc.seg as usize];
        seg.live_bytes += len;
        seg.live_items += 1;
        seg.class_bits |= 1 << (cls & 63);
        let queue = seg.queue();
        self.classes.linked(cls, queue, size);
    }

    /// Account an item's bytes as dead; frees its segment when it was the
    /// last live item of a sealed one.
    fn forget(&mut self, g: &Globals, loc: Loc, h: &Header) {
        let len = h.total_len();
        if g.config.evictions_disabled && g.exhausted.load(Ordering::Relaxed) {
            g.exhausted.store(false, Ordering::Relaxed);
        }
        let (cls, size) = g.item_class(h);
        let queue = self.segs[loc.seg as usize].queue();
        self.classes.unlinked(cls, queue, size);
        self.curr_items -= 1;
        self.bytes -= len as u64;
        let seg = &mut self.segs[loc.seg as usize];
        if self.checked && !seg.buf.is_empty() {
            // So recovery never brings a replaced or deleted value back.
            let item = &mut seg.buf[loc.offset as usize..];
            Header::decode(item, true).mark_dead(item, seg.seed);
        }
        seg.live_bytes -= len;
        seg.live_items -= 1;
        if seg.live_items == 0 && seg.state == State::Sealed {
            let buf = self.release(loc.seg);
            g.give_back(buf);
        }
    }

    /// Link a freshly written item: replaces `key`'s slot if present (keeping
    /// its frequency), else inserts one.
    pub fn link(&mut self, g: &Globals, key: &[u8], hash: u64, loc: Loc, len: usize, class: (u8, usize)) {
        let existing = self.find(key, hash);
        self.link_found(g, hash, loc, len, class, existing);
    }

    /// [`Shard::link`] with the key's current slot already looked up.
    fn link_found(&mut self, g: &Globals, hash: u64, loc: Loc, len: usize, class: (u8, usize), existing: Option<(usize, Loc, Header)>) {
        self.count_live(loc, len, class);
        match existing {
            Some((slot, old, h)) => {
                let freq = slot_freq(self.table.slot(slot));
                self.table.update(slot, hash, loc, freq);
                self.forget(g, old, &h);
            }
            None => {
                // Ghost hook: a key evicted unread from Small that returns
                // gets frequency 1, so its Small segment's eviction promotes it.
                let freq = u8::from(self.ghost.take(hash));
                let (segs, checked) = (&self.segs, self.checked);
                self.table.insert(hash, loc, freq, |l| Self::loc_hash(segs, checked, l));
                self.recharge(g);
            }
        }
        if self.segs[loc.seg as usize].jumbo {
            self.seal(g, loc.seg);
        }
    }

    /// Reserve room for `spec` and write its header and key; returns where
    /// the item is and where its value starts. The caller copies the value,
    /// then calls [`Shard::link`]. `keep` is a segment that must not be
    /// evicted meanwhile (it holds the item being replaced).
    pub fn alloc(
        &mut self,
        g: &Globals,
        others: &[impl std::ops::Deref<Target = ShardLock>],
        spec: &Spec,
        key: &[u8],
        class: Class,
        keep: Option<u32>,
        now: RelTime,
    ) -> Option<(Loc, usize, usize)> {
        let bucket = spec.bucket(now);
        let probe = NewItem { cas: CasField::encode(spec.cas, spec.cas), access: 0, ..spec.encode(&Segment::free(), self.checked) };
        if probe.encoded_len() > g.jumbo_threshold {
            // Rounded to pages, so freed buffers fit later items of a similar size.
            let size = (g.data_start + probe.encoded_len() + 8 + END_MARK).next_multiple_of(4096);
            let buf = self.obtain(g, others, size, keep, now)?;
            let id = self.open(g, buf, bucket, class, now, true);
            return Some(self.place(id, spec, key));
        }
        for _ in 0..OBTAIN_ATTEMPTS {
            if let Some(id) = self.active_for(bucket, class) {
                let seg = &self.segs[id as usize];
                let len = spec.encode(seg, self.checked).encoded_len();
                if seg.write_offset + len <= seg.buf.len() && seg.create_time + MAX_ACTIVE_AGE_S >= now {
                    return Some(self.place(id, spec, key));
                }
                self.seal(g, id);
            }
            let Some(buf) = self.obtain(g, others, g.segment_size, keep, now) else {
                // -M: compacting may free a buffer, or room in an open segment.
                if g.config.evictions_disabled && self.compact(g, now, keep, probe.encoded_len()) {
                    continue;
                }
                return None;
            };
            // Eviction may have opened a Main segment for this bucket meanwhile.
            if self.active_for(bucket, class).is_some() {
                g.give_back(buf);
                continue;
            }
            let id = self.open(g, buf, bucket, class, now, false);
            return Some(self.place(id, spec, key));
        }
        None
    }

    fn place(&mut self, id: u32, spec: &Spec, key: &[u8]) -> (Loc, usize, usize) {
        let seg = &mut self.segs[id as usize];
        let item = spec.encode(seg, self.checked);
        let len = item.encoded_len();
        let offset = seg.write_offset;
        debug_assert!(offset + len <= seg.buf.len());
        let value_at = item.write_header(key, &mut seg.buf[offset..offset + len]);
        seg.write_offset += len;
        if self.checked && seg.write_offset + END_MARK <= seg.buf.len() {
            seg.buf[seg.write_offset..seg.write_offset + END_MARK].fill(0);
        }
        seg.note_exptime(spec.exptime);
        (Loc { seg: id, offset: offset as u32 }, offset + value_at, len)
    }

    fn active_for(&self, bucket: u8, class: Class) -> Option<u32> {
        self.active.iter().copied().find(|&id| {
            let s = &self.segs[id as usize];
            s.bucket == bucket && s.class == class
        })
    }

    /// A free segment id: a released one, or a new one.
    fn new_id(&mut self) -> u32 {
        match self.free_ids.pop() {
            Some(id) => id,
            None => {
                assert!((self.segs.len() as u32) < MAX_SEGMENTS, "segment ids exhausted");
                self.segs.push(Segment::free());
                self.segs.len() as u32 - 1
            }
        }
    }

    /// Make `buf` an open segment.
    fn open(&mut self, g: &Globals, buf: Buffer, bucket: u8, class: Class, now: RelTime, jumbo: bool) -> u32 {
        // `buf` may have been another shard's a moment ago, and one of its
        // readers may still be reading it (read.rs). That reader validates
        // against its own shard's sequence, which that shard made odd
        // before it pooled the buffer: this fence, after the pool handed
        // the buffer over and before any byte is written into it, makes a
        // reader that sees such a byte also see that sequence change (the
        // C11 fence rule; free on x86; tests/loom_read.rs, whose model
        // fails without it).
        std::sync::atomic::fence(Ordering::Release);
        let id = self.new_id();
        let seg = &mut self.segs[id as usize];
        debug_assert_eq!(seg.state, State::Free);
        *seg = Segment {
            buf,
            create_time: now,
            cas_base: g.cas_counter.load(Ordering::Relaxed),
            bucket,
            class,
            state: State::Active,
            gen: seg.gen,
            jumbo,
            write_offset: g.data_start,
            ..Segment::free()
        };
        if let Some(file) = &g.file {
            // Header and end mark first, the directory entry last: a stop
            // between them leaves an entry-less extent, never a half segment.
            seg.seq = file.next_seq();
            seg.seed = file.secret() ^ seg.seq;
            let header = SegmentHeader {
                seq: seg.seq,
                cas_base: seg.cas_base,
                create_time: now,
                shard: self.index,
                main: class == Class::Main,
                bucket,
                jumbo,
            };
            file.write_segment_header(&mut seg.buf, &header);
            seg.buf[g.data_start..g.data_start + END_MARK].fill(0);
            file.set_entry(&seg.buf, seg.seq);
        }
        self.publish(id);
        self.active.push(id);
        id
    }

    /// Tell readers (view.rs) what buffer segment `id` has now.
    fn publish(&self, id: u32) {
        let s = &self.segs[id as usize];
        self.view.publish_segment(id, &s.buf, s.cas_base, s.create_time, s.class == Class::Main);
    }

    fn seal(&mut self, g: &Globals, id: u32) {
        let seg = &mut self.segs[id as usize];
        if seg.state != State::Active {
            return;
        }
        seg.state = State::Sealed;
        let entry = (id, seg.gen);
        let (class, bucket, empty) = (seg.class, seg.bucket, seg.live_items == 0);
        self.active.retain(|&a| a != id);
        match class {
            Class::Small => self.small_count += 1,
            Class::Main => self.main_count += 1,
        }
        if empty {
            let buf = self.release(id);
            g.give_back(buf);
            return;
        }
        match class {
            Class::Small => self.small.push_back(entry),
            Class::Main => self.main.push_back(entry),
        }
        if bucket != 0 {
            self.by_ttl[usize::from(bucket)].push_back(entry);
        }
    }

    /// Free segment `id` (its queue entries go stale with the generation);
    /// returns its buffer for the caller to reuse or give back.
    fn release(&mut self, id: u32) -> Buffer {
        let seg = &mut self.segs[id as usize];
        match seg.state {
            State::Sealed => match seg.class {
                Class::Small => self.small_count -= 1,
                Class::Main => self.main_count -= 1,
            },
            State::Active => self.active.retain(|&a| a != id),
            State::Evicting => {}
            State::Free => panic!("segment {id} released twice"),
        }
        let buf = std::mem::take(&mut seg.buf);
        *seg = Segment { gen: seg.gen.wrapping_add(1), ..Segment::free() };
        self.publish(id);
        self.free_ids.push(id);
        buf
    }

    /// Take a sealed segment off its queues for walking.
    fn take_sealed(&mut self, id: u32) {
        let seg = &mut self.segs[id as usize];
        debug_assert_eq!(seg.state, State::Sealed);
        seg.state = State::Evicting;
        match seg.class {
            Class::Small => self.small_count -= 1,
            Class::Main => self.main_count -= 1,
        }
    }

    /// A buffer of `size` bytes: from the pool, new under `-m`, or made free
    /// by reclaiming, compacting or evicting. None when nothing can be freed.
    fn obtain(&mut self, g: &Globals, others: &[impl std::ops::Deref<Target = ShardLock>], size: usize, keep: Option<u32>, now: RelTime) -> Option<Buffer> {
        for _ in 0..OBTAIN_ATTEMPTS {
            if let Some(buf) = g.take(size) {
                return Some(buf);
            }
            if self.reclaim_expired(g, now, 1, keep) > 0 {
                continue;
            }
            if g.config.evictions_disabled {
                return None;
            }
            if self.evict_one(g, keep, now) || self.seal_oldest_active(g, keep) {
                continue;
            }
            // Take from another shard, never waiting on its lock (its owner
            // may be waiting for ours); if all are busy, let them run a moment.
            // As for this shard, a shard with nothing sealed gives up its
            // oldest open segment (sealed now, evicted next round): at a
            // small -m the other shards' open segments, one per TTL bucket
            // and class, can hold all the memory this shard's `keep` leaves.
            let mut busy = false;
            let stolen = others.iter().any(|other| match other.try_lock() {
                Some(mut other) => other.evict_one(g, None, now) || other.seal_oldest_active(g, None),
                None => {
                    busy = true;
                    false
                }
            });
            if !stolen && !busy {
                return None;
            }
            if !stolen {
                std::thread::yield_now();
            }
        }
        None
    }

    /// With nothing sealed left to evict, seal the oldest open segment so it
    /// can be (many TTL buckets can hold most of a small `-m` open).
    fn seal_oldest_active(&mut self, g: &Globals, keep: Option<u32>) -> bool {
        let oldest = self.active.iter().copied().filter(|&id| Some(id) != keep).min_by_key(|&id| self.segs[id as usize].create_time);
        match oldest {
            Some(id) => {
                self.seal(g, id);
                true
            }
            None => false,
        }
    }

    /// Reclaim up to `max` sealed segments whose every item has expired,
    /// looking at the first few of each TTL bucket's queue (items of one
    /// bucket are written in time order, so those expire first).
    pub fn reclaim_expired(&mut self, g: &Globals, now: RelTime, max: usize, keep: Option<u32>) -> usize {
        // An open segment whose items have all expired is sealed first, so
        // it is reclaimed like the others.
        let done: Vec<u32> = self.active.iter().copied().filter(|&id| Some(id) != keep && self.segs[id as usize].expired(now)).collect();
        for id in done {
            self.seal(g, id);
        }
        let mut reclaimed = 0;
        for bucket in 1..TTL_BUCKETS {
            let mut i = 0;
            while i < self.by_ttl[bucket].len().min(4) && reclaimed < max {
                let (id, gen) = self.by_ttl[bucket][i];
                let seg = &self.segs[id as usize];
                if seg.gen != gen || seg.state != State::Sealed {
                    self.by_ttl[bucket].remove(i);
                    continue;
                }
                if Some(id) == keep || !seg.expired(now) {
                    i += 1;
                    continue;
                }
                self.by_ttl[bucket].remove(i);
                self.take_sealed(id);
                self.evict_segment(g, id, now, Mode::Evict { keep_hot: false }, 0);
                reclaimed += 1;
            }
        }
        reclaimed
    }

    /// `-M`: rewrite the live items of the sealed segment with the most dead
    /// bytes (at least `need`, an item's length, as a delete in memcached
    /// frees a chunk the next store of its class takes) so their space can
    /// be reused. False if none.
    fn compact(&mut self, g: &Globals, now: RelTime, keep: Option<u32>, need: usize) -> bool {
        let candidate = (0..self.segs.len() as u32)
            .filter(|&id| Some(id) != keep)
            .filter(|&id| {
                let s = &self.segs[id as usize];
                s.state == State::Sealed && !s.jumbo && s.write_offset - s.live_bytes >= need
            })
            .max_by_key(|&id| {
                let s = &self.segs[id as usize];
                s.write_offset - s.live_bytes
            });
        let Some(id) = candidate else { return false };
        self.take_sealed(id);
        self.evict_segment(g, id, now, Mode::Compact, 0);
        true
    }

    /// Recovery, before [`Shard::recover_segment`]: size the index for
    /// every item `buffers` may hold (counted by a quick walk), so it never
    /// grows (and rehashes) while millions of items are linked.
    pub fn reserve_for(&mut self, g: &Globals, buffers: &[&Buffer]) {
        let mut items = self.table.len();
        for buf in buffers {
            let mut offset = g.data_start;
            while let Some(h) = buf.get(offset..).and_then(|b| Header::try_decode(b, true)) {
                items += 1;
                offset += h.total_len();
            }
        }
        let (segs, checked) = (&self.segs, self.checked);
        self.table.reserve(items, |l| Self::loc_hash(segs, checked, l));
        self.recharge(g);
    }

    /// Memory file: take back a segment found in the file. Its items are
    /// walked up to the end mark; each whose check matches, that belongs to
    /// this shard, has not expired or been flushed, and is the newest copy
    /// of its key (highest CAS) is linked. The walk stops at the first item
    /// that fails its check (nothing after it can be trusted). The segment
    /// goes to the back of its queue: callers recover segments in sequence
    /// order, so queue order is the order they were written.
    pub fn recover_segment(
        &mut self,
        g: &Globals,
        buf: Buffer,
        header: &SegmentHeader,
        now: RelTime,
        shard_of: impl Fn(u64) -> usize,
        found: &mut Recovered,
    ) {
        let id = self.new_id();
        let seed = g.file.as_ref().map_or(0, |f| f.secret()) ^ header.seq;
        let gen = self.segs[id as usize].gen;
        self.segs[id as usize] = Segment {
            buf,
            create_time: header.create_time,
            cas_base: header.cas_base,
            bucket: header.bucket.min(TTL_BUCKETS as u8 - 1),
            class: if header.main { Class::Main } else { Class::Small },
            state: State::Evicting,
            gen,
            jumbo: header.jumbo,
            write_offset: g.data_start,
            seq: header.seq,
            seed,
            ..Segment::free()
        };
        self.publish(id);
        let mut offset = g.data_start;
        loop {
            let seg = &self.segs[id as usize];
            let Some(h) = Header::try_decode(&seg.buf[offset..], true) else { break };
            let len = h.total_len();
            let item = &seg.buf[offset..offset + len];
            let check = h.check(item, seed);
            let (cas, exptime, access) = (h.cas(item, header.cas_base), h.exptime(item), h.access(item, header.create_time));
            let hash = hash_key(h.key(item));
            if check == Check::Bad || shard_of(hash) != usize::from(self.index) {
                found.damaged += 1;
                break;
            }
            let loc = Loc { seg: id, offset: offset as u32 };
            // Keep this item unless a newer copy of its key is linked already
            // (both survive a crash between writing a new copy and marking
            // the old one dead: the higher CAS is newer).
            let existing = if check == Check::Live { self.find(h.key(item), hash) } else { None };
            let older = existing.is_some_and(|(_, old, old_h)| old_h.cas(self.item(old), self.seg(old).cas_base) > cas);
            self.segs[id as usize].write_offset = offset + len;
            offset += len;
            if check == Check::Dead {
                continue;
            }
            found.max_cas = found.max_cas.max(cas);
            if cas <= found.counter_ceiling {
                found.max_counter_cas = found.max_counter_cas.max(cas);
            }
            let expired = exptime != 0 && exptime <= now;
            if older || expired || g.is_flushed(access, cas, now) {
                found.expired += u64::from(!older);
                h.mark_dead(&mut self.segs[id as usize].buf[loc.offset as usize..], seed);
                continue;
            }
            self.segs[id as usize].note_exptime(exptime);
            // The segment is not open, so linking a jumbo item does not seal it yet.
            self.link_found(g, hash, loc, len, g.item_class(&h), existing);
        }
        let seg = &mut self.segs[id as usize];
        seg.state = State::Active;
        self.active.push(id);
        self.seal(g, id);
    }

    /// Walk everything and check the invariants (tests and fuzzers): every
    /// slot points at an item whose key hashes to it, per-segment live
    /// counts match the slots, queues and states agree.
    pub fn check_integrity(&self, shard_index: usize, shard_of: impl Fn(u64) -> usize) {
        let mut live = vec![(0usize, 0u32); self.segs.len()];
        for (slot, value) in self.table.iter() {
            let loc = slot_loc(value);
            let seg = &self.segs[loc.seg as usize];
            assert!(matches!(seg.state, State::Active | State::Sealed) || self.draining() == Some(loc.seg), "slot {slot} points into a free segment");
            assert!((loc.offset as usize) < seg.write_offset);
            let item = &seg.buf[loc.offset as usize..];
            let h = Header::decode(item, self.checked);
            let hash = hash_key(h.key(item));
            assert_eq!(shard_of(hash), shard_index, "key in the wrong shard");
            assert_eq!(self.table.find(hash, |l| l == loc), Some(slot), "slot not reachable from its key");
            if self.checked {
                assert_eq!(h.check(item, seg.seed), Check::Live, "item check at {loc:?}");
            }
            live[loc.seg as usize].0 += h.total_len();
            live[loc.seg as usize].1 += 1;
        }
        let (mut items, mut bytes, mut small, mut main) = (0u64, 0u64, 0, 0);
        for (id, seg) in self.segs.iter().enumerate() {
            assert_eq!((seg.live_bytes, seg.live_items), live[id], "segment {id} live counts");
            items += u64::from(seg.live_items);
            bytes += seg.live_bytes as u64;
            match seg.state {
                State::Free => assert!(seg.buf.is_empty() && self.free_ids.contains(&(id as u32))),
                State::Active => assert!(self.active.contains(&(id as u32))),
                State::Sealed => {
                    assert!(seg.live_items > 0, "sealed segment {id} is empty");
                    match seg.class {
                        Class::Small => small += 1,
                        Class::Main => main += 1,
                    }
                }
                State::Evicting => assert_eq!(self.draining(), Some(id as u32), "segment {id} left mid-eviction"),
            }
        }
        assert_eq!((items, bytes), (self.curr_items, self.bytes));
        assert_eq!((small, main), (self.small_count, self.main_count));
        assert_eq!(self.table.len() as u64, self.curr_items);
    }

    pub fn queue_counts(&self) -> (usize, usize, usize) {
        (self.small_count, self.main_count, self.active.len())
    }

    /// Bytes of the segment buffers this shard holds.
    pub fn held_bytes(&self) -> usize {
        self.segs.iter().filter(|s| s.state != State::Free).map(|s| s.buf.len()).sum()
    }
}

