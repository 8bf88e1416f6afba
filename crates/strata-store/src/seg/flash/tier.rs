//! The flash device side: the `ext_path` files cut into pages (flash
//! segments of `ext_page_size`), the write buffer, and the FIFO of pages.
//!
//! ```text
//!  files:  ext_path 0: │ page 0 │ page 1 │ ... │      ext_path 1: │ page k │ ...
//!  page:   │ header block (4 KiB) │ records ... (written one write buffer at a time)
//!  header: magic "STRFLASH" │ page u32 │ version u32 │ secret u64 │ check u32
//!  wbuf:   two store-wide buffers of ext_wbuf_size (counted in -m): one is
//!          filled under the writer's mutex by evicting shards; a full one is
//!          handed to the `strata-flash-writer` thread, which writes it with
//!          one aligned pwrite (O_DIRECT when the filesystem allows it) while
//!          the other fills, so no request waits for the device unless it is
//!          slower than eviction (then the filler waits for the buffer).
//!          A record in a buffer not yet written is read from the buffer.
//!          A record larger than a buffer has a write of its own (large.rs).
//!  pages:  Free ─► Open (the one the wbuf fills) ─► Sealed (FIFO) ─► reclaimed
//!          (oldest first, when no page is free): its version goes up, which
//!          makes every index entry and record on it stale at once.
//! ```
//!
//! With a memory file (`-e`), the page table (each page's version, FIFO
//! position and how many blocks of it are on flash) is kept in a mapped
//! file (`<FILE>.flash/pages`, `page_table.rs`), so a restart rebuilds the
//! FIFO and knows which index entries point at records that were written
//! (entries into the unwritten tail of a page are dropped). The two write
//! buffers are then mapped files as well (`buffers.rs`): a restart after
//! a `kill -9` writes out what they held before checking the entries.
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

use super::index::{MAX_BLOCKS, MAX_PAGES, MAX_PAGE_BYTES};
use super::page_table::PageTable;
use super::record;
use crate::ext_config::ExtTunables;
use crate::flash_read::{FlashBuf, FLASH_ALIGN_BYTES};
use crate::{ExtConfig, RelTime};

mod buffers;
mod compaction;
mod large;
mod pages;
mod stats;
mod stream;

pub use self::compaction::Plan;
pub use self::pages::Taker;
pub use self::stream::{Stream, Written};

pub const BLOCK: u64 = FLASH_ALIGN_BYTES as u64;
const PAGE_MAGIC: &[u8; 8] = b"STRFLASH";
/// No page is open.
pub const NO_PAGE: u32 = u32::MAX;
/// Above any FIFO sequence a run can reach (one per page opened, from 1):
/// a larger one in the page table is damage, and counting on from it would
/// overflow.
const SEQ_LIMIT: u64 = 1 << 62;

/// Where a page lives.
pub struct PageSpot {
    pub file: usize,
    pub base: u64,
}

/// A record's expiry (0: never) and last access, which its page keeps
/// the latest of: a page all of whose records expired, or were flushed,
/// holds nothing live whatever its entries say (`tier/compaction.rs`).
#[derive(Clone, Copy, Debug)]
pub struct Times {
    pub exptime: RelTime,
    pub access: RelTime,
}

/// Where a record went.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub page: u32,
    pub offset: u64,
    pub version: u32,
    pub blocks: u32,
}

/// A full buffer waiting for (or under) its write.
struct Inflight {
    page: u32,
    version: u32,
    page_off: u64,
    len: usize,
    buf: Arc<FlashBuf>,
    /// A large record's own buffer (large.rs): dropped once written, not
    /// kept as a spare.
    dedicated: bool,
}

pub struct Writer {
    wbuf: FlashBuf,
    /// Buffers free to fill next (one, when none is being written).
    spare: Vec<FlashBuf>,
    /// Full buffers in write order; the writer thread takes the front.
    inflight: VecDeque<Inflight>,
    stop: bool,
    /// Bytes of `wbuf` filled.
    fill: usize,
    /// The open page, and the page offset `wbuf` starts at.
    page: u32,
    page_off: u64,
    free: VecDeque<u32>,
    sealed: VecDeque<u32>,
    /// Per page: records written since it was opened (for stats extstore).
    failed: bool,
    /// Base addresses of the buffers kept in files (`buffers.rs`; empty
    /// without `-e`), slot by slot.
    bases: Vec<usize>,
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
    pub reads_shared: AtomicU64,
    pub bytes_padded: AtomicU64,
    pub io_queue: AtomicU64,
    pub recache_counter: AtomicU64,
    /// A page was wanted and every sealed one still held small-store data.
    pub tail_blocked: AtomicU64,
    /// Key and value bytes of larger items written to flash.
    pub bytes_admitted: AtomicU64,
    /// A page was reclaimed out of FIFO order, past older ones holding
    /// small-store data.
    pub tail_skips: AtomicU64,
    /// The compactor (compact.rs): pages it finished, in all and of those
    /// the ones it evicted (no page was under `ext_max_frag`).
    pub compact_pages: AtomicU64,
    pub compact_evict_pages: AtomicU64,
    /// Records it found expired or flushed and dropped (never moved).
    pub compact_expired: AtomicU64,
    /// Unread records it left on a page it evicted (memcached's
    /// `extstore_compact_skipped`).
    pub compact_skipped: AtomicU64,
    pub compact_bytes_read: AtomicU64,
    pub compact_bytes_moved: AtomicU64,
    /// The write buffers wanted a page and none was ready: the compactor
    /// was behind (the item was not written to flash).
    pub compact_behind: AtomicU64,
}

/// The tier and its writer thread (stopped and joined on drop).
pub struct Tier {
    inner: Arc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for Tier {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Drop for Tier {
    fn drop(&mut self) {
        lock(&self.inner.writer).stop = true;
        self.inner.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub struct Inner {
    /// Signalled when a buffer is handed to the writer thread, and when it
    /// has written one (a buffer is free again).
    work: std::sync::Condvar,
    written: std::sync::Condvar,
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
    /// Pages never used yet (the writer's free list, readable without it).
    free_pages: AtomicU64,
    /// The open page and the offset its unwritten part starts at (readers
    /// of records there are served from the write buffer).
    pub open_page: AtomicU32,
    pub buckets: Vec<u32>,
    pub writer: Mutex<Writer>,
    pub c: Counters,
    /// Set by a reclaim: the index sweep has stale entries to drop.
    pub reclaims: AtomicU64,
    /// Slot bytes of every shard's flash index, counted in `-m` (budget.rs).
    pub index_bytes: AtomicU64,
    pub direct_io: bool,
    /// Per page: blocks known to be on flash (a restart trusts only entries
    /// below this).
    pub written_blocks: Vec<AtomicU32>,
    /// `-e`: the persistent page table.
    table: Option<Mutex<PageTable>>,
    /// Per page: 4 KiB blocks of the small store's data (log blocks, sets
    /// and filters) still in use on it (`small/`). A page is reclaimed only
    /// when this is 0: the small store rewrites what it keeps there first.
    pub small_live: Vec<AtomicU32>,
    /// Reclaimable pages the write buffers leave to the small store's
    /// rewrite stream (`take_page`); 0 without a small store.
    pub stream_reserve: AtomicU32,
    /// The page table held a tier of this geometry: its index files are
    /// to be recovered.
    pub recovered: bool,
    /// Per page: the latest expiry of its records (u32::MAX: one never
    /// expires; 0: none written) and their latest access.
    pub expiry_max: Vec<AtomicU32>,
    pub access_max: Vec<AtomicU32>,
    /// Per page: the version the compactor finished it under (what it
    /// left there may be evicted: `pages.rs`' takeable), or 0.
    pub finished: Vec<AtomicU32>,
    /// A compactor steps this tier (`compact.rs`): pages are taken only
    /// once nothing live is left on them.
    pub compactor: std::sync::atomic::AtomicBool,
    /// Rung when the write buffers take a page and fewer than
    /// `ext_compact_under` are ready, or find none; the compactor waits on it.
    compact_bell: (Mutex<bool>, std::sync::Condvar),
}

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

/// Padding is at most this: a sixteenth of a block.
pub const PAD_MAX_BYTES: usize = FLASH_ALIGN_BYTES / 16;

/// Zero bytes to put before a record of `len` bytes at page offset
/// `offset` so that it does not straddle a 4 KiB block, if that takes at
/// most [`PAD_MAX_BYTES`]: such a record is read with one 4 KiB read, not
/// an 8 KiB one. The bound keeps padding under a sixteenth of the flash
/// whatever the record size. It was a quarter block (1 KiB) until the
/// log's compaction (issue 63): that bought gets of 1M x 1 KiB a median
/// 5% (docs/bench/flash.md) for 27% more flash and more device writes
/// for records of 1-2 KiB (1,568-byte records, 1,500-byte values, wrote
/// 23% padding: a write amplification of 1.35 where memcached's is 1.05);
/// a cache on flash is bought for its capacity. Records of a divisor of
/// 4 KiB pay nothing either way.
pub fn block_pad(offset: u64, len: usize) -> usize {
    let at = (offset % BLOCK) as usize;
    let pad = BLOCK as usize - at;
    if len <= BLOCK as usize && at + len > BLOCK as usize && pad <= PAD_MAX_BYTES {
        pad
    } else {
        0
    }
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
    /// `persist`: the directory of the page table, the shard count, and
    /// whether a table found there may be recovered (the memory file was).
    /// `memory_bytes`: `-m`, which the write buffers are counted in.
    pub fn open(ext: &ExtConfig, memory_bytes: u64, secret: u64, persist: Option<(&std::path::Path, u32, bool)>) -> std::io::Result<Tier> {
        let invalid = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
        // Smaller pages when the files hold fewer than 2 (ext_config.rs).
        let page_size = ext.effective_page_size_bytes();
        if page_size < 2 * BLOCK || page_size % BLOCK != 0 || page_size > MAX_PAGE_BYTES {
            return Err(invalid(format!("ext_page_size: {page_size} bytes is not a multiple of 4 KiB between 8 KiB and 64 MiB")));
        }
        // Two buffers are counted in -m: each at most a sixteenth of it.
        let wbuf_size = ext.wbuf_size_bytes.min(page_size).min((memory_bytes / 16).max(64 << 10)) as usize & !(FLASH_ALIGN_BYTES - 1);
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
        let (table, found) = match persist {
            Some((dir, shards, may_recover)) => {
                let (t, found) = PageTable::open(&dir.join("pages"), secret, page_size, n, shards, may_recover)?;
                (Some(t), found)
            }
            None => (None, None),
        };
        let mut tier = Inner {
            work: std::sync::Condvar::new(),
            written: std::sync::Condvar::new(),
            written_blocks: (0..n).map(|_| AtomicU32::new(0)).collect(),
            small_live: (0..n).map(|_| AtomicU32::new(0)).collect(),
            stream_reserve: AtomicU32::new(0),
            table: None,
            recovered: found.is_some(),
            finished: (0..n).map(|_| AtomicU32::new(0)).collect(),
            expiry_max: (0..n).map(|_| AtomicU32::new(0)).collect(),
            access_max: (0..n).map(|_| AtomicU32::new(0)).collect(),
            compactor: std::sync::atomic::AtomicBool::new(false),
            compact_bell: (Mutex::new(false), std::sync::Condvar::new()),
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
            free_pages: AtomicU64::new(n as u64),
            open_page: AtomicU32::new(NO_PAGE),
            buckets,
            writer: Mutex::new(Writer {
                wbuf: FlashBuf::new(wbuf_size),
                spare: vec![FlashBuf::new(wbuf_size)],
                inflight: VecDeque::new(),
                stop: false,
                fill: 0,
                page: NO_PAGE,
                page_off: 0,
                free: (0..n as u32).collect(),
                sealed: VecDeque::new(),
                failed: false,
                bases: Vec::new(),
            }),
            c: Counters::default(),
            reclaims: AtomicU64::new(0),
            index_bytes: AtomicU64::new(0),
            spots,
            direct_io,
        };
        tier.secret = found.unwrap_or(secret);
        if let (Some(mut table), Some((dir, _, _))) = (table, persist) {
            // The write buffers in files: what they held before a kill -9
            // goes to flash first (buffers.rs).
            let mut maps = buffers::open(dir, wbuf_size)?;
            if found.is_some() {
                tier.replay_buffers(&mut table, &mut maps);
                tier.restore(&table);
            } else {
                for slot in 0..super::page_table::BUFFERS {
                    table.set_buffer(slot, 0, 0, 0, 0);
                }
            }
            let (mut bufs, bases) = buffers::buffers(maps, wbuf_size);
            let w = tier.writer.get_mut().unwrap_or_else(|e| e.into_inner());
            w.spare = bufs.split_off(1);
            w.wbuf = bufs.pop().expect("two buffers");
            w.bases = bases;
            tier.table = Some(Mutex::new(table));
        }
        let inner = Arc::new(tier);
        let worker = inner.clone();
        let thread = std::thread::Builder::new().name("strata-flash-writer".into()).spawn(move || worker.write_loop())?;
        Ok(Tier { inner, thread: Some(thread) })
    }
}

impl Inner {
    /// Bytes of `-m` the write buffers take.
    pub fn buffer_bytes(&self) -> u64 {
        2 * self.wbuf_size as u64
    }

    /// The writer thread: write full buffers in order, one at a time.
    fn write_loop(&self) {
        let mut w = lock(&self.writer);
        loop {
            let Some(job) = w.inflight.front() else {
                if w.stop {
                    return;
                }
                w = self.work.wait(w).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let (page, version, page_off, len, buf, dedicated) = (job.page, job.version, job.page_off, job.len, job.buf.clone(), job.dedicated);
            drop(w);
            let spot = &self.spots[page as usize];
            let result = self.files[spot.file].write_all_at(&buf[..len], spot.base + page_off);
            drop(buf);
            w = lock(&self.writer);
            let job = w.inflight.pop_front().expect("the job written");
            let slot = w.slot_of(&job.buf);
            if !dedicated {
                let buf = Arc::try_unwrap(job.buf).unwrap_or_else(|_| FlashBuf::new(self.wbuf_size));
                w.spare.push(buf);
            }
            if result.is_ok() {
                self.c.bytes_written.fetch_add(len as u64, relaxed());
            }
            self.finish_write(&mut w, page, version, page_off + len as u64, result.is_ok());
            self.clear_buffer(slot);
            self.written.notify_all();
        }
    }

    /// Account a finished write (`end`: the page offset it reached).
    fn finish_write(&self, w: &mut Writer, page: u32, version: u32, end: u64, ok: bool) {
        if self.version(page) != version {
            return; // retired meanwhile
        }
        if ok {
            let blocks = (end / BLOCK) as u32;
            self.written_blocks[page as usize].store(blocks, relaxed());
            if let Some(t) = &self.table {
                lock(t).set_written(page, blocks);
            }
            return;
        }
        self.c.write_errors.fetch_add(1, relaxed());
        self.retire(w, page);
        if w.page == page {
            w.page = NO_PAGE;
            w.fill = 0;
            self.open_page.store(NO_PAGE, relaxed());
            w.sealed.push_back(page);
        }
    }

    /// Append a record (`write` fills the `len` bytes it is given) to the
    /// write buffer, opening or reclaiming a page and writing the buffer out
    /// as needed. None: no page could take it (counted by the caller).
    /// `who` appends (the pages it may open: `pages.rs`); `times` are the
    /// record's expiry and last access (the page keeps their latest).
    pub fn append(&self, who: Taker, len: usize, times: Times, write: impl FnOnce(&mut [u8], u64)) -> Option<Placed> {
        let mut w = lock(&self.writer);
        if w.failed {
            return None;
        }
        if len > self.wbuf_size - FLASH_ALIGN_BYTES {
            return self.append_large(w, who, len, times, write);
        }
        for _ in 0..3 {
            if w.page == NO_PAGE {
                self.open_page(&mut w, who)?;
            }
            let pad = block_pad(w.page_off + w.fill as u64, len);
            let offset = w.page_off + (w.fill + pad) as u64;
            if offset + len as u64 > self.page_size {
                w = self.flush(w);
                self.seal(&mut w);
                continue;
            }
            if w.fill + pad + len > self.wbuf_size {
                w = self.flush(w);
                continue;
            }
            let blocks = ((offset % BLOCK + len as u64).div_ceil(BLOCK)) as u32;
            if blocks > MAX_BLOCKS {
                return None;
            }
            let page = w.page;
            let version = self.version(page);
            let fill = w.fill + pad;
            if pad > 0 {
                w.wbuf[fill - pad..fill].fill(0);
                self.c.bytes_padded.fetch_add(pad as u64, relaxed());
            }
            write(&mut w.wbuf[fill..fill + len], record::seed(self.secret, page, version));
            w.fill = fill + len;
            self.note_buffer(&w, version);
            self.note_record(page, len, times);
            return Some(Placed { page, offset, version, blocks });
        }
        None
    }

    /// Append `len` bytes (whole 4 KiB blocks) starting on a block
    /// boundary and inside one page: a block of the small store. `write`
    /// fills them, given the page's record seed and the first block's
    /// number in the page. The blocks count as the small store's live data
    /// on the page (`small_live`) until it lets them go. None: no page
    /// could take them.
    pub fn append_block(&self, len: usize, write: impl FnOnce(&mut [u8], u64, u32)) -> Option<Placed> {
        debug_assert!(len > 0 && len % FLASH_ALIGN_BYTES == 0 && len <= self.wbuf_size - FLASH_ALIGN_BYTES);
        let mut w = lock(&self.writer);
        if w.failed || len as u64 + BLOCK > self.page_size {
            return None;
        }
        for _ in 0..3 {
            if w.page == NO_PAGE {
                self.open_page(&mut w, Taker::Buffer)?;
            }
            let pad = (FLASH_ALIGN_BYTES - w.fill % FLASH_ALIGN_BYTES) % FLASH_ALIGN_BYTES;
            let offset = w.page_off + (w.fill + pad) as u64;
            if offset + len as u64 > self.page_size {
                w = self.flush(w);
                self.seal(&mut w);
                continue;
            }
            if w.fill + pad + len > self.wbuf_size {
                w = self.flush(w);
                continue;
            }
            let page = w.page;
            let version = self.version(page);
            let fill = w.fill + pad;
            if pad > 0 {
                w.wbuf[fill - pad..fill].fill(0);
                self.c.bytes_padded.fetch_add(pad as u64, relaxed());
            }
            write(&mut w.wbuf[fill..fill + len], record::seed(self.secret, page, version), (offset / BLOCK) as u32);
            w.fill = fill + len;
            self.note_buffer(&w, version);
            self.small_live[page as usize].fetch_add((len / FLASH_ALIGN_BYTES) as u32, relaxed());
            return Some(Placed { page, offset, version, blocks: (len / FLASH_ALIGN_BYTES) as u32 });
        }
        None
    }

    /// Copy out a record still in the write buffer (not yet on flash):
    /// `at` its page offset. None if it has been written meanwhile.
    pub fn unwritten(&self, page: u32, offset: u64, out: &mut Vec<u8>, blocks: u32) -> bool {
        let w = lock(&self.writer);
        let want = blocks as usize * FLASH_ALIGN_BYTES;
        let version = self.version(page);
        let mut copy = |buf: &[u8], from: u64, filled: usize| {
            let from = from as usize;
            out.clear();
            out.extend_from_slice(&buf[from..(from + want).min(filled)]);
            true
        };
        if w.page == page && offset >= w.page_off {
            return copy(&w.wbuf, offset - w.page_off, w.fill);
        }
        for job in &w.inflight {
            if job.page == page && job.version == version && offset >= job.page_off && offset < job.page_off + job.len as u64 {
                return copy(&job.buf, offset - job.page_off, job.len);
            }
        }
        false
    }

    /// Hand the buffer's filled part (rounded up to whole blocks) to the
    /// writer thread and go on in a spare buffer (waiting for one if both
    /// are taken: the device is slower than eviction).
    fn flush<'a>(&'a self, mut w: std::sync::MutexGuard<'a, Writer>) -> std::sync::MutexGuard<'a, Writer> {
        if w.page == NO_PAGE || w.fill == 0 {
            return w;
        }
        let len = w.fill.div_ceil(FLASH_ALIGN_BYTES) * FLASH_ALIGN_BYTES;
        let fill = w.fill;
        w.wbuf[fill..len].fill(0);
        while w.spare.is_empty() {
            w = self.written.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        if w.page == NO_PAGE {
            return w; // the page failed while we waited
        }
        let spare = w.spare.pop().expect("a spare buffer");
        let full = std::mem::replace(&mut w.wbuf, spare);
        let (page, page_off) = (w.page, w.page_off);
        w.inflight.push_back(Inflight { page, version: self.version(page), page_off, len, buf: Arc::new(full), dedicated: false });
        w.page_off += len as u64;
        w.fill = 0;
        self.work.notify_one();
        w
    }

    /// Wait until a write buffer is free to fill after the current one
    /// (the idle writer, with no shard lock held, so its appends do not
    /// wait for the device while holding one).
    pub fn wait_for_spare(&self) {
        let mut w = lock(&self.writer);
        while w.spare.is_empty() && !w.stop && !w.failed {
            w = self.written.wait(w).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Hand a partly filled buffer to the writer thread if a spare is free
    /// (never waits for the device): called each clock tick, it bounds how
    /// long a demoted item lives only in the buffer, where a crash loses
    /// it (without `-e`; with it, a machine crash), to about a second, for
    /// at most one padded block a tick.
    pub fn flush_partial(&self) {
        let w = lock(&self.writer);
        if w.fill > 0 && !w.spare.is_empty() {
            drop(self.flush(w));
        }
    }

    /// Write the buffer out now and wait until it is on flash (graceful
    /// stop, tests). Appending goes on at the next block.
    pub fn flush_now(&self) {
        let mut w = self.flush(lock(&self.writer));
        while !w.inflight.is_empty() {
            w = self.written.wait(w).unwrap_or_else(|e| e.into_inner());
        }
    }
}
