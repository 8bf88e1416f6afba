//! Flash durability under overwrite (issue 31): four writers pipeline sets
//! and deletes of 600-byte values over 20,000 keys into `-m 8` with a
//! flash tier and a memory file, the server is killed (`kill -9`) under
//! that load and started again on the same files. Every key must be served
//! at a state its writer was acknowledged for or sent later (0 stale, 0
//! corrupt), and at least 99% of the keys whose last acknowledged
//! operation was a set must be served at that version.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Conn, ScratchDir, Server};

const KEYS: usize = 20_000;
const WRITERS: usize = 4;

struct Files(ScratchDir);

impl Files {
    fn new(name: &str) -> Files {
        Files(ScratchDir::new("flash-overwrite", name))
    }

    fn args(&self) -> Vec<String> {
        let ext = format!("ext_path={}:256m", self.0.join("flash").display());
        let mem = self.0.join("memory").display().to_string();
        ["-t", "2", "-m", "8", "-e", &mem, "-o", &ext].iter().map(|s| s.to_string()).collect()
    }
}

fn start(files: &Files) -> Server {
    let args = files.args();
    Server::strata(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// 600 bytes naming key and version.
fn value(i: usize, version: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(600, b'a' + ((i + version) % 26) as u8);
    v
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Set(usize),
    Delete,
}

/// One writer's keys (i % WRITERS == w): what it sent, in order, and how
/// many of those its connection acknowledged.
struct Ledger {
    sent: HashMap<usize, Vec<Op>>,
    acked: HashMap<usize, usize>,
}

impl Ledger {
    /// Send `ops` pipelined; false once the server is gone.
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
            self.sent.entry(i).or_default().push(op);
        }
        if conn.stream.write_all(&req).is_err() {
            return false;
        }
        for &(i, _) in ops {
            let mut line = String::new();
            match conn.reader.read_line(&mut line) {
                Ok(n) if n > 0 => {
                    assert!(["STORED\r\n", "DELETED\r\n", "NOT_FOUND\r\n"].contains(&line.as_str()), "key:{i}: {line:?}");
                    self.acked.insert(i, self.sent[&i].len());
                }
                _ => return false,
            }
        }
        true
    }
}

/// Writer `w`: its keys set once, then rounds of sets and deletes until
/// the server is gone.
fn writer(w: usize, addr: std::net::SocketAddr, loaded: Arc<AtomicBool>) -> Ledger {
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut conn = Conn { reader: std::io::BufReader::new(stream.try_clone().expect("clone")), stream };
    let mut ledger = Ledger { sent: HashMap::new(), acked: HashMap::new() };
    let mine: Vec<usize> = (w..KEYS).step_by(WRITERS).collect();
    for chunk in mine.chunks(100) {
        let ops: Vec<(usize, Op)> = chunk.iter().map(|&i| (i, Op::Set(0))).collect();
        assert!(ledger.run(&mut conn, &ops), "the load was acknowledged");
    }
    loaded.store(true, Ordering::Release);
    let mut round = 1;
    loop {
        let ops: Vec<(usize, Op)> = (0..100)
            .map(|j| {
                let i = mine[(round * 7919 + j * 131) % mine.len()];
                (i, if j % 4 == 3 { Op::Delete } else { Op::Set(round) })
            })
            .collect();
        if !ledger.run(&mut conn, &ops) {
            return ledger;
        }
        round += 1;
    }
}

/// (expected at their last acknowledged version, served so, stale or corrupt).
fn check(ledgers: &[Ledger], conn: &mut Conn) -> (usize, usize, usize) {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i}")).collect();
    let back = conn.get_many(&keys);
    let (mut expected, mut served, mut wrong) = (0, 0, 0);
    for i in 0..KEYS {
        let ledger = &ledgers[i % WRITERS];
        let sent = ledger.sent.get(&i).map_or(&[][..], Vec::as_slice);
        let acked = ledger.acked.get(&i).copied().unwrap_or(0);
        let got = back.get(&keys[i]);
        // Acceptable: the last acknowledged state, or one sent after it.
        let later = &sent[acked.saturating_sub(1)..];
        if let Some(v) = got {
            if !later.iter().any(|op| matches!(op, Op::Set(s) if value(i, *s) == *v)) {
                wrong += 1;
            }
        }
        if acked > 0 && acked == sent.len() {
            if let Some(Op::Set(s)) = sent.last() {
                expected += 1;
                served += usize::from(got.is_some_and(|v| *v == value(i, *s)));
            }
        }
    }
    (expected, served, wrong)
}

fn overwrite_then(files: &Files, stop: &dyn Fn(&Server)) -> Vec<Ledger> {
    let server = start(files);
    let loaded: Vec<Arc<AtomicBool>> = (0..WRITERS).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, flag) = (server.addr, loaded[w].clone());
            std::thread::spawn(move || writer(w, addr, flag))
        })
        .collect();
    while !loaded.iter().all(|f| f.load(Ordering::Acquire)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert!(Conn::to(&server).stat("extstore_objects_written") > 1000, "items went to flash");
    stop(&server);
    let mut server = server;
    let _ = server.child.wait();
    writers.into_iter().map(|t| t.join().expect("writer")).collect()
}

fn served_again(ledgers: &[Ledger], files: &Files, after: &str) -> (usize, usize) {
    let server = start(files);
    let mut conn = Conn::to(&server);
    let (expected, served, wrong) = check(ledgers, &mut conn);
    eprintln!("after {after}: {served} of {expected} keys at their last acknowledged version, {wrong} stale or corrupt");
    assert_eq!(wrong, 0, "after {after}: stale or corrupt values");
    assert!(expected > KEYS / 2, "{expected} keys expected");
    (expected, served)
}

#[test]
fn kill_9_under_overwrite_keeps_99_percent_at_their_last_acknowledged_version() {
    let files = Files::new("kill9");
    let ledgers = overwrite_then(&files, &|s| {
        Command::new("kill").args(["-9", &s.child.id().to_string()]).status().expect("kill");
    });
    let (expected, served) = served_again(&ledgers, &files, "kill -9");
    assert!(served * 100 >= expected * 99, "after kill -9: {served} of {expected}");
}

#[test]
fn sigterm_under_overwrite_keeps_every_key_at_its_last_acknowledged_version() {
    let files = Files::new("term");
    let ledgers = overwrite_then(&files, &|s| {
        Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().expect("kill");
    });
    let (expected, served) = served_again(&ledgers, &files, "SIGTERM");
    assert_eq!(served, expected, "after SIGTERM");
}
