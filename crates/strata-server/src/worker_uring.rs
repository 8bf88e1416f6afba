//! A worker on io_uring (`-o io_engine=uring`): the io_uring [`Io`] under
//! the same sessions as the epoll worker (`session/`), and its loop.
//!
//! - Each connection has one multishot receive into the worker's provided
//!   buffers: data arrives as completions, no read syscalls; a completion
//!   copies it into the connection's input and makes the connection ready.
//! - A turn handles every completion, drives every ready connection, and
//!   queues one send per connection with replies (the ring owns its buffer
//!   until its completion); the next `io_uring_enter` submits them all and
//!   waits. Past its limits a connection's receive is cancelled until it
//!   drains, then armed again. An eventfd read wakes the worker for new
//!   connections; UDP sockets are multishot polls, drained with `recvmmsg`.
//!
//! A completion's token is `[generation:32 | slot:24]`, so a completion that
//! arrives after its connection closed and the slot was reused is ignored.

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::new_conn::NewConn;
use crate::runtime::Runtime;
use crate::service::Hooks;
use crate::session::{Filled, Io, ReadPool, Room, Session, Sessions};
use crate::stats::{WorkerMemory, WorkerStats};
use crate::sys::uring::{Completion, EventFd, Kind, Ring};
use crate::sys::Stream;
use crate::udp::UdpPorts;

/// Submission queue entries (64 bytes each; a turn's sends past them go in
/// more than one call) and completion queue entries (16 bytes each; past
/// them the kernel keeps completions on its overflow list, none is lost):
/// 132 KiB a worker, where 4096 sends and 1024-entry queues took 400 KiB.
const SQ_ENTRIES: u32 = 1024;
const CQ_ENTRIES: u32 = 4096;
const SLOT_BITS: u32 = 24;

/// The io_uring engine's part of a connection: socket, token, its receive
/// (live until a completion without MORE; a cancel asked), a send in
/// flight, and a send buffer back from the kernel for the next replies.
pub struct Link {
    stream: Stream,
    token: u64,
    recv_live: bool,
    recv_cancelling: bool,
    sending: bool,
    spare: Vec<u8>,
}

/// The io_uring engine: the ring, and each slot's generation (the high
/// half of its tokens).
pub struct Uring {
    ring: Ring,
    generations: Vec<u32>,
}

pub struct UringWorker {
    sessions: Sessions<Link>,
    io: Uring,
    wake: Arc<EventFd>,
    incoming: Receiver<NewConn>,
    udp: UdpPorts,
}

impl UringWorker {
    /// Built on the thread that runs it (the ring is single-issuer).
    pub fn new(rt: Arc<Runtime>, index: usize, incoming: Receiver<NewConn>, udp_sockets: Vec<mio::net::UdpSocket>, wake: Arc<EventFd>) -> io::Result<UringWorker> {
        let mut ring = Ring::new(SQ_ENTRIES, CQ_ENTRIES)?;
        ring.wake_read(wake.fd())?;
        for (i, socket) in udp_sockets.iter().enumerate() {
            ring.poll(socket.as_raw_fd(), i as u64)?;
        }
        let sessions = Sessions::new(rt, index);
        WorkerMemory::set(&sessions.stats().memory.uring_recv_buffers, ring.recv_buffer_bytes());
        let io = Uring { ring, generations: Vec::new() };
        Ok(UringWorker { sessions, io, wake, incoming, udp: UdpPorts::new(udp_sockets) })
    }

    pub fn run(mut self) {
        let mut completions = Vec::new();
        loop {
            if let Err(e) = self.io.ring.submit_and_wait(self.sessions.timeout(Duration::from_millis(500))) {
                crate::log_line!("strata: worker io_uring failed: {e}");
                return;
            }
            self.sessions.due_now();
            self.io.ring.completions(&mut completions);
            completions.drain(..).for_each(|c| self.complete(c));
            if self.sessions.turn_or_stop(&mut self.io, &self.incoming) {
                return;
            }
        }
    }

    fn complete(&mut self, c: Completion) {
        match c.kind {
            Kind::Wake => {
                let _ = self.io.ring.wake_read(self.wake.fd());
                self.sessions.accept(&mut self.io, &self.incoming);
            }
            Kind::Poll => {
                self.udp.drain(c.token as usize, self.sessions.runtime(), self.sessions.worker());
                if let Some(socket) = self.udp.sockets.get(c.token as usize).filter(|_| !c.more) {
                    let _ = self.io.ring.poll(socket.as_raw_fd(), c.token);
                }
            }
            Kind::Cancel => {}
            // Dropped if its connection closed meanwhile (it gave the read up).
            Kind::FlashRead => match (self.io.slot(c.token), c.flash_buf) {
                (Some(slot), Some((buf, key_index))) => self.sessions.flash_done(slot, None, key_index, crate::flash::io::whole(c.result, buf)),
                _ => {}
            },
            Kind::Recv => self.io.received(&mut self.sessions, c),
            Kind::Send => self.io.sent_back(&mut self.sessions, c),
        }
    }
}

impl Uring {
    /// The slot of a live connection's token, if it is still that connection.
    fn slot(&self, token: u64) -> Option<usize> {
        let index = (token & ((1 << SLOT_BITS) - 1)) as usize;
        (self.generations.get(index) == Some(&((token >> SLOT_BITS) as u32))).then_some(index)
    }

    /// A receive's completion: its bytes into the input, the connection ready.
    fn received(&mut self, sessions: &mut Sessions<Link>, c: Completion) {
        let Some(slot) = self.slot(c.token).filter(|&slot| sessions.get(slot).is_some()) else {
            if let Some(bid) = c.buffer_id {
                self.ring.received(bid, 0, &mut |_| {});
            }
            return;
        };
        if let (true, Some(bid)) = (c.result > 0, c.buffer_id) {
            let ring = &mut self.ring;
            sessions.receive(slot, c.result as usize, |s| {
                let mut filled = Filled::More;
                ring.received(bid, c.result as usize, &mut |data| filled = s.take_in(data));
                filled
            });
        }
        let Some(s) = sessions.get_mut(slot) else { return };
        s.link.recv_live &= c.more;
        s.link.recv_cancelling &= c.more;
        // 0 is end of file; ENOBUFS and ECANCELED end this receive (the
        // drive arms another); anything else is a dead connection.
        if c.result == 0 {
            s.eof = true;
        } else if c.result < 0 && c.result != -libc::ENOBUFS && c.result != -libc::ECANCELED {
            s.closing = true;
        }
        if c.result == -libc::ENOBUFS && self.ring.grow_recv_buffers(sessions.len()) {
            WorkerMemory::set(&sessions.stats().memory.uring_recv_buffers, self.ring.recv_buffer_bytes());
        }
        sessions.wake(slot);
    }

    /// A send's completion: the rest of a short send goes out, or the
    /// buffer comes back as the connection's spare.
    fn sent_back(&mut self, sessions: &mut Sessions<Link>, c: Completion) {
        let Some(slot) = self.slot(c.token) else { return };
        let Some((s, stats)) = sessions.get_counted(slot) else { return };
        s.link.sending = false;
        let Some((mut buf, offset)) = c.buffer else { return };
        if c.result < 0 {
            s.closing = true;
        } else {
            WorkerStats::add(&stats.bytes_written, c.result as u64);
            let offset = offset + c.result as usize;
            if offset < buf.len() && !s.closing {
                match self.ring.send(s.link.stream.raw_fd(), s.link.token, buf, offset) {
                    Ok(()) => s.link.sending = true,
                    Err(_) => s.closing = true,
                }
                return;
            }
            buf.clear();
            if s.link.spare.capacity() < buf.capacity() {
                s.link.spare = buf;
            }
            s.info.note_buffers(s.conn.buffer_bytes() + s.link.spare.capacity());
            // At pipeline depth 1 mostly: nothing waits and the receive is
            // armed, so a drive would do nothing.
            if crate::session::idle(s) && s.link.recv_live && !s.link.recv_cancelling {
                return;
            }
        }
        sessions.wake(slot);
    }
}

impl Io for Uring {
    type Link = Link;
    type Endpoint = Stream;

    fn open(&mut self, slot: usize, stream: Stream) -> io::Result<Link> {
        self.generations.resize(self.generations.len().max(slot + 1), 0);
        let token = (u64::from(self.generations[slot]) << SLOT_BITS) | slot as u64;
        self.ring.recv(stream.raw_fd(), token)?;
        Ok(Link { stream, token, recv_live: true, recv_cancelling: false, sending: false, spare: Vec::new() })
    }

    fn socket(link: &Link) -> Option<BorrowedFd<'_>> {
        Some(link.stream.as_fd())
    }

    /// Bytes arrive as completions: the receive is kept armed while the
    /// connection has room, cancelled while it has none.
    fn fill(&mut self, s: &mut Session<Link>, room: Room, _: &mut ReadPool, _: Hooks<'_>, _: &WorkerStats) -> Filled {
        if room.input && !s.link.recv_live {
            if self.ring.recv(s.link.stream.raw_fd(), s.link.token).is_err() {
                return Filled::Failed;
            }
            s.link.recv_live = true;
        } else if !room.input {
            self.cancel(s);
        }
        Filled::Wait
    }

    /// One send in flight at a time; TLS seals every reply (and moves
    /// handshake messages) into a ciphertext buffer the ring owns.
    fn send(&mut self, s: &mut Session<Link>, _: &WorkerStats) -> io::Result<()> {
        if s.link.sending || (s.conn.out.is_empty() && !s.tls_wants_write()) {
            return Ok(());
        }
        let spare = std::mem::take(&mut s.link.spare);
        let buf = s.wire_bytes(spare);
        if buf.is_empty() {
            s.link.spare = buf;
            return Ok(());
        }
        self.ring.send(s.link.stream.raw_fd(), s.link.token, buf, 0)?;
        s.link.sending = true;
        Ok(())
    }

    fn sent(&self, s: &Session<Link>) -> bool {
        s.conn.out.is_empty()
    }

    fn flushed(&self, s: &Session<Link>) -> bool {
        !s.link.sending && s.conn.out.is_empty() && !s.tls_wants_write()
    }

    fn submit_flash(&mut self, s: &mut Session<Link>, _: usize) -> bool {
        let (ring, token) = (&mut self.ring, s.link.token);
        s.conn.flash.submit(|wait| {
            let (fd, offset) = (wait.read.file.as_raw_fd(), wait.read.offset_bytes);
            ring.read_flash(fd, token, wait.key_index, wait.read.buffer(), offset).is_ok()
        })
    }

    fn settled(&self, s: &Session<Link>) -> bool {
        !s.link.recv_live && !s.link.sending
    }

    fn cancel(&mut self, s: &mut Session<Link>) {
        if s.link.recv_live && !s.link.recv_cancelling {
            s.link.recv_cancelling = self.ring.cancel_recv(s.link.token).is_ok();
        }
    }

    fn held_bytes(&self, s: &Session<Link>) -> usize {
        s.link.spare.capacity()
    }

    fn slot_bytes(&self) -> usize {
        self.generations.capacity() * std::mem::size_of::<u32>()
    }

    fn writer(link: &mut Link) -> Option<&mut dyn Write> {
        Some(&mut link.stream)
    }

    fn close(&mut self, slot: usize, _: Session<Link>) {
        self.generations[slot] = self.generations[slot].wrapping_add(1);
    }

    /// Let sends finish, every byte of a reply (with a handover, receives
    /// too: what they bring is carried); the session then writes what is
    /// left synchronously.
    fn finish(&mut self, sessions: &mut Sessions<Link>, deadline: Instant, handover: bool) {
        let mut completions = Vec::new();
        let busy = |s: &Session<Link>| s.link.sending || (handover && s.link.recv_live);
        while Instant::now() < deadline && sessions.iter().any(busy) {
            let _ = self.ring.submit_and_wait(Duration::from_millis(50));
            self.ring.completions(&mut completions);
            for c in completions.drain(..) {
                match c.kind {
                    Kind::Recv => self.received(sessions, c),
                    Kind::Send => self.sent_back(sessions, c),
                    _ => {}
                }
            }
        }
    }
}
