//! The flash tier's persistent page table (`-e` with `ext_path`): for each
//! page, its version, how many 4 KiB blocks of it are on flash, and its
//! place in the FIFO, in a mapped file (`<FILE>.flash/pages`), changed in
//! place, so a restart (graceful or `kill -9`) rebuilds the FIFO and knows
//! which index entries point at written records.
//!
//! ```text
//!  header (4 KiB): magic │ secret u64 │ page_size u64 │ pages u64 │ shards u64
//!                  at 64, per write buffer (2 × 24 B): page u32 │ version u32 │
//!                  page offset u64 │ bytes filled u64 (0: nothing to write)
//!  per page (16 B): version u32 │ written blocks u32 │ FIFO sequence u64
//! ```
//!
//! A write buffer (`<FILE>.flash/wbuf.N`, mapped shared, `tier.rs`) says
//! here which page and offset its bytes are for and how many it holds: set
//! after each record is copied in, cleared once the buffer is on flash, so
//! a restart after a `kill -9` writes out what the buffers held.
//!
//! The file is locked (`flock`) while a process uses it.

use std::fs::File;

const TABLE_MAGIC: &[u8; 8] = b"STRFPGS1";
const TABLE_HEAD: usize = 4096;
/// The write buffers' slots, in the header block.
const BUFFERS_AT: usize = 64;
/// Write buffers a table has slots for.
pub const BUFFERS: usize = 2;

/// The mapped table (layout in the module docs).
pub struct PageTable {
    map: memmap2::MmapMut,
    /// Held for the `flock` on the file.
    _file: File,
}

impl PageTable {
    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.map[at..at + 8].try_into().expect("8 bytes"))
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.map[at..at + bytes.len()].copy_from_slice(bytes);
    }

    pub fn set_page(&mut self, page: u32, version: u32, written_blocks: u32, seq: u64) {
        let at = TABLE_HEAD + page as usize * 16;
        self.put(at, &version.to_le_bytes());
        self.put(at + 4, &written_blocks.to_le_bytes());
        self.put(at + 8, &seq.to_le_bytes());
    }

    pub fn page(&self, page: u32) -> (u32, u32, u64) {
        let at = TABLE_HEAD + page as usize * 16;
        let u32_at = |i: usize| u32::from_le_bytes(self.map[i..i + 4].try_into().expect("4 bytes"));
        (u32_at(at), u32_at(at + 4), self.u64_at(at + 8))
    }

    pub fn set_written(&mut self, page: u32, written_blocks: u32) {
        self.put(TABLE_HEAD + page as usize * 16 + 4, &written_blocks.to_le_bytes());
    }

    /// Write buffer `slot` holds `filled` bytes for `page` (at `version`)
    /// from `page_off` (0 bytes: nothing to write at a restart).
    pub fn set_buffer(&mut self, slot: usize, page: u32, version: u32, page_off: u64, filled: u64) {
        let at = BUFFERS_AT + slot * 24;
        self.put(at, &page.to_le_bytes());
        self.put(at + 4, &version.to_le_bytes());
        self.put(at + 8, &page_off.to_le_bytes());
        self.put(at + 16, &filled.to_le_bytes());
    }

    /// (page, version, page offset, bytes filled) of write buffer `slot`.
    pub fn buffer(&self, slot: usize) -> (u32, u32, u64, u64) {
        let at = BUFFERS_AT + slot * 24;
        let u32_at = |i: usize| u32::from_le_bytes(self.map[i..i + 4].try_into().expect("4 bytes"));
        (u32_at(at), u32_at(at + 4), self.u64_at(at + 8), self.u64_at(at + 16))
    }

    pub fn set_version(&mut self, page: u32, version: u32) {
        self.put(TABLE_HEAD + page as usize * 16, &version.to_le_bytes());
    }

    /// Open (locked) the table at `path`; Some(secret) when it holds a
    /// tier of this geometry, else it is started afresh with `secret`.
    pub fn open(path: &std::path::Path, secret: u64, page_size: u64, pages: usize, shards: u32, may_recover: bool) -> std::io::Result<(PageTable, Option<u64>)> {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        file.try_lock().map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::WouldBlock, format!("{}: in use by another process", path.display()))
        })?;
        let len = TABLE_HEAD + pages * 16;
        let old_len = file.metadata()?.len();
        if old_len != len as u64 {
            file.set_len(0)?;
            file.set_len(len as u64)?;
        }
        let map = super::mapped::map(&file, len)?;
        let mut table = PageTable { map, _file: file };
        let matches = may_recover
            && &table.map[0..8] == TABLE_MAGIC
            && table.u64_at(16) == page_size
            && table.u64_at(24) == pages as u64
            && table.u64_at(32) == u64::from(shards);
        if matches {
            let secret = table.u64_at(8);
            return Ok((table, Some(secret)));
        }
        table.map.fill(0);
        table.put(8, &secret.to_le_bytes());
        table.put(16, &page_size.to_le_bytes());
        table.put(24, &(pages as u64).to_le_bytes());
        table.put(32, &u64::from(shards).to_le_bytes());
        table.put(0, TABLE_MAGIC);
        Ok((table, None))
    }
}

