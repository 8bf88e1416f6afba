//! The invalidation journal: which keys this node saw changed, and when,
//! so a peer that restarts on its memory file can drop exactly the items
//! that went stale while it was away (issue 20, docs/SCALE-OUT.md).
//!
//! ```text
//!  slots: 2^k × 8 B, a ring              marks: ≤ 4096 × 16 B, a queue
//!  ┌────────────────┬────────────────┐    ┌─────────────┬──────────────┐
//!  │ position (32b) │ key tag (32b)  │    │ unix second │ head then    │
//!  └────────────────┴────────────────┘    └─────────────┴──────────────┘
//!  head: u64, the next position; slot = position mod 2^k
//! ```
//!
//! Every mutation a client sends (set/add/replace/cas/append/prepend,
//! incr/decr, touch, gat, delete, their meta and binary forms; hits and
//! misses alike) claims the next position with one `fetch_add` and stores
//! the key's tag (32 bits of the store's xxh3 key hash) with the low 32
//! bits of its position, so a reader can tell a slot that is still being
//! written, or already overwritten, from the entry it wants. Nothing
//! else is on the request path: no lock, no allocation, no time read.
//!
//! Time is kept beside the ring, not in it: once a second the acceptor's
//! tick pushes a mark (unix second, head) if the head moved, so "the
//! changes since T" are the positions from the last mark taken before T
//! up to the head (a superset: a conservative answer only drops more).
//! 4096 marks cover at least 68 minutes of a busy node, longer for an
//! idle one; a window older than the first mark, or longer than the ring,
//! is "not covered" and the asking node starts cold. A `flush_all` is kept
//! as the time of the last one: a window that holds one is refused too.
//!
//! A tag is 32 bits, so a peer may drop a few keys that merely share a
//! tag with a changed one (with a 1M-entry journal and 10M items, about
//! 0.02% of them): a miss, never a stale value.

mod answer;
mod carry;
pub mod catchup;
pub mod peer;
pub mod warm;

pub use answer::answer;
pub use warm::{warm_return, WarmReport, WarmSettings};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

/// Time marks kept (one per second in which something was recorded).
const MARKS_MAX: usize = 4096;
/// Default `-o journal_size`: entries (8 bytes each: 4 MiB).
pub const DEFAULT_ENTRIES: usize = 1 << 19;
/// Largest `-o journal_size` accepted (2 GiB of slots).
pub const MAX_ENTRIES: usize = 1 << 28;

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
    /// The journal began (this process started) after the window's start.
    TooOld,
    /// The window holds more changes than the ring keeps.
    Wrapped,
    /// A writer held a slot of the window for too long.
    Busy,
}

impl Refusal {
    pub fn word(self) -> &'static str {
        match self {
            Refusal::Off => "off",
            Refusal::Flushed => "flushed",
            Refusal::TooOld => "too_old",
            Refusal::Wrapped => "wrapped",
            Refusal::Busy => "busy",
        }
    }
}

/// The changes since a time: sorted, distinct key tags, and the unix
/// second from which they are complete.
pub struct Changes {
    pub tags: Vec<u32>,
    pub from_unix: i64,
}

struct Ring {
    slots: Box<[AtomicU64]>,
    mask: u64,
    head: AtomicU64,
    /// (unix second, head then), oldest first.
    marks: Mutex<VecDeque<(i64, u64)>>,
}

pub struct Journal {
    ring: Option<Ring>,
    /// Unix second of the last `flush_all` (0: none since start).
    last_flush_unix: AtomicI64,
    /// `mj` requests answered with changes / refused.
    pub served: AtomicU64,
    pub refused: AtomicU64,
}

impl Journal {
    /// A journal of `entries` (rounded up to a power of two; 0: off),
    /// starting at unix second `now_unix`.
    pub fn new(entries: usize, now_unix: i64) -> Journal {
        let ring = (entries > 0).then(|| {
            let n = entries.clamp(2, MAX_ENTRIES).next_power_of_two();
            Ring {
                // Position u32::MAX never matches a first lap's position.
                slots: (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
                mask: n as u64 - 1,
                head: AtomicU64::new(0),
                marks: Mutex::new(VecDeque::from([(now_unix, 0)])),
            }
        });
        Journal { ring, last_flush_unix: AtomicI64::new(0), served: AtomicU64::new(0), refused: AtomicU64::new(0) }
    }

    pub fn is_on(&self) -> bool {
        self.ring.is_some()
    }

    /// Record a change of `key`. Called before the store changes it, so a
    /// reader that sees the position sees the change's tag right after.
    #[inline]
    pub fn record(&self, key: &[u8]) {
        if let Some(ring) = &self.ring {
            let tag = tag(key);
            let pos = ring.head.fetch_add(1, Ordering::AcqRel);
            ring.slots[(pos & ring.mask) as usize].store((pos << 32) | u64::from(tag), Ordering::Release);
        }
    }

    /// Record a `flush_all` (any delay: the window that holds it is refused).
    pub fn record_flush(&self, now_unix: i64) {
        self.last_flush_unix.store(now_unix, Ordering::Relaxed);
    }

    /// Once a second: mark where the head stands.
    pub fn tick(&self, now_unix: i64) {
        let Some(ring) = &self.ring else { return };
        let head = ring.head.load(Ordering::Acquire);
        let mut marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        if marks.back().is_some_and(|&(t, h)| h == head || t >= now_unix) {
            return;
        }
        if marks.len() == MARKS_MAX {
            marks.pop_front();
        }
        marks.push_back((now_unix, head));
    }

    /// Entries the ring holds (0: off), and its bytes.
    pub fn capacity(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.mask + 1)
    }

    pub fn bytes(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| (r.mask + 1) * 8 + (MARKS_MAX as u64) * 16)
    }

    /// Changes recorded since start.
    pub fn recorded(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.head.load(Ordering::Relaxed))
    }

    /// Unix second of the oldest change the ring still holds a mark for.
    pub fn covers_from_unix(&self) -> Option<i64> {
        let ring = self.ring.as_ref()?;
        let head = ring.head.load(Ordering::Acquire);
        let marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks.iter().find(|&&(_, h)| head - h <= ring.mask + 1).map(|&(t, _)| t)
    }

    /// The keys changed at or after unix second `since`.
    pub fn changes_since(&self, since: i64) -> Result<Changes, Refusal> {
        let ring = self.ring.as_ref().ok_or(Refusal::Off)?;
        let flushed = self.last_flush_unix.load(Ordering::Relaxed);
        if flushed != 0 && flushed >= since {
            return Err(Refusal::Flushed);
        }
        // The last mark strictly before `since`: every change at or after
        // `since` was recorded at or after its position.
        let (from_unix, start) = {
            let marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
            *marks.iter().rev().find(|&&(t, _)| t < since).ok_or(Refusal::TooOld)?
        };
        let head = ring.head.load(Ordering::Acquire);
        let size = ring.mask + 1;
        if head - start > size {
            return Err(Refusal::Wrapped);
        }
        let mut tags = Vec::with_capacity((head - start) as usize);
        for pos in start..head {
            tags.push(read_slot(ring, pos)?);
        }
        tags.sort_unstable();
        tags.dedup();
        Ok(Changes { tags, from_unix })
    }
}

/// The tag at `pos`, waiting (briefly) for a writer that has claimed the
/// position but not yet stored it.
fn read_slot(ring: &Ring, pos: u64) -> Result<u32, Refusal> {
    let slot = &ring.slots[(pos & ring.mask) as usize];
    let want = pos as u32;
    for attempt in 0..1000 {
        let v = slot.load(Ordering::Acquire);
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
