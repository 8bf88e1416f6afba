//! The buffer a flash read lands in: page-aligned (O_DIRECT wants the
//! buffer, the offset and the length aligned to the logical block size),
//! an anonymous mapping so its bytes never move while the kernel (an
//! io_uring read) writes them.
//!
//! **Read buffers are recycled per thread.** A get from flash used to map
//! a fresh 4-8 KiB buffer and unmap it when the reply was built: two
//! system calls per get, each taking the process's `mmap_lock` for
//! writing (the other workers' O_DIRECT reads take it for reading to pin
//! their pages), and every unmap a TLB shootdown on every CPU the process
//! runs on. Measured (issue 33, `perf record -g` of a worker at 12k flash
//! gets/s): `mmap`/`munmap` and their lock waits and shootdowns were ~30%
//! of the server's CPU, which was mostly system time. So a dropped read
//! buffer of at most [`POOLED_MAX_BYTES`] goes to its thread's spare list
//! (one list per length in blocks), and the next buffer of that length on
//! that thread is taken from it:
//!
//! ```text
//!  thread-local SPARE: [ Vec<MmapMut> ; POOLED_MAX_BYTES / 4 KiB ]
//!                        index = blocks - 1; at most POOLED_PER_THREAD_BYTES in all
//!  FlashBuf::new(len) ── len <= POOLED_MAX_BYTES and a spare of that length? ─► reuse
//!                     └─ else map a new one
//!  drop(FlashBuf)     ── pooled length and room under the byte bound? ─► SPARE
//!                     └─ else unmapped
//! ```
//!
//! A reused buffer holds the bytes of an earlier read: every reader fills
//! all `len` bytes (a short read is a failed read) before looking at them.
//! Larger buffers (the tier's write buffers, scans, large records) and
//! those over a shared file mapping (`from_map`) are never pooled.

use std::cell::RefCell;

/// Reads of at most this many bytes use recycled buffers (16 blocks; a
/// record this long is rare, a 4-8 KiB read is the common case).
pub const POOLED_MAX_BYTES: usize = 64 << 10;
/// Spare bytes a thread keeps at most (256 spare 4 KiB buffers): the
/// reads one worker has in flight at once, with room.
pub const POOLED_PER_THREAD_BYTES: usize = 1 << 20;
const BLOCK: usize = crate::flash_read::FLASH_ALIGN_BYTES;
const CLASSES: usize = POOLED_MAX_BYTES / BLOCK;

#[derive(Default)]
struct Spare {
    maps: [Vec<memmap2::MmapMut>; CLASSES],
    bytes: usize,
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare::default());
}

/// The spare list a mapping of `map_len` bytes belongs to, if pooled.
fn class(map_len: usize) -> Option<usize> {
    (map_len > 0 && map_len <= POOLED_MAX_BYTES && map_len % BLOCK == 0).then(|| map_len / BLOCK - 1)
}

/// A page-aligned buffer (an anonymous mapping), usable for O_DIRECT reads
/// and as an io_uring read target (`as_mut_ptr`, valid while it lives).
pub struct FlashBuf {
    /// None only while dropping (the mapping went to the spare list).
    map: Option<memmap2::MmapMut>,
    len: usize,
    /// Recycled on drop (an anonymous mapping of a pooled length).
    pooled: bool,
}

impl FlashBuf {
    pub fn new(len: usize) -> FlashBuf {
        Self::try_new(len).expect("mapping a flash read buffer")
    }

    /// A buffer over a shared file mapping (the flash tier's write buffers
    /// with `-e`: their bytes outlive a `kill -9`); `len` at most its size.
    pub fn from_map(map: memmap2::MmapMut, len: usize) -> FlashBuf {
        assert!(map.len() >= len, "a mapping shorter than its buffer");
        FlashBuf { map: Some(map), len, pooled: false }
    }

    /// A buffer never kept in the thread's spare list (a background
    /// thread's: what it drops goes back to the kernel at once).
    pub fn unpooled(len: usize) -> FlashBuf {
        let map = memmap2::MmapMut::map_anon(len.max(1).next_multiple_of(BLOCK)).expect("mapping a flash buffer");
        FlashBuf { map: Some(map), len, pooled: false }
    }

    /// `new`, or the mapping's error (a size not known in advance).
    pub fn try_new(len: usize) -> std::io::Result<FlashBuf> {
        let map_len = len.max(1).next_multiple_of(BLOCK);
        let Some(c) = class(map_len) else {
            return Ok(FlashBuf { map: Some(memmap2::MmapMut::map_anon(len.max(1))?), len, pooled: false });
        };
        let reused = SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let map = s.maps[c].pop();
            if map.is_some() {
                s.bytes -= map_len;
            }
            map
        });
        let map = match reused {
            Some(map) => map,
            None => memmap2::MmapMut::map_anon(map_len)?,
        };
        Ok(FlashBuf { map: Some(map), len, pooled: true })
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.map_mut().as_mut_ptr()
    }

    fn map_mut(&mut self) -> &mut memmap2::MmapMut {
        self.map.as_mut().expect("a live flash buffer has its mapping")
    }

    /// Spare buffers this thread holds, in bytes (tests).
    pub fn spare_bytes_on_this_thread() -> usize {
        SPARE.with(|s| s.borrow().bytes)
    }
}

impl Drop for FlashBuf {
    fn drop(&mut self) {
        if !self.pooled {
            return;
        }
        let Some(map) = self.map.take() else { return };
        let Some(c) = class(map.len()) else { return };
        // `try_with`: a buffer dropped while its thread's locals are being
        // torn down is simply unmapped.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.bytes + map.len() <= POOLED_PER_THREAD_BYTES {
                s.bytes += map.len();
                s.maps[c].push(map);
            }
        });
    }
}

impl std::ops::Deref for FlashBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map.as_ref().expect("a live flash buffer has its mapping")[..self.len]
    }
}

impl std::ops::DerefMut for FlashBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.map_mut()[..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_read_buffer_is_reused_and_large_ones_are_not_kept() {
        let before = FlashBuf::spare_bytes_on_this_thread();
        let mut a = FlashBuf::new(BLOCK);
        let at = a.as_mut_ptr() as usize;
        a[0] = 7;
        drop(a);
        assert_eq!(FlashBuf::spare_bytes_on_this_thread(), before + BLOCK);
        let mut b = FlashBuf::new(BLOCK);
        assert_eq!(b.as_mut_ptr() as usize, at, "the spare mapping is handed out again");
        assert_eq!(b.len(), BLOCK);
        assert_eq!(FlashBuf::spare_bytes_on_this_thread(), before);
        // A length between blocks is served from its block count's list.
        let c = FlashBuf::new(BLOCK + 100);
        assert_eq!(c.len(), BLOCK + 100);
        drop(c);
        assert_eq!(FlashBuf::spare_bytes_on_this_thread(), before + 2 * BLOCK);
        drop(FlashBuf::new(POOLED_MAX_BYTES + BLOCK));
        assert_eq!(FlashBuf::spare_bytes_on_this_thread(), before + 2 * BLOCK, "large buffers are unmapped");
        drop(b);
    }

    #[test]
    fn the_spare_list_is_bounded() {
        let bufs: Vec<FlashBuf> = (0..POOLED_PER_THREAD_BYTES / BLOCK + 10).map(|_| FlashBuf::new(BLOCK)).collect();
        drop(bufs);
        assert!(FlashBuf::spare_bytes_on_this_thread() <= POOLED_PER_THREAD_BYTES);
    }
}
