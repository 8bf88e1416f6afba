//! A client socket written from a thread other than its connection's
//! worker: a key dump's printer (`ops/dump_feed.rs`) writes its lines
//! straight to the client, as memcached's crawler thread does, so the
//! dump's bytes cost the worker nothing. The writer holds a descriptor of
//! its own (a `dup` of the connection's), so a worker that closes the
//! connection meanwhile can never leave it writing to a reused descriptor
//! number; the socket itself closes when both are gone. `unsafe` here: the
//! libc calls.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A descriptor of its own for a connection's socket.
pub struct SocketWriter(OwnedFd);

impl SocketWriter {
    /// Duplicate `fd`, which the caller keeps open for the duration of the
    /// call (a live connection's socket).
    pub fn dup(fd: RawFd) -> io::Result<SocketWriter> {
        // SAFETY: F_DUPFD_CLOEXEC takes no pointers; an invalid `fd` is an
        // error return, not undefined behaviour.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if new < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `new` is a fresh descriptor that nothing else owns.
        Ok(SocketWriter(unsafe { OwnedFd::from_raw_fd(new) }))
    }

    /// Send all of `buf`. While the socket is full, wait for room at most
    /// `wait` at a time and give up (`ErrorKind::Interrupted`) as soon as
    /// `stop()` says so; a closed or failed socket is its error.
    /// `waiting(true)` is called before each wait for room and
    /// `waiting(false)` once there is room.
    pub fn write_all(&self, mut buf: &[u8], wait: Duration, stop: impl Fn() -> bool, mut waiting: impl FnMut(bool)) -> io::Result<()> {
        let fd = self.0.as_raw_fd();
        let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        while !buf.is_empty() {
            // SAFETY: `buf` is valid for `buf.len()` bytes for the call.
            let sent = unsafe {
                libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
            };
            if sent >= 0 {
                buf = &buf[sent as usize..];
                continue;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {}
                _ => return Err(err),
            }
            waiting(true);
            loop {
                if stop() {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let mut pfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd, alive for the call.
                let ready = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
                if ready > 0 {
                    waiting(false);
                    break;
                }
                if ready < 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::Interrupted {
                        return Err(err);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether the socket `fd` is broken for good: reset by the peer, or shut
/// in both directions (`POLLERR`/`POLLHUP`; a peer that only shut its
/// sending side is not). Never waits.
pub fn hung_up(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd { fd, events: 0, revents: 0 };
    // SAFETY: one valid pollfd, alive for the call; timeout 0.
    let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
    ready > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn writes_through_its_own_descriptor_after_the_original_closes() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let writer = SocketWriter::dup(ours.as_raw_fd()).unwrap();
        drop(ours);
        // More than a socket buffer: the writer must wait for the reader.
        let data: Vec<u8> = (0..4 << 20).map(|i| i as u8).collect();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            theirs.read_to_end(&mut got).unwrap();
            got
        });
        writer.write_all(&data, Duration::from_millis(10), || false, |_| {}).unwrap();
        drop(writer);
        assert_eq!(reader.join().unwrap(), data);
    }

    #[test]
    fn a_full_socket_gives_up_when_told_to_stop() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let writer = SocketWriter::dup(ours.as_raw_fd()).unwrap();
        let err = writer.write_all(&vec![0u8; 16 << 20], Duration::from_millis(1), || true, |_| {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
    }

    #[test]
    fn a_closed_peer_is_an_error_not_a_signal() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let writer = SocketWriter::dup(ours.as_raw_fd()).unwrap();
        assert!(writer.write_all(b"x", Duration::from_millis(1), || false, |_| {}).is_err());
    }
}
