//! `binary`: the binary protocol's framing and validation
//! (`strata_proto::binary`) and a connection's binary requests
//! (`front::binary::step`) over an in-process store.
//!
//! Input: one byte choosing how the rest arrives in pieces, then the bytes
//! a client sends. Checked: every header's verdict fits its lengths, a
//! request's parts cover its body exactly, the connection never waits for
//! more than a bounded request (a declared length is not an allocation),
//! and the replies are a sequence of whole binary responses.

use strata_proto::binary::{self, Header, Opcode, Request, Verdict, HEADER_LEN};
use strata_proto::KEY_MAX_LENGTH;

use crate::conn::{Conn, Protocol};
use crate::service::Service;
use crate::Settings;

/// Largest body a connection may wait for: extras and a key of the largest
/// lengths a header can declare, and a value of `-I`.
fn max_request(item_size_max: usize) -> usize {
    HEADER_LEN + 255 + KEY_MAX_LENGTH + item_size_max
}

pub fn binary(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    check_headers(stream);
    let shared = super::server(Settings::default(), None, None);
    let mut svc = Service::new(&shared, 0);
    let mut conn = Conn::new(false, None);
    conn.protocol = Protocol::Binary;
    let mut replies = Vec::new();
    let bound = max_request(shared.core.settings.item_size_max);
    for range in super::chunks(seed, stream.len()) {
        conn.input.extend_from_slice(&stream[range]);
        let closed = super::pump(&mut conn, &mut svc, &mut replies);
        assert!(conn.awaiting <= bound.max(conn.input.len()), "waits for {} bytes", conn.awaiting);
        if closed {
            break;
        }
    }
    check_responses(&replies);
}

/// Walk the stream as a sequence of requests, checking each verdict.
fn check_headers(mut rest: &[u8]) {
    while let Some(h) = Header::parse(rest) {
        let (ext, key, body) = (usize::from(h.extras_len), usize::from(h.key_len), h.body_len as usize);
        let verdict = binary::validate(&h, KEY_MAX_LENGTH);
        match verdict {
            Verdict::Corrupt => assert!(ext + key > body, "{h:?} is not corrupt"),
            Verdict::Execute(op) => {
                assert!(ext + key <= body && key <= KEY_MAX_LENGTH, "{h:?} executes");
                assert_eq!(op as u8, h.opcode);
                assert!(Opcode::from_u8(h.opcode).is_some());
            }
            Verdict::Unknown => assert!(Opcode::from_u8(h.opcode).is_none() && ext + key <= body),
            Verdict::ProtocolError => {}
        }
        let Some(payload) = rest.get(HEADER_LEN..HEADER_LEN + body) else { return };
        let req = Request::split(h, payload);
        assert_eq!(req.extras.len() + req.key.len() + req.value.len(), body);
        if verdict != Verdict::Corrupt {
            assert_eq!((req.extras.len(), req.key.len()), (ext, key));
        }
        rest = &rest[HEADER_LEN + body..];
    }
}

/// The replies must be whole responses, one after another.
fn check_responses(mut rest: &[u8]) {
    while !rest.is_empty() {
        let h = Header::parse(rest).unwrap_or_else(|| panic!("a partial response header: {rest:?}"));
        assert_eq!(h.magic, binary::RESPONSE_MAGIC, "{h:?}");
        let body = h.body_len as usize;
        assert!(usize::from(h.extras_len) + usize::from(h.key_len) <= body, "{h:?}");
        assert!(rest.len() >= HEADER_LEN + body, "a response cut short: {h:?}");
        rest = &rest[HEADER_LEN + body..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let body_len = (extras.len() + key.len() + value.len()) as u32;
        Header { magic: 0x80, opcode, key_len: key.len() as u16, extras_len: extras.len() as u8, data_type: 0, vbucket: 0, body_len, opaque: 0xdead, cas: 0 }.write(&mut out);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    /// The seeds of `fuzz/corpus/binary`, as libmemcached and pymemcache
    /// send them (`STRATA_WRITE_CORPUS=1` rewrites the files).
    pub(crate) fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let set_extras = [0, 0, 0, 5, 0, 0, 0, 0];
        let mut huge = request(0x01, &set_extras, b"k", b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut inconsistent = request(0x00, &[], b"key", b"");
        inconsistent[2..4].copy_from_slice(&400u16.to_be_bytes());
        vec![
            ("get-miss", request(0x00, &[], b"foo", b"")),
            ("set-get", [request(0x01, &set_extras, b"foo", b"bar"), request(0x0c, &[], b"foo", b"")].concat()),
            ("getkq-noop", [request(0x0d, &[], b"a", b""), request(0x0d, &[], b"b", b""), request(0x0a, &[], b"", b"")].concat()),
            ("incr", request(0x05, &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], b"n", b"")),
            ("append-delete", [request(0x01, &set_extras, b"x", b"1"), request(0x0e, &[], b"x", b"2"), request(0x04, &[], b"x", b"")].concat()),
            ("touch-gat", [request(0x1c, &[0, 0, 1, 0], b"x", b""), request(0x1d, &[0, 0, 0, 9], b"x", b"")].concat()),
            ("flush-version-stat", [request(0x08, &[0, 0, 0, 0], b"", b""), request(0x0b, &[], b"", b""), request(0x10, &[], b"", b"")].concat()),
            ("huge-body", huge),
            ("key-longer-than-body", inconsistent),
            ("unknown-opcode", request(0x1b, &[], b"", b"skipped")),
            ("quit", [request(0x17, &[], b"", b""), request(0x0a, &[], b"", b"")].concat()),
        ]
    }

    #[test]
    fn write_corpus() {
        super::super::tests::write_seeds("binary", &seeds().into_iter().map(|(n, b)| (n, [&[7u8][..], &b].concat())).collect::<Vec<_>>());
    }
}
