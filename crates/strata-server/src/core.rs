//! The core every part of the server is built from: the settings, the
//! engine, the clock, the size classes, each worker's counters, the open
//! connections and the shutdown signal. Nothing else.
//!
//! ```text
//!   Core  ◄── each feature (ops, journal, tls, memory, handover, auth, flash)
//!    │        keeps its own state, built from the core and the settings
//!    │   ◄── Runtime (runtime.rs): the core and the features, built once
//!    └── imports settings, stats, registry and strata-store only
//! ```
//!
//! It imports no feature, so a feature can be built and tested from a core
//! alone, and no feature's state is reachable from another's. Shared by
//! `Arc`: the threads a feature starts keep the core and their own state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use strata_store::{Clock, Engine};

use crate::registry::ConnRegistry;
use crate::settings::{IoEngine, Settings};
use crate::stats::{StatsSnapshot, WorkerStats};

pub struct Core {
    pub settings: Settings,
    pub engine: Box<dyn Engine>,
    pub clock: Clock,
    /// The settings' size classes, built once: every per-class figure
    /// (`stats slabs`, `stats items`, `me`'s `cls=`, `watch`, dumps, the
    /// crawler) is reported by this one table.
    pub classes: strata_store::SlabClasses,
    pub worker_stats: Vec<Arc<WorkerStats>>,
    /// Open client connections, all workers.
    pub curr_connections: AtomicU64,
    /// Connection slots ever allocated, memcached's `connection_structures`.
    pub connection_structures: AtomicU64,
    /// `-m` now (`cache_memlimit` and the memory governor change it).
    pub memory_limit_bytes: AtomicU64,
    pub started_at: SystemTime,
    pub conns: ConnRegistry,
    /// The I/O engine the workers run (auto resolved).
    pub io_engine: IoEngine,
    shutdown: AtomicBool,
    /// Called once when shutdown is requested (wakes the event loops and
    /// the features' threads).
    on_shutdown: Mutex<Vec<Box<dyn Fn() + Send>>>,
}

impl Core {
    /// A core for `settings` over `engine`: one counter set per worker.
    pub fn new(settings: Settings, engine: Box<dyn Engine>, clock: Clock, io_engine: IoEngine) -> Core {
        let worker_stats = (0..settings.threads.max(1)).map(|_| Arc::new(WorkerStats::default())).collect();
        Core {
            memory_limit_bytes: AtomicU64::new(settings.memory_limit_bytes),
            classes: settings.slab_classes(),
            settings,
            engine,
            clock,
            worker_stats,
            curr_connections: AtomicU64::new(0),
            connection_structures: AtomicU64::new(0),
            started_at: SystemTime::now(),
            conns: ConnRegistry::default(),
            io_engine,
            shutdown: AtomicBool::new(false),
            on_shutdown: Mutex::new(Vec::new()),
        }
    }

    /// Every worker's counters summed (less the `stats reset` baseline).
    pub fn stats(&self) -> StatsSnapshot {
        let mut sum = StatsSnapshot::default();
        for w in &self.worker_stats {
            w.add_to(&mut sum);
        }
        sum
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    pub fn on_shutdown(&self, f: Box<dyn Fn() + Send>) {
        self.on_shutdown.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }

    /// Stop accepting, let workers finish what they have, and exit.
    pub fn request_shutdown(&self) {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        for wake in self.on_shutdown.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            wake();
        }
    }
}
