//! A worker thread: one event loop, the connections the acceptor handed it,
//! and nothing shared with other workers on the request path but the engine.
//!
//! Each turn: wait for readiness, then [`Worker::drive`] every ready
//! connection: read what is there, run the requests, write the replies in
//! one call. A connection that used its `-R` budget is put on the `yielded`
//! list and continued next turn without waiting (memcached's `conn_yields`).

use std::io::{self, Read, Write};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use crate::conn::{Conn, Progress};
use crate::lifecycle;
use crate::report::memory::WorkerMemory;
use crate::new_conn::NewConn;
use crate::service::Service;
use crate::shared::{ConnInfo, Shared};
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
/// Stop reading once this much unprocessed input is buffered (beyond a
/// data block the next request is waiting for).
const MAX_BUFFERED_INPUT: usize = 1 << 20;

struct Client {
    /// memcached's `conn_close` reason for `watch connevents`.
    close_reason: &'static str,
    stream: Stream,
    conn: Conn,
    info: Arc<ConnInfo>,
    id: u64,
    readable: bool,
    writable: bool,
    close_after_write: bool,
    /// The peer's FIN (or an error) was reported: read until `read` says 0
    /// even after a short read, since no new edge will come.
    peer_closed: bool,
    /// A TLS connection's rustls state (`tls/`); None: plain.
    tls: Option<Box<crate::tls::TlsSession>>,
}

pub struct Worker {
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    poll: Poll,
    incoming: Receiver<NewConn>,
    clients: Vec<Option<Client>>,
    free: Vec<usize>,
    yielded: Vec<usize>,
    /// Connections running a key dump (`ops/dump.rs`).
    dumping: crate::ops::dump::Dumping,
    udp: UdpPorts,
    /// Read buffers of connections with nothing buffered, lent out again
    /// on the next read: idle connections hold none, and steady state
    /// allocates nothing.
    read_bufs: ReadPool,
    /// Flash reads finished by the I/O threads for this worker (`-o
    /// ext_path`; they wake it through its Waker).
    flash_inbox: Option<Arc<crate::flash::io::Inbox>>,
    /// This worker's own ring for flash reads, where the kernel has
    /// io_uring (else the I/O threads read for it).
    flash_ring: Option<crate::sys::read_ring::ReadRing>,
    /// Ciphertext read from a TLS socket before rustls takes it.
    tls_scratch: Vec<u8>,
}

/// Read buffers kept for reuse, and the largest size kept.
const POOLED_READ_BUFS: usize = 256;
const POOLED_READ_BUF_BYTES: usize = 64 << 10;

/// The pooled read buffers and their bytes (`stats memory` `read_pool_bytes`).
#[derive(Default)]
struct ReadPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl ReadPool {
    fn pop(&mut self) -> Option<Vec<u8>> {
        let buf = self.bufs.pop()?;
        self.bytes -= buf.capacity();
        Some(buf)
    }

    /// Keep `buf` if it is small enough and the pool has room.
    fn offer(&mut self, buf: Vec<u8>) {
        if buf.len() <= POOLED_READ_BUF_BYTES && self.bufs.len() < POOLED_READ_BUFS {
            self.bytes += buf.capacity();
            self.bufs.push(buf);
        }
    }
}

impl Worker {
    pub fn new(
        shared: Arc<Shared>,
        index: usize,
        incoming: Receiver<NewConn>,
        mut udp_sockets: Vec<mio::net::UdpSocket>,
    ) -> io::Result<(Worker, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN)?);
        udp_sockets.truncate(MAX_UDP_SOCKETS);
        for (i, socket) in udp_sockets.iter_mut().enumerate() {
            poll.registry().register(socket, Token(UDP_TOKEN_BASE - i), mio::Interest::READABLE)?;
        }
        let stats = shared.worker_stats[index].clone();
        let flash_ring = match shared.flash_on {
            true => crate::flash::io::read_ring(poll.registry(), FLASH_TOKEN),
            false => None,
        };
        let flash_inbox = if shared.flash_on && flash_ring.is_none() {
            let threads = shared.settings.ext.threads;
            if shared.flash_pool.get().is_none() {
                let _ = shared.flash_pool.set(crate::flash::io::Pool::start(threads)?);
            }
            Some(crate::flash::io::Inbox::new(waker.clone()))
        } else {
            None
        };
        let worker = Worker {
            flash_inbox,
            flash_ring,
            shared,
            stats,
            poll,
            incoming,
            clients: Vec::new(),
            free: Vec::new(),
            yielded: Vec::new(),
            dumping: Default::default(),
            read_bufs: ReadPool::default(),
            tls_scratch: Vec::new(),
            udp: UdpPorts::new(udp_sockets),
        };
        Ok((worker, waker))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut ticker = lifecycle::Ticker::default();
        let mut flash_retry = false;
        loop {
            let idle = self.yielded.is_empty() && !flash_retry;
            let timeout = if idle { Duration::from_millis(500) } else { Duration::ZERO };
            let timeout = self.dumping.timeout(timeout);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::log_line!("strata: worker poll failed: {e}");
                    return;
                }
            }
            let mut ready = std::mem::take(&mut self.yielded);
            self.dumping.drain_into(&mut ready);
            // A poll names each connection once: only the others (yielded,
            // dumping, flash reads done) can repeat one.
            let mut repeats = !ready.is_empty();
            for event in events.iter() {
                if event.token() == WAKE_TOKEN {
                    self.accept_new();
                    self.flash_finished(&mut ready);
                    repeats = true;
                    continue;
                }
                if event.token() == FLASH_TOKEN {
                    self.flash_ring_finished(&mut ready);
                    repeats = true;
                    continue;
                }
                if event.token().0 > UDP_TOKEN_BASE - MAX_UDP_SOCKETS {
                    self.udp.drain(UDP_TOKEN_BASE - event.token().0, &self.shared, &self.stats);
                    continue;
                }
                let index = event.token().0;
                if let Some(Some(client)) = self.clients.get_mut(index) {
                    client.readable |= event.is_readable() || event.is_read_closed() || event.is_error();
                    client.peer_closed |= event.is_read_closed() || event.is_error();
                    client.writable |= event.is_writable();
                    ready.push(index);
                }
            }
            if repeats {
                ready.sort_unstable();
                ready.dedup();
            }
            for index in ready {
                self.drive(index);
            }
            flash_retry = self.submit_flash_reads();
            if self.shared.is_shutting_down() {
                self.drain_and_close();
                return;
            }
            if let Some(due) = ticker.due(&self.shared) {
                if let Some(limit) = due.idle_limit_secs {
                    self.kick_idle(limit);
                }
                if let Some(limit) = due.handshake_limit_secs {
                    self.kick_stalled_handshakes(limit);
                }
            }
        }
    }

    fn accept_new(&mut self) {
        loop {
            let new = match self.incoming.try_recv() {
                Ok(new) => new,
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return,
            };
            let index = self.free.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.shared.connection_structures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                WorkerMemory::set(&self.stats.memory.conn_slots, self.clients.capacity() * std::mem::size_of::<Option<Client>>());
                self.clients.len() - 1
            });
            let mut stream = new.stream;
            if stream.register(self.poll.registry(), Token(index)).is_err() {
                self.free.push(index);
                self.shared.curr_connections.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                continue;
            }
            let info = Arc::new(ConnInfo::new(new.peer, new.listen, self.shared.clock.now()));
            let id = self.shared.conns.register(info.clone());
            crate::ops::watch::conn_event(&self.shared, &self.stats, &info.peer, id, None);
            WorkerStats::incr(&self.stats.total_connections);
            let socket = stream.raw_fd();
            let tls = match crate::tls::session_for(&self.shared, new.tls) {
                Ok(tls) => tls,
                Err(()) => {
                    self.shared.conns.remove(id);
                    stream.deregister(self.poll.registry());
                    self.free.push(index);
                    self.shared.curr_connections.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
            };
            if self.shared.ops.verbose.tracing() {
                crate::ops::verbose::conn_new(socket, self.shared.settings.protocol);
            }
            // A key dump writes to the socket itself: not on TLS (it
            // then closes the connection, as without a socket).
            let mut conn = Conn::new(self.shared.requires_auth(), Some(socket)).over_tls(tls.is_some());
            crate::handover::incoming::resume(&mut conn, new.resume);
            self.clients[index] = Some(Client {
                stream,
                conn,
                tls,
                info,
                id,
                readable: true,
                writable: true,
                close_after_write: false,
                peer_closed: false,
                close_reason: lifecycle::NORMAL,
            });
            self.drive(index);
        }
    }

    /// Read, run and write for one connection until it would block.
    fn drive(&mut self, index: usize) {
        let Some(Some(client)) = self.clients.get_mut(index) else { return };
        let exec = Service::new(&self.shared, &self.stats).for_conn(client.id);
        let budget = self.shared.settings.reqs_per_event.max(1);
        let close = loop {
            if !client.close_after_write {
                match client.conn.process(&exec, budget) {
                    Progress::Close => {
                        client.close_reason = lifecycle::ERROR;
                        break true;
                    }
                    Progress::CloseAfterWrite => client.close_after_write = true,
                    Progress::Yield => {
                        WorkerStats::incr(&self.stats.conn_yields);
                        self.yielded.push(index);
                    }
                    Progress::Dumping => self.dumping.push(index),
                    Progress::FlashWait => {
                        if submit_flash(client, index, &self.shared, self.flash_inbox.as_ref(), self.flash_ring.as_mut()) {
                            self.yielded.push(index);
                        }
                    }
                    Progress::NeedInput | Progress::OutputFull => {}
                }
            }
            match flush(client, &self.stats) {
                Ok(()) if pending(client) == 0 => client.conn.timing.replied(&self.stats.requests),
                Ok(()) => {}
                Err(_) => break true,
            }
            if client.close_after_write {
                if pending(client) == 0 {
                    break true;
                }
                break false;
            }
            if client.conn.pending_output() > self.shared.settings.max_pending_output_bytes {
                break false; // wait until the client reads
            }
            if !client.readable || self.yielded.last() == Some(&index) {
                break false;
            }
            let filled = match client.tls.is_some() {
                false => fill(client, &self.stats, &mut self.read_bufs),
                true => fill_tls(client, &self.stats, &mut self.read_bufs, &mut self.tls_scratch),
            };
            match filled {
                Ok(true) => client.info.touch(self.shared.clock.now()),
                Ok(false) => break false,
                // The peer closed its side: everything it sent was answered
                // above; send what is pending, then close (as memcached does).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => client.close_after_write = true,
                Err(_) => break true,
            }
        };
        if close {
            self.close(index);
        } else {
            if let Some(storage) = client.conn.input.release() {
                self.read_bufs.offer(storage);
            }
            client.info.note_buffers(client.conn.buffer_bytes());
            WorkerMemory::set(&self.stats.memory.read_pool, self.read_bufs.bytes);
        }
    }

    fn close(&mut self, index: usize) {
        if let Some(mut client) = self.clients.get_mut(index).and_then(Option::take) {
            if let Some(tls) = client.tls.as_mut() {
                // Best effort: a pending alert, or close_notify.
                if tls.is_established() {
                    tls.close_notify();
                }
                let _ = tls.write_to(&mut client.stream);
            }
            client.stream.deregister(self.poll.registry());
            let fd = client.stream.raw_fd();
            lifecycle::closed(&self.shared, &self.stats, client.id, &client.info, &mut client.conn, fd, client.close_reason);
            self.free.push(index);
            self.yielded.retain(|&i| i != index);
            self.dumping.remove(index);
        }
    }

    /// Hand this turn's queued flash reads to the kernel, all in one
    /// call. A failed submit (EAGAIN, EBUSY: the kernel is short of room)
    /// leaves them queued, and the next turn does not wait before trying again.
    fn submit_flash_reads(&mut self) -> bool {
        let Some(ring) = self.flash_ring.as_mut() else { return false };
        let _ = ring.submit();
        ring.has_queued()
    }

    /// The worker's own flash reads that finished: to their connections,
    /// and those to `ready`.
    fn flash_ring_finished(&mut self, ready: &mut Vec<usize>) {
        let Some(ring) = self.flash_ring.as_mut() else { return };
        let mut done = Vec::new();
        ring.completions(&mut done);
        let finished = done.into_iter().map(|d| crate::flash::io::Finished {
            slot: d.slot,
            conn_id: d.conn_id,
            key_index: d.key_index,
            buf: crate::flash::io::whole(d.result, d.buf),
        });
        self.hand_back(finished, ready);
    }

    /// Hand the I/O threads' finished flash reads to their connections,
    /// and those to `ready`.
    fn flash_finished(&mut self, ready: &mut Vec<usize>) {
        let Some(inbox) = &self.flash_inbox else { return };
        let mut finished = Vec::new();
        inbox.drain(&mut finished);
        self.hand_back(finished, ready);
    }

    /// Finished flash reads to the connections still waiting for them
    /// (the same connection: a slot reused since is another's), and those
    /// to `ready`.
    fn hand_back(&mut self, finished: impl IntoIterator<Item = crate::flash::io::Finished>, ready: &mut Vec<usize>) {
        for done in finished {
            let Some(Some(client)) = self.clients.get_mut(done.slot) else { continue };
            if client.id == done.conn_id && client.conn.flash.complete(done.key_index, done.buf) {
                ready.push(done.slot);
            }
        }
    }

    /// Close TLS connections whose handshake outlived
    /// `ssl_handshake_timeout` (counted as handshake errors).
    fn kick_stalled_handshakes(&mut self, limit: u32) {
        let now = self.shared.clock.now();
        let stalled: Vec<usize> = (0..self.clients.len())
            .filter(|&i| {
                let Some(Some(c)) = self.clients.get(i) else { return false };
                c.tls.as_ref().is_some_and(|t| t.handshake_expired(now, limit))
            })
            .collect();
        for index in stalled {
            if let Some(Some(client)) = self.clients.get_mut(index) {
                client.close_reason = lifecycle::ERROR;
            }
            self.close(index);
        }
    }

    /// Close connections idle past `limit` seconds (`lifecycle.rs`).
    fn kick_idle(&mut self, limit: u32) {
        let now = self.shared.clock.now();
        let stats = &self.stats;
        let idle: Vec<usize> = self
            .clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| lifecycle::idle_kick(stats, &c.conn, &c.info, now, limit)).map(|_| i))
            .collect();
        for index in idle {
            if let Some(Some(client)) = self.clients.get_mut(index) {
                client.close_reason = lifecycle::IDLE_TIMEOUT;
            }
            self.close(index);
        }
    }

    /// On shutdown: answer what is already buffered, flush, close.
    fn drain_and_close(&mut self) {
        let (shared, stats) = (self.shared.clone(), self.stats.clone());
        let exec = Service::new(&shared, &stats);
        let deadline = Instant::now() + Duration::from_secs(2);
        if shared.handover.is_active() {
            shared.handover.wait_for_acceptor();
            self.accept_new();
        }
        for index in 0..self.clients.len() {
            if let Some(client) = self.clients[index].as_mut() {
                client.close_reason = lifecycle::SHUTDOWN;
                if lifecycle::drain_requests(&mut client.conn, &exec) {
                    client.close_after_write = true; // quit: not handed over
                }
                while client.conn.pending_output() > 0 && Instant::now() < deadline {
                    if flush(client, &stats).is_err() {
                        break;
                    }
                    if client.conn.pending_output() > 0 {
                        std::thread::sleep(Duration::from_millis(1));
                        client.writable = true;
                    }
                }
                let open = !client.close_after_write && !client.peer_closed;
                if open && shared.handover.offer(std::os::fd::AsFd::as_fd(&client.stream), || lifecycle::carry(&client.conn, client.tls.is_some())) {
                    client.close_reason = lifecycle::HANDOVER;
                }
            }
            self.close(index);
        }
    }
}

/// A connection parked on new flash reads: queue them on the worker's ring
/// (submitted at the end of the turn), or hand them to the I/O threads.
/// True: the reads that failed at once (misses) left none in flight, run
/// the connection again.
fn submit_flash(
    client: &mut Client,
    index: usize,
    shared: &Shared,
    inbox: Option<&Arc<crate::flash::io::Inbox>>,
    mut ring: Option<&mut crate::sys::read_ring::ReadRing>,
) -> bool {
    let conn_id = client.id;
    client.conn.flash.submit(|wait| match ring.as_deref_mut() {
        Some(ring) => {
            use std::os::fd::AsRawFd;
            ring.read(wait.read.file.as_raw_fd(), (index, conn_id, wait.key_index), wait.read.buffer(), wait.read.offset_bytes).is_ok()
        }
        None => match (shared.flash_pool.get(), inbox) {
            (Some(pool), Some(inbox)) => {
                pool.submit(wait, index, conn_id, inbox);
                true
            }
            // No I/O threads: the read fails, which is a miss.
            _ => false,
        },
    })
}

/// Reply bytes not yet on the socket (TLS: 1 more while ciphertext waits).
fn pending(client: &Client) -> usize {
    client.conn.pending_output() + usize::from(client.tls.as_ref().is_some_and(|t| t.wants_write()))
}

/// Write pending replies until done or the socket would block.
fn flush(client: &mut Client, stats: &WorkerStats) -> io::Result<()> {
    if let Some(tls) = client.tls.as_mut() {
        return flush_tls(&mut client.conn, tls, &mut client.stream, &mut client.writable, stats);
    }
    while client.conn.pending_output() > 0 && client.writable {
        let conn = &mut client.conn;
        let pending = conn.pending_output();
        match client.stream.write(&conn.out[conn.wpos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                WorkerStats::add(&stats.bytes_written, n as u64);
                conn.consume_output(n);
                if n < pending {
                    client.writable = false; // the socket buffer is full
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => client.writable = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read what the socket has. Ok(true): got bytes; Ok(false): would block or
/// the input buffer is full for now; Err: closed or failed. A short read
/// means the socket is drained: with edge-triggered readiness, more data will
/// raise a new event, so the next read waits for it instead of costing an
/// EAGAIN syscall.
fn fill(client: &mut Client, stats: &WorkerStats, read_bufs: &mut ReadPool) -> io::Result<bool> {
    let conn = &mut client.conn;
    if !conn.input.has_storage() {
        if let Some(storage) = read_bufs.pop() {
            conn.input.adopt(storage);
        }
    }
    let buffered = conn.input.len();
    if buffered >= MAX_BUFFERED_INPUT.max(conn.awaiting) {
        return Ok(false);
    }
    let want = READ_CHUNK.max(conn.awaiting.saturating_sub(buffered).min(MAX_BUFFERED_INPUT));
    let spare = conn.input.spare(want);
    let room = spare.len();
    match client.stream.read(spare) {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(n) => {
            conn.input.commit(n);
            conn.timing.read(buffered == 0, &stats.requests);
            WorkerStats::add(&stats.bytes_read, n as u64);
            if n < room && !client.peer_closed {
                client.readable = false;
            }
            Ok(true)
        }
        Err(e) => match e.kind() {
            io::ErrorKind::WouldBlock => {
                client.readable = false;
                Ok(false)
            }
            io::ErrorKind::Interrupted => Ok(true),
            _ => Err(e),
        },
    }
}

/// TLS: seal replies (`ssl_wbuf_size` a pass) and write the ciphertext,
/// handshake messages included, until done or the socket would block.
/// Out of line, so the plain `flush` stays small enough to inline.
#[inline(never)]
fn flush_tls(conn: &mut Conn, tls: &mut crate::tls::TlsSession, stream: &mut Stream, writable: &mut bool, stats: &WorkerStats) -> io::Result<()> {
    while *writable {
        if tls.wants_write() {
            match tls.write_to(stream) {
                Ok(n) => WorkerStats::add(&stats.bytes_written, n as u64),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        if conn.pending_output() == 0 {
            break;
        }
        let n = tls.seal(&conn.out[conn.wpos..]);
        if n == 0 {
            break;
        }
        conn.consume_output(n);
    }
    Ok(())
}

/// TLS: read ciphertext (16 KiB at a time, a short read meaning drained as
/// in [`fill`]) and hand it to rustls, which appends the plaintext to the
/// connection's input. A TLS failure is `InvalidData` (close; counted), the
/// peer's close_notify `UnexpectedEof` (answer, then close).
#[inline(never)]
fn fill_tls(client: &mut Client, stats: &WorkerStats, read_bufs: &mut ReadPool, scratch: &mut Vec<u8>) -> io::Result<bool> {
    let conn = &mut client.conn;
    let Some(tls) = client.tls.as_mut() else { return Ok(false) };
    if !conn.input.has_storage() {
        if let Some(storage) = read_bufs.pop() {
            conn.input.adopt(storage);
        }
    }
    let buffered = conn.input.len();
    if buffered >= MAX_BUFFERED_INPUT.max(conn.awaiting) {
        return Ok(false);
    }
    scratch.resize(READ_CHUNK, 0);
    match client.stream.read(scratch) {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(n) => {
            WorkerStats::add(&stats.bytes_read, n as u64);
            if n < READ_CHUNK && !client.peer_closed {
                client.readable = false;
            }
            let received = tls.receive(&scratch[..n], &mut conn.input);
            if buffered == 0 && !conn.input.is_empty() {
                conn.timing.read(true, &stats.requests);
            }
            match received {
                Ok(crate::tls::Received::Open) => Ok(true),
                Ok(crate::tls::Received::Closed) => Err(io::ErrorKind::UnexpectedEof.into()),
                Err(_) => Err(io::ErrorKind::InvalidData.into()),
            }
        }
        Err(e) => match e.kind() {
            io::ErrorKind::WouldBlock => {
                client.readable = false;
                Ok(false)
            }
            io::ErrorKind::Interrupted => Ok(true),
            _ => Err(e),
        },
    }
}
