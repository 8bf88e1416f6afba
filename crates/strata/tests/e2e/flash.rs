//! The flash tier on the wire (`-o ext_path`): a tiny `-m` pushes items to
//! flash, then every command that reads or changes an item runs on one,
//! alone and in pipelines and multi-gets that mix RAM and flash keys, on
//! both I/O engines. Replies must be memcached's, in request order.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common;

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
use crate::common::Reaped as Killed;

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

    /// Exactly `n` bytes.
    fn take(&mut self, n: usize) -> Vec<u8> {
        while self.pending.len() < n {
            let mut buf = [0u8; 65536];
            let got = self.stream.read(&mut buf).unwrap();
            assert!(got > 0, "closed");
            self.pending.extend_from_slice(&buf[..got]);
        }
        let rest = self.pending.split_off(n);
        std::mem::replace(&mut self.pending, rest)
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
    let _server = child;
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
    assert!(c.stat("extstore_objects_written") > 300, "items went to flash");
    // Items on flash: `me` reads one where it is (a flash read shows in
    // get_extstore) and leaves it there; one still in the write buffer is
    // counted too but brought back to RAM, so a second `me` is not.
    let on_flash = |c: &mut Client, key: &str| {
        (0..2).all(|_| {
            let before = c.stat("get_extstore");
            c.line(format!("me {key}\r\n").as_bytes());
            c.stat("get_extstore") > before
        })
    };
    let k: Vec<usize> = (0..ITEMS).filter(|&i| on_flash(&mut c, &format!("k{i}"))).take(22).collect();
    let n: Vec<usize> = (0..COUNTERS).filter(|&i| on_flash(&mut c, &format!("c{i}"))).take(3).collect();
    assert_eq!((k.len(), n.len()), (22, 3), "items and counters on flash");
    let key = |j: usize| format!("k{}", k[j]);
    let counter_key = |j: usize| format!("c{}", n[j]);
    let reads_before = c.stat("get_extstore");

    // Every command, each on an item on flash.
    c.send(format!("gets {}\r\n", key(0)).as_bytes());
    let reply = c.until(b"END\r\n");
    let head = format!("VALUE {} 0 2000 ", key(0));
    assert!(reply.starts_with(head.as_bytes()) && reply.ends_with(&[&value(k[0])[..], b"\r\nEND\r\n"].concat()), "gets");
    c.send(format!("gat 100 {}\r\n", key(1)).as_bytes());
    assert!(c.until(b"END\r\n") == [value_reply(&key(1), k[1]), b"END\r\n".to_vec()].concat(), "gat");
    assert_eq!(c.line(format!("touch {} 100\r\n", key(2)).as_bytes()), "TOUCHED\r\n");
    c.send(format!("gets {}\r\n", key(3)).as_bytes());
    let reply = String::from_utf8_lossy(&c.until(b"END\r\n")).into_owned();
    let cas: u64 = reply.lines().next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(c.line(format!("cas {} 0 0 2 {cas}\r\nok\r\n", key(3)).as_bytes()), "STORED\r\n");
    assert_eq!(c.line(format!("append {} 0 0 2\r\nxx\r\n", key(4)).as_bytes()), "STORED\r\n");
    assert_eq!(c.line(format!("prepend {} 0 0 2\r\nyy\r\n", key(5)).as_bytes()), "STORED\r\n");
    assert_eq!(c.line(format!("incr {} 5\r\n", counter_key(0)).as_bytes()), "105\r\n");
    assert_eq!(c.line(format!("decr {} 3\r\n", counter_key(1)).as_bytes()), "97\r\n");
    assert_eq!(c.line(format!("delete {}\r\n", key(6)).as_bytes()), "DELETED\r\n");
    assert_eq!(c.line(format!("add {} 0 0 1\r\na\r\n", key(7)).as_bytes()), "NOT_STORED\r\n");
    assert_eq!(c.line(format!("replace {} 0 0 1\r\nr\r\n", key(8)).as_bytes()), "STORED\r\n");
    c.send(format!("mg {} v s\r\n", key(9)).as_bytes());
    assert_eq!(c.until(b"\r\n"), b"VA 2000 s2000\r\n");
    assert!(c.until(b"\r\n") == [&value(k[9])[..], b"\r\n"].concat(), "mg value");
    assert!(c.line(format!("mg {} t T30\r\n", key(10)).as_bytes()).starts_with("HD t"), "mg with T");
    assert_eq!(c.line(format!("ms {} 2 MA\r\nzz\r\n", key(11)).as_bytes()), "HD\r\n");
    assert_eq!(c.line(format!("md {}\r\n", key(12)).as_bytes()), "HD\r\n");
    assert_eq!(c.line(format!("ma {} MD\r\n", counter_key(2)).as_bytes()), "HD\r\n");
    assert!(c.line(format!("me {}\r\n", key(13)).as_bytes()).starts_with(&format!("ME {} exp=-1 ", key(13))), "me");
    // gets and cas read k[3] twice: at least one flash read per command.
    let reads = c.stat("get_extstore") - reads_before;
    assert!(reads >= 17, "{reads} flash reads for 17 commands on flash items");

    // What those commands left.
    let get = |c: &mut Client, key: &str| {
        c.send(format!("get {key}\r\n").as_bytes());
        c.until(b"END\r\n")
    };
    assert_eq!(get(&mut c, &key(3)), format!("VALUE {} 0 2\r\nok\r\nEND\r\n", key(3)).into_bytes());
    let joined = |head: &str, middle: &[u8], tail: &str| [head.as_bytes(), middle, tail.as_bytes()].concat();
    assert!(get(&mut c, &key(4)) == joined(&format!("VALUE {} 0 2002\r\n", key(4)), &value(k[4]), "xx\r\nEND\r\n"), "append");
    assert!(get(&mut c, &key(5)) == joined(&format!("VALUE {} 0 2002\r\nyy", key(5)), &value(k[5]), "\r\nEND\r\n"), "prepend");
    assert_eq!(get(&mut c, &key(6)), b"END\r\n");
    assert_eq!(get(&mut c, &key(8)), format!("VALUE {} 0 1\r\nr\r\nEND\r\n", key(8)).into_bytes());
    assert!(get(&mut c, &key(11)) == joined(&format!("VALUE {} 0 2002\r\n", key(11)), &value(k[11]), "zz\r\nEND\r\n"), "ms MA");
    assert_eq!(get(&mut c, &key(12)), b"END\r\n");
    assert_eq!(c.line(format!("incr {} 0\r\n", counter_key(2)).as_bytes()), "99\r\n");

    // Pipelined multi-gets mixing keys on flash (low numbers) and in RAM
    // (the last ones written), then a meta get: replies in order.
    let keys = [k[14], ITEMS - 1, k[15], ITEMS - 2, k[16], k[17], ITEMS - 3, k[18]];
    let reads_before = c.stat("get_extstore");
    let line: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
    let mut pipeline = Vec::new();
    for _ in 0..3 {
        pipeline.extend_from_slice(format!("get {}\r\n", line.join(" ")).as_bytes());
    }
    pipeline.extend_from_slice(format!("mg {} v\r\nmn\r\n", key(19)).as_bytes());
    c.send(&pipeline);
    let mut expected = Vec::new();
    for _ in 0..3 {
        for &k in &keys {
            expected.extend_from_slice(&value_reply(&format!("k{k}"), k));
        }
        expected.extend_from_slice(b"END\r\n");
    }
    expected.extend_from_slice(&[&b"VA 2000\r\n"[..], &value(k[19]), b"\r\nMN\r\n"].concat());
    assert!(c.until(b"MN\r\n") == expected, "pipelined multi-gets mixing tiers");
    assert!(c.stat("get_extstore") >= reads_before + 5, "the pipeline read from flash");

    // The binary protocol: two GETKs of items on flash and a NOOP,
    // pipelined on a second connection.
    let reads_before = c.stat("get_extstore");
    let mut b = Client { stream: TcpStream::connect(addrs[0]).unwrap(), pending: Vec::new() };
    b.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = |opcode: u8, key: &[u8]| {
        let mut r = vec![0x80, opcode];
        r.extend_from_slice(&(key.len() as u16).to_be_bytes());
        r.extend_from_slice(&[0, 0, 0, 0]);
        r.extend_from_slice(&(key.len() as u32).to_be_bytes());
        r.extend_from_slice(&[0; 12]);
        r.extend_from_slice(key);
        r
    };
    let mut pipeline = request(0x0c, key(20).as_bytes());
    pipeline.extend_from_slice(&request(0x0c, key(21).as_bytes()));
    pipeline.extend_from_slice(&request(0x0a, b""));
    b.send(&pipeline);
    for j in [20, 21] {
        let response = b.take(24 + 4 + key(j).len() + 2000);
        assert_eq!((response[0], response[1], response[7]), (0x81, 0x0c, 0), "GETK status");
        assert!(response[24 + 4..] == [key(j).as_bytes(), &value(k[j])].concat(), "GETK {}", key(j));
    }
    assert_eq!(b.take(24)[1], 0x0a, "NOOP answered last");
    assert!(c.stat("get_extstore") >= reads_before + 2, "binary gets read from flash");

    // Every item written and not changed since reads back intact.
    let changed = [k[3], k[4], k[5], k[6], k[8], k[11], k[12]];
    let mut missing = 0;
    for i in (0..ITEMS).filter(|i| !changed.contains(i)) {
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
    let _strata = strata;
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
    // Strata's small store's lines are its own.
    let small = |n: &str| n.starts_with("extstore_small_") || matches!(n, "ext_small_item_max" | "ext_log_share" | "ext_set_size" | "ext_set_bloom_bits" | "ext_set_threshold" | "ext_read_ahead_max");
    let ext_field = |n: &str| (n.starts_with("ext_") || n.contains("extstore")) && !small(n);
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
                    | "extstore_index_bytes"
                    | "extstore_reads_shared"
                    | "extstore_bytes_padded"
                    | "extstore_bytes_admitted"
                    | "extstore_admit_write_amp"
                    | "extstore_compact_pages"
                    | "extstore_compact_evict_pages"
                    | "extstore_compact_expired"
                    | "extstore_compact_bytes_read"
                    | "extstore_compact_bytes_moved"
                    | "extstore_compact_behind"
                    | "extstore_reads_ahead"
                    | "extstore_reads_ahead_refused"
                    | "extstore_memory_pressure"
                    | "extstore_compact_resc_cold"
                    | "extstore_compact_resc_old"
            )
    };
    assert_eq!(names(&mut ours, "", &memcached_field), names(&mut theirs, "", &memcached_field));
    // A row of four per page (16 pages of 8 MiB).
    let all = |_: &str| true;
    let pages = names(&mut ours, "extstore", &all);
    assert_eq!(pages, names(&mut theirs, "extstore", &all));
    assert_eq!(pages.len(), 64);
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
        let text = String::from_utf8(c.until(b"END\r\n")).unwrap();
        text.lines().filter(|l| l.contains("ext_") && !small(l.split(' ').nth(1).unwrap_or(""))).map(String::from).collect::<Vec<_>>()
    };
    assert_eq!(settings(&mut ours), settings(&mut theirs), "the values the commands set");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-e` with `ext_path` through the command line: a graceful stop and a
/// `kill -9` both come back with the items on flash served again, each
/// value intact.
#[test]
fn the_flash_tier_survives_restarts_through_the_command_line() {
    let dir = std::env::temp_dir().join(format!("strata-flash-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let memory = dir.join("memory").display().to_string();
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_path={}:256m", dir.join("flash").display());
    let args = ["-t", "2", "-m", "8", "-e", memory.as_str(), "-o", ext.as_str()];
    let connect = |addr| {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client { stream, pending: Vec::new() }
    };
    let (child, addrs) = spawn_listening(&args, 1);
    let mut server = child;
    let mut c = connect(addrs[0]);
    for i in 0..ITEMS {
        let mut req = format!("set k{i} 0 0 2000 noreply\r\n").into_bytes();
        req.extend_from_slice(&value(i));
        req.extend_from_slice(b"\r\n");
        c.send(&req);
    }
    c.send(b"mn\r\n");
    c.until(b"MN\r\n");
    for stop in ["-TERM", "-9"] {
        let pid = server.0.id().to_string();
        assert!(std::process::Command::new("kill").args([stop, &pid]).status().unwrap().success());
        let _ = server.0.wait();
        let (child, addrs) = spawn_listening(&args, 1);
        server = child;
        let mut c = connect(addrs[0]);
        let mut served = 0;
        for i in 0..ITEMS {
            c.send(format!("get k{i}\r\n").as_bytes());
            let reply = c.until(b"END\r\n");
            if reply != b"END\r\n" {
                assert!(reply == [value_reply(&format!("k{i}"), i), b"END\r\n".to_vec()].concat(), "k{i} after {stop}");
                served += 1;
            }
        }
        assert!(served * 100 >= ITEMS * 99, "{served} of {ITEMS} served after {stop}");
        assert!(c.stat("get_extstore") > 100, "items came back from flash after {stop}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lru_crawler metadump` (and so `memcached-tool dump`) lists the keys on
/// flash too, as memcached lists its extstore items: every live key once,
/// a deleted one never, a replaced one once, with its current size.
#[test]
fn metadump_lists_the_keys_on_flash() {
    let dir = std::env::temp_dir().join(format!("strata-flash-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("ext_path={}:256m,ext_page_size=8,ext_wbuf_size=2", dir.join("flash").display());
    let (child, addrs) = spawn_listening(&["-t", "2", "-m", "8", "-o", &ext], 1);
    let _server = child;
    let stream = TcpStream::connect(addrs[0]).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = Client { stream, pending: Vec::new() };
    // 16 MB of values through an 8 MB cache.
    const KEYS: usize = 2 * ITEMS;
    for i in 0..KEYS {
        let mut req = format!("set key:{i} 0 0 2000 noreply\r\n").into_bytes();
        req.extend_from_slice(&value(i));
        req.extend_from_slice(b"\r\n");
        c.send(&req);
    }
    assert!(c.line(b"version\r\n").starts_with("VERSION"));
    let on_flash = c.stat("extstore_objects_used");
    assert!(on_flash > KEYS as u64 / 2, "only {on_flash} items went to flash");
    // key:0 is among the first written: on flash by now.
    assert_eq!(c.line(b"delete key:0\r\n"), "DELETED\r\n");
    assert_eq!(c.line(b"set key:1 0 0 3\r\nnew\r\n"), "STORED\r\n");

    for _ in 0..2 {
        c.send(b"lru_crawler metadump all\r\n");
        let dump = String::from_utf8(c.until(b"END\r\n")).unwrap();
        let mut seen = std::collections::HashMap::new();
        for line in dump.lines().skip(1).filter(|l| *l != "END") {
            let key = line.split(' ').next().unwrap().strip_prefix("key=").unwrap().to_string();
            let size = line.split(' ').find_map(|f| f.strip_prefix("size=")).unwrap().to_string();
            assert!(seen.insert(key.clone(), size).is_none(), "{key} listed twice");
        }
        assert!(!seen.contains_key("key%3A0"), "a deleted key is listed");
        assert_eq!(seen.len(), KEYS - 1, "every live key once");
        let small = seen["key%3A1"].parse::<usize>().unwrap();
        let large = seen["key%3A2"].parse::<usize>().unwrap();
        assert!(small < large, "key:1's size is its new value's ({small} vs {large})");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
