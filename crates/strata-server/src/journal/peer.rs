//! Asking a peer for its journal (`mj`, see `answer.rs`), with a bound on
//! everything: one deadline for connect, login, request and reply; a reply
//! line of at most 256 bytes; a block of at most 4 bytes per entry of the
//! largest journal. Any other answer (memcached's `ERROR` to an unknown
//! command, a refusal, garbage, silence) is an error with its reason, and
//! the restarting node starts cold.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

const LINE_MAX_BYTES: usize = 256;
const BLOCK_MAX_BYTES: u64 = 4 * super::MAX_ENTRIES as u64;

/// Resolve `HOST:PORT` to its first address.
pub fn resolve(peer: &str) -> Result<SocketAddr, String> {
    peer.to_socket_addrs().map_err(|e| format!("{peer}: cannot resolve: {e}"))?.next().ok_or_else(|| format!("{peer}: no address"))
}

/// Whether `addr` is this server: one of its ports, on an address it
/// listens on (a wildcard listener: any address of this host).
pub fn is_self(addr: SocketAddr, listen: &[SocketAddr]) -> bool {
    listen.iter().any(|l| {
        l.port() == addr.port() && (l.ip() == addr.ip() || (l.ip().is_unspecified() && is_local(addr.ip())))
    })
}

/// An address of this host: one a socket can be bound to.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Ask `addr` for the key tags changed since unix second `since`, logging
/// in with `login` (`user pass`, the `-Y` file's first entry) if, and only
/// if, the peer asks for it (a peer without `-Y` would store the login's
/// `set` as an item). A peer whose journal was born after `since` (with its
/// memory file: it saw nothing before) is believed only if it was born by
/// `born_by_unix`, the asking node's last heartbeat: a node that lost its
/// files and came back new after this one died could have taken writes
/// for this node's keys before, and forgotten them.
pub fn ask(addr: SocketAddr, since: i64, born_by_unix: i64, timeout: Duration, login: Option<&[u8]>) -> Result<Vec<u32>, AskError> {
    ask_once(addr, since, born_by_unix, timeout, login).map_err(|why| AskError { gone: GONE.iter().any(|p| why.starts_with(p)), why })
}

/// Why a peer did not answer with changes.
#[derive(Debug)]
pub struct AskError {
    pub why: String,
    /// The peer could not be reached or stopped answering (it may be
    /// restarting), as opposed to answering that it cannot vouch.
    pub gone: bool,
}

impl std::fmt::Display for AskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// The reasons that say the peer is gone, not that it refused.
const GONE: [&str; 5] = ["cannot connect", "cannot send", "no answer in time", "closed the connection", "read failed"];

fn ask_once(addr: SocketAddr, since: i64, born_by_unix: i64, timeout: Duration, login: Option<&[u8]>) -> Result<Vec<u32>, String> {
    let deadline = Instant::now() + timeout;
    let mut conn = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("cannot connect: {e}"))?;
    let _ = conn.set_nodelay(true);
    let mut reader = Reader { buf: Vec::new(), deadline };
    let request = format!("mj {}\r\n", since.max(0));
    send(&mut conn, request.as_bytes(), deadline)?;
    let mut line = reader.line(&mut conn)?;
    if line == b"CLIENT_ERROR unauthenticated" {
        let Some(token) = login else { return Err("it wants a login (-Y) and this node has none".into()) };
        let mut req = format!("set journal 0 0 {}\r\n", token.len()).into_bytes();
        req.extend_from_slice(token);
        req.extend_from_slice(b"\r\n");
        send(&mut conn, &req, deadline)?;
        let answer = reader.line(&mut conn)?;
        if answer != b"STORED" {
            return Err(format!("login refused: {}", printable(&answer)));
        }
        send(&mut conn, request.as_bytes(), deadline)?;
        line = reader.line(&mut conn)?;
    }
    let text = std::str::from_utf8(&line).map_err(|_| format!("garbage answer: {}", printable(&line)))?;
    let words: Vec<&str> = text.split(' ').collect();
    match words.as_slice() {
        ["JR", bytes, count, from, _now] => {
            let (Ok(bytes), Ok(count), Ok(from)) = (bytes.parse::<u64>(), count.parse::<u64>(), from.parse::<i64>()) else {
                return Err(format!("garbage answer: {}", printable(&line)));
            };
            if from > since.max(0) && from > born_by_unix {
                return Err(format!(
                    "its journal begins at unix {from}, after this node's last heartbeat (unix {born_by_unix}): it may have lost what it saw before"
                ));
            }
            if bytes != count.saturating_mul(4) || bytes > BLOCK_MAX_BYTES {
                return Err(format!("garbage answer: {}", printable(&line)));
            }
            let block = reader.exact(&mut conn, bytes as usize + 2)?;
            if !block.ends_with(b"\r\n") {
                return Err("garbage answer: block not ended by CRLF".into());
            }
            let _ = conn.write_all(b"quit\r\n");
            Ok(block[..bytes as usize].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        }
        ["JN", why] => Err(format!("its journal cannot answer ({why})")),
        ["ERROR"] => Err("no journal command (plain memcached?)".into()),
        _ => Err(format!("garbage answer: {}", printable(&line))),
    }
}

fn send(conn: &mut TcpStream, bytes: &[u8], deadline: Instant) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    conn.set_write_timeout(Some(left)).map_err(|e| e.to_string())?;
    conn.write_all(bytes).map_err(|e| format!("cannot send: {e}"))
}

fn printable(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(64)]).escape_default().to_string()
}

/// Reads lines and blocks, each read bounded by the one deadline.
struct Reader {
    buf: Vec<u8>,
    deadline: Instant,
}

impl Reader {
    fn fill(&mut self, conn: &mut TcpStream) -> Result<(), String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no answer in time".into());
        }
        conn.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 64 * 1024];
        match conn.read(&mut chunk) {
            Ok(0) => Err("closed the connection".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                Err("no answer in time".into())
            }
            Err(e) => Err(format!("read failed: {e}")),
        }
    }

    /// The next line, without its CRLF.
    fn line(&mut self, conn: &mut TcpStream) -> Result<Vec<u8>, String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..at].to_vec();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            if self.buf.len() > LINE_MAX_BYTES {
                return Err(format!("garbage answer: {}", printable(&self.buf)));
            }
            self.fill(conn)?;
        }
    }

    /// The next `n` bytes.
    fn exact(&mut self, conn: &mut TcpStream, n: usize) -> Result<Vec<u8>, String> {
        while self.buf.len() < n {
            self.fill(conn)?;
        }
        Ok(self.buf.drain(..n).collect())
    }
}
