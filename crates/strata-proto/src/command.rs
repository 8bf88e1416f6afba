//! Text and meta requests: one command line in, one typed [`Command`] out.
//!
//! The checks run in the order memcached 1.6.45's `process_request` and its
//! `process_*_command` functions run them, because the order decides which
//! error string a malformed line gets (too few tokens for a known command
//! is `CLIENT_ERROR bad command line format`, an unknown command `ERROR`,
//! and so on; docs/COMPATIBILITY.md lists where 1.6.18 differed). Errors are
//! [`Command::Error`] values carrying the exact reply, whether `noreply`
//! silences it, and how many bytes of data block follow and must be
//! swallowed to stay in step with the client.

use crate::meta::{parse_meta, MetaRequest, MAX_META_TOKENS, MAX_OPAQUE_LEN};
use crate::number::{parse_flags, parse_i32, strict_i32, strict_u32, strict_u64};
use crate::text::{KeyList, Tokens};

/// Whether `debugtime` is a command: always in a build with debug
/// assertions, and in a release build once [`enable_debugtime`] has run
/// (the `strata` binary calls it when started with `STRATA_DEBUGTIME=1`).
static DEBUGTIME: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(cfg!(debug_assertions));

/// Make `debugtime` a command from now on, as memcached's debug build
/// (`memcached-debug`) has it: what memcached's own test suite
/// (t/expirations.t) moves the clock with. A production server never
/// turns it on; release memcached answers it `ERROR`, and so does Strata
/// until this is called.
pub fn enable_debugtime() {
    DEBUGTIME.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn debugtime_enabled() -> bool {
    DEBUGTIME.load(std::sync::atomic::Ordering::Relaxed)
}

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
    /// `verbosity N`: the level as given (the server clamps it).
    Verbosity { level: u32, noreply: bool },
    Quit,
    /// `shutdown [graceful]`; `valid` is false for any other mode (refused
    /// with `CLIENT_ERROR invalid shutdown mode` once shutdown is enabled).
    Shutdown { graceful: bool, valid: bool },
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `refresh_certs`: reload the TLS certificate, key and CA.
    RefreshCerts,
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
    /// `debugtime p|r|<seconds>`: only debug builds parse it, and a
    /// release build after [`enable_debugtime`], as only memcached's debug
    /// build (`memcached-debug`, which its test suite runs) has it; it
    /// moves the server's clock.
    DebugTime(DebugTime),
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

/// memcached 1.6.45's shortest request, terminator included: a shorter one
/// (`\r\n`, `x\r\n`, `mn\n`) is `CLIENT_ERROR bad command line format`.
pub const MIN_REQUEST_LEN: usize = 4;

/// Classify one framed request: `line` as [`crate::text::frame_line`]
/// returned it and `framed_len` the bytes it occupied with its terminator.
pub fn parse_request(line: &[u8], framed_len: usize) -> Command<'_> {
    if framed_len < MIN_REQUEST_LEN {
        return error(BAD_FORMAT);
    }
    parse_command(line)
}

/// Classify one command line (as returned by [`crate::text::frame_line`]),
/// as memcached 1.6.45's `process_request` does: the command is the bytes
/// before the first space (a line starting with a space is no known
/// command), and a known command with too few tokens is a format error.
/// Tokens after the ones a command reads are ignored; `noreply` is the last
/// token.
pub fn parse_command(line: &[u8]) -> Command<'_> {
    // The hot path: a get line is recognised by its first bytes (no memchr
    // call) and not tokenized (the keys are the rest of the line).
    let word_len = if line.starts_with(b"get ") {
        3
    } else if line.starts_with(b"gets ") {
        4
    } else {
        crate::text::memchr(b' ', line).unwrap_or(line.len())
    };
    let word = &line[..word_len];
    if word == b"get" || word == b"gets" {
        let Some(keys) = KeyList::from_tail(&line[word.len()..]) else {
            return error(BAD_FORMAT);
        };
        let kind = if word.len() == 3 { GetKind::Get } else { GetKind::Gets };
        return Command::Get { kind, keys };
    }
    let t = Tokens::split(line);
    if word.len() == 2 && word[0] == b'm' {
        return match word[1] {
            b'g' => meta_get(t),
            b's' => meta_set(t),
            b'n' => Command::MetaNoop,
            b'd' => meta_delete(t),
            b'a' => meta_arith(t),
            b'e' => meta_debug(t),
            b'j' => Command::Admin(crate::admin::journal(&t)),
            _ => unknown(t),
        };
    }
    match word {
        b"gat" | b"gats" => retrieval(t, 3),
        b"set" => storage(t, StoreVerb::Set),
        b"add" => storage(t, StoreVerb::Add),
        b"replace" => storage(t, StoreVerb::Replace),
        b"append" => storage(t, StoreVerb::Append),
        b"prepend" => storage(t, StoreVerb::Prepend),
        b"cas" => storage(t, StoreVerb::Cas),
        b"delete" => delete(t),
        b"incr" | b"decr" => arith(t, word == b"incr"),
        b"touch" => touch(t),
        b"stats" => Command::Stats { args: t },
        b"version" => Command::Version,
        b"quit" => Command::Quit,
        _ => unknown(t),
    }
}

/// Not one of the commands `process_request` knows: memcached looks the
/// first token (leading spaces skipped) up in its table of rarer commands.
fn unknown(t: Tokens<'_>) -> Command<'_> {
    match t.get(0) {
        b"flush_all" => flush_all(t),
        b"verbosity" => verbosity(t),
        b"shutdown" => shutdown(t),
        b"cache_memlimit" => memlimit(t),
        b"refresh_certs" => Command::RefreshCerts,
        b"lru_crawler" => Command::Admin(crate::admin::lru_crawler(&t)),
        b"lru" => Command::Admin(crate::admin::lru(&t)),
        b"slabs" => Command::Admin(crate::admin::slabs(&t)),
        b"watch" => Command::Admin(crate::admin::watch(&t)),
        b"extstore" => Command::Admin(crate::admin::extstore(&t)),
        b"debugtime" if debugtime_enabled() => debugtime(&t),
        _ if t.len() > 1 && t.get(t.len() - 1).starts_with(b"HTTP/") => Command::Close,
        _ => error("ERROR"),
    }
}

/// What `debugtime` asks of the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugTime {
    Pause,
    Resume,
    Advance(i64),
}

fn debugtime(t: &Tokens<'_>) -> Command<'static> {
    match t.get(1) {
        b"p" => Command::DebugTime(DebugTime::Pause),
        b"r" => Command::DebugTime(DebugTime::Resume),
        word => match std::str::from_utf8(word).ok().and_then(|w| w.parse::<i64>().ok()) {
            Some(secs) => Command::DebugTime(DebugTime::Advance(secs)),
            None => error("ERROR"),
        },
    }
}

fn retrieval(t: Tokens<'_>, min_tokens: usize) -> Command<'_> {
    if t.len() < min_tokens {
        return error(BAD_FORMAT);
    }
    let touch = |gats: bool| match strict_i32(t.get(1)) {
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
    Command::Get { kind, keys: KeyList::new(&t, first) }
}

/// `<verb> <key> <flags> <exptime> <bytes> [<cas>] ...`: too few tokens or
/// a bad length is refused before the data block is known (memcached then
/// reads the block as commands); any later error swallows the block.
fn storage(t: Tokens<'_>, verb: StoreVerb) -> Command<'_> {
    if t.len() < 5 {
        return error(BAD_FORMAT);
    }
    let vlen = match strict_i32(t.get(4)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return error(BAD_FORMAT),
    };
    let noreply = t.noreply();
    let refuse = Command::Error { reply: BAD_FORMAT, noreply, swallow: vlen + 2 };
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return refuse;
    }
    let (Some(flags), Some(exptime)) = (parse_flags(t.get(2)), parse_i32(t.get(3))) else {
        return refuse;
    };
    let cas = if verb == StoreVerb::Cas {
        // A missing token is not 0 (mcmc refuses an index past the end).
        match Some(t.get(5)).filter(|token| !token.is_empty()).and_then(strict_u64) {
            Some(v) => v,
            None => return refuse,
        }
    } else {
        0
    };
    Command::Store(StoreCommand { verb, key, flags, exptime, value_len: vlen, cas, noreply })
}

fn delete(t: Tokens<'_>) -> Command<'_> {
    if t.len() < 2 {
        return error(BAD_FORMAT);
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return error_noreply(BAD_FORMAT, noreply);
    }
    Command::Delete { key, noreply }
}

/// The start `incr`, `decr` and `touch` share: a key and an argument
/// (more tokens are ignored, the last may be `noreply`), then the key length.
fn keyed<'a>(t: &Tokens<'a>) -> Result<(&'a [u8], bool), Command<'static>> {
    if t.len() < 3 {
        return Err(error(BAD_FORMAT));
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
    match strict_u64(t.get(2)) {
        Some(delta) => Command::Arith { incr, key, delta, noreply },
        None => error_noreply("CLIENT_ERROR invalid numeric delta argument", noreply),
    }
}

fn touch(t: Tokens<'_>) -> Command<'_> {
    let (key, noreply) = match keyed(&t) {
        Ok(keyed) => keyed,
        Err(e) => return e,
    };
    match strict_i32(t.get(2)) {
        Some(exptime) => Command::Touch { key, exptime, noreply },
        None => error_noreply("CLIENT_ERROR invalid exptime argument", noreply),
    }
}

fn flush_all(t: Tokens<'_>) -> Command<'_> {
    let noreply = t.noreply();
    let mut delay = 0;
    if t.len() != if noreply { 2 } else { 1 } {
        match strict_i32(t.get(1)) {
            Some(v) if !t.get(1).is_empty() => delay = v,
            _ => return error_noreply("CLIENT_ERROR invalid exptime argument", noreply),
        }
    }
    Command::FlushAll { delay, noreply }
}

fn verbosity(t: Tokens<'_>) -> Command<'_> {
    let noreply = t.noreply();
    match strict_u32(t.get(1)) {
        Some(level) if t.len() > 1 => Command::Verbosity { level, noreply },
        _ => error_noreply(BAD_FORMAT, noreply),
    }
}

fn shutdown(t: Tokens<'_>) -> Command<'_> {
    match (t.len(), t.get(1)) {
        (1, _) => Command::Shutdown { graceful: false, valid: true },
        (2, b"graceful") => Command::Shutdown { graceful: true, valid: true },
        // memcached refuses a disabled shutdown before it reads the mode.
        _ => Command::Shutdown { graceful: false, valid: false },
    }
}

fn memlimit(t: Tokens<'_>) -> Command<'_> {
    let noreply = t.noreply();
    match strict_u32(t.get(1)) {
        Some(megabytes) if t.len() > 1 => Command::CacheMemlimit { megabytes, noreply },
        _ => error_noreply("ERROR", noreply),
    }
}

/// The tokenizer 1.6.45 runs on a meta command: every flag token (from
/// `first`, among the first 23 tokens) must start with a letter
/// (`A`..`z`) or a digit, else the line is a format error.
fn meta_tokens_ok(t: &Tokens<'_>, first: usize) -> bool {
    t.as_slice().iter().skip(first).all(|tok| matches!(tok[0], 65..=122) || tok[0].is_ascii_digit())
}

/// The checks every meta command with a key starts with.
fn meta_preamble(t: &Tokens<'_>) -> Result<(), Command<'static>> {
    if t.len() < 2 || !meta_tokens_ok(t, 2) {
        return Err(error(BAD_FORMAT));
    }
    Ok(())
}

/// `_meta_flag_preparse`'s own checks before the flags: key length, then
/// the token count.
fn meta_limits(t: &Tokens<'_>) -> Result<(), &'static str> {
    if t.get(1).len() > KEY_MAX_LENGTH {
        return Err(BAD_FORMAT);
    }
    if t.len() > MAX_META_TOKENS {
        return Err("CLIENT_ERROR options flags are too long");
    }
    Ok(())
}

fn opaque_ok(req: &MetaRequest<'_>) -> bool {
    req.opaque.map_or(true, |o| o.len() <= MAX_OPAQUE_LEN)
}

fn meta_get(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t) {
        return e;
    }
    if let Err(msg) = meta_limits(&t) {
        return error(msg);
    }
    // An over-long opaque is refused by the meta front end: memcached finds it
    // only after the read (and any T/N before it) took effect.
    match parse_meta(&t, 2) {
        Ok(req) => Command::MetaGet(req),
        Err(msg) => error(msg.unwrap_or(BAD_FORMAT)),
    }
}

fn meta_set(t: Tokens<'_>) -> Command<'_> {
    if t.len() < 3 || !meta_tokens_ok(&t, 3) {
        return error(BAD_FORMAT);
    }
    let vlen = match strict_i32(t.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return error(BAD_FORMAT),
    };
    let swallow = vlen + 2;
    let refuse = |reply: &'static str| Command::Error { reply, noreply: false, swallow };
    if let Err(msg) = meta_limits(&t) {
        return refuse(msg);
    }
    let req = match parse_meta(&t, 3) {
        Ok(req) => req,
        Err(msg) => return refuse(msg.unwrap_or(BAD_FORMAT)),
    };
    if !matches!(req.flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
        return refuse("CLIENT_ERROR invalid mode for ms M token");
    }
    // An over-long opaque is refused at admission, after the size check
    // (memcached 1.6.45 allocates the item first).
    Command::MetaSet { req, value_len: vlen }
}

fn meta_delete(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t) {
        return e;
    }
    if let Err(msg) = meta_limits(&t) {
        return error(msg);
    }
    match parse_meta(&t, 2) {
        Ok(req) if !opaque_ok(&req) => error("CLIENT_ERROR opaque token too long"),
        Ok(req) => Command::MetaDelete(req),
        Err(msg) => error(msg.unwrap_or(BAD_FORMAT)),
    }
}

fn meta_arith(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t) {
        return e;
    }
    if meta_limits(&t).is_err() {
        return error("CLIENT_ERROR invalid or duplicate flag");
    }
    match parse_meta(&t, 2) {
        Ok(req) if !matches!(req.flags.mode, None | Some(b'I' | b'i' | b'+' | b'D' | b'd' | b'-')) => {
            error("CLIENT_ERROR invalid mode for ma M token")
        }
        Ok(req) => Command::MetaArith(req),
        Err(_) => error("CLIENT_ERROR invalid or duplicate flag"),
    }
}

/// `me <key> [b ...]`: 1.6.45 decodes a base64 key only when another token
/// follows the `b` (its check counts tokens as if the terminator were one).
fn meta_debug(t: Tokens<'_>) -> Command<'_> {
    if let Err(e) = meta_preamble(&t) {
        return e;
    }
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return error(BAD_FORMAT);
    }
    Command::MetaDebug { key, base64: t.len() >= 4 && t.get(2) == b"b" }
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

    /// Only a debug build knows `debugtime`, as only memcached-debug does
    /// (or a release build that turned it on: `enable_debugtime`, which
    /// no unit test calls, as it is process-wide).
    #[test]
    fn debugtime_only_in_debug_builds() {
        if cfg!(debug_assertions) {
            assert!(matches!(parse_command(b"debugtime 5"), Command::DebugTime(DebugTime::Advance(5))));
            assert!(matches!(parse_command(b"debugtime p"), Command::DebugTime(DebugTime::Pause)));
            assert!(matches!(parse_command(b"debugtime r"), Command::DebugTime(DebugTime::Resume)));
            assert_eq!(reply(b"debugtime"), "ERROR");
            assert_eq!(reply(b"debugtime x"), "ERROR");
        } else {
            assert_eq!(reply(b"debugtime 5"), "ERROR");
        }
    }

    #[test]
    fn error_strings_match_memcached() {
        let long_key = "k".repeat(251);
        let table: &[(&str, &str)] = &[
            ("x", "ERROR"),
            ("GET k", "ERROR"),
            (" get k", "ERROR"),
            ("bogus", "ERROR"),
            ("get", BAD_FORMAT),
            ("gets", BAD_FORMAT),
            ("gat 10", BAD_FORMAT),
            ("gats", BAD_FORMAT),
            ("set k 0 0", BAD_FORMAT),
            ("set k 0 0 abc", BAD_FORMAT),
            ("set k 0 0 -1", BAD_FORMAT),
            ("set k 0 0 +1", BAD_FORMAT),
            ("set k -1 0 1", BAD_FORMAT),
            ("cas k 0 0 1", BAD_FORMAT),
            ("cas k 0 0 1 x", BAD_FORMAT),
            ("cas k 0 0 1 +1", BAD_FORMAT),
            ("delete", BAD_FORMAT),
            ("incr k abc", "CLIENT_ERROR invalid numeric delta argument"),
            ("incr k +1", "CLIENT_ERROR invalid numeric delta argument"),
            ("incr k -0", "CLIENT_ERROR invalid numeric delta argument"),
            ("incr k", BAD_FORMAT),
            ("decr k", BAD_FORMAT),
            ("touch k", BAD_FORMAT),
            ("touch k abc", "CLIENT_ERROR invalid exptime argument"),
            ("touch k +9", "CLIENT_ERROR invalid exptime argument"),
            ("gat abc k", "CLIENT_ERROR invalid exptime argument"),
            ("gat +5 k", "CLIENT_ERROR invalid exptime argument"),
            ("flush_all abc", "CLIENT_ERROR invalid exptime argument"),
            ("verbosity", BAD_FORMAT),
            ("verbosity x", BAD_FORMAT),
            ("verbosity -1", BAD_FORMAT),
            ("cache_memlimit", "ERROR"),
            ("cache_memlimit abc", "ERROR"),
            ("mg", BAD_FORMAT),
            ("md", BAD_FORMAT),
            ("ma", BAD_FORMAT),
            ("me", BAD_FORMAT),
            ("mz k", "ERROR"),
            ("ms k", BAD_FORMAT),
            ("ms k abc", BAD_FORMAT),
            ("ms k -1", BAD_FORMAT),
            ("ms k +1", BAD_FORMAT),
            ("ms k 1 !", BAD_FORMAT),
            ("mg k !", BAD_FORMAT),
            ("mg k v !", BAD_FORMAT),
            ("me k !", BAD_FORMAT),
            ("ms k 2 MX", "CLIENT_ERROR invalid mode for ms M token"),
            ("ms k 2 M", "CLIENT_ERROR invalid mode for ms M token"),
            ("ms k 1 Z", "CLIENT_ERROR invalid flag"),
            ("ms k 1 F4294967296", BAD_FORMAT),
            ("ms k 1 Ex", "CLIENT_ERROR bad token in command line format"),
            ("mg k v v", "CLIENT_ERROR duplicate flag"),
            ("mg k F", BAD_FORMAT),
            ("mg k R", "CLIENT_ERROR bad token in command line format"),
            ("mg k E", "CLIENT_ERROR bad token in command line format"),
            ("mg a b c d e f g h i j k l m n o p q r s t", "CLIENT_ERROR options flags are too long"),
            ("mg a b c d e f g h i j k l m n o p q r s", "CLIENT_ERROR invalid flag"),
            ("mg a b c d e f g h i j k l m n o p q", "CLIENT_ERROR invalid flag"),
            ("md k Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "CLIENT_ERROR opaque token too long"),
            ("md k q q", "CLIENT_ERROR duplicate flag"),
            ("md k Z", "CLIENT_ERROR invalid flag"),
            ("md k Ex", "CLIENT_ERROR bad token in command line format"),
            ("ma k Q", "CLIENT_ERROR invalid or duplicate flag"),
            ("ma k D", "CLIENT_ERROR invalid or duplicate flag"),
            ("ma k Ex", "CLIENT_ERROR invalid or duplicate flag"),
            ("ma k MZ", "CLIENT_ERROR invalid mode for ma M token"),
            ("ma k M", "CLIENT_ERROR invalid mode for ma M token"),
        ];
        for (line, want) in table {
            assert_eq!(reply(line.as_bytes()), *want, "line {line:?}");
        }
        for cmd in ["set K 0 0 1", "delete K", "incr K 1", "touch K 1", "mg K v", "ms K 1", "md K", "me K"] {
            let line = cmd.replace('K', &long_key);
            assert_eq!(reply(line.as_bytes()), BAD_FORMAT, "{cmd} with a 251-byte key");
        }
        let line = format!("ma {long_key}");
        assert_eq!(reply(line.as_bytes()), "CLIENT_ERROR invalid or duplicate flag");
    }

    #[test]
    fn short_requests_are_format_errors() {
        for (framed, line) in [(&b"\r\n"[..], &b"\r"[..]), (b"\n", b""), (b"x\r\n", b"x"), (b"mn\n", b"mn"), (b"ab\n", b"ab"), (b" \r\n", b" ")] {
            match parse_request(line, framed.len()) {
                Command::Error { reply, noreply: false, swallow: 0 } => assert_eq!(reply, BAD_FORMAT, "{framed:?}"),
                other => panic!("{framed:?}: {other:?}"),
            }
        }
        assert!(matches!(parse_request(b"mn", 4), Command::MetaNoop));
        assert!(matches!(parse_request(b"ab", 4), Command::Error { reply: "ERROR", .. }));
    }

    #[test]
    fn extra_tokens_are_ignored() {
        assert!(matches!(parse_command(b"delete k 10"), Command::Delete { key: b"k", noreply: false }));
        assert!(matches!(parse_command(b"delete k 0 noreply"), Command::Delete { key: b"k", noreply: true }));
        assert!(matches!(parse_command(b"delete k a b c"), Command::Delete { key: b"k", noreply: false }));
        assert!(matches!(parse_command(b"incr k 1 2 3"), Command::Arith { delta: 1, noreply: false, .. }));
        assert!(matches!(parse_command(b"touch k 5 x noreply"), Command::Touch { exptime: 5, noreply: true, .. }));
        assert!(matches!(parse_command(b"verbosity 1 2 3"), Command::Verbosity { level: 1, noreply: false }));
        assert!(matches!(parse_command(b"flush_all 1 2 3"), Command::FlushAll { delay: 1, noreply: false }));
        assert!(matches!(parse_command(b" flush_all"), Command::FlushAll { delay: 0, .. }));
        assert!(matches!(parse_command(b"cache_memlimit 100 200"), Command::CacheMemlimit { megabytes: 100, .. }));
        match parse_command(b"set k 0 0 1 2 3") {
            Command::Store(s) => assert_eq!((s.value_len, s.noreply), (1, false)),
            other => panic!("{other:?}"),
        }
        match parse_command(b"set k 0 0 1 noreply 2") {
            Command::Store(s) => assert!(!s.noreply, "noreply is only the last token"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_command(b"shutdown"), Command::Shutdown { graceful: false, valid: true }));
        assert!(matches!(parse_command(b"shutdown graceful"), Command::Shutdown { graceful: true, valid: true }));
        assert!(matches!(parse_command(b"shutdown now"), Command::Shutdown { valid: false, .. }));
    }

    #[test]
    fn noreply_and_swallow() {
        // A bad length is refused before noreply or the block are known.
        match parse_command(b"set k 0 0 abc noreply") {
            Command::Error { noreply: false, swallow: 0, .. } => {}
            other => panic!("{other:?}"),
        }
        // Any later error swallows the block, silently with noreply.
        match parse_command(b"set k x 0 5 noreply") {
            Command::Error { noreply: true, swallow: 7, .. } => {}
            other => panic!("{other:?}"),
        }
        match parse_command(b"cas k 0 0 6") {
            Command::Error { reply: BAD_FORMAT, swallow: 8, .. } => {}
            other => panic!("{other:?}"),
        }
        match parse_command(b"ms k 1 c f h k s t O1 q u T1 N1 R1 E1 x P L I b") {
            Command::Error { reply: "CLIENT_ERROR options flags are too long", swallow: 3, .. } => {}
            other => panic!("{other:?}"),
        }
        let long_ms = format!("ms {} 1", "k".repeat(251));
        assert!(matches!(parse_command(long_ms.as_bytes()), Command::Error { reply: BAD_FORMAT, swallow: 3, .. }));
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
