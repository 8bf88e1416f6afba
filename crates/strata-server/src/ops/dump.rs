//! Key dumps: `lru_crawler metadump|mgdump <classes|all|hash>` and `stats
//! cachedump <class> <limit>`, streamed.
//!
//! The command only checks its arguments and hands a [`Dump`] to its
//! connection (through the dump it returns); from then on the
//! connection's [`pump`] runs before anything else it has buffered, and
//! the connection's next requests run once the dump's last line is out
//! (as in memcached, whose crawler thread owns the connection meanwhile).
//!
//! - `lru_crawler metadump|mgdump` (`Dump::Feed`): walked, formatted and
//!   written to the client's socket by two threads of its own
//!   (`dump_feed.rs`); the pump hands them the socket once the replies
//!   before the dump are out, then only looks (each 1 ms tick) whether the
//!   dump has ended, so a dump of any size costs its worker nothing
//!   measurable. One at a time, server-wide (memcached: one crawler).
//! - `stats cachedump` (`Dump::Walk`, memcached: one pass under an LRU
//!   lock, 2 MiB at most) is walked by its worker, in steps:
//!
//! ```text
//!  pending output < 16 KiB ──► walk steps (256 items each, one shard lock
//!        │                      per step) until 32 KiB are pending, or
//!        │                      8 steps ran; then rest 3x as long as that
//!        │                      took ──► Progress::Dumping: the worker
//!        │                      writes and comes back within 1 ms
//!  resting ──────────────────► Progress::Dumping (nothing done)
//!  pending output ≥ 16 KiB ──► Progress::OutputFull: wait until the
//!                               client reads
//!  walk done ──► END ──► the connection's next requests run
//! ```
//!
//!   It holds at most ~50 KiB of output and a cursor, and takes at most
//!   about a quarter of its worker's time; it stops at memcached's 2 MiB
//!   and is not counted as the crawler.
//! - Under `inline_background` (the fuzz harnesses', `settings.rs`) a
//!   crawler dump is a `Dump::Walk` too, holding the crawler, and no walk
//!   rests: the harnesses start no thread for a dump, and how far a dump
//!   got never turns on the clock.
//!   It lists what is in memory only: a walk of the flash file reads all
//!   of it (20-40 ms for the conn harness's 16 MiB, without
//!   AddressSanitizer), and inputs of dozens of dumps passed the fuzzer's
//!   1 s timeout.
//!
//! Each dump's lines are formatted by `dump_lines.rs`. This module owns
//! the connection's dump slot ([`Dump`], [`pump`]) and so depends on the
//! three things that fill it (`dump_feed.rs`, `watch.rs`, its own walk);
//! none of them depends on it.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use std::sync::Arc;

use strata_proto::admin::Classes;
use strata_proto::Tokens;
use strata_store::{Visit, WalkCursor, WALK_BATCH};

use super::crawler::{Busy, Crawler};
use super::dump_feed::{Fed, Feed};
use super::dump_lines::{Kind, Printer};
use super::watch::Watcher;
use super::{refused, Started};
use crate::ctx::Ctx;
use crate::output::Output;
use crate::core::Core;

/// Refill when fewer pending output bytes than this remain.
const REFILL_BELOW_BYTES: usize = 16 << 10;
/// Stop a refill once this much output is pending: about 300 metadump
/// lines, 100-150 µs of work, so the worker's other connections never
/// wait long behind a refill.
const FILL_TO_BYTES: usize = 32 << 10;
/// Walk steps per refill, at most (a class filter may skip most items).
const STEPS_PER_REFILL: usize = 8;
/// After a refill that took `t` of CPU, the dump rests `t` times this
/// before the next: it takes at most a quarter of its worker's time, so a
/// dump of millions of keys leaves the worker's other connections (and a
/// small machine's other cores) their share.
const IDLE_PER_BUSY: u32 = 3;
/// How often a resting or refilled dump is looked at again.
const DUMP_TICK: Duration = Duration::from_millis(1);

/// What refills a streaming connection's output: a key dump's walk, or a
/// watcher's log lines (`ops/watch.rs`: a dump that never ends).
pub enum Dump {
    /// `stats cachedump`, walked by its worker.
    Walk(Walk),
    /// `lru_crawler metadump|mgdump`, walked by a thread of its own.
    Feed(Feed),
    /// `watch`: a dump that never ends (`ops/watch.rs`).
    Watch(Watcher),
}

/// A `stats cachedump` in progress on one connection (or a crawler dump,
/// under `inline_background`).
pub struct Walk {
    printer: Printer,
    cursor: WalkCursor,
    /// Resting until then (see `IDLE_PER_BUSY`).
    resume_at: Option<Instant>,
    /// A crawler dump walked here (`inline_background`) holds the crawler
    /// to its end.
    busy: Option<Busy>,
    /// A crawler dump's last line is written: it ends once that is sent,
    /// as its printer thread's does, so the connection's next request
    /// finds none of it pending (a metadump after it is no pipelined one).
    ended: bool,
    /// The crawler's `lru_crawler sleep` paces the walk's rests.
    crawler: Arc<Crawler>,
}

/// `lru_crawler metadump|mgdump <classes>`, checked as memcached 1.6.45
/// checks it; the dump itself starts with `OK`.
pub fn start_crawler_dump(ops: &super::Ops, ctx: &Ctx<'_>, mg: bool, classes: Classes, out: &mut Output) -> Started {
    let crawler = &ops.crawler;
    let refusal = if !crawler.enabled() {
        Some("CLIENT_ERROR lru crawler disabled")
    } else if !ctx.core.settings.dumps_enabled {
        Some(if mg { "ERROR key dump not allowed" } else { "ERROR metadump not allowed" })
    } else if out.has_stacked_replies() {
        Some(if mg {
            "ERROR cannot pipeline other commands before mgdump"
        } else {
            "ERROR cannot pipeline other commands before metadump"
        })
    } else if classes == Classes::Bad {
        Some("BADCLASS invalid class id")
    } else if out.is_datagram() {
        Some("SERVER_ERROR key dumps are not served over UDP")
    } else {
        None
    };
    if let Some(line) = refusal {
        return refused(out, line);
    }
    let Some(busy) = crawler.begin() else {
        return refused(out, "BUSY currently processing crawler request");
    };
    let printer = Printer::new(ctx, if mg { Kind::Mg } else { Kind::Meta }, classes);
    if ctx.core.settings.inline_background {
        out.extend_from_slice(b"OK\r\n");
        return Some(Box::new(Dump::Walk(Walk::new(printer, WalkCursor::default(), Some(busy), crawler.clone()))));
    }
    let Some(feed) = Feed::spawn(ctx.core.clone(), crawler.clone(), printer, Some(busy)) else {
        // memcached's answer when its crawler cannot start.
        return refused(out, "ERROR an unknown error happened");
    };
    out.extend_from_slice(b"OK\r\n");
    Some(Box::new(Dump::Feed(feed)))
}

/// `stats cachedump <class> <limit>`.
pub fn start_cachedump(ops: &super::Ops, ctx: &Ctx<'_>, args: &Tokens<'_>, out: &mut Output) -> Started {
    if !ctx.core.settings.dumps_enabled {
        return refused(out, "CLIENT_ERROR stats cachedump not allowed");
    }
    if args.len() < 4 {
        return refused(out, "CLIENT_ERROR bad command line");
    }
    let number = |i: usize| strata_proto::number::parse_u64(args.get(i)).and_then(|v| u32::try_from(v).ok());
    let (Some(class), Some(limit)) = (number(2), number(3)) else {
        return refused(out, strata_proto::command::BAD_FORMAT);
    };
    if class >= strata_proto::admin::MAX_CLASSES {
        return refused(out, "CLIENT_ERROR Illegal slab id");
    }
    if out.is_datagram() {
        return refused(out, "SERVER_ERROR key dumps are not served over UDP");
    }
    let classes = Classes::List(1u64 << class);
    let printer = Printer::new(ctx, Kind::Cache { limit }, classes);
    Some(Box::new(Dump::Walk(Walk::new(printer, WalkCursor::default(), None, ops.crawler.clone()))))
}

impl Dump {
    /// A crawler dump (`lru_crawler metadump|mgdump`) in progress: while
    /// it is, every other crawl or crawler dump answers `BUSY`.
    pub fn holds_crawler(&self) -> bool {
        match self {
            Dump::Walk(walk) => walk.busy.is_some(),
            Dump::Feed(_) => true,
            Dump::Watch(_) => false,
        }
    }
}

impl Walk {
    fn new(printer: Printer, cursor: WalkCursor, busy: Option<Busy>, crawler: Arc<Crawler>) -> Walk {
        Walk { printer, cursor, resume_at: None, busy, ended: false, crawler }
    }

    /// Walk until `out` has `FILL_TO_BYTES` pending or the walk ends;
    /// true when the dump is complete (terminator written, and for a
    /// crawler dump sent).
    fn refill(&mut self, shared: &Core, out: &mut Output) -> bool {
        if self.ended {
            return out.pending_len() == 0;
        }
        let started = Instant::now();
        if self.resume_at.is_some_and(|at| started < at) {
            return false;
        }
        let now = shared.clock.now();
        let printer = &mut self.printer;
        let mut looked = 0;
        for _ in 0..STEPS_PER_REFILL {
            looked += WALK_BATCH;
            let done = shared.engine.walk(&mut self.cursor, WALK_BATCH, now, &mut |item, how| {
                if how == Visit::Live {
                    printer.line(item.key, item.value.len(), &item.meta, out);
                }
                false
            });
            if done || printer.full() {
                printer.terminate(out);
                self.ended = self.busy.is_some();
                return !self.ended;
            }
            if out.pending_len() >= FILL_TO_BYTES {
                break;
            }
        }
        // Rest: IDLE_PER_BUSY times the work, and at least memcached's
        // `lru_crawler sleep` per 1000 items.
        if shared.settings.inline_background {
            return false;
        }
        let busy = started.elapsed();
        let sleep_us = u64::from(self.crawler.sleep_us()) * looked as u64 / 1000;
        self.resume_at = Some(started + busy + (busy * IDLE_PER_BUSY).max(Duration::from_micros(sleep_us)));
        false
    }
}

/// A worker's connections with a dump in progress: each is driven again
/// within `DUMP_TICK` (to refill, or to see whether its rest is over).
#[derive(Default)]
pub struct Dumping(Vec<usize>);

impl Dumping {
    pub fn push(&mut self, index: usize) {
        self.0.push(index);
    }

    /// The event loop's wait: no longer than a tick while dumps are on.
    pub fn timeout(&self, otherwise: Duration) -> Duration {
        if self.0.is_empty() {
            otherwise
        } else {
            otherwise.min(DUMP_TICK)
        }
    }

    /// Move the connections to drive this turn into `ready`.
    pub fn drain_into(&mut self, ready: &mut Vec<usize>) {
        ready.append(&mut self.0);
    }

    pub fn remove(&mut self, index: usize) {
        self.0.retain(|&i| i != index);
    }
}

/// Why a connection running a dump must wait before its next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pumped {
    /// The dump refilled the output and has more to come: write, then
    /// come back next turn.
    Dumping,
    /// The output is full enough: write first.
    OutputFull,
    /// The dump failed: close the connection.
    Close,
}

/// The connection-side hook, run before each request while a dump runs:
/// refill its output, and say whether the connection must wait (`Some`)
/// or may run its next request (`None`: the dump ended).
#[cold]
pub fn pump(slot: &mut Option<Box<Dump>>, shared: &Core, out: &mut Output, socket: Option<RawFd>) -> Option<Pumped> {
    let dump = slot.as_mut()?;
    if let Dump::Watch(watcher) = &mut **dump {
        // A watcher is driven every tick even while its client is not
        // reading: its lines must keep moving out of the workers' buffers
        // (and be counted as skipped once its own buffer is full).
        let room = FILL_TO_BYTES.saturating_sub(out.pending_len());
        watcher.refill(out, room);
        return Some(Pumped::Dumping);
    }
    if out.pending_len() >= REFILL_BELOW_BYTES {
        return Some(Pumped::OutputFull);
    }
    let finished = match &mut **dump {
        Dump::Walk(walk) => walk.refill(shared, out),
        Dump::Feed(feed) => match feed.poll(out.pending_len(), socket) {
            Fed::More => false,
            Fed::Finished => true,
            Fed::Failed => {
                *slot = None;
                return Some(Pumped::Close);
            }
        },
        Dump::Watch(_) => false,
    };
    if finished {
        *slot = None;
        return None;
    }
    Some(Pumped::Dumping)
}
