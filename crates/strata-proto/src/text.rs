//! Line framing and tokenizing for the text and meta protocols.
//!
//! A request is a line ended by `\n`; a `\r` before it is dropped when the
//! line has more than one byte (memcached's `try_read_command_ascii`, so a
//! bare `\r\n` is the one-byte command "\r" and answers `ERROR`). The command
//! ends at the first NUL (memcached hands the line to C string functions).
//!
//! Tokens are separated by single spaces only (a tab is part of a token).
//! memcached keeps at most [`MAX_TOKENS`]` - 1` tokens; whatever follows the
//! 23rd token stays unsplit in [`Tokens::rest`], which is how a multi-get of
//! any number of keys is read.
//!
//! ```text
//!  "set k 0 0 5 noreply\r\n"
//!   tok0 tok1 .. tok5        ntokens (memcached) = len + 1 for the terminator
//! ```

/// memcached's `MAX_TOKENS`, including the terminal pseudo-token.
pub const MAX_TOKENS: usize = 24;

/// Without a newline in this many bytes, only a multi-get may go on.
pub const LINE_LIMIT_NON_GET: usize = 2048;
/// memcached's read buffer (`READ_BUFFER_SIZE`): a line other than a
/// multi-get that is longer can never be parsed there, and the connection
/// is closed. (Between the two limits memcached's answer depends on how the
/// line was split into reads; Strata parses such a line when it is whole.)
pub const READ_BUFFER_SIZE: usize = 16384;

/// What the framer found at the front of the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// No complete line yet; read more.
    Partial,
    /// A complete command line (terminator and NUL tail removed) and the
    /// number of bytes it occupied in the buffer.
    Line { line: &'a [u8], consumed: usize },
    /// The line is too long: memcached closes the connection.
    Close,
}

/// Find the first line in `buf`. `max_get_line` bounds multi-get lines,
/// which memcached lets grow without limit.
pub fn frame_line(buf: &[u8], max_get_line: usize) -> Frame<'_> {
    let is_get = || {
        let spaces = buf.iter().take_while(|&&b| b == b' ').count();
        let rest = &buf[spaces..];
        spaces <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
    };
    // One pass finds the first NUL or newline; only a line holding a NUL
    // (a rare, odd client) needs a second scan for its newline.
    let first = memchr::memchr2(b'\n', 0, buf);
    let nul = first.filter(|&i| buf[i] == 0);
    let newline = match nul {
        Some(at) => memchr(b'\n', &buf[at..]).map(|n| at + n),
        None => first,
    };
    let Some(nl) = newline else {
        if buf.len() > LINE_LIMIT_NON_GET && (!is_get() || buf.len() > max_get_line) {
            return Frame::Close;
        }
        return Frame::Partial;
    };
    if nl >= READ_BUFFER_SIZE && !is_get() {
        return Frame::Close;
    }
    let mut end = nl;
    if nl > 1 && buf[nl - 1] == b'\r' {
        end -= 1;
    }
    let line = &buf[..nul.map_or(end, |at| at.min(end))];
    Frame::Line { line, consumed: nl + 1 }
}

/// The first `needle` in `haystack` (SIMD, the `memchr` crate).
#[inline]
pub fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    memchr::memchr(needle, haystack)
}

/// Where the first space in `s` is (`s.len()` if none): eight bytes at a
/// time, as a word in which a space becomes a zero byte. Of the flags the
/// zero-byte test sets, the lowest is exact (a false flag needs a borrow
/// from a true zero byte below it), and on little-endian words the lowest
/// byte comes first. Keys and tokens are 10-250 bytes: a word step beats a
/// byte loop, and it has no call to pay for, unlike `memchr` on a short
/// token (docs/bench/wire.md).
#[inline]
pub fn find_space(s: &[u8]) -> usize {
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ SPACES;
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return at + (zeros.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + chunks.remainder().iter().position(|&b| b == b' ').unwrap_or(chunks.remainder().len())
}

/// The tokens of one command line, split as memcached's `tokenize_command`.
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    /// The line the tokens were split from.
    line: &'a [u8],
    toks: [&'a [u8]; MAX_TOKENS - 1],
    len: usize,
    /// The unsplit remainder after `MAX_TOKENS - 1` tokens, if any.
    pub rest: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    pub fn split(line: &'a [u8]) -> Tokens<'a> {
        let mut toks: [&'a [u8]; MAX_TOKENS - 1] = [&[]; MAX_TOKENS - 1];
        let mut len = 0;
        let mut rest = None;
        let mut at = 0;
        loop {
            while at < line.len() && line[at] == b' ' {
                at += 1;
            }
            if at == line.len() {
                break;
            }
            let end = at + find_space(&line[at..]);
            toks[len] = &line[at..end];
            len += 1;
            if len == MAX_TOKENS - 1 {
                if end + 1 < line.len() {
                    rest = Some(&line[end + 1..]);
                }
                break;
            }
            at = end;
        }
        Tokens { line, toks, len, rest }
    }

    /// memcached's `ntokens`: real tokens plus the terminator.
    #[inline]
    pub fn ntokens(&self) -> usize {
        self.len + 1
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `i`, or an empty slice past the end (memcached's terminator).
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.len {
            self.toks[i]
        } else {
            &[]
        }
    }

    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.toks[..self.len]
    }

    /// memcached's `set_noreply_maybe`: the last real token is "noreply".
    pub fn noreply(&self) -> bool {
        self.len > 0 && self.toks[self.len - 1] == b"noreply"
    }
}

/// The keys of a get: the first key, split off by the parser, and the rest
/// of the line, unsplit (four words, so a `Command` carrying it is cheap to
/// move, and a single-key get is never scanned again; tokenizing
/// memcached's way, 23 tokens and an unsplit rest, yields the same keys).
#[derive(Clone, Copy, Debug)]
pub struct KeyList<'a> {
    /// Empty when the keys all lie in `rest`.
    first: &'a [u8],
    rest: &'a [u8],
}

impl<'a> KeyList<'a> {
    /// The keys from token `first` of `tokens` on.
    pub fn new(tokens: &Tokens<'a>, first: usize) -> KeyList<'a> {
        match tokens.as_slice().get(first) {
            Some(tok) => {
                // A token is a subslice of the line: where it ends in it.
                let end = tok.as_ptr() as usize - tokens.line.as_ptr() as usize + tok.len();
                KeyList { first: tok, rest: &tokens.line[end..] }
            }
            None => KeyList { first: &[], rest: tokens.rest.unwrap_or(&[]) },
        }
    }

    /// The keys in `tail` (space-separated, empty tokens skipped), or None
    /// when it holds only spaces.
    #[inline]
    pub fn from_tail(tail: &'a [u8]) -> Option<KeyList<'a>> {
        let mut iter = KeyIter { first: &[], rest: tail };
        let first = iter.next()?;
        Some(KeyList { first, rest: iter.rest })
    }

    #[inline]
    pub fn iter(&self) -> KeyIter<'a> {
        KeyIter { first: self.first, rest: self.rest }
    }
}

/// Iterator over a [`KeyList`]; allocates nothing.
#[derive(Clone)]
pub struct KeyIter<'a> {
    first: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Iterator for KeyIter<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if !self.first.is_empty() {
            return Some(std::mem::take(&mut self.first));
        }
        let tail = self.rest;
        let mut start = 0;
        while start < tail.len() && tail[start] == b' ' {
            start += 1;
        }
        if start == tail.len() {
            self.rest = &[];
            return None;
        }
        let end = start + find_space(&tail[start..]);
        self.rest = &tail[end..];
        Some(&tail[start..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// memcached's tokenizer as a byte loop: the reference `split` and
    /// `KeyIter` are checked against.
    fn split_bytewise(line: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
        let mut toks = Vec::new();
        let mut start = 0;
        for i in 0..line.len() {
            if line[i] == b' ' {
                if i > start {
                    toks.push(&line[start..i]);
                    if toks.len() == MAX_TOKENS - 1 {
                        return (toks, (i + 1 < line.len()).then(|| &line[i + 1..]));
                    }
                }
                start = i + 1;
            }
        }
        if start < line.len() {
            toks.push(&line[start..]);
        }
        (toks, None)
    }

    #[test]
    fn find_space_finds_the_first_space_at_every_position() {
        // Bytes whose xor with a space is 0x80 or 0x01 and neighbours of
        // a space (a borrow-based test would misfire on them), each length
        // and position across a word boundary.
        for fill in [b'a', b'!', 0x1f, 0xa0, 0x21, 0x00, 0xff] {
            for len in 0..40 {
                assert_eq!(find_space(&vec![fill; len]), len);
                for at in 0..len {
                    let mut s = vec![fill; len];
                    s[at] = b' ';
                    if at + 1 < len {
                        s[at + 1] = b' ';
                    }
                    assert_eq!(find_space(&s), at, "fill {fill:#x} len {len} at {at}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn split_and_keys_match_a_byte_loop(line in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'k'), Just(0xa0u8), any::<u8>()], 0..300)) {
            let (toks, rest) = split_bytewise(&line);
            let t = Tokens::split(&line);
            prop_assert_eq!(t.as_slice(), &toks[..]);
            prop_assert_eq!(t.rest, rest);
            let keys: Vec<_> = KeyIter { first: &[], rest: &line }.collect();
            let all: Vec<_> = line.split(|&b| b == b' ').filter(|k| !k.is_empty()).collect();
            prop_assert_eq!(keys, all);
        }
    }

    #[test]
    fn framing_follows_memcached() {
        assert_eq!(frame_line(b"get a\r\n", 1 << 20), Frame::Line { line: b"get a", consumed: 7 });
        assert_eq!(frame_line(b"get a\n", 1 << 20), Frame::Line { line: b"get a", consumed: 6 });
        assert_eq!(frame_line(b"\r\n", 1 << 20), Frame::Line { line: b"\r", consumed: 2 });
        assert_eq!(frame_line(b"ab\0cd\r\n", 1 << 20), Frame::Line { line: b"ab", consumed: 7 });
        assert_eq!(frame_line(b"get a", 1 << 20), Frame::Partial);
        assert_eq!(frame_line(&[b'x'; 2049], 1 << 20), Frame::Close);
        let mut long_line = vec![b'x'; READ_BUFFER_SIZE];
        long_line.extend_from_slice(b"\r\n");
        assert_eq!(frame_line(&long_line, 1 << 20), Frame::Close, "longer than memcached's read buffer");
        let mut long_get = b"get ".to_vec();
        long_get.resize(4000, b'k');
        assert_eq!(frame_line(&long_get, 1 << 20), Frame::Partial);
        assert_eq!(frame_line(&long_get, 3000), Frame::Close);
    }

    #[test]
    fn tokenizer_keeps_23_tokens_and_a_rest() {
        let t = Tokens::split(b"  set  k 0 ");
        assert_eq!(t.as_slice(), &[&b"set"[..], b"k", b"0"]);
        let line: Vec<u8> = (0..30).map(|i| format!("k{i} ")).collect::<String>().into_bytes();
        let t = Tokens::split(&line);
        assert_eq!(t.len(), 23);
        let keys: Vec<_> = KeyList::new(&t, 1).iter().collect();
        assert_eq!(keys.len(), 29);
        assert_eq!(keys[28], b"k29");
        let tail: Vec<_> = KeyList::from_tail(&line[2..]).unwrap().iter().collect();
        assert_eq!(tail, keys);
        // Past the 23rd token: the keys are the rest.
        let rest: Vec<_> = KeyList::new(&t, 23).iter().collect();
        assert_eq!((rest.len(), rest[0]), (7, &b"k23"[..]));
        let t = Tokens::split(b"gat 10  a   b ");
        assert_eq!(KeyList::new(&t, 2).iter().collect::<Vec<_>>(), [&b"a"[..], b"b"]);
        assert!(KeyList::from_tail(b"   ").is_none() && KeyList::from_tail(b"").is_none());
        assert_eq!(KeyList::from_tail(b"  x ").unwrap().iter().collect::<Vec<_>>(), [b"x"]);
        assert_eq!(KeyList::from_tail(b" x  yz").unwrap().iter().collect::<Vec<_>>(), [&b"x"[..], b"yz"]);
    }
}
