//! The flash tier (`-o ext_path`): RAM holds the index, flash holds items.
//!
//! ```text
//!  RAM segments ──evict (S3-FIFO)──► item >= ext_item_size,
//!               (or, idle > ext_item_age,  TTL left >= ext_low_ttl?
//!               the idle writer, age.rs)
//!                                      no ─► evicted as without flash
//!                                      yes ─► record into the write buffer (tier.rs)
//!                                             RAM slot unlinked, flash entry linked
//!  shard: Mutex<Shard>: RAM table (table.rs) + flash index (index.rs, 12 B/entry)
//!         a key is in at most one of them; every write of a key drops its
//!         flash entries (`flash_forget`, in `SegStore::put` and at the start
//!         of every command that changes an item)
//!  flash: pages in FIFO; a reclaimed page's entries go stale at once
//!         (page version) and are swept by `maintain` while the LRU
//!         crawler is on (a read of one is a `miss_from_extstore`)
//! ```
//!
//! The path of a flash read (see `flash_read.rs` for the server's side):
//! `flash_check` finds the key's entry and hands out a [`FlashRead`] (or,
//! for a record still in the write buffer, copies it straight into RAM);
//! the server reads; `finish_flash_read` checks the page version, the
//! record's check, the full key, expiry and flush, then answers a plain
//! read through the visitor, or copies the item into RAM (`into_ram`, a
//! touch, every `ext_recache_rate`-th hit).
//!
//! Reinsertion: once no more than `ext_compact_under` pages are free, a
//! read item whose page is in the oldest quarter of the FIFO is rewritten into the write buffer when read (its bytes are at hand, so
//! reclaim never reads flash): FIFO with reinsertion of items read since
//! they were written, done at read time.
//!
//! Restarts (`-e` with `ext_path`): the flash indexes and the page table
//! are mapped files (`<FILE>.flash/`, beside the memory file), changed in place like the memory
//! file, so a graceful stop or a `kill -9` leaves them as memory held
//! them. The rules that keep an old value from coming back: an entry is
//! dropped *before* the RAM item replacing its key is written (every
//! changing command calls `flash_forget` first), and an item going to
//! flash is linked there *before* its RAM copy is unlinked, so a crash
//! between two steps leaves either nothing or two copies of the same item.
//! The write buffers are mapped files there too (`tier/buffers.rs`), with
//! the page and offset each holds bytes for in the page table: a restart
//! first writes out what they held, so a `kill -9` loses no demoted item
//! whose record was still in a buffer. At start, an entry is kept only if
//! its page has the version it was written under and its record lies in
//! the part of the page written before the stop (or by that replay).
//! Without `-e`, the flash file is reused but starts empty (a new secret
//! makes its old records fail their check).

mod age;
mod budget;
mod compact;
mod index;
mod mapped;
mod page_table;
mod probe;
mod record;
mod scan;
mod serve;
pub(crate) mod small;
mod tier;
mod walk;

use std::sync::atomic::Ordering;

pub use self::age::FlashIdle;
pub use self::compact::FlashCompact;
pub use self::small::FlashRewrite;
pub(crate) use self::index::FlashIndex;
use self::index::Entry;
pub(crate) use self::tier::Tier;
pub(crate) use self::walk::FlashScan;
use super::item::{Header, FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use super::shard::Shard;
use super::table::Loc;
use super::{hash_key, Globals, SegStore};
use crate::flash_read::{FlashId, ReadKind};
use crate::{ExtConfig, ExtStats, FlashFinish, FlashRead, GetAction, GetOptions, ItemView, RelTime};

/// Index slots the background sweep looks at per shard per tick.
const SWEEP_PER_TICK: usize = 1 << 16;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

impl SegStore {
    /// Attach a flash tier (`-o ext_path=...`), before serving. A missing,
    /// unwritable or too small file is an error (the CLI exits 2). The write
    /// buffer is counted in `-m`. Returns a line for the log.
    pub fn attach_flash(&mut self, ext: ExtConfig) -> std::io::Result<String> {
        let secret = {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            xxhash_rust::xxh3::xxh3_64(&[t.to_le_bytes().as_slice(), &std::process::id().to_le_bytes()].concat())
        };
        // With a memory file the flash tier survives restarts too: its page
        // table, indexes and write buffers live in mapped files beside the
        // memory file (`<FILE>.flash/`: on the memory file's tmpfs, the
        // kernel never writes them to the flash device).
        let dir = match (&self.g.file, ext.paths.first()) {
            (Some(file), Some(_)) => {
                let mut name = file.path.clone().into_os_string();
                name.push(".flash");
                let dir = std::path::PathBuf::from(name);
                std::fs::create_dir_all(&dir).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
                Some(dir)
            }
            _ => None,
        };
        let shards = self.shards.len() as u32;
        // Items on flash keep their CAS, TTL and times only on the memory
        // file's clock and counter: recover them only if it was recovered.
        let may_recover = self.restart.is_some_and(|r| r.ok);
        let memory = self.g.memory_limit.load(relaxed());
        let tier = Tier::open(&ext, memory, secret, dir.as_deref().map(|d| (d, shards, may_recover)))?;
        let wbuf = tier.buffer_bytes();
        self.g.config.initial_malloced_bytes += wbuf;
        self.g.allocated.fetch_add(wbuf, relaxed());
        let mut restored = 0;
        for (i, shard) in self.shards.iter().enumerate() {
            let index = match &dir {
                Some(dir) => {
                    let recovering = tier.recovered;
                    FlashIndex::persistent(&dir.join(format!("shard.{i}")), |e| recovering && tier.recover_entry(e.page, e.version4, e.offset, e.blocks))?
                }
                None => FlashIndex::new(),
            };
            restored += index.len();
            budget::charge(&self.g, &tier, index.slot_bytes());
            shard.lock().flash = Some(Box::new(index));
        }
        let small_line = self.attach_small(&ext, &tier, dir.as_deref())?;
        let line = format!(
            "flash tier: {} pages of {} MiB in {} file(s){}; write buffer {} KiB of -m{}{small_line}",
            tier.page_count(),
            tier.page_size >> 20,
            tier.files.len(),
            if tier.direct_io { ", direct I/O" } else { " (the filesystem refused O_DIRECT: page cache I/O)" },
            wbuf >> 10,
            match (&dir, tier.recovered) {
                (Some(_), true) => format!("; restored {restored} items on flash"),
                (Some(_), false) => "; persistent (with the memory file)".to_string(),
                (None, _) => String::new(),
            }
        );
        self.g.flash = Some(tier);
        Ok(line)
    }

    /// Drop every flash entry of `hash` (a write of the key, or a command
    /// that changes it: the RAM copy, if any, is the current one).
    #[inline]
    pub(super) fn flash_forget(&self, shard: &mut Shard, hash: u64) {
        if let (Some(fi), Some(tier)) = (shard.flash.as_mut(), &self.g.flash) {
            fi.remove_all(hash, |e| tier.forget(e.page, e.version4));
        }
        // Tested here so a store without a small store makes no call.
        if self.g.small.is_some() {
            small::shadow(&self.g, shard, hash);
        }
    }

    /// A read's record is no longer its key's current copy: Moved if the
    /// key still has a flash copy (a larger item's entry, a small-store
    /// entry, or a set that may hold it: read again), else Absent (a
    /// `miss_from_extstore`, as memcached counts a replaced item's read).
    pub(super) fn moved_or_absent(&self, shard: &Shard, tier: &Tier, hash: u64) -> FlashFinish {
        let large = shard.flash.as_ref().is_some_and(|fi| fi.find(hash, |e| !tier.is_stale(e.page, e.version4)).is_some());
        if large || small::still_there(&self.g, shard, hash) {
            return FlashFinish::Moved;
        }
        tier.c.miss.fetch_add(1, relaxed());
        FlashFinish::Absent
    }

    /// Count bytes a client stored (write amplification's denominator).
    #[inline]
    pub(super) fn flash_note_stored(&self, shard: &mut Shard, value_len: usize) {
        if let Some(fi) = shard.flash.as_mut() {
            fi.client_bytes += value_len as u64;
        }
    }

    /// [`FlashTier::flash_check`](crate::FlashTier::flash_check); None
    /// without a tier.
    pub fn flash_check(&self, key: &[u8], now: RelTime) -> Option<FlashRead> {
        let tier = self.g.flash.as_ref()?;
        let hash = hash_key(key);
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        // The small store's log first (its entries are a key's newest
        // copy, or say its set's copy is not), then larger items' records,
        // then the sets.
        let sets = match self.small_lookup(shard, tier, key, hash, now) {
            small::Look::Read(read) => return Some(read),
            small::Look::Done => return None,
            small::Look::Shadowed => false,
            small::Look::Next => true,
        };
        if let Some(found) = self.large_check(shard, tier, key, hash, now) {
            return found;
        }
        if sets {
            return self.set_lookup(shard, tier, key, hash, now);
        }
        None
    }

    /// A larger item's record for `hash`: Some(read to make, or None if it
    /// was served from a write buffer), or None if the index has none.
    fn large_check(&self, shard: &mut Shard, tier: &Tier, key: &[u8], hash: u64, now: RelTime) -> Option<Option<FlashRead>> {
        let mut bytes = Vec::new();
        loop {
            let fi = shard.flash.as_mut()?;
            let i = fi.find(hash, |_| true)?;
            let e = fi.get(i);
            if tier.is_stale(e.page, e.version4) {
                // Its page was reclaimed: memcached reads such a header's
                // page, finds another version and counts the miss.
                fi.remove(i);
                tier.c.get_extstore.fetch_add(1, relaxed());
                tier.c.miss.fetch_add(1, relaxed());
                continue;
            }
            let version = tier.version(e.page);
            if e.offset >= tier.written_bytes_of(e.page) && tier.unwritten(e.page, e.offset, &mut bytes, e.blocks) {
                // Still in a write buffer: no I/O, straight back to RAM
                // (memcached also serves it from the buffer, and counts
                // the fetch).
                tier.c.get_extstore.fetch_add(1, relaxed());
                let seed = record::seed(tier.secret, e.page, version);
                self.accept(shard, tier, hash, key, e, &bytes, seed, GetOptions::default(), true, now, &mut |_, _| GetAction::default());
                return Some(None);
            }
            tier.c.get_extstore.fetch_add(1, relaxed());
            tier.c.io_queue.fetch_add(1, relaxed());
            let spot = &tier.spots[e.page as usize];
            let aligned = e.offset & !(tier::BLOCK - 1);
            return Some(Some(FlashRead {
                file: tier.files[spot.file].clone(),
                offset_bytes: spot.base + aligned,
                len_bytes: e.blocks as usize * crate::FLASH_ALIGN_BYTES,
                id: FlashId { key: key.into(), hash, page: e.page, version, at: (e.offset - aligned) as u32, shared: false, kind: ReadKind::Record },
            }));
        }
    }

    /// [`FlashTier::finish_flash_read`](crate::FlashTier::finish_flash_read).
    pub fn finish_flash_read(
        &self,
        read: &FlashRead,
        data: Option<&[u8]>,
        opts: GetOptions,
        into_ram: bool,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> FlashFinish {
        let Some(tier) = &self.g.flash else { return FlashFinish::Absent };
        let _ = tier.c.io_queue.fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(1)));
        let id = &read.id;
        if id.kind != ReadKind::Record {
            return self.finish_small(tier, read, data, serve::Ask { opts, into_ram, now, visit });
        }
        let mut guard = self.lock(id.hash);
        let shard = &mut *guard;
        let spot = &tier.spots[id.page as usize];
        let offset = read.offset_bytes - spot.base + u64::from(id.at);
        let Some(fi) = shard.flash.as_mut() else { return FlashFinish::Absent };
        let Some(i) = fi.find_at(id.hash, id.page, offset) else {
            // Moved (compaction), or replaced, deleted or brought back
            // meanwhile.
            return self.moved_or_absent(shard, tier, id.hash);
        };
        let e = fi.get(i);
        if tier.version(id.page) != id.version {
            fi.remove(i);
            tier.c.miss.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        }
        let Some(data) = data.filter(|d| d.len() >= read.len_bytes && d.len() >= id.at as usize + record::HEADER) else {
            fi.remove(i);
            tier.forget(e.page, e.version4);
            tier.c.miss.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        };
        if id.shared {
            tier.c.reads_shared.fetch_add(1, relaxed());
        }
        let seed = record::seed(tier.secret, id.page, id.version);
        self.accept(shard, tier, id.hash, &id.key, e, &data[id.at as usize..], seed, opts, into_ram, now, visit)
    }

    /// Check a record read for `key` (its entry `e`, still current) and
    /// act on it; see `finish_flash_read`.
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &self,
        shard: &mut Shard,
        tier: &Tier,
        hash: u64,
        key: &[u8],
        e: Entry,
        bytes: &[u8],
        seed: u64,
        opts: GetOptions,
        into_ram: bool,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> FlashFinish {
        let drop_entry = |shard: &mut Shard| {
            if let Some(fi) = shard.flash.as_mut() {
                if let Some(i) = fi.find_at(hash, e.page, e.offset) {
                    fi.remove(i);
                    tier.forget(e.page, e.version4);
                }
            }
        };
        let Some(rec) = record::decode(bytes, seed) else {
            tier.c.badcrc.fetch_add(1, relaxed());
            drop_entry(shard);
            return FlashFinish::Absent;
        };
        if rec.key != key {
            // Another key with the same hash bits: this key is not on flash.
            tier.c.miss.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        }
        let found = serve::Found { key, value: rec.value, meta: rec.meta, len: rec.len };
        self.serve_flash(shard, tier, hash, found, serve::Source::Large(e), serve::Ask { opts, into_ram, now, visit })
    }

    /// [`FlashTier::abandon_flash_read`](crate::FlashTier::abandon_flash_read).
    pub fn abandon_flash_read(&self, _read: &FlashRead) {
        if let Some(tier) = &self.g.flash {
            let _ = tier.c.io_queue.fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(1)));
            tier.c.get_aborted.fetch_add(1, relaxed());
        }
    }

    /// A handed-out read not sent after all: out of the queue, not aborted.
    pub fn withdraw_flash_read(&self, _read: &FlashRead) {
        if let Some(tier) = &self.g.flash {
            let _ = tier.c.io_queue.fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(1)));
        }
    }

    /// The tier's counters ([`FlashTier::ext_stats`](crate::FlashTier::ext_stats));
    /// None without a tier.
    pub fn ext_stats(&self) -> Option<ExtStats> {
        let tier = self.g.flash.as_ref()?;
        let mut stats = tier.stats();
        for shard in self.shards.iter() {
            if let Some(fi) = shard.lock().flash.as_ref() {
                stats.client_bytes_stored += fi.client_bytes;
            }
        }
        let limit = self.g.memory_limit.load(relaxed()).max(1);
        if let Some(small) = self.small_stats() {
            // Items on flash are memcached's extstore objects, small ones too.
            stats.objects_used += small.items_sets + small.items_log;
            stats.small = small;
        }
        stats.bytes_admitted = tier.c.bytes_admitted.load(relaxed()) + stats.small.bytes_admitted;
        stats.index_bytes = tier.index_bytes.load(relaxed()) + self.g.small.as_ref().map_or(0, |s| s.bytes.load(relaxed()));
        stats.memory_pressure = (tier.buffer_bytes() + stats.index_bytes) as f64 / limit as f64;
        Some(stats)
    }

    /// Live items on flash (memcached counts them in `curr_items`).
    pub(super) fn flash_items(&self) -> u64 {
        let large = self.g.flash.as_ref().map_or(0, |t| t.live_items.iter().map(|a| a.load(relaxed())).sum());
        large + self.small_stats().map_or(0, |s| s.items_sets + s.items_log)
    }

    /// Once a tick: sweep stale entries (of reclaimed pages) out of the
    /// flash indexes, a bounded number of slots per shard. That is the
    /// LRU crawler's work in memcached (it unlinks headers whose page is
    /// gone): with the crawler off (`no_lru_crawler`), stale entries stay,
    /// and a read of one is a `miss_from_extstore`, until they are half
    /// the indexes' entries (memory pressure, where memcached's LRU drops
    /// such headers).
    pub(super) fn flash_maintain(&self, crawler: bool) {
        let Some(tier) = &self.g.flash else { return };
        tier.flush_partial();
        for shard in self.shards.iter() {
            small::maintain(&self.g, &mut shard.lock());
        }
        if !crawler && self.flash_entries() as u64 <= 2 * self.flash_items() {
            return;
        }
        for shard in self.shards.iter() {
            if let Some(fi) = shard.lock().flash.as_mut() {
                fi.sweep(SWEEP_PER_TICK, |e| tier.is_stale(e.page, e.version4));
                budget::shrink(&self.g, tier, fi);
            }
        }
    }

    /// `stats reset`: zero what memcached keeps in its thread stats
    /// (`get_extstore`, `get_aborted_extstore`, `recache_from_extstore`,
    /// `miss_from_extstore`, `badcrc_from_extstore`); extstore's own
    /// counters stay, as in memcached.
    pub(super) fn flash_reset_stats(&self) {
        if let Some(tier) = &self.g.flash {
            for c in [&tier.c.get_extstore, &tier.c.get_aborted, &tier.c.recache, &tier.c.miss, &tier.c.badcrc] {
                c.store(0, relaxed());
            }
        }
    }

    /// Graceful stop: write out the write buffer.
    pub(super) fn flash_close(&self) {
        if let Some(tier) = &self.g.flash {
            tier.flush_now();
        }
    }

    /// Bytes the flash indexes are charged in `-m` (checked against their
    /// tables); 0 without flash.
    pub(super) fn flash_index_bytes(&self) -> u64 {
        let Some(tier) = &self.g.flash else { return 0 };
        let tables = self.shards.iter().map(|s| s.lock().flash.as_ref().map_or(0, |f| f.slot_bytes())).sum();
        budget::check(tier, tables)
    }

    /// Entries in the flash indexes (stale ones not yet swept included).
    #[doc(hidden)]
    pub fn flash_entries(&self) -> usize {
        self.shards.iter().map(|s| s.lock().flash.as_ref().map_or(0, |f| f.len())).sum()
    }

    /// Tests, fuzzing and lab tools, never a server: seal the small
    /// store's open log blocks and write out the write buffer now, so that
    /// every item on flash is read from the file.
    #[doc(hidden)]
    pub fn flash_flush(&self) {
        self.flash_seal_open();
        self.flash_close();
    }
}

impl Shard {
    /// Eviction's offer to flash (and the idle writer's, `age.rs`): write
    /// the item at `loc` into the flash tier if it qualifies
    /// (`ext_item_size`, `ext_low_ttl`) and there is room; true if it went
    /// (the caller unlinks it from RAM without counting an eviction). No
    /// age rule: eviction is memory pressure, where memcached's storage
    /// writer ignores `ext_item_age` (`item_age = 0`); the idle writer
    /// checks the age itself.
    pub fn demote_to_flash(&mut self, g: &Globals, loc: Loc, h: &Header, hash: u64, now: RelTime) -> bool {
        let (Some(tier), true) = (&g.flash, self.flash.is_some()) else { return false };
        let t = &tier.tunables;
        let (_, size) = g.item_class(h);
        if size < t.item_size.load(relaxed()) as usize {
            return false;
        }
        let (access, exptime) = {
            let (item, seg) = (self.item(loc), self.seg(loc));
            (h.access(item, seg.create_time), h.exptime(item))
        };
        if exptime != 0 && (exptime <= now || exptime - now < t.low_ttl.load(relaxed())) {
            return false;
        }
        if self.flash_small.is_some() {
            match self.demote_small(g, tier, loc, h, hash, access, exptime) {
                Ok(()) => return true,
                Err(small::Refused::NoRoom) => return false,
                Err(small::Refused::NotHere) => {}
            }
        }
        // The index's slots are counted in -m: no room, no flash.
        if !budget::make_room(g, tier, self.flash.as_mut().expect("flash index")) {
            tier.c.write_fallbacks.fetch_add(1, relaxed());
            return false;
        }
        let (item, seg) = (self.item(loc), self.seg(loc));
        let meta = record::Meta {
            cas: h.cas(item, seg.cas_base),
            flags: h.flags,
            exptime,
            access,
            bits: h.bits & (FETCHED | STALE | TOKEN_SENT | KEY_BINARY),
        };
        let (key, value) = (h.key(item), h.value(item));
        let times = tier::Times { exptime, access };
        let placed = tier.append(tier::Taker::Buffer, record::record_len(key.len(), value.len()), times, |out, seed| {
            record::encode(out, key, value, &meta, seed);
        });
        let Some(p) = placed else {
            tier.c.write_fallbacks.fetch_add(1, relaxed());
            return false;
        };
        tier.c.bytes_admitted.fetch_add((key.len() + value.len()) as u64, relaxed());
        // memcached's header for it: the key, the flags and a 12-byte item_hdr.
        let header = crate::memcached_item_size(key.len(), h.flags, 10, !g.config.cas_disabled);
        self.classes.flash_written(g.config.classes.class_of(header), header);
        // An older small copy of the key is shadowed by this one.
        small::shadow(g, self, hash);
        let fi = self.flash.as_mut().expect("flash index");
        fi.remove_all(hash, |e| tier.forget(e.page, e.version4));
        fi.insert(hash, &Entry { page: p.page, offset: p.offset, blocks: p.blocks, version4: (p.version & 0xf) as u8, freq: 0 });
        true
    }

    /// `demote_to_flash` for an item the small store takes (key and value
    /// within `ext_small_item_max`): into its partition's log block; the
    /// key's larger records, if any, are older and go.
    #[allow(clippy::too_many_arguments)]
    fn demote_small(&mut self, g: &Globals, tier: &Tier, loc: Loc, h: &Header, hash: u64, access: RelTime, exptime: RelTime) -> Result<(), small::Refused> {
        let Some(ss) = self.flash_small.as_deref_mut() else { return Err(small::Refused::NotHere) };
        let seg = &self.segs[loc.seg as usize];
        let item = &seg.buf[loc.offset as usize..];
        let (key, value) = (h.key(item), h.value(item));
        let meta = small::SmallMeta {
            cas: h.cas(item, seg.cas_base),
            flags: h.flags,
            exptime,
            access,
            bits: h.bits & (FETCHED | STALE | TOKEN_SENT | KEY_BINARY),
            rrpv: 0,
        };
        small::admit(g, ss, hash, key, value, &meta)?;
        let header = crate::memcached_item_size(key.len(), h.flags, 10, !g.config.cas_disabled);
        self.classes.flash_written(g.config.classes.class_of(header), header);
        if let Some(fi) = self.flash.as_mut() {
            fi.remove_all(hash, |e| tier.forget(e.page, e.version4));
        }
        Ok(())
    }
}
