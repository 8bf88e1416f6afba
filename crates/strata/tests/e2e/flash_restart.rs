//! `-e FILE` with `ext_path` on the wire: a tiny `-m` pushes most items to
//! flash, some keys are deleted and some replaced (their old versions stay
//! on flash), then the server stops (SIGUSR1, `shutdown graceful`, or
//! `kill -9` during a load of sets and deletes) and starts again on the same
//! files. At least 99% of the acknowledged items must be served again, from
//! flash too, never a wrong or stale value, and a deleted key never comes
//! back. Sixty of the keys hold values larger than a write buffer, which go
//! to flash with writes of their own.

use crate::common;

use std::io::{BufRead, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Conn, ScratchDir, Server};

const KEYS: usize = 6000;

/// A memory file and a flash file, removed at the end.
struct Files(ScratchDir);

impl Files {
    fn new(name: &str) -> Files {
        Files(ScratchDir::new("flash-restart", name))
    }

    fn args(&self) -> Vec<String> {
        let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_path={}:256m", self.0.join("flash").display());
        let mem = self.0.join("memory").display().to_string();
        ["-t", "2", "-m", "8", "-A", "-e", &mem, "-o", &ext].iter().map(|s| s.to_string()).collect()
    }
}

fn start(files: &Files) -> Server {
    let args = files.args();
    Server::strata(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Keys ending in 07 (60 of them, never changed after the load) hold
/// 600,000 bytes: larger than a write buffer at `-m 8` (512 KiB), so they
/// go to flash with writes of their own (seg/flash/tier/large.rs).
fn is_large(i: usize) -> bool {
    i % 100 == 7
}

/// 1,500 bytes (600,000 for a large key) naming key and version: 6,000
/// keys are 45 MB, more than `-m 8`.
fn value(i: usize, version: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(if is_large(i) { 600_000 } else { 1500 }, b'a' + ((i + version) % 26) as u8);
    v
}

/// One operation sent on a key: a set of a version, or a delete.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Set(usize),
    Delete,
}

/// Per key, the operations sent in order and how many were acknowledged.
struct Ledger {
    sent: Vec<Vec<Op>>,
    acked: Vec<usize>,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger { sent: vec![Vec::new(); KEYS], acked: vec![0; KEYS] }
    }

    /// Send `ops` in one pipeline and read the replies; false if the server
    /// went away (the replies read before that count).
    fn run(&mut self, conn: &mut Conn, ops: &[(usize, Op)]) -> bool {
        let mut req = Vec::new();
        for &(i, op) in ops {
            match op {
                Op::Set(v) => {
                    let data = value(i, v);
                    req.extend_from_slice(format!("set key:{i} 0 0 {}\r\n", data.len()).as_bytes());
                    req.extend_from_slice(&data);
                    req.extend_from_slice(b"\r\n");
                }
                Op::Delete => req.extend_from_slice(format!("delete key:{i}\r\n").as_bytes()),
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
                    let expected = if op == Op::Delete { ["DELETED\r\n", "NOT_FOUND\r\n"] } else { ["STORED\r\n"; 2] };
                    assert!(expected.contains(&line.as_str()), "key:{i} {op:?}: {line:?}");
                    self.acked[i] = self.sent[i].len();
                }
                _ => return false,
            }
        }
        true
    }

    /// Check what the server serves now against the ledger: returns
    /// (acknowledged items expected, served).
    fn check(&self, conn: &mut Conn) -> (usize, usize) {
        let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i}")).collect();
        let back = conn.get_many(&keys);
        let (mut expected, mut served) = (0, 0);
        for i in 0..KEYS {
            let got = back.get(&keys[i]);
            // Acceptable: the state after the last acknowledged operation,
            // or after any operation sent later (so a deleted or replaced
            // key's old value never passes).
            let from = self.acked[i].saturating_sub(1);
            let later = &self.sent[i][from..];
            match got {
                Some(v) => assert!(
                    later.iter().any(|op| matches!(op, Op::Set(s) if value(i, *s) == *v)),
                    "key:{i}: served {:?}, not what was last acknowledged or sent after ({later:?})",
                    String::from_utf8_lossy(&v[..v.len().min(16)])
                ),
                // A deleted key, or a lost item (counted below).
                None => {}
            }
            // Counted: keys whose acknowledged state is a value nothing later changed.
            if self.acked[i] > 0 && self.acked[i] == self.sent[i].len() {
                if let Some(Op::Set(_)) = self.sent[i].last() {
                    expected += 1;
                    served += usize::from(got.is_some());
                }
            }
        }
        (expected, served)
    }
}

/// Load every key, then delete every tenth (from 1) and replace every
/// tenth (from 2), then set and delete every tenth (from 3): old versions
/// of replaced and deleted keys stay on flash.
fn load(ledger: &mut Ledger, conn: &mut Conn) {
    let all: Vec<(usize, Op)> = (0..KEYS).map(|i| (i, Op::Set(0))).collect();
    for chunk in all.chunks(200) {
        assert!(ledger.run(conn, chunk));
    }
    let mut changes = Vec::new();
    for i in 0..KEYS {
        match i % 10 {
            1 => changes.push((i, Op::Delete)),
            2 => changes.push((i, Op::Set(1))),
            3 => changes.extend([(i, Op::Set(1)), (i, Op::Delete)]),
            _ => {}
        }
    }
    for chunk in changes.chunks(200) {
        assert!(ledger.run(conn, chunk));
    }
    assert!(conn.stat("extstore_objects_written") > 1000, "items went to flash");
    assert_eq!(conn.stat("extstore_write_fallbacks"), 0, "large items went to flash too");
}

fn wait_exit(mut server: Server) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn served_again(ledger: &Ledger, files: &Files, after: &str) {
    let server = start(files);
    let mut conn = Conn::to(&server);
    let (expected, served) = ledger.check(&mut conn);
    assert!(expected > KEYS / 2, "{expected} items expected");
    let large: Vec<String> = (0..KEYS).filter(|&i| is_large(i)).map(|i| format!("key:{i}")).collect();
    let large_served = conn.get_many(&large).len();
    eprintln!(
        "after {after}: {served} of {expected} acknowledged items served ({large_served} of {} large), {} gets from flash",
        large.len(),
        conn.stat("get_extstore")
    );
    assert!(served * 100 >= expected * 99, "after {after}: {served} of {expected} acknowledged items served");
    assert!(large_served + 2 >= large.len(), "after {after}: {large_served} of {} large items served", large.len());
    assert!(conn.stat("get_extstore") > 100, "after {after}: items were read from flash");
}

fn graceful(name: &str, stop: impl Fn(&Server)) {
    let files = Files::new(name);
    let server = start(&files);
    let mut ledger = Ledger::new();
    let mut conn = Conn::to(&server);
    load(&mut ledger, &mut conn);
    stop(&server);
    assert_eq!(wait_exit(server), Some(0));
    served_again(&ledger, &files, name);
}

#[test]
fn sigusr1_with_flash_serves_the_items_again() {
    graceful("sigusr1", |server| {
        assert!(Command::new("kill").args(["-USR1", &server.child.id().to_string()]).status().unwrap().success());
    });
}

#[test]
fn shutdown_graceful_with_flash_serves_the_items_again() {
    graceful("shutdown", |server| {
        Conn::to(server).stream.write_all(b"shutdown graceful\r\n").unwrap();
    });
}

#[test]
fn kill_9_during_sets_and_deletes_with_flash_serves_the_acknowledged_items() {
    let files = Files::new("kill9");
    let server = start(&files);
    let mut ledger = Ledger::new();
    let mut conn = Conn::to(&server);
    load(&mut ledger, &mut conn);
    let pid = server.child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    });
    let mut round = 2;
    loop {
        // Keys ending in 4: new versions; ending in 5: deleted; ending in 6: set again.
        let ops: Vec<(usize, Op)> = (0..100)
            .map(|j| {
                let i = (round * 7919 + j * 131) % (KEYS / 10) * 10;
                match j % 3 {
                    0 => (i + 4, Op::Set(round)),
                    1 => (i + 5, Op::Delete),
                    _ => (i + 6, Op::Set(round)),
                }
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
    served_again(&ledger, &files, "kill -9");
}
