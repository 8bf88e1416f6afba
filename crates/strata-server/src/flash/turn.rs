//! A connection's turn with the flash tier (see `io.rs` for the whole
//! path): the two steps every command that reads an item goes through, so
//! no command has a flash path of its own. The service (`service/mod.rs`)
//! holds one [`Turn`] while the engine has a flash tier, and none
//! otherwise: without one, each step costs the service one branch.
//!
//! - [`Turn::flash_first`]: before a command that needs the current item
//!   (gat with a vivify, touch, add, replace, cas, append, prepend, incr,
//!   decr, delete, meta writes): a key on flash parks the request.
//! - [`Turn::read_item`]: a read; RAM first, and only when RAM misses, the
//!   flash check (a RAM hit costs nothing more).
//!
//! A parked request produces no reply and counts nothing: the command
//! returns as soon as a step says [`Parked`], and the connection leaves
//! the request in its input to run again once the read is back: the front
//! end hands the reads back ([`Turn::take_park`]) with the request's
//! outcome. On that run the steps find the finished read ("resume") for
//! the key it was for.
//!
//! A turn lives for one turn of a connection (its worker's `drive`), so
//! the reads it keeps for a multi-get's later keys ([`HELD_READS`]) go
//! with it.

use strata_store::{Engine, FlashBuf, FlashFinish, FlashRead, FlashTier, GetAction, GetOptions, ItemView};

use super::budget::ReadAheadBudget;
use super::io::{FlashWait, FlashWaits, ReadState, LATER};
use crate::stats::WorkerStats;

/// A request is waiting for a flash read: stop, reply nothing.
pub struct Parked;

/// What a read found.
pub enum Read {
    Hit,
    Miss,
    Parked,
}

/// One connection's turn with the flash tier.
pub struct Turn<'a> {
    pub(super) tier: &'a dyn FlashTier,
    pub(super) engine: &'a dyn Engine,
    /// The bytes read-ahead may hold, all workers.
    pub(super) budget: &'a std::sync::Arc<ReadAheadBudget>,
    /// The worker's counters (`extstore_reads_ahead*`).
    pub(super) stats: &'a WorkerStats,
    /// The finished reads of the request being run again.
    pub(super) resume: Vec<FlashWait>,
    /// Keys of the request before this one were answered before it parked.
    resume_from: usize,
    /// The reads the current request parked on: the key it stopped at,
    /// then later keys of a multi-get ([`Turn::read_ahead`]) and those of
    /// the requests buffered behind it ([`Turn::read_ahead_later`]).
    pub(super) park: Vec<FlashWait>,
    /// The reads finished in this turn of the connection (the last
    /// [`HELD_READS`]): a later key of the request (a multi-get) whose
    /// record lies in the same device blocks as one of them is answered
    /// from those bytes, with no read of its own. Keeping them past the
    /// request costs nothing per request, and is as safe: every use is
    /// checked as a read is (page version, index entry, record check).
    held: Vec<(FlashRead, FlashBuf)>,
}

/// Reads a request keeps for its later keys (each shard's items go to
/// flash a segment at a time, so a shard's keys set one after another sit
/// side by side, and a multi-get of them finds them in blocks read for an
/// earlier key); 32 reads of 4-8 KiB are at most 256 KiB per connection,
/// and only for one turn of the connection.
const HELD_READS: usize = 32;

/// Reads of one key a request makes when each finds the record it read
/// moved meanwhile (the log's compaction, a small-store merge), before it
/// takes the miss: a record moves at most once per compaction or merge of
/// its page, so a second read almost always finds it.
const MOVED_READS: u8 = 4;

impl<'a> Turn<'a> {
    pub fn new(tier: &'a dyn FlashTier, engine: &'a dyn Engine, budget: &'a std::sync::Arc<ReadAheadBudget>, stats: &'a WorkerStats) -> Turn<'a> {
        Turn { tier, engine, budget, stats, resume: Vec::new(), resume_from: 0, park: Vec::new(), held: Vec::new() }
    }

    /// Hand the finished reads back before their request runs again.
    pub fn resume(&mut self, waits: FlashWaits) {
        self.resume_from = waits.0.iter().map(|w| w.key_index).filter(|&i| i < LATER).min().unwrap_or(0);
        self.resume = waits.0;
    }

    /// The connection's run of requests is over: reads queued for later
    /// requests that none used are abandoned, so the tier's count of reads
    /// in flight stays true.
    pub fn end_run(&mut self) {
        if !self.resume.is_empty() {
            FlashWaits(std::mem::take(&mut self.resume)).abandon(self.tier);
        }
    }

    /// The request just run parked on a read.
    pub fn is_parked(&self) -> bool {
        !self.park.is_empty()
    }

    /// The reads the request just run parked on (empty: it did not park).
    /// Finished reads of its later keys that it did not reach stay with it.
    pub fn take_park(&mut self) -> FlashWaits {
        let mut park = std::mem::take(&mut self.park);
        if !park.is_empty() {
            park.append(&mut self.resume);
            park.sort_by_key(|w| w.key_index);
        }
        FlashWaits(park)
    }

    /// After a request ran to its end: resumed reads of its keys it did not
    /// use (the keys are no longer asked for) are abandoned.
    pub fn end_request(&mut self) {
        self.resume_from = 0;
        if !self.resume.is_empty() {
            // The reads for later requests stay for them.
            let (later, unused) = std::mem::take(&mut self.resume).into_iter().partition(|w| w.key_index >= LATER);
            self.resume = later;
            FlashWaits(unused).abandon(self.tier);
        }
    }

    /// The key position a resumed multi-get starts at (0 otherwise).
    pub fn resume_from(&self) -> usize {
        self.resume_from
    }

    /// This request runs again after a flash read for its key `index`
    /// (hooks that already ran for it on the first run, such as a `watch`
    /// line, are not repeated).
    pub fn resuming(&self, index: usize) -> bool {
        self.resume.iter().any(|w| w.key_index == index)
    }

    fn park(&mut self, read: FlashRead, key_index: usize) {
        self.park_again(read, key_index, 0);
    }

    /// Park on `read`, the `moved`-th read of its key after a record moved.
    fn park_again(&mut self, read: FlashRead, key_index: usize, moved: u8) {
        let mut wait = FlashWait::new(read, key_index);
        wait.moved = moved;
        self.park.push(wait);
    }

    /// A finished read found the key's record moved (`FlashFinish::Moved`):
    /// read it again where it is now, up to [`MOVED_READS`] times (then it
    /// is a miss). Parked: the new read is queued; else the key is not on
    /// flash after all.
    fn read_moved(&mut self, key: &[u8], index: usize, moved: u8, now: u32) -> Result<(), Parked> {
        if moved >= MOVED_READS {
            return Ok(());
        }
        match self.tier.flash_check(key, now) {
            Some(read) => {
                self.park_again(read, index, moved + 1);
                Err(Parked)
            }
            None => Ok(()),
        }
    }

    /// The finished read for key `index` of this request, if it has one.
    fn take_resume(&mut self, index: usize) -> Option<FlashWait> {
        let at = self.resume.iter().position(|w| w.key_index == index)?;
        Some(self.resume.remove(at))
    }

    /// Before a command that needs `key`'s current item: Err(Parked) when
    /// it is on flash (the read is queued). On the request's second run the
    /// finished read brings the item into RAM (or finds it gone) and the
    /// command runs without another check.
    pub fn flash_first(&mut self, key: &[u8], index: usize, now: u32) -> Result<(), Parked> {
        if let Some(wait) = self.take_resume(index) {
            let opts = GetOptions::default();
            let mut visit = |_: ItemView<'_>, _: bool| GetAction::default();
            let moved = wait.moved;
            let finish = if let ReadState::Covered = wait.state {
                match self.held_or_park(wait.read, index, opts, true, now, &mut visit) {
                    Some(finish) => finish,
                    None => return Err(Parked),
                }
            } else {
                self.tier.finish_flash_read(&wait.read, wait.data(), opts, true, now, &mut visit)
            };
            if finish == FlashFinish::Moved {
                return self.read_moved(key, index, moved, now);
            }
            return Ok(());
        }
        match self.tier.flash_check(key, now) {
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
    pub fn read_item(
        &mut self,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        if let Some(wait) = self.take_resume(index) {
            return self.use_wait(wait, key, index, opts, now, visit);
        }
        // A read that changes the item (a touch) or creates it on a miss
        // must see a flash copy first: the engine drops a key's flash
        // entries before it changes the key.
        if (opts.touch.is_some() || opts.vivify.is_some()) && self.flash_first(key, index, now).is_err() {
            return Read::Parked;
        }
        if self.engine.get(key, opts, now, visit) {
            return Read::Hit;
        }
        if let Some(wait) = self.take_later(key) {
            return self.use_wait(wait, key, index, opts, now, visit);
        }
        match self.tier.flash_check(key, now) {
            // Another key of this request may have read these blocks.
            Some(read) => match self.held_or_park(read, index, opts, false, now, visit) {
                Some(finish) => self.finished(finish, key, index, 0, opts, now, visit),
                None => Read::Parked,
            },
            // The check copies a record still in the write buffer straight
            // into RAM (no I/O) and answers None: look once more.
            None => match self.engine.get(key, opts, now, visit) {
                true => Read::Hit,
                false => Read::Miss,
            },
        }
    }

    /// Answer key `index` (`key`) from its finished read `wait`, keeping
    /// the bytes for the request's later keys in the same blocks.
    fn use_wait(
        &mut self,
        mut wait: FlashWait,
        key: &[u8],
        index: usize,
        opts: GetOptions,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        let moved = wait.moved;
        if let ReadState::Covered = wait.state {
            // The covering read's bytes are held, unless it failed or the
            // request parked again since: then a read of its own.
            return match self.held_or_park(wait.read, index, opts, false, now, visit) {
                Some(finish) => self.finished(finish, key, index, moved, opts, now, visit),
                None => Read::Parked,
            };
        }
        let finish = self.tier.finish_flash_read(&wait.read, wait.data(), opts, false, now, visit);
        if let ReadState::Done(Some(buf)) = std::mem::replace(&mut wait.state, ReadState::Done(None)) {
            if self.held.len() == HELD_READS {
                self.held.remove(0);
            }
            self.held.push((wait.read, buf));
        }
        self.finished(finish, key, index, moved, opts, now, visit)
    }

    /// The answer once flash bytes were offered to `visit`: a hit if it saw
    /// the item; otherwise the key is read from RAM (a newer copy got
    /// there, or the record was not this key's), and where the record only
    /// moved on flash, read again (`moved`: reads of it that found it
    /// moved before this one).
    #[allow(clippy::too_many_arguments)]
    fn finished(
        &mut self,
        finish: FlashFinish,
        key: &[u8],
        index: usize,
        moved: u8,
        opts: GetOptions,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Read {
        match finish {
            FlashFinish::Visited => Read::Hit,
            _ if self.engine.get(key, opts, now, visit) => Read::Hit,
            FlashFinish::Moved => match self.read_moved(key, index, moved, now) {
                Err(Parked) => Read::Parked,
                // The check found the record in a block still in RAM (a
                // partition's open block, a write buffer) and copied it
                // into RAM: look once more, as `read_item` does.
                Ok(()) if self.engine.get(key, opts, now, visit) => Read::Hit,
                Ok(()) => Read::Miss,
            },
            _ => Read::Miss,
        }
    }

    /// Finish `read` (key `index`) from the held bytes of another key of
    /// this request that read the same blocks; None when none did: the
    /// request parks on `read` instead.
    fn held_or_park(
        &mut self,
        mut read: FlashRead,
        index: usize,
        opts: GetOptions,
        into_ram: bool,
        now: u32,
        visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction,
    ) -> Option<FlashFinish> {
        let tier = self.tier;
        let finish = self.held.iter().rev().find_map(|(other, buf)| {
            let range = read.covered_by(other, buf)?;
            Some(tier.finish_flash_read(&read, Some(&buf[range]), opts, into_ram, now, visit))
        });
        if finish.is_none() {
            self.park(read, index);
        }
        finish
    }
}
