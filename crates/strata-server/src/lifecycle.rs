//! A client connection's life outside its requests, the same for both
//! workers (`worker.rs` on epoll, `worker_uring.rs` on io_uring); each
//! worker keeps only how its I/O engine carries it out.
//!
//! ```text
//!  accepted ──► open ──(idle past -o idle_timeout; not dumping)──► kicked "idle_timeout"
//!                 │ ──(TLS handshake past ssl_handshake_timeout)──► kicked "error"
//!                 │ ──(shutdown: buffered requests answered)─────► "shutdown" | "handover"
//!                 └──(peer closed, quit, error)──────────────────► "normal" | "error"
//!  closed: [`closed`] unregisters it, logs it, and drops its flash read
//! ```
//!
//! The kicks are checked once a second ([`Ticker`]), only when there is a
//! timeout to check (the clock read costs). A connection running a key dump
//! or a `watch` is never kicked for idleness: memcached hands such a
//! connection to another thread (its `conn_watch` state), where its
//! conn-timeout thread does not look, and its last command time stands
//! still while the dump runs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{Conn, Progress};
use crate::handover::{Resume, MAX_CARRIED_INPUT_BYTES};
use crate::service::Service;
use crate::shared::{ConnInfo, Shared};
use crate::stats::WorkerStats;

/// Why a connection closed, as `watch connevents` prints it.
pub const NORMAL: &str = "normal";
pub const ERROR: &str = "error";
pub const IDLE_TIMEOUT: &str = "idle_timeout";
pub const SHUTDOWN: &str = "shutdown";
pub const HANDOVER: &str = "handover";

/// The once-a-second check of a worker's connections.
pub struct Ticker {
    last_check: Instant,
}

/// What a tick asks the worker to check.
#[derive(Clone, Copy, Default)]
pub struct Due {
    /// Kick connections idle past this many seconds.
    pub idle_limit_secs: Option<u32>,
    /// Kick TLS handshakes older than this many seconds.
    pub handshake_limit_secs: Option<u32>,
}

impl Default for Ticker {
    fn default() -> Ticker {
        Ticker { last_check: Instant::now() }
    }
}

impl Ticker {
    /// What is due now (nothing more than once a second, and nothing
    /// without an idle timeout or TLS).
    #[inline]
    pub fn due(&mut self, shared: &Shared) -> Option<Due> {
        let idle = shared.settings.idle_timeout;
        let tls = shared.tls.as_ref();
        if (idle.is_none() && tls.is_none()) || self.last_check.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.last_check = Instant::now();
        Some(Due {
            idle_limit_secs: idle.map(|t| t.as_secs() as u32),
            handshake_limit_secs: tls.map(|t| t.settings.handshake_timeout_secs),
        })
    }
}

/// Whether a connection is kicked for idleness (counted in `idle_kicks`).
#[inline]
pub fn idle_kick(stats: &WorkerStats, conn: &Conn, info: &ConnInfo, now: u32, limit_secs: u32) -> bool {
    let kick = !conn.is_dumping() && info.idle_past(now, limit_secs);
    if kick {
        WorkerStats::incr(&stats.idle_kicks);
    }
    kick
}

/// On shutdown: run what the connection has buffered; true if it asked to
/// close (`quit`: it is not handed over).
pub fn drain_requests(conn: &mut Conn, svc: &Service<'_>) -> bool {
    matches!(conn.process(svc, usize::MAX), Progress::Close | Progress::CloseAfterWrite)
}

/// What a connection takes along to the new process on a handover (its
/// unread input, its login state), or None when it cannot move: a TLS
/// connection, one with replies still unwritten, a dump running, a data
/// block being swallowed, or more unread input than a handover carries.
pub fn carry(conn: &Conn, tls: bool) -> Option<Resume> {
    let movable = !tls
        && conn.pending_output() == 0
        && !conn.is_dumping()
        && !conn.is_swallowing()
        && conn.input.len() <= MAX_CARRIED_INPUT_BYTES;
    movable.then(|| Resume { input: conn.input.filled().to_vec(), unauthenticated: conn.unauthenticated })
}

/// A connection's bookkeeping as it closes: out of `stats conns`, the
/// `conn_close` line for `watch connevents` and `-vv`, the connection
/// count, and its flash reads abandoned (an I/O thread may still hold its
/// copy: that one is dropped when it comes back to a connection that is
/// gone).
pub fn closed(shared: &Arc<Shared>, stats: &WorkerStats, id: u64, info: &ConnInfo, conn: &mut Conn, fd: i32, reason: &'static str) {
    shared.conns.remove(id);
    crate::ops::watch::conn_event(shared, stats, &info.peer, id, Some(reason));
    if shared.ops.verbose.tracing() {
        crate::ops::verbose::conn_closed(fd);
    }
    shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
    if let (false, Some(tier)) = (conn.flash.is_empty(), shared.engine.flash()) {
        conn.flash.abandon(tier);
    }
}
