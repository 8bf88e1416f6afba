//! When partitions are merged: the rewrite thread's choice.
//!
//! ```text
//!  each step, every partition not being merged is looked at (its shard
//!  locked once for all of them):
//!    ring ≥ ¾ full                 ─► due: its log is about to refuse items
//!    its oldest data (the ring's first block, the extent's first piece)
//!    on a page the log reaches within `margin` pages
//!    (free pages + sealed pages older than it)
//!                                  ─► due: the page cannot be reclaimed
//!                                     until it is merged
//!    the small index past ¾ of its share of -m
//!                                  ─► the partition with the most log
//!                                     blocks is due: an item in a set
//!                                     costs a few bits, in the log 9 bytes
//!  the most pressing due partition is merged (in that order); none due:
//!  wait for the bell (a ring filling, the log finding its tail blocked,
//!  the index filling) or 50 ms
//! ```
//!
//! So a partition is merged about once per turn of the log, as late as
//! the log allows: its log blocks pile up for a whole turn, and each merge
//! moves as many items into its sets as that turn brought. The margin,
//! a twentieth of the pages (at least 3), covers what the log writes
//! while a merge runs, and the merge's own extent.

use std::sync::atomic::Ordering;

use super::dir::BlockAt;
use super::index::RING_SLOTS;
use super::merge::Merged;
use super::slot_of;
use crate::seg::flash::tier::Stream;
use crate::seg::SegStore;
use crate::RelTime;

/// The rewrite thread's state ([`FlashTier::flash_rewrite`](crate::FlashTier::flash_rewrite)).
#[derive(Debug, Default)]
pub struct FlashRewrite {
    stream: Stream,
    /// The tier's `tail_blocked` when last looked at.
    blocked_seen: u64,
    /// Merges done by this thread.
    pub merges: u64,
}

/// How pressing a merge is: lower first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// The ring is nearly full (more used slots: more pressing).
    Ring(std::cmp::Reverse<u32>),
    /// Its oldest data is this many pages from being reclaimed.
    Tail(u64),
    /// The index is near its share; this partition's log has that many blocks.
    Index(std::cmp::Reverse<u32>),
}

impl SegStore {
    /// One step of the rewrite thread (module docs): true if a partition
    /// was merged (the caller steps again at once), false if none was due.
    pub fn flash_rewrite(&self, now: RelTime, state: &mut FlashRewrite) -> bool {
        let (Some(small), Some(tier)) = (self.g.small.as_ref(), self.g.flash.as_ref()) else { return false };
        let blocked = tier.c.tail_blocked.load(Ordering::Relaxed);
        let emergency = blocked != state.blocked_seen;
        state.blocked_seen = blocked;
        let margin = super::geometry::margin_pages(tier.page_count() as u64);
        let (free, oldest) = (tier.free_page_count(), tier.oldest_sealed_seq());
        let mut entries = 0;
        // The partition with the longest log in the shard whose index is
        // fullest: under the index's pressure, merging there keeps the
        // shards' tables even (one full refuses items while others idle).
        let mut longest: Option<((usize, u32), usize, usize)> = None;
        let mut best: Option<(Due, usize, usize)> = None;
        for (i, shard) in self.shards.iter().enumerate() {
            let guard = shard.lock();
            let Some(ss) = guard.flash_small.as_deref() else { continue };
            entries += ss.index.len();
            let fill = ss.index.len() * 1000 / (ss.index.slot_bytes() / super::index::SLOT_BYTES).max(1);
            for (j, p) in ss.parts.iter().enumerate() {
                if p.merging {
                    continue;
                }
                if p.ring_len() > 0 && longest.is_none_or(|l| (fill, p.ring_len()) > l.0) {
                    longest = Some(((fill, p.ring_len()), i, j));
                }
                let due = if p.ring_len() as usize >= RING_SLOTS * 3 / 4 {
                    Some(Due::Ring(std::cmp::Reverse(p.ring_len())))
                } else {
                    let ring_page = (p.ring_len() > 0).then(|| BlockAt::unpack(ss.dir.ring(j)[slot_of(p.head)])).flatten().map(|b| b.page);
                    let extent_page = p.commit.pieces.iter().find(|x| x.units > 0).map(|x| x.page);
                    let seq = [ring_page, extent_page].into_iter().flatten().map(|page| tier.page_seq[page as usize].load(Ordering::Relaxed)).min();
                    seq.map(|seq| free + seq.saturating_sub(oldest)).filter(|ahead| *ahead < margin || emergency).map(Due::Tail)
                };
                if let Some(due) = due {
                    if best.is_none_or(|(b, _, _)| due < b) {
                        best = Some((due, i, j));
                    }
                }
            }
        }
        if best.is_none() && super::budget::index_pressed(&self.g, tier, small, entries) {
            best = longest.map(|((_, len), i, j)| (Due::Index(std::cmp::Reverse(len)), i, j));
        }
        let Some((_, shard, part)) = best else { return false };
        let merged = self.merge_part(shard, part, &mut state.stream, now) == Merged::Done;
        state.merges += u64::from(merged);
        if !merged {
            // Nothing to gain from trying again at once.
            small.wait(std::time::Duration::from_millis(10));
        }
        merged
    }

    /// Wait for the rewrite thread's bell, at most `max`.
    pub fn flash_rewrite_wait(&self, max: std::time::Duration) {
        if let Some(small) = self.g.small.as_ref() {
            small.wait(max);
        }
    }

    /// Ring the rewrite thread's bell (a shutdown, so it looks again).
    pub fn flash_rewrite_wake(&self) {
        if let Some(small) = self.g.small.as_ref() {
            small.ring();
        }
    }

    /// Seal every partition's open log block onto the log now
    /// (`flash_flush`: the small items in it are then read from the file,
    /// where until the block filled they were served from RAM).
    pub(crate) fn flash_seal_open(&self) {
        let (Some(small), Some(tier)) = (self.g.small.as_ref(), self.g.flash.as_ref()) else { return };
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let Some(ss) = shard.flash_small.as_deref_mut() else { continue };
            for part in 0..ss.parts.len() {
                if ss.parts[part].open {
                    super::write::seal_open(small, tier, ss, part);
                }
            }
        }
    }

    /// Merge every partition with anything in its log, now (tests, and a
    /// benchmark's settling step). Returns how many were merged.
    #[doc(hidden)]
    pub fn flash_merge_all(&self, now: RelTime, state: &mut FlashRewrite) -> usize {
        let mut merged = 0;
        for i in 0..self.shards.len() {
            let parts = self.shards[i].lock().flash_small.as_deref().map_or(0, |ss| ss.parts.len());
            for j in 0..parts {
                // A merge takes at most a 32nd of -m of log blocks: again
                // while the log shrinks (what a full set spills goes back
                // to it, so it may not empty), or until a merge fails.
                let mut before = u32::MAX;
                loop {
                    let (ring, tombs) = self.shards[i].lock().flash_small.as_deref().map_or((0, 0), |ss| (ss.parts[j].ring_len(), ss.index.tombs));
                    if (ring == 0 && (tombs == 0 || before != u32::MAX)) || ring >= before {
                        break;
                    }
                    before = ring;
                    if self.merge_part(i, j, &mut state.stream, now) != Merged::Done {
                        break;
                    }
                    merged += 1;
                }
            }
        }
        merged
    }
}
