//! Passing file descriptors between processes, for the socket handover
//! (`handover/`): a unix `SOCK_SEQPACKET` socket, whose messages keep their
//! boundaries and carry their descriptors with them (`SCM_RIGHTS`), so one
//! message is one header plus the descriptors it names, never half of two.
//!
//! `unsafe`: `sendmsg`/`recvmsg` and the `CMSG_*` macros have no safe
//! wrapper in std (its ancillary-data API is unstable) nor in socket2. Each
//! block below fills or reads a `msghdr` whose buffers we own and size with
//! `CMSG_SPACE`, and takes ownership of exactly the descriptors the kernel
//! reports in the control message.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

/// The most descriptors one message may carry (the kernel's SCM_MAX_FD).
pub const MAX_FDS: usize = 253;

/// A connected SEQPACKET socket.
pub struct Packet(Socket);

/// Listen on `path` (a stale socket file there is replaced; the caller
/// checked that nobody answers on it), mode 0600.
pub fn listen(path: &Path) -> io::Result<Socket> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let socket = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    socket.listen(4)?;
    Ok(socket)
}

/// Accept one connection on a socket from [`listen`] (blocking).
pub fn accept(listener: &Socket) -> io::Result<Packet> {
    let (socket, _) = listener.accept()?;
    Ok(Packet(socket))
}

/// Connect to `path`: `NotFound` or `ConnectionRefused` when nothing serves there.
pub fn connect(path: &Path) -> io::Result<Packet> {
    let socket = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
    socket.connect(&SockAddr::unix(path)?)?;
    Ok(Packet(socket))
}

impl Packet {
    /// Bound every send and receive (None: wait forever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_read_timeout(timeout)?;
        self.0.set_write_timeout(timeout)
    }

    /// The user id of the process at the other end (`SO_PEERCRED`).
    pub fn peer_uid(&self) -> io::Result<u32> {
        // SAFETY: an all-zero ucred is a valid value of that plain C struct.
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`, which we own.
        let rc = unsafe {
            libc::getsockopt(self.0.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut libc::ucred as *mut libc::c_void, &mut len)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(cred.uid)
    }

    /// The user id of this process.
    pub fn own_uid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Send one message of `bytes` carrying `fds` (at most [`MAX_FDS`]).
    pub fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors for one message"));
        }
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let fd_bytes = std::mem::size_of_val(raw.as_slice()) as u32;
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        let space = if raw.is_empty() { 0 } else { (unsafe { libc::CMSG_SPACE(fd_bytes) }) as usize };
        // u64 words: the control buffer must be aligned for cmsghdr.
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if space > 0 {
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space as _;
            // SAFETY: msg_control points at `space` zeroed, aligned bytes, so
            // CMSG_FIRSTHDR is non-null and CMSG_DATA has room for `raw`.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
                std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, raw.len());
            }
        }
        loop {
            // SAFETY: msg and everything it points to live across the call.
            let sent = unsafe { libc::sendmsg(self.0.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            if sent >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receive one message into `buf`: its length (0: the peer closed) and
    /// the descriptors it carried (close-on-exec). A message longer than
    /// `buf`, or with more descriptors than `max_fds`, is an error (its
    /// descriptors are closed).
    pub fn recv(&self, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
        let max_fds = max_fds.clamp(1, MAX_FDS);
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        let space = unsafe { libc::CMSG_SPACE((max_fds * std::mem::size_of::<RawFd>()) as u32) } as usize;
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let n = loop {
            // SAFETY: msg points at buffers we own, sized as declared.
            let n = unsafe { libc::recvmsg(self.0.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut fds = Vec::new();
        // SAFETY: the kernel filled msg_control up to msg_controllen; we walk
        // it with the CMSG macros and take each SCM_RIGHTS descriptor once.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                    let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "handover message truncated"));
        }
        Ok((n, fds))
    }
}
