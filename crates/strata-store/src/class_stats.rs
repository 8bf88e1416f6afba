//! Per-class counters: what memcached keeps per slab class (`itemstats`,
//! `slab_stats`, `lru_hits`, the `stats sizes` histogram), kept by an
//! engine per shard under the shard's lock and summed by `stats`.
//!
//! ```text
//!  ClassTally (one per shard)
//!    counters[0..=63]: ClassCounters   index = memcached class id (classes.rs)
//!      population: number_hot, number_warm, mem_requested   (+ on link, - on unlink),
//!                  number_max (the peak, for the pages memcached would keep)
//!      requests:   get_hits, touch_hits, hits_to_hot/warm, cmd_set, delete_hits,
//!                  incr_hits, decr_hits, cas_hits, cas_badval
//!      departures: evicted*, reclaimed, expired_unfetched, outofmemory, moves_*
//!      flash:      flash_written, flash_written_bytes (never reset): items
//!                  written to flash by the class of the RAM header memcached
//!                  would keep for them; number_cold: live flash items placed
//!                  in those classes at `stats` time, their bytes in cold_bytes
//!                  (ClassStats::place_flash_items)
//!    sizes: live items per 32-byte bucket of memcached item size (-o track_sizes)
//! ```
//!
//! "hot" and "warm" are where S3-FIFO keeps the item: `Small` segments hold
//! items not yet read again since written (memcached's HOT), `Main` those
//! that proved themselves (memcached's WARM). Strata has no COLD or TEMP
//! queue. 64 classes x 200 bytes = 13 KiB a shard; a request touches the
//! one or two cache lines of its item's class, in memory its shard already
//! holds locked.

use crate::RelTime;

/// Where an item sits, as memcached's LRU names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    Hot,
    Warm,
}

/// One class's counters; also the summed row `stats items`/`slabs` print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounters {
    pub number_hot: u64,
    pub number_warm: u64,
    /// Items on flash, shown where memcached keeps their RAM headers: its
    /// COLD LRU of the header's class (filled in at `stats` time).
    pub number_cold: u64,
    /// Those headers' bytes (memcached counts them in `mem_requested`,
    /// which `stats items` prints as `mem_requested + cold_bytes`).
    pub cold_bytes: u64,
    /// Items written to flash whose memcached header is of this class, and
    /// those headers' bytes (the shares `place_flash_items` uses).
    pub flash_written: u64,
    pub flash_written_bytes: u64,
    /// Sum of memcached item sizes of the live items (`mem_requested`).
    pub mem_requested: u64,
    /// The most items the class has held at once: memcached keeps the
    /// pages a class took, so `stats slabs` still lists a class emptied
    /// since, with the pages its peak needed.
    pub number_max: u64,
    pub get_hits: u64,
    pub touch_hits: u64,
    pub hits_to_hot: u64,
    pub hits_to_warm: u64,
    pub cmd_set: u64,
    pub delete_hits: u64,
    pub incr_hits: u64,
    pub decr_hits: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub evicted: u64,
    /// Evicted items that had a TTL.
    pub evicted_nonzero: u64,
    /// Evicted although read since written (S3-FIFO keeps those unless the
    /// victim segment's share for kept items is used up).
    pub evicted_active: u64,
    pub evicted_unfetched: u64,
    /// Seconds since the last access of the most recently evicted item,
    /// and when that eviction happened (to pick the latest across shards).
    pub evicted_time: u32,
    pub evicted_at: RelTime,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub outofmemory: u64,
    /// Items written to flash, in their header's class (memcached moves
    /// each new header to COLD; reset by `stats reset`, unlike `flash_written`).
    pub moves_to_cold: u64,
    /// Items rewritten into `Main` from `Small` (read since written).
    pub moves_to_warm: u64,
    /// Items rewritten from `Main` into `Main` again.
    pub moves_within_lru: u64,
    /// Seconds since the oldest segment of each queue holding this class
    /// was opened (filled in by the engine at `stats` time).
    pub age_hot: u32,
    pub age_warm: u32,
}

impl ClassCounters {
    pub fn number(&self) -> u64 {
        self.number_hot + self.number_warm + self.number_cold
    }

    /// Add `other` (another shard's row) to this one.
    pub fn add(&mut self, o: &ClassCounters) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        sum!(
            number_hot, number_warm, number_cold, cold_bytes, flash_written, flash_written_bytes, mem_requested, number_max, get_hits, touch_hits, hits_to_hot, hits_to_warm, cmd_set,
            delete_hits, incr_hits, decr_hits, cas_hits, cas_badval, evicted, evicted_nonzero, evicted_active,
            evicted_unfetched, reclaimed, expired_unfetched, outofmemory, moves_to_cold, moves_to_warm, moves_within_lru
        );
        if o.evicted > 0 && o.evicted_at >= self.evicted_at {
            self.evicted_at = o.evicted_at;
            self.evicted_time = o.evicted_time;
        }
        self.age_hot = self.age_hot.max(o.age_hot);
        self.age_warm = self.age_warm.max(o.age_warm);
    }

    /// `stats reset`: every counter but the live population.
    fn reset(&mut self) {
        *self = ClassCounters {
            number_hot: self.number_hot,
            number_warm: self.number_warm,
            mem_requested: self.mem_requested,
            number_max: self.number_max,
            flash_written: self.flash_written,
            flash_written_bytes: self.flash_written_bytes,
            ..ClassCounters::default()
        };
    }
}

/// Why an evicted item counts where it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub had_ttl: bool,
    pub fetched: bool,
    /// Read since written (would have been kept but for the keep limit).
    pub active: bool,
    pub last_access: RelTime,
    pub now: RelTime,
}

/// One shard's per-class counters and size histogram.
pub struct ClassTally {
    /// Indexed by class id masked to 6 bits (ids are 0..=63), so no bounds check.
    counters: Box<[ClassCounters; 64]>,
    /// `-o track_sizes`: live items per 32-byte bucket, grown on demand.
    sizes: Option<Vec<u32>>,
}

const SIZE_BUCKET_BYTES: usize = 32;

impl ClassTally {
    pub fn new(track_sizes: bool) -> ClassTally {
        ClassTally {
            counters: Box::new([ClassCounters::default(); 64]),
            sizes: track_sizes.then(Vec::new),
        }
    }

    /// Heap bytes held (`stats memory`): the counter rows and the size
    /// histogram's capacity.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<[ClassCounters; 64]>() + self.sizes.as_ref().map_or(0, |v| v.capacity() * std::mem::size_of::<u32>())
    }

    #[inline]
    pub fn class(&mut self, cls: u8) -> &mut ClassCounters {
        &mut self.counters[usize::from(cls) & 63]
    }

    pub fn get(&self, cls: u8) -> &ClassCounters {
        &self.counters[usize::from(cls) & 63]
    }

    /// An item of memcached size `size` in class `cls` became live.
    #[inline]
    pub fn linked(&mut self, cls: u8, queue: Queue, size: usize) {
        let c = self.class(cls);
        match queue {
            Queue::Hot => c.number_hot += 1,
            Queue::Warm => c.number_warm += 1,
        }
        c.number_max = c.number_max.max(c.number_hot + c.number_warm);
        c.mem_requested += size as u64;
        if let Some(sizes) = &mut self.sizes {
            let bucket = size.div_ceil(SIZE_BUCKET_BYTES);
            if sizes.len() <= bucket {
                sizes.resize(bucket + 1, 0);
            }
            sizes[bucket] += 1;
        }
    }

    /// An item left (replaced, deleted, evicted, expired).
    #[inline]
    pub fn unlinked(&mut self, cls: u8, queue: Queue, size: usize) {
        let c = self.class(cls);
        match queue {
            Queue::Hot => c.number_hot = c.number_hot.saturating_sub(1),
            Queue::Warm => c.number_warm = c.number_warm.saturating_sub(1),
        }
        c.mem_requested = c.mem_requested.saturating_sub(size as u64);
        if let Some(sizes) = &mut self.sizes {
            if let Some(n) = sizes.get_mut(size.div_ceil(SIZE_BUCKET_BYTES)) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// A read hit (`get`, `gets`, `mg`, binary get: `touch` false) or a
    /// touch hit (`touch`, `gat`, `mg ... T`).
    #[inline]
    pub fn hit(&mut self, cls: u8, queue: Queue, touch: bool) {
        let c = self.class(cls);
        if touch {
            c.touch_hits += 1;
        } else {
            // get_hits is their sum (as memcached sums its lru_hits), made at `stats`.
            match queue {
                Queue::Hot => c.hits_to_hot += 1,
                Queue::Warm => c.hits_to_warm += 1,
            }
        }
    }

    pub fn evicted(&mut self, cls: u8, e: Eviction) {
        let now = e.now;
        let c = self.class(cls);
        c.evicted += 1;
        c.evicted_nonzero += u64::from(e.had_ttl);
        c.evicted_unfetched += u64::from(!e.fetched);
        c.evicted_active += u64::from(e.active);
        c.evicted_time = now.saturating_sub(e.last_access);
        c.evicted_at = now;
    }

    /// An item went to flash; memcached would keep a RAM header of `size`
    /// bytes in class `cls` for it.
    pub fn flash_written(&mut self, cls: u8, size: usize) {
        let c = self.class(cls);
        c.flash_written += 1;
        c.flash_written_bytes += size as u64;
        c.moves_to_cold += 1;
    }

    /// An expired (`flushed` false) or flushed item was dropped.
    pub fn reclaimed(&mut self, cls: u8, fetched: bool, flushed: bool) {
        let c = self.class(cls);
        c.reclaimed += 1;
        c.expired_unfetched += u64::from(!fetched && !flushed);
    }

    pub fn reset(&mut self) {
        for c in self.counters.iter_mut() {
            c.reset();
        }
    }

    /// Add this shard's counters into `into` (indexed by class id).
    pub fn add_to(&self, into: &mut ClassStats) {
        for (row, c) in into.classes.iter_mut().zip(self.counters.iter()) {
            row.add(&ClassCounters { get_hits: c.hits_to_hot + c.hits_to_warm, ..*c });
        }
        if let (Some(sizes), Some(total)) = (&self.sizes, &mut into.sizes) {
            if total.len() < sizes.len() {
                total.resize(sizes.len(), 0);
            }
            for (t, &n) in total.iter_mut().zip(sizes.iter()) {
                *t += u64::from(n);
            }
        }
    }
}

/// What `stats items`, `stats slabs` and `stats sizes` print, summed over
/// an engine's shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Indexed by class id (0 unused); empty when the engine keeps none.
    pub classes: Vec<ClassCounters>,
    /// `-o track_sizes`: live items per 32-byte bucket (`sizes[i]` counts
    /// items of `(i - 1) * 32 + 1 ..= i * 32` bytes); None when disabled.
    pub sizes: Option<Vec<u64>>,
}

impl ClassStats {
    pub fn empty(track_sizes: bool) -> ClassStats {
        ClassStats {
            classes: vec![ClassCounters::default(); crate::classes::MAX_CLASSES + 1],
            sizes: track_sizes.then(Vec::new),
        }
    }

    /// Show `live` items on flash as memcached shows them: as headers in
    /// RAM, in the COLD LRU (`number_cold`) of the header's class, with
    /// the header's bytes in `mem_requested`. The flash index keeps no key
    /// lengths, so the items are spread over the header classes in the
    /// shares items were written to flash in (exact when every key gives
    /// the same header class, as with keys of similar lengths).
    pub fn place_flash_items(&mut self, live: u64) {
        let total: u64 = self.classes.iter().map(|c| c.flash_written).sum();
        if total == 0 || live == 0 {
            return;
        }
        let mut placed = 0;
        let mut biggest = (0, 0);
        for (i, c) in self.classes.iter_mut().enumerate().filter(|(_, c)| c.flash_written > 0) {
            let n = (u128::from(live) * u128::from(c.flash_written) / u128::from(total)) as u64;
            c.number_cold += n;
            c.cold_bytes += (u128::from(n) * u128::from(c.flash_written_bytes) / u128::from(c.flash_written)) as u64;
            placed += n;
            if c.flash_written > biggest.1 {
                biggest = (i, c.flash_written);
            }
        }
        // What rounding left goes to the commonest class.
        let c = &mut self.classes[biggest.0];
        c.number_cold += live - placed;
        let rest = live - placed;
        c.cold_bytes += (u128::from(rest) * u128::from(c.flash_written_bytes) / u128::from(c.flash_written)) as u64;
        for c in self.classes.iter_mut() {
            c.number_max = c.number_max.max(c.number());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn population_follows_links_and_histogram_rounds_up() {
        let mut t = ClassTally::new(true);
        t.linked(1, Queue::Hot, 66);
        t.linked(1, Queue::Warm, 96);
        t.linked(2, Queue::Hot, 97);
        t.unlinked(1, Queue::Hot, 66);
        let mut s = ClassStats::empty(true);
        t.add_to(&mut s);
        assert_eq!((s.classes[1].number_hot, s.classes[1].number_warm, s.classes[1].mem_requested), (0, 1, 96));
        assert_eq!(s.classes[2].number(), 1);
        let sizes = s.sizes.unwrap();
        assert_eq!((sizes[3], sizes[4]), (1, 1), "96 is bucket 3 (96), 97 bucket 4 (128)");
    }

    #[test]
    fn flash_items_are_placed_in_their_header_classes() {
        let mut t = ClassTally::new(false);
        for _ in 0..30 {
            t.flash_written(1, 74);
        }
        for _ in 0..10 {
            t.flash_written(2, 110);
        }
        t.linked(25, Queue::Hot, 20_000);
        t.reset();
        let mut s = ClassStats::empty(false);
        t.add_to(&mut s);
        s.place_flash_items(21);
        let (a, b) = (s.classes[1], s.classes[2]);
        assert_eq!((a.number_cold, b.number_cold), (16, 5), "3:1, the rounding to the commonest");
        assert_eq!((a.number(), a.cold_bytes, b.cold_bytes, a.mem_requested), (16, 16 * 74, 5 * 110, 0));
        assert_eq!((a.number_max, s.classes[25].number()), (16, 1));
        assert_eq!(a.moves_to_cold, 0, "reset");
        let mut none = ClassStats::empty(false);
        t.add_to(&mut none);
        none.place_flash_items(0);
        assert_eq!(none.classes[1].number(), 0);
    }

    #[test]
    fn reset_keeps_population_and_latest_eviction_wins() {
        let mut a = ClassTally::new(false);
        a.linked(5, Queue::Hot, 300);
        a.hit(5, Queue::Hot, false);
        a.evicted(5, Eviction { had_ttl: true, fetched: false, active: false, last_access: 10, now: 20 });
        let mut b = ClassTally::new(false);
        b.evicted(5, Eviction { had_ttl: false, fetched: true, active: true, last_access: 28, now: 30 });
        let mut s = ClassStats::empty(false);
        a.add_to(&mut s);
        b.add_to(&mut s);
        let c = s.classes[5];
        assert_eq!((c.evicted, c.evicted_nonzero, c.evicted_unfetched, c.evicted_active), (2, 1, 1, 1));
        assert_eq!(c.evicted_time, 2, "the most recent eviction's idle time");
        a.reset();
        assert_eq!(a.get(5).number(), 1);
        assert_eq!(a.get(5).get_hits, 0);
        assert_eq!(a.get(5).evicted, 0);
    }
}
