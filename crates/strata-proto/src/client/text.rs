//! Text protocol, client side: `get`/`gets`/`set` requests and the reply
//! items memcached 1.6 sends back.
//!
//! ```text
//!  get k1 k2\r\n                      ->  VALUE k1 <flags> <bytes> [<cas>]\r\n
//!                                         <data>\r\n            (one per hit)
//!                                         END\r\n
//!  set k <flags> <exptime> <bytes>\r\n
//!  <data>\r\n                         ->  STORED\r\n | NOT_STORED\r\n | ...
//! ```
//!
//! [`parse_reply`] returns one item at a time; a multi-get's reply ends with
//! its `END`. The data block borrowed in `Value` has been checked to end in
//! `\r\n`, so the stream is in step after every `Complete`.

use super::{parse_u64, push_decimal, take_data, take_line, ReplyError, Status};

/// One reply item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    Value { key: &'a [u8], flags: u32, cas: Option<u64>, data: &'a [u8] },
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// The reply to `incr`/`decr`.
    Number(u64),
    Version(&'a [u8]),
    /// A `STAT name value` line of a `stats` reply (ended by `End`).
    Stat { name: &'a [u8], value: &'a [u8] },
    Error,
    ClientError(&'a [u8]),
    ServerError(&'a [u8]),
}

/// `get k1 k2 ...\r\n` (or `gets` when `cas`).
pub fn encode_get<'k>(out: &mut Vec<u8>, keys: impl IntoIterator<Item = &'k [u8]>, cas: bool) {
    out.extend_from_slice(if cas { b"gets" } else { b"get" });
    for key in keys {
        out.push(b' ');
        out.extend_from_slice(key);
    }
    out.extend_from_slice(b"\r\n");
}

/// `set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n`.
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], flags: u32, exptime: u32, data: &[u8], noreply: bool) {
    encode_set_header(out, key, flags, exptime, data.len(), noreply);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The command line of a `set` alone, for callers that write the data
/// block themselves (straight into the send buffer); they then append
/// `data_len` bytes and `\r\n`.
pub fn encode_set_header(out: &mut Vec<u8>, key: &[u8], flags: u32, exptime: u32, data_len: usize, noreply: bool) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    for n in [u64::from(flags), u64::from(exptime), data_len as u64] {
        out.push(b' ');
        push_decimal(out, n);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

/// Decode one reply item from the front of `buf`. `max_value_bytes` bounds
/// the data block a `VALUE` line may announce.
pub fn parse_reply(buf: &[u8], max_value_bytes: usize) -> Result<Status<Reply<'_>>, ReplyError> {
    // What a get load reads most, ahead of the general match.
    if buf.starts_with(b"END\r\n") {
        return Ok(Status::Complete(Reply::End, 5));
    }
    let Some((line, used)) = take_line(buf)? else { return Ok(Status::Partial) };
    if line.starts_with(b"VALUE ") {
        return parse_value(line, used, buf, max_value_bytes);
    }
    let reply = match line {
        b"END" => Reply::End,
        b"STORED" => Reply::Stored,
        b"NOT_STORED" => Reply::NotStored,
        b"EXISTS" => Reply::Exists,
        b"NOT_FOUND" => Reply::NotFound,
        b"DELETED" => Reply::Deleted,
        b"TOUCHED" => Reply::Touched,
        b"OK" => Reply::Ok,
        b"ERROR" => Reply::Error,
        _ if line.starts_with(b"VALUE ") => return parse_value(line, used, buf, max_value_bytes),
        _ if line.starts_with(b"STAT ") => parse_stat(line)?,
        _ if line.starts_with(b"VERSION ") => Reply::Version(&line[8..]),
        _ if line.starts_with(b"CLIENT_ERROR") => Reply::ClientError(message(line, 12)),
        _ if line.starts_with(b"SERVER_ERROR") => Reply::ServerError(message(line, 12)),
        _ if line.first().is_some_and(u8::is_ascii_digit) => {
            Reply::Number(parse_u64(line).ok_or(ReplyError::BadFormat)?)
        }
        _ => return Err(ReplyError::UnknownReply),
    };
    Ok(Status::Complete(reply, used))
}

fn message(line: &[u8], prefix: usize) -> &[u8] {
    let rest = &line[prefix..];
    rest.strip_prefix(b" ").unwrap_or(rest)
}

fn parse_stat(line: &[u8]) -> Result<Reply<'_>, ReplyError> {
    let rest = &line[5..];
    let space = rest.iter().position(|&b| b == b' ').ok_or(ReplyError::BadFormat)?;
    Ok(Reply::Stat { name: &rest[..space], value: &rest[space + 1..] })
}

fn parse_value<'a>(
    line: &'a [u8],
    line_len: usize,
    buf: &'a [u8],
    max_value_bytes: usize,
) -> Result<Status<Reply<'a>>, ReplyError> {
    // `<key> <flags> <bytes> [<cas>]`, split by single spaces, a word at a
    // time (`find_space`: the fields are short, a `memchr` call each cost
    // more than the search).
    let mut rest = &line[6..];
    let mut field = || {
        let at = crate::text::find_space(rest);
        let (token, next) = if at < rest.len() { (&rest[..at], Some(&rest[at + 1..])) } else { (rest, None) };
        rest = next.unwrap_or(&[]);
        (token, next.is_some())
    };
    let (key, more) = field();
    if key.is_empty() || !more {
        return Err(ReplyError::BadFormat);
    }
    let (flags, more) = field();
    let flags = parse_u64(flags).and_then(|f| u32::try_from(f).ok()).ok_or(ReplyError::BadFormat)?;
    if !more {
        return Err(ReplyError::BadFormat);
    }
    let (len, more) = field();
    let len = parse_u64(len).ok_or(ReplyError::BadFormat)?;
    let cas = if more {
        let (cas, more) = field();
        if more {
            return Err(ReplyError::BadFormat);
        }
        Some(parse_u64(cas).ok_or(ReplyError::BadFormat)?)
    } else {
        None
    };
    match take_data(&buf[line_len..], len, max_value_bytes)? {
        None => Ok(Status::Partial),
        Some((data, used)) => Ok(Status::Complete(Reply::Value { key, flags, cas, data }, line_len + used)),
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
        encode_get(&mut out, [&b"a"[..], b"bc"], false);
        encode_set(&mut out, b"k", 5, 0, b"hello", false);
        encode_set(&mut out, b"k", 0, 10, b"", true);
        assert_eq!(out, b"get a bc\r\nset k 5 0 5\r\nhello\r\nset k 0 10 0 noreply\r\n\r\n");
    }

    #[test]
    fn multi_get_reply_item_by_item() {
        let wire = b"VALUE a 5 3\r\nxyz\r\nVALUE bc 0 0 77\r\n\r\nEND\r\n";
        let (r, n) = one(wire);
        assert_eq!(r, Reply::Value { key: b"a", flags: 5, cas: None, data: b"xyz" });
        let (r, m) = one(&wire[n..]);
        assert_eq!(r, Reply::Value { key: b"bc", flags: 0, cas: Some(77), data: b"" });
        assert_eq!(one(&wire[n + m..]), (Reply::End, 5));
        // Every proper prefix of an item is Partial, never an error.
        for cut in 0..n {
            assert_eq!(parse_reply(&wire[..cut], 1 << 20), Ok(Status::Partial));
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(one(b"STORED\r\n"), (Reply::Stored, 8));
        assert_eq!(one(b"42\r\n").0, Reply::Number(42));
        assert_eq!(one(b"SERVER_ERROR out of memory\r\n").0, Reply::ServerError(b"out of memory"));
        assert_eq!(one(b"CLIENT_ERROR bad data chunk\r\n").0, Reply::ClientError(b"bad data chunk"));
        assert_eq!(one(b"STAT pid 12\r\n").0, Reply::Stat { name: b"pid", value: b"12" });
        assert_eq!(one(b"VERSION 1.6.18\r\n").0, Reply::Version(b"1.6.18"));
    }

    #[test]
    fn rejects_broken_streams() {
        assert_eq!(parse_reply(b"HELLO\r\n", 10), Err(ReplyError::UnknownReply));
        assert_eq!(parse_reply(b"VALUE a x 3\r\n", 10), Err(ReplyError::BadFormat));
        assert_eq!(parse_reply(b"VALUE a 0 3\r\nabcd\r\n", 10), Err(ReplyError::BadDataTerminator));
        assert_eq!(parse_reply(b"VALUE a 0 30\r\n", 10), Err(ReplyError::TooLarge));
        assert_eq!(parse_reply(b"VALUE a 0 3 1 2\r\n", 10), Err(ReplyError::BadFormat));
        for bad in [&b"VALUE a 0 3 \r\n"[..], b"VALUE  a 0 3\r\n", b"VALUE a 0\r\n", b"VALUE a\r\n", b"VALUE \r\n", b"VALUE a 4294967296 1\r\n"] {
            assert_eq!(parse_reply(bad, 10), Err(ReplyError::BadFormat), "{}", String::from_utf8_lossy(bad));
        }
        let (r, n) = one(b"VALUE a 4294967295 1 7\r\nx\r\nEND\r\n");
        assert_eq!((r, n), (Reply::Value { key: b"a", flags: u32::MAX, cas: Some(7), data: b"x" }, 27));
        assert_eq!(parse_reply(b"VALUE a 0 1\r\nx", 10), Ok(Status::Partial));
        assert_eq!(parse_reply(b"END\r", 10), Ok(Status::Partial));
    }
}
