//! The flash tier on the wire (`-o ext_path`): a tiny `-m` pushes items to
//! flash, then every command that reads or changes an item runs on one,
//! alone and in pipelines and multi-gets that mix RAM and flash keys, on
//! both I/O engines. Replies must be memcached's, in request order.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

mod common;

use common::spawn_listening;

/// Items: 4,000 values of 2,000 bytes (8 MB) with `-m 8`, of which a 2 MiB
/// write buffer: most of them end up on flash.
const ITEMS: usize = 4000;
const COUNTERS: usize = 50;

fn value(i: usize) -> Vec<u8> {
    format!("{i:08}").repeat(250).into_bytes()
}

/// A counter memcached's incr reads (digits, then spaces), large enough to
/// go to flash (`ext_item_size` 512).
fn counter() -> Vec<u8> {
    let mut v = b"100".to_vec();
    v.resize(600, b' ');
    v
}

/// Kills a server when the test ends, passed or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Client {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Client {
    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Everything up to and including the first `end`.
    fn until(&mut self, end: &[u8]) -> Vec<u8> {
        loop {
            if let Some(at) = self.pending.windows(end.len()).position(|w| w == end) {
                let rest = self.pending.split_off(at + end.len());
                return std::mem::replace(&mut self.pending, rest);
            }
            let mut buf = [0u8; 65536];
            let n = self.stream.read(&mut buf).unwrap();
            assert!(n > 0, "closed; had {:?}", String::from_utf8_lossy(&self.pending));
            self.pending.extend_from_slice(&buf[..n]);
        }
    }

    fn line(&mut self, request: &[u8]) -> String {
        self.send(request);
        String::from_utf8(self.until(b"\r\n")).unwrap()
    }

    fn stat(&mut self, name: &str) -> u64 {
        self.send(b"stats\r\n");
        let text = String::from_utf8(self.until(b"END\r\n")).unwrap();
        let prefix = format!("STAT {name} ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name}"));
        line[prefix.len()..].trim().parse().unwrap()
    }
}

fn value_reply(key: &str, i: usize) -> Vec<u8> {
    let mut r = format!("VALUE {key} 0 2000\r\n").into_bytes();
    r.extend_from_slice(&value(i));
    r.extend_from_slice(b"\r\n");
    r
}

fn run_on(engine: &str) {
    let dir = std::env::temp_dir().join(format!("strata-flash-{engine}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!(
        "io_engine={engine},ext_path={}:256m,ext_page_size=8,ext_wbuf_size=2,ext_threads=2",
        dir.join("flash").display()
    );
    let (child, addrs) = spawn_listening(&["-t", "2", "-m", "8", "-o", &ext], 1);
    let _server = Killed(child);
    let stream = TcpStream::connect(addrs[0]).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = Client { stream, pending: Vec::new() };

    // Counters first, so they are among the first items pushed to flash.
    for i in 0..COUNTERS {
        let mut req = format!("set c{i} 0 0 600 noreply\r\n").into_bytes();
        req.extend_from_slice(&counter());
        req.extend_from_slice(b"\r\n");
        c.send(&req);
    }
    for i in 0..ITEMS {
        let mut req = format!("set k{i} 0 0 2000 noreply\r\n").into_bytes();
        req.extend_from_slice(&value(i));
        req.extend_from_slice(b"\r\n");
        c.send(&req);
    }
    c.send(b"mn\r\n");
    c.until(b"MN\r\n");
    assert!(c.stat("extstore_objects_written") > 1000, "items went to flash");
    let reads_before = c.stat("get_extstore");

    // Every command on an item that went to flash early.
    c.send(b"gets k0\r\n");
    let reply = c.until(b"END\r\n");
    assert!(reply.starts_with(b"VALUE k0 0 2000 ") && reply.ends_with(&[&value(0)[..], b"\r\nEND\r\n"].concat()), "gets");
    c.send(b"gat 100 k1\r\n");
    assert!(c.until(b"END\r\n") == [value_reply("k1", 1), b"END\r\n".to_vec()].concat(), "gat");
    assert_eq!(c.line(b"touch k2 100\r\n"), "TOUCHED\r\n");
    c.send(b"gets k3\r\n");
    let reply = String::from_utf8_lossy(&c.until(b"END\r\n")).into_owned();
    let cas: u64 = reply.lines().next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(c.line(format!("cas k3 0 0 2 {cas}\r\nok\r\n").as_bytes()), "STORED\r\n");
    assert_eq!(c.line(b"append k4 0 0 2\r\nxx\r\n"), "STORED\r\n");
    assert_eq!(c.line(b"prepend k5 0 0 2\r\nyy\r\n"), "STORED\r\n");
    assert_eq!(c.line(b"incr c0 5\r\n"), "105\r\n");
    assert_eq!(c.line(b"decr c1 3\r\n"), "97\r\n");
    assert_eq!(c.line(b"delete k6\r\n"), "DELETED\r\n");
    assert_eq!(c.line(b"add k7 0 0 1\r\na\r\n"), "NOT_STORED\r\n");
    assert_eq!(c.line(b"replace k8 0 0 1\r\nr\r\n"), "STORED\r\n");
    c.send(b"mg k9 v s\r\n");
    assert_eq!(c.until(b"\r\n"), b"VA 2000 s2000\r\n");
    assert!(c.until(b"\r\n") == [&value(9)[..], b"\r\n"].concat(), "mg value");
    assert!(c.line(b"mg k10 t T30\r\n").starts_with("HD t"), "mg with T");
    assert_eq!(c.line(b"ms k11 2 MA\r\nzz\r\n"), "HD\r\n");
    assert_eq!(c.line(b"md k12\r\n"), "HD\r\n");
    assert_eq!(c.line(b"ma c2 MD\r\n"), "HD\r\n");
    assert!(c.line(b"me k13\r\n").starts_with("ME k13 exp=-1 "), "me");

    // What those commands left.
    let get = |c: &mut Client, key: &str| {
        c.send(format!("get {key}\r\n").as_bytes());
        c.until(b"END\r\n")
    };
    assert_eq!(get(&mut c, "k3"), b"VALUE k3 0 2\r\nok\r\nEND\r\n");
    assert!(get(&mut c, "k4") == [&b"VALUE k4 0 2002\r\n"[..], &value(4), b"xx\r\nEND\r\n"].concat(), "append");
    assert!(get(&mut c, "k5") == [&b"VALUE k5 0 2002\r\nyy"[..], &value(5), b"\r\nEND\r\n"].concat(), "prepend");
    assert_eq!(get(&mut c, "k6"), b"END\r\n");
    assert_eq!(get(&mut c, "k8"), b"VALUE k8 0 1\r\nr\r\nEND\r\n");
    assert!(get(&mut c, "k11") == [&b"VALUE k11 0 2002\r\n"[..], &value(11), b"zz\r\nEND\r\n"].concat(), "ms MA");
    assert_eq!(get(&mut c, "k12"), b"END\r\n");
    assert_eq!(c.line(b"incr c2 0\r\n"), "99\r\n");

    // Pipelined multi-gets mixing keys on flash (low numbers) and in RAM
    // (the last ones written), then a meta get: replies in order.
    let keys = [20, ITEMS - 1, 21, ITEMS - 2, 22, 23, ITEMS - 3, 24];
    let line: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
    let mut pipeline = Vec::new();
    for _ in 0..3 {
        pipeline.extend_from_slice(format!("get {}\r\n", line.join(" ")).as_bytes());
    }
    pipeline.extend_from_slice(b"mg k25 v\r\nmn\r\n");
    c.send(&pipeline);
    let mut expected = Vec::new();
    for _ in 0..3 {
        for &k in &keys {
            expected.extend_from_slice(&value_reply(&format!("k{k}"), k));
        }
        expected.extend_from_slice(b"END\r\n");
    }
    expected.extend_from_slice(&[&b"VA 2000\r\n"[..], &value(25), b"\r\nMN\r\n"].concat());
    assert!(c.until(b"MN\r\n") == expected, "pipelined multi-gets mixing tiers");

    // Every item written and not changed since reads back intact.
    let mut missing = 0;
    for i in 26..ITEMS {
        let reply = get(&mut c, &format!("k{i}"));
        if reply == b"END\r\n" {
            missing += 1;
        } else {
            assert!(reply == [value_reply(&format!("k{i}"), i), b"END\r\n".to_vec()].concat(), "k{i}");
        }
    }
    assert!(missing <= ITEMS / 100, "{missing} of {ITEMS} missing");
    assert!(c.stat("get_extstore") > reads_before + 20, "the commands above read from flash");
    assert_eq!(c.stat("badcrc_from_extstore"), 0);
    assert_eq!(c.stat("extstore_io_queue"), 0, "every read handed out was finished");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_command_on_flash_items_with_epoll() {
    run_on("epoll");
}

#[test]
fn every_command_on_flash_items_with_the_default_engine() {
    run_on("auto");
}

/// `stats settings`, `stats` and the `extstore` command next to Debian's
/// memcached (1.6.18, built with extstore) started with the same
/// `ext_path`: the same extstore field names in the same order, and the
/// replies 1.6.18 and 1.6.45 agree on. Skipped without /usr/bin/memcached.
#[test]
fn extstore_stats_and_command_as_memcached() {
    let memcached = "/usr/bin/memcached";
    if !std::path::Path::new(memcached).exists() {
        eprintln!("no {memcached}: the comparison is skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("strata-flash-shape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 1.6.18 wants the page size before the path.
    let ext = |name: &str| format!("ext_page_size=8,ext_wbuf_size=2,ext_path={}:128m", dir.join(name).display());
    let (strata, addrs) = spawn_listening(&["-t", "1", "-o", &ext("strata")], 1);
    let _strata = Killed(strata);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let reference = std::process::Command::new(memcached)
        .args(["-u", "root", "-U", "0", "-l", "127.0.0.1", "-p", &port.to_string(), "-o", &ext("memcached")])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _reference = Killed(reference);
    let connect = |addr: std::net::SocketAddr| {
        for _ in 0..100 {
            if let Ok(s) = TcpStream::connect(addr) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return Client { stream: s, pending: Vec::new() };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("could not connect to {addr}");
    };
    let mut ours = connect(addrs[0]);
    let mut theirs = connect(([127, 0, 0, 1], port).into());
    let names = |c: &mut Client, group: &str, filter: &dyn Fn(&str) -> bool| -> Vec<String> {
        c.send(format!("stats {group}\r\n").as_bytes());
        let text = String::from_utf8(c.until(b"END\r\n")).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .filter(|n| filter(n))
            .collect()
    };
    let ext_field = |n: &str| n.starts_with("ext_") || n.contains("extstore");
    assert_eq!(names(&mut ours, "settings", &ext_field), names(&mut theirs, "settings", &ext_field));
    // Strata's own lines, and the three 1.6.45 added after 1.6.18.
    let memcached_field = |n: &str| {
        ext_field(n)
            && !matches!(
                n,
                "extstore_write_errors"
                    | "extstore_write_fallbacks"
                    | "extstore_client_bytes_stored"
                    | "extstore_write_amp"
                    | "extstore_memory_pressure"
                    | "extstore_compact_resc_cold"
                    | "extstore_compact_resc_old"
            )
    };
    assert_eq!(names(&mut ours, "", &memcached_field), names(&mut theirs, "", &memcached_field));
    // Refusals first: 1.6.18 leaves 0 behind a value it could not parse.
    for command in [
        "extstore", "extstore item_size", "extstore bogus 1", "extstore max_frag x", "extstore item_size 100",
        "extstore item_age 7", "extstore low_ttl 2", "extstore recache_rate 9", "extstore compact_under 3",
        "extstore drop_under 2", "extstore max_sleep 5", "extstore max_frag 0.5", "extstore drop_unread 1",
    ] {
        let request = format!("{command}\r\n");
        assert_eq!(ours.line(request.as_bytes()), theirs.line(request.as_bytes()), "{command}");
    }
    let settings = |c: &mut Client| {
        c.send(b"stats settings\r\n");
        String::from_utf8(c.until(b"END\r\n")).unwrap().lines().filter(|l| l.contains("ext_")).map(String::from).collect::<Vec<_>>()
    };
    assert_eq!(settings(&mut ours), settings(&mut theirs), "the values the commands set");
    let _ = std::fs::remove_dir_all(&dir);
}
