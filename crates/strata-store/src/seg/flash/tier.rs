//! The flash device side: the `ext_path` files cut into pages (flash
//! segments of `ext_page_size`), the write buffer, and the FIFO of pages.
//!
//! ```text
//!  files:  ext_path 0: │ page 0 │ page 1 │ ... │      ext_path 1: │ page k │ ...
//!  page:   │ header block (4 KiB) │ records ... (written one write buffer at a time)
//!  header: magic "STRFLASH" │ page u32 │ version u32 │ secret u64 │ check u32
//!  wbuf:   one store-wide buffer of ext_wbuf_size (counted in -m), filled under
//!          its mutex by evicting shards, written with one aligned pwrite
//!          (O_DIRECT when the filesystem allows it) when full.
//!  pages:  Free ─► Open (the one the wbuf fills) ─► Sealed (FIFO) ─► reclaimed
//!          (oldest first, when no page is free): its version goes up, which
//!          makes every index entry and record on it stale at once.
//! ```
//!
//! Lock order: a shard's mutex, then the writer's (never the other way), so
//! evicting shards can write while readers check other shards.
//!
//! A write error (or a write that did not complete) counts `write_errors`,
//! retires the page (new version: its records are never served) and makes
//! the items that were in the buffer misses; new items keep going to the
//! next page. When no page can be opened, items are evicted as without
//! flash and counted in `write_fallbacks`.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_64;

use super::index::{MAX_BLOCKS, MAX_PAGES, MAX_PAGE_BYTES};
use super::record;
use crate::ext_config::ExtTunables;
use crate::flash_read::{FlashBuf, FLASH_ALIGN_BYTES};
use crate::{ExtConfig, ExtPageStats, ExtStats};

pub const BLOCK: u64 = FLASH_ALIGN_BYTES as u64;
const PAGE_MAGIC: &[u8; 8] = b"STRFLASH";
/// No page is open.
pub const NO_PAGE: u32 = u32::MAX;

/// Where a page lives.
pub struct PageSpot {
    pub file: usize,
    pub base: u64,
}

/// Where a record went.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub page: u32,
    pub offset: u64,
    pub version: u32,
    pub blocks: u32,
}

pub struct Writer {
    wbuf: FlashBuf,
    /// Bytes of `wbuf` filled.
    fill: usize,
    /// The open page, and the page offset `wbuf` starts at.
    page: u32,
    page_off: u64,
    free: VecDeque<u32>,
    sealed: VecDeque<u32>,
    /// Per page: records written since it was opened (for stats extstore).
    failed: bool,
}

/// Counters written under the writer's lock or by flash reads (both rare
/// next to requests): relaxed atomics.
#[derive(Default)]
pub struct Counters {
    pub get_extstore: AtomicU64,
    pub get_aborted: AtomicU64,
    pub recache: AtomicU64,
    pub miss: AtomicU64,
    pub badcrc: AtomicU64,
    pub compact_rescues: AtomicU64,
    pub compact_lost: AtomicU64,
    pub page_allocs: AtomicU64,
    pub page_evictions: AtomicU64,
    pub page_reclaims: AtomicU64,
    pub objects_evicted: AtomicU64,
    pub objects_read: AtomicU64,
    pub objects_written: AtomicU64,
    pub bytes_evicted: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    pub write_errors: AtomicU64,
    pub write_fallbacks: AtomicU64,
    pub io_queue: AtomicU64,
    pub recache_counter: AtomicU64,
}

pub struct Tier {
    pub files: Vec<Arc<File>>,
    pub spots: Vec<PageSpot>,
    pub page_size: u64,
    pub wbuf_size: usize,
    pub secret: u64,
    pub tunables: Arc<ExtTunables>,
    pub versions: Vec<AtomicU32>,
    /// FIFO position of each page when it was opened (for "old page").
    pub page_seq: Vec<AtomicU64>,
    /// Per page: live records, and records and bytes written since it was
    /// opened (bytes used = live x average record: an index entry does not
    /// know its record's length).
    pub live_items: Vec<AtomicU64>,
    written_items: Vec<AtomicU64>,
    written_bytes: Vec<AtomicU64>,
    next_seq: AtomicU64,
    /// The oldest sealed page's sequence number.
    oldest_seq: AtomicU64,
    /// The open page and the offset its unwritten part starts at (readers
    /// of records there are served from the write buffer).
    pub open_page: AtomicU32,
    pub buckets: Vec<u32>,
    pub writer: Mutex<Writer>,
    pub c: Counters,
    /// Set by a reclaim: the index sweep has stale entries to drop.
    pub reclaims: AtomicU64,
    pub direct_io: bool,
}

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Open (creating, and growing to its size) one `ext_path` file, with
/// O_DIRECT when the filesystem takes it.
fn open_file(path: &std::path::Path, size: u64) -> std::io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    let (file, direct) = match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (opts.open(path)?, false),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() < size {
        file.set_len(size)?;
    }
    Ok((file, direct))
}

impl Tier {
    /// Open every `ext_path` of `ext`. A missing directory, an unwritable
    /// file or one too small for two pages is an error that names it.
    pub fn open(ext: &ExtConfig, secret: u64) -> std::io::Result<Tier> {
        let invalid = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
        let page_size = ext.page_size_bytes;
        if page_size < 2 * BLOCK || page_size % BLOCK != 0 || page_size > MAX_PAGE_BYTES {
            return Err(invalid(format!("ext_page_size: {page_size} bytes is not a multiple of 4 KiB between 8 KiB and 64 MiB")));
        }
        let wbuf_size = ext.wbuf_size_bytes.min(page_size) as usize & !(FLASH_ALIGN_BYTES - 1);
        if wbuf_size < 2 * FLASH_ALIGN_BYTES {
            return Err(invalid(format!("ext_wbuf_size: {} bytes is under 8 KiB", ext.wbuf_size_bytes)));
        }
        let mut files = Vec::new();
        let mut spots = Vec::new();
        let mut buckets = Vec::new();
        let mut direct_io = true;
        for (i, p) in ext.paths.iter().enumerate() {
            let pages = p.size_bytes / page_size;
            if pages < 2 {
                return Err(invalid(format!(
                    "ext_path {}: {} bytes hold fewer than 2 pages of ext_page_size ({page_size} bytes)",
                    p.path.display(),
                    p.size_bytes
                )));
            }
            let (file, direct) = open_file(&p.path, pages * page_size)
                .map_err(|e| std::io::Error::new(e.kind(), format!("ext_path {}: {e}", p.path.display())))?;
            direct_io &= direct;
            files.push(Arc::new(file));
            for n in 0..pages {
                spots.push(PageSpot { file: i, base: n * page_size });
                buckets.push(p.bucket.number());
            }
        }
        if spots.is_empty() {
            return Err(invalid("ext_path: no file given".into()));
        }
        if spots.len() as u64 > u64::from(MAX_PAGES) {
            return Err(invalid(format!("ext_path: {} pages, more than {MAX_PAGES}", spots.len())));
        }
        let n = spots.len();
        ext.fill_page_defaults(n as u64);
        Ok(Tier {
            files,
            page_size,
            wbuf_size,
            secret,
            tunables: ext.tunables.clone(),
            versions: (0..n).map(|_| AtomicU32::new(0)).collect(),
            page_seq: (0..n).map(|_| AtomicU64::new(0)).collect(),
            live_items: (0..n).map(|_| AtomicU64::new(0)).collect(),
            written_items: (0..n).map(|_| AtomicU64::new(0)).collect(),
            written_bytes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            next_seq: AtomicU64::new(1),
            oldest_seq: AtomicU64::new(1),
            open_page: AtomicU32::new(NO_PAGE),
            buckets,
            writer: Mutex::new(Writer {
                wbuf: FlashBuf::new(wbuf_size),
                fill: 0,
                page: NO_PAGE,
                page_off: 0,
                free: (0..n as u32).collect(),
                sealed: VecDeque::new(),
                failed: false,
            }),
            c: Counters::default(),
            reclaims: AtomicU64::new(0),
            spots,
            direct_io,
        })
    }

    pub fn page_count(&self) -> usize {
        self.spots.len()
    }

    pub fn version(&self, page: u32) -> u32 {
        self.versions[page as usize].load(relaxed())
    }

    /// Whether `page` is in the oldest quarter of the FIFO (a read item
    /// there is rescued: rewritten before its page is reclaimed).
    pub fn is_old(&self, page: u32) -> bool {
        let seq = self.page_seq[page as usize].load(relaxed());
        let (oldest, next) = (self.oldest_seq.load(relaxed()), self.next_seq.load(relaxed()));
        let span = next.saturating_sub(oldest);
        span >= 4 && seq < oldest + span / 4
    }

    /// An entry for (`page`, `version`) that is no longer current.
    pub fn is_stale(&self, page: u32, version4: u8) -> bool {
        (self.version(page) & 0xf) as u8 != version4 & 0xf
    }

    /// Account a live record leaving flash (replaced, deleted, read back).
    pub fn forget(&self, page: u32, version4: u8) {
        if self.is_stale(page, version4) {
            return;
        }
        let _ = self.live_items[page as usize].fetch_update(relaxed(), relaxed(), |n| Some(n.saturating_sub(1)));
    }

    /// Bytes of live records on `page` (estimated from its average record).
    fn live_bytes(&self, p: usize) -> u64 {
        let written = self.written_items[p].load(relaxed());
        if written == 0 {
            return 0;
        }
        self.live_items[p].load(relaxed()) * self.written_bytes[p].load(relaxed()) / written
    }

    /// Append a record (`write` fills the `len` bytes it is given) to the
    /// write buffer, opening or reclaiming a page and writing the buffer out
    /// as needed. None: no page could take it (counted by the caller).
    pub fn append(&self, len: usize, write: impl FnOnce(&mut [u8], u64)) -> Option<Placed> {
        let mut w = lock(&self.writer);
        if len > self.wbuf_size - FLASH_ALIGN_BYTES {
            return None;
        }
        for _ in 0..3 {
            if w.page == NO_PAGE {
                self.open_page(&mut w)?;
            }
            let offset = w.page_off + w.fill as u64;
            if offset + len as u64 > self.page_size {
                self.flush(&mut w);
                self.seal(&mut w);
                continue;
            }
            if w.fill + len > self.wbuf_size {
                self.flush(&mut w);
                continue;
            }
            let blocks = ((offset % BLOCK + len as u64).div_ceil(BLOCK)) as u32;
            if blocks > MAX_BLOCKS {
                return None;
            }
            let page = w.page;
            let version = self.version(page);
            let fill = w.fill;
            write(&mut w.wbuf[fill..fill + len], record::seed(self.secret, page, version));
            w.fill += len;
            self.live_items[page as usize].fetch_add(1, relaxed());
            self.written_items[page as usize].fetch_add(1, relaxed());
            self.written_bytes[page as usize].fetch_add(len as u64, relaxed());
            self.c.objects_written.fetch_add(1, relaxed());
            return Some(Placed { page, offset, version, blocks });
        }
        None
    }

    /// Copy out a record still in the write buffer (not yet on flash):
    /// `at` its page offset. None if it has been written meanwhile.
    pub fn unwritten(&self, page: u32, offset: u64, out: &mut Vec<u8>, blocks: u32) -> bool {
        let w = lock(&self.writer);
        if w.page != page || offset < w.page_off {
            return false;
        }
        let from = (offset - w.page_off) as usize;
        let to = (from + blocks as usize * FLASH_ALIGN_BYTES).min(w.fill);
        out.clear();
        out.extend_from_slice(&w.wbuf[from..to]);
        true
    }

    fn open_page(&self, w: &mut Writer) -> Option<()> {
        if w.failed {
            return None;
        }
        let page = match w.free.pop_front() {
            Some(p) => p,
            None => {
                let p = w.sealed.pop_front()?;
                self.reclaim(p);
                if let Some(&next) = w.sealed.front() {
                    self.oldest_seq.store(self.page_seq[next as usize].load(relaxed()), relaxed());
                }
                p
            }
        };
        let version = self.versions[page as usize].fetch_add(1, relaxed()) + 1;
        let seq = self.next_seq.fetch_add(1, relaxed());
        self.page_seq[page as usize].store(seq, relaxed());
        if w.sealed.is_empty() {
            self.oldest_seq.store(seq, relaxed());
        }
        self.c.page_allocs.fetch_add(1, relaxed());
        w.page = page;
        w.page_off = 0;
        // The header block goes out with the page's first write.
        let header = &mut w.wbuf[..FLASH_ALIGN_BYTES];
        header.fill(0);
        header[0..8].copy_from_slice(PAGE_MAGIC);
        header[8..12].copy_from_slice(&page.to_le_bytes());
        header[12..16].copy_from_slice(&version.to_le_bytes());
        header[16..24].copy_from_slice(&self.secret.to_le_bytes());
        let check = xxh3_64(&header[0..24]) as u32;
        header[24..28].copy_from_slice(&check.to_le_bytes());
        w.fill = FLASH_ALIGN_BYTES;
        self.open_page.store(page, relaxed());
        Some(())
    }

    /// A page leaves the FIFO to be rewritten: everything on it is gone.
    fn reclaim(&self, page: u32) {
        let p = page as usize;
        let bytes = self.live_bytes(p);
        let items = self.live_items[p].swap(0, relaxed());
        self.written_items[p].store(0, relaxed());
        self.written_bytes[p].store(0, relaxed());
        if items > 0 {
            self.c.page_evictions.fetch_add(1, relaxed());
            self.c.objects_evicted.fetch_add(items, relaxed());
            self.c.bytes_evicted.fetch_add(bytes, relaxed());
        } else {
            self.c.page_reclaims.fetch_add(1, relaxed());
        }
        self.reclaims.fetch_add(1, relaxed());
    }

    fn seal(&self, w: &mut Writer) {
        if w.page != NO_PAGE {
            w.sealed.push_back(w.page);
            if w.sealed.len() == 1 {
                self.oldest_seq.store(self.page_seq[w.page as usize].load(relaxed()), relaxed());
            }
        }
        w.page = NO_PAGE;
        self.open_page.store(NO_PAGE, relaxed());
    }

    /// Write the buffer's filled part (rounded up to whole blocks) at its
    /// page offset. On an error the page is retired.
    fn flush(&self, w: &mut Writer) {
        if w.page == NO_PAGE || w.fill == 0 {
            return;
        }
        let len = w.fill.div_ceil(FLASH_ALIGN_BYTES) * FLASH_ALIGN_BYTES;
        w.wbuf[w.fill..len].fill(0);
        let spot = &self.spots[w.page as usize];
        let result = self.files[spot.file].write_all_at(&w.wbuf[..len], spot.base + w.page_off);
        match result {
            Ok(()) => {
                self.c.bytes_written.fetch_add(len as u64, relaxed());
                w.page_off += len as u64;
                w.fill = 0;
            }
            Err(_) => {
                self.c.write_errors.fetch_add(1, relaxed());
                // Everything on the page is lost: a new version makes its
                // entries stale; the page goes to the back of the FIFO.
                let page = w.page;
                self.reclaim(page);
                self.versions[page as usize].fetch_add(1, relaxed());
                w.sealed.push_back(page);
                w.page = NO_PAGE;
                w.fill = 0;
                self.open_page.store(NO_PAGE, relaxed());
                // Every page failing in a row: stop writing (fallback).
                if self.c.write_errors.load(relaxed()) >= 2 * self.spots.len() as u64 + 2 {
                    w.failed = true;
                }
            }
        }
    }

    /// Write the buffer out now (graceful stop, tests).
    pub fn flush_now(&self) {
        let mut w = lock(&self.writer);
        self.flush(&mut w);
        // Keep appending after the written part on the next block.
    }

    pub fn stats(&self) -> ExtStats {
        let c = &self.c;
        let r = relaxed();
        let w = lock(&self.writer);
        let pages_free = w.free.len() as u64;
        drop(w);
        let n = self.spots.len() as u64;
        let pages: Vec<ExtPageStats> = (0..self.spots.len())
            .map(|p| ExtPageStats {
                version: u64::from(self.versions[p].load(r)),
                bytes_used: self.live_bytes(p),
                bucket: self.buckets[p],
                free_bucket: self.buckets[p],
            })
            .collect();
        let objects_used = self.live_items.iter().map(|a| a.load(r)).sum();
        let bytes_used: u64 = pages.iter().map(|p| p.bytes_used).sum();
        let pages_used = n - pages_free;
        ExtStats {
            get_extstore: c.get_extstore.load(r),
            get_aborted_extstore: c.get_aborted.load(r),
            recache_from_extstore: c.recache.load(r),
            miss_from_extstore: c.miss.load(r),
            badcrc_from_extstore: c.badcrc.load(r),
            compact_lost: c.compact_lost.load(r),
            compact_rescues: c.compact_rescues.load(r),
            page_allocs: c.page_allocs.load(r),
            page_evictions: c.page_evictions.load(r),
            page_reclaims: c.page_reclaims.load(r),
            pages_free,
            pages_used,
            objects_evicted: c.objects_evicted.load(r),
            objects_read: c.objects_read.load(r),
            objects_written: c.objects_written.load(r),
            objects_used,
            bytes_evicted: c.bytes_evicted.load(r),
            bytes_written: c.bytes_written.load(r),
            bytes_read: c.bytes_read.load(r),
            bytes_used,
            bytes_fragmented: (pages_used * self.page_size).saturating_sub(bytes_used),
            limit_maxbytes: n * self.page_size,
            io_queue: c.io_queue.load(r),
            write_errors: c.write_errors.load(r),
            write_fallbacks: c.write_fallbacks.load(r),
            pages,
            ..ExtStats::default()
        }
    }
}
