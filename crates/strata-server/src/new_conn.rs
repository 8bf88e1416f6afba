//! A connection on its way to a worker: what the acceptor (`server.rs`)
//! or a handover (`handover/incoming.rs`, a connection taken over from the
//! previous process) sends down a worker's channel, for the worker
//! (`worker.rs` or `worker_uring.rs`) to register and serve.
//!
//! It carries only what the worker cannot learn from the socket itself:
//! the peer's and the listener's names as `stats conns` and `watch
//! connevents` print them (`tcp:`/`unix:` and the address), the
//! listener's TLS mode, and, for a taken-over connection, the state that
//! moves with it ([`Resume`]: its unread input and whether it still has
//! to log in). A value, not a handle: sending it moves the descriptor.

use crate::settings::ListenTls;
use crate::sys::Stream;

/// A connection handed from the acceptor (or a handover) to a worker (the
/// conn fuzz harness opens its connections with no socket: `S` = `()`).
pub struct NewConn<S = Stream> {
    pub stream: S,
    pub peer: String,
    pub listen: String,
    /// The listener's TLS mode (`ListenTls::Off`: plain).
    pub tls: ListenTls,
    /// A connection taken over from a previous process (`handover/`).
    pub resume: Option<Box<Resume>>,
}

/// A client connection's state that moves with it on a handover: the
/// requests read and not yet run (often part of one), and whether it
/// still has to log in.
#[derive(Debug, Default)]
pub struct Resume {
    pub input: Vec<u8>,
    pub unauthenticated: bool,
}
