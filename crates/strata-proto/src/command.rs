//! Text and meta requests: one command line in, one typed [`Command`] out.
//!
//! The checks run in the order memcached 1.6's `process_command_ascii` and
//! its `process_*_command` functions run them, because the order decides
//! which error string a malformed line gets (a wrong token count is `ERROR`,
//! a long key `CLIENT_ERROR bad command line format`, and so on). Errors are
//! [`Command::Error`] values carrying the exact reply, whether `noreply`
//! silences it, and how many bytes of data block follow and must be
//! swallowed to stay in step with the client.

use crate::meta::{parse_meta, MetaRequest, MAX_META_TOKENS, MAX_OPAQUE_LEN};
use crate::number::{parse_flags, parse_i32, parse_u64};
use crate::text::{KeyList, Tokens};

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_MAX_LENGTH: usize = 250;

pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
pub const BAD_CHUNK: &str = "CLIENT_ERROR bad data chunk";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetKind {
    Get,
    Gets,
    /// `gat <exptime>`.
    Gat(i32),
    Gats(i32),
}

impl GetKind {
    pub fn returns_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreVerb {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

#[derive(Clone, Copy, Debug)]
pub struct StoreCommand<'a> {
    pub verb: StoreVerb,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    /// Length of the data block, without its `\r\n`.
    pub value_len: usize,
    pub cas: u64,
    pub noreply: bool,
}

#[derive(Clone, Copy, Debug)]
pub enum Command<'a> {
    Get { kind: GetKind, keys: KeyList<'a> },
    Store(StoreCommand<'a>),
    Delete { key: &'a [u8], noreply: bool },
    Arith { incr: bool, key: &'a [u8], delta: u64, noreply: bool },
    Touch { key: &'a [u8], exptime: i32, noreply: bool },
    FlushAll { delay: i32, noreply: bool },
    Version,
    Verbosity { noreply: bool },
    Quit,
    Shutdown { graceful: bool },
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `stats [group ...]`: the tokens after `stats`.
    Stats { args: Tokens<'a> },
    MetaNoop,
    MetaGet(MetaRequest<'a>),
    /// `ms <key> <datalen> <flags>*`; the data block follows.
    MetaSet { req: MetaRequest<'a>, value_len: usize },
    MetaDelete(MetaRequest<'a>),
    MetaArith(MetaRequest<'a>),
    MetaDebug { key: &'a [u8], base64: bool },
    /// `lru_crawler ...`, `lru ...`, `slabs ...` (see [`crate::admin`]).
    Admin(crate::admin::Admin),
    /// Answer with this line; silent when `noreply`; then discard `swallow`
    /// bytes (a refused data block and its `\r\n`).
    Error { reply: &'static str, noreply: bool, swallow: usize },
    /// Close the connection without a reply (an HTTP request line).
    Close,
}

fn error(reply: &'static str) -> Command<'static> {
    Command::Error { reply, noreply: false, swallow: 0 }
}

fn error_noreply(reply: &'static str, noreply: bool) -> Command<'static> {
    Command::Error { reply, noreply, swallow: 0 }
}

/// Classify one command line (as returned by [`crate::text::frame_line`]).
pub fn parse_command(line: &[u8]) -> Command<'_> {
    let t = Tokens::split(line);
    let n = t.ntokens();
    let cmd = t.get(0);
    if n < 2 || cmd.len() < 2 {
        return error("ERROR");
    }
    if cmd.len() == 2 && cmd[0] == b'm' {
        return match cmd[1] {
            b'g' => meta_get(t),
            b's' => meta_set(t),
            b'n' => Command::MetaNoop,
            b'd' => meta_delete(t),
            b'a' => meta_arith(t),
            b'e' => meta_debug(t),
            _ => error("ERROR"),
        };
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => retrieval(t),
        b"set" => storage(t, StoreVerb::Set),
        b"add" => storage(t, StoreVerb::Add),
        b"replace" => storage(t, StoreVerb::Replace),
        b"append" => storage(t, StoreVerb::Append),
        b"prepend" => storage(t, StoreVerb::Prepend),
        b"cas" => storage(t, StoreVerb::Cas),
        b"delete" => delete(t),
        b"incr" | b"decr" => arith(t, cmd == b"incr"),
        b"touch" => touch(t),
        b"stats" => Command::Stats { args: t },
        b"flush_all" => flush_all(t),
        b"version" => Command::Version,
        b"quit" => Command::Quit,
        b"verbosity" => verbosity(t),
        b"shutdown" => shutdown(t),
        b"cache_memlimit" => memlimit(t),
        b"lru_crawler" => Command::Admin(crate::admin::lru_crawler(&t)),
        b"lru" => Command::Admin(crate::admin::lru(&t)),
        b"slabs" => Command::Admin(crate::admin::slabs(&t)),
        _ if t.get(t.len() - 1).starts_with(b"HTTP/") => Command::Close,
        _ => error("ERROR"),
    }
}

fn retrieval(t: Tokens<'_>) -> Command<'_> {
    if t.ntokens() < 3 {
        return error("ERROR");
    }
    let touch = |gats: bool| match parse_i32(t.get(1)) {
        Some(exptime) if gats => Ok(GetKind::Gats(exptime)),
        Some(exptime) => Ok(GetKind::Gat(exptime)),
        None => Err(error("CLIENT_ERROR invalid exptime argument")),
    };
    let (kind, first) = match t.get(0) {
        b"gets" => (GetKind::Gets, 1),
        b"gat" | b"gats" => match touch(t.get(0) == b"gats") {
            Ok(kind) => (kind, 2),
            Err(e) => return e,
        },
        _ => (GetKind::Get, 1),
    };
    Command::Get { kind, keys: KeyList::new(t, first) }
}

fn storage(t: Tokens<'_>, verb: StoreVerb) -> Command<'_> {
    let cas = verb == StoreVerb::Cas;
    let n = t.ntokens();
    let (min, max) = if cas { (7, 8) } else { (6, 7) };
    if n != min && n != max {
        return error("ERROR");
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return error_noreply(BAD_FORMAT, noreply);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (parse_flags(t.get(2)), parse_i32(t.get(3)), parse_i32(t.get(4)))
    else {
        return error_noreply(BAD_FORMAT, noreply);
    };
    let cas_value = if cas {
        match parse_u64(t.get(5)) {
            Some(v) => v,
            None => return error_noreply(BAD_FORMAT, noreply),
        }
    } else {
        0
    };
    if vlen < 0 || vlen > i32::MAX - 2 {
        return error_noreply(BAD_FORMAT, noreply);
    }
    Command::Store(StoreCommand {
        verb,
        key,
        flags,
        exptime,
        value_len: vlen as usize,
        cas: cas_value,
        noreply,
    })
}

fn delete(t: Tokens<'_>) -> Command<'_> {
    let n = t.ntokens();
    if !(3..=5).contains(&n) {
        return error("ERROR");
    }
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = t.noreply();
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            return error_noreply(
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                noreply,
            );
        }
    }
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return error_noreply(BAD_FORMAT, noreply);
    }
    Command::Delete { key, noreply }
}

/// The start `incr`, `decr` and `touch` share: 3 or 4 tokens after the
/// command (the last may be `noreply`), then the key length.
fn keyed<'a>(t: &Tokens<'a>) -> Result<(&'a [u8], bool), Command<'static>> {
    let n = t.ntokens();
    if n != 4 && n != 5 {
        return Err(error("ERROR"));
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return Err(error_noreply(BAD_FORMAT, noreply));
    }
    Ok((key, noreply))
}

fn arith(t: Tokens<'_>, incr: bool) -> Command<'_> {
    let (key, noreply) = match keyed(&t) {
        Ok(keyed) => keyed,
        Err(e) => return e,
    };
    match parse_u64(t.get(2)) {
        Some(delta) => Command::Arith { incr, key, delta, noreply },
        None => error_noreply("CLIENT_ERROR invalid numeric delta argument", noreply),
    }
}

fn touch(t: Tokens<'_>) -> Command<'_> {
    let (key, noreply) = match keyed(&t) {
        Ok(keyed) => keyed,
        Err(e) => return e,
    };
    match parse_i32(t.get(2)) {
        Some(exptime) => Command::Touch { key, exptime, noreply },
        None => error_noreply("CLIENT_ERROR invalid exptime argument", noreply),
    }
}

fn flush_all(t: Tokens<'_>) -> Command<'_> {
    let n = t.ntokens();
    if !(2..=4).contains(&n) {
        return error("ERROR");
    }
    let noreply = t.noreply();
    let mut delay = 0;
    if n != if noreply { 3 } else { 2 } {
        match parse_i32(t.get(1)) {
            Some(v) => delay = v,
            None => return error_noreply("CLIENT_ERROR invalid exptime argument", noreply),
        }
    }
    Command::FlushAll { delay, noreply }
}

fn verbosity(t: Tokens<'_>) -> Command<'_> {
    let n = t.ntokens();
    if n != 3 && n != 4 {
        return error("ERROR");
    }
    let noreply = t.noreply();
    match parse_flags(t.get(1)) {
        Some(_) => Command::Verbosity { noreply },
        None => error_noreply(BAD_FORMAT, noreply),
    }
}

fn shutdown(t: Tokens<'_>) -> Command<'_> {
    match (t.ntokens(), t.get(1)) {
        (2, _) => Command::Shutdown { graceful: false },
        (3, b"graceful") => Command::Shutdown { graceful: true },
        _ => error("CLIENT_ERROR invalid shutdown mode"),
    }
}

fn memlimit(t: Tokens<'_>) -> Command<'_> {
    let n = t.ntokens();
    if n != 3 && n != 4 {
        return error("ERROR");
    }
    let noreply = t.noreply();
    match parse_flags(t.get(1)) {
        Some(megabytes) => Command::CacheMemlimit { megabytes, noreply },
        None => error_noreply("ERROR", noreply),
    }
}

/// The checks every meta command with a key starts with.
fn meta_preamble(t: &Tokens<'_>, too_many: &'static str) -> Result<(), Command<'static>> {
    if t.ntokens() < 3 {
        return Err(error("ERROR"));
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        return Err(error(BAD_FORMAT));
    }
    if t.ntokens() > MAX_META_TOKENS {
        return Err(error(too_many));
    }
    Ok(())
}

fn opaque_ok(req: &MetaRequest<'_>) -> bool {
    req.opaque.map_or(true, |o| o.len() <= MAX_OPAQUE_LEN)
}

fn meta_get(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t, "CLIENT_ERROR options flags are too long") {
        return e;
    }
    // An over-long opaque is refused by the executor: memcached finds it
    // only after the read (and any T/N before it) took effect.
    match parse_meta(&t, 2) {
        Ok(req) => Command::MetaGet(req),
        Err(msg) => error(msg.unwrap_or(BAD_FORMAT)),
    }
}

fn meta_set(t: Tokens<'_>) -> Command<'_> {
    if t.ntokens() < 3 {
        return error("ERROR");
    }
    if t.get(1).len() > KEY_MAX_LENGTH || t.ntokens() == 3 {
        return error(BAD_FORMAT);
    }
    if t.ntokens() > MAX_META_TOKENS {
        return error("CLIENT_ERROR options flags too long");
    }
    let vlen = match parse_i32(t.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        Some(_) => return error(BAD_FORMAT), // memcached: a negative length is a format error
        None => return error(BAD_FORMAT),
    };
    let swallow = vlen + 2;
    let refuse = |reply: &'static str| Command::Error { reply, noreply: false, swallow };
    let req = match parse_meta(&t, 3) {
        Ok(req) => req,
        Err(msg) => return refuse(msg.unwrap_or(BAD_FORMAT)),
    };
    if !matches!(req.flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
        return refuse("CLIENT_ERROR invalid mode for ms M token");
    }
    if !opaque_ok(&req) {
        return refuse("CLIENT_ERROR opaque token too long");
    }
    Command::MetaSet { req, value_len: vlen }
}

fn meta_delete(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t, "CLIENT_ERROR options flags too long") {
        return e;
    }
    match parse_meta(&t, 2) {
        Ok(req) if !opaque_ok(&req) => error("CLIENT_ERROR opaque token too long"),
        Ok(req) => Command::MetaDelete(req),
        Err(_) => error("CLIENT_ERROR invalid or duplicate flag"),
    }
}

fn meta_arith(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t, "CLIENT_ERROR options flags too long") {
        return e;
    }
    match parse_meta(&t, 2) {
        Ok(req) if !matches!(req.flags.mode, None | Some(b'I' | b'i' | b'+' | b'D' | b'd' | b'-')) => {
            error("CLIENT_ERROR invalid mode for ma M token")
        }
        Ok(req) => Command::MetaArith(req),
        Err(_) => error("CLIENT_ERROR invalid or duplicate flag"),
    }
}

fn meta_debug(t: Tokens<'_>) -> Command<'_> {
    let key = t.get(1);
    if t.ntokens() < 3 || key.len() > KEY_MAX_LENGTH {
        return error(BAD_FORMAT);
    }
    Command::MetaDebug { key, base64: t.get(2) == b"b" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &[u8]) -> &'static str {
        match parse_command(line) {
            Command::Error { reply, .. } => reply,
            other => panic!("expected an error for {:?}, got {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn error_strings_match_memcached() {
        let long_key = "k".repeat(251);
        let table: &[(&str, &str)] = &[
            ("", "ERROR"),
            ("\r", "ERROR"),
            ("x", "ERROR"),
            ("GET k", "ERROR"),
            ("get", "ERROR"),
            ("set k 0 0", "ERROR"),
            ("set k 0 0 abc", BAD_FORMAT),
            ("set k 0 0 -1", BAD_FORMAT),
            ("set k -1 0 1", BAD_FORMAT),
            ("cas k 0 0 1", "ERROR"),
            ("cas k 0 0 1 x", BAD_FORMAT),
            ("delete k 1", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"),
            ("delete k x y z", "ERROR"),
            ("incr k abc", "CLIENT_ERROR invalid numeric delta argument"),
            ("incr k", "ERROR"),
            ("touch k abc", "CLIENT_ERROR invalid exptime argument"),
            ("gat abc k", "CLIENT_ERROR invalid exptime argument"),
            ("flush_all abc", "CLIENT_ERROR invalid exptime argument"),
            ("verbosity", "ERROR"),
            ("cache_memlimit abc", "ERROR"),
            ("shutdown now", "CLIENT_ERROR invalid shutdown mode"),
            ("mg", "ERROR"),
            ("mz k", "ERROR"),
            ("ms k", BAD_FORMAT),
            ("ms k abc", BAD_FORMAT),
            ("ms k -1", BAD_FORMAT),
            ("ms k 2 MX", "CLIENT_ERROR invalid mode for ms M token"),
            ("ms k 2 MEE", "CLIENT_ERROR incorrect length for M token"),
            ("ms k 1 Z", "CLIENT_ERROR invalid flag"),
            ("mg k v v", "CLIENT_ERROR duplicate flag"),
            ("mg k F", BAD_FORMAT),
            ("mg k R", "CLIENT_ERROR bad token in command line format"),
            ("mg a b c d e f g h i j k l m n o p q r s", "CLIENT_ERROR options flags are too long"),
            ("mg a b c d e f g h i j k l m n o p q", "CLIENT_ERROR invalid flag"),
            ("md k Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "CLIENT_ERROR opaque token too long"),
            ("ma k Q", "CLIENT_ERROR invalid or duplicate flag"),
            ("ma k D", "CLIENT_ERROR invalid or duplicate flag"),
            ("ma k MZ", "CLIENT_ERROR invalid mode for ma M token"),
            ("me", BAD_FORMAT),
        ];
        for (line, want) in table {
            assert_eq!(reply(line.as_bytes()), *want, "line {line:?}");
        }
        for cmd in ["set K 0 0 1", "delete K", "incr K 1", "touch K 1", "mg K v", "ms K 1", "md K", "ma K"] {
            let line = cmd.replace('K', &long_key);
            assert_eq!(reply(line.as_bytes()), BAD_FORMAT, "{cmd} with a 251-byte key");
        }
    }

    #[test]
    fn noreply_and_swallow() {
        match parse_command(b"set k 0 0 abc noreply") {
            Command::Error { noreply: true, swallow: 0, .. } => {}
            other => panic!("{other:?}"),
        }
        match parse_command(b"ms k 5 Z") {
            Command::Error { swallow: 7, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_command(b"GET / HTTP/1.1"), Command::Close));
    }

    #[test]
    fn storage_and_retrieval() {
        match parse_command(b"cas k 4294967296 -1 5 99 noreply") {
            Command::Store(s) => {
                assert_eq!((s.verb, s.flags, s.exptime, s.value_len, s.cas, s.noreply), (StoreVerb::Cas, 0, -1, 5, 99, true));
            }
            other => panic!("{other:?}"),
        }
        match parse_command(b"gats 10 a b") {
            Command::Get { kind, keys } => {
                assert_eq!(kind, GetKind::Gats(10));
                assert_eq!(keys.iter().collect::<Vec<_>>(), vec![&b"a"[..], b"b"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
