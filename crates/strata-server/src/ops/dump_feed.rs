//! `lru_crawler metadump|mgdump` off the workers: a walker thread, a
//! printer thread, and the bounded queue of output chunks they fill for
//! the dump's connection, whose worker only moves finished chunks.
//!
//! ```text
//!  strata-dumpwalk (worker priority)     strata-dump (SCHED_IDLE)        the connection's worker
//!  4 walk steps (a shard lock, 64        formats a stage's lines into    pump (each 1 ms tick and
//!  items looked at each), live ones' ──► `filling`; at 64 KiB ─────────► each finished send):
//!  keys and metadata copied to a         Queue { ready: ≤ 4 chunks,      try_lock the queue, move
//!  stage (2 stages go round) ◄──────     spare, finished }               chunks into `out` while
//!        empty stages come back          4 ready: wait for `room`        < 32 KiB are pending
//! ```
//!
//! Why two threads: the formatting (most of a dump's CPU time) runs under
//! `SCHED_IDLE` (`sys/priority.rs`), so it takes only CPU time no worker
//! wants, and a worker woken by a request takes the CPU from it at once;
//! but a thread that can be left without CPU for milliseconds must never
//! hold a shard lock, so the walking (the only part under a lock, about
//! 17 µs per 256 items, docs/BENCHMARKS.md, held 64 items at a time) runs
//! at the workers' own priority and holds a shard lock about as long as a
//! worker's multi-get does. The walker waits for an empty stage, so it runs only as fast as
//! the idle printer frees them: a dump goes at the speed of the CPU time
//! nobody else wants (2 M keys/s on an idle 2-core machine) and slows to
//! almost nothing on a saturated one.
//!
//! So a dump holds at most 2 stages (256 keys each), 6 chunks of 64 KiB (4
//! ready, 1 filling, 1 in the connection's output) and a walk cursor,
//! whatever the store's size, and a client that stops reading stops the
//! walk. The worker never blocks on the queue's lock (`try_lock`: if the
//! printer holds it, the chunks wait for the next tick). Dropping the
//! [`Feed`] (the connection closed) cancels the dump: the printer sees it
//! (waiting at most 100 ms), returns, and the walker finds its channel
//! closed. The printer lets go of the crawler ([`super::crawler::Busy`])
//! when the walk ends, before its last chunk (with `END`/`EN`) is handed
//! over, so a client that reads the end of a dump can start the next one
//! at once. `lru_crawler sleep` pauses the walker per 1000 items.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::time::Duration;

use strata_store::{ItemMeta, ItemView, Visit, WalkCursor};

use super::crawler::Busy;
use super::dump::Printer;
use crate::shared::Shared;

/// A chunk is handed over once it holds this much.
const CHUNK_BYTES: usize = 64 << 10;
/// Chunks formatted ahead of the client, at most.
const READY_CHUNKS: usize = 4;
/// Emptied buffers kept for reuse, at most.
const SPARE_CHUNKS: usize = 2;
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

#[derive(Default)]
struct Queue {
    ready: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    /// The last chunk (with the terminator) is in `ready`.
    finished: bool,
    /// The dump thread waits on `room`.
    waiting: bool,
}

#[derive(Default)]
struct Inner {
    queue: Mutex<Queue>,
    room: Condvar,
    cancelled: AtomicBool,
}

/// The worker's end of a dump thread.
pub struct Feed(Arc<Inner>);

/// What [`Feed::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// Moved what was ready (maybe nothing); the dump goes on.
    More,
    /// The last bytes (the terminator) are in the output.
    Finished,
}

impl Feed {
    /// Start a dump's two threads, the walker and the printer; `None` if
    /// they could not be started.
    pub(super) fn spawn(shared: Arc<Shared>, printer: Printer, busy: Option<Busy>) -> Option<Feed> {
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
            .spawn(move || walk(&walker_shared, &walker_inner, empties, to_printer))
            .ok()?;
        let theirs = inner.clone();
        std::thread::Builder::new()
            .name("strata-dump".into())
            .spawn(move || {
                // A dump that cannot lower its priority still runs.
                let _ = crate::sys::priority::idle_current_thread();
                print(&shared, &theirs, printer, busy, fulls, to_walker);
            })
            .ok()?;
        Some(Feed(inner))
    }

    /// Move ready chunks into `out` until `fill_to` bytes are pending past
    /// `wpos`. Never waits for the dump thread.
    pub fn take(&self, out: &mut Vec<u8>, wpos: usize, fill_to: usize) -> Fed {
        let mut queue = match self.0.queue.try_lock() {
            Ok(queue) => queue,
            Err(TryLockError::WouldBlock) => return Fed::More,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let mut moved = false;
        while out.len() - wpos < fill_to {
            let Some(mut chunk) = queue.ready.pop_front() else { break };
            moved = true;
            if out.is_empty() {
                std::mem::swap(out, &mut chunk);
            } else {
                out.extend_from_slice(&chunk);
            }
            chunk.clear();
            if queue.spare.len() < SPARE_CHUNKS && (CHUNK_BYTES..=4 * CHUNK_BYTES).contains(&chunk.capacity()) {
                queue.spare.push(chunk);
            }
        }
        if queue.finished && queue.ready.is_empty() {
            return Fed::Finished;
        }
        if moved && queue.waiting {
            self.0.room.notify_one();
        }
        Fed::More
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
        self.0.room.notify_one();
    }
}

/// The walker thread: one walk step (one shard lock) at a time into an
/// empty stage, handed to the printer, until the walk ends or the printer
/// goes (cancelled: it drops its ends of the channels).
fn walk(shared: &Shared, inner: &Inner, empties: Receiver<Staged>, to_printer: SyncSender<Staged>) {
    let mut cursor = WalkCursor::default();
    let mut since_sleep = 0;
    while let Ok(mut staged) = empties.recv() {
        if inner.cancelled.load(Ordering::Relaxed) || shared.is_shutting_down() {
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
            let us = shared.ops.crawler.sleep_us();
            if us > 0 {
                std::thread::sleep(Duration::from_micros(u64::from(us) * since_sleep as u64 / ITEMS_PER_SLEEP as u64));
            }
            since_sleep = 0;
        }
    }
}

/// The printer thread: format each stage into 64 KiB chunks for the
/// worker, until the walk's last stage, a cancel, or a shutdown.
fn print(shared: &Shared, inner: &Inner, mut printer: Printer, busy: Option<Busy>, fulls: Receiver<Staged>, to_walker: SyncSender<Staged>) {
    let mut busy = busy;
    let mut filling = Vec::with_capacity(CHUNK_BYTES + (4 << 10));
    // A closed channel: the walker stopped (cancelled or shutting down).
    while let Ok(mut staged) = fulls.recv() {
        staged.print(&mut printer, &mut filling);
        if staged.done {
            printer.terminate(&mut filling);
            // Let go of the crawler before the client can see the end.
            drop(busy.take());
            hand_over(inner, shared, filling, true);
            return;
        }
        // The walker may be gone already, its last stage sent: no matter.
        let _ = to_walker.send(staged);
        if filling.len() >= CHUNK_BYTES {
            match hand_over(inner, shared, filling, false) {
                Some(next) => filling = next,
                None => return,
            }
        }
    }
}

/// Queue `chunk` once there is room; an empty buffer to fill next, or
/// `None` when the dump is cancelled (or this was the last chunk).
fn hand_over(inner: &Inner, shared: &Shared, chunk: Vec<u8>, last: bool) -> Option<Vec<u8>> {
    let mut queue = inner.queue.lock().unwrap_or_else(|e| e.into_inner());
    while queue.ready.len() >= READY_CHUNKS {
        if inner.cancelled.load(Ordering::Relaxed) || shared.is_shutting_down() {
            return None;
        }
        queue.waiting = true;
        queue = match inner.room.wait_timeout(queue, WAIT_AT_MOST) {
            Ok((queue, _)) => queue,
            Err(e) => e.into_inner().0,
        };
        queue.waiting = false;
    }
    queue.ready.push_back(chunk);
    queue.finished = last;
    if last {
        return None;
    }
    Some(queue.spare.pop().unwrap_or_else(|| Vec::with_capacity(CHUNK_BYTES + (4 << 10))))
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
