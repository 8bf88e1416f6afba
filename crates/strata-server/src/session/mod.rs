//! A worker's connections and their life, written once for every I/O
//! engine (`io.rs`: what the engines do differently).
//!
//! ```text
//!  Sessions: slots [Some(Session) | None ...], free slots, yielded, dumping,
//!            the turn's ready list, the read buffer pool
//!  Session:  Conn (requests, output) + ConnInfo (stats conns) + id + TLS
//!            + close_reason / close_after_write / closing / eof + the engine's link
//!
//!  accepted ──open──► drive: process ─► react to its Progress ─► send ─► fill ─┐
//!                       ▲   (Close: closing; CloseAfterWrite; Yield: yielded;  │
//!                       │    Dumping: dumping; FlashWait: submit)              │
//!                       └──────────────── bytes came in ◄──────────────────────┘
//!  closing and settled ──close──► unregistered, logged, counted, reads dropped
//! ```
//!
//! [`Sessions::open`] is the mirror of [`Sessions::close`]: a slot, `stats
//! conns`, `watch connevents`, `total_connections`, the TLS session, `-vv`,
//! and a handover's carried state; and back. The kicks (idle, stalled TLS
//! handshakes) and the shutdown drain are in `life.rs`, the turn and a
//! connection's drive in `drive.rs`.

mod drive;
pub mod io;
mod life;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

pub use drive::idle;
pub use io::{Endpoint, Filled, Io, ReadPool, Room};
pub use life::{carry, NORMAL, ERROR, HANDOVER, IDLE_TIMEOUT, SHUTDOWN};

use crate::conn::Conn;
use crate::new_conn::NewConn;
use crate::registry::ConnInfo;
use crate::runtime::Runtime;
use crate::service::hooks::{self, TlsSession};
use crate::service::Hooks;
use crate::stats::{WorkerMemory, WorkerStats};

/// Stop reading once this much unprocessed input is buffered (beyond a
/// data block the next request is waiting for).
pub const MAX_BUFFERED_INPUT: usize = 1 << 20;

/// One client connection.
pub struct Session<L> {
    pub conn: Conn,
    pub info: Arc<ConnInfo>,
    /// Its `stats conns` id.
    pub id: u64,
    /// A TLS connection's rustls state (`tls/`); None: plain.
    pub tls: Option<Box<TlsSession>>,
    /// memcached's `conn_close` reason for `watch connevents`.
    pub close_reason: &'static str,
    /// Run no more requests; close once the replies are out (`quit`, the
    /// peer's end of input, an overlong line).
    pub close_after_write: bool,
    /// Close once nothing of it is in flight.
    pub closing: bool,
    /// The peer closed its side: what it sent is answered, then it closes.
    pub eof: bool,
    /// The engine's part (`io.rs`).
    pub link: L,
}

impl<L> Session<L> {
    /// `n` bytes came in from the socket (`was_empty`: the input held
    /// nothing before they did): counted, the batch's clock started, the
    /// connection's last command time moved.
    pub fn received(&mut self, n: usize, was_empty: bool, hooks: Hooks<'_>, stats: &WorkerStats) {
        WorkerStats::add(&stats.bytes_read, n as u64);
        let started = was_empty && !self.conn.input.is_empty();
        hooks.read(&mut self.conn.timing, started);
        self.info.touch(hooks.core().clock.now());
    }

    /// Append `data` from the socket to the input (TLS: decrypt it
    /// first). Failed: a TLS error (counted by the TLS session; the
    /// connection closes as an error).
    pub fn take_in(&mut self, data: &[u8]) -> Filled {
        let input = &mut self.conn.input;
        let Some(tls) = self.tls.as_mut() else {
            input.extend_from_slice(data);
            return Filled::More;
        };
        match tls.receive(data, input) {
            Ok(hooks::Received::Open) => Filled::More,
            Ok(hooks::Received::Closed) => Filled::Eof,
            Err(_) => {
                self.close_reason = ERROR;
                Filled::Failed
            }
        }
    }

    /// TLS ciphertext is waiting to be written.
    pub fn tls_wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Every pending reply as the bytes to put on the wire, out of the
    /// output, for an engine that hands a whole buffer to the kernel: the
    /// output's own buffer (`spare` takes its place; nothing of it may have
    /// been written), or TLS's ciphertext of the replies and of any
    /// handshake message, sealed into `spare`.
    pub fn wire_bytes(&mut self, spare: Vec<u8>) -> Vec<u8> {
        let out = &mut self.conn.out;
        let Some(tls) = self.tls.as_mut() else { return out.take(spare) };
        let mut cipher = spare;
        tls.seal_all(out.pending(), &mut cipher);
        out.consume(out.pending_len());
        cipher
    }
}

/// One worker's connections.
pub struct Sessions<L> {
    rt: Arc<Runtime>,
    /// The worker's index (its counters and request recorders).
    worker: usize,
    stats: Arc<WorkerStats>,
    slots: Vec<Option<Session<L>>>,
    free: Vec<usize>,
    /// Connections that used their `-R` budget (or must run again): driven
    /// next turn without waiting.
    yielded: Vec<usize>,
    /// Connections running a key dump (`ops/dump.rs`).
    dumping: hooks::Dumping,
    /// Connections to drive this turn: an engine's readiness events (each
    /// connection once) pushed straight in, all others through
    /// [`Sessions::wake`].
    pub ready: Vec<usize>,
    /// `ready` may name a connection twice: sorted and deduplicated first.
    repeats: bool,
    read_bufs: ReadPool,
    /// Requests a connection runs per turn (`-R`).
    pub budget: usize,
    ticker: life::Ticker,
}

impl<L> Sessions<L> {
    /// Worker `worker`'s table.
    pub fn new(rt: Arc<Runtime>, worker: usize) -> Sessions<L> {
        let stats = rt.core.worker_stats[worker].clone();
        let budget = rt.core.settings.reqs_per_event.max(1);
        Sessions {
            rt,
            worker,
            stats,
            slots: Vec::new(),
            free: Vec::new(),
            yielded: Vec::new(),
            dumping: Default::default(),
            ready: Vec::new(),
            repeats: false,
            read_bufs: ReadPool::default(),
            budget,
            ticker: life::Ticker::default(),
        }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The worker's counters.
    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// This worker's door to the features.
    pub fn hooks(&self) -> Hooks<'_> {
        Hooks::new(&self.rt, self.worker)
    }

    pub fn get(&self, slot: usize) -> Option<&Session<L>> {
        self.slots.get(slot)?.as_ref()
    }

    pub fn get_mut(&mut self, slot: usize) -> Option<&mut Session<L>> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// The session in `slot`, with the worker's counters.
    pub fn get_counted(&mut self, slot: usize) -> Option<(&mut Session<L>, &WorkerStats)> {
        Some((self.slots.get_mut(slot)?.as_mut()?, &self.stats))
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the worker may wait for events: not at all while a
    /// connection is to run again, a dump's tick while dumps run.
    pub fn timeout(&self, idle: std::time::Duration) -> std::time::Duration {
        let wait = if self.yielded.is_empty() && self.ready.is_empty() { idle } else { std::time::Duration::ZERO };
        self.dumping.timeout(wait)
    }

    /// The connections that run this turn whatever arrives: the yielded
    /// and the dumping ones, into `ready`.
    pub fn due_now(&mut self) {
        let before = self.ready.len();
        self.ready.append(&mut self.yielded);
        self.dumping.drain_into(&mut self.ready);
        self.repeats |= self.ready.len() > before;
    }

    /// Drive the connection in `slot` this turn (a completion, a kick, a
    /// flash read back: it may be ready already).
    pub fn wake(&mut self, slot: usize) {
        self.ready.push(slot);
        self.repeats = true;
    }

    /// Open a connection: a slot, `stats conns`, `watch connevents`,
    /// `total_connections`, the TLS session, `-vv`'s line, the engine's
    /// link and a handover's carried state; it runs this turn. None when it
    /// could not be opened (it is forgotten and uncounted).
    pub fn open<I: Io<Link = L>>(&mut self, io: &mut I, new: NewConn<I::Endpoint>) -> Option<usize> {
        let core = &self.rt.core;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            core.connection_structures.fetch_add(1, Ordering::Relaxed);
            self.slots.len() - 1
        });
        let hooks = Hooks::new(&self.rt, self.worker);
        let info = Arc::new(ConnInfo::new(new.peer, new.listen, core.clock.now()));
        let id = core.conns.register(info.clone());
        let fd = new.stream.fd();
        let opened = hooks.conn_opened(&self.stats, &info.peer, id, fd.unwrap_or(-1), new.tls);
        let opened = opened.and_then(|tls| io.open(slot, new.stream).map(|link| (link, tls)).map_err(drop));
        let Ok((link, tls)) = opened else {
            core.conns.remove(id);
            self.free.push(slot);
            core.curr_connections.fetch_sub(1, Ordering::Relaxed);
            return None;
        };
        WorkerMemory::set(&self.stats.memory.conn_slots, self.slots.capacity() * std::mem::size_of::<Option<Session<L>>>() + io.slot_bytes());
        // A key dump writes to the socket itself: not on TLS (it then
        // closes the connection, as without a socket).
        let mut conn = Conn::new(hooks.requires_auth(), fd).over_tls(tls.is_some());
        life::resume(&mut conn, new.resume);
        self.slots[slot] = Some(Session {
            conn,
            info,
            id,
            tls,
            close_reason: NORMAL,
            close_after_write: false,
            closing: false,
            eof: false,
            link,
        });
        self.wake(slot);
        Some(slot)
    }

    /// Close the connection in `slot` (the mirror of [`Sessions::open`]):
    /// out of `stats conns`, the `conn_close` line for `watch connevents`
    /// and `-vv`, the connection count, its flash reads abandoned (an I/O
    /// thread may still hold its copy: that one is dropped when it comes
    /// back to a connection that is gone), the engine's link released.
    pub fn close<I: Io<Link = L>>(&mut self, io: &mut I, slot: usize) {
        let Some(mut s) = self.slots.get_mut(slot).and_then(Option::take) else { return };
        let core = &self.rt.core;
        core.conns.remove(s.id);
        let fd = I::socket(&s.link).map_or(-1, |fd| fd.as_raw_fd());
        Hooks::new(&self.rt, self.worker).conn_closed(&self.stats, &s.info.peer, s.id, fd, s.close_reason, &mut s.conn.flash);
        core.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.free.push(slot);
        self.yielded.retain(|&i| i != slot);
        self.dumping.remove(slot);
        if let (Some(tls), Some(socket)) = (s.tls.as_mut(), I::writer(&mut s.link)) {
            tls.goodbye(socket);
        }
        io.close(slot, s);
    }

    /// A flash read of connection `conn_id`'s request came back (`buf`: the
    /// bytes, None if it failed): the connection runs again once its
    /// request has all its reads. A slot reused since is another's.
    pub fn flash_done(&mut self, slot: usize, conn_id: Option<u64>, key_index: usize, buf: Option<strata_store::FlashBuf>) {
        let Some(Some(s)) = self.slots.get_mut(slot) else { return };
        if conn_id.is_none_or(|id| id == s.id) && s.conn.flash.complete(key_index, buf) {
            self.wake(slot);
        }
    }

    /// Open every connection the acceptor handed over.
    pub fn accept<I: Io<Link = L, Endpoint = crate::sys::Stream>>(&mut self, io: &mut I, incoming: &Receiver<NewConn>) {
        while let Ok(new) = incoming.try_recv() {
            self.open(io, new);
        }
    }

    /// The end of a worker's loop: the kicks, every ready connection
    /// driven, and on shutdown the drain; true once the worker is to stop.
    pub fn turn_or_stop<I: Io<Link = L, Endpoint = crate::sys::Stream>>(&mut self, io: &mut I, incoming: &Receiver<NewConn>) -> bool {
        self.kick();
        self.turn(io);
        if !self.rt.core.is_shutting_down() {
            return false;
        }
        self.drain_and_close(io, |sessions, io| sessions.accept(io, incoming));
        true
    }

    /// The open sessions.
    pub fn iter(&self) -> impl Iterator<Item = &Session<L>> {
        self.slots.iter().flatten()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Session<L>> {
        self.slots.iter_mut().flatten()
    }

    /// `n` bytes came in for the connection in `slot`, `feed` puts them in
    /// its input (a buffer lent from the pool if it holds none): counted,
    /// the batch's clock started; the peer's end or a failure noted.
    pub fn receive(&mut self, slot: usize, n: usize, feed: impl FnOnce(&mut Session<L>) -> Filled) {
        let hooks = Hooks::new(&self.rt, self.worker);
        let Some(Some(s)) = self.slots.get_mut(slot) else { return };
        self.read_bufs.lend(&mut s.conn.input);
        let was_empty = s.conn.input.is_empty();
        match feed(s) {
            Filled::Eof => s.eof = true,
            Filled::Failed => s.closing = true,
            Filled::More | Filled::Wait => {}
        }
        s.received(n, was_empty, hooks, &self.stats);
    }
}
