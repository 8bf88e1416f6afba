//! `stats`, `stats settings|items|slabs|conns|reset|detail`, with memcached's
//! field names wherever a field means the same thing.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use strata_proto::Tokens;

use super::{reply, Executor};

/// Collected `(name, value)` pairs, shared by the text and binary protocols.
pub(crate) type Stats = Vec<(String, String)>;

fn stat(out: &mut Stats, name: &str, value: impl std::fmt::Display) {
    out.push((name.to_string(), value.to_string()));
}

/// What a stats group asks for.
pub(crate) enum Group {
    Values(Stats),
    Reset,
    DetailUsage,
    Unknown,
}

/// The stats of `group` (empty for the general stats).
pub(crate) fn collect(exec: &Executor<'_>, group: &[u8]) -> Group {
    let mut t = Stats::new();
    match group {
        b"" => general(exec, &mut t),
        b"reset" => {
            for w in &exec.shared.worker_stats {
                w.reset();
            }
            exec.shared.engine.reset_stats();
            return Group::Reset;
        }
        b"detail" => return Group::DetailUsage,
        b"settings" => settings(exec, &mut t),
        b"items" => {}
        b"slabs" => {
            let engine = exec.shared.engine.stats();
            stat(&mut t, "active_slabs", 0);
            stat(&mut t, "total_malloced", engine.bytes);
        }
        b"sizes" => stat(&mut t, "sizes_status", "disabled"),
        b"conns" => conns(exec, &mut t),
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

pub(super) fn stats(exec: &Executor<'_>, args: Tokens<'_>, out: &mut Vec<u8>) {
    match collect(exec, args.get(1)) {
        Group::Values(values) => {
            let mut text = String::new();
            for (name, value) in values {
                let _ = write!(text, "STAT {name} {value}\r\n");
            }
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"END\r\n");
        }
        Group::Reset => reply(out, "RESET", false),
        Group::DetailUsage => reply(out, "CLIENT_ERROR usage: stats detail on|off|dump", false),
        Group::Unknown => reply(out, "ERROR", false),
    }
}

fn general(exec: &Executor<'_>, t: &mut Stats) {
    let shared = exec.shared;
    let s = shared.stats();
    let e = shared.engine.stats();
    let now_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let uptime = shared.started_at.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let (user, system) = rusage();
    stat(t, "pid", std::process::id());
    stat(t, "uptime", uptime);
    stat(t, "time", now_unix);
    stat(t, "version", crate::settings::VERSION);
    stat(t, "strata_version", crate::settings::STRATA_VERSION);
    stat(t, "pointer_size", usize::BITS);
    stat(t, "rusage_user", format!("{user:.6}"));
    stat(t, "rusage_system", format!("{system:.6}"));
    stat(t, "max_connections", shared.settings.max_connections);
    stat(t, "curr_connections", shared.curr_connections.load(Ordering::Relaxed));
    stat(t, "total_connections", s.total_connections);
    stat(t, "rejected_connections", s.rejected_connections);
    stat(t, "connection_structures", shared.connection_structures.load(Ordering::Relaxed));
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
        ("bytes_read", s.bytes_read),
        ("bytes_written", s.bytes_written),
    ] {
        stat(t, name, value);
    }
    stat(t, "limit_maxbytes", shared.memory_limit_bytes.load(Ordering::Relaxed));
    stat(t, "accepting_conns", u8::from(!shared.is_shutting_down()));
    stat(t, "threads", shared.settings.threads);
    stat(t, "conn_yields", s.conn_yields);
    stat(t, "idle_kicks", s.idle_kicks);
    stat(t, "udp_replies_refused", s.udp_replies_refused);
    stat(t, "bytes", e.bytes);
    stat(t, "curr_items", e.curr_items);
    stat(t, "total_items", e.total_items);
    stat(t, "expired_unfetched", e.expired_unfetched);
    stat(t, "evicted_unfetched", e.evicted_unfetched);
    stat(t, "evictions", e.evictions);
    stat(t, "reclaimed", e.reclaimed);
    if let Some(r) = e.restart {
        // What the start found in the memory file (-e).
        stat(t, "restart_ok", u8::from(r.ok));
        stat(t, "restart_clean", u8::from(r.clean));
        stat(t, "restart_items", r.items);
        stat(t, "restart_damaged", r.damaged);
        stat(t, "restart_expired", r.expired);
        stat(t, "restart_seconds", format!("{:.6}", r.seconds));
    }
}

fn settings(exec: &Executor<'_>, t: &mut Stats) {
    let st = &exec.shared.settings;
    stat(t, "maxbytes", exec.shared.memory_limit_bytes.load(Ordering::Relaxed));
    stat(t, "maxconns", st.max_connections);
    stat(t, "tcpport", st.tcp_port);
    stat(t, "udpport", st.udp_port);
    let inter = st.tcp_listen.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(",");
    stat(t, "inter", if inter.is_empty() { "NULL".to_string() } else { inter });
    stat(t, "verbosity", st.verbose);
    stat(t, "evictions", if st.evictions_disabled { "off" } else { "on" });
    let socket = st.unix_socket.as_ref().map(|p| p.display().to_string());
    stat(t, "domain_socket", socket.unwrap_or_else(|| "NULL".to_string()));
    stat(t, "umask", format!("{:o}", st.unix_mask));
    stat(t, "num_threads", st.threads);
    stat(t, "reqs_per_event", st.reqs_per_event);
    stat(t, "cas_enabled", if st.cas_disabled { "no" } else { "yes" });
    stat(t, "tcp_backlog", st.backlog);
    stat(t, "binding_protocol", "ascii");
    stat(t, "item_size_max", st.item_size_max);
    stat(t, "maxconns_fast", if st.maxconns_fast { "yes" } else { "no" });
    stat(t, "pin_threads", if st.pin_threads { "yes" } else { "no" });
    stat(t, "flush_enabled", if st.flush_enabled { "yes" } else { "no" });
    stat(t, "shutdown_command", if st.shutdown_enabled { "yes" } else { "no" });
    stat(t, "idle_timeout", st.idle_timeout.map_or(0, |d| d.as_secs()));
    if let Some(path) = &st.memory_file {
        stat(t, "memory_file", path.display());
    }
    let engine = match exec.shared.io_engine {
        crate::settings::IoEngine::Uring => "uring",
        _ => "epoll",
    };
    stat(t, "io_engine", engine);
}

fn conns(exec: &Executor<'_>, t: &mut Stats) {
    let now = exec.shared.clock.now();
    for (id, info) in exec.shared.conns.snapshot() {
        stat(t, &format!("{id}:addr"), &info.peer);
        stat(t, &format!("{id}:listen_addr"), &info.listen);
        stat(t, &format!("{id}:state"), "conn_parse_cmd");
        stat(t, &format!("{id}:secs_since_last_cmd"), now.saturating_sub(info.last_cmd()));
    }
}
