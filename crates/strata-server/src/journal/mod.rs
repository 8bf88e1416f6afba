//! The invalidation journal: which keys this node saw changed, and when,
//! so a peer that restarts on its memory file can drop exactly the items
//! that went stale while it was away (issue 20, docs/SCALE-OUT.md).
//!
//! ```text
//!  words (u64), one array: in `<memory file>.journal` with -e, else anonymous
//!  ┌──────────────────────┬───────────────────────────┬──────────────────────────┐
//!  │ header: 16 words     │ marks: 4096 × (unix, head) │ slots: 2^k ×             │
//!  │ (persist.rs; head at │ a ring, `marks_total` says │ (position 32b | tag 32b) │
//!  │ word 8, own line)    │ where the next one goes    │ slot = position mod 2^k  │
//!  └──────────────────────┴───────────────────────────┴──────────────────────────┘
//! ```
//!
//! Every mutation a client sends (set/add/replace/cas/append/prepend,
//! incr/decr, touch, gat, delete, their meta and binary forms; hits and
//! misses alike) claims the next position with one `fetch_add` on the head
//! and stores the key's tag (32 bits of the store's xxh3 key hash) with
//! the low 32 bits of its position, so a reader can tell a slot that is
//! still being written, or already overwritten, from the entry it wants.
//! Nothing else is on the request path: no lock, no allocation, no time
//! read. With a memory file the words are a shared mapping of a file
//! beside it (`persist.rs`), so the same two stores land in the page cache
//! and a `kill -9` loses none of them: the next process on the file goes
//! on from the same head, and the journal covers the node's whole life,
//! its downtimes included (a node that is down changes nothing).
//!
//! Time is kept beside the ring, not in it: once a second the acceptor's
//! tick pushes a mark (unix second, head) if the head moved, so "the
//! changes since T" are the positions from the last mark taken before T
//! up to the head (a superset: a conservative answer only drops more).
//! 4096 marks cover at least 68 minutes of a busy node, longer for an
//! idle one; a window older than the first mark, or longer than the ring,
//! is "not covered" and the asking node starts cold, except that a journal
//! born with its memory file (both new) has seen nothing before its birth
//! and answers for any window from there (`Changes::from_unix` later than
//! the window: the asking node decides, `warm.rs`). A `flush_all` is kept
//! as the time of the last one: a window that holds one is refused too.
//!
//! A tag is 32 bits, so a peer may drop a few keys that merely share a
//! tag with a changed one (with a 1M-entry journal and 10M items, about
//! 0.02% of them): a miss, never a stale value.

mod answer;
mod carry;
pub mod catchup;
pub mod peer;
mod persist;
mod sorted;
pub mod warm;

pub use answer::answer;
pub use warm::{warm_return, WarmReport, WarmReturn, WarmSettings};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use strata_store::SharedWords;

use persist::{MARKS_AT, SLOTS_AT, W_ALIVE, W_FLUSH, W_HEAD};

/// Time marks kept (one per second in which something was recorded).
const MARKS_MAX: usize = 4096;
/// Default `-o journal_size` at `-m` 256 MiB and above: entries (8 bytes
/// each: 4 MiB). Below that, [`default_entries`].
pub const DEFAULT_ENTRIES: usize = crate::settings::JOURNAL_DEFAULT_ENTRIES;
/// The smallest default (512 KiB).
const MIN_DEFAULT_ENTRIES: usize = 1 << 16;
/// The default journal's slots take at most `-m` / this.
const DEFAULT_SHARE_DIVISOR: u64 = 64;

/// Default `-o journal_size` for a node of `memory_limit_bytes` (`-m`):
/// slots of a 64th of `-m`, in a power of two of entries between 2^16 and
/// [`DEFAULT_ENTRIES`] (1 MiB, 131,072 entries, at `-m 64`; 4 MiB from
/// `-m 256`). Once as many changes as slots came in the journal is
/// resident whole, and memcached has none: a small node keeps one in
/// proportion to the cache it protects (at `-m 64`, 131,072 changes: 0.4
/// of the 300,000 items of 200 bytes it holds).
pub fn default_entries(memory_limit_bytes: u64) -> usize {
    let slots = (memory_limit_bytes / DEFAULT_SHARE_DIVISOR / 8).max(1);
    let pow2 = 1usize << (63 - slots.leading_zeros());
    pow2.clamp(MIN_DEFAULT_ENTRIES, DEFAULT_ENTRIES)
}
/// Largest `-o journal_size` accepted (2 GiB of slots).
pub const MAX_ENTRIES: usize = crate::settings::JOURNAL_MAX_ENTRIES;

/// Byte offsets of the journal file's marks and slots (`persist.rs`), for
/// the damage harness (`fuzzing/journal.rs`).
#[doc(hidden)]
pub const FILE_MARKS_AT: usize = persist::MARKS_AT * 8;
#[doc(hidden)]
pub const FILE_SLOTS_AT: usize = persist::SLOTS_AT * 8;

/// The 32 bits of a key's hash a journal keeps and a peer matches on.
#[inline]
pub fn tag(key: &[u8]) -> u32 {
    strata_store::hash_key(key) as u32
}

/// Why a journal cannot answer for a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `-o journal_size=0`.
    Off,
    /// A `flush_all` was sent at or after the window's start.
    Flushed,
    /// The journal began (its file was made, or this process started
    /// without one) after the window's start.
    TooOld,
    /// The window holds more changes than the ring keeps.
    Wrapped,
    /// A writer held a slot of the window for too long.
    Busy,
    /// The window holds a position a killed process claimed but never
    /// wrote (`kill -9` between the two stores of a record).
    Lost,
}

impl Refusal {
    pub fn word(self) -> &'static str {
        match self {
            Refusal::Off => "off",
            Refusal::Flushed => "flushed",
            Refusal::TooOld => "too_old",
            Refusal::Wrapped => "wrapped",
            Refusal::Busy => "busy",
            Refusal::Lost => "lost",
        }
    }
}

/// The changes since a time: sorted, distinct key tags, and the unix
/// second from which they are complete (later than the window asked for
/// only when the journal was born then: nothing came before it).
pub struct Changes {
    pub tags: Vec<u32>,
    pub from_unix: i64,
}

struct Ring {
    /// Header, marks and slots (`persist.rs` has the layout).
    words: SharedWords,
    mask: u64,
    /// The marks, oldest first: the words' mark ring, in order.
    marks: Mutex<VecDeque<(i64, u64)>>,
    /// Positions below this may hold no tag (a killed writer's claim).
    lost_below: u64,
    /// Unix second the journal was born with its memory file, if it was
    /// (its first mark is then (born, 0)).
    born_unix: Option<i64>,
}

impl Ring {
    #[inline]
    fn head(&self) -> &AtomicU64 {
        &self.words.words()[W_HEAD]
    }

    #[inline]
    fn slot(&self, pos: u64) -> &AtomicU64 {
        &self.words.words()[SLOTS_AT + (pos & self.mask) as usize]
    }

    /// Store position `pos`'s tag. A slot holds its word (position 32b |
    /// tag 32b) complemented, so a zeroed slot reads as `u64::MAX`, the
    /// unused word: a new ring's pages, zero from the kernel, need no
    /// writing, and cost memory only as changes reach them.
    #[inline]
    fn put(&self, pos: u64, tag: u32) {
        self.slot(pos).store(!((pos << 32) | u64::from(tag)), Ordering::Release);
    }

    /// The word at position `pos`'s slot (`u64::MAX`: never written).
    #[inline]
    fn word(&self, pos: u64) -> u64 {
        !self.slot(pos).load(Ordering::Acquire)
    }

    fn flush_unix(&self) -> i64 {
        self.words.words()[W_FLUSH].load(Ordering::Relaxed) as i64
    }

    /// Push a mark, in memory and in the words (the entry first, then the
    /// count: a process killed between the two loses only that mark).
    fn push_mark(&self, marks: &mut VecDeque<(i64, u64)>, unix: i64, head: u64) {
        if marks.len() == MARKS_MAX {
            marks.pop_front();
        }
        marks.push_back((unix, head));
        let w = self.words.words();
        let total = w[persist::W_MARKS_TOTAL].load(Ordering::Relaxed);
        let at = MARKS_AT + 2 * (total as usize % MARKS_MAX);
        w[at].store(unix as u64, Ordering::Relaxed);
        w[at + 1].store(head, Ordering::Relaxed);
        w[persist::W_MARKS_TOTAL].store(total + 1, Ordering::Release);
    }

    /// Write every mark again (after a handover's import replaced them).
    fn rewrite_marks(&self, marks: &VecDeque<(i64, u64)>) {
        let w = self.words.words();
        for (i, &(t, h)) in marks.iter().enumerate() {
            w[MARKS_AT + 2 * i].store(t as u64, Ordering::Relaxed);
            w[MARKS_AT + 2 * i + 1].store(h, Ordering::Relaxed);
        }
        w[persist::W_MARKS_TOTAL].store(marks.len() as u64, Ordering::Release);
    }
}

pub struct Journal {
    ring: Option<Ring>,
    /// Went on from a file a previous process wrote (a handover's copy of
    /// the same journal is then not replayed).
    continued: bool,
    /// The previous process's last tick and this start (unix seconds), when
    /// the journal went on from a file: the gap it was down.
    pub down: Option<(i64, i64)>,
    /// `mj` requests answered with changes / refused.
    pub served: AtomicU64,
    pub refused: AtomicU64,
    /// What `mj` answers from, built at the first (`sorted.rs`).
    sorted: Mutex<sorted::Sorted>,
}

impl Journal {
    /// A journal of `entries` (rounded up to a power of two; 0: off) in
    /// anonymous memory, starting at unix second `now_unix`: it covers
    /// from its start only (no memory file: nothing outlives the process).
    pub fn new(entries: usize, now_unix: i64) -> Journal {
        let ring = (entries > 0).then(|| persist::anonymous(entries, now_unix)).flatten();
        Journal::with(ring, false, None)
    }

    /// The journal of a server with a memory file: kept in `path` (the
    /// memory file's name with `.journal` added), going on from what a
    /// previous process left there. `restored`: the memory file held a
    /// previous process's cache (a new journal file beside it is then not
    /// a birth: that process saw changes this file never recorded).
    pub fn open(entries: usize, path: &std::path::Path, restored: bool, now_unix: i64) -> Journal {
        if entries == 0 {
            return Journal::new(0, now_unix);
        }
        match persist::open(entries, path, restored, now_unix) {
            Ok(opened) => {
                crate::log_line!("strata: journal {}: {}", path.display(), opened.line);
                Journal::with(Some(opened.ring), opened.continued, opened.down)
            }
            Err(e) => {
                crate::log_line!("strata: journal {}: {e}; kept in memory only (it covers from this start)", path.display());
                Journal::new(entries, now_unix)
            }
        }
    }

    /// The journal of a server: beside its memory file (`-e`), else in
    /// memory.
    pub fn for_server(settings: &crate::settings::Settings, engine: &dyn strata_store::Engine) -> Journal {
        let now_unix = strata_store::clock::unix_time();
        match &settings.memory_file {
            Some(file) => {
                let mut path = file.clone().into_os_string();
                path.push(".journal");
                let restored = engine.stats().restart.is_some_and(|r| r.ok);
                Journal::open(settings.warm.journal_entries, std::path::Path::new(&path), restored, now_unix)
            }
            None => Journal::new(settings.warm.journal_entries, now_unix),
        }
    }

    fn with(ring: Option<Ring>, continued: bool, down: Option<(i64, i64)>) -> Journal {
        Journal { ring, continued, down, served: AtomicU64::new(0), refused: AtomicU64::new(0), sorted: Mutex::default() }
    }

    pub fn is_on(&self) -> bool {
        self.ring.is_some()
    }

    /// Whether this journal answers for windows before its process started.
    pub fn continued(&self) -> bool {
        self.continued
    }

    /// The unix second it was born with its memory file, if it was.
    pub fn born_unix(&self) -> Option<i64> {
        self.ring.as_ref().and_then(|r| r.born_unix)
    }

    /// Record a change of `key`. Called before the store changes it, so a
    /// reader that sees the position sees the change's tag right after.
    #[inline]
    pub fn record(&self, key: &[u8]) {
        if let Some(ring) = &self.ring {
            let tag = tag(key);
            let pos = ring.head().fetch_add(1, Ordering::AcqRel);
            ring.put(pos, tag);
        }
    }

    /// Record a `flush_all` (any delay: the window that holds it is refused).
    pub fn record_flush(&self, now_unix: i64) {
        if let Some(ring) = &self.ring {
            ring.words.words()[W_FLUSH].store(now_unix as u64, Ordering::Relaxed);
        }
    }

    /// Once a second: mark where the head stands, and that this node is
    /// alive (the start of a downtime, for the next process).
    pub fn tick(&self, now_unix: i64) {
        let Some(ring) = &self.ring else { return };
        ring.words.words()[W_ALIVE].store(now_unix as u64, Ordering::Relaxed);
        let head = ring.head().load(Ordering::Acquire);
        let mut marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        if marks.back().is_some_and(|&(t, h)| h == head || t >= now_unix) {
            return;
        }
        ring.push_mark(&mut marks, now_unix, head);
    }

    /// Graceful stop: the last tick, and the words written back (a no-op
    /// on tmpfs).
    pub fn close(&self, now_unix: i64) {
        self.tick(now_unix);
        if let Some(ring) = &self.ring {
            if let Err(e) = ring.words.flush() {
                crate::log_line!("strata: journal: writing back failed: {e}");
            }
        }
    }

    /// Entries the ring holds (0: off), and its bytes.
    pub fn capacity(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.mask + 1)
    }

    pub fn bytes(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| (SLOTS_AT as u64 + r.mask + 1) * 8)
    }

    /// Bytes of the ring that memory holds (`stats memory`): its header
    /// and marks, and the slots written so far, up to all of them (slots
    /// are written in order, and a page no change has reached costs
    /// nothing). With a file that went on from a previous process, its
    /// written slots count though they are only read from disk when used.
    /// The sorted view `mj` answers from counts too, once built.
    pub fn resident_bytes(&self) -> u64 {
        let view = self.sorted.lock().unwrap_or_else(|e| e.into_inner()).bytes();
        self.ring.as_ref().map_or(0, |r| (SLOTS_AT as u64 + self.recorded().min(r.mask + 1)) * 8 + view)
    }

    /// Changes recorded in the journal's life (its file's, with one).
    pub fn recorded(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.head().load(Ordering::Relaxed))
    }

    /// Unix second of the oldest change the ring still holds a mark for.
    pub fn covers_from_unix(&self) -> Option<i64> {
        let ring = self.ring.as_ref()?;
        let head = ring.head().load(Ordering::Acquire);
        let marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks.iter().find(|&&(_, h)| head - h <= ring.mask + 1 && h >= ring.lost_below).map(|&(t, _)| t)
    }

    /// The keys changed at or after unix second `since`.
    pub fn changes_since(&self, since: i64) -> Result<Changes, Refusal> {
        let (ring, window) = self.window(since)?;
        let mut view = self.sorted.lock().unwrap_or_else(|e| e.into_inner());
        let tags = view.tags(ring, window.oldest, window.start, window.head)?;
        Ok(Changes { tags, from_unix: window.from_unix })
    }

    /// [`Journal::changes_since`] as it was before the sorted view: every
    /// slot of the window read and sorted (the view's tests compare).
    #[cfg(test)]
    fn changes_since_by_sorting(&self, since: i64) -> Result<Changes, Refusal> {
        let (ring, window) = self.window(since)?;
        let mut tags = Vec::new();
        for pos in window.start..window.head {
            tags.push(read_slot(ring, pos)?);
        }
        tags.sort_unstable();
        tags.dedup();
        Ok(Changes { tags, from_unix: window.from_unix })
    }

    /// The positions that hold the changes since `since`, or why the ring
    /// cannot say.
    fn window(&self, since: i64) -> Result<(&Ring, Window), Refusal> {
        let ring = self.ring.as_ref().ok_or(Refusal::Off)?;
        let flushed = ring.flush_unix();
        if flushed != 0 && flushed >= since {
            return Err(Refusal::Flushed);
        }
        let size = ring.mask + 1;
        // The last mark strictly before `since`: every change at or after
        // `since` was recorded at or after its position. None: the window
        // begins before the journal; a born journal saw nothing before
        // its first mark, (born, 0), so it answers from there.
        let (from_unix, start, oldest, head) = {
            let marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
            // Read under the lock: every mark's position is at or below it.
            let head = ring.head().load(Ordering::Acquire);
            let (from_unix, start) = match marks.iter().rev().find(|&&(t, _)| t < since) {
                Some(&mark) => mark,
                None => match (ring.born_unix, marks.front()) {
                    (Some(born), Some(&(t, 0))) if t == born => (born, 0),
                    _ => return Err(Refusal::TooOld),
                },
            };
            // The oldest position any window could start at now: the view
            // is built from there, so an older window asked later does
            // not build it again.
            let oldest = marks.iter().map(|&(_, h)| h).find(|&h| head.checked_sub(h).is_some_and(|d| d <= size) && h >= ring.lost_below);
            (from_unix, start, oldest.map_or(start, |h| h.min(start)), head)
        };
        if start < ring.lost_below {
            return Err(Refusal::Lost);
        }
        if head.checked_sub(start).is_none_or(|d| d > size) {
            return Err(Refusal::Wrapped);
        }
        Ok((ring, Window { from_unix, start, oldest, head }))
    }
}

/// Positions `[start, head)` hold a window's changes, complete from
/// `from_unix`; `oldest`, at or before `start`, is where the oldest
/// window the ring answers for starts.
struct Window {
    from_unix: i64,
    start: u64,
    oldest: u64,
    head: u64,
}

/// The tag at `pos`, waiting (briefly) for a writer that has claimed the
/// position but not yet stored it.
fn read_slot(ring: &Ring, pos: u64) -> Result<u32, Refusal> {
    let want = pos as u32;
    for attempt in 0..1000 {
        let v = ring.word(pos);
        let at = (v >> 32) as u32;
        if at == want {
            return Ok(v as u32);
        }
        // A later lap overwrote it: the window is longer than the ring.
        if at.wrapping_sub(want) < (1 << 31) && v != u64::MAX {
            return Err(Refusal::Wrapped);
        }
        if attempt > 10 {
            std::thread::sleep(std::time::Duration::from_micros(10));
        } else {
            std::hint::spin_loop();
        }
    }
    Err(Refusal::Busy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_size_follows_the_memory_limit() {
        assert_eq!(default_entries(64 << 20), 1 << 17, "-m 64: 1 MiB");
        assert_eq!(default_entries(100 << 20), 1 << 17, "rounded down to a power of two");
        assert_eq!(default_entries(256 << 20), DEFAULT_ENTRIES, "-m 256: 4 MiB");
        assert_eq!(default_entries(64 << 30), DEFAULT_ENTRIES, "never larger than 4 MiB");
        assert_eq!(default_entries(1 << 20), MIN_DEFAULT_ENTRIES, "never smaller than 512 KiB");
    }

    #[test]
    fn changes_since_a_mark_are_the_keys_recorded_after_it() {
        let j = Journal::new(16, 1000);
        j.record(b"old");
        j.tick(1001);
        j.record(b"a");
        j.record(b"b");
        j.record(b"a");
        let c = j.changes_since(1002).unwrap_or_else(|e| panic!("not covered: {e:?}"));
        let mut want = vec![tag(b"a"), tag(b"b")];
        want.sort_unstable();
        assert_eq!(c.tags, want);
        assert_eq!(c.from_unix, 1001);
        // A window reaching before the mark at 1001 includes "old" too.
        assert_eq!(j.changes_since(1001).unwrap_or_else(|e| panic!("not covered: {e:?}")).tags.len(), 3);
    }

    #[test]
    fn a_window_before_the_start_or_longer_than_the_ring_is_refused() {
        let j = Journal::new(4, 1000);
        assert_eq!(j.changes_since(1000).err(), Some(Refusal::TooOld));
        for i in 0..4u32 {
            j.record(&i.to_le_bytes());
        }
        assert!(j.changes_since(1001).is_ok());
        j.record(b"fifth");
        assert_eq!(j.changes_since(1001).err(), Some(Refusal::Wrapped));
        assert_eq!(Journal::new(0, 1).changes_since(5).err(), Some(Refusal::Off));
    }

    #[test]
    fn a_flush_in_the_window_is_refused() {
        let j = Journal::new(8, 1000);
        j.record_flush(1005);
        assert_eq!(j.changes_since(1004).err(), Some(Refusal::Flushed));
        assert!(j.changes_since(1006).is_ok());
    }

    #[test]
    fn marks_skip_idle_seconds_and_stay_bounded() {
        let j = Journal::new(8, 0);
        let marks = |j: &Journal| j.ring.as_ref().map(|r| r.marks.lock().map(|m| m.len()).unwrap_or(0)).unwrap_or(0);
        for t in 1..100 {
            j.tick(t);
        }
        assert_eq!(marks(&j), 1, "an idle second adds no mark");
        for t in 100..10_000 {
            j.record(b"k");
            j.tick(t);
        }
        assert_eq!(marks(&j), MARKS_MAX);
    }
}
