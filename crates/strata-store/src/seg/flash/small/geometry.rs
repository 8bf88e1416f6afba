//! Where a key lives in the small store: its shard (the top bits of its
//! hash, as everywhere in the store), its partition within the shard, and
//! its set within the partition, both from the low 32 bits (h32).
//!
//! ```text
//!  x = h32 * parts_per_shard                    (64-bit product)
//!  partition = x >> 32                          (fastrange: monotone in h32)
//!  frac      = x as u32                         (h32's place inside it)
//!  set       = frac * sets >> 32                (monotone in frac)
//! ```
//!
//! A partition is a range of h32 (`range`), so its index entries are one
//! stretch of the small index; a set is a range of `frac`, so a rewrite
//! that changes the number of sets of a partition maps old sets to new
//! ones in order, and reads old and writes new sets front to back.
//!
//! How many partitions (fixed at start, from the files and `-m`): enough
//! that one rewrite cycle's log blocks of a partition fill at most half its
//! ring (`index::RING_SLOTS`), and that an extent spans at most 4 pages;
//! but their directory (`dir.rs`, 21 KiB each: a ring of 8-byte slots and
//! an open 4 KiB log block) takes at most a 32nd of `-m`. 45 GiB of flash
//! at `-m 1024`: 1,504 partitions, 31 MiB. A partition whose ring fills
//! before its turn is merged early (more writes, nothing lost).

use super::index::RING_SLOTS;
use super::summary::{max_records, Shape};

/// A log block's size: the unit a key's read reads when it is in the log.
pub const LOG_BLOCK: usize = 4096;

/// The small store's shape, fixed at start.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub parts_per_shard: u32,
    pub shards: usize,
    pub set_bytes: usize,
    pub shape: Shape,
    /// Sets a partition may have (the file's share for sets, split evenly).
    pub max_sets: u32,
    /// Key + value bytes at most for an item to go to the small store.
    pub item_max: usize,
    /// A set holding fewer new items than this after a rewrite takes none
    /// of them (`ext_set_threshold`; read items go in anyway).
    pub threshold: u32,
    /// Pages the log's writes leave to the rewrites (`Inner::stream_reserve`):
    /// room for one partition's new extent.
    pub reserve_pages: u32,
}

/// Pages from the log's tail within which a partition's data is due for
/// a rewrite (`sched.rs`): a twentieth of the pages, at least 3.
pub fn margin_pages(pages: u64) -> u64 {
    (pages / 20).max(3)
}

/// A key's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub part: usize,
    /// Where h32 lies inside the partition.
    pub frac: u32,
}

/// The sets' share of the file is 1 - log share; the target fill of a set
/// when the partition may grow.
pub const TARGET_FILL_PERCENT: usize = 75;

/// The small store starts only if its sets can take at least 1/this of
/// the file (`Geometry::fits`).
pub const MIN_SETS_SHARE: u64 = 4;

impl Geometry {
    /// The geometry for `file_bytes` of flash in pages of `page_bytes`,
    /// `shards` shards, sets of `set_bytes`, and the log's share of the
    /// file in percent.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        file_bytes: u64,
        page_bytes: u64,
        memory_bytes: u64,
        shards: usize,
        set_bytes: usize,
        bloom_bits: u32,
        log_percent: u32,
        item_max: usize,
        threshold: u32,
    ) -> Geometry {
        let pages = file_bytes / page_bytes.max(1);
        let usable = page_bytes - LOG_BLOCK as u64;
        let set_share = file_bytes / 100 * u64::from(100 - log_percent.min(95));
        let log_share = file_bytes - set_share;
        // The log's tail margin (`sched.rs`), a spare page, and room for a
        // partition's new extent beside its old one stay out of the sets.
        let reserved = (margin_pages(pages) + 2) * usable;
        let set_share = set_share.min(pages.saturating_mul(usable).saturating_sub(reserved) / 10 * 9);
        // An extent within 4 pages; a cycle's log blocks (the log's share)
        // filling at most half of a ring; the directories in a 32nd of -m.
        let by_extent = set_share.div_ceil(page_bytes * 4);
        let by_ring = log_share.div_ceil((RING_SLOTS / 2 * LOG_BLOCK) as u64);
        let by_memory = memory_bytes / 32 / super::dir::stride() as u64;
        let parts = by_extent.max(by_ring).min(by_memory).max(shards as u64);
        let parts_per_shard = parts.div_ceil(shards as u64).clamp(1, 1 << 16) as u32;
        let total_parts = u64::from(parts_per_shard) * shards as u64;
        // An extent's sets span 12 pages at most (16 pieces with its filters).
        let by_pages = (page_bytes - LOG_BLOCK as u64) / set_bytes as u64 * 12;
        let mut max_sets = (set_share / set_bytes as u64 / total_parts).min(by_pages).clamp(1, u64::from(u32::MAX)) as u32;
        let extent_bytes = |sets: u32| u64::from(sets) * set_bytes as u64 + Shape::new(bloom_bits, set_bytes, 1).bloom_bytes(sets as usize) as u64;
        let extent_pages = |sets: u32| extent_bytes(sets).div_ceil(usable);
        // Every extent at its largest, a rewrite's new extent beside its
        // old one, the tail's margin, a spare page and the log's share fit
        // the file, a tenth of the rest left for pages that extents share
        // with ones already let go (a page is free once all it holds is).
        // Where they did not (a small file, a small log share), no page
        // was left for a rewrite and the log's tail stayed blocked for
        // good. (Counting each extent on whole pages of its own instead
        // left one set a partition wherever partitions outnumber pages:
        // 1,504 on the 720 of 45 GiB at -m 1024.)
        let log_pages = log_share.div_ceil(page_bytes.max(1));
        let room = pages.saturating_sub(margin_pages(pages) + 2 + log_pages);
        while max_sets > 1 && total_parts * extent_bytes(max_sets) > room.saturating_sub(extent_pages(max_sets) + 1) * usable / 10 * 9 {
            max_sets = max_sets - max_sets / 16 - 1;
        }
        let reserve_pages = (extent_pages(max_sets) + 1) as u32;
        // Probes for a set at the target fill of ~90-byte records.
        let expected = (set_bytes * TARGET_FILL_PERCENT / 100 / 90).clamp(1, max_records(set_bytes));
        Geometry {
            parts_per_shard,
            shards,
            set_bytes,
            shape: Shape::new(bloom_bits, set_bytes, expected),
            max_sets,
            item_max,
            threshold,
            reserve_pages,
        }
    }

    pub fn parts(&self) -> usize {
        self.parts_per_shard as usize * self.shards
    }

    /// Bytes every partition's sets take at their largest.
    pub fn sets_bytes(&self) -> u64 {
        self.parts() as u64 * u64::from(self.max_sets) * self.set_bytes as u64
    }

    /// Whether the sets can take at least [`MIN_SETS_SHARE`] of a file of
    /// `file_bytes`: where they cannot (too few pages for the log's share,
    /// its margin and a rewrite's extent beside the sets), the small store
    /// is not started and small items stay in the larger items' log.
    pub fn fits(&self, file_bytes: u64) -> bool {
        self.sets_bytes() >= file_bytes / MIN_SETS_SHARE
    }

    /// The partition (within its shard) and the place in it of `hash`.
    pub fn place(&self, hash: u64) -> Place {
        let x = u64::from(hash as u32) * u64::from(self.parts_per_shard);
        Place { part: (x >> 32) as usize, frac: x as u32 }
    }

    /// The h32 range of partition `part` (within a shard).
    pub fn range(&self, part: usize) -> (u32, u32) {
        let n = u64::from(self.parts_per_shard);
        let lo = ((part as u64) << 32).div_ceil(n);
        let hi = ((part as u64 + 1) << 32).div_ceil(n) - 1;
        (lo as u32, hi.min(u64::from(u32::MAX)) as u32)
    }

    /// Blocks of 4 KiB a set takes.
    pub fn set_units(&self) -> usize {
        self.set_bytes / LOG_BLOCK
    }

    pub fn max_set_records(&self) -> usize {
        max_records(self.set_bytes)
    }

    /// Summary bytes an item in a set costs at the target fill of ~90-byte
    /// records, in 1/1024 bytes (`budget.rs`' reserve for the log's items).
    pub fn summary_per_item_1024(&self) -> u64 {
        let expected = (self.set_bytes * TARGET_FILL_PERCENT / 100 / 90).clamp(1, self.max_set_records());
        (self.shape.bytes_per_set() as u64 * 1024).div_ceil(expected as u64)
    }
}

/// The set of `frac` among `sets`.
pub fn set_of(frac: u32, sets: u32) -> usize {
    ((u64::from(frac) * u64::from(sets)) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_ranges_and_sets_are_ranges_inside_them() {
        let g = Geometry::new(45 << 30, 64 << 20, 1 << 30, 32, 4096, 320, 13, 512, 1);
        assert!(g.parts() >= 1200 && g.parts() <= 1600, "{} partitions", g.parts());
        assert!(u64::from(g.max_sets) * 4096 <= 4 * (64 << 20), "an extent within 4 pages");
        let mut x = 3u64;
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let hash = x ^ (x >> 17);
            let p = g.place(hash);
            let (lo, hi) = g.range(p.part);
            assert!((lo..=hi).contains(&(hash as u32)), "{hash:x} in partition {}", p.part);
        }
        for part in 0..g.parts_per_shard as usize - 1 {
            assert_eq!(g.range(part).1.wrapping_add(1), g.range(part + 1).0, "partitions tile h32");
        }
        assert_eq!(g.range(0).0, 0);
        assert_eq!(g.range(g.parts_per_shard as usize - 1).1, u32::MAX);
        // Doubling the sets splits each set in two, in order.
        for frac in [0u32, 1, 1 << 31, u32::MAX, 123_456_789] {
            assert_eq!(set_of(frac, 200) / 2, set_of(frac, 100));
            assert!(set_of(frac, 7) < 7);
        }
        let small = Geometry::new(2 << 30, 64 << 20, 64 << 20, 4, 4096, 320, 13, 512, 1);
        assert!(small.parts() >= 4 && small.parts() <= 96, "{small:?}");
        let tiny = Geometry::new(16 << 20, 64 << 10, 2 << 20, 4, 4096, 320, 13, 512, 1);
        assert_eq!(tiny.parts(), 4, "{tiny:?}");
        // 8 pages: the sets leave the margin and a spare extent free.
        let eight = Geometry::new(64 << 20, 8 << 20, 16 << 20, 4, 4096, 320, 13, 512, 1);
        let sets_pages = (u64::from(eight.max_sets) * 4 * 4096).div_ceil(8 << 20);
        assert!(sets_pages + 3 + u64::from(eight.reserve_pages) <= 8, "{eight:?}: {sets_pages} pages of sets");
        // A small file and a small log share (the simulator's jam: 128 pages
        // of 1 MiB, 5% of log): the extents at their largest, a new
        // extent's pages, the margin and the log's pages fit the file.
        for log in [5, 13, 25] {
            let g = Geometry::new(128 << 20, 1 << 20, 8 << 20, 4, 4096, 320, log, 512, 1);
            let extents = g.parts() as u64 * (u64::from(g.max_sets) * 4096 + Shape::new(320, 4096, 1).bloom_bytes(g.max_sets as usize) as u64);
            let log_pages = (128u64 << 20).div_ceil(100).saturating_mul(u64::from(log)).div_ceil(1 << 20);
            let pages = extents.div_ceil(1 << 20) + u64::from(g.reserve_pages) + margin_pages(128) + 2 + log_pages;
            assert!(pages <= 128, "log {log}%: {pages} pages: {g:?}");
            assert!(extents >= (128 << 20) / 100 * (90 - 2 * u64::from(log)) / 2, "log {log}%: sets of {extents} bytes: {g:?}");
        }
        // 4 pages of 64 MiB (ext_page_size=64 given, a 256 MiB file): one
        // set a partition, which a merge would fill and drop the rest of:
        // no small store. The default pages (64 of 4 MiB) leave room.
        let four = Geometry::new(256 << 20, 64 << 20, 64 << 20, 4, 4096, 320, 13, 512, 1);
        assert!(!four.fits(256 << 20), "{four:?}");
        let auto = Geometry::new(256 << 20, 4 << 20, 64 << 20, 4, 4096, 320, 13, 512, 1);
        assert!(auto.fits(256 << 20), "{auto:?}: {} bytes of sets", auto.sets_bytes());
        // More partitions than pages (the issue's node, and a quarter of
        // it): the sets still take most of the file.
        for (file, memory) in [(45u64 << 30, 1u64 << 30), (12 << 30, 256 << 20)] {
            let g = Geometry::new(file, 64 << 20, memory, 32, 4096, 320, 13, 512, 1);
            assert!(g.parts() as u64 > file / (64 << 20), "{g:?}");
            let sets = g.parts() as u64 * u64::from(g.max_sets) * 4096;
            assert!(sets >= file / 100 * 65, "sets of {sets} bytes in {file}: {g:?}");
        }
    }
}
