//! Segment memory: each segment buffer is its own mapping.
//!
//! Without a memory file a buffer is an anonymous mapping: a fresh one costs
//! no RSS until its pages are written, so an open segment holds only the
//! pages its items fill (from the heap, `calloc` may clear, and so touch,
//! the whole megabyte at once: 32 shards x 1 MiB of resident memory before
//! the first item). Dropping a buffer unmaps it. With `-e` a buffer maps an
//! extent of the memory file (`file.rs`) and remembers where it lies.
//! Buffers for freed segments go back to the store's pool instead, so steady
//! state makes no system calls.

use std::ops::{Deref, DerefMut};

#[derive(Default)]
pub struct Buffer {
    map: Option<memmap2::MmapMut>,
    /// Offset of the extent in the memory file's arena.
    file_offset: Option<u64>,
}

impl Buffer {
    /// A zeroed buffer of `len` bytes; None if the kernel refuses the
    /// mapping (address space or `vm.max_map_count`), handled as no memory.
    pub fn new(len: usize) -> Option<Buffer> {
        memmap2::MmapMut::map_anon(len).ok().map(|map| Buffer { map: Some(map), file_offset: None })
    }

    pub fn file_backed(map: memmap2::MmapMut, offset: u64) -> Buffer {
        Buffer { map: Some(map), file_offset: Some(offset) }
    }

    pub fn file_offset(&self) -> Option<u64> {
        self.file_offset
    }

    /// Write a file-backed buffer's dirty pages back (graceful stop).
    pub fn flush(&self) -> std::io::Result<()> {
        match (&self.map, self.file_offset) {
            (Some(map), Some(_)) => map.flush(),
            _ => Ok(()),
        }
    }
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }
}
