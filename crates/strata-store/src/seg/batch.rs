//! One epoch pin for a batch of reads (a multi-get's keys) instead of one
//! per read.
//!
//! A lock-free read (`read.rs`) pins crossbeam's epoch so that a slot
//! array it is probing is not unmapped under it (`Table::resize` frees old
//! arrays through the epoch). Pinning costs a thread-local lookup and,
//! when the thread is not pinned yet, a full fence; a 48-key multi-get paid
//! it 48 times. A [`BatchPin`] pins once and counts itself in this
//! thread's `BATCHES`; reads made while the count is above zero skip their
//! own pin.
//!
//! Invariant: `BATCHES` counts this thread's live `BatchPin`s, each of
//! which holds a `Guard`, so a count above zero means the thread is
//! pinned. A `BatchPin` is `!Send` (its guard is), so it is dropped on the
//! thread that counted it; a count (not a flag) keeps this true whatever
//! order batches are dropped in.

use std::cell::Cell;

use crossbeam_epoch::Guard;

thread_local! {
    static BATCHES: Cell<u32> = const { Cell::new(0) };
}

/// This thread pinned for as long as it lives.
pub struct BatchPin {
    _guard: Guard,
}

impl BatchPin {
    pub fn new() -> BatchPin {
        let guard = crossbeam_epoch::pin();
        BATCHES.set(BATCHES.get() + 1);
        BatchPin { _guard: guard }
    }
}

impl Drop for BatchPin {
    fn drop(&mut self) {
        // Before the guard (a field, dropped after this body).
        BATCHES.set(BATCHES.get() - 1);
    }
}

/// A guard for one read: None when a [`BatchPin`] of this thread already
/// keeps it pinned.
#[inline]
pub fn pin() -> Option<Guard> {
    if BATCHES.get() > 0 {
        None
    } else {
        Some(crossbeam_epoch::pin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_skip_their_pin_only_while_a_batch_lives() {
        assert!(pin().is_some(), "no batch: each read pins");
        let first = BatchPin::new();
        assert!(crossbeam_epoch::is_pinned());
        assert!(pin().is_none());
        // Dropped out of order (a batch replaced by the next one).
        let second = BatchPin::new();
        drop(first);
        assert!(crossbeam_epoch::is_pinned());
        assert!(pin().is_none(), "the second batch still pins");
        drop(second);
        assert!(!crossbeam_epoch::is_pinned());
        assert!(pin().is_some());
    }
}
