//! The small store on the wire (`ext_small_item_max`, on by default): a
//! tiny `-m` sends 360,000 small items (20-byte keys, 64-byte values) to
//! flash, where the rewrite thread moves them from partitions' logs into
//! sets; then deletes and new versions, a dump, and restarts on the same
//! files (`-e`): a graceful one, and a `kill -9` in the middle of sets and
//! deletes. At least 99% of the acknowledged items must come back, never a
//! deleted or older value.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Conn, ScratchDir, Server};

const KEYS: usize = 360_000;

struct Files(ScratchDir);

impl Files {
    fn new(name: &str) -> Files {
        Files(ScratchDir::new("flash-small", name))
    }

    fn start(&self) -> Server {
        let ext = format!("ext_page_size=2,ext_wbuf_size=2,ext_path={}:64m", self.0.join("flash").display());
        let mem = self.0.join("memory").display().to_string();
        Server::strata(&["-t", "2", "-m", "8", "-A", "-e", &mem, "-o", &ext])
    }
}

fn key(i: usize) -> String {
    format!("small:{i:014}")
}

/// 64 bytes naming key and version.
fn value(i: usize, version: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(64, b'a' + ((i + version) % 26) as u8);
    v
}

/// Per key: the versions sent in order (None: a delete), and how many of
/// them were acknowledged.
struct Ledger {
    sent: Vec<Vec<Option<usize>>>,
    acked: Vec<usize>,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger { sent: vec![Vec::new(); KEYS], acked: vec![0; KEYS] }
    }

    /// Send `ops` (key, version or delete) pipelined; false if the server
    /// went away (what was acknowledged before counts).
    fn run(&mut self, conn: &mut Conn, ops: &[(usize, Option<usize>)]) -> bool {
        let mut req = Vec::new();
        for &(i, op) in ops {
            match op {
                Some(v) => {
                    req.extend_from_slice(format!("set {} 0 0 64\r\n", key(i)).as_bytes());
                    req.extend_from_slice(&value(i, v));
                    req.extend_from_slice(b"\r\n");
                }
                None => req.extend_from_slice(format!("delete {}\r\n", key(i)).as_bytes()),
            }
            self.sent[i].push(op);
        }
        if conn.stream.write_all(&req).is_err() {
            return false;
        }
        for &(i, op) in ops {
            let mut line = String::new();
            match conn.reader.read_line(&mut line) {
                Ok(n) if n > 0 => {
                    let ok = if op.is_some() { line == "STORED\r\n" } else { line == "DELETED\r\n" || line == "NOT_FOUND\r\n" };
                    assert!(ok, "{} {op:?}: {line:?}", key(i));
                    self.acked[i] = self.sent[i].len();
                }
                _ => return false,
            }
        }
        true
    }

    /// Every key read back: a value must be the last acknowledged one or
    /// one sent later. Returns (acknowledged values expected, served).
    fn check(&self, conn: &mut Conn) -> (usize, usize) {
        let (mut expected, mut served) = (0, 0);
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(100) {
            let keys: Vec<String> = chunk.iter().map(|&i| key(i)).collect();
            let back: HashMap<String, Vec<u8>> = conn.get_many(&keys);
            for &i in chunk {
                let got = back.get(&key(i));
                let later = &self.sent[i][self.acked[i].saturating_sub(1)..];
                if let Some(v) = got {
                    assert!(
                        later.iter().any(|op| op.is_some_and(|s| value(i, s) == *v)),
                        "{}: served {:?}, not what was last acknowledged or sent after ({later:?})",
                        key(i),
                        String::from_utf8_lossy(v)
                    );
                }
                if self.acked[i] > 0 && self.acked[i] == self.sent[i].len() && matches!(self.sent[i].last(), Some(Some(_))) {
                    expected += 1;
                    served += usize::from(got.is_some());
                }
            }
        }
        (expected, served)
    }
}

/// Until `stat` reaches `at_least` (the rewrite thread works on its own).
fn wait_for(conn: &mut Conn, stat: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = conn.stat(stat);
        if v >= at_least {
            return v;
        }
        assert!(Instant::now() < deadline, "{stat} stays at {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_exit(mut server: Server) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Load every key, let the rewrites put most in sets, then delete every
/// tenth (from 1) and replace every tenth (from 2): their old versions
/// stay in sets until their partitions are rewritten.
fn load(ledger: &mut Ledger, conn: &mut Conn) {
    let all: Vec<(usize, Option<usize>)> = (0..KEYS).map(|i| (i, Some(0))).collect();
    for chunk in all.chunks(500) {
        assert!(ledger.run(conn, chunk));
    }
    // The rewrites move items into sets while the small index is past ¾
    // of its share of -m (3/8): here about a sixth of the keys.
    wait_for(conn, "extstore_small_items_sets", KEYS as u64 / 10);
    let changes: Vec<(usize, Option<usize>)> = (0..KEYS)
        .filter_map(|i| match i % 10 {
            1 => Some((i, None)),
            2 => Some((i, Some(1))),
            _ => None,
        })
        .collect();
    for chunk in changes.chunks(500) {
        assert!(ledger.run(conn, chunk));
    }
    assert!(conn.stat("extstore_small_tombstones") > 0, "the changes shadow copies in sets");
}

#[test]
fn small_items_in_sets_survive_restarts_and_never_come_back_old() {
    let files = Files::new("restarts");
    let server = files.start();
    let mut ledger = Ledger::new();
    let mut conn = Conn::to(&server);
    load(&mut ledger, &mut conn);
    // Served now, from sets, logs and RAM, with one read a set.
    let (expected, served) = ledger.check(&mut conn);
    assert!(served * 100 >= expected * 99, "{served} of {expected} served before any restart");
    let (hits, reads) = (conn.stat("extstore_small_set_hits"), conn.stat("extstore_small_set_reads"));
    assert!(hits > 20_000 && reads <= hits + hits / 50, "{hits} set hits, {reads} set reads");
    // A dump lists the small items too (the live ones: the deleted keys not).
    conn.stream.write_all(b"lru_crawler metadump all\r\n").unwrap();
    let mut dumped = 0;
    loop {
        let mut line = String::new();
        conn.reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            break;
        }
        // Keys are URL-encoded (':' as %3A).
        assert!(!line.contains(&format!("key={} ", key(1).replace(':', "%3A"))), "a deleted key in the dump");
        dumped += usize::from(line.starts_with("key=small%3A"));
    }
    assert!(dumped * 100 >= served * 99, "{dumped} dumped of {served} served");
    // Graceful stop (SIGTERM) and start on the same files.
    assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success());
    assert_eq!(wait_exit(server), Some(0));
    let server = files.start();
    let mut conn = Conn::to(&server);
    let (expected, served) = ledger.check(&mut conn);
    assert!(served * 100 >= expected * 99, "{served} of {expected} served after a graceful restart");
    // kill -9 in the middle of sets and deletes of keys in sets.
    let pid = server.child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    });
    let mut round = 2;
    loop {
        let ops: Vec<(usize, Option<usize>)> = (0..200)
            .map(|j| {
                let i = (round * 7919 + j * 1031) % KEYS;
                (i, if j % 3 == 1 { None } else { Some(round) })
            })
            .collect();
        if !ledger.run(&mut conn, &ops) {
            break;
        }
        round += 1;
    }
    killer.join().unwrap();
    let _ = wait_exit(server);
    assert!(round > 5, "the load ran ({round} rounds)");
    let server = files.start();
    let mut conn = Conn::to(&server);
    let (expected, served) = ledger.check(&mut conn);
    assert!(served * 100 >= expected * 99, "{served} of {expected} served after kill -9");
    assert!(conn.stat("extstore_small_items_sets") > KEYS as u64 / 20, "the sets came back");
}
