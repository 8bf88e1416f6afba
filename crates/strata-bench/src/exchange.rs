//! One request and its reply, per protocol: how an [`Op`] is written with
//! `strata_proto::client`, and how the reply items that come back are
//! matched to it and validated.
//!
//! | op            | text             | meta                        | binary                   |
//! |---------------|------------------|-----------------------------|--------------------------|
//! | get, 1 key    | `get k` .. `END` | `mg k v f` -> `VA`/`EN`     | `GET` -> status 0/1      |
//! | get, N keys   | `get k1..kN`     | `mg ki v f k q` xN, `mn`    | `GETKQ` xN, `NOOP`       |
//! | set           | `set` -> STORED  | `ms k n F T0` -> `HD`       | `SET` -> status 0        |
//!
//! Hits of a multi-get come back in request order, misses are absent, so a
//! returned key must match a requested one at or after `cursor`: a key out
//! of order or not asked for is an `UnexpectedReply`. UDP carries the text
//! protocol, so it uses the text rows.

use crate::keyspace::{Keyspace, Mismatch};
use crate::mix::Op;
use crate::tally::{ErrorKind, Tally};
use crate::workload::Protocol;
use std::time::Instant;
use strata_proto::binary::Opcode;
use strata_proto::client::{binary, meta, text, Status};

/// A request sent and not yet fully answered.
pub struct Pending {
    pub op: Op,
    /// Latency is measured from here: the send time in closed loop, the
    /// scheduled time in open loop.
    pub start: Instant,
    pub opaque: u32,
    cursor: usize,
    hits: u64,
}

impl Pending {
    pub fn new(op: Op, start: Instant, opaque: u32) -> Pending {
        Pending { op, start, opaque, cursor: 0, hits: 0 }
    }
}

/// Progress through a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// More bytes needed; nothing consumed.
    Partial,
    /// An item of a longer reply, this many bytes.
    Item(usize),
    /// The reply's last item, this many bytes: the request is complete.
    Done(usize),
}

/// Everything the exchange needs that does not change during a run.
pub struct Codec {
    pub protocol: Protocol,
    pub keys: Keyspace,
    /// Largest value or binary body accepted: the size spec's maximum plus
    /// room for a key and extras.
    max_reply_bytes: usize,
    scratch: Vec<u8>,
    /// Text: `get <key>\r\n` of every key, built once (`GET_LINES_MAX`
    /// bytes at most), so a single-key get is one copy, and its reply's
    /// key is compared with these bytes instead of parsed.
    get_lines: Option<Vec<u8>>,
}

/// The largest table of prebuilt get lines (else they are encoded per
/// request).
const GET_LINES_MAX: usize = 16 << 20;

impl Codec {
    pub fn new(protocol: Protocol, keys: Keyspace) -> Codec {
        let max_reply_bytes = keys.sizes.max() as usize + 512;
        let stride = keys.key_size + 6;
        let get_lines = (matches!(protocol, Protocol::Text | Protocol::Udp) && (keys.key_count as usize).saturating_mul(stride) <= GET_LINES_MAX)
            .then(|| {
                let mut lines = Vec::with_capacity(keys.key_count as usize * stride);
                for k in 0..keys.key_count {
                    text::encode_get(&mut lines, std::iter::empty(), false);
                    lines.truncate(lines.len() - 2);
                    lines.push(b' ');
                    keys.write_key(k, &mut lines);
                    lines.extend_from_slice(b"\r\n");
                }
                lines
            });
        Codec { protocol, keys, max_reply_bytes, scratch: Vec::new(), get_lines }
    }

    /// The prebuilt `get <key>\r\n` of key `k`.
    fn get_line(&self, k: u32) -> Option<&[u8]> {
        let stride = self.keys.key_size + 6;
        self.get_lines.as_ref().map(|lines| &lines[k as usize * stride..(k as usize + 1) * stride])
    }

    /// Key `k`'s bytes in its prebuilt get line.
    fn line_key(&self, k: u32) -> Option<&[u8]> {
        self.get_line(k).map(|line| &line[4..4 + self.keys.key_size])
    }

    /// Append the request for `op` to `out`.
    pub fn encode(&mut self, op: &Op, opaque: u32, out: &mut Vec<u8>) {
        if let Op::Get { keys } = op {
            if let Some(line) = keys.first().filter(|_| keys.len() == 1).and_then(|&k| self.get_line(k)) {
                out.extend_from_slice(line);
                return;
            }
        }
        let ks = &self.keys;
        let scratch = &mut self.scratch;
        scratch.clear();
        match op {
            Op::Get { keys } => {
                keys.iter().for_each(|&k| ks.write_key(k, scratch));
                let each = scratch.chunks(ks.key_size);
                match (self.protocol, keys.len()) {
                    (Protocol::Text | Protocol::Udp, _) => text::encode_get(out, each, false),
                    (Protocol::Meta, 1) => meta::encode_mg(out, scratch, b"v f"),
                    (Protocol::Meta, _) => {
                        each.for_each(|k| meta::encode_mg(out, k, b"v f k q"));
                        meta::encode_mn(out);
                    }
                    (Protocol::Binary, 1) => binary::encode_key_request(out, Opcode::Get, scratch, opaque),
                    (Protocol::Binary, _) => {
                        each.for_each(|k| binary::encode_key_request(out, Opcode::GetKQ, k, opaque));
                        binary::encode_noop(out, opaque);
                    }
                }
            }
            &Op::Set { key, len, generation } => {
                ks.write_key(key, scratch);
                let flags = ks.flags(key);
                match self.protocol {
                    Protocol::Text | Protocol::Udp => text::encode_set_header(out, scratch, flags, 0, len as usize, false),
                    Protocol::Meta => meta::encode_ms_header(out, scratch, len as usize, flags, 0, false),
                    Protocol::Binary => binary::encode_set_header(out, scratch, len as usize, flags, 0, opaque, false),
                }
                ks.write_value(key, generation, len, out);
                if self.protocol != Protocol::Binary {
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
    }

    /// Consume the next reply item for `p` from `buf`. `Err` means the
    /// stream is out of step and the connection must go; everything else
    /// (misses, validation failures, server errors) is counted in `tally`.
    pub fn decode(&self, p: &mut Pending, buf: &[u8], tally: &mut Tally) -> Result<Step, ErrorKind> {
        match self.protocol {
            Protocol::Text | Protocol::Udp => self.decode_text(p, buf, tally),
            Protocol::Meta => self.decode_meta(p, buf, tally),
            Protocol::Binary => self.decode_binary(p, buf, tally),
        }
    }

    /// A returned value: match its key against the request and check it.
    fn hit(&self, p: &mut Pending, key: Option<&[u8]>, flags: Option<u32>, data: &[u8], tally: &mut Tally) {
        let Op::Get { keys } = &p.op else {
            tally.error(ErrorKind::UnexpectedReply);
            return;
        };
        let index = match key {
            None => keys.get(p.cursor).copied(),
            Some(k) => self.keys.key_index(k).filter(|i| keys[p.cursor.min(keys.len())..].contains(i)),
        };
        let Some(index) = index else {
            tally.error(ErrorKind::UnexpectedReply);
            return;
        };
        p.cursor += keys[p.cursor..].iter().position(|&k| k == index).unwrap_or(0) + 1;
        p.hits += 1;
        let checked = flags.ok_or(Mismatch::Flags).and_then(|f| self.keys.check_value(index, f, data));
        if checked.is_err() {
            tally.error(ErrorKind::ValueMismatch);
        }
    }

    /// The terminator of a get: every requested key not returned missed.
    fn finish_get(&self, p: &Pending, tally: &mut Tally) {
        if let Op::Get { keys } = &p.op {
            tally.hits += p.hits;
            tally.misses += (keys.len() as u64).saturating_sub(p.hits);
        }
    }

    /// A single-key get's whole reply, `VALUE <key> <flags> <bytes>\r\n`
    /// `<data>\r\nEND\r\n`, read in one step when it is complete and the
    /// key is the one asked for: the same checks and counts as the item by
    /// item path (`hit`, `finish_get`), without parsing the key back.
    /// Anything else (a miss, a partial reply, any surprise) is left to that
    /// path, which reports it as before.
    fn decode_text_hit(&self, p: &Pending, buf: &[u8], tally: &mut Tally) -> Option<usize> {
        let Op::Get { keys } = &p.op else { return None };
        let (&[k], 0) = (&keys[..], p.hits) else { return None };
        let key = self.line_key(k)?;
        let (flags, data, after) = self.flags_and_data(buf.strip_prefix(b"VALUE ")?.strip_prefix(key)?)?;
        let tail = after.strip_prefix(b"\r\nEND\r\n")?;
        if self.keys.check_value(k, flags, data).is_err() {
            tally.error(ErrorKind::ValueMismatch);
        }
        tally.hits += 1;
        Some(buf.len() - tail.len())
    }

    /// What follows `VALUE <key>` in a text hit, ` <flags> <bytes>\r\n<data>`,
    /// when it is all there (no CAS field): the flags, the data and the
    /// bytes after it.
    fn flags_and_data<'a>(&self, rest: &'a [u8]) -> Option<(u32, &'a [u8], &'a [u8])> {
        let rest = rest.strip_prefix(b" ")?;
        let (flags, rest) = leading_decimal(rest, b' ')?;
        let (len, rest) = leading_decimal(rest, b'\r')?;
        let flags = u32::try_from(flags).ok()?;
        let len = usize::try_from(len).ok().filter(|&n| n <= self.max_reply_bytes)?;
        let rest = rest.strip_prefix(b"\n")?;
        Some((flags, rest.get(..len)?, &rest[len..]))
    }

    /// One item of a multi-get's reply, `VALUE <key> <flags> <bytes>\r\n`
    /// `<data>\r\n`, read in one step when it is complete and its key is the
    /// next one asked for (keys come back in order, misses left out): the
    /// same checks and counts as `hit`, without the general line parse.
    /// Anything else (a key further on, a CAS field, a partial item) is
    /// left to that path.
    fn decode_text_item(&self, p: &mut Pending, buf: &[u8], tally: &mut Tally) -> Option<usize> {
        let Op::Get { keys } = &p.op else { return None };
        let want = *keys.get(p.cursor)?;
        let rest = buf.strip_prefix(b"VALUE ")?;
        let key = rest.get(..self.keys.key_size)?;
        if self.keys.key_index(key)? != want {
            return None;
        }
        let (flags, data, after) = self.flags_and_data(&rest[key.len()..])?;
        let tail = after.strip_prefix(b"\r\n")?;
        p.cursor += 1;
        p.hits += 1;
        if self.keys.check_value(want, flags, data).is_err() {
            tally.error(ErrorKind::ValueMismatch);
        }
        Some(buf.len() - tail.len())
    }

    fn decode_text(&self, p: &mut Pending, buf: &[u8], tally: &mut Tally) -> Result<Step, ErrorKind> {
        if let Some(used) = self.decode_text_hit(p, buf, tally) {
            return Ok(Step::Done(used));
        }
        if let Some(used) = self.decode_text_item(p, buf, tally) {
            return Ok(Step::Item(used));
        }
        let (reply, used) = match text::parse_reply(buf, self.max_reply_bytes) {
            Err(_) => return Err(ErrorKind::BadReply),
            Ok(Status::Partial) => return Ok(Step::Partial),
            Ok(Status::Complete(r, n)) => (r, n),
        };
        let is_get = matches!(p.op, Op::Get { .. });
        match reply {
            text::Reply::Value { key, flags, data, .. } if is_get => {
                self.hit(p, Some(key), Some(flags), data, tally);
                return Ok(Step::Item(used));
            }
            text::Reply::End if is_get => self.finish_get(p, tally),
            text::Reply::Stored if !is_get => {}
            text::Reply::ServerError(_) => tally.error(ErrorKind::ServerError),
            text::Reply::ClientError(_) => tally.error(ErrorKind::ClientError),
            _ => tally.error(ErrorKind::UnexpectedReply),
        }
        Ok(Step::Done(used))
    }

    fn decode_meta(&self, p: &mut Pending, buf: &[u8], tally: &mut Tally) -> Result<Step, ErrorKind> {
        let (reply, used) = match meta::parse_reply(buf, self.max_reply_bytes) {
            Err(_) => return Err(ErrorKind::BadReply),
            Ok(Status::Partial) => return Ok(Step::Partial),
            Ok(Status::Complete(r, n)) => (r, n),
        };
        let width = match &p.op {
            Op::Get { keys } => keys.len(),
            Op::Set { .. } => 0,
        };
        match reply {
            meta::Reply::Value { flags, data } if width == 1 => {
                self.hit(p, None, flags.client_flags(), data, tally);
                self.finish_get(p, tally);
            }
            meta::Reply::Value { flags, data } if width > 1 => {
                self.hit(p, Some(flags.key().unwrap_or_default()), flags.client_flags(), data, tally);
                return Ok(Step::Item(used));
            }
            meta::Reply::Miss if width == 1 => self.finish_get(p, tally),
            meta::Reply::NoOp if width > 1 => self.finish_get(p, tally),
            meta::Reply::Header(_) if width == 0 => {}
            meta::Reply::ServerError(_) => tally.error(ErrorKind::ServerError),
            meta::Reply::ClientError(_) => tally.error(ErrorKind::ClientError),
            _ => tally.error(ErrorKind::UnexpectedReply),
        }
        Ok(Step::Done(used))
    }

    fn decode_binary(&self, p: &mut Pending, buf: &[u8], tally: &mut Tally) -> Result<Step, ErrorKind> {
        let (r, used) = match binary::parse_response(buf, self.max_reply_bytes) {
            Err(_) => return Err(ErrorKind::BadReply),
            Ok(Status::Partial) => return Ok(Step::Partial),
            Ok(Status::Complete(r, n)) => (r, n),
        };
        if r.opaque != p.opaque {
            return Err(ErrorKind::BadReply);
        }
        const GET: u8 = Opcode::Get as u8;
        const GETKQ: u8 = Opcode::GetKQ as u8;
        const NOOP: u8 = Opcode::Noop as u8;
        const SET: u8 = Opcode::Set as u8;
        let width = match &p.op {
            Op::Get { keys } => keys.len(),
            Op::Set { .. } => 0,
        };
        match (r.opcode, r.status, width) {
            (GET, 0, 1) => {
                self.hit(p, None, r.flags(), r.value, tally);
                self.finish_get(p, tally);
            }
            (GET, 1, 1) | (NOOP, 0, 2..) | (SET, 0, 0) => self.finish_get(p, tally),
            (GETKQ, 0, 2..) => {
                self.hit(p, Some(r.key), r.flags(), r.value, tally);
                return Ok(Step::Item(used));
            }
            (GETKQ, _, 2..) => {
                // An error for one key of a batch; the batch goes on to NOOP.
                tally.error(ErrorKind::ServerError);
                return Ok(Step::Item(used));
            }
            (_, 0x81 | 0x82 | 0x84 | 0x85 | 0x86, _) => tally.error(ErrorKind::ServerError),
            (_, 0x04, _) => tally.error(ErrorKind::ClientError),
            _ => tally.error(ErrorKind::UnexpectedReply),
        }
        Ok(Step::Done(used))
    }
}

/// The decimal at the front of `buf`, ended by `end` (1-19 digits), and
/// the bytes after `end`.
fn leading_decimal(buf: &[u8], end: u8) -> Option<(u64, &[u8])> {
    let mut n = 0u64;
    for (i, &b) in buf.iter().enumerate().take(20) {
        if b == end && i > 0 {
            return Some((n, &buf[i + 1..]));
        }
        let digit = b.wrapping_sub(b'0');
        if digit >= 10 || i == 19 {
            return None;
        }
        n = n * 10 + u64::from(digit);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::ValueSize;
    use strata_proto::binary::{write_response, Status as BinStatus};

    fn codec(protocol: Protocol) -> Codec {
        Codec::new(protocol, Keyspace { key_size: 10, key_count: 100, sizes: ValueSize::Fixed(40) })
    }

    fn key(c: &Codec, k: u32) -> Vec<u8> {
        let mut out = Vec::new();
        c.keys.write_key(k, &mut out);
        out
    }

    fn value(c: &Codec, k: u32) -> Vec<u8> {
        let mut out = Vec::new();
        c.keys.write_value(k, 9, 40, &mut out);
        out
    }

    /// Feed `wire` to `decode` until the request completes.
    fn answer(c: &Codec, op: Op, opaque: u32, wire: &[u8]) -> (Result<(), ErrorKind>, Tally) {
        let mut p = Pending::new(op, Instant::now(), opaque);
        let mut tally = Tally::default();
        let mut at = 0;
        loop {
            match c.decode(&mut p, &wire[at..], &mut tally) {
                Ok(Step::Item(n)) => at += n,
                Ok(Step::Done(n)) => {
                    assert_eq!(at + n, wire.len(), "reply not consumed exactly");
                    return (Ok(()), tally);
                }
                Ok(Step::Partial) => panic!("partial at {at}"),
                Err(e) => return (Err(e), tally),
            }
        }
    }

    fn text_value(c: &Codec, k: u32, data: &[u8]) -> Vec<u8> {
        let mut wire = format!("VALUE {} {} {}\r\n", String::from_utf8(key(c, k)).unwrap(), c.keys.flags(k), data.len()).into_bytes();
        wire.extend_from_slice(data);
        wire.extend_from_slice(b"\r\n");
        wire
    }

    #[test]
    fn text_multi_get_hits_misses_and_corruption() {
        let mut c = codec(Protocol::Text);
        let op = Op::Get { keys: vec![1, 2, 3].into() };
        let mut req = Vec::new();
        c.encode(&op, 0, &mut req);
        assert_eq!(req, b"get sb:0000001 sb:0000002 sb:0000003\r\n");
        let mut wire = text_value(&c, 1, &value(&c, 1));
        wire.extend(text_value(&c, 3, &value(&c, 3)));
        wire.extend_from_slice(b"END\r\n");
        let (r, t) = answer(&c, op.clone(), 0, &wire);
        assert_eq!((r, t.hits, t.misses, t.error_total()), (Ok(()), 2, 1, 0));

        let mut bad = value(&c, 1);
        bad[20] ^= 1;
        let mut wire = text_value(&c, 1, &bad);
        wire.extend_from_slice(b"END\r\n");
        let (_, t) = answer(&c, op.clone(), 0, &wire);
        assert_eq!(t.errors_of(ErrorKind::ValueMismatch), 1);

        // A key that was not asked for, or one out of order.
        let mut wire = text_value(&c, 3, &value(&c, 3));
        wire.extend(text_value(&c, 1, &value(&c, 1)));
        wire.extend_from_slice(b"END\r\n");
        let (_, t) = answer(&c, op, 0, &wire);
        assert_eq!(t.errors_of(ErrorKind::UnexpectedReply), 1);
    }

    #[test]
    fn single_key_text_get_in_one_step() {
        let mut c = codec(Protocol::Text);
        let op = Op::Get { keys: vec![7].into() };
        let mut req = Vec::new();
        c.encode(&op, 0, &mut req);
        assert_eq!(req, b"get sb:0000007\r\n", "from the prebuilt lines");
        let mut wire = text_value(&c, 7, &value(&c, 7));
        wire.extend_from_slice(b"END\r\n");
        let decode = |wire: &[u8]| {
            let mut p = Pending::new(op.clone(), Instant::now(), 0);
            let mut tally = Tally::default();
            (c.decode(&mut p, wire, &mut tally), tally)
        };
        let (step, t) = decode(&wire);
        assert_eq!((step, t.hits, t.misses, t.error_total()), (Ok(Step::Done(wire.len())), 1, 0, 0));
        // A torn value: counted, the stream stays in step.
        let mut bad = wire.clone();
        let in_value = wire.len() - 10;
        bad[in_value] ^= 1;
        let (step, t) = decode(&bad);
        assert_eq!((step, t.errors_of(ErrorKind::ValueMismatch)), (Ok(Step::Done(wire.len())), 1));
        // Incomplete, or another key: the item-by-item path, as before.
        assert_eq!(decode(&wire[..wire.len() - 1]).0, Ok(Step::Item(wire.len() - 5)));
        let mut other = text_value(&c, 8, &value(&c, 8));
        other.extend_from_slice(b"END\r\n");
        let (step, t) = decode(&other);
        assert_eq!((step, t.errors_of(ErrorKind::UnexpectedReply)), (Ok(Step::Item(other.len() - 5)), 1));
        assert_eq!(decode(b"END\r\n").1.misses, 1);
        assert_eq!(leading_decimal(b"12 x", b' '), Some((12, &b"x"[..])));
        assert_eq!(leading_decimal(b" 12", b' '), None);
        assert_eq!(leading_decimal(b"1a ", b' '), None);
        assert_eq!(leading_decimal(b"99999999999999999999 ", b' '), None);
    }

    #[test]
    fn set_replies() {
        let mut c = codec(Protocol::Meta);
        let op = Op::Set { key: 4, len: 40, generation: 9 };
        let mut req = Vec::new();
        c.encode(&op, 0, &mut req);
        assert!(req.starts_with(b"ms sb:0000004 40 F") && req.ends_with(b"\r\n"));
        assert_eq!(req.len(), req.iter().position(|&b| b == b'\n').unwrap() + 1 + 42);
        assert_eq!(answer(&c, op.clone(), 0, b"HD\r\n").1.error_total(), 0);
        assert_eq!(answer(&c, op.clone(), 0, b"NS\r\n").1.errors_of(ErrorKind::UnexpectedReply), 1);
        assert_eq!(answer(&c, op, 0, b"SERVER_ERROR out of memory\r\n").1.errors_of(ErrorKind::ServerError), 1);
    }

    #[test]
    fn binary_batch_and_out_of_step_opaque() {
        let mut c = codec(Protocol::Binary);
        let op = Op::Get { keys: vec![5, 6].into() };
        let mut req = Vec::new();
        c.encode(&op, 77, &mut req);
        assert_eq!(req.len(), 3 * 24 + 2 * 10);
        let mut wire = Vec::new();
        let flags = c.keys.flags(6).to_be_bytes();
        write_response(&mut wire, Opcode::GetKQ as u8, BinStatus::Success, 77, 1, &flags, &key(&c, 6), &value(&c, 6));
        write_response(&mut wire, Opcode::Noop as u8, BinStatus::Success, 77, 0, &[], &[], &[]);
        let (r, t) = answer(&c, op.clone(), 77, &wire);
        assert_eq!((r, t.hits, t.misses, t.error_total()), (Ok(()), 1, 1, 0));
        assert_eq!(answer(&c, op, 78, &wire).0, Err(ErrorKind::BadReply));
    }
}
