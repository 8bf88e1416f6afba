//! A record larger than a write buffer: a write of its own.
//!
//! The two write buffers are at most `-m`/16 each (they are counted in
//! `-m`, and what they hold is lost at a `kill -9`), so at a small `-m` an
//! item of up to `-I` does not fit one. Such a record goes straight to the
//! open page from a buffer of its own, aligned for direct I/O:
//!
//! ```text
//!  open page: │ header │ records written │ wbuf's records │ large record │ next records ...
//!                                          ▲ flushed first  ▲ a block boundary, its own pwrite
//!  its buffer: │ record (32 B header, key, value) │ zeros to a 4 KiB block │
//! ```
//!
//! 1. The write buffer's content is handed to the writer thread first, so
//!    the large record starts on a block boundary right after it (a page
//!    that cannot hold the record is sealed and the next one opened).
//! 2. The record is encoded into a page-aligned buffer of its rounded
//!    length and queued behind the buffers already in flight: the writer
//!    thread writes them in order, so a page's written extent only grows
//!    and a restart's check (`written_blocks`) holds as for buffered
//!    records; until written, a read of it is served from the queue.
//! 3. Its buffer is dropped once written. Only one is in flight at a time
//!    (the next large record waits for it, as a full write buffer waits
//!    for a spare), so the memory outside `-m` is one record at most, and
//!    nothing of it is lost at a crash except what was still queued.
//!
//! Records longer than an index entry can describe (`MAX_BLOCKS` blocks,
//! 2 MiB) or than a page holds after its header stay in RAM's eviction.

use std::sync::{Arc, MutexGuard};

use super::{Inflight, Inner, Placed, Taker, Times, Writer, BLOCK, NO_PAGE};
use crate::flash_read::{FlashBuf, FLASH_ALIGN_BYTES};
use crate::seg::flash::index::MAX_BLOCKS;
use crate::seg::flash::record;

/// Tries before the record falls back to eviction (a page failing, a page
/// too full, another large record queued while the buffer was flushed).
const ATTEMPTS: usize = 8;

impl Inner {
    /// [`Inner::append`] for a record longer than a write buffer holds.
    pub(super) fn append_large<'a>(
        &'a self,
        mut w: MutexGuard<'a, Writer>,
        who: Taker,
        len: usize,
        times: Times,
        write: impl FnOnce(&mut [u8], u64),
    ) -> Option<Placed> {
        let rounded = len.div_ceil(FLASH_ALIGN_BYTES) * FLASH_ALIGN_BYTES;
        let blocks = (rounded / FLASH_ALIGN_BYTES) as u32;
        if blocks > MAX_BLOCKS || rounded as u64 + BLOCK > self.page_size {
            return None;
        }
        let mut buf = FlashBuf::try_new(rounded).ok()?;
        for _ in 0..ATTEMPTS {
            while w.inflight.iter().any(|job| job.dedicated) {
                w = self.written.wait(w).unwrap_or_else(|e| e.into_inner());
            }
            if w.failed {
                return None;
            }
            if w.page == NO_PAGE {
                self.open_page(&mut w, who)?;
            }
            // The write buffer (or a new page's header) goes out first.
            w = self.flush(w);
            // The flush may have waited (lock released): the page may have
            // failed, or another large record been queued meanwhile.
            if w.page == NO_PAGE || w.inflight.iter().any(|job| job.dedicated) {
                continue;
            }
            if w.page_off + rounded as u64 > self.page_size {
                self.seal(&mut w);
                continue;
            }
            let (page, offset) = (w.page, w.page_off);
            let version = self.version(page);
            write(&mut buf[..len], record::seed(self.secret, page, version));
            buf[len..].fill(0);
            self.note_record(page, len, times);
            w.inflight.push_back(Inflight { page, version, page_off: offset, len: rounded, buf: Arc::new(buf), dedicated: true });
            w.page_off += rounded as u64;
            self.work.notify_one();
            return Some(Placed { page, offset, version, blocks });
        }
        None
    }
}
