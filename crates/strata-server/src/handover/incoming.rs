//! The starting side of a handover: [`take_over`] runs in `main` before
//! the memory file is opened (the old process writes it back first) and
//! keeps what it received here until `Server::start` binds: a listener
//! whose address the new command line also asks for is used as is (its
//! backlog kept every connection that arrived meanwhile); one it no longer
//! asks for is closed; the connections go to the workers with their unread
//! input, once the journal sync has run (`server.rs`).
//!
//! A process-wide slot, not a parameter: the handover happens once, before
//! the engine exists, and in `main` only (an in-process test server that
//! never calls [`take_over`] finds it empty).

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Resume, CONN, JOURNAL, LISTENERS, MAX_CARRIED_INPUT_BYTES, REFUSED, SAVED, TAKEOVER};
use crate::sys::fdpass::{self, MAX_FDS};
use crate::sys::{Listener, Stream};
use crate::new_conn::NewConn;

/// How long the old process has for each step (draining, writing back the
/// memory file, exiting).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest journal export: its header, 4,096 marks, the largest ring.
const JOURNAL_MAX_BYTES: usize = 16 + 4096 * 16 + 4 * crate::settings::JOURNAL_MAX_ENTRIES;

struct Inherited {
    listeners: Vec<(SocketAddr, std::net::TcpListener)>,
    conns: Vec<(OwnedFd, Resume)>,
    /// The old process's journal (`journal/carry.rs`), its pieces joined.
    journal: Vec<u8>,
}

static INHERITED: Mutex<Option<Inherited>> = Mutex::new(None);

/// What a takeover received.
#[derive(Debug)]
pub struct TakenOver {
    pub listeners: usize,
    pub conns: usize,
    /// From the request to the old process's exit.
    pub waited: Duration,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// Take over from the process serving the control socket at `path`.
/// Ok(None): nothing serves there (a plain start). Err: the old process
/// refused or could not be reached properly; it keeps serving unless it
/// already sent its listeners (then it is stopping anyway). What can fail
/// later is checked first (`check`: the caller's, that the TLS
/// certificates load), so a bad new configuration leaves the old process
/// serving.
pub fn take_over(path: &Path, settings: &crate::Settings, check: impl FnOnce() -> Result<(), String>) -> io::Result<Option<TakenOver>> {
    check().map_err(|e| invalid(format!("not taking over: {e}")))?;
    let started = Instant::now();
    let control = match fdpass::connect(path) {
        Ok(control) => control,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => {
            ports_free(settings)?;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    control.set_timeout(Some(STEP_TIMEOUT))?;
    control.send(TAKEOVER, &[])?;
    let mut buf = vec![0u8; MAX_CARRIED_INPUT_BYTES + 64];
    let (n, fds) = control.recv(&mut buf, MAX_FDS)?;
    let msg = &buf[..n];
    if let Some(why) = msg.strip_prefix(REFUSED) {
        return Err(invalid(format!("the serving process refused: {}", String::from_utf8_lossy(why))));
    }
    if msg != LISTENERS {
        return Err(invalid(format!("unexpected answer {:?}", String::from_utf8_lossy(msg))));
    }
    let mut inherited = Inherited { listeners: Vec::new(), conns: Vec::new(), journal: Vec::new() };
    for fd in fds {
        let listener = std::net::TcpListener::from(fd);
        if let Ok(addr) = listener.local_addr() {
            inherited.listeners.push((addr, listener));
        }
    }
    let mut journal_overflow = false;
    loop {
        let (n, mut fds) = match control.recv(&mut buf, 1) {
            Ok(got) => got,
            Err(e) => {
                // Keep the listeners (nothing else serves them now) but do
                // not map a file the old process may still be writing.
                *INHERITED.lock().unwrap_or_else(|e| e.into_inner()) = Some(inherited);
                return Err(io::Error::new(e.kind(), format!("waiting for the serving process to stop: {e}")));
            }
        };
        let msg = &buf[..n];
        if n == 0 {
            crate::log_line!("strata: handover: the old process exited before saying its memory file was saved");
            break;
        }
        if msg == SAVED {
            // Its exit closes the control connection: then every socket it
            // had (UDP, metrics) is free to bind.
            while matches!(control.recv(&mut buf, 1), Ok((n, _)) if n > 0) {}
            break;
        }
        if let Some(piece) = msg.strip_prefix(JOURNAL) {
            // More than any journal holds is not one: kept unparsable
            // (an empty journal: a peer's sync may start cold, at worst).
            if journal_overflow || inherited.journal.len() + piece.len() > JOURNAL_MAX_BYTES {
                journal_overflow = true;
                inherited.journal = vec![0xff];
            } else {
                inherited.journal.extend_from_slice(piece);
            }
            continue;
        }
        match (msg.strip_prefix(CONN), fds.pop()) {
            (Some([auth, input @ ..]), Some(fd)) => {
                inherited.conns.push((fd, Resume { input: input.to_vec(), unauthenticated: *auth != 0 }))
            }
            _ => crate::log_line!("strata: handover: ignored a malformed message of {n} bytes"),
        }
    }
    let taken = TakenOver { listeners: inherited.listeners.len(), conns: inherited.conns.len(), waited: started.elapsed() };
    *INHERITED.lock().unwrap_or_else(|e| e.into_inner()) = Some(inherited);
    Ok(Some(taken))
}

/// A plain start: fail before the memory file is opened if a port is
/// taken (a handover under way, whose new process holds the listeners
/// and serves the control socket only once it listens).
fn ports_free(settings: &crate::Settings) -> io::Result<()> {
    for addr in settings.tcp_listen.iter().filter(|a| a.port() != 0) {
        let socket = socket2::Socket::new(socket2::Domain::for_address(*addr), socket2::Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        if let Err(e) = socket.bind(&(*addr).into()) {
            return Err(io::Error::new(e.kind(), format!("nothing serves the control socket, and {addr} is taken: {e}")));
        }
    }
    Ok(())
}

/// The old process's journal, its pieces joined (empty: none), taken
/// once: the runtime replays it into this one's before any request
/// (`journal/carry.rs`), so the node answers peers for windows before its
/// own start.
pub fn take_journal() -> Vec<u8> {
    let mut slot = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    slot.as_mut().map(|inherited| std::mem::take(&mut inherited.journal)).unwrap_or_default()
}

/// The inherited listener bound to `addr`, if any (`Server::start`).
pub fn listener(addr: SocketAddr) -> Option<Listener> {
    let mut slot = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let inherited = slot.as_mut()?;
    let at = inherited.listeners.iter().position(|(a, _)| *a == addr)?;
    let (local, listener) = inherited.listeners.swap_remove(at);
    listener.set_nonblocking(true).ok()?;
    Some(Listener::Tcp(mio::net::TcpListener::from_std(listener), local))
}

/// The inherited connections, ready for the workers; listeners nobody
/// asked for are closed here.
pub fn conns() -> Vec<NewConn> {
    let Some(inherited) = INHERITED.lock().unwrap_or_else(|e| e.into_inner()).take() else { return Vec::new() };
    let mut out = Vec::new();
    for (fd, resume) in inherited.conns {
        let stream = std::net::TcpStream::from(fd);
        let (Ok(peer), Ok(local)) = (stream.peer_addr(), stream.local_addr()) else { continue };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = stream.set_nodelay(true);
        out.push(NewConn {
            stream: Stream::Tcp(mio::net::TcpStream::from_std(stream)),
            peer: format!("tcp:{peer}"),
            listen: format!("tcp:{local}"),
            tls: crate::settings::ListenTls::Off,
            resume: Some(Box::new(resume)),
        });
    }
    out
}
