//! Meta protocol, client side: `mg`, `ms`, `mn` requests and the two-letter
//! replies of memcached 1.6.
//!
//! ```text
//!  mg <key> v f k [q]\r\n             ->  VA <bytes> f<flags> k<key>\r\n<data>\r\n
//!                                         EN\r\n                  (miss; none with q)
//!  ms <key> <bytes> F<flags> T<ttl> [q]\r\n<data>\r\n
//!                                     ->  HD\r\n | NS\r\n | EX\r\n | NF\r\n
//!  mn\r\n                             ->  MN\r\n                  (ends a quiet batch)
//! ```
//!
//! A batch of quiet `mg ... q` ended by `mn` is the meta multi-get: hits
//! answer in order, misses are silent, `MN` closes the batch. Reply flags
//! are kept as the raw token list ([`ReturnFlags`]) and looked up on demand.

use super::{parse_u64, push_decimal, take_data, take_line, ReplyError, Status};

/// One reply item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `VA`: a hit with its value.
    Value { flags: ReturnFlags<'a>, data: &'a [u8] },
    /// `HD`: success without a value.
    Header(ReturnFlags<'a>),
    /// `EN`: miss.
    Miss,
    NotStored,
    Exists,
    NotFound,
    /// `MN`: the answer to `mn`.
    NoOp,
    Error,
    ClientError(&'a [u8]),
    ServerError(&'a [u8]),
}

/// The flag tokens after a reply code, e.g. `f5 k<key> c123`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReturnFlags<'a>(pub &'a [u8]);

impl<'a> ReturnFlags<'a> {
    /// The token for return flag `flag`, without its letter.
    pub fn get(&self, flag: u8) -> Option<&'a [u8]> {
        self.0.split(|&b| b == b' ').find(|t| t.first() == Some(&flag)).map(|t| &t[1..])
    }

    /// `f`: the item's client flags.
    pub fn client_flags(&self) -> Option<u32> {
        self.get(b'f').and_then(parse_u64).and_then(|f| u32::try_from(f).ok())
    }

    /// `k`: the key (plain, not base64).
    pub fn key(&self) -> Option<&'a [u8]> {
        self.get(b'k')
    }
}

/// `mg <key> <flags>\r\n`, `flags` given as the wire tokens (e.g. `b"v f k q"`).
pub fn encode_mg(out: &mut Vec<u8>, key: &[u8], flags: &[u8]) {
    out.extend_from_slice(b"mg ");
    out.extend_from_slice(key);
    if !flags.is_empty() {
        out.push(b' ');
        out.extend_from_slice(flags);
    }
    out.extend_from_slice(b"\r\n");
}

/// The command line of `ms <key> <bytes> F<flags> T<ttl> [q]\r\n`; the caller
/// appends `data_len` bytes and `\r\n` (or uses [`encode_ms`]).
pub fn encode_ms_header(out: &mut Vec<u8>, key: &[u8], data_len: usize, client_flags: u32, ttl_s: u32, quiet: bool) {
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_decimal(out, data_len as u64);
    out.extend_from_slice(b" F");
    push_decimal(out, u64::from(client_flags));
    out.extend_from_slice(b" T");
    push_decimal(out, u64::from(ttl_s));
    if quiet {
        out.extend_from_slice(b" q");
    }
    out.extend_from_slice(b"\r\n");
}

/// A whole `ms` request.
pub fn encode_ms(out: &mut Vec<u8>, key: &[u8], data: &[u8], client_flags: u32, ttl_s: u32, quiet: bool) {
    encode_ms_header(out, key, data.len(), client_flags, ttl_s, quiet);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `mn\r\n`.
pub fn encode_mn(out: &mut Vec<u8>) {
    out.extend_from_slice(b"mn\r\n");
}

/// Decode one reply item from the front of `buf`.
pub fn parse_reply(buf: &[u8], max_value_bytes: usize) -> Result<Status<Reply<'_>>, ReplyError> {
    let Some((line, used)) = take_line(buf)? else { return Ok(Status::Partial) };
    let (code, rest) = match line.iter().position(|&b| b == b' ') {
        Some(space) => (&line[..space], &line[space + 1..]),
        None => (line, &b""[..]),
    };
    let reply = match code {
        b"VA" => return parse_value(rest, used, buf, max_value_bytes),
        b"HD" => Reply::Header(ReturnFlags(rest)),
        b"EN" => Reply::Miss,
        b"NS" => Reply::NotStored,
        b"EX" => Reply::Exists,
        b"NF" => Reply::NotFound,
        b"MN" => Reply::NoOp,
        b"ERROR" => Reply::Error,
        b"CLIENT_ERROR" => Reply::ClientError(rest),
        b"SERVER_ERROR" => Reply::ServerError(rest),
        _ => return Err(ReplyError::UnknownReply),
    };
    Ok(Status::Complete(reply, used))
}

fn parse_value<'a>(
    rest: &'a [u8],
    line_len: usize,
    buf: &'a [u8],
    max_value_bytes: usize,
) -> Result<Status<Reply<'a>>, ReplyError> {
    let (size, flags) = match rest.iter().position(|&b| b == b' ') {
        Some(space) => (&rest[..space], &rest[space + 1..]),
        None => (rest, &b""[..]),
    };
    let len = parse_u64(size).ok_or(ReplyError::BadFormat)?;
    match take_data(&buf[line_len..], len, max_value_bytes)? {
        None => Ok(Status::Partial),
        Some((data, used)) => {
            Ok(Status::Complete(Reply::Value { flags: ReturnFlags(flags), data }, line_len + used))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(buf: &[u8]) -> (Reply<'_>, usize) {
        match parse_reply(buf, 1 << 20) {
            Ok(Status::Complete(r, n)) => (r, n),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn encodes() {
        let mut out = Vec::new();
        encode_mg(&mut out, b"key", b"v f k q");
        encode_ms(&mut out, b"key", b"abc", 7, 0, false);
        encode_mn(&mut out);
        assert_eq!(out, b"mg key v f k q\r\nms key 3 F7 T0\r\nabc\r\nmn\r\n");
    }

    #[test]
    fn quiet_batch_reply() {
        let wire = b"VA 3 f7 kkey\r\nabc\r\nMN\r\n";
        let (r, n) = one(wire);
        let Reply::Value { flags, data } = r else { panic!("{r:?}") };
        assert_eq!((data, flags.client_flags(), flags.key()), (&b"abc"[..], Some(7), Some(&b"key"[..])));
        assert_eq!(one(&wire[n..]), (Reply::NoOp, 4));
        for cut in 0..n {
            assert_eq!(parse_reply(&wire[..cut], 1 << 20), Ok(Status::Partial));
        }
    }

    #[test]
    fn status_codes() {
        assert_eq!(one(b"HD\r\n").0, Reply::Header(ReturnFlags(b"")));
        assert_eq!(one(b"EN\r\n").0, Reply::Miss);
        assert_eq!(one(b"NS\r\n").0, Reply::NotStored);
        assert_eq!(one(b"SERVER_ERROR out of memory\r\n").0, Reply::ServerError(b"out of memory"));
        assert_eq!(parse_reply(b"ZZ\r\n", 10), Err(ReplyError::UnknownReply));
        assert_eq!(parse_reply(b"VA x\r\n", 10), Err(ReplyError::BadFormat));
        assert_eq!(parse_reply(b"VA 20\r\n", 10), Err(ReplyError::TooLarge));
    }
}
