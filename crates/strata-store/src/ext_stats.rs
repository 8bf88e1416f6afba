//! The flash tier's counters, with memcached 1.6.45's stat names: the lines
//! `storage_stats` and the `get_*_extstore` lines of `server_stats` add to
//! `stats`, and the per-page lines of `stats extstore`
//! (`process_extstore_stats`). [`FlashTier::ext_stats`](crate::FlashTier::ext_stats)
//! returns them summed; an engine without a flash tier has none to give
//! (`Engine::flash` is None), so the server prints no extstore line, as
//! memcached without `ext_path`.
//!
//! Meanings in Strata (a "page" is a flash segment of `ext_page_size`):
//! - `objects_*` / `bytes_*`: items (key, value, a 32-byte flash header,
//!   padding to 16 bytes) written to flash, read back, live on flash now,
//!   and dropped when their page was reclaimed;
//! - `page_allocs`: pages opened for writing; `page_evictions`: pages
//!   reclaimed with live items on them; `page_reclaims`: pages reclaimed
//!   with none;
//! - `compact_rescues`: live items the log's compaction moved off a page
//!   it emptied (every live item of a page under `ext_max_frag`; of a page
//!   it evicted, those read since written); `compact_lost`: items it had
//!   no room to move; `compact_skipped`: unread items it left on a page it
//!   evicted (evicted with it); `compact_resc_cold`/`compact_resc_old`:
//!   memcached's page buckets for rescues, 0 in Strata (no such buckets);
//!   `page_evictions`: pages taken with live items left on them (the
//!   compactor evicted them: `extstore_compact_evict_pages`; a move found
//!   no room; without a compactor, FIFO order);
//! - `write_errors` / `write_fallbacks`: a failed or impossible write (error,
//!   full device) and the items that then were evicted as without flash;
//! - `reads_shared`: flash items answered from the bytes another key of
//!   the same request had read (a multi-get's keys in one device block):
//!   no I/O of their own, so `get_extstore` minus this is the reads issued;
//! - `bytes_padded`: zero bytes written before a record of up to 4 KiB
//!   that would have crossed a 4 KiB block, so that its read is one block,
//!   where that takes at most 256 bytes (included in `bytes_written`).

/// One `stats extstore` page row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtPageStats {
    /// `N:version`: bumped each time the page is (re)opened for writing.
    pub version: u64,
    /// `N:bytes`: bytes of live items on the page.
    pub bytes_used: u64,
    /// `N:bucket`: the bucket the page holds items of.
    pub bucket: u32,
    /// `N:free_bucket`: the bucket its file's free pages go to.
    pub free_bucket: u32,
}

/// Every counter memcached prints for extstore, plus Strata's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExtStats {
    // `stats`, from memcached's thread stats (reads of flash items).
    /// `get_extstore`: flash reads handed to the server.
    pub get_extstore: u64,
    /// `get_aborted_extstore`: reads given up (connection gone).
    pub get_aborted_extstore: u64,
    /// `get_oom_extstore`: reads that could not get a buffer (0 in Strata).
    pub get_oom_extstore: u64,
    /// `recache_from_extstore`: flash hits written back into RAM.
    pub recache_from_extstore: u64,
    /// `miss_from_extstore`: flash reads that found no valid item (replaced,
    /// reclaimed, expired or flushed meanwhile, read error).
    pub miss_from_extstore: u64,
    /// `badcrc_from_extstore`: flash reads whose item failed its check.
    pub badcrc_from_extstore: u64,

    // `stats`, storage_stats.
    /// `extstore_memory_pressure` (memcached: share of RAM pages kept for
    /// extstore headers; Strata: the write buffers' and the flash indexes'
    /// share of `-m`).
    pub memory_pressure: f64,
    pub compact_lost: u64,
    pub compact_rescues: u64,
    pub compact_resc_cold: u64,
    pub compact_resc_old: u64,
    pub compact_skipped: u64,
    pub page_allocs: u64,
    pub page_evictions: u64,
    pub page_reclaims: u64,
    pub pages_free: u64,
    pub pages_used: u64,
    pub objects_evicted: u64,
    pub objects_read: u64,
    pub objects_written: u64,
    pub objects_used: u64,
    pub bytes_evicted: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_used: u64,
    pub bytes_fragmented: u64,
    /// `extstore_limit_maxbytes`: pages x page size.
    pub limit_maxbytes: u64,
    /// `extstore_io_queue`: reads handed out and not yet finished.
    pub io_queue: u64,

    // Strata's own.
    /// Failed flash writes (I/O error or short write).
    pub write_errors: u64,
    /// Items that could not go to flash (write error, no free page) and
    /// were evicted instead.
    pub write_fallbacks: u64,
    /// Bytes of values clients stored (set, add, replace, cas, append,
    /// prepend, incr/decr rewrites), the denominator of write amplification.
    pub client_bytes_stored: u64,
    /// Bytes of RAM the flash indexes take, counted in `-m`.
    pub index_bytes: u64,
    /// Flash items answered from a read made for another key of the same
    /// request (`extstore_reads_shared`).
    pub reads_shared: u64,
    /// Zero bytes written before records that would otherwise have
    /// straddled a 4 KiB block (`extstore_bytes_padded`), at most 256
    /// bytes each: such a record is read with one block.
    pub bytes_padded: u64,

    /// Key and value bytes of every item that went to flash (the small
    /// store's and larger ones): application write amplification's
    /// denominator (`extstore_bytes_admitted`).
    pub bytes_admitted: u64,
    /// The log's compaction (`seg/flash/compact.rs`): pages it finished
    /// (`extstore_compact_pages`), of those the ones it evicted because
    /// no page was under `ext_max_frag` (`extstore_compact_evict_pages`),
    /// expired or flushed records it dropped (`extstore_compact_expired`),
    /// device bytes it read and record bytes it moved
    /// (`extstore_compact_bytes_read`, `extstore_compact_bytes_moved`),
    /// and the times the write buffers found no page ready
    /// (`extstore_compact_behind`: that item was not written to flash).
    pub compact_pages: u64,
    pub compact_evict_pages: u64,
    pub compact_expired: u64,
    pub compact_bytes_read: u64,
    pub compact_bytes_moved: u64,
    pub compact_behind: u64,
    /// The small store's figures (`extstore_small_*`); all 0 without it.
    pub small: SmallStats,

    /// `stats extstore`: one row per page.
    pub pages: Vec<ExtPageStats>,
}

/// The small store's figures (`seg/flash/small/`), Strata's own lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmallStats {
    /// Items in sets, and their key and value bytes.
    pub items_sets: u64,
    pub bytes_sets: u64,
    /// Items in partitions' logs (index entries naming a log record).
    pub items_log: u64,
    /// Tombstones: keys whose copy in a set is shadowed until a rewrite.
    pub tombstones: u64,
    /// Sets in every partition's extent.
    pub sets: u64,
    pub partitions: u64,
    /// Rewrites (merges) done, the sets and the log blocks they wrote.
    pub merges: u64,
    /// Rewrites given up (no page for the new sets, a write error).
    pub merges_failed: u64,
    pub sets_written: u64,
    pub log_blocks_written: u64,
    /// Bytes the small store wrote to the device (log blocks, sets, filters).
    pub bytes_written: u64,
    /// Items (and their key and value bytes) the small store took from RAM.
    pub items_admitted: u64,
    pub bytes_admitted: u64,
    /// Items a rewrite had no room for, or left out under the threshold.
    pub dropped: u64,
    /// Items a rewrite had no room for in their set while the partition
    /// could still grow, put back into its log.
    pub spilled: u64,
    /// Items leaving RAM the small store could not take (ring full, index
    /// at its share): written as larger items, or evicted.
    pub fallbacks: u64,
    /// Device reads of sets, the hits among them, and those that found no
    /// record of the key (the filter's false positives).
    pub set_reads: u64,
    pub set_hits: u64,
    pub false_positives: u64,
    /// Device reads of log blocks, and the hits among them.
    pub log_reads: u64,
    pub log_hits: u64,
    /// Tombstones written.
    pub tombstones_written: u64,
    /// RAM it takes, counted in `-m` (index, filters and hit bits, directories).
    pub ram_bytes: u64,
    /// Of which the indexes' slots and the sets' summaries.
    pub index_ram_bytes: u64,
    pub summary_ram_bytes: u64,
    /// Bytes a rewrite under way holds, outside `-m` (its log blocks,
    /// records, chunk buffers; 0 between rewrites).
    pub merge_bytes: u64,
    /// The log wanted a page and every sealed one held small-store data.
    pub tail_blocked: u64,
}

impl ExtStats {
    /// Bytes written to flash per byte clients stored (`extstore_write_amp`
    /// in Strata's `stats`; 0 before anything was stored).
    /// Bytes written to flash per byte of the items that went there
    /// (`extstore_admit_write_amp`; 0 before any went).
    pub fn admit_write_amplification(&self) -> f64 {
        if self.bytes_admitted == 0 {
            0.0
        } else {
            self.bytes_written as f64 / self.bytes_admitted as f64
        }
    }

    pub fn write_amplification(&self) -> f64 {
        if self.client_bytes_stored == 0 {
            0.0
        } else {
            self.bytes_written as f64 / self.client_bytes_stored as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_amplification_is_flash_bytes_per_stored_byte() {
        let mut s = ExtStats::default();
        assert_eq!(s.write_amplification(), 0.0);
        s.client_bytes_stored = 1000;
        s.bytes_written = 1500;
        assert_eq!(s.write_amplification(), 1.5);
    }
}
