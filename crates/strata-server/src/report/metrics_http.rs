//! The `strata-metrics` thread: a plain HTTP/1.x listener for `-o
//! metrics_listen=ADDR:PORT`, answering `GET /metrics` with
//! [`metrics::render`](super::metrics::render). Requests are parsed with
//! `httparse`; nothing here touches a worker or the request path.
//!
//! ```text
//!  accept ─► read ≤ 8 KiB head (deadline 2 s) ─► httparse ─► one reply ─► close
//!             over 8 KiB: 431    garbage: 400    not GET/HEAD: 405
//!             too slow: 408      not /metrics: 404
//! ```
//!
//! One connection at a time, one request per connection (`Connection:
//! close`): a scraper sends one request every few seconds. The head must
//! arrive within 2 s and the reply be taken within 2 s, so a client that
//! sends slowly or reads slowly holds the thread 4 s at most, and never
//! holds anything a worker needs. A request head is never buffered past
//! 8 KiB and a body is never read.
//!
//! The listener is bound in `Server::start` before any thread starts, so an
//! address in use fails the start with a message naming it. Shutdown wakes
//! the blocking `accept` by connecting to the listener once.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::runtime::Runtime;

/// Largest request head read; past it the answer is 431.
pub const MAX_HEAD_BYTES: usize = 8 << 10;
/// Time a client has to send its request head, and to take the whole reply.
const READ_DEADLINE: Duration = Duration::from_secs(2);
const WRITE_DEADLINE: Duration = Duration::from_secs(2);
const MAX_HEADERS: usize = 32;
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind the metrics address (`-o metrics_listen`), before anything starts.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen for metrics on {addr} (-o metrics_listen): {e}")))
}

/// Start the `strata-metrics` thread on a bound listener.
pub fn start(shared: &Arc<Runtime>, listener: TcpListener) -> io::Result<JoinHandle<()>> {
    let local = listener.local_addr()?;
    // A wildcard address is woken through loopback.
    let wake_addr = match local {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from(([127, 0, 0, 1], a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
        other => other,
    };
    shared.core.on_shutdown(Box::new(move || {
        let _ = TcpStream::connect_timeout(&wake_addr, Duration::from_millis(200));
    }));
    let shared = shared.clone();
    std::thread::Builder::new().name("strata-metrics".into()).spawn(move || serve(&shared, &listener))
}

fn serve(shared: &Arc<Runtime>, listener: &TcpListener) {
    loop {
        let accepted = listener.accept();
        if shared.core.is_shutting_down() {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                let _ = answer(shared, stream);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                crate::log_line!("strata: metrics accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Metrics { head_only: bool },
    /// A status line and a short text body.
    Refuse(u16, &'static str),
}

/// Read one request head and answer it.
fn answer(shared: &Arc<Runtime>, mut stream: TcpStream) -> io::Result<()> {
    let route = read_head(&mut stream)?;
    match route {
        Route::Metrics { head_only } => {
            let body = super::metrics::render(shared);
            respond(&mut stream, 200, CONTENT_TYPE, body.as_bytes(), head_only)
        }
        Route::Refuse(code, text) => respond(&mut stream, code, "text/plain; charset=utf-8", text.as_bytes(), false),
    }
}

/// Read until the head parses, is refused, or the deadline passes.
fn read_head(stream: &mut TcpStream) -> io::Result<Route> {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut head = Head::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Route::Refuse(408, "request timeout\n"));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(head.spare()) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                if let Some(route) = head.received(n) {
                    return Ok(route);
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Ok(Route::Refuse(408, "request timeout\n"))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A request head as its bytes arrive: never more than [`MAX_HEAD_BYTES`]
/// buffered, whatever the client sends, and parsed again only when the
/// arrival can have changed the answer: a blank line (the end of a head)
/// arrived, or the head doubled since it was last parsed (an error shows
/// by then). A client dribbling a head a byte at a time costs a few
/// parses, not one per byte (8 KiB of one-byte reads were 8,192 parses of
/// up to 8 KiB each).
pub struct Head {
    buf: Box<[u8]>,
    len: usize,
    /// Leading empty lines (`\r\n` or `\n`), which httparse skips too.
    lead: usize,
    /// Bytes after `lead` at the last parse.
    parsed: usize,
    parses: u32,
}

impl Default for Head {
    fn default() -> Head {
        Head { buf: vec![0u8; MAX_HEAD_BYTES].into_boxed_slice(), len: 0, lead: 0, parsed: 0, parses: 0 }
    }
}

impl Head {
    /// Where the next bytes go; never empty before [`Head::received`] has
    /// returned a route.
    pub fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// `n` more bytes were written to [`Head::spare`]: the route once the
    /// head is complete or refused (431 once the buffer is full), `None`
    /// while more is needed.
    pub fn received(&mut self, n: usize) -> Option<Route> {
        let from = self.len;
        self.len = (self.len + n).min(self.buf.len());
        // Only while nothing but empty lines came (a '\r' may wait for its '\n').
        let mut leading = self.lead == from || (self.lead + 1 == from && self.buf[self.lead] == b'\r');
        while leading {
            leading = false;
            match &self.buf[self.lead..self.len] {
                [b'\n', ..] => (self.lead, leading) = (self.lead + 1, true),
                [b'\r', b'\n', ..] => (self.lead, leading) = (self.lead + 2, true),
                _ => {}
            }
        }
        let full = self.len == self.buf.len();
        let content = &self.buf[self.lead..self.len];
        let fresh = &content[from.saturating_sub(self.lead + 2).min(content.len())..];
        let blank_line = fresh.windows(2).any(|w| w == b"\n\n") || fresh.windows(3).any(|w| w == b"\n\r\n");
        if !content.is_empty() && (blank_line || full || content.len() >= 2 * self.parsed) {
            self.parsed = content.len();
            self.parses += 1;
            if let Some(route) = route(content) {
                return Some(route);
            }
        }
        full.then_some(Route::Refuse(431, "request head too large\n"))
    }

    /// The bytes received so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// How many times the head was parsed.
    pub fn parses(&self) -> u32 {
        self.parses
    }
}

/// The route of a request head, `None` while it is incomplete.
pub fn route(head: &[u8]) -> Option<Route> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Partial) => None,
        Err(httparse::Error::TooManyHeaders) => Some(Route::Refuse(431, "too many header fields\n")),
        Err(_) => Some(Route::Refuse(400, "bad request\n")),
        Ok(httparse::Status::Complete(_)) => {
            let path = req.path.unwrap_or("");
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            Some(match (req.method.unwrap_or(""), path) {
                ("GET", "/metrics") => Route::Metrics { head_only: false },
                ("HEAD", "/metrics") => Route::Metrics { head_only: true },
                (_, "/metrics") => Route::Refuse(405, "method not allowed: GET /metrics\n"),
                _ => Route::Refuse(404, "not found: GET /metrics\n"),
            })
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// `write_all`, given up at `deadline` (a client reading a byte at a
/// time cannot hold the thread longer than a client that never reads).
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The status line and headers of a reply with a body of `body_len` bytes.
pub fn response_head(code: u16, content_type: &str, body_len: usize) -> String {
    let allow = if code == 405 { "Allow: GET, HEAD\r\n" } else { "" };
    format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {body_len}\r\n{allow}Connection: close\r\n\r\n",
        reason(code)
    )
}

fn respond(stream: &mut TcpStream, code: u16, content_type: &str, body: &[u8], head_only: bool) -> io::Result<()> {
    let head = response_head(code, content_type, body.len());
    let deadline = Instant::now() + WRITE_DEADLINE;
    write_by(stream, head.as_bytes(), deadline)?;
    if !head_only {
        write_by(stream, body, deadline)?;
    }
    // Let the client read the reply before the close (no reset on unread input).
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Some(Route::Metrics { head_only: false }));
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Some(Route::Metrics { head_only: false }));
        assert_eq!(route(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Some(Route::Metrics { head_only: true }));
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost"), None);
        assert!(matches!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Some(Route::Refuse(405, _))));
        assert!(matches!(route(b"GET / HTTP/1.1\r\n\r\n"), Some(Route::Refuse(404, _))));
        assert!(matches!(route(b"\x00\x01garbage\r\n\r\n"), Some(Route::Refuse(400, _))));
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        let req = format!("GET /metrics HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(route(req.as_bytes()), Some(Route::Refuse(431, _))));
    }

    fn dribble(bytes: &[u8]) -> (Option<Route>, u32) {
        let mut head = Head::default();
        for &b in bytes {
            head.spare()[0] = b;
            if let Some(route) = head.received(1) {
                return (Some(route), head.parses());
            }
        }
        (None, head.parses())
    }

    /// Bug found by the `http` fuzz target: every read parsed the whole
    /// head again, so a head sent a byte at a time was parsed once per
    /// byte (8,192 parses of up to 8 KiB for a full head, over a second
    /// under the fuzzer's sanitizers).
    #[test]
    fn a_head_sent_a_byte_at_a_time_is_parsed_a_few_times() {
        let long = format!("GET /metrics HTTP/1.1\r\nCookie: {}", "c".repeat(9000));
        let (route, parses) = dribble(long.as_bytes());
        assert!(matches!(route, Some(Route::Refuse(431, _))) && parses <= 16, "{route:?} after {parses} parses");
        let newlines = "\n".repeat(9000);
        assert_eq!(dribble(newlines.as_bytes()), (Some(Route::Refuse(431, "request head too large\n")), 0));
        let scrape = "\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        let (route, parses) = dribble(scrape.as_bytes());
        assert!(route == Some(Route::Metrics { head_only: false }) && parses <= 8, "{route:?} after {parses} parses");
        // Junk is still refused, by the time it has doubled at the latest.
        assert!(matches!(dribble(b"\x00\x01garbage"), (Some(Route::Refuse(400, _)), 1)));
        assert!(matches!(dribble(b"GET /metrics HTTP/1.1\r\nbad header\r\n"), (Some(Route::Refuse(400, _)), _)));
    }
}
