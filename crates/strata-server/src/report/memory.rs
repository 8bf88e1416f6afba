//! `stats memory` and `/metrics`' `strata_memory_bytes`: where the process's
//! resident memory (RSS) goes, one line per structure, each its real size
//! (capacity, not use) computed when read, so requests pay nothing for it.
//!
//! ```text
//!  rss ─┬─ segments ─────────── item memory, -m (the store's allocated buffers)
//!       ├─ flash_index, flash_buffers   also inside -m (ext_path)
//!       ├─ index, ghost ────────  inside -m too, but each shard's first index size
//!       ├─ store_meta ──────────  the store's per-shard bookkeeping
//!       ├─ journal ─────────────  the invalidation journal's written slots
//!       ├─ uring_rings, uring_recv_buffers, read_pool   per worker
//!       ├─ conn_buffers, conn_slots     per connection
//!       ├─ flash_read_ahead ────  buffers of flash reads queued ahead, all workers
//!       ├─ mrc, latency, hotkeys        the observability structures
//!       ├─ binary, libraries ───  resident pages of the executable and .so files
//!       ├─ malloc_free ─────────  free chunks the allocator keeps
//!       └─ unaccounted ─────────  rss − the sum of the above
//! ```
//!
//! Sources: the engine's `stats` (`strata-store`), each feature's own
//! `bytes()` (`journal/`, `ops/mrc.rs`, `ops/latency.rs`, `ops/hotkeys.rs`),
//! gauges the workers set when a structure changes size ([`WorkerMemory`],
//! [`crate::registry::ConnInfo::note_buffers`], at the end of a connection's
//! turn), the read-ahead budget (`flash/budget.rs`), `/proc/self/status` (`VmRSS`), `/proc/self/smaps` (the binary's,
//! the libraries' and io_uring's queues' pages, read at most once a
//! second: [`MAPPED_FRESH`]) and the allocator
//! (`sys/malloc.rs`). `unaccounted` is what no line
//! names: thread stacks, heap blocks of structures not listed (settings,
//! TLS sessions, small tables) and their allocator headers; it can be
//! negative by the pages of a listed structure not touched yet (the lines
//! are capacities, RSS counts touched pages).
//!
//! Reply (Strata's own group; memcached has no `stats memory`), bytes:
//!
//! ```text
//! STAT rss_bytes 84303872
//! STAT segments_bytes 67108864
//! ...
//! STAT unaccounted_bytes 412160
//! END
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::registry::ConnKind;
use crate::runtime::Runtime;
use crate::stats::WorkerMemory;

/// `VmRSS` of /proc/self/status, in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    kb_field(&status, "VmRSS:").unwrap_or(0)
}

fn kb_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Resident bytes of mappings /proc/self/smaps names (each mapping's
/// header names its file, its `Rss:` line follows).
#[derive(Clone, Copy, Default)]
struct MappedPages {
    /// The executable's text and data.
    binary: u64,
    /// Shared libraries' (`.so` files).
    libraries: u64,
    /// io_uring's submission and completion queues, which the kernel
    /// allocates and maps into the process (`anon_inode:[io_uring]`).
    uring_rings: u64,
}

/// How long one reading of /proc/self/smaps serves. The kernel walks
/// every mapping's page tables to write it: about 0.6 ms a request in
/// release at `-m 64`, more with a large memory file, and much more under
/// AddressSanitizer, so a client sending `stats memory` in a loop (or a
/// UDP datagram of them) would keep a worker busy on it. The pages of the
/// binary, the libraries and io_uring's queues change slowly.
const MAPPED_FRESH: Duration = Duration::from_secs(1);

/// [`read_mapped_pages`], at most once per [`MAPPED_FRESH`] a process.
fn mapped_pages() -> MappedPages {
    static LAST: Mutex<Option<(Instant, MappedPages)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, pages)) = *last {
        if at.elapsed() < MAPPED_FRESH {
            return pages;
        }
    }
    let pages = read_mapped_pages();
    *last = Some((Instant::now(), pages));
    pages
}

/// Readings of /proc/self/smaps in this process.
static SMAPS_READS: AtomicU64 = AtomicU64::new(0);

fn read_mapped_pages() -> MappedPages {
    SMAPS_READS.fetch_add(1, Ordering::Relaxed);
    let exe = std::env::current_exe().ok().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut pages = MappedPages::default();
    let mut current: Option<fn(&mut MappedPages) -> &mut u64> = None;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Rss:") {
            let kb: u64 = rest.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
            if let Some(field) = current {
                *field(&mut pages) += kb * 1024;
            }
        } else if is_mapping_header(line) {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            current = if !exe.is_empty() && path.starts_with(exe.as_str()) {
                Some(|p| &mut p.binary)
            } else if path.starts_with('/') && path.contains(".so") {
                Some(|p| &mut p.libraries)
            } else if path == "anon_inode:[io_uring]" {
                Some(|p| &mut p.uring_rings)
            } else {
                None
            };
        }
    }
    pages
}

/// A mapping's first line: `start-end perms offset dev inode [path]`.
fn is_mapping_header(line: &str) -> bool {
    let first = line.split(' ').next().unwrap_or("");
    first.split_once('-').is_some_and(|(a, b)| !a.is_empty() && a.bytes().all(|c| c.is_ascii_hexdigit()) && b.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// The breakdown, `(name, bytes)`, in the reply's order: `rss_bytes`
/// first, `unaccounted_bytes` (RSS less every other line) last.
pub fn breakdown(rt: &Runtime) -> Vec<(&'static str, i64)> {
    let shared = &rt.core;
    let e = shared.engine.stats();
    // -m's allocated bytes hold the flash tier's and most of the index's
    // and the ghost's: each is reported once, on its own line.
    let inside = e.flash_index_bytes + e.flash_buffer_bytes + e.charged_index_bytes;
    let mut parts: Vec<(&'static str, u64)> = vec![
        ("segments_bytes", e.malloced_bytes.saturating_sub(inside)),
        ("flash_index_bytes", e.flash_index_bytes),
        ("flash_buffers_bytes", e.flash_buffer_bytes),
        ("index_bytes", e.index_bytes),
        ("ghost_bytes", e.ghost_bytes),
        ("store_meta_bytes", e.meta_bytes),
        ("journal_bytes", rt.journal.resident_bytes()),
    ];
    let mapped = mapped_pages();
    let worker = |f: fn(&WorkerMemory) -> &AtomicU64| shared.worker_stats.iter().map(|w| f(&w.memory).load(Ordering::Relaxed)).sum::<u64>();
    parts.push(("uring_rings_bytes", mapped.uring_rings));
    parts.push(("uring_recv_buffers_bytes", worker(|m| &m.uring_recv_buffers)));
    parts.push(("read_pool_bytes", worker(|m| &m.read_pool)));
    let conns = shared.conns.snapshot();
    let conn_buffers = conns.iter().filter(|(_, c)| c.kind == ConnKind::Client).map(|(_, c)| c.buffer_bytes()).sum();
    parts.push(("conn_buffers_bytes", conn_buffers));
    parts.push(("conn_slots_bytes", worker(|m| &m.conn_slots)));
    parts.push(("flash_read_ahead_bytes", rt.flash.read_ahead.held()));
    parts.push(("mrc_bytes", crate::ops::mrc::bytes(rt.ops.mrc.as_ref())));
    parts.push(("latency_bytes", rt.ops.requests.iter().map(|w| w.latency_bytes() as u64).sum()));
    parts.push(("hotkeys_bytes", rt.ops.requests.iter().map(|w| w.hotkeys.bytes() as u64).sum()));
    parts.push(("binary_bytes", mapped.binary));
    parts.push(("libraries_bytes", mapped.libraries));
    parts.push(("malloc_free_bytes", crate::sys::malloc::info().map_or(0, |m| m.free_bytes)));
    // RSS last, so every structure above is measured before it.
    let rss = rss_bytes();
    let named: u64 = parts.iter().map(|&(_, b)| b).sum();
    let mut out = vec![("rss_bytes", rss as i64)];
    out.extend(parts.into_iter().map(|(n, b)| (n, b as i64)));
    out.push(("unaccounted_bytes", rss as i64 - named as i64));
    out
}

/// `stats memory`.
pub fn stats(rt: &Runtime, t: &mut Vec<(String, String)>) {
    for (name, bytes) in breakdown(rt) {
        t.push((name.to_string(), bytes.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_is_read_at_most_once_a_second() {
        let before = SMAPS_READS.load(Ordering::Relaxed);
        let start = Instant::now();
        for _ in 0..50 {
            assert!(mapped_pages().binary > 0);
        }
        let reads = SMAPS_READS.load(Ordering::Relaxed) - before;
        // Another test of this binary may read it too, and a slow machine
        // may cross into another second.
        let seconds = start.elapsed().as_secs() + 1;
        assert!(reads <= 2 * seconds, "{reads} readings of smaps for 50 breakdowns in {:?}", start.elapsed());
    }

    #[test]
    fn mapping_headers_are_told_from_fields() {
        assert!(is_mapping_header("55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234 /usr/bin/strata"));
        assert!(is_mapping_header("7ffd1000-7ffd2000 rw-p 00000000 00:00 0"));
        assert!(!is_mapping_header("Rss:                 132 kB"));
        assert!(!is_mapping_header("VmFlags: rd ex mr mw me dw"));
    }

    #[test]
    fn this_process_has_rss_and_its_binary_is_resident() {
        assert!(rss_bytes() > 0);
        assert!(mapped_pages().binary > 0, "the test binary's own pages are resident");
    }
}
