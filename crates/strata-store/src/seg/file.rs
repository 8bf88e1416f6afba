//! The memory file (`-e FILE`): segment memory that outlives the process.
//!
//! ```text
//!  0        4 KiB                      4 KiB + directory
//!  ┌────────┬──────────────────────────┬──────────────────────────────────────┐
//!  │ header │ directory: 16 B per page │ arena: segments and single-item     │
//!  │        │ of the arena             │ buffers, page-aligned extents       │
//!  └────────┴──────────────────────────┴──────────────────────────────────────┘
//!  header:    magic, version, the settings that must match (-m, segment size,
//!             -I, shards), a random secret, the clock origin, a clean-stop
//!             byte, and two copies of the changing part (CAS counter, flush
//!             epoch, heartbeat time), written alternately so one is always whole
//!  directory: entry i says "a segment with sequence number S, P pages long,
//!             starts at arena page i" (sequence 0: nothing starts here)
//!  segment:   32-byte header (sequence, CAS base, creation time, shard,
//!             class, TTL bucket), then items (item.rs), then an end mark
//! ```
//!
//! Nothing in the file is a pointer: the directory and the items hold page
//! numbers, offsets and lengths, so the file maps anywhere. Every record is
//! checked with a hash seeded by the file's secret (the header's own hash
//! is unseeded), so bytes a client stored can never pass for a segment
//! header or a directory entry, and an item is served after a restart only
//! if its check matches (see item.rs). Recovery trusts nothing it reads: a
//! damaged header starts the cache cold, a damaged directory entry or
//! segment header drops that segment, a damaged item drops the rest of its
//! segment.
//!
//! The arena is one shared file mapping, made at open however large `-m`
//! is (a 200 GiB file is sparse and maps as address space only); a buffer
//! is an extent of it (`buffer.rs`), handed out first-fit from a free map.
//! A freed extent's pages are dropped from the process (`MADV_DONTNEED`
//! on a shared mapping: the bytes stay in the file and the page cache, as
//! after the `munmap` of a mapping of its own), so RSS follows what
//! segments hold. A directory entry exists exactly while a segment holds
//! the extent. The file is locked (`flock`) so two servers never share it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memmap2::{Advice, MmapMut, MmapOptions, MmapRaw, UncheckedAdvice};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::buffer::Buffer;
use super::lock;

const MAGIC: &[u8; 8] = b"STRATAMF";
pub const VERSION: u32 = 1;
pub const PAGE: u64 = 4096;
const DIR_ENTRY: u64 = 16;
/// Bytes at the start of every segment in a memory file.
pub const SEGMENT_HEADER: usize = 32;
const SEGMENT_MAGIC: u32 = 0x5354_5347;

// Header fields (little-endian offsets into page 0).
const H_VERSION: usize = 8;
const H_MEMORY: usize = 16;
const H_SEGMENT: usize = 24;
const H_ITEM_MAX: usize = 32;
const H_SHARDS: usize = 40;
const H_ARENA: usize = 48;
const H_SECRET: usize = 56;
const H_ORIGIN: usize = 64;
const H_CHECK: usize = 72;
const H_STATIC_END: usize = 72;
const H_CLEAN: usize = 80;
const H_STATE: [usize; 2] = [128, 192];
const STATE_LEN: usize = 48;

/// The settings a file was made with; a start with others starts cold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub memory: u64,
    pub segment: u64,
    pub item_max: u64,
    pub shards: u32,
}

/// The changing part of the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub cas: u64,
    pub oldest_live: u32,
    pub oldest_cas: u64,
    /// Unix time of the write: the heartbeat (written each second while the
    /// server runs, and at a graceful stop), so a restart knows how long
    /// the cache was away.
    pub alive_unix: i64,
}

/// What opening found.
pub enum Opened {
    /// A valid file for these settings; `clean` if the last stop was graceful.
    Existing { clean: bool, state: State },
    /// A new (or re-initialised) file; `why` says why an existing one was not used.
    Fresh { why: Option<String> },
}

/// A directory entry as read back: a segment of `pages` pages at arena page `page`.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub page: u64,
    pub pages: u64,
    pub seq: u64,
}

/// A segment's own header, as written at the start of its extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub seq: u64,
    pub cas_base: u64,
    pub create_time: u32,
    pub shard: u16,
    pub main: bool,
    pub bucket: u8,
    pub jumbo: bool,
}

pub struct MemFile {
    /// Held open for its `flock`, which keeps other servers out.
    #[allow(dead_code)]
    file: File,
    /// Where it is (the flash tier's persistent state goes beside it).
    pub path: std::path::PathBuf,
    head: Mutex<MmapMut>,
    /// The whole arena, mapped once; every buffer holds an `Arc` to it.
    arena: Arc<MmapRaw>,
    secret: u64,
    origin_unix: i64,
    arena_pages: u64,
    /// Free extents of the arena: first page -> pages.
    free: Mutex<BTreeMap<u64, u64>>,
    next_seq: AtomicU64,
    state_writes: AtomicU64,
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A random 64-bit secret without a dependency: std's per-process hash keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl Geometry {
    pub fn arena_pages(&self) -> u64 {
        self.memory.div_ceil(PAGE)
    }

    fn dir_bytes(&self) -> u64 {
        (self.arena_pages() * DIR_ENTRY).next_multiple_of(PAGE)
    }

    fn file_len(&self) -> u64 {
        PAGE + self.dir_bytes() + self.arena_pages() * PAGE
    }
}

/// How long opening waits for another process to let go of the file. A
/// server stopping cleanly (SIGTERM, SIGINT, SIGUSR1) holds it while it
/// answers and flushes its clients (2 s at most) and syncs its segments, so
/// a restart that does not wait for the old process to exit (a script's
/// `kill -INT; start`, memcached's own t/restart.t) still gets the cache;
/// a process that keeps running past this is refused as before.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Take the file's exclusive `flock`, retrying every 20 ms for `wait`.
fn lock_waiting(file: &File, wait: std::time::Duration) -> io::Result<()> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("the memory file is in use by another process (waited {} s)", wait.as_secs()),
                ));
            }
        }
    }
}

/// Bytes an unprivileged writer may still allocate on the file system that
/// holds `path` (`statvfs`: `f_bavail * f_frsize`, what `df` shows): the
/// room a memory file (here) or a flash file (the CLI's `ext_path` check)
/// can still take.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statvfs is a valid value of that plain C struct;
    // c_path is NUL-terminated and `fs` is a struct we own for statvfs to fill.
    #[allow(unsafe_code)]
    let fs = unsafe {
        let mut fs: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c_path.as_ptr(), &mut fs) != 0 {
            return Err(io::Error::last_os_error());
        }
        fs
    };
    Ok((fs.f_bavail as u64).saturating_mul(fs.f_frsize as u64))
}

impl MemFile {
    /// Open `path` for `geo`, or create it. An existing file that is damaged
    /// or was made with other settings is re-initialised (`Fresh` with the
    /// reason), or refused when `strict`.
    pub fn open(path: &Path, geo: Geometry, strict: bool, clock_origin: i64) -> io::Result<(MemFile, Opened)> {
        let existed = path.try_exists().unwrap_or(true);
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        lock_waiting(&file, LOCK_WAIT)?;
        if let Err(e) = Self::check_room(path, &file, geo.file_len()) {
            // A file this refusal made is not left behind.
            if !existed && file.metadata().is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        let len = file.metadata()?.len();
        let existing = if len == 0 { Err(None) } else { Self::validate(&file, len, geo) };
        let (mut head, opened, state_writes) = match existing {
            Ok((head, clean, writes, state)) => (head, Opened::Existing { clean, state }, writes),
            Err(why) => {
                if strict {
                    if let Some(why) = why {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
                    }
                }
                // Re-initialise: zero length first, so every old directory
                // entry and header is gone (the file is sparse until written).
                file.set_len(0)?;
                file.set_len(geo.file_len())?;
                let mut head = Self::map_head(&file, geo)?;
                Self::write_header(&mut head, geo, clock_origin);
                (head, Opened::Fresh { why }, 0)
            }
        };
        // Until the next graceful stop, this file is "not clean".
        head[H_CLEAN] = 0;
        let arena = Arc::new(Self::map_arena(&file, geo)?);
        let mf = MemFile {
            arena,
            file,
            path: path.to_path_buf(),
            secret: get_u64(&head, H_SECRET),
            origin_unix: get_u64(&head, H_ORIGIN) as i64,
            head: Mutex::new(head),
            arena_pages: geo.arena_pages(),
            free: Mutex::new(BTreeMap::from([(0, geo.arena_pages())])),
            next_seq: AtomicU64::new(1),
            state_writes: AtomicU64::new(state_writes),
        };
        if matches!(opened, Opened::Fresh { .. }) {
            mf.write_state(State::default());
            mf.write_state(State::default());
        }
        Ok((mf, opened))
    }

    /// The fixed part of a new file's header.
    fn write_header(head: &mut [u8], geo: Geometry, clock_origin: i64) {
        head[..8].copy_from_slice(MAGIC);
        put_u32(head, H_VERSION, VERSION);
        put_u64(head, H_MEMORY, geo.memory);
        put_u64(head, H_SEGMENT, geo.segment);
        put_u64(head, H_ITEM_MAX, geo.item_max);
        put_u32(head, H_SHARDS, geo.shards);
        put_u64(head, H_ARENA, geo.arena_pages());
        put_u64(head, H_SECRET, random_u64());
        put_u64(head, H_ORIGIN, clock_origin as u64);
        let sum = xxh3_64(&head[..H_STATIC_END]);
        put_u64(head, H_CHECK, sum);
    }

    /// The file can grow to `full_len` bytes: the blocks it already holds
    /// plus its file system's free space (`fstatvfs`, what `df` shows) are
    /// enough. The file is sparse and grows as segments are written
    /// through the mapping; a write the file system cannot take would end
    /// the process with SIGBUS mid-request (a tmpfs such as `/run` or
    /// `/dev/shm` smaller than `-m`), so the start is refused instead.
    fn check_room(path: &Path, file: &File, full_len: u64) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata()?.blocks().saturating_mul(512);
        let room = held.saturating_add(free_bytes(path)?);
        if room < full_len {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "needs {full_len} bytes when full, but its file system has room for {room} \
                     (a smaller -m, or a larger file system: a tmpfs's size= option)"
                ),
            ));
        }
        Ok(())
    }

    fn map_head(file: &File, geo: Geometry) -> io::Result<MmapMut> {
        // SAFETY: the file is ours (locked above) and never truncated while
        // mapped; every access goes through the mapping's bounds-checked slice.
        #[allow(unsafe_code)]
        unsafe {
            MmapOptions::new().len((PAGE + geo.dir_bytes()) as usize).map_mut(file)
        }
    }

    fn map_arena(file: &File, geo: Geometry) -> io::Result<MmapRaw> {
        // A raw mapping gives out no slices; buffers cut it up (`buffer`).
        // The arena starts past the directory, so it never overlaps the header.
        MmapOptions::new().offset(PAGE + geo.dir_bytes()).len((geo.arena_pages() * PAGE) as usize).map_raw(file)
    }

    /// Check an existing file's header against `geo`: its mapping, clean
    /// byte, and the newer state copy with its write count; Err(reason) if
    /// unusable.
    fn validate(file: &File, len: u64, geo: Geometry) -> Result<(MmapMut, bool, u64, State), Option<String>> {
        if len < PAGE {
            return Err(Some(format!("file is {len} bytes, shorter than its header")));
        }
        let mut page = vec![0u8; PAGE as usize];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut page, 0).map_err(|e| Some(format!("cannot read the header: {e}")))?;
        if &page[..8] != MAGIC {
            return Err(Some("not a Strata memory file (bad magic)".into()));
        }
        if get_u64(&page, H_CHECK) != xxh3_64(&page[..H_STATIC_END]) {
            return Err(Some("header damaged (check mismatch)".into()));
        }
        let version = get_u32(&page, H_VERSION);
        if version != VERSION {
            return Err(Some(format!("format version {version}, this build reads {VERSION}")));
        }
        let found = Geometry {
            memory: get_u64(&page, H_MEMORY),
            segment: get_u64(&page, H_SEGMENT),
            item_max: get_u64(&page, H_ITEM_MAX),
            shards: get_u32(&page, H_SHARDS),
        };
        if found != geo {
            return Err(Some(format!(
                "made with other settings (-m {} MiB, -I {}, segment {}, shards {}; now -m {} MiB, -I {}, segment {}, shards {})",
                found.memory >> 20,
                found.item_max,
                found.segment,
                found.shards,
                geo.memory >> 20,
                geo.item_max,
                geo.segment,
                geo.shards
            )));
        }
        if get_u64(&page, H_ARENA) != geo.arena_pages() || len != geo.file_len() {
            return Err(Some(format!("file is {len} bytes, expected {} (truncated or extended)", geo.file_len())));
        }
        let clean = page[H_CLEAN] == 1;
        let newest = H_STATE.iter().filter_map(|&at| Self::read_state(&page[at..at + STATE_LEN])).max_by_key(|&(writes, _)| writes);
        let Some((writes, state)) = newest else {
            return Err(Some("both copies of the header's state are damaged".into()));
        };
        let head = Self::map_head(file, geo).map_err(|e| Some(format!("cannot map the header: {e}")))?;
        Ok((head, clean, writes, state))
    }

    fn read_state(b: &[u8]) -> Option<(u64, State)> {
        if get_u64(b, 40) != xxh3_64(&b[..40]) {
            return None;
        }
        let state = State { cas: get_u64(b, 8), oldest_live: get_u32(b, 16), oldest_cas: get_u64(b, 24), alive_unix: get_u64(b, 32) as i64 };
        Some((get_u64(b, 0), state))
    }

    /// Record the changing state, into the older of the two copies.
    pub fn write_state(&self, state: State) {
        let writes = self.state_writes.fetch_add(1, Ordering::Relaxed) + 1;
        let mut head = lock(&self.head);
        let at = H_STATE[(writes % 2) as usize];
        let b = &mut head[at..at + STATE_LEN];
        put_u64(b, 0, writes);
        put_u64(b, 8, state.cas);
        put_u32(b, 16, state.oldest_live);
        put_u32(b, 20, 0);
        put_u64(b, 24, state.oldest_cas);
        put_u64(b, 32, state.alive_unix as u64);
        let sum = xxh3_64(&b[..40]);
        put_u64(b, 40, sum);
    }

    pub fn secret(&self) -> u64 {
        self.secret
    }

    /// Unix time of relative time 0 for every process that uses this file.
    pub fn origin_unix(&self) -> i64 {
        self.origin_unix
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Every valid directory entry, in page order, overlapping or
    /// out-of-range ones dropped; their extents are held, the rest of the
    /// arena is free. Also sets the next sequence number past every one seen.
    pub fn entries(&self) -> Vec<Entry> {
        let head = lock(&self.head);
        let mut out: Vec<Entry> = Vec::new();
        let mut end = 0;
        let mut max_seq = 0;
        for page in 0..self.arena_pages {
            let at = (PAGE + page * DIR_ENTRY) as usize;
            let seq = get_u64(&head, at);
            if seq == 0 {
                continue;
            }
            let pages = u64::from(get_u32(&head, at + 8));
            if get_u32(&head, at + 12) != self.entry_check(page, seq, pages) {
                continue;
            }
            max_seq = max_seq.max(seq);
            if page < end || pages == 0 || page + pages > self.arena_pages {
                continue;
            }
            end = page + pages;
            out.push(Entry { page, pages, seq });
        }
        self.next_seq.fetch_max(max_seq + 1, Ordering::Relaxed);
        self.set_held(&out);
        out
    }

    fn entry_check(&self, page: u64, seq: u64, pages: u64) -> u32 {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&page.to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..].copy_from_slice(&pages.to_le_bytes());
        xxh3_64_with_seed(&b, self.secret) as u32
    }

    /// Record that a segment with sequence `seq` holds `buf` (0: none does).
    pub fn set_entry(&self, buf: &Buffer, seq: u64) {
        let Some(at) = buf.file_offset() else { return };
        let page = at / PAGE;
        let pages = buf.len() as u64 / PAGE;
        let mut head = lock(&self.head);
        let at = (PAGE + page * DIR_ENTRY) as usize;
        let check = if seq == 0 { 0 } else { self.entry_check(page, seq, pages) };
        put_u64(&mut head, at, seq);
        put_u32(&mut head, at + 8, pages as u32);
        put_u32(&mut head, at + 12, check);
    }

    /// Mark the extents recovered segments hold; the rest is free.
    fn set_held(&self, held: &[Entry]) {
        let mut free = lock(&self.free);
        free.clear();
        let mut at = 0;
        for e in held {
            if e.page > at {
                free.insert(at, e.page - at);
            }
            at = e.page + e.pages;
        }
        if at < self.arena_pages {
            free.insert(at, self.arena_pages - at);
        }
    }

    /// A free extent of `len` bytes (a multiple of a page), first fit.
    pub fn alloc(&self, len: usize) -> Option<Buffer> {
        let pages = (len as u64).div_ceil(PAGE);
        let page = {
            let mut free = lock(&self.free);
            let (&start, &have) = free.iter().find(|&(_, &n)| n >= pages)?;
            free.remove(&start);
            if have > pages {
                free.insert(start + pages, have - pages);
            }
            start
        };
        Some(self.buffer(page, pages))
    }

    /// The extent of a directory entry (recovery: its pages are read at
    /// once, so they are faulted in up front rather than one by one; read
    /// faults, as `MAP_POPULATE` did, so nothing is dirtied).
    pub fn map_entry(&self, e: &Entry) -> Option<Buffer> {
        let (at, len) = ((e.page * PAGE) as usize, (e.pages * PAGE) as usize);
        if self.arena.advise_range(Advice::PopulateRead, at, len).is_err() {
            let _ = self.arena.advise_range(Advice::WillNeed, at, len);
        }
        Some(self.buffer(e.page, e.pages))
    }

    fn buffer(&self, page: u64, pages: u64) -> Buffer {
        // SAFETY: the extent is inside the arena (directory entries are
        // checked against its size, the free map covers only it) and held
        // by no other buffer (the free map hands each page out once).
        #[allow(unsafe_code)]
        unsafe {
            Buffer::in_file(Arc::clone(&self.arena), page * PAGE, (pages * PAGE) as usize)
        }
    }

    /// Return a buffer's extent to the free map; its pages leave the
    /// process (their bytes stay in the file).
    pub fn free(&self, buf: Buffer) {
        if let Some(at) = buf.file_offset() {
            let len = buf.len();
            drop(buf);
            // SAFETY: the extent belonged to the buffer just dropped and is
            // not yet free, so nothing uses it; on a shared file mapping
            // MADV_DONTNEED only unmaps the pages (dirty ones are written
            // back as usual), so no stored byte is lost.
            #[allow(unsafe_code)]
            let _ = unsafe { self.arena.unchecked_advise_range(UncheckedAdvice::DontNeed, at as usize, len) };
            self.release_pages(at / PAGE, len as u64 / PAGE);
        }
    }

    /// Give back the pages of a directory entry recovery could not use.
    pub fn free_pages(&self, page: u64, pages: u64) {
        self.release_pages(page, pages);
    }

    fn release_pages(&self, mut page: u64, mut pages: u64) {
        let mut free = lock(&self.free);
        if let Some((&prev, &n)) = free.range(..page).next_back() {
            if prev + n == page {
                free.remove(&prev);
                page = prev;
                pages += n;
            }
        }
        if let Some(&n) = free.get(&(page + pages)) {
            free.remove(&(page + pages));
            pages += n;
        }
        free.insert(page, pages);
    }

    /// Write a segment's header at the start of `buf`.
    pub fn write_segment_header(&self, buf: &mut [u8], h: &SegmentHeader) {
        let b = &mut buf[..SEGMENT_HEADER];
        put_u32(b, 0, SEGMENT_MAGIC);
        b[4] = u8::from(h.main) | u8::from(h.jumbo) << 1;
        b[5] = h.bucket;
        b[6..8].copy_from_slice(&h.shard.to_le_bytes());
        put_u64(b, 8, h.seq);
        put_u64(b, 16, h.cas_base);
        put_u32(b, 24, h.create_time);
        let sum = xxh3_64_with_seed(&b[..28], self.secret) as u32;
        put_u32(b, 28, sum);
    }

    /// A segment header, if whole and of sequence `seq`.
    pub fn read_segment_header(&self, buf: &[u8], seq: u64) -> Option<SegmentHeader> {
        let b = buf.get(..SEGMENT_HEADER)?;
        if get_u32(b, 0) != SEGMENT_MAGIC || get_u32(b, 28) != xxh3_64_with_seed(&b[..28], self.secret) as u32 {
            return None;
        }
        let h = SegmentHeader {
            seq: get_u64(b, 8),
            cas_base: get_u64(b, 16),
            create_time: get_u32(b, 24),
            shard: u16::from_le_bytes([b[6], b[7]]),
            main: b[4] & 1 != 0,
            bucket: b[5],
            jumbo: b[4] & 2 != 0,
        };
        (h.seq == seq).then_some(h)
    }

    /// Graceful stop: write everything back and mark the file clean.
    pub fn close(&self, state: State, buffers: &mut dyn Iterator<Item = &Buffer>) -> io::Result<()> {
        for buf in buffers {
            buf.flush()?;
        }
        self.write_state(State { alive_unix: crate::clock::unix_time(), ..state });
        let mut head = lock(&self.head);
        head.flush()?;
        head[H_CLEAN] = 1;
        head.flush()
    }
}

/// Words of memory read and written only as atomics, kept in a file beside
/// the memory file (or in anonymous memory): the invalidation journal's
/// ring (`strata-server`, `journal/`). A store to a shared file mapping is
/// in the page cache as soon as it is made, so a `kill -9` loses nothing
/// the process wrote; only the machine's crash (or a tmpfs lost at a
/// reboot) does. The memory file's `flock` keeps other servers out of it.
pub struct SharedWords {
    map: MmapRaw,
    len: usize,
}

impl SharedWords {
    /// `len` zeroed words of anonymous memory (no file: `-e` not given).
    pub fn anonymous(len: usize) -> io::Result<SharedWords> {
        let map = MmapOptions::new().len(len.max(1) * 8).map_anon()?;
        Ok(SharedWords { map: MmapRaw::from(map), len })
    }

    /// `len` words of the file at `path`, created (zeroed) if absent. The
    /// flag says whether the file already held exactly `len` words (the
    /// words are then its contents); a file of another length is zeroed
    /// to `len` words.
    pub fn open(path: &Path, len: usize) -> io::Result<(SharedWords, bool)> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let bytes = len.max(1) as u64 * 8;
        let kept = file.metadata()?.len() == bytes;
        if !kept {
            file.set_len(0)?;
            file.set_len(bytes)?;
        }
        let map = MmapOptions::new().len(bytes as usize).map_raw(&file)?;
        Ok((SharedWords { map, len }, kept))
    }

    /// The words.
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `len` × 8 bytes long, page-aligned (so
        // aligned for u64), readable and writable, and lives as long as
        // `self`; every access is atomic, so other threads (and another
        // process mapping the same file) may change the words meanwhile.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.map.as_mut_ptr().cast::<AtomicU64>(), self.len)
        }
    }

    /// Write the words back to the file (graceful stop; a no-op for
    /// anonymous memory and on tmpfs).
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }
}

#[cfg(test)]
mod shared_words_tests {
    use super::*;

    #[test]
    fn words_written_are_there_after_reopening() {
        let dir = std::env::temp_dir().join(format!("strata-words-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("j");
        let _ = std::fs::remove_file(&path);
        let (w, kept) = SharedWords::open(&path, 16).unwrap_or_else(|e| panic!("open: {e}"));
        assert!(!kept);
        w.words()[3].store(77, Ordering::Relaxed);
        drop(w);
        let (w, kept) = SharedWords::open(&path, 16).unwrap_or_else(|e| panic!("open: {e}"));
        assert!(kept);
        assert_eq!(w.words()[3].load(Ordering::Relaxed), 77);
        drop(w);
        let (w, kept) = SharedWords::open(&path, 32).unwrap_or_else(|e| panic!("open: {e}"));
        assert!(!kept, "another length starts zeroed");
        assert_eq!(w.words()[3].load(Ordering::Relaxed), 0);
        assert_eq!(SharedWords::anonymous(4).map(|a| a.words().len()).ok(), Some(4));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod memfile_tests {
    use super::*;

    #[test]
    fn a_file_system_too_small_for_the_file_is_refused_before_it_is_sized() {
        let dir = std::env::temp_dir().join(format!("strata-memfile-room-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cache");
        // 4 PiB: more than any file system this runs on has free.
        let huge = Geometry { memory: 1 << 52, segment: 1 << 20, item_max: 1 << 20, shards: 4 };
        let err = MemFile::open(&path, huge, false, 0).err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull, "{err}");
        assert!(err.to_string().contains("has room for"), "{err}");
        assert!(!path.exists(), "the refusal left no file behind");
        // An existing file is refused as it is, not removed.
        std::fs::write(&path, b"").unwrap();
        assert!(MemFile::open(&path, huge, false, 0).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "nothing was sized");
        let small = Geometry { memory: 4 << 20, segment: 1 << 20, item_max: 1 << 20, shards: 4 };
        assert!(MemFile::open(&path, small, false, 0).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
