//! What a get counts, per thread: hits per size class and queue, and how
//! the lock-free read went (attempts retried because a writer ran
//! meanwhile, reads finished under the shard lock). A get writes only its
//! own thread's line; `stats items`/`slabs`, `/metrics`, the MRC and
//! `stats` (`get_retries`, `get_locked`) read the sum
//! (`SegStore::class_stats`, `SegStore::stats`).
//!
//! ```text
//!  Hits.rows[thread slot]: Line([AtomicU64; 2 x 64 + 2])
//!   hot, warm per class; retries; locked     = about 1 KiB a slot, 16 slots
//! ```
//!
//! A thread takes slot `n % 16` from a process-wide count of the threads
//! that ever counted a hit, so up to 16 threads (the server's workers)
//! never share a line; past that two threads share a slot, which costs
//! speed, not counts (`fetch_add`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::Line;
use crate::class_stats::{ClassCounters, ClassStats, Queue};
use crate::classes::MAX_CLASSES;

const SLOTS: usize = 16;
const CLASSES: usize = MAX_CLASSES + 1;
/// Where a row keeps the lock-free read's two counts.
const RETRIES: usize = 2 * CLASSES;
const LOCKED: usize = RETRIES + 1;

pub struct Hits {
    rows: Box<[Line<[AtomicU64; 2 * CLASSES + 2]>]>,
}

static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: usize = THREADS.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

impl Hits {
    pub fn new() -> Hits {
        Hits { rows: (0..SLOTS).map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))).collect() }
    }

    /// A get hit an item of class `cls` in `queue`.
    #[inline]
    pub fn hit(&self, cls: u8, queue: Queue) {
        let slot = SLOT.with(|s| *s);
        let at = usize::from(cls).min(CLASSES - 1) * 2 + usize::from(queue == Queue::Warm);
        self.rows[slot].0[at].fetch_add(1, Ordering::Relaxed);
    }

    /// `n` lock-free attempts of a get saw a writer and were repeated.
    #[inline]
    pub fn retried(&self, n: u64) {
        let slot = SLOT.with(|s| *s);
        self.rows[slot].0[RETRIES].fetch_add(n, Ordering::Relaxed);
    }

    /// A get left its lock-free attempt for the locked one (writers kept
    /// running, or the read has something to write: a bump, an expiry).
    #[inline]
    pub fn locked(&self) {
        let slot = SLOT.with(|s| *s);
        self.rows[slot].0[LOCKED].fetch_add(1, Ordering::Relaxed);
    }

    /// Every thread's (retried attempts, locked gets).
    pub fn read_path(&self) -> (u64, u64) {
        let sum = |at: usize| self.rows.iter().map(|r| r.0[at].load(Ordering::Relaxed)).sum::<u64>();
        (sum(RETRIES), sum(LOCKED))
    }

    /// Add every thread's counts into `out`'s rows.
    pub fn add_to(&self, out: &mut ClassStats) {
        for cls in 0..CLASSES {
            let sum = |q: usize| self.rows.iter().map(|r| r.0[cls * 2 + q].load(Ordering::Relaxed)).sum::<u64>();
            let (hot, warm) = (sum(0), sum(1));
            if let Some(row) = out.classes.get_mut(cls).filter(|_| hot + warm != 0) {
                row.add(&ClassCounters { hits_to_hot: hot, hits_to_warm: warm, get_hits: hot + warm, ..ClassCounters::default() });
            }
        }
    }

    pub fn reset(&self) {
        for row in self.rows.iter() {
            for c in row.0.iter() {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}
