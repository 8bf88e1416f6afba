//! A worker on epoll (`-o io_engine=epoll`, mio, edge-triggered): one
//! event loop, the connections the acceptor handed it, and nothing shared
//! with other workers on the request path but the engine.
//!
//! Each turn: wait for readiness, then drive every ready connection
//! (`session/`: run its requests, write the replies, read what it sent,
//! until it would block). This file is the epoll [`Io`]: a read is a
//! `read()` into the connection's input (16 KiB at a time, a buffer lent
//! from the session's pool), and a short read means the socket is
//! drained (a new edge comes with more data); a write is a `write()`
//! until it would block. TLS decrypts into the same input and seals the
//! same output. Flash reads go to the worker's own small io_uring (its
//! eventfd polled with the sockets) or, without io_uring, to the
//! `ext_threads` I/O threads.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};

use crate::flash::io::EpollReads;
use crate::new_conn::NewConn;
use crate::runtime::Runtime;
use crate::service::hooks::TlsSession;
use crate::service::Hooks;
use crate::session::{Filled, Io, ReadPool, Room, Session, Sessions};
use crate::stats::WorkerStats;
use crate::sys::Stream;
use crate::udp::UdpPorts;

pub const WAKE_TOKEN: Token = Token(usize::MAX);
/// The worker's flash read ring's eventfd (below the UDP sockets' tokens).
const FLASH_TOKEN: Token = Token(UDP_TOKEN_BASE - MAX_UDP_SOCKETS);
/// UDP sockets use the tokens below the wake token.
const UDP_TOKEN_BASE: usize = usize::MAX - 1;
const MAX_UDP_SOCKETS: usize = 1024;
const READ_CHUNK: usize = 16 * 1024;

/// The epoll engine's part of a connection.
pub struct Link {
    stream: Stream,
    readable: bool,
    writable: bool,
    /// The peer's FIN (or an error) was reported: read until `read` says 0
    /// even after a short read, since no new edge will come.
    hup: bool,
}

/// The epoll engine.
pub struct Epoll {
    poll: Poll,
    /// Flash reads (`-o ext_path`; `flash/io.rs`).
    flash: Option<EpollReads>,
    /// Ciphertext read from a TLS socket before rustls takes it.
    tls_scratch: Vec<u8>,
}

pub struct Worker {
    sessions: Sessions<Link>,
    io: Epoll,
    incoming: Receiver<NewConn>,
    udp: UdpPorts,
}

impl Worker {
    pub fn new(rt: Arc<Runtime>, index: usize, incoming: Receiver<NewConn>, mut udp_sockets: Vec<mio::net::UdpSocket>) -> io::Result<(Worker, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN)?);
        udp_sockets.truncate(MAX_UDP_SOCKETS);
        for (i, socket) in udp_sockets.iter_mut().enumerate() {
            poll.registry().register(socket, Token(UDP_TOKEN_BASE - i), mio::Interest::READABLE)?;
        }
        let threads = rt.core.settings.ext.threads;
        let flash = rt.flash.on.then(|| EpollReads::new(&rt.flash.pool, threads, poll.registry(), FLASH_TOKEN, &waker)).transpose()?;
        let io = Epoll { poll, flash, tls_scratch: Vec::new() };
        let worker = Worker { sessions: Sessions::new(rt, index), io, incoming, udp: UdpPorts::new(udp_sockets) };
        Ok((worker, waker))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut flash_retry = false;
        loop {
            let idle = if flash_retry { Duration::ZERO } else { Duration::from_millis(500) };
            if let Err(e) = self.io.poll.poll(&mut events, Some(self.sessions.timeout(idle))) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::log_line!("strata: worker poll failed: {e}");
                    return;
                }
            }
            self.sessions.due_now();
            for event in events.iter() {
                match event.token() {
                    WAKE_TOKEN => {
                        self.sessions.accept(&mut self.io, &self.incoming);
                        self.flash_finished();
                    }
                    FLASH_TOKEN => self.flash_finished(),
                    Token(t) if t > UDP_TOKEN_BASE - MAX_UDP_SOCKETS => self.udp.drain(UDP_TOKEN_BASE - t, self.sessions.runtime(), self.sessions.worker()),
                    Token(slot) => {
                        let Some(s) = self.sessions.get_mut(slot) else { continue };
                        s.link.readable |= event.is_readable() || event.is_read_closed() || event.is_error();
                        s.link.hup |= event.is_read_closed() || event.is_error();
                        s.link.writable |= event.is_writable();
                        self.sessions.ready.push(slot);
                    }
                }
            }
            if self.sessions.turn_or_stop(&mut self.io, &self.incoming) {
                return;
            }
            flash_retry = self.io.flash.as_mut().is_some_and(EpollReads::submit_queued);
        }
    }

    /// Finished flash reads, to their connections.
    fn flash_finished(&mut self) {
        let Some(reads) = self.io.flash.as_mut() else { return };
        let sessions = &mut self.sessions;
        reads.finished(&mut |d| sessions.flash_done(d.slot, Some(d.conn_id), d.key_index, d.buf));
    }
}

impl Io for Epoll {
    type Link = Link;
    type Endpoint = Stream;
    // Measured, not kept: reading a turn's ready connections ahead, so
    // their first keys are prefetched together as io_uring's are, cost
    // +5% user instructions a request under memaslap (callgrind: 3948 and
    // 4010 against 3761 and 3787) for a throughput change within the noise
    // (+2%, 3 rounds on a loaded machine); a connection is read as it is
    // driven, as before (docs/design/request-path.md, "I/O engines").
    const FILLS_AHEAD: bool = false;

    fn open(&mut self, slot: usize, mut stream: Stream) -> io::Result<Link> {
        stream.register(self.poll.registry(), Token(slot))?;
        Ok(Link { stream, readable: true, writable: true, hup: false })
    }

    fn socket(link: &Link) -> Option<BorrowedFd<'_>> {
        Some(link.stream.as_fd())
    }

    /// Read what the socket has. A short read means the socket is
    /// drained: with edge-triggered readiness, more data will raise a new
    /// event, so the next read waits for it instead of costing an EAGAIN
    /// system call.
    fn fill(&mut self, s: &mut Session<Link>, room: Room, pool: &mut ReadPool, hooks: Hooks<'_>, stats: &WorkerStats) -> Filled {
        if !room.input || !room.now || !s.link.readable {
            return Filled::Wait;
        }
        pool.lend(&mut s.conn.input);
        let buffered = s.conn.input.len();
        let (n, chunk) = if s.tls.is_none() {
            let want = READ_CHUNK.max(s.conn.awaiting.saturating_sub(buffered).min(crate::session::MAX_BUFFERED_INPUT));
            let spare = s.conn.input.spare(want);
            let room = spare.len();
            (s.link.stream.read(spare), room)
        } else {
            self.tls_scratch.resize(READ_CHUNK, 0);
            (s.link.stream.read(&mut self.tls_scratch), READ_CHUNK)
        };
        let n = match n {
            Ok(0) => return Filled::Eof,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                s.link.readable = false;
                return Filled::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Filled::More,
            Err(_) => return Filled::Failed,
        };
        if n < chunk && !s.link.hup {
            s.link.readable = false;
        }
        let filled = match s.tls.is_some() {
            true => s.take_in(&self.tls_scratch[..n]),
            false => {
                s.conn.input.commit(n);
                Filled::More
            }
        };
        s.received(n, buffered == 0, hooks, stats);
        filled
    }

    fn send(&mut self, s: &mut Session<Link>, stats: &WorkerStats) -> io::Result<()> {
        let link = &mut s.link;
        if let Some(tls) = s.tls.as_mut() {
            return flush_tls(&mut s.conn.out, tls, link, stats);
        }
        let out = &mut s.conn.out;
        while out.pending_len() > 0 && link.writable {
            let pending = out.pending_len();
            match link.stream.write(out.pending()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    WorkerStats::add(&stats.bytes_written, n as u64);
                    out.consume(n);
                    // A short write: the socket buffer is full.
                    link.writable &= n == pending;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => link.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn sent(&self, s: &Session<Link>) -> bool {
        s.conn.pending_output() == 0 && !s.tls_wants_write()
    }

    /// Queue a parked connection's new flash reads on the worker's ring
    /// (submitted at the end of the turn), or hand them to the I/O threads.
    fn submit_flash(&mut self, s: &mut Session<Link>, slot: usize) -> bool {
        self.flash.as_mut().is_some_and(|reads| reads.submit(&mut s.conn.flash, slot, s.id))
    }

    fn movable(&self, s: &Session<Link>) -> bool {
        !s.link.hup
    }

    fn writer(link: &mut Link) -> Option<&mut dyn Write> {
        Some(&mut link.stream)
    }

    fn close(&mut self, _: usize, mut s: Session<Link>) {
        s.link.stream.deregister(self.poll.registry());
    }
}

/// TLS: seal replies (`ssl_wbuf_size` a pass) and write the ciphertext,
/// handshake messages included, until done or the socket would block.
/// Out of line, so the plain write stays small enough to inline.
#[inline(never)]
fn flush_tls(out: &mut crate::output::Output, tls: &mut TlsSession, link: &mut Link, stats: &WorkerStats) -> io::Result<()> {
    while link.writable {
        if tls.wants_write() {
            match tls.write_to(&mut link.stream) {
                Ok(n) => WorkerStats::add(&stats.bytes_written, n as u64),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => link.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        if out.pending_len() == 0 {
            break;
        }
        let n = tls.seal(out.pending());
        if n == 0 {
            break;
        }
        out.consume(n);
    }
    Ok(())
}
