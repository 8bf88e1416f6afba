//! State shared by every worker: settings, the engine, the clock, each
//! worker's counters, and the shutdown signal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use strata_store::{Clock, Engine};

use crate::auth::Credentials;
use crate::settings::{IoEngine, Settings};
use crate::stats::{StatsSnapshot, WorkerStats};

pub struct Shared {
    pub settings: Settings,
    pub engine: Box<dyn Engine>,
    pub clock: Clock,
    pub worker_stats: Vec<Arc<WorkerStats>>,
    /// Open client connections, all workers.
    pub curr_connections: AtomicU64,
    /// Connection slots ever allocated, memcached's `connection_structures`.
    pub connection_structures: AtomicU64,
    pub memory_limit_bytes: AtomicU64,
    pub started_at: SystemTime,
    pub conns: ConnRegistry,
    /// The I/O engine the workers run (auto resolved).
    pub io_engine: IoEngine,
    /// `-Y` credentials.
    pub text_auth: Option<Credentials>,
    /// `-S` credentials.
    pub sasl_auth: Option<Credentials>,
    /// The settings' size classes, built once: every per-class figure
    /// (`stats slabs`, `stats items`, `me`'s `cls=`, `watch`, dumps, the
    /// crawler) is reported by this one table.
    pub classes: strata_store::SlabClasses,
    /// Crawler, dumps and per-prefix stats (`ops/`).
    pub ops: crate::ops::OpsState,
    /// `engine.flash().is_some()` (the engine has a flash tier, `-o
    /// ext_path`), read once: the answer never changes, and a service
    /// made for a connection's turn tests this field and asks the engine
    /// for its tier only when it is set, so a server without one makes no
    /// engine call for it (`service/flash.rs`).
    pub flash_on: bool,
    /// The epoll engine's flash I/O threads, started by the first epoll
    /// worker that needs them (`flash/io.rs`).
    pub flash_pool: std::sync::OnceLock<crate::flash::io::Pool>,
    /// The bytes flash read-ahead may hold, all workers
    /// (`flash/budget.rs`).
    pub read_ahead: Arc<crate::flash::budget::ReadAheadBudget>,
    /// `-Z`: certificates, rustls configs and TLS counters (`tls/`).
    pub tls: Option<crate::tls::TlsState>,

    /// The invalidation journal (`-o journal_size`, `journal/`).
    pub journal: crate::journal::Journal,
    /// What a start on a memory file did about staleness (`journal/warm.rs`).
    pub warm: Option<crate::journal::WarmReport>,
    /// After a warm return: peers polled for a while (`journal/catchup.rs`).
    pub catchup: crate::journal::catchup::CatchUp,

    /// `stats mrc` (`ops/mrc.rs`), unless `-o no_mrc`.
    pub mrc: Option<Arc<crate::ops::mrc::Mrc>>,
    /// `-m auto` / `-o memory_pressure_yield` (`memory/`).
    pub memory_governor: Option<crate::memory::Governor>,
    shutdown: AtomicBool,
    /// Called once when shutdown is requested (wakes the event loops).
    on_shutdown: Mutex<Vec<Box<dyn Fn() + Send>>>,
    /// A socket handover to a new process (`handover/`; idle unless one runs).
    pub handover: crate::handover::Outgoing,
}

impl Shared {
    pub fn new(settings: Settings, engine: Box<dyn Engine>, clock: Clock) -> Shared {
        Shared::with_credentials(settings, engine, clock, None, None)
    }

    pub fn with_credentials(
        settings: Settings,
        engine: Box<dyn Engine>,
        clock: Clock,
        text_auth: Option<Credentials>,
        sasl_auth: Option<Credentials>,
    ) -> Shared {
        let worker_stats = (0..settings.threads.max(1))
            .map(|_| {
                let w = WorkerStats::default();
                w.requests.configure(&settings);
                Arc::new(w)
            })
            .collect();
        let flash_on = engine.flash().is_some();
        Shared {
            memory_limit_bytes: AtomicU64::new(settings.memory_limit_bytes),
            classes: settings.slab_classes(),
            ops: crate::ops::OpsState::new(&settings),
            flash_on,
            flash_pool: std::sync::OnceLock::new(),
            read_ahead: crate::flash::budget::ReadAheadBudget::new(
                settings.ext.read_ahead_max_bytes.unwrap_or_else(|| crate::flash::budget::default_max(settings.memory_limit_bytes)),
            ),
            tls: None,

            journal: crate::journal::Journal::for_server(&settings, engine.as_ref()),
            warm: None,
            catchup: crate::journal::catchup::CatchUp::default(),

            mrc: settings.mrc.then(|| crate::ops::mrc::Mrc::install(engine.as_ref(), settings.memory_limit_bytes)),
            memory_governor: settings.memory_governor.clone().map(crate::memory::Governor::new),
            settings,
            engine,
            clock,
            worker_stats,
            curr_connections: AtomicU64::new(0),
            connection_structures: AtomicU64::new(0),
            started_at: SystemTime::now(),
            conns: ConnRegistry::default(),
            text_auth,
            sasl_auth,
            io_engine: IoEngine::Epoll,
            shutdown: AtomicBool::new(false),
            on_shutdown: Mutex::new(Vec::new()),
            handover: Default::default(),
        }
    }

    pub fn stats(&self) -> StatsSnapshot {
        let mut sum = StatsSnapshot::default();
        for w in &self.worker_stats {
            w.add_to(&mut sum);
        }
        sum
    }

    /// Re-read the credential files (SIGHUP); one line per file.
    pub fn reload_credentials(&self) -> Vec<String> {
        let mut report = Vec::new();
        for creds in self.text_auth.iter().chain(self.sasl_auth.iter()) {
            report.push(match creds.reload() {
                Ok(users) => format!("reloaded {} ({users} users)", creds.path().display()),
                Err(e) => format!("kept the old table: cannot reload {}: {e}", creds.path().display()),
            });
        }
        report
    }

    /// Whether new connections start unauthenticated.
    pub fn requires_auth(&self) -> bool {
        self.text_auth.is_some() || self.sasl_auth.is_some()
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

/// What a `stats conns` entry is: memcached lists its listening sockets
/// and its UDP sockets beside the client connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnKind {
    Client,
    Listening,
    Udp,
}

/// One open connection (or listening / UDP socket) as `stats conns` shows it.
#[derive(Debug)]
pub struct ConnInfo {
    pub peer: String,
    pub listen: String,
    pub kind: ConnKind,
    last_cmd: std::sync::atomic::AtomicU32,
    /// Bytes of the connection's buffers at capacity, as its worker last
    /// noted them (`stats memory` `conn_buffers_bytes`).
    buffer_bytes: AtomicU64,
}

impl ConnInfo {
    pub fn new(peer: String, listen: String, now: u32) -> ConnInfo {
        ConnInfo { peer, listen, kind: ConnKind::Client, last_cmd: std::sync::atomic::AtomicU32::new(now), buffer_bytes: AtomicU64::new(0) }
    }

    /// A listening or UDP socket bound to `addr` (`tcp:...`, `udp:...`, `unix:...`).
    pub fn socket(addr: String, kind: ConnKind, now: u32) -> ConnInfo {
        ConnInfo { peer: addr.clone(), listen: addr, kind, last_cmd: std::sync::atomic::AtomicU32::new(now), buffer_bytes: AtomicU64::new(0) }
    }

    /// Idle past `limit` seconds (memcached's idle_timeout rule: strictly
    /// more than the limit since the last command).
    pub fn idle_past(&self, now: u32, limit: u32) -> bool {
        now.saturating_sub(self.last_cmd()) > limit
    }

    pub fn last_cmd(&self) -> u32 {
        self.last_cmd.load(Ordering::Relaxed)
    }

    pub fn touch(&self, now: u32) {
        self.last_cmd.store(now, Ordering::Relaxed);
    }

    /// Note the connection's buffer bytes (its worker, at the end of a
    /// turn); a store only when they changed, which is rare.
    #[inline]
    pub fn note_buffers(&self, bytes: usize) {
        if self.buffer_bytes.load(Ordering::Relaxed) != bytes as u64 {
            self.buffer_bytes.store(bytes as u64, Ordering::Relaxed);
        }
    }

    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_bytes.load(Ordering::Relaxed)
    }
}

/// Registry of open connections; written on open and close only.
#[derive(Default)]
pub struct ConnRegistry {
    map: Mutex<std::collections::BTreeMap<u64, Arc<ConnInfo>>>,
    next_id: AtomicU64,
}

impl ConnRegistry {
    pub fn register(&self, info: Arc<ConnInfo>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(id, info);
        id
    }

    pub fn remove(&self, id: u64) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    pub fn snapshot(&self) -> Vec<(u64, Arc<ConnInfo>)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(id, info)| (*id, info.clone())).collect()
    }
}
