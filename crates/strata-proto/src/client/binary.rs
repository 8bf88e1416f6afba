//! Binary protocol, client side: request packets out, response packets in
//! (`/usr/include/memcached/protocol_binary.h`; header layout in
//! [`crate::binary`]).
//!
//! ```text
//!  GET    key                    -> status 0, extras = flags (4), value
//!                                   status 1 (KEY_ENOENT) on a miss
//!  GETKQ  key (x N), then NOOP   -> a GETK-style packet per hit (key echoed),
//!                                   nothing per miss, then NOOP's answer
//!  SET    extras = flags (4) + exptime (4), key, value
//!                                -> status 0 and the new CAS
//! ```
//!
//! Every request carries a caller-chosen `opaque` that the server echoes, so
//! the caller can check replies line up with what it sent.

use super::{ReplyError, Status};
use crate::binary::{Header, Opcode, HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC};

/// One response packet, borrowing its body from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub opcode: u8,
    /// Response status (`protocol_binary_response_status`), 0 = success.
    pub status: u16,
    pub opaque: u32,
    pub cas: u64,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl Response<'_> {
    /// The client flags a get returns in its 4 bytes of extras.
    pub fn flags(&self) -> Option<u32> {
        let e: [u8; 4] = self.extras.try_into().ok()?;
        Some(u32::from_be_bytes(e))
    }
}

fn request(out: &mut Vec<u8>, opcode: Opcode, opaque: u32, extras: &[u8], key: &[u8], value_len: usize) {
    let body_len = extras.len() + key.len() + value_len;
    Header {
        magic: REQUEST_MAGIC,
        opcode: opcode as u8,
        key_len: u16::try_from(key.len()).expect("key length fits u16"),
        extras_len: u8::try_from(extras.len()).expect("extras fit u8"),
        data_type: 0,
        vbucket: 0,
        body_len: u32::try_from(body_len).expect("body fits u32"),
        opaque,
        cas: 0,
    }
    .write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
}

/// A key-only request: `Get`, `GetQ`, `GetK`, `GetKQ`, `Delete`...
pub fn encode_key_request(out: &mut Vec<u8>, opcode: Opcode, key: &[u8], opaque: u32) {
    request(out, opcode, opaque, &[], key, 0);
}

/// `Noop`, the usual terminator of a batch of quiet gets.
pub fn encode_noop(out: &mut Vec<u8>, opaque: u32) {
    request(out, Opcode::Noop, opaque, &[], &[], 0);
}

/// The header, extras and key of a `Set` (or `SetQ` when `quiet`); the
/// caller appends exactly `value_len` value bytes.
pub fn encode_set_header(
    out: &mut Vec<u8>,
    key: &[u8],
    value_len: usize,
    flags: u32,
    exptime: u32,
    opaque: u32,
    quiet: bool,
) {
    let mut extras = [0u8; 8];
    extras[..4].copy_from_slice(&flags.to_be_bytes());
    extras[4..].copy_from_slice(&exptime.to_be_bytes());
    let opcode = if quiet { Opcode::SetQ } else { Opcode::Set };
    request(out, opcode, opaque, &extras, key, value_len);
}

/// A whole `Set` request.
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], value: &[u8], flags: u32, exptime: u32, opaque: u32) {
    encode_set_header(out, key, value.len(), flags, exptime, opaque, false);
    out.extend_from_slice(value);
}

/// Decode one response packet from the front of `buf`; `max_body_bytes`
/// bounds the body a header may announce.
pub fn parse_response(buf: &[u8], max_body_bytes: usize) -> Result<Status<Response<'_>>, ReplyError> {
    let Some(h) = Header::parse(buf) else { return Ok(Status::Partial) };
    if h.magic != RESPONSE_MAGIC {
        return Err(ReplyError::BadPacket);
    }
    let body_len = h.body_len as usize;
    if body_len > max_body_bytes {
        return Err(ReplyError::TooLarge);
    }
    let (extras_len, key_len) = (usize::from(h.extras_len), usize::from(h.key_len));
    if extras_len + key_len > body_len {
        return Err(ReplyError::BadPacket);
    }
    let Some(body) = buf.get(HEADER_LEN..HEADER_LEN + body_len) else { return Ok(Status::Partial) };
    let (extras, rest) = body.split_at(extras_len);
    let (key, value) = rest.split_at(key_len);
    let response = Response { opcode: h.opcode, status: h.vbucket, opaque: h.opaque, cas: h.cas, extras, key, value };
    Ok(Status::Complete(response, HEADER_LEN + body_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::write_response;

    #[test]
    fn set_request_matches_the_spec_layout() {
        let mut out = Vec::new();
        encode_set(&mut out, b"k", b"vv", 0xdeadbeef, 10, 7);
        assert_eq!(out.len(), HEADER_LEN + 8 + 1 + 2);
        let h = Header::parse(&out).unwrap();
        assert_eq!((h.magic, h.opcode, h.key_len, h.extras_len, h.body_len, h.opaque), (0x80, 0x01, 1, 8, 11, 7));
        assert_eq!(&out[HEADER_LEN..HEADER_LEN + 4], &0xdeadbeefu32.to_be_bytes());
        assert_eq!(&out[HEADER_LEN + 8..], b"kvv");
    }

    #[test]
    fn parses_what_the_server_side_writes() {
        let mut wire = Vec::new();
        let flags = 5u32.to_be_bytes();
        write_response(&mut wire, Opcode::GetK as u8, crate::binary::Status::Success, 42, 99, &flags, b"key", b"value");
        let Ok(Status::Complete(r, n)) = parse_response(&wire, 1 << 20) else { panic!() };
        assert_eq!(n, wire.len());
        assert_eq!((r.opcode, r.status, r.opaque, r.cas), (Opcode::GetK as u8, 0, 42, 99));
        assert_eq!((r.flags(), r.key, r.value), (Some(5), &b"key"[..], &b"value"[..]));
        for cut in 0..wire.len() {
            assert_eq!(parse_response(&wire[..cut], 1 << 20), Ok(Status::Partial));
        }
    }

    #[test]
    fn rejects_broken_packets() {
        let mut wire = Vec::new();
        encode_noop(&mut wire, 1);
        assert_eq!(parse_response(&wire, 100), Err(ReplyError::BadPacket));
        wire[0] = RESPONSE_MAGIC;
        wire[4] = 3; // extras longer than the (empty) body
        assert_eq!(parse_response(&wire, 100), Err(ReplyError::BadPacket));
    }
}
