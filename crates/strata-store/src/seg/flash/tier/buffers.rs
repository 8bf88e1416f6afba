//! The write buffers kept in files (`-e` with `ext_path`): the two
//! buffers are shared mappings of `<FILE>.flash/wbuf.0` and `wbuf.1`,
//! and the page table says, per buffer, which page and offset its bytes
//! are for and how many it holds (`page_table.rs`).
//!
//! ```text
//!  append:  record copied into the buffer ─► slot: (page, version, offset, filled)
//!           ─► index entry linked (the caller) ─► RAM copy unlinked
//!  written: page's written blocks raised ─► slot cleared (filled 0)
//!  start:   a slot with bytes, its page still at its version, and the page
//!           written exactly up to its offset: the bytes are written there
//!           (padded with zeros to a block) and the page's written blocks
//!           raised, before the index entries are checked against them
//! ```
//!
//! So a `kill -9` no longer loses the items demoted to flash whose records
//! were still in a buffer (their RAM copies already gone): the stores into
//! a shared mapping are in the page cache when made. A machine crash still
//! loses what the page cache had not written back, as for the memory file.
//! A slot whose buffer cannot be trusted (another `ext_wbuf_size`, a page
//! reclaimed or rewritten since) is skipped: its records fail the check
//! or their entries point past the written part, and are misses.

use std::os::unix::fs::FileExt;
use std::path::Path;

use memmap2::MmapMut;

use super::{lock, Inner, Writer, BLOCK};
use crate::flash_read::FlashBuf;
use crate::seg::flash::page_table::{PageTable, BUFFERS};

/// Map the buffer files in `dir` (made, or resized and zeroed, as needed):
/// each `wbuf_size` bytes, and whether it kept its old bytes.
pub(super) fn open(dir: &Path, wbuf_size: usize) -> std::io::Result<Vec<(MmapMut, bool)>> {
    (0..BUFFERS)
        .map(|i| {
            let path = dir.join(format!("wbuf.{i}"));
            let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
            let kept = file.metadata()?.len() == wbuf_size as u64;
            if !kept {
                file.set_len(0)?;
                file.set_len(wbuf_size as u64)?;
            }
            Ok((super::super::mapped::map(&file, wbuf_size)?, kept))
        })
        .collect()
}

impl Inner {
    /// At start, on a recovered table: write out what the buffers held
    /// (module docs), oldest offset first, then clear every slot. Returns
    /// the bytes written.
    pub(super) fn replay_buffers(&self, table: &mut PageTable, maps: &mut [(MmapMut, bool)]) -> u64 {
        let mut slots: Vec<(usize, (u32, u32, u64, u64))> = (0..BUFFERS).map(|i| (i, table.buffer(i))).collect();
        slots.sort_unstable_by_key(|&(_, (page, _, off, _))| (page, off));
        let mut replayed = 0;
        for (slot, (page, version, page_off, filled)) in slots {
            let (map, kept) = &mut maps[slot];
            let filled = filled as usize;
            if filled == 0 || !*kept || filled > map.len() || page as usize >= self.spots.len() {
                continue;
            }
            let (now_version, written, _) = table.page(page);
            let end = page_off + filled.div_ceil(BLOCK as usize) as u64 * BLOCK;
            if now_version != version || u64::from(written) * BLOCK != page_off || end > self.page_size {
                continue;
            }
            let len = (end - page_off) as usize;
            map[filled..len].fill(0);
            let spot = &self.spots[page as usize];
            if self.files[spot.file].write_all_at(&map[..len], spot.base + page_off).is_ok() {
                table.set_written(page, (end / BLOCK) as u32);
                replayed += len as u64;
            }
        }
        for slot in 0..BUFFERS {
            table.set_buffer(slot, 0, 0, 0, 0);
        }
        replayed
    }

    /// After a record is copied into the filling buffer: its slot says so.
    pub(super) fn note_buffer(&self, w: &Writer, version: u32) {
        if let (Some(t), Some(slot)) = (&self.table, w.slot_of(&w.wbuf)) {
            lock(t).set_buffer(slot, w.page, version, w.page_off, w.fill as u64);
        }
    }

    /// A buffer is on flash (or failed): nothing of it to write at a restart.
    pub(super) fn clear_buffer(&self, slot: Option<usize>) {
        if let (Some(t), Some(slot)) = (&self.table, slot) {
            lock(t).set_buffer(slot, 0, 0, 0, 0);
        }
    }
}

impl Writer {
    /// Which file-backed buffer `buf` is (None: an anonymous one).
    pub(super) fn slot_of(&self, buf: &FlashBuf) -> Option<usize> {
        self.bases.iter().position(|&b| b == buf.as_ptr() as usize)
    }
}

/// The buffers over the mapped files, and their base addresses.
pub(super) fn buffers(maps: Vec<(MmapMut, bool)>, wbuf_size: usize) -> (Vec<FlashBuf>, Vec<usize>) {
    let bufs: Vec<FlashBuf> = maps.into_iter().map(|(m, _)| FlashBuf::from_map(m, wbuf_size)).collect();
    let bases = bufs.iter().map(|b| b.as_ptr() as usize).collect();
    (bufs, bases)
}
