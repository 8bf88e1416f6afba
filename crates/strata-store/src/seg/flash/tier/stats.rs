//! The tier's counters as `stats` and `stats extstore` show them
//! (`ext_stats.rs` gives each line's meaning).

use std::sync::atomic::Ordering;

use super::{lock, Inner};
use crate::{ExtPageStats, ExtStats};

fn relaxed() -> Ordering {
    Ordering::Relaxed
}

impl Inner {
    pub fn stats(&self) -> ExtStats {
        let c = &self.c;
        let r = relaxed();
        let w = lock(&self.writer);
        let pages_free = w.free.len() as u64;
        drop(w);
        let n = self.spots.len() as u64;
        let pages: Vec<ExtPageStats> = (0..self.spots.len())
            .map(|p| ExtPageStats {
                version: u64::from(self.versions[p].load(r)),
                bytes_used: self.live_bytes(p),
                bucket: self.buckets[p],
                free_bucket: self.buckets[p],
            })
            .collect();
        let objects_used = self.live_items.iter().map(|a| a.load(r)).sum();
        let bytes_used: u64 = pages.iter().map(|p| p.bytes_used).sum();
        let pages_used = n - pages_free;
        ExtStats {
            get_extstore: c.get_extstore.load(r),
            get_aborted_extstore: c.get_aborted.load(r),
            recache_from_extstore: c.recache.load(r),
            miss_from_extstore: c.miss.load(r),
            badcrc_from_extstore: c.badcrc.load(r),
            compact_lost: c.compact_lost.load(r),
            compact_rescues: c.compact_rescues.load(r),
            page_allocs: c.page_allocs.load(r),
            page_evictions: c.page_evictions.load(r),
            page_reclaims: c.page_reclaims.load(r),
            pages_free,
            pages_used,
            objects_evicted: c.objects_evicted.load(r),
            objects_read: c.objects_read.load(r),
            objects_written: c.objects_written.load(r),
            objects_used,
            bytes_evicted: c.bytes_evicted.load(r),
            bytes_written: c.bytes_written.load(r),
            bytes_read: c.bytes_read.load(r),
            bytes_used,
            bytes_fragmented: (pages_used * self.page_size).saturating_sub(bytes_used),
            limit_maxbytes: n * self.page_size,
            io_queue: c.io_queue.load(r),
            write_errors: c.write_errors.load(r),
            reads_shared: c.reads_shared.load(r),
            bytes_padded: c.bytes_padded.load(r),
            write_fallbacks: c.write_fallbacks.load(r),
            compact_skipped: c.compact_skipped.load(r),
            compact_pages: c.compact_pages.load(r),
            compact_evict_pages: c.compact_evict_pages.load(r),
            compact_expired: c.compact_expired.load(r),
            compact_bytes_read: c.compact_bytes_read.load(r),
            compact_bytes_moved: c.compact_bytes_moved.load(r),
            compact_behind: c.compact_behind.load(r),
            pages,
            ..ExtStats::default()
        }
    }
}
