//! The contract of a flash read between the engine and the server: the
//! engine never does I/O on the request path; it says where an item is, the
//! server reads it (io_uring on the worker's ring, or an `ext_threads` I/O
//! thread under epoll), and hands the bytes back to be checked.
//!
//! ```text
//!  worker                         engine (shard lock held only inside each call)
//!  ──────                         ──────
//!  cmd on key K ──flash_check(K)──► K in RAM or absent: None ─► run cmd as always
//!                ◄─ Some(FlashRead{file, offset, len, (hash, page, version, at, K)})
//!  park cmd (replies stay in order), read len bytes at offset into a FlashBuf
//!  (O_DIRECT: offset, length and buffer aligned to FLASH_ALIGN_BYTES)
//!            ──finish_flash_read(read, Some(bytes) | None on error, opts, into_ram)─►
//!                                 checks: page still holds `version`; item check
//!                                 (badcrc); full key; expiry and flush; K's index
//!                                 entry still points at this copy
//!                ◄─ Visited  (a plain read: `visit` was called with the item,
//!                             reply built from it; a hit counted; maybe recached)
//!                ◄─ InRam    (item copied into RAM: run cmd again, it finds it)
//!                ◄─ Absent   (no valid copy: run cmd again, it takes its miss path)
//! ```
//!
//! Rules for the server:
//! - Only when [`Engine::flash`](crate::Engine::flash) is Some (every call
//!   below is a [`FlashTier`](crate::FlashTier) method): call
//!   [`FlashTier::flash_check`](crate::FlashTier::flash_check) before any
//!   command that needs the current item (get family with `touch`/`vivify`,
//!   gat, touch, add, replace, cas, append, prepend, incr, decr, delete, every
//!   meta command), or, for a plain `get`/`gets`/`mg` without T/N, only after
//!   the engine's `get` missed (saves a probe on RAM hits). `set` never needs it.
//! - After `finish_flash_read` returns `InRam` or `Absent`, run the command
//!   once more *without* another flash check: if the item went back to
//!   flash meanwhile (rare: an eviction in between), the command sees it as
//!   absent (reads) or drops it first (writes), exactly as if it had been
//!   evicted a moment earlier, which a cache may always do.
//! - Every `FlashRead` handed out must be finished or abandoned
//!   ([`FlashTier::abandon_flash_read`](crate::FlashTier::abandon_flash_read)), so
//!   `extstore_io_queue` and `get_aborted_extstore` stay true.
//! - `into_ram = false` only for reads; with `opts.touch` or `opts.vivify`
//!   the engine takes the `InRam` path anyway.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

pub use crate::flash_buf::FlashBuf;

/// Alignment of a flash read's offset, length and buffer (O_DIRECT; 4 KiB
/// covers every logical block size in use).
pub const FLASH_ALIGN_BYTES: usize = 4096;

/// Where an item on flash is, and what identifies it. Built by the engine
/// only; the server reads `len_bytes` at `offset_bytes` of `file`.
#[derive(Clone, Debug)]
pub struct FlashRead {
    /// The flash file (opened with O_DIRECT when the filesystem allows it);
    /// `as_raw_fd()` for io_uring. Open for the engine's whole life.
    pub file: Arc<File>,
    /// Multiple of [`FLASH_ALIGN_BYTES`].
    pub offset_bytes: u64,
    /// Multiple of [`FLASH_ALIGN_BYTES`]; the item lies within.
    pub len_bytes: usize,
    pub(crate) id: FlashId,
}

/// What `finish_flash_read` needs to check the bytes (engine-private).
#[derive(Clone, Debug)]
#[allow(dead_code)] // read by seg/flash as it grows
pub(crate) struct FlashId {
    pub key: Box<[u8]>,
    pub hash: u64,
    /// Flash page (segment) number within the tier, and the version it had
    /// when the read was handed out: a reclaimed page has a new version.
    pub page: u32,
    pub version: u32,
    /// The item's byte offset within the read buffer.
    pub at: u32,
    /// Answered from bytes read for another key ([`FlashRead::covered_by`]).
    pub shared: bool,
    /// What the bytes hold: a larger item's record at `at`, or a block of
    /// the small store (`seg/flash/small/`).
    pub kind: ReadKind,
}

/// What a flash read reads (engine-private).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// A record of the log, at `FlashId::at` in the bytes.
    Record,
    /// Record `index` of the log block in ring slot `slot` of partition
    /// `part`, the slot naming the block as `placed` (its packed value).
    Log { part: u32, slot: u16, index: u8, placed: u64 },
    /// Set `set` of partition `part`'s extent committed as `seq`.
    Set { part: u32, seq: u64, set: u32 },
}

impl FlashRead {
    /// A buffer the read can go into (aligned for O_DIRECT).
    pub fn buffer(&self) -> FlashBuf {
        FlashBuf::new(self.len_bytes)
    }

    /// The blocking convenience (tests, and an I/O thread): `pread` the
    /// whole extent. A short read (file truncated) is an error.
    pub fn read_blocking(&self) -> std::io::Result<FlashBuf> {
        let mut buf = self.buffer();
        self.file.read_exact_at(&mut buf, self.offset_bytes)?;
        Ok(buf)
    }

    /// Where this read's bytes lie within `buf`, the bytes a finished read
    /// `other` brought back, when they lie wholly within it (same file,
    /// same or wider extent): then this read needs no I/O of its own, and
    /// is counted in `extstore_reads_shared` when finished with them.
    /// The bytes are checked as any read's (`finish_flash_read`: the
    /// page's version, the entry, the record's check), so a page
    /// rewritten since `other` was read is a miss, never a wrong value.
    pub fn covered_by(&mut self, other: &FlashRead, buf: &[u8]) -> Option<std::ops::Range<usize>> {
        let start = self.offset_bytes.checked_sub(other.offset_bytes)? as usize;
        let end = start.checked_add(self.len_bytes)?;
        if !Arc::ptr_eq(&self.file, &other.file) || end > buf.len() {
            return None;
        }
        self.id.shared = true;
        Some(start..end)
    }

    /// The key this read is for.
    pub fn key(&self) -> &[u8] {
        &self.id.key
    }
}

/// What `finish_flash_read` did; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashFinish {
    /// A plain read was answered: `visit` was called once with the item.
    Visited,
    /// The item is in RAM now: run the command again.
    InRam,
    /// No valid copy (replaced, reclaimed, expired, flushed, bad check, read
    /// error): run the command again; it takes its miss path.
    Absent,
    /// The copy read is no longer the key's current one, but the key is
    /// still on flash (the log's compaction moved its record, a merge took
    /// it into a set, or a newer copy went to flash meanwhile): look again
    /// (RAM, then `flash_check`) and read anew. Never counted as a miss.
    Moved,
}
