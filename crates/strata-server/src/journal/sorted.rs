//! The sorted view `mj` answers from: the ring's distinct tags, sorted,
//! each with the (low 32 bits of the) last position that recorded it.
//!
//! Sorting the window's tags per request cost `n log n` for a window of
//! `n` changes (up to the whole ring: 524,288 by default, 2^28 at most),
//! and a client may pipeline `mj`. The view is brought up to the head by
//! sorting only what came since it was last asked and merging that in,
//! and a window is answered by one pass over the view keeping the tags
//! recorded at or after its start: `O(view + new log new)` a request,
//! where the view holds at most one entry a slot of the ring (8 bytes
//! each, counted in `stats memory`'s `journal_bytes`; only a node asked
//! with `mj` builds it).
//!
//! ```text
//!  entries: (tag, position as u32), sorted by tag, one per tag
//!  complete for positions [from, to); none older than to - ring size
//! ```

use super::{read_slot, Refusal, Ring};

#[derive(Default)]
pub(super) struct Sorted {
    entries: Vec<(u32, u32)>,
    from: u64,
    to: u64,
}

impl Sorted {
    /// The distinct tags recorded at positions `[start, head)`, sorted;
    /// the view is first brought up to `head`, or built anew from
    /// `oldest` (at or before `start`: the oldest window the ring answers
    /// for, so that an older window than this one does not build it
    /// again). On a refusal (a slot a writer still holds, or a lap that
    /// overwrote one) the view is left as it was.
    pub(super) fn tags(&mut self, ring: &Ring, oldest: u64, start: u64, head: u64) -> Result<Vec<u32>, Refusal> {
        let size = ring.mask + 1;
        let built = !self.entries.is_empty() || self.to > self.from;
        let current = built && start >= self.from && head >= self.to && head - self.to <= size;
        if !(current && self.catch_up(ring, head).is_ok()) {
            // Built anew. The oldest slots may be overwritten as they are
            // read: then from the window's start.
            let (entries, from) = match last_per_tag(ring, oldest, head) {
                Err(Refusal::Wrapped) if oldest < start => (last_per_tag(ring, start, head)?, start),
                got => (got?, oldest),
            };
            *self = Sorted { entries, from, to: head };
        }
        let span = head - start;
        Ok(self.entries.iter().filter(|&&(_, at)| age(head, at) <= span).map(|&(tag, _)| tag).collect())
    }

    /// Merge in what was recorded since the view was last brought up.
    fn catch_up(&mut self, ring: &Ring, head: u64) -> Result<(), Refusal> {
        if head > self.to {
            let size = ring.mask + 1;
            let new = last_per_tag(ring, self.to, head)?;
            self.entries = merge(&self.entries, &new, head, size);
            self.to = head;
            self.from = self.from.max(head.saturating_sub(size));
        }
        Ok(())
    }

    /// Bytes the view holds.
    pub(super) fn bytes(&self) -> u64 {
        (self.entries.capacity() * std::mem::size_of::<(u32, u32)>()) as u64
    }
}

/// How many positions before `head` the position whose low 32 bits are
/// `at` is (positions in the view are within two ring sizes, 2^29, of
/// the head: the low bits tell them apart).
#[inline]
fn age(head: u64, at: u32) -> u64 {
    u64::from((head as u32).wrapping_sub(at))
}

/// `(tag, last position)` for every tag recorded in `[start, end)`, sorted
/// by tag.
fn last_per_tag(ring: &Ring, start: u64, end: u64) -> Result<Vec<(u32, u32)>, Refusal> {
    let mut all = Vec::with_capacity((end - start) as usize);
    for pos in start..end {
        all.push((read_slot(ring, pos)?, pos as u32));
    }
    // Stable by tag: a tag's positions stay in order, its last is kept.
    all.sort_by_key(|&(tag, _)| tag);
    all.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = later.1;
        }
        same
    });
    Ok(all)
}

/// `old` and `new` (both sorted, one entry a tag) merged, a tag in both
/// taking `new`'s position; entries older than the ring (`size` before
/// `head`) left out: no window the ring answers for reaches them.
fn merge(old: &[(u32, u32)], new: &[(u32, u32)], head: u64, size: u64) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(old.len() + new.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let take = match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.0 == n.0 => {
                i += 1;
                j += 1;
                *n
            }
            (Some(o), Some(n)) if o.0 < n.0 => {
                i += 1;
                *o
            }
            (Some(o), None) => {
                i += 1;
                *o
            }
            (_, Some(n)) => {
                j += 1;
                *n
            }
            (None, None) => unreachable!("the loop runs while one has entries"),
        };
        if age(head, take.1) <= size {
            out.push(take);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{tag, Journal};

    /// The answer as it was computed before the view: every slot of the
    /// window read, sorted, deduplicated.
    fn by_sorting(j: &Journal, since: i64) -> Option<Vec<u32>> {
        j.changes_since_by_sorting(since).ok().map(|c| c.tags)
    }

    #[test]
    fn the_view_answers_as_sorting_the_window_would_while_the_ring_wraps() {
        // A ring of 64 slots, keys drawn from 40 (repeats), a mark a
        // second; windows asked in no order, between batches of changes,
        // until the ring has wrapped many times.
        let j = Journal::new(64, 1000);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut answered = 0;
        for second in 1001..1400i64 {
            for _ in 0..next() % 30 {
                j.record(&(next() % 40).to_le_bytes());
            }
            j.tick(second);
            for _ in 0..3 {
                let since = second - (next() % 12) as i64;
                let want = by_sorting(&j, since);
                let got = j.changes_since(since).ok().map(|c| c.tags);
                assert_eq!(got, want, "since {since} at second {second}");
                answered += usize::from(want.is_some());
            }
        }
        assert!(answered > 300, "most windows fit the ring: {answered}");
    }

    #[test]
    fn windows_asked_while_writers_record_hold_every_change_in_them() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        // One writer ticks a second every 100 changes of its own keys
        // (change i, of key i mod 700, in second 1001 + i / 100) and publishes how far it got;
        // another records as many other keys; the reader asks windows and checks
        // that every change it knows done at or after the window is in it.
        // Before each second's tick the writer waits until the reader has
        // asked a window since the last tick, so the reader asks 2,000
        // windows, each while both writers record, however the threads
        // are scheduled (racing, it answered as few as 38 on two busy
        // cores); and until the other writer has caught up, so a second
        // holds at most 200 changes (a starved other writer once caught
        // up in one second with thousands, more than the ring holds:
        // every window then `Wrapped`). A window may be refused while a
        // writer holds a slot of it (`Busy`); most must be answered.
        const SECONDS: u64 = 2000;
        let j = Journal::new(4096, 1000);
        let (done, other, asked, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
        let key = |i: u64| format!("k{}", i % 700);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..SECONDS * 100 {
                    if i % 100 == 0 {
                        while asked.load(Ordering::Acquire) < i / 100 || other.load(Ordering::Acquire) < i {
                            std::thread::yield_now();
                        }
                        j.tick(1001 + (i / 100) as i64);
                    }
                    j.record(key(i).as_bytes());
                    done.store(i + 1, Ordering::Release);
                }
                stop.store(true, Ordering::Release);
            });
            s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    if n < done.load(Ordering::Acquire) {
                        j.record(&(n % 5000).to_le_bytes());
                        n += 1;
                        other.store(n, Ordering::Release);
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            let (mut n, mut answered, mut refused) = (0u64, 0u64, std::collections::BTreeMap::new());
            while !stop.load(Ordering::Acquire) {
                let known = done.load(Ordering::Acquire);
                let second = 1001 + known.saturating_sub(1) as i64 / 100;
                n += 1;
                let since = second - (n % 4) as i64;
                let asked_now = j.changes_since(since);
                asked.fetch_add(1, Ordering::Release);
                let changes = match asked_now {
                    Ok(changes) => changes,
                    Err(why) => {
                        *refused.entry(format!("{why:?}")).or_insert(0u64) += 1;
                        continue;
                    }
                };
                answered += 1;
                assert!(changes.tags.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
                let first = ((since - 1001).max(0) * 100) as u64;
                for i in first..known {
                    assert!(changes.tags.binary_search(&tag(key(i).as_bytes())).is_ok(), "since {since}: change {i} missing");
                }
            }
            assert!(answered >= SECONDS / 2, "windows answered: {answered} of {n}; refused: {refused:?}");
        });
    }

    #[test]
    fn a_tag_changed_again_stays_in_a_window_that_holds_its_last_change() {
        let j = Journal::new(8, 1000);
        j.record(b"a");
        j.record(b"b");
        j.tick(1001);
        assert_eq!(j.changes_since(1001).map(|c| c.tags.len()).ok(), Some(2));
        j.record(b"a");
        j.tick(1002);
        assert_eq!(j.changes_since(1002).map(|c| c.tags).ok(), Some(vec![tag(b"a")]));
        // Seven changes of "c" fill the ring: "b" and the first "a" are
        // overwritten.
        for _ in 0..7 {
            j.record(b"c");
        }
        j.tick(1003);
        let mut want = vec![tag(b"a"), tag(b"c")];
        want.sort_unstable();
        assert_eq!(j.changes_since(1002).map(|c| c.tags).ok(), Some(want));
        assert_eq!(j.changes_since(1003).map(|c| c.tags).ok(), Some(vec![tag(b"c")]));
    }
}
