//! A connection's life outside its requests, the same for every engine:
//! the kicks, the shutdown drain, and what a handover carries.
//!
//! ```text
//!  accepted ──► open ──(idle past -o idle_timeout; not dumping)──► kicked "idle_timeout"
//!                 │ ──(TLS handshake past ssl_handshake_timeout)──► kicked "error"
//!                 │ ──(shutdown: buffered requests answered)─────► "shutdown" | "handover"
//!                 └──(peer closed, quit, error)──────────────────► "normal" | "error"
//!  closed: `Sessions::close` unregisters it, logs it, and drops its flash reads
//! ```
//!
//! The kicks are checked once a second ([`Ticker`]), only when there is a
//! timeout to check (the clock read costs). A connection running a key dump
//! or a `watch` is never kicked for idleness: memcached hands such a
//! connection to another thread (its `conn_watch` state), where its
//! conn-timeout thread does not look, and its last command time stands
//! still while the dump runs. A kicked connection closes as any closing
//! one does: once the engine has nothing of it in flight.
//!
//! The drain (shutdown): every connection's buffered requests are
//! answered (usize::MAX of them; one that asks to close is not handed
//! over), its replies written within 2 s, then, while a handover runs, a
//! plain connection with nothing in flight and no more than
//! `MAX_CARRIED_INPUT_BYTES` of unread input moves to the new process with
//! its input; every other closes ("shutdown").

use std::time::{Duration, Instant};

use super::io::Io;
use super::Sessions;
use crate::conn::{Conn, Progress};
use crate::new_conn::Resume;
use crate::service::{hooks, Service};
use crate::stats::WorkerStats;

/// Why a connection closed, as `watch connevents` prints it.
pub const NORMAL: &str = "normal";
pub const ERROR: &str = "error";
pub const IDLE_TIMEOUT: &str = "idle_timeout";
pub const SHUTDOWN: &str = "shutdown";
pub const HANDOVER: &str = "handover";

/// How long a shutdown gives connections to write their replies.
const DRAIN: Duration = Duration::from_secs(2);

/// The once-a-second check of a worker's connections.
pub struct Ticker {
    last_check: Instant,
}

impl Default for Ticker {
    fn default() -> Ticker {
        Ticker { last_check: Instant::now() }
    }
}

impl<L> Sessions<L> {
    /// The once-a-second kicks (only with an idle timeout or TLS): close
    /// connections idle past `-o idle_timeout` (counted in `idle_kicks`)
    /// and TLS handshakes older than `ssl_handshake_timeout` (counted as
    /// handshake errors). They close in this turn's drive.
    pub fn kick(&mut self) {
        let idle = self.rt.core.settings.idle_timeout.map(|t| t.as_secs() as u32);
        let handshake = self.hooks().handshake_timeout_secs();
        if (idle.is_none() && handshake.is_none()) || self.ticker.last_check.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.ticker.last_check = Instant::now();
        let now = self.rt.core.clock.now();
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s.as_mut().filter(|s| !s.closing) else { continue };
            let stalled = || handshake.is_some_and(|limit| s.tls.as_ref().is_some_and(|t| t.handshake_expired(now, limit)));
            let reason = if idle.is_some_and(|limit| !s.conn.is_dumping() && s.info.idle_past(now, limit)) {
                WorkerStats::incr(&self.stats.idle_kicks);
                super::IDLE_TIMEOUT
            } else if stalled() {
                super::ERROR
            } else {
                continue;
            };
            s.closing = true;
            s.close_reason = reason;
            self.ready.push(slot);
            self.repeats = true;
        }
    }

    /// On shutdown: answer what is buffered, write the replies (2 s at
    /// most), hand plain connections to a new process while a handover
    /// runs, close the rest. `accept` opens the connections the acceptor
    /// handed over last (a handover waits for them).
    pub fn drain_and_close<I: Io<Link = L>>(&mut self, io: &mut I, accept: impl FnOnce(&mut Self, &mut I)) {
        let deadline = Instant::now() + DRAIN;
        let rt = self.rt.clone();
        let handover = rt.handover.is_active();
        if handover {
            rt.handover.wait_for_acceptor();
            accept(self, io);
        }
        let mut svc = Service::new(&rt, self.worker);
        for s in self.slots.iter_mut().flatten() {
            s.close_reason = super::SHUTDOWN;
            if matches!(s.conn.process(&mut svc, usize::MAX), Progress::Close | Progress::CloseAfterWrite) {
                s.close_after_write = true; // quit: not handed over
            }
            // A handover: stop the kernel receiving for this process (what
            // a receive still brings is carried with the connection).
            if handover {
                io.cancel(s);
            }
        }
        drop(svc);
        io.finish(self, deadline, handover);
        for s in self.slots.iter_mut().flatten() {
            if let Some(socket) = I::writer(&mut s.link) {
                write_out(&mut s.conn.out, s.tls.as_deref_mut(), socket, deadline);
            }
        }
        for slot in 0..self.slots.len() {
            if let Some(s) = self.slots[slot].as_mut() {
                let open = !s.close_after_write && !s.closing && !s.eof && io.movable(s);
                if open && I::socket(&s.link).is_some_and(|fd| rt.handover.offer(fd, || carry(&s.conn, s.tls.is_some()))) {
                    s.close_reason = super::HANDOVER;
                }
            }
            self.close(io, slot);
        }
    }
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
        && conn.input.len() <= hooks::MAX_CARRIED_INPUT_BYTES;
    movable.then(|| Resume { input: conn.input.filled().to_vec(), unauthenticated: conn.unauthenticated })
}

/// Write a connection's pending replies (TLS: sealed first) to `socket`,
/// waiting for room, by `deadline`; what is written leaves the output.
fn write_out(out: &mut crate::output::Output, tls: Option<&mut hooks::TlsSession>, socket: &mut dyn std::io::Write, deadline: Instant) {
    if let Some(tls) = tls {
        let mut cipher = Vec::new();
        tls.seal_all(out.pending(), &mut cipher);
        out.replace(cipher);
    }
    while out.pending_len() > 0 && Instant::now() < deadline {
        match socket.write(out.pending()) {
            Ok(0) => break,
            Ok(n) => out.consume(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Give a new connection the state it had in the old process.
pub(super) fn resume(conn: &mut Conn, resume: Option<Box<Resume>>) {
    if let Some(resume) = resume {
        conn.input.extend_from_slice(&resume.input);
        conn.unauthenticated = resume.unauthenticated;
    }
}
