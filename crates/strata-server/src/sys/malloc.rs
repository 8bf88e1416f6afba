//! The allocator's own figures, for `stats memory` (`ops/memory.rs`).
//!
//! The binary uses the system allocator, glibc's malloc, whose arenas hold
//! freed chunks for reuse: memory the process keeps (RSS) that no
//! structure holds. `mallinfo2` reports it, summed over every arena, as
//! `fordblks`; its call walks the arenas under their locks, so it is asked
//! only when `stats memory` or `/metrics` is read.

/// What the allocator reports, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct MallocInfo {
    /// Free chunks the arenas hold (`fordblks`): the allocator's overhead
    /// beyond what the program asked for.
    pub free_bytes: u64,
    /// Bytes handed out, in the arenas (`uordblks`) and as separate
    /// mappings for large blocks (`hblkhd`).
    pub in_use_bytes: u64,
}

/// The figures now; None on a C library without `mallinfo2`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn info() -> Option<MallocInfo> {
    // SAFETY: mallinfo2 takes no argument and returns a struct by value;
    // glibc takes each arena's lock while it reads it.
    let m = unsafe { libc::mallinfo2() };
    Some(MallocInfo { free_bytes: m.fordblks as u64, in_use_bytes: (m.uordblks + m.hblkhd) as u64 })
}

/// The figures now; None on a C library without `mallinfo2`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn info() -> Option<MallocInfo> {
    None
}
