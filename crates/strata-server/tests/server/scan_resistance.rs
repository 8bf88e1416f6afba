//! Scan resistance on the wire (strata-store `seg/ghost.rs`): hot keys read
//! once per round, through a one-time scan 1.5 times what the cache holds,
//! are resident from the third round on; `stats` shows the
//! ghost's bytes (bounded: a few per item held) and the keys it caught,
//! once the cache has evicted (before that the lines are absent).

use crate::common;

use std::io::{BufReader, Write};
use std::net::TcpStream;

use strata_server::Settings;

const HOT: usize = 500;

fn stat(stream: &mut TcpStream, r: &mut BufReader<TcpStream>, name: &str) -> Option<u64> {
    stream.write_all(b"stats\r\n").unwrap();
    let mut found = None;
    loop {
        let l = common::line(r);
        if l == "END\r\n" {
            return found;
        }
        let mut parts = l.split_whitespace().skip(1);
        if parts.next() == Some(name) {
            found = parts.next().and_then(|v| v.parse().ok());
        }
    }
}

/// Sets `count` one-time keys from `*next` on (pipelined, `noreply`).
fn scan(stream: &mut TcpStream, next: &mut u64, count: u64) {
    let value = [b's'; 200];
    let mut req = Vec::new();
    for _ in 0..count {
        req.extend_from_slice(format!("set scan:{next} 0 0 200 noreply\r\n").as_bytes());
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        *next += 1;
        if req.len() > 1 << 16 {
            stream.write_all(&req).unwrap();
            req.clear();
        }
    }
    stream.write_all(&req).unwrap();
}

/// Reads hot keys `keys` once, sets the ones that missed; returns the hits.
fn hot_reads(stream: &mut TcpStream, r: &mut BufReader<TcpStream>, keys: std::ops::Range<usize>) -> usize {
    let gets: String = keys.clone().map(|i| format!("mg hot:{i}\r\n")).collect();
    stream.write_all(gets.as_bytes()).unwrap();
    let missed: Vec<usize> = keys.clone().filter(|_| common::line(r) == "EN\r\n").collect();
    let mut sets = Vec::new();
    for i in &missed {
        sets.extend_from_slice(format!("ms hot:{i} 200 q\r\n{}\r\n", "h".repeat(200)).as_bytes());
    }
    sets.extend_from_slice(b"mn\r\n");
    stream.write_all(&sets).unwrap();
    assert_eq!(common::line(r), "MN\r\n");
    keys.len() - missed.len()
}

#[test]
fn hot_keys_stay_resident_through_scans() {
    let settings = Settings { memory_limit_bytes: 2 << 20, ..Settings::default() };
    let (server, addr) = common::start(settings);
    let (mut stream, mut r) = common::connect(addr);
    let mut next = 0;
    while stat(&mut stream, &mut r, "evictions") == Some(0) {
        assert_eq!(stat(&mut stream, &mut r, "ghost_bytes"), None, "no ghost before the first eviction");
        scan(&mut stream, &mut next, 1_000);
    }
    let capacity = stat(&mut stream, &mut r, "curr_items").unwrap();
    let mut hits = Vec::new();
    // Each round reads the hot keys in groups spread through its scan, as a
    // real stream interleaves them (read back to back, they would fill
    // whole segments, of which eviction keeps at most KEEP_PERCENT).
    const GROUPS: usize = 10;
    for _ in 0..4 {
        let mut round = 0;
        for g in 0..GROUPS {
            round += hot_reads(&mut stream, &mut r, g * HOT / GROUPS..(g + 1) * HOT / GROUPS);
            scan(&mut stream, &mut next, capacity * 3 / 2 / GROUPS as u64);
        }
        hits.push(round);
    }
    assert!(hits[..2].iter().all(|&h| h <= HOT / 50), "first sight, then flushed by a scan: {hits:?}");
    assert!(hits[2..].iter().all(|&h| h >= HOT * 9 / 10), "hot keys flushed by the scans: {hits:?}");
    let bytes = stat(&mut stream, &mut r, "ghost_bytes").expect("ghost_bytes after evictions");
    assert!(bytes > 0 && bytes <= capacity * 4, "ghost_bytes {bytes} for {capacity} items");
    assert!(stat(&mut stream, &mut r, "ghost_hits").unwrap() >= HOT as u64 * 9 / 10);
    drop(server);
}
