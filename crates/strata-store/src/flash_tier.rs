//! The flash tier's interface (`-o ext_path`): the operations only an
//! engine with a flash tier has, kept out of [`Engine`](crate::Engine) and
//! reached through its one method [`Engine::flash`](crate::Engine::flash).
//!
//! ```text
//!  server                                engine
//!  engine.flash() ─────────────────────► None: no flash tier (the default; a SegStore
//!    asked once, the answer kept         │      without ext_path): no flash path runs
//!                                        └► Some(&dyn FlashTier): the same engine
//!  tier.flash_check(K)         a request's key, in RAM or not (flash_read.rs)
//!  tier.finish_flash_read(..)  the bytes read back, checked under the shard lock
//!  tier.abandon_flash_read(..) a read whose connection closed
//!  tier.withdraw_flash_read(..) a read-ahead the server had no room for
//!  tier.flash_write_idle(..)   the ext_item_age thread, once a second
//!  tier.flash_rewrite(..)      the small store's merges, their own thread
//!  tier.flash_compact(..)      the log's compaction, its own thread
//!  tier.ext_stats()            stats, stats extstore
//! ```
//!
//! Why a trait of its own: [`Engine`](crate::Engine) stays the operations
//! every engine has, and "is there a flash tier" is asked once (the
//! `Option` itself), not per key: a caller that kept the answer calls the
//! tier without another test, and one without a tier never reaches it.
//! [`FlashRead`] (`flash_read.rs`) is the contract of one read between the
//! two sides; [`ExtStats`] the tier's counters. `SegStore` implements it
//! by forwarding to its inherent methods of the same names (`seg/flash/`),
//! which code holding the concrete store (the tests) calls directly.
//!
//! Invariant: an engine's `flash()` answers the same for its whole life
//! (a tier is attached before the engine serves, and never detached), so a
//! caller may keep it.

use crate::{ExtStats, FlashCompact, FlashFinish, FlashIdle, FlashRead, FlashRewrite, GetAction, GetOptions, ItemView, RelTime};

/// The flash-only operations of an engine with a flash tier; see the
/// module docs, and `flash_read.rs` for the whole path of a read.
pub trait FlashTier: Send + Sync {
    /// Where `key`'s item is on flash, when it is there (and not in RAM).
    /// No I/O; counts `get_extstore` and `extstore_io_queue`.
    fn flash_check(&self, key: &[u8], now: RelTime) -> Option<FlashRead>;

    /// Hand back the bytes of a [`FlashRead`] (`None`: the read failed).
    /// Checks them and either shows a plain read's item to `visit` (with
    /// `created` false; the returned [`GetAction`] is applied), or brings
    /// the item into RAM (`into_ram`, `opts.touch` or `opts.vivify`, or the
    /// `ext_recache_rate`-th flash hit), or finds no valid copy. `opts` as
    /// for [`Engine::get`](crate::Engine::get) (`no_bump`, `uncounted`; `touch` and `vivify` are
    /// applied by running the command again).
    fn finish_flash_read(
        &self,
        read: &FlashRead,
        data: Option<&[u8]>,
        opts: GetOptions,
        into_ram: bool,
        now: RelTime,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> FlashFinish;

    /// A handed-out read will not be finished (its connection closed).
    fn abandon_flash_read(&self, read: &FlashRead);

    /// A handed-out read is not sent after all (a read-ahead the server
    /// had no room for): it leaves `extstore_io_queue`, counted nowhere
    /// else, as if [`FlashTier::flash_check`] had not handed it out.
    fn withdraw_flash_read(&self, read: &FlashRead);

    /// `ext_item_age`: one pass of writing items idle longer than that to
    /// flash, with no memory pressure (memcached's storage write thread).
    /// The server calls it about once a second from a thread of its own,
    /// never a worker; `state` is that thread's. Takes shard locks a small
    /// batch at a time. Returns the items written.
    fn flash_write_idle(&self, now: RelTime, state: &mut FlashIdle) -> u64;

    /// The small store's rewrites (`seg/flash/small/sched.rs`): merge the
    /// partition that most needs it, if one is due; true if one was merged.
    /// A thread of its own (never a worker) calls it in a loop, and waits
    /// with [`FlashTier::flash_rewrite_wait`] while it returns false;
    /// `state` is that thread's. Without a small store it returns false.
    fn flash_rewrite(&self, now: RelTime, state: &mut FlashRewrite) -> bool;

    /// Wait until the small store rings for a merge, or `max`.
    fn flash_rewrite_wait(&self, max: std::time::Duration);

    /// End a [`FlashTier::flash_rewrite_wait`] now (shutdown).
    fn flash_rewrite_wake(&self);

    /// The log's compaction (`seg/flash/compact.rs`): one step of emptying
    /// the page that most needs it, if fewer than `ext_compact_under`
    /// pages are ready; true if it did some work. A thread of its own
    /// (never a worker) calls it in a loop, and waits with
    /// [`FlashTier::flash_compact_wait`] while it returns false; `state`
    /// is that thread's. Once it has been called, pages are taken for
    /// writing only when nothing live is left on them.
    fn flash_compact(&self, now: RelTime, state: &mut FlashCompact) -> bool;

    /// Wait until the tier wants a page emptied, or `max`.
    fn flash_compact_wait(&self, max: std::time::Duration);

    /// The tier's counters (`stats`, `stats extstore`).
    fn ext_stats(&self) -> ExtStats;

    /// Tests and fuzzing only, never a server: `SegStore::flash_flush`,
    /// every item on flash then read from the file.
    #[doc(hidden)]
    fn flash_flush(&self);
}
