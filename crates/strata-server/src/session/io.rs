//! What an I/O engine does for a connection, and nothing else: the rest of
//! a connection's life (opening, running its requests, reacting to what
//! they leave, kicks, closing, the shutdown drain) is written once, in
//! `session/`, over this trait.
//!
//! ```text
//!            epoll (worker.rs)           io_uring (worker_uring.rs)     memory (fuzzing/conn.rs)
//!  open      register with the poll      arm a multishot receive       a queue of delivered bytes
//!  fill      read() while readable       receives arrive as            take the delivered bytes
//!            into the input (pooled)     completions: keep the
//!                                        receive armed or paused
//!  send      write() until would block   one send in flight, the       append to the replies
//!                                        ring owns its buffer
//!  flash     the worker's read ring      the worker's ring             the harness completes them
//!            or the I/O threads
//!  cancel    -                           cancel the live receive        -
//!  close     deregister, drop            generation+1, drop             -
//! ```
//!
//! [`ReadPool`]: read buffers of connections with nothing buffered, lent
//! out again on the next read, so an idle connection holds none and the
//! steady state allocates nothing (every engine: the session gives a
//! drained connection's buffer back, and a fill adopts one).

use std::io::{self, Write};
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Instant;

use super::{Session, Sessions};
use crate::service::Hooks;
use crate::stats::WorkerStats;

/// What a fill found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filled {
    /// Bytes came in: run the connection's requests again.
    More,
    /// Nothing now (would block, no room, or bytes arrive by completion).
    Wait,
    /// The peer closed its side: what it sent is answered, then the
    /// connection closes (as memcached does).
    Eof,
    /// The connection failed (a reset, a TLS error): close it.
    Failed,
}

/// Whether a connection may take input now.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    /// Input is wanted: not closing, room in the input and the output.
    pub input: bool,
    /// It may be read this turn (it did not yield its `-R` budget).
    pub now: bool,
}

/// What a new connection arrives as: a socket (its descriptor names it
/// for `-vv` before it opens), or nothing (the harness's).
pub trait Endpoint {
    fn fd(&self) -> Option<RawFd>;
}

impl Endpoint for crate::sys::Stream {
    fn fd(&self) -> Option<RawFd> {
        Some(self.raw_fd())
    }
}

impl Endpoint for () {
    fn fd(&self) -> Option<RawFd> {
        None
    }
}

/// An I/O engine's part of a connection's life.
pub trait Io {
    /// The engine's part of a connection: its socket and what is in flight.
    type Link;
    /// What a new connection arrives as (a socket; nothing in the harness).
    type Endpoint: Endpoint;

    /// A turn reads the ready connections before it drives any, so their
    /// first keys can be prefetched together (an engine whose bytes come
    /// as completions has them already).
    const FILLS_AHEAD: bool = false;

    /// Take a new connection into slot `slot`: Err when it cannot be
    /// watched (the session then forgets it).
    fn open(&mut self, slot: usize, endpoint: Self::Endpoint) -> io::Result<Self::Link>;

    /// The connection's socket (`-vv` names it, a key dump writes to it,
    /// a handover passes it on); None: no socket (the harness's).
    fn socket(link: &Self::Link) -> Option<BorrowedFd<'_>>;

    /// Take what the connection may take now into its input.
    fn fill(&mut self, s: &mut Session<Self::Link>, room: Room, pool: &mut ReadPool, hooks: Hooks<'_>, stats: &WorkerStats) -> Filled;

    /// Hand pending replies to the kernel; Err: the connection is dead.
    fn send(&mut self, s: &mut Session<Self::Link>, stats: &WorkerStats) -> io::Result<()>;

    /// Every reply is out of the connection's hands (written, or owned by
    /// the kernel until its completion): the batch's latency is recorded.
    fn sent(&self, s: &Session<Self::Link>) -> bool;

    /// Every reply is written through, TLS's ciphertext included, and no
    /// send is in flight: a connection closing after its replies may close.
    fn flushed(&self, s: &Session<Self::Link>) -> bool {
        self.sent(s)
    }

    /// Queue a parked request's new flash reads; true when none is left in
    /// flight (they failed at once: run the request again now).
    fn submit_flash(&mut self, s: &mut Session<Self::Link>, slot: usize) -> bool;

    /// Nothing of the connection's is in the kernel: a close may finish.
    fn settled(&self, _s: &Session<Self::Link>) -> bool {
        true
    }

    /// Whether a handover may take the connection as it is (nothing in
    /// flight, the peer still there).
    fn movable(&self, s: &Session<Self::Link>) -> bool {
        self.settled(s)
    }

    /// Stop receiving (a connection closing, or taken by a handover).
    fn cancel(&mut self, _s: &mut Session<Self::Link>) {}

    /// Bytes the engine holds for the connection besides its buffers
    /// (`stats memory`'s `conn_buffers`).
    fn held_bytes(&self, _s: &Session<Self::Link>) -> usize {
        0
    }

    /// Bytes of the engine's per-slot tables (`stats memory`'s `conn_slots`).
    fn slot_bytes(&self) -> usize {
        0
    }

    /// The socket, to write to directly: a TLS close_notify at a close,
    /// the last replies at a shutdown; None: no socket (the harness's).
    fn writer(link: &mut Self::Link) -> Option<&mut dyn Write>;

    /// Release the connection's socket (its TLS session said goodbye).
    fn close(&mut self, slot: usize, s: Session<Self::Link>);

    /// On shutdown, before the session writes what is left synchronously:
    /// let what is in flight finish by `deadline` (with a handover, every
    /// byte of the replies, and what the receives still bring).
    fn finish(&mut self, _sessions: &mut Sessions<Self::Link>, _deadline: Instant, _handover: bool) {}
}

/// Read buffers kept for reuse, and the largest size kept.
const POOLED_READ_BUFS: usize = 256;
const POOLED_READ_BUF_BYTES: usize = 64 << 10;

/// The pooled read buffers and their bytes (`stats memory` `read_pool_bytes`).
#[derive(Default)]
pub struct ReadPool {
    bufs: Vec<Vec<u8>>,
    pub bytes: usize,
}

impl ReadPool {
    /// A buffer for a connection that holds none.
    pub fn lend(&mut self, input: &mut crate::read_buf::ReadBuf) {
        if !input.has_storage() {
            if let Some(buf) = self.bufs.pop() {
                self.bytes -= buf.capacity();
                input.adopt(buf);
            }
        }
    }

    /// Keep `buf` if it is small enough and the pool has room.
    pub fn offer(&mut self, buf: Vec<u8>) {
        if buf.len() <= POOLED_READ_BUF_BYTES && self.bufs.len() < POOLED_READ_BUFS {
            self.bytes += buf.capacity();
            self.bufs.push(buf);
        }
    }
}
