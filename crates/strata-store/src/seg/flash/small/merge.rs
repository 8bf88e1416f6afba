//! One partition's rewrite (the merge): its log blocks and its old extent
//! become a new extent, written by the rewrite stream, then committed.
//!
//! ```text
//!  1 snapshot (shard lock)   seal the open block; note the ring's blocks
//!                            [head, cut), the commit, the hit bits, and
//!                            the partition's index entries: live log
//!                            records (slot, record) and every key with an
//!                            entry (its set copy, if any, is not current)
//!  2 read (no lock)          the log blocks (in parallel), then the old
//!                            sets front to back, a chunk read ahead
//!                            (`extent_read.rs`)
//!  3 build (no lock)         build.rs: log records whose entry still names
//!                            them, old records of keys without an entry;
//!                            expired and flushed ones dropped; N sets for a
//!                            75% fill within the partition's share
//!  4 write (no lock)         the sets, then the filters, by the rewrite
//!                            stream (tier/stream.rs): on the device before 5
//!  5 commit (shard lock)     index (the snapshot's entries and those of
//!                            keys changed since, looked up): log entries
//!                            of the consumed blocks go; a tombstone goes
//!                            if the new sets hold no record of its key;
//!                            the directory's next slot;
//!                            the old extent and the consumed blocks let go
//! ```
//!
//! While a merge runs, reads use the old extent and the log blocks (both
//! stay on the device until the commit lets them go), and a change of a
//! key of the partition that has an entry, or that the old filters may
//! hold, leaves a tombstone (`write::shadow`), so a record the new extent
//! took from before the change stays shadowed.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::block::{self, Builder, Kind, View};
use super::build::{packed_bits, start, Built, Cand, Sets};
use super::extent_read::ExtentReader;
use super::dir::{BlockAt, Commit, Piece, MAX_PIECES};
use super::geometry::{LOG_BLOCK, TARGET_FILL_PERCENT};
use super::index::{table_order, Entry};
use super::write::seal_open;
use super::{budget, ring_offset, slot_of, Small};
use crate::flash_read::FlashBuf;
use crate::seg::flash::record;
use crate::seg::flash::tier::{Stream, Tier, Written, BLOCK};
use crate::seg::{hash_key, SegStore};
use crate::RelTime;

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Bytes of sets written by one `pwrite` of the stream.
const CHUNK_BYTES: usize = 1 << 20;
/// Reads of log blocks in flight during a merge.
const READERS: usize = 8;
/// Bytes a merge holds for each log block it reads: the block, and its
/// records' places (~40 of ~90 bytes each) while the sets are built.
const HELD_PER_BLOCK: u64 = 8 << 10;

/// How a merge ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged {
    Done,
    /// Another merge of the partition is under way.
    Busy,
    /// No page for the new extent, or a write failed: nothing changed.
    Failed,
}

/// What the snapshot took (step 1).
struct Snapshot {
    commit: Commit,
    hits: super::summary::Summaries,
    head: u32,
    cut: u32,
    blocks: Vec<(u16, BlockAt)>,
    /// Live log records: (slot, record) -> (key bits, read).
    live: HashMap<(u16, u8), (u64, bool)>,
    /// Keys with an entry (packed key bits).
    shadowed: HashSet<u64>,
}

impl SegStore {
    /// Merge partition `part` of shard `shard` (module docs); `stream` is
    /// the rewrite thread's.
    pub(crate) fn merge_part(&self, shard: usize, part: usize, stream: &mut Stream, now: RelTime) -> Merged {
        let (Some(small), Some(tier)) = (self.g.small.as_ref(), self.g.flash.as_ref()) else { return Merged::Failed };
        let Some(snap) = self.snapshot(small, tier, shard, part) else { return Merged::Busy };
        let (logs, read_ok) = read_blocks(tier, &snap.blocks);
        let mut cands = Vec::new();
        for (((slot, at), bytes), ok) in snap.blocks.iter().zip(logs.chunks(LOG_BLOCK)).zip(&read_ok) {
            let seed = block::seed(record::seed(tier.secret, at.page, tier.version(at.page)), at.block);
            let Some(view) = ok.then(|| View::open(bytes, seed, Kind::Log)).flatten() else { continue };
            for rec in view.records() {
                let hash = hash_key(rec.key);
                match snap.live.get(&(*slot, rec.index as u8)) {
                    Some(&(bits, read)) if bits == packed_bits(hash) => {
                        if self.expired(&rec.meta, now) {
                            continue;
                        }
                        let frac = small.geo.place(hash).frac;
                        cands.push(Cand { key: rec.key, value: rec.value, meta: rec.meta, hash, frac, from_log: Some((*slot, rec.index as u8)), read });
                    }
                    _ => {}
                }
            }
        }
        let (sets, cap) = self.new_set_count(small, &snap.commit, &cands);
        let geo = small.geo;
        // Buffers no longer than the extents, so what is held is what is used.
        let chunk_bytes = CHUNK_BYTES.min(sets as usize * geo.set_bytes);
        let reader_bytes = CHUNK_BYTES.min(snap.commit.sets as usize * geo.set_bytes).max(geo.set_bytes);
        let held = logs.len() + cands.capacity() * std::mem::size_of::<Cand<'_>>() + chunk_bytes + 3 * reader_bytes;
        small.merge_bytes.store(held as u64, relaxed());
        let mut builder = Sets::new(sets, geo.set_bytes, geo.shape, geo.max_set_records(), geo.threshold, sets < cap, cands);
        let mut written: Vec<Written> = Vec::new();
        let mut chunk = FlashBuf::unpooled(chunk_bytes);
        let mut fill = 0;
        {
            let mut flush = |chunk: &mut FlashBuf, fill: &mut usize, written: &mut Vec<Written>| -> bool {
                let done = *fill == 0
                    || tier.stream_write(
                        stream,
                        &mut chunk[..*fill],
                        geo.set_bytes,
                        |unit, seed, first| Builder::resume_fast(unit, geo.max_set_records()).seal(block::seed(seed, first)),
                        |w| written.push(w),
                    );
                *fill = 0;
                done
            };
            let mut emit = |set: &[u8]| -> bool {
                chunk[fill..fill + set.len()].copy_from_slice(set);
                fill += set.len();
                fill + set.len() <= chunk_bytes || flush(&mut chunk, &mut fill, &mut written)
            };
            // The old sets, front to back, read a chunk ahead.
            let old_done = std::thread::scope(|scope| {
                let mut reader = ExtentReader::start(scope, tier, &snap.commit, geo.set_bytes, reader_bytes);
                for t in 0..snap.commit.sets {
                    if let Some(view) = reader.next_set() {
                        for rec in view.records() {
                            let hash = hash_key(rec.key);
                            if snap.shadowed.contains(&packed_bits(hash)) || self.expired(&rec.meta, now) {
                                continue;
                            }
                            let read = snap.hits.was_hit(t as usize, rec.index);
                            builder.old(rec.key, rec.value, rec.meta, hash, geo.place(hash).frac, read);
                        }
                    }
                    if !builder.done_below(start(u64::from(t) + 1, snap.commit.sets), &mut emit) {
                        return false;
                    }
                }
                true
            });
            let built = if old_done { builder.finish(&mut emit) } else { None };
            let ok = built.is_some() && flush(&mut chunk, &mut fill, &mut written);
            let built = built.filter(|_| ok);
            let bloom = built.as_ref().and_then(|b| write_filters(tier, stream, b, &mut written));
            if let (Some(built), Some(bloom_check)) = (built, bloom) {
                let pieces = pieces_of(&written);
                if let Some(pieces) = pieces {
                    let bloom_units = geo.shape.bloom_bytes(sets as usize).div_ceil(LOG_BLOCK) as u32;
                    self.commit_merge(small, tier, shard, part, snap, sets, bloom_units, bloom_check, pieces, built);
                    small.merge_bytes.store(0, relaxed());
                    return Merged::Done;
                }
            }
        }
        small.merge_bytes.store(0, relaxed());
        small.c.merges_failed.fetch_add(1, relaxed());
        // Failed: what the stream wrote is let go; the partition stays as it was.
        for w in &written {
            tier.release_small(w.page, w.version, w.blocks);
        }
        let mut guard = self.shards[shard].lock();
        if let Some(ss) = guard.flash_small.as_deref_mut() {
            ss.parts[part].merging = false;
            ss.parts[part].changed = Vec::new();
        }
        Merged::Failed
    }

    fn expired(&self, m: &block::Meta, now: RelTime) -> bool {
        self.g.is_flushed(m.access, m.cas, now) || (m.exptime != 0 && m.exptime <= now)
    }

    /// Step 1 (module docs); None if a merge of the partition runs already.
    fn snapshot(&self, small: &Small, tier: &Tier, shard: usize, part: usize) -> Option<Snapshot> {
        let mut guard = self.shards[shard].lock();
        let ss = guard.flash_small.as_deref_mut()?;
        if ss.parts[part].merging {
            return None;
        }
        // At most a 32nd of -m of log blocks at once (`HELD_PER_BLOCK` each);
        // the open block goes too when the whole log does (and a page takes it).
        let most = (self.g.memory_limit.load(relaxed()) / 32 / HELD_PER_BLOCK).max(64) as u32;
        let whole = ss.parts[part].ring_len() <= most;
        let sealed = whole && seal_open(small, tier, ss, part);
        let p = &mut ss.parts[part];
        p.merging = true;
        p.changed.clear();
        let placed = if p.open && !sealed { p.tail.wrapping_sub(1) } else { p.tail };
        let cut = p.head.wrapping_add(placed.wrapping_sub(p.head).min(most));
        let ring = ss.dir.ring(part);
        let blocks: Vec<(u16, BlockAt)> = (0..cut.wrapping_sub(p.head))
            .filter_map(|k| {
                let slot = slot_of(p.head.wrapping_add(k));
                BlockAt::unpack(ring[slot]).map(|at| (slot as u16, at))
            })
            .collect();
        let (commit, hits, head) = (p.commit, p.summaries.clone(), p.head);
        // Sized for full blocks of ~90-byte records (growing them cost more
        // than filling them).
        let expected = p.ring_len() as usize * (LOG_BLOCK / 90);
        // Under the lock only the walk: the workers wait for it (and for
        // this thread whenever it is preempted holding it), so the maps
        // are built after.
        let mut entries = Vec::with_capacity(expected);
        let (lo, hi) = small.geo.range(part);
        ss.index.scan(lo, hi, |seen| entries.push(*seen));
        drop(guard);
        let mut live = HashMap::with_capacity_and_hasher(expected, Default::default());
        let mut shadowed = HashSet::with_capacity_and_hasher(entries.len(), Default::default());
        for seen in &entries {
            let bits = seen.bits();
            shadowed.insert(bits);
            if let Entry::Log { slot, index, freq } = seen.entry {
                live.insert((slot, index), (bits, freq > 0));
            }
        }
        Some(Snapshot { commit, hits, head, cut, blocks, live, shadowed })
    }

    /// The new extent's number of sets: room for what it will hold at a
    /// 75% fill, within the partition's share of the files and of `-m`
    /// (the second figure).
    fn new_set_count(&self, small: &Small, old: &Commit, cands: &[Cand<'_>]) -> (u32, u32) {
        let geo = &small.geo;
        let bytes: u64 = old.item_bytes + cands.iter().map(|c| (c.key.len() + c.value.len()) as u64).sum::<u64>();
        let items = u64::from(old.items) + cands.len() as u64;
        // ~8 bytes of record header an item.
        let room = (geo.set_bytes - block::HEADER) as u64 * TARGET_FILL_PERCENT as u64 / 100;
        let by_bytes = (bytes + items * 8).div_ceil(room.max(1));
        let by_count = (items * 100).div_ceil((geo.max_set_records() * TARGET_FILL_PERCENT) as u64);
        let cap = geo.max_sets.min(budget::summary_room(&self.g, self.g.flash.as_ref().expect("a tier"), small)).max(1);
        (by_bytes.max(by_count).clamp(1, u64::from(cap)) as u32, cap)
    }

    /// Step 5 (module docs).
    #[allow(clippy::too_many_arguments)]
    fn commit_merge(
        &self,
        small: &Small,
        tier: &Tier,
        shard: usize,
        part: usize,
        snap: Snapshot,
        sets: u32,
        bloom_units: u32,
        bloom_check: u32,
        pieces: [Piece; MAX_PIECES],
        built: Built,
    ) {
        // A spilled record goes back to the log below unless its key changed
        // during the merge: its tombstone (or newer entry) must stay to say so.
        let mut spilled: Vec<u64> = built.spilled.iter().map(|r| packed_bits(r.hash)).collect();
        spilled.sort_unstable();
        let in_sets = |bits: &u64| built.kept.binary_search(bits).is_ok() || spilled.binary_search(bits).is_ok();
        // Before the lock: the snapshot's entries, whether the new sets hold
        // their keys, in the table's order (the lookups below then walk it
        // front to back: the workers wait while this thread holds the lock).
        let mut visits: Vec<(u64, bool)> = snap.shadowed.iter().map(|&bits| (bits, in_sets(&bits))).collect();
        visits.sort_unstable_by_key(|&(bits, _)| table_order(bits));
        let mut guard = self.shards[shard].lock();
        let Some(ss) = guard.flash_small.as_deref_mut() else { return };
        let consumed = |slot: u16| ring_offset(snap.head, slot) < snap.cut.wrapping_sub(snap.head);
        let mut shadowed = 0;
        // The partition's entries: those of the snapshot, and of the keys
        // changed since (any other is a log entry of a key the old extent
        // and the log did not hold, made since: it stays, shadowing nothing).
        let mut changed = std::mem::take(&mut ss.parts[part].changed);
        changed.retain(|bits| !snap.shadowed.contains(bits));
        changed.sort_unstable();
        changed.dedup();
        for (bits, in_sets) in visits.into_iter().chain(changed.iter().map(|&bits| (bits, in_sets(&bits)))) {
            let Some((i, entry)) = ss.index.find_bits(bits) else { continue };
            let keep = match entry {
                Entry::Log { slot, .. } if consumed(slot) => false,
                Entry::Tomb => in_sets,
                Entry::Log { .. } => true,
            };
            shadowed += u32::from(keep && in_sets);
            if !keep {
                ss.index.remove(i);
            }
        }
        let commit = Commit {
            seq: snap.commit.seq + 1,
            sets,
            bloom_units,
            ring_head: slot_of(snap.cut) as u32,
            bloom_check,
            items: built.items.min(u64::from(u32::MAX)) as u32,
            item_bytes: built.item_bytes,
            pieces,
        };
        ss.dir.write_commit(part, &commit);
        let p = &mut ss.parts[part];
        let before = p.summaries.bytes();
        p.summaries = built.summaries;
        let after = p.summaries.bytes();
        p.commit = commit;
        p.head = snap.cut;
        p.merging = false;
        p.shadowed = shadowed;
        ss.dir.set_shadowed(part, shadowed);
        for (_, at) in &snap.blocks {
            if tier.version(at.page) as u16 == at.version16 {
                tier.release_small(at.page, tier.version(at.page), 1);
            }
        }
        let ring = ss.dir.ring_mut(part);
        for k in 0..snap.cut.wrapping_sub(snap.head) {
            ring[slot_of(snap.head.wrapping_add(k))] = 0;
        }
        for piece in snap.commit.pieces.iter().filter(|p| p.units > 0) {
            tier.release_small(piece.page, piece.version, piece.units);
        }
        budget::charge(&self.g, small, after as i64 - before as i64);
        if after >= before {
            small.summary_bytes.fetch_add((after - before) as u64, relaxed());
        } else {
            small.summary_bytes.fetch_sub((before - after) as u64, relaxed());
        }
        // What found no room goes back to the log, unless the key changed
        // meanwhile (its entry is newer).
        let mut respilled = 0;
        for r in &built.spilled {
            if ss.index.find(r.hash).is_none() && super::write::admit_as(&self.g, ss, r.hash, &r.key, &r.value, &r.meta, false).is_ok() {
                respilled += 1;
            }
        }
        small.c.dropped.fetch_add(built.spilled.len() as u64 - respilled, relaxed());
        small.c.spilled.fetch_add(respilled, relaxed());
        drop(guard);
        small.c.merges.fetch_add(1, relaxed());
        small.c.sets_written.fetch_add(u64::from(sets), relaxed());
        small.c.bytes_written.fetch_add(u64::from(sets * small.geo.set_units() as u32 + bloom_units) * BLOCK, relaxed());
        small.c.dropped.fetch_add(built.dropped, relaxed());
    }
}

/// The new extent's filters, after its sets; their check.
fn write_filters(tier: &Tier, stream: &mut Stream, built: &Built, written: &mut Vec<Written>) -> Option<u32> {
    let words = built.summaries.bloom_words();
    let len = words.len() * 8;
    let mut buf = FlashBuf::unpooled(len.div_ceil(LOG_BLOCK).max(1) * LOG_BLOCK);
    for (i, w) in words.iter().enumerate() {
        buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let check = xxhash_rust::xxh3::xxh3_64(&buf[..len]) as u32;
    tier.stream_write(stream, &mut buf, LOG_BLOCK, |_, _, _| {}, |w| written.push(w)).then_some(check)
}

/// The stretches the stream wrote, joined where contiguous; None past
/// `MAX_PIECES`.
fn pieces_of(written: &[Written]) -> Option<[Piece; MAX_PIECES]> {
    let mut pieces = [Piece::default(); MAX_PIECES];
    let mut n = 0;
    for w in written {
        if n > 0 {
            let last = &mut pieces[n - 1];
            if last.page == w.page && last.version == w.version && last.first_block + last.units == w.first_block {
                last.units += w.blocks;
                continue;
            }
        }
        if n == MAX_PIECES {
            return None;
        }
        pieces[n] = Piece { page: w.page, version: w.version, first_block: w.first_block, units: w.blocks };
        n += 1;
    }
    Some(pieces)
}

/// Read log blocks (a few at a time in parallel; from a write buffer when
/// not written yet) into one buffer, block `i` at `i * LOG_BLOCK`; the
/// blocks that could not be read are false.
fn read_blocks(tier: &Tier, blocks: &[(u16, BlockAt)]) -> (FlashBuf, Vec<bool>) {
    let read = |at: &BlockAt, out: &mut [u8]| -> bool {
        if tier.version(at.page) as u16 != at.version16 {
            return false;
        }
        let offset = u64::from(at.block) * BLOCK;
        if offset + BLOCK > tier.written_bytes_of(at.page) {
            let mut bytes = Vec::new();
            if tier.unwritten(at.page, offset, &mut bytes, 1) && bytes.len() >= LOG_BLOCK {
                out.copy_from_slice(&bytes[..LOG_BLOCK]);
                return true;
            }
        }
        let spot = &tier.spots[at.page as usize];
        tier.files[spot.file].read_exact_at(out, spot.base + offset).is_ok()
    };
    let mut buf = FlashBuf::unpooled(blocks.len().max(1) * LOG_BLOCK);
    let mut ok = vec![false; blocks.len()];
    let per = blocks.len().div_ceil(READERS).max(8);
    if READERS == 1 || blocks.len() <= per {
        for (((_, at), out), ok) in blocks.iter().zip(buf.chunks_mut(LOG_BLOCK)).zip(ok.iter_mut()) {
            *ok = read(at, out);
        }
        return (buf, ok);
    }
    std::thread::scope(|scope| {
        for ((ins, outs), oks) in blocks.chunks(per).zip(buf.chunks_mut(per * LOG_BLOCK)).zip(ok.chunks_mut(per)) {
            let read = &read;
            scope.spawn(move || {
                for (((_, at), out), ok) in ins.iter().zip(outs.chunks_mut(LOG_BLOCK)).zip(oks.iter_mut()) {
                    *ok = read(at, out);
                }
            });
        }
    });
    (buf, ok)
}
