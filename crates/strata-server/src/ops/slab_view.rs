//! The slab view of a segment store: `stats items`, `stats slabs` and
//! `stats sizes` in memcached 1.6's formats, from the engine's per-class
//! counters (`strata_store::class_stats`) and the class table memcached
//! would build for the running `-f`/`-n`/`-I`/`slab_chunk_max`/`slab_sizes`.
//!
//! ```text
//!  stats items:  items:<class>:<field> <value>, 28 fields a class, classes
//!                with live items only, smallest first (memcached's order)
//!  stats slabs:  <class>:<field> <value>, 15 fields a class, then
//!                active_slabs and total_malloced
//!  stats sizes:  <bucket bytes> <live items>, 32-byte buckets by memcached
//!                item size (-o track_sizes), else sizes_status disabled
//! ```
//!
//! What each value means next to memcached's is in docs/COMPATIBILITY.md
//! ("The slab view").

use std::fmt::Display;

use strata_store::{ClassCounters, ClassStats, SlabClasses};

use crate::ctx::Ctx;

/// `(name, value)` pairs, as `report/stats.rs` collects them.
type Stats = Vec<(String, String)>;

fn push(out: &mut Stats, name: String, value: impl Display) {
    out.push((name, value.to_string()));
}

/// The classes with live items, with their counters.
fn live_classes(stats: &ClassStats) -> impl Iterator<Item = (usize, &ClassCounters)> {
    stats.classes.iter().enumerate().skip(1).filter(|(_, c)| c.number() > 0)
}

pub fn items(crawler: &super::crawler::Crawler, ctx: &Ctx<'_>, out: &mut Stats) {
    let stats = ctx.core.engine.class_stats(ctx.core.clock.now());
    for (id, c) in live_classes(&stats) {
        let age = c.age_hot.max(c.age_warm);
        let crawled = crawler.class_counts(id);
        let fields: [(&str, u64); 28] = [
            ("number", c.number()),
            ("number_hot", c.number_hot),
            ("number_warm", c.number_warm),
            ("number_cold", c.number_cold),
            ("age_hot", u64::from(c.age_hot)),
            ("age_warm", u64::from(c.age_warm)),
            ("age", u64::from(age)),
            ("mem_requested", c.mem_requested + c.cold_bytes),
            ("evicted", c.evicted),
            ("evicted_nonzero", c.evicted_nonzero),
            ("evicted_time", u64::from(c.evicted_time)),
            ("outofmemory", c.outofmemory),
            ("tailrepairs", 0),
            ("reclaimed", c.reclaimed),
            ("expired_unfetched", c.expired_unfetched),
            ("evicted_unfetched", c.evicted_unfetched),
            ("evicted_active", c.evicted_active),
            ("crawler_reclaimed", crawled.reclaimed),
            ("crawler_items_checked", crawled.items_checked),
            ("lrutail_reflocked", 0),
            ("moves_to_cold", c.moves_to_cold),
            ("moves_to_warm", c.moves_to_warm),
            ("moves_within_lru", c.moves_within_lru),
            ("direct_reclaims", 0),
            ("hits_to_hot", c.hits_to_hot),
            ("hits_to_warm", c.hits_to_warm),
            ("hits_to_cold", 0),
            ("hits_to_temp", 0),
        ];
        for (name, value) in fields {
            push(out, format!("items:{id}:{name}"), value);
        }
    }
}

/// Pages a class would hold in memcached: enough for the most items it
/// has held at once (memcached does not give a class's pages back).
fn pages(classes: &SlabClasses, id: usize, peak: u64) -> u64 {
    peak.div_ceil(classes.chunks_per_page(id) as u64).max(1)
}

pub fn slabs(ctx: &Ctx<'_>, out: &mut Stats) {
    let stats = ctx.core.engine.class_stats(ctx.core.clock.now());
    let classes = &ctx.core.classes;
    let mut active = 0;
    for (id, c) in stats.classes.iter().enumerate().skip(1).filter(|(_, c)| c.number_max > 0) {
        active += 1;
        let per_page = classes.chunks_per_page(id) as u64;
        let used = c.number();
        let total_pages = pages(&classes, id, c.number_max.max(used));
        let total = total_pages * per_page;
        let fields: [(&str, u64); 15] = [
            ("chunk_size", classes.chunk_size(id) as u64),
            ("chunks_per_page", per_page),
            ("total_pages", total_pages),
            ("total_chunks", total),
            ("used_chunks", used),
            ("free_chunks", total - used),
            ("free_chunks_end", 0),
            ("get_hits", c.get_hits),
            ("cmd_set", c.cmd_set),
            ("delete_hits", c.delete_hits),
            ("incr_hits", c.incr_hits),
            ("decr_hits", c.decr_hits),
            ("cas_hits", c.cas_hits),
            ("cas_badval", c.cas_badval),
            ("touch_hits", c.touch_hits),
        ];
        for (name, value) in fields {
            push(out, format!("{id}:{name}"), value);
        }
    }
    push(out, "active_slabs".to_string(), active);
    push(out, "total_malloced".to_string(), ctx.core.engine.stats().malloced_bytes);
}

pub fn sizes(ctx: &Ctx<'_>, out: &mut Stats) {
    let stats = ctx.core.engine.class_stats(ctx.core.clock.now());
    match &stats.sizes {
        Some(sizes) if ctx.core.settings.track_sizes => {
            for (bucket, &count) in sizes.iter().enumerate().filter(|(_, &n)| n > 0) {
                push(out, (bucket * 32).to_string(), count);
            }
        }
        _ => push(out, "sizes_status".to_string(), "disabled"),
    }
}
