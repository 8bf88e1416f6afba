//! The small store's part of a key dump's walk (`lru_crawler
//! metadump|mgdump`, after the RAM shards and the larger items' pages):
//! every partition, its sets then its log blocks.
//!
//! ```text
//!  shard by shard, partition by partition:
//!    sets:  each set read (4 KiB, the dump's own thread, no lock held);
//!           a record is shown if the partition's extent is still the one
//!           it was read from, its key has no index entry (not shadowed by a
//!           newer copy or a tombstone), is not in RAM (shown there), and is
//!           neither expired nor flushed
//!    log:   each ring slot's block (the open one copied under the lock);
//!           a record is shown if its key's entry names that slot and record
//! ```
//!
//! Its device cost: one read of every set and log block (sequential within
//! an extent), the small store's whole size, at the dump's pace. Like the
//! rest of the walk it is not a snapshot: an item moved by a rewrite while
//! the walk runs may be shown once, twice or not at all.

use std::os::unix::fs::FileExt;

use super::block::{self, Kind, View};
use super::dir::{BlockAt, RING_OPEN};
use super::geometry::LOG_BLOCK;
use super::index::Entry;
use super::slot_of;
use crate::flash_read::FlashBuf;
use crate::seg::flash::record;
use crate::seg::flash::tier::BLOCK;
use crate::seg::{hash_key, SegStore};
use crate::walk::Visit;
use crate::{ItemMeta, ItemView, RelTime};

/// Where a walk stands in the small store.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmallScan {
    shard: usize,
    part: usize,
    /// In the partition's log (else its sets).
    log: bool,
    /// The next set, or ring position counted from the head.
    at: u32,
}

/// A block read for the walk, and what names it.
enum Read {
    Set { seq: u64, bytes: FlashBuf, seed: u64 },
    Log { slot: u16, bytes: Vec<u8>, seed: Option<u64> },
}

impl SegStore {
    /// Show up to about `budget` records; true when every partition is done.
    pub(crate) fn walk_small_step(&self, scan: &mut SmallScan, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        if self.g.small.is_none() {
            return true;
        }
        let mut looked = 0;
        while looked < budget {
            let Some(read) = self.next_block(scan) else { return true };
            looked += self.show_block(scan, read, now, visit).max(1);
        }
        false
    }

    /// The next block to look at (moving the cursor past it); None when
    /// the walk is done.
    fn next_block(&self, scan: &mut SmallScan) -> Option<Read> {
        let tier = self.g.flash.as_ref()?;
        let geo = self.g.small.as_ref()?.geo;
        loop {
            let padded = self.shards.get(scan.shard)?;
            let guard = padded.lock();
            let Some(ss) = guard.flash_small.as_deref() else { return None };
            let Some(p) = ss.parts.get(scan.part) else {
                *scan = SmallScan { shard: scan.shard + 1, ..SmallScan::default() };
                continue;
            };
            let at = scan.at;
            scan.at += 1;
            if !scan.log {
                if at >= p.commit.sets {
                    *scan = SmallScan { log: true, ..*scan };
                    scan.at = 0;
                    continue;
                }
                let Some((page, block)) = p.commit.unit_at(at * geo.set_units() as u32) else { continue };
                let (seq, version) = (p.commit.seq, tier.version(page));
                drop(guard);
                let spot = &tier.spots[page as usize];
                let mut bytes = FlashBuf::unpooled(geo.set_bytes);
                if tier.files[spot.file].read_exact_at(&mut bytes, spot.base + u64::from(block) * BLOCK).is_err() {
                    continue;
                }
                return Some(Read::Set { seq, bytes, seed: block::seed(record::seed(tier.secret, page, version), block) });
            }
            if at >= p.ring_len() {
                *scan = SmallScan { part: scan.part + 1, ..*scan };
                scan.log = false;
                scan.at = 0;
                continue;
            }
            let slot = slot_of(p.head.wrapping_add(at));
            let value = ss.dir.ring(scan.part)[slot];
            if value == RING_OPEN {
                return Some(Read::Log { slot: slot as u16, bytes: ss.dir.open_block(scan.part).to_vec(), seed: None });
            }
            let Some(b) = BlockAt::unpack(value) else { continue };
            drop(guard);
            let version = tier.version(b.page);
            if version as u16 != b.version16 {
                continue;
            }
            let offset = u64::from(b.block) * BLOCK;
            let mut bytes = Vec::new();
            if offset + BLOCK > tier.written_bytes_of(b.page) && tier.unwritten(b.page, offset, &mut bytes, 1) {
                bytes.truncate(LOG_BLOCK);
            } else {
                let spot = &tier.spots[b.page as usize];
                let mut buf = FlashBuf::unpooled(LOG_BLOCK);
                if tier.files[spot.file].read_exact_at(&mut buf, spot.base + offset).is_err() {
                    continue;
                }
                bytes = buf.to_vec();
            }
            return Some(Read::Log { slot: slot as u16, bytes, seed: Some(block::seed(record::seed(tier.secret, b.page, version), b.block)) });
        }
    }

    /// Show the live records of `read`; how many records it held.
    fn show_block(&self, scan: &SmallScan, read: Read, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> usize {
        let view = match &read {
            Read::Set { bytes, seed, .. } => View::open(bytes, *seed, Kind::Set),
            Read::Log { bytes, seed: Some(seed), .. } => View::open(bytes, *seed, Kind::Log),
            Read::Log { bytes, seed: None, .. } => View::unchecked(bytes),
        };
        let Some(view) = view else { return 1 };
        let mut shown = Vec::new();
        {
            let guard = self.shards[scan.shard].lock();
            let Some(ss) = guard.flash_small.as_deref() else { return 1 };
            for rec in view.records() {
                let hash = hash_key(rec.key);
                let entry = ss.index.find(hash).map(|f| f.1);
                let live = match &read {
                    Read::Set { seq, .. } => {
                        entry.is_none()
                            && ss.parts[scan.part].commit.seq == *seq
                            && guard.flash.as_ref().is_none_or(|fi| fi.find(hash, |_| true).is_none())
                            && guard.find(rec.key, hash).is_none()
                    }
                    Read::Log { slot, .. } => matches!(entry, Some(Entry::Log { slot: s, index: i, .. }) if s == *slot && usize::from(i) == rec.index),
                };
                let m = rec.meta;
                if live && !self.g.is_flushed(m.access, m.cas, now) && (m.exptime == 0 || m.exptime > now) {
                    shown.push(rec);
                }
            }
        }
        for rec in &shown {
            let m = rec.meta;
            let meta = ItemMeta {
                flags: m.flags,
                exptime: m.exptime,
                cas: self.g.shown_cas(m.cas),
                last_access: m.access,
                fetched: m.bits & crate::seg::item::FETCHED != 0,
                stale: m.bits & crate::seg::item::STALE != 0,
                token_sent: m.bits & crate::seg::item::TOKEN_SENT != 0,
                key_binary: m.bits & crate::seg::item::KEY_BINARY != 0,
            };
            visit(ItemView { key: rec.key, value: rec.value, meta }, Visit::Live);
        }
        view.records().count()
    }
}
