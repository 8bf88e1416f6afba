//! The per-connection context every request handler gets: the shared state,
//! the worker's counters, and what memcached keeps per connection about its
//! output (which replies are still unsent, which are stacked, which items an
//! unsent reply still references).
//!
//! ```text
//!  out: [ handed to the kernel | held on the response stack | unsent ]
//!                               ^ stacked_from              ^ unsent_from
//! ```
//!
//! It sits below the request path's layers: `ops` handlers take a `&Ctx`,
//! the service (`service/`) wraps one, and nothing here imports either, so
//! operator features depend downward only. The connection's protocol
//! ([`Protocol`]) lives here for the same reason: `ops/latency.rs` and
//! `ops/hotkeys.rs` count by it.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use strata_proto::binary::REQUEST_MAGIC;

use crate::settings::ProtocolChoice;
use crate::shared::Shared;
use crate::stats::WorkerStats;

/// Which protocol a connection speaks, decided by its first byte
/// (memcached's `-B auto`): 0x80 is a binary request, anything else text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Negotiating,
    Text,
    Binary,
}

pub(crate) fn negotiate(first: u8, choice: ProtocolChoice) -> Protocol {
    match choice {
        ProtocolChoice::Ascii => Protocol::Text,
        ProtocolChoice::Binary => Protocol::Binary,
        ProtocolChoice::Auto if first == REQUEST_MAGIC => Protocol::Binary,
        ProtocolChoice::Auto => Protocol::Text,
    }
}

pub struct Ctx<'a> {
    pub shared: &'a Arc<Shared>,
    pub stats: &'a WorkerStats,
    /// The connection this context runs for (its `stats conns` id; 0: none).
    pub conn_id: u64,
    /// Where one reply object ends and the next begins, for transports
    /// that frame them separately (UDP: each is its own datagram series).
    marks: Option<&'a RefCell<Vec<usize>>>,
    /// Where the output not yet handed to the kernel begins (memcached
    /// culls all of it on some errors).
    unsent_from: Cell<usize>,
    /// Where the replies memcached still holds on the connection's response
    /// stack begin (it flushes them on a new read and on `mn`); a metadump
    /// behind any of them is refused.
    stacked_from: Cell<usize>,
    /// Keys of `mg` hits whose replies are not yet transmitted: memcached's
    /// reply still references those items (see `DeltaRequest::in_place`).
    pinned: RefCell<Vec<Vec<u8>>>,
}

impl<'a> Ctx<'a> {
    pub fn new(shared: &'a Arc<Shared>, stats: &'a WorkerStats) -> Ctx<'a> {
        Ctx {
            shared,
            stats,
            conn_id: 0,
            marks: None,
            unsent_from: Cell::new(0),
            stacked_from: Cell::new(0),
            pinned: RefCell::new(Vec::new()),
        }
    }

    /// This context runs for connection `id` (`stats conns` shows it as
    /// the one parsing a command).
    pub fn for_conn(self, id: u64) -> Ctx<'a> {
        Ctx { conn_id: id, ..self }
    }

    /// A context that records reply-object boundaries in `marks`.
    pub fn with_marks(self, marks: &'a RefCell<Vec<usize>>) -> Ctx<'a> {
        Ctx { marks: Some(marks), ..self }
    }

    #[inline]
    pub fn now(&self) -> u32 {
        self.shared.clock.now()
    }

    /// A client's exptime as the store's relative time.
    #[inline]
    pub fn expiry(&self, exptime: i32) -> u32 {
        self.shared.clock.expiry(i64::from(exptime))
    }

    /// Where the output memcached would not have transmitted yet begins.
    pub fn unsent_from(&self) -> usize {
        self.unsent_from.get()
    }

    /// Output before `at` has been handed to the kernel.
    pub fn set_unsent_from(&self, at: usize) {
        self.unsent_from.set(at);
        self.pinned.borrow_mut().clear();
    }

    /// Remember that an unsent reply references the item under `key`.
    pub fn pin(&self, key: &[u8]) {
        let mut pinned = self.pinned.borrow_mut();
        if !pinned.iter().any(|k| k == key) {
            pinned.push(key.to_vec());
        }
    }

    pub fn is_pinned(&self, key: &[u8]) -> bool {
        self.pinned.borrow().iter().any(|k| k == key)
    }

    /// Output before `at` has been handed to the kernel and nothing is
    /// held for the response stack (a new read; `mn`).
    pub fn flushed(&self, at: usize) {
        self.set_unsent_from(at);
        self.stacked_from.set(at);
    }

    /// Replies memcached would still hold on its response stack.
    pub fn has_stacked_replies(&self, out: &[u8]) -> bool {
        out.len() > self.stacked_from.get()
    }

    /// Replies go out as datagrams (UDP).
    pub fn is_datagram(&self) -> bool {
        self.marks.is_some()
    }

    /// A reply object ends at `out.len()`.
    pub fn mark(&self, out: &[u8]) {
        if let Some(marks) = self.marks {
            let mut marks = marks.borrow_mut();
            if marks.last() != Some(&out.len()) {
                marks.push(out.len());
            }
        }
    }

    /// Drop reply-object boundaries past `at` (the output was cut there).
    pub fn truncate_marks(&self, at: usize) {
        if let Some(marks) = self.marks {
            marks.borrow_mut().retain(|&m| m <= at);
        }
    }
}
