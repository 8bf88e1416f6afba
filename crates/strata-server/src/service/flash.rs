//! The service's side of a flash read (see `flash/io.rs` for the whole
//! path): two hooks every command that reads an item goes through, so no
//! command has a flash path of its own.
//!
//! - [`Service::flash_first`]: before a command that needs the current
//!   item (gat with a vivify, touch, add, replace, cas, append, prepend,
//!   incr, decr, delete, meta writes): a key on flash parks the request.
//! - [`Service::read_item`]: a read; RAM first, and only when RAM misses,
//!   the flash check (a RAM hit costs nothing more).
//!
//! A parked request produces no reply and counts nothing: the command
//! returns as soon as a hook says [`Parked`], and `Conn::process` leaves
//! the request in the input to run again once the read is back. On that
//! run the hooks find the finished read ("resume") for the key it was for.
//!
//! The engine's flash tier (`Engine::flash`, a `FlashTier`) is asked for
//! once, when the service is made for a connection's turn (and only when
//! `Shared::flash_on` says there is one), and kept in [`FlashState`]: with
//! no flash tier (None) each hook costs one predictable branch on it, as
//! the `bool` it replaces did, and with one the hooks call the tier
//! without asking again.

use std::cell::{Cell, RefCell};

use strata_store::{Engine, FlashBuf, FlashFinish, FlashRead, FlashTier, GetAction, GetOptions, ItemView};

use super::{hooks, Service};
use super::read_ahead::LATER;
use crate::flash::io::{FlashWait, FlashWaits, ReadState};

/// A request is waiting for a flash read: stop, reply nothing.
pub struct Parked;

/// What a read found.
pub enum Read {
    Hit,
    Miss,
    Parked,
}

/// Per-connection flash state.
#[derive(Default)]
pub(crate) struct FlashState<'a> {
    /// The engine's flash tier; None: no flash path runs.
    pub(super) tier: Option<&'a dyn FlashTier>,
    /// The finished reads of the request being run again.
    pub(super) resume: RefCell<Vec<FlashWait>>,
    /// Keys of the request before this one were answered before it parked.
    resume_from: Cell<usize>,
    /// The reads the current request parked on: the key it stopped at,
    /// then later keys of a multi-get ([`Service::read_ahead`]) and those of
    /// the requests buffered behind it ([`Service::read_ahead_later`]).
    pub(super) park: RefCell<Vec<FlashWait>>,
    /// The reads finished in this turn of the connection (the last
    /// [`HELD_READS`]; this state lives for one turn): a later key of the
    /// request (a multi-get) whose record lies in the same device blocks
    /// as one of them is answered from those bytes, with no read of its
    /// own. Keeping them past the request costs nothing per request, and
    /// is as safe: every use is checked as a read is (page version, index
    /// entry, record check).
    held: RefCell<Vec<(FlashRead, FlashBuf)>>,
}

/// Reads a request keeps for its later keys (each shard's items go to
/// flash a segment at a time, so a shard's keys set one after another sit
/// side by side, and a multi-get of them finds them in blocks read for an
/// earlier key); 32 reads of 4-8 KiB are at most 256 KiB per connection,
/// and only for one turn of the connection.
const HELD_READS: usize = 32;

impl<'a> FlashState<'a> {
    pub fn new(tier: Option<&'a dyn FlashTier>) -> FlashState<'a> {
        FlashState { tier, ..FlashState::default() }
    }
}

impl<'a> Service<'a> {
    /// Hand the finished reads back before their request runs again.
    pub fn resume_flash(&self, waits: FlashWaits) {
        self.flash.resume_from.set(waits.0.iter().map(|w| w.key_index).filter(|&i| i < LATER).min().unwrap_or(0));
        *self.flash.resume.borrow_mut() = waits.0;
    }

    /// The connection's run of requests is over: reads queued for later
    /// requests that none used are abandoned, so the tier's count of reads
    /// in flight stays true.
    #[inline]
    pub fn end_run(&self) {
        let Some(tier) = self.flash.tier else { return };
        let mut resume = self.flash.resume.borrow_mut();
        if !resume.is_empty() {
            FlashWaits(std::mem::take(&mut *resume)).abandon(tier);
        }
    }

    /// There is a flash tier: requests may park on its reads. Without one,
    /// the flash steps of a request cost this one branch.
    #[inline]
    pub fn flash_on(&self) -> bool {
        self.flash.tier.is_some()
    }

    /// The request just run parked on a read.
    pub fn is_parked(&self) -> bool {
        !self.flash.park.borrow().is_empty()
    }

    /// The reads the request just run parked on (empty: it did not park).
    /// Finished reads of its later keys that it did not reach stay with it.
    pub fn take_park(&self) -> FlashWaits {
        let mut park = std::mem::take(&mut *self.flash.park.borrow_mut());
        if !park.is_empty() {
            park.append(&mut self.flash.resume.borrow_mut());
            park.sort_by_key(|w| w.key_index);
        }
        FlashWaits(park)
    }

    /// After a request ran to its end: resumed reads of its keys it did not
    /// use (the keys are no longer asked for) are abandoned. Inlined: it
    /// runs per request, and finds an empty `Vec` without a flash tier.
    #[inline]
    pub fn end_request(&self) {
        let Some(tier) = self.flash.tier else { return };
        self.flash.resume_from.set(0);
        let mut resume = self.flash.resume.borrow_mut();
        if !resume.is_empty() {
            // The reads for later requests stay for them.
            let (later, unused) = std::mem::take(&mut *resume).into_iter().partition(|w| w.key_index >= LATER);
            *resume = later;
            FlashWaits(unused).abandon(tier);
        }
    }

    /// The key position a resumed multi-get starts at (0 otherwise).
    pub(crate) fn resume_from(&self) -> usize {
        self.flash.resume_from.get()
    }

    /// This request runs again after a flash read for its key `index`
    /// (hooks that already ran for it on the first run, such as a `watch`
    /// line, are not repeated).
    pub(crate) fn resuming(&self, index: usize) -> bool {
        self.flash.tier.is_some() && self.flash.resume.borrow().iter().any(|w| w.key_index == index)
    }

    fn park(&self, read: FlashRead, key_index: usize) {
        self.flash.park.borrow_mut().push(FlashWait::new(read, key_index));
    }

    /// The finished read for key `index` of this request, if it has one.
    fn take_resume(&self, index: usize) -> Option<FlashWait> {
        let mut resume = self.flash.resume.borrow_mut();
        let at = resume.iter().position(|w| w.key_index == index)?;
        Some(resume.remove(at))
    }

    /// Before a command that needs `key`'s current item: Err(Parked) when
    /// it is on flash (the read is queued). On the request's second run the
    /// finished read brings the item into RAM (or finds it gone) and the
    /// command runs without another check.
    pub(crate) fn flash_first(&self, key: &[u8], index: usize) -> Result<(), Parked> {
        let Some(tier) = self.flash.tier else {
            return Ok(());
        };
        let now = self.now();
        if let Some(wait) = self.take_resume(index) {
            let opts = GetOptions::default();
            let mut visit = |_: ItemView<'_>, _: bool| GetAction::default();
            if let ReadState::Covered = wait.state {
                return match self.held_or_park(tier, wait.read, index, opts, true, now, &mut visit) {
                    Some(_) => Ok(()),
                    None => Err(Parked),
                };
            }
            tier.finish_flash_read(&wait.read, wait.data(), opts, true, now, &mut visit);
            return Ok(());
        }
        match tier.flash_check(key, now) {
            Some(read) => {
                self.park(read, index);
                Err(Parked)
            }
            None => Ok(()),
        }
    }

    /// Read `key` (key `index` of its request) as `Engine::get` does,
    /// through the flash tier when RAM misses: a plain read is answered
    /// from the flash bytes through the same `visit`.
    pub(crate) fn read_item(
        &self,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        let engine = self.shared.engine.as_ref();
        if opts.touch.is_some() || opts.vivify.is_some() {
            hooks::journal(self, key);
        } else {
            hooks::catch_up(self, key);
        }
        let hit = |hit: bool| if hit { Read::Hit } else { Read::Miss };
        let Some(tier) = self.flash.tier else {
            return hit(engine.get(key, opts, now, visit));
        };
        if let Some(wait) = self.take_resume(index) {
            return self.use_wait(tier, wait, key, index, opts, now, visit);
        }
        // A read that changes the item (a touch) or creates it on a miss
        // must see a flash copy first: the engine drops a key's flash
        // entries before it changes the key.
        if (opts.touch.is_some() || opts.vivify.is_some()) && self.flash_first(key, index).is_err() {
            return Read::Parked;
        }
        if engine.get(key, opts, now, visit) {
            return Read::Hit;
        }
        if let Some(wait) = self.take_later(key) {
            return self.use_wait(tier, wait, key, index, opts, now, visit);
        }
        match tier.flash_check(key, now) {
            // Another key of this request may have read these blocks.
            Some(read) => match self.held_or_park(tier, read, index, opts, false, now, visit) {
                Some(finish) => finished(finish, engine, key, opts, now, visit),
                None => Read::Parked,
            },
            // The check copies a record still in the write buffer straight
            // into RAM (no I/O) and answers None: look once more.
            None => hit(engine.get(key, opts, now, visit)),
        }
    }
}

impl Service<'_> {
    /// Answer key `index` (`key`) from its finished read `wait`, keeping
    /// the bytes for the request's later keys in the same blocks.
    #[allow(clippy::too_many_arguments)]
    fn use_wait(
        &self,
        tier: &dyn FlashTier,
        mut wait: FlashWait,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        let engine = self.shared.engine.as_ref();
        if let ReadState::Covered = wait.state {
            // The covering read's bytes are held, unless it failed or the
            // request parked again since: then a read of its own.
            return match self.held_or_park(tier, wait.read, index, opts, false, now, visit) {
                Some(finish) => finished(finish, engine, key, opts, now, visit),
                None => Read::Parked,
            };
        }
        let finish = tier.finish_flash_read(&wait.read, wait.data(), opts, false, now, visit);
        if let ReadState::Done(Some(buf)) = std::mem::replace(&mut wait.state, ReadState::Done(None)) {
            let mut held = self.flash.held.borrow_mut();
            if held.len() == HELD_READS {
                held.remove(0);
            }
            held.push((wait.read, buf));
        }
        finished(finish, engine, key, opts, now, visit)
    }

    /// Finish `read` (key `index`) from the held bytes of another key of
    /// this request that read the same blocks; None when none did: the
    /// request parks on `read` instead.
    #[allow(clippy::too_many_arguments)]
    fn held_or_park(
        &self,
        tier: &dyn FlashTier,
        mut read: FlashRead,
        index: usize,
        opts: GetOptions,
        into_ram: bool,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Option<FlashFinish> {
        let finish = self.flash.held.borrow().iter().rev().find_map(|(other, buf)| {
            let range = read.covered_by(other, buf)?;
            Some(tier.finish_flash_read(&read, Some(&buf[range]), opts, into_ram, now, visit))
        });
        if finish.is_none() {
            self.park(read, index);
        }
        finish
    }
}

/// The answer once flash bytes were offered to `visit`: a hit if it saw the
/// item; otherwise the key is read from RAM (a newer copy got there, or the
/// record was not this key's).
fn finished(
    finish: FlashFinish,
    engine: &dyn Engine,
    key: &[u8],
    opts: GetOptions,
    now: u32,
    visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
) -> Read {
    match finish {
        FlashFinish::Visited => Read::Hit,
        FlashFinish::InRam | FlashFinish::Absent if engine.get(key, opts, now, visit) => Read::Hit,
        FlashFinish::InRam | FlashFinish::Absent => Read::Miss,
    }
}
