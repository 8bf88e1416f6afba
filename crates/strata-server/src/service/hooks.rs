//! The request path's observability and durability hooks, in one place: the
//! only file on the request path that calls `watch`, `stats detail`, `-vv`
//! and the journal, and that bumps the worker's command counters. The
//! service's verbs (`mod.rs`) call these in one order:
//!
//! ```text
//!  flash check ─► detail ─► watch item_get ─► journal + catch-up ─► engine ─► counters ─► watch result
//! ```
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

use strata_proto::admin::watch as streams;
use strata_store::{DeleteResult, DeltaMode, DeltaResult, StoreMode, StoreResult};

use crate::ctx::Ctx;
use crate::ops::watch::{self, Found};
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

/// Row 2 and 1: a read's `stats detail` line.
#[inline]
pub fn detail_get(ctx: &Ctx<'_>, origin: Origin, read_as: ReadAs, key: &[u8], hit: bool) {
    if ctx.shared.ops.detail.on() && detail_counts(origin) && matches!(read_as, ReadAs::Get | ReadAs::Touch) {
        ctx.shared.ops.detail.record_get(key, hit);
    }
}

#[inline]
pub fn detail_set(ctx: &Ctx<'_>, origin: Origin, key: &[u8]) {
    if ctx.shared.ops.detail.on() && detail_counts(origin) {
        ctx.shared.ops.detail.record_set(key);
    }
}

#[inline]
pub fn detail_delete(ctx: &Ctx<'_>, origin: Origin, key: &[u8]) {
    if ctx.shared.ops.detail.on() && detail_counts(origin) {
        ctx.shared.ops.detail.record_delete(key);
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

/// A mutation of `key` is about to run: the journal records it, and a warm
/// return's catch-up first drops a restored copy peers changed.
#[inline]
pub fn journal(ctx: &Ctx<'_>, key: &[u8]) {
    ctx.shared.journal.record(key);
    catch_up(ctx, key);
}

/// A read is about to run: a warm return's catch-up drops a restored copy
/// peers changed first.
#[inline]
pub fn catch_up(ctx: &Ctx<'_>, key: &[u8]) {
    if ctx.shared.catchup.is_active() {
        ctx.shared.catchup.check(&*ctx.shared.engine, key, ctx.now());
    }
}

/// `flush_all`: the journal's record of it.
pub fn journal_flush(ctx: &Ctx<'_>) {
    ctx.shared.journal.record_flush(strata_store::clock::unix_time());
}

/// Row 3: memcached's `item_get` line before a command looks `key` up.
#[inline]
pub fn fetched(ctx: &Ctx<'_>, key: &[u8]) -> Option<Found> {
    watch::fetched(ctx, key)
}

/// Whether a get logs what it found after its read (`watch fetchers` on).
#[inline]
pub fn watching_reads(ctx: &Ctx<'_>) -> bool {
    watch::wants(ctx, streams::FETCHERS)
}

/// A get's `item_get` line from what its read found (flags, value bytes, exptime).
pub fn fetched_as(ctx: &Ctx<'_>, key: &[u8], seen: Option<(u32, usize, u32)>) {
    watch::fetched_as(ctx, key, seen);
}

/// The counters and the `item_store` line of a store.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn stored(ctx: &Ctx<'_>, key: &[u8], mode: StoreMode, result: StoreResult, flags: u32, value_len: usize, exptime: u32, before: Option<Found>) {
    let s = ctx.stats;
    match (mode, result) {
        (StoreMode::Cas, StoreResult::Stored { .. }) => WorkerStats::incr(&s.cas_hits),
        (StoreMode::Cas, StoreResult::Exists) => WorkerStats::incr(&s.cas_badval),
        (StoreMode::Cas, StoreResult::NotFound) => WorkerStats::incr(&s.cas_misses),
        (_, StoreResult::OutOfMemory) => WorkerStats::incr(&s.store_no_memory),
        _ => {}
    }
    if watch::wants(ctx, streams::MUTATIONS) {
        let ttl = watch::ttl_left(ctx, exptime);
        watch::stored(ctx, key, watch::StoreCmd::of(mode), result, flags, value_len, ttl, before);
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

/// What a delete will log to `watch deletions` (row 4): the item's flags
/// and value length, looked at before it goes; None when nobody watches.
#[inline]
pub fn before_delete(ctx: &Ctx<'_>, origin: Origin, key: &[u8], invalidate: bool) -> Option<(u32, usize)> {
    let logs = match origin {
        Origin::Text => true,
        Origin::Meta => !invalidate,
        Origin::Binary => false,
    };
    (logs && watch::wants(ctx, streams::DELETIONS)).then(|| watch::peek(ctx, key)).flatten()
}

/// The counters (row 5) and the `deleted` line (row 4) of a delete.
#[inline]
pub fn deleted(ctx: &Ctx<'_>, origin: Origin, key: &[u8], result: DeleteResult, invalidate: bool, watched: Option<(u32, usize)>) {
    let s = ctx.stats;
    match result {
        DeleteResult::Deleted => {
            // memcached counts no hit for an item marked stale (md I).
            if !invalidate {
                WorkerStats::incr(&s.delete_hits);
            }
            if let Some(item) = watched {
                let cmd = if origin == Origin::Meta { watch::DeleteCmd::Md } else { watch::DeleteCmd::Delete };
                watch::deleted(ctx, key, item, cmd);
            }
        }
        DeleteResult::NotFound => WorkerStats::incr(&s.delete_misses),
        DeleteResult::Exists if origin == Origin::Meta => WorkerStats::incr(&s.delete_misses),
        DeleteResult::Exists | DeleteResult::NotStored => {}
    }
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
