//! memcached's UDP frame header, 8 bytes in front of every datagram.
//!
//! ```text
//!  0       2       4       6       8
//!  +-------+-------+-------+-------+-------------------+
//!  | req id|  seq  | total | rsvd  | payload ...       |   all big-endian u16
//!  +-------+-------+-------+-------+-------------------+
//! ```
//!
//! A request must fit one datagram (`seq 0`, `total 1`); a reply is split
//! into datagrams of at most [`MAX_DATAGRAM`] bytes, header included, each
//! carrying the request id, its sequence number and the total count.

pub const HEADER_LEN: usize = 8;
/// memcached's `UDP_MAX_PAYLOAD_SIZE`: a reply datagram, header included.
pub const MAX_DATAGRAM: usize = 1400;
/// Payload bytes per reply datagram.
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - HEADER_LEN;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    pub request_id: u16,
    pub seq: u16,
    pub total: u16,
    pub reserved: u16,
}

impl UdpHeader {
    pub fn parse(datagram: &[u8]) -> Option<UdpHeader> {
        let h = datagram.get(..HEADER_LEN)?;
        let word = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(UdpHeader { request_id: word(0), seq: word(2), total: word(4), reserved: word(6) })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        for word in [self.request_id, self.seq, self.total, self.reserved] {
            out.extend_from_slice(&word.to_be_bytes());
        }
    }
}

/// Split one reply into datagrams: calls `emit` with each complete datagram
/// (header and payload). An empty reply sends nothing.
pub fn split_reply(request_id: u16, reply: &[u8], scratch: &mut Vec<u8>, emit: &mut dyn FnMut(&[u8])) {
    let total = reply.len().div_ceil(MAX_PAYLOAD);
    for (seq, chunk) in reply.chunks(MAX_PAYLOAD).enumerate() {
        scratch.clear();
        let header = UdpHeader { request_id, seq: seq as u16, total: total.min(usize::from(u16::MAX)) as u16, reserved: 0 };
        header.write(scratch);
        scratch.extend_from_slice(chunk);
        emit(scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_split() {
        let h = UdpHeader { request_id: 7, seq: 1, total: 3, reserved: 0 };
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(UdpHeader::parse(&out), Some(h));
        assert_eq!(UdpHeader::parse(&out[..7]), None);
        let reply = vec![b'x'; 5000];
        let mut sizes = Vec::new();
        let mut seqs = Vec::new();
        split_reply(7, &reply, &mut Vec::new(), &mut |d| {
            sizes.push(d.len());
            seqs.push(UdpHeader::parse(d).unwrap());
        });
        assert_eq!(sizes, vec![1400, 1400, 1400, 5000 - 3 * MAX_PAYLOAD + HEADER_LEN]);
        assert!(seqs.iter().enumerate().all(|(i, h)| h.seq as usize == i && h.total == 4 && h.request_id == 7));
    }
}
