//! Protocol parity: the same operations through text, meta and binary, and
//! how `stats`, `stats detail` and `watch` move for each, one scenario per
//! row of the table in `src/service/hooks.rs`.
//!
//! Every scenario states what memcached does (observed on Debian's
//! memcached 1.6.18; the `deletions` stream, which 1.6.18 lacks, from
//! 1.6.45's `proto_text.c` and `proto_bin.c`), and Strata must do that.
//! Where memcached is installed the same scenario also runs against it,
//! side by side, and both must agree with the expectation, so a wrong
//! expectation cannot hide.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use strata_server::Settings;

use crate::common::{self, Memcached};

/// Counters compared, as `stats` names them.
const COUNTERS: &[&str] = &[
    "cmd_get", "cmd_set", "cmd_touch", "cmd_meta", "get_hits", "get_misses", "delete_hits", "delete_misses",
    "incr_hits", "incr_misses", "touch_hits", "touch_misses", "cas_hits", "cas_badval",
];

/// Debian's memcached, or None when not installed.
fn memcached() -> Option<Memcached> {
    let server = common::memcached(&["-t", "1"]);
    if server.is_none() {
        eprintln!("parity: memcached not started; checking Strata against the expectations alone");
    }
    server
}

struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        let (w, r) = common::connect(addr);
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { w, r }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn ask(&mut self, cmd: &[u8]) -> String {
        self.w.write_all(cmd).unwrap();
        self.line()
    }

    fn stats(&mut self) -> Vec<(String, u64)> {
        self.w.write_all(b"stats\r\n").unwrap();
        let mut all = Vec::new();
        loop {
            let l = self.line();
            if l == "END\r\n" || l.is_empty() {
                break;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            if let (3, Ok(v)) = (f.len(), f.get(2).map(|v| v.parse::<u64>()).unwrap_or(Ok(0))) {
                all.push((f[1].to_string(), v));
            }
        }
        COUNTERS
            .iter()
            .map(|&name| (name.to_string(), all.iter().find(|(n, _)| n == name).map_or(u64::MAX, |(_, v)| *v)))
            .collect()
    }

    /// `stats detail dump` lines for keys with prefix `p`.
    fn detail(&mut self, p: &str) -> Vec<String> {
        self.w.write_all(b"stats detail dump\r\n").unwrap();
        let mut lines = Vec::new();
        loop {
            let l = self.line();
            if l == "END\r\n" || l.is_empty() {
                break;
            }
            if l.starts_with(&format!("PREFIX {p} ")) {
                lines.push(l.trim_end().to_string());
            }
        }
        lines
    }

    /// One binary response: (status, body).
    fn binary(&mut self, request: &[u8]) -> (u16, Vec<u8>) {
        self.w.write_all(request).unwrap();
        let mut head = [0u8; 24];
        self.r.read_exact(&mut head).unwrap();
        let body_len = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0; body_len];
        self.r.read_exact(&mut body).unwrap();
        (u16::from_be_bytes([head[6], head[7]]), body)
    }
}

/// A binary request.
fn bin(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.push(extras.len() as u8);
    r.extend_from_slice(&[0, 0, 0]);
    r.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    r.extend_from_slice(&0xabcdu32.to_be_bytes());
    r.extend_from_slice(&cas.to_be_bytes());
    r.extend_from_slice(extras);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;

/// One step of a scenario on one connection.
enum Op {
    /// A text or meta command with a one-line reply.
    Line(String, &'static str),
    /// A text get-family command, answered up to `END`.
    Get(String, usize),
    /// `mg ... v`: `VA` and the value, or `EN`.
    Mg(String, bool),
    /// A binary request and its status.
    Bin(Vec<u8>, u16),
}

fn run(c: &mut Client, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Line(cmd, want) => assert_eq!(c.ask(cmd.as_bytes()), *want, "{cmd}"),
            Op::Get(cmd, hits) => {
                c.w.write_all(cmd.as_bytes()).unwrap();
                for _ in 0..*hits {
                    assert!(c.line().starts_with("VALUE "), "{cmd}");
                    c.line();
                }
                assert_eq!(c.line(), "END\r\n", "{cmd}");
            }
            Op::Mg(cmd, hit) => {
                let l = c.ask(cmd.as_bytes());
                if *hit {
                    assert!(l.starts_with("VA "), "{cmd}: {l}");
                    c.line();
                } else {
                    assert_eq!(l, "EN\r\n", "{cmd}");
                }
            }
            Op::Bin(req, status) => assert_eq!(c.binary(req).0, *status, "binary opcode {}", req[1]),
        }
    }
}

/// What a scenario moved on one server.
#[derive(Debug, PartialEq)]
struct Moved {
    counters: Vec<(String, u64)>,
    detail: Vec<String>,
    watch: Vec<String>,
}

/// A log line without its time, id and connection (`ts=.. gid=.. ... cfd=N`).
fn strip(l: &str) -> String {
    l.trim_end()
        .split(' ')
        .filter(|w| !w.starts_with("ts=") && !w.starts_with("gid=") && !w.starts_with("cfd="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `ops` on a fresh connection to `addr` while a watcher listens to
/// `streams`; `marker` is a last op whose `item_get` line for key `mark`
/// (as logged: URI-encoded) closes the window (log lines of one connection
/// keep their order). The marker's key has a prefix of its own, so it
/// counts nowhere in the scenario's `stats detail` line.
fn observe(addr: SocketAddr, prefix: &str, streams: &str, ops: &[Op], marker: Op, mark: &str) -> Moved {
    let mut admin = Client::new(addr);
    assert_eq!(admin.ask(b"stats detail on\r\n"), "OK\r\n");
    let mut watcher = Client::new(addr);
    assert_eq!(watcher.ask(format!("watch {streams} fetchers\r\n").as_bytes()), "OK\r\n");
    let before = admin.stats();
    let mut c = Client::new(addr);
    run(&mut c, ops);
    let after = admin.stats();
    run(&mut c, &[marker]);
    let mut watch = Vec::new();
    let end = format!("key={mark} ");
    loop {
        let l = watcher.line();
        assert!(!l.is_empty(), "watcher closed");
        if l.contains(&end) {
            break;
        }
        watch.push(strip(&l));
    }
    let counters = before
        .iter()
        .zip(&after)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, a), (_, b))| (name.clone(), b - a))
        .collect();
    let mut detail = admin.detail(prefix);
    detail.sort();
    Moved { counters, detail, watch }
}

fn moved(counters: &[(&str, u64)], detail: &[&str], watch: &[&str]) -> Moved {
    Moved {
        counters: COUNTERS
            .iter()
            .filter_map(|&n| counters.iter().find(|(c, _)| *c == n).map(|&(c, v)| (c.to_string(), v)))
            .collect(),
        detail: detail.iter().map(|s| s.to_string()).collect(),
        watch: watch.iter().map(|s| s.to_string()).collect(),
    }
}

/// Check one scenario on Strata and, when there, on memcached.
fn check(
    name: &str,
    strata: SocketAddr,
    memcached: Option<SocketAddr>,
    streams: &str,
    scenario: impl Fn(&str) -> (Vec<Op>, Op),
    want: impl Fn(&str) -> Moved,
) {
    for (who, addr) in [("strata", Some(strata)), ("memcached", memcached)] {
        let Some(addr) = addr else { continue };
        // Prefixes unique per server run, so `stats detail` starts empty.
        let prefix = format!("{name}{}", if who == "strata" { "s" } else { "m" });
        let (ops, marker) = scenario(&prefix);
        let got = observe(addr, &prefix, streams, &ops, marker, &format!("{prefix}M%3Amark"));
        assert_eq!(got, want(&prefix), "{name} on {who}");
    }
}

fn text_marker(p: &str) -> Op {
    Op::Get(format!("get {p}M:mark\r\n"), 0)
}

fn meta_marker(p: &str) -> Op {
    Op::Mg(format!("mg {p}M:mark v\r\n"), false)
}

fn bin_marker(p: &str) -> Op {
    Op::Bin(bin(GET, format!("{p}M:mark").as_bytes(), &[], &[], 0), 1)
}

fn got(p: &str, k: &str) -> String {
    format!("type=item_get key={p}%3A{k} status=found clsid=1 size=1")
}

fn missed(p: &str, k: &str) -> String {
    format!("type=item_get key={p}%3A{k} status=not_found clsid=0 size=0")
}

fn stored(p: &str, k: &str) -> String {
    format!("type=item_store key={p}%3A{k} status=stored cmd=set ttl=0 clsid=1 size=1")
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

#[test]
fn stats_detail_and_watch_move_as_memcached_for_each_protocol() {
    let (_server, strata) = common::start(Settings { threads: 2, watch_enabled: true, ..Settings::default() });
    let reference = memcached();
    let mc = reference.as_ref().map(|m| m.1);
    let extras = |flags: u32, exptime: u32| [flags.to_be_bytes(), exptime.to_be_bytes()].concat();

    // Rows 1, 3: set, get (hit, miss), delete (hit, miss). Text and binary
    // count in `stats detail`, meta does not; every lookup logs item_get.
    let common = [("cmd_get", 2), ("cmd_set", 1), ("get_hits", 1), ("get_misses", 1), ("delete_hits", 1), ("delete_misses", 1)];
    let watch = |p: &str| {
        vec![missed(p, "a"), stored(p, "a"), got(p, "a"), missed(p, "b"), got(p, "a"), missed(p, "b")]
    };
    check(
        "r1t",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![
                Op::Line(format!("set {p}:a 0 0 1\r\nx\r\n"), "STORED\r\n"),
                Op::Get(format!("get {p}:a\r\n"), 1),
                Op::Get(format!("get {p}:b\r\n"), 0),
                Op::Line(format!("delete {p}:a\r\n"), "DELETED\r\n"),
                Op::Line(format!("delete {p}:b\r\n"), "NOT_FOUND\r\n"),
            ];
            (ops, text_marker(p))
        },
        |p| moved(&common, &[&format!("PREFIX {p} get 2 hit 1 set 1 del 2")], &strs(&watch(p))),
    );
    check(
        "r1m",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![
                Op::Line(format!("ms {p}:a 1\r\nx\r\n"), "HD\r\n"),
                Op::Mg(format!("mg {p}:a v\r\n"), true),
                Op::Mg(format!("mg {p}:b v\r\n"), false),
                Op::Line(format!("md {p}:a\r\n"), "HD\r\n"),
                Op::Line(format!("md {p}:b\r\n"), "NF\r\n"),
            ];
            (ops, meta_marker(p))
        },
        |p| moved(&common, &[], &strs(&watch(p))),
    );
    check(
        "r1b",
        strata,
        mc,
        "mutations",
        |p| {
            let key = |k: &str| format!("{p}:{k}").into_bytes();
            let ops = vec![
                Op::Bin(bin(SET, &key("a"), &extras(0, 0), b"x", 0), 0),
                Op::Bin(bin(GET, &key("a"), &[], &[], 0), 0),
                Op::Bin(bin(GET, &key("b"), &[], &[], 0), 1),
                Op::Bin(bin(DELETE, &key("a"), &[], &[], 0), 0),
                Op::Bin(bin(DELETE, &key("b"), &[], &[], 0), 1),
            ];
            (ops, bin_marker(p))
        },
        |p| moved(&common, &[&format!("PREFIX {p} get 2 hit 1 set 1 del 2")], &strs(&watch(p))),
    );

    // Rows 2, 6: reads that touch count as touches only (no get_hits);
    // in `stats detail` text gat and binary GAT/TOUCH are gets, text
    // `touch` and meta are not there.
    let touch_watch = |p: &str| vec![missed(p, "a"), stored(p, "a"), got(p, "a"), missed(p, "b"), got(p, "a")];
    check(
        "r2t",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![
                Op::Line(format!("set {p}:a 0 0 1\r\nx\r\n"), "STORED\r\n"),
                Op::Get(format!("gat 100 {p}:a\r\n"), 1),
                Op::Get(format!("gat 100 {p}:b\r\n"), 0),
                Op::Line(format!("touch {p}:a 100\r\n"), "TOUCHED\r\n"),
            ];
            (ops, text_marker(p))
        },
        |p| {
            let counters = [("cmd_set", 1), ("cmd_touch", 3), ("touch_hits", 2), ("touch_misses", 1)];
            moved(&counters, &[&format!("PREFIX {p} get 2 hit 1 set 1 del 0")], &strs(&touch_watch(p)))
        },
    );
    check(
        "r2m",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![
                Op::Line(format!("ms {p}:a 1\r\nx\r\n"), "HD\r\n"),
                Op::Mg(format!("mg {p}:a T100 v\r\n"), true),
                Op::Mg(format!("mg {p}:b T100 v\r\n"), false),
                Op::Mg(format!("mg {p}:a v\r\n"), true),
            ];
            (ops, meta_marker(p))
        },
        |p| {
            // A miss with T is a get miss.
            let counters = [("cmd_get", 2), ("cmd_set", 1), ("cmd_touch", 1), ("get_hits", 1), ("get_misses", 1), ("touch_hits", 1)];
            moved(&counters, &[], &strs(&touch_watch(p)))
        },
    );
    check(
        "r2b",
        strata,
        mc,
        "mutations",
        |p| {
            let key = |k: &str| format!("{p}:{k}").into_bytes();
            let ttl = 100u32.to_be_bytes();
            let ops = vec![
                Op::Bin(bin(SET, &key("a"), &extras(0, 0), b"x", 0), 0),
                Op::Bin(bin(GAT, &key("a"), &ttl, &[], 0), 0),
                Op::Bin(bin(GAT, &key("b"), &ttl, &[], 0), 1),
                Op::Bin(bin(TOUCH, &key("a"), &ttl, &[], 0), 0),
            ];
            (ops, bin_marker(p))
        },
        |p| {
            let counters = [("cmd_set", 1), ("cmd_touch", 3), ("touch_hits", 2), ("touch_misses", 1)];
            moved(&counters, &[&format!("PREFIX {p} get 3 hit 2 set 1 del 0")], &strs(&touch_watch(p)))
        },
    );

    // Row 3: incr through each protocol logs item_get before it.
    let incr_watch = |p: &str| vec![missed(p, "n"), stored(p, "n"), got(p, "n")];
    let incr_counters = [("cmd_set", 1), ("incr_hits", 1)];
    check(
        "r3t",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![
                Op::Line(format!("set {p}:n 0 0 1\r\n5\r\n"), "STORED\r\n"),
                Op::Line(format!("incr {p}:n 1\r\n"), "6\r\n"),
            ];
            (ops, text_marker(p))
        },
        |p| moved(&incr_counters, &[&format!("PREFIX {p} get 0 hit 0 set 1 del 0")], &strs(&incr_watch(p))),
    );
    check(
        "r3m",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![Op::Line(format!("ms {p}:n 1\r\n5\r\n"), "HD\r\n"), Op::Line(format!("ma {p}:n\r\n"), "HD\r\n")];
            (ops, meta_marker(p))
        },
        |p| moved(&incr_counters, &[], &strs(&incr_watch(p))),
    );
    check(
        "r3b",
        strata,
        mc,
        "mutations",
        |p| {
            let key = format!("{p}:n").into_bytes();
            let delta = [1u64.to_be_bytes(), 0u64.to_be_bytes()].concat();
            let delta = [&delta[..], &0u32.to_be_bytes()].concat();
            let ops = vec![Op::Bin(bin(SET, &key, &extras(0, 0), b"5", 0), 0), Op::Bin(bin(INCREMENT, &key, &delta, &[], 0), 0)];
            (ops, bin_marker(p))
        },
        |p| moved(&incr_counters, &[&format!("PREFIX {p} get 0 hit 0 set 1 del 0")], &strs(&incr_watch(p))),
    );

    // Row 5: a delete whose CAS differs is a miss for md, nothing for binary.
    check(
        "r5m",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![Op::Line(format!("ms {p}:a 1\r\nx\r\n"), "HD\r\n"), Op::Line(format!("md {p}:a C999999\r\n"), "EX\r\n")];
            (ops, meta_marker(p))
        },
        |p| moved(&[("cmd_set", 1), ("delete_misses", 1)], &[], &[&missed(p, "a"), &stored(p, "a"), &got(p, "a")]),
    );
    check(
        "r5b",
        strata,
        mc,
        "mutations",
        |p| {
            let key = format!("{p}:a").into_bytes();
            let ops = vec![Op::Bin(bin(SET, &key, &extras(0, 0), b"x", 0), 0), Op::Bin(bin(DELETE, &key, &[], &[], 999_999), 2)];
            (ops, bin_marker(p))
        },
        |p| {
            let detail = format!("PREFIX {p} get 0 hit 0 set 1 del 1");
            moved(&[("cmd_set", 1)], &[&detail], &[&missed(p, "a"), &stored(p, "a"), &got(p, "a")])
        },
    );

    // Row 7: `me` counts cmd_meta, hit or miss; its lookup logs item_get.
    check(
        "r7m",
        strata,
        mc,
        "mutations",
        |p| {
            let ops = vec![Op::Line(format!("ms {p}:a 1\r\nx\r\n"), "HD\r\n"), Op::Line(format!("me {p}:b\r\n"), "EN\r\n")];
            (ops, meta_marker(p))
        },
        |p| moved(&[("cmd_set", 1), ("cmd_meta", 1)], &[], &[&missed(p, "a"), &stored(p, "a"), &missed(p, "b")]),
    );
}

/// Row 4: `watch deletions` (memcached 1.6.45; 1.6.18 has no such stream):
/// text `delete` logs `cmd=delete`, `md` logs `cmd=md` (not for `md I`),
/// binary DELETE logs nothing (`proto_bin.c` has no deletion log).
#[test]
fn watch_deletions_per_protocol_as_memcached_145() {
    let (_server, addr) = common::start(Settings { threads: 2, watch_enabled: true, ..Settings::default() });
    let mut watcher = Client::new(addr);
    assert_eq!(watcher.ask(b"watch deletions\r\n"), "OK\r\n");
    let extras = [0u32.to_be_bytes(), 0u32.to_be_bytes()].concat();
    run(&mut Client::new(addr), &[Op::Bin(bin(SET, b"d:b", &extras, b"x", 0), 0), Op::Bin(bin(DELETE, b"d:b", &[], &[], 0), 0)]);
    run(
        &mut Client::new(addr),
        &[
            Op::Line("ms d:i 1\r\nx\r\n".into(), "HD\r\n"),
            Op::Line("md d:i I\r\n".into(), "HD\r\n"),
            Op::Line("ms d:m 1\r\nx\r\n".into(), "HD\r\n"),
            Op::Line("md d:m\r\n".into(), "HD\r\n"),
            Op::Line("set d:t 0 0 1\r\nx\r\n".into(), "STORED\r\n"),
            Op::Line("delete d:t\r\n".into(), "DELETED\r\n"),
        ],
    );
    let lines: Vec<String> = (0..2).map(|_| strip(&watcher.line())).collect();
    assert_eq!(lines, ["type=deleted key=d%3Am cmd=md clsid=1 size=1", "type=deleted key=d%3At cmd=delete clsid=1 size=1"]);
}
