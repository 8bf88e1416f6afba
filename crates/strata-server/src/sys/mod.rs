//! Platform layer: sockets, readiness and every system call the server
//! makes. Socket options and epoll (through `mio`, edge-triggered) live
//! here behind [`Listener`] and [`Stream`]; the io_uring wrapper
//! (`uring.rs`, the io_uring worker's ring; `read_ring.rs`, an epoll
//! worker's ring for flash reads), batched datagrams (`mmsg.rs`), CPU
//! pinning, thread priority, descriptor passing, the allocator's figures
//! and the TSC clock beside them. The only modules of the server allowed
//! `unsafe`, each named below, each block with its `// SAFETY:` comment.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[allow(unsafe_code)]
pub mod affinity;
#[allow(unsafe_code)]
pub mod fdpass;
pub mod in_flight;
#[allow(unsafe_code)]
pub mod malloc;
#[allow(unsafe_code)]
pub mod mmsg;
#[allow(unsafe_code)]
pub mod priority;
#[allow(unsafe_code)]
pub mod read_ring;
#[allow(unsafe_code)]
pub mod socket_writer;
#[allow(unsafe_code)]
pub mod tsc;
#[allow(unsafe_code)]
pub mod uring;

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, Protocol, Socket, Type};

/// A listening socket, TCP or unix.
pub enum Listener {
    Tcp(TcpListener, SocketAddr),
    Unix(UnixListener, PathBuf),
}

/// A client connection, TCP or unix.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Open a TCP listener with memcached's options: SO_REUSEADDR, IPv6-only for
/// IPv6 addresses (so `-l 0.0.0.0,::` binds both), and `-b` backlog.
pub fn tcp_listener(addr: SocketAddr, backlog: i32) -> io::Result<Listener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    let listener = TcpListener::from_std(socket.into());
    let local = listener.local_addr()?;
    Ok(Listener::Tcp(listener, local))
}

/// Open a UDP socket on `addr` with SO_REUSEPORT, so every worker can bind
/// its own socket to the same port and the kernel spreads datagrams.
pub fn udp_socket(addr: SocketAddr) -> io::Result<mio::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(mio::net::UdpSocket::from_std(socket.into()))
}

/// Open a unix-socket listener at `path` with permissions `mask` (`-a`).
/// A stale socket file from an earlier run is removed first, as memcached does.
pub fn unix_listener(path: &Path, mask: u32, backlog: i32) -> io::Result<Listener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask))?;
    socket.listen(backlog)?;
    let listener = UnixListener::from_std(socket.into());
    Ok(Listener::Unix(listener, path.to_path_buf()))
}

/// `-o sock_cookie_id`: memcached's `SO_MARK` on its listening sockets (for
/// firewall and routing rules; connections accepted from them inherit it).
/// Needs CAP_NET_ADMIN; as in memcached a refusal is reported, not fatal.
pub fn set_mark(socket: std::os::fd::BorrowedFd<'_>, mark: u32) {
    if let Err(e) = socket2::SockRef::from(&socket).set_mark(mark) {
        crate::log_line!("setsockopt: {e}");
    }
}

impl Listener {
    /// Accept one connection: the stream, the peer and the local address as
    /// `stats conns` prints them.
    pub fn accept(&self) -> io::Result<(Stream, String, String)> {
        match self {
            Listener::Tcp(l, local) => {
                let (stream, peer) = l.accept()?;
                stream.set_nodelay(true)?;
                Ok((Stream::Tcp(stream), format!("tcp:{peer}"), format!("tcp:{local}")))
            }
            Listener::Unix(l, path) => {
                let (stream, _) = l.accept()?;
                let name = format!("unix:{}", path.display());
                Ok((Stream::Unix(stream), name.clone(), name))
            }
        }
    }

    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _) => registry.register(l, token, Interest::READABLE),
            Listener::Unix(l, _) => registry.register(l, token, Interest::READABLE),
        }
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(_, a) => Some(*a),
            Listener::Unix(..) => None,
        }
    }

    /// A duplicate of the listening socket (a socket handover sends it).
    pub fn try_clone_fd(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        match self {
            Listener::Tcp(l, _) => l.as_fd().try_clone_to_owned(),
            Listener::Unix(l, _) => l.as_fd().try_clone_to_owned(),
        }
    }

    /// Remove the socket file of a unix listener.
    pub fn cleanup(&self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Stream {
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// The CPU the kernel ran this socket's receive path on
    /// (`SO_INCOMING_CPU`), for TCP; None for a unix socket or on error.
    pub fn incoming_cpu(&self) -> Option<usize> {
        match self {
            Stream::Tcp(s) => socket2::SockRef::from(s).cpu_affinity().ok(),
            Stream::Unix(_) => None,
        }
    }

    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => registry.register(s, token, interest),
            Stream::Unix(s) => registry.register(s, token, interest),
        }
    }

    pub fn deregister(&mut self, registry: &Registry) {
        let _ = match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
