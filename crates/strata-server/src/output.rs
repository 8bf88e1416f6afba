//! A connection's output: the reply bytes, and what memcached keeps per
//! connection about them, in one place with one owner (the connection's
//! `Conn`, or a UDP socket's turn).
//!
//! ```text
//!  buf: [ handed to the kernel | held on the response stack | unsent ]
//!       ^ 0                    ^ stacked_from              ^ unsent_from
//!       [ written | pending replies ............................... ]
//!                 ^ wpos                                            ^ len
//! ```
//!
//! - `wpos`: bytes before it are written; the I/O engine moves it
//!   ([`Output::consume`]); once everything is written the buffer empties.
//! - `unsent_from`: where the replies memcached would not have transmitted
//!   yet begin; some errors cull all of them (an overlong line, a get with
//!   a key over 250 bytes).
//! - `stacked_from`: where the replies memcached still holds on its
//!   response stack begin (it flushes them on a new read and on `mn`); a
//!   key dump behind any of them is refused.
//! - `marks`: where one reply object ends and the next begins, for a
//!   transport that frames them apart (UDP: each is its own datagram
//!   series); None over a stream.
//! - `pinned`: keys of `mg` hits whose replies are not yet transmitted:
//!   memcached's reply still references those items (see
//!   `DeltaRequest::in_place`).
//!
//! Invariants: `wpos <= len`; the cursors are positions in `buf` set in
//! one run of requests ([`Output::flushed`] starts each run at `wpos`), so
//! a cursor past `len` (after the engine emptied the buffer) is reset
//! before it is read. It derefs to the byte buffer, so a reply writer
//! takes `&mut Output` wherever it took `&mut Vec<u8>`.

use std::ops::{Deref, DerefMut};

#[derive(Default)]
pub struct Output {
    buf: Vec<u8>,
    wpos: usize,
    unsent_from: usize,
    stacked_from: usize,
    marks: Option<Vec<usize>>,
    pinned: Vec<Vec<u8>>,
}

impl Deref for Output {
    type Target = Vec<u8>;

    #[inline]
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl DerefMut for Output {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

impl Output {
    /// The output of a datagram transport: reply objects are marked.
    pub fn datagrams() -> Output {
        Output { marks: Some(Vec::new()), ..Output::default() }
    }

    /// Reply bytes not yet written.
    #[inline]
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.wpos..]
    }

    #[inline]
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.wpos
    }

    /// Mark `n` pending bytes as written; once all are, the buffer empties.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.wpos += n;
        debug_assert!(self.wpos <= self.buf.len());
        if self.wpos == self.buf.len() {
            self.buf.clear();
            self.wpos = 0;
        }
    }

    /// Hand the whole buffer to the I/O engine (io_uring owns a send's
    /// buffer until its completion), leaving `spare` in its place. Nothing
    /// may have been written from it yet.
    pub fn take(&mut self, spare: Vec<u8>) -> Vec<u8> {
        debug_assert_eq!(self.wpos, 0);
        std::mem::replace(&mut self.buf, spare)
    }

    /// Replace the bytes (TLS at shutdown: the ciphertext of them).
    pub fn replace(&mut self, bytes: Vec<u8>) {
        self.buf = bytes;
        self.wpos = 0;
    }

    /// Drop every byte, written or not.
    pub fn clear_all(&mut self) {
        self.buf.clear();
        self.wpos = 0;
    }

    /// A run of requests starts: everything before `wpos` is written and
    /// nothing is held for the response stack.
    #[inline]
    pub fn start_run(&mut self) {
        self.flushed(self.wpos);
    }

    /// Where the output memcached would not have transmitted yet begins.
    #[inline]
    pub fn unsent_from(&self) -> usize {
        self.unsent_from
    }

    /// Output before `at` has been handed to the kernel.
    #[inline]
    pub fn set_unsent_from(&mut self, at: usize) {
        self.unsent_from = at;
        self.pinned.clear();
    }

    /// Output before `at` has been handed to the kernel and nothing is
    /// held for the response stack (a new read; `mn`).
    #[inline]
    pub fn flushed(&mut self, at: usize) {
        self.set_unsent_from(at);
        self.stacked_from = at;
    }

    /// Replies memcached would still hold on its response stack.
    pub fn has_stacked_replies(&self) -> bool {
        self.buf.len() > self.stacked_from
    }

    /// Remember that an unsent reply references the item under `key`.
    pub fn pin(&mut self, key: &[u8]) {
        if !self.pinned.iter().any(|k| k == key) {
            self.pinned.push(key.to_vec());
        }
    }

    pub fn is_pinned(&self, key: &[u8]) -> bool {
        self.pinned.iter().any(|k| k == key)
    }

    /// Replies go out as datagrams (UDP).
    pub fn is_datagram(&self) -> bool {
        self.marks.is_some()
    }

    /// A reply object ends here (a datagram transport's; nothing otherwise).
    #[inline]
    pub fn mark(&mut self) {
        if let Some(marks) = &mut self.marks {
            if marks.last() != Some(&self.buf.len()) {
                marks.push(self.buf.len());
            }
        }
    }

    /// Drop reply-object boundaries past `at` (the output was cut there).
    pub fn truncate_marks(&mut self, at: usize) {
        if let Some(marks) = &mut self.marks {
            marks.retain(|&m| m <= at);
        }
    }

    /// Where each reply object ends (empty over a stream).
    pub fn marks(&self) -> &[usize] {
        self.marks.as_deref().unwrap_or_default()
    }

    /// A new datagram: no bytes, no marks, no cursors.
    pub fn clear_datagram(&mut self) {
        self.clear_all();
        self.flushed(0);
        if let Some(marks) = &mut self.marks {
            marks.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Output;

    #[test]
    fn consumed_output_empties_and_cursors_restart_at_each_run() {
        let mut out = Output::default();
        out.extend_from_slice(b"STORED\r\nEND\r\n");
        out.consume(8);
        assert_eq!(out.pending(), b"END\r\n");
        // A run starts at what is written: the replies still pending are
        // held on memcached's response stack.
        out.start_run();
        assert!(out.has_stacked_replies());
        out.consume(out.pending_len());
        assert_eq!((out.len(), out.pending_len()), (0, 0));
        out.start_run();
        assert!(!out.has_stacked_replies());
        out.extend_from_slice(b"HD\r\n");
        assert!(out.has_stacked_replies());
    }

    #[test]
    fn marks_only_on_a_datagram_output() {
        let mut stream = Output::default();
        stream.extend_from_slice(b"x");
        stream.mark();
        assert!(stream.marks().is_empty() && !stream.is_datagram());
        let mut udp = Output::datagrams();
        udp.extend_from_slice(b"VALUE a 0 1\r\n1\r\n");
        udp.mark();
        udp.mark();
        udp.extend_from_slice(b"END\r\n");
        assert_eq!(udp.marks(), &[16]);
        udp.truncate_marks(10);
        assert!(udp.marks().is_empty());
    }
}
