//! `stats memory` on the wire: after a fill past the first evictions, every
//! structure the breakdown names is there, the named parts sum to within 5%
//! of the process's RSS (read here from /proc/PID/status, not from the
//! server), with and without the flash tier, and `unaccounted_bytes` is
//! RSS less that sum.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Server;

/// Every line of the reply, in its order.
const PARTS: [&str; 21] = [
    "rss_bytes",
    "segments_bytes",
    "flash_index_bytes",
    "flash_buffers_bytes",
    "index_bytes",
    "ghost_bytes",
    "store_meta_bytes",
    "journal_bytes",
    "uring_recv_buffers_bytes",
    "read_pool_bytes",
    "conn_buffers_bytes",
    "conn_slots_bytes",
    "flash_read_ahead_bytes",
    "mrc_bytes",
    "latency_bytes",
    "hotkeys_bytes",
    "binary_bytes",
    "libraries_bytes",
    "malloc_free_bytes",
    "uring_rings_bytes",
    "unaccounted_bytes",
];

fn stats(r: &mut BufReader<TcpStream>, group: &str) -> Vec<(String, i64)> {
    r.get_mut().write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return out;
        }
        let mut p = line.split_whitespace();
        assert_eq!(p.next(), Some("STAT"), "{line}");
        let name = p.next().unwrap().to_string();
        out.push((name, p.next().unwrap().parse().unwrap_or(0)));
    }
}

/// Fill with 200-byte values, pipelined, until the stat `full` (evictions,
/// or items written to flash) moves, then a tenth as many again.
fn fill(r: &mut BufReader<TcpStream>, full: &str) -> u64 {
    let value = [b'v'; 200];
    let (mut sets, mut first_eviction) = (0u64, None);
    for round in 0..2_000u64 {
        let mut batch = Vec::with_capacity(200 * 240);
        for i in 0..200u64 {
            let key = round * 200 + i;
            batch.extend_from_slice(format!("set fill:{key:010} 0 0 200 noreply\r\n").as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        r.get_mut().write_all(&batch).unwrap();
        sets += 200;
        if round % 20 == 19 {
            let evictions = stats(r, "").into_iter().find(|(n, _)| n == full).map_or(0, |(_, v)| v);
            match first_eviction {
                None if evictions > 0 => first_eviction = Some(sets),
                Some(at) if sets >= at + at / 10 => return sets,
                _ => {}
            }
        }
    }
    panic!("no {full} after {sets} sets");
}

fn check_breakdown(server: &Server, flash: bool) {
    let s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(s);
    let sets = fill(&mut r, if flash { "extstore_objects_used" } else { "evictions" });
    if flash {
        // The small store's rewrites run on after the sets (their buffers
        // come and go between the stats and the RSS read): let them end.
        let merges = |r: &mut BufReader<TcpStream>| {
            let all = stats(r, "");
            let get = |name: &str| all.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
            (get("extstore_small_merges"), get("extstore_small_merges_failed"), get("extstore_small_merge_bytes"))
        };
        let (mut last, mut quiet) = (merges(&mut r), 0);
        for _ in 0..150 {
            std::thread::sleep(Duration::from_millis(200));
            let now = merges(&mut r);
            quiet = if now == last && now.2 == 0 { quiet + 1 } else { 0 };
            last = now;
            if quiet == 3 {
                break;
            }
        }
    }
    let lines = stats(&mut r, "memory");
    let rss_here = server.rss_bytes() as i64;

    let names: Vec<&str> = lines.iter().map(|(n, _)| n.as_str()).collect();
    let mut expected = PARTS.to_vec();
    expected.sort_unstable();
    let mut got = names.clone();
    got.sort_unstable();
    assert_eq!(got, expected, "stats memory lines");
    assert_eq!(names.first(), Some(&"rss_bytes"));
    assert_eq!(names.last(), Some(&"unaccounted_bytes"));
    let v: HashMap<&str, i64> = lines.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let named: i64 = lines.iter().filter(|(n, _)| n != "rss_bytes" && n != "unaccounted_bytes").map(|(_, b)| *b).sum();
    assert_eq!(v["unaccounted_bytes"], v["rss_bytes"] - named, "unaccounted = rss - the named parts");
    eprintln!("after {sets} sets: RSS {rss_here}, named {named}: {lines:?}");
    let gap = (rss_here - named).abs() as f64 / rss_here as f64;
    assert!(gap <= 0.05, "named parts {named} vs RSS {rss_here}: {:.1}% apart", gap * 100.0);
    // The structures a filled store must have.
    let limit = 16i64 << 20;
    // Segments fill -m, less what the flash tier's RAM parts take of it.
    let inside = v["segments_bytes"] + v["flash_index_bytes"] + v["flash_buffers_bytes"];
    assert!(inside > limit * 3 / 4 && v["segments_bytes"] <= limit, "segments {} of {inside} inside -m", v["segments_bytes"]);
    for part in ["index_bytes", "store_meta_bytes", "journal_bytes", "mrc_bytes", "latency_bytes", "binary_bytes", "conn_slots_bytes"] {
        assert!(v[part] > 0, "{part} is 0");
    }
    assert!(v["conn_buffers_bytes"] + v["read_pool_bytes"] > 0, "the fill's connection holds or pooled a buffer");
    if flash {
        assert!(v["flash_index_bytes"] > 0 && v["flash_buffers_bytes"] > 0, "flash tier's RAM parts");
        assert!(v["segments_bytes"] + v["flash_index_bytes"] + v["flash_buffers_bytes"] <= limit, "flash parts are inside -m");
    } else {
        assert_eq!((v["flash_index_bytes"], v["flash_buffers_bytes"]), (0, 0));
        // Evicted unread from Small (with flash they go to flash instead).
        assert!(v["ghost_bytes"] > 0, "ghost_bytes is 0");
    }
}

#[test]
fn the_breakdown_sums_to_rss_after_a_fill() {
    let server = Server::strata(&["-m", "16", "-t", "2"]);
    check_breakdown(&server, false);
}

#[test]
fn the_breakdown_sums_to_rss_with_the_flash_tier() {
    let dir = std::env::temp_dir().join(format!("strata-membreak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 200-byte values go to flash only above ext_item_size (512 by default).
    let ext = format!("ext_path={}:64m,ext_page_size=8,ext_wbuf_size=2,ext_item_size=128", dir.join("flash").display());
    let server = Server::strata(&["-m", "16", "-t", "2", "-o", &ext]);
    check_breakdown(&server, true);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
