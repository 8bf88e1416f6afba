//! The flash tier's operator side: `extstore <name> <value>` (memcached
//! 1.6.45's `process_extstore_command`), and what `stats settings`, `stats`
//! and `stats extstore` print of the tier.
//!
//! memcached keeps the tunables in its global `settings` and its storage
//! threads read them as they go; here they are the engine's
//! [`ExtTunables`](strata_store::ExtTunables), relaxed atomics behind the
//! `Arc` in `Settings::ext` that the engine holds too, so a change takes
//! effect at the next item the engine looks at. As in memcached, the command
//! is answered (`OK`) whether or not a flash tier runs; without one the
//! values only show in `stats settings`.

use std::sync::atomic::Ordering;

use strata_proto::admin::ExtTunable as Wire;
use strata_store::{ExtStats, ExtTunable};

use crate::ctx::Ctx;

/// `extstore <name> <value>`: `OK` once the value parsed, `ERROR`
/// otherwise (`None`).
pub fn command(ctx: &Ctx<'_>, set: Option<Wire>) -> &'static str {
    let Some(wire) = set else { return "ERROR" };
    let change = match wire {
        Wire::ItemSize(v) => ExtTunable::ItemSize(v),
        Wire::ItemAge(v) => ExtTunable::ItemAge(v),
        Wire::LowTtl(v) => ExtTunable::LowTtl(v),
        Wire::RecacheRate(v) => ExtTunable::RecacheRate(v),
        Wire::CompactUnder(v) => ExtTunable::CompactUnder(v),
        Wire::DropUnder(v) => ExtTunable::DropUnder(v),
        Wire::MaxSleep(v) => ExtTunable::MaxSleep(v),
        Wire::MaxFrag(v) => ExtTunable::MaxFrag(v),
        Wire::DropUnread(v) => ExtTunable::DropUnread(v),
        // Deprecated in memcached: checked, accepted, ignored.
        Wire::FreeMemchunks => return "OK",
    };
    ctx.core.settings.ext.tunables.set(change);
    "OK"
}

/// memcached 1.6.45's extstore lines of `stats settings` (a build with
/// extstore, as Debian's and 1.6.45's are, prints them with or without
/// `ext_path`), `slab_automove_freeratio` among them.
pub fn settings_lines(ctx: &Ctx<'_>, stat: &mut dyn FnMut(&'static str, String)) {
    let settings = &ctx.core.settings;
    let ext = &settings.ext;
    let t = &ext.tunables;
    let load = |a: &std::sync::atomic::AtomicU32| a.load(Ordering::Relaxed).to_string();
    stat("ext_item_size", load(&t.item_size));
    stat("ext_item_age", load(&t.item_age));
    stat("ext_low_ttl", load(&t.low_ttl));
    stat("ext_recache_rate", load(&t.recache_rate));
    stat("ext_wbuf_size", ext.wbuf_size_bytes.to_string());
    stat("ext_compact_under", load(&t.compact_under));
    stat("ext_drop_under", load(&t.drop_under));
    stat("ext_max_sleep", load(&t.max_sleep));
    stat("ext_max_frag", format!("{:.2}", t.max_frag()));
    stat("slab_automove_freeratio", format!("{:.3}", settings.tunables.slab_automove_freeratio));
    let drop_unread = t.drop_unread.load(Ordering::Relaxed);
    stat("ext_drop_unread", if drop_unread { "yes" } else { "no" }.to_string());
}

/// Strata's small store settings, among Strata's own after memcached's.
pub fn small_settings_lines(ctx: &Ctx<'_>, stat: &mut dyn FnMut(&'static str, String)) {
    let ext = &ctx.core.settings.ext;
    stat("ext_small_item_max", ext.small_item_max.to_string());
    stat("ext_log_share", ext.log_percent.to_string());
    stat("ext_set_size", ext.set_size_bytes.to_string());
    stat("ext_set_bloom_bits", ext.set_bloom_bits.to_string());
    stat("ext_set_threshold", ext.set_threshold.to_string());
}

/// The `get_*_extstore` lines memcached's `server_stats` prints after
/// `get_flushed` while extstore runs.
pub fn get_lines(e: &ExtStats, stat: &mut dyn FnMut(&'static str, String)) {
    stat("get_extstore", e.get_extstore.to_string());
    stat("get_aborted_extstore", e.get_aborted_extstore.to_string());
    stat("get_oom_extstore", e.get_oom_extstore.to_string());
    stat("recache_from_extstore", e.recache_from_extstore.to_string());
    stat("miss_from_extstore", e.miss_from_extstore.to_string());
    stat("badcrc_from_extstore", e.badcrc_from_extstore.to_string());
}

/// memcached's `storage_stats`, which `stats` prints after `log_watchers`.
pub fn storage_lines(e: &ExtStats, stat: &mut dyn FnMut(&'static str, String)) {
    stat("extstore_memory_pressure", format!("{:.2}", e.memory_pressure));
    for (name, value) in [
        ("extstore_compact_lost", e.compact_lost),
        ("extstore_compact_rescues", e.compact_rescues),
        ("extstore_compact_resc_cold", e.compact_resc_cold),
        ("extstore_compact_resc_old", e.compact_resc_old),
        ("extstore_compact_skipped", e.compact_skipped),
        ("extstore_page_allocs", e.page_allocs),
        ("extstore_page_evictions", e.page_evictions),
        ("extstore_page_reclaims", e.page_reclaims),
        ("extstore_pages_free", e.pages_free),
        ("extstore_pages_used", e.pages_used),
        ("extstore_objects_evicted", e.objects_evicted),
        ("extstore_objects_read", e.objects_read),
        ("extstore_objects_written", e.objects_written),
        ("extstore_objects_used", e.objects_used),
        ("extstore_bytes_evicted", e.bytes_evicted),
        ("extstore_bytes_written", e.bytes_written),
        ("extstore_bytes_read", e.bytes_read),
        ("extstore_bytes_used", e.bytes_used),
        ("extstore_bytes_fragmented", e.bytes_fragmented),
        ("extstore_limit_maxbytes", e.limit_maxbytes),
        ("extstore_io_queue", e.io_queue),
    ] {
        stat(name, value.to_string());
    }
}

/// Strata's own flash lines, after memcached's fields: failed writes, items
/// evicted because they could not go to flash, the bytes clients stored,
/// flash bytes written per byte stored (write amplification), the
/// flash indexes' bytes (counted in `-m`), and the flash items answered
/// from another key's read of the same request, the zero bytes
/// written so that a record straddles no block when at most 256 bytes of
/// padding prevents it, and the log's compaction (pages finished and
/// evicted, records dropped as expired, bytes read and moved, the times
/// the write buffers found no page ready).
pub fn own_lines(e: &ExtStats, stat: &mut dyn FnMut(&'static str, String)) {
    stat("extstore_write_errors", e.write_errors.to_string());
    stat("extstore_write_fallbacks", e.write_fallbacks.to_string());
    stat("extstore_client_bytes_stored", e.client_bytes_stored.to_string());
    stat("extstore_write_amp", format!("{:.3}", e.write_amplification()));
    stat("extstore_index_bytes", e.index_bytes.to_string());
    stat("extstore_reads_shared", e.reads_shared.to_string());
    stat("extstore_bytes_padded", e.bytes_padded.to_string());
    stat("extstore_bytes_admitted", e.bytes_admitted.to_string());
    stat("extstore_admit_write_amp", format!("{:.3}", e.admit_write_amplification()));
    for (name, value) in [
        ("extstore_compact_pages", e.compact_pages),
        ("extstore_compact_evict_pages", e.compact_evict_pages),
        ("extstore_compact_expired", e.compact_expired),
        ("extstore_compact_bytes_read", e.compact_bytes_read),
        ("extstore_compact_bytes_moved", e.compact_bytes_moved),
        ("extstore_compact_behind", e.compact_behind),
    ] {
        stat(name, value.to_string());
    }
}

/// The small store's lines (`ext_small_item_max` above 0), after Strata's
/// other flash lines: where its items are, what it wrote and read.
pub fn small_lines(e: &ExtStats, stat: &mut dyn FnMut(&'static str, String)) {
    let s = &e.small;
    for (name, value) in [
        ("extstore_small_items_sets", s.items_sets),
        ("extstore_small_bytes_sets", s.bytes_sets),
        ("extstore_small_items_log", s.items_log),
        ("extstore_small_tombstones", s.tombstones),
        ("extstore_small_sets", s.sets),
        ("extstore_small_partitions", s.partitions),
        ("extstore_small_merges", s.merges),
        ("extstore_small_merges_failed", s.merges_failed),
        ("extstore_small_sets_written", s.sets_written),
        ("extstore_small_log_blocks_written", s.log_blocks_written),
        ("extstore_small_bytes_written", s.bytes_written),
        ("extstore_small_items_admitted", s.items_admitted),
        ("extstore_small_bytes_admitted", s.bytes_admitted),
        ("extstore_small_dropped", s.dropped),
        ("extstore_small_spilled", s.spilled),
        ("extstore_small_fallbacks", s.fallbacks),
        ("extstore_small_set_reads", s.set_reads),
        ("extstore_small_set_hits", s.set_hits),
        ("extstore_small_false_positives", s.false_positives),
        ("extstore_small_log_reads", s.log_reads),
        ("extstore_small_log_hits", s.log_hits),
        ("extstore_small_tombstones_written", s.tombstones_written),
        ("extstore_small_ram_bytes", s.ram_bytes),
        ("extstore_small_index_bytes", s.index_ram_bytes),
        ("extstore_small_summary_bytes", s.summary_ram_bytes),
        ("extstore_small_merge_bytes", s.merge_bytes),
        ("extstore_small_tail_blocked", s.tail_blocked),
    ] {
        stat(name, value.to_string());
    }
}

/// `stats extstore`: memcached's `process_extstore_stats`, four lines per
/// page (`N:version`, `N:bytes`, `N:bucket`, `N:free_bucket`); nothing
/// without a flash tier.
pub fn pages(ctx: &Ctx<'_>, stat: &mut dyn FnMut(String, String)) {
    let Some(e) = ctx.core.engine.flash().map(|tier| tier.ext_stats()) else { return };
    for (i, p) in e.pages.iter().enumerate() {
        stat(format!("{i}:version"), p.version.to_string());
        stat(format!("{i}:bytes"), p.bytes_used.to_string());
        stat(format!("{i}:bucket"), p.bucket.to_string());
        stat(format!("{i}:free_bucket"), p.free_bucket.to_string());
    }
}
