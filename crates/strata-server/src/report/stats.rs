//! `stats`, `stats settings|items|slabs|conns|reset|detail` and Strata's own
//! groups, with memcached's field names wherever a field means the same
//! thing: the one command that reads every feature's figures, so it is the
//! runtime's, not a feature's.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use strata_proto::Tokens;

use crate::ctx::Ctx;
use crate::ops::{push_line, Started};
use crate::output::Output;
use crate::runtime::Runtime;

/// Collected `(name, value)` pairs, shared by the text and binary protocols.
pub type Stats = Vec<(String, String)>;

fn stat(out: &mut Stats, name: &str, value: impl std::fmt::Display) {
    out.push((name.to_string(), value.to_string()));
}

/// What a stats group asks for.
pub enum Group {
    Values(Stats),
    Reset,
    DetailUsage,
    Unknown,
}

/// The stats of `group` (empty for the general stats).
pub fn collect(rt: &Runtime, ctx: &Ctx<'_>, group: &[u8]) -> Group {
    let mut t = Stats::new();
    match group {
        b"" => general(rt, &mut t),
        b"reset" => {
            for w in &ctx.core.worker_stats {
                w.reset();
            }
            ctx.core.engine.reset_stats();
            rt.ops.detail.clear();
            crate::ops::latency::reset(&rt.ops.requests);
            crate::ops::mrc::reset(rt.ops.mrc.as_ref(), &rt.core);
            return Group::Reset;
        }
        b"detail" => return Group::DetailUsage,
        b"settings" => settings(rt, ctx, &mut t),
        b"items" => crate::ops::slab_view::items(&rt.ops.crawler, ctx, &mut t),
        b"slabs" => crate::ops::slab_view::slabs(ctx, &mut t),
        b"sizes" => crate::ops::slab_view::sizes(ctx, &mut t),
        b"conns" => crate::ops::conns::conns(ctx, &mut t),
        b"latency" => crate::ops::latency::stats(&rt.ops.requests, rt.core.settings.latency_stats, &mut t),
        b"hotkeys" => crate::ops::hotkeys::stats(rt.ops.requests.iter().map(|w| &w.hotkeys), rt.core.settings.hotkeys, rt.core.clock.now(), &mut t),
        b"journal" => {
            crate::journal::warm::journal_lines(&rt.journal, &mut |name, value| t.push((name.to_string(), value)));
            rt.warm.lines(&mut |name, value| t.push((name.to_string(), value)));
        }

        b"mrc" => crate::ops::mrc::stats(rt.ops.mrc.as_ref(), &rt.core, &mut t),
        b"memory" => super::memory::stats(rt, &mut t),
        b"extstore" => crate::ops::extstore::pages(ctx, &mut |name, value| t.push((name, value))),
        _ => return Group::Unknown,
    }
    Group::Values(t)
}

/// CPU seconds used, user and system, from /proc (std has no getrusage).
fn rusage() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return (0.0, 0.0) };
    let after_comm = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = 100.0; // USER_HZ on Linux
    let user = fields.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / ticks;
    let system = fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / ticks;
    (user, system)
}

/// `stats [group]` over the text protocol (`stats cachedump` starts a dump).
pub fn stats(rt: &Runtime, ctx: &Ctx<'_>, args: Tokens<'_>, out: &mut Output) -> Started {
    if let Some(started) = crate::ops::stats(&rt.ops, ctx, &args, out) {
        return started;
    }
    match collect(rt, ctx, args.get(1)) {
        Group::Values(values) => {
            let mut text = String::new();
            for (name, value) in values {
                let _ = write!(text, "STAT {name} {value}\r\n");
            }
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"END\r\n");
        }
        Group::Reset => push_line(out, "RESET"),
        Group::DetailUsage => push_line(out, "CLIENT_ERROR usage: stats detail on|off|dump"),
        Group::Unknown => push_line(out, "ERROR"),
    }
    None
}

/// memcached 1.6.45's general stats (`server_stats` then the item totals),
/// in its order, with its conditions (`rejected_connections` with
/// maxconns_fast, `idle_kicks` with an idle timeout, the crawler and LRU
/// maintainer fields while those are on), as a build without extstore, TLS
/// or the proxy prints them. memcached has `libevent` after `version`; Strata
/// has no libevent. Fields for machinery a segment store does not have (slab
/// rebalancing, response-object and read-buffer pools, the segmented LRU's
/// moves) are 0, which is what they count here; docs/COMPATIBILITY.md lists
/// them. Strata's own fields come last, only when their feature is on.
fn general(rt: &Runtime, t: &mut Stats) {
    let shared = &rt.core;
    let st = &shared.settings;
    let s = shared.stats();
    let e = shared.engine.stats();
    let now_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let uptime = shared.started_at.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let (user, system) = rusage();
    let curr_connections = shared.curr_connections.load(Ordering::Relaxed);
    stat(t, "pid", std::process::id());
    stat(t, "uptime", uptime);
    stat(t, "time", now_unix);
    stat(t, "version", crate::settings::VERSION);
    stat(t, "strata_version", crate::settings::STRATA_VERSION);
    stat(t, "pointer_size", usize::BITS);
    stat(t, "rusage_user", format!("{user:.6}"));
    stat(t, "rusage_system", format!("{system:.6}"));
    stat(t, "max_connections", st.max_connections);
    stat(t, "curr_connections", curr_connections);
    stat(t, "total_connections", s.total_connections);
    if st.maxconns_fast {
        stat(t, "rejected_connections", s.rejected_connections);
    }
    stat(t, "connection_structures", shared.connection_structures.load(Ordering::Relaxed));
    if st.pin_threads == Some(true) {
        // Strata's: connections handed to the worker of their CPU (steer.rs).
        stat(t, "steered_connections", s.steered_connections);
    }
    for name in ["response_obj_oom", "response_obj_count", "response_obj_bytes"] {
        stat(t, name, 0);
    }
    for name in ["read_buf_count", "read_buf_bytes", "read_buf_bytes_free", "read_buf_oom"] {
        stat(t, name, 0);
    }
    stat(t, "reserved_fds", reserved_fds(curr_connections));
    for (name, value) in [
        ("cmd_get", s.cmd_get),
        ("cmd_set", s.cmd_set),
        ("cmd_flush", s.cmd_flush),
        ("cmd_touch", s.cmd_touch),
        ("cmd_meta", s.cmd_meta),
        ("get_hits", s.get_hits),
        ("get_misses", s.get_misses),
        ("get_expired", e.get_expired),
        ("get_flushed", e.get_flushed),
    ] {
        stat(t, name, value);
    }
    let ext = shared.engine.flash().map(|tier| tier.ext_stats());
    let mut put = |name: &str, value: String| stat(t, name, value);
    if let Some(x) = &ext {
        crate::ops::extstore::get_lines(x, &mut put);
    }
    for (name, value) in [
        ("delete_misses", s.delete_misses),
        ("delete_hits", s.delete_hits),
        ("incr_misses", s.incr_misses),
        ("incr_hits", s.incr_hits),
        ("decr_misses", s.decr_misses),
        ("decr_hits", s.decr_hits),
        ("cas_misses", s.cas_misses),
        ("cas_hits", s.cas_hits),
        ("cas_badval", s.cas_badval),
        ("touch_hits", s.touch_hits),
        ("touch_misses", s.touch_misses),
        ("store_too_large", s.store_too_large),
        ("store_no_memory", s.store_no_memory),
        ("auth_cmds", s.auth_cmds),
        ("auth_errors", s.auth_errors),
    ] {
        stat(t, name, value);
    }
    if st.idle_timeout.is_some() {
        stat(t, "idle_kicks", s.idle_kicks);
    }
    stat(t, "bytes_read", s.bytes_read);
    stat(t, "bytes_written", s.bytes_written);
    stat(t, "limit_maxbytes", shared.memory_limit_bytes.load(Ordering::Relaxed));
    stat(t, "accepting_conns", u8::from(!shared.is_shutting_down()));
    // Strata never stops accepting at -c: it answers and closes instead.
    stat(t, "listen_disabled_num", 0);
    stat(t, "time_in_listen_disabled_us", 0);
    stat(t, "threads", st.threads);
    stat(t, "conn_yields", s.conn_yields);
    // The key index: not a power-of-two table but shards of slots grown by
    // 1.25x, so the level is log2 of all their slots, rounded down; it grows
    // inline under a shard's lock, never in the background.
    stat(t, "hash_power_level", e.index_slots.checked_ilog2().unwrap_or(0));
    stat(t, "hash_bytes", e.index_bytes);
    stat(t, "hash_is_expanding", 0);
    if st.tunables.slab_reassign {
        for name in [
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_busy_nomem",
        ] {
            stat(t, name, 0);
        }
        stat(t, "slab_reassign_last_busy_status", "none");
        stat(t, "slab_reassign_running", 0);
        stat(t, "slabs_moved", 0);
    }
    let crawler = crate::ops::crawler::totals(&rt.ops.crawler);
    if crawler.enabled {
        stat(t, "lru_crawler_running", u8::from(crawler.running));
        stat(t, "lru_crawler_starts", crawler.starts);
    }
    if st.tunables.lru_maintainer {
        stat(t, "lru_maintainer_juggles", 0);
    }
    stat(t, "malloc_fails", 0);
    let log = rt.ops.log.totals();
    stat(t, "log_worker_dropped", log.worker_dropped);
    stat(t, "log_worker_written", log.worker_written);
    stat(t, "log_watcher_skipped", log.watcher_skipped);
    stat(t, "log_watcher_sent", log.watcher_sent);
    stat(t, "log_watchers", log.watchers);
    if let Some(x) = &ext {
        crate::ops::extstore::storage_lines(x, &mut |name, value| stat(t, name, value));
    }
    if let Some(tls) = &rt.tls {
        crate::tls::stats::general_lines(tls, shared.clock.now(), &mut |name, value| stat(t, name, value));
    }
    stat(t, "unexpected_napi_ids", 0);
    stat(t, "round_robin_fallback", 0);
    stat(t, "bytes", e.bytes);
    stat(t, "curr_items", e.curr_items);
    stat(t, "total_items", e.total_items);
    stat(t, "slab_global_page_pool", 0);
    stat(t, "expired_unfetched", e.expired_unfetched);
    stat(t, "evicted_unfetched", e.evicted_unfetched);
    if st.tunables.lru_maintainer {
        stat(t, "evicted_active", 0);
    }
    stat(t, "evictions", e.evictions);
    stat(t, "reclaimed", e.reclaimed);
    stat(t, "crawler_reclaimed", crawler.reclaimed);
    stat(t, "crawler_items_checked", crawler.items_checked);
    stat(t, "lrutail_reflocked", 0);
    if st.tunables.lru_maintainer {
        for name in ["moves_to_cold", "moves_to_warm", "moves_within_lru", "direct_reclaims", "lru_bumps_dropped"] {
            stat(t, name, 0);
        }
    }
    if st.udp_enabled {
        stat(t, "udp_replies_refused", s.udp_replies_refused);
    }
    if let Some(r) = e.restart {
        // What the start found in the memory file (-e).
        stat(t, "restart_ok", u8::from(r.ok));
        stat(t, "restart_clean", u8::from(r.clean));
        stat(t, "restart_items", r.items);
        stat(t, "restart_damaged", r.damaged);
        stat(t, "restart_expired", r.expired);
        stat(t, "restart_seconds", format!("{:.6}", r.seconds));
    }
    if e.ghost_bytes > 0 {
        // Scan resistance (strata-store seg/ghost.rs), once a shard has evicted.
        stat(t, "ghost_bytes", e.ghost_bytes);
        stat(t, "ghost_hits", e.ghost_hits);
    }
    rt.warm.lines(&mut |name, value| stat(t, name, value));
    if let Some(x) = &ext {
        crate::ops::extstore::own_lines(x, &mut |name, value| stat(t, name, value));
        stat(t, "extstore_reads_ahead", s.extstore_reads_ahead);
        stat(t, "extstore_reads_ahead_refused", s.extstore_reads_ahead_refused);
        if shared.settings.ext.small_item_max > 0 {
            crate::ops::extstore::small_lines(x, &mut |name, value| stat(t, name, value));
        }
    }
    if let Some(g) = &rt.memory {
        g.stats(&mut |name, value| stat(t, name, value));
    }
}

/// memcached's `reserved_fds`: descriptors the server holds for itself
/// (listeners, event loops, files), i.e. open descriptors that are not
/// client connections.
fn reserved_fds(curr_connections: u64) -> u64 {
    let open = std::fs::read_dir("/proc/self/fd").map(|dir| dir.count() as u64).unwrap_or(0);
    open.saturating_sub(curr_connections)
}

/// memcached 1.6.45's `process_stat_settings`, in its order and formats (a
/// build with extstore, without TLS, the proxy or seccomp), then
/// Strata's own. Knobs a segment store has no use for report what was asked
/// (crate::tunables).
fn settings(rt: &Runtime, ctx: &Ctx<'_>, t: &mut Stats) {
    let st = &ctx.core.settings;
    let tu = &st.tunables;
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    stat(t, "maxbytes", ctx.core.memory_limit_bytes.load(Ordering::Relaxed));
    stat(t, "maxconns", st.max_connections);
    stat(t, "tcpport", if st.tcp_enabled { st.tcp_port } else { 0 });
    stat(t, "udpport", st.udp_port);
    let inter = st.tcp_listen.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(",");
    stat(t, "inter", if inter.is_empty() || st.unix_socket.is_some() { "NULL".to_string() } else { inter });
    stat(t, "verbosity", rt.ops.verbose.level());
    // memcached's flush_all epoch; the engine keeps its own and does not
    // expose it (docs/COMPATIBILITY.md).
    stat(t, "oldest", 0);
    stat(t, "evictions", if st.evictions_disabled { "off" } else { "on" });
    let socket = st.unix_socket.as_ref().map(|p| p.display().to_string());
    stat(t, "domain_socket", socket.unwrap_or_else(|| "NULL".to_string()));
    stat(t, "umask", format!("{:o}", st.unix_mask));
    stat(t, "shutdown_command", yes_no(st.shutdown_enabled));
    stat(t, "growth_factor", format!("{:.2}", st.slabs.growth_factor));
    stat(t, "chunk_size", st.slabs.min_size_bytes);
    stat(t, "num_threads", st.threads);
    // memcached gives each UDP port one thread when it listens on several addresses.
    stat(t, "num_threads_per_udp", if st.tcp_listen.len() > 1 { 1 } else { st.threads });
    stat(t, "stat_key_prefix", char::from(st.detail_delimiter));
    let [crawler_on, crawler_sleep, crawler_tocrawl, detail_on] = crate::ops::crawler::settings_values(&rt.ops.crawler, rt.ops.detail.on());
    stat(t, detail_on.0, detail_on.1);
    stat(t, "reqs_per_event", st.reqs_per_event);
    stat(t, "cas_enabled", yes_no(!st.cas_disabled));
    stat(t, "tcp_backlog", st.backlog);
    let protocol = match st.protocol {
        crate::settings::ProtocolChoice::Auto => "auto-negotiate",
        crate::settings::ProtocolChoice::Ascii => "ascii",
        crate::settings::ProtocolChoice::Binary => "binary",
    };
    stat(t, "binding_protocol", protocol);
    stat(t, "auth_enabled_sasl", yes_no(st.sasl));
    let auth_file = st.auth_file.as_ref().map(|p| p.display().to_string());
    stat(t, "auth_enabled_ascii", auth_file.unwrap_or_else(|| "no".to_string()));
    stat(t, "item_size_max", st.item_size_max);
    stat(t, "maxconns_fast", yes_no(st.maxconns_fast));
    stat(t, "hashpower_init", tu.hashpower_init);
    stat(t, "slab_reassign", yes_no(tu.slab_reassign));
    stat(t, "slab_automove", tu.slab_automove);
    stat(t, "slab_automove_ratio", format!("{:.2}", tu.slab_automove_ratio));
    stat(t, "slab_automove_window", tu.slab_automove_window);
    let chunk_max = if st.slabs.chunk_max_bytes == 0 { 512 << 10 } else { st.slabs.chunk_max_bytes };
    stat(t, "slab_chunk_max", chunk_max);
    for (name, value) in [crawler_on, crawler_sleep, crawler_tocrawl] {
        stat(t, name, value);
    }
    stat(t, "tail_repair_time", tu.tail_repair_time_s);
    stat(t, "flush_enabled", yes_no(st.flush_enabled));
    stat(t, "dump_enabled", yes_no(st.dumps_enabled));
    stat(t, "hash_algorithm", tu.hash_algorithm.name());
    stat(t, "lru_maintainer_thread", yes_no(tu.lru_maintainer));
    stat(t, "lru_segmented", yes_no(tu.lru_maintainer));
    stat(t, "hot_lru_pct", tu.hot_lru_pct);
    stat(t, "warm_lru_pct", tu.warm_lru_pct);
    stat(t, "hot_max_factor", format!("{:.2}", tu.hot_max_factor));
    stat(t, "warm_max_factor", format!("{:.2}", tu.warm_max_factor));
    stat(t, "temp_lru", yes_no(tu.temp_lru));
    stat(t, "temporary_ttl", tu.temporary_ttl_s);
    stat(t, "idle_timeout", st.idle_timeout.map_or(0, |d| d.as_secs()));
    stat(t, "watcher_logbuf_size", tu.watcher_logbuf_bytes);
    stat(t, "worker_logbuf_size", tu.worker_logbuf_bytes);
    stat(t, "read_buf_mem_limit", tu.read_buf_mem_limit_bytes);
    stat(t, "track_sizes", yes_no(st.track_sizes));
    stat(t, "inline_ascii_response", "no");
    crate::ops::extstore::settings_lines(ctx, &mut |name, value| stat(t, name, value));
    if let Some(tls) = &rt.tls {
        crate::tls::stats::settings_lines(tls, &mut |name, value| stat(t, name, value));
    }
    stat(t, "num_napi_ids", tu.napi_ids);
    let memory_file = st.memory_file.as_ref().map(|p| p.display().to_string());
    stat(t, "memory_file", memory_file.unwrap_or_else(|| "(null)".to_string()));
    stat(t, "client_flags_size", 4);
    // Strata's own, after memcached's.
    let engine = match ctx.core.io_engine {
        crate::settings::IoEngine::Uring => "uring",
        _ => "epoll",
    };
    stat(t, "io_engine", engine);
    stat(t, "pin_threads", yes_no(st.pin_threads == Some(true)));
    stat(t, "udp_max_reply", st.udp_max_reply_bytes);
    stat(t, "large_pages", yes_no(st.large_pages));
    stat(t, "watch_enabled", yes_no(st.watch_enabled));
    stat(t, "metrics_listen", st.metrics_listen.map_or_else(|| "NULL".to_string(), |a| a.to_string()));
    crate::journal::warm::setting_lines(&st.warm, &mut |name, value| stat(t, name, value));
    crate::ops::extstore::small_settings_lines(ctx, &mut |name, value| stat(t, name, value));
    stat(t, "ext_read_ahead_max", rt.flash.read_ahead.max());
}
