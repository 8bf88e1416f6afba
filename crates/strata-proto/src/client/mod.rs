//! Client side of the codec: requests out, replies in, for the text, meta
//! and binary protocols and the UDP frame header. The load generator
//! (`strata-bench`) and the tests compose requests and validate every reply
//! with these functions; the server side lives in the sibling modules.
//!
//! Encoders append to a caller's `Vec<u8>` (no allocation beyond its growth).
//! Decoders are push-style and zero-copy, like the server's parser: given the
//! bytes read so far they return `Status::Partial` ("read more", never an
//! error), or one complete reply item borrowing from the buffer plus the
//! number of bytes it used. A `ReplyError` means the stream is out of step
//! and the connection must be dropped.
//!
//! A reply *item* is one unit of the wire: a `VALUE` block, an `END`, a meta
//! `VA` with its data, one binary response packet. A request's whole reply
//! (a multi-get's hits and its terminator) is a sequence of items; which
//! items end it is the caller's knowledge, since it knows what it sent.

pub mod binary;
pub mod meta;
pub mod text;
pub mod udp;

/// Longest reply line the decoders accept before declaring the stream
/// broken: memcached's longest line is a `VALUE` header with a 250-byte key.
pub const MAX_LINE_BYTES: usize = 2048;

/// Outcome of decoding from a partly filled buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status<T> {
    /// One complete item and the bytes it took from the front of the buffer.
    Complete(T, usize),
    /// Not enough bytes yet; nothing was consumed.
    Partial,
}

/// A reply the client cannot make sense of: the connection is out of step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// A line longer than [`MAX_LINE_BYTES`] without its `\r\n`.
    LineTooLong,
    /// A line that is not a reply this protocol can send.
    UnknownReply,
    /// A reply line whose fields do not parse (bad number, missing token).
    BadFormat,
    /// A data block not followed by `\r\n`.
    BadDataTerminator,
    /// A value or body longer than the caller's limit.
    TooLarge,
    /// A binary packet with a request magic or impossible lengths.
    BadPacket,
}

/// Find the first `\r\n` in `buf`: the line without it, and the bytes used.
pub(crate) fn take_line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let window = &buf[..buf.len().min(MAX_LINE_BYTES)];
    // The first `\r\n`: a SIMD scan for each `\n`, then a look behind it.
    let mut from = 0;
    while let Some(at) = memchr::memchr(b'\n', &window[from..]) {
        let nl = from + at;
        if nl > 0 && window[nl - 1] == b'\r' {
            return Ok(Some((&buf[..nl - 1], nl + 1)));
        }
        from = nl + 1;
    }
    if buf.len() >= MAX_LINE_BYTES {
        Err(ReplyError::LineTooLong)
    } else {
        Ok(None)
    }
}

/// Parse an unsigned decimal with no sign, no spaces and no overflow.
pub(crate) fn parse_u64(token: &[u8]) -> Option<u64> {
    if token.is_empty() || token.len() > 20 {
        return None;
    }
    if token.len() < 20 {
        // Nineteen digits cannot overflow: no checked arithmetic per digit.
        let mut n = 0u64;
        for &b in token {
            let digit = b.wrapping_sub(b'0');
            if digit >= 10 {
                return None;
            }
            n = n * 10 + u64::from(digit);
        }
        return Some(n);
    }
    token.iter().try_fold(0u64, |acc, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Append `n` in decimal without going through `fmt`.
pub(crate) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The data block of `len` bytes at the front of `buf`, then `\r\n`; a
/// declared length over `max_value_bytes` is refused before any buffering.
pub(crate) fn take_data(buf: &[u8], len: u64, max_value_bytes: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let len = usize::try_from(len).map_err(|_| ReplyError::TooLarge)?;
    if len > max_value_bytes {
        return Err(ReplyError::TooLarge);
    }
    let need = len.checked_add(2).ok_or(ReplyError::TooLarge)?;
    if buf.len() < need {
        return Ok(None);
    }
    if &buf[len..need] != b"\r\n" {
        return Err(ReplyError::BadDataTerminator);
    }
    Ok(Some((&buf[..len], need)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_end_at_the_first_crlf() {
        assert_eq!(take_line(b"END\r\nX").unwrap(), Some((&b"END"[..], 5)));
        assert_eq!(take_line(b"a\nb\r\r\n").unwrap(), Some((&b"a\nb\r"[..], 6)));
        assert_eq!(take_line(b"\n\r\n").unwrap(), Some((&b"\n"[..], 3)));
        assert_eq!(take_line(b"abc\r").unwrap(), None);
        assert_eq!(take_line(b"abc\n").unwrap(), None);
        let mut long = vec![b'x'; MAX_LINE_BYTES - 1];
        long.extend_from_slice(b"\r\n");
        assert!(take_line(&long).is_err(), "the CRLF must lie within the first MAX_LINE_BYTES");
    }

    #[test]
    fn decimal_round_trip() {
        for n in [0u64, 7, 10, 99, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(parse_u64(&out), Some(n));
        }
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"9999999999999999999"), Some(9_999_999_999_999_999_999));
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b"1 2"), None);
    }

    #[test]
    fn lines_and_data() {
        assert_eq!(take_line(b"END\r\nx"), Ok(Some((&b"END"[..], 5))));
        assert_eq!(take_line(b"EN"), Ok(None));
        assert_eq!(take_line(&[b'a'; MAX_LINE_BYTES]), Err(ReplyError::LineTooLong));
        assert_eq!(take_data(b"abc\r\n", 3, 3), Ok(Some((&b"abc"[..], 5))));
        assert_eq!(take_data(b"abc\r", 3, 3), Ok(None));
        assert_eq!(take_data(b"abcd\r\n", 3, 3), Err(ReplyError::BadDataTerminator));
        assert_eq!(take_data(b"abc\r\n", 3, 2), Err(ReplyError::TooLarge));
    }
}
