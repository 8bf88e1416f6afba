//! The runtime: the core and every feature, built once from the settings
//! (`Server::start`, or a test's or fuzz harness's in-process server) and
//! never patched afterwards.
//!
//! ```text
//!  Runtime ── core: Arc<Core>     settings, engine, clock, classes, counters,
//!     │                           connections, shutdown (core.rs)
//!     ├── ops       crawler, detail, watch's log, -vv, mrc, per-worker
//!     │             latency and hot keys (ops/)
//!     ├── journal   the invalidation journal; warm: the warm return's
//!     │             report and catch-up (journal/)
//!     ├── tls       -Z's configs and counters (tls/)
//!     ├── flash     the flash tier's server side (flash/)
//!     ├── auth      -Y and -S credentials (auth.rs)
//!     ├── handover  a socket handover to a new process (handover/)
//!     └── memory    -m auto / memory_pressure_yield's governor (memory/)
//! ```
//!
//! Each feature is built from the core (and the settings it holds) and
//! keeps its own state; none imports another or the runtime. The request
//! path reaches them through one door, the service's hooks
//! (`service/hooks.rs`); the operator's views across all of them (`stats`,
//! `stats memory`, `/metrics`) are the report's (`report/`).

use std::sync::Arc;

use strata_store::{Clock, Engine};

use crate::auth::Auth;
use crate::core::Core;
use crate::flash::FlashServer;
use crate::handover::Outgoing;
use crate::journal::{Journal, WarmReport, WarmReturn};
use crate::memory::Governor;
use crate::ops::Ops;
use crate::settings::{IoEngine, Settings};
use crate::tls::TlsState;

pub struct Runtime {
    pub core: Arc<Core>,
    /// Crawler, dumps, `watch`, `-vv`, per-prefix stats, latency, hot
    /// keys and miss-ratio curves (`ops/`).
    pub ops: Ops,
    /// The invalidation journal (`-o journal_size`, `journal/`).
    pub journal: Journal,
    /// What a start on a memory file did about staleness, and the catch-up
    /// after it (`journal/warm.rs`, `journal/catchup.rs`).
    pub warm: WarmReturn,
    /// `-Z`: certificates, rustls configs and TLS counters (`tls/`).
    pub tls: Option<TlsState>,
    /// The server's side of the flash tier (`flash/`).
    pub flash: FlashServer,
    /// `-Y` and `-S` credentials (`auth.rs`).
    pub auth: Auth,
    /// A socket handover to a new process (`handover/`; idle unless one runs).
    pub handover: Arc<Outgoing>,
    /// `-m auto` / `-o memory_pressure_yield` (`memory/`).
    pub memory: Option<Arc<Governor>>,
}

/// What a server's start decides before its runtime is built: the
/// credentials, the TLS state (certificates checked before anything is
/// bound) and what a warm return did.
#[derive(Default)]
pub struct Started {
    pub auth: Auth,
    pub tls: Option<TlsState>,
    pub warm: Option<WarmReport>,
}

impl Runtime {
    /// A runtime over `engine` with no credentials, TLS or warm return:
    /// what the tests and the fuzz harnesses run in process.
    pub fn new(settings: Settings, engine: Box<dyn Engine>, clock: Clock) -> Runtime {
        Runtime::with_auth(settings, engine, clock, Auth::default())
    }

    /// [`Runtime::new`] with `-Y`/`-S` credentials.
    pub fn with_auth(settings: Settings, engine: Box<dyn Engine>, clock: Clock, auth: Auth) -> Runtime {
        Runtime::build(Core::new(settings, engine, clock, IoEngine::Epoll), Started { auth, ..Started::default() })
    }

    /// Build every feature from `core`. A journal handed over by the
    /// previous process (`handover/`) is replayed into this one's before
    /// any request.
    pub fn build(core: Core, started: Started) -> Runtime {
        let core = Arc::new(core);
        let journal = Journal::for_server(&core.settings, core.engine.as_ref());
        let inherited = crate::handover::incoming::take_journal();
        if !inherited.is_empty() && !journal.import(&inherited) {
            crate::log_line!("strata: handover: the previous process's journal did not parse; this one starts empty");
        }
        Runtime {
            ops: Ops::new(&core),
            journal,
            warm: WarmReturn::new(started.warm, &core),
            tls: started.tls,
            flash: FlashServer::new(&core),
            auth: started.auth,
            handover: Arc::default(),
            memory: core.settings.memory_governor.clone().map(|config| Arc::new(Governor::new(config))),
            core,
        }
    }

    /// After the server stopped (`main`): the journal and the memory file
    /// written back, and a handover's connections and journal passed on.
    pub fn close(&self) -> std::io::Result<()> {
        self.journal.close(strata_store::clock::unix_time());
        let saved = self.core.engine.close();
        if let Err(e) = &saved {
            crate::log_line!("strata: could not write the memory file back: {e}");
        }
        crate::handover::outgoing::finish(&self.handover, || self.journal.export(), &saved);
        saved
    }
}
