//! The protocol-neutral core of a request: the verbs a front end
//! (`front/text.rs`, `front/meta.rs`, `front/binary.rs`) maps its commands
//! to, each running the same steps once, in one order, whatever protocol
//! asked:
//!
//! ```text
//!  verb(origin, request)
//!    1. flash: a key on the flash tier parks the request (flash/turn.rs),
//!       with the reads of the keys it needs next (flash/read_ahead.rs)
//!    2. hooks before: stats detail, watch item_get, the journal and a warm
//!       return's catch-up (hooks.rs)
//!    3. the engine call
//!    4. hooks after: the worker's counters, watch's result line
//!  ─► the engine's result, for the front end to write as its reply
//! ```
//!
//! [`Origin`] says which protocol asked; only `hooks.rs` looks at it, where
//! memcached itself treats the protocols differently (its table says how).
//! A [`Service`] is one connection's for one turn: the [`Ctx`] the `ops`
//! handlers also take, and the flash tier's [`Turn`] while the engine has
//! one. What a request parks on is handed back by the front end with the
//! request's outcome ([`Service::take_park`]).

pub mod hooks;

use std::ops::Deref;
use strata_store::{
    DeleteRequest, DeleteResult, DeltaRequest, DeltaResult, GetAction, GetOptions, ItemView, StoreMode,
    StoreRequest, StoreResult,
};

pub use hooks::{Hooks, Origin, Parked, Read, ReadAs};

use crate::ctx::Ctx;
use crate::runtime::Runtime;
use hooks::{FlashWaits, Turn};

/// One connection's service, for one turn.
pub struct Service<'a> {
    pub ctx: Ctx<'a>,
    /// The one door to the features.
    pub hooks: Hooks<'a>,
    /// The flash tier's steps; None: the engine has no tier.
    flash: Option<Turn<'a>>,
}

impl<'a> Deref for Service<'a> {
    type Target = Ctx<'a>;

    #[inline]
    fn deref(&self) -> &Ctx<'a> {
        &self.ctx
    }
}

impl<'a> Service<'a> {
    /// Worker `index`'s service over `rt`.
    pub fn new(rt: &'a Runtime, index: usize) -> Service<'a> {
        let hooks = Hooks::new(rt, index);
        let ctx = Ctx::new(&rt.core, &rt.core.worker_stats[index]);
        // One field test without a flash tier (the common case); the
        // engine is asked for it only when there is one.
        let flash = hooks.flash().turn(&rt.core, ctx.stats);
        Service { ctx, hooks, flash }
    }

    /// This service runs for connection `id`.
    pub fn for_conn(self, id: u64) -> Service<'a> {
        Service { ctx: self.ctx.for_conn(id), ..self }
    }

    /// There is a flash tier: requests may park on its reads. Without one,
    /// the flash steps of a request cost this one branch.
    #[inline]
    pub fn flash_on(&self) -> bool {
        self.flash.is_some()
    }

    /// Hand a parked request's finished reads back before it runs again.
    pub fn resume_flash(&mut self, waits: FlashWaits) {
        if let Some(turn) = &mut self.flash {
            turn.resume(waits);
        }
    }

    /// The request just run parked on a read.
    pub fn is_parked(&self) -> bool {
        self.flash.as_ref().is_some_and(Turn::is_parked)
    }

    /// The request just run: the reads it parked on (empty: it did not
    /// park), with those of the plain reads buffered behind it in `later`
    /// (`binary`: their protocol); or, when it ran to its end, its resumed
    /// reads it did not use are given up. Nothing without a flash tier.
    #[inline]
    pub fn take_park(&mut self, later: &[u8], binary: bool) -> FlashWaits {
        let now = self.ctx.now();
        let Some(turn) = &mut self.flash else { return FlashWaits::default() };
        if turn.is_parked() {
            turn.read_ahead_later(later, binary, now);
            return turn.take_park();
        }
        turn.end_request();
        FlashWaits::default()
    }

    /// The connection's run of requests is over: reads queued for later
    /// requests that none used are abandoned.
    #[inline]
    pub fn end_run(&mut self) {
        if let Some(turn) = &mut self.flash {
            turn.end_run();
        }
    }

    /// The key position a resumed multi-get starts at (0 otherwise).
    pub fn resume_from(&self) -> usize {
        self.flash.as_ref().map_or(0, Turn::resume_from)
    }

    /// A multi-get parked at a key: queue the reads of its later `keys`
    /// (positions from `first`) with it.
    pub fn read_ahead<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>, first: usize) {
        let now = self.ctx.now();
        if let Some(turn) = &mut self.flash {
            turn.read_ahead(keys, first, now);
        }
    }

    /// Before a command that needs `key`'s current item: parks when it is
    /// on flash (`flash/turn.rs`).
    fn flash_first(&mut self, key: &[u8], index: usize) -> Result<(), Parked> {
        let now = self.ctx.now();
        match &mut self.flash {
            None => Ok(()),
            Some(turn) => turn.flash_first(key, index, now),
        }
    }

    /// Read `key` (key `index` of its request): flash, catch-up (and the
    /// journal for a read that touches or creates), the engine, then its
    /// counters, `stats detail` and `watch` lines. `visit` writes the hit.
    /// Generic over `visit`, so the front end's reply writer inlines into
    /// the one closure the engine calls (a multi-get pays no second
    /// indirect call per key).
    #[inline]
    pub fn read(
        &mut self,
        origin: Origin,
        read_as: ReadAs,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        visit: &mut impl FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        // A get logs what its read found, RAM or flash alike (memcached's
        // item_get comes from its lookup); the others log before, once.
        let after = origin == Origin::Text && self.hooks.watching_reads();
        if origin != Origin::Text && !self.flash.as_ref().is_some_and(|turn| turn.resuming(index)) {
            self.hooks.fetched(&self.ctx, key);
        }
        let mut seen = None;
        let read = self.read_item(key, index, opts, &mut |item, created| {
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
        let ctx = &self.ctx;
        if after {
            self.hooks.fetched_as(ctx, key, seen);
        }
        hooks::count_read(ctx, read_as, hit, opts.touch.is_some());
        self.hooks.detail_get(origin, read_as, key, hit);
        read
    }

    /// The read itself: the journal (a read that touches or creates) or a
    /// warm return's catch-up first, then RAM, then flash.
    #[inline]
    fn read_item(&mut self, key: &[u8], index: usize, opts: GetOptions, visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction) -> Read {
        let ctx = &self.ctx;
        if opts.touch.is_some() || opts.vivify.is_some() {
            self.hooks.journal(ctx, key);
        } else {
            self.hooks.catch_up(ctx, key);
        }
        let now = ctx.now();
        match &mut self.flash {
            None if ctx.core.engine.get(key, opts, now, visit) => Read::Hit,
            None => Read::Miss,
            Some(turn) => turn.read_item(key, index, opts, now, visit),
        }
    }

    /// Whether a storage command's data block of `value_len` bytes fits;
    /// a refused one is counted, and with `remove_on_refusal` (a set) the
    /// old value goes, so a failed set does not leave it behind.
    pub fn admit(&self, key: &[u8], flags: u32, value_len: usize, remove_on_refusal: bool) -> bool {
        let ctx = &self.ctx;
        if ctx.core.engine.item_size_ok(key.len(), flags, value_len) {
            return true;
        }
        hooks::too_large(ctx);
        if remove_on_refusal {
            let req = DeleteRequest { key, ..DeleteRequest::default() };
            self.hooks.journal(ctx, key);
            ctx.core.engine.delete(&req, ctx.now());
        }
        false
    }

    /// Store `req`. A plain set replaces whatever is on flash; every other
    /// mode needs the current item first.
    pub fn store(&mut self, origin: Origin, req: &StoreRequest<'_>) -> Result<StoreResult, Parked> {
        if req.mode != StoreMode::Set || req.invalidate {
            self.flash_first(req.key, 0)?;
        }
        let (ctx, hooks) = (&self.ctx, &self.hooks);
        hooks::count_set(ctx);
        hooks.detail_set(origin, req.key);
        let before = hooks.fetched(ctx, req.key);
        hooks.journal(ctx, req.key);
        let result = ctx.core.engine.store(req, ctx.now());
        hooks.stored(ctx, req.key, req.mode, result, req.flags, req.value.len(), req.exptime, before);
        Ok(result)
    }

    /// Delete (or, with the meta flags, invalidate or empty) an item.
    pub fn delete(&mut self, origin: Origin, req: &DeleteRequest<'_>) -> Result<DeleteResult, Parked> {
        self.flash_first(req.key, 0)?;
        let (ctx, hooks) = (&self.ctx, &self.hooks);
        hooks.detail_delete(origin, req.key);
        hooks.fetched(ctx, req.key);
        // With md's `x` memcached logs the emptied item it put in place.
        let watched = hooks.before_delete(ctx, origin, req.key, req.invalidate)
            .map(|item| req.empty.map_or(item, |e| (e.flags, 0)));
        hooks.journal(ctx, req.key);
        let result = ctx.core.engine.delete(req, ctx.now());
        hooks.deleted(ctx, origin, req.key, result, req.invalidate, watched);
        Ok(result)
    }

    /// incr/decr, `ma`.
    pub fn delta(&mut self, req: &DeltaRequest<'_>) -> Result<DeltaResult, Parked> {
        self.flash_first(req.key, 0)?;
        let (ctx, hooks) = (&self.ctx, &self.hooks);
        hooks.fetched(ctx, req.key);
        hooks.journal(ctx, req.key);
        let result = ctx.core.engine.delta(req, ctx.now());
        hooks::delta_done(ctx, req.mode, &result);
        Ok(result)
    }

    /// Text `touch`: a new expiry for an item; whether it was there.
    pub fn touch(&mut self, key: &[u8], exptime: u32) -> Result<bool, Parked> {
        self.flash_first(key, 0)?;
        let (ctx, hooks) = (&self.ctx, &self.hooks);
        hooks.fetched(ctx, key);
        hooks.journal(ctx, key);
        let hit = ctx.core.engine.touch(key, exptime, ctx.now());
        hooks::touched(ctx, hit);
        Ok(hit)
    }

    /// `flush_all` at `at` (0: now); false when `-F` forbids it (counted
    /// either way, as memcached counts it).
    pub fn flush_all(&self, at: u32) -> bool {
        let ctx = &self.ctx;
        hooks::count_flush(ctx);
        if !ctx.core.settings.flush_enabled {
            return false;
        }
        self.hooks.journal_flush();
        ctx.core.engine.flush_all(at, ctx.now());
        true
    }

    /// Binary SASL: count an authentication attempt.
    pub fn count_auth(&self, ok: bool) {
        hooks::auth(&self.ctx, ok);
    }
}
