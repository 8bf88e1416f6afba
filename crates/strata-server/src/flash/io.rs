//! The worker side of a flash read (`-o ext_path`): a request whose item is
//! on flash parks its connection, the read runs without blocking the
//! worker, and the connection then resumes at the same request.
//!
//! ```text
//!  Conn::process ── step ── service: tier.flash_check(K) = Some(read)
//!        │                  (or a plain get missed in RAM, then the check)
//!        │                  output of this key truncated, nothing counted
//!        ▼
//!  conn.flash = [FlashWait { read, key_index, Unsubmitted }, ..]   request NOT consumed
//!        │  (with it, up to READ_AHEAD reads in all: a multi-get's later keys
//!        │  on flash, and those of the plain reads buffered behind it,
//!        │  peek.rs; all go to the device at once), the ahead ones
//!        │  within a global bound of bytes (budget.rs)
//!        │  Progress::FlashWait: replies before it are written, input is
//!        │  still read (bounded), no later request runs
//!        ▼
//!  io_uring: a Read on the worker's own ring into a FlashBuf owned by the
//!            ring until its completion (sys/uring.rs)
//!  epoll:    a Read on the worker's own small flash ring ([`read_ring`],
//!            sys/read_ring.rs `ReadRing`), all of a turn's reads submitted in
//!            one call; its eventfd, polled with the sockets, says when
//!            reads are back. Where the kernel has no io_uring: a Job to
//!            the `ext_threads` I/O threads ([`Pool`]); the thread preads,
//!            queues the result on the worker's [`Inbox`] and wakes the
//!            worker's mio Waker
//!        ▼
//!  every FlashWait Done(Some(buf) | None) ── Conn::process runs the same
//!  request again with the waits handed to the service ("resume"): keys
//!  before the first `key_index` (a multi-get) are skipped, their replies
//!  are already out; each key with a wait is answered by
//!  tier.finish_flash_read (a plain read, through the same visitor as a RAM
//!  hit), or finished into RAM and the command runs as usual without
//!  another check. A later key that needs flash and has no read (it left
//!  RAM meanwhile) parks the request again, keeping the finished reads of
//!  the keys after it.
//! ```
//!
//! (`tier` is the engine's `FlashTier`, from `Engine::flash`; none of this
//! runs without one.) So replies stay in request order, and the worker
//! serves its other connections while a read is in flight. Every read handed out is either
//! finished or abandoned (`FlashTier::abandon_flash_read`: the connection
//! closed), so `extstore_io_queue` stays true.

use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use strata_store::{FlashBuf, FlashRead};

use super::budget::AheadCharge;
use crate::sys::read_ring::ReadRing;

/// Where a parked connection's read is.
pub enum ReadState {
    /// Not yet handed to the ring or the I/O threads.
    Unsubmitted,
    /// In the kernel or an I/O thread; the buffer is theirs.
    InFlight,
    /// Back: the bytes, or None when the read failed (a miss).
    Done(Option<FlashBuf>),
    /// No read of its own: its blocks lie within those of an earlier key's
    /// read of the same request, whose bytes answer it.
    Covered,
}

/// The reads a parked request queues at once, its own and those of the
/// requests buffered behind it (16 of 4-8 KiB: at most 128 KiB a parked
/// connection). The reads queued ahead also take their bytes from one
/// bound for all connections (`budget.rs`).
pub const READ_AHEAD: usize = 16;

/// Waits of a parked request numbered from here are for the requests
/// buffered behind it (`Turn::read_ahead_later`), found by key; below
/// it, for the parked request's own keys, found by position.
pub(super) const LATER: usize = usize::MAX / 2 + 1;

/// A connection parked on a flash read.
pub struct FlashWait {
    pub read: FlashRead,
    /// Which key of the request (a multi-get's position) the read is for;
    /// for a request buffered behind it, an id from `read_ahead.rs`'s
    /// `LATER` up (that request finds it by key). Unique among a
    /// connection's reads: a completion finds its wait by it.
    pub key_index: usize,
    pub state: ReadState,
    /// A read queued ahead: its bytes, held from the global bound
    /// (`budget.rs`) until this wait is dropped.
    pub charge: Option<AheadCharge>,
    /// Reads this key made before, each finding its record moved
    /// (`FlashFinish::Moved`): bounded by `turn.rs`.
    pub moved: u8,
}

impl FlashWait {
    pub fn new(read: FlashRead, key_index: usize) -> FlashWait {
        FlashWait { read, key_index, state: ReadState::Unsubmitted, charge: None, moved: 0 }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, ReadState::Done(_) | ReadState::Covered)
    }

    /// Its read came back (`buf`: the bytes, None if it failed): true if
    /// the connection was waiting for it, which is then to run again.
    pub fn complete(&mut self, buf: Option<FlashBuf>) -> bool {
        if !matches!(self.state, ReadState::InFlight) {
            return false;
        }
        self.state = ReadState::Done(buf);
        true
    }

    /// The bytes read, if the read succeeded.
    pub fn data(&self) -> Option<&[u8]> {
        match &self.state {
            ReadState::Done(Some(buf)) => Some(buf),
            _ => None,
        }
    }
}

/// The reads a parked request waits for, in key order: it runs again once
/// every one is back.
#[derive(Default)]
pub struct FlashWaits(pub Vec<FlashWait>);

impl FlashWaits {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Some read is not back yet.
    pub fn pending(&self) -> bool {
        self.0.iter().any(|w| !w.is_done())
    }

    /// The read for key `key_index` came back (`buf`: the bytes, None if it
    /// failed): true if that was the last one the request waited for, so
    /// it is to run again.
    pub fn complete(&mut self, key_index: usize, buf: Option<FlashBuf>) -> bool {
        let Some(wait) = self.0.iter_mut().find(|w| w.key_index == key_index) else { return false };
        wait.complete(buf) && !self.pending()
    }

    /// Hand each read not yet submitted to `submit` (true: the kernel or
    /// an I/O thread has it now); one it could not hand on is a failed
    /// read, which is a miss. True when that leaves none in flight: the
    /// request is to run again now.
    pub fn submit(&mut self, mut submit: impl FnMut(&FlashWait) -> bool) -> bool {
        let mut failed = false;
        for wait in self.0.iter_mut().filter(|w| matches!(w.state, ReadState::Unsubmitted)) {
            wait.state = if submit(wait) {
                ReadState::InFlight
            } else {
                failed = true;
                ReadState::Done(None)
            };
        }
        failed && !self.pending()
    }

    /// Every read given up (the connection closed, or no request used it):
    /// the tier's count of reads in flight stays true.
    pub fn abandon(&mut self, tier: &dyn strata_store::FlashTier) {
        for wait in self.0.drain(..) {
            tier.abandon_flash_read(&wait.read);
        }
    }
}

/// Reads in flight per epoll worker's flash ring before a submit must
/// wait for room (the kernel keeps completions beyond its completion queue).
const READ_RING_ENTRIES: u32 = 256;

/// An epoll worker's own flash read ring, its eventfd registered with the
/// worker's poll as `token`; None where io_uring is missing or refused
/// (the worker then uses the I/O threads).
fn read_ring(registry: &mio::Registry, token: mio::Token) -> Option<ReadRing> {
    let ring = ReadRing::new(READ_RING_ENTRIES).ok()?;
    let fd = ring.event_fd();
    registry.register(&mut mio::unix::SourceFd(&fd), token, mio::Interest::READABLE).ok()?;
    Some(ring)
}

/// How an epoll worker reads flash without blocking: its own small
/// io_uring, all of a turn's reads submitted in one call, its eventfd
/// polled with the sockets; or, where the kernel has no io_uring, the
/// `ext_threads` I/O threads ([`Pool`]), which wake it through its Waker.
pub struct EpollReads {
    ring: Option<ReadRing>,
    threads: Option<(Arc<Pool>, Arc<Inbox>)>,
}

impl EpollReads {
    /// The worker's reads (the ring's eventfd registered as `token`); the
    /// I/O threads started by the first worker that needs them.
    pub fn new(pool: &OnceLock<Arc<Pool>>, threads: u32, registry: &mio::Registry, token: mio::Token, waker: &Arc<mio::Waker>) -> std::io::Result<EpollReads> {
        if let Some(ring) = read_ring(registry, token) {
            return Ok(EpollReads { ring: Some(ring), threads: None });
        }
        if pool.get().is_none() {
            let _ = pool.set(Arc::new(Pool::start(threads)?));
        }
        let threads = pool.get().map(|pool| (pool.clone(), Inbox::new(waker.clone())));
        Ok(EpollReads { ring: None, threads })
    }

    /// Queue a parked request's new reads (`slot`, `conn_id`: its
    /// connection); true when none is left in flight (see
    /// [`FlashWaits::submit`]).
    pub fn submit(&mut self, waits: &mut FlashWaits, slot: usize, conn_id: u64) -> bool {
        let (ring, threads) = (&mut self.ring, &self.threads);
        waits.submit(|wait| match (ring.as_mut(), threads) {
            (Some(ring), _) => ring.read(wait.read.file.as_raw_fd(), (slot, conn_id, wait.key_index), wait.read.buffer(), wait.read.offset_bytes).is_ok(),
            (None, Some((pool, inbox))) => {
                pool.submit(wait, slot, conn_id, inbox);
                true
            }
            // No I/O threads: the read fails, which is a miss.
            (None, None) => false,
        })
    }

    /// Hand this turn's queued ring reads to the kernel, all in one call; a
    /// failed submit (EAGAIN, EBUSY: the kernel is short of room) leaves
    /// them queued: true, and the next turn does not wait.
    pub fn submit_queued(&mut self) -> bool {
        let Some(ring) = self.ring.as_mut() else { return false };
        let _ = ring.submit();
        ring.has_queued()
    }

    /// The reads that finished, each to `done`.
    pub fn finished(&mut self, done: &mut dyn FnMut(Finished)) {
        if let Some(ring) = self.ring.as_mut() {
            let mut back = Vec::new();
            ring.completions(&mut back);
            for d in back {
                done(Finished { slot: d.slot, conn_id: d.conn_id, key_index: d.key_index, buf: whole(d.result, d.buf) });
            }
        }
        if let Some((_, inbox)) = &self.threads {
            let mut back = Vec::new();
            inbox.drain(&mut back);
            back.into_iter().for_each(done);
        }
    }
}

/// A read for an I/O thread (epoll engine without io_uring).
struct Job {
    read: FlashRead,
    buf: FlashBuf,
    /// The worker slot, connection id and key position it is for.
    slot: usize,
    conn_id: u64,
    key_index: usize,
    inbox: Arc<Inbox>,
}

/// A finished read on its way back to the worker: its connection (worker
/// slot and id), the key position of its request it is for, and the bytes,
/// None if the read failed (a miss).
pub struct Finished {
    pub slot: usize,
    pub conn_id: u64,
    pub key_index: usize,
    pub buf: Option<FlashBuf>,
}

/// An io_uring read's buffer when the read (`result`: bytes read or
/// -errno) brought all of it, else None: a short or failed read is a miss.
pub fn whole(result: i32, buf: FlashBuf) -> Option<FlashBuf> {
    (usize::try_from(result).ok() == Some(buf.len())).then_some(buf)
}

/// One epoll worker's finished reads, and how to wake it.
pub struct Inbox {
    done: Mutex<Vec<Finished>>,
    waker: Arc<mio::Waker>,
}

impl Inbox {
    pub fn new(waker: Arc<mio::Waker>) -> Arc<Inbox> {
        Arc::new(Inbox { done: Mutex::new(Vec::new()), waker })
    }

    /// Take every finished read.
    pub fn drain(&self, into: &mut Vec<Finished>) {
        into.append(&mut self.done.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn push(&self, finished: Finished) {
        self.done.lock().unwrap_or_else(|e| e.into_inner()).push(finished);
        let _ = self.waker.wake();
    }
}

/// The epoll engine's flash I/O threads (`ext_threads`, memcached's IO
/// threads): blocking `pread`s off the workers, one queue for all.
pub struct Pool {
    jobs: Mutex<Sender<Job>>,
}

impl Pool {
    pub fn start(threads: u32) -> std::io::Result<Pool> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("strata-flash-{i}")).spawn(move || io_thread(&rx))?;
        }
        Ok(Pool { jobs: Mutex::new(tx) })
    }

    /// Hand `wait`'s read to an I/O thread (the caller marks it in flight,
    /// [`FlashWaits::submit`]); the result comes back through `inbox`.
    pub fn submit(&self, wait: &FlashWait, slot: usize, conn_id: u64, inbox: &Arc<Inbox>) {
        let key_index = wait.key_index;
        let job = Job { read: wait.read.clone(), buf: wait.read.buffer(), slot, conn_id, key_index, inbox: inbox.clone() };
        let sent = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).send(job);
        if let Err(failed) = sent {
            // No I/O thread left: the read fails, which is a miss.
            failed.0.inbox.push(Finished { slot, conn_id, key_index, buf: None });
        }
    }
}

fn io_thread(jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let Job { read, mut buf, slot, conn_id, key_index, inbox } = job;
        let ok = std::os::unix::fs::FileExt::read_exact_at(&*read.file, &mut buf, read.offset_bytes).is_ok();
        inbox.push(Finished { slot, conn_id, key_index, buf: ok.then_some(buf) });
    }
}
