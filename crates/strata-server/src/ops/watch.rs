//! `watch [streams]`: the connection becomes a watcher, as in memcached
//! 1.6.45: `OK`, then log lines (`ts=... gid=... type=...`) until it
//! disconnects; it runs no further command.
//!
//! A watcher is a never-ending key dump: the command hands its connection
//! a [`Watcher`] through the dump slot (`ops::admin` wraps it in
//! `ops/dump.rs`'s `Dump::Watch`; this module does not know the slot),
//! whose pump, every 1 ms tick, collects the workers' log buffers and
//! moves the watcher's lines into the connection's output (`ops/logger.rs`
//! has the buffers). Its lines' keys are uriencoded as the dumps' are
//! (`ops/dump_lines.rs`).
//! Dropping the watcher (the connection closed) detaches it.
//!
//! The hooks the request path calls ([`deleted`], ...) cost one relaxed
//! load while nobody watches their stream.

use std::sync::Arc;

use strata_proto::admin::watch as streams;
use strata_proto::number::push_u64;

use super::dump_lines::uriencode;
use super::logger::Sink;
use super::push_line;
use super::logger::Logger;
use crate::core::Core;
use crate::ctx::Ctx;
use crate::output::Output;
use crate::stats::WorkerStats;

/// One attached watcher.
pub struct Watcher {
    sink: Arc<Sink>,
    log: Arc<Logger>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.log.detach(&self.sink);
    }
}

impl Watcher {
    /// Collect, then move up to `max_bytes` of this watcher's lines to `out`.
    pub fn refill(&self, out: &mut Vec<u8>, max_bytes: usize) {
        self.log.collect();
        self.sink.drain(out, max_bytes);
    }
}

/// `watch ...`, checked in memcached's order: the watcher on `OK`, or
/// None with the refusal written. The caller hands the watcher to the
/// connection as a dump (`ops::admin`, `Dump::Watch`).
pub fn start(log: &Arc<Logger>, ctx: &Ctx<'_>, mask: Option<u32>, out: &mut Output) -> Option<Watcher> {
    let refused = |out: &mut Vec<u8>, line: &str| {
        push_line(out, line);
        None
    };
    if !ctx.core.settings.watch_enabled {
        return refused(out, "CLIENT_ERROR watch commands not allowed");
    }
    if out.has_stacked_replies() {
        return refused(out, "ERROR cannot pipeline other commands before watch");
    }
    let Some(mask) = mask else {
        return refused(out, "ERROR");
    };
    if out.is_datagram() {
        return refused(out, "WATCHER_FAILED failed to add log watcher");
    }
    let Some(sink) = log.attach(mask) else {
        return refused(out, "WATCHER_TOO_MANY log watcher limit reached");
    };
    out.extend_from_slice(b"OK\r\n");
    Some(Watcher { sink, log: log.clone() })
}

/// What deleted an item (memcached's `LOG_TYPE_DELETE`, `LOG_TYPE_META_DELETE`).
#[derive(Clone, Copy)]
pub enum DeleteCmd {
    Delete,
    Md,
}

/// A watcher wants `stream`: the request path's check.
#[inline]
pub fn wants(log: &Logger, stream: u32) -> bool {
    log.wants(stream)
}

/// `type=deleted key=<k> cmd=<delete|md> clsid=<c> size=<value bytes>`.
/// `item` is (flags, value length) of the deleted item.
#[cold]
pub fn deleted(log: &Logger, ctx: &Ctx<'_>, key: &[u8], item: (u32, usize), cmd: DeleteCmd) {
    let class = class_of(ctx, key, item);
    log.log(&ctx.core.worker_stats, ctx.stats, streams::DELETIONS, |line| {
        line.extend_from_slice(b"type=deleted key=");
        uriencode(key, line);
        line.extend_from_slice(match cmd {
            DeleteCmd::Delete => b" cmd=delete clsid=",
            DeleteCmd::Md => b" cmd=md clsid=",
        });
        push_u64(line, class);
        line.extend_from_slice(b" size=");
        push_u64(line, item.1 as u64);
    });
}

/// The memcached size class of an item (as the dumps compute it).
fn class_of(ctx: &Ctx<'_>, key: &[u8], (flags, value_len): (u32, usize)) -> u64 {
    let cas = !ctx.core.settings.cas_disabled;
    let size = strata_store::memcached_item_size(key.len(), flags, value_len, cas);
    u64::from(ctx.core.classes.class_of(size))
}

/// The flags and value length of the item under `key`, read without
/// touching it (for a hook that must describe an item about to go).
pub fn peek(ctx: &Ctx<'_>, key: &[u8]) -> Option<(u32, usize)> {
    let mut found = None;
    let opts = strata_store::GetOptions { no_bump: true, uncounted: true, no_token: true, ..Default::default() };
    ctx.core.engine.get(key, opts, ctx.core.clock.now(), &mut |item, _| {
        found = Some((item.meta.flags, item.value.len()));
        strata_store::GetAction::default()
    });
    found
}

/// memcached's `item_get` line for `key`, as its internal lookup logs it
/// (every command that looks an item up: get family, touch, incr/decr,
/// delete, storage commands before they store, mg/ms/md): `type=item_get
/// key=<k> status=found|not_found clsid=<c> cfd=<conn> size=<value bytes>`.
/// Returns what was found, for a store's line to follow.
#[inline]
pub fn fetched(log: &Logger, ctx: &Ctx<'_>, key: &[u8]) -> Option<Found> {
    if !log.wants(streams::FETCHERS | streams::MUTATIONS) {
        return None;
    }
    fetched_cold(log, ctx, key)
}

/// An item as a hook saw it.
#[derive(Clone, Copy)]
pub struct Found {
    pub flags: u32,
    pub value_len: usize,
    /// Seconds left (0: no expiry).
    pub ttl_secs: u32,
}

/// A get's `item_get` line from what its read found (`seen`: flags, value
/// bytes, exptime), RAM or flash alike; no second read. The caller checks
/// `wants(FETCHERS)` first.
#[cold]
pub fn fetched_as(log: &Logger, ctx: &Ctx<'_>, key: &[u8], seen: Option<(u32, usize, u32)>) {
    let now = ctx.core.clock.now();
    let found = seen.map(|(flags, value_len, exptime)| Found {
        flags,
        value_len,
        ttl_secs: if exptime == 0 { 0 } else { exptime.saturating_sub(now) },
    });
    log_fetch(log, ctx, key, found);
}

#[cold]
fn fetched_cold(log: &Logger, ctx: &Ctx<'_>, key: &[u8]) -> Option<Found> {
    let found = peek_found(ctx, key);
    log_fetch(log, ctx, key, found);
    found
}

#[cold]
fn log_fetch(log: &Logger, ctx: &Ctx<'_>, key: &[u8], found: Option<Found>) {
    if log.wants(streams::FETCHERS) {
        let (class, size) = match found {
            Some(f) => (class_of(ctx, key, (f.flags, f.value_len)), f.value_len),
            None => (0, 0),
        };
        log.log(&ctx.core.worker_stats, ctx.stats, streams::FETCHERS, |line| {
            line.extend_from_slice(b"type=item_get key=");
            uriencode(key, line);
            line.extend_from_slice(if found.is_some() { b" status=found clsid=" } else { b" status=not_found clsid=" });
            push_u64(line, class);
            line.extend_from_slice(b" cfd=");
            push_u64(line, ctx.conn_id);
            line.extend_from_slice(b" size=");
            push_u64(line, size as u64);
        });
    }
}

/// What a storage command was (memcached's `cmd=` of `item_store`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    Add,
    Set,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreCmd {
    pub fn of(mode: strata_store::StoreMode) -> StoreCmd {
        use strata_store::StoreMode as M;
        match mode {
            M::Add => StoreCmd::Add,
            M::Set => StoreCmd::Set,
            M::Replace => StoreCmd::Replace,
            M::Append => StoreCmd::Append,
            M::Prepend => StoreCmd::Prepend,
            M::Cas => StoreCmd::Cas,
        }
    }
}

/// memcached's `item_store` line: `type=item_store key=<k> status=<s>
/// cmd=<c> ttl=<secs left> clsid=<c> cfd=<conn> size=<value bytes>`, for
/// the item the command built (after append/prepend: the joined value
/// with the old item's TTL). `before` is what [`fetched`] saw.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn stored(log: &Logger, ctx: &Ctx<'_>, key: &[u8], cmd: StoreCmd, result: strata_store::StoreResult, flags: u32, value_len: usize, ttl_secs: u32, before: Option<Found>) {
    if log.wants(streams::MUTATIONS) {
        stored_cold(log, ctx, key, cmd, result, flags, value_len, ttl_secs, before);
    }
}

#[allow(clippy::too_many_arguments)]
#[cold]
fn stored_cold(log: &Logger, ctx: &Ctx<'_>, key: &[u8], cmd: StoreCmd, result: strata_store::StoreResult, flags: u32, value_len: usize, ttl_secs: u32, before: Option<Found>) {
    use strata_store::StoreResult as R;
    let joined = matches!(cmd, StoreCmd::Append | StoreCmd::Prepend) && matches!(result, R::Stored { .. });
    let (flags, value_len, ttl_secs) = match before {
        Some(old) if joined => (old.flags, old.value_len + value_len, old.ttl_secs),
        _ => (flags, value_len, ttl_secs),
    };
    let class = class_of(ctx, key, (flags, value_len));
    let status: &[u8] = match result {
        R::Stored { .. } => b"stored",
        R::NotStored => b"not_stored",
        R::Exists => b"exists",
        R::NotFound => b"not_found",
        R::TooLarge => b"too_large",
        R::OutOfMemory => b"no_memory",
    };
    let cmd: &[u8] = match cmd {
        StoreCmd::Add => b"add",
        StoreCmd::Set => b"set",
        StoreCmd::Replace => b"replace",
        StoreCmd::Append => b"append",
        StoreCmd::Prepend => b"prepend",
        StoreCmd::Cas => b"cas",
    };
    log.log(&ctx.core.worker_stats, ctx.stats, streams::MUTATIONS, |line| {
        line.extend_from_slice(b"type=item_store key=");
        uriencode(key, line);
        line.extend_from_slice(b" status=");
        line.extend_from_slice(status);
        line.extend_from_slice(b" cmd=");
        line.extend_from_slice(cmd);
        line.extend_from_slice(b" ttl=");
        push_u64(line, u64::from(ttl_secs));
        line.extend_from_slice(b" clsid=");
        push_u64(line, class);
        line.extend_from_slice(b" cfd=");
        push_u64(line, ctx.conn_id);
        line.extend_from_slice(b" size=");
        push_u64(line, value_len as u64);
    });
}

/// Seconds left of a store request's exptime (0: none).
pub fn ttl_left(ctx: &Ctx<'_>, exptime: u32) -> u32 {
    if exptime == 0 { 0 } else { exptime.saturating_sub(ctx.core.clock.now()) }
}

fn peek_found(ctx: &Ctx<'_>, key: &[u8]) -> Option<Found> {
    let now = ctx.core.clock.now();
    let mut found = None;
    let opts = strata_store::GetOptions { no_bump: true, uncounted: true, no_token: true, ..Default::default() };
    ctx.core.engine.get(key, opts, now, &mut |item, _| {
        let ttl_secs = if item.meta.exptime == 0 { 0 } else { item.meta.exptime.saturating_sub(now) };
        found = Some(Found { flags: item.meta.flags, value_len: item.value.len(), ttl_secs });
        strata_store::GetAction::default()
    });
    found
}

/// memcached's `conn_new` / `conn_close` lines (`connevents`): `type=conn_new
/// rip=<ip> rport=<port> transport=tcp|local cfd=<conn>`; a close adds
/// `reason=<r>` before `cfd`. `peer` is the `stats conns` address
/// (`tcp:<ip>:<port>`, `unix:...`); `stats` is the logging worker's;
/// `closed` the close's reason (`normal`, `error`, `idle_timeout`, `shutdown`).
#[inline]
pub fn conn_event(log: &Logger, core: &Core, stats: &WorkerStats, peer: &str, id: u64, closed: Option<&'static str>) {
    if log.wants(streams::CONNEVENTS) {
        conn_event_cold(log, core, stats, peer, id, closed);
    }
}

#[cold]
fn conn_event_cold(log: &Logger, core: &Core, stats: &WorkerStats, peer: &str, id: u64, closed: Option<&'static str>) {
    let (rip, rport, transport) = match peer.strip_prefix("tcp:").and_then(|a| a.rsplit_once(':')) {
        Some((ip, port)) => (ip.trim_start_matches('[').trim_end_matches(']'), port, "tcp"),
        None => ("unix", "0", "local"),
    };
    log.log(&core.worker_stats, stats, streams::CONNEVENTS, |line| {
        line.extend_from_slice(if closed.is_some() { b"type=conn_close rip=" } else { b"type=conn_new rip=" });
        line.extend_from_slice(rip.as_bytes());
        line.extend_from_slice(b" rport=");
        line.extend_from_slice(rport.as_bytes());
        line.extend_from_slice(b" transport=");
        line.extend_from_slice(transport.as_bytes());
        if let Some(reason) = closed {
            line.extend_from_slice(b" reason=");
            line.extend_from_slice(reason.as_bytes());
        }
        line.extend_from_slice(b" cfd=");
        push_u64(line, id);
    });
}

/// The store's eviction hook: memcached's `type=eviction key=<k>
/// fetch=yes|no ttl=<secs left, -1: none> la=<secs since last access>
/// clsid=<c> size=<value bytes>` lines (`evictions`). Holds the server
/// weakly (the core owns the store that owns this).
pub struct EvictionWatch {
    streams: Arc<std::sync::atomic::AtomicU32>,
    core: std::sync::Weak<Core>,
    log: Arc<Logger>,
}

impl EvictionWatch {
    pub fn install(core: &Arc<Core>, log: &Arc<Logger>) {
        let watch = EvictionWatch { streams: log.streams_flag(), core: Arc::downgrade(core), log: log.clone() };
        core.engine.set_eviction_log(Arc::new(watch));
    }
}

impl strata_store::EvictionLog for EvictionWatch {
    fn wants(&self) -> bool {
        self.streams.load(std::sync::atomic::Ordering::Relaxed) & streams::EVICTIONS != 0
    }

    #[cold]
    fn evicted(&self, item: &strata_store::Evicted<'_>) {
        let Some(shared) = self.core.upgrade() else { return };
        let cas = !shared.settings.cas_disabled;
        let size = strata_store::memcached_item_size(item.key.len(), item.flags, item.value_len, cas);
        let class = u64::from(shared.classes.class_of(size));
        self.log.log_other(streams::EVICTIONS, |line| {
            line.extend_from_slice(b"type=eviction key=");
            uriencode(item.key, line);
            line.extend_from_slice(if item.fetched { b" fetch=yes ttl=" } else { b" fetch=no ttl=" });
            if item.exptime == 0 {
                line.extend_from_slice(b"-1");
            } else {
                strata_proto::number::push_i64(line, i64::from(item.exptime) - i64::from(item.now));
            }
            line.extend_from_slice(b" la=");
            strata_proto::number::push_i64(line, i64::from(item.now) - i64::from(item.last_access));
            line.extend_from_slice(b" clsid=");
            push_u64(line, class);
            line.extend_from_slice(b" size=");
            push_u64(line, item.value_len as u64);
        });
    }
}
