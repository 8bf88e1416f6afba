//! Counters, named as memcached names them in `stats`.
//!
//! Each worker owns one [`WorkerStats`] and each counter has one writer
//! (its worker; `rejected_connections` of worker 0: the acceptor), so
//! counting is a relaxed load and a relaxed store on a cache line no other
//! core writes: a plain `add`, not a locked read-modify-write (`lock xadd`
//! costs ~20 cycles, 4-6 per get). `stats` sums all workers.
//!
//! `stats reset` runs on any worker, so it cannot store zero into another
//! worker's counters (that worker's next load+store would bring the old
//! count back): it records every counter's current value as a baseline,
//! under a mutex only `stats` and `stats reset` take, and `stats` reports
//! counts minus the baseline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters.
        #[derive(Default, Debug)]
        #[repr(align(128))]
        pub struct WorkerStats {
            $(pub $name: AtomicU64,)*
            /// Counts at the last `stats reset`.
            baseline: Mutex<StatsSnapshot>,
            /// The worker's own memory, for `stats memory` (`report/memory.rs`).
            pub memory: WorkerMemory,
        }

        /// A snapshot, summed over workers.
        #[derive(Default, Debug, Clone, Copy)]
        pub struct StatsSnapshot {
            $(pub $name: u64,)*
        }

        impl WorkerStats {
            pub fn add_to(&self, sum: &mut StatsSnapshot) {
                let base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
                $(sum.$name += self.$name.load(Ordering::Relaxed).wrapping_sub(base.$name);)*
            }

            pub fn reset(&self) {
                let mut base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
                $(base.$name = self.$name.load(Ordering::Relaxed);)*
            }
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    // Not in `stats`: the storage command lines parsed (a header is parsed
    // once, however many pieces its data block arrives in; a test counts).
    store_headers_parsed,
    bytes_read,
    bytes_written,
    conn_yields,
    extstore_reads_ahead,
    extstore_reads_ahead_refused,
    total_connections,
    rejected_connections,
    steered_connections,
    idle_kicks,
    udp_replies_refused,
    auth_cmds,
    auth_errors,
);

/// One worker's structures that only it can measure, set by it when they
/// change size (never per request).
#[derive(Default, Debug)]
pub struct WorkerMemory {
    /// io_uring: the provided receive buffers and their ring of entries.
    pub uring_recv_buffers: AtomicU64,
    /// epoll: idle read buffers kept for the next connection that reads.
    pub read_pool: AtomicU64,
    /// The worker's connection slots (one per connection it ever held at once).
    pub conn_slots: AtomicU64,
}

impl WorkerMemory {
    /// Set `gauge` to `bytes`, writing only when it changed.
    #[inline]
    pub fn set(gauge: &AtomicU64, bytes: usize) {
        if gauge.load(Ordering::Relaxed) != bytes as u64 {
            gauge.store(bytes as u64, Ordering::Relaxed);
        }
    }
}

impl WorkerStats {
    /// Count one. Only the counter's one writer may call this.
    #[inline]
    pub fn incr(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    /// Count `n`. Only the counter's one writer may call this.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_is_a_baseline_the_writer_never_undoes() {
        let w = WorkerStats::default();
        WorkerStats::add(&w.bytes_read, 5);
        WorkerStats::incr(&w.cmd_get);
        // `stats reset` from another worker's thread.
        std::thread::scope(|s| {
            s.spawn(|| w.reset());
        });
        let mut sum = StatsSnapshot::default();
        w.add_to(&mut sum);
        assert_eq!((sum.bytes_read, sum.cmd_get), (0, 0));
        // The writer goes on from its own count; the reset still holds.
        WorkerStats::add(&w.bytes_read, 2);
        WorkerStats::incr(&w.cmd_get);
        let mut sum = StatsSnapshot::default();
        w.add_to(&mut sum);
        assert_eq!((sum.bytes_read, sum.cmd_get), (2, 1));
    }
}
