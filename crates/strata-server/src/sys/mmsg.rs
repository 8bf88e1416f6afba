//! Datagrams in batches: `recvmmsg` fills up to [`BATCH`] datagrams in one
//! system call, `sendmmsg` sends the queued reply datagrams 64 per call.
//! All the `unsafe` of the UDP path is here.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use socket2::SockAddr;

/// Datagrams taken per `recvmmsg`.
pub const BATCH: usize = 16;
/// Messages per `sendmmsg` call (headers on the stack).
const SEND_CHUNK: usize = 64;

/// Receive buffers for one batch: `BATCH` buffers of `size` bytes (untouched
/// pages of a large allocation cost no memory until a datagram fills them).
pub struct RecvBatch {
    bufs: Vec<u8>,
    size: usize,
    addrs: Vec<libc::sockaddr_storage>,
    /// Per datagram of the last batch: its length (`None`: truncated) and
    /// the length of its sender's address.
    got: Vec<(Option<usize>, libc::socklen_t)>,
}

impl RecvBatch {
    pub fn new(size: usize) -> RecvBatch {
        RecvBatch {
            bufs: vec![0; BATCH * size],
            size,
            // SAFETY: all-zero bytes are a valid sockaddr_storage.
            addrs: vec![unsafe { zeroed() }; BATCH],
            got: Vec::with_capacity(BATCH),
        }
    }

    /// Take the datagrams waiting on `fd` (at most `BATCH`) without
    /// blocking; returns how many (0 when none: `WouldBlock` is not an error).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.got.clear();
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: self.bufs[i * self.size..].as_mut_ptr().cast(),
            iov_len: self.size,
        });
        // SAFETY: all-zero bytes are a valid mmsghdr; every pointer set below
        // points into `iovs`, `self.bufs` or `self.addrs`, which outlive the call.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, hdr) in hdrs.iter_mut().enumerate() {
            hdr.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_hdr.msg_iov = &mut iovs[i];
            hdr.msg_hdr.msg_iovlen = 1;
        }
        let count = loop {
            // SAFETY: `hdrs` holds BATCH valid headers (see above).
            let n = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(err),
            }
        };
        for hdr in &hdrs[..count] {
            // A datagram larger than a buffer arrives truncated.
            let truncated = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.got.push(((!truncated).then_some(hdr.msg_len as usize), hdr.msg_hdr.msg_namelen));
        }
        Ok(count)
    }

    /// Datagram `i` of the last batch and its sender; `None` if it was
    /// truncated or its address is not IP.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        let (len, addr_len) = *self.got.get(i)?;
        let len = len?;
        // SAFETY: the kernel wrote `addr_len` bytes of a socket address into
        // this sockaddr_storage.
        let addr = unsafe { SockAddr::new(self.addrs[i], addr_len) };
        let peer = addr.as_socket()?;
        Some((&self.bufs[i * self.size..i * self.size + len], peer))
    }
}

/// Reply datagrams queued for one `sendmmsg`.
#[derive(Default)]
pub struct SendBatch {
    data: Vec<u8>,
    msgs: Vec<(usize, usize, SockAddr)>,
}

impl SendBatch {
    pub fn push(&mut self, datagram: &[u8], peer: SocketAddr) {
        let start = self.data.len();
        self.data.extend_from_slice(datagram);
        self.msgs.push((start, datagram.len(), SockAddr::from(peer)));
    }

    pub fn queued_bytes(&self) -> usize {
        self.data.len()
    }

    /// Send everything queued on `fd`; returns the bytes the kernel took.
    /// A datagram the socket has no room for is dropped, as UDP may.
    pub fn flush(&mut self, fd: RawFd) -> u64 {
        let mut sent_bytes = 0;
        let mut done = 0;
        while done < self.msgs.len() {
            let chunk = &self.msgs[done..self.msgs.len().min(done + SEND_CHUNK)];
            let mut iovs: [libc::iovec; SEND_CHUNK] = std::array::from_fn(|i| match chunk.get(i) {
                Some(&(start, len, _)) => libc::iovec { iov_base: self.data[start..].as_ptr() as *mut libc::c_void, iov_len: len },
                None => libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 },
            });
            // SAFETY: all-zero bytes are a valid mmsghdr.
            let mut hdrs: [libc::mmsghdr; SEND_CHUNK] = unsafe { zeroed() };
            for ((hdr, iov), (_, _, addr)) in hdrs.iter_mut().zip(iovs.iter_mut()).zip(chunk) {
                hdr.msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                hdr.msg_hdr.msg_namelen = addr.len();
                hdr.msg_hdr.msg_iov = iov;
                hdr.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the first `chunk.len()` headers point at addresses in
            // `chunk` and iovecs in `iovs`, the iovecs into `self.data`; all
            // outlive the call.
            let n = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), chunk.len() as libc::c_uint, libc::MSG_DONTWAIT) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let taken = n.max(0) as usize;
            sent_bytes += hdrs[..taken].iter().map(|h| u64::from(h.msg_len)).sum::<u64>();
            done += taken;
            if taken < chunk.len() {
                done += 1; // the datagram the kernel refused (a full buffer) is dropped
            }
        }
        self.data.clear();
        self.msgs.clear();
        sent_bytes
    }
}
