//! A TCP connection as a load channel: an output buffer of encoded requests,
//! an input buffer of reply bytes, and the FIFO of requests in flight
//! (replies arrive in request order on one connection).
//!
//! ```text
//!  out: [ written | not yet written ]      in: [ consumed | unparsed | free ]
//!                 ^ out_pos                               ^ in_pos   ^ in_end
//! ```
//!
//! The input buffer is allocated (and zeroed) once and reused: reads go to
//! `in_end..`, it is compacted when fully consumed or when the free tail is
//! smaller than a read, and doubles only when one reply is larger than it.
//! Interest in writability is registered only while output is pending, so
//! the poll is not woken by every ACK.
//! A connection that breaks (closed, read error, a reply out of step) counts
//! one error of that kind and its requests in flight as aborted, and stays
//! dead for the rest of the run.

use crate::driver::{complete, Channel};
use crate::exchange::{Codec, Pending, Step};
use crate::mix::Op;
use crate::tally::{ErrorKind, Tally};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::VecDeque;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

const READ_CHUNK: usize = 64 * 1024;

pub struct TcpChannel {
    stream: Option<TcpStream>,
    out: Vec<u8>,
    out_pos: usize,
    input: Vec<u8>,
    in_pos: usize,
    in_end: usize,
    token: Token,
    registry: Registry,
    want_write: bool,
    pending: VecDeque<Pending>,
    next_opaque: u32,
    /// `--tls`: the session, and ciphertext read before rustls takes it.
    tls: Option<crate::tls::Session>,
    cipher: Vec<u8>,
}

impl TcpChannel {
    /// Connect (blocking), then switch to non-blocking and register.
    /// With `tls`, the handshake is finished (blocking) first.
    pub fn connect(addr: SocketAddr, registry: &Registry, token: Token, tls: Option<&std::sync::Arc<rustls::ClientConfig>>) -> std::io::Result<TcpChannel> {
        let (session, std_stream) = match tls {
            None => (None, std::net::TcpStream::connect(addr)?),
            Some(config) => {
                let (conn, tcp) = crate::tls::connect_blocking(addr, config)?;
                (Some(crate::tls::Session { conn }), tcp)
            }
        };
        std_stream.set_nodelay(true)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std_stream);
        registry.register(&mut stream, token, Interest::READABLE)?;
        Ok(TcpChannel {
            stream: Some(stream),
            out: Vec::with_capacity(READ_CHUNK),
            out_pos: 0,
            input: vec![0; READ_CHUNK * 2],
            in_pos: 0,
            in_end: 0,
            token,
            registry: registry.try_clone()?,
            want_write: false,
            pending: VecDeque::new(),
            next_opaque: 0,
            cipher: if session.is_some() { vec![0; READ_CHUNK] } else { Vec::new() },
            tls: session,
        })
    }

    fn fail(&mut self, kind: ErrorKind, tally: &mut Tally) {
        tally.error(kind);
        tally.aborted += self.pending.len() as u64;
        self.pending.clear();
        self.stream = None;
    }

    /// Decode every complete reply in the input buffer.
    fn consume(&mut self, codec: &Codec, tally: &mut Tally) -> Result<(), ErrorKind> {
        let now = Instant::now();
        loop {
            let rest = &self.input[self.in_pos..self.in_end];
            let Some(p) = self.pending.front_mut() else {
                return if rest.is_empty() { Ok(()) } else { Err(ErrorKind::BadReply) };
            };
            match codec.decode(p, rest, tally)? {
                Step::Partial => break,
                Step::Item(n) => self.in_pos += n,
                Step::Done(n) => {
                    self.in_pos += n;
                    let p = self.pending.pop_front().expect("front exists");
                    complete(&p, now, tally);
                }
            }
        }
        if self.in_pos == self.in_end {
            (self.in_pos, self.in_end) = (0, 0);
        }
        Ok(())
    }

    /// Make room for one read of up to READ_CHUNK bytes.
    fn make_room(&mut self) {
        if self.input.len() - self.in_end >= READ_CHUNK {
            return;
        }
        if self.in_pos > 0 {
            self.input.copy_within(self.in_pos..self.in_end, 0);
            (self.in_pos, self.in_end) = (0, self.in_end - self.in_pos);
        }
        if self.input.len() - self.in_end < READ_CHUNK {
            let grown = self.input.len() * 2;
            self.input.resize(grown, 0);
        }
    }

    /// Read until the socket is drained; false if it closed or failed. A
    /// short read means the socket buffer was emptied, and new data will
    /// raise a new edge, so it saves the extra `read` that returns EAGAIN.
    fn read_all(&mut self) -> bool {
        loop {
            self.make_room();
            let Some(stream) = self.stream.as_mut() else { return false };
            if let Some(tls) = self.tls.as_mut() {
                match stream.read(&mut self.cipher) {
                    Ok(0) => return false,
                    Ok(n) => match tls.receive(&self.cipher[..n], &mut self.input, self.in_end) {
                        Some(end) => {
                            self.in_end = end;
                            if n < self.cipher.len() {
                                return true;
                            }
                            continue;
                        }
                        None => return false,
                    },
                    Err(e) if e.kind() == IoKind::WouldBlock => return true,
                    Err(e) if e.kind() == IoKind::Interrupted => continue,
                    Err(_) => return false,
                }
            }
            let space = self.input.len() - self.in_end;
            match stream.read(&mut self.input[self.in_end..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.in_end += n;
                    if n < space {
                        return true;
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => return true,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

impl Channel for TcpChannel {
    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn alive(&self) -> bool {
        self.stream.is_some()
    }

    fn issue(&mut self, codec: &mut Codec, op: Op, start: Instant, tally: &mut Tally) {
        self.next_opaque = self.next_opaque.wrapping_add(1);
        codec.encode(&op, self.next_opaque, &mut self.out);
        self.pending.push_back(Pending::new(op, start, self.next_opaque));
        tally.sent += 1;
    }

    fn flush(&mut self, tally: &mut Tally) {
        let Some(stream) = self.stream.as_mut() else { return };
        if let Some(tls) = self.tls.as_mut() {
            // Seal what rustls takes, write ciphertext until done or full.
            loop {
                while self.out_pos < self.out.len() {
                    match tls.conn.writer().write(&self.out[self.out_pos..]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => self.out_pos += n,
                    }
                }
                if !tls.conn.wants_write() {
                    break;
                }
                match tls.conn.write_tls(stream) {
                    Ok(0) => return self.fail(ErrorKind::Closed, tally),
                    Ok(_) => {}
                    Err(e) if e.kind() == IoKind::WouldBlock => break,
                    Err(e) if e.kind() == IoKind::Interrupted => {}
                    Err(_) => return self.fail(ErrorKind::Closed, tally),
                }
            }
        }
        let stream = match self.stream.as_mut() {
            Some(s) => s,
            None => return,
        };
        while self.tls.is_none() && self.out_pos < self.out.len() {
            match stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return self.fail(ErrorKind::Closed, tally),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == IoKind::WouldBlock => break,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(_) => return self.fail(ErrorKind::Closed, tally),
            }
        }
        let blocked = self.out_pos < self.out.len() || self.tls.as_ref().is_some_and(|t| t.conn.wants_write());
        if !blocked {
            self.out.clear();
            self.out_pos = 0;
        }
        if blocked != self.want_write {
            let interest = if blocked { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            if self.registry.reregister(stream, self.token, interest).is_err() {
                return self.fail(ErrorKind::Closed, tally);
            }
            self.want_write = blocked;
        }
    }

    fn ready(&mut self, codec: &Codec, tally: &mut Tally) {
        if self.stream.is_none() {
            return;
        }
        let open = self.read_all();
        if let Err(kind) = self.consume(codec, tally) {
            return self.fail(kind, tally);
        }
        if !open {
            return self.fail(ErrorKind::Closed, tally);
        }
        self.flush(tally);
    }

    fn expire(&mut self, _now: Instant, _tally: &mut Tally) {}

    fn abandon(&mut self, tally: &mut Tally) {
        if !self.pending.is_empty() {
            tally.error(ErrorKind::Timeout);
        }
        tally.timed_out += self.pending.len() as u64;
        self.pending.clear();
    }
}
