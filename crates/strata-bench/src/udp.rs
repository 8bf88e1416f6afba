//! A UDP socket as a load channel: text-protocol requests framed with
//! memcached's 8-byte UDP header, each its own datagram with a fresh
//! request id; reply datagrams are reassembled per request id
//! (`strata_proto::client::udp::Reassembly`) and the whole reply is then
//! decoded like a TCP reply. At most `pipeline` requests are outstanding per
//! socket, so a linear search over them is the cheapest lookup.
//!
//! UDP may drop datagrams: a request with no complete reply after
//! `timeout` counts as timed out, and late datagrams for it as strays.

use crate::driver::{complete, Channel};
use crate::exchange::{Codec, Pending, Step};
use crate::mix::Op;
use crate::tally::{ErrorKind, Tally};
use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use std::io::ErrorKind as IoKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use strata_proto::client::udp::{encode_request, Part, Reassembly};

struct Outstanding {
    id: u16,
    sent_at: Instant,
    pending: Pending,
    parts: Reassembly,
}

pub struct UdpChannel {
    socket: UdpSocket,
    outstanding: Vec<Outstanding>,
    next_id: u16,
    timeout: Duration,
    payload: Vec<u8>,
    datagram: Vec<u8>,
    recv: Vec<u8>,
}

impl UdpChannel {
    pub fn connect(addr: SocketAddr, registry: &Registry, token: Token, timeout: Duration) -> std::io::Result<UdpChannel> {
        let bind: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("literal");
        let mut socket = UdpSocket::bind(bind)?;
        socket.connect(addr)?;
        registry.register(&mut socket, token, Interest::READABLE)?;
        Ok(UdpChannel {
            socket,
            outstanding: Vec::new(),
            next_id: 0,
            timeout,
            payload: Vec::new(),
            datagram: Vec::new(),
            recv: vec![0; 65536],
        })
    }

    /// Decode a whole reassembled reply for `o`.
    fn finish(codec: &Codec, mut o: Outstanding, reply: &[u8], tally: &mut Tally) {
        let mut at = 0;
        loop {
            match codec.decode(&mut o.pending, &reply[at..], tally) {
                Ok(Step::Item(n)) => at += n,
                Ok(Step::Done(n)) if at + n == reply.len() => return complete(&o.pending, Instant::now(), tally),
                _ => break,
            }
        }
        // Truncated, trailing bytes, or unparseable: one bad reply.
        tally.error(ErrorKind::BadReply);
        tally.aborted += 1;
    }
}

impl Channel for UdpChannel {
    fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    fn alive(&self) -> bool {
        true
    }

    fn issue(&mut self, codec: &mut Codec, op: Op, start: Instant, tally: &mut Tally) {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        self.payload.clear();
        codec.encode(&op, 0, &mut self.payload);
        self.datagram.clear();
        encode_request(&mut self.datagram, id, &self.payload);
        tally.sent += 1;
        match self.socket.send(&self.datagram) {
            Ok(n) if n == self.datagram.len() => {
                let pending = Pending::new(op, start, 0);
                let o = Outstanding { id, sent_at: Instant::now(), pending, parts: Reassembly::new(id) };
                self.outstanding.push(o);
            }
            _ => {
                tally.error(ErrorKind::Closed);
                tally.aborted += 1;
            }
        }
    }

    fn flush(&mut self, _tally: &mut Tally) {}

    fn ready(&mut self, codec: &Codec, tally: &mut Tally) {
        loop {
            let n = match self.socket.recv(&mut self.recv) {
                Ok(n) => n,
                Err(e) if e.kind() == IoKind::WouldBlock => return,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(_) => return tally.error(ErrorKind::Closed),
            };
            let gram = &self.recv[..n];
            let found = Reassembly::request_id_of(gram).and_then(|id| self.outstanding.iter().position(|o| o.id == id));
            let Some(i) = found else {
                tally.error(ErrorKind::UdpStray);
                continue;
            };
            match self.outstanding[i].parts.push(gram) {
                Ok(Part::Stored | Part::Duplicate) => {}
                Ok(Part::Complete(reply)) => {
                    let o = self.outstanding.swap_remove(i);
                    Self::finish(codec, o, &reply, tally);
                }
                Err(_) => {
                    self.outstanding.swap_remove(i);
                    tally.error(ErrorKind::BadReply);
                    tally.aborted += 1;
                }
            }
        }
    }

    fn expire(&mut self, now: Instant, tally: &mut Tally) {
        let before = self.outstanding.len();
        self.outstanding.retain(|o| now.duration_since(o.sent_at) < self.timeout);
        let expired = (before - self.outstanding.len()) as u64;
        tally.timed_out += expired;
        (0..expired).for_each(|_| tally.error(ErrorKind::Timeout));
    }

    fn abandon(&mut self, tally: &mut Tally) {
        tally.timed_out += self.outstanding.len() as u64;
        (0..self.outstanding.len()).for_each(|_| tally.error(ErrorKind::Timeout));
        self.outstanding.clear();
    }
}
