//! A shard's sequence number: the protocol that lets a get read a shard
//! without its lock (`seg/read.rs`), and nothing else.
//!
//! ```text
//!  writer (holds the shard mutex)          reader (holds nothing)
//!   s = seq            (even)               s1 = seq.load(Acquire); odd? -> locked path
//!   seq = s + 1        (odd: writing)       read slots, segment bytes (may be torn)
//!   fence(Release)                          fence(Acquire)
//!   ... change the shard ...                s2 = seq.load(Relaxed)
//!   seq.store(s + 2, Release)               s1 == s2: what was read is one state
//! ```
//!
//! Invariant: the sequence is odd exactly while a writer may be changing
//! what readers read (the index, the segment directory, item bytes). A
//! reader that saw the same even value before and after its reads read no
//! byte a writer wrote in between: the writer's first store (odd) is
//! ordered before its data writes by the release fence, and the reader's
//! data reads before its second load by the acquire fence, so a data read
//! that saw a writer's byte makes the second load see at least the odd
//! value (the classic seqlock argument; Boehm, "Can seqlocks get along
//! with programming language memory models?", 2012). The loom model in
//! `tests/loom_read.rs` explores it with relaxed atomics standing for the
//! data, and `tests/store/read_concurrent.rs` checks it on the real store.
//!
//! The reader writes nothing: a read costs two loads of a line that stays
//! shared in every reader's cache until a writer takes the shard.

#[cfg(feature = "loom")]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(feature = "loom"))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

#[derive(Default)]
pub struct SeqLock {
    seq: AtomicU64,
}

impl SeqLock {
    pub fn new() -> SeqLock {
        SeqLock { seq: AtomicU64::new(0) }
    }

    /// A writer starts changing the data (the caller holds the writers' lock).
    #[inline]
    pub fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "nested write section");
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// The writer is done: readers that start now see the new state.
    #[inline]
    pub fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1, "write_end without write_begin");
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }

    /// Start a read: the sequence to validate against, or None while a
    /// writer is inside.
    #[inline]
    pub fn read_begin(&self) -> Option<u64> {
        let s = self.seq.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Whether everything read since `read_begin` returned `s` is one
    /// consistent state (no writer began in between).
    #[inline]
    pub fn read_valid(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s
    }
}
