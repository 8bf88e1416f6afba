//! One TLS connection's rustls state, between the socket and the
//! connection's plaintext buffers.
//!
//! ```text
//!  ciphertext in ─ receive ─► rustls (deframe, decrypt, handshake) ─► Conn.input (plaintext)
//!  Conn.out (plaintext) ─ seal ─► rustls (encrypt, ≤ ssl_wbuf_size a pass) ─► ciphertext out
//! ```
//!
//! Nothing here blocks or touches a socket but [`TlsSession::write_to`]
//! (epoll's non-blocking write): the handshake moves on each time
//! ciphertext arrives or can leave, like any other connection state.
//! rustls bounds its own buffers (one record in, 64 KiB of ciphertext out),
//! and plaintext is moved into the connection's input as soon as it is
//! decrypted, where the worker's input limit applies as for plain clients.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection};

use super::config::TlsStats;
use crate::read_buf::ReadBuf;

/// Why a TLS connection must close (already counted in `stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Before the handshake finished: `ssl_handshake_errors`.
    Handshake,
    /// After it: `ssl_proto_errors`.
    Protocol,
}

/// What [`TlsSession::receive`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    Open,
    /// The peer sent close_notify: answer what came before, then close.
    Closed,
}

pub struct TlsSession {
    conn: ServerConnection,
    stats: Arc<TlsStats>,
    /// Clock second the connection was accepted (handshake timeout).
    started: u32,
    wbuf_bytes: usize,
    /// The client certificate's subject CN, once the handshake is done.
    peer_cn: Option<Box<str>>,
    established: bool,
}

const PLAINTEXT_CHUNK: usize = 16 * 1024;

impl TlsSession {
    pub fn new(config: Arc<ServerConfig>, stats: Arc<TlsStats>, now: u32, wbuf_bytes: usize) -> Option<TlsSession> {
        let conn = ServerConnection::new(config).ok()?;
        Some(TlsSession { conn, stats, started: now, wbuf_bytes: wbuf_bytes.max(1024), peer_cn: None, established: false })
    }

    /// Feed ciphertext; the plaintext it carries is appended to `input`.
    /// Err: the connection must close (an alert may be waiting to go out).
    pub fn receive(&mut self, mut data: &[u8], input: &mut ReadBuf) -> Result<Received, Fault> {
        let mut state = Received::Open;
        while !data.is_empty() {
            if self.conn.read_tls(&mut data).is_err() {
                return Err(self.fault());
            }
            if self.conn.process_new_packets().is_err() {
                return Err(self.fault());
            }
            if !self.established && !self.conn.is_handshaking() {
                self.established = true;
                self.peer_cn = self.conn.peer_certificates().and_then(|c| c.first()).and_then(|c| super::common_name(c));
            }
            loop {
                let spare = input.spare(PLAINTEXT_CHUNK);
                match self.conn.reader().read(spare) {
                    Ok(0) => {
                        state = Received::Closed;
                        break;
                    }
                    Ok(n) => input.commit(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return Err(self.fault()),
                }
            }
        }
        Ok(state)
    }

    fn fault(&self) -> Fault {
        if self.established {
            self.stats.proto_errors.fetch_add(1, Ordering::Relaxed);
            Fault::Protocol
        } else {
            self.stats.handshake_errors.fetch_add(1, Ordering::Relaxed);
            Fault::Handshake
        }
    }

    /// Count a handshake that ran out of time; the caller closes.
    pub fn handshake_expired(&self, now: u32, timeout_secs: u32) -> bool {
        // Strictly more whole clock seconds than the timeout: never early.
        if self.established || now.saturating_sub(self.started) <= timeout_secs {
            return false;
        }
        self.stats.handshake_errors.fetch_add(1, Ordering::Relaxed);
        true
    }

    pub fn is_established(&self) -> bool {
        self.established
    }

    /// The verified client certificate's CN (memcached's `ssl_get_peer_cn`).
    pub fn peer_cn(&self) -> Option<&str> {
        self.peer_cn.as_deref()
    }

    /// Ciphertext is waiting to be sent (handshake messages, alerts, or
    /// sealed replies).
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Encrypt up to `ssl_wbuf_size` bytes of `plain` (less when rustls'
    /// outgoing buffer is full); returns how many were taken.
    pub fn seal(&mut self, plain: &[u8]) -> usize {
        let n = plain.len().min(self.wbuf_bytes);
        self.conn.writer().write(&plain[..n]).unwrap_or(0)
    }

    /// Encrypt all of `plain` and move every pending ciphertext byte into
    /// `cipher` (io_uring: the send buffer the ring will own).
    pub fn seal_all(&mut self, mut plain: &[u8], cipher: &mut Vec<u8>) {
        loop {
            self.drain_into(cipher);
            if plain.is_empty() {
                return;
            }
            let n = self.seal(plain);
            if n == 0 && !self.conn.wants_write() {
                return; // cannot happen with a live session; never spin
            }
            plain = &plain[n..];
        }
    }

    /// Move pending ciphertext into `cipher`.
    pub fn drain_into(&mut self, cipher: &mut Vec<u8>) {
        while self.conn.wants_write() {
            if self.conn.write_tls(cipher).is_err() {
                return;
            }
        }
    }

    /// Write pending ciphertext to a non-blocking socket: bytes written,
    /// `WouldBlock` when it is full.
    pub fn write_to(&mut self, socket: &mut dyn Write) -> io::Result<usize> {
        let mut total = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(socket) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && total > 0 => return Ok(total),
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    /// Queue close_notify (a clean close).
    pub fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// A connection closes: best effort, without blocking, at a pending
    /// alert, or close_notify.
    pub fn goodbye(&mut self, socket: &mut dyn Write) {
        if self.is_established() {
            self.close_notify();
        }
        let _ = self.write_to(socket);
    }
}
