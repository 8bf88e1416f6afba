//! What a get counts, per thread: hits per size class and queue, and how
//! the lock-free read went (attempts retried because a writer ran
//! meanwhile, reads finished under the shard lock). A get writes only its
//! own thread's line; `stats items`/`slabs`, `/metrics` and the MRC read
//! the sums (`SegStore::class_stats`, `SegStore::stats`).
//!
//! ```text
//!  Hits.rows[row]: Line([AtomicU64; 2 x 64 + 2])    hot, warm per class; retries; locked
//!   rows 0..16: each leased to one live thread     load + add + store (no lock prefix)
//!   row 16: every thread past the first 16          fetch_add
//!  Hits.base: the sums at the last `stats reset`    reads subtract it
//! ```
//!
//! A thread leases a row of its own on its first count (a bit in `TAKEN`)
//! and returns it when it exits, so the server's workers (up to 16 live
//! counting threads) each add with a plain load and store: no locked
//! instruction, no line another core writes. Past 16 live threads the
//! others share the last row and pay a `fetch_add`, which costs speed, not
//! counts. Handing a row over is ordered: the exiting thread's last store
//! happens before its release of the bit, which happens before the next
//! owner's acquire. A reset cannot zero a row another thread is adding to
//! (its next store would undo the zero), so it records the sums as a
//! baseline instead.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::Line;
use crate::class_stats::{ClassCounters, ClassStats, Queue};
use crate::classes::MAX_CLASSES;

/// Rows a live thread holds alone.
const OWNED: usize = 16;
/// The row every thread without one of its own shares.
const SHARED: usize = OWNED;
const CLASSES: usize = MAX_CLASSES + 1;
/// Where a row keeps the lock-free read's two counts.
const RETRIES: usize = 2 * CLASSES;
const LOCKED: usize = RETRIES + 1;
const COUNTS: usize = 2 * CLASSES + 2;

pub struct Hits {
    rows: Box<[Line<[AtomicU64; COUNTS]>]>,
    /// Each count's sum at the last reset.
    base: Box<[AtomicU64; COUNTS]>,
}

/// Bit `r` set: row `r` (< OWNED) is leased to a live thread.
static TAKEN: AtomicU32 = AtomicU32::new(0);

/// This thread's row for as long as it lives.
struct Lease {
    row: usize,
}

impl Lease {
    fn take() -> Lease {
        let mut taken = TAKEN.load(Ordering::Relaxed);
        loop {
            let free = (!taken).trailing_zeros() as usize;
            if free >= OWNED {
                return Lease { row: SHARED };
            }
            match TAKEN.compare_exchange_weak(taken, taken | 1 << free, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Lease { row: free },
                Err(now) => taken = now,
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.row != SHARED {
            TAKEN.fetch_and(!(1 << self.row), Ordering::Release);
        }
    }
}

thread_local! {
    static LEASE: Lease = Lease::take();
}

impl Hits {
    pub fn new() -> Hits {
        let counts = || Line(std::array::from_fn(|_| AtomicU64::new(0)));
        Hits { rows: (0..=SHARED).map(|_| counts()).collect(), base: Box::new(std::array::from_fn(|_| AtomicU64::new(0))) }
    }

    #[inline]
    fn add(&self, at: usize, n: u64) {
        // A thread already tearing its lease down counts in the shared row.
        let row = LEASE.try_with(|l| l.row).unwrap_or(SHARED);
        let count = &self.rows[row].0[at];
        if row == SHARED {
            count.fetch_add(n, Ordering::Relaxed);
        } else {
            // The row's only writer (its lease): no other add can interleave.
            count.store(count.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    }

    /// Bytes held (`stats memory`): the padded rows and the baseline.
    pub fn bytes(&self) -> usize {
        self.rows.len() * std::mem::size_of::<Line<[AtomicU64; COUNTS]>>() + std::mem::size_of::<[AtomicU64; COUNTS]>()
    }

    /// A get hit an item of class `cls` in `queue`.
    #[inline]
    pub fn hit(&self, cls: u8, queue: Queue) {
        self.add(usize::from(cls).min(CLASSES - 1) * 2 + usize::from(queue == Queue::Warm), 1);
    }

    /// `n` lock-free attempts of a get saw a writer and were repeated.
    #[inline]
    pub fn retried(&self, n: u64) {
        self.add(RETRIES, n);
    }

    /// A get left its lock-free attempt for the locked one (writers kept
    /// running, or the read has something to write: a bump, an expiry).
    #[inline]
    pub fn locked(&self) {
        self.add(LOCKED, 1);
    }

    /// Count `at` summed over the threads, since the last reset.
    fn sum(&self, at: usize) -> u64 {
        let total = self.rows.iter().map(|r| r.0[at].load(Ordering::Relaxed)).sum::<u64>();
        total.saturating_sub(self.base[at].load(Ordering::Relaxed))
    }

    /// Every thread's (retried attempts, locked gets).
    pub fn read_path(&self) -> (u64, u64) {
        (self.sum(RETRIES), self.sum(LOCKED))
    }

    /// Add every thread's counts into `out`'s rows.
    pub fn add_to(&self, out: &mut ClassStats) {
        for cls in 0..CLASSES {
            let (hot, warm) = (self.sum(cls * 2), self.sum(cls * 2 + 1));
            if let Some(row) = out.classes.get_mut(cls).filter(|_| hot + warm != 0) {
                row.add(&ClassCounters { hits_to_hot: hot, hits_to_warm: warm, get_hits: hot + warm, ..ClassCounters::default() });
            }
        }
    }

    /// Counts start again from zero (`stats reset`).
    pub fn reset(&self) {
        for (at, base) in self.base.iter().enumerate() {
            base.store(self.rows.iter().map(|r| r.0[at].load(Ordering::Relaxed)).sum(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_rows_changing_hands_and_resets() {
        let hits = Hits::new();
        // More threads at once than there are rows of their own, twice
        // over: leases are returned and taken again.
        for round in 1..=2u64 {
            std::thread::scope(|s| {
                for _ in 0..24 {
                    s.spawn(|| {
                        for _ in 0..10_000 {
                            hits.locked();
                        }
                        hits.retried(3);
                    });
                }
            });
            assert_eq!(hits.read_path(), (round * 24 * 3, round * 240_000));
        }
        hits.reset();
        assert_eq!(hits.read_path(), (0, 0));
        std::thread::scope(|s| {
            s.spawn(|| hits.locked());
        });
        hits.locked();
        assert_eq!(hits.read_path(), (0, 2));
    }
}
