//! The server's side of the flash tier (`-o ext_path`; the tier itself is
//! the store's, `strata-store/src/seg/flash/`): everything the server does
//! for items on flash, in one folder.
//!
//! ```text
//!  FlashServer (built once, the runtime's):   per connection turn:
//!    on: the engine has a tier                  Turn (turn.rs): flash_first,
//!    pool: epoll's I/O threads (io.rs)            read_item, park, resume
//!    read_ahead: one bound of bytes (budget.rs)   read_ahead.rs: reads sent
//!    threads: strata-flash-age (age.rs),            with the parked one,
//!             strata-flash-merge (merge.rs),         keys from peek.rs
//!             strata-flash-compact (compact.rs)
//! ```
//!
//! - `io.rs`: a parked request's reads ([`FlashWaits`]), handed to the
//!   worker's ring, the epoll worker's read ring or the I/O threads, and
//!   back.
//! - `turn.rs`, `read_ahead.rs`, `peek.rs`: what a request does with the
//!   tier, for the service (`service/mod.rs`), which holds a [`Turn`] only
//!   when there is a tier, so without one no code here runs on a request.
//! - `budget.rs`: the bytes all connections' read-ahead may hold.
//! - `age.rs`, `merge.rs`, `compact.rs`: the tier's background threads.
//!
//! It imports the core and nothing of the request path or of another
//! feature.

pub mod age;
pub mod budget;
pub mod compact;
pub mod io;
pub mod merge;
mod peek;
pub mod read_ahead;
pub mod turn;

use std::sync::{Arc, OnceLock};

pub use io::{FlashWait, FlashWaits, ReadState};
pub use turn::{Parked, Read, Turn};

use crate::core::Core;
use crate::stats::WorkerStats;
use budget::ReadAheadBudget;

/// The flash feature's state, built once from the core.
pub struct FlashServer {
    /// `engine.flash().is_some()`, read once: the answer never changes, and
    /// a connection's turn asks the engine for its tier only when it is
    /// set, so a server without one makes no engine call for it.
    pub on: bool,
    /// The epoll engine's flash I/O threads, started by the first epoll
    /// worker that needs them (`io.rs`: only where the kernel has no
    /// io_uring).
    pub pool: OnceLock<Arc<io::Pool>>,
    /// The bytes flash read-ahead may hold, all workers (`budget.rs`).
    pub read_ahead: Arc<ReadAheadBudget>,
}

impl FlashServer {
    pub fn new(core: &Core) -> FlashServer {
        let settings = &core.settings;
        let max = settings.ext.read_ahead_max_bytes.unwrap_or_else(|| budget::default_max(settings.memory_limit_bytes));
        FlashServer { on: core.engine.flash().is_some(), pool: OnceLock::new(), read_ahead: ReadAheadBudget::new(max) }
    }

    /// Start the tier's background threads (none without a tier).
    pub fn start(&self, core: &Arc<Core>) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
        Ok(age::start(core)?.into_iter().chain(merge::start(core)?).chain(compact::start(core)?).collect())
    }

    /// A connection's turn with the tier; None without one.
    #[inline]
    pub fn turn<'a>(&'a self, core: &'a Core, stats: &'a WorkerStats) -> Option<Turn<'a>> {
        if !self.on {
            return None;
        }
        let tier = core.engine.flash()?;
        Some(Turn::new(tier, core.engine.as_ref(), &self.read_ahead, stats))
    }
}
