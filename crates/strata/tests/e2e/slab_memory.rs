//! Memory accounting as memcached's own tests check it, on the binary:
//! `-M`'s refusals (t/dash-M.t), `cache_memlimit` growing and shrinking
//! `total_malloced` (t/dyn-maxbytes.t), and `limit_maxbytes` /
//! `total_malloced` past 4 GiB with memcached's `T_MEMD_INITIAL_MALLOC`
//! test hook (t/64bit.t).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, Server};

fn send(conn: &mut Conn, req: &[u8]) -> String {
    conn.stream.write_all(req).unwrap();
    conn.line()
}

fn set(conn: &mut Conn, key: &str, len: usize) -> String {
    let mut req = format!("set {key} 0 0 {len}\r\n").into_bytes();
    req.resize(req.len() + len, b'B');
    req.extend_from_slice(b"\r\n");
    send(conn, &req)
}

/// One value of `stats <group>`.
fn stat(conn: &mut Conn, group: &str, name: &str) -> String {
    conn.stream.write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
    let mut found = None;
    loop {
        let line = conn.line();
        if line == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no {name} in stats {group}"));
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.get(1) == Some(&name) {
            found = parts.get(2).map(|v| v.to_string());
        }
    }
}

fn malloced(conn: &mut Conn) -> u64 {
    stat(conn, "slabs", "total_malloced").parse().unwrap()
}

#[test]
fn dash_m_refuses_every_store_once_memory_is_full() {
    let server = Server::strata(&["-M", "-m", "2"]);
    let mut conn = Conn::to(&server);
    let mut stored = 0;
    while set(&mut conn, &format!("dash{stored}"), 8192) == "STORED\r\n" {
        stored += 1;
    }
    assert!(stored > 100, "{stored}");
    assert_eq!(set(&mut conn, &format!("dash{}", stored + 1), 8192), "SERVER_ERROR out of memory storing object\r\n");
    assert_eq!(conn.stat("store_no_memory"), 2);
    for key in 0..stored {
        assert_eq!(conn.get(&format!("dash{key}")).map(|v| v.len()), Some(8192), "dash{key}");
    }
    let outofmemory: u64 = stat(&mut conn, "items", "items:21:outofmemory").parse().unwrap();
    assert_eq!(outofmemory, 2, "the refusals count in the class of the refused item");
    // An item leaving makes room again.
    assert_eq!(send(&mut conn, b"delete dash0\r\n"), "DELETED\r\n");
    assert_eq!(set(&mut conn, "dash0", 8192), "STORED\r\n");
}

#[test]
fn cache_memlimit_grows_and_shrinks_total_malloced() {
    let server = Server::strata(&["-m", "3"]);
    let mut conn = Conn::to(&server);
    for key in 0..60 {
        assert_eq!(set(&mut conn, &format!("key{key}"), 66560), "STORED\r\n");
    }
    let evicted = conn.stat("evictions");
    assert!(evicted > 0);
    assert_eq!(stat(&mut conn, "items", "items:31:evicted"), evicted.to_string(), "66 KB items are class 31");
    assert_eq!(send(&mut conn, b"cache_memlimit 8\r\n"), "OK\r\n");
    assert_eq!(stat(&mut conn, "settings", "maxbytes"), (8u64 << 20).to_string());
    let before = malloced(&mut conn);
    assert_eq!(set(&mut conn, "toast", 66560), "STORED\r\n");
    assert!(malloced(&mut conn) > before);
    assert_eq!(conn.stat("evictions"), evicted, "no new evictions");
    assert_eq!(send(&mut conn, b"cache_memlimit 16\r\n"), "OK\r\n");
    for key in 60..150 {
        assert_eq!(set(&mut conn, &format!("key{key}"), 66560), "STORED\r\n");
    }
    let full = malloced(&mut conn);
    assert!(full > 8 << 20, "{full}");
    assert_eq!(send(&mut conn, b"cache_memlimit 8\r\n"), "OK\r\n");
    for key in 0..150 {
        let reply = send(&mut conn, format!("delete key{key}\r\n").as_bytes());
        assert!(reply == "DELETED\r\n" || reply == "NOT_FOUND\r\n", "{reply}");
    }
    let deadline = Instant::now() + Duration::from_secs(6);
    while malloced(&mut conn) >= full {
        assert!(Instant::now() < deadline, "total_malloced never fell below {full}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn past_four_gib_limit_and_malloced_are_64_bit() {
    let mut child = Command::new(common::BIN)
        .args(["-p", "-1", "-v", "-U", "0", "-m", "4098", "-M"])
        .env("T_MEMD_INITIAL_MALLOC", "4294967328")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start strata");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("strata exited").unwrap();
        if let Some(addr) = line.strip_prefix("strata: listening on ") {
            break addr.parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let server = Server { child: common::Reaped(child), addr };
    let mut conn = Conn::to(&server);
    assert_eq!(conn.stat("limit_maxbytes"), 4297064448);
    assert_eq!(malloced(&mut conn), 4294967328, "the faked figure, as memcached reports it");
    assert_eq!(stat(&mut conn, "slabs", "active_slabs"), "0");
    assert_eq!(set(&mut conn, "big", 400 << 10), "STORED\r\n");
    assert!(malloced(&mut conn) > 4294967328);
    assert_eq!(stat(&mut conn, "slabs", "active_slabs"), "1");
    // The limit counts the faked bytes: about 2 MiB are left.
    let mut refused = false;
    for i in 0..8 {
        refused |= set(&mut conn, &format!("big{i}"), 400 << 10) != "STORED\r\n";
    }
    assert!(refused, "hit the limit");
}
