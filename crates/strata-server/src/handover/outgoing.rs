//! The serving side of a handover: the control thread that waits on PATH,
//! and the state the acceptor, the workers and `main` fill while stopping.
//!
//! ```text
//!  control thread: accept ─ "takeover 1"? ─ send listener dups ─ active ─ request_shutdown
//!  acceptor:       stops accepting ─ acceptor_stopped
//!  workers:        wait_for_acceptor ─ drain ─ offer(conn) ─▶ conns [(dup fd, Resume)]
//!  main:           server.wait ─ engine.close ─ finish: send conns, "saved" ─ exit
//! ```
//!
//! Until the listeners are sent nothing changes: a bad request or a failed
//! send is logged and the process keeps serving.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Resume, CONN, JOURNAL, LISTENERS, REFUSED, SAVED, TAKEOVER};
use crate::core::Core;
use crate::sys::fdpass::{self, Packet};

/// How long a connected new process has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Journal bytes per message (the receiver's buffer holds a connection's
/// carried input, which is larger).
const PIECE_BYTES: usize = 16 << 10;
/// How long a worker waits for the acceptor to stop before draining.
const ACCEPTOR_WAIT: Duration = Duration::from_secs(1);

/// What a stopping process hands over (all empty while no handover runs).
#[derive(Default)]
pub struct Outgoing {
    /// A new process took the listeners: connections are passed, not closed.
    active: AtomicBool,
    acceptor_stopped: AtomicBool,
    /// Duplicates of the listening sockets, taken at start.
    listeners: Mutex<Vec<OwnedFd>>,
    control: Mutex<Option<Packet>>,
    /// Connections to pass: a duplicate of the socket and its state.
    conns: Mutex<Vec<(OwnedFd, Resume)>>,
    /// Connections closed instead (TLS, dumps, oversized input).
    closed: AtomicU64,
    /// When the listeners went (the log line's durations).
    began: Mutex<Option<Instant>>,
}

impl Outgoing {
    /// A handover is under way (the workers pass connections).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The acceptor left its loop: no connection arrives after this.
    pub fn acceptor_stopped(&self) {
        self.acceptor_stopped.store(true, Ordering::Release);
    }

    /// In a worker's drain: let the acceptor hand over what it accepted
    /// last (bounded), so the worker's channel holds every connection.
    pub fn wait_for_acceptor(&self) {
        let deadline = Instant::now() + ACCEPTOR_WAIT;
        while self.is_active() && !self.acceptor_stopped.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Take a stopping connection for the new process: true when taken (the
    /// worker then closes only its own descriptor, which leaves the
    /// connection open). `carry` is what the connection takes along, None
    /// when it cannot move (`session::carry`: only a plain connection with
    /// every reply written).
    pub fn offer(&self, socket: BorrowedFd<'_>, carry: impl FnOnce() -> Option<Resume>) -> bool {
        if !self.is_active() {
            return false;
        }
        let moved = carry().and_then(|resume| Some((socket.try_clone_to_owned().ok()?, resume)));
        let Some((fd, resume)) = moved else {
            self.closed.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).push((fd, resume));
        true
    }
}

/// Serve the control socket at `path` on its own thread; `listeners` are
/// duplicates of the listening sockets, sent to a process that takes over.
pub fn serve(core: &Arc<Core>, handover: &Arc<Outgoing>, path: &Path, listeners: Vec<OwnedFd>) -> io::Result<()> {
    let socket = fdpass::listen(path)?;
    *handover.listeners.lock().unwrap_or_else(|e| e.into_inner()) = listeners;
    let (shared, handover) = (core.clone(), handover.clone());
    let path = path.to_path_buf();
    std::thread::Builder::new().name("strata-handover".into()).spawn(move || loop {
        let control = match fdpass::accept(&socket) {
            Ok(control) => control,
            Err(e) => {
                crate::log_line!("strata: handover socket {}: accept failed: {e}", path.display());
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        match hand_listeners(&shared, &handover, &control) {
            Ok(()) => {
                crate::log_line!("strata: handover: a new process took the listeners; stopping (connections are passed, not closed)");
                *handover.control.lock().unwrap_or_else(|e| e.into_inner()) = Some(control);
                shared.request_shutdown();
                return;
            }
            Err(e) => crate::log_line!("strata: handover refused, still serving: {e}"),
        }
    })?;
    Ok(())
}

/// Read the request and send the listeners; Ok once they are sent (the
/// handover is then active).
fn hand_listeners(shared: &Core, handover: &Outgoing, control: &Packet) -> io::Result<()> {
    control.set_timeout(Some(REQUEST_TIMEOUT))?;
    // Only this process's user (or root) may take its sockets.
    let uid = control.peer_uid()?;
    if uid != 0 && uid != Packet::own_uid() {
        let _ = control.send(&[REFUSED, b"not the same user"].concat(), &[]);
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("a process of user {uid} asked")));
    }
    let mut request = [0u8; 128];
    let (n, _) = control.recv(&mut request, 1)?;
    if &request[..n] != TAKEOVER {
        let why = format!("unknown request {:?}", String::from_utf8_lossy(&request[..n]));
        let _ = control.send(&[REFUSED, why.as_bytes()].concat(), &[]);
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    if shared.is_shutting_down() {
        let _ = control.send(&[REFUSED, b"already stopping"].concat(), &[]);
        return Err(io::Error::other("already stopping"));
    }
    let listeners = handover.listeners.lock().unwrap_or_else(|e| e.into_inner());
    let fds: Vec<BorrowedFd<'_>> = listeners.iter().map(|fd| fd.as_fd()).collect();
    // Active before the send returns: the new process may start the
    // moment it has them, and this process must not close a connection.
    handover.active.store(true, Ordering::Release);
    *handover.began.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    if let Err(e) = control.send(LISTENERS, &fds) {
        handover.active.store(false, Ordering::Release);
        return Err(e);
    }
    Ok(())
}

/// After the server stopped and the memory file was written back (`main`):
/// pass the connections, then the journal (`journal`: its export, asked
/// for only when a handover runs), then say "saved". Nothing without a
/// handover.
pub fn finish(handover: &Outgoing, journal: impl FnOnce() -> Option<Vec<u8>>, saved: &io::Result<()>) {
    if !handover.is_active() {
        return;
    }
    let began = *handover.began.lock().unwrap_or_else(|e| e.into_inner());
    let stopped_ms = began.map_or(0, |t| t.elapsed().as_millis());
    let Some(control) = handover.control.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    let _ = control.set_timeout(Some(Duration::from_secs(10)));
    let conns = std::mem::take(&mut *handover.conns.lock().unwrap_or_else(|e| e.into_inner()));
    let mut passed = 0usize;
    for (fd, resume) in &conns {
        let mut msg = Vec::with_capacity(CONN.len() + 1 + resume.input.len());
        msg.extend_from_slice(CONN);
        msg.push(u8::from(resume.unauthenticated));
        msg.extend_from_slice(&resume.input);
        if let Err(e) = control.send(&msg, &[fd.as_fd()]) {
            crate::log_line!("strata: handover: passing a connection failed: {e}");
            break;
        }
        passed += 1;
    }
    // The journal goes on in the new process (`journal/carry.rs`).
    if let Some(journal) = journal() {
        for piece in journal.chunks(PIECE_BYTES) {
            if let Err(e) = control.send(&[JOURNAL, piece].concat(), &[]) {
                crate::log_line!("strata: handover: passing the journal failed: {e}");
                break;
            }
        }
    }
    let note = match saved {
        Ok(()) => "memory file saved",
        Err(_) => "memory file NOT saved",
    };
    if let Err(e) = control.send(SAVED, &[]) {
        crate::log_line!("strata: handover: could not tell the new process: {e}");
    }
    crate::log_line!(
        "strata: handover: passed {passed} of {} connections ({} closed: TLS, dumps, mid-block); {note}; stopped in {stopped_ms} ms, passed in {} ms; exiting",
        conns.len(),
        handover.closed.load(Ordering::Relaxed) as usize + conns.len() - passed,
        began.map_or(0, |t| t.elapsed().as_millis()) - stopped_ms
    );
}
