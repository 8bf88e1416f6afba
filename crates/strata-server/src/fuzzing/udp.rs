//! `udp`: request datagrams to reply datagrams, as a worker's UDP socket
//! answers them (`udp::answer`, `udp::each_datagram`).
//!
//! Input: datagrams, each a big-endian u16 length and that many bytes (the
//! last one takes what is left). Checked: a datagram that is not a whole
//! single-datagram request is not answered; every reply datagram is at
//! most 1400 bytes and carries the request's id, its reply object's count
//! and consecutive sequence numbers from 0; a reply object stays within
//! `-o udp_max_reply` (or is the refusal that replaces it).

use strata_proto::udp::{UdpHeader, HEADER_LEN, MAX_DATAGRAM, MAX_PAYLOAD};

use crate::output::Output;
use crate::service::Service;
use crate::Settings;

/// The longest refusal that replaces an oversized reply (a binary error).
const REFUSAL_MAX: usize = 64;

pub fn udp(data: &[u8]) {
    let shared = super::server(Settings::default(), None, None);
    let (mut out, mut scratch) = (Output::datagrams(), Vec::new());
    let limit = shared.core.settings.udp_max_reply_bytes;
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let datagram = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + datagram.len()..];
        let mut svc = Service::new(&shared, 0);
        let header = UdpHeader::parse(datagram);
        let Some(id) = crate::udp::answer(&mut svc, datagram, &mut out, -1) else {
            assert!(header.map_or(true, |h| h.seq != 0 || h.total != 1), "{header:?} was not answered");
            continue;
        };
        let header = header.expect("an answered datagram has a header");
        assert!(header.seq == 0 && header.total == 1 && header.request_id == id);
        let marks = out.marks().to_vec();
        assert!(marks.windows(2).all(|w| w[0] <= w[1]) && marks.last().map_or(true, |&m| m <= out.len()), "marks {marks:?} of {}", out.len());
        // Reply objects, as each_datagram cuts them, re-assembled.
        let mut objects: Vec<(Vec<u8>, u16, u16)> = Vec::new();
        crate::udp::each_datagram(id, &out, &marks, &mut scratch, &mut |d| {
            assert!(d.len() <= MAX_DATAGRAM && d.len() > HEADER_LEN, "a datagram of {} bytes", d.len());
            let h = UdpHeader::parse(d).unwrap();
            assert_eq!((h.request_id, h.reserved), (id, 0));
            match objects.last_mut() {
                Some((bytes, seq, total)) if h.seq == *seq + 1 && h.seq < *total => {
                    assert_eq!(h.total, *total);
                    bytes.extend_from_slice(&d[HEADER_LEN..]);
                    *seq = h.seq;
                }
                _ => {
                    assert_eq!(h.seq, 0, "a reply starts at sequence 0");
                    objects.push((d[HEADER_LEN..].to_vec(), 0, h.total));
                }
            }
        });
        let mut joined = Vec::new();
        for (bytes, last, total) in &objects {
            assert_eq!(usize::from(*last) + 1, usize::from(*total), "a reply object is missing datagrams");
            assert_eq!(bytes.len().div_ceil(MAX_PAYLOAD), usize::from(*total));
            assert!(limit == 0 || bytes.len() <= limit.max(REFUSAL_MAX), "a reply of {} bytes over -o udp_max_reply", bytes.len());
            joined.extend_from_slice(bytes);
        }
        assert!(joined[..] == out[..], "the datagrams do not add up to the replies");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: u16, seq: u16, total: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        UdpHeader { request_id: id, seq, total, reserved: 0 }.write(&mut d);
        d.extend_from_slice(payload);
        let mut out = (d.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&d);
        out
    }

    /// The seeds of `fuzz/corpus/udp`: what memcached's UDP clients send
    /// (`STRATA_WRITE_CORPUS=1` rewrites the files).
    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let bin_get = {
            let mut r = Vec::new();
            strata_proto::binary::Header { magic: 0x80, opcode: 0x00, key_len: 3, extras_len: 0, data_type: 0, vbucket: 0, body_len: 3, opaque: 1, cas: 0 }.write(&mut r);
            r.extend_from_slice(b"foo");
            r
        };
        let big = format!("set big 0 0 5000\r\n{}\r\nget big big big\r\n", "v".repeat(5000));
        vec![
            ("set-get", [frame(1, 0, 1, b"set foo 0 0 3\r\nbar\r\n"), frame(2, 0, 1, b"get foo\r\n")].concat()),
            ("multiget", frame(3, 0, 1, b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nget a b c\r\n")),
            ("meta", frame(4, 0, 1, b"ms m 2 T0\r\nhi\r\nmg m v k c\r\nmn\r\n")),
            ("multi-datagram-request", [frame(5, 0, 2, b"get x\r\n"), frame(5, 1, 2, b"get y\r\n")].concat()),
            ("binary-get", frame(6, 0, 1, &bin_get)),
            ("big-reply", frame(7, 0, 1, big.as_bytes())),
            ("partial-command", frame(8, 0, 1, b"set x 0 0 10\r\nabc")),
            ("short", [vec![0, 4, 0, 1, 0, 0], frame(9, 0, 1, b"version\r\nstats\r\n")].concat()),
        ]
    }

    #[test]
    fn write_corpus() {
        super::super::tests::write_seeds("udp", &seeds());
    }
}
