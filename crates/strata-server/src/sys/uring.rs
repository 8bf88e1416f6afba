//! A small safe wrapper over one io_uring instance, for one worker.
//!
//! Every `unsafe` block of the io_uring engine is in this file (and the
//! epoll engine's flash read ring in read_ring.rs). The wrapper
//! keeps the two promises the kernel needs and callers cannot break:
//!
//! - **Send buffers stay put.** [`Ring::send`] takes ownership of the `Vec`
//!   being sent and keeps it in a slot until the completion arrives, then
//!   hands it back in [`Completion::buffer`]; nothing can grow or free it
//!   while the kernel reads it.
//! - **Flash read buffers stay put** the same way: [`Ring::read_flash`]
//!   keeps the [`FlashBuf`] (an anonymous mapping) in a slot until the
//!   read's completion hands it back in [`Completion::flash_buf`].
//! - **Receive buffers come from a registered ring** ([`BufRing`]): up to
//!   `count` buffers of `size` bytes, made in chunks that never move, 16
//!   at first and doubled when a receive finds none; a page-aligned ring
//!   of entries.
//!   A multishot receive picks one per completion; the caller copies the bytes
//!   out ([`Ring::received`]) and the buffer goes straight back to the ring.
//!
//! ```text
//!  user_data (u64) = [ slot or token : 56 | kind : 8 ]
//!  BufRing entries:  [ addr u64 | len u32 | bid u16 | resv/tail u16 ] x count
//! ```

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use io_uring::types::{BufRingEntry, SubmitArgs, Timespec};
use strata_store::FlashBuf;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::in_flight::InFlight;

/// What an operation was, in the low byte of its user data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Recv = 1,
    Send = 2,
    Wake = 3,
    Poll = 4,
    Cancel = 5,
    /// A flash read into a [`FlashBuf`] (`-o ext_path`).
    FlashRead = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Recv),
            2 => Some(Kind::Send),
            3 => Some(Kind::Wake),
            4 => Some(Kind::Poll),
            5 => Some(Kind::Cancel),
            6 => Some(Kind::FlashRead),
            _ => None,
        }
    }
}

fn user_data(kind: Kind, token: u64) -> u64 {
    (token << 8) | kind as u64
}

/// One completion, decoded.
pub struct Completion {
    pub kind: Kind,
    pub token: u64,
    pub result: i32,
    /// More completions will come for this (multishot) operation.
    pub more: bool,
    /// Receive: the provided buffer that holds the data.
    pub buffer_id: Option<u16>,
    /// Send: the buffer handed to [`Ring::send`], and the offset it was sent from.
    pub buffer: Option<(Vec<u8>, usize)>,
    /// Flash read: the buffer handed to [`Ring::read_flash`], and its key
    /// position (`key_index`).
    pub flash_buf: Option<(FlashBuf, usize)>,
}

/// Provided receive buffers, registered with the kernel as buffer group
/// `bgid`: a ring of `count` entries, and the buffers it hands out, made
/// in chunks of [`RECV_CHUNK_BUFFERS`] that never move (the kernel holds
/// their addresses). It starts with [`RECV_BUFFERS_INITIAL`] and doubles,
/// up to `count`, each time a receive finds none left while the worker
/// has fewer than [`RECV_BUFFERS_PER_CONN`] per connection ([`Ring::grow_recv_buffers`]):
/// the kernel takes buffers from the head and they come back at the tail,
/// so every buffer provided is written to in turn and stays resident; a
/// worker that never has many receives in flight keeps a few.
struct BufRing {
    entries: *mut BufRingEntry,
    entries_layout: std::alloc::Layout,
    chunks: Vec<Box<[u8]>>,
    size: usize,
    count: u16,
    tail: u16,
    bgid: u16,
}

impl BufRing {
    fn new(ring: &IoUring, bgid: u16, count: u16, size: usize) -> io::Result<BufRing> {
        assert!(count.is_power_of_two() && count >= RECV_BUFFERS_INITIAL && count % RECV_CHUNK_BUFFERS == 0);
        let layout = std::alloc::Layout::from_size_align(usize::from(count) * std::mem::size_of::<BufRingEntry>(), 4096)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer ring layout"))?;
        // SAFETY: the layout has a non-zero size; zeroed memory is a valid
        // (empty) ring of entries.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut BufRingEntry;
        if entries.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "buffer ring"));
        }
        let mut buf_ring = BufRing { entries, entries_layout: layout, chunks: Vec::new(), size, count, tail: 0, bgid };
        // SAFETY: `entries` is page-aligned, `count` entries long, and lives
        // until Drop, which unregisters it before freeing.
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, count, bgid, 0)? };
        buf_ring.provide(RECV_BUFFERS_INITIAL);
        Ok(buf_ring)
    }

    /// Buffers made so far (ids `0..provided`).
    fn provided(&self) -> u16 {
        (self.chunks.len() * usize::from(RECV_CHUNK_BUFFERS)) as u16
    }

    /// Make buffers up to `total` and put the new ones in the ring.
    fn provide(&mut self, total: u16) {
        let first = self.provided();
        while self.provided() < total.min(self.count) {
            self.chunks.push(vec![0; usize::from(RECV_CHUNK_BUFFERS) * self.size].into_boxed_slice());
        }
        for bid in first..self.provided() {
            self.push(bid);
        }
        self.publish();
    }

    /// A receive found no buffer: double them, up to the ring's size.
    /// False: the ring is at its size already.
    fn grow(&mut self) -> bool {
        let provided = self.provided();
        if provided >= self.count {
            return false;
        }
        self.provide(provided.saturating_mul(2));
        true
    }

    /// Buffer `bid`'s bytes.
    fn buffer(&self, bid: u16) -> &[u8] {
        let chunk = &self.chunks[usize::from(bid / RECV_CHUNK_BUFFERS)];
        let start = usize::from(bid % RECV_CHUNK_BUFFERS) * self.size;
        &chunk[start..start + self.size]
    }

    /// Put buffer `bid` back at the tail (visible after [`BufRing::publish`]).
    fn push(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        let addr = self.buffer(bid).as_ptr() as u64;
        // SAFETY: index < count, inside the allocation made in `new`.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(addr);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field overlays entry 0's `resv`, inside our
        // allocation; the kernel reads it with acquire semantics.
        unsafe {
            let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn data(&self, bid: u16, len: usize) -> &[u8] {
        &self.buffer(bid)[..len.min(self.size)]
    }
}

/// One worker's ring.
pub struct Ring {
    ring: IoUring,
    bufs: BufRing,
    /// Send buffers (and the offset sent from) in flight, with their
    /// connections; the slot is the send's token.
    sends: InFlight<(Vec<u8>, usize), u64>,
    /// Target of the eventfd read; owned here so it outlives the operation.
    wake_buf: Box<[u8; 8]>,
    /// Flash read buffers in flight, with their connections: the ring
    /// owns each until its completion, as it owns send buffers.
    reads: InFlight<(FlashBuf, usize), u64>,
}

/// Receive buffers: at most `RECV_BUFFERS` of `RECV_BUFFER_SIZE` bytes per
/// worker, starting with `RECV_BUFFERS_INITIAL`, made `RECV_CHUNK_BUFFERS`
/// at a time.
pub const RECV_BUFFERS: u16 = 512;
pub const RECV_BUFFERS_INITIAL: u16 = 16;
/// Buffers per connection a worker grows its receive buffers to, at most.
pub const RECV_BUFFERS_PER_CONN: usize = 4;
const RECV_CHUNK_BUFFERS: u16 = 16;
pub const RECV_BUFFER_SIZE: usize = 8192;
const BUFFER_GROUP: u16 = 0;

impl Ring {
    /// A ring of `sq_entries` submissions and `cq_entries` completions.
    pub fn new(sq_entries: u32, cq_entries: u32) -> io::Result<Ring> {
        // Deferred task work: completions are posted only when this thread
        // asks for them (the wait at the top of each loop turn), not by
        // interrupting it while it runs requests. Kernels before 6.1 lack it.
        let ring = match IoUring::builder().setup_defer_taskrun().setup_single_issuer().setup_cqsize(cq_entries).build(sq_entries) {
            Ok(ring) => ring,
            Err(_) => IoUring::builder().setup_coop_taskrun().setup_single_issuer().setup_cqsize(cq_entries).build(sq_entries)?,
        };
        let bufs = BufRing::new(&ring, BUFFER_GROUP, RECV_BUFFERS, RECV_BUFFER_SIZE)?;
        Ok(Ring {
            ring,
            bufs,
            sends: InFlight::default(),
            wake_buf: Box::new([0; 8]),
            reads: InFlight::default(),
        })
    }

    /// Bytes of the provided receive buffers and their ring of entries
    /// (`stats memory` `uring_recv_buffers_bytes`).
    pub fn recv_buffer_bytes(&self) -> usize {
        self.bufs.chunks.iter().map(|c| c.len()).sum::<usize>() + self.bufs.entries_layout.size()
    }

    /// A receive ended with ENOBUFS on a worker with `connections`:
    /// provide more buffers (double, up to [`RECV_BUFFERS`]) while there
    /// are fewer than [`RECV_BUFFERS_PER_CONN`] per connection. More would
    /// not help a few fast senders (their bytes wait in the socket for the
    /// next turn either way), only many connections receiving at once.
    /// False: nothing was added.
    pub fn grow_recv_buffers(&mut self, connections: usize) -> bool {
        usize::from(self.bufs.provided()) < connections.saturating_mul(RECV_BUFFERS_PER_CONN) && self.bufs.grow()
    }

    /// Whether io_uring with provided buffer rings works on this kernel.
    ///
    /// The probe ring is made and dropped on a thread of its own: the
    /// kernel tears a closed ring down later, on a workqueue
    /// (`io_ring_exit_work`), and then queues task work with `TWA_SIGNAL`
    /// on each thread that used the ring and waits for it to run. On the
    /// caller's thread that lands in whatever it is blocked in by then,
    /// and a blocking `recv` with a timeout returns `EINTR` (no signal,
    /// nothing restarts it). A thread that has exited has left the ring's
    /// list, so nobody is interrupted.
    pub fn probe() -> io::Result<()> {
        std::thread::Builder::new()
            .name("strata-probe".into())
            .spawn(|| Ring::new(8, 16).map(drop))?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("io_uring probe thread panicked")))
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry pushed here points only at memory this Ring
            // owns until its completion (send buffers, flash read buffers,
            // the buffer ring) or at nothing (recv with buffer select,
            // cancel, poll).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Arm a multishot receive on `fd` into the provided buffers.
    pub fn recv(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        let entry = opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP).build().user_data(user_data(Kind::Recv, token));
        self.push(entry)
    }

    /// Send `buf[offset..]` on `fd` for connection `token`; the ring keeps
    /// `buf` until the completion hands it back.
    pub fn send(&mut self, fd: RawFd, token: u64, buf: Vec<u8>, offset: usize) -> io::Result<()> {
        let len = (buf.len() - offset).min(u32::MAX as usize) as u32;
        let ptr = buf[offset..].as_ptr();
        let slot = self.sends.insert((buf, offset), token);
        let entry = opcode::Send::new(types::Fd(fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Kind::Send, slot as u64));
        self.push(entry)
    }

    /// Read `buf.len()` bytes at `offset` of the flash file `fd` into
    /// `buf`, for key `key_index` of connection `token`'s request; the ring
    /// keeps `buf` (an anonymous mapping, so its bytes never move) until the
    /// completion hands it back.
    pub fn read_flash(&mut self, fd: RawFd, token: u64, key_index: usize, mut buf: FlashBuf, offset: u64) -> io::Result<()> {
        let len = buf.len().min(u32::MAX as usize) as u32;
        let ptr = buf.as_mut_ptr();
        let slot = self.reads.insert((buf, key_index), token);
        let entry = opcode::Read::new(types::Fd(fd), ptr, len)
            .offset(offset)
            .build()
            .user_data(user_data(Kind::FlashRead, slot as u64));
        self.push(entry)
    }

    /// Arm a read of the wake-up eventfd `fd`.
    pub fn wake_read(&mut self, fd: RawFd) -> io::Result<()> {
        let target = self.wake_buf.as_mut_ptr();
        let entry = opcode::Read::new(types::Fd(fd), target, 8).build().user_data(user_data(Kind::Wake, 0));
        self.push(entry)
    }

    /// Multishot readiness poll (UDP sockets).
    pub fn poll(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(user_data(Kind::Poll, token));
        self.push(entry)
    }

    /// Cancel the multishot receive of connection `token`.
    pub fn cancel_recv(&mut self, token: u64) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(user_data(Kind::Recv, token)).build().user_data(user_data(Kind::Cancel, token));
        self.push(entry)
    }

    /// Submit queued entries and wait for at least one completion or the
    /// timeout (zero: do not wait; deferred completions are still posted).
    pub fn submit_and_wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ts = Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos());
        let args = SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) || e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Take every completion that has arrived.
    pub fn completions(&mut self, out: &mut Vec<Completion>) {
        for cqe in self.ring.completion() {
            let Some(kind) = Kind::from_u8(cqe.user_data() as u8) else { continue };
            let mut token = cqe.user_data() >> 8;
            let mut buffer = None;
            let mut flash_buf = None;
            if kind == Kind::FlashRead {
                let held = self.reads.take(token as usize);
                token = held.as_ref().map_or(0, |h| h.1);
                flash_buf = held.map(|h| h.0);
            }
            if kind == Kind::Send {
                let held = self.sends.take(token as usize);
                token = held.as_ref().map_or(0, |h| h.1);
                buffer = held.map(|h| h.0);
            }
            out.push(Completion {
                kind,
                token,
                result: cqe.result(),
                more: cqueue::more(cqe.flags()),
                buffer_id: cqueue::buffer_select(cqe.flags()),
                buffer,
                flash_buf,
            });
        }
    }

    /// The bytes of a receive completion; the buffer returns to the ring.
    pub fn received(&mut self, buffer_id: u16, len: usize, sink: &mut dyn FnMut(&[u8])) {
        sink(self.bufs.data(buffer_id, len));
        self.bufs.push(buffer_id);
        self.bufs.publish();
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // `Ring` declares `ring` before `bufs`, so the io_uring instance is
        // closed before this memory is freed.
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.entries as *mut u8, self.entries_layout) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let _ = self.ring.submitter().unregister_buf_ring(self.bufs.bgid);
    }
}

/// An eventfd used to wake a worker blocked in its ring.
pub struct EventFd(RawFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }

    pub fn fd(&self) -> RawFd {
        self.0
    }

    /// Reset the counter (non-blocking; nothing to read is fine).
    pub fn drain(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64 from our own eventfd.
        unsafe { libc::read(self.0, (&mut count as *mut u64).cast(), 8) };
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd.
        unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;
    use std::time::Duration;

    /// The probe leaves the calling thread's blocking calls alone. The
    /// kernel tears a closed ring down later, on a workqueue
    /// (`io_ring_exit_work`), and queues task work with `TWA_SIGNAL` on
    /// every thread that used it; a thread then blocked in a `recv` with
    /// a timeout returns `EINTR` (a signal-free interruption, not
    /// restarted). `Server::start` probes on its caller's thread, which in
    /// the UDP wire tests is the thread that then waits for replies.
    #[test]
    fn probe_does_not_interrupt_the_caller() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        for _ in 0..3 {
            Ring::probe().unwrap();
            let err = socket.recv_from(&mut [0; 8]).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
        }
    }
}
