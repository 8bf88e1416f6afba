//! The flash tier's settings: memcached 1.6.45's `-o ext_*` options, as plain
//! data the CLI fills and the engine reads (`SegStore::attach_flash`).
//!
//! Defaults and units are memcached's (`storage.c`, `storage_init_config`
//! and `storage_read_config`):
//!
//! ```text
//!  option             field               default          unit / note
//!  ext_path=F:S[:B]   paths               (none)           S with m|g|t|p suffix -> size_bytes
//!  ext_page_size      page_size_bytes     64 MiB           option given in MiB; not given, smaller
//!                                                          pages for files of under 64 (effective_page_size_bytes)
//!  ext_wbuf_size      wbuf_size_bytes     4 MiB            option given in MiB
//!  ext_threads        threads             1                I/O threads (epoll engine)
//!  ext_io_depth       io_depth            1                reads in flight per I/O thread
//!  ext_item_size      tunables.item_size  64 (memcached 512) bytes; smaller items are not written
//!  ext_item_age       tunables.item_age   u32::MAX         seconds idle to go with no memory pressure; MAX = never
//!  ext_low_ttl        tunables.low_ttl    0                seconds
//!  ext_recache_rate   tunables.recache_rate 2000           one flash hit in N goes back to RAM
//!  ext_compact_under  tunables.compact_under 0 -> 1% of pages (used: at least 3)
//!  ext_drop_under     tunables.drop_under    0 -> 1% of pages (used: at least 3)
//!  ext_max_sleep      tunables.max_sleep  1,000,000        microseconds
//!  ext_max_frag       tunables.max_frag   0.8              fraction of a page
//!  ext_drop_unread    tunables.drop_unread false           (flag, no value)
//! ```
//!
//! Strata's small store (`seg/flash/small/`), fixed at start:
//!
//! ```text
//!  ext_small_item_max small_item_max      512              key + value bytes; 0: no small store
//!  ext_log_share      log_percent         13               percent of the files the sets leave to the log
//!  ext_set_size       set_size_bytes      4096             bytes: 4096, 8192 or 16384
//!  ext_set_bloom_bits set_bloom_bits      320              Bloom filter bits per set
//!  ext_set_threshold  set_threshold       1                new items a set must get in a rewrite to take them
//! ```
//!
//! And the server's bound on flash read-ahead (`strata-server`'s
//! `read_ahead_budget.rs`), fixed at start:
//!
//! ```text
//!  ext_read_ahead_max read_ahead_max_bytes None -> -m/64, at least 1 MiB   bytes; 0: no read-ahead
//! ```
//!
//! The nine tunables can change at run time (memcached's `extstore <name>
//! <value>` command), so they live in [`ExtTunables`], a set of atomics the
//! server and the engine share through an `Arc`: the command writes them,
//! `stats settings` and the engine read them (relaxed loads; a change takes
//! effect at the next item the engine looks at). The rest is fixed at start.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// memcached's default `ext_page_size`: 64 MiB.
pub const DEFAULT_PAGE_SIZE_BYTES: u64 = 64 << 20;
/// Pages, and the smallest page, [`ExtConfig::effective_page_size_bytes`]
/// aims for when the files hold fewer than 2 pages of an `ext_page_size`
/// given, or than [`AUTO_PAGE_COUNT`] of the default.
pub const SHRUNK_PAGE_COUNT: u64 = 8;
pub const AUTO_PAGE_COUNT: u64 = 64;
pub const SHRUNK_PAGE_MIN_BYTES: u64 = 1 << 20;
/// memcached's default `ext_wbuf_size`: 4 MiB.
pub const DEFAULT_WBUF_SIZE_BYTES: u64 = 4 << 20;
/// Strata's default `ext_item_size` (memcached's is
/// [`MEMCACHED_ITEM_SIZE_BYTES`]): an item (memcached's item size: a 48-byte
/// header, key, flags suffix, value, CAS) of at least 64 bytes may go to
/// flash, which is every item with at least 5 bytes of key and value.
///
/// Chosen by measurement (issue 33): on flash an item costs RAM only for its
/// index entry, 12 bytes at 84% full, 14.3 bytes an item (13,691,520 bytes
/// of `extstore_index_bytes` for 958,458 items on flash); in RAM it costs its
/// segment item (an 8-byte header, key and value) and ~11 bytes of index,
/// 72.3 bytes for a 20-byte key and a 32-byte value (docs/bench/store.md),
/// 19 + key + value bytes in general. So flash is the cheaper place in RAM
/// for every item memcached can store (its smallest, 1 byte of key and
/// none of value, is 60 bytes); memcached's 512 exists because its RAM
/// header for an item on flash is 80-100 bytes. 64 is the first round
/// figure above memcached's smallest item. 20,000,000 values of 100 bytes
/// at `-m 1024`: 39.8% hits with 512, 100% with 64.
pub const DEFAULT_ITEM_SIZE_BYTES: u32 = 64;
/// memcached's default `ext_item_size` (accepted, and shown as set).
pub const MEMCACHED_ITEM_SIZE_BYTES: u32 = 512;
/// memcached's `ext_item_age` default: items go to flash only under memory pressure.
pub const ITEM_AGE_UNLIMITED: u32 = u32::MAX;
/// memcached's default `ext_recache_rate`.
pub const DEFAULT_RECACHE_RATE: u32 = 2000;
/// memcached's default `ext_max_sleep`, microseconds.
pub const DEFAULT_MAX_SLEEP_US: u32 = 1_000_000;
/// memcached's default `ext_max_frag`.
pub const DEFAULT_MAX_FRAG: f64 = 0.8;
/// Items of at most this many bytes of key and value go to the small store.
pub const DEFAULT_SMALL_ITEM_MAX: usize = 512;
/// The largest `ext_small_item_max`: an item must fit a 4 KiB log block.
pub const MAX_SMALL_ITEM: usize = 4000;
/// The log's share of the flash files, percent (the sets take the rest).
pub const DEFAULT_LOG_PERCENT: u32 = 13;
/// A set's size.
pub const DEFAULT_SET_SIZE_BYTES: usize = 4096;
/// Bloom filter bits per set.
pub const DEFAULT_SET_BLOOM_BITS: u32 = 320;

/// The optional third field of `ext_path` (memcached's `PAGE_BUCKET_*`):
/// which kind of page the file's free pages go to first. Strata keeps one
/// FIFO of flash segments per file, so the bucket is accepted, shown in
/// `stats extstore` (`free_bucket`), and otherwise has no effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExtBucket {
    #[default]
    Default,
    Compact,
    LowTtl,
    Chunked,
    ColdCompact,
    Old,
}

impl ExtBucket {
    /// memcached's name in `ext_path=F:S:name`.
    pub fn parse(name: &str) -> Option<ExtBucket> {
        Some(match name {
            "default" => ExtBucket::Default,
            "compact" => ExtBucket::Compact,
            "lowttl" => ExtBucket::LowTtl,
            "chunked" => ExtBucket::Chunked,
            "coldcompact" => ExtBucket::ColdCompact,
            "old" => ExtBucket::Old,
            _ => return None,
        })
    }

    /// memcached's number for the bucket (`PAGE_BUCKET_DEFAULT` = 0, ...),
    /// as `stats extstore` prints it.
    pub fn number(self) -> u32 {
        match self {
            ExtBucket::Default => 0,
            ExtBucket::Compact => 1,
            ExtBucket::Chunked => 2,
            ExtBucket::LowTtl => 3,
            ExtBucket::Old => 4,
            ExtBucket::ColdCompact => 5,
        }
    }
}

/// One `ext_path=FILE:SIZE[:BUCKET]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtPath {
    pub path: PathBuf,
    /// SIZE with its unit applied (`64m` = 64 MiB; m, g, t, p as memcached).
    pub size_bytes: u64,
    pub bucket: ExtBucket,
}

impl ExtPath {
    /// memcached's `storage_conf_parse`: `FILE:SIZE[:BUCKET]`, SIZE a number
    /// with a unit letter (m, g, t or p, either case). The error is
    /// memcached's message for the bad part.
    pub fn parse(spec: &str) -> Result<ExtPath, String> {
        let mut parts = spec.split(':');
        let path = parts.next().filter(|p| !p.is_empty()).ok_or_else(|| "ext_path requires a file path".to_string())?;
        let size = parts
            .next()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| "must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)".to_string())?;
        let bad_size = || "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)".to_string();
        let unit = size.chars().last().ok_or_else(bad_size)?.to_ascii_lowercase();
        let multiplier: u64 = match unit {
            'm' => 1 << 20,
            'g' => 1 << 30,
            't' => 1 << 40,
            'p' => 1 << 50,
            _ => return Err(bad_size()),
        };
        // memcached uses atoi: leading digits, anything else is 0.
        let digits: String = size[..size.len() - 1].chars().take_while(|c| c.is_ascii_digit()).collect();
        let base: u64 = digits.parse().unwrap_or(0);
        let bucket = match parts.next() {
            None => ExtBucket::Default,
            Some(name) => ExtBucket::parse(name).ok_or_else(|| format!("Unknown extstore bucket: {name}"))?,
        };
        Ok(ExtPath { path: PathBuf::from(path), size_bytes: base.saturating_mul(multiplier), bucket })
    }
}

/// The run-time tunables (`extstore <name> <value>`), shared between the
/// server and the engine. Every field is a relaxed atomic.
#[derive(Debug)]
pub struct ExtTunables {
    /// `ext_item_size`: items (memcached's item size) smaller than this
    /// stay in RAM and are evicted as usual.
    pub item_size: AtomicU32,
    /// `ext_item_age`: items idle more than this go to flash with no memory
    /// pressure (the idle writer, `seg/flash/age.rs`); under pressure any
    /// age goes, as in memcached. [`ITEM_AGE_UNLIMITED`]: only under pressure.
    pub item_age: AtomicU32,
    /// `ext_low_ttl`: items with fewer seconds left to live stay in RAM
    /// (memcached sends them to a separate page bucket; Strata does not
    /// write them at all: they would expire before the page is reclaimed).
    pub low_ttl: AtomicU32,
    /// `ext_recache_rate`: one flash hit in this many brings the item back
    /// into RAM (0: never).
    pub recache_rate: AtomicU32,
    /// `ext_compact_under`: the log's compaction empties pages while fewer
    /// than this many are ready to write (0 at start: 1% of pages, at
    /// least 1; the compactor uses at least 3: `tier/compaction.rs`).
    pub compact_under: AtomicU32,
    /// `ext_drop_under`: when fewer pages than this are ready and none is
    /// under `ext_max_frag`, the compaction evicts the oldest page, moving
    /// only its records read since written (0 at start: 1% of pages, at
    /// least 1; used: at least 3).
    pub drop_under: AtomicU32,
    /// `ext_max_sleep`, microseconds: longest pause of the background writer.
    pub max_sleep: AtomicU32,
    /// `ext_max_frag` as `f64::to_bits`; read with [`ExtTunables::max_frag`].
    max_frag_bits: AtomicU64,
    /// `ext_drop_unread`: a page evicted keeps none of its unread items
    /// (Strata's compaction moves only read items off a page it evicts
    /// anyway; accepted and shown).
    pub drop_unread: AtomicBool,
}

impl Default for ExtTunables {
    fn default() -> Self {
        ExtTunables {
            item_size: AtomicU32::new(DEFAULT_ITEM_SIZE_BYTES),
            item_age: AtomicU32::new(ITEM_AGE_UNLIMITED),
            low_ttl: AtomicU32::new(0),
            recache_rate: AtomicU32::new(DEFAULT_RECACHE_RATE),
            compact_under: AtomicU32::new(0),
            drop_under: AtomicU32::new(0),
            max_sleep: AtomicU32::new(DEFAULT_MAX_SLEEP_US),
            max_frag_bits: AtomicU64::new(DEFAULT_MAX_FRAG.to_bits()),
            drop_unread: AtomicBool::new(false),
        }
    }
}

/// One `extstore <name> <value>` change (memcached's `process_extstore_command`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExtTunable {
    ItemSize(u32),
    ItemAge(u32),
    LowTtl(u32),
    RecacheRate(u32),
    CompactUnder(u32),
    DropUnder(u32),
    MaxSleep(u32),
    MaxFrag(f64),
    DropUnread(bool),
}

impl ExtTunables {
    pub fn max_frag(&self) -> f64 {
        f64::from_bits(self.max_frag_bits.load(Ordering::Relaxed))
    }

    pub fn set(&self, change: ExtTunable) {
        let r = Ordering::Relaxed;
        match change {
            ExtTunable::ItemSize(v) => self.item_size.store(v, r),
            ExtTunable::ItemAge(v) => self.item_age.store(v, r),
            ExtTunable::LowTtl(v) => self.low_ttl.store(v, r),
            ExtTunable::RecacheRate(v) => self.recache_rate.store(v, r),
            ExtTunable::CompactUnder(v) => self.compact_under.store(v, r),
            ExtTunable::DropUnder(v) => self.drop_under.store(v, r),
            ExtTunable::MaxSleep(v) => self.max_sleep.store(v, r),
            ExtTunable::MaxFrag(v) => self.max_frag_bits.store(v.to_bits(), r),
            ExtTunable::DropUnread(v) => self.drop_unread.store(v, r),
        }
    }
}

/// Every `ext_*` option. `paths` empty means no flash tier.
#[derive(Clone, Debug)]
pub struct ExtConfig {
    pub paths: Vec<ExtPath>,
    /// `ext_page_size`: the unit flash space is allocated and reclaimed in
    /// (a flash segment). memcached takes MiB on the command line.
    pub page_size_bytes: u64,
    /// `ext_page_size` was not given: pages shrink until the files hold
    /// [`AUTO_PAGE_COUNT`] (`effective_page_size_bytes`).
    pub page_size_auto: bool,
    /// `ext_wbuf_size`: one write buffer; items are packed into it in RAM
    /// and written to flash whole. memcached refuses `-I` above it.
    pub wbuf_size_bytes: u64,
    /// `ext_threads`: I/O threads for flash reads under the epoll engine.
    pub threads: u32,
    /// `ext_io_depth`: reads an I/O thread keeps in flight.
    pub io_depth: u32,
    /// Shared with the server (`extstore` command, `stats settings`).
    pub tunables: Arc<ExtTunables>,
    /// `ext_small_item_max`: items of at most this many bytes of key and
    /// value go to the small store (0: none).
    pub small_item_max: usize,
    /// `ext_log_share`: percent of the files the small store's sets leave
    /// to the log.
    pub log_percent: u32,
    /// `ext_set_size`: bytes of a set (4, 8 or 16 KiB).
    pub set_size_bytes: usize,
    /// `ext_set_bloom_bits`: Bloom filter bits per set.
    pub set_bloom_bits: u32,
    /// `ext_set_threshold`: a rewrite moves new items into a set only if
    /// at least this many go there (items read since written go anyway).
    pub set_threshold: u32,
    /// `ext_read_ahead_max`: bytes the server's flash read-ahead may hold
    /// across all connections (None: its default, from `-m`; 0: none).
    pub read_ahead_max_bytes: Option<u64>,
}

impl Default for ExtConfig {
    fn default() -> Self {
        ExtConfig {
            paths: Vec::new(),
            page_size_bytes: DEFAULT_PAGE_SIZE_BYTES,
            page_size_auto: true,
            wbuf_size_bytes: DEFAULT_WBUF_SIZE_BYTES,
            threads: 1,
            io_depth: 1,
            tunables: Arc::new(ExtTunables::default()),
            small_item_max: DEFAULT_SMALL_ITEM_MAX,
            log_percent: DEFAULT_LOG_PERCENT,
            set_size_bytes: DEFAULT_SET_SIZE_BYTES,
            set_bloom_bits: DEFAULT_SET_BLOOM_BITS,
            set_threshold: 1,
            read_ahead_max_bytes: None,
        }
    }
}

impl ExtConfig {
    pub fn enabled(&self) -> bool {
        !self.paths.is_empty()
    }

    /// The page size the flash tier cuts its files into: `ext_page_size`
    /// as given, unless the files hold fewer than 2 such pages (memcached
    /// runs with one page; Strata needs a page to fill while another is
    /// emptied): then it is halved until they hold [`SHRUNK_PAGE_COUNT`]
    /// pages or a page is [`SHRUNK_PAGE_MIN_BYTES`]. Not given, the default
    /// 64 MiB is halved until the files hold [`AUTO_PAGE_COUNT`] pages (or
    /// a page is 1 MiB): the compactor keeps a few pages ready and the
    /// small store a margin and its extents, which 4 pages of a 256 MiB
    /// file left no room for (issue 63: its log was lost at a restart).
    /// So `ext_path=F:256m` gives 64 pages of 4 MiB, `F:4g` and more the
    /// default 64 MiB.
    pub fn effective_page_size_bytes(&self) -> u64 {
        let pages = |size: u64| self.paths.iter().map(|p| p.size_bytes / size.max(1)).sum::<u64>();
        let (enough, target) = if self.page_size_auto { (AUTO_PAGE_COUNT, AUTO_PAGE_COUNT) } else { (2, SHRUNK_PAGE_COUNT) };
        let mut size = self.page_size_bytes;
        if pages(size) >= enough {
            return size;
        }
        while pages(size) < target && size / 2 >= SHRUNK_PAGE_MIN_BYTES && (size / 2).is_multiple_of(4096) {
            size /= 2;
        }
        size
    }

    /// The small store's settings, checked: the message names the bad one.
    pub fn check_small(&self) -> Result<(), String> {
        if self.small_item_max > MAX_SMALL_ITEM {
            return Err(format!("ext_small_item_max: {} is over {MAX_SMALL_ITEM} bytes (an item must fit a 4 KiB block)", self.small_item_max));
        }
        if !matches!(self.set_size_bytes, 4096 | 8192 | 16384) {
            return Err(format!("ext_set_size: {} bytes is not 4096, 8192 or 16384", self.set_size_bytes));
        }
        if !(1..=90).contains(&self.log_percent) {
            return Err(format!("ext_log_share: {}% is not between 1 and 90", self.log_percent));
        }
        if !(64..=8192).contains(&self.set_bloom_bits) {
            return Err(format!("ext_set_bloom_bits: {} is not between 64 and 8192", self.set_bloom_bits));
        }
        if self.set_threshold == 0 || self.set_threshold > 64 {
            return Err(format!("ext_set_threshold: {} is not between 1 and 64", self.set_threshold));
        }
        Ok(())
    }

    /// memcached's start-time fill-in of `ext_compact_under` and
    /// `ext_drop_under` left at 0: 1% of the pages (at least 1).
    pub fn fill_page_defaults(&self, page_count: u64) {
        let one_percent = ((page_count as f64 * 0.01) as u32).max(1);
        let t = &self.tunables;
        if t.compact_under.load(Ordering::Relaxed) == 0 {
            t.compact_under.store(one_percent, Ordering::Relaxed);
            t.drop_under.store(one_percent, Ordering::Relaxed);
        }
        if t.drop_under.load(Ordering::Relaxed) == 0 {
            t.drop_under.store(one_percent, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_under_two_pages_get_smaller_pages() {
        let with = |sizes: &[u64], page: u64| ExtConfig {
            paths: sizes.iter().map(|&s| ExtPath { path: "/f".into(), size_bytes: s << 20, bucket: ExtBucket::Default }).collect(),
            page_size_bytes: page << 20,
            page_size_auto: false,
            ..ExtConfig::default()
        }
        .effective_page_size_bytes()
            >> 20;
        assert_eq!(with(&[64], 64), 8, "maxconns.t's ext_path=F:64m: 8 pages of 8 MiB");
        assert_eq!(with(&[100], 64), 8, "one page and a bit: 12 pages of 8 MiB");
        assert_eq!(with(&[128], 64), 64, "two pages: as asked");
        assert_eq!(with(&[64, 64], 64), 64, "two files of one page each");
        assert_eq!(with(&[2], 2), 1, "down to 1 MiB pages at most");
        assert_eq!(with(&[64], 8), 8, "8 pages already");
    }

    #[test]
    fn the_default_page_size_leaves_files_64_pages() {
        let auto = |mib: u64| {
            let c = ExtConfig { paths: vec![ExtPath { path: "/f".into(), size_bytes: mib << 20, bucket: ExtBucket::Default }], ..ExtConfig::default() };
            (c.effective_page_size_bytes() >> 20, (mib << 20) / c.effective_page_size_bytes())
        };
        assert_eq!(auto(256), (4, 64), "256 MiB: 64 pages of 4 MiB");
        assert_eq!(auto(1024), (16, 64));
        assert_eq!(auto(4096), (64, 64), "4 GiB: the default 64 MiB");
        assert_eq!(auto(45 << 10), (64, 720), "larger files: 64 MiB");
        assert_eq!(auto(8), (1, 8), "pages of 1 MiB at least");
    }

    #[test]
    fn ext_path_parses_as_memcached() {
        let p = ExtPath::parse("/tmp/f:64m").expect("valid");
        assert_eq!(p, ExtPath { path: "/tmp/f".into(), size_bytes: 64 << 20, bucket: ExtBucket::Default });
        assert_eq!(ExtPath::parse("/tmp/f:2G:compact").expect("valid").size_bytes, 2 << 30);
        assert_eq!(ExtPath::parse("/tmp/f:2G:compact").expect("valid").bucket, ExtBucket::Compact);
        assert!(ExtPath::parse("/tmp/f").is_err());
        assert!(ExtPath::parse("/tmp/f:64").is_err());
        assert!(ExtPath::parse("/tmp/f:64k").is_err());
        assert_eq!(ExtPath::parse("/tmp/f:1m:what").unwrap_err(), "Unknown extstore bucket: what");
    }

    #[test]
    fn tunables_default_and_set() {
        let t = ExtTunables::default();
        assert_eq!(t.item_size.load(Ordering::Relaxed), DEFAULT_ITEM_SIZE_BYTES);
        assert_eq!(t.item_age.load(Ordering::Relaxed), u32::MAX);
        assert_eq!(t.recache_rate.load(Ordering::Relaxed), 2000);
        assert_eq!(t.max_frag(), 0.8);
        t.set(ExtTunable::MaxFrag(0.5));
        t.set(ExtTunable::ItemSize(100));
        assert_eq!(t.max_frag(), 0.5);
        assert_eq!(t.item_size.load(Ordering::Relaxed), 100);
        let c = ExtConfig::default();
        c.fill_page_defaults(32);
        assert_eq!(c.tunables.compact_under.load(Ordering::Relaxed), 1);
        c.fill_page_defaults(1000);
        assert_eq!(c.tunables.compact_under.load(Ordering::Relaxed), 1, "only a value left at 0 is filled in");
    }
}
