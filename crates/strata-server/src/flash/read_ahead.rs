//! Reads sent ahead with the one a request parks on: when a request
//! parks on a flash read, the reads of the keys it will need next go to the
//! device with it, so they come back together and the request (and those
//! behind it) run again once, not once a key.
//!
//! - A multi-get's later keys on flash ([`Turn::read_ahead`], from
//!   `front/text.rs`): waits numbered by the key's position, found by it
//!   when the request runs again.
//! - The plain reads buffered behind the parked request
//!   ([`Turn::read_ahead_later`], the keys from `peek.rs`): waits
//!   numbered from [`LATER`], found by key when their request runs
//!   ([`Turn::take_later`]); those no request used are abandoned when
//!   the connection's run of requests ends.
//!
//! Up to [`READ_AHEAD`] reads in all (the parked one included), and the
//! reads queued ahead take their buffers' bytes from one bound for all
//! connections (`budget.rs`): a read the bound cannot hold is
//! not queued (`extstore_reads_ahead_refused`), and neither are the ones
//! after it; their keys are read when their requests run. A key in
//! RAM gets none; one whose blocks a queued read already covers is marked
//! [`ReadState::Covered`] and answered from those bytes. Nothing is
//! answered or counted here: each key is read as usual when its request
//! runs, and every use of a read is checked as a read is (page version,
//! index entry, record check), so a key changed meanwhile is answered as it
//! is now.

use strata_store::{FlashRead, GetAction, GetOptions};

use super::io::{FlashWait, ReadState, LATER, READ_AHEAD};
use super::turn::Turn;

impl Turn<'_> {
    /// The finished read queued for `key` by an earlier request of the
    /// pipeline ([`Turn::read_ahead_later`]), if there is one.
    pub(super) fn take_later(&mut self, key: &[u8]) -> Option<FlashWait> {
        let at = self.resume.iter().position(|w| w.key_index >= LATER && w.read.key() == key)?;
        Some(self.resume.remove(at))
    }

    /// The request just run parked: queue the reads of the keys on flash
    /// of the plain reads buffered behind it (`input`, from the end of the
    /// parked request; `peek.rs`), within the same [`READ_AHEAD`].
    /// Each of those requests finds its key's read when it runs
    /// ([`Turn::read_item`]); reads no request used are abandoned when
    /// the connection's run of requests ends ([`Turn::end_run`]).
    pub fn read_ahead_later(&mut self, input: &[u8], binary: bool, now: u32) {
        if !self.is_parked() {
            return;
        }
        super::peek::later_read_keys(input, binary, &mut |key| {
            let asked = |w: &FlashWait| w.key_index >= LATER && w.read.key() == key;
            if self.park.iter().any(asked) || self.resume.iter().any(asked) {
                return true;
            }
            // Past every id in use: finished reads carried over from an
            // earlier park keep theirs, and a completion finds its wait by id.
            let last = self.park.iter().chain(self.resume.iter()).map(|w| w.key_index).max();
            let id = last.filter(|&i| i >= LATER).map_or(LATER, |i| i + 1);
            self.queue_ahead(key, id, now)
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
    pub fn read_ahead<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>, first: usize, now: u32) {
        if !self.is_parked() {
            return;
        }
        for (index, key) in (first..).zip(keys) {
            if self.resume.iter().any(|w| w.key_index == index) {
                continue;
            }
            if !self.queue_ahead(key, index, now) {
                return;
            }
        }
    }

    /// Queue `key`'s flash read as wait `id` of the parked request, unless
    /// it is in RAM or not on flash; false when no more reads may be
    /// queued (this connection's [`READ_AHEAD`] or the global bound of
    /// bytes is reached, or the key is too long: the request ends there).
    fn queue_ahead(&mut self, key: &[u8], id: usize, now: u32) -> bool {
        let tier = self.tier;
        if self.park.len() >= READ_AHEAD || key.len() > strata_proto::KEY_MAX_LENGTH {
            return false;
        }
        let quiet = GetOptions { uncounted: true, no_bump: true, ..GetOptions::default() };
        if self.engine.get(key, quiet, now, &mut |_, _| GetAction::default()) {
            return true;
        }
        let Some(read) = tier.flash_check(key, now) else { return true };
        let covered = self.park.iter().any(|w| within(&read, &w.read));
        let mut wait = FlashWait::new(read, id);
        if covered {
            wait.state = ReadState::Covered;
        } else {
            // Its buffer's bytes, held until the wait is dropped; none
            // left: the read is withdrawn (the tier counts it handed
            // out) and the key is read when its request runs.
            let Some(charge) = self.budget.charge(wait.read.len_bytes as u64) else {
                tier.withdraw_flash_read(&wait.read);
                crate::stats::WorkerStats::incr(&self.stats.extstore_reads_ahead_refused);
                return false;
            };
            wait.charge = Some(charge);
            crate::stats::WorkerStats::incr(&self.stats.extstore_reads_ahead);
        }
        self.park.push(wait);
        true
    }
}

/// `read`'s blocks lie within `other`'s (same file).
fn within(read: &FlashRead, other: &FlashRead) -> bool {
    std::sync::Arc::ptr_eq(&read.file, &other.file)
        && read.offset_bytes >= other.offset_bytes
        && read.offset_bytes + read.len_bytes as u64 <= other.offset_bytes + other.len_bytes as u64
}
