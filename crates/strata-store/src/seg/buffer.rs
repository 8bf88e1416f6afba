//! Segment memory: each segment buffer is its own anonymous mapping.
//!
//! A fresh mapping costs no RSS until its pages are written, so an open
//! segment holds only the pages its items fill (from the heap, `calloc` may
//! clear, and so touch, the whole megabyte at once: 32 shards x 1 MiB of
//! resident memory before the first item). Dropping a buffer unmaps it.
//! Buffers for freed segments go back to the store's pool instead, so steady
//! state makes no system calls.

use std::ops::{Deref, DerefMut};

#[derive(Default)]
pub struct Buffer(Option<memmap2::MmapMut>);

impl Buffer {
    /// A zeroed buffer of `len` bytes; None if the kernel refuses the
    /// mapping (address space or `vm.max_map_count`), handled as no memory.
    pub fn new(len: usize) -> Option<Buffer> {
        memmap2::MmapMut::map_anon(len).ok().map(|map| Buffer(Some(map)))
    }
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or(&mut [])
    }
}
