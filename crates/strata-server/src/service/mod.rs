//! The protocol-neutral core of a request: the verbs a front end
//! (`front/text.rs`, `front/meta.rs`, `front/binary.rs`) maps its commands
//! to, each running the same steps once, in one order, whatever protocol
//! asked:
//!
//! ```text
//!  verb(origin, request)
//!    1. flash: a key on the flash tier parks the request (flash.rs), with
//!       the reads of the keys it needs next (read_ahead.rs)
//!    2. hooks before: stats detail, watch item_get, the journal and a warm
//!       return's catch-up (hooks.rs)
//!    3. the engine call
//!    4. hooks after: the worker's counters, watch's result line
//!  ─► the engine's result, for the front end to write as its reply
//! ```
//!
//! [`Origin`] says which protocol asked; only `hooks.rs` looks at it, where
//! memcached itself treats the protocols differently (its table says how).
//! A [`Service`] is one connection's: the [`Ctx`] the `ops` handlers also
//! take, the flash state of a parked request, and the key dump or `watch` a
//! command started, for the connection to run.

mod flash;
pub mod hooks;
mod read_ahead;

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::sync::Arc;

use strata_store::{
    DeleteRequest, DeleteResult, DeltaRequest, DeltaResult, GetAction, GetOptions, ItemView, StoreMode,
    StoreRequest, StoreResult,
};

pub use flash::{Parked, Read};
pub use hooks::{Origin, ReadAs};

use crate::ctx::Ctx;
use crate::ops::Started;
use crate::shared::Shared;
use crate::stats::WorkerStats;

/// One connection's service.
pub struct Service<'a> {
    pub ctx: Ctx<'a>,
    /// A request parked on a flash read, or resumed after one (`flash.rs`).
    flash: flash::FlashState<'a>,
    /// A key dump or watch the last command started, for its connection.
    started: Cell<Started>,
}

impl<'a> Deref for Service<'a> {
    type Target = Ctx<'a>;

    #[inline]
    fn deref(&self) -> &Ctx<'a> {
        &self.ctx
    }
}

impl<'a> Service<'a> {
    pub fn new(shared: &'a Arc<Shared>, stats: &'a WorkerStats) -> Service<'a> {
        Service::over(Ctx::new(shared, stats))
    }

    /// A service over `ctx` (a connection's, a UDP socket's).
    pub fn over(ctx: Ctx<'a>) -> Service<'a> {
        // One field test without a flash tier (the common case); the
        // engine is asked for it only when there is one.
        let tier = if ctx.shared.flash_on { ctx.shared.engine.flash() } else { None };
        let flash = flash::FlashState::new(tier);
        Service { ctx, flash, started: Cell::new(None) }
    }

    /// This service runs for connection `id`.
    pub fn for_conn(self, id: u64) -> Service<'a> {
        Service { ctx: self.ctx.for_conn(id), ..self }
    }

    /// A service that records reply-object boundaries in `marks` (UDP).
    pub fn with_marks(shared: &'a Arc<Shared>, stats: &'a WorkerStats, marks: &'a RefCell<Vec<usize>>) -> Service<'a> {
        Service::over(Ctx::new(shared, stats).with_marks(marks))
    }

    /// Hand a key dump or watch to this command's connection.
    pub fn start(&self, started: Started) {
        if started.is_some() {
            self.started.set(started);
        }
    }

    /// The key dump or watch the last command started, if any.
    #[inline]
    pub fn take_started(&self) -> Started {
        self.started.take()
    }

    /// Read `key` (key `index` of its request): flash, catch-up (and the
    /// journal for a read that touches or creates), the engine, then its
    /// counters, `stats detail` and `watch` lines. `visit` writes the hit.
    /// Generic over `visit`, so the front end's reply writer inlines into
    /// the one closure the engine calls (a multi-get pays no second
    /// indirect call per key).
    #[inline]
    pub fn read(
        &self,
        origin: Origin,
        read_as: ReadAs,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        visit: &mut impl FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        let ctx = &self.ctx;
        // A get logs what its read found, RAM or flash alike (memcached's
        // item_get comes from its lookup); the others log before, once.
        let after = origin == Origin::Text && hooks::watching_reads(ctx);
        if origin != Origin::Text && !self.resuming(index) {
            hooks::fetched(ctx, key);
        }
        let mut seen = None;
        let read = self.read_item(key, index, opts, ctx.now(), &mut |item, created| {
            if after {
                seen = Some((item.meta.flags, item.value.len(), item.meta.exptime));
            }
            visit(item, created)
        });
        let hit = match read {
            Read::Hit => true,
            Read::Miss => false,
            Read::Parked => return Read::Parked,
        };
        if after {
            hooks::fetched_as(ctx, key, seen);
        }
        hooks::count_read(ctx, read_as, hit, opts.touch.is_some());
        hooks::detail_get(ctx, origin, read_as, key, hit);
        read
    }

    /// Whether a storage command's data block of `value_len` bytes fits;
    /// a refused one is counted, and with `remove_on_refusal` (a set) the
    /// old value goes, so a failed set does not leave it behind.
    pub fn admit(&self, key: &[u8], flags: u32, value_len: usize, remove_on_refusal: bool) -> bool {
        let ctx = &self.ctx;
        if ctx.shared.engine.item_size_ok(key.len(), flags, value_len) {
            return true;
        }
        hooks::too_large(ctx);
        if remove_on_refusal {
            let req = DeleteRequest { key, ..DeleteRequest::default() };
            hooks::journal(ctx, key);
            ctx.shared.engine.delete(&req, ctx.now());
        }
        false
    }

    /// Store `req`. A plain set replaces whatever is on flash; every other
    /// mode needs the current item first.
    pub fn store(&self, origin: Origin, req: &StoreRequest<'_>) -> Result<StoreResult, Parked> {
        let ctx = &self.ctx;
        if (req.mode != StoreMode::Set || req.invalidate) && self.flash_first(req.key, 0).is_err() {
            return Err(Parked);
        }
        hooks::count_set(ctx);
        hooks::detail_set(ctx, origin, req.key);
        let before = hooks::fetched(ctx, req.key);
        hooks::journal(ctx, req.key);
        let result = ctx.shared.engine.store(req, ctx.now());
        hooks::stored(ctx, req.key, req.mode, result, req.flags, req.value.len(), req.exptime, before);
        Ok(result)
    }

    /// Delete (or, with the meta flags, invalidate or empty) an item.
    pub fn delete(&self, origin: Origin, req: &DeleteRequest<'_>) -> Result<DeleteResult, Parked> {
        let ctx = &self.ctx;
        self.flash_first(req.key, 0)?;
        hooks::detail_delete(ctx, origin, req.key);
        hooks::fetched(ctx, req.key);
        // With md's `x` memcached logs the emptied item it put in place.
        let watched = hooks::before_delete(ctx, origin, req.key, req.invalidate)
            .map(|item| req.empty.map_or(item, |e| (e.flags, 0)));
        hooks::journal(ctx, req.key);
        let result = ctx.shared.engine.delete(req, ctx.now());
        hooks::deleted(ctx, origin, req.key, result, req.invalidate, watched);
        Ok(result)
    }

    /// incr/decr, `ma`.
    pub fn delta(&self, req: &DeltaRequest<'_>) -> Result<DeltaResult, Parked> {
        let ctx = &self.ctx;
        self.flash_first(req.key, 0)?;
        hooks::fetched(ctx, req.key);
        hooks::journal(ctx, req.key);
        let result = ctx.shared.engine.delta(req, ctx.now());
        hooks::delta_done(ctx, req.mode, &result);
        Ok(result)
    }

    /// Text `touch`: a new expiry for an item; whether it was there.
    pub fn touch(&self, key: &[u8], exptime: u32) -> Result<bool, Parked> {
        let ctx = &self.ctx;
        self.flash_first(key, 0)?;
        hooks::fetched(ctx, key);
        hooks::journal(ctx, key);
        let hit = ctx.shared.engine.touch(key, exptime, ctx.now());
        hooks::touched(ctx, hit);
        Ok(hit)
    }

    /// `flush_all` at `at` (0: now); false when `-F` forbids it (counted
    /// either way, as memcached counts it).
    pub fn flush_all(&self, at: u32) -> bool {
        let ctx = &self.ctx;
        hooks::count_flush(ctx);
        if !ctx.shared.settings.flush_enabled {
            return false;
        }
        hooks::journal_flush(ctx);
        ctx.shared.engine.flush_all(at, ctx.now());
        true
    }

    /// Binary SASL: count an authentication attempt.
    pub fn count_auth(&self, ok: bool) {
        hooks::auth(&self.ctx, ok);
    }
}
