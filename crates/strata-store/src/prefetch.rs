//! A cache-line prefetch hint, the one `unsafe` block outside `seg/file.rs`.
//!
//! A multi-get of 48 keys over a working set larger than the core's L2
//! spends most of its time waiting, once per key, for an index slot and then
//! for the item it points at (docs/bench/wire.md: `Header::try_decode`, the
//! first read of an item, was 31% of the server's time in `mget48`). Asking
//! for all the keys' lines first lets those misses overlap.
//!
//! Why `unsafe` is sound here: `_mm_prefetch` only hints the cache; it never
//! faults, reads nothing into the program and writes nothing, whatever the
//! address. It is `unsafe` only because it is a `#[target_feature(enable =
//! "sse")]` function, and SSE is part of every x86_64 CPU. Elsewhere this is
//! a no-op.

/// Start loading the cache line holding `*p` (into every cache level).
#[inline(always)]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch has no architectural effect (see the module doc);
    // SSE is baseline on x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
