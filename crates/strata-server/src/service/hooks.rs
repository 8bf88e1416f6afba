//! The one door from the request path to the features: [`Hooks`], taken
//! from the runtime for one worker. Nothing on the request path (`conn.rs`,
//! `udp.rs`, `session/`, `front/`, the service) calls a feature but
//! through it: `watch`, `stats detail`, `-vv`, the journal and a warm
//! return's catch-up, latency and hot keys, key dumps, TLS sessions, a
//! handover, the operator commands; and it bumps the worker's command
//! counters. The types a feature hands the request path to keep (a running
//! dump, a connection's timing, a parked request's flash reads) are named
//! here too.
//!
//! The service's verbs (`mod.rs`) call the per-key hooks in one order:
//!
//! ```text
//!  flash check ─► detail ─► watch item_get ─► journal + catch-up ─► engine ─► counters ─► watch result
//! ```
//!
//! and a connection calls the per-request ones: [`Hooks::read`] as bytes
//! arrive, [`Hooks::served`] as each request ends, [`Hooks::replied`] once
//! its replies are handed to the kernel (`stats latency`, `stats
//! hotkeys`), the trace around each request while `-vv` is on.
//!
//! Where memcached treats its protocols differently, the table below says
//! so; everything else is the same for text, meta and binary. Each row was
//! checked against Debian's memcached 1.6.18 (`stats`, `stats detail dump`,
//! `watch fetchers mutations`), the `deletions` stream (1.6.45 only) against
//! its `proto_text.c` / `proto_bin.c`; `tests/server/parity.rs` runs every row.
//!
//! | row | hook                          | text            | meta          | binary                 |
//! |-----|-------------------------------|-----------------|---------------|------------------------|
//! | 1   | `stats detail` get/set/delete | counted         | not counted   | counted                |
//! | 2   | `stats detail` for a touch    | gat: a get; `touch`: nothing | -  | GAT and TOUCH: a get   |
//! | 3   | `watch` item_get before delete, incr/decr, touch, store | yes | yes | yes               |
//! | 4   | `watch deletions`             | `cmd=delete`    | `cmd=md` (not for `I`) | none          |
//! | 5   | delete with a CAS that differs| -               | a delete miss | nothing counted        |
//! | 6   | a read that touches (gat, `mg T`, GAT/TOUCH) | touch counters only | hit with T: touch; miss: get miss | touch counters only |
//! | 7   | `me`                          | -               | `cmd_meta` only (and item_get, row 3) | - |
//!
//! Rows 1, 2 and 4-7 are memcached's own differences. Row 3 was an accident
//! here until the service took over (binary delete and incr/decr, `ma` and
//! `me` raised no item_get), and so was text gat counting `get_hits` beside
//! `touch_hits` (row 6: memcached counts a gat only as a touch).

use std::os::fd::RawFd;

use strata_proto::admin::{watch as streams, Admin};
use strata_proto::Tokens;
use strata_store::{DeleteResult, DeltaMode, DeltaResult, StoreMode, StoreResult};

pub use crate::auth::TextLogin;
pub use crate::flash::{FlashWaits, Parked, Read, Turn};
pub use crate::handover::MAX_CARRIED_INPUT_BYTES;
pub use crate::ops::dump::{Dump, Dumping, Pumped};
pub use crate::ops::latency::ConnTiming as Timing;
pub use crate::ops::Started;
pub use crate::report::stats::Group as StatsGroup;
pub use crate::tls::{Received, TlsSession};

use crate::core::Core;
use crate::ctx::Ctx;
use crate::ops::latency::WorkerRequests;
use crate::ops::watch::{self, Found};
use crate::output::Output;
use crate::protocol::Protocol;
use crate::runtime::Runtime;
use crate::settings::{ListenTls, ProtocolChoice};
use crate::stats::WorkerStats;

/// Which protocol a request came in: the column of the table above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Text,
    Meta,
    Binary,
}

/// How a read is counted (row 6, row 7).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ReadAs {
    /// get, gets; binary GET/GETK.
    Get,
    /// gat, gats; binary GAT/GATK/TOUCH: touch counters only.
    Touch,
    /// `mg`: a hit that applied `T` is a touch, anything else a get.
    MetaGet,
    /// `me`: `cmd_meta` only.
    MetaDebug,
    /// Not counted (an `mg` refused for its opaque).
    Silent,
}

/// Row 1: whether `stats detail` counts this protocol's commands.
#[inline]
fn detail_counts(origin: Origin) -> bool {
    origin != Origin::Meta
}

/// The door, for one worker: the runtime's features and this worker's
/// request recorders.
#[derive(Clone, Copy)]
pub struct Hooks<'a> {
    rt: &'a Runtime,
    /// This worker's latency histograms and hot-key sketch.
    requests: &'a WorkerRequests,
}

impl<'a> Hooks<'a> {
    /// Worker `index`'s door.
    #[inline]
    pub fn new(rt: &'a Runtime, index: usize) -> Hooks<'a> {
        Hooks { rt, requests: &rt.ops.requests[index] }
    }

    /// The runtime's core.
    #[inline]
    pub fn core(&self) -> &'a std::sync::Arc<Core> {
        &self.rt.core
    }

    /// The flash tier's server side (`flash/`).
    #[inline]
    pub fn flash(&self) -> &'a crate::flash::FlashServer {
        &self.rt.flash
    }

    // ---- the per-key hooks of the service's verbs

    /// Row 2 and 1: a read's `stats detail` line.
    #[inline]
    pub fn detail_get(&self, origin: Origin, read_as: ReadAs, key: &[u8], hit: bool) {
        let detail = &self.rt.ops.detail;
        if detail.on() && detail_counts(origin) && matches!(read_as, ReadAs::Get | ReadAs::Touch) {
            detail.record_get(key, hit);
        }
    }

    #[inline]
    pub fn detail_set(&self, origin: Origin, key: &[u8]) {
        let detail = &self.rt.ops.detail;
        if detail.on() && detail_counts(origin) {
            detail.record_set(key);
        }
    }

    #[inline]
    pub fn detail_delete(&self, origin: Origin, key: &[u8]) {
        let detail = &self.rt.ops.detail;
        if detail.on() && detail_counts(origin) {
            detail.record_delete(key);
        }
    }

    /// A mutation of `key` is about to run: the journal records it, and a
    /// warm return's catch-up first drops a restored copy peers changed.
    #[inline]
    pub fn journal(&self, ctx: &Ctx<'_>, key: &[u8]) {
        self.rt.journal.record(key);
        self.catch_up(ctx, key);
    }

    /// A read is about to run: a warm return's catch-up drops a restored
    /// copy peers changed first.
    #[inline]
    pub fn catch_up(&self, ctx: &Ctx<'_>, key: &[u8]) {
        let catchup = &self.rt.warm.catchup;
        if catchup.is_active() {
            catchup.check(&*ctx.core.engine, key, ctx.now());
        }
    }

    /// `flush_all`: the journal's record of it.
    pub fn journal_flush(&self) {
        self.rt.journal.record_flush(strata_store::clock::unix_time());
    }

    /// Row 3: memcached's `item_get` line before a command looks `key` up.
    #[inline]
    pub fn fetched(&self, ctx: &Ctx<'_>, key: &[u8]) -> Option<Found> {
        watch::fetched(&self.rt.ops.log, ctx, key)
    }

    /// Whether a get logs what it found after its read (`watch fetchers` on).
    #[inline]
    pub fn watching_reads(&self) -> bool {
        watch::wants(&self.rt.ops.log, streams::FETCHERS)
    }

    /// A get's `item_get` line from what its read found (flags, value bytes, exptime).
    pub fn fetched_as(&self, ctx: &Ctx<'_>, key: &[u8], seen: Option<(u32, usize, u32)>) {
        watch::fetched_as(&self.rt.ops.log, ctx, key, seen);
    }

    /// The counters and the `item_store` line of a store.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn stored(&self, ctx: &Ctx<'_>, key: &[u8], mode: StoreMode, result: StoreResult, flags: u32, value_len: usize, exptime: u32, before: Option<Found>) {
        let s = ctx.stats;
        match (mode, result) {
            (StoreMode::Cas, StoreResult::Stored { .. }) => WorkerStats::incr(&s.cas_hits),
            (StoreMode::Cas, StoreResult::Exists) => WorkerStats::incr(&s.cas_badval),
            (StoreMode::Cas, StoreResult::NotFound) => WorkerStats::incr(&s.cas_misses),
            (_, StoreResult::OutOfMemory) => WorkerStats::incr(&s.store_no_memory),
            _ => {}
        }
        let log = &self.rt.ops.log;
        if watch::wants(log, streams::MUTATIONS) {
            let ttl = watch::ttl_left(ctx, exptime);
            watch::stored(log, ctx, key, watch::StoreCmd::of(mode), result, flags, value_len, ttl, before);
        }
    }

    /// What a delete will log to `watch deletions` (row 4): the item's flags
    /// and value length, looked at before it goes; None when nobody watches.
    #[inline]
    pub fn before_delete(&self, ctx: &Ctx<'_>, origin: Origin, key: &[u8], invalidate: bool) -> Option<(u32, usize)> {
        let logs = match origin {
            Origin::Text => true,
            Origin::Meta => !invalidate,
            Origin::Binary => false,
        };
        (logs && watch::wants(&self.rt.ops.log, streams::DELETIONS)).then(|| watch::peek(ctx, key)).flatten()
    }

    /// The counters (row 5) and the `deleted` line (row 4) of a delete.
    #[inline]
    pub fn deleted(&self, ctx: &Ctx<'_>, origin: Origin, key: &[u8], result: DeleteResult, invalidate: bool, watched: Option<(u32, usize)>) {
        let s = ctx.stats;
        match result {
            DeleteResult::Deleted => {
                // memcached counts no hit for an item marked stale (md I).
                if !invalidate {
                    WorkerStats::incr(&s.delete_hits);
                }
                if let Some(item) = watched {
                    let cmd = if origin == Origin::Meta { watch::DeleteCmd::Md } else { watch::DeleteCmd::Delete };
                    watch::deleted(&self.rt.ops.log, ctx, key, item, cmd);
                }
            }
            DeleteResult::NotFound => WorkerStats::incr(&s.delete_misses),
            DeleteResult::Exists if origin == Origin::Meta => WorkerStats::incr(&s.delete_misses),
            DeleteResult::Exists | DeleteResult::NotStored => {}
        }
    }

    // ---- the request-level hooks of a connection

    /// `-vv`: whether requests are traced (one relaxed load per request).
    #[inline(always)]
    pub fn tracing(&self) -> bool {
        self.rt.ops.verbose.tracing()
    }

    /// `-vv`: `fd: Client using the ... protocol` once a negotiating
    /// connection's first byte decided it.
    pub fn negotiated(&self, choice: ProtocolChoice, fd: Option<RawFd>, protocol: Protocol) {
        if choice == ProtocolChoice::Auto && self.tracing() {
            crate::ops::verbose::negotiated(fd, protocol == Protocol::Binary);
        }
    }

    /// Bytes were read into a connection's input (`was_empty`: it held
    /// nothing before): a batch's clock starts (`stats latency`).
    #[inline]
    pub fn read(&self, timing: &mut Timing, was_empty: bool) {
        timing.read(was_empty, self.requests);
    }

    /// A request of `advance` bytes at the front of `buf` completed:
    /// counted in its family's batch and offered to the hot-key sampler.
    #[inline]
    pub fn served(&self, timing: &mut Timing, buf: &[u8], advance: usize, protocol: Protocol) {
        crate::ops::latency::served(timing, self.requests, buf, advance, protocol, &self.rt.core.clock);
    }

    /// The replies of every completed request were handed to the kernel.
    #[inline]
    pub fn replied(&self, timing: &mut Timing) {
        timing.replied(self.requests);
    }

    /// A running key dump or `watch`, before the connection's next
    /// request: refill its output (`ops/dump.rs`); None once it ended.
    #[inline]
    pub fn pump(&self, dump: &mut Option<Box<Dump>>, out: &mut Output, socket: Option<RawFd>) -> Option<Pumped> {
        crate::ops::dump::pump(dump, &self.rt.core, out, socket)
    }

    // ---- a connection's opening and closing

    /// `watch connevents`: a connection opened (`closed` None) or closed.
    #[inline]
    pub fn conn_event(&self, stats: &WorkerStats, peer: &str, id: u64, closed: Option<&'static str>) {
        watch::conn_event(&self.rt.ops.log, &self.rt.core, stats, peer, id, closed);
    }

    /// A connection opens: its TLS session (`Err`: TLS wanted and none
    /// can be made, counted; close it), `-vv`'s line, `watch connevents`'s.
    pub fn conn_opened(&self, stats: &WorkerStats, peer: &str, id: u64, fd: RawFd, tls: ListenTls) -> Result<Option<Box<TlsSession>>, ()> {
        let core = &self.rt.core;
        self.conn_event(stats, peer, id, None);
        WorkerStats::incr(&stats.total_connections);
        let session = crate::tls::session_for(self.rt.tls.as_ref(), tls, core.clock.now())?;
        if self.tracing() {
            crate::ops::verbose::conn_new(fd, core.settings.protocol);
        }
        Ok(session)
    }

    /// A connection closed (`reason`: `watch connevents`'s), its flash
    /// reads given up.
    pub fn conn_closed(&self, stats: &WorkerStats, peer: &str, id: u64, fd: RawFd, reason: &'static str, flash: &mut FlashWaits) {
        let core = &self.rt.core;
        self.conn_event(stats, peer, id, Some(reason));
        if self.tracing() {
            crate::ops::verbose::conn_closed(fd);
        }
        if let (false, Some(tier)) = (flash.is_empty(), core.engine.flash()) {
            flash.abandon(tier);
        }
    }

    /// New connections start unauthenticated (`-Y`, `-S`).
    #[inline]
    pub fn requires_auth(&self) -> bool {
        self.rt.auth.required()
    }

    /// Whether a TLS handshake can stall (`-Z`): its timeout, seconds.
    #[inline]
    pub fn handshake_timeout_secs(&self) -> Option<u32> {
        self.rt.tls.as_ref().map(|t| t.settings.handshake_timeout_secs)
    }

    /// A socket handover to a new process (`handover/`).
    #[inline]
    pub fn handover(&self) -> &'a crate::handover::Outgoing {
        &self.rt.handover
    }

    // ---- the operator commands a front end hands on

    /// `-Y`'s and `-S`'s credentials.
    #[inline]
    pub fn auth(&self) -> &'a crate::auth::Auth {
        &self.rt.auth
    }

    /// `verbosity N`.
    pub fn set_verbosity(&self, level: u32) {
        self.rt.ops.verbose.set(level);
    }

    /// `lru_crawler`, `lru`, `slabs`, `watch`, `extstore` (`ops/`) and `mj`
    /// (the journal's): what the command started for its connection.
    pub fn admin(&self, ctx: &Ctx<'_>, cmd: Admin, out: &mut Output) -> Started {
        match cmd {
            Admin::Journal { since_unix } => {
                crate::journal::answer(&self.rt.journal, since_unix, strata_store::clock::unix_time(), out);
                None
            }
            cmd => crate::ops::admin(&self.rt.ops, ctx, cmd, out),
        }
    }

    /// `stats [group]` over the text protocol (`report/stats.rs`).
    pub fn stats(&self, ctx: &Ctx<'_>, args: Tokens<'_>, out: &mut Output) -> Started {
        crate::report::stats::stats(self.rt, ctx, args, out)
    }

    /// A stats group's values, for the binary protocol's `STAT`.
    pub fn stats_group(&self, ctx: &Ctx<'_>, group: &[u8]) -> StatsGroup {
        crate::report::stats::collect(self.rt, ctx, group)
    }

    /// Binary `STAT detail ...`.
    pub fn detail_stat(&self, ctx: &Ctx<'_>, req: &strata_proto::binary::Request<'_>, out: &mut Vec<u8>) {
        crate::ops::detail::binary_stat(&self.rt.ops.detail, ctx, req, out);
    }

    /// `refresh_certs`.
    pub fn refresh_certs(&self, out: &mut Vec<u8>) {
        crate::tls::refresh_command(self.rt.tls.as_ref(), self.rt.core.clock.now(), out);
    }

    /// `cache_memlimit`: a fixed limit from now on, the governor told.
    pub fn memlimit(&self, bytes: u64) {
        let core = &self.rt.core;
        core.engine.set_memory_limit(bytes);
        core.memory_limit_bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
        if let Some(g) = &self.rt.memory {
            g.on_cache_memlimit(core, bytes, core.settings.memory_pressure_yield);
        }
    }
}

/// Row 6 and 7: the counters of a read.
#[inline]
pub fn count_read(ctx: &Ctx<'_>, read_as: ReadAs, hit: bool, touched: bool) {
    let s = ctx.stats;
    match read_as {
        ReadAs::Touch => {
            WorkerStats::incr(&s.cmd_touch);
            WorkerStats::incr(if hit { &s.touch_hits } else { &s.touch_misses });
        }
        ReadAs::MetaGet if hit && touched => {
            WorkerStats::incr(&s.cmd_touch);
            WorkerStats::incr(&s.touch_hits);
        }
        ReadAs::Get | ReadAs::MetaGet => {
            WorkerStats::incr(&s.cmd_get);
            WorkerStats::incr(if hit { &s.get_hits } else { &s.get_misses });
        }
        ReadAs::MetaDebug => WorkerStats::incr(&s.cmd_meta),
        ReadAs::Silent => {}
    }
}

/// A store's `cmd_set` (also counted for a refused one).
#[inline]
pub fn count_set(ctx: &Ctx<'_>) {
    WorkerStats::incr(&ctx.stats.cmd_set);
}

/// A data block refused for its size.
pub fn too_large(ctx: &Ctx<'_>) {
    WorkerStats::incr(&ctx.stats.store_too_large);
    WorkerStats::incr(&ctx.stats.cmd_set);
}

/// The counters of an incr/decr: a hit, or a miss for a missing item.
#[inline]
pub fn delta_done(ctx: &Ctx<'_>, mode: DeltaMode, result: &DeltaResult) {
    let s = ctx.stats;
    let incr = mode == DeltaMode::Incr;
    match result {
        DeltaResult::Ok { .. } => WorkerStats::incr(if incr { &s.incr_hits } else { &s.decr_hits }),
        DeltaResult::NotFound => WorkerStats::incr(if incr { &s.incr_misses } else { &s.decr_misses }),
        _ => {}
    }
}

/// `touch`: its counters.
#[inline]
pub fn touched(ctx: &Ctx<'_>, hit: bool) {
    WorkerStats::incr(&ctx.stats.cmd_touch);
    WorkerStats::incr(if hit { &ctx.stats.touch_hits } else { &ctx.stats.touch_misses });
}

/// `flush_all`, allowed or not.
#[inline]
pub fn count_flush(ctx: &Ctx<'_>) {
    WorkerStats::incr(&ctx.stats.cmd_flush);
}

/// Binary SASL: an authentication attempt and whether it failed.
pub fn auth(ctx: &Ctx<'_>, ok: bool) {
    WorkerStats::incr(&ctx.stats.auth_cmds);
    if !ok {
        WorkerStats::incr(&ctx.stats.auth_errors);
    }
}

/// `-vv`: a reply line `noreply` silenced (printed with the request).
#[inline]
pub fn silenced(line: &[u8]) {
    crate::ops::verbose::silenced(line);
}

/// `-vv`: a number `noreply` silenced.
#[inline]
pub fn silenced_u64(value: u64) {
    crate::ops::verbose::silenced_u64(value);
}

/// `-vv`: a traced request starts on this thread.
pub fn trace_begin() {
    crate::ops::verbose::begin();
}

/// `-vv`: a traced request ended; print it (`done`: a text request that
/// ran; `reply`: what it appended, None once tracing was turned off).
pub fn trace_end(fd: Option<RawFd>, request: &[u8], reply: Option<&[u8]>, done: bool) {
    crate::ops::verbose::end_text(fd, request, reply, done);
}
