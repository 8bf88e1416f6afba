//! Counters, named as memcached names them in `stats`.
//!
//! Each worker owns one [`WorkerStats`] and is its only writer, so counting
//! is a relaxed atomic add on a cache line no other core writes; `stats`
//! sums all workers. `stats reset` stores zero into every counter.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters.
        #[derive(Default, Debug)]
        #[repr(align(128))]
        pub struct WorkerStats {
            $(pub $name: AtomicU64,)*
        }

        /// A snapshot, summed over workers.
        #[derive(Default, Debug, Clone, Copy)]
        pub struct StatsSnapshot {
            $(pub $name: u64,)*
        }

        impl WorkerStats {
            pub fn add_to(&self, sum: &mut StatsSnapshot) {
                $(sum.$name += self.$name.load(Ordering::Relaxed);)*
            }

            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
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
    bytes_read,
    bytes_written,
    conn_yields,
    total_connections,
    rejected_connections,
    idle_kicks,
    udp_replies_refused,
    auth_cmds,
    auth_errors,
);

impl WorkerStats {
    #[inline]
    pub fn incr(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
