//! The bound on the memory of flash read-ahead, across all workers.
//!
//! A request parked on a flash read queues the reads of the keys it and
//! the requests behind it will need next (`read_ahead.rs`), up to
//! `READ_AHEAD` reads a connection, each a buffer of 4 KiB to 64 KiB. Per
//! connection that is bounded; across thousands of pipelining connections
//! it would not be. So every read queued *ahead* takes its buffer's bytes
//! from one budget ([`ReadAheadBudget`], the flash feature's) and gives them back
//! when its wait is dropped: used by its request, abandoned at the end of
//! a run or when the connection closes, failed. The [`AheadCharge`] that
//! holds them is a field of the wait, so no path can keep them.
//!
//! A read-ahead the budget cannot hold is not queued (counted in `stats`
//! as `extstore_reads_ahead_refused`): its key is read when its request
//! runs, as without read-ahead. The read a request parks on itself is
//! never refused and not counted here.
//!
//! The bound is `-o ext_read_ahead_max=BYTES` (0: no read-ahead), by
//! default [`default_max`]: a sixty-fourth of `-m`, at least 1 MiB. It is
//! memory outside `-m`, like connection buffers, so it is kept a small
//! share of it; 1 MiB still holds 256 reads of 4 KiB, a full flash ring of
//! a worker (`io.rs`), so a small `-m` still sends full batches.
//! `stats memory` shows the bytes held (`flash_read_ahead_bytes`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The smallest default bound: 256 reads of 4 KiB.
pub const DEFAULT_MIN_BYTES: u64 = 1 << 20;

/// The default bound for a cache of `memory_limit_bytes` (`-m`): 1/64 of
/// it, at least [`DEFAULT_MIN_BYTES`] (1 MiB at the default `-m 64`, 16 MiB
/// at `-m 1024`).
pub fn default_max(memory_limit_bytes: u64) -> u64 {
    (memory_limit_bytes / 64).max(DEFAULT_MIN_BYTES)
}

/// Bytes of read-ahead buffers held now, and the most there may be.
#[derive(Debug)]
pub struct ReadAheadBudget {
    held: AtomicU64,
    max: u64,
}

impl ReadAheadBudget {
    pub fn new(max: u64) -> Arc<ReadAheadBudget> {
        Arc::new(ReadAheadBudget { held: AtomicU64::new(0), max })
    }

    /// The bound, in bytes.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes held by read-aheads queued and not yet dropped, all workers.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Take `bytes` for one read-ahead, unless that would pass the bound.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> Option<AheadCharge> {
        let max = self.max;
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| held.checked_add(bytes).filter(|&after| after <= max))
            .ok()?;
        Some(AheadCharge { budget: self.clone(), bytes })
    }
}

/// One read-ahead's bytes, given back to the budget when dropped.
#[derive(Debug)]
pub struct AheadCharge {
    budget: Arc<ReadAheadBudget>,
    bytes: u64,
}

impl Drop for AheadCharge {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_bound_and_come_back_when_dropped() {
        let budget = ReadAheadBudget::new(10 << 10);
        let a = budget.charge(4 << 10).unwrap();
        let b = budget.charge(4 << 10).unwrap();
        assert!(budget.charge(4 << 10).is_none(), "12 KiB would pass a 10 KiB bound");
        let c = budget.charge(2 << 10).unwrap();
        assert_eq!(budget.held(), 10 << 10);
        drop(a);
        assert_eq!(budget.held(), 6 << 10);
        drop((b, c));
        assert_eq!(budget.held(), 0);
        assert!(ReadAheadBudget::new(0).charge(1).is_none(), "0: no read-ahead");
    }

    #[test]
    fn many_threads_never_pass_the_bound() {
        let budget = ReadAheadBudget::new(64 << 10);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut kept = Vec::new();
                    for i in 0..10_000 {
                        if let Some(c) = budget.charge(4 << 10) {
                            kept.push(c);
                        }
                        assert!(budget.held() <= 64 << 10);
                        if i % 3 == 0 {
                            kept.pop();
                        }
                    }
                });
            }
        });
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn the_default_is_a_share_of_memory_with_a_floor() {
        assert_eq!(default_max(64 << 20), 1 << 20);
        assert_eq!(default_max(1 << 30), 16 << 20);
        assert_eq!(default_max(0), 1 << 20);
    }
}
