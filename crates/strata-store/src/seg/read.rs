//! Gets and multi-get prefetches that take no lock and write no shared
//! cache line (issue 30).
//!
//! ```text
//!  pin the epoch (a line of this thread's own; once per batch: batch.rs)
//!  s = seq (even, else: the locked get)            seqlock.rs
//!  slot array (address, length) ── valid(s)? ──►   probe: racy 8-byte slot reads
//!  tag match ─► directory entry ── valid(s)? ──►   copy the item's first 64 bytes,
//!               (buffer, cas_base, create_time)     then the rest, into this
//!                                                   thread's scratch ── valid(s)?
//!  key equal? expired, flushed, or a bump to write? ─► the locked get
//!  else: count the hit (hits.rs), visit the copy
//! ```
//!
//! Nothing a reader read is trusted before the shard's sequence validates
//! it: a slot array's address and length before its slots are read, a
//! directory entry before its buffer is read, the item bytes before they
//! are decoded for good or handed to `visit`. So a value handed to `visit`
//! is a copy of one state of the shard: never torn, never another key's,
//! never one deleted before the read began (`tests/store/read_concurrent.rs`).
//! Memory read before validation is always mapped: slot arrays are
//! unmapped through the epoch (`Table::resize`), buffers only with the
//! store (`buffer.rs`), directory chunks only with the view (`view.rs`).
//!
//! What still takes the lock: touch, gat and vivify; an item that expired
//! or was flushed (unlinked and counted there); a hit whose visitor may
//! win its recache token (stale or with a TTL, no token sent, unless
//! `GetOptions::no_token`); and an item's first fetch when the visitor may
//! show it (its `FETCHED` mark: meta `h` answers 0 to one reader only;
//! unless `GetOptions::fetched_unseen`). A read that only bumps the item
//! (frequency not yet saturated, not yet marked fetched, or last accessed
//! in an earlier second) is served from its copy, then takes the lock for
//! the bump alone
//! (`bump_after_read`), which is written only when it still changes
//! something: a hot item takes the lock at most once a second.
//! A read that sees a writer inside the shard retries, then locks.
//!
//! Unsafe code: the racy reads themselves (`buffer::copy_racy`,
//! `buffer::read_slot_racy`), on memory mapped for the reasons above.

#![allow(unsafe_code)]

use std::cell::Cell;

use super::buffer::{copy_racy, read_slot_racy};
use super::item::{access_delta, Header, FETCHED, TOKEN_SENT};
use super::table::{home_of, slot_freq, slot_loc, tag_of, Loc, MAX_FREQ, TAG_MASK, TAG_SHIFT, USED};
use super::view::{ReadView, SegRef};
use super::shard::Shard;
use super::{Change, SegStore};
use crate::class_stats::Queue;
use crate::{GetAction, GetOptions, ItemView, RelTime};

/// Optimistic attempts before a get takes the lock.
const ATTEMPTS: usize = 3;
/// Bytes copied first: the header, the key and a short value (a copy
/// `copy_racy` inlines).
const FIRST_COPY: usize = super::buffer::RACY_LINE;

thread_local! {
    /// This thread's copy of the item being read.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// How an optimistic lookup ended.
enum Lookup {
    /// No such key (validated).
    Miss,
    /// Found (validated): its slot value, location, segment and header;
    /// the item's bytes are in the scratch.
    Hit(u64, Loc, SegRef, Header),
    /// A writer ran meanwhile, or something needs the lock.
    Retry,
}

impl SegStore {
    /// A get without the lock: `Some(hit)` when done (`visit` called on a
    /// hit), None when the locked get must do it (`visit` not called).
    pub(super) fn get_optimistic(
        &self,
        key: &[u8],
        hash: u64,
        opts: GetOptions,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Option<bool> {
        let view = &self.views[self.shard_of(hash)];
        let _pin = super::batch::pin();
        let mut buf = SCRATCH.with(Cell::take);
        let mut retries = 0;
        let result = (0..ATTEMPTS).find_map(|_| match self.lookup(view, key, hash, &mut buf) {
            Lookup::Retry => {
                retries += 1;
                None
            }
            found => Some(found),
        });
        let done = match result {
            None => None,
            Some(Lookup::Miss) => Some(false),
            Some(Lookup::Hit(slot, loc, seg, h)) => {
                self.serve(key, hash, &buf[..h.total_len()], slot, loc, seg, h, opts, now, visit)
            }
            Some(Lookup::Retry) => unreachable!("retries are filtered"),
        };
        SCRATCH.with(|s| s.set(buf));
        if retries != 0 {
            self.hits.retried(retries);
        }
        if done.is_none() {
            self.hits.locked();
        }
        done
    }

    fn lookup(&self, view: &ReadView, key: &[u8], hash: u64, buf: &mut Vec<u8>) -> Lookup {
        let Some(s) = view.seq.read_begin() else { return Lookup::Retry };
        let (slots, capacity) = view.slots();
        if capacity == 0 || !view.seq.read_valid(s) {
            return Lookup::Retry;
        }
        let tag = tag_of(hash);
        let mut i = home_of(hash, capacity);
        for _ in 0..capacity {
            // SAFETY: i < capacity of an array validated as the shard's at
            // `s`, unmapped only through the epoch this thread is pinned in.
            let slot = unsafe { read_slot_racy(slots.add(i)) };
            if slot & USED == 0 {
                break;
            }
            if (slot >> TAG_SHIFT) & TAG_MASK == tag {
                let loc = slot_loc(slot);
                match self.read_item(view, s, loc, buf) {
                    Some((seg, h)) if h.key(&buf[..h.total_len()]) == key => {
                        return if view.seq.read_valid(s) { Lookup::Hit(slot, loc, seg, h) } else { Lookup::Retry };
                    }
                    Some(_) => {}
                    None => return Lookup::Retry,
                }
            }
            i = if i + 1 == capacity { 0 } else { i + 1 };
        }
        if view.seq.read_valid(s) {
            Lookup::Miss
        } else {
            Lookup::Retry
        }
    }

    /// Copy the item at `loc` into `buf[..total_len]` and decode its
    /// header; None if a writer ran meanwhile (or the segment is unknown to
    /// the view).
    fn read_item(&self, view: &ReadView, s: u64, loc: Loc, buf: &mut Vec<u8>) -> Option<(SegRef, Header)> {
        let seg = view.segment(loc.seg)?;
        if !view.seq.read_valid(s) {
            return None;
        }
        let at = loc.offset as usize;
        if seg.ptr.is_null() || at >= seg.len {
            return None;
        }
        let avail = seg.len - at;
        let first = avail.min(FIRST_COPY);
        // The scratch only grows (zeroed once, at its high-water mark): the
        // item is its first `total` bytes, each copied over on every read.
        if buf.len() < first {
            buf.resize(first, 0);
        }
        // SAFETY: `at + first <= seg.len`, and (ptr, len) was a buffer of
        // this shard at `s` (validated above): memory mapped until the
        // store drops (buffer.rs), whatever happened to the buffer since.
        unsafe { copy_racy(seg.ptr.add(at), &mut buf[..first]) };
        let h = Header::try_decode_within(&buf[..first], self.g.file.is_some(), avail)?;
        let total = h.total_len();
        if total > first {
            // Validate before copying a length read from racy bytes.
            if !view.seq.read_valid(s) {
                return None;
            }
            if buf.len() < total {
                buf.resize(total, 0);
            }
            // SAFETY: `at + total <= seg.len` (try_decode_within's limit), as above.
            unsafe { copy_racy(seg.ptr.add(at + first), &mut buf[first..total]) };
        }
        Some((seg, h))
    }

    /// The hit `lookup` found, served from its copy in `item`; None when
    /// the locked get must serve it instead (before `visit` is called).
    #[allow(clippy::too_many_arguments)]
    fn serve(
        &self,
        key: &[u8],
        hash: u64,
        item: &[u8],
        slot: u64,
        loc: Loc,
        seg: SegRef,
        h: Header,
        opts: GetOptions,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Option<bool> {
        let meta = self.item_meta(&h, item, seg.cas_base, seg.create_time);
        let expired = meta.exptime != 0 && meta.exptime <= now;
        let flushed = self.g.flush_in_force(now) && self.g.is_flushed(meta.last_access, h.cas(item, seg.cas_base), now);
        // The access time as its field would hold it (clamped: an item in a
        // segment over nine hours old does not rewrite it on every read).
        let access_moves = access_delta(now, seg.create_time) != access_delta(meta.last_access, seg.create_time);
        // A first fetch the visitor may show (meta `h` answers 0 to exactly
        // one reader) and a read that may win the recache token on this
        // item (meta `W`) read and mark it in one step, under the lock.
        let first_fetch = !opts.no_bump && !meta.fetched && !opts.fetched_unseen;
        let token_possible = !opts.no_token && !meta.token_sent && (meta.stale || meta.exptime != 0);
        if expired || flushed || first_fetch || token_possible {
            return None;
        }
        if !opts.uncounted {
            let queue = if seg.main { Queue::Warm } else { Queue::Hot };
            self.hits.hit(self.g.item_class(&h).0, queue);
        }
        let action = visit(ItemView { key, value: h.value(item), meta }, false);
        // The bump (a frequency not yet saturated, an access time in an
        // earlier second, a first fetch nobody is shown) is written after
        // the visit, as memcached bumps asynchronously: readers of the same
        // second may all see the old access time, none sees a torn item.
        let bump = !opts.no_bump && (slot_freq(slot) < MAX_FREQ || access_moves || !meta.fetched);
        if bump || action.set_token_sent {
            self.bump_after_read(key, hash, loc, bump, action.set_token_sent, now);
        }
        Some(true)
    }

    /// The writes a served read owes, under the lock, to the same copy of
    /// the item if it is still there (a writer that replaced or removed it
    /// meanwhile made them moot): a frequency step, the fetched mark and the
    /// access time if they still move (as the locked get writes them), and
    /// the token mark the visitor won.
    fn bump_after_read(&self, key: &[u8], hash: u64, loc: Loc, bump: bool, token_sent: bool, now: RelTime) {
        let mut guard = self.lock(hash);
        let shard = &mut *guard;
        let Some(found) = shard.find(key, hash).filter(|&(_, at, _)| at == loc) else { return };
        let mut change = Change::default();
        if token_sent {
            change.set |= TOKEN_SENT;
        }
        if bump {
            let (index, _, h) = found;
            let last_access = h.access(shard.item(loc), shard.seg(loc).create_time);
            bump_read(shard, index, loc, h.bits & FETCHED != 0, last_access, now, &mut change);
        }
        if change.set != 0 || change.access.is_some() {
            self.modify(shard, key, hash, found, change, now);
        }
    }

    /// Multi-get prefetch (`Engine::prefetch`) without locks: two passes
    /// over up to [`MAX_WINDOW`] keys' hashes, so their cache misses
    /// overlap: first each key's home slot line, then the item the first
    /// tag-matching slot points at. Only hints: racy reads validated
    /// against the shard's sequence before an address is formed from them.
    pub(super) fn prefetch_hashes(&self, hashes: &[u64]) {
        let hashes = &hashes[..hashes.len().min(MAX_WINDOW)];
        let _pin = super::batch::pin();
        for hash in hashes {
            let view = &self.views[self.shard_of(*hash)];
            let (slots, capacity) = view.slots();
            if capacity != 0 {
                // Never dereferenced here: a prefetch of any address is harmless.
                crate::prefetch::line(slots.wrapping_add(home_of(*hash, capacity)));
            }
        }
        for &hash in hashes {
            let view = &self.views[self.shard_of(hash)];
            let Some(s) = view.seq.read_begin() else { continue };
            let (slots, capacity) = view.slots();
            if capacity == 0 || !view.seq.read_valid(s) {
                continue;
            }
            let tag = tag_of(hash);
            let mut i = home_of(hash, capacity);
            for _ in 0..8 {
                // SAFETY: as in `lookup`: in bounds of an array validated at `s`,
                // kept mapped by the epoch pin.
                let slot = unsafe { read_slot_racy(slots.add(i)) };
                if slot & USED == 0 {
                    break;
                }
                if (slot >> TAG_SHIFT) & TAG_MASK == tag {
                    let loc = slot_loc(slot);
                    if let Some(seg) = view.segment(loc.seg).filter(|seg| (loc.offset as usize) < seg.len) {
                        // The item's first 64 bytes, which straddle two lines
                        // unless the item starts one.
                        let at = seg.ptr.wrapping_add(loc.offset as usize);
                        crate::prefetch::line(at);
                        crate::prefetch::line(at.wrapping_add(63));
                    }
                    break;
                }
                i = if i + 1 == capacity { 0 } else { i + 1 };
            }
        }
    }
}

/// The bump a read owes its item, under the lock, for the locked get and
/// `bump_after_read` alike: the slot's frequency one step up (to
/// `MAX_FREQ`), and into `change` the fetched mark and the access time when
/// the item was not fetched yet or last accessed in an earlier second.
/// Written only when it changes something, so an item read again within
/// the same second keeps its cache lines clean.
pub(super) fn bump_read(shard: &mut Shard, slot: usize, loc: Loc, fetched: bool, last_access: RelTime, now: RelTime, change: &mut Change) {
    let freq = slot_freq(shard.table.slot(slot));
    if freq < MAX_FREQ {
        shard.table.set_freq(slot, freq + 1);
    }
    let create_time = shard.seg(loc).create_time;
    if !fetched || access_delta(last_access, create_time) != access_delta(now, create_time) {
        change.set |= FETCHED;
        change.access = Some(now);
    }
}

/// Keys prefetched per call (a window of a longer multi-get).
pub const MAX_WINDOW: usize = 16;

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{Engine, EngineConfig, StoreRequest};

    const NOW: RelTime = 100;

    fn read(store: &SegStore, key: &[u8]) -> Option<Vec<u8>> {
        let mut got = None;
        let opts = GetOptions { no_token: true, ..GetOptions::default() };
        store.get(key, opts, NOW, &mut |item, _| {
            got = Some(item.value.to_vec());
            GetAction::default()
        });
        got
    }

    #[test]
    fn a_writer_in_the_shard_makes_a_get_retry_then_lock() {
        let store = SegStore::new(EngineConfig::default());
        store.store(&StoreRequest::set(b"k", b"v"), NOW);
        // Reads that bump (frequency, fetched bit) take the lock; after
        // them the item is settled for this second.
        for _ in 0..=MAX_FREQ {
            assert_eq!(read(&store, b"k").as_deref(), Some(&b"v"[..]));
        }
        let (retries, locked) = store.hits.read_path();
        assert_eq!(read(&store, b"k").as_deref(), Some(&b"v"[..]));
        assert_eq!(store.hits.read_path(), (retries, locked), "a settled item is read without the lock");

        let guard = store.lock(crate::hash_key(b"k"));
        std::thread::scope(|s| {
            let reader = s.spawn(|| read(&store, b"k"));
            // Every attempt sees the shard's sequence odd, then the reader
            // waits on the lock.
            let deadline = Instant::now() + Duration::from_secs(10);
            while store.hits.read_path().0 < retries + ATTEMPTS as u64 {
                assert!(Instant::now() < deadline, "the reader never retried");
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(guard);
            assert_eq!(reader.join().expect("reader").as_deref(), Some(&b"v"[..]));
        });
        assert_eq!(store.hits.read_path(), (retries + ATTEMPTS as u64, locked + 1));
        assert_eq!(store.stats().get_locked, locked + 1, "stats shows the same sum");
    }

    /// Only the first fetch takes the locked get; the frequency steps and a
    /// later second's access time are written after an optimistic read
    /// serves the copy, and land as the locked get would write them.
    #[test]
    fn bumps_after_the_first_fetch_are_written_after_an_optimistic_read() {
        let store = SegStore::new(EngineConfig::default());
        store.store(&StoreRequest::set(b"k", b"v"), NOW);
        let meta_at = |now: RelTime| {
            let mut meta = None;
            let opts = GetOptions { no_token: true, no_bump: true, ..GetOptions::default() };
            store.get(b"k", opts, now, &mut |item, _| {
                meta = Some(item.meta);
                GetAction::default()
            });
            meta.expect("hit")
        };
        let freq = || {
            let shard = store.lock(crate::hash_key(b"k"));
            let (index, _, _) = shard.find(b"k", crate::hash_key(b"k")).expect("present");
            slot_freq(shard.table.slot(index))
        };
        let (_, locked) = store.hits.read_path();
        assert_eq!(read(&store, b"k").as_deref(), Some(&b"v"[..]));
        assert_eq!(store.hits.read_path().1, locked + 1, "the first fetch is a locked get");
        assert!(meta_at(NOW).fetched);
        let after_first = freq();
        for _ in 0..MAX_FREQ {
            assert_eq!(read(&store, b"k").as_deref(), Some(&b"v"[..]));
        }
        assert_eq!(freq(), MAX_FREQ.max(after_first));
        assert_eq!(store.hits.read_path().1, locked + 1, "later bumps are not locked gets");
        // A read in a later second moves the access time, once.
        let mut got = None;
        let opts = GetOptions { no_token: true, ..GetOptions::default() };
        store.get(b"k", opts, NOW + 5, &mut |item, _| {
            got = Some(item.meta.last_access);
            GetAction::default()
        });
        assert_eq!(got, Some(NOW), "the reply shows the access before this read");
        assert_eq!(meta_at(NOW + 5).last_access, NOW + 5);
        assert_eq!(store.hits.read_path().1, locked + 1);
    }

    /// A plain get (`fetched_unseen`) reads even the first fetch without
    /// the lock; the mark is written after, once.
    #[test]
    fn a_first_fetch_nobody_is_shown_is_not_a_locked_get() {
        let store = SegStore::new(EngineConfig::default());
        store.store(&StoreRequest::set(b"k", b"v"), NOW);
        let (_, locked) = store.hits.read_path();
        let mut shown = None;
        let opts = GetOptions { no_token: true, fetched_unseen: true, ..GetOptions::default() };
        store.get(b"k", opts, NOW, &mut |item, _| {
            shown = Some(item.meta.fetched);
            GetAction::default()
        });
        assert_eq!(shown, Some(false));
        assert_eq!(store.hits.read_path().1, locked, "no locked get");
        let mut fetched = None;
        let peek = GetOptions { no_token: true, no_bump: true, ..GetOptions::default() };
        store.get(b"k", peek, NOW, &mut |item, _| {
            fetched = Some(item.meta.fetched);
            GetAction::default()
        });
        assert_eq!(fetched, Some(true), "marked after the read");
    }
}
