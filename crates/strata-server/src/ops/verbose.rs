//! `-vv` / `-vvv` and the `verbosity` command: memcached's request trace on
//! stderr (`settings.verbose > 1` in memcached.c and proto_text.c).
//!
//! The level is one `AtomicU8` in [`crate::ops::Ops`], set from `-v`
//! flags at start and by `verbosity N` at run time (clamped to 2 as
//! memcached's `MAX_VERBOSITY_LEVEL`); `stats settings` reads it. The
//! request path pays one relaxed load of it per request ([`tracing`]); the
//! rest runs only at level 2 or more.
//!
//! What is printed, as memcached 1.6.18 prints it for a text connection
//! (`fd` is the client socket's file descriptor):
//! - `<fd new auto-negotiating client connection` (or `new ascii client
//!   connection.` / `new binary client connection.` under `-B`) on accept,
//!   `fd: Client using the ascii protocol` when a negotiating connection's
//!   first byte decides it, `<fd connection closed.` on close;
//! - `<fd <command line>` for each text command (its data block is not
//!   printed);
//! - the reply memcached passes through `out_string`: a one-line reply
//!   (`>fd STORED`, `>fd ERROR`, `>fd 8`, `>fd VERSION ...`), or with
//!   `noreply` the reply it would have sent (`>fd NOREPLY STORED`); for the
//!   get family `>fd sending key <k>` per hit and `>fd END`. Multi-line
//!   replies (`stats`, meta responses other than `MN` and errors) are not
//!   printed, as in memcached.
//!
//! Each request's lines go to stderr in one `write` so lines of different
//! workers do not interleave. The noreply reply is captured through a
//! thread-local the front ends' `reply` fills only while this module traces
//! the request (it has no file descriptor of its own to print with).

use std::cell::RefCell;
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::settings::ProtocolChoice;

/// memcached's `MAX_VERBOSITY_LEVEL`: the most `verbosity N` sets.
const MAX_VERBOSITY_LEVEL: u32 = 2;

/// The run-time verbosity.
pub struct Verbosity(AtomicU8);

impl Verbosity {
    pub fn new(level: u8) -> Verbosity {
        Verbosity(AtomicU8::new(level))
    }

    pub fn level(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    /// `verbosity N`: memcached clamps to its maximum level.
    pub fn set(&self, level: u32) {
        self.0.store(level.min(MAX_VERBOSITY_LEVEL) as u8, Ordering::Relaxed);
    }

    /// Whether requests are traced (`-vv` or more): the request path's check.
    #[inline(always)]
    pub fn tracing(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 1
    }
}

thread_local! {
    /// While a traced request runs: the reply lines its `noreply` silenced.
    static SILENCED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// The front ends' hook for a reply line `noreply` silenced (a no-op unless
/// this thread is tracing a request).
#[inline]
pub fn silenced(line: &[u8]) {
    SILENCED.with(|s| {
        if let Some(buf) = s.borrow_mut().as_mut() {
            buf.extend_from_slice(line);
        }
    });
}

/// [`silenced`] for a number, formatted only while a trace records.
#[inline]
pub fn silenced_u64(value: u64) {
    SILENCED.with(|s| {
        if let Some(buf) = s.borrow_mut().as_mut() {
            strata_proto::number::push_u64(buf, value);
        }
    });
}

/// Start tracing one request on this thread.
pub fn begin() {
    SILENCED.with(|s| *s.borrow_mut() = Some(Vec::new()));
}

/// Stop tracing one request; if `done` (a text request that ran), print it
/// (`request`: the buffered bytes it started at; `reply`: the bytes it
/// appended to the output, None when the request turned tracing off).
pub fn end_text(fd: Option<RawFd>, request: &[u8], reply: Option<&[u8]>, done: bool) {
    let silenced = SILENCED.with(|s| s.borrow_mut().take()).unwrap_or_default();
    if !done {
        return;
    }
    let fd = fd.unwrap_or(-1);
    let line_end = request.iter().position(|&b| b == b'\n').unwrap_or(request.len());
    let line = request[..line_end].strip_suffix(b"\r").unwrap_or(&request[..line_end]);
    let mut text = Vec::with_capacity(64 + line.len());
    let _ = writeln!(text, "<{fd} {}", String::from_utf8_lossy(line));
    if let Some(reply) = reply {
        describe_reply(&mut text, fd, line, reply, &silenced);
    }
    emit(&text);
}

/// The `>fd ...` lines memcached prints for `reply` to command `line`.
fn describe_reply(text: &mut Vec<u8>, fd: RawFd, line: &[u8], reply: &[u8], silenced: &[u8]) {
    let verb = line.split(|&b| b == b' ').next().unwrap_or_default();
    if !silenced.is_empty() && reply.is_empty() {
        let _ = writeln!(text, ">{fd} NOREPLY {}", String::from_utf8_lossy(silenced));
        return;
    }
    let single_line = |text: &mut Vec<u8>| {
        // Only a reply of exactly one line goes through `out_string`.
        if let Some(body) = reply.strip_suffix(b"\r\n").filter(|b| !b.contains(&b'\n')) {
            let _ = writeln!(text, ">{fd} {}", String::from_utf8_lossy(body));
        }
    };
    match verb {
        b"get" | b"gets" | b"gat" | b"gats" => get_lines(text, fd, reply),
        // Meta replies are written without `out_string` except `MN` and errors.
        b"mg" | b"ms" | b"md" | b"ma" | b"me" if !is_error(reply) => {}
        b"stats" | b"watch" | b"lru_crawler" if !is_error(reply) => {}
        _ => single_line(text),
    }
}

fn is_error(reply: &[u8]) -> bool {
    reply.starts_with(b"ERROR") || reply.starts_with(b"CLIENT_ERROR") || reply.starts_with(b"SERVER_ERROR")
}

/// `>fd sending key <k>` per `VALUE` of a get reply, then `>fd END`.
fn get_lines(text: &mut Vec<u8>, fd: RawFd, reply: &[u8]) {
    let mut rest = reply;
    while let Some(header) = rest.strip_prefix(b"VALUE ") {
        let Some(eol) = header.iter().position(|&b| b == b'\n') else { return };
        let mut fields = header[..eol].strip_suffix(b"\r").unwrap_or(&header[..eol]).split(|&b| b == b' ');
        let key = fields.next().unwrap_or_default();
        let Some(len) = fields.nth(1).and_then(|l| std::str::from_utf8(l).ok()).and_then(|l| l.parse::<usize>().ok()) else { return };
        let _ = writeln!(text, ">{fd} sending key {}", String::from_utf8_lossy(key));
        let Some(after) = header.get(eol + 1 + len + 2..) else { return };
        rest = after;
    }
    if rest.starts_with(b"END\r\n") {
        let _ = writeln!(text, ">{fd} END");
    } else if let Some(body) = rest.strip_suffix(b"\r\n").filter(|b| !b.contains(&b'\n')) {
        // An error line (a too-long key, ...).
        let _ = writeln!(text, ">{fd} {}", String::from_utf8_lossy(body));
    }
}

/// `<fd new ... connection` for an accepted client.
pub fn conn_new(fd: RawFd, protocol: ProtocolChoice) {
    let what = match protocol {
        ProtocolChoice::Auto => "new auto-negotiating client connection",
        ProtocolChoice::Ascii => "new ascii client connection.",
        ProtocolChoice::Binary => "new binary client connection.",
    };
    emit(format!("<{fd} {what}\n").as_bytes());
}

/// `fd: Client using the ... protocol` once a negotiating connection is decided.
pub fn negotiated(fd: Option<RawFd>, binary: bool) {
    let fd = fd.unwrap_or(-1);
    emit(format!("{fd}: Client using the {} protocol\n", if binary { "binary" } else { "ascii" }).as_bytes());
}

/// `<fd connection closed.`
pub fn conn_closed(fd: RawFd) {
    emit(format!("<{fd} connection closed.\n").as_bytes());
}

/// One write of whole lines to stderr (unbuffered, as memcached's).
fn emit(text: &[u8]) {
    let _ = std::io::stderr().lock().write_all(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(line: &str, reply: &str, silenced: &str) -> String {
        let mut text = Vec::new();
        describe_reply(&mut text, 7, line.as_bytes(), reply.as_bytes(), silenced.as_bytes());
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn replies_as_memcached_prints_them() {
        assert_eq!(describe("set a 0 0 1", "STORED\r\n", ""), ">7 STORED\n");
        assert_eq!(describe("set a 0 0 1 noreply", "", "STORED"), ">7 NOREPLY STORED\n");
        assert_eq!(describe("get a b", "VALUE a 0 1\r\nx\r\nVALUE b 5 3 9\r\nEND\r\nEND\r\n", ""), ">7 sending key a\n>7 sending key b\n>7 END\n");
        assert_eq!(describe("get nope", "END\r\n", ""), ">7 END\n");
        assert_eq!(describe("mg a v", "VA 1\r\nx\r\n", ""), "");
        assert_eq!(describe("mg", "CLIENT_ERROR bad command line format\r\n", ""), ">7 CLIENT_ERROR bad command line format\n");
        assert_eq!(describe("stats", "STAT pid 1\r\nEND\r\n", ""), "");
        assert_eq!(describe("incr n 3", "8\r\n", ""), ">7 8\n");
    }

    #[test]
    fn verbosity_clamps_to_memcached_maximum() {
        let v = Verbosity::new(3);
        assert!(v.tracing());
        v.set(1);
        assert!(!v.tracing());
        v.set(40);
        assert_eq!(v.level(), 2);
    }
}
