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
//! mutex that covers its index and its segments, so an operation is atomic
//! per key and a reader never sees an item being moved or freed, with no
//! unsafe code. Two workers contend only when they touch the same shard at
//! the same moment (1 in 32 for uniform keys from `-m 1024`, 1 in 8 at the default `-m 64`). Buffers move between shards
//! through a store-wide pool; a shard out of room evicts its own oldest
//! segment, or one of a shard it can lock without waiting.
//!
//! Sizes from `-m` (bytes `M`): `segment = clamp(M / 1024, 64 KiB, 256 KiB)`
//! and `shards = clamp(M / (128 * segment), 4, 32)`, both rounded down to a
//! power of two, so from 32 MiB every shard owns at least 128 segments (8
//! shards at -m 64 to 256, 32 from -m 1024). Once memory is full, each shard
//! has a victim being walked store by store (shard/evict.rs), half a
//! segment of it on average holding no items: `M / 256` in all, where 32
//! shards of 32 segments each idled `M / 64` and cost the hit ratio half a
//! percent (docs/BENCHMARKS.md). Segments stop at 256 KiB so that a store
//! which must finish a victim's walk waits for at most 256 KiB of items;
//! items over a quarter of a segment get a segment of their own
//! (exactly sized, counted against `-m`).

mod buffer;
mod file;
mod flash;
mod ghost;
pub use flash::FlashIdle;
mod item;
mod key_eq;
mod prefetch;
mod region;
mod sample;
mod shard;
mod shrink;
mod table;
mod walk;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use xxhash_rust::xxh3::xxh3_64;

use self::buffer::Buffer;
pub(crate) use self::flash::FlashScan;
use self::file::{Geometry, MemFile, Opened, SEGMENT_HEADER};
pub use self::file::LOCK_WAIT as MEMORY_FILE_LOCK_WAIT;
/// The eviction policy's constants, for models of it (`stats mrc`'s simulator).
pub use self::shard::{KEEP_PERCENT, SMALL_SHARE_PERCENT};
pub use self::table::MAX_FREQ;
use self::region::Region;
use self::item::{Header, FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use self::shard::{Class, Gone, Recovered, Shard, Spec};
use self::table::{slot_freq, Loc};
use crate::{
    counter_bytes, memcached_chunked, memcached_item_size, parse_counter, DeleteRequest, DeleteResult, DeltaMode,
    Clock, DeltaRequest, DeltaResult, Engine, EngineConfig, EngineStats, GetAction, GetOptions, ItemMeta, ItemView, RelTime,
    RestartStats, StoreMode, StoreRequest, StoreResult, Visit, WalkCursor,
};

const MIN_SHARDS: usize = 4;
const MAX_SHARDS: usize = 32;
/// Segments `-m` is cut into, where segment sizes allow (the module doc).
const SEGMENTS: usize = 1024;
const MIN_SEGMENT: usize = 64 << 10;
const MAX_SEGMENT: usize = 256 << 10;
/// Segments a shard owns at least, where memory allows (the module doc).
const SEGMENTS_PER_SHARD: usize = 128;
/// Single-item buffers kept for reuse.
const JUMBO_POOL: usize = 64;

/// The hash every key is looked up by (xxh3), also for callers that keep
/// keys of their own (`stats hotkeys`).
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}


/// What all shards share: settings, the memory budget and its pool of free
/// segment buffers, the CAS counter and the flush epoch.
pub(crate) struct Globals {
    pub config: EngineConfig,
    pub segment_size: usize,
    pub jumbo_threshold: usize,
    memory_limit: AtomicU64,
    /// Bytes of every segment buffer in existence (held by shards or pooled).
    allocated: AtomicU64,
    pool: Mutex<Vec<Buffer>>,
    /// How many buffers `pool` holds, read without its lock.
    pooled: AtomicUsize,
    shard_count: usize,
    /// Freed single-item buffers (sizes rounded to pages), reused for an
    /// item of the same rounded size instead of a new mapping.
    jumbo_pool: Mutex<Vec<Buffer>>,
    /// Written by every store: on a cache line of its own, away from the
    /// flush epoch every read checks.
    pub cas_counter: Line<AtomicU64>,
    /// `watch evictions` (`Engine::set_eviction_log`).
    pub eviction_log: std::sync::OnceLock<std::sync::Arc<dyn crate::EvictionLog>>,
    /// `stats mrc`'s sampler and its threshold (0: none; `sample.rs`).
    sampler: std::sync::OnceLock<std::sync::Arc<dyn crate::AccessSampler>>,
    sample_threshold: AtomicU64,
    oldest_live: AtomicU32,
    oldest_cas: AtomicU64,
    /// Memory file only: the highest CAS given explicitly (meta `E`) or
    /// found by recovery. A new copy numbered at or below it may not be
    /// newer by CAS than the copy it replaces, which recovery would then
    /// prefer; [`SegStore::put`] retires such an old copy first. Written
    /// only by `E` requests.
    explicit_cas_max: AtomicU64,
    /// The memory file (`-e`), if any: segment buffers are its extents.
    file: Option<MemFile>,
    /// Without one, buffers are extents of large anonymous reservations.
    region: std::sync::Arc<Region>,
    /// The flash tier (`-o ext_path`, `flash/`), if any.
    flash: Option<flash::Tier>,
    /// Where a segment's first item starts (after its header in a memory file).
    pub data_start: usize,
    /// `-M`: a store was refused for want of memory and nothing has left
    /// since. memcached's memory is then full for every store of the class
    /// (one pool here), so later stores are refused too, even into room an
    /// open segment of another shard still has. Cleared when an item
    /// leaves or the limit grows; written only on those events.
    pub exhausted: std::sync::atomic::AtomicBool,
}

impl Globals {
    fn new_buffer(&self, size: usize) -> Option<Buffer> {
        match &self.file {
            Some(file) => file.alloc(size),
            None => self.region.alloc(size, self.memory_limit.load(Ordering::Relaxed)),
        }
    }

    /// Let go of a buffer for good (its extent goes back to the file's free map).
    fn discard(&self, buf: Buffer) {
        self.allocated.fetch_sub(buf.len() as u64, Ordering::Relaxed);
        if let Some(file) = &self.file {
            file.free(buf);
        }
    }

    /// The CAS a client sees: none with `-C`. A memory file numbers items
    /// even then, so recovery can tell which of two copies is newer.
    fn shown_cas(&self, cas: u64) -> u64 {
        if self.config.cas_disabled {
            0
        } else {
            cas
        }
    }

    /// A buffer of `size` bytes from the pool or, under `-m`, a new one.
    fn take(&self, size: usize) -> Option<Buffer> {
        let limit = self.memory_limit.load(Ordering::Relaxed);
        {
            let mut pool = lock(&self.pool);
            let mut jumbo = lock(&self.jumbo_pool);
            if size == self.segment_size {
                if let Some(buf) = pool.pop() {
                    self.pooled.store(pool.len(), Ordering::Relaxed);
                    return Some(buf);
                }
            } else if let Some(i) = jumbo.iter().position(|b| b.len() == size) {
                return Some(jumbo.swap_remove(i));
            }
            // Make room: cached single-item buffers first, then (for an
            // odd size, which needs bytes, not a segment) pooled segments.
            while self.allocated.load(Ordering::Relaxed) + size as u64 > limit {
                let freed = match jumbo.pop() {
                    Some(buf) => buf,
                    None if size != self.segment_size => match pool.pop() {
                        Some(buf) => {
                            self.pooled.store(pool.len(), Ordering::Relaxed);
                            buf
                        }
                        None => break,
                    },
                    None => break,
                };
                self.discard(freed);
            }
        }
        if let Some(buf) = self.new_buffer_counted(size, limit) {
            return Some(buf);
        }
        // A memory file also needs the bytes in one piece: pooled buffers
        // are free memory, so give them back to be merged and try again.
        if self.file.is_none() {
            return None;
        }
        self.pooled.store(0, Ordering::Relaxed);
        let pooled: Vec<Buffer> = lock(&self.pool).drain(..).chain(lock(&self.jumbo_pool).drain(..)).collect();
        if pooled.is_empty() {
            return None;
        }
        for buf in pooled {
            self.discard(buf);
        }
        self.new_buffer_counted(size, limit)
    }

    /// A new buffer, counted in `allocated`, if that stays under `limit`.
    fn new_buffer_counted(&self, size: usize, limit: u64) -> Option<Buffer> {
        let mut current = self.allocated.load(Ordering::Relaxed);
        loop {
            if current + size as u64 > limit {
                return None;
            }
            match self.allocated.compare_exchange_weak(current, current + size as u64, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let buf = self.new_buffer(size);
        if buf.is_none() {
            self.allocated.fetch_sub(size as u64, Ordering::Relaxed);
        }
        buf
    }

    fn give_back(&self, buf: Buffer) {
        if buf.is_empty() {
            return;
        }
        if let Some(file) = &self.file {
            file.set_entry(&buf, 0);
        }
        let limit = self.memory_limit.load(Ordering::Relaxed);
        if self.allocated.load(Ordering::Relaxed) <= limit {
            if buf.len() == self.segment_size {
                let mut pool = lock(&self.pool);
                pool.push(buf);
                self.pooled.store(pool.len(), Ordering::Relaxed);
                return;
            }
            let mut jumbo = lock(&self.jumbo_pool);
            if jumbo.len() < JUMBO_POOL {
                return jumbo.push(buf);
            }
        }
        self.discard(buf);
    }

    /// Memory is full: no room under `-m` for a new segment, and fewer
    /// pooled than one for each shard. Stores then pay for themselves by
    /// eviction (shard/evict.rs). (A victim walked to its end leaves its
    /// buffer pooled until a shard's open segment fills: were one pooled
    /// buffer enough to stop, the other shards' stores would stop evicting
    /// while it waits, as memcached's never do.)
    pub fn segments_short(&self) -> bool {
        self.pooled.load(Ordering::Relaxed) < self.shard_count
            && self.allocated.load(Ordering::Relaxed) + self.segment_size as u64 > self.memory_limit.load(Ordering::Relaxed)
    }

    /// memcached's class and item size for the item `h` describes.
    #[inline]
    pub fn item_class(&self, h: &Header) -> (u8, usize) {
        let size = memcached_item_size(h.key_len, h.flags, h.value_len, !self.config.cas_disabled);
        (self.config.classes.class_of(size), size)
    }

    /// memcached's class of a new item of these sizes.
    fn request_class(&self, key_len: usize, flags: u32, value_len: usize) -> u8 {
        self.config.classes.class_of(memcached_item_size(key_len, flags, value_len, !self.config.cas_disabled))
    }

    fn next_cas(&self) -> u64 {
        if self.config.cas_disabled && self.file.is_none() {
            0
        } else {
            self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1
        }
    }

    /// The CAS a new or changed item gets: `explicit` (meta `E`) unless CAS
    /// is disabled, else the next from the counter (which `E` leaves alone,
    /// as in memcached).
    fn assign_cas(&self, explicit: Option<u64>) -> u64 {
        match explicit {
            Some(cas) if !self.config.cas_disabled => {
                if self.file.is_some() {
                    self.explicit_cas_max.fetch_max(cas, Ordering::Relaxed);
                }
                cas
            }
            _ => self.next_cas(),
        }
    }

    /// memcached's `item_is_flushed`, on an item's last access and CAS.
    /// Whether a `flush_all` may have flushed items by `now` (else
    /// `is_flushed` is false for every item).
    #[inline]
    pub fn flush_in_force(&self, now: RelTime) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        oldest_live != 0 && oldest_live <= now
    }

    pub fn is_flushed(&self, access: RelTime, cas: u64, now: RelTime) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        // The CAS orders items only within the flush's own second (an item
        // stored later may carry an explicit lower CAS, meta `E`).
        access <= oldest_live || (oldest_cas != 0 && cas != 0 && cas < oldest_cas && access <= oldest_live.saturating_add(1))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic mid-operation is a bug that already failed a test; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// A value on cache lines of its own (128 bytes: adjacent-line prefetch
/// pairs lines), so two cores writing neighbours never share a line.
#[repr(align(128))]
pub(crate) struct Line<T>(pub T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A shard's mutex on cache lines of its own.
type Padded = Line<Mutex<Shard>>;

pub struct SegStore {
    shards: Box<[Padded]>,
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

/// CAS numbers skipped after a crash: the header's counter is written once a
/// second, and numbers handed out after it (to items since deleted) must
/// never be handed out again.
const CAS_GAP_AFTER_CRASH: u64 = 1 << 24;

impl SegStore {
    pub fn new(config: EngineConfig) -> SegStore {
        SegStore::build(config, None)
    }

    /// A store whose segments live in the memory file at `path` (`-e`),
    /// restoring every item the file holds. A file that is damaged, of
    /// another version or made with other settings is logged and started
    /// cold, or refused when `strict` (`-o restart_strict`). Returns the
    /// store and a line for the log.
    pub fn open_file(config: EngineConfig, path: &std::path::Path, strict: bool) -> std::io::Result<(SegStore, String)> {
        let started = std::time::Instant::now();
        let (shards, segment) = geometry(config.memory_limit_bytes);
        let geo = Geometry {
            memory: config.memory_limit_bytes.max(1 << 20),
            segment: segment as u64,
            item_max: config.item_size_max_bytes as u64,
            shards: shards as u32,
        };
        // A new file takes a new clock's origin; a restored one keeps its own,
        // and recovery reads the time the server's clock will start from.
        let (file, opened) = MemFile::open(path, geo, strict, Clock::new().process_started_unix())?;
        let mut store = SegStore::build(config, Some(file));
        let file = store.g.file.as_ref().expect("memory file");
        let now = Clock::resuming(file.origin_unix()).now();
        let (mut stats, line) = match opened {
            Opened::Fresh { why } => {
                let line = match why {
                    Some(why) => format!("memory file {}: {why}; starting with an empty cache", path.display()),
                    None => format!("memory file {}: created", path.display()),
                };
                (RestartStats::default(), line)
            }
            Opened::Existing { clean, state } => {
                store.g.oldest_live.store(state.oldest_live, Ordering::Relaxed);
                store.g.oldest_cas.store(state.oldest_cas, Ordering::Relaxed);
                // The counter is saved every second: a CAS far above it was
                // given explicitly (meta `E`) and does not move it on.
                let found = store.recover(now, state.cas.saturating_add(CAS_GAP_AFTER_CRASH));
                let gap = if clean { 0 } else { CAS_GAP_AFTER_CRASH };
                store.g.cas_counter.store(state.cas.max(found.max_counter_cas).saturating_add(gap), Ordering::Relaxed);
                store.g.explicit_cas_max.store(found.max_cas, Ordering::Relaxed);
                let items = store.stats().curr_items;
                let stats = RestartStats {
                    ok: true,
                    clean,
                    items,
                    damaged: found.damaged,
                    expired: found.expired,
                    seconds: 0.0,
                    last_alive_unix: state.alive_unix,
                };
                let how = if clean { "after a graceful stop" } else { "after a crash (no graceful stop)" };
                let line = format!(
                    "memory file {}: restored {items} items {how}; {} expired or flushed meanwhile, {} damaged and dropped",
                    path.display(),
                    found.expired,
                    found.damaged
                );
                (stats, line)
            }
        };
        stats.seconds = started.elapsed().as_secs_f64();
        store.restart = Some(stats);
        store.persist_state();
        Ok((store, format!("{line} ({:.3} s)", stats.seconds)))
    }

    /// Recovery: every segment the file's directory lists, in the order they
    /// were written, goes back to its shard (`Shard::recover_segment`).
    fn recover(&mut self, now: RelTime, counter_ceiling: u64) -> Recovered {
        let file = self.g.file.as_ref().expect("memory file");
        let entries = file.entries();
        let mut found = Recovered { counter_ceiling, ..Recovered::default() };
        let mut segments = Vec::new();
        for e in &entries {
            let header = file.map_entry(e).and_then(|buf| Some((file.read_segment_header(&buf, e.seq)?, buf)));
            let usable = header.filter(|(h, buf)| {
                usize::from(h.shard) < self.shards.len() && (h.jumbo || buf.len() == self.g.segment_size)
            });
            match usable {
                Some((h, buf)) => {
                    self.g.allocated.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    segments.push((h, buf));
                }
                None => {
                    found.damaged += 1;
                    file.free_pages(e.page, e.pages);
                }
            }
        }
        segments.sort_by_key(|(h, _)| h.seq);
        let mut per_shard: Vec<Vec<(file::SegmentHeader, Buffer)>> = (0..self.shards.len()).map(|_| Vec::new()).collect();
        for (h, buf) in segments {
            per_shard[usize::from(h.shard)].push((h, buf));
        }
        // Shards are independent: recover them on every CPU at once.
        let shard_bits = self.shard_bits;
        let shard_of = move |hash: u64| if shard_bits == 0 { 0 } else { (hash >> (64 - shard_bits)) as usize };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(self.shards.len());
        let mut work: Vec<Vec<(usize, Vec<(file::SegmentHeader, Buffer)>)>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, segs) in per_shard.into_iter().enumerate() {
            work[i % threads].push((i, segs));
        }
        let (shards, g) = (&self.shards, &self.g);
        let results: Vec<Recovered> = std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .into_iter()
                .map(|jobs| {
                    scope.spawn(move || {
                        let mut found = Recovered { counter_ceiling, ..Recovered::default() };
                        for (i, segs) in jobs {
                            let mut shard = lock(&shards[i]);
                            shard.reserve_for(g, &segs.iter().map(|(_, b)| b).collect::<Vec<_>>());
                            for (h, buf) in segs {
                                shard.recover_segment(g, buf, &h, now, shard_of, &mut found);
                            }
                        }
                        found
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("recovery thread")).collect()
        });
        for r in &results {
            found.add(r);
        }
        found
    }

    /// Memory file: record the CAS counter and flush epoch in its header.
    fn persist_state(&self) {
        if let Some(file) = &self.g.file {
            file.write_state(self.file_state());
        }
    }

    fn file_state(&self) -> file::State {
        file::State {
            cas: self.g.cas_counter.load(Ordering::Relaxed),
            oldest_live: self.g.oldest_live.load(Ordering::Relaxed),
            oldest_cas: self.g.oldest_cas.load(Ordering::Relaxed),
            alive_unix: crate::clock::unix_time(),
        }
    }

    fn build(config: EngineConfig, file: Option<MemFile>) -> SegStore {
        let (shards, segment_size) = geometry(config.memory_limit_bytes);
        let checked = file.is_some();
        SegStore {
            restart: None,
            shards: (0..shards)
                .map(|i| {
                    let mut shard = Shard::new(i as u16, checked, config.track_sizes);
                    shard.table = table::Table::presized(config.index_slots_initial, shards);
                    Line(Mutex::new(shard))
                })
                .collect(),
            shard_bits: shards.trailing_zeros(),
            g: Globals {
                data_start: if checked { SEGMENT_HEADER } else { 0 },
                file,
                region: Region::new(config.large_pages),
                flash: None,
                segment_size,
                jumbo_threshold: segment_size / 4,
                memory_limit: AtomicU64::new(config.memory_limit_bytes),
                allocated: AtomicU64::new(config.initial_malloced_bytes),
                pool: Mutex::new(Vec::new()),
                pooled: AtomicUsize::new(0),
                shard_count: shards,
                jumbo_pool: Mutex::new(Vec::new()),
                cas_counter: Line(AtomicU64::new(0)),
                eviction_log: std::sync::OnceLock::new(),
                sampler: std::sync::OnceLock::new(),
                sample_threshold: AtomicU64::new(0),
                exhausted: std::sync::atomic::AtomicBool::new(false),
                oldest_live: AtomicU32::new(0),
                oldest_cas: AtomicU64::new(0),
                explicit_cas_max: AtomicU64::new(0),
                config,
            },
        }
    }

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

    fn lock(&self, hash: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[self.shard_of(hash)])
    }

    /// Walk every shard and assert the store's invariants (tests call this
    /// after each step in debug builds).
    pub fn check_integrity(&self) {
        let mut held = 0;
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = lock(shard);
            shard.check_integrity(i, |h| self.shard_of(h));
            held += shard.held_bytes();
        }
        let pooled: usize = lock(&self.g.pool).iter().chain(lock(&self.g.jumbo_pool).iter()).map(|b| b.len()).sum();
        let allocated = self.g.allocated.load(Ordering::Relaxed) - self.g.config.initial_malloced_bytes - self.flash_index_bytes();
        assert_eq!((held + pooled) as u64, allocated, "segment bytes accounted");
    }

    #[doc(hidden)]
    pub fn queue_counts(&self) -> (usize, usize, usize) {
        self.shards.iter().map(|s| lock(s).queue_counts()).fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }

    /// Bytes of segment memory allocated (held by shards or pooled).
    pub fn allocated_bytes(&self) -> u64 {
        self.g.allocated.load(Ordering::Relaxed)
    }

    fn meta(&self, shard: &Shard, loc: Loc, h: &Header) -> ItemMeta {
        let item = shard.item(loc);
        let seg = shard.seg(loc);
        ItemMeta {
            flags: h.flags,
            exptime: h.exptime(item),
            cas: self.g.shown_cas(h.cas(item, seg.cas_base)),
            last_access: h.access(item, seg.create_time),
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

impl Engine for SegStore {
    fn prefetch(&self, keys: &[&[u8]]) {
        self.prefetch_keys(keys);
    }

    fn get(&self, key: &[u8], opts: GetOptions, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction) -> bool {
        let hash = hash_key(key);
        if !opts.uncounted {
            self.sample_get(hash);
        }
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        if shard.flash.is_some() && (opts.touch.is_some() || opts.vivify.is_some()) {
            self.flash_forget(shard, hash);
        }
        let (found, created) = match self.live(shard, key, hash, now) {
            Some(found) => (found, false),
            None => {
                let Some(ttl) = opts.vivify else { return false };
                let spec = Self::new_spec(key, 0, 0, ttl, 0, self.g.assign_cas(opts.vivify_cas), now);
                if !self.put(shard, key, hash, &spec, &[], None, now) {
                    return false;
                }
                shard.counters.total_items += 1;
                (shard.find(key, hash).expect("just linked"), true)
            }
        };
        let (slot, loc, h) = found;
        let mut meta = self.meta(shard, loc, &h);
        if created {
            meta.exptime = 0;
        }
        if !opts.uncounted {
            let queue = shard.seg(loc).queue();
            shard.classes.hit(self.g.item_class(&h).0, queue, opts.touch.is_some() && !created);
        }
        let item = shard.item(loc);
        let action = visit(ItemView { key, value: h.value(item), meta }, created);
        let mut change = Change { exptime: if created { None } else { opts.touch }, ..Change::default() };
        if !opts.no_bump {
            let freq = slot_freq(shard.table.slot(slot));
            if freq < MAX_FREQ {
                shard.table.set_freq(slot, freq + 1);
            }
            // Write only what changes: an item read again within the same
            // second keeps its cache line clean (shared between cores).
            if !meta.fetched || meta.last_access != now {
                change.set |= FETCHED;
                change.access = Some(now);
            }
        }
        if action.set_token_sent {
            change.set |= TOKEN_SENT;
        }
        if change.set != 0 || change.exptime.is_some() || change.access.is_some() {
            // A rewrite that finds no memory leaves the item as it was.
            self.modify(shard, key, hash, found, change, now);
        }
        true
    }

    fn store(&self, req: &StoreRequest<'_>, now: RelTime) -> StoreResult {
        let hash = hash_key(req.key);
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        let key = req.key;
        self.flash_forget(shard, hash);
        if !self.item_size_ok(key.len(), req.flags, req.value.len()) {
            if req.mode == StoreMode::Set {
                if let Some((slot, loc, h)) = shard.find(key, hash) {
                    shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
                }
            }
            return StoreResult::TooLarge;
        }
        let class = self.g.request_class(key.len(), req.flags, req.value.len());
        // memcached counts a set per class once the item is allocated (so
        // also a `cas` that then mismatches, not one that found no memory).
        shard.classes.class(class).cmd_set += 1;
        let old = self.live(shard, key, hash, now);
        let old_meta = old.map(|(_, loc, h)| (self.meta(shard, loc, &h), loc, h));
        if let (StoreMode::Cas, Some((meta, _, h))) = (req.mode, old_meta) {
            let c = shard.classes.class(self.g.item_class(&h).0);
            if req.cas != 0 && req.cas == meta.cas {
                c.cas_hits += 1;
            } else {
                c.cas_badval += 1;
            }
        }
        let binary = if req.key_binary { KEY_BINARY } else { 0 };
        // (bits, flags, exptime) of the new item, and whether the old value
        // goes before or after the request's (append / prepend).
        let (bits, flags, exptime, join) = match (req.mode, old_meta) {
            (StoreMode::Set, _) | (StoreMode::Add, None) | (StoreMode::Replace, Some(_)) => (binary, req.flags, req.exptime, None),
            (StoreMode::Add, Some(_)) => {
                let found = old.expect("old item");
                self.modify(shard, key, hash, found, Change { access: Some(now), ..Change::default() }, now);
                return StoreResult::NotStored;
            }
            (StoreMode::Replace, None) => return StoreResult::NotStored,
            (StoreMode::Cas, None) => return StoreResult::NotFound,
            (StoreMode::Cas, Some((meta, _, _))) => {
                if req.cas != 0 && req.cas == meta.cas {
                    (binary, req.flags, req.exptime, None)
                } else if req.invalidate && req.cas != 0 && req.cas < meta.cas {
                    let token = if meta.token_sent { TOKEN_SENT } else { 0 };
                    (binary | STALE | token, req.flags, meta.exptime, None)
                } else {
                    return StoreResult::Exists;
                }
            }
            (StoreMode::Append | StoreMode::Prepend, None) => match req.vivify_ttl {
                Some(ttl) => (binary, req.flags, ttl, None),
                None => return StoreResult::NotStored,
            },
            (StoreMode::Append | StoreMode::Prepend, Some((meta, _, h))) => {
                if req.cas != 0 && req.cas != meta.cas {
                    return StoreResult::Exists;
                }
                if !self.item_size_ok(key.len(), meta.flags, h.value_len + req.value.len()) {
                    return StoreResult::NotStored;
                }
                // memcached allocates a fresh item: flags and TTL carry over,
                // the binary-key mark does not.
                (0, meta.flags, meta.exptime, Some(req.mode == StoreMode::Append))
            }
        };
        let mut old_value = std::mem::take(&mut shard.scratch_value);
        old_value.clear();
        let parts: [&[u8]; 2] = match (join, old_meta) {
            (Some(append), Some((_, loc, h))) => {
                old_value.extend_from_slice(h.value(shard.item(loc)));
                if append {
                    [&old_value, req.value]
                } else {
                    [req.value, &old_value]
                }
            }
            _ => [req.value, &[]],
        };
        let value_len = parts[0].len() + parts[1].len();
        let cas = self.g.assign_cas(req.new_cas);
        let spec = Self::new_spec(key, value_len, flags, exptime, bits, cas, now);
        let keep = old_meta.map(|(_, loc, _)| loc.seg);
        let stored = self.put(shard, key, hash, &spec, &parts, keep, now);
        shard.scratch_value = old_value;
        if !stored {
            // memcached drops the old value of a failed set rather than
            // leave stale data behind.
            if req.mode == StoreMode::Set {
                if let Some((slot, loc, h)) = shard.find(key, hash) {
                    shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
                }
            }
            let c = shard.classes.class(class);
            c.outofmemory += 1;
            c.cmd_set -= 1;
            return StoreResult::OutOfMemory;
        }
        shard.counters.total_items += 1;
        self.flash_note_stored(shard, value_len);
        self.sample_stored(hash, key.len() + value_len + sample::ITEM_HEADER_BYTES);
        StoreResult::Stored { cas: self.g.shown_cas(cas), value_len }
    }

    fn delta(&self, req: &DeltaRequest<'_>, now: RelTime) -> DeltaResult {
        let hash = hash_key(req.key);
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        let key = req.key;
        self.flash_forget(shard, hash);
        let Some(found) = self.live(shard, key, hash, now) else {
            let Some(ttl) = req.vivify else { return DeltaResult::NotFound };
            let value = req.initial.to_string();
            let cas = self.g.assign_cas(req.new_cas);
            let spec = Self::new_spec(key, value.len(), 0, ttl, 0, cas, now);
            if !self.put(shard, key, hash, &spec, &[value.as_bytes()], None, now) {
                return DeltaResult::NotStored;
            }
            shard.counters.total_items += 1;
            return DeltaResult::Ok { value: req.initial, cas: self.g.shown_cas(cas), exptime: 0, created: true };
        };
        let (_, loc, h) = found;
        let meta = self.meta(shard, loc, &h);
        let size = memcached_item_size(key.len(), h.flags, h.value_len, !self.g.config.cas_disabled);
        if h.value_len == 0 || memcached_chunked(size, self.g.config.item_size_max_bytes) {
            return DeltaResult::NonNumeric;
        }
        if req.cas != 0 && req.cas != meta.cas {
            return DeltaResult::Exists;
        }
        let Some(current) = parse_counter(h.value(shard.item(loc))) else { return DeltaResult::NonNumeric };
        let c = shard.classes.class(self.g.item_class(&h).0);
        match req.mode {
            DeltaMode::Incr => c.incr_hits += 1,
            DeltaMode::Decr => c.decr_hits += 1,
        }
        let value = match req.mode {
            DeltaMode::Incr => current.wrapping_add(req.delta),
            DeltaMode::Decr => current.saturating_sub(req.delta),
        };
        let mut data = Vec::new();
        counter_bytes(value, if req.in_place { h.value_len } else { 0 }, &mut data);
        // memcached numbers the update from the counter, then overwrites
        // the CAS with `E`.
        let mut cas = self.g.next_cas();
        if req.new_cas.is_some() {
            cas = self.g.assign_cas(req.new_cas);
        }
        let ok = if req.in_place && data.len() == h.value_len {
            // In place, as memcached does: same length, new CAS, bumped.
            let change = Change { value: Some(&data), cas: Some(cas), access: Some(now), exptime: req.touch, ..Change::default() };
            self.modify(shard, key, hash, found, change, now)
        } else {
            // A fresh item, as memcached allocates one: flags and TTL carry
            // over; fetched, stale, token and binary-key marks do not, and
            // memcached's `T` goes to the old item, so the TTL stays.
            let spec = Self::new_spec(key, data.len(), h.flags, meta.exptime, 0, cas, now);
            let ok = self.put(shard, key, hash, &spec, &[&data], Some(loc.seg), now);
            if ok {
                shard.counters.total_items += 1;
            }
            ok
        };
        if !ok {
            return DeltaResult::OutOfMemory;
        }
        DeltaResult::Ok { value, cas: self.g.shown_cas(cas), exptime: meta.exptime, created: false }
    }

    fn delete(&self, req: &DeleteRequest<'_>, now: RelTime) -> DeleteResult {
        let hash = hash_key(req.key);
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        self.flash_forget(shard, hash);
        let Some(found) = self.live(shard, req.key, hash, now) else { return DeleteResult::NotFound };
        let (slot, loc, h) = found;
        let meta = self.meta(shard, loc, &h);
        if req.cas.is_some_and(|cas| cas != meta.cas) {
            return DeleteResult::Exists;
        }
        shard.classes.class(self.g.item_class(&h).0).delete_hits += 1;
        let mut found = found;
        if let Some(empty) = req.empty {
            // memcached stores a fresh empty item under the key, keeping the
            // old CAS unless `E` gives one.
            let cas = match req.new_cas {
                Some(_) => self.g.assign_cas(req.new_cas),
                None => h.cas(shard.item(loc), shard.seg(loc).cas_base),
            };
            let spec = Self::new_spec(req.key, 0, empty.flags, empty.exptime, 0, cas, now);
            if !self.put(shard, req.key, hash, &spec, &[], Some(loc.seg), now) {
                return DeleteResult::NotStored;
            }
            shard.counters.total_items += 1;
            if !req.invalidate {
                return DeleteResult::Deleted;
            }
            found = shard.find(req.key, hash).expect("just linked");
        }
        if req.invalidate {
            let change = Change {
                exptime: req.touch,
                cas: Some(self.g.assign_cas(req.new_cas)),
                set: STALE,
                clear: TOKEN_SENT,
                ..Change::default()
            };
            if self.modify(shard, req.key, hash, found, change, now) {
                return DeleteResult::Deleted;
            }
            // No memory to rewrite it stale: drop it instead.
            if let Some((slot, loc, h)) = shard.find(req.key, hash) {
                shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
            }
            return DeleteResult::Deleted;
        }
        shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
        DeleteResult::Deleted
    }

    fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool {
        let hash = hash_key(key);
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        self.flash_forget(shard, hash);
        let Some(found) = self.live(shard, key, hash, now) else { return false };
        let (_, loc, h) = found;
        let queue = shard.seg(loc).queue();
        shard.classes.hit(self.g.item_class(&h).0, queue, true);
        let change = Change { exptime: Some(exptime), access: Some(now), set: FETCHED, ..Change::default() };
        if !self.modify(shard, key, hash, found, change, now) {
            // The new TTL could not be written: better a miss than the old TTL.
            if let Some((slot, loc, h)) = shard.find(key, hash) {
                shard.unlink(&self.g, slot, loc, &h, Gone::Replaced);
            }
        }
        true
    }

    fn flush_all(&self, at: RelTime, now: RelTime) {
        let new_oldest = if at > 0 { at } else { now };
        let oldest_live = new_oldest.saturating_sub(1);
        self.g.oldest_live.store(oldest_live, Ordering::Relaxed);
        if !self.g.config.cas_disabled && oldest_live <= now {
            self.g.oldest_cas.store(self.g.next_cas(), Ordering::Relaxed);
        }
        self.persist_state();
    }

    fn set_eviction_log(&self, log: std::sync::Arc<dyn crate::EvictionLog>) {
        let _ = self.g.eviction_log.set(log);
    }

    fn set_access_sampler(&self, sampler: std::sync::Arc<dyn crate::AccessSampler>) {
        let _ = self.g.sampler.set(sampler);
    }

    fn set_sample_threshold(&self, threshold: u64) {
        self.g.sample_threshold.store(threshold, Ordering::Relaxed);
    }

    fn stats(&self) -> EngineStats {
        let mut stats = EngineStats { limit_maxbytes: self.g.memory_limit.load(Ordering::Relaxed), ..EngineStats::default() };
        for shard in self.shards.iter() {
            let shard = lock(shard);
            let c = &shard.counters;
            stats.curr_items += shard.curr_items;
            stats.bytes += shard.bytes;
            stats.total_items += c.total_items;
            stats.evictions += c.evictions;
            stats.expired_unfetched += c.expired_unfetched;
            stats.evicted_unfetched += c.evicted_unfetched;
            stats.reclaimed += c.reclaimed;
            stats.get_expired += c.get_expired;
            stats.get_flushed += c.get_flushed;
            stats.index_slots += shard.table.capacity() as u64;
            stats.index_bytes += shard.table.bytes() as u64;
            stats.ghost_bytes += shard.ghost.bytes() as u64;
            stats.ghost_hits += shard.ghost.hits;
        }
        stats.curr_items += self.flash_items();
        stats.restart = self.restart;
        stats.malloced_bytes = self.g.allocated.load(Ordering::Relaxed);
        stats
    }

    fn class_stats(&self, now: RelTime) -> crate::ClassStats {
        let mut out = crate::ClassStats::empty(self.g.config.track_sizes);
        for shard in self.shards.iter() {
            let shard = lock(shard);
            shard.classes.add_to(&mut out);
            // Ages: the oldest live segment of each queue that holds the class.
            for seg in shard.segs.iter().filter(|s| s.is_live()) {
                let age = now.saturating_sub(seg.create_time);
                let mut bits = seg.class_bits;
                while bits != 0 {
                    let cls = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let row = &mut out.classes[cls];
                    match seg.queue() {
                        crate::class_stats::Queue::Hot => row.age_hot = row.age_hot.max(age),
                        crate::class_stats::Queue::Warm => row.age_warm = row.age_warm.max(age),
                    }
                }
            }
        }
        out.place_flash_items(self.flash_items());
        out
    }

    fn item_size_ok(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        memcached_item_size(key_len, flags, value_len, !self.g.config.cas_disabled) <= self.g.config.item_size_max_bytes
    }

    fn set_memory_limit(&self, bytes: u64) {
        self.g.memory_limit.store(bytes, Ordering::Relaxed);
        self.g.exhausted.store(false, Ordering::Relaxed);
    }

    fn shed_to_limit(&self, now: RelTime) -> u64 {
        self.shed(now)
    }

    fn malloced_bytes(&self) -> u64 {
        self.g.allocated.load(Ordering::Relaxed)
    }

    fn reset_stats(&self) {
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.counters = shard::Counters::default();
            shard.classes.reset();
        }
        self.flash_reset_stats();
    }

    fn walk(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        self.walk_step(cursor, budget, now, visit)
    }

    fn maintain(&self, now: RelTime, reclaim_expired: bool) {
        for shard in self.shards.iter().filter(|_| reclaim_expired) {
            lock(shard).reclaim_expired(&self.g, now, shard::RECLAIM_PER_TICK, None);
        }
        self.flash_maintain(reclaim_expired);
        self.persist_state();
    }

    fn clock_origin(&self) -> Option<i64> {
        self.g.file.as_ref().map(|f| f.origin_unix())
    }

    fn cas_counter(&self) -> u64 {
        self.g.cas_counter.load(Ordering::Relaxed)
    }

    fn close(&self) -> std::io::Result<()> {
        self.flash_close();
        let Some(file) = &self.g.file else { return Ok(()) };
        // Every shard locked: no store is half-written while the file is
        // marked clean.
        let guards: Vec<_> = self.shards.iter().map(|s| lock(s)).collect();
        let mut buffers = guards.iter().flat_map(|s| s.segs.iter().map(|seg| &seg.buf));
        file.close(self.file_state(), &mut buffers)
    }

    fn flash_enabled(&self) -> bool {
        self.g.flash.is_some()
    }

    fn flash_check(&self, key: &[u8], now: RelTime) -> Option<crate::FlashRead> {
        self.flash_check_impl(key, now)
    }

    fn finish_flash_read(
        &self,
        read: &crate::FlashRead,
        data: Option<&[u8]>,
        opts: GetOptions,
        into_ram: bool,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> crate::FlashFinish {
        self.finish_flash_read_impl(read, data, opts, into_ram, now, visit)
    }

    fn flash_write_idle(&self, now: RelTime, state: &mut FlashIdle) -> u64 {
        self.flash_write_idle_impl(now, state)
    }

    fn abandon_flash_read(&self, read: &crate::FlashRead) {
        self.abandon_flash_read_impl(read)
    }

    fn ext_stats(&self) -> Option<crate::ExtStats> {
        self.ext_stats_impl()
    }
}
