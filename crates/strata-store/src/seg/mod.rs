//! `SegStore`: the segment-structured engine the server runs on.
//!
//! Items are appended into fixed-size segments carved from `-m`; a compact
//! hash index (8 bytes a slot) points at them; whole segments are evicted
//! (S3-FIFO at segment granularity) or reclaimed when every item in them has
//! expired (segments are grouped by TTL). See `shard.rs` for the queues and
//! `item.rs` for the 7-byte item header.
//!
//! ```text
//!  key ──xxh3──► hash ─┬─ top 5 bits ──► shard (Mutex<Shard>, 4..32 of them)
//!                      ├─ bits 32..44 ─► 13-bit tag in the slot
//!                      └─ bits 0..31 ──► home slot (fastrange)
//!  -m ──► segment buffers (64 KiB .. 1 MiB each), extents of a few large
//!        mappings (region.rs, file.rs), pooled store-wide
//! ```
//!
//! Concurrency: the key space is split into shards by hash, each behind one
//! mutex that covers its index and its segments, so every change is atomic
//! per key. Gets do not take it (read.rs): each shard has a sequence that
//! is odd while its lock is held (view.rs, seqlock.rs), and a get reads the
//! index and copies the item optimistically, then checks that no writer ran
//! meanwhile, else retries or locks; so a get writes no cache line another
//! core writes (hits are counted per thread, hits.rs). Writers contend
//! only when they touch the same shard at the same moment (1 in 32 for
//! uniform keys from `-m 1024`, 1 in 8 at the default `-m 64`). Buffers
//! move between shards through a store-wide pool; a shard out of room
//! evicts its own oldest segment, or one of a shard it can lock without
//! waiting.
//!
//! Sizes from `-m` (bytes `M`): `segment = clamp(M / 1024, 64 KiB, 256 KiB)`
//! and `shards = clamp(M / (128 * segment), 4, 32)`, both rounded down to a
//! power of two, so from 32 MiB every shard owns at least 128 segments (8
//! shards at -m 64 to 256, 32 from -m 1024). Once memory is full, each shard
//! has a victim being walked store by store (shard/evict.rs), half a
//! segment of it on average holding no items: `M / 256` in all, where 32
//! shards of 32 segments each idled `M / 64` and cost the hit ratio half a
//! percent (docs/bench/store.md). Segments stop at 256 KiB so that a store
//! which must finish a victim's walk waits for at most 256 KiB of items;
//! items over a quarter of a segment get a segment of their own
//! (exactly sized, counted against `-m`).
//!
//! Files: `globals.rs` (what all shards share), `open.rs` (a new store, or
//! one restored from its memory file), `engine.rs` (the `Engine` impl),
//! `read.rs` (gets and prefetches without the lock), and here the store
//! itself and the helpers its operations share.

pub(crate) mod batch;
mod buffer;
mod engine;
mod file;
mod flash;
mod ghost;
pub use flash::{FlashCompact, FlashIdle, FlashRewrite};
mod globals;
mod item;
mod key_eq;
mod open;
mod hits;
mod read;
mod region;
mod sample;
/// The spatial sample's membership test, for samplers that keep sub-samples
/// of it (`stats mrc`'s larger simulations).
pub use self::sample::in_sample;
mod seqlock;
/// The shard sequence protocol, public for its loom model (tests/loom_read.rs).
#[doc(hidden)]
pub use self::seqlock::SeqLock;
mod shard;
mod shrink;
mod table;
mod view;
mod walk;

use std::sync::atomic::Ordering;

use xxhash_rust::xxh3::xxh3_64;

pub(crate) use self::flash::FlashScan;
pub use self::file::LOCK_WAIT as MEMORY_FILE_LOCK_WAIT;
pub use self::file::{free_bytes, SharedWords};
pub(crate) use self::globals::{lock, Globals, Line};
/// The eviction policy's constants, for models of it (`stats mrc`'s simulator).
pub use self::shard::{KEEP_PERCENT, SMALL_SHARE_PERCENT};
pub use self::table::MAX_FREQ;
use self::item::{Header, FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use self::shard::{Class, Gone, Shard, Spec};
use self::table::Loc;
use self::view::{ShardGuard, ShardLock};
use crate::{memcached_item_size, ItemMeta, RelTime, RestartStats};

const MIN_SHARDS: usize = 4;
const MAX_SHARDS: usize = 32;
/// Segments `-m` is cut into, where segment sizes allow (the module doc).
const SEGMENTS: usize = 1024;
const MIN_SEGMENT: usize = 64 << 10;
const MAX_SEGMENT: usize = 256 << 10;
/// Segments a shard owns at least, where memory allows (the module doc).
const SEGMENTS_PER_SHARD: usize = 128;

/// The hash every key is looked up by (xxh3), also for callers that keep
/// keys of their own (`stats hotkeys`).
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}


/// An item found in the index: its slot, location and decoded header.
type Found = (usize, Loc, Header);

/// In-place changes to a live item; applied where they fit, else the item
/// is rewritten with them.
#[derive(Default)]
struct Change<'a> {
    /// Same-length new value (a counter rewritten in place).
    value: Option<&'a [u8]>,
    cas: Option<u64>,
    exptime: Option<RelTime>,
    access: Option<RelTime>,
    set: u8,
    clear: u8,
}

/// A shard's lock and read view on cache lines of their own.
type Padded = Line<ShardLock>;

pub struct SegStore {
    shards: Box<[Padded]>,
    /// Each shard's read view, apart from its lock's line, which writers
    /// write (read.rs reads only these).
    views: Box<[std::sync::Arc<view::ReadView>]>,
    /// Get hits per class, counted per thread (hits.rs).
    hits: hits::Hits,
    shard_bits: u32,
    g: Globals,
    restart: Option<RestartStats>,
}

/// Shards and segment size for `-m` of `memory_bytes` (the module doc).
pub fn geometry(memory_bytes: u64) -> (usize, usize) {
    let memory = memory_bytes.max(1 << 20) as usize;
    let segment_size = floor_pow2(memory / SEGMENTS).clamp(MIN_SEGMENT, MAX_SEGMENT);
    let shards = floor_pow2(memory / (SEGMENTS_PER_SHARD * segment_size)).clamp(MIN_SHARDS, MAX_SHARDS);
    (shards, segment_size)
}

impl SegStore {
    pub fn segment_size(&self) -> usize {
        self.g.segment_size
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn shard_of(&self, hash: u64) -> usize {
        if self.shard_bits == 0 {
            0
        } else {
            (hash >> (64 - self.shard_bits)) as usize
        }
    }

    fn lock(&self, hash: u64) -> ShardGuard<'_> {
        self.shards[self.shard_of(hash)].lock()
    }

    /// Walk every shard and assert the store's invariants (tests call this
    /// after each step in debug builds).
    pub fn check_integrity(&self) {
        let (mut held, mut per_item) = (0, 0);
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            shard.check_integrity(i, |h| self.shard_of(h));
            held += shard.held_bytes();
            per_item += shard.charged_bytes() as u64;
        }
        let pooled: usize = lock(&self.g.pool).iter().chain(lock(&self.g.jumbo_pool).iter()).map(|b| b.len()).sum();
        let allocated =
            self.g.allocated.load(Ordering::Relaxed) - self.g.config.initial_malloced_bytes - self.flash_index_bytes() - self.small_ram_bytes() - per_item;
        assert_eq!((held + pooled) as u64, allocated, "segment bytes accounted");
    }

    #[doc(hidden)]
    pub fn queue_counts(&self) -> (usize, usize, usize) {
        self.shards.iter().map(|s| s.lock().queue_counts()).fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }

    /// Bytes of segment memory allocated (held by shards or pooled).
    pub fn allocated_bytes(&self) -> u64 {
        self.g.allocated.load(Ordering::Relaxed)
    }

    fn meta(&self, shard: &Shard, loc: Loc, h: &Header) -> ItemMeta {
        let seg = shard.seg(loc);
        self.item_meta(h, shard.item(loc), seg.cas_base, seg.create_time)
    }

    /// What a reader is shown of the item `item` (decoded as `h`) in a
    /// segment with these bases: under the lock or from a lock-free copy.
    #[inline]
    fn item_meta(&self, h: &Header, item: &[u8], cas_base: u64, create_time: RelTime) -> ItemMeta {
        ItemMeta {
            flags: h.flags,
            exptime: h.exptime(item),
            cas: self.g.shown_cas(h.cas(item, cas_base)),
            last_access: h.access(item, create_time),
            fetched: h.bits & FETCHED != 0,
            stale: h.bits & STALE != 0,
            token_sent: h.bits & TOKEN_SENT != 0,
            key_binary: h.bits & KEY_BINARY != 0,
        }
    }

    /// Look `key` up; an expired or flushed item is unlinked and counted.
    fn live(&self, shard: &mut Shard, key: &[u8], hash: u64, now: RelTime) -> Option<Found> {
        let (slot, loc, h) = shard.find(key, hash)?;
        // Only what the checks need: access time and CAS only while a
        // flush is in force (a get decodes the whole `meta` once, later).
        if self.g.flush_in_force(now) {
            let meta = self.meta(shard, loc, &h);
            if self.g.is_flushed(meta.last_access, meta.cas, now) {
                shard.counters.get_flushed += 1;
                shard.unlink(&self.g, slot, loc, &h, Gone::Flushed);
                return None;
            }
        }
        let exptime = h.exptime(shard.item(loc));
        if exptime != 0 && exptime <= now {
            shard.counters.get_expired += 1;
            shard.unlink(&self.g, slot, loc, &h, Gone::Expired);
            return None;
        }
        Some((slot, loc, h))
    }

    /// Write a new item for `key` (value given in parts), replacing any old
    /// one; `keep` is the segment of the item it replaces.
    fn put(&self, shard: &mut Shard, key: &[u8], hash: u64, spec: &Spec, parts: &[&[u8]], keep: Option<u32>, now: RelTime) -> bool {
        let no_evictions = self.g.config.evictions_disabled;
        if no_evictions && self.g.exhausted.load(Ordering::Relaxed) {
            return false;
        }
        if self.g.file.is_some() && spec.cas <= self.g.explicit_cas_max.load(Ordering::Relaxed) {
            self.retire_not_older(shard, key, hash, spec.cas);
        }
        let Some((loc, value_at, len)) = shard.alloc(&self.g, &self.shards, spec, key, Class::Small, keep, now) else {
            if no_evictions {
                self.g.exhausted.store(true, Ordering::Relaxed);
            }
            return false;
        };
        let mut at = value_at;
        let buf = &mut shard.seg_mut(loc).buf;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        debug_assert_eq!(at - value_at, spec.value_len);
        shard.write_check(loc);
        let size = memcached_item_size(spec.key_len, spec.flags, spec.value_len, !self.g.config.cas_disabled);
        shard.link(&self.g, key, hash, loc, len, (self.g.config.classes.class_of(size), size));
        self.flash_forget(shard, hash);
        shard.pay_for_write(&self.g, len, loc.seg, now);
        true
    }

    /// Memory file: recovery keeps the copy of a key with the higher CAS
    /// when a crash left two live. Before writing a copy numbered `cas`
    /// (an explicit `E`, possibly lower than the current one), unlink a
    /// current copy numbered at or above it: a crash between the two writes
    /// then loses the key instead of bringing the old value back.
    fn retire_not_older(&self, shard: &mut Shard, key: &[u8], hash: u64, cas: u64) {
        if let Some((slot, loc, h)) = shard.find(key, hash) {
            let old_cas = h.cas(shard.item(loc), shard.seg(loc).cas_base);
            if old_cas >= cas {
                shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
            }
        }
    }

    fn new_spec(key: &[u8], value_len: usize, flags: u32, exptime: RelTime, bits: u8, cas: u64, now: RelTime) -> Spec {
        Spec { bits, key_len: key.len(), value_len, cas, access: now, flags, exptime }
    }

    /// Apply `change` to a live item: in place where every field fits, else
    /// by rewriting the item. False if a rewrite found no memory.
    fn modify(&self, shard: &mut Shard, key: &[u8], hash: u64, found: Found, change: Change<'_>, now: RelTime) -> bool {
        let (_, loc, h) = found;
        let (cas_base, create_time) = (shard.seg(loc).cas_base, shard.seg(loc).create_time);
        let fits = change.cas.map_or(true, |cas| h.cas_fits(cas, cas_base)) && change.exptime.map_or(true, |e| h.exptime_fits(e));
        if fits {
            let item = shard.item_mut(loc);
            if let Some(value) = change.value {
                let at = h.value_at();
                item[at..at + value.len()].copy_from_slice(value);
            }
            if let Some(cas) = change.cas {
                h.set_cas(item, cas, cas_base);
            }
            if let Some(exptime) = change.exptime {
                h.set_exptime(item, exptime);
            }
            if let Some(access) = change.access {
                h.set_access(item, access, create_time);
            }
            h.set_bits(item, change.set, change.clear);
            if let Some(exptime) = change.exptime {
                shard.seg_mut(loc).note_exptime(exptime);
            }
            let volatile = FETCHED | TOKEN_SENT;
            if change.value.is_some() || change.cas.is_some() || change.exptime.is_some() || (change.set | change.clear) & !volatile != 0 {
                shard.write_check(loc);
            }
            return true;
        }
        let meta = self.meta(shard, loc, &h);
        let spec = Spec {
            bits: (h.bits | change.set) & !change.clear,
            key_len: key.len(),
            value_len: h.value_len,
            cas: change.cas.unwrap_or_else(|| h.cas(shard.item(loc), cas_base)),
            access: change.access.unwrap_or(meta.last_access),
            flags: h.flags,
            exptime: change.exptime.unwrap_or(meta.exptime),
        };
        let mut value = std::mem::take(&mut shard.scratch_value);
        value.clear();
        value.extend_from_slice(change.value.unwrap_or_else(|| h.value(shard.item(loc))));
        let ok = self.put(shard, key, hash, &spec, &[&value], Some(loc.seg), now);
        shard.scratch_value = value;
        ok
    }
}

fn floor_pow2(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}
