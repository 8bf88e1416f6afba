//! The context a request handler gets: the core, the worker's counters,
//! and which connection it runs for. It imports the core only, so every
//! feature's handlers can take it; what a connection keeps about its
//! replies is its [`Output`](crate::output::Output)'s, and what a feature
//! keeps is its own.

use std::sync::Arc;

use crate::core::Core;
use crate::stats::WorkerStats;

pub struct Ctx<'a> {
    pub core: &'a Arc<Core>,
    pub stats: &'a WorkerStats,
    /// The connection this context runs for (its `stats conns` id; 0: none).
    pub conn_id: u64,
}

impl<'a> Ctx<'a> {
    pub fn new(core: &'a Arc<Core>, stats: &'a WorkerStats) -> Ctx<'a> {
        Ctx { core, stats, conn_id: 0 }
    }

    /// This context runs for connection `id` (`stats conns` shows it as
    /// the one parsing a command).
    pub fn for_conn(self, id: u64) -> Ctx<'a> {
        Ctx { conn_id: id, ..self }
    }

    #[inline]
    pub fn now(&self) -> u32 {
        self.core.clock.now()
    }

    /// A client's exptime as the store's relative time.
    #[inline]
    pub fn expiry(&self, exptime: i32) -> u32 {
        self.core.clock.expiry(i64::from(exptime))
    }
}
