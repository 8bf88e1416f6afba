//! strata-store: the cache engine. It knows keys, values, client flags, expiry
//! and CAS; it never sees protocol types.
//!
//! The server talks to the engine only through the [`Engine`] trait below
//! (and, to an engine with a flash tier, through the [`FlashTier`] that
//! [`Engine::flash`] hands out: `flash_tier.rs`). Its operations mirror
//! memcached 1.6's `do_store_item`, `do_add_delta`, `item_get`/`item_touch`
//! and `flush_all`, so the protocol layer is a thin translation and every
//! semantic decision (CAS rules, append keeping the old flags and TTL, decr
//! clamping at zero, in-place incr padding) lives here, where the model
//! tests can check it.
//!
//! Time: every call takes `now`, a [`RelTime`] in seconds on the server's
//! relative clock (see [`clock`]). An item with `exptime != 0 && exptime <= now`
//! is expired and behaves as absent. `exptime == 0` never expires.
//!
//! Flush: `flush_all` records an epoch `(oldest_live, oldest_cas)`, never walks
//! the items. Once `now >= oldest_live`, an item is flushed (absent) if it was
//! last stored at or before `oldest_live`, or (immediate flush) its CAS is
//! older than `oldest_cas`. This is memcached's `item_is_flushed`.

#![deny(unsafe_code)]

pub mod class_stats;
pub mod classes;
pub mod clock;
pub mod ext_config;
pub mod ext_stats;
mod flash_buf;
pub mod flash_read;
pub mod flash_tier;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod map;
mod prefetch;
pub mod seg;
pub mod walk;

pub use class_stats::{ClassCounters, ClassStats};
pub use classes::{ClassGeometry, SlabClasses};
pub use clock::{Clock, RelTime};
pub use ext_config::{ExtBucket, ExtConfig, ExtPath, ExtTunable, ExtTunables};
pub use ext_stats::{ExtPageStats, ExtStats, SmallStats};
pub use flash_read::{FlashBuf, FlashFinish, FlashRead, FLASH_ALIGN_BYTES};
pub use flash_tier::FlashTier;
pub use map::MapStore;
pub use seg::{free_bytes, hash_key, FlashCompact, FlashIdle, FlashRewrite, SegStore, SharedWords, MEMORY_FILE_LOCK_WAIT};
pub use walk::{Visit, WalkCursor, WALK_BATCH};

/// What [`Engine::read_batch`] holds for the reads of one batch; dropped
/// on the thread that made it (it is not `Send`).
pub struct ReadBatch {
    _pin: Option<seg::batch::BatchPin>,
}

/// Item metadata as the protocol layer sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemMeta {
    /// Opaque 32-bit client flags.
    pub flags: u32,
    /// Absolute expiry on the relative clock; 0 = never.
    pub exptime: RelTime,
    /// CAS unique; never 0 for a stored item (unless CAS is disabled, `-C`).
    pub cas: u64,
    /// Relative time of the last store or bumped fetch.
    pub last_access: RelTime,
    /// Fetched at least once since it was stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by `md ... I` or a stale CAS store (meta `X`).
    pub stale: bool,
    /// A recache "win" token was already handed out (meta `W`/`Z`).
    pub token_sent: bool,
    /// The key was stored through the meta `b` (base64) flag.
    pub key_binary: bool,
}

/// A borrowed view of a live item, valid only inside the visitor call.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: ItemMeta,
}

/// Storage modes, memcached's `NREAD_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `cas` / `ms ... C<cas>` in set or replace mode: store only if the item
    /// exists and `StoreRequest::cas` matches.
    Cas,
}

/// One store request. `value` is the complete new data (without `\r\n`).
#[derive(Clone, Copy, Debug)]
pub struct StoreRequest<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: RelTime,
    pub mode: StoreMode,
    /// CAS to compare; 0 = none. For `Cas` mode 0 means "never matches"
    /// (memcached answers EXISTS/NOT_FOUND). For Append/Prepend a non-zero
    /// CAS must match. For Add/Set/Replace it is ignored.
    pub cas: u64,
    /// Meta `I` with `C`: a CAS *lower* than the item's is accepted, the new
    /// value keeps the old TTL and is marked stale (and keeps token_sent).
    pub invalidate: bool,
    /// Append/Prepend on a miss creates the item with this TTL (meta `ms MA N`).
    pub vivify_ttl: Option<RelTime>,
    pub key_binary: bool,
    /// Meta `E<cas>`: the stored item gets this CAS instead of the next one
    /// from the counter (which then does not move). Ignored with `-C`.
    pub new_cas: Option<u64>,
}

impl<'a> StoreRequest<'a> {
    /// A `mode` request for `key` with memcached's defaults for everything
    /// else: flags 0, no expiry, no CAS to compare, a text key, the next
    /// CAS from the counter. The `with_*` methods change one field each.
    pub fn new(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> Self {
        StoreRequest {
            key,
            value,
            flags: 0,
            exptime: 0,
            mode,
            cas: 0,
            invalidate: false,
            vivify_ttl: None,
            key_binary: false,
            new_cas: None,
        }
    }

    /// `set key 0 0 <len>`: [`StoreRequest::new`] in [`StoreMode::Set`].
    pub fn set(key: &'a [u8], value: &'a [u8]) -> Self {
        StoreRequest::new(StoreMode::Set, key, value)
    }

    pub fn with_flags(self, flags: u32) -> Self {
        StoreRequest { flags, ..self }
    }

    pub fn with_exptime(self, exptime: RelTime) -> Self {
        StoreRequest { exptime, ..self }
    }

    /// The CAS to compare (see [`StoreRequest::cas`]).
    pub fn with_cas(self, cas: u64) -> Self {
        StoreRequest { cas, ..self }
    }

    /// The CAS the stored item gets (meta `E`).
    pub fn with_new_cas(self, new_cas: u64) -> Self {
        StoreRequest { new_cas: Some(new_cas), ..self }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreResult {
    /// Stored; the item's CAS and its value's length (after append or
    /// prepend, the joined value's: meta `s`).
    Stored { cas: u64, value_len: usize },
    NotStored,
    Exists,
    NotFound,
    /// Item larger than the configured item size limit. For `Set` the store
    /// has already removed any existing item under the key (memcached does,
    /// so a failed set never leaves stale data behind).
    TooLarge,
    /// `-M` (no evictions) and memory is full, or no memory could be freed.
    OutOfMemory,
}

/// Options for a read.
#[derive(Clone, Copy, Debug, Default)]
pub struct GetOptions {
    /// On a hit, set this TTL (gat, touch, meta `T`).
    pub touch: Option<RelTime>,
    /// Skip the LRU bump and the fetched / last-access update (meta `u`).
    pub no_bump: bool,
    /// Meta `N`: on a miss, create an empty item (flags 0) with this TTL.
    /// `touch` does not apply to a created item: the caller folds the order
    /// of `N` and `T` into this one value.
    pub vivify: Option<RelTime>,
    /// A debugging read (`me`), not a client's fetch: no per-class hit is
    /// counted, as memcached's `me` counts none.
    pub uncounted: bool,
    /// Meta `E<cas>` with `N`: the CAS of an item `vivify` creates.
    pub vivify_cas: Option<u64>,
    /// The visitor never asks for the recache token (`set_token_sent`),
    /// as a plain `get` does. Without it, a hit the visitor could win the
    /// token on (stale, or with a TTL for meta `R`, token not yet sent) is
    /// read under the shard's lock, so that two readers never both win;
    /// with it, such a hit is read without the lock too (seg/read.rs).
    pub no_token: bool,
    /// The visitor never shows whether the item was fetched before (meta
    /// `h`), as a plain `get` does. Without it, an item's first fetch is
    /// read under the shard's lock, so that one reader only sees "not
    /// fetched"; with it, the first fetch is read without the lock too and
    /// the mark written after (seg/read.rs).
    pub fetched_unseen: bool,
    /// The key's [`hash_key`], when the caller has it (a multi-get hashes
    /// its window's keys once, for [`Engine::prefetch`]): the read does not
    /// hash the key again. Must be the key's hash.
    pub hash: Option<u64>,
}

/// What the visitor of a read asks the store to do, atomically with the read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetAction {
    /// Mark the recache token as handed out (meta `W` was sent).
    pub set_token_sent: bool,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaMode {
    Incr,
    Decr,
}

#[derive(Clone, Copy, Debug)]
pub struct DeltaRequest<'a> {
    pub key: &'a [u8],
    pub mode: DeltaMode,
    pub delta: u64,
    /// Non-zero: must match the item's CAS.
    pub cas: u64,
    /// Meta `N`: create on miss with this TTL and `initial` as value
    /// (the caller folds the order of `N` and `T` into this value).
    pub vivify: Option<RelTime>,
    pub initial: u64,
    /// Meta `T`: set this TTL on success on an existing item, when it is
    /// rewritten in place (memcached applies `T` to the old item otherwise,
    /// so the stored counter keeps its TTL).
    pub touch: Option<RelTime>,
    /// memcached rewrites a counter in place (same length, space padded,
    /// flags kept) only when nothing else references the item; while a reply
    /// that references it is unsent it allocates a fresh item (exact digits,
    /// not fetched). The caller knows which; false forces the fresh item.
    pub in_place: bool,
    /// Meta `E<cas>`: the CAS of the updated or created counter. Updating
    /// still takes a number from the counter first, as memcached does.
    pub new_cas: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaResult {
    /// New value, the item's CAS after the update, and its exptime *before*
    /// `touch`/`vivify` were applied (0 for a created item), so the caller
    /// can answer meta `t` in flag order. `created` when vivify made it.
    Ok { value: u64, cas: u64, exptime: RelTime, created: bool },
    NotFound,
    /// Vivify was asked but the item could not be created.
    NotStored,
    NonNumeric,
    Exists,
    OutOfMemory,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct DeleteRequest<'a> {
    pub key: &'a [u8],
    /// Must match when given (meta `C`, binary header CAS); `Some(0)` never
    /// matches a stored item, as in memcached.
    pub cas: Option<u64>,
    /// Meta `I`: instead of removing, mark stale and give a new CAS.
    pub invalidate: bool,
    /// Meta `T` with `I`: new TTL for the stale item.
    pub touch: Option<RelTime>,
    /// Meta `x`: instead of removing the item, replace it with an empty one
    /// with these flags and TTL, keeping its CAS (or `new_cas`); with
    /// `invalidate` that item is then marked stale.
    pub empty: Option<EmptyItem>,
    /// Meta `E<cas>`: the CAS the invalidated or emptied item gets.
    pub new_cas: Option<u64>,
}

/// The empty item `md ... x` leaves in place of the value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmptyItem {
    pub flags: u32,
    pub exptime: RelTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteResult {
    Deleted,
    NotFound,
    Exists,
    /// `empty` was asked and the empty item could not be stored (meta `NS`).
    NotStored,
}

/// Engine-wide counters, with memcached's stat names in the comments.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub curr_items: u64,
    pub total_items: u64,
    /// Bytes of live items (key + value + header), `bytes`.
    pub bytes: u64,
    pub evictions: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    /// Lookups that found an expired item (`get_expired`) or a flushed one
    /// (`get_flushed`): every command that looks a key up counts, as in
    /// memcached's `do_item_get`.
    pub get_expired: u64,
    pub get_flushed: u64,
    pub limit_maxbytes: u64,
    /// Bytes of memory the engine has taken for items (`total_malloced`):
    /// segment buffers held or pooled (SegStore), live item bytes (MapStore).
    pub malloced_bytes: u64,
    /// With a memory file (`-e`): what the start found in it.
    pub restart: Option<RestartStats>,
    /// Slots of the key index over every shard, and their bytes (`stats`
    /// `hash_power_level`, `hash_bytes`); 0 for an engine that does not
    /// size its own index (MapStore).
    pub index_slots: u64,
    pub index_bytes: u64,
    /// Scan resistance (SegStore's `seg/ghost.rs`): bytes of the ghost's
    /// fingerprints of keys evicted unread (0 until a shard first evicts),
    /// and the keys set again while it remembered them (`ghost_bytes`,
    /// `ghost_hits`).
    pub ghost_bytes: u64,
    pub ghost_hits: u64,
    /// The part of `index_bytes` and `ghost_bytes` counted in `-m` and so
    /// in `malloced_bytes` (SegStore's `seg/shard/charge.rs`: all but each
    /// shard's first index size); 0 for MapStore.
    pub charged_index_bytes: u64,
    /// The lock-free read (SegStore's `seg/read.rs`): attempts repeated
    /// because a writer ran in the shard meanwhile, and gets that finished
    /// under the shard lock instead (writers kept running, or the read had
    /// something to write: a first bump, an expiry, a token), `/metrics`'
    /// `strata_get_retries_total` and `strata_get_locked_total`; 0 for an
    /// engine that always locks (MapStore).
    pub get_retries: u64,
    pub get_locked: u64,
    /// Bytes of the engine's bookkeeping outside item memory, the index
    /// and the ghost, at capacity (SegStore: the shards, segment
    /// descriptors, queues, read views, per-class tallies, scratch
    /// buffers; `stats memory` `store_meta_bytes`); 0 for MapStore, which
    /// does not measure its `HashMap`.
    pub meta_bytes: u64,
    /// With a flash tier: the bytes of its RAM index and of its two write
    /// buffers, both counted in `malloced_bytes` (inside `-m`).
    pub flash_index_bytes: u64,
    pub flash_buffer_bytes: u64,
}

/// What starting from a memory file found (`stats`: `restart_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RestartStats {
    /// The file held a usable cache (same settings, header intact).
    pub ok: bool,
    /// The previous process stopped gracefully.
    pub clean: bool,
    /// Items served again.
    pub items: u64,
    /// Items (and segments) dropped because their check failed.
    pub damaged: u64,
    /// Items that expired or were flushed while the server was down.
    pub expired: u64,
    pub seconds: f64,
    /// The previous process's last heartbeat in the file (unix seconds;
    /// 0: a file written before heartbeats were timed).
    pub last_alive_unix: i64,
}

/// Settings the engine needs from the command line.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// `-m`, bytes of item memory.
    pub memory_limit_bytes: u64,
    /// `-I`, largest item (key + value + header) accepted.
    pub item_size_max_bytes: usize,
    /// `-M`: refuse stores with OutOfMemory instead of evicting.
    pub evictions_disabled: bool,
    /// `-C`: CAS disabled; every item's CAS is 0.
    pub cas_disabled: bool,
    /// memcached's size classes for these settings (`-f`, `-n`, `-I`,
    /// `slab_chunk_max`, `slab_sizes`): the per-class counters key on them.
    pub classes: SlabClasses,
    /// `-o track_sizes`: keep the `stats sizes` histogram.
    pub track_sizes: bool,
    /// Bytes counted as already taken at start (memcached's test hook
    /// `T_MEMD_INITIAL_MALLOC`, which t/64bit.t uses); 0 normally.
    pub initial_malloced_bytes: u64,
    /// `-L`: back segment memory with transparent huge pages.
    pub large_pages: bool,
    /// Slots the key index starts with, over all shards (memcached's
    /// `-o hashpower`: 2^N, 2^16 by default); 0 = the engine's minimum.
    pub index_slots_initial: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_limit_bytes: 64 << 20,
            item_size_max_bytes: 1 << 20,
            evictions_disabled: false,
            cas_disabled: false,
            classes: SlabClasses::default(),
            track_sizes: false,
            initial_malloced_bytes: 0,
            large_pages: false,
            index_slots_initial: 0,
        }
    }
}

/// The engine's interface. Implementations are shared by all worker threads
/// (`Sync`); every operation is atomic per key.
/// An item the store evicted (for a server's `watch evictions`).
pub struct Evicted<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub value_len: usize,
    /// 0: no expiry.
    pub exptime: RelTime,
    pub last_access: RelTime,
    pub fetched: bool,
    pub now: RelTime,
}

/// Told of each evicted item while `wants()` (one relaxed load per
/// evicted item, none per request).
pub trait EvictionLog: Send + Sync {
    fn wants(&self) -> bool;
    fn evicted(&self, item: &Evicted<'_>);
}

/// Told of sampled accesses (`stats mrc`): keys whose hash falls in the
/// spatial sample [`Engine::set_sample_threshold`] sets, with the hash the
/// engine computed anyway. Called outside (get) or inside (store) a shard
/// lock: it must not call back into the engine.
pub trait AccessSampler: Send + Sync {
    /// A read of the key (hit or miss).
    fn get(&self, hash: u64);
    /// An item of about `bytes` (key, value, header) stored for the key.
    fn stored(&self, hash: u64, bytes: usize);
}

pub trait Engine: Send + Sync {
    /// Report evicted items to `log` (a store that cannot: no-op).
    fn set_eviction_log(&self, _log: std::sync::Arc<dyn EvictionLog>) {}

    /// Feed sampled accesses to `sampler` (a store that cannot: no-op).
    fn set_access_sampler(&self, _sampler: std::sync::Arc<dyn AccessSampler>) {}

    /// The sample: keys whose mixed hash's top 32 bits are below
    /// `threshold` (so a rate of threshold / 2^32); 0 samples nothing.
    fn set_sample_threshold(&self, _threshold: u64) {}

    /// Look up `key`. On a hit (or when `vivify` created the item) calls
    /// `visit` exactly once, with the item as it was *before* this access:
    /// `fetched`, `last_access` and `exptime` are the old ones (meta `h`,
    /// `l`, and a `t` that comes before `T` report them), and `created` says
    /// the item was just made by `vivify` (its exptime in the view is then 0,
    /// as memcached's freshly allocated item has). After the visit the store
    /// applies `touch` or `vivify`'s TTL, the bump (unless `no_bump`) and the
    /// visitor's [`GetAction`], all under the same per-key atomicity.
    /// Returns false on a miss without vivify (visit not called).
    fn get(
        &self,
        key: &[u8],
        opts: GetOptions,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> bool;

    /// A hint that the keys of these [`hash_key`] hashes are read next (a
    /// multi-get): a store may start loading their index entries and
    /// items, so the reads that follow overlap their cache misses instead
    /// of waiting for each in turn. It changes nothing a read returns or
    /// counts.
    fn prefetch(&self, _hashes: &[u64]) {}

    /// Reads that follow belong together (a multi-get): a store whose
    /// reads each pin something (`SegStore`: the epoch) may pin once while
    /// the returned value lives. It changes nothing a read returns.
    fn read_batch(&self) -> ReadBatch {
        ReadBatch { _pin: None }
    }

    fn store(&self, req: &StoreRequest<'_>, now: RelTime) -> StoreResult;

    fn delta(&self, req: &DeltaRequest<'_>, now: RelTime) -> DeltaResult;

    fn delete(&self, req: &DeleteRequest<'_>, now: RelTime) -> DeleteResult;

    /// Set a new TTL on a live item and mark it fetched, as memcached's
    /// `touch` does; false on a miss.
    fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool;

    /// memcached's flush_all: `at == 0` flushes now, else at relative time `at`.
    fn flush_all(&self, at: RelTime, now: RelTime);

    fn stats(&self) -> EngineStats;

    /// Whether an item with this key length, flags and value length fits
    /// under `-I`, by memcached's own arithmetic ([`memcached_item_size`]), so
    /// the boundary between stored and "object too large" is the same byte.
    fn item_size_ok(&self, key_len: usize, flags: u32, value_len: usize) -> bool;

    /// `cache_memlimit`: change the memory limit at run time.
    fn set_memory_limit(&self, bytes: u64);

    /// After the limit was lowered under memory pressure (`-m auto`,
    /// `-o memory_pressure_yield`): evict and give memory back to the
    /// kernel now, down to the limit; returns the bytes given back. The
    /// default (an engine whose memory follows its items) does nothing.
    fn shed_to_limit(&self, _now: RelTime) -> u64 {
        0
    }

    /// `stats().malloced_bytes` without summing every shard's counters.
    fn malloced_bytes(&self) -> u64 {
        self.stats().malloced_bytes
    }

    /// Background work, called once a clock tick (every second) by the
    /// server: with `reclaim_expired` (memcached's LRU crawler enabled),
    /// reclaim memory of expired items without waiting for a request to
    /// touch them, bounded per call; a memory file also records its state.
    fn maintain(&self, _now: RelTime, _reclaim_expired: bool) {}

    /// Per-class counters (`stats items`, `stats slabs`, `stats sizes`),
    /// summed over the engine's shards; `now` dates the ages. The default
    /// (an engine that keeps none) reports no classes, so the server prints
    /// the summary lines only.
    fn class_stats(&self, _now: RelTime) -> ClassStats {
        ClassStats::default()
    }

    /// One step of a walk over every item (see [`walk`]): look at up to
    /// `budget` items from `cursor` under one shard's lock, showing each
    /// linked one to `visit` ([`Visit::Live`], or [`Visit::Expired`] for
    /// an expired or flushed one, which is unlinked and counted as
    /// `reclaimed` when `visit` returns true; for a live one the return is
    /// ignored). Returns true when the walk has visited everything.
    fn walk(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool;

    /// `stats reset`: zero the counters memcached resets (total_items,
    /// evictions, reclaimed, expired_unfetched, evicted_unfetched,
    /// get_expired, get_flushed); item and byte counts stay.
    fn reset_stats(&self);

    /// Unix time of relative time 0 the server's clock must use: a memory
    /// file fixes it for every process that uses the file, so TTLs written
    /// before a restart count the downtime. None: the server picks.
    fn clock_origin(&self) -> Option<i64> {
        None
    }

    /// The CAS counter: every item stored from now on gets a higher CAS
    /// (unless given one explicitly, meta `E`). The warm return's catch-up
    /// tells restored items from new ones by it.
    fn cas_counter(&self) -> u64 {
        0
    }

    /// Graceful stop, after the last request: make the cache restartable
    /// (memory file: write it back and mark it clean).
    fn close(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// The flash tier (`-o ext_path`), if the engine has one: the
    /// flash-only operations (`flash_tier.rs`; `flash_read.rs` has the
    /// whole path of a flash read). The same answer for the engine's whole
    /// life, so a caller may keep it; None (the default) means no flash
    /// path runs at all.
    fn flash(&self) -> Option<&dyn FlashTier> {
        None
    }
}

/// memcached 1.6's item size on 64-bit Linux: a 48-byte header, the key and
/// its NUL, 4 bytes of flags when non-zero, the value with its CRLF, and 8
/// bytes of CAS unless `-C`. An item is "too large" when this exceeds `-I`.
pub fn memcached_item_size(key_len: usize, flags: u32, value_len: usize, cas: bool) -> usize {
    let suffix = if flags == 0 { 0 } else { 4 };
    48 + key_len + 1 + suffix + value_len.saturating_add(2) + if cas { 8 } else { 0 }
}

/// Whether memcached stores an item of this size in chunks: larger than
/// half a slab page (`slab_chunk_size_max`, 512 KiB with the default 1 MiB
/// `-I`). memcached refuses incr/decr on chunked items as non-numeric.
pub fn memcached_chunked(item_size: usize, item_size_max: usize) -> bool {
    item_size > item_size_max.max(1 << 20) / 2
}

/// Parse an item's data the way memcached's `safe_strtoull` does for incr and
/// decr: optional leading white space, an optional sign, decimal digits, then
/// white space or the end. A '-' on a value that does not fit in i64 is
/// refused; overflow is refused.
pub fn parse_counter(data: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < data.len() && is_c_space(data[i]) {
        i += 1;
    }
    let sign_at = i;
    let negative = data.get(i) == Some(&b'-');
    if matches!(data.get(i), Some(b'+') | Some(b'-')) {
        i += 1;
    }
    let digits_at = i;
    let mut value: u64 = 0;
    while i < data.len() && data[i].is_ascii_digit() {
        value = value.checked_mul(10)?.checked_add(u64::from(data[i] - b'0'))?;
        i += 1;
    }
    if i == digits_at {
        return None;
    }
    if i < data.len() && !is_c_space(data[i]) {
        return None;
    }
    // strtoull negates; "-5" becomes 2^64-5, which safe_strtoull refuses.
    let value = if negative { value.wrapping_neg() } else { value };
    if (value as i64) < 0 && data[sign_at..i].contains(&b'-') {
        return None;
    }
    Some(value)
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// The new data for a counter: memcached rewrites in place, padded with
/// spaces to the old length, when the number fits; otherwise the exact digits.
pub fn counter_bytes(value: u64, old_len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(value.to_string().as_bytes());
    if out.len() < old_len {
        out.resize(old_len, b' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_parsing_matches_safe_strtoull() {
        assert_eq!(parse_counter(b"12"), Some(12));
        assert_eq!(parse_counter(b" 12"), Some(12));
        assert_eq!(parse_counter(b"+12"), Some(12));
        assert_eq!(parse_counter(b"12 abc"), Some(12));
        assert_eq!(parse_counter(b"12  "), Some(12));
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"-5"), None);
        assert_eq!(parse_counter(b"12a"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"abc"), None);
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
    }

    #[test]
    fn counter_bytes_pads_in_place() {
        let mut v = Vec::new();
        counter_bytes(99, 3, &mut v);
        assert_eq!(v, b"99 ");
        counter_bytes(100, 2, &mut v);
        assert_eq!(v, b"100");
    }
}
