//! Reads from the small store, under the key's shard lock (the I/O in
//! between is the server's, as for every flash read: `flash_read.rs`).
//!
//! ```text
//!  small_lookup(key)   index entry?
//!     Log, block in RAM (open) or in a write buffer ─► served now (into RAM)
//!     Log, block on the device ─► Read(4 KiB at the block)
//!     Tomb ─► Shadowed: the set's copy is not current (larger items next)
//!     none ─► Next: larger items' index, then set_lookup
//!  set_lookup(key)     the set's filter says maybe ─► Read(the set)
//!  finish_small        the entry (Log) or the committed extent (Set) is
//!                      still the one read from; the block's check; the key
//!                      ─► serve (../serve.rs); a set without the key is a
//!                      false positive, counted
//! ```
//!
//! A log entry whose record holds another key (41 hash bits shared) is a
//! miss, never a reason to look further: the entry shadows the key's set.

use std::sync::atomic::Ordering;

use super::block::{self, Kind, View};
use super::dir::{BlockAt, RING_OPEN};
use super::geometry::{set_of, LOG_BLOCK};
use super::index::Entry;
use super::write::shadow;
use crate::flash_read::{FlashId, FlashRead, ReadKind};
use crate::seg::flash::record;
use crate::seg::flash::serve::{Ask, Found, Source};
use crate::seg::flash::tier::{Tier, BLOCK};
use crate::seg::shard::Shard;
use crate::seg::SegStore;
use crate::{FlashFinish, GetAction, GetOptions, RelTime};

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// What the small index said of a key.
pub(crate) enum Look {
    Read(FlashRead),
    /// Served (from RAM or a write buffer), or a miss: nothing to read.
    Done,
    /// A tombstone: not in a set.
    Shadowed,
    /// No entry: look at larger items, then the set.
    Next,
}

fn found<'a>(rec: &block::Rec<'a>) -> Found<'a> {
    let m = rec.meta;
    let meta = record::Meta { cas: m.cas, flags: m.flags, exptime: m.exptime, access: m.access, bits: m.bits };
    Found { key: rec.key, value: rec.value, meta, len: rec.len }
}

impl SegStore {
    /// The small index's word on `key` (module docs).
    pub(crate) fn small_lookup(&self, shard: &mut Shard, tier: &Tier, key: &[u8], hash: u64, now: RelTime) -> Look {
        let Some(small) = self.g.small.as_ref() else { return Look::Next };
        let Some(ss) = shard.flash_small.as_deref_mut() else { return Look::Next };
        let (slot, index, freq) = match ss.index.find(hash) {
            None => return Look::Next,
            Some((_, Entry::Tomb)) => return Look::Shadowed,
            Some((_, Entry::Log { slot, index, freq })) => (slot, index, freq),
        };
        let part = small.geo.place(hash).part;
        let ring = ss.dir.ring(part)[usize::from(slot)];
        tier.c.get_extstore.fetch_add(1, relaxed());
        let src = Source::Log { freq };
        if ring == RING_OPEN {
            // In the partition's open block, in RAM: back to RAM at once.
            let bytes = ss.dir.open_block(part).to_vec();
            let rec = View::unchecked(&bytes).and_then(|v| v.records().nth(usize::from(index)));
            return match rec.filter(|r| r.key == key) {
                Some(rec) => {
                    let mut nothing = |_: crate::ItemView<'_>, _: bool| GetAction::default();
                    self.serve_flash(shard, tier, hash, found(&rec), src, Ask { opts: GetOptions::default(), into_ram: true, now, visit: &mut nothing });
                    Look::Done
                }
                None => {
                    tier.c.miss.fetch_add(1, relaxed());
                    Look::Done
                }
            };
        }
        let Some(at) = BlockAt::unpack(ring).filter(|b| tier.version(b.page) as u16 == b.version16) else {
            // The block is gone (a failed write, a damaged restart).
            shadow(&self.g, shard, hash);
            tier.c.miss.fetch_add(1, relaxed());
            return Look::Shadowed;
        };
        let version = tier.version(at.page);
        let offset = u64::from(at.block) * BLOCK;
        let kind = ReadKind::Log { part: part as u32, slot, index, placed: ring };
        if offset + BLOCK > tier.written_bytes_of(at.page) {
            let mut bytes = Vec::new();
            if tier.unwritten(at.page, offset, &mut bytes, 1) && bytes.len() >= LOG_BLOCK {
                let mut nothing = |_: crate::ItemView<'_>, _: bool| GetAction::default();
                let ask = Ask { opts: GetOptions::default(), into_ram: true, now, visit: &mut nothing };
                self.finish_block(shard, tier, key, hash, &bytes, at.page, version, at.block, kind, ask);
                return Look::Done;
            }
        }
        small.c.log_reads.fetch_add(1, relaxed());
        tier.c.io_queue.fetch_add(1, relaxed());
        Look::Read(read_at(tier, key, hash, at.page, version, at.block, LOG_BLOCK, kind))
    }

    /// The read of `key`'s set, if its filter says it may be there.
    pub(crate) fn set_lookup(&self, shard: &mut Shard, tier: &Tier, key: &[u8], hash: u64, now: RelTime) -> Option<FlashRead> {
        let small = self.g.small.as_ref()?;
        let ss = shard.flash_small.as_deref()?;
        let place = small.geo.place(hash);
        let part = &ss.parts[place.part];
        if part.commit.sets == 0 {
            return None;
        }
        let set = set_of(place.frac, part.commit.sets);
        if !part.summaries.may_contain(set, hash) {
            return None;
        }
        let (page, block) = part.commit.unit_at((set * small.geo.set_units()) as u32)?;
        let version = tier.version(page);
        let kind = ReadKind::Set { part: place.part as u32, seq: part.commit.seq, set: set as u32 };
        tier.c.get_extstore.fetch_add(1, relaxed());
        let offset = u64::from(block) * BLOCK;
        if offset + small.geo.set_bytes as u64 > tier.written_bytes_of(page) {
            let mut bytes = Vec::new();
            if tier.unwritten(page, offset, &mut bytes, small.geo.set_units() as u32) && bytes.len() >= small.geo.set_bytes {
                let mut nothing = |_: crate::ItemView<'_>, _: bool| GetAction::default();
                let ask = Ask { opts: GetOptions::default(), into_ram: true, now, visit: &mut nothing };
                self.finish_block(shard, tier, key, hash, &bytes, page, version, block, kind, ask);
                return None;
            }
        }
        small.c.set_reads.fetch_add(1, relaxed());
        tier.c.io_queue.fetch_add(1, relaxed());
        Some(read_at(tier, key, hash, page, version, block, small.geo.set_bytes, kind))
    }

    /// Finish a read of the small store (`FlashTier::finish_flash_read`).
    pub(crate) fn finish_small(&self, tier: &Tier, read: &FlashRead, data: Option<&[u8]>, ask: Ask<'_>) -> FlashFinish {
        let id = &read.id;
        let mut guard = self.lock(id.hash);
        let shard = &mut *guard;
        let Some(data) = data.filter(|d| d.len() >= read.len_bytes) else {
            tier.c.miss.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        };
        if id.shared {
            tier.c.reads_shared.fetch_add(1, relaxed());
        }
        let spot = &tier.spots[id.page as usize];
        let block = ((read.offset_bytes - spot.base) / BLOCK) as u32;
        self.finish_block(shard, tier, &id.key, id.hash, &data[..read.len_bytes], id.page, id.version, block, id.kind, ask)
    }

    /// Check that what `kind` was read from is still current, open the
    /// block and serve `key`'s record from it.
    #[allow(clippy::too_many_arguments)]
    fn finish_block(
        &self,
        shard: &mut Shard,
        tier: &Tier,
        key: &[u8],
        hash: u64,
        bytes: &[u8],
        page: u32,
        version: u32,
        block: u32,
        kind: ReadKind,
        ask: Ask<'_>,
    ) -> FlashFinish {
        let (Some(small), Some(ss)) = (self.g.small.as_ref(), shard.flash_small.as_deref()) else { return FlashFinish::Absent };
        let current = tier.version(page) == version;
        let seed = block::seed(record::seed(tier.secret, page, version), block);
        let (src, view) = match kind {
            ReadKind::Log { part, slot, index, placed } => {
                let entry = ss.index.find(hash).map(|f| f.1);
                let still = matches!(entry, Some(Entry::Log { slot: s, index: i, .. }) if s == slot && i == index);
                if !current || !still || ss.dir.ring(part as usize)[usize::from(slot)] != placed {
                    // Merged into a set, replaced or deleted meanwhile.
                    return self.moved_or_absent(shard, tier, hash);
                }
                let freq = match entry {
                    Some(Entry::Log { freq, .. }) => freq,
                    _ => 0,
                };
                (Source::Log { freq }, View::open(bytes, seed, Kind::Log))
            }
            ReadKind::Set { part, seq, set } => {
                let shadowed = ss.index.find(hash).is_some() || shard.flash.as_ref().is_some_and(|fi| fi.find(hash, |_| true).is_some());
                if !current || shadowed || ss.parts[part as usize].commit.seq != seq {
                    // Rewritten by a merge, or a newer copy meanwhile.
                    return self.moved_or_absent(shard, tier, hash);
                }
                (Source::Set { part: part as usize, set: set as usize, index: 0 }, View::open(bytes, seed, Kind::Set))
            }
            ReadKind::Record => return FlashFinish::Absent,
        };
        let Some(view) = view else {
            tier.c.badcrc.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        };
        let rec = match kind {
            ReadKind::Log { index, .. } => view.records().nth(usize::from(index)).filter(|r| r.key == key),
            _ => view.find(key),
        };
        let Some(rec) = rec else {
            if let Source::Set { .. } = src {
                small.c.false_positives.fetch_add(1, relaxed());
            }
            tier.c.miss.fetch_add(1, relaxed());
            return FlashFinish::Absent;
        };
        let src = match src {
            Source::Set { part, set, .. } => {
                small.c.set_hits.fetch_add(1, relaxed());
                Source::Set { part, set, index: rec.index }
            }
            other => {
                small.c.log_hits.fetch_add(1, relaxed());
                other
            }
        };
        self.serve_flash(shard, tier, hash, found(&rec), src, ask)
    }
}

/// A read of `len` bytes at 4 KiB block `block` of `page`.
#[allow(clippy::too_many_arguments)]
fn read_at(tier: &Tier, key: &[u8], hash: u64, page: u32, version: u32, block: u32, len: usize, kind: ReadKind) -> FlashRead {
    let spot = &tier.spots[page as usize];
    FlashRead {
        file: tier.files[spot.file].clone(),
        offset_bytes: spot.base + u64::from(block) * BLOCK,
        len_bytes: len,
        id: FlashId { key: key.into(), hash, page, version, at: 0, shared: false, kind },
    }
}
