//! `-o` options: memcached 1.6.45's `subopts_tokens` (each read and checked
//! as its `main()` does, with its messages and exit code 1), Strata's own
//! (`io_engine`, `pin_threads`, `udp_max_reply`, `sasl_pwdb`,
//! `restart_strict`, `metrics_listen`), extstore's `ext_*` (`ext.rs`), TLS's
//! `ssl_*` (`tls.rs`), and the family Strata does not build, the proxy
//! (`proxy_*`), refused with memcached's "Illegal suboption" and the reason.

use std::path::PathBuf;
use std::time::Duration;

use strata_server::settings::IoEngine;
use strata_server::tunables::HashAlgorithm;

use super::{number, CliError, Draft};

/// memcached's `goto error` path: message, exit code 1.
fn error(message: impl Into<String>) -> CliError {
    CliError::new(1, message)
}

fn illegal(opt: &str, reason: &str) -> CliError {
    error(format!("Illegal suboption \"{opt}\": {reason}"))
}

/// memcached's `safe_strtoul` on a 32-bit value.
fn u32_value(value: &str) -> Option<u32> {
    number::<u32>(value)
}

/// The value of `key`, or memcached's "Missing ..." message.
fn needed<'a>(value: Option<&'a str>, missing: &str) -> Result<&'a str, CliError> {
    value.ok_or_else(|| error(missing))
}

pub fn apply(d: &mut Draft, opt: &str) -> Result<(), CliError> {
    let (key, value) = match opt.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (opt, None),
    };
    let s = &mut d.settings;
    let t = &mut s.tunables;
    match key {
        "maxconns_fast" => s.maxconns_fast = true,
        "no_maxconns_fast" => s.maxconns_fast = false,
        "hashpower" => {
            let v = needed(value, "Missing numeric argument for hashpower")?;
            let power = number::<i64>(v).unwrap_or(0);
            if power < 12 {
                return Err(error(format!("Initial hashtable multiplier of {power} is too low")));
            }
            if power > 32 {
                return Err(error(format!(
                    "Initial hashtable multiplier of {power} is too high\n\
                     Choose a value based on \"STAT hash_power_level\" from a running instance"
                )));
            }
            t.hashpower_init = power as u32;
        }
        "no_hashexpand" => {}
        "slab_reassign" => t.slab_reassign = true,
        "no_slab_reassign" => t.slab_reassign = false,
        "slab_automove" => {
            t.slab_automove = match value {
                None => 1,
                Some(v) => match number::<i64>(v) {
                    Some(n @ 0..=2) => n as u8,
                    _ => return Err(error("slab_automove must be between 0 and 2")),
                },
            }
        }
        "no_slab_automove" => t.slab_automove = 0,
        "slab_automove_ratio" => {
            let v = needed(value, "Missing slab_automove_ratio argument")?;
            match number::<f64>(v) {
                Some(r) if r > 0.0 && r <= 1.0 => t.slab_automove_ratio = r,
                _ => return Err(error("slab_automove_ratio must be > 0 and < 1")),
            }
        }
        "slab_automove_window" => {
            let v = needed(value, "Missing slab_automove_window argument")?;
            match number::<i64>(v) {
                Some(w @ 3..=1800) => t.slab_automove_window = w as u32,
                _ => return Err(error("slab_automove_window must be > 2 and < 1800")),
            }
        }
        // An extstore option in memcached; `slabs automove freeratio` takes it at run time.
        "slab_automove_freeratio" => {
            let v = needed(value, "Missing slab_automove_freeratio argument")?;
            t.slab_automove_freeratio =
                number::<f64>(v).ok_or_else(|| error("could not parse argument to slab_automove_freeratio"))?;
        }
        "tail_repair_time" => {
            let v = needed(value, "Missing numeric argument for tail_repair_time")?;
            match number::<i64>(v) {
                Some(secs) if secs >= 10 && secs <= i64::from(u32::MAX) => t.tail_repair_time_s = secs as u32,
                _ => return Err(error("Cannot set tail_repair_time to less than 10 seconds")),
            }
        }
        "hash_algorithm" => {
            let v = needed(value, "Missing hash_algorithm argument")?;
            t.hash_algorithm = match v {
                "jenkins" => HashAlgorithm::Jenkins,
                "murmur3" => HashAlgorithm::Murmur3,
                "xxh3" => HashAlgorithm::Xxh3,
                _ => return Err(error("Unknown hash_algorithm option (jenkins, murmur3, xxh3)")),
            }
        }
        "lru_crawler" => s.lru_crawler = true,
        "no_lru_crawler" => s.lru_crawler = false,
        "lru_crawler_sleep" => {
            let v = needed(value, "Missing lru_crawler_sleep value")?;
            match number::<i64>(v) {
                Some(us @ 0..=1_000_000) => s.lru_crawler_sleep_us = us as u32,
                _ => return Err(error("LRU crawler sleep must be between 0 and 1 second")),
            }
        }
        "lru_crawler_tocrawl" => {
            let v = needed(value, "Missing lru_crawler_tocrawl value")?;
            s.lru_crawler_tocrawl =
                u32_value(v).ok_or_else(|| error("lru_crawler_tocrawl takes a numeric 32bit value"))?;
        }
        "lru_maintainer" => t.lru_maintainer = true,
        "no_lru_maintainer" => t.lru_maintainer = false,
        "hot_lru_pct" | "warm_lru_pct" => {
            let v = needed(value, &format!("Missing {key} argument"))?;
            let pct = match number::<i64>(v) {
                Some(p @ 1..=79) => p as u32,
                _ => return Err(error(format!("{key} must be > 1 and < 80"))),
            };
            if key == "hot_lru_pct" {
                t.hot_lru_pct = pct;
            } else {
                t.warm_lru_pct = pct;
            }
        }
        "hot_max_factor" | "warm_max_factor" => {
            let v = needed(value, &format!("Missing {key} argument"))?;
            let factor = match number::<f64>(v) {
                Some(f) if f > 0.0 && f.is_finite() => f,
                _ => return Err(error(format!("{key} must be > 0"))),
            };
            if key == "hot_max_factor" {
                t.hot_max_factor = factor;
            } else {
                t.warm_max_factor = factor;
            }
        }
        "temporary_ttl" => {
            let v = needed(value, "Missing temporary_ttl argument")?;
            t.temp_lru = true;
            t.temporary_ttl_s = u32_value(v).ok_or_else(|| error("could not parse argument to temporary_ttl"))?;
        }
        "idle_timeout" => {
            let v = needed(value, "Missing numeric argument for idle_timeout")?;
            let secs = number::<u64>(v).ok_or_else(|| error("could not parse argument to idle_timeout"))?;
            s.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
        }
        "watcher_logbuf_size" | "worker_logbuf_size" => {
            let v = needed(value, &format!("Missing {key} argument"))?;
            let kib = u32_value(v).ok_or_else(|| error(format!("could not parse argument to {key}")))?;
            let bytes = kib.wrapping_mul(1024); // memcached multiplies its 32-bit value too
            if key == "watcher_logbuf_size" {
                t.watcher_logbuf_bytes = bytes;
            } else {
                t.worker_logbuf_bytes = bytes;
            }
        }
        "slab_sizes" => d.slab_sizes = Some(needed(value, "Missing slab_sizes argument")?.to_string()),
        "slab_chunk_max" => {
            let v = needed(value, "Missing slab_chunk_max argument")?;
            let kib = number::<i32>(v).ok_or_else(|| error("could not parse argument to slab_chunk_max"))?;
            if kib <= 0 {
                return Err(error("slab_chunk_max must be >= 0"));
            }
            if kib > 1 << 10 {
                return Err(error("slab_chunk_max must be specified in kilobytes."));
            }
            s.slabs.chunk_max_bytes = kib as usize * 1024;
            d.slab_chunk_max_changed = true;
        }
        "track_sizes" => s.track_sizes = true,
        "inline_ascii_resp" | "no_inline_ascii_resp" | "modern" => {}
        "no_chunked_items" => s.slabs.chunk_max_bytes = super::validate::SLAB_PAGE_BYTES,
        "no_modern" => {
            if !d.slab_chunk_max_changed {
                s.slabs.chunk_max_bytes = super::validate::SLAB_PAGE_BYTES;
            }
            t.slab_reassign = false;
            t.slab_automove = 0;
            s.maxconns_fast = false;
            t.lru_maintainer = false;
            t.hash_algorithm = HashAlgorithm::Jenkins;
            s.lru_crawler = false;
        }
        "drop_privileges" => t.drop_privileges = true,
        "no_drop_privileges" => t.drop_privileges = false,
        "resp_obj_mem_limit" => {
            strata_server::log_line!("DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,");
        }
        "read_buf_mem_limit" => {
            let v = needed(value, "Missing read_buf_mem_limit argument")?;
            let mib = u32_value(v).ok_or_else(|| error("could not parse argument to read_buf_mem_limit"))?;
            t.read_buf_mem_limit_bytes = mib.wrapping_mul(1 << 20);
        }
        "sock_cookie_id" => t.sock_cookie_id = value.and_then(u32_value).unwrap_or(0),
        // memcached's test builds take it (relaxed seccomp); no seccomp here.
        "relaxed_privileges" => {}
        // Strata's own.
        "udp_max_reply" => {
            let v = needed(value, "Missing udp_max_reply argument")?;
            s.udp_max_reply_bytes = number::<usize>(v).ok_or_else(|| error("could not parse argument to udp_max_reply"))?;
        }
        "io_engine" => {
            s.io_engine = io_engine_choice(value.unwrap_or("")).map_err(error)?;
        }
        "sasl_pwdb" => {
            let path = value.filter(|v| !v.is_empty()).ok_or_else(|| error("Missing sasl_pwdb file argument"))?;
            s.sasl_pwdb = Some(PathBuf::from(path));
        }
        "restart_strict" => s.restart_strict = true,
        "journal_size" | "restart_max_downtime" | "restart_peers" | "restart_margin" | "restart_peer_timeout"
        | "restart_catchup" => {
            super::warm::apply(&mut s.warm, key, value)?;
            d.journal_size_given |= key == "journal_size";
        }

        "handover" => {
            let path = value.filter(|v| !v.is_empty()).ok_or_else(|| error("Missing handover socket path"))?;
            s.handover = Some(PathBuf::from(path));
        }
        "memory_pressure_yield" => s.memory_pressure_yield = true,
        "metrics_listen" => s.metrics_listen = Some(metrics_address(value)?),
        "pin_threads" => s.pin_threads = Some(true),
        "no_pin_threads" => s.pin_threads = Some(false),
        "latency_stats" => s.latency_stats = true,
        "no_latency_stats" => s.latency_stats = false,
        "hotkeys" => s.hotkeys = true,
        "no_hotkeys" => s.hotkeys = false,
        "mrc" => s.mrc = true,
        "no_mrc" => s.mrc = false,
        _ if key.starts_with("ssl_") => return super::tls::apply(d, key, value, opt),
        _ if key.starts_with("proxy_") => return Err(illegal(opt, "the proxy is not part of Strata")),
        _ if super::ext::is_ext_option(key) => return super::ext::apply(&mut s.ext, opt, key, value),
        _ => return Err(error(format!("Illegal suboption \"{opt}\""))),
    }
    Ok(())
}

/// `-o metrics_listen=ADDR:PORT`: an IP address (IPv6 in brackets:
/// `[::1]:9150`) or `localhost`, never a name to resolve at start.
fn metrics_address(value: Option<&str>) -> Result<std::net::SocketAddr, CliError> {
    let v = value.filter(|v| !v.is_empty()).ok_or_else(|| error("Missing metrics_listen argument (ADDR:PORT)"))?;
    let bad = || error(format!("metrics_listen must be ADDR:PORT, not '{v}'"));
    if let Some(port) = v.strip_prefix("localhost:") {
        let port = port.parse::<u16>().map_err(|_| bad())?;
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    v.parse().map_err(|_| bad())
}

/// `-o io_engine` and `STRATA_IO_ENGINE`.
pub fn io_engine_choice(name: &str) -> Result<IoEngine, String> {
    match name {
        "auto" => Ok(IoEngine::Auto),
        "uring" | "io_uring" => Ok(IoEngine::Uring),
        "epoll" => Ok(IoEngine::Epoll),
        other => Err(format!("-o io_engine must be uring, epoll or auto, not '{other}'")),
    }
}
