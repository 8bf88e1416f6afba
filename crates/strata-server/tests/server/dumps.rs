//! Key dumps through both I/O engines, and `-X` (`dumps_enabled: false`)
//! refusing them with memcached 1.6.45's replies.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};

use crate::common;

use common::{connect, line};

fn start(io_engine: IoEngine, dumps_enabled: bool) -> (Server, SocketAddr) {
    common::start(Settings { threads: 2, io_engine, dumps_enabled, ..Settings::default() })
}

#[test]
fn dash_x_refuses_dumps_and_stats_detail() {
    let (_server, addr) = start(IoEngine::Epoll, false);
    let (mut w, mut r) = connect(addr);
    for (cmd, want) in [
        ("lru_crawler metadump all", "ERROR metadump not allowed"),
        ("lru_crawler mgdump hash", "ERROR key dump not allowed"),
        ("stats cachedump 1 0", "CLIENT_ERROR stats cachedump not allowed"),
        ("stats detail dump", "CLIENT_ERROR stats detail not allowed"),
        ("stats detail on", "CLIENT_ERROR stats detail not allowed"),
        // The crawler itself is not a dump.
        ("lru_crawler crawl all", "OK"),
    ] {
        w.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        assert_eq!(line(&mut r), format!("{want}\r\n"), "{cmd}");
    }
}

#[test]
fn dumps_stream_on_both_io_engines() {
    const KEYS: usize = 50_000;
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut w, mut r) = connect(addr);
        let mut batch = Vec::new();
        for i in 0..KEYS {
            batch.extend_from_slice(format!("set k{i} 0 0 1 noreply\r\nv\r\n").as_bytes());
        }
        batch.extend_from_slice(b"mn\r\n");
        w.write_all(&batch).unwrap();
        assert_eq!(line(&mut r), "MN\r\n");
        // A request pipelined behind each dump is answered after it.
        w.write_all(b"lru_crawler mgdump all\r\nmn\r\nlru_crawler metadump hash\r\nmn\r\n").unwrap();
        for end in ["EN\r\n", "END\r\n"] {
            assert_eq!(line(&mut r), "OK\r\n");
            let mut seen = std::collections::HashSet::new();
            loop {
                let l = line(&mut r);
                if l == end {
                    break;
                }
                let key = l.strip_prefix("mg ").or_else(|| l.strip_prefix("key=")).unwrap().split_whitespace().next().unwrap().to_string();
                assert!(seen.insert(key), "{engine:?}: listed twice: {l}");
            }
            assert_eq!(seen.len(), KEYS, "{engine:?}");
            assert_eq!(line(&mut r), "MN\r\n");
        }
    }
}

/// One binary STAT request; the responses' (status, key, value) up to the
/// closing empty one (or the first error).
fn binary_stat(stream: &mut TcpStream, key: &[u8]) -> Vec<(u16, Vec<u8>, Vec<u8>)> {
    use std::io::Read;
    let mut req = vec![0x80, 0x10];
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0]);
    req.extend_from_slice(&(key.len() as u32).to_be_bytes());
    req.extend_from_slice(&[0; 12]);
    req.extend_from_slice(key);
    stream.write_all(&req).unwrap();
    let mut replies = Vec::new();
    loop {
        let mut header = [0u8; 24];
        stream.read_exact(&mut header).unwrap();
        let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let status = u16::from_be_bytes([header[6], header[7]]);
        let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let mut body = vec![0u8; body_len];
        stream.read_exact(&mut body).unwrap();
        let value = body.split_off(key_len);
        let done = status != 0 || (body.is_empty() && value.is_empty());
        replies.push((status, body, value));
        if done {
            return replies;
        }
    }
}

#[test]
fn binary_stats_detail() {
    let (_server, addr) = start(IoEngine::Epoll, true);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let closing = (0u16, Vec::new(), Vec::new());
    assert_eq!(binary_stat(&mut s, b"detail on"), std::slice::from_ref(&closing));
    // A binary get of a prefixed key is counted.
    let mut get = vec![0x80, 0x00, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5];
    get.extend_from_slice(&[0; 12]);
    get.extend_from_slice(b"ab:cd");
    s.write_all(&get).unwrap();
    let mut miss = [0u8; 24 + 9];
    std::io::Read::read_exact(&mut s, &mut miss).unwrap();
    let dump = binary_stat(&mut s, b"detail dump");
    assert_eq!(dump, [(0, b"detailed".to_vec(), b"PREFIX ab get 1 hit 0 set 0 del 0\r\nEND\r\n".to_vec()), closing.clone()]);
    assert_eq!(binary_stat(&mut s, b"detail off"), [closing]);
    assert_eq!(binary_stat(&mut s, b"detail x")[0].0, 1, "KEY_ENOENT");

    let (_server, addr) = start(IoEngine::Epoll, false);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(binary_stat(&mut s, b"detail dump")[0].0, 1, "-X: KEY_ENOENT");
}

/// A client that leaves mid-dump frees the crawler for the next one.
#[test]
fn a_dump_abandoned_midway_frees_the_crawler() {
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut w, mut r) = connect(addr);
        let mut batch = Vec::new();
        for i in 0..50_000 {
            batch.extend_from_slice(format!("set key{i} 0 0 1 noreply\r\nv\r\n").as_bytes());
        }
        batch.extend_from_slice(b"mn\r\n");
        w.write_all(&batch).unwrap();
        assert_eq!(line(&mut r), "MN\r\n");
        let (mut w2, mut r2) = connect(addr);
        w2.write_all(b"lru_crawler metadump all\r\n").unwrap();
        assert_eq!(line(&mut r2), "OK\r\n");
        assert!(line(&mut r2).starts_with("key=key"));
        w.write_all(b"lru_crawler mgdump all\r\n").unwrap();
        assert_eq!(line(&mut r), "BUSY currently processing crawler request\r\n");
        drop((w2, r2));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            w.write_all(b"lru_crawler mgdump 63\r\n").unwrap();
            let first = line(&mut r);
            if first == "OK\r\n" {
                assert_eq!(line(&mut r), "EN\r\n");
                break;
            }
            assert_eq!(first, "BUSY currently processing crawler request\r\n");
            assert!(std::time::Instant::now() < deadline, "{engine:?}: the crawler stayed busy");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
