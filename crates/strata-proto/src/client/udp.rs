//! UDP, client side: the 8-byte frame header on a request, and reassembly
//! of a reply that memcached split over several datagrams.
//!
//! ```text
//!  0       2       4       6       8
//!  +-------+-------+-------+-------+-------------------+
//!  | req id|  seq  | total | rsvd  | payload ...       |   all big-endian u16
//!  +-------+-------+-------+-------+-------------------+
//! ```
//!
//! A request is one datagram (`seq 0`, `total 1`). Reply datagrams carry the
//! request id, their index and the count; they may arrive in any order, or
//! not at all (the caller times the request out). [`Reassembly`] holds the
//! parts of one reply until all `total` are there; `total` is bounded by
//! [`MAX_PARTS`] so a hostile header cannot make it allocate without limit.

use super::ReplyError;
use crate::udp::{UdpHeader, HEADER_LEN};

/// Most datagrams one reply may take: 1 MiB values over 1392-byte payloads.
pub const MAX_PARTS: u16 = 1024;

/// Frame `payload` as the single datagram of request `request_id`.
pub fn encode_request(out: &mut Vec<u8>, request_id: u16, payload: &[u8]) {
    UdpHeader { request_id, seq: 0, total: 1, reserved: 0 }.write(out);
    out.extend_from_slice(payload);
}

/// What a received datagram did to a reassembly.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    /// Stored; more parts are missing.
    Stored,
    /// Every part is here: the reply's bytes, in order.
    Complete(Vec<u8>),
    /// A part seen before (the network duplicated it); ignored.
    Duplicate,
}

/// The parts of one reply, indexed by sequence number.
#[derive(Debug)]
pub struct Reassembly {
    request_id: u16,
    parts: Vec<Option<Vec<u8>>>,
    missing: usize,
}

impl Reassembly {
    pub fn new(request_id: u16) -> Reassembly {
        Reassembly { request_id, parts: Vec::new(), missing: 0 }
    }

    /// The request id of `datagram`, if it has a header.
    pub fn request_id_of(datagram: &[u8]) -> Option<u16> {
        UdpHeader::parse(datagram).map(|h| h.request_id)
    }

    /// Add one datagram of this request's reply.
    pub fn push(&mut self, datagram: &[u8]) -> Result<Part, ReplyError> {
        let header = UdpHeader::parse(datagram).ok_or(ReplyError::BadPacket)?;
        let bad = header.request_id != self.request_id
            || header.total == 0
            || header.total > MAX_PARTS
            || header.seq >= header.total
            || (!self.parts.is_empty() && usize::from(header.total) != self.parts.len());
        if bad {
            return Err(ReplyError::BadPacket);
        }
        if self.parts.is_empty() {
            self.parts = vec![None; usize::from(header.total)];
            self.missing = self.parts.len();
        }
        let slot = &mut self.parts[usize::from(header.seq)];
        if slot.is_some() {
            return Ok(Part::Duplicate);
        }
        *slot = Some(datagram[HEADER_LEN..].to_vec());
        self.missing -= 1;
        if self.missing > 0 {
            return Ok(Part::Stored);
        }
        let whole = self.parts.iter_mut().flat_map(|p| p.take().unwrap_or_default()).collect();
        self.parts.clear();
        Ok(Part::Complete(whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::split_reply;

    #[test]
    fn request_frame() {
        let mut out = Vec::new();
        encode_request(&mut out, 0x0102, b"get a\r\n");
        assert_eq!(out, b"\x01\x02\x00\x00\x00\x01\x00\x00get a\r\n");
    }

    #[test]
    fn reassembles_out_of_order_against_the_server_splitter() {
        let reply: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut grams = Vec::new();
        split_reply(9, &reply, &mut Vec::new(), &mut |d| grams.push(d.to_vec()));
        grams.reverse();
        let mut r = Reassembly::new(9);
        let (last, rest) = grams.split_last().unwrap();
        for g in rest {
            assert_eq!(r.push(g), Ok(Part::Stored));
        }
        assert_eq!(r.push(&rest[0]), Ok(Part::Duplicate));
        assert_eq!(r.push(last), Ok(Part::Complete(reply)));
    }

    #[test]
    fn rejects_foreign_and_impossible_headers() {
        let mut r = Reassembly::new(1);
        let mut g = Vec::new();
        encode_request(&mut g, 2, b"x");
        assert_eq!(r.push(&g), Err(ReplyError::BadPacket));
        assert_eq!(r.push(b"\x00\x01\x00\x05\x00\x02\x00\x00"), Err(ReplyError::BadPacket));
        assert_eq!(r.push(b"\x00\x01"), Err(ReplyError::BadPacket));
    }
}
