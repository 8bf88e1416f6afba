//! A worker on io_uring (`-o io_engine=uring`): the same connections,
//! service and replies as the epoll worker, with the kernel doing the
//! waiting and the copying in batches.
//!
//! - Each connection has one multishot receive armed into the worker's
//!   provided-buffer ring: data arrives as completions, no read syscalls.
//! - Each loop turn first handles every completion, then runs the requests
//!   of every connection that got data, then submits one send per connection
//!   with replies: all of a turn's sends go to the kernel in one
//!   `io_uring_enter`, which is also the call that waits for the next turn.
//! - A connection whose input or pending output passes its limit has its
//!   receive cancelled until it drains (a client that never reads cannot make
//!   the server buffer without bound), and is re-armed after.
//! - New connections arrive from the acceptor over a channel; an eventfd read
//!   in the ring wakes the worker. UDP sockets are watched with multishot
//!   polls and drained with `recvfrom` as in the epoll worker.
//!
//! A completion's token is `[generation:32 | slot:24]`, so a completion that
//! arrives after its connection closed and the slot was reused is ignored.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{Conn, Progress};
use crate::lifecycle;
use crate::report::memory::WorkerMemory;
use crate::service::Service;
use crate::shared::{ConnInfo, Shared};
use crate::stats::WorkerStats;
use crate::sys::uring::{Completion, EventFd, Kind, Ring};
use crate::sys::Stream;
use crate::udp::UdpPorts;
use crate::new_conn::NewConn;

/// Submission queue entries: a turn's sends and re-arms past this many are
/// handed to the kernel in more than one call (`Ring::push`). The kernel
/// maps 64 bytes an entry into the process whatever the load.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries (16 bytes each): a turn's receives, sends and
/// flash reads; past them the kernel keeps completions on its overflow
/// list until the worker reaps (none is lost). 4096 sends and 1024-entry
/// queues took 400 KiB a worker; these take 132 KiB.
const CQ_ENTRIES: u32 = 4096;
const MAX_BUFFERED_INPUT: usize = 1 << 20;
const SLOT_BITS: u32 = 24;

struct Client {
    /// memcached's `conn_close` reason for `watch connevents`.
    close_reason: &'static str,
    stream: Stream,
    conn: Conn,
    info: Arc<ConnInfo>,
    id: u64,
    token: u64,
    /// A multishot receive is live in the kernel (until a completion
    /// without the MORE flag ends it).
    recv_live: bool,
    /// A cancel of the live receive was submitted.
    recv_cancelling: bool,
    sending: bool,
    closing: bool,
    close_after_write: bool,
    /// The peer closed its side: what it sent before is still answered (as
    /// memcached does), then the connection closes.
    eof: bool,
    /// A send buffer back from the kernel, reused for the next replies.
    spare: Vec<u8>,
    /// A TLS connection's rustls state (`tls/`); None: plain.
    tls: Option<Box<crate::tls::TlsSession>>,
}

pub struct UringWorker {
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    ring: Ring,
    wake: Arc<EventFd>,
    incoming: Receiver<NewConn>,
    clients: Vec<Option<Client>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    yielded: Vec<usize>,
    /// Connections running a key dump (`ops/dump.rs`).
    dumping: crate::ops::dump::Dumping,
    ready: Vec<usize>,
    udp: UdpPorts,
}

impl UringWorker {
    /// Build the worker on the thread that will run it: the ring is set up
    /// single-issuer, so the creating thread is the one that submits.
    pub fn new(
        shared: Arc<Shared>,
        index: usize,
        incoming: Receiver<NewConn>,
        udp_sockets: Vec<mio::net::UdpSocket>,
        wake: Arc<EventFd>,
    ) -> io::Result<UringWorker> {
        let mut ring = Ring::new(SQ_ENTRIES, CQ_ENTRIES)?;
        ring.wake_read(wake.fd())?;
        for (i, socket) in udp_sockets.iter().enumerate() {
            use std::os::fd::AsRawFd;
            ring.poll(socket.as_raw_fd(), i as u64)?;
        }
        let stats = shared.worker_stats[index].clone();
        WorkerMemory::set(&stats.memory.uring_recv_buffers, ring.recv_buffer_bytes());
        let worker = UringWorker {
            shared,
            stats,
            ring,
            wake,
            incoming,
            clients: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            yielded: Vec::new(),
            dumping: Default::default(),
            ready: Vec::new(),
            udp: UdpPorts::new(udp_sockets),
        };
        Ok(worker)
    }

    pub fn run(mut self) {
        let mut completions = Vec::new();
        let mut ticker = lifecycle::Ticker::default();
        loop {
            let timeout = if self.yielded.is_empty() { Duration::from_millis(500) } else { Duration::ZERO };
            let timeout = self.dumping.timeout(timeout);
            if let Err(e) = self.ring.submit_and_wait(timeout) {
                crate::log_line!("strata: worker io_uring failed: {e}");
                return;
            }
            self.ready.append(&mut self.yielded);
            self.dumping.drain_into(&mut self.ready);
            completions.clear();
            self.ring.completions(&mut completions);
            for completion in completions.drain(..) {
                self.complete(completion);
            }
            let mut ready = std::mem::take(&mut self.ready);
            ready.sort_unstable();
            ready.dedup();
            for batch in ready.chunks(crate::turn_prefetch::BATCH) {
                if batch.len() > 1 {
                    let clients = &self.clients;
                    let inputs = batch.iter().filter_map(|&i| clients.get(i)?.as_ref()).map(|c| c.conn.input.filled());
                    crate::turn_prefetch::prefetch(self.shared.engine.as_ref(), inputs);
                }
                for &index in batch {
                    self.drive(index);
                }
            }
            ready.clear();
            self.ready = ready;
            if self.shared.is_shutting_down() {
                self.drain_and_close();
                return;
            }
            // Only when there is a timeout to check (the clock read costs).
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

    /// The slot of a live connection's token, if it is still that connection.
    fn slot(&self, token: u64) -> Option<usize> {
        let index = (token & ((1 << SLOT_BITS) - 1)) as usize;
        let generation = (token >> SLOT_BITS) as u32;
        (self.generations.get(index) == Some(&generation) && self.clients[index].is_some()).then_some(index)
    }

    fn complete(&mut self, c: Completion) {
        match c.kind {
            Kind::Wake => {
                let _ = self.ring.wake_read(self.wake.fd());
                self.accept_new();
            }
            Kind::Poll => {
                self.udp.drain(c.token as usize, &self.shared, &self.stats);
                if !c.more {
                    if let Some(socket) = self.udp.sockets.get(c.token as usize) {
                        use std::os::fd::AsRawFd;
                        let _ = self.ring.poll(socket.as_raw_fd(), c.token);
                    }
                }
            }
            Kind::Cancel => {}
            Kind::FlashRead => self.flash_read_done(c),
            Kind::Recv => self.received(c),
            Kind::Send => self.sent(c),
        }
    }

    fn received(&mut self, c: Completion) {
        let Some(index) = self.slot(c.token) else {
            if let Some(bid) = c.buffer_id {
                self.ring.received(bid, 0, &mut |_| {});
            }
            return;
        };
        let Some(client) = self.clients[index].as_mut() else { return };
        if c.result > 0 {
            if let Some(bid) = c.buffer_id {
                let input = &mut client.conn.input;
                let was_empty = input.is_empty();
                match client.tls.as_mut() {
                    None => self.ring.received(bid, c.result as usize, &mut |data| input.extend_from_slice(data)),
                    Some(tls) => {
                        let mut outcome = Ok(crate::tls::Received::Open);
                        self.ring.received(bid, c.result as usize, &mut |data| outcome = tls.receive(data, input));
                        match outcome {
                            Ok(crate::tls::Received::Open) => {}
                            Ok(crate::tls::Received::Closed) => client.eof = true,
                            Err(_) => {
                                client.closing = true;
                                client.close_reason = lifecycle::ERROR;
                            }
                        }
                    }
                }
                let was_empty = was_empty && !input.is_empty();
                client.conn.timing.read(was_empty, &self.stats.requests);
                WorkerStats::add(&self.stats.bytes_read, c.result as u64);
                client.info.touch(self.shared.clock.now());
            }
        }
        if !c.more {
            client.recv_live = false;
            client.recv_cancelling = false;
        }
        // 0 is end of file; ENOBUFS and ECANCELED just end this receive
        // (drive re-arms it); anything else is a dead connection.
        if c.result == 0 {
            client.eof = true;
        } else if c.result < 0 && c.result != -libc::ENOBUFS && c.result != -libc::ECANCELED {
            client.closing = true;
        }
        if c.result == -libc::ENOBUFS && self.ring.grow_recv_buffers(self.clients.len() - self.free.len()) {
            WorkerMemory::set(&self.stats.memory.uring_recv_buffers, self.ring.recv_buffer_bytes());
        }
        self.ready.push(index);
    }

    /// A flash read came back: hand the bytes (or the failure) to its
    /// connection and run it. A connection closed meanwhile abandoned its
    /// read when it closed; the buffer is just dropped.
    fn flash_read_done(&mut self, c: Completion) {
        let Some(index) = self.slot(c.token) else { return };
        let Some(client) = self.clients[index].as_mut() else { return };
        let Some((buf, key_index)) = c.flash_buf else { return };
        if client.conn.flash.complete(key_index, crate::flash::io::whole(c.result, buf)) {
            self.ready.push(index);
        }
    }

    fn sent(&mut self, c: Completion) {
        let Some(index) = self.slot(c.token) else { return };
        let Some(client) = self.clients[index].as_mut() else { return };
        client.sending = false;
        let Some((mut buf, offset)) = c.buffer else { return };
        if c.result < 0 {
            client.closing = true;
        } else {
            WorkerStats::add(&self.stats.bytes_written, c.result as u64);
            let offset = offset + c.result as usize;
            if offset < buf.len() && !client.closing {
                if self.ring.send(client.stream.raw_fd(), client.token, buf, offset).is_ok() {
                    client.sending = true;
                } else {
                    client.closing = true;
                }
                return;
            }
            buf.clear();
            if client.spare.capacity() < buf.capacity() {
                client.spare = buf;
            }
            client.info.note_buffers(client.conn.buffer_bytes() + client.spare.capacity());
            // The common case at pipeline depth 1: the reply went out, no
            // new input or replies are waiting and the receive is armed, so
            // a pass through `drive` would do nothing.
            let c = &client.conn;
            let idle = c.out.is_empty() && c.input.is_empty() && !c.is_dumping() && !client.tls.as_ref().is_some_and(|t| t.wants_write());
            if idle && client.recv_live && !client.recv_cancelling && !client.closing && !client.close_after_write && !client.eof {
                return;
            }
        }
        self.ready.push(index);
    }

    fn accept_new(&mut self) {
        loop {
            let new = match self.incoming.try_recv() {
                Ok(new) => new,
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return,
            };
            let index = self.free.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.generations.push(0);
                self.shared.connection_structures.fetch_add(1, Ordering::Relaxed);
                let slot_bytes = std::mem::size_of::<Option<Client>>() + std::mem::size_of::<u32>();
                WorkerMemory::set(&self.stats.memory.conn_slots, self.clients.capacity() * slot_bytes);
                self.clients.len() - 1
            });
            let token = (u64::from(self.generations[index]) << SLOT_BITS) | index as u64;
            let Ok(tls) = crate::tls::session_for(&self.shared, new.tls) else {
                self.free.push(index);
                self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            };
            if self.ring.recv(new.stream.raw_fd(), token).is_err() {
                self.free.push(index);
                self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let info = Arc::new(ConnInfo::new(new.peer, new.listen, self.shared.clock.now()));
            let id = self.shared.conns.register(info.clone());
            crate::ops::watch::conn_event(&self.shared, &self.stats, &info.peer, id, None);
            WorkerStats::incr(&self.stats.total_connections);
            if self.shared.ops.verbose.tracing() {
                crate::ops::verbose::conn_new(new.stream.raw_fd(), self.shared.settings.protocol);
            }
            // A key dump writes to the socket itself: not on TLS.
            let mut conn = Conn::new(self.shared.requires_auth(), Some(new.stream.raw_fd())).over_tls(tls.is_some());
            if new.resume.is_some() {
                crate::handover::incoming::resume(&mut conn, new.resume);
                self.ready.push(index);
            }
            self.clients[index] = Some(Client {
                conn,
                tls,
                stream: new.stream,
                info,
                id,
                token,
                recv_live: true,
                recv_cancelling: false,
                close_reason: lifecycle::NORMAL,
                sending: false,
                closing: false,
                close_after_write: false,
                eof: false,
                spare: Vec::new(),
            });
        }
    }

    /// Run what a connection has buffered, start its send, keep its receive
    /// armed or paused, and finish closing it when nothing is in flight.
    fn drive(&mut self, index: usize) {
        let budget = self.shared.settings.reqs_per_event.max(1);
        let max_output = self.shared.settings.max_pending_output_bytes;
        let Some(Some(client)) = self.clients.get_mut(index) else { return };
        let exec = Service::new(&self.shared, &self.stats).for_conn(client.id);
        if !client.closing && !client.close_after_write {
            match client.conn.process(&exec, budget) {
                Progress::Close => {
                    client.closing = true;
                    client.close_reason = lifecycle::ERROR;
                }
                Progress::CloseAfterWrite => client.close_after_write = true,
                Progress::Yield => {
                    WorkerStats::incr(&self.stats.conn_yields);
                    self.yielded.push(index);
                }
                Progress::NeedInput if client.eof => client.close_after_write = true,
                // A watcher's client went away (it sends nothing else).
                Progress::Dumping if client.eof && client.conn.is_watching() => client.closing = true,
                Progress::Dumping => self.dumping.push(index),
                Progress::FlashWait => {
                    use std::os::fd::AsRawFd;
                    let (ring, token) = (&mut self.ring, client.token);
                    let rerun = client.conn.flash.submit(|wait| {
                        let (fd, offset) = (wait.read.file.as_raw_fd(), wait.read.offset_bytes);
                        ring.read_flash(fd, token, wait.key_index, wait.read.buffer(), offset).is_ok()
                    });
                    if rerun {
                        self.ready.push(index);
                    }
                }
                Progress::NeedInput | Progress::OutputFull => {}
            }
        }
        let fd = client.stream.raw_fd();
        if let Some(tls) = client.tls.as_mut() {
            // TLS: seal every reply (and move handshake messages) into a
            // ciphertext buffer the ring owns until its completion.
            if !client.sending && !client.closing && (!client.conn.out.is_empty() || tls.wants_write()) {
                let mut cipher = std::mem::take(&mut client.spare);
                let conn = &mut client.conn;
                tls.seal_all(&conn.out[conn.wpos..], &mut cipher);
                conn.consume_output(conn.pending_output());
                if cipher.is_empty() {
                    client.spare = cipher;
                } else {
                    match self.ring.send(fd, client.token, cipher, 0) {
                        Ok(()) => client.sending = true,
                        Err(_) => client.closing = true,
                    }
                }
            }
        } else if !client.sending && !client.conn.out.is_empty() && !client.closing {
            let buf = std::mem::replace(&mut client.conn.out, std::mem::take(&mut client.spare));
            match self.ring.send(fd, client.token, buf, 0) {
                Ok(()) => client.sending = true,
                Err(_) => client.closing = true,
            }
        }
        if client.conn.out.is_empty() {
            client.conn.timing.replied(&self.stats.requests);
        }
        if client.close_after_write && !client.sending && client.conn.out.is_empty() && !client.tls.as_ref().is_some_and(|t| t.wants_write()) {
            client.closing = true;
        }
        let backlog = client.conn.input.len() >= MAX_BUFFERED_INPUT.max(client.conn.awaiting)
            || client.conn.pending_output() > max_output;
        let want_recv = !client.closing && !client.close_after_write && !client.eof && !backlog;
        if want_recv && !client.recv_live {
            if self.ring.recv(fd, client.token).is_ok() {
                client.recv_live = true;
            } else {
                client.closing = true;
            }
        } else if !want_recv && client.recv_live && !client.recv_cancelling {
            client.recv_cancelling = true;
            let _ = self.ring.cancel_recv(client.token);
        }
        if client.closing && !client.recv_live && !client.sending {
            self.close(index);
        } else {
            client.info.note_buffers(client.conn.buffer_bytes() + client.spare.capacity());
        }
    }

    fn close(&mut self, index: usize) {
        if let Some(mut client) = self.clients.get_mut(index).and_then(Option::take) {
            if let Some(tls) = client.tls.as_mut() {
                // Best effort, non-blocking: a pending alert, or close_notify.
                if tls.is_established() {
                    tls.close_notify();
                }
                let mut cipher = Vec::new();
                tls.drain_into(&mut cipher);
                let _ = client.stream.write(&cipher);
            }
            let fd = client.stream.raw_fd();
            lifecycle::closed(&self.shared, &self.stats, client.id, &client.info, &mut client.conn, fd, client.close_reason);
            self.generations[index] = self.generations[index].wrapping_add(1);
            self.free.push(index);
            self.yielded.retain(|&i| i != index);
            self.dumping.remove(index);
            drop(client.stream);
        }
    }

    /// Close TLS connections whose handshake outlived
    /// `ssl_handshake_timeout` (counted as handshake errors).
    fn kick_stalled_handshakes(&mut self, limit: u32) {
        let now = self.shared.clock.now();
        for index in 0..self.clients.len() {
            if let Some(client) = self.clients[index].as_mut() {
                if !client.closing && client.tls.as_ref().is_some_and(|t| t.handshake_expired(now, limit)) {
                    client.closing = true;
                    client.close_reason = lifecycle::ERROR;
                    self.ready.push(index);
                }
            }
        }
    }

    /// Close connections idle past `limit` seconds (`lifecycle.rs`).
    fn kick_idle(&mut self, limit: u32) {
        let now = self.shared.clock.now();
        for index in 0..self.clients.len() {
            if let Some(client) = self.clients[index].as_mut() {
                if !client.closing && lifecycle::idle_kick(&self.stats, &client.conn, &client.info, now, limit) {
                    client.closing = true;
                    client.close_reason = lifecycle::IDLE_TIMEOUT;
                    self.ready.push(index);
                }
            }
        }
    }

    /// On shutdown: answer what is buffered, let sends finish (2 s at most),
    /// then close everything.
    fn drain_and_close(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let (shared, stats) = (self.shared.clone(), self.stats.clone());
        let exec = Service::new(&shared, &stats);
        let handover = shared.handover.is_active();
        if handover {
            shared.handover.wait_for_acceptor();
            self.accept_new();
        }
        for client in self.clients.iter_mut().flatten() {
            if lifecycle::drain_requests(&mut client.conn, &exec) {
                client.close_after_write = true; // quit: not handed over
            }
            // A handover: stop the kernel receiving for this process (what
            // the receive still brings is carried with the connection).
            if handover && client.recv_live && !client.recv_cancelling {
                client.recv_cancelling = self.ring.cancel_recv(client.token).is_ok();
            }
        }
        let mut completions = Vec::new();
        while Instant::now() < deadline && self.clients.iter().flatten().any(|c| c.sending || (handover && c.recv_live)) {
            let _ = self.ring.submit_and_wait(Duration::from_millis(50));
            completions.clear();
            self.ring.completions(&mut completions);
            for completion in completions.drain(..) {
                if handover && completion.kind == Kind::Recv {
                    self.received(completion);
                } else if handover && completion.kind == Kind::Send {
                    // Every byte of a reply, or the stream would be cut.
                    self.sent(completion);
                } else if completion.kind == Kind::Send {
                    if let Some(index) = self.slot(completion.token) {
                        if let Some(client) = self.clients[index].as_mut() {
                            client.sending = false;
                        }
                    }
                }
            }
        }
        for index in 0..self.clients.len() {
            if let Some(client) = self.clients[index].as_mut() {
                client.close_reason = lifecycle::SHUTDOWN;
                if let Some(tls) = client.tls.as_mut() {
                    let mut cipher = Vec::new();
                    tls.seal_all(&client.conn.out, &mut cipher);
                    client.conn.out = cipher;
                }
                let mut written = 0;
                while written < client.conn.out.len() && Instant::now() < deadline {
                    match client.stream.write(&client.conn.out[written..]) {
                        Ok(0) => break,
                        Ok(n) => written += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                        Err(_) => break,
                    }
                }
                if written == client.conn.out.len() {
                    client.conn.out.clear();
                    client.conn.wpos = 0;
                }
                let idle = !client.recv_live && !client.sending && !client.closing && !client.close_after_write && !client.eof;
                if idle && shared.handover.offer(std::os::fd::AsFd::as_fd(&client.stream), || lifecycle::carry(&client.conn, client.tls.is_some())) {
                    client.close_reason = lifecycle::HANDOVER;
                }
            }
            self.close(index);
        }
    }
}
