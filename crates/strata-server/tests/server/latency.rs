//! `stats latency` on the wire (ops/latency.rs): counts equal the requests
//! served per family, a slow minority lands in the high percentiles only,
//! `stats reset` clears, unknown groups answer ERROR, on both I/O engines.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};

const ENGINES: [IoEngine; 2] = [IoEngine::Epoll, IoEngine::Uring];

fn start(io_engine: IoEngine, latency_stats: bool) -> (Server, SocketAddr) {
    common::start(Settings { threads: 2, io_engine, latency_stats, ..Settings::default() })
}

/// Send `cmd` and read until a line equal to `last` (or any one line when
/// `last` is empty).
fn call(s: &mut TcpStream, r: &mut BufReader<TcpStream>, cmd: &str, last: &str) -> Vec<String> {
    s.write_all(cmd.as_bytes()).unwrap();
    let mut lines = Vec::new();
    loop {
        let l = common::line(r);
        assert!(!l.is_empty(), "connection closed after {cmd:?}");
        let l = l.trim_end().to_string();
        let done = last.is_empty() || l == last;
        lines.push(l);
        if done {
            return lines;
        }
    }
}

fn stats(s: &mut TcpStream, r: &mut BufReader<TcpStream>, group: &str) -> HashMap<String, String> {
    call(s, r, &format!("stats {group}\r\n"), "END")
        .iter()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(m: &HashMap<String, String>, k: &str) -> f64 {
    m.get(k).unwrap_or_else(|| panic!("no {k} in {m:?}")).parse().unwrap()
}

fn binary_request(opcode: u8, key: &[u8]) -> Vec<u8> {
    let mut h = vec![0x80, opcode];
    h.extend_from_slice(&(key.len() as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h.extend_from_slice(&(key.len() as u32).to_be_bytes());
    h.extend_from_slice(&[0; 12]);
    h.extend_from_slice(key);
    h
}

fn binary_call(s: &mut TcpStream, opcode: u8, key: &[u8]) {
    s.write_all(&binary_request(opcode, key)).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).unwrap();
    let body = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut rest = vec![0; body];
    s.read_exact(&mut rest).unwrap();
}

#[test]
fn counts_equal_the_requests_served_per_family() {
    for engine in ENGINES {
        let (_server, addr) = start(engine, true);
        let (mut s, mut r) = common::connect(addr);
        call(&mut s, &mut r, "stats reset\r\n", "RESET");
        for i in 0..7 {
            call(&mut s, &mut r, &format!("set k{i} 0 0 1\r\n{i}\r\n"), "STORED");
        }
        call(&mut s, &mut r, "ms m 2\r\nhi\r\n", "HD");
        // No reply; counted once the next read finds the batch flushed.
        s.write_all(b"set q 0 0 1 noreply\r\nq\r\n").unwrap();
        for i in 0..5 {
            call(&mut s, &mut r, &format!("get k{i}\r\n"), "END");
        }
        call(&mut s, &mut r, "gets k1 k2 k3\r\n", "END");
        call(&mut s, &mut r, "mg k1\r\n", "HD");
        // Ten pipelined gets in one write: one batch, ten requests.
        call(&mut s, &mut r, &"get k0\r\n".repeat(10), "");
        for _ in 0..10 * 3 - 1 {
            common::line(&mut r);
        }
        call(&mut s, &mut r, "delete k6\r\n", "DELETED");
        call(&mut s, &mut r, "md nope\r\n", "NF");
        call(&mut s, &mut r, "incr k1 5\r\n", "");
        call(&mut s, &mut r, "decr k1 1\r\n", "");
        call(&mut s, &mut r, "ma k2\r\n", "HD");
        call(&mut s, &mut r, "touch k1 10\r\n", "TOUCHED");
        call(&mut s, &mut r, "gat 10 k1\r\n", "END");
        call(&mut s, &mut r, "mn\r\n", "MN");
        call(&mut s, &mut r, "mn\r\n", "MN");
        call(&mut s, &mut r, "version\r\n", "");
        call(&mut s, &mut r, "bogus\r\n", "ERROR");
        // Binary requests on a second connection: GETK (get), NOOP (noop).
        let (mut b, _) = common::connect(addr);
        binary_call(&mut b, 0x0c, b"k1");
        binary_call(&mut b, 0x0a, b"");
        // That connection's worker records a batch just after handing its
        // reply to the kernel, so the client can see the reply first.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let m = stats(&mut s, &mut r, "latency");
        assert_eq!(m["enabled"], "1");
        let expected = [
            ("get", 5 + 1 + 1 + 10 + 1),
            ("set", 7 + 1 + 1),
            ("delete", 2),
            ("arith", 3),
            ("touch", 2),
            ("noop", 2 + 1),
            // stats reset, version, bogus.
            ("other", 3),
        ];
        for (family, count) in expected {
            assert_eq!(num(&m, &format!("{family}_count")), count as f64, "{family} on {engine:?}: {m:?}");
        }
        // This `stats latency` is counted once its reply went out.
        let m = stats(&mut s, &mut r, "latency");
        assert_eq!(num(&m, "other_count"), 4.0, "{engine:?}");
        for family in ["get", "set", "other"] {
            let q: Vec<f64> = ["p50", "p90", "p99", "p999", "max"].iter().map(|p| num(&m, &format!("{family}_{p}_us"))).collect();
            assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{family}: {q:?}");
        }
    }
}

#[test]
fn a_slow_minority_shows_in_the_high_percentiles() {
    for engine in ENGINES {
        let (_server, addr) = start(engine, true);
        let (mut s, mut r) = common::connect(addr);
        let value = "v".repeat(100_000);
        for i in 0..40 {
            call(&mut s, &mut r, &format!("set big{i} 0 0 {}\r\n{value}\r\n", value.len()), "STORED");
        }
        call(&mut s, &mut r, "set small 0 0 1\r\nx\r\n", "STORED");
        let big_get = format!("get {}\r\n", (0..40).map(|i| format!("big{i}")).collect::<Vec<_>>().join(" "));
        call(&mut s, &mut r, "stats reset\r\n", "RESET");
        // 2% of the gets are 4 MB multi-gets.
        for i in 0..1000 {
            if i % 50 == 49 {
                let mut n = 0;
                s.write_all(big_get.as_bytes()).unwrap();
                loop {
                    let mut l = Vec::new();
                    r.read_until(b'\n', &mut l).unwrap();
                    if l == b"END\r\n" {
                        break;
                    }
                    n += 1;
                }
                assert_eq!(n, 80);
            } else {
                call(&mut s, &mut r, "get small\r\n", "END");
            }
        }
        let m = stats(&mut s, &mut r, "latency");
        assert_eq!(num(&m, "get_count"), 1000.0);
        let (p50, p90, p99, p999, max) =
            (num(&m, "get_p50_us"), num(&m, "get_p90_us"), num(&m, "get_p99_us"), num(&m, "get_p999_us"), num(&m, "get_max_us"));
        // The 20 multi-gets each copy 4 MB: the top 2% only.
        assert!(p99 > 10.0 * p90, "{engine:?}: p50 {p50} p90 {p90} p99 {p99}");
        assert!(p999 >= p99 && max >= p999, "{engine:?}: {p99} {p999} {max}");
        assert!(p50 <= p90, "{engine:?}");
        // Small sets stay fast: the slow ones are gets only.
        assert_eq!(num(&m, "set_count"), 0.0);
    }
}

#[test]
fn stats_reset_clears_and_unknown_groups_answer_error() {
    for engine in ENGINES {
        let (_server, addr) = start(engine, true);
        let (mut s, mut r) = common::connect(addr);
        for _ in 0..20 {
            call(&mut s, &mut r, "get a\r\n", "END");
        }
        let m = stats(&mut s, &mut r, "latency");
        assert_eq!(num(&m, "get_count"), 20.0);
        call(&mut s, &mut r, "stats reset\r\n", "RESET");
        let m = stats(&mut s, &mut r, "latency");
        assert_eq!(num(&m, "get_count"), 0.0);
        assert_eq!(num(&m, "get_max_us"), 0.0);
        assert_eq!(num(&m, "other_count"), 1.0, "the reset itself");
        // Extra words after a group are ignored, as memcached does with
        // `stats settings x`; a group it does not know is ERROR.
        let m = stats(&mut s, &mut r, "latency x");
        assert_eq!(num(&m, "other_count"), 2.0);
        assert_eq!(call(&mut s, &mut r, "stats latenc\r\n", ""), ["ERROR"]);
        assert_eq!(call(&mut s, &mut r, "stats latencyy\r\n", ""), ["ERROR"]);
        assert_eq!(call(&mut s, &mut r, "stats hotkey\r\n", ""), ["ERROR"]);
    }
}

#[test]
fn off_switch_collects_nothing() {
    let (_server, addr) = start(IoEngine::Epoll, false);
    let (mut s, mut r) = common::connect(addr);
    for _ in 0..5 {
        call(&mut s, &mut r, "get a\r\n", "END");
    }
    let m = stats(&mut s, &mut r, "latency");
    assert_eq!(m["enabled"], "0");
    assert_eq!(num(&m, "get_count"), 0.0);
}

#[test]
fn prometheus_histogram_is_cumulative() {
    let (server, addr) = start(IoEngine::Epoll, true);
    let (mut s, mut r) = common::connect(addr);
    for _ in 0..5 {
        call(&mut s, &mut r, "get a\r\n", "END");
    }
    // The last get is recorded after its reply went out, before this
    // connection's next request is read.
    call(&mut s, &mut r, "version\r\n", "");
    let text = strata_server::report::metrics::render(&server.runtime);
    assert!(text.contains("# TYPE strata_request_duration_seconds histogram\n"), "{text}");
    assert!(text.contains("strata_request_duration_seconds_count{family=\"get\"} 5\n"), "{text}");
    assert!(text.contains("strata_request_duration_seconds_bucket{family=\"get\",le=\"+Inf\"} 5\n"), "{text}");
    let get_buckets: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("strata_request_duration_seconds_bucket{family=\"get\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(get_buckets.windows(2).all(|w| w[0] <= w[1]), "{get_buckets:?}");
}
