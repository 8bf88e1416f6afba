//! Meta command flags (`mg ms md ma me`), parsed as memcached 1.6.45's
//! `_meta_flag_preparse` does.
//!
//! Each flag is one character, optionally followed by a token (`T30`,
//! `Oopaque`). A repeated flag or a byte >= 127 is "duplicate flag", an
//! unknown one "invalid flag"; both stop parsing at once. A bad token marks
//! the request failed but parsing goes on, so the *last* bad token's message
//! wins, as in memcached. The flags are kept in request order ([`MetaRequest::order`])
//! because replies echo them in that order and some (`t` before or after `T`)
//! mean different things depending on it.
//!
//! Numbers go through 1.6.45's strict parsers ([`crate::number::strict_u64`]
//! and friends: digits only), a flag's argument must not be empty, and `M`
//! takes the byte after it as the mode whatever follows. 1.6.45 added `E`
//! (set the new CAS) and `x` (md: empty the value instead of removing).

use crate::base64;
use crate::number::{strict_i32, strict_u32, strict_u64};
use crate::text::Tokens;

/// memcached's `MFLAG_MAX_OPT_LENGTH`: more tokens than this (command and
/// key included) is an error.
pub const MAX_META_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH` (the token, including the 'O').
pub const MAX_OPAQUE_LEN: usize = 32;
/// Longest decoded base64 key (250 encoded bytes).
pub const MAX_BINARY_KEY_LEN: usize = 188;

/// A meta key: the raw token, or its base64 decoding with the `b` flag.
#[derive(Clone, Copy, Debug)]
pub struct MetaKey<'a> {
    raw: &'a [u8],
    decoded: [u8; MAX_BINARY_KEY_LEN],
    decoded_len: u8,
    pub binary: bool,
}

impl<'a> MetaKey<'a> {
    pub fn plain(raw: &'a [u8]) -> MetaKey<'a> {
        MetaKey { raw, decoded: [0; MAX_BINARY_KEY_LEN], decoded_len: 0, binary: false }
    }

    /// The key bytes the cache uses.
    pub fn bytes(&self) -> &[u8] {
        if self.binary {
            &self.decoded[..usize::from(self.decoded_len)]
        } else {
            self.raw
        }
    }

    /// The key as the client sent it.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// This key without its raw token (held apart: `held.rs`).
    pub(crate) fn detached(&self) -> MetaKey<'static> {
        MetaKey { raw: &[], ..*self }
    }

    /// A detached key given back its raw token.
    pub(crate) fn attached<'b>(self, raw: &'b [u8]) -> MetaKey<'b> {
        MetaKey { raw, decoded: self.decoded, decoded_len: self.decoded_len, binary: self.binary }
    }

    fn decode(&mut self) -> bool {
        let mut out = Vec::with_capacity(self.raw.len());
        self.binary = true;
        if !base64::decode(self.raw, &mut out) || out.len() > MAX_BINARY_KEY_LEN {
            self.decoded_len = 0;
            return false;
        }
        self.decoded[..out.len()].copy_from_slice(&out);
        self.decoded_len = out.len() as u8;
        true
    }
}

/// The parsed meta flags. Token-carrying flags keep their raw numbers; the
/// server's front end converts TTLs with its clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaFlags {
    pub base64: bool,
    pub quiet: bool,
    pub value: bool,
    pub no_update: bool,
    pub invalidate: bool,
    pub vivify_ttl: Option<i32>,
    pub recache_ttl: Option<i32>,
    pub new_ttl: Option<i32>,
    pub compare_cas: Option<u64>,
    pub client_flags: Option<u32>,
    pub mode: Option<u8>,
    pub initial: Option<u64>,
    pub delta: Option<u64>,
    /// `E<cas>`: the CAS the stored, created or invalidated item gets,
    /// instead of the next from the counter.
    pub explicit_cas: Option<u64>,
    /// `x` (md): replace the item with an empty one instead of removing it.
    pub remove_value: bool,
}

/// One meta request after flag parsing.
#[derive(Clone, Copy, Debug)]
pub struct MetaRequest<'a> {
    pub key: MetaKey<'a>,
    pub flags: MetaFlags,
    /// The first character of every flag token, in request order.
    order: [u8; MAX_META_TOKENS],
    order_len: u8,
    /// The whole `O...` token, echoed back verbatim.
    pub opaque: Option<&'a [u8]>,
}

impl<'a> MetaRequest<'a> {
    /// A request from its parts (a held one's: `held.rs`).
    pub(crate) fn from_parts(key: MetaKey<'a>, flags: MetaFlags, order: &[u8], opaque: Option<&'a [u8]>) -> MetaRequest<'a> {
        let mut req = MetaRequest { key, flags, order: [0; MAX_META_TOKENS], order_len: order.len() as u8, opaque };
        req.order[..order.len()].copy_from_slice(order);
        req
    }

    /// Flag characters in request order.
    pub fn order(&self) -> &[u8] {
        &self.order[..usize::from(self.order_len)]
    }

    pub fn has(&self, flag: u8) -> bool {
        self.order().contains(&flag)
    }

    /// Whether the opaque token is longer than memcached allows.
    pub fn opaque_too_long(&self) -> bool {
        self.opaque.is_some_and(|o| o.len() > MAX_OPAQUE_LEN)
    }

    /// The flags memcached acts on before it reaches an over-long opaque
    /// token (all of them when the opaque is fine): `mg` and `ma` apply `T`
    /// and `N` in the reply loop and stop at the bad `O`.
    pub fn effective_order(&self) -> &[u8] {
        let order = self.order();
        if self.opaque_too_long() {
            let at = order.iter().position(|&f| f == b'O').unwrap_or(order.len());
            &order[..at]
        } else {
            order
        }
    }
}

/// Why flag parsing failed: a message, or `None` for "the command's default
/// message" (memcached leaves `errstr` untouched for a bad `F` token).
pub type FlagError = Option<&'static str>;

/// Parse the flags in `tokens[first..]` for the key in `tokens[1]`.
pub fn parse_meta<'a>(tokens: &Tokens<'a>, first: usize) -> Result<MetaRequest<'a>, FlagError> {
    let mut req = MetaRequest {
        key: MetaKey::plain(tokens.get(1)),
        flags: MetaFlags::default(),
        order: [0; MAX_META_TOKENS],
        order_len: 0,
        opaque: None,
    };
    let mut seen = [false; 128];
    let mut failed: Option<FlagError> = None;
    for &token in tokens.as_slice().iter().skip(first) {
        let flag = token[0];
        if flag >= 127 || seen[usize::from(flag)] {
            return Err(Some("CLIENT_ERROR duplicate flag"));
        }
        seen[usize::from(flag)] = true;
        // mcmc's flag arguments: at least one byte after the flag.
        let arg = Some(&token[1..]).filter(|a| !a.is_empty());
        let f = &mut req.flags;
        let bad_token = Some("CLIENT_ERROR bad token in command line format");
        match flag {
            b'b' => {
                f.base64 = true;
                if !req.key.decode() {
                    failed = Some(Some("CLIENT_ERROR error decoding key"));
                }
            }
            b'N' => match arg.and_then(strict_i32) {
                Some(v) => f.vivify_ttl = Some(v),
                None => failed = Some(bad_token),
            },
            b'T' => match arg.and_then(strict_i32) {
                Some(v) => f.new_ttl = Some(v),
                None => failed = Some(bad_token),
            },
            b'R' => match arg.and_then(strict_i32) {
                Some(v) => f.recache_ttl = Some(v),
                None => failed = Some(bad_token),
            },
            b'O' => req.opaque = Some(token),
            b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' => {}
            b'v' => f.value = true,
            b'u' => f.no_update = true,
            b'q' => f.quiet = true,
            b'x' => f.remove_value = true,
            b'F' => match arg.and_then(strict_u32) {
                Some(v) => f.client_flags = Some(v),
                None => failed = Some(failed.unwrap_or(None)),
            },
            b'C' => match arg.and_then(strict_u64) {
                Some(v) => f.compare_cas = Some(v),
                None => failed = Some(bad_token),
            },
            b'E' => match arg.and_then(strict_u64) {
                Some(v) => f.explicit_cas = Some(v),
                None => failed = Some(bad_token),
            },
            // The byte after `M` is the mode, whatever follows it; a bare
            // `M` reads the separator, which no command accepts.
            b'M' => f.mode = Some(token.get(1).copied().unwrap_or(b' ')),
            b'J' => match arg.and_then(strict_u64) {
                Some(v) => f.initial = Some(v),
                None => failed = Some(Some("CLIENT_ERROR invalid numeric initial value")),
            },
            b'D' => match arg.and_then(strict_u64) {
                Some(v) => f.delta = Some(v),
                None => failed = Some(Some("CLIENT_ERROR invalid numeric delta value")),
            },
            b'I' => f.invalidate = true,
            _ => return Err(Some("CLIENT_ERROR invalid flag")),
        }
        req.order[usize::from(req.order_len)] = flag;
        req.order_len += 1;
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(req),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8], first: usize) -> Result<MetaRequest<'_>, FlagError> {
        parse_meta(&Tokens::split(line), first)
    }

    #[test]
    fn flags_and_errors() {
        let req = parse(b"mg key v t T30 Oabc", 2).unwrap();
        assert!(req.flags.value);
        assert_eq!(req.flags.new_ttl, Some(30));
        assert_eq!(req.order(), b"vtTO");
        assert_eq!(req.opaque, Some(&b"Oabc"[..]));
        assert_eq!(parse(b"mg k v v", 2).unwrap_err(), Some("CLIENT_ERROR duplicate flag"));
        assert_eq!(parse(b"mg k Z", 2).unwrap_err(), Some("CLIENT_ERROR invalid flag"));
        assert_eq!(parse(b"mg k Nabc", 2).unwrap_err(), Some("CLIENT_ERROR bad token in command line format"));
        assert_eq!(parse(b"mg k N+5", 2).unwrap_err(), Some("CLIENT_ERROR bad token in command line format"));
        assert_eq!(parse(b"mg k F", 2).unwrap_err(), None);
        assert_eq!(parse(b"ms k 1 F4294967296", 3).unwrap_err(), None);
        assert_eq!(parse(b"ms k 2 MEE", 3).unwrap().flags.mode, Some(b'E'));
        assert_eq!(parse(b"ms k 2 M", 3).unwrap().flags.mode, Some(b' '));
        assert_eq!(parse(b"mg a k b", 2).unwrap_err(), Some("CLIENT_ERROR error decoding key"));
        let req = parse(b"mg YWJj b k", 2).unwrap();
        assert_eq!(req.key.bytes(), b"abc");
        assert_eq!(req.key.raw(), b"YWJj");
    }

    #[test]
    fn explicit_cas_and_remove_value() {
        let req = parse(b"md k x I E123 q", 2).unwrap();
        assert!(req.flags.remove_value && req.flags.invalidate && req.flags.quiet);
        assert_eq!(req.flags.explicit_cas, Some(123));
        assert_eq!(req.order(), b"xIEq");
        assert_eq!(parse(b"ms k 1 E18446744073709551615", 3).unwrap().flags.explicit_cas, Some(u64::MAX));
        for bad in [&b"mg k E"[..], b"mg k Ex", b"mg k E-1", b"mg k E18446744073709551616", b"mg k E+1"] {
            assert_eq!(parse(bad, 2).unwrap_err(), Some("CLIENT_ERROR bad token in command line format"), "{bad:?}");
        }
    }
}
