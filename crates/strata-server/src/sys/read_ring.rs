//! An epoll worker's own io_uring for flash reads (`ReadRing`), beside
//! the io_uring engine's `Ring` (uring.rs), whose eventfd wrapper it uses.
//!
//! Unsafe code: the submission of a read into a buffer the ring holds (in
//! its `InFlight` table) until the read's completion.

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, types, IoUring};
use strata_store::FlashBuf;

use super::in_flight::InFlight;
use super::uring::EventFd;

/// An epoll worker's flash reads (`-o io_engine=epoll` with `ext_path`): a
/// small io_uring of its own that only reads the flash files, so a worker
/// keeps as many reads in flight as it has parked connections instead of
/// as many as there are `ext_threads` I/O threads (1 by default, one
/// blocking `pread` each: measured 10k gets/s where the device does 54k at
/// queue depth 16). The ring signals an eventfd when a read completes; the
/// worker polls that eventfd with its sockets ([`ReadRing::event_fd`]),
/// then takes the completions. Buffers stay put as with `Ring::read_flash`:
/// the ring keeps each [`FlashBuf`] until its completion hands it back.
///
/// Reads are queued by [`ReadRing::read`] and go to the kernel in one
/// `io_uring_enter` per worker turn ([`ReadRing::submit`]).
pub struct ReadRing {
    ring: IoUring,
    event: EventFd,
    /// Buffers in flight, and whose (worker slot, connection id, key
    /// position of its request).
    reads: InFlight<FlashBuf, (usize, u64, usize)>,
    /// Reads queued but not yet submitted.
    queued: usize,
}

/// One finished read of a [`ReadRing`]: its owner, the result (bytes read
/// or -errno) and the buffer.
pub struct ReadDone {
    pub slot: usize,
    pub conn_id: u64,
    pub key_index: usize,
    pub result: i32,
    pub buf: FlashBuf,
}

impl ReadRing {
    pub fn new(entries: u32) -> io::Result<ReadRing> {
        // No deferred task work: a completion must be posted (and the
        // eventfd signalled) while the worker sleeps in epoll_wait.
        let ring = IoUring::builder().build(entries)?;
        let event = EventFd::new()?;
        ring.submitter().register_eventfd(event.fd())?;
        Ok(ReadRing { ring, event, reads: InFlight::default(), queued: 0 })
    }

    /// The eventfd to poll for completions (readable: call `completions`).
    pub fn event_fd(&self) -> RawFd {
        self.event.fd()
    }

    /// Queue a read of `buf.len()` bytes at `offset` of `fd` for key
    /// `key_index` of the request of connection `conn_id` in worker slot
    /// `slot`.
    pub fn read(&mut self, fd: RawFd, owner: (usize, u64, usize), mut buf: FlashBuf, offset: u64) -> io::Result<()> {
        let len = buf.len().min(u32::MAX as usize) as u32;
        let ptr = buf.as_mut_ptr();
        let index = self.reads.insert(buf, owner);
        let entry = opcode::Read::new(types::Fd(fd), ptr, len).offset(offset).build().user_data(index as u64);
        loop {
            // SAFETY: the entry points into the buffer held in `reads` (an
            // anonymous mapping, so its bytes never move) until the read's
            // completion takes it out.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                break;
            }
            if let Err(e) = self.submit() {
                // Never queued: nothing will write into it.
                self.reads.take(index);
                return Err(e);
            }
        }
        self.queued += 1;
        Ok(())
    }

    /// Hand the queued reads to the kernel (one system call).
    pub fn submit(&mut self) -> io::Result<()> {
        if self.queued > 0 {
            self.ring.submit()?;
            self.queued = 0;
        }
        Ok(())
    }

    /// Reads queued and not yet taken by the kernel (a failed submit,
    /// EAGAIN or EBUSY, leaves them queued for the next).
    pub fn has_queued(&self) -> bool {
        self.queued > 0
    }

    /// Take every finished read (after the eventfd was readable).
    pub fn completions(&mut self, out: &mut Vec<ReadDone>) {
        self.event.drain();
        for cqe in self.ring.completion() {
            let Some((buf, (slot, conn_id, key_index))) = self.reads.take(cqe.user_data() as usize) else { continue };
            out.push(ReadDone { slot, conn_id, key_index, result: cqe.result(), buf });
        }
    }
}

impl Drop for ReadRing {
    fn drop(&mut self) {
        // The kernel may still write into buffers in flight: wait for them
        // (O_DIRECT reads end in milliseconds); if waiting fails, leak them
        // rather than free memory the kernel may write.
        let mut done = Vec::new();
        while !self.reads.is_empty() {
            if self.ring.submit_and_wait(1).is_err() {
                self.reads.drain().for_each(std::mem::forget);
                return;
            }
            self.completions(&mut done);
            done.clear();
        }
    }
}
