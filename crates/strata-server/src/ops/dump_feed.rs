//! `lru_crawler metadump|mgdump` off the workers: a walker thread and a
//! printer thread that formats the lines and writes them to the client's
//! socket itself, as memcached's crawler thread does.
//!
//! ```text
//!  strata-dumpwalk (worker priority)     strata-dump (SCHED_IDLE)           the connection's worker
//!  4 walk steps (a shard lock, 64        formats a stage's lines into       pump (each 1 ms tick):
//!  items looked at each), live ones' ──► a 16 KiB chunk; a full chunk       once its replies before the
//!  keys and metadata copied to a         is sent on its own dup of the  ◄── dump are out, hands over the
//!  stage (2 stages go round) ◄──────     client's socket (poll while full)  socket; then only looks
//!        empty stages come back          the end: `finished` ─────────────► whether the dump ended
//! ```
//!
//! Why two threads: the formatting and the sends (all of a dump's CPU time
//! but the walk) run under `SCHED_IDLE` (`sys/priority.rs`), so they take
//! only CPU time no worker wants, and a worker woken by a request takes
//! the CPU from them at once; but a thread that can be left without CPU
//! for milliseconds must never hold a shard lock, so the walking (the only
//! part under a lock, about 17 µs per 256 items, docs/bench/operator.md, held
//! 64 items at a time) runs at the workers' own priority and holds a shard
//! lock about as long as a worker's multi-get does. The walker waits for
//! an empty stage, so it runs only as fast as the idle printer frees them:
//! a dump goes at the speed of the CPU time nobody else wants and slows to
//! almost nothing on a saturated one.
//!
//! The worker writes nothing of the dump: it stops running the
//! connection's requests (they stay buffered) from the dump's start to its
//! end, so the printer's sends and the worker's never interleave. The
//! printer's descriptor is a `dup` (`sys/socket_writer.rs`), so a client
//! that closes mid-dump never leaves it writing to a reused descriptor.
//!
//! So a dump holds at most 2 stages (256 keys each), one chunk of 16 KiB
//! and a walk cursor, whatever the store's size, and a client that stops
//! reading stops the walk. The worker never blocks on the dump's lock
//! (`try_lock`: if the printer holds it, it looks again next tick).
//! Dropping the [`Feed`] (the connection closed) cancels the dump: the
//! printer sees it (waiting at most 100 ms), returns, and the walker finds
//! its channel closed. Neither that exit nor a dump's end may wait for CPU
//! time nobody else wants, which on a machine with every CPU busy does not
//! come for seconds (the crawler stays busy, the connection waits for
//! `finished`): the printer goes back to the normal policy itself once the
//! walk has ended; the worker puts it back when it sees the client's
//! socket reset (the printer must wake to find its send failed, and the
//! connection waits for that) and when it cancels the dump.
//!
//! And the printer never sleeps under `SCHED_IDLE`: before each wait (for
//! room in the socket, for the walker's next stage, for the socket to be
//! handed over) it goes back to the normal policy itself, and after it
//! lowers itself again, so the CPU work stays idle work and a cancel finds
//! the printer asleep at normal weight, to be woken only. A printer raised
//! by the canceller while it slept at idle weight (its virtual runtime
//! advanced 341 times as fast as a normal thread's while it ran) was seen
//! on a loaded machine runnable, under `SCHED_OTHER`, and not run for over
//! 10 s on its way out (`dumps::dump_threads_idle_and_cancel`, issue 46);
//! now every change of the printer's policy made while it may be asleep is
//! its own, made while it runs.
//!
//! The printer lets go of the crawler
//! ([`super::crawler::Busy`]) when the walk ends, before its last chunk
//! (with `END`/`EN`) is sent, so a client that reads the end of a dump can
//! start the next one at once. `lru_crawler sleep` pauses the walker per
//! 1000 items.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::time::{Duration, Instant};

use strata_store::{ItemMeta, ItemView, Visit, WalkCursor};

use super::crawler::Busy;
use super::dump_lines::Printer;
use super::crawler::Crawler;
use crate::core::Core;
use crate::sys::socket_writer::SocketWriter;

/// A chunk is sent once it holds this much. Small, because a send is a
/// stretch of kernel time the scheduler cannot cut short on a kernel
/// without full preemption (`PREEMPT_NONE`, the common server default): on
/// loopback a send even runs the receiver's side, so a worker woken on the
/// printer's CPU waits for it to end; 64 KiB sends cost the gets' p99
/// about twice what 16 KiB ones do (docs/bench/operator.md).
const CHUNK_BYTES: usize = 16 << 10;
/// A waiting dump thread looks at `cancelled` and shutdown this often
/// even when nobody wakes it.
const WAIT_AT_MOST: Duration = Duration::from_millis(100);
/// Items looked at per shard-lock hold: a few µs, so that the walker,
/// which other processes may preempt like any thread, is seldom preempted
/// while it holds one.
const HOLD_ITEMS: usize = 64;
/// Items looked at per stage handed to the printer.
const STEP_ITEMS: usize = 256;
/// Stages going round between the walker and the printer.
const STAGES: usize = 2;
/// Items looked at between two `lru_crawler sleep` pauses.
const ITEMS_PER_SLEEP: usize = 1000;

/// Where the dump's output goes, and how it ended.
#[derive(Default)]
struct Sink {
    /// The client's socket, handed over by the worker; the printer takes it.
    socket: Option<SocketWriter>,
    end: Option<Fed>,
}

#[derive(Default)]
struct Inner {
    sink: Mutex<Sink>,
    handed: Condvar,
    cancelled: AtomicBool,
    /// The printer's thread id while it may be under `SCHED_IDLE`; 0
    /// before it has one and once it is back to normal or gone.
    printer_tid: AtomicI32,
    /// Someone needs the printer to finish now ([`Inner::hurry`]): it
    /// stays under the normal policy.
    hurried: AtomicBool,
}

impl Inner {
    fn stopping(&self, shared: &Core) -> bool {
        self.cancelled.load(Ordering::Relaxed) || shared.is_shutting_down()
    }

    /// Lower the calling printer thread to `SCHED_IDLE`. The tid is
    /// published first and `cancelled` read after, both `SeqCst` as in
    /// [`Inner::cancel`]: either the canceller sees the tid and puts the
    /// thread back, or this sees the cancel and does.
    fn printer_to_idle(&self) {
        let tid = crate::sys::priority::current_tid();
        self.printer_tid.store(tid, Ordering::SeqCst);
        self.lower_printer();
    }

    /// The rest of [`Inner::printer_to_idle`] once the tid is published.
    /// A canceller (or [`Inner::hurry`]) that ran in between took the tid
    /// and raised this thread before it lowered itself, so on seeing that
    /// the printer raises itself whoever holds the tid (a second raise
    /// does no harm).
    fn lower_printer(&self) {
        // A dump that cannot lower its priority still runs.
        let _ = crate::sys::priority::idle_current_thread();
        if self.hurried.load(Ordering::SeqCst) {
            self.printer_tid.store(0, Ordering::SeqCst);
            let _ = crate::sys::priority::normal_thread(0);
        }
    }

    /// The printer puts itself back under the normal policy: true if it
    /// was under `SCHED_IDLE` (no one had raised it).
    fn printer_to_normal(&self) -> bool {
        let was_idle = self.printer_tid.swap(0, Ordering::SeqCst) != 0;
        if was_idle {
            let _ = crate::sys::priority::normal_thread(0);
        }
        was_idle
    }

    /// The printer blocks in `wait` under the normal policy, and goes
    /// back under `SCHED_IDLE` after it if it was there before. So it
    /// never sleeps at idle weight, and a cancel or a hung-up client
    /// ([`Inner::hurry`]) finds it asleep at normal weight: they only wake
    /// it, they need not raise a sleeping thread (see the module docs).
    fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let was_idle = self.printer_to_normal();
        let out = wait();
        if was_idle {
            self.printer_to_idle();
        }
        out
    }

    /// Cancel the dump (the worker, its connection gone), and put the
    /// printer back under the normal policy so that it runs to its exit
    /// now, not when some CPU falls idle. The swap takes the tid from a
    /// live printer: it clears it itself ([`Inner::printer_to_normal`])
    /// before it can exit, and a thread id is not reused between the swap
    /// and the syscall (ids are handed out in turn up to `pid_max`).
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.hurry();
        self.handed.notify_one();
    }

    /// Put the printer back under the normal policy from another thread:
    /// what it does next is what the worker waits for.
    fn hurry(&self) {
        self.hurried.store(true, Ordering::SeqCst);
        let tid = self.printer_tid.swap(0, Ordering::SeqCst);
        if tid != 0 {
            let _ = crate::sys::priority::normal_thread(tid);
        }
    }

    fn end(&self, how: Fed) {
        self.sink.lock().unwrap_or_else(|e| e.into_inner()).end = Some(how);
    }
}

/// The worker's end of a dump thread.
pub struct Feed {
    inner: Arc<Inner>,
    handed_over: bool,
}

/// What [`Feed::poll`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fed {
    /// The dump goes on: the connection runs no request yet.
    More,
    /// The last bytes (the terminator) are sent.
    Finished,
    /// The socket failed (or could not be handed over): close the
    /// connection, whose client has a truncated dump.
    Failed,
}

impl Feed {
    /// Start a dump's two threads, the walker and the printer; `None` if
    /// they could not be started.
    pub(super) fn spawn(shared: Arc<Core>, crawler: Arc<Crawler>, printer: Printer, busy: Option<Busy>) -> Option<Feed> {
        let inner = Arc::new(Inner::default());
        // Stages go round: empty ones to the walker, full ones to the printer.
        let (to_walker, empties) = std::sync::mpsc::sync_channel::<Staged>(STAGES);
        let (to_printer, fulls) = std::sync::mpsc::sync_channel::<Staged>(STAGES);
        for _ in 0..STAGES {
            to_walker.send(Staged::default()).ok()?;
        }
        let (walker_shared, walker_inner) = (shared.clone(), inner.clone());
        std::thread::Builder::new()
            .name("strata-dumpwalk".into())
            .spawn(move || walk(&walker_shared, &crawler, &walker_inner, empties, to_printer))
            .ok()?;
        let theirs = inner.clone();
        std::thread::Builder::new()
            .name("strata-dump".into())
            .spawn(move || {
                theirs.printer_to_idle();
                print(&shared, &theirs, printer, busy, fulls, to_walker);
                theirs.printer_to_normal();
            })
            .ok()?;
        Some(Feed { inner, handed_over: false })
    }

    /// The worker's look at the dump, with `pending` bytes of its own
    /// output not yet sent on `socket`: hand the socket over once they are
    /// all sent, then say whether the dump has ended. Never waits for the
    /// dump threads.
    pub fn poll(&mut self, pending: usize, socket: Option<RawFd>) -> Fed {
        if !self.handed_over {
            if pending > 0 {
                return Fed::More;
            }
            let Some(writer) = socket.and_then(|fd| SocketWriter::dup(fd).ok()) else {
                return Fed::Failed;
            };
            self.inner.sink.lock().unwrap_or_else(|e| e.into_inner()).socket = Some(writer);
            self.inner.handed.notify_one();
            self.handed_over = true;
            return Fed::More;
        }
        // A client gone (reset) ends the dump once the printer's send
        // fails: that is no longer idle work.
        if socket.is_some_and(crate::sys::socket_writer::hung_up) {
            self.inner.hurry();
        }
        match self.inner.sink.try_lock() {
            Ok(sink) => sink.end.unwrap_or(Fed::More),
            Err(TryLockError::WouldBlock) => Fed::More,
            Err(TryLockError::Poisoned(e)) => e.into_inner().end.unwrap_or(Fed::More),
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.inner.cancel();
    }
}

/// The walker thread: one walk step (one shard lock) at a time into an
/// empty stage, handed to the printer, until the walk ends or the printer
/// goes (cancelled: it drops its ends of the channels).
fn walk(shared: &Core, crawler: &Crawler, inner: &Inner, empties: Receiver<Staged>, to_printer: SyncSender<Staged>) {
    let mut cursor = WalkCursor::with_flash();
    let mut since_sleep = 0;
    while let Ok(mut staged) = empties.recv() {
        if inner.stopping(shared) {
            return;
        }
        let now = shared.clock.now();
        let mut looked = 0;
        staged.done = false;
        while looked < STEP_ITEMS && !staged.done {
            staged.done = shared.engine.walk(&mut cursor, HOLD_ITEMS, now, &mut |item, how| {
                if how == Visit::Live {
                    staged.push(item);
                }
                false
            });
            looked += HOLD_ITEMS;
        }
        let done = staged.done;
        if to_printer.send(staged).is_err() || done {
            return;
        }
        since_sleep += STEP_ITEMS;
        if since_sleep >= ITEMS_PER_SLEEP {
            let us = u64::from(crawler.sleep_us());
            nap(shared, inner, Duration::from_micros(us * since_sleep as u64 / ITEMS_PER_SLEEP as u64));
            since_sleep = 0;
        }
    }
}

/// Sleep `lru_crawler sleep`'s share, in slices, so that a cancelled or
/// stopping walk lets go of its thread at once rather than after the
/// whole sleep (up to a second a slice of `ITEMS_PER_SLEEP` items).
fn nap(shared: &Core, inner: &Inner, total: Duration) {
    const SLICE: Duration = Duration::from_millis(5);
    let end = Instant::now() + total;
    while !inner.stopping(shared) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(SLICE));
    }
}

/// The printer thread: format each stage into 16 KiB chunks and send
/// them to the client, until the walk's last stage, a cancel, a failed
/// socket, or a shutdown.
fn print(shared: &Core, inner: &Inner, mut printer: Printer, busy: Option<Busy>, fulls: Receiver<Staged>, to_walker: SyncSender<Staged>) {
    let mut busy = busy;
    let mut socket = None;
    let mut filling = Vec::with_capacity(CHUNK_BYTES + (4 << 10));
    // A closed channel: the walker stopped (cancelled or shutting down).
    while let Some(mut staged) = next_stage(inner, &fulls) {
        staged.print(&mut printer, &mut filling);
        let done = staged.done;
        if done {
            // The rest is the end a worker waits for: no longer idle work.
            inner.printer_to_normal();
            printer.terminate(&mut filling);
            // Let go of the crawler before the client can see the end.
            drop(busy.take());
        } else {
            // The walker may be gone already, its last stage sent: no matter.
            let _ = to_walker.send(staged);
        }
        if done || filling.len() >= CHUNK_BYTES {
            if socket.is_none() {
                socket = inner.waiting(|| handed_socket(inner, shared));
            }
            let Some(writer) = &socket else { return };
            if send(inner, writer, &filling, || inner.stopping(shared)).is_err() {
                return inner.end(Fed::Failed);
            }
            filling.clear();
        }
        if done {
            return inner.end(Fed::Finished);
        }
    }
}

/// The walker's next full stage, waited for under the normal policy;
/// None once the walker is gone.
fn next_stage(inner: &Inner, fulls: &Receiver<Staged>) -> Option<Staged> {
    match fulls.try_recv() {
        Ok(staged) => Some(staged),
        Err(TryRecvError::Disconnected) => None,
        Err(TryRecvError::Empty) => inner.waiting(|| fulls.recv().ok()),
    }
}

/// Send `chunk` to the client; while the socket is full the printer
/// waits for room under the normal policy ([`Inner::waiting`]).
fn send(inner: &Inner, writer: &SocketWriter, chunk: &[u8], stop: impl Fn() -> bool) -> std::io::Result<()> {
    let mut was_idle = false;
    writer.write_all(chunk, WAIT_AT_MOST, stop, |blocked| {
        if blocked {
            was_idle = inner.printer_to_normal();
        } else if was_idle {
            inner.printer_to_idle();
        }
    })
}

/// The client's socket once the worker hands it over; `None` if the dump
/// is cancelled first.
fn handed_socket(inner: &Inner, shared: &Core) -> Option<SocketWriter> {
    let mut sink = inner.sink.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(socket) = sink.socket.take() {
            return Some(socket);
        }
        if inner.stopping(shared) {
            return None;
        }
        sink = match inner.handed.wait_timeout(sink, WAIT_AT_MOST) {
            Ok((sink, _)) => sink,
            Err(e) => e.into_inner().0,
        };
    }
}

/// One walk step's live items, copied out under the shard lock (keys end
/// to end, at most `STEP_ITEMS` keys of 250 bytes) to be formatted after.
#[derive(Default)]
struct Staged {
    keys: Vec<u8>,
    /// Each item's key end in `keys`, value length and metadata.
    items: Vec<(usize, usize, ItemMeta)>,
    /// The walk ended with this step.
    done: bool,
}

impl Staged {
    fn push(&mut self, item: ItemView<'_>) {
        self.keys.extend_from_slice(item.key);
        self.items.push((self.keys.len(), item.value.len(), item.meta));
    }

    /// Format the staged items into `out` and empty the stage.
    fn print(&mut self, printer: &mut Printer, out: &mut Vec<u8>) {
        let mut start = 0;
        for &(end, value_len, ref meta) in &self.items {
            printer.line(&self.keys[start..end], value_len, meta, out);
            start = end;
        }
        self.keys.clear();
        self.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::Inner;
    use crate::sys::priority::current_policy as policy;

    #[test]
    fn a_cancel_between_publishing_and_lowering_leaves_the_printer_normal() {
        // On a thread of its own: the test lowers its thread's policy.
        std::thread::spawn(|| {
            let inner = Inner::default();
            // printer_to_idle's first step, then the worker's cancel (it
            // takes the tid and raises the thread), then the rest.
            inner.printer_tid.store(crate::sys::priority::current_tid(), Ordering::SeqCst);
            inner.cancel();
            inner.lower_printer();
            assert_eq!(policy(), libc::SCHED_OTHER, "a cancelled printer left under SCHED_IDLE");
            assert_eq!(inner.printer_tid.load(Ordering::SeqCst), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_hurry_between_publishing_and_lowering_leaves_the_printer_normal() {
        std::thread::spawn(|| {
            let inner = Inner::default();
            inner.printer_tid.store(crate::sys::priority::current_tid(), Ordering::SeqCst);
            inner.hurry();
            inner.lower_printer();
            assert_eq!(policy(), libc::SCHED_OTHER, "a hurried printer left under SCHED_IDLE");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_printer_waits_under_the_normal_policy_and_works_under_idle() {
        std::thread::spawn(|| {
            let inner = Inner::default();
            inner.printer_to_idle();
            assert_eq!(inner.waiting(policy), libc::SCHED_OTHER);
            assert_eq!(policy(), libc::SCHED_IDLE, "lowered again after the wait");
            // Raised by someone else before: it stays raised after a wait.
            inner.hurry();
            assert_eq!(inner.waiting(policy), libc::SCHED_OTHER);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    /// `/proc` state and policy of thread `tid` of this process.
    fn state_and_policy(tid: i32) -> (char, i32) {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        (fields[0].chars().next().unwrap(), fields[38].parse().unwrap())
    }

    #[test]
    fn a_printer_blocked_on_a_full_socket_sleeps_under_the_normal_policy() {
        use std::os::fd::AsRawFd;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let writer = super::SocketWriter::dup(ours.as_raw_fd()).unwrap();
        let inner = std::sync::Arc::new(Inner::default());
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let printer = {
            let inner = inner.clone();
            std::thread::spawn(move || {
                inner.printer_to_idle();
                tid_tx.send(crate::sys::priority::current_tid()).unwrap();
                let sent = super::send(&inner, &writer, &vec![b'x'; 8 << 20], || inner.cancelled.load(Ordering::SeqCst));
                (sent.is_err(), policy())
            })
        };
        let tid = tid_rx.recv().unwrap();
        // The reader reads nothing: the printer fills the socket and
        // sleeps in poll (state S); then, asleep, it must not be idle.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut seen = state_and_policy(tid);
        while seen.0 != 'S' && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            seen = state_and_policy(tid);
        }
        assert_eq!(seen, ('S', libc::SCHED_OTHER), "a printer asleep on a full socket (state, policy)");
        // Room again: it goes back to idle work, then blocks again.
        let mut buf = vec![0u8; 1 << 20];
        let _ = std::io::Read::read(&mut theirs, &mut buf);
        inner.cancel();
        let (failed, after) = printer.join().unwrap();
        assert!(failed, "a cancelled send gives up");
        assert_eq!(after, libc::SCHED_OTHER);
    }

    #[test]
    fn a_cancel_after_lowering_raises_the_printer() {
        std::thread::spawn(|| {
            let inner = Inner::default();
            inner.printer_to_idle();
            assert_eq!(policy(), libc::SCHED_IDLE);
            inner.cancel();
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
