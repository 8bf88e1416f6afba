//! Socket handover (`-o handover=PATH`): a new Strata process takes over a
//! running one's listening sockets AND its open client connections, so a
//! restart (an upgrade, a flag change) refuses no connection and closes none:
//! a proxy such as nutcracker never sees its server connection drop, so it
//! never ejects the node, and requests sent meanwhile wait in the kernel's
//! socket buffers instead of failing (docs/SCALE-OUT.md, rolling upgrades).
//!
//! ```text
//!  new process (same flags)                 old process (serving)
//!  connect(PATH) ─ "takeover 1" ─────────▶  control thread (outgoing.rs)
//!                ◀── "listeners" + fds ──   stops accepting, workers drain:
//!                                           buffered requests answered,
//!                ◀── "conn" + fd + unread   replies written, each plain
//!                    input, per connection  connection passed, not closed
//!                ◀── "journal" + bytes ──   its invalidation journal
//!                ◀── "saved" ────────────   memory file written back
//!  wait for EOF (old exited)                exit
//!  map the memory file, journal sync (restart_peers), replay the old
//!  journal, serve the inherited listeners and connections (incoming.rs)
//! ```
//!
//! The control socket is a unix `SOCK_SEQPACKET` socket at PATH (mode
//! 0600): every process started with the flag serves it once it listens, so
//! the same command line restarts it again later. Nothing listening at PATH
//! (no file, or a stale one) means a plain start. Failures: an old process
//! that refuses (a newer handover version) keeps serving, and the new one
//! exits with the reason; once the old one has handed its listeners over it
//! is committed to stop. Not handed over (closed as on a plain stop): TLS
//! connections (their session state lives in the old process), key dumps
//! and watchers, a connection still swallowing a refused data block or
//! holding more than [`MAX_CARRIED_INPUT_BYTES`] unread bytes, unix-socket (`-s`)
//! servers and UDP sockets (the new process binds UDP after the old exits).
//!
//! Off (no flag): nothing on the request path; the hooks run at shutdown only.

pub mod incoming;
pub mod outgoing;

pub use incoming::{take_over, TakenOver};
pub use outgoing::Outgoing;

/// The request the new process sends, with the protocol version.
pub(crate) const TAKEOVER: &[u8] = b"STRATA-HANDOVER takeover 1";
/// The old process's answer carrying its listeners.
pub(crate) const LISTENERS: &[u8] = b"listeners";
/// One connection: this prefix, one byte (1: not yet authenticated), then
/// the input it had buffered and not yet run; the descriptor attached.
pub(crate) const CONN: &[u8] = b"conn";
/// A piece of the invalidation journal (`journal/carry.rs`), in order.
pub(crate) const JOURNAL: &[u8] = b"journal";
/// The memory file is written back: the old process exits next.
pub(crate) const SAVED: &[u8] = b"saved";
/// The old process keeps serving: the reason follows.
pub(crate) const REFUSED: &[u8] = b"refused ";

/// Unread input larger than this is not carried (the connection closes).
pub const MAX_CARRIED_INPUT_BYTES: usize = 32 << 10;

pub use crate::new_conn::Resume;
