//! `/metrics`: the Prometheus text exposition format (version 0.0.4), with
//! the metric names, labels and types the Prometheus memcached_exporter
//! emits for memcached, so dashboards built on the exporter work pointed
//! straight at Strata, then Strata's own families under `strata_`.
//!
//! Nothing here runs on the request path: a scrape collects the same
//! `(name, value)` pairs `stats`, `stats settings`, `stats items` and `stats
//! slabs` print (`report::stats::collect`, on the metrics thread), and maps
//! them as the exporter's collector (`pkg/exporter/exporter.go`) maps what
//! it reads over the wire: the same keys, the same conditions (extstore
//! families only when `extstore_limit_maxbytes` is there, the LRU crawler's
//! settings only while it is enabled), the same derived values (`set`
//! hits are `cmd_set` less the CAS commands).
//!
//! ```text
//!  stats groups ──► StatMaps ──► Exposition: family name ─► (help, type, samples)
//!                                 BTreeMap, so families come out sorted and each
//!                                 family's samples together, as the format needs
//! ```
//!
//! The latency histograms of `stats latency` come from `ops/latency.rs`
//! ([`latency_families`]), the miss-ratio curve of `stats mrc` from
//! `ops/mrc.rs` (`strata_mrc_miss_ratio{megabytes="..."}`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::stats::{collect as collect_stats, Group as StatsGroup};
use crate::ctx::Ctx;
use crate::runtime::Runtime;
use crate::stats::WorkerStats;

/// A family's type line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

struct Family {
    help: &'static str,
    kind: Kind,
    /// Sample lines without the family name: `{labels} value`.
    samples: Vec<String>,
}

/// The families of one scrape, written out sorted by name.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
}

impl Exposition {
    /// Add a sample; the first sample of a family sets its help and type.
    pub fn sample(&mut self, name: &str, help: &'static str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        self.sample_in(name, "", help, kind, labels, value);
    }

    /// One histogram series of family `name`: `(upper bound in the
    /// family's unit, cumulative count)` per bucket, ascending (the `+Inf`
    /// bucket is added from `count`), then `_sum` and `_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &'static str,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        for (le, cumulative) in buckets {
            let le = format_value(*le);
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            self.sample_in(name, "_bucket", help, Kind::Histogram, &with_le, *cumulative as f64);
        }
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample_in(name, "_bucket", help, Kind::Histogram, &with_le, count as f64);
        self.sample_in(name, "_sum", help, Kind::Histogram, labels, sum);
        self.sample_in(name, "_count", help, Kind::Histogram, labels, count as f64);
    }

    /// A sample named `name` + `suffix` in family `name`.
    fn sample_in(&mut self, name: &str, suffix: &str, help: &'static str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        let family =
            self.families.entry(name.to_string()).or_insert_with(|| Family { help, kind, samples: Vec::new() });
        let mut line = String::from(suffix);
        if !labels.is_empty() {
            line.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{label}=\"{}\"", escape_label(v));
            }
            line.push('}');
        }
        let _ = write!(line, " {}", format_value(value));
        family.samples.push(line);
    }

    /// The body of the reply.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(self.families.len() * 160);
        for (name, f) in &self.families {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.name());
            for s in &f.samples {
                let _ = writeln!(out, "{name}{s}");
            }
        }
        out
    }
}

/// Label values escape `\`, `"` and newline (the format's rule).
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Whole numbers as integers (what `stats` printed), others as Rust prints
/// an f64 (which Prometheus' parser reads back exactly).
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// What the four stats groups printed, keyed as the exporter keys them.
struct StatMaps {
    general: HashMap<String, String>,
    settings: HashMap<String, String>,
    /// `stats items`, per class: `items:<class>:<field>`.
    items: BTreeMap<u32, HashMap<String, String>>,
    /// `stats slabs`, per class: `<class>:<field>`; the global lines too.
    slabs: BTreeMap<u32, HashMap<String, String>>,
    slabs_global: HashMap<String, String>,
}

fn group(rt: &Runtime, ctx: &Ctx<'_>, name: &[u8]) -> Vec<(String, String)> {
    match collect_stats(rt, ctx, name) {
        StatsGroup::Values(v) => v,
        _ => Vec::new(),
    }
}

impl StatMaps {
    fn collect(rt: &Runtime) -> StatMaps {
        let scratch = WorkerStats::default();
        let ctx = Ctx::new(&rt.core, &scratch);
        let mut items: BTreeMap<u32, HashMap<String, String>> = BTreeMap::new();
        for (k, v) in group(rt, &ctx, b"items") {
            let mut parts = k.splitn(3, ':');
            if let (Some("items"), Some(class), Some(field)) = (parts.next(), parts.next(), parts.next()) {
                if let Ok(class) = class.parse() {
                    items.entry(class).or_default().insert(field.to_string(), v);
                }
            }
        }
        let mut slabs: BTreeMap<u32, HashMap<String, String>> = BTreeMap::new();
        let mut slabs_global = HashMap::new();
        for (k, v) in group(rt, &ctx, b"slabs") {
            match k.split_once(':').and_then(|(c, f)| Some((c.parse::<u32>().ok()?, f))) {
                Some((class, field)) => {
                    slabs.entry(class).or_default().insert(field.to_string(), v);
                }
                None => {
                    slabs_global.insert(k, v);
                }
            }
        }
        StatMaps {
            general: group(rt, &ctx, b"").into_iter().collect(),
            settings: group(rt, &ctx, b"settings").into_iter().collect(),
            items,
            slabs,
            slabs_global,
        }
    }
}

/// A stat as the exporter parses it: a float, `yes`/`no` for booleans.
fn number(map: &HashMap<String, String>, key: &str) -> Option<f64> {
    let v = map.get(key)?;
    match v.as_str() {
        "yes" => Some(1.0),
        "no" => Some(0.0),
        _ => v.parse().ok(),
    }
}

/// One stat to one family, skipped when the stat is not there (as the
/// exporter skips a missing key).
struct Simple {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    key: &'static str,
}

const fn c(name: &'static str, key: &'static str, help: &'static str) -> Simple {
    Simple { name, help, kind: Kind::Counter, key }
}

const fn g(name: &'static str, key: &'static str, help: &'static str) -> Simple {
    Simple { name, help, kind: Kind::Gauge, key }
}

const GENERAL: &[Simple] = &[
    c("memcached_uptime_seconds", "uptime", "Number of seconds since the server started."),
    g("memcached_time_seconds", "time", "current UNIX time according to the server."),
    c("memcached_process_user_cpu_seconds_total", "rusage_user", "Accumulated user time for this process."),
    c("memcached_process_system_cpu_seconds_total", "rusage_system", "Accumulated system time for this process."),
    g("memcached_current_bytes", "bytes", "Current number of bytes used to store items."),
    g("memcached_limit_bytes", "limit_maxbytes", "Number of bytes this server is allowed to use for storage."),
    g("memcached_current_items", "curr_items", "Current number of items stored by this instance."),
    c("memcached_items_total", "total_items", "Total number of items stored during the life of this instance."),
    c("memcached_read_bytes_total", "bytes_read", "Total number of bytes read by this server from network."),
    c("memcached_written_bytes_total", "bytes_written", "Total number of bytes sent by this server to network."),
    g("memcached_current_connections", "curr_connections", "Current number of open connections."),
    c("memcached_connections_total", "total_connections", "Total number of connections opened since the server started running."),
    c("memcached_connections_rejected_total", "rejected_connections", "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode."),
    c("memcached_connections_yielded_total", "conn_yields", "Total number of connections yielded running due to hitting the memcached's -R limit."),
    c("memcached_connections_listener_disabled_total", "listen_disabled_num", "Number of times that memcached has hit its connections limit and disabled its listener."),
    c("memcached_items_evicted_total", "evictions", "Total number of valid items removed from cache to free memory for new items."),
    c("memcached_items_reclaimed_total", "reclaimed", "Total number of times an entry was stored using memory from an expired entry."),
    c("memcached_item_too_large_total", "store_too_large", "The number of times an item exceeded the max-item-size when being stored."),
    c("memcached_item_no_memory_total", "store_no_memory", "The number of times an item could not be stored due to no more memory."),
    c("memcached_lru_crawler_starts_total", "lru_crawler_starts", "Times an LRU crawler was started."),
    c("memcached_direct_reclaims_total", "direct_reclaims", "Times worker threads had to directly reclaim or evict items."),
    c("memcached_lru_crawler_items_checked_total", "crawler_items_checked", "Total items examined by LRU Crawler."),
    c("memcached_lru_crawler_reclaimed_total", "crawler_reclaimed", "Total items freed by LRU Crawler."),
    c("memcached_lru_crawler_moves_to_cold_total", "moves_to_cold", "Total number of items moved from HOT/WARM to COLD LRU's."),
    c("memcached_lru_crawler_moves_to_warm_total", "moves_to_warm", "Total number of items moved from COLD to WARM LRU."),
    c("memcached_lru_crawler_moves_within_lru_total", "moves_within_lru", "Total number of items reshuffled within HOT or WARM LRU's."),
    g("memcached_accepting_connections", "accepting_conns", "The Memcached server is currently accepting new connections."),
];

/// Only while `extstore_limit_maxbytes` is in `stats` (a flash tier runs).
const EXTSTORE: &[Simple] = &[
    c("memcached_extstore_compact_lost_total", "extstore_compact_lost", "Total number of items lost because they were locked during extstore compaction."),
    c("memcached_extstore_compact_rescued_total", "extstore_compact_rescues", "Total number of items moved to a new page during extstore compaction,"),
    c("memcached_extstore_compact_skipped_total", "extstore_compact_skipped", "Total number of items dropped due to inactivity during extstore compaction."),
    c("memcached_extstore_pages_allocated_total", "extstore_page_allocs", "Total number of times a page was allocated in extstore."),
    c("memcached_extstore_pages_evicted_total", "extstore_page_evictions", "Total number of times a page was evicted from extstore."),
    c("memcached_extstore_pages_reclaimed_total", "extstore_page_reclaims", "Total number of times an empty extstore page was freed."),
    g("memcached_extstore_pages_free", "extstore_pages_free", "Number of extstore pages not yet containing any items."),
    g("memcached_extstore_pages_used", "extstore_pages_used", "Number of extstore pages containing at least one item."),
    c("memcached_extstore_objects_evicted_total", "extstore_objects_evicted", "Total number of items evicted from extstore to free up space."),
    c("memcached_extstore_objects_read_total", "extstore_objects_read", "Total number of items read from extstore."),
    c("memcached_extstore_objects_written_total", "extstore_objects_written", "Total number of items written to extstore."),
    g("memcached_extstore_objects_used", "extstore_objects_used", "Number of items stored in extstore."),
    c("memcached_extstore_bytes_evicted_total", "extstore_bytes_evicted", "Total number of bytes evicted from extstore to free up space."),
    c("memcached_extstore_bytes_written_total", "extstore_bytes_written", "Total number of bytes written to extstore."),
    c("memcached_extstore_bytes_read_total", "extstore_bytes_read", "Total number of bytes read from extstore."),
    c("memcached_extstore_bytes_used", "extstore_bytes_used", "Current number of bytes used to store items in extstore."),
    g("memcached_extstore_bytes_fragmented", "extstore_bytes_fragmented", "Current number of bytes in extstore pages allocated but not used to store an object."),
    g("memcached_extstore_bytes_limit", "extstore_limit_maxbytes", "Number of bytes of external storage allocated for this server."),
    g("memcached_extstore_io_queue_depth", "extstore_io_queue", "Number of items in the I/O queue waiting to be processed."),
];

/// `stats settings`, only while `lru_crawler` is `yes` (the exporter's rule).
const CRAWLER_SETTINGS: &[Simple] = &[
    g("memcached_lru_crawler_enabled", "lru_crawler", "Whether the LRU crawler is enabled."),
    g("memcached_lru_crawler_sleep", "lru_crawler_sleep", "Microseconds to sleep between LRU crawls."),
    g("memcached_lru_crawler_to_crawl", "lru_crawler_tocrawl", "Max items to crawl per slab per run."),
    g("memcached_lru_crawler_maintainer_thread", "lru_maintainer_thread", "Split LRU mode and background threads."),
    g("memcached_lru_crawler_hot_percent", "hot_lru_pct", "Percent of slab memory reserved for HOT LRU."),
    g("memcached_lru_crawler_warm_percent", "warm_lru_pct", "Percent of slab memory reserved for WARM LRU."),
    g("memcached_lru_crawler_hot_max_factor", "hot_max_factor", "Set idle age of HOT LRU to COLD age * this"),
    g("memcached_lru_crawler_warm_max_factor", "warm_max_factor", "Set idle age of WARM LRU to COLD age * this"),
];

/// `stats items` fields, per class (label `slab`).
const ITEMS: &[Simple] = &[
    g("memcached_slab_current_items", "number", "Number of items currently stored in this slab class."),
    g("memcached_slab_items_age_seconds", "age", "Number of seconds the oldest item has been in the slab class."),
    c("memcached_slab_items_crawler_reclaimed_total", "crawler_reclaimed", "Number of items freed by the LRU Crawler."),
    c("memcached_slab_items_evicted_total", "evicted", "Total number of times an item had to be evicted from the LRU before it expired."),
    c("memcached_slab_items_evicted_nonzero_total", "evicted_nonzero", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    c("memcached_slab_items_evicted_time_seconds", "evicted_time", "Seconds since the last access for the most recent item evicted from this class."),
    c("memcached_slab_items_evicted_unfetched_total", "evicted_unfetched", "Total nmber of items evicted and never fetched."),
    c("memcached_slab_items_expired_unfetched_total", "expired_unfetched", "Total number of valid items evicted from the LRU which were never touched after being set."),
    c("memcached_slab_items_outofmemory_total", "outofmemory", "Total number of items for this slab class that have triggered an out of memory error."),
    c("memcached_slab_items_reclaimed_total", "reclaimed", "Total number of items reclaimed."),
    c("memcached_slab_items_tailrepairs_total", "tailrepairs", "Total number of times the entries for a particular ID need repairing."),
    c("memcached_slab_mem_requested_bytes", "mem_requested", "Number of bytes of memory actual items take up within a slab."),
    c("memcached_slab_items_moves_to_cold", "moves_to_cold", "Number of items moved from HOT or WARM into COLD."),
    c("memcached_slab_items_moves_to_warm", "moves_to_warm", "Number of items moves from COLD into WARM."),
    c("memcached_slab_items_moves_within_lru", "moves_within_lru", "Number of times active items were bumped within HOT or WARM."),
    g("memcached_slab_hot_items", "number_hot", "Number of items presently stored in the HOT LRU."),
    g("memcached_slab_warm_items", "number_warm", "Number of items presently stored in the WARM LRU."),
    g("memcached_slab_cold_items", "number_cold", "Number of items presently stored in the COLD LRU."),
    g("memcached_slab_temporary_items", "number_temp", "Number of items presently stored in the TEMPORARY LRU."),
    g("memcached_slab_hot_age_seconds", "age_hot", "Age of the oldest item in HOT LRU."),
    g("memcached_slab_warm_age_seconds", "age_warm", "Age of the oldest item in HOT LRU."),
];

/// `stats slabs` fields, per class (label `slab`).
const SLABS: &[Simple] = &[
    g("memcached_slab_chunk_size_bytes", "chunk_size", "Number of bytes allocated to each chunk within this slab class."),
    g("memcached_slab_chunks_per_page", "chunks_per_page", "Number of chunks within a single page for this slab class."),
    g("memcached_slab_current_pages", "total_pages", "Number of pages allocated to this slab class."),
    g("memcached_slab_current_chunks", "total_chunks", "Number of chunks allocated to this slab class."),
    g("memcached_slab_chunks_used", "used_chunks", "Number of chunks allocated to an item."),
    g("memcached_slab_chunks_free", "free_chunks", "Number of chunks not yet allocated items."),
    g("memcached_slab_chunks_free_end", "free_chunks_end", "Number of free chunks at the end of the last allocated page."),
    g("memcached_slab_mem_requested_bytes", "mem_requested", "Number of bytes of memory actual items take up within a slab."),
];

const COMMANDS_HELP: &str = "Total number of all requests broken down by command (get, set, etc.) and status.";
const SLAB_COMMANDS_HELP: &str =
    "Total number of all requests broken down by command (get, set, etc.) and status per slab.";
const LRU_HITS_HELP: &str = "Number of get_hits to the LRU.";
const OPS: [&str; 6] = ["get", "delete", "incr", "decr", "cas", "touch"];

fn simple(x: &mut Exposition, table: &[Simple], map: &HashMap<String, String>, labels: &[(&str, &str)]) {
    for s in table {
        if let Some(v) = number(map, s.key) {
            x.sample(s.name, s.help, s.kind, labels, v);
        }
    }
}

fn sum(map: &HashMap<String, String>, keys: &[&str]) -> Option<f64> {
    keys.iter().map(|k| number(map, k)).sum()
}

/// The memcached_exporter's families, from the stats maps.
fn exporter_families(x: &mut Exposition, m: &StatMaps) {
    let s = &m.general;
    x.sample("memcached_up", "Could the memcached server be reached.", Kind::Gauge, &[], 1.0);
    if let Some(version) = s.get("version") {
        x.sample("memcached_version", "The version of this memcached server.", Kind::Gauge, &[("version", version)], 1.0);
    }
    let cmd = |x: &mut Exposition, command: &str, status: &str, v: Option<f64>| {
        if let Some(v) = v {
            x.sample("memcached_commands_total", COMMANDS_HELP, Kind::Counter, &[("command", command), ("status", status)], v);
        }
    };
    for op in OPS {
        cmd(x, op, "hit", number(s, &format!("{op}_hits")));
        cmd(x, op, "miss", number(s, &format!("{op}_misses")));
    }
    cmd(x, "cas", "badval", number(s, "cas_badval"));
    cmd(x, "flush", "hit", number(s, "cmd_flush"));
    // memcached counts CAS commands in cmd_set too.
    if let (Some(set), Some(cas)) = (number(s, "cmd_set"), sum(s, &["cas_misses", "cas_hits", "cas_badval"])) {
        cmd(x, "set", "hit", Some(set - cas));
    }
    if s.contains_key("extstore_limit_maxbytes") {
        simple(x, EXTSTORE, s, &[]);
    }
    simple(x, GENERAL, s, &[]);
    // memcached prints total_malloced in `stats slabs`; the exporter's
    // client merges that group's global lines into the general stats.
    if let Some(v) = number(s, "total_malloced").or_else(|| number(&m.slabs_global, "total_malloced")) {
        let help = "Number of bytes of memory allocated to slab pages.";
        x.sample("memcached_malloced_bytes", help, Kind::Gauge, &[], v);
    }
    if let Some(v) = number(&m.settings, "maxconns") {
        x.sample("memcached_max_connections", "Maximum number of clients allowed.", Kind::Gauge, &[], v);
    }
    if m.settings.get("lru_crawler").map(String::as_str) == Some("yes") {
        simple(x, CRAWLER_SETTINGS, &m.settings, &[]);
    }
    for (class, u) in &m.items {
        let slab = class.to_string();
        simple(x, ITEMS, u, &[("slab", &slab)]);
        for (key, lru) in [("hits_to_hot", "hot"), ("hits_to_warm", "warm"), ("hits_to_cold", "cold"), ("hits_to_temp", "temporary")] {
            if let Some(v) = number(u, key) {
                x.sample("memcached_slab_lru_hits_total", LRU_HITS_HELP, Kind::Counter, &[("lru", lru), ("slab", &slab)], v);
            }
        }
    }
    for (class, v) in &m.slabs {
        let slab = class.to_string();
        let slab_cmd = |x: &mut Exposition, command: &str, status: &str, value: Option<f64>| {
            if let Some(value) = value {
                let labels = [("command", command), ("slab", slab.as_str()), ("status", status)];
                x.sample("memcached_slab_commands_total", SLAB_COMMANDS_HELP, Kind::Counter, &labels, value);
            }
        };
        for op in OPS {
            slab_cmd(x, op, "hit", number(v, &format!("{op}_hits")));
        }
        slab_cmd(x, "cas", "badval", number(v, "cas_badval"));
        if let (Some(set), Some(cas)) = (number(v, "cmd_set"), sum(v, &["cas_hits", "cas_badval"])) {
            slab_cmd(x, "set", "hit", Some(set - cas));
        }
        simple(x, SLABS, v, &[("slab", &slab)]);
    }
}

/// Strata's own: what the exporter does not read, or memcached has not.
const STRATA_GENERAL: &[Simple] = &[
    g("strata_worker_threads", "threads", "Worker threads (-t)."),
    g("strata_index_bytes", "hash_bytes", "Bytes of the key index, every shard."),
    g("strata_ghost_bytes", "ghost_bytes", "Bytes of the ghost's fingerprints of keys evicted unread (scan resistance)."),
    c("strata_ghost_hits_total", "ghost_hits", "Keys set again while the ghost remembered them (promoted on their next eviction)."),
    g("strata_memory_cap_bytes", "memory_cap_bytes", "-m auto / memory_pressure_yield: bytes the memory cgroup or host allows."),
    g("strata_memory_used_bytes", "memory_used_bytes", "-m auto / memory_pressure_yield: bytes in use in the cgroup or host (working set)."),
    g("strata_memory_limit_max_bytes", "memory_limit_max_bytes", "-m auto / memory_pressure_yield: the most the item limit grows back to."),
    c("strata_memory_limit_shrinks_total", "memory_limit_shrinks", "Times the memory governor lowered the item limit under pressure."),
    c("strata_memory_limit_grows_total", "memory_limit_grows", "Times the memory governor raised the item limit back."),
    c("strata_memory_shed_bytes_total", "memory_shed_bytes", "Bytes of segments given back to the kernel by the memory governor."),
    c("strata_get_expired_total", "get_expired", "Lookups that found an expired item."),
    c("strata_get_flushed_total", "get_flushed", "Lookups that found an item flushed by flush_all."),
    c("strata_log_worker_dropped_total", "log_worker_dropped", "watch lines dropped because a worker's log buffer was full or busy."),
    c("strata_log_watcher_skipped_total", "log_watcher_skipped", "watch lines a watcher missed because its buffer was full or busy."),
    g("strata_log_watchers", "log_watchers", "Connections running watch."),
    c("strata_extstore_write_errors_total", "extstore_write_errors", "Failed writes to the flash tier."),
    c("strata_extstore_write_fallbacks_total", "extstore_write_fallbacks", "Items evicted because no flash page could take them."),
    c("strata_extstore_client_bytes_stored_total", "extstore_client_bytes_stored", "Bytes clients stored (write amplification's denominator)."),
    g("strata_extstore_write_amplification", "extstore_write_amp", "Flash bytes written per byte clients stored."),
    g("strata_extstore_index_bytes", "extstore_index_bytes", "Bytes of the flash indexes (counted in -m)."),
    c("strata_extstore_reads_shared_total", "extstore_reads_shared", "Flash items answered from another key's read of the same request."),
    c("strata_connections_steered_total", "steered_connections", "Connections handed to the worker pinned to the CPU their packets arrive on."),
    c("strata_extstore_reads_ahead_total", "extstore_reads_ahead", "Flash reads of a multi-get's later keys queued with the read it parked on."),
    c("strata_extstore_reads_ahead_refused_total", "extstore_reads_ahead_refused", "Flash reads not queued ahead because read-ahead held its bound of bytes (ext_read_ahead_max)."),
    c("strata_extstore_bytes_padded_total", "extstore_bytes_padded", "Zero bytes written so that a flash record straddles no 4 KiB block (at most 256 bytes each)."),
    c("strata_extstore_bytes_admitted_total", "extstore_bytes_admitted", "Key and value bytes of the items that went to flash."),
    g("strata_extstore_admit_write_amplification", "extstore_admit_write_amp", "Flash bytes written per byte of the items that went there."),
    c("strata_extstore_compact_pages_total", "extstore_compact_pages", "Flash pages the log's compaction emptied."),
    c("strata_extstore_compact_evict_pages_total", "extstore_compact_evict_pages", "Flash pages the compaction evicted (none under ext_max_frag): read items moved, the rest dropped."),
    c("strata_extstore_compact_expired_total", "extstore_compact_expired", "Expired or flushed flash records the compaction dropped."),
    c("strata_extstore_compact_bytes_read_total", "extstore_compact_bytes_read", "Bytes the compaction read from flash."),
    c("strata_extstore_compact_bytes_moved_total", "extstore_compact_bytes_moved", "Record bytes the compaction moved."),
    c("strata_extstore_compact_behind_total", "extstore_compact_behind", "Times the flash write buffers found no page ready (the item was not written to flash)."),
    g("strata_extstore_small_items_sets", "extstore_small_items_sets", "Small items in sets (as of each partition's last rewrite)."),
    g("strata_extstore_small_bytes_sets", "extstore_small_bytes_sets", "Key and value bytes of the small items in sets."),
    g("strata_extstore_small_items_log", "extstore_small_items_log", "Small items in partitions' logs."),
    g("strata_extstore_small_tombstones", "extstore_small_tombstones", "Keys whose copy in a set is shadowed until their partition's rewrite."),
    g("strata_extstore_small_sets", "extstore_small_sets", "Sets of the small store."),
    c("strata_extstore_small_merges_total", "extstore_small_merges", "Partition rewrites (a log and old sets into new sets)."),
    c("strata_extstore_small_merges_failed_total", "extstore_small_merges_failed", "Partition rewrites given up (no page for the new sets, a write error)."),
    c("strata_extstore_small_sets_written_total", "extstore_small_sets_written", "Sets written by rewrites."),
    c("strata_extstore_small_log_blocks_written_total", "extstore_small_log_blocks_written", "Log blocks of small items written."),
    c("strata_extstore_small_bytes_written_total", "extstore_small_bytes_written", "Bytes the small store wrote to flash."),
    c("strata_extstore_small_items_admitted_total", "extstore_small_items_admitted", "Items the small store took from RAM."),
    c("strata_extstore_small_bytes_admitted_total", "extstore_small_bytes_admitted", "Key and value bytes of the items the small store took."),
    c("strata_extstore_small_dropped_total", "extstore_small_dropped", "Small items a rewrite had no room for."),
    c("strata_extstore_small_spilled_total", "extstore_small_spilled", "Small items a rewrite put back into the log, their set full."),
    c("strata_extstore_small_fallbacks_total", "extstore_small_fallbacks", "Small items the small store could not take (written as larger items or evicted)."),
    c("strata_extstore_small_set_reads_total", "extstore_small_set_reads", "Device reads of sets."),
    c("strata_extstore_small_set_hits_total", "extstore_small_set_hits", "Set reads that found the key."),
    c("strata_extstore_small_false_positives_total", "extstore_small_false_positives", "Set reads that did not find the key (a filter's false positive)."),
    c("strata_extstore_small_log_reads_total", "extstore_small_log_reads", "Device reads of small items' log blocks."),
    c("strata_extstore_small_log_hits_total", "extstore_small_log_hits", "Small items served from their log block."),
    c("strata_extstore_small_tombstones_written_total", "extstore_small_tombstones_written", "Tombstones written."),
    g("strata_extstore_small_ram_bytes", "extstore_small_ram_bytes", "Bytes of RAM the small store takes (counted in -m)."),
    g("strata_extstore_small_index_bytes", "extstore_small_index_bytes", "Of the small store's RAM, its log indexes' slots."),
    g("strata_extstore_small_summary_bytes", "extstore_small_summary_bytes", "Of the small store's RAM, the sets' Bloom filters and hit bits."),
    g("strata_extstore_small_merge_bytes", "extstore_small_merge_bytes", "Bytes a partition rewrite under way holds (outside -m)."),
    c("strata_extstore_small_tail_blocked_total", "extstore_small_tail_blocked", "Times the flash log found every old page still holding small-store data."),
];

fn strata_families(x: &mut Exposition, rt: &Runtime, m: &StatMaps) {
    let version = m.general.get("strata_version").map_or("", String::as_str);
    let engine = m.settings.get("io_engine").map_or("", String::as_str);
    let help = "Strata's release and the I/O engine its workers run.";
    x.sample("strata_info", help, Kind::Gauge, &[("io_engine", engine), ("version", version)], 1.0);
    simple(x, STRATA_GENERAL, &m.general, &[]);
    // From the engine, not from `stats`: plain `stats` keeps memcached's
    // list of names (its t/stats.t counts them).
    let e = rt.core.engine.stats();
    x.sample("strata_index_slots", "Slots of the key index, every shard.", Kind::Gauge, &[], e.index_slots as f64);
    let help = "Lock-free get attempts repeated because a writer ran in the shard meanwhile.";
    x.sample("strata_get_retries_total", help, Kind::Counter, &[], e.get_retries as f64);
    let help = "Gets the lock-free read handed to the shard lock (writers kept running, or a first fetch, expiry or token a reply may show).";
    x.sample("strata_get_locked_total", help, Kind::Counter, &[], e.get_locked as f64);
}

/// The request latency histograms behind `stats latency`
/// (`ops/latency.rs`), while they are collected.
fn latency_families(x: &mut Exposition, rt: &Runtime) {
    if !rt.core.settings.latency_stats {
        return;
    }
    for h in crate::ops::latency::prometheus_histograms(&rt.ops.requests) {
        x.histogram(
            "strata_request_duration_seconds",
            "Time from a request's bytes being read to its reply being handed to the kernel.",
            &[("family", h.family)],
            &h.buckets,
            h.sum_seconds,
            h.count,
        );
    }
}

/// `stats mrc`'s curve: one gauge sample per simulated size.
fn mrc_families(x: &mut Exposition, rt: &Runtime) {
    let help = "Estimated miss ratio at this many megabytes of -m (stats mrc: sampled S3-FIFO simulations).";
    for (mb, ratio) in crate::ops::mrc::curve(rt.ops.mrc.as_ref(), &rt.core) {
        x.sample("strata_mrc_miss_ratio", help, Kind::Gauge, &[("megabytes", &crate::ops::mrc::megabytes(mb))], ratio);
    }
}

/// `/metrics`: `strata_memory_bytes{part="..."}`, one sample per line of
/// `stats memory` (its name without `_bytes`).
fn memory_families(x: &mut Exposition, rt: &Runtime) {
    let help = "Resident memory by structure, as stats memory reports it (part=\"rss\": the whole; \"unaccounted\": rss less the other parts).";
    for (name, bytes) in super::memory::breakdown(rt) {
        let part = name.strip_suffix("_bytes").unwrap_or(name);
        x.sample("strata_memory_bytes", help, Kind::Gauge, &[("part", part)], bytes as f64);
    }
}

/// The whole `/metrics` body.
pub fn render(rt: &Runtime) -> String {
    let maps = StatMaps::collect(rt);
    let mut x = Exposition::default();
    exporter_families(&mut x, &maps);
    strata_families(&mut x, rt, &maps);
    latency_families(&mut x, rt);
    mrc_families(&mut x, rt);
    memory_families(&mut x, rt);
    x.text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_together_and_sorted() {
        let mut x = Exposition::default();
        x.sample("b_total", "B.", Kind::Counter, &[("l", "1")], 2.0);
        x.sample("a", "A.", Kind::Gauge, &[], 0.5);
        x.sample("b_total", "B.", Kind::Counter, &[("l", "2")], 3.0);
        assert_eq!(
            x.text(),
            "# HELP a A.\n# TYPE a gauge\na 0.5\n# HELP b_total B.\n# TYPE b_total counter\n\
             b_total{l=\"1\"} 2\nb_total{l=\"2\"} 3\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut x = Exposition::default();
        x.sample("v", "V.", Kind::Gauge, &[("version", "a\"b\\c\nd")], 1.0);
        assert!(x.text().contains("v{version=\"a\\\"b\\\\c\\nd\"} 1\n"));
    }

    #[test]
    fn histograms_have_cumulative_buckets_sum_and_count() {
        let mut x = Exposition::default();
        let buckets = [(0.0001, 3), (0.001, 7)];
        x.histogram("h_seconds", "H.", &[("command", "get")], &buckets, 0.0042, 8);
        assert_eq!(
            x.text(),
            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{command=\"get\",le=\"0.0001\"} 3\n\
             h_seconds_bucket{command=\"get\",le=\"0.001\"} 7\n\
             h_seconds_bucket{command=\"get\",le=\"+Inf\"} 8\n\
             h_seconds_sum{command=\"get\"} 0.0042\nh_seconds_count{command=\"get\"} 8\n"
        );
    }

    #[test]
    fn values_print_as_stats_printed_them() {
        assert_eq!(format_value(67108864.0), "67108864");
        assert_eq!(format_value(0.005989), "0.005989");
        assert_eq!(format_value(-3.0), "-3");
    }
}
