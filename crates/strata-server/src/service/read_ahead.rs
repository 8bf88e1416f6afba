//! Reads sent ahead with the one a request parks on: when a request
//! parks on a flash read, the reads of the keys it will need next go to the
//! device with it, so they come back together and the request (and those
//! behind it) run again once, not once a key.
//!
//! - A multi-get's later keys on flash ([`Service::read_ahead`], from
//!   `front/text.rs`): waits numbered by the key's position, found by it
//!   when the request runs again.
//! - The plain reads buffered behind the parked request
//!   ([`Service::read_ahead_later`], the keys from `flash/peek.rs`): waits
//!   numbered from [`LATER`], found by key when their request runs
//!   ([`Service::take_later`]); those no request used are abandoned when
//!   the connection's run of requests ends.
//!
//! Up to [`READ_AHEAD`] reads in all (the parked one included), and the
//! reads queued ahead take their buffers' bytes from one bound for all
//! connections (`flash/budget.rs`): a read the bound cannot hold is
//! not queued (`extstore_reads_ahead_refused`), and neither are the ones
//! after it; their keys are read when their requests run. A key in
//! RAM gets none; one whose blocks a queued read already covers is marked
//! [`ReadState::Covered`] and answered from those bytes. Nothing is
//! answered or counted here: each key is read as usual when its request
//! runs, and every use of a read is checked as a read is (page version,
//! index entry, record check), so a key changed meanwhile is answered as it
//! is now.

use strata_store::{FlashRead, GetAction, GetOptions};

use super::Service;
use crate::flash::io::{FlashWait, ReadState, READ_AHEAD};

/// Waits of a parked request numbered from here are for the requests
/// buffered behind it ([`Service::read_ahead_later`]), found by key; below
/// it, for the parked request's own keys, found by position.
pub(super) const LATER: usize = usize::MAX / 2 + 1;

impl Service<'_> {
    /// The finished read queued for `key` by an earlier request of the
    /// pipeline ([`Service::read_ahead_later`]), if there is one.
    pub(super) fn take_later(&self, key: &[u8]) -> Option<FlashWait> {
        let mut resume = self.flash.resume.borrow_mut();
        let at = resume.iter().position(|w| w.key_index >= LATER && w.read.key() == key)?;
        Some(resume.remove(at))
    }

    /// The request just run parked: queue the reads of the keys on flash
    /// of the plain reads buffered behind it (`input`, from the end of the
    /// parked request; `flash/peek.rs`), within the same [`READ_AHEAD`].
    /// Each of those requests finds its key's read when it runs
    /// ([`Service::read_item`]); reads no request used are abandoned when
    /// the connection's run of requests ends ([`Service::end_run`]).
    pub(crate) fn read_ahead_later(&self, input: &[u8], binary: bool) {
        if self.flash.tier.is_none() || !self.is_parked() {
            return;
        }
        crate::flash::peek::later_read_keys(input, binary, &mut |key| {
            let asked = |w: &FlashWait| w.key_index >= LATER && w.read.key() == key;
            if self.flash.park.borrow().iter().any(asked) || self.flash.resume.borrow().iter().any(asked) {
                return true;
            }
            // Past every id in use: finished reads carried over from an
            // earlier park keep theirs, and a completion finds its wait by id.
            let last = self.flash.park.borrow().iter().chain(self.flash.resume.borrow().iter()).map(|w| w.key_index).max();
            let id = last.filter(|&i| i >= LATER).map_or(LATER, |i| i + 1);
            self.queue_ahead(key, id)
        });
    }

    /// A multi-get parked at a key on flash: queue the reads of its later
    /// `keys` (positions from `first`) whose records are on flash too, up
    /// to [`READ_AHEAD`] reads in all, so they go to the device together
    /// and the request runs again once, not once per key. Nothing is
    /// answered or counted here: each key is read as usual when the
    /// request runs again, and finds its read there. A key whose blocks a
    /// queued read already covers is marked [`ReadState::Covered`], no read
    /// of its own (it is answered from those bytes); one that has a
    /// finished read already gets nothing.
    pub(crate) fn read_ahead<'k>(&self, keys: impl Iterator<Item = &'k [u8]>, first: usize) {
        if self.flash.tier.is_none() || !self.is_parked() {
            return;
        }
        for (index, key) in (first..).zip(keys) {
            if self.flash.resume.borrow().iter().any(|w| w.key_index == index) {
                continue;
            }
            if !self.queue_ahead(key, index) {
                return;
            }
        }
    }

    /// Queue `key`'s flash read as wait `id` of the parked request, unless
    /// it is in RAM or not on flash; false when no more reads may be
    /// queued (this connection's [`READ_AHEAD`] or the global bound of
    /// bytes is reached, or the key is too long: the request ends there).
    fn queue_ahead(&self, key: &[u8], id: usize) -> bool {
        let Some(tier) = self.flash.tier else { return false };
        if self.flash.park.borrow().len() >= READ_AHEAD || key.len() > strata_proto::KEY_MAX_LENGTH {
            return false;
        }
        let now = self.now();
        let quiet = GetOptions { uncounted: true, no_bump: true, ..GetOptions::default() };
        if self.shared.engine.get(key, quiet, now, &mut |_, _| GetAction::default()) {
            return true;
        }
        let Some(read) = tier.flash_check(key, now) else { return true };
        let mut park = self.flash.park.borrow_mut();
        let covered = park.iter().any(|w| within(&read, &w.read));
        let mut wait = FlashWait::new(read, id);
        if covered {
            wait.state = ReadState::Covered;
        } else {
            // Its buffer's bytes, held until the wait is dropped; none
            // left: the read is withdrawn (the tier counts it handed
            // out) and the key is read when its request runs.
            let Some(charge) = self.shared.read_ahead.charge(wait.read.len_bytes as u64) else {
                tier.withdraw_flash_read(&wait.read);
                crate::stats::WorkerStats::incr(&self.stats.extstore_reads_ahead_refused);
                return false;
            };
            wait.charge = Some(charge);
            crate::stats::WorkerStats::incr(&self.stats.extstore_reads_ahead);
        }
        park.push(wait);
        true
    }
}

/// `read`'s blocks lie within `other`'s (same file).
fn within(read: &FlashRead, other: &FlashRead) -> bool {
    std::sync::Arc::ptr_eq(&read.file, &other.file)
        && read.offset_bytes >= other.offset_bytes
        && read.offset_bytes + read.len_bytes as u64 <= other.offset_bytes + other.len_bytes as u64
}
