//! The small store: items of up to `ext_small_item_max` bytes (key and
//! value) on flash for a few bits of RAM each, inside the flash tier.
//!
//! ```text
//!  RAM eviction ─► small item ─► its partition's open log block (4 KiB, RAM)
//!                                  full ─► appended to the tier's log (a "log block")
//!  small index (per shard, 8 B an entry): key ─► ring slot + record, or a tombstone
//!
//!  partition p (a range of h32, owned by one shard):
//!    extent: sets[0..N) │ filters      one contiguous stretch of the log,
//!            (set_bytes each)          rewritten whole by a merge
//!    ring:   log block, log block, …   the log blocks written since the last merge
//!    RAM:    per set a Bloom filter and hit bits (summary.rs), 48 B a 4 KiB set
//!
//!  merge p (merge.rs, the rewrite thread):
//!    read the ring's blocks and the old extent ─► keep each key's newest
//!    record (dropped: tombstoned, replaced, expired, flushed) ─► sets,
//!    N chosen for 75% fill within the partition's share ─► append the new
//!    extent at the log's head ─► commit (dir.rs) ─► the old extent and
//!    the ring's blocks are free
//! ```
//!
//! The log is the flash tier's (`tier.rs`): pages written in order, the
//! oldest reclaimed first. Log blocks and extents go there beside larger
//! items' records. A page is reclaimed only once the small store holds
//! nothing on it (`Inner::small_live`); the rewrite thread keeps it so by
//! merging, ahead of the tail, every partition with data near it
//! (`sched.rs`). So each partition is rewritten about once per turn of
//! the log, and its sets take in everything its keys got meanwhile: the
//! writes a set costs are spread over the items that arrived for it.
//! Set and log I/O are sequential or single blocks; nothing is rewritten
//! in place.
//!
//! Reads (read.rs): RAM, then the small index (a log entry: one block
//! read; a tombstone: not here), then the large items' index, then the
//! set's filter (maybe: one set read). A miss reads the device only on a
//! false positive.
//!
//! Never an old value: a key's record in a set is current only if no
//! index entry shadows it. Every change of a key (`flash_forget`) leaves a
//! tombstone when its set may hold it (its filter says so, or a merge of
//! its partition is under way); a merge drops tombstoned records and
//! removes a tombstone only once the new extent holds no record of the key.
//! The log block a record is read from, and the extent a set is read from,
//! are checked again under the shard lock when the read is finished.
//!
//! Restarts (`-e`): the small index and the directory (commits, rings,
//! open blocks) are mapped files like the flash index; the filters are
//! read back from each extent. Entries naming a log block that is not
//! on the device as written are dropped (misses, never old values).

mod block;
mod budget;
mod build;
mod dir;
mod extent_read;
mod geometry;
mod index;
mod merge;
mod read;
mod sched;
mod summary;
mod walk;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

pub(crate) use self::geometry::Geometry;
pub(crate) use self::block::Meta as SmallMeta;
pub(crate) use self::budget::meta_room;
pub(crate) use self::read::Look;
pub use self::sched::FlashRewrite;
pub(crate) use self::walk::SmallScan;
pub(crate) use self::write::{admit, bump_log_entry, drop_log_entry, maintain, shadow, still_there, Refused};
use self::dir::{BlockAt, Commit, Dir, RING_OPEN};
use self::geometry::LOG_BLOCK;
use self::index::{Entry, SmallIndex, RING_SLOTS};
use self::summary::Summaries;
use super::tier::{Tier, BLOCK};

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// One partition's state in RAM (module docs); its shard's lock covers it.
#[derive(Debug, Default)]
pub(crate) struct Part {
    /// The committed extent (a copy of the directory's slot).
    pub commit: Commit,
    pub summaries: Summaries,
    /// Ring positions: slots `head..tail` (mod RING_SLOTS) hold log blocks.
    pub head: u32,
    pub tail: u32,
    /// The slot at `tail - 1` is the open block (in the directory, in RAM).
    pub open: bool,
    /// A merge of this partition is under way (merge.rs).
    pub merging: bool,
    /// Keys given an index entry while the extent may hold a copy of them
    /// (at least the copies shadowed: what `stats` takes off `commit.items`);
    /// counted again exactly at each commit.
    pub shadowed: u32,
    /// While a merge runs: the packed hash bits (`build::packed_bits`) of
    /// the keys changed meanwhile, so its commit visits their entries
    /// besides those of its snapshot, not the whole index.
    pub changed: Vec<u64>,
}

impl Part {
    pub fn ring_len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }
}

/// A shard's small store.
pub(crate) struct SmallShard {
    pub index: SmallIndex,
    pub dir: Dir,
    pub parts: Vec<Part>,
}

/// Counters (relaxed atomics; see `stats.rs` for their meanings).
#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub admitted: AtomicU64,
    pub admitted_bytes: AtomicU64,
    pub log_blocks: AtomicU64,
    pub merges: AtomicU64,
    pub merges_failed: AtomicU64,
    pub sets_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub dropped: AtomicU64,
    pub spilled: AtomicU64,
    pub set_reads: AtomicU64,
    pub set_hits: AtomicU64,
    pub false_positives: AtomicU64,
    pub log_reads: AtomicU64,
    pub log_hits: AtomicU64,
    pub fallbacks: AtomicU64,
    pub tombs_written: AtomicU64,
}

/// The store-wide part: geometry, counters, and the rewrite thread's bell.
pub(crate) struct Small {
    pub geo: Geometry,
    pub c: Counters,
    /// RAM the small store is charged in `-m` (budget.rs).
    pub bytes: AtomicU64,
    /// Of which the indexes' slots,
    pub index_bytes: AtomicU64,
    /// and the partitions' summaries.
    pub summary_bytes: AtomicU64,
    /// Bytes a merge under way holds, outside -m (`stats memory`'s
    /// `store_meta_bytes`).
    pub merge_bytes: AtomicU64,
    /// Rung when a partition wants merging (a ring filling up, the log's
    /// tail blocked); the rewrite thread waits on it.
    bell: (Mutex<bool>, Condvar),
}

impl Small {
    pub fn new(geo: Geometry) -> Small {
        Small { geo, c: Counters::default(), bytes: AtomicU64::new(0), index_bytes: AtomicU64::new(0), summary_bytes: AtomicU64::new(0), merge_bytes: AtomicU64::new(0), bell: (Mutex::new(false), Condvar::new()) }
    }

    /// Wake the rewrite thread.
    pub fn ring(&self) {
        *self.bell.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.bell.1.notify_all();
    }

    /// Wait for the bell, at most `max`.
    pub fn wait(&self, max: std::time::Duration) {
        let rung = self.bell.0.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rung, _) = self.bell.1.wait_timeout_while(rung, max, |r| !*r).unwrap_or_else(|e| e.into_inner());
        *rung = false;
    }
}

/// Ring slot position `pos` (a counter) in the ring.
pub fn slot_of(pos: u32) -> usize {
    pos as usize % RING_SLOTS
}

/// How far ring slot `slot` lies past the ring's head at position `head`
/// (below the ring's length: the slot holds one of its blocks).
pub fn ring_offset(head: u32, slot: u16) -> u32 {
    (u32::from(slot) + RING_SLOTS as u32 - slot_of(head) as u32) % RING_SLOTS as u32
}

/// A ring slot whose block is gone (found damaged at a restart).
const RING_DEAD: u64 = 1 << 62;

/// Whether a placed log block (or extent piece) is on the device as
/// written: its page has the version it was placed under and was written
/// past it.
fn on_device(tier: &Tier, page: u32, version_ok: impl Fn(u32) -> bool, end_block: u64) -> bool {
    (page as usize) < tier.page_count() && version_ok(tier.version(page)) && tier.written_bytes_of(page) >= end_block * BLOCK
}

impl SmallShard {
    /// A shard's small store: fresh, or (`recover`) what an earlier process
    /// left in `dir` (the directory file) and `index_path`, checked against
    /// the tier. Counts its blocks in the tier's `small_live`.
    pub fn open(tier: &Tier, geo: &Geometry, paths: Option<(&std::path::Path, &std::path::Path)>, recover: bool) -> std::io::Result<SmallShard> {
        let parts_n = geo.parts_per_shard as usize;
        let (mut dir, recovered) = Dir::open(paths.map(|p| p.0), parts_n, tier.secret, geo.set_bytes, recover)?;
        let recovered = recovered && recover;
        let mut parts: Vec<Part> = (0..parts_n).map(|_| Part::default()).collect();
        if recovered {
            for (i, part) in parts.iter_mut().enumerate() {
                recover_part(tier, geo, &mut dir, i, part);
            }
        }
        let index = match paths {
            // A log entry whose block is gone becomes a tombstone: its
            // record was newer than any copy in the key's set, which must
            // not come back.
            Some((_, index_path)) => SmallIndex::persistent(index_path, |h32, e| {
                recovered.then_some(match e {
                    Entry::Tomb => Entry::Tomb,
                    Entry::Log { slot, .. } => {
                        let part = &parts[geo.place(u64::from(h32)).part];
                        let k = ring_offset(part.head, slot);
                        let live = k < part.ring_len() && dir.ring(geo.place(u64::from(h32)).part)[usize::from(slot)] != RING_DEAD;
                        if live {
                            e
                        } else {
                            Entry::Tomb
                        }
                    }
                })
            })?,
            None => SmallIndex::new(),
        };
        let mut shard = SmallShard { index, dir, parts };
        if recovered {
            for i in 0..parts_n {
                shard.parts[i].shadowed = shard.dir.shadowed(i);
            }
        }
        Ok(shard)
    }

    /// RAM this shard's small store takes (counted in `-m`).
    pub fn bytes(&self) -> usize {
        self.index.slot_bytes() + self.dir.bytes() + self.parts.iter().map(|p| p.summaries.bytes()).sum::<usize>()
    }
}

/// Bring back partition `i` from the directory: its extent if it is on
/// the device as committed (and its filters read back), its ring up to
/// the first empty slot (blocks not on the device marked dead, an open
/// block kept if it parses).
fn recover_part(tier: &Tier, geo: &Geometry, dir: &mut Dir, i: usize, part: &mut Part) {
    let commit = dir.commit(i);
    part.head = commit.ring_head % RING_SLOTS as u32;
    if commit.sets > 0 {
        let whole = commit.pieces.iter().filter(|p| p.units > 0).all(|p| on_device(tier, p.page, |v| v == p.version, u64::from(p.first_block + p.units)));
        let expected_units = commit.sets * geo.set_units() as u32 + commit.bloom_units;
        let summaries = (whole && commit.units() == expected_units).then(|| read_filters(tier, geo, &commit)).flatten();
        if let Some(summaries) = summaries {
            for p in commit.pieces.iter().filter(|p| p.units > 0) {
                tier.small_live[p.page as usize].fetch_add(p.units, relaxed());
            }
            part.summaries = summaries;
            part.commit = commit;
        } else {
            part.commit = Commit { seq: commit.seq, ring_head: commit.ring_head, ..Commit::default() };
        }
    } else {
        part.commit = commit;
    }
    let head = part.head;
    let mut len = 0u32;
    while len < RING_SLOTS as u32 {
        let at = slot_of(head + len);
        let s = dir.ring(i)[at];
        if s == 0 {
            break;
        }
        if s & RING_OPEN != 0 {
            // Only the last slot may be open; its block must parse and pass its check.
            let ok = block::Builder::resume(dir.open_block_mut(i), index::MAX_LOG_RECORDS, block::open_seed(tier.secret, i)).is_some();
            dir.ring_mut(i)[at] = if ok { RING_OPEN } else { RING_DEAD };
            part.open = ok;
            len += 1;
            break;
        }
        match BlockAt::unpack(s) {
            Some(b) if on_device(tier, b.page, |v| v as u16 == b.version16, u64::from(b.block) + 1) => {
                tier.small_live[b.page as usize].fetch_add(1, relaxed());
            }
            _ => dir.ring_mut(i)[at] = RING_DEAD,
        }
        len += 1;
    }
    part.tail = head + len;
    // Slots past the tail: stale leftovers of a merge cut short.
    for k in len..RING_SLOTS as u32 {
        dir.ring_mut(i)[slot_of(head + k)] = 0;
    }
}

/// Read an extent's filters back from the device and check them.
fn read_filters(tier: &Tier, geo: &Geometry, commit: &Commit) -> Option<Summaries> {
    use std::os::unix::fs::FileExt;
    let first = commit.sets * geo.set_units() as u32;
    let mut bytes = crate::flash_read::FlashBuf::unpooled(commit.bloom_units as usize * LOG_BLOCK);
    for u in 0..commit.bloom_units {
        let (page, block) = commit.unit_at(first + u)?;
        let spot = &tier.spots[page as usize];
        let at = u as usize * LOG_BLOCK;
        tier.files[spot.file].read_exact_at(&mut bytes[at..at + LOG_BLOCK], spot.base + u64::from(block) * BLOCK).ok()?;
    }
    let len = geo.shape.bloom_bytes(commit.sets as usize);
    if xxhash_rust::xxh3::xxh3_64(&bytes[..len]) as u32 != commit.bloom_check {
        return None;
    }
    let words = bytes[..len].chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
    Summaries::from_bloom(geo.shape, commit.sets as usize, words)
}

impl crate::seg::SegStore {
    /// Attach the small store to a flash tier being attached (`ext`'s
    /// settings; `dir`: where its files go with a memory file). A line
    /// for the log (empty when it is off).
    pub(crate) fn attach_small(&mut self, ext: &crate::ExtConfig, tier: &Tier, dir: Option<&std::path::Path>) -> std::io::Result<String> {
        if ext.small_item_max == 0 {
            return Ok(String::new());
        }
        ext.check_small().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let geo = Geometry::new(
            tier.page_count() as u64 * tier.page_size,
            tier.page_size,
            self.g.memory_limit.load(relaxed()),
            self.shards.len(),
            ext.set_size_bytes,
            ext.set_bloom_bits,
            ext.log_percent,
            ext.small_item_max,
            ext.set_threshold,
        );
        let file_bytes = tier.page_count() as u64 * tier.page_size;
        if !geo.fits(file_bytes) {
            // Too few pages for sets beside the log's share, its margin and
            // a rewrite's new extent: every merge would drop what its one
            // set cannot hold. The larger items' log keeps them instead.
            return Ok(format!(
                "; small store off: {} pages of {} KiB leave its sets {} KiB of the {} MiB (a larger file, or a smaller ext_page_size, makes room), small items go to the log with larger ones",
                tier.page_count(),
                tier.page_size >> 10,
                geo.sets_bytes() >> 10,
                file_bytes >> 20
            ));
        }
        let small = Small::new(geo);
        tier.stream_reserve.store(geo.reserve_pages, relaxed());
        let (mut kept_sets, mut kept_log) = (0u64, 0usize);
        for (i, shard) in self.shards.iter().enumerate() {
            let paths = dir.map(|d| (d.join(format!("small.{i}")), d.join(format!("smallidx.{i}"))));
            let ss = SmallShard::open(tier, &geo, paths.as_ref().map(|(a, b)| (a.as_path(), b.as_path())), tier.recovered)?;
            kept_sets += ss.parts.iter().map(|p| u64::from(p.commit.items)).sum::<u64>();
            kept_log += ss.index.len() - ss.index.tombs;
            small.index_bytes.fetch_add(ss.index.slot_bytes() as u64, relaxed());
            small.summary_bytes.fetch_add(ss.parts.iter().map(|p| p.summaries.bytes() as u64).sum::<u64>(), relaxed());
            budget::charge(&self.g, &small, ss.bytes() as i64);
            shard.lock().flash_small = Some(Box::new(ss));
        }
        let line = format!(
            "; small items (key and value up to {} bytes) in {} partitions of up to {} sets of {} KiB, {} KiB of -m{}",
            geo.item_max,
            geo.parts(),
            geo.max_sets,
            geo.set_bytes >> 10,
            small.bytes.load(relaxed()) >> 10,
            if tier.recovered { format!("; restored {kept_sets} in sets and {kept_log} in the log") } else { String::new() }
        );
        self.g.small = Some(small);
        Ok(line)
    }
}

impl crate::seg::SegStore {
    /// The small store's figures (`stats`); None without it.
    pub(crate) fn small_stats(&self) -> Option<crate::SmallStats> {
        let small = self.g.small.as_ref()?;
        let tier = self.g.flash.as_ref()?;
        let r = relaxed();
        let c = &small.c;
        let mut s = crate::SmallStats {
            partitions: small.geo.parts() as u64,
            merges: c.merges.load(r),
            merges_failed: c.merges_failed.load(r),
            sets_written: c.sets_written.load(r),
            log_blocks_written: c.log_blocks.load(r),
            bytes_written: c.bytes_written.load(r),
            items_admitted: c.admitted.load(r),
            bytes_admitted: c.admitted_bytes.load(r),
            dropped: c.dropped.load(r),
            spilled: c.spilled.load(r),
            fallbacks: c.fallbacks.load(r),
            set_reads: c.set_reads.load(r),
            set_hits: c.set_hits.load(r),
            false_positives: c.false_positives.load(r),
            log_reads: c.log_reads.load(r),
            log_hits: c.log_hits.load(r),
            tombstones_written: c.tombs_written.load(r),
            ram_bytes: small.bytes.load(r),
            index_ram_bytes: small.index_bytes.load(r),
            summary_ram_bytes: small.summary_bytes.load(r),
            merge_bytes: small.merge_bytes.load(r),
            tail_blocked: tier.c.tail_blocked.load(r),
            ..crate::SmallStats::default()
        };
        for shard in self.shards.iter() {
            let guard = shard.lock();
            let Some(ss) = guard.flash_small.as_deref() else { continue };
            for p in &ss.parts {
                s.items_sets += u64::from(p.commit.items.saturating_sub(p.shadowed));
                s.bytes_sets += p.commit.item_bytes;
                s.sets += u64::from(p.commit.sets);
            }
            s.tombstones += ss.index.tombs as u64;
            s.items_log += (ss.index.len() - ss.index.tombs) as u64;
        }
        Some(s)
    }
}

impl crate::seg::SegStore {
    /// Bytes the small store is charged in `-m`, checked against what its
    /// shards hold (`check_integrity`); 0 without it.
    pub(crate) fn small_ram_bytes(&self) -> u64 {
        let Some(small) = self.g.small.as_ref() else { return 0 };
        let held: usize = self.shards.iter().map(|s| s.lock().flash_small.as_deref().map_or(0, SmallShard::bytes)).sum();
        // Every log entry names a block of its partition's ring: a merge's
        // commit takes out those of the blocks it consumed.
        for shard in self.shards.iter() {
            let guard = shard.lock();
            let Some(ss) = guard.flash_small.as_deref() else { continue };
            ss.index.scan(0, u32::MAX, |seen| {
                if let Entry::Log { slot, .. } = seen.entry {
                    let p = &ss.parts[small.geo.place(u64::from(seen.h32)).part];
                    let k = ring_offset(p.head, slot);
                    assert!(k < p.ring_len(), "a log entry ({seen:?}) names ring slot {slot}, outside {}..{}", p.head, p.tail);
                }
            });
        }
        let charged = small.bytes.load(relaxed());
        assert_eq!(charged, held as u64, "small store bytes charged to -m");
        charged
    }
}
