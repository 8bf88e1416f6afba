//! `MapStore`: the reference engine, a `HashMap` per shard behind a mutex.
//!
//! It is deliberately plain: it defines the semantics the segment engine must
//! match, serves as the model in property tests, and runs the server until the
//! segment engine replaces it. Memory is accounted with memcached's item size
//! ([`crate::memcached_item_size`]); past `-m` it evicts the shard's oldest
//! stored items (a FIFO queue of keys per shard, O(1) per eviction), or
//! refuses with `-M`.
//!
//! ```text
//!  key ──hash──► shard[i] : Mutex<HashMap<Box<[u8]>, Item>>
//!                 Item { value, meta: ItemMeta }
//! ```

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{
    counter_bytes, memcached_chunked, memcached_item_size, parse_counter, DeleteRequest, DeleteResult, DeltaMode,
    DeltaRequest, DeltaResult, Engine, EngineConfig, EngineStats, GetOptions, ItemMeta, ItemView,
    RelTime, StoreMode, StoreRequest, StoreResult, Visit, WalkCursor,
};

const SHARD_COUNT: usize = 64;

#[derive(Debug, Clone)]
struct Item {
    value: Vec<u8>,
    meta: ItemMeta,
}

/// The shards' hashing: fixed keys (SipHash's zero keys), where std's
/// `RandomState` seeds each map anew. The same requests then lay out each
/// shard's table the same way in every process, so a fuzz input takes the
/// same paths through it each time it runs: with random seeds the table's
/// rarer probe and growth paths turned up at random, and libFuzzer, which
/// counts them as new coverage, never saw a target's coverage settle. A
/// reference engine, not one facing clients, so its keys being predictable
/// is no denial of service.
type FixedState = BuildHasherDefault<DefaultHasher>;

#[derive(Default)]
struct Shard {
    items: HashMap<Box<[u8]>, Item, FixedState>,
    /// Keys in store order; may hold keys since removed or stored again.
    fifo: VecDeque<Box<[u8]>>,
}

impl Shard {
    /// The oldest stored key other than `keep`, dropping stale queue entries.
    fn oldest(&mut self, keep: &[u8]) -> Option<Box<[u8]>> {
        if self.fifo.len() > 2 * self.items.len() + 16 {
            self.fifo = self.items.keys().cloned().collect();
        }
        for _ in 0..self.fifo.len() {
            let key = self.fifo.pop_front()?;
            if key.as_ref() == keep {
                self.fifo.push_back(key);
                continue;
            }
            if self.items.contains_key(&key) {
                return Some(key);
            }
        }
        None
    }
}

#[derive(Default)]
struct Counters {
    total_items: AtomicU64,
    evictions: AtomicU64,
    evicted_unfetched: AtomicU64,
    expired_unfetched: AtomicU64,
    reclaimed: AtomicU64,
    get_expired: AtomicU64,
    get_flushed: AtomicU64,
}

pub struct MapStore {
    shards: Vec<Mutex<Shard>>,
    config: EngineConfig,
    memory_limit_bytes: AtomicU64,
    /// Bytes of all live items, every shard: `-m` is one pool, as in memcached.
    total_bytes: AtomicU64,
    cas_counter: AtomicU64,
    oldest_live: AtomicU32,
    oldest_cas: AtomicU64,
    counters: Counters,
}

impl MapStore {
    pub fn new(config: EngineConfig) -> MapStore {
        MapStore {
            shards: (0..SHARD_COUNT).map(|_| Mutex::new(Shard::default())).collect(),
            memory_limit_bytes: AtomicU64::new(config.memory_limit_bytes),
            total_bytes: AtomicU64::new(0),
            config,
            cas_counter: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            oldest_cas: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        let index = (h.finish() as usize) % SHARD_COUNT;
        // A poisoned shard only means another thread panicked mid-operation;
        // every operation leaves the map consistent, so keep serving.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The item under `key` as stored, expired or not, without side effects.
    #[doc(hidden)]
    pub fn probe(&self, key: &[u8]) -> Option<(ItemMeta, usize)> {
        self.shard(key).items.get(key).map(|item| (item.meta, item.value.len()))
    }

    /// The flush epoch `(oldest_live, oldest_cas)` (tests).
    #[doc(hidden)]
    pub fn flush_epoch(&self) -> (RelTime, u64) {
        (self.oldest_live.load(Ordering::Relaxed), self.oldest_cas.load(Ordering::Relaxed))
    }

    fn next_cas(&self) -> u64 {
        if self.config.cas_disabled {
            0
        } else {
            self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1
        }
    }

    fn is_flushed(&self, meta: &ItemMeta, now: RelTime) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        // The CAS decides only within the flush's own second: an item stored
        // later with an explicit lower CAS (meta `E`) is not flushed.
        meta.last_access <= oldest_live
            || (oldest_cas != 0 && meta.cas != 0 && meta.cas < oldest_cas && meta.last_access <= oldest_live.saturating_add(1))
    }

    fn is_live(&self, meta: &ItemMeta, now: RelTime) -> bool {
        !(meta.exptime != 0 && meta.exptime <= now) && !self.is_flushed(meta, now)
    }

    fn item_size(&self, key_len: usize, item: &Item) -> u64 {
        memcached_item_size(key_len, item.meta.flags, item.value.len(), !self.config.cas_disabled) as u64
    }

    /// Drop an expired or flushed item under `key`; returns the live item.
    fn live<'a>(&self, shard: &'a mut Shard, key: &[u8], now: RelTime) -> Option<&'a mut Item> {
        let live = match shard.items.get(key) {
            None => return None,
            Some(item) => self.is_live(&item.meta, now),
        };
        if !live {
            let flushed = self.is_flushed(&shard.items[key].meta, now);
            let counter = if flushed { &self.counters.get_flushed } else { &self.counters.get_expired };
            counter.fetch_add(1, Ordering::Relaxed);
            if let Some(dead) = self.remove(shard, key) {
                self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
                if !dead.meta.fetched && !self.is_flushed(&dead.meta, now) {
                    self.counters.expired_unfetched.fetch_add(1, Ordering::Relaxed);
                }
            }
            return None;
        }
        shard.items.get_mut(key)
    }

    fn remove(&self, shard: &mut Shard, key: &[u8]) -> Option<Item> {
        let item = shard.items.remove(key)?;
        self.total_bytes.fetch_sub(self.item_size(key.len(), &item), Ordering::Relaxed);
        Some(item)
    }

    /// Evict the oldest item of `shard`, or else of another shard that is
    /// not locked right now (never waiting on a second lock). False when
    /// nothing could be evicted.
    fn evict_one(&self, shard: &mut Shard, keep: &[u8]) -> bool {
        if let Some(victim) = shard.oldest(keep) {
            self.count_eviction(self.remove(shard, &victim));
            return true;
        }
        for other in &self.shards {
            if let Ok(mut other) = other.try_lock() {
                if let Some(victim) = other.oldest(keep) {
                    self.count_eviction(self.remove(&mut other, &victim));
                    return true;
                }
            }
        }
        false
    }

    fn count_eviction(&self, evicted: Option<Item>) {
        if let Some(evicted) = evicted {
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            if !evicted.meta.fetched {
                self.counters.evicted_unfetched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The CAS a new item gets: `explicit` (meta `E`) unless CAS is
    /// disabled, else the next from the counter.
    fn assign_cas(&self, explicit: Option<u64>) -> u64 {
        match explicit {
            Some(cas) if !self.config.cas_disabled => cas,
            _ => self.next_cas(),
        }
    }

    /// Link a new item, replacing any old one; evicts to stay under `-m`.
    /// `cas`: an explicit CAS (meta `E`) instead of the counter's next.
    fn link_with(&self, shard: &mut Shard, key: &[u8], mut item: Item, cas: Option<u64>, now: RelTime) -> Result<u64, StoreResult> {
        let size = self.item_size(key.len(), &item);
        let old_size = shard.items.get(key).map(|old| self.item_size(key.len(), old)).unwrap_or(0);
        let limit = self.memory_limit_bytes.load(Ordering::Relaxed);
        while self.total_bytes.load(Ordering::Relaxed).saturating_sub(old_size) + size > limit.max(size) {
            if self.config.evictions_disabled {
                return Err(StoreResult::OutOfMemory);
            }
            if !self.evict_one(shard, key) {
                break;
            }
        }
        item.meta.cas = self.assign_cas(cas);
        item.meta.last_access = now;
        let cas = item.meta.cas;
        self.remove(shard, key);
        self.total_bytes.fetch_add(size, Ordering::Relaxed);
        let key: Box<[u8]> = key.into();
        shard.fifo.push_back(key.clone());
        shard.items.insert(key, item);
        self.counters.total_items.fetch_add(1, Ordering::Relaxed);
        Ok(cas)
    }
}

impl MapStore {
    /// [`Engine::walk`]: a shard's keys are copied when the walk enters it
    /// (this reference store favours simplicity over memory), then looked
    /// up `budget` at a time.
    fn walk_step(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        let Some(mutex) = self.shards.get(cursor.shard) else {
            cursor.done = true;
            return true;
        };
        let mut shard = mutex.lock().unwrap_or_else(|e| e.into_inner());
        if cursor.offset == 0 && cursor.keys.is_empty() {
            cursor.keys = shard.items.keys().cloned().collect();
        }
        let end = (cursor.offset + budget.max(1)).min(cursor.keys.len());
        for key in &cursor.keys[cursor.offset..end] {
            let Some(item) = shard.items.get(key) else { continue };
            let view = ItemView { key, value: &item.value, meta: item.meta };
            if self.is_live(&item.meta, now) {
                visit(view, Visit::Live);
            } else if visit(view, Visit::Expired) {
                if self.remove(&mut shard, key).is_some() {
                    self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        cursor.offset = end;
        if end == cursor.keys.len() {
            cursor.keys = Vec::new();
            cursor.offset = 0;
            cursor.shard += 1;
            cursor.done = cursor.shard == self.shards.len();
        }
        cursor.done
    }
}

impl Engine for MapStore {
    fn walk(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        self.walk_step(cursor, budget, now, visit)
    }

    fn get(
        &self,
        key: &[u8],
        opts: GetOptions,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> crate::GetAction,
    ) -> bool {
        let mut shard = self.shard(key);
        let mut created = false;
        if self.live(&mut shard, key, now).is_none() {
            if opts.vivify.is_none() {
                return false;
            }
            let item = Item { value: Vec::new(), meta: ItemMeta::default() };
            if self.link_with(&mut shard, key, item, opts.vivify_cas, now).is_err() {
                return false;
            }
            created = true;
        }
        let Some(item) = shard.items.get_mut(key) else { return false };
        let mut view_meta = item.meta;
        if created {
            view_meta.exptime = 0;
        }
        let action = visit(ItemView { key, value: &item.value, meta: view_meta }, created);
        if created {
            item.meta.exptime = opts.vivify.unwrap_or(0);
        } else if let Some(exptime) = opts.touch {
            item.meta.exptime = exptime;
        }
        if !opts.no_bump {
            item.meta.fetched = true;
            item.meta.last_access = now;
        }
        if action.set_token_sent {
            item.meta.token_sent = true;
        }
        true
    }

    fn store(&self, req: &StoreRequest<'_>, now: RelTime) -> StoreResult {
        let mut shard = self.shard(req.key);
        if !self.item_size_ok(req.key.len(), req.flags, req.value.len()) {
            if req.mode == StoreMode::Set {
                self.remove(&mut shard, req.key);
            }
            return StoreResult::TooLarge;
        }
        let old = self.live(&mut shard, req.key, now).map(|item| &*item);
        let new_meta = ItemMeta {
            flags: req.flags,
            exptime: req.exptime,
            key_binary: req.key_binary,
            ..ItemMeta::default()
        };
        let item = match (req.mode, old) {
            (StoreMode::Set, _) | (StoreMode::Add, None) | (StoreMode::Replace, Some(_)) => {
                Item { value: req.value.to_vec(), meta: new_meta }
            }
            (StoreMode::Add, Some(_)) => {
                if let Some(item) = shard.items.get_mut(req.key) {
                    item.meta.last_access = now;
                }
                return StoreResult::NotStored;
            }
            (StoreMode::Replace, None) => return StoreResult::NotStored,
            (StoreMode::Cas, None) => return StoreResult::NotFound,
            (StoreMode::Cas, Some(old)) => {
                if req.cas != 0 && req.cas == old.meta.cas {
                    Item { value: req.value.to_vec(), meta: new_meta }
                } else if req.invalidate && req.cas != 0 && req.cas < old.meta.cas {
                    let mut meta = new_meta;
                    meta.exptime = old.meta.exptime;
                    meta.stale = true;
                    meta.token_sent = old.meta.token_sent;
                    Item { value: req.value.to_vec(), meta }
                } else {
                    return StoreResult::Exists;
                }
            }
            (StoreMode::Append | StoreMode::Prepend, None) => match req.vivify_ttl {
                Some(ttl) => Item { value: req.value.to_vec(), meta: ItemMeta { exptime: ttl, ..new_meta } },
                None => return StoreResult::NotStored,
            },
            (StoreMode::Append | StoreMode::Prepend, Some(old)) => {
                if req.cas != 0 && req.cas != old.meta.cas {
                    return StoreResult::Exists;
                }
                if !self.item_size_ok(req.key.len(), old.meta.flags, old.value.len() + req.value.len()) {
                    return StoreResult::NotStored;
                }
                let mut value = Vec::with_capacity(old.value.len() + req.value.len());
                if req.mode == StoreMode::Append {
                    value.extend_from_slice(&old.value);
                    value.extend_from_slice(req.value);
                } else {
                    value.extend_from_slice(req.value);
                    value.extend_from_slice(&old.value);
                }
                // memcached allocates a fresh item: flags and TTL carry over,
                // the binary-key mark does not.
                let meta = ItemMeta { flags: old.meta.flags, exptime: old.meta.exptime, ..ItemMeta::default() };
                Item { value, meta }
            }
        };
        let value_len = item.value.len();
        match self.link_with(&mut shard, req.key, item, req.new_cas, now) {
            Ok(cas) => StoreResult::Stored { cas, value_len },
            Err(refused) => {
                // memcached drops the old value of a failed set.
                if req.mode == StoreMode::Set {
                    self.remove(&mut shard, req.key);
                }
                refused
            }
        }
    }

    fn delta(&self, req: &DeltaRequest<'_>, now: RelTime) -> DeltaResult {
        let mut shard = self.shard(req.key);
        let Some(item) = self.live(&mut shard, req.key, now) else {
            let Some(ttl) = req.vivify else { return DeltaResult::NotFound };
            let value = req.initial.to_string().into_bytes();
            let item = Item { value, meta: ItemMeta { exptime: ttl, ..ItemMeta::default() } };
            return match self.link_with(&mut shard, req.key, item, req.new_cas, now) {
                Ok(cas) => DeltaResult::Ok { value: req.initial, cas, exptime: 0, created: true },
                Err(_) => DeltaResult::NotStored,
            };
        };
        let size = memcached_item_size(req.key.len(), item.meta.flags, item.value.len(), !self.config.cas_disabled);
        if item.value.is_empty() || memcached_chunked(size, self.config.item_size_max_bytes) {
            return DeltaResult::NonNumeric;
        }
        if req.cas != 0 && req.cas != item.meta.cas {
            return DeltaResult::Exists;
        }
        let Some(current) = parse_counter(&item.value) else { return DeltaResult::NonNumeric };
        let value = match req.mode {
            DeltaMode::Incr => current.wrapping_add(req.delta),
            DeltaMode::Decr => current.saturating_sub(req.delta),
        };
        let old_exptime = item.meta.exptime;
        let mut data = Vec::new();
        counter_bytes(value, if req.in_place { item.value.len() } else { 0 }, &mut data);
        let cas = if req.in_place && data.len() == item.value.len() {
            // In place, as memcached does: same length, new CAS, bumped.
            item.value = data;
            item.meta.cas = self.next_cas();
            if let Some(cas) = req.new_cas.filter(|_| !self.config.cas_disabled) {
                item.meta.cas = cas;
            }
            item.meta.last_access = now;
            if let Some(ttl) = req.touch {
                item.meta.exptime = ttl;
            }
            item.meta.cas
        } else {
            // A fresh item, as memcached allocates one: flags and TTL carry
            // over; fetched, stale, token and binary-key marks do not.
            // memcached's ma then applies `T` to the old, unlinked item: the
            // stored counter keeps its TTL.
            let meta = ItemMeta { flags: item.meta.flags, exptime: item.meta.exptime, ..ItemMeta::default() };
            let new_item = Item { value: data, meta };
            // memcached numbers the new item from the counter, then
            // overwrites the CAS with `E`.
            let explicit = req.new_cas.inspect(|_| {
                self.next_cas();
            });
            match self.link_with(&mut shard, req.key, new_item, explicit, now) {
                Ok(cas) => cas,
                Err(_) => return DeltaResult::OutOfMemory,
            }
        };
        DeltaResult::Ok { value, cas, exptime: old_exptime, created: false }
    }

    fn delete(&self, req: &DeleteRequest<'_>, now: RelTime) -> DeleteResult {
        let mut shard = self.shard(req.key);
        let Some(item) = self.live(&mut shard, req.key, now) else { return DeleteResult::NotFound };
        if req.cas.is_some_and(|cas| cas != item.meta.cas) {
            return DeleteResult::Exists;
        }
        if let Some(empty) = req.empty {
            // memcached stores a fresh empty item under the key, with the
            // old CAS unless `E` gives one.
            let meta = ItemMeta { flags: empty.flags, exptime: empty.exptime, ..ItemMeta::default() };
            let cas = req.new_cas.unwrap_or(item.meta.cas);
            if self.link_with(&mut shard, req.key, Item { value: Vec::new(), meta }, Some(cas), now).is_err() {
                return DeleteResult::NotStored;
            }
            if !req.invalidate {
                return DeleteResult::Deleted;
            }
        }
        let Some(item) = shard.items.get_mut(req.key) else { return DeleteResult::Deleted };
        if req.invalidate {
            if let Some(ttl) = req.touch {
                item.meta.exptime = ttl;
            }
            item.meta.stale = true;
            item.meta.token_sent = false;
            item.meta.cas = self.assign_cas(req.new_cas);
            return DeleteResult::Deleted;
        }
        self.remove(&mut shard, req.key);
        DeleteResult::Deleted
    }

    fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool {
        let mut shard = self.shard(key);
        match self.live(&mut shard, key, now) {
            Some(item) => {
                item.meta.exptime = exptime;
                item.meta.fetched = true;
                item.meta.last_access = now;
                true
            }
            None => false,
        }
    }

    fn flush_all(&self, at: RelTime, now: RelTime) {
        let new_oldest = if at > 0 { at } else { now };
        let oldest_live = new_oldest.saturating_sub(1);
        self.oldest_live.store(oldest_live, Ordering::Relaxed);
        if !self.config.cas_disabled && oldest_live <= now {
            self.oldest_cas.store(self.next_cas(), Ordering::Relaxed);
        }
    }

    fn stats(&self) -> EngineStats {
        let mut curr_items = 0;
        for shard in &self.shards {
            curr_items += shard.lock().unwrap_or_else(|e| e.into_inner()).items.len() as u64;
        }
        let bytes = self.total_bytes.load(Ordering::Relaxed);
        EngineStats {
            curr_items,
            total_items: self.counters.total_items.load(Ordering::Relaxed),
            bytes,
            evictions: self.counters.evictions.load(Ordering::Relaxed),
            expired_unfetched: self.counters.expired_unfetched.load(Ordering::Relaxed),
            evicted_unfetched: self.counters.evicted_unfetched.load(Ordering::Relaxed),
            reclaimed: self.counters.reclaimed.load(Ordering::Relaxed),
            get_expired: self.counters.get_expired.load(Ordering::Relaxed),
            get_flushed: self.counters.get_flushed.load(Ordering::Relaxed),
            limit_maxbytes: self.memory_limit_bytes.load(Ordering::Relaxed),
            malloced_bytes: self.total_bytes.load(Ordering::Relaxed) + self.config.initial_malloced_bytes,
            restart: None,
            index_slots: 0,
            index_bytes: 0,
            ghost_bytes: 0,
            ghost_hits: 0,
            charged_index_bytes: 0,
            get_retries: 0,
            get_locked: 0,
            meta_bytes: 0,
            flash_index_bytes: 0,
            flash_buffer_bytes: 0,
        }
    }

    fn item_size_ok(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        memcached_item_size(key_len, flags, value_len, !self.config.cas_disabled) <= self.config.item_size_max_bytes
    }

    fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit_bytes.store(bytes, Ordering::Relaxed);
    }

    fn reset_stats(&self) {
        let c = &self.counters;
        for counter in [&c.total_items, &c.evictions, &c.evicted_unfetched, &c.expired_unfetched, &c.reclaimed, &c.get_expired, &c.get_flushed] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GetAction;

    fn get(store: &MapStore, key: &[u8], now: RelTime) -> Option<(Vec<u8>, ItemMeta)> {
        let mut out = None;
        store.get(key, GetOptions::default(), now, &mut |view, _| {
            out = Some((view.value.to_vec(), view.meta));
            GetAction::default()
        });
        out
    }

    fn set(store: &MapStore, key: &[u8], value: &[u8], mode: StoreMode, cas: u64) -> StoreResult {
        let req = StoreRequest::new(mode, key, value).with_cas(cas);
        store.store(&req, 100)
    }

    #[test]
    fn store_modes_follow_memcached() {
        let store = MapStore::new(EngineConfig::default());
        assert_eq!(set(&store, b"k", b"v", StoreMode::Replace, 0), StoreResult::NotStored);
        assert_eq!(set(&store, b"k", b"v", StoreMode::Add, 0), StoreResult::Stored { cas: 1, value_len: 1 });
        assert_eq!(set(&store, b"k", b"w", StoreMode::Add, 0), StoreResult::NotStored);
        assert_eq!(set(&store, b"k", b"x", StoreMode::Append, 0), StoreResult::Stored { cas: 2, value_len: 2 });
        assert_eq!(set(&store, b"k", b"<", StoreMode::Prepend, 0), StoreResult::Stored { cas: 3, value_len: 3 });
        assert_eq!(get(&store, b"k", 100).unwrap().0, b"<vx");
        assert_eq!(set(&store, b"k", b"y", StoreMode::Cas, 2), StoreResult::Exists);
        assert_eq!(set(&store, b"k", b"y", StoreMode::Cas, 3), StoreResult::Stored { cas: 4, value_len: 1 });
        assert_eq!(set(&store, b"nope", b"y", StoreMode::Cas, 3), StoreResult::NotFound);
    }

    #[test]
    fn counters_pad_in_place_and_clamp() {
        let store = MapStore::new(EngineConfig::default());
        set(&store, b"n", b"100", StoreMode::Set, 0);
        let req = DeltaRequest {
            key: b"n",
            mode: DeltaMode::Decr,
            delta: 1,
            cas: 0,
            vivify: None,
            initial: 0,
            touch: None,
            in_place: true,
            new_cas: None,
        };
        assert!(matches!(store.delta(&req, 100), DeltaResult::Ok { value: 99, .. }));
        assert_eq!(get(&store, b"n", 100).unwrap().0, b"99 ");
        let req = DeltaRequest { delta: 1000, ..req };
        assert!(matches!(store.delta(&req, 100), DeltaResult::Ok { value: 0, .. }));
    }

    #[test]
    fn flush_is_an_epoch() {
        let store = MapStore::new(EngineConfig::default());
        set(&store, b"a", b"1", StoreMode::Set, 0);
        store.flush_all(0, 100);
        assert!(get(&store, b"a", 100).is_none());
        set(&store, b"b", b"1", StoreMode::Set, 0);
        assert!(get(&store, b"b", 100).is_some());
        store.flush_all(105, 100);
        assert!(get(&store, b"b", 103).is_some()); // memcached: oldest_live = at - 1
        assert!(get(&store, b"b", 104).is_none());
    }
}
