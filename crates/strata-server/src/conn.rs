//! One client connection's request state: bytes in, requests run in
//! order, reply bytes out. Framing and flow control only; what a request
//! means is the front ends' (`front/`), and the socket is the I/O
//! engine's (`session.rs`, `worker*.rs`).
//!
//! ```text
//!  input: [ consumed | unprocessed requests ........ | spare (initialized) ]
//!                    ^ start                         ^ end
//!  out:   [ written | pending replies ]            (output.rs)
//!                   ^ wpos
//! ```
//!
//! [`Conn::process`] runs every complete request in `input` (up to a
//! budget, memcached's `-R`), each through one front-end step
//! (`front::step`), appending replies to `out`, so a pipeline of requests
//! becomes one write. A step that needs more bytes (a partial line, a data
//! block still arriving) says how many (`awaiting`), and the request is not
//! looked at again until they are all there: a storage command's header is
//! parsed and admitted once, however many pieces its block comes in, and
//! only a request that runs counts against `-R`. A refused block is
//! swallowed byte-exactly (`swallow`) so the stream stays in step.
//! Processing stops early when `out` holds more than the pending-output
//! limit: a client that does not read its replies stops being read from.

use crate::front::{self, Flow, Step};
use crate::output::Output;
pub use crate::protocol::Protocol;
use crate::protocol::negotiate;
use crate::read_buf::ReadBuf;
use crate::service::hooks::{Dump, FlashWaits, Pumped, Timing};
use crate::service::Service;

/// Why processing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every complete request was handled; more input is needed.
    NeedInput,
    /// The request budget ran out with requests still buffered.
    Yield,
    /// Too many replies are waiting to be written.
    OutputFull,
    /// Close after writing what is queued (`quit`).
    CloseAfterWrite,
    /// Close now (overlong line, HTTP, shutdown).
    Close,
    /// A key dump refilled the output and has more to come: write, then
    /// come back next turn (`ops/dump.rs`).
    Dumping,
    /// The request at the front waits for a flash read (`flash/io.rs`):
    /// submit it if new; the connection runs again once it is back.
    FlashWait,
}

impl Progress {
    #[inline]
    fn of(flow: Flow) -> Option<Progress> {
        match flow {
            Flow::Continue => None,
            Flow::CloseAfterWrite => Some(Progress::CloseAfterWrite),
            Flow::Close => Some(Progress::Close),
        }
    }
}

#[derive(Default)]
pub struct Conn {
    pub protocol: Protocol,
    /// `-Y` or `-S` is on and this client has not logged in yet.
    pub unauthenticated: bool,
    pub input: ReadBuf,
    pub out: Output,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// Bytes the request at the front needs buffered before it can run (a
    /// partial line, a data block), so the reader can size its reads and
    /// the request is not run again before they are there; 0: unknown.
    pub awaiting: usize,
    /// The request at the front is a storage command whose header was
    /// parsed and admitted: it runs from this once `awaiting` bytes are in.
    held: Option<Box<front::Held>>,
    /// A key dump in progress: it runs before any further request.
    dump: Option<Box<Dump>>,
    /// The request at the front of `input` is parked on these flash reads.
    pub flash: FlashWaits,
    /// The client's socket, for a key dump to write to (`ops/dump_feed.rs`)
    /// and `-vv` to name.
    socket: Option<std::os::fd::RawFd>,
    /// A TLS connection (`tls/`): a key dump must not write to its socket
    /// (it closes the connection instead); `-vv` still names the socket.
    tls: bool,
    /// Requests completed since their batch was read (`ops/latency.rs`).
    pub timing: Timing,
}

impl Conn {
    /// The connection is a `watch` watcher (`ops/watch.rs`).
    pub fn is_watching(&self) -> bool {
        matches!(self.dump.as_deref(), Some(Dump::Watch(_)))
    }

    /// Bytes of the input and output buffers at capacity (`stats memory`).
    pub fn buffer_bytes(&self) -> usize {
        self.input.capacity() + self.out.capacity()
    }

    /// A key dump or watch is in progress on this connection.
    pub fn is_dumping(&self) -> bool {
        self.dump.is_some()
    }

    /// A crawler dump is in progress on this connection.
    pub fn holds_crawler(&self) -> bool {
        self.dump.as_deref().is_some_and(Dump::holds_crawler)
    }

    /// A new connection on `socket` (None: no socket, as in tests that
    /// drive a `Conn` from memory; a crawler dump on its threads then
    /// closes it);
    /// `requires_auth` when `-Y` or `-S` is on.
    pub fn new(requires_auth: bool, socket: Option<std::os::fd::RawFd>) -> Conn {
        Conn { unauthenticated: requires_auth, socket, ..Conn::default() }
    }

    /// Mark a TLS connection (see `tls`).
    pub fn over_tls(mut self, tls: bool) -> Conn {
        self.tls = tls;
        self
    }

    /// A refused data block is still being discarded (`handover/`).
    pub fn is_swallowing(&self) -> bool {
        self.swallow > 0
    }

    /// Bytes of a refused data block still to discard.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn swallowing(&self) -> usize {
        self.swallow
    }

    pub fn pending_output(&self) -> usize {
        self.out.pending_len()
    }

    /// Run buffered requests; at most `budget` of them.
    pub fn process(&mut self, svc: &mut Service<'_>, budget: usize) -> Progress {
        let progress = self.run(svc, budget);
        svc.end_run();
        progress
    }

    fn run(&mut self, svc: &mut Service<'_>, mut budget: usize) -> Progress {
        let limits = &svc.core.settings;
        self.out.start_run();
        let dump_socket = if self.tls { None } else { self.socket };
        loop {
            if self.flash.pending() {
                return Progress::FlashWait;
            }
            if self.dump.is_some() {
                if let Some(wait) = svc.hooks.pump(&mut self.dump, &mut self.out, dump_socket) {
                    return match wait {
                        Pumped::Dumping => Progress::Dumping,
                        Pumped::OutputFull => Progress::OutputFull,
                        Pumped::Close => Progress::Close,
                    };
                }
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.input.len());
                self.input.consume(n);
                self.swallow -= n;
                if self.swallow > 0 {
                    return Progress::NeedInput;
                }
            }
            // The request at the front waits for the rest of its bytes.
            if self.input.len() < self.awaiting.max(1) {
                return Progress::NeedInput;
            }
            if budget == 0 {
                return Progress::Yield;
            }
            if self.pending_output() > limits.max_pending_output_bytes {
                return Progress::OutputFull;
            }
            budget -= 1;
            if !self.flash.is_empty() {
                svc.resume_flash(std::mem::take(&mut self.flash));
            }
            let buf = self.input.filled();
            if self.protocol == Protocol::Negotiating {
                self.protocol = negotiate(buf[0], limits.protocol);
                svc.hooks.negotiated(limits.protocol, self.socket, self.protocol);
            }
            match front::step(self.protocol, self.socket, buf, svc, &mut self.out, &mut self.unauthenticated, self.held.as_deref()) {
                Step::Need(total) => {
                    self.awaiting = total;
                    return Progress::NeedInput;
                }
                Step::Hold(total, held) => {
                    self.awaiting = total;
                    self.held = Some(held);
                    return Progress::NeedInput;
                }
                Step::Stop(flow) => return Progress::of(flow).unwrap_or(Progress::NeedInput),
                Step::Parked { waits, .. } => {
                    // Not consumed: the same request runs again with the reads.
                    self.flash = waits;
                    return Progress::FlashWait;
                }
                Step::Done { advance, swallow, outcome } => {
                    svc.hooks.served(&mut self.timing, self.input.filled(), advance, self.protocol);
                    self.input.consume(advance);
                    self.swallow = swallow;
                    self.awaiting = 0;
                    self.held = None;
                    if outcome.started.is_some() {
                        self.dump = outcome.started;
                    }
                    if let Some(stop) = Progress::of(outcome.flow) {
                        return stop;
                    }
                }
            }
        }
    }

    /// Mark `n` output bytes as written.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n);
    }
}
