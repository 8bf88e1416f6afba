//! A worker's turn, and one connection's drive within it.
//!
//! ```text
//!  turn: ready (sorted, each once) in batches of 16: the batch's first get
//!        keys prefetched together (turn_prefetch.rs), then each driven
//!  drive: ┌─► process (at most -R requests) ─► react to its Progress
//!         │   send what is pending ─► all out? the batch's latency recorded
//!         │   fill: room for input and not yielded ─ bytes came in ─┐
//!         └─────────────────────────────────────────────────────────┘
//!         closing and nothing in flight: close; else give back an empty
//!         input's buffer and note the connection's buffer bytes
//! ```
//!
//! The reaction to each [`Progress`], once for every engine:
//!
//! | Progress        | the session                                                    |
//! |-----------------|----------------------------------------------------------------|
//! | NeedInput       | reads more; after the peer's end of input, closes after writing |
//! | Yield           | `conn_yields`, runs again next turn without waiting           |
//! | OutputFull      | writes, reads no more until the client has read some           |
//! | CloseAfterWrite | runs nothing more, closes once the replies are out            |
//! | Close           | closes at once (`error`), replies dropped                      |
//! | Dumping         | runs again within the dump's tick; a watcher whose client left closes after writing |
//! | FlashWait       | the engine submits the reads; if none could be, runs again next turn |

use crate::conn::Progress;
use crate::service::{Hooks, Service};
use crate::stats::{WorkerMemory, WorkerStats};

use super::io::{Filled, Io, Room};
use super::{Session, Sessions, MAX_BUFFERED_INPUT};

impl<L> Sessions<L> {
    /// Drive every connection in `ready` once (each at most once a turn),
    /// a batch of them at a time, the batch's first keys prefetched
    /// together so their cache misses overlap (`turn_prefetch.rs`).
    pub fn turn<I: Io<Link = L>>(&mut self, io: &mut I) {
        let mut ready = std::mem::take(&mut self.ready);
        if std::mem::take(&mut self.repeats) {
            ready.sort_unstable();
            ready.dedup();
        }
        for batch in ready.chunks(crate::turn_prefetch::BATCH) {
            if batch.len() > 1 {
                if I::FILLS_AHEAD {
                    batch.iter().for_each(|&slot| self.fill_ahead(io, slot));
                }
                let slots = &self.slots;
                let inputs = batch.iter().filter_map(|&i| slots.get(i)?.as_ref()).map(|s| s.conn.input.filled());
                crate::turn_prefetch::prefetch(self.rt.core.engine.as_ref(), inputs);
            }
            for &slot in batch {
                self.drive(io, slot);
            }
        }
        ready.clear();
        // Connections made ready while this turn ran (a completion handled
        // meanwhile) stay for the next.
        ready.append(&mut self.ready);
        self.ready = ready;
    }

    /// Read what a ready connection has before the turn drives it.
    fn fill_ahead<I: Io<Link = L>>(&mut self, io: &mut I, slot: usize) {
        let Sessions { rt, worker, stats, slots, read_bufs, .. } = self;
        let Some(Some(s)) = slots.get_mut(slot) else { return };
        let room = Room { input: wants_input(s, rt.core.settings.max_pending_output_bytes), now: true };
        match io.fill(s, room, read_bufs, Hooks::new(rt, *worker), stats) {
            Filled::More | Filled::Wait => {}
            Filled::Eof => s.eof = true,
            Filled::Failed => s.closing = true,
        }
    }

    /// Run a connection's requests, write its replies and read what it
    /// sent, until it would block; close it when it is done. Returns the
    /// last [`Progress`] its requests made (None: none ran).
    pub fn drive<I: Io<Link = L>>(&mut self, io: &mut I, slot: usize) -> Option<Progress> {
        let Sessions { rt, worker, stats, slots, yielded, dumping, read_bufs, budget, .. } = self;
        let Some(Some(s)) = slots.get_mut(slot) else { return None };
        let mut svc = Service::new(rt, *worker).for_conn(s.id);
        let hooks = svc.hooks;
        let max_output = rt.core.settings.max_pending_output_bytes;
        let mut last = None;
        loop {
            if !s.closing && !s.close_after_write {
                let progress = s.conn.process(&mut svc, *budget);
                last = Some(progress);
                match react(s, progress) {
                    Then::Stay => {}
                    Then::Yield => {
                        WorkerStats::incr(&stats.conn_yields);
                        yielded.push(slot);
                    }
                    Then::Dump => dumping.push(slot),
                    Then::Submit => {
                        if io.submit_flash(s, slot) {
                            yielded.push(slot);
                        }
                    }
                }
            }
            if s.closing {
                break;
            }
            if io.send(s, stats).is_err() {
                s.closing = true;
                break;
            }
            if io.sent(s) {
                hooks.replied(&mut s.conn.timing);
            }
            if s.close_after_write && io.flushed(s) {
                s.closing = true;
            }
            let room = Room { input: wants_input(s, max_output), now: yielded.last() != Some(&slot) };
            match io.fill(s, room, read_bufs, hooks, stats) {
                Filled::More => {}
                Filled::Wait => break,
                Filled::Eof => s.eof = true,
                Filled::Failed => {
                    s.closing = true;
                    break;
                }
            }
        }
        self.settle(io, slot);
        last
    }

    /// The end of a drive: close a connection that is done (once nothing
    /// of it is in flight), else pool its input buffer if it holds nothing
    /// and note its buffer bytes (`stats memory`).
    fn settle<I: Io<Link = L>>(&mut self, io: &mut I, slot: usize) {
        let Some(Some(s)) = self.slots.get_mut(slot) else { return };
        if s.closing {
            io.cancel(s);
            if io.settled(s) {
                self.close(io, slot);
            }
            return;
        }
        if let Some(storage) = s.conn.input.release() {
            self.read_bufs.offer(storage);
        }
        s.info.note_buffers(s.conn.buffer_bytes() + io.held_bytes(s));
        WorkerMemory::set(&self.stats.memory.read_pool, self.read_bufs.bytes);
    }
}

/// Whether a connection takes input now: not closing, room in its input
/// (beyond a data block it waits for) and in its output.
#[inline]
fn wants_input<L>(s: &Session<L>, max_output: usize) -> bool {
    let conn = &s.conn;
    let input = conn.input.len() < MAX_BUFFERED_INPUT.max(conn.awaiting);
    !s.closing && !s.close_after_write && !s.eof && input && conn.pending_output() <= max_output
}

/// What the worker does with a connection after [`react`].
enum Then {
    Stay,
    /// Run it again next turn without waiting (`conn_yields`).
    Yield,
    /// Run it again within the dump's tick.
    Dump,
    /// Submit its parked request's flash reads.
    Submit,
}

/// What a connection's requests left, the same for every engine (the
/// table above): the session's state, and what the worker does next.
#[inline]
fn react<L>(s: &mut Session<L>, progress: Progress) -> Then {
    match progress {
        Progress::Close => {
            s.closing = true;
            s.close_reason = super::ERROR;
        }
        Progress::CloseAfterWrite => s.close_after_write = true,
        Progress::Yield => return Then::Yield,
        // A watcher's client went away (it sends nothing else).
        Progress::Dumping if s.eof && s.conn.is_watching() => s.close_after_write = true,
        Progress::Dumping => return Then::Dump,
        Progress::FlashWait => return Then::Submit,
        Progress::NeedInput if s.eof => s.close_after_write = true,
        Progress::NeedInput | Progress::OutputFull => {}
    }
    Then::Stay
}

/// Whether a connection has anything a drive could do: input or replies
/// waiting, a dump, ciphertext, or an end to act on (for an engine that
/// skips a drive that would find nothing, io_uring's send completions).
pub fn idle<L>(s: &Session<L>) -> bool {
    let c = &s.conn;
    c.out.is_empty() && c.input.is_empty() && !c.is_dumping() && !s.tls_wants_write() && !s.closing && !s.close_after_write && !s.eof
}
