//! Shared file mappings for the flash tier's persistent state (`-e` with
//! `ext_path`): the page table and each shard's flash index live in files
//! of a directory beside the memory file `-e FILE` (`<FILE>.flash/`), mapped
//! shared, so every change is in the file the moment it is made and a
//! `kill -9` leaves exactly what memory held (as the memory file does).
//!
//! Why `unsafe` is allowed here: mapping a file is unsafe because another
//! process could change or truncate it under the mapping. These files are
//! created by this process in its own directory, the directory's `pages`
//! file is locked (`flock`, `File::try_lock`) for the process's life, and
//! nothing truncates a mapped file (a grown index is written to a new file
//! and renamed over the old one). Every access goes through the mapping's
//! bounds-checked slice.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::{MmapMut, MmapOptions};

/// Map `len` bytes of `file` (which must be at least that long).
pub fn map(file: &File, len: usize) -> io::Result<MmapMut> {
    // SAFETY: see the module docs: the file is private to this process and
    // never truncated while mapped.
    #[allow(unsafe_code)]
    unsafe {
        MmapOptions::new().len(len).map_mut(file)
    }
}

/// Create (or truncate) `path` at `len` bytes of zeros and map it.
pub fn create(path: &Path, len: usize) -> io::Result<MmapMut> {
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    file.set_len(len as u64)?;
    map(&file, len)
}

/// Map an existing file whole; None if it is missing or empty.
pub fn open(path: &Path) -> Option<MmapMut> {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).ok()?;
    let len = file.metadata().ok()?.len() as usize;
    if len == 0 {
        return None;
    }
    map(&file, len).ok()
}
