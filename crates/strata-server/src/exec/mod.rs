//! The executor: the one place that sees both protocol and store types. It
//! turns a parsed [`Command`] into engine calls and appends the reply bytes
//! to the connection's output buffer.
//!
//! Storage commands come in two steps, as in memcached: [`Executor::admit_value`]
//! decides from the header alone whether the data block will be accepted
//! (too large is refused before a byte of it is buffered, and the block is
//! swallowed), then [`Executor::store`] runs once the whole block is there.

mod binary;
mod flash;
mod meta;
mod stats_cmd;

/// The stats groups as `(name, value)` pairs, for `/metrics` (`ops/metrics.rs`).
pub(crate) use stats_cmd::{collect as collect_stats, Group as StatsGroup};

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use strata_proto::command::BAD_CHUNK;
use strata_proto::number::push_u64;
use strata_proto::{Command, DebugTime, GetKind, StoreCommand, StoreVerb, KEY_MAX_LENGTH};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions,
    StoreMode, StoreRequest, StoreResult,
};

use crate::ops::watch;
use crate::shared::Shared;
use strata_proto::admin::watch as streams;
use crate::stats::WorkerStats;

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Send what is queued, then close (`quit`).
    CloseAfterWrite,
    /// Close at once, without a reply.
    Close,
}

pub struct Executor<'a> {
    pub shared: &'a Arc<Shared>,
    pub stats: &'a WorkerStats,
    /// Where one reply object ends and the next begins, for transports
    /// that frame them separately (UDP: each is its own datagram series).
    marks: Option<&'a RefCell<Vec<usize>>>,
    /// Where the output not yet handed to the kernel begins (memcached
    /// culls all of it on some errors).
    unsent_from: Cell<usize>,
    /// Keys of `mg` hits whose replies are not yet transmitted: memcached's
    /// reply still references those items (see `DeltaRequest::in_place`).
    pinned: RefCell<Vec<Vec<u8>>>,
    /// The connection this executor runs for (its `stats conns` id; 0: none).
    pub conn_id: u64,
    /// A key dump the last command started, for its connection to run.
    dump: Cell<Option<Box<crate::ops::dump::Dump>>>,
    /// Where the replies memcached still holds on the connection's response
    /// stack begin (it flushes them on a new read and on `mn`); a metadump
    /// behind any of them is refused.
    stacked_from: Cell<usize>,
    /// A request parked on a flash read, or resumed after one (`flash.rs`).
    flash: flash::FlashState,
}

/// Append `line` and CRLF unless `noreply` (then `-vv` still sees it).
#[inline]
pub(crate) fn reply(out: &mut Vec<u8>, line: &str, noreply: bool) {
    if !noreply {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        crate::ops::verbose::silenced(line.as_bytes());
    }
}

/// Whether a storage command's data block is taken, and if not, the reply.
pub enum Admission {
    Accept,
    /// Reply with this line (unless silenced) and swallow the block.
    Refuse { reply: &'static str, noreply: bool },
}

/// memcached 1.6.45's reply to a multi-get with an over-long key.
const GET_KEY_TOO_LONG: &str = "CLIENT_ERROR bad command line format\r\n";

impl<'a> Executor<'a> {
    pub fn new(shared: &'a Arc<Shared>, stats: &'a WorkerStats) -> Executor<'a> {
        Executor {
            shared,
            stats,
            marks: None,
            unsent_from: Cell::new(0),
            pinned: RefCell::new(Vec::new()),
            conn_id: 0,
            dump: Cell::new(None),
            stacked_from: Cell::new(0),
            flash: flash::FlashState::new(shared.flash_on),
        }
    }

    /// This executor runs for connection `id` (`stats conns` shows it as
    /// the one parsing a command).
    pub fn for_conn(self, id: u64) -> Executor<'a> {
        Executor { conn_id: id, ..self }
    }

    /// An executor that records reply-object boundaries in `marks`.
    pub fn with_marks(shared: &'a Arc<Shared>, stats: &'a WorkerStats, marks: &'a RefCell<Vec<usize>>) -> Executor<'a> {
        Executor {
            shared,
            stats,
            marks: Some(marks),
            unsent_from: Cell::new(0),
            pinned: RefCell::new(Vec::new()),
            conn_id: 0,
            dump: Cell::new(None),
            stacked_from: Cell::new(0),
            flash: flash::FlashState::new(shared.flash_on),
        }
    }

    /// Where the output memcached would not have transmitted yet begins.
    pub fn unsent_from(&self) -> usize {
        self.unsent_from.get()
    }

    /// Output before `at` has been handed to the kernel.
    pub fn set_unsent_from(&self, at: usize) {
        self.unsent_from.set(at);
        self.pinned.borrow_mut().clear();
    }

    /// Remember that an unsent reply references the item under `key`.
    fn pin(&self, key: &[u8]) {
        let mut pinned = self.pinned.borrow_mut();
        if !pinned.iter().any(|k| k == key) {
            pinned.push(key.to_vec());
        }
    }

    fn is_pinned(&self, key: &[u8]) -> bool {
        self.pinned.borrow().iter().any(|k| k == key)
    }

    /// Output before `at` has been handed to the kernel and nothing is
    /// held for the response stack (a new read; `mn`).
    pub fn flushed(&self, at: usize) {
        self.set_unsent_from(at);
        self.stacked_from.set(at);
    }

    /// Replies memcached would still hold on its response stack.
    pub fn has_stacked_replies(&self, out: &[u8]) -> bool {
        out.len() > self.stacked_from.get()
    }

    /// Hand a key dump to this command's connection (`ops/dump.rs`).
    pub fn start_dump(&self, dump: Box<crate::ops::dump::Dump>) {
        self.dump.set(Some(dump));
    }

    #[inline]
    pub fn take_dump(&self) -> Option<Box<crate::ops::dump::Dump>> {
        self.dump.take()
    }

    /// Replies go out as datagrams (UDP).
    pub fn is_datagram(&self) -> bool {
        self.marks.is_some()
    }

    /// A reply object ends at `out.len()`.
    pub fn mark(&self, out: &[u8]) {
        if let Some(marks) = self.marks {
            let mut marks = marks.borrow_mut();
            if marks.last() != Some(&out.len()) {
                marks.push(out.len());
            }
        }
    }

    /// Run a command that has no data block.
    pub fn execute(&self, cmd: &Command<'_>, out: &mut Vec<u8>) -> Flow {
        match *cmd {
            Command::Get { kind, keys } => self.get(kind, keys.iter(), out),
            Command::Delete { key, noreply } => self.delete(key, noreply, out),
            Command::Arith { incr, key, delta, noreply } => self.arith(incr, key, delta, noreply, out),
            Command::Touch { key, exptime, noreply } => self.touch(key, exptime, noreply, out),
            Command::FlushAll { delay, noreply } => self.flush_all(delay, noreply, out),
            Command::Version => {
                out.extend_from_slice(b"VERSION ");
                out.extend_from_slice(crate::settings::VERSION.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Command::Verbosity { level, noreply } => {
                self.shared.ops.verbose.set(level);
                reply(out, "OK", noreply)
            }
            Command::Quit => return Flow::CloseAfterWrite,
            Command::Shutdown { graceful: _, valid } => {
                if !self.shared.settings.shutdown_enabled {
                    reply(out, "SERVER_ERROR: shutdown not enabled", false);
                } else if !valid {
                    reply(out, "CLIENT_ERROR invalid shutdown mode", false);
                } else {
                    self.shared.request_shutdown();
                    return Flow::Close;
                }
            }
            Command::CacheMemlimit { megabytes, noreply } => self.memlimit(megabytes, noreply, out),
            Command::RefreshCerts => crate::tls::refresh_command(self.shared, out),
            Command::Stats { args } => stats_cmd::stats(self, args, out),
            Command::MetaNoop => {
                out.extend_from_slice(b"MN\r\n");
                self.flushed(out.len()); // memcached flushes on mn
            }
            Command::MetaGet(ref req) => self.meta_get(req, out),
            Command::MetaDelete(ref req) => self.meta_delete(req, out),
            Command::MetaArith(ref req) => self.meta_arith(req, out),
            Command::MetaDebug { key, base64 } => self.meta_debug(key, base64, out),
            Command::Error { reply: line, noreply, .. } => reply(out, line, noreply),
            Command::Admin(cmd) => crate::ops::admin(self, cmd, out),
            Command::DebugTime(change) => {
                let clock = &self.shared.clock;
                match change {
                    DebugTime::Pause => clock.debug_pause(true),
                    DebugTime::Resume => clock.debug_pause(false),
                    DebugTime::Advance(secs) => clock.debug_advance(secs),
                }
                reply(out, "OK", false);
            }
            Command::Close => return Flow::Close,
            Command::Store(_) | Command::MetaSet { .. } => {
                unreachable!("storage commands go through admit_value and store")
            }
        }
        Flow::Continue
    }

    fn now(&self) -> u32 {
        self.shared.clock.now()
    }

    /// A mutation of `key` is about to run: the journal records it, and a
    /// warm return's catch-up first drops a restored copy peers changed.
    #[inline]
    fn journal(&self, key: &[u8]) {
        self.shared.journal.record(key);
        if self.shared.catchup.is_active() {
            self.shared.catchup.check(&*self.shared.engine, key, self.now());
        }
    }

    fn expiry(&self, exptime: i32) -> u32 {
        self.shared.clock.expiry(i64::from(exptime))
    }

    fn get<'k>(&self, kind: GetKind, keys: impl Iterator<Item = &'k [u8]> + Clone, out: &mut Vec<u8>) {
        let mark = out.len();
        let touch = match kind {
            GetKind::Gat(e) | GetKind::Gats(e) => Some(self.expiry(e)),
            _ => None,
        };
        let now = self.now();
        let s = self.stats;
        // Run again after a flash read: the keys before it were answered.
        let resume_from = self.resume_from();
        let mut ahead = keys.clone().skip(resume_from);
        for (i, key) in keys.enumerate() {
            if i < resume_from {
                continue;
            }
            if (i - resume_from) % PREFETCH_WINDOW == 0 {
                prefetch_window(self.shared.engine.as_ref(), &mut ahead);
            }
            if i > 0 {
                // memcached starts a reply object per key; END rides with the
                // last key's (a separate datagram over UDP if that key missed).
                self.mark(out);
            }
            if key.len() > KEY_MAX_LENGTH {
                // memcached's conn_release_items: every reply on the
                // connection not yet transmitted is dropped, not only this
                // command's.
                let unsent = self.unsent_from.get().min(mark);
                out.truncate(unsent);
                if let Some(marks) = self.marks {
                    marks.borrow_mut().retain(|&m| m <= unsent);
                }
                // 1.6.45 copies the error line, its CRLF included, and
                // sends it with another CRLF.
                reply(out, GET_KEY_TOO_LONG, false);
                return;
            }
            let opts = GetOptions { touch, ..GetOptions::default() };
            let key_mark = out.len();
            // What the read found, for `watch fetchers` (flags, value bytes,
            // TTL): logged after the read, so an item on flash is found.
            let watching = watch::wants(self, streams::FETCHERS);
            let mut seen = None;
            let read = self.read_item(key, i, opts, now, &mut |item, _created| {
                if watching {
                    seen = Some((item.meta.flags, item.value.len(), item.meta.exptime));
                }
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, u64::from(item.meta.flags));
                out.push(b' ');
                push_u64(out, item.value.len() as u64);
                if kind.returns_cas() {
                    out.push(b' ');
                    push_u64(out, item.meta.cas);
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(item.value);
                out.extend_from_slice(b"\r\n");
                GetAction::default()
            });
            let hit = match read {
                flash::Read::Hit => true,
                flash::Read::Miss => false,
                flash::Read::Parked => {
                    out.truncate(key_mark);
                    return;
                }
            };
            if watching {
                watch::fetched_as(self, key, seen);
            }
            if touch.is_some() {
                WorkerStats::incr(&s.cmd_touch);
                WorkerStats::incr(if hit { &s.touch_hits } else { &s.touch_misses });
            } else {
                WorkerStats::incr(&s.cmd_get);
            }
            WorkerStats::incr(if hit { &s.get_hits } else { &s.get_misses });
            if self.shared.ops.detail.on() {
                self.shared.ops.detail.record_get(key, hit);
            }
        }
        out.extend_from_slice(b"END\r\n");
        // memcached transmits everything queued after a multi-get.
        self.set_unsent_from(out.len());
    }

    /// Decide from a storage header whether its data block is taken.
    pub fn admit_value(&self, key: &[u8], flags: u32, value_len: usize, remove_on_refusal: bool) -> Admission {
        if self.shared.engine.item_size_ok(key.len(), flags, value_len) {
            return Admission::Accept;
        }
        WorkerStats::incr(&self.stats.store_too_large);
        WorkerStats::incr(&self.stats.cmd_set);
        if remove_on_refusal {
            // A failed set must not leave the old value behind.
            let req = DeleteRequest { key, ..DeleteRequest::default() };
            self.journal(key);
            self.shared.engine.delete(&req, self.now());
        }
        Admission::Refuse { reply: "SERVER_ERROR object too large for cache", noreply: false }
    }

    /// Store a text-protocol storage command; `data` ends with the 2 bytes
    /// that should be `\r\n`.
    pub fn store(&self, cmd: &StoreCommand<'_>, data: &[u8], out: &mut Vec<u8>) {
        let (value, tail) = data.split_at(data.len() - 2);
        if tail != b"\r\n" {
            reply(out, BAD_CHUNK, cmd.noreply);
            return;
        }
        if cmd.verb != StoreVerb::Set && self.flash_first(cmd.key, 0).is_err() {
            return;
        }
        WorkerStats::incr(&self.stats.cmd_set);
        if self.shared.ops.detail.on() {
            self.shared.ops.detail.record_set(cmd.key);
        }
        let mode = match cmd.verb {
            StoreVerb::Set => StoreMode::Set,
            StoreVerb::Add => StoreMode::Add,
            StoreVerb::Replace => StoreMode::Replace,
            StoreVerb::Append => StoreMode::Append,
            StoreVerb::Prepend => StoreMode::Prepend,
            StoreVerb::Cas => StoreMode::Cas,
        };
        let req = StoreRequest {
            key: cmd.key,
            value,
            flags: cmd.flags,
            exptime: self.expiry(cmd.exptime),
            mode,
            cas: cmd.cas,
            invalidate: false,
            vivify_ttl: None,
            key_binary: false,
            new_cas: None,
        };
        let before = watch::fetched(self, cmd.key);
        self.journal(cmd.key);
        let result = self.shared.engine.store(&req, self.now());
        self.count_store(mode, result);
        let ttl = watch::ttl_left(self, req.exptime);
        watch::stored(self, cmd.key, watch::StoreCmd::of(mode), result, cmd.flags, value.len(), ttl, before);
        let line = match result {
            StoreResult::Stored { .. } => "STORED",
            StoreResult::NotStored => "NOT_STORED",
            StoreResult::Exists => "EXISTS",
            StoreResult::NotFound => "NOT_FOUND",
            StoreResult::TooLarge => "SERVER_ERROR object too large for cache",
            StoreResult::OutOfMemory => "SERVER_ERROR out of memory storing object",
        };
        reply(out, line, cmd.noreply);
    }

    fn count_store(&self, mode: StoreMode, result: StoreResult) {
        let s = self.stats;
        match (mode, result) {
            (StoreMode::Cas, StoreResult::Stored { .. }) => WorkerStats::incr(&s.cas_hits),
            (StoreMode::Cas, StoreResult::Exists) => WorkerStats::incr(&s.cas_badval),
            (StoreMode::Cas, StoreResult::NotFound) => WorkerStats::incr(&s.cas_misses),
            (_, StoreResult::OutOfMemory) => WorkerStats::incr(&s.store_no_memory),
            _ => {}
        }
    }

    fn delete(&self, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
        if self.flash_first(key, 0).is_err() {
            return;
        }
        if self.shared.ops.detail.on() {
            self.shared.ops.detail.record_delete(key);
        }
        watch::fetched(self, key);
        let req = DeleteRequest { key, ..DeleteRequest::default() };
        let watched = watch::wants(self, streams::DELETIONS).then(|| watch::peek(self, key)).flatten();
        self.journal(key);
        match self.shared.engine.delete(&req, self.now()) {
            DeleteResult::Deleted => {
                WorkerStats::incr(&self.stats.delete_hits);
                if let Some(item) = watched {
                    watch::deleted(self, key, item, watch::DeleteCmd::Delete);
                }
                reply(out, "DELETED", noreply);
            }
            _ => {
                WorkerStats::incr(&self.stats.delete_misses);
                reply(out, "NOT_FOUND", noreply);
            }
        }
    }

    fn arith(&self, incr: bool, key: &[u8], delta: u64, noreply: bool, out: &mut Vec<u8>) {
        if self.flash_first(key, 0).is_err() {
            return;
        }
        watch::fetched(self, key);
        let req = DeltaRequest {
            key,
            mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
            delta,
            cas: 0,
            vivify: None,
            initial: 0,
            touch: None,
            in_place: !self.is_pinned(key),
            new_cas: None,
        };
        let s = self.stats;
        self.journal(key);
        match self.shared.engine.delta(&req, self.now()) {
            DeltaResult::Ok { value, .. } => {
                WorkerStats::incr(if incr { &s.incr_hits } else { &s.decr_hits });
                if !noreply {
                    push_u64(out, value);
                    out.extend_from_slice(b"\r\n");
                } else {
                    crate::ops::verbose::silenced_u64(value);
                }
            }
            DeltaResult::NotFound | DeltaResult::NotStored | DeltaResult::Exists => {
                WorkerStats::incr(if incr { &s.incr_misses } else { &s.decr_misses });
                reply(out, "NOT_FOUND", noreply);
            }
            DeltaResult::NonNumeric => {
                reply(out, "CLIENT_ERROR cannot increment or decrement non-numeric value", noreply)
            }
            DeltaResult::OutOfMemory => reply(out, "SERVER_ERROR out of memory", noreply),
        }
    }

    fn touch(&self, key: &[u8], exptime: i32, noreply: bool, out: &mut Vec<u8>) {
        if self.flash_first(key, 0).is_err() {
            return;
        }
        WorkerStats::incr(&self.stats.cmd_touch);
        watch::fetched(self, key);
        self.journal(key);
        if self.shared.engine.touch(key, self.expiry(exptime), self.now()) {
            WorkerStats::incr(&self.stats.touch_hits);
            reply(out, "TOUCHED", noreply);
        } else {
            WorkerStats::incr(&self.stats.touch_misses);
            reply(out, "NOT_FOUND", noreply);
        }
    }

    fn flush_all(&self, delay: i32, noreply: bool, out: &mut Vec<u8>) {
        WorkerStats::incr(&self.stats.cmd_flush);
        if !self.shared.settings.flush_enabled {
            reply(out, "CLIENT_ERROR flush_all not allowed", noreply);
            return;
        }
        let at = if delay > 0 { self.expiry(delay) } else { 0 };
        self.shared.journal.record_flush(strata_store::clock::unix_time());
        self.shared.engine.flush_all(at, self.now());
        reply(out, "OK", noreply);
    }

    fn memlimit(&self, megabytes: u32, noreply: bool, out: &mut Vec<u8>) {
        if megabytes < 8 {
            reply(out, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m", noreply);
        } else if megabytes > 1_000_000_000 {
            reply(out, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes", noreply);
        } else {
            self.shared.engine.set_memory_limit(u64::from(megabytes) << 20);
            self.shared.memory_limit_bytes.store(u64::from(megabytes) << 20, Ordering::Relaxed);
            if let Some(g) = &self.shared.memory_governor {
                g.on_cache_memlimit(self.shared, u64::from(megabytes) << 20, self.shared.settings.memory_pressure_yield);
            }
            reply(out, "OK", noreply);
        }
    }
}

/// Keys of a multi-get the store is asked to prefetch at a time
/// (`Engine::prefetch`; `strata-store/src/seg/prefetch.rs`).
const PREFETCH_WINDOW: usize = 16;

/// Hand the next window of a multi-get's keys to `Engine::prefetch`
/// (nothing for a single-key get: there is nothing to overlap).
fn prefetch_window<'k>(engine: &dyn strata_store::Engine, ahead: &mut impl Iterator<Item = &'k [u8]>) {
    // A window of one key (every single-key get) costs two iterator steps,
    // not the window's setup.
    let (Some(first), Some(second)) = (ahead.next(), ahead.next()) else { return };
    let mut window: [&[u8]; PREFETCH_WINDOW] = [&[]; PREFETCH_WINDOW];
    window[0] = first;
    window[1] = second;
    let mut n = 2;
    for key in ahead.take(PREFETCH_WINDOW - 2) {
        window[n] = key;
        n += 1;
    }
    engine.prefetch(&window[..n]);
}
