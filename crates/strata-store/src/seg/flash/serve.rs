//! Serving an item read back from flash, wherever it lay: a larger item's
//! record in the log (`Source::Large`), a small item's record in a log
//! block or in a set (`Source::Log`, `Source::Set`). The bytes were read,
//! checked and matched to the key by the caller, under the shard lock;
//! this is what every kind shares:
//!
//! ```text
//!  flushed or expired ─► its entry dropped, Absent
//!  into RAM (a touch, meta N, `into_ram`, or the ext_recache_rate-th hit)
//!                     ─► put into RAM (drops flash entries), InRam
//!  else               ─► shown to the visitor (a hit counted), Visited;
//!                        the token it may win written into RAM; the read
//!                        marked on its source (entry frequency, which the
//!                        compactor's rescues go by, or the set's hit bit)
//! ```

use std::sync::atomic::Ordering;

use super::index::Entry;
use super::record;
use super::small;
use super::tier::Tier;
use crate::class_stats::Queue;
use crate::seg::item::{FETCHED, KEY_BINARY, STALE, TOKEN_SENT};
use crate::seg::shard::{Shard, Spec};
use crate::seg::SegStore;
use crate::{FlashFinish, GetAction, GetOptions, ItemMeta, ItemView, RelTime};

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Where the item was read from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source {
    /// A record of the log, and its index entry (still current).
    Large(Entry),
    /// A record of a partition's log block (`freq`: its entry's reads).
    Log { freq: u8 },
    /// Record `index` of set `set` of partition `part`.
    Set { part: usize, set: usize, index: usize },
}

/// The item as read: its value and fields.
pub(crate) struct Found<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: record::Meta,
    /// Bytes it took on flash (`extstore_bytes_read`).
    pub len: usize,
}

/// What a read asked for.
pub(crate) struct Ask<'v> {
    pub opts: GetOptions,
    pub into_ram: bool,
    pub now: RelTime,
    pub visit: &'v mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
}

impl SegStore {
    /// Serve `item` (module docs).
    pub(crate) fn serve_flash(&self, shard: &mut Shard, tier: &Tier, hash: u64, item: Found<'_>, src: Source, ask: Ask<'_>) -> FlashFinish {
        let Found { key, value, meta: m, len } = item;
        let Ask { opts, into_ram, now, visit } = ask;
        tier.c.objects_read.fetch_add(1, relaxed());
        tier.c.bytes_read.fetch_add(len as u64, relaxed());
        let flushed = self.g.is_flushed(m.access, m.cas, now);
        if flushed || (m.exptime != 0 && m.exptime <= now) {
            if flushed {
                shard.counters.get_flushed += 1;
            } else {
                shard.counters.get_expired += 1;
            }
            self.drop_source(shard, tier, hash, src);
            return FlashFinish::Absent;
        }
        let rate = tier.tunables.recache_rate.load(relaxed());
        let due = !into_ram && rate != 0 && tier.c.recache_counter.fetch_add(1, relaxed()) % u64::from(rate) == 0;
        let spec = |bits: u8, access: RelTime| Spec {
            bits,
            key_len: key.len(),
            value_len: value.len(),
            cas: m.cas,
            access,
            flags: m.flags,
            exptime: m.exptime,
        };
        if into_ram || due || opts.touch.is_some() || opts.vivify.is_some() {
            // `put` drops the key's flash entries once the RAM copy is linked.
            // A set's copy stays shadowed (the tombstone `put` left): reads
            // of the RAM copy change its access time and marks.
            if self.put(shard, key, hash, &spec(m.bits, m.access), &[value], None, now) {
                tier.c.recache.fetch_add(1, relaxed());
                return FlashFinish::InRam;
            }
            if into_ram || opts.touch.is_some() || opts.vivify.is_some() {
                return FlashFinish::Absent;
            }
        }
        if !opts.uncounted {
            let cls = self.g.request_class(key.len(), m.flags, value.len());
            shard.classes.hit(cls, Queue::Warm, false);
        }
        let read_before = match src {
            Source::Large(e) => e.freq > 0,
            Source::Log { freq, .. } => freq > 0,
            Source::Set { part, set, index } => shard.flash_small.as_ref().is_some_and(|s| s.parts[part].summaries.was_hit(set, index)),
        };
        let shown = ItemMeta {
            flags: m.flags,
            exptime: m.exptime,
            cas: self.g.shown_cas(m.cas),
            last_access: m.access,
            // Read since it went to flash: its source's read mark.
            fetched: m.bits & FETCHED != 0 || read_before,
            stale: m.bits & STALE != 0,
            token_sent: m.bits & TOKEN_SENT != 0,
            key_binary: m.bits & KEY_BINARY != 0,
        };
        let action = visit(ItemView { key, value, meta: shown }, false);
        if action.set_token_sent {
            self.put(shard, key, hash, &spec(m.bits | TOKEN_SENT | FETCHED, now), &[value], None, now);
            return FlashFinish::Visited;
        }
        if !opts.no_bump {
            self.bump_source(shard, hash, src);
        }
        FlashFinish::Visited
    }

    /// An expired or flushed item: its entry goes (a set's record waits
    /// for its partition's next rewrite, which drops it).
    fn drop_source(&self, shard: &mut Shard, tier: &Tier, hash: u64, src: Source) {
        match src {
            Source::Large(e) => {
                if let Some(fi) = shard.flash.as_mut() {
                    if let Some(i) = fi.find_at(hash, e.page, e.offset) {
                        fi.remove(i);
                        tier.forget(e.page, e.version4);
                    }
                }
            }
            Source::Log { .. } => small::drop_log_entry(&self.g, shard, hash),
            Source::Set { .. } => {}
        }
    }

    /// Mark a read on its source.
    fn bump_source(&self, shard: &mut Shard, hash: u64, src: Source) {
        match src {
            Source::Large(e) => {
                let Some(fi) = shard.flash.as_mut() else { return };
                let Some(i) = fi.find_at(hash, e.page, e.offset) else { return };
                fi.set(i, hash, &Entry { freq: (e.freq + 1).min(3), ..e });
            }
            Source::Log { .. } => small::bump_log_entry(shard, hash),
            Source::Set { part, set, index } => {
                if let Some(ss) = shard.flash_small.as_mut() {
                    ss.parts[part].summaries.hit(set, index);
                }
            }
        }
    }
}
