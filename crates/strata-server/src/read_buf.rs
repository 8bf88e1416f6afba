//! A connection's read buffer: the bytes received and not yet consumed,
//! filled by the worker's reads (or, on a TLS connection, by the session's
//! decryption, `tls/session.rs`) and consumed by the connection's requests
//! (`conn.rs`).
//!
//! ```text
//!  data: [ consumed | received, not yet consumed | spare (initialized) ]
//!                   ^ start                      ^ end
//! ```
//!
//! Invariants: `start <= end <= data.len()`; when everything received is
//! consumed, `start` and `end` go back to 0, so a connection whose
//! requests arrive whole never moves a byte. [`ReadBuf::spare`] moves the
//! unconsumed bytes to the front only when the space after `end` is too
//! small, and grows the storage (zero-filled once) only when that is still
//! too small: the memory stays initialized and allocated between reads,
//! so a read costs no memset and no allocation. An idle connection hands
//! its storage back ([`ReadBuf::release`]) for the worker to pool.

/// A connection's read buffer (the layout above).
#[derive(Default)]
pub struct ReadBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// Bytes received and not yet consumed.
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Bytes of storage held (`stats memory`).
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drop the first `n` received bytes (a request run, or swallowed).
    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Free space for at least `min` more bytes, moving unconsumed bytes to
    /// the front first.
    #[inline]
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start > 0 && self.data.len() - self.end < min {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < min {
            self.data.resize(self.end + min, 0);
        }
        &mut self.data[self.end..]
    }

    /// Hand the storage back when nothing is buffered, so an idle
    /// connection holds no read buffer (the worker pools them).
    pub fn release(&mut self) -> Option<Vec<u8>> {
        if self.is_empty() && !self.data.is_empty() {
            Some(std::mem::take(&mut self.data))
        } else {
            None
        }
    }

    /// Take `storage` as the buffer if this one has none.
    pub fn adopt(&mut self, storage: Vec<u8>) {
        if self.data.is_empty() {
            self.data = storage;
            self.start = 0;
            self.end = 0;
        }
    }

    pub fn has_storage(&self) -> bool {
        !self.data.is_empty()
    }

    /// Mark `n` bytes of [`ReadBuf::spare`] as received.
    pub fn commit(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.data.len());
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.commit(bytes.len());
    }
}
