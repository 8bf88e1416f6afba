//! The front ends: one file per protocol frames and parses the request at
//! the front of a connection's input (`strata-proto`), maps it to the
//! service's verbs (`service/`) and writes the replies, byte for byte as
//! memcached writes them. They never touch the worker's counters, `watch`
//! or the journal: the service's hooks do.
//!
//! - `text.rs`: the text protocol and the admin commands; its storage
//!   commands are admitted from their header alone, and run once their
//!   data block is whole;
//! - `meta.rs`: `mg ms md ma me`;
//! - `binary.rs`: the binary protocol (a request validated from its
//!   header first);
//! - `auth.rs`: the login steps of `-Y` (text) and `-S` (binary SASL),
//!   before a connection may run anything else.
//!
//! [`step`] runs one request and returns what it left for its connection
//! ([`Step`]): the bytes it took, how the connection goes on, a key dump
//! or `watch` it started, or the flash reads it parked on. The connection
//! (`conn.rs`) only frames requests into steps and applies what they say.

pub mod auth;
pub mod binary;
pub mod meta;
pub mod text;

use strata_proto::held::{HeldMeta, HeldStore};

use crate::output::Output;
use crate::protocol::Protocol;
use crate::service::hooks::{FlashWaits, Started};
use crate::service::Service;

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Send what is queued, then close (`quit`).
    CloseAfterWrite,
    /// Close at once, without a reply.
    Close,
}

/// What a command leaves its connection besides its reply: how the
/// connection goes on, and a key dump or `watch` it started (run before
/// the connection's next request).
pub struct Outcome {
    pub flow: Flow,
    pub started: Started,
}

impl Outcome {
    pub const CONTINUE: Outcome = Outcome { flow: Flow::Continue, started: None };

    #[inline]
    pub fn flow(flow: Flow) -> Outcome {
        Outcome { flow, started: None }
    }

    #[inline]
    pub fn started(started: Started) -> Outcome {
        Outcome { flow: Flow::Continue, started }
    }
}

/// Whether a storage command's data block is taken, and if not, the reply.
pub enum Admission {
    Accept,
    /// Reply with this line (unless silenced) and swallow the block.
    Refuse { reply: &'static str, noreply: bool },
}

/// A storage request at the front of the input, parsed and admitted
/// from its header, waiting for the rest of its data block: it runs from
/// this, once the block is whole, without its line being parsed or its
/// block admitted again (`strata-proto/src/held.rs`).
#[derive(Clone, Copy)]
pub enum Held {
    /// `set add replace append prepend cas`; the block starts at `consumed`.
    Text { cmd: HeldStore, consumed: usize },
    /// `ms`.
    Meta { req: HeldMeta, value_len: usize, consumed: usize },
    /// A binary store, validated and admitted.
    Binary,
}

/// The outcome of one request at the front of the input.
pub enum Step {
    /// `total` bytes must be buffered before this request can run.
    Need(usize),
    /// A storage request's header was parsed and admitted: it runs from
    /// `Held` once `total` bytes are buffered (boxed: a meta request's
    /// decoded key makes it a few hundred bytes, and `Step` is moved on
    /// every request).
    Hold(usize, Box<Held>),
    /// Stop processing this connection, consuming nothing.
    Stop(Flow),
    /// Done: consume `advance` bytes, then discard `swallow` more.
    Done { advance: usize, swallow: usize, outcome: Outcome },
    /// The request waits for these flash reads: it stays at the front of
    /// the input and runs again once they are back (`advance`: the bytes
    /// it would have taken).
    Parked { advance: usize, waits: FlashWaits },
}

impl Step {
    #[inline]
    pub(crate) fn next(advance: usize) -> Step {
        Step::Done { advance, swallow: 0, outcome: Outcome::CONTINUE }
    }

    #[inline]
    pub(crate) fn then(advance: usize, flow: Flow) -> Step {
        Step::Done { advance, swallow: 0, outcome: Outcome::flow(flow) }
    }
}

/// Run the request at the front of `buf` on a connection speaking
/// `protocol` (decided), traced while `-vv` is on, and hand back what it
/// parked on, if it did (the connection's path: [`run`] plus the flash
/// outcome).
#[inline]
pub fn step(protocol: Protocol, fd: Option<std::os::fd::RawFd>, buf: &[u8], svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool, held: Option<&Held>) -> Step {
    let step = run(protocol, fd, buf, svc, out, unauthenticated, held);
    if !svc.flash_on() {
        return step;
    }
    let (advance, later) = match &step {
        Step::Done { advance, .. } => (*advance, &buf[*advance..]),
        _ => (0, &buf[..0]),
    };
    let waits = svc.take_park(later, protocol == Protocol::Binary);
    if waits.is_empty() {
        return step;
    }
    Step::Parked { advance, waits }
}

/// Run the request at the front of `buf` (from `held` when its header was
/// parsed and admitted before), traced while `-vv` is on (the UDP
/// transport's path: a datagram's requests never park or wait).
#[inline]
pub fn run(protocol: Protocol, fd: Option<std::os::fd::RawFd>, buf: &[u8], svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool, held: Option<&Held>) -> Step {
    if svc.hooks.tracing() {
        return traced(protocol, fd, buf, svc, out, unauthenticated, held);
    }
    match protocol {
        Protocol::Binary => binary::step(buf, svc, out, unauthenticated, held),
        _ => text::step(buf, svc, out, unauthenticated, held),
    }
}

/// [`run`] while tracing (`-vv`, `ops/verbose.rs`; kept out of line so the
/// untraced path stays as it was): run the request, then print it.
#[cold]
#[inline(never)]
fn traced(protocol: Protocol, fd: Option<std::os::fd::RawFd>, buf: &[u8], svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool, held: Option<&Held>) -> Step {
    let reply_from = out.len();
    crate::service::hooks::trace_begin();
    let step = match protocol {
        Protocol::Binary => binary::step(buf, svc, out, unauthenticated, held),
        _ => text::step(buf, svc, out, unauthenticated, held),
    };
    // A parked request is traced when it runs again.
    let done = protocol == Protocol::Text && matches!(step, Step::Done { .. }) && !svc.is_parked();
    // After `verbosity 1` memcached prints the command, not its reply.
    let reply = out.get(reply_from..).filter(|_| svc.hooks.tracing());
    crate::service::hooks::trace_end(fd, buf, reply, done);
    step
}

/// Decide from a text storage header (or `-Y`'s login) whether its data
/// block is taken (`ms` has its own: `meta.rs`).
pub fn admit(svc: &Service<'_>, key: &[u8], flags: u32, value_len: usize, remove_on_refusal: bool) -> Admission {
    if svc.admit(key, flags, value_len, remove_on_refusal) {
        Admission::Accept
    } else {
        Admission::Refuse { reply: "SERVER_ERROR object too large for cache", noreply: false }
    }
}

/// Append `line` and CRLF unless `noreply` (then `-vv` still sees it).
#[inline]
pub(crate) fn reply(out: &mut Vec<u8>, line: &str, noreply: bool) {
    if !noreply {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        crate::service::hooks::silenced(line.as_bytes());
    }
}
