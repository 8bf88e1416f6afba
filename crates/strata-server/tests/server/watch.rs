//! `watch` on both I/O engines: each stream's line format as memcached
//! 1.6.45 prints it (observed on the wire against 1.6.45 built from
//! source; Debian's 1.6.18 has no `deletions` stream and prints `ts=`
//! differently, so the format is written out here rather than compared
//! with the differential reference), bad input, `-W`, and a watcher that
//! never reads while a load runs.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};
use strata_store::{EngineConfig, SegStore};

use crate::common;

use common::{connect, line};

fn start(io_engine: IoEngine, watch_enabled: bool) -> (Server, SocketAddr) {
    common::start(Settings { threads: 2, io_engine, watch_enabled, ..Settings::default() })
}

/// Send `cmd` and read one reply line.
fn ask(w: &mut TcpStream, r: &mut BufReader<TcpStream>, cmd: &str) -> String {
    w.write_all(cmd.as_bytes()).unwrap();
    line(r)
}

/// A log line split into its gid and what follows `ts=<s>.<us> gid=<n> `.
fn parse(l: &str) -> (u64, String) {
    let l = l.strip_suffix('\n').unwrap_or_else(|| panic!("no newline: {l:?}"));
    assert!(!l.ends_with('\r'), "memcached ends log lines with a bare newline: {l:?}");
    let mut words = l.splitn(3, ' ');
    let ts = words.next().unwrap().strip_prefix("ts=").unwrap_or_else(|| panic!("{l}"));
    let (sec, usec) = ts.split_once('.').unwrap();
    assert!(sec.parse::<u64>().unwrap() > 1_600_000_000, "{l}");
    assert!(usec.parse::<u32>().unwrap() < 1_000_000 && !usec.starts_with('0') || usec == "0", "unpadded usec: {l}");
    let gid = words.next().unwrap().strip_prefix("gid=").unwrap().parse().unwrap();
    (gid, words.next().unwrap().to_string())
}

fn stat(addr: SocketAddr, name: &str) -> u64 {
    let (mut w, mut r) = connect(addr);
    w.write_all(b"stats\r\n").unwrap();
    let mut found = None;
    loop {
        let l = line(&mut r);
        if l == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no stat {name}"));
        }
        let mut f = l.split_whitespace().skip(1);
        if f.next() == Some(name) {
            found = f.next().and_then(|v| v.parse().ok());
        }
    }
}

#[test]
fn watch_deletions_prints_memcached_145_lines_on_both_engines() {
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut ww, mut wr) = connect(addr);
        assert_eq!(ask(&mut ww, &mut wr, "watch deletions\r\n"), "OK\r\n");
        let (mut c, mut cr) = connect(addr);
        for (cmd, reply) in [
            ("set foo 5 0 3\r\nbar\r\n", "STORED\r\n"),
            ("delete foo\r\n", "DELETED\r\n"),
            ("delete nope\r\n", "NOT_FOUND\r\n"),
            ("set a%b 0 0 10\r\n0123456789\r\n", "STORED\r\n"),
            ("md a%b\r\n", "HD\r\n"),
            // Marked stale only: not a deletion.
            ("ms s 2\r\nhi\r\n", "HD\r\n"),
            ("md s I\r\n", "HD\r\n"),
            // Emptied: logged with the empty item's size.
            ("ms k 2 F7\r\nhi\r\n", "HD\r\n"),
            ("md k x\r\n", "HD\r\n"),
            ("set big 0 0 3000\r\n", "STORED\r\n"),
        ] {
            let cmd = if cmd.starts_with("set big") { format!("{cmd}{}\r\n", "v".repeat(3000)) } else { cmd.to_string() };
            assert_eq!(ask(&mut c, &mut cr, &cmd), reply, "{engine:?} {cmd}");
        }
        assert_eq!(ask(&mut c, &mut cr, "delete big\r\n"), "DELETED\r\n");
        let want = [
            "type=deleted key=foo cmd=delete clsid=1 size=3",
            "type=deleted key=a%25b cmd=md clsid=1 size=10",
            "type=deleted key=k cmd=md clsid=1 size=0",
            "type=deleted key=big cmd=delete clsid=17 size=3000",
        ];
        let mut last_gid = 0;
        for want in want {
            let (gid, rest) = parse(&line(&mut wr));
            assert!(gid > last_gid, "{engine:?}: gids increase");
            last_gid = gid;
            assert_eq!(rest, want, "{engine:?}");
        }
        assert_eq!(stat(addr, "log_watchers"), 1);
        assert_eq!(stat(addr, "log_watcher_sent"), 4);
        assert_eq!(stat(addr, "log_worker_written"), 4);
        drop((ww, wr));
        let deadline = Instant::now() + Duration::from_secs(5);
        while stat(addr, "log_watchers") != 0 {
            assert!(Instant::now() < deadline, "{engine:?}: watcher not detached");
            std::thread::sleep(Duration::from_millis(10));
        }
        // No watcher: nothing is logged.
        assert_eq!(ask(&mut c, &mut cr, "set foo 0 0 1\r\nx\r\n"), "STORED\r\n");
        assert_eq!(ask(&mut c, &mut cr, "delete foo\r\n"), "DELETED\r\n");
        assert_eq!(stat(addr, "log_worker_written"), 4);
    }
}

#[test]
fn watch_refusals_as_memcached_145() {
    let (_server, addr) = start(IoEngine::Epoll, true);
    let (mut w, mut r) = connect(addr);
    assert_eq!(ask(&mut w, &mut r, "watch bogus\r\n"), "ERROR\r\n");
    assert_eq!(ask(&mut w, &mut r, "watch fetchers deletionsX\r\n"), "ERROR\r\n");
    // Replies still held for the connection: memcached refuses.
    assert_eq!(ask(&mut w, &mut r, "get a\r\nwatch\r\n"), "END\r\n");
    assert_eq!(line(&mut r), "ERROR cannot pipeline other commands before watch\r\n");
    // Abbreviations are memcached's too: `d` is deletions.
    assert_eq!(ask(&mut w, &mut r, "watch d\r\n"), "OK\r\n");

    let (_server, addr) = start(IoEngine::Epoll, false);
    let (mut w, mut r) = connect(addr);
    assert_eq!(ask(&mut w, &mut r, "watch\r\n"), "CLIENT_ERROR watch commands not allowed\r\n");
    // -W is checked first.
    assert_eq!(ask(&mut w, &mut r, "watch bogus\r\n"), "CLIENT_ERROR watch commands not allowed\r\n");
    assert_eq!(ask(&mut w, &mut r, "version\r\n").split_whitespace().next(), Some("VERSION"));
}

#[test]
fn a_watcher_that_never_reads_blocks_nothing_and_counts_skips() {
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut c, mut cr) = connect(addr);
        // 200k deletions (~15 MB of log lines).
        let mut load = || {
            let started = Instant::now();
            for round in 0..20 {
                let mut batch = Vec::new();
                for i in 0..10_000 {
                    batch.extend_from_slice(format!("set k{round}_{i} 0 0 1 noreply\r\nv\r\ndelete k{round}_{i} noreply\r\n").as_bytes());
                }
                batch.extend_from_slice(b"mn\r\n");
                c.write_all(&batch).unwrap();
                assert_eq!(line(&mut cr), "MN\r\n", "{engine:?}");
            }
            started.elapsed()
        };
        let unwatched = load();
        let (mut ww, mut wr) = connect(addr);
        assert_eq!(ask(&mut ww, &mut wr, "watch deletions\r\n"), "OK\r\n");
        // The same load while the watcher reads nothing: not held up by it
        // (a generous bound: the machine is shared).
        let watched = load();
        assert!(watched < unwatched * 4 + Duration::from_secs(1), "{engine:?}: {watched:?} watched, {unwatched:?} not");
        let skipped = stat(addr, "log_watcher_skipped") + stat(addr, "log_worker_dropped");
        assert!(stat(addr, "log_watcher_skipped") > 0, "{engine:?}");
        assert!(stat(addr, "log_watcher_sent") + skipped >= 1, "{engine:?}");
        // Now read: the lines that fitted, then, once a new line fits,
        // memcached's `skipped=N`.
        ww.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut sink = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut saw_skipped = false;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !saw_skipped && Instant::now() < deadline {
            match wr.read(&mut buf) {
                Ok(0) => panic!("{engine:?}: watcher closed"),
                Ok(n) => sink.extend_from_slice(&buf[..n]),
                Err(_) => {
                    assert_eq!(ask(&mut c, &mut cr, "set again 0 0 1\r\nv\r\n"), "STORED\r\n");
                    assert_eq!(ask(&mut c, &mut cr, "delete again\r\n"), "DELETED\r\n");
                }
            }
            saw_skipped = sink.split(|&b| b == b'\n').any(|l| l.starts_with(b"skipped=") && l[8..].iter().all(u8::is_ascii_digit));
        }
        assert!(saw_skipped, "{engine:?}: no skipped= line");
    }
}

#[test]
fn watch_fetchers_and_mutations_print_memcached_145_lines_on_both_engines() {
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut ww, mut wr) = connect(addr);
        assert_eq!(ask(&mut ww, &mut wr, "watch fetchers mutations\r\n"), "OK\r\n");
        let (mut c, mut cr) = connect(addr);
        let mut sent = 0;
        for cmd in [
            "set foo 5 100 3\r\nbar\r\n",
            "get foo\r\n",
            "get nope\r\n",
            "add foo 0 0 1\r\nx\r\n",
            "append foo 0 0 1\r\nx\r\n",
            "prepend nope 0 0 1\r\nx\r\n",
            "cas foo 0 0 1 999\r\nx\r\n",
            "replace nope 0 0 1\r\nx\r\n",
            "mg foo v\r\n",
            "ms m 2 T50\r\nhi\r\n",
            "ms m 2 MA\r\nhi\r\n",
            "touch foo 10\r\n",
            "set a%b 0 0 1\r\n5\r\n",
            "incr a%b 1\r\n",
            "cas nope 0 0 1 5\r\nx\r\n",
            "delete foo\r\n",
        ] {
            c.write_all(cmd.as_bytes()).unwrap();
            let first = line(&mut cr);
            if first.starts_with("VALUE ") {
                line(&mut cr);
                line(&mut cr);
            } else if first.starts_with("VA ") {
                line(&mut cr);
            }
            sent += 1;
        }
        assert_eq!(sent, 16);
        // cfd is the connection's `stats conns` id here (memcached: its fd).
        let cfd = {
            let (_, rest) = parse(&line(&mut wr));
            let cfd = rest.split_whitespace().find_map(|w| w.strip_prefix("cfd=")).unwrap().to_string();
            assert_eq!(rest, format!("type=item_get key=foo status=not_found clsid=0 cfd={cfd} size=0"), "{engine:?}");
            cfd
        };
        let want = [
            "type=item_store key=foo status=stored cmd=set ttl=100 clsid=1 cfd=C size=3",
            "type=item_get key=foo status=found clsid=1 cfd=C size=3",
            "type=item_get key=nope status=not_found clsid=0 cfd=C size=0",
            "type=item_get key=foo status=found clsid=1 cfd=C size=3",
            "type=item_store key=foo status=not_stored cmd=add ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=foo status=found clsid=1 cfd=C size=3",
            "type=item_store key=foo status=stored cmd=append ttl=100 clsid=1 cfd=C size=4",
            "type=item_get key=nope status=not_found clsid=0 cfd=C size=0",
            "type=item_store key=nope status=not_stored cmd=prepend ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=foo status=found clsid=1 cfd=C size=4",
            "type=item_store key=foo status=exists cmd=cas ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=nope status=not_found clsid=0 cfd=C size=0",
            "type=item_store key=nope status=not_stored cmd=replace ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=foo status=found clsid=1 cfd=C size=4",
            "type=item_get key=m status=not_found clsid=0 cfd=C size=0",
            "type=item_store key=m status=stored cmd=set ttl=50 clsid=1 cfd=C size=2",
            "type=item_get key=m status=found clsid=1 cfd=C size=2",
            "type=item_store key=m status=stored cmd=append ttl=50 clsid=1 cfd=C size=4",
            "type=item_get key=foo status=found clsid=1 cfd=C size=4",
            "type=item_get key=a%25b status=not_found clsid=0 cfd=C size=0",
            "type=item_store key=a%25b status=stored cmd=set ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=a%25b status=found clsid=1 cfd=C size=1",
            "type=item_get key=nope status=not_found clsid=0 cfd=C size=0",
            "type=item_store key=nope status=not_found cmd=cas ttl=0 clsid=1 cfd=C size=1",
            "type=item_get key=foo status=found clsid=1 cfd=C size=4",
        ];
        for want in want {
            let (_, rest) = parse(&line(&mut wr));
            assert_eq!(rest, want.replace("cfd=C", &format!("cfd={cfd}")), "{engine:?}");
        }
    }
}

#[test]
fn watch_connevents_prints_memcached_145_lines_on_both_engines() {
    for engine in [IoEngine::Epoll, IoEngine::Uring] {
        let (_server, addr) = start(engine, true);
        let (mut ww, mut wr) = connect(addr);
        assert_eq!(ask(&mut ww, &mut wr, "watch connevents\r\n"), "OK\r\n");
        let (mut c, mut cr) = connect(addr);
        let rport = c.local_addr().unwrap().port();
        assert_eq!(ask(&mut c, &mut cr, "get a\r\n"), "END\r\n");
        drop((c, cr));
        let (_, new) = parse(&line(&mut wr));
        let cfd = new.rsplit_once("cfd=").unwrap().1.to_string();
        assert_eq!(new, format!("type=conn_new rip=127.0.0.1 rport={rport} transport=tcp cfd={cfd}"), "{engine:?}");
        let (_, closed) = parse(&line(&mut wr));
        assert_eq!(closed, format!("type=conn_close rip=127.0.0.1 rport={rport} transport=tcp reason=normal cfd={cfd}"), "{engine:?}");
        // Closed for a protocol error (an HTTP request line).
        let (mut c, mut cr) = connect(addr);
        let rport = c.local_addr().unwrap().port();
        c.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        assert_eq!(cr.read(&mut [0u8; 16]).unwrap(), 0, "{engine:?}: closed without a reply");
        let (_, new) = parse(&line(&mut wr));
        let cfd = new.rsplit_once("cfd=").unwrap().1.to_string();
        assert_eq!(new, format!("type=conn_new rip=127.0.0.1 rport={rport} transport=tcp cfd={cfd}"), "{engine:?}");
        let (_, closed) = parse(&line(&mut wr));
        assert_eq!(closed, format!("type=conn_close rip=127.0.0.1 rport={rport} transport=tcp reason=error cfd={cfd}"), "{engine:?}");
    }
}

/// A binary request header and body.
fn binary(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    p.extend_from_slice(&body.to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

#[test]
fn binary_gets_and_sets_are_watched_as_in_memcached_145() {
    let (_server, addr) = start(IoEngine::Epoll, true);
    let (mut ww, mut wr) = connect(addr);
    assert_eq!(ask(&mut ww, &mut wr, "watch fetchers mutations\r\n"), "OK\r\n");
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reply = [0u8; 24];
    for (packet, reply_len) in [
        (binary(0x01, b"bk", &[0, 0, 0, 3, 0, 0, 0, 0], b"val"), 24),
        (binary(0x00, b"bk", &[], &[]), 24 + 4 + 3),
        (binary(0x00, b"bnope", &[], &[]), 24 + 9),
    ] {
        c.write_all(&packet).unwrap();
        let mut got = vec![0u8; reply_len];
        c.read_exact(&mut got).unwrap();
        reply.copy_from_slice(&got[..24]);
    }
    let got: Vec<String> = (0..4).map(|_| parse(&line(&mut wr)).1).collect();
    let cfd = got[0].rsplit_once("cfd=").unwrap().1.split(' ').next().unwrap().to_string();
    let want = [
        "type=item_get key=bk status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=bk status=stored cmd=set ttl=0 clsid=1 cfd=C size=3",
        "type=item_get key=bk status=found clsid=1 cfd=C size=3",
        "type=item_get key=bnope status=not_found clsid=0 cfd=C size=0",
    ];
    for (got, want) in got.iter().zip(want) {
        assert_eq!(got, &want.replace("cfd=C", &format!("cfd={cfd}")));
    }
}

#[test]
fn watch_evictions_prints_memcached_145_lines() {
    let settings = Settings { tcp_listen: vec!["127.0.0.1:0".parse().unwrap()], threads: 2, ..Settings::default() };
    let engine = SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() });
    let server = Server::start(settings, Box::new(engine)).unwrap();
    let addr = server.tcp_addrs[0];
    let (mut ww, mut wr) = connect(addr);
    assert_eq!(ask(&mut ww, &mut wr, "watch evictions\r\n"), "OK\r\n");
    let (mut c, mut cr) = connect(addr);
    let value = "x".repeat(1000);
    let mut batch = String::new();
    for i in 0..20_000 {
        batch += &format!("set ev{i} 0 {} 1000 noreply\r\n{value}\r\n", if i % 2 == 1 { 0 } else { 3600 });
    }
    batch += "mn\r\n";
    c.write_all(batch.as_bytes()).unwrap();
    assert_eq!(line(&mut cr), "MN\r\n");
    let (mut no_ttl, mut ttl) = (false, false);
    for _ in 0..200 {
        let (_, rest) = parse(&line(&mut wr));
        let words: Vec<&str> = rest.split(' ').collect();
        assert_eq!(words.len(), 7, "{rest}");
        let n: u64 = words[1].strip_prefix("key=ev").unwrap().parse().unwrap();
        assert_eq!(words[0], "type=eviction");
        assert_eq!(words[2], "fetch=no");
        if n % 2 == 1 {
            assert_eq!(words[3], "ttl=-1", "{rest}");
            no_ttl = true;
        } else {
            let left: i64 = words[3].strip_prefix("ttl=").unwrap().parse().unwrap();
            assert!((3590..=3600).contains(&left), "{rest}");
            ttl = true;
        }
        let la: i64 = words[4].strip_prefix("la=").unwrap().parse().unwrap();
        assert!((0..10).contains(&la), "{rest}");
        assert_eq!(&words[5..], ["clsid=12", "size=1000"], "{rest}");
    }
    assert!(no_ttl && ttl);
}

/// memcached's t/watcher.t: once memory is full, one more store logs an
/// eviction. Strata pays for each store as it goes (seg/shard/evict.rs), so
/// every single store into a full cache evicts, not one in a segment's worth.
#[test]
fn every_store_into_a_full_cache_evicts() {
    let settings = Settings { tcp_listen: vec!["127.0.0.1:0".parse().unwrap()], threads: 2, ..Settings::default() };
    // 32 segments of 64 KiB over 4 shards, plus 16 KiB for the index and
    // the ghost, which count in -m (seg/shard/charge.rs): at 2 MiB flat
    // they take one segment's room, and with 31 a shard can be left with
    // no sealed segment of its own; a store there takes a buffer another
    // shard's eviction pooled and evicts nothing itself.
    let engine = SegStore::new(EngineConfig { memory_limit_bytes: (2 << 20) + (16 << 10), ..EngineConfig::default() });
    let server = Server::start(settings, Box::new(engine)).unwrap();
    let addr = server.tcp_addrs[0];
    let (mut c, mut cr) = connect(addr);
    let value = "v".repeat(3000);
    let mut batch = String::new();
    for i in 0..2000 {
        batch += &format!("set fill{i} 0 0 3000 noreply\r\n{value}\r\n");
    }
    c.write_all(format!("{batch}mn\r\n").as_bytes()).unwrap();
    assert_eq!(line(&mut cr), "MN\r\n");
    assert!(stat(addr, "evictions") > 0, "the fill did not fill memory");
    let (mut ww, mut wr) = connect(addr);
    assert_eq!(ask(&mut ww, &mut wr, "watch evictions\r\n"), "OK\r\n");
    wr.get_ref().set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..50 {
        let before = stat(addr, "evictions");
        assert_eq!(ask(&mut c, &mut cr, &format!("set more{i} 0 0 3000\r\n{value}\r\n")), "STORED\r\n");
        assert!(stat(addr, "evictions") > before, "store {i} into a full cache evicted nothing");
        let (_, rest) = parse(&line(&mut wr));
        assert!(rest.starts_with("type=eviction key=fill"), "{rest}");
    }
}
