//! Get hits per size class and queue, counted per thread: a get writes
//! only its own thread's line, and `stats items`/`slabs`, `/metrics` and
//! the MRC read the sum (`SegStore::class_stats`).
//!
//! ```text
//!  Hits.rows[thread slot]: Line([AtomicU64; 2 x 64])   hot, warm per class
//!   = 1 KiB a slot, 16 slots
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

pub struct Hits {
    rows: Box<[Line<[AtomicU64; 2 * CLASSES]>]>,
}

static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: usize = THREADS.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

impl Hits {
    pub fn new() -> Hits {
        Hits { rows: (0..SLOTS).map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))).collect() }
    }

    /// Bytes held (`stats memory`): one padded row per slot.
    pub fn bytes(&self) -> usize {
        self.rows.len() * std::mem::size_of::<Line<[AtomicU64; 2 * CLASSES]>>()
    }

    /// A get hit an item of class `cls` in `queue`.
    #[inline]
    pub fn hit(&self, cls: u8, queue: Queue) {
        let slot = SLOT.with(|s| *s);
        let at = usize::from(cls).min(CLASSES - 1) * 2 + usize::from(queue == Queue::Warm);
        self.rows[slot].0[at].fetch_add(1, Ordering::Relaxed);
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
