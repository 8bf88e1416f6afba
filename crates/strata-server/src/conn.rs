//! One client connection's protocol state, independent of sockets: bytes
//! in, requests executed in order, reply bytes out.
//!
//! ```text
//!  input: [ consumed | unprocessed requests ........ | spare (initialized) ]
//!                    ^ start                         ^ end
//!  out:   [ written | pending replies ]
//!                   ^ wpos
//! ```
//!
//! `input` is a [`ReadBuf`] (`read_buf.rs`, shared with the TLS session
//! that decrypts into it). [`Conn::process`] runs every complete request
//! in it (up to a budget, memcached's `-R`), appending replies to `out`,
//! so a pipeline of requests becomes one write. A storage command is
//! executed only when its whole data block has arrived; a refused block
//! is swallowed byte-exactly
//! ([`Conn::swallow`]) so the stream stays in step. It stops early when
//! `out` holds more than the pending-output limit: a client that does not
//! read its replies stops being read from.

use strata_proto::binary::{self, Opcode, Verdict};
use strata_proto::{frame_line, parse_request, Command, Frame};

use crate::auth;
pub use crate::ctx::Protocol;
use crate::ctx::negotiate;
use crate::front::{self, reply as push_line, Admission, Flow};
use crate::ops::dump::Pumped;
use crate::read_buf::ReadBuf;
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

/// The outcome of one request.
pub(crate) enum Step {
    /// `total` bytes must be buffered before this request can run.
    Need(usize),
    /// Stop processing this connection.
    Stop(Progress),
    /// Done: consume `advance` bytes, then discard `swallow` more.
    Done { advance: usize, swallow: usize, stop: Option<Progress> },
}

impl Step {
    fn next(advance: usize) -> Step {
        Step::Done { advance, swallow: 0, stop: None }
    }
}

/// One text or meta request at the front of `buf`.
pub(crate) fn text_step(buf: &[u8], svc: &Service<'_>, out: &mut Vec<u8>, unauthenticated: &mut bool) -> Step {
    let (line, consumed) = match frame_line(buf, svc.shared.settings.max_get_line_bytes) {
        Frame::Partial => return Step::Need(buf.len() + 1),
        Frame::Close => {
            // memcached closes on an overlong line after transmitting what
            // it had flushed (at get, mn, or a large data block) and drops
            // the rest.
            let sent = svc.unsent_from().min(out.len());
            out.truncate(sent);
            // UDP's reply marks (none over TCP) must not point past it.
            svc.truncate_marks(sent);
            return Step::Stop(Progress::CloseAfterWrite);
        }
        Frame::Line { line, consumed } => (line, consumed),
    };
    if *unauthenticated {
        return text_login_step(buf, line, consumed, svc, out, unauthenticated);
    }
    // A storage command's data block: refused blocks are swallowed, an
    // accepted one runs once it is all here.
    let block = |admission: Admission, value_len: usize, noreply: bool, run: &mut dyn FnMut(&[u8], &mut Vec<u8>), out: &mut Vec<u8>| {
        match admission {
            Admission::Refuse { reply, .. } => {
                push_line(out, reply, noreply);
                Step::Done { advance: consumed, swallow: value_len + 2, stop: None }
            }
            Admission::Accept => {
                let end = consumed + value_len + 2;
                if buf.len() < end {
                    return Step::Need(end);
                }
                run(&buf[consumed..end], out);
                if value_len + 2 > strata_proto::text::READ_BUFFER_SIZE {
                    // memcached reads such a block straight from the socket
                    // and then waits for the next request, sending its
                    // pending replies first.
                    svc.set_unsent_from(out.len());
                }
                Step::next(end)
            }
        }
    };
    // Matched by reference: a `Command` is a few hundred bytes (a meta
    // request's decoded key), and a move is a memcpy of all of them.
    let cmd = parse_request(line, consumed);
    match &cmd {
        Command::Store(cmd) => {
            let remove = cmd.verb == strata_proto::StoreVerb::Set;
            let admission = front::text::admit(svc, cmd.key, cmd.flags, cmd.value_len, remove);
            block(admission, cmd.value_len, cmd.noreply, &mut |data, out| front::text::store(svc, cmd, data, out), out)
        }
        &Command::MetaSet { ref req, value_len } => {
            let admission = front::meta::admit(svc, req, value_len);
            block(admission, value_len, false, &mut |data, out| front::meta::set(svc, req, data, out), out)
        }
        &Command::Error { reply, noreply, swallow } => {
            push_line(out, reply, noreply);
            Step::Done { advance: consumed, swallow, stop: None }
        }
        cmd => {
            let stop = match front::text::execute(svc, cmd, out) {
                Flow::Continue => None,
                Flow::CloseAfterWrite => Some(Progress::CloseAfterWrite),
                Flow::Close => Some(Progress::Close),
            };
            Step::Done { advance: consumed, swallow: 0, stop }
        }
    }
}

/// Before `-Y` authentication only a `set` carrying `username password` is
/// accepted; everything else answers `CLIENT_ERROR unauthenticated`.
fn text_login_step(
    buf: &[u8],
    line: &[u8],
    consumed: usize,
    svc: &Service<'_>,
    out: &mut Vec<u8>,
    unauthenticated: &mut bool,
) -> Step {
    let Some(credentials) = svc.shared.text_auth.as_ref() else {
        *unauthenticated = false;
        return Step::Done { advance: 0, swallow: 0, stop: None };
    };
    let cmd = match parse_request(line, consumed) {
        Command::Store(cmd) if cmd.verb == strata_proto::StoreVerb::Set => cmd,
        Command::Close => return Step::Stop(Progress::Close),
        _ => {
            push_line(out, "CLIENT_ERROR unauthenticated", false);
            return Step::next(consumed);
        }
    };
    if let Admission::Refuse { reply, .. } = front::text::admit(svc, cmd.key, cmd.flags, cmd.value_len, false) {
        push_line(out, reply, false);
        return Step::Done { advance: consumed, swallow: cmd.value_len + 2, stop: None };
    }
    let end = consumed + cmd.value_len + 2;
    if buf.len() < end {
        return Step::Need(end);
    }
    let (token, tail) = buf[consumed..end].split_at(cmd.value_len);
    let reply = if tail != b"\r\n" {
        strata_proto::command::BAD_CHUNK
    } else {
        match auth::text_login(credentials, token) {
            auth::TextLogin::Ok => {
                *unauthenticated = false;
                "STORED"
            }
            auth::TextLogin::BadFormat => "CLIENT_ERROR bad authentication token format",
            auth::TextLogin::Failed => "CLIENT_ERROR authentication failure",
        }
    };
    push_line(out, reply, false);
    Step::next(end)
}

/// Binary SASL: LIST_MECHS, AUTH and STEP with PLAIN. Until a client has
/// authenticated, any other command but VERSION gets AUTH_ERROR and the
/// connection is closed, as in memcached.
fn sasl_step(op: Opcode, req: &binary::Request<'_>, svc: &Service<'_>, out: &mut Vec<u8>, unauthenticated: &mut bool) -> Option<Step> {
    let credentials = svc.shared.sasl_auth.as_ref()?;
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let end = binary::HEADER_LEN + req.header.body_len as usize;
    match op {
        Opcode::SaslListMechs => {
            binary::write_response(out, code, binary::Status::Success, opaque, 0, &[], &[], b"PLAIN");
        }
        Opcode::SaslAuth | Opcode::SaslStep => {
            let ok = op == Opcode::SaslAuth && req.key == b"PLAIN" && auth::sasl_plain(credentials, req.value);
            svc.count_auth(ok);
            if ok {
                *unauthenticated = false;
                binary::write_response(out, code, binary::Status::Success, opaque, 0, &[], &[], b"Authenticated");
            } else {
                binary::write_error(out, code, binary::Status::AuthError, opaque);
            }
        }
        Opcode::Version => return None,
        _ if *unauthenticated => {
            binary::write_error(out, code, binary::Status::AuthError, opaque);
            return Some(Step::Done { advance: end, swallow: 0, stop: Some(Progress::CloseAfterWrite) });
        }
        _ => return None,
    }
    Some(Step::next(end))
}

/// `Conn::process`'s step while tracing (`-vv`, `ops/verbose.rs`; kept
/// out of line so the untraced path stays as it was): run the request,
/// then print it.
#[cold]
#[inline(never)]
fn traced_step(
    protocol: Protocol,
    fd: Option<std::os::fd::RawFd>,
    buf: &[u8],
    svc: &Service<'_>,
    out: &mut Vec<u8>,
    unauthenticated: &mut bool,
) -> Step {
    let reply_from = out.len();
    crate::ops::verbose::begin();
    let step = match protocol {
        Protocol::Binary => binary_step(buf, svc, out, unauthenticated),
        _ => text_step(buf, svc, out, unauthenticated),
    };
    // A parked request is traced when it runs again.
    let done = protocol == Protocol::Text && matches!(step, Step::Done { .. }) && !svc.is_parked();
    // After `verbosity 1` memcached prints the command, not its reply.
    let reply = out.get(reply_from..).filter(|_| svc.shared.ops.verbose.tracing());
    crate::ops::verbose::end_text(fd, buf, reply, done);
    step
}

/// Largest body accepted for a binary command that carries no value.
const MAX_BINARY_CONTROL_BODY: usize = 4096;

/// One binary request at the front of `buf`.
pub(crate) fn binary_step(buf: &[u8], svc: &Service<'_>, out: &mut Vec<u8>, unauthenticated: &mut bool) -> Step {
    let Some(header) = binary::Header::parse(buf) else { return Step::Need(binary::HEADER_LEN) };
    if header.magic != binary::REQUEST_MAGIC {
        return Step::Stop(Progress::Close);
    }
    let (code, opaque) = (header.opcode, header.opaque);
    let close_with = |status, out: &mut Vec<u8>| {
        binary::write_error(out, code, status, opaque);
        Step::Done { advance: binary::HEADER_LEN, swallow: 0, stop: Some(Progress::CloseAfterWrite) }
    };
    let op = match binary::validate(&header, strata_proto::KEY_MAX_LENGTH) {
        Verdict::Corrupt => return close_with(binary::Status::UnknownCommand, out),
        Verdict::ProtocolError => return close_with(binary::Status::Invalid, out),
        Verdict::Unknown => {
            binary::write_error(out, code, binary::Status::UnknownCommand, opaque);
            return Step::Done { advance: binary::HEADER_LEN, swallow: header.body_len as usize, stop: None };
        }
        Verdict::Execute(op) => op,
    };
    let (loud, quiet) = op.loud();
    let body_len = header.body_len as usize;
    let sasl_command = matches!(loud, Opcode::SaslListMechs | Opcode::SaslAuth | Opcode::SaslStep | Opcode::Version);
    if *unauthenticated && !sasl_command {
        binary::write_error(out, code, binary::Status::AuthError, opaque);
        return Step::Done { advance: binary::HEADER_LEN, swallow: 0, stop: Some(Progress::CloseAfterWrite) };
    }
    let head_len = binary::HEADER_LEN + usize::from(header.extras_len) + usize::from(header.key_len);
    let stores = matches!(loud, Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend);
    if stores {
        if buf.len() < head_len {
            return Step::Need(head_len);
        }
        let head = binary::Request::split(header, &buf[binary::HEADER_LEN..head_len]);
        let flags = if header.extras_len >= 4 { head.extra_u32(0) } else { 0 };
        let value_len = binary::HEADER_LEN + body_len - head_len;
        if !svc.admit(head.key, flags, value_len, loud == Opcode::Set) {
            binary::write_error(out, code, binary::Status::TooBig, opaque);
            return Step::Done { advance: head_len, swallow: value_len, stop: None };
        }
    } else if body_len > MAX_BINARY_CONTROL_BODY {
        return close_with(binary::Status::Invalid, out);
    }
    let end = binary::HEADER_LEN + body_len;
    if buf.len() < end {
        return Step::Need(end);
    }
    let req = binary::Request::split(header, &buf[binary::HEADER_LEN..end]);
    if let Some(step) = sasl_step(loud, &req, svc, out, unauthenticated) {
        return step;
    }
    let stop = match front::binary::execute(svc, loud, quiet, &req, out) {
        Flow::Continue => None,
        Flow::CloseAfterWrite if quiet => Some(Progress::Close),
        Flow::CloseAfterWrite => Some(Progress::CloseAfterWrite),
        Flow::Close => Some(Progress::Close),
    };
    Step::Done { advance: end, swallow: 0, stop }
}

#[derive(Default)]
pub struct Conn {
    pub protocol: Protocol,
    /// `-Y` or `-S` is on and this client has not logged in yet.
    pub unauthenticated: bool,
    pub input: ReadBuf,
    pub out: Vec<u8>,
    pub wpos: usize,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// Bytes the next request needs buffered before it can run (a data
    /// block), so the reader can size its buffer.
    pub awaiting: usize,
    /// A key dump in progress: it runs before any further request.
    dump: Option<Box<crate::ops::dump::Dump>>,
    /// The request at the front of `input` is parked on these flash reads.
    pub flash: crate::flash::io::FlashWaits,
    /// The client's socket, for a key dump to write to (`ops/dump_feed.rs`).
    socket: Option<std::os::fd::RawFd>,
    /// A TLS connection (`tls/`): a key dump must not write to its socket
    /// (it closes the connection instead); `-vv` still names the socket.
    tls: bool,
    /// Requests completed since their batch was read (`ops/latency.rs`).
    pub timing: crate::ops::latency::ConnTiming,
}

impl Conn {
    /// The connection is a `watch` watcher (`ops/watch.rs`).
    pub fn is_watching(&self) -> bool {
        matches!(self.dump.as_deref(), Some(crate::ops::dump::Dump::Watch(_)))
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
        self.dump.as_deref().is_some_and(crate::ops::dump::Dump::holds_crawler)
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
    pub(crate) fn swallowing(&self) -> usize {
        self.swallow
    }

    pub fn pending_output(&self) -> usize {
        self.out.len() - self.wpos
    }

    /// Run buffered requests; at most `budget` of them.
    pub fn process(&mut self, svc: &Service<'_>, budget: usize) -> Progress {
        let progress = self.run(svc, budget);
        svc.end_run();
        progress
    }

    fn run(&mut self, svc: &Service<'_>, mut budget: usize) -> Progress {
        let limits = &svc.shared.settings;
        svc.flushed(self.wpos);
        let dump_socket = if self.tls { None } else { self.socket };
        loop {
            if self.flash.pending() {
                return Progress::FlashWait;
            }
            if let Some(wait) = crate::ops::dump::pump(&mut self.dump, svc.take_started(), svc.shared, &mut self.out, self.wpos, dump_socket) {
                return match wait {
                    Pumped::Dumping => Progress::Dumping,
                    Pumped::OutputFull => Progress::OutputFull,
                    Pumped::Close => Progress::Close,
                };
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.input.len());
                self.input.consume(n);
                self.swallow -= n;
                if self.swallow > 0 {
                    return Progress::NeedInput;
                }
            }
            if self.input.is_empty() {
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
            let tracing = svc.shared.ops.verbose.tracing();
            if self.protocol == Protocol::Negotiating {
                self.protocol = negotiate(buf[0], limits.protocol);
                if tracing && limits.protocol == crate::settings::ProtocolChoice::Auto {
                    crate::ops::verbose::negotiated(self.socket, self.protocol == Protocol::Binary);
                }
            }
            let step = match self.protocol {
                _ if tracing => traced_step(self.protocol, self.socket, buf, svc, &mut self.out, &mut self.unauthenticated),
                Protocol::Binary => binary_step(buf, svc, &mut self.out, &mut self.unauthenticated),
                _ => text_step(buf, svc, &mut self.out, &mut self.unauthenticated),
            };
            if svc.flash_on() {
                if let Step::Done { advance, .. } = step {
                    // Nothing unless the request parked.
                    svc.read_ahead_later(&buf[advance..], self.protocol == Protocol::Binary);
                }
                let parked = svc.take_park();
                if !parked.is_empty() {
                    // Not consumed: the same request runs again with the reads.
                    self.flash = parked;
                    return Progress::FlashWait;
                }
            }
            svc.end_request();
            match step {
                Step::Need(total) => {
                    self.awaiting = total;
                    return Progress::NeedInput;
                }
                Step::Stop(progress) => return progress,
                Step::Done { advance, swallow, stop } => {
                    crate::ops::latency::served(&mut self.timing, &svc.stats.requests, self.input.filled(), advance, self.protocol, &svc.shared.clock);
                    self.input.consume(advance);
                    self.swallow = swallow;
                    self.awaiting = 0;
                    if let Some(stop) = stop {
                        return stop;
                    }
                }
            }
        }
    }

    /// Mark `n` output bytes as written.
    pub fn consume_output(&mut self, n: usize) {
        self.wpos += n;
        if self.wpos == self.out.len() {
            self.out.clear();
            self.wpos = 0;
        }
    }
}
