//! `stats mrc` against real runs: a demand-filled zipf stream (alpha 0.99,
//! 200-byte values, get and on a miss set, as scripts/bench/hitratio.py
//! drives it) through Strata at `-m 16`, then the same stream at `-m 32`.
//! The curve's estimate at 1x must be within 0.02 of the miss ratio the
//! first run measured, and at 2x within 0.03 of what the second measured.

use crate::common;

use std::io::{BufRead, Write};

use common::{Conn, Server};

const KEYS: usize = 300_000;
const ALPHA: f64 = 0.99;
const VALUE_BYTES: usize = 200;
const WARM_REQUESTS: usize = 1_000_000;
const REQUESTS: usize = 1_000_000;
const BATCH: usize = 100;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Key ids of the stream: zipf ranks through a fixed random permutation.
fn stream(count: usize) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(KEYS);
    let mut total = 0.0;
    for rank in 1..=KEYS {
        total += 1.0 / (rank as f64).powf(ALPHA);
        cdf.push(total);
    }
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut perm: Vec<u32> = (0..KEYS as u32).collect();
    for i in (1..KEYS).rev() {
        perm.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    (0..count)
        .map(|_| {
            let x = rng.unit() * total;
            perm[cdf.partition_point(|&c| c < x).min(KEYS - 1)]
        })
        .collect()
}

fn drive(conn: &mut Conn, keys: &[u32]) {
    let value = vec![b'x'; VALUE_BYTES];
    for batch in keys.chunks(BATCH) {
        let mut req = Vec::new();
        for k in batch {
            req.extend_from_slice(format!("mg key:{k}\r\n").as_bytes());
        }
        conn.stream.write_all(&req).unwrap();
        let mut missed = Vec::new();
        for k in batch {
            let line = conn.line();
            match line.as_str() {
                "EN\r\n" => missed.push(*k),
                "HD\r\n" => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        if missed.is_empty() {
            continue;
        }
        let mut req = Vec::new();
        for k in &missed {
            req.extend_from_slice(format!("ms key:{k} {VALUE_BYTES} q\r\n").as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"mn\r\n");
        conn.stream.write_all(&req).unwrap();
        assert_eq!(conn.line(), "MN\r\n");
    }
}

fn group(conn: &mut Conn, group: &str) -> Vec<(String, String)> {
    conn.stream.write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        conn.reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return out;
        }
        let mut parts = line.split_whitespace().skip(1);
        out.push((parts.next().unwrap().to_string(), parts.next().unwrap_or("").to_string()));
    }
}

/// Warm up, reset, run the measured part: (measured miss ratio, stats mrc).
fn run(megabytes: u64, keys: &[u32]) -> (f64, Vec<(String, String)>) {
    let server = Server::strata(&["-m", &megabytes.to_string(), "-t", "1"]);
    let mut conn = Conn::to(&server);
    drive(&mut conn, &keys[..WARM_REQUESTS]);
    conn.stream.write_all(b"stats reset\r\n").unwrap();
    assert_eq!(conn.line(), "RESET\r\n");
    drive(&mut conn, &keys[WARM_REQUESTS..]);
    let misses = conn.stat("get_misses") as f64;
    let hits = conn.stat("get_hits") as f64;
    (misses / (hits + misses), group(&mut conn, "mrc"))
}

fn estimate(curve: &[(String, String)], megabytes: u64) -> f64 {
    let name = format!("mrc:{megabytes}");
    curve.iter().find(|(k, _)| *k == name).unwrap_or_else(|| panic!("no {name} in {curve:?}")).1.parse().unwrap()
}

#[test]
fn curve_matches_real_runs_at_1x_and_2x() {
    let keys = stream(WARM_REQUESTS + REQUESTS);
    let (measured_1x, curve) = run(16, &keys);
    assert_eq!(curve[0], ("enabled".to_string(), "1".to_string()));
    let names: Vec<&str> = curve.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("mrc:")).collect();
    assert_eq!(names, ["mrc:4", "mrc:8", "mrc:16", "mrc:32", "mrc:64", "mrc:128"], "0.25x .. 8x of -m 16");
    let (measured_2x, _) = run(32, &keys);
    let (at_1x, at_2x) = (estimate(&curve, 16), estimate(&curve, 32));
    eprintln!("mrc: -m 16 measured {measured_1x:.4} estimated {at_1x:.4}; -m 32 measured {measured_2x:.4} estimated {at_2x:.4}; curve {curve:?}");
    assert!((at_1x - measured_1x).abs() <= 0.02, "1x: estimated {at_1x}, measured {measured_1x}");
    assert!((at_2x - measured_2x).abs() <= 0.03, "2x: estimated {at_2x}, measured {measured_2x}");
    let ratios: Vec<f64> = ["mrc:4", "mrc:8", "mrc:16", "mrc:32", "mrc:64", "mrc:128"].iter().map(|n| estimate(&curve, n[4..].parse().unwrap())).collect();
    assert!(ratios.windows(2).all(|w| w[1] <= w[0] + 0.005), "more memory, fewer misses: {ratios:?}");
}

#[test]
fn curve_follows_cache_memlimit_and_no_mrc_turns_it_off() {
    let server = Server::strata(&["-m", "16"]);
    let mut conn = Conn::to(&server);
    conn.stream.write_all(b"cache_memlimit 64\r\n").unwrap();
    assert_eq!(conn.line(), "OK\r\n");
    // The acceptor's once-a-second tick rebuilds the simulations for 64 MB.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let curve = group(&mut conn, "mrc");
        let names: Vec<&str> = curve.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("mrc:")).collect();
        if names == ["mrc:16", "mrc:32", "mrc:64", "mrc:128", "mrc:256", "mrc:512"] {
            assert!(curve.contains(&("sample_one_in".to_string(), "64".to_string())), "{curve:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "curve never followed the limit: {curve:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let off = Server::strata(&["-o", "no_mrc"]);
    let mut conn = Conn::to(&off);
    assert_eq!(group(&mut conn, "mrc"), [("enabled".to_string(), "0".to_string())]);
}
