//! `SegStore` as an [`Engine`]: each operation hashes its key, locks its
//! shard, and runs on the shard's index and segments (`mod.rs` has the
//! helpers they share: `live`, `put`, `modify`, `meta`). With a flash
//! tier attached it is a [`FlashTier`] too, whose operations live in
//! `flash/` and are only forwarded here.

use std::sync::atomic::Ordering;

use super::item::{FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use super::shard::{self, Gone};
use super::{hash_key, sample, Change, FlashIdle, SegStore};
use crate::{
    counter_bytes, memcached_chunked, memcached_item_size, parse_counter, DeleteRequest, DeleteResult, DeltaMode,
    DeltaRequest, DeltaResult, Engine, EngineStats, ExtStats, FlashFinish, FlashRead, FlashTier, GetAction, GetOptions,
    ItemView, RelTime, StoreMode, StoreRequest, StoreResult, Visit, WalkCursor,
};

impl Engine for SegStore {
    fn prefetch(&self, hashes: &[u64]) {
        self.prefetch_hashes(hashes);
    }

    fn read_batch(&self) -> crate::ReadBatch {
        crate::ReadBatch { _pin: Some(super::batch::BatchPin::new()) }
    }

    fn get(&self, key: &[u8], opts: GetOptions, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction) -> bool {
        // A read that may create the item hashes the key itself: a wrong
        // hash would only miss elsewhere, but a wrong one stored would not.
        let hash = match opts.hash.filter(|_| opts.vivify.is_none()) {
            Some(hash) => {
                debug_assert_eq!(hash, hash_key(key), "GetOptions::hash is the key's");
                hash
            }
            None => hash_key(key),
        };
        if !opts.uncounted {
            self.sample_get(hash);
        }
        // Without the lock where nothing must be written (read.rs).
        if opts.touch.is_none() && opts.vivify.is_none() {
            if let Some(hit) = self.get_optimistic(key, hash, opts, now, visit) {
                return hit;
            }
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
            let cls = self.g.item_class(&h).0;
            if opts.touch.is_some() && !created {
                shard.classes.hit(cls, queue, true);
            } else {
                self.hits.hit(cls, queue);
            }
        }
        let item = shard.item(loc);
        let action = visit(ItemView { key, value: h.value(item), meta }, created);
        let mut change = Change { exptime: if created { None } else { opts.touch }, ..Change::default() };
        if !opts.no_bump {
            super::read::bump_read(shard, slot, loc, meta.fetched, meta.last_access, now, &mut change);
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
            let shard = shard.lock();
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
            stats.charged_index_bytes += shard.per_item_bytes() as u64;
            stats.meta_bytes += (shard.meta_bytes() + shard.view.bytes()) as u64;
        }
        stats.meta_bytes += (std::mem::size_of_val(&*self.shards) + self.hits.bytes() + self.g.walk_buffer_bytes.load(Ordering::Relaxed)) as u64;
        stats.meta_bytes += self.g.small.as_ref().map_or(0, |s| s.merge_bytes.load(Ordering::Relaxed));
        if let Some(tier) = self.g.flash.as_ref() {
            // The small store's index, filters and directories count as flash indexes.
            stats.flash_index_bytes = tier.index_bytes.load(Ordering::Relaxed) + self.g.small.as_ref().map_or(0, |s| s.bytes.load(Ordering::Relaxed));
            stats.flash_buffer_bytes = tier.buffer_bytes();
        }
        stats.curr_items += self.flash_items();
        (stats.get_retries, stats.get_locked) = self.hits.read_path();
        stats.restart = self.restart;
        stats.malloced_bytes = self.g.allocated.load(Ordering::Relaxed);
        stats
    }

    fn class_stats(&self, now: RelTime) -> crate::ClassStats {
        let mut out = crate::ClassStats::empty(self.g.config.track_sizes);
        for shard in self.shards.iter() {
            let shard = shard.lock();
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
        self.hits.add_to(&mut out);
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
            let mut shard = shard.lock();
            shard.counters = shard::Counters::default();
            shard.classes.reset();
        }
        self.hits.reset();
        self.flash_reset_stats();
    }

    fn walk(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        self.walk_step(cursor, budget, now, visit)
    }

    fn maintain(&self, now: RelTime, reclaim_expired: bool) {
        for shard in self.shards.iter().filter(|_| reclaim_expired) {
            shard.lock().reclaim_expired(&self.g, now, shard::RECLAIM_PER_TICK, None);
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
        let guards: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();
        let mut buffers = guards.iter().flat_map(|s| s.segs.iter().map(|seg| &seg.buf));
        file.close(self.file_state(), &mut buffers)
    }

    fn flash(&self) -> Option<&dyn FlashTier> {
        self.g.flash.is_some().then_some(self as &dyn FlashTier)
    }
}

/// The flash tier's operations, for the server (through [`Engine::flash`],
/// which hands this out only with a tier attached). Each forwards to the
/// `SegStore` method of the same name (`flash/mod.rs`, `flash/age.rs`),
/// which a caller holding the concrete store (the tests) may call itself.
impl FlashTier for SegStore {
    fn flash_check(&self, key: &[u8], now: RelTime) -> Option<FlashRead> {
        SegStore::flash_check(self, key, now)
    }

    fn finish_flash_read(
        &self,
        read: &FlashRead,
        data: Option<&[u8]>,
        opts: GetOptions,
        into_ram: bool,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> FlashFinish {
        SegStore::finish_flash_read(self, read, data, opts, into_ram, now, visit)
    }

    fn abandon_flash_read(&self, read: &FlashRead) {
        SegStore::abandon_flash_read(self, read)
    }

    fn withdraw_flash_read(&self, read: &FlashRead) {
        SegStore::withdraw_flash_read(self, read)
    }

    fn flash_write_idle(&self, now: RelTime, state: &mut FlashIdle) -> u64 {
        SegStore::flash_write_idle(self, now, state)
    }

    fn flash_rewrite(&self, now: RelTime, state: &mut crate::FlashRewrite) -> bool {
        SegStore::flash_rewrite(self, now, state)
    }

    fn flash_rewrite_wait(&self, max: std::time::Duration) {
        SegStore::flash_rewrite_wait(self, max)
    }

    fn flash_rewrite_wake(&self) {
        SegStore::flash_rewrite_wake(self)
    }

    fn flash_compact(&self, now: RelTime, state: &mut crate::FlashCompact) -> bool {
        SegStore::flash_compact(self, now, state)
    }

    fn flash_compact_wait(&self, max: std::time::Duration) {
        SegStore::flash_compact_wait(self, max)
    }

    fn ext_stats(&self) -> ExtStats {
        // Reached through `Engine::flash`, so a tier is attached; called
        // on a store without one, the tier it does not have is empty.
        SegStore::ext_stats(self).unwrap_or_default()
    }

    fn flash_flush(&self) {
        SegStore::flash_flush(self)
    }
}
