//! The sampled accesses on their way to `stats mrc`'s simulations
//! (`mrc.rs`): each thread appends to a lane of its own and only a full lane
//! takes the simulations' mutex, so a sampled get writes no cache line
//! another core writes (before, every sampled get, 1 in 64 at `-m 64`, took
//! the one global mutex).
//!
//! ```text
//!  thread ──LANE (thread-local, from a global count)──► lanes[LANE % LANES]
//!     lock the lane (uncontended: its own line), push the event
//!     BATCH events? ──yes──► lock the curve, apply them in order, clear
//!  a reader (stats mrc, /metrics, the tick, stats reset)
//!     each lane: lock it, lock the curve, apply what it holds, clear
//! ```
//!
//! Lock order is always lane, then curve. A thread's events reach the
//! simulations in its own order, at most [`BATCH`] late; events of different
//! threads interleave by batch, which a simulation of thousands of items
//! does not feel. Up to [`LANES`] threads each have a lane to themselves;
//! more share lanes (still correct, through the lane's mutex).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Lanes: one per worker thread up to this many.
pub const LANES: usize = 16;
/// Events a lane holds before it is applied.
pub const BATCH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A read of the key hashing to this (hit or miss).
    Get(u64),
    /// An item of this many bytes stored for the key hashing to this.
    Stored(u64, u32),
}

#[repr(align(128))]
#[derive(Default)]
struct Lane(Mutex<Vec<Event>>);

pub struct Feed {
    lanes: Box<[Lane]>,
}

static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static LANE: usize = NEXT_LANE.fetch_add(1, Ordering::Relaxed) % LANES;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Feed {
    fn default() -> Feed {
        Feed { lanes: (0..LANES).map(|_| Lane(Mutex::new(Vec::with_capacity(BATCH)))).collect() }
    }
}

impl Feed {
    /// Queue `event` on this thread's lane; a full lane is handed to
    /// `apply` (which takes the curve's lock) and emptied.
    pub fn push(&self, event: Event, apply: impl FnOnce(&[Event])) {
        let lane = LANE.with(|l| *l);
        let mut events = lock(&self.lanes[lane].0);
        events.push(event);
        if events.len() >= BATCH {
            apply(&events);
            events.clear();
        }
    }

    /// Hand every queued event to `apply`, lane by lane, and empty the lanes.
    pub fn drain(&self, mut apply: impl FnMut(&[Event])) {
        for lane in self.lanes.iter() {
            let mut events = lock(&lane.0);
            if !events.is_empty() {
                apply(&events);
                events.clear();
            }
        }
    }

    /// Heap bytes of the lanes.
    pub fn bytes(&self) -> usize {
        self.lanes.iter().map(|l| std::mem::size_of::<Lane>() + lock(&l.0).capacity() * std::mem::size_of::<Event>()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event pushed reaches `apply` once, each thread's in its order,
    /// whether through a full lane or a drain.
    #[test]
    fn every_event_arrives_once_in_each_threads_order() {
        let feed = Feed::default();
        let seen = Mutex::new(Vec::new());
        let threads = 24u64; // more than LANES: some share a lane
        let per_thread = 1000u64; // not a multiple of BATCH: leftovers drain
        std::thread::scope(|s| {
            for t in 0..threads {
                let (feed, seen) = (&feed, &seen);
                s.spawn(move || {
                    for i in 0..per_thread {
                        let e = if i % 3 == 0 { Event::Stored(t << 32 | i, i as u32) } else { Event::Get(t << 32 | i) };
                        feed.push(e, |batch| lock(seen).extend_from_slice(batch));
                    }
                });
            }
        });
        feed.drain(|batch| lock(&seen).extend_from_slice(batch));
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len() as u64, threads * per_thread);
        let mut next = vec![0u64; threads as usize];
        for e in seen {
            let h = match e {
                Event::Get(h) | Event::Stored(h, _) => h,
            };
            let (t, i) = ((h >> 32) as usize, h & 0xffff_ffff);
            assert_eq!(i, next[t], "thread {t}'s events out of order");
            next[t] += 1;
        }
        assert!(next.iter().all(|&n| n == per_thread));
    }

    #[test]
    fn a_lane_is_applied_when_full_and_not_before() {
        let feed = Feed::default();
        let mut applied = 0;
        for i in 0..BATCH as u64 - 1 {
            feed.push(Event::Get(i), |b| applied += b.len());
        }
        assert_eq!(applied, 0);
        feed.push(Event::Get(0), |b| applied += b.len());
        assert_eq!(applied, BATCH);
        let mut drained = 0;
        feed.drain(|b| drained += b.len());
        assert_eq!(drained, 0);
    }
}
