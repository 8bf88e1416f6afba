//! The slab view (`stats items`, `stats slabs`, `stats sizes`) against
//! Debian's memcached run side by side: the same items of known sizes go to
//! both, and the replies must have the same shape (field names, their
//! order, line format) and the same values where a segment store can know
//! them exactly (items and bytes per class, chunk geometry, per-class sets
//! and hits). Skipped, with a note, where memcached is not installed.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use strata_server::settings::SlabSettings;
use strata_server::{Server, Settings};
use strata_store::SegStore;

use crate::common::memcached;

fn strata(settings: Settings) -> (Server, SocketAddr) {
    let settings = Settings { tcp_listen: vec!["127.0.0.1:0".parse().unwrap()], threads: 2, ..settings };
    let engine = SegStore::new(settings.engine_config());
    let server = Server::start(settings, Box::new(engine)).unwrap();
    let addr = server.tcp_addrs[0];
    (server, addr)
}

struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn to(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { reader: BufReader::new(stream.try_clone().unwrap()), stream }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line
    }

    fn send(&mut self, req: &[u8]) {
        self.stream.write_all(req).unwrap();
    }

    /// `stats <group>` as (name, value) lines; every line must be `STAT name value`.
    fn stats(&mut self, group: &str) -> Vec<(String, String)> {
        self.send(format!("stats {group}\r\n").as_bytes());
        let mut out = Vec::new();
        loop {
            let line = self.line();
            if line == "END\r\n" {
                return out;
            }
            assert!(line.ends_with("\r\n"), "{line:?}");
            let parts: Vec<&str> = line.trim_end().split(' ').collect();
            assert_eq!((parts.len(), parts[0]), (3, "STAT"), "{line:?}");
            out.push((parts[1].to_string(), parts[2].to_string()));
        }
    }

    /// The same known items on any server: sizes chosen to land in
    /// several classes, read and changed a known number of times.
    fn load(&mut self) {
        let items: &[(&str, usize, u32)] =
            &[("a1", 5, 0), ("a2", 5, 0), ("a3", 5, 7), ("mid", 500, 0), ("big", 20_000, 3), ("n", 2, 0)];
        for &(key, len, flags) in items {
            self.send(format!("set {key} {flags} 0 {len}\r\n{}\r\n", "x".repeat(len)).as_bytes());
            assert_eq!(self.line(), "STORED\r\n");
        }
        self.send(b"set n 0 0 2\r\n10\r\n");
        assert_eq!(self.line(), "STORED\r\n");
        for req in ["get a1\r\n", "get big\r\n", "get nope\r\n"] {
            self.send(req.as_bytes());
            while self.line() != "END\r\n" {}
        }
        for (req, reply) in [
            ("touch a2 0\r\n", "TOUCHED\r\n"),
            ("incr n 5\r\n", "15\r\n"),
            ("decr n 1\r\n", "14\r\n"),
            ("delete a3\r\n", "DELETED\r\n"),
            ("cas mid 0 0 3 1\r\nabc\r\n", "EXISTS\r\n"),
        ] {
            self.send(req.as_bytes());
            assert_eq!(self.line(), reply, "{req}");
        }
    }
}

fn names(stats: &[(String, String)]) -> Vec<&str> {
    stats.iter().map(|(n, _)| n.as_str()).collect()
}

fn value<'a>(stats: &'a [(String, String)], name: &str) -> &'a str {
    stats.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn stats_items_and_slabs_match_memcacheds_shape_and_counts() {
    let Some(reference) = memcached(&[]) else {
        eprintln!("SKIPPED: memcached is not installed");
        return;
    };
    let (_server, addr) = strata(Settings::default());
    let (mut m, mut s) = (Client::to(reference.1), Client::to(addr));
    m.load();
    s.load();
    let (mi, si) = (m.stats("items"), s.stats("items"));
    assert_eq!(si.len(), 28 * 3, "three classes of 28 fields: {si:?}");
    assert_eq!(names(&mi), names(&si), "stats items: fields and order");
    for (name, _) in &mi {
        if name.ends_with(":number") || name.ends_with(":mem_requested") || name.ends_with(":evicted") {
            assert_eq!(value(&mi, name), value(&si, name), "{name}");
        }
    }
    let (ms, ss) = (m.stats("slabs"), s.stats("slabs"));
    assert_eq!(ss.len(), 15 * 3 + 2, "{ss:?}");
    assert_eq!(names(&ms), names(&ss), "stats slabs: fields and order");
    for (name, _) in &ms {
        let exact = [
            "chunk_size", "chunks_per_page", "total_pages", "total_chunks", "used_chunks", "free_chunks", "get_hits",
            "cmd_set", "delete_hits", "incr_hits", "decr_hits", "cas_hits", "cas_badval", "touch_hits",
        ];
        if exact.iter().any(|f| name.ends_with(&format!(":{f}"))) || name == "active_slabs" {
            assert_eq!(value(&ms, name), value(&ss, name), "{name}");
        }
    }
}

#[test]
fn stats_sizes_matches_memcached_with_track_sizes_and_without() {
    let Some(reference) = memcached(&["-o", "track_sizes"]) else {
        eprintln!("SKIPPED: memcached is not installed");
        return;
    };
    let (_server, addr) = strata(Settings { track_sizes: true, ..Settings::default() });
    let (mut m, mut s) = (Client::to(reference.1), Client::to(addr));
    m.load();
    s.load();
    let sizes = s.stats("sizes");
    assert_eq!(m.stats("sizes"), sizes, "the same histogram, line for line");
    assert!(sizes.len() >= 4, "{sizes:?}");

    let Some(plain) = memcached(&[]) else { return };
    let (_server, addr) = strata(Settings::default());
    assert_eq!(Client::to(plain.1).stats("sizes"), Client::to(addr).stats("sizes"));
    assert_eq!(Client::to(addr).stats("sizes"), vec![("sizes_status".to_string(), "disabled".to_string())]);
}

#[test]
fn stats_sizes_enable_is_unknown_as_in_1_6_45() {
    let (_server, addr) = strata(Settings::default());
    let mut s = Client::to(addr);
    for group in ["sizes_enable", "sizes_disable"] {
        s.send(format!("stats {group}\r\n").as_bytes());
        assert_eq!(s.line(), "ERROR\r\n");
    }
}

#[test]
fn growth_factor_and_min_size_shape_the_classes_as_in_memcached() {
    let Some(reference) = memcached(&["-f", "2", "-n", "100"]) else {
        eprintln!("SKIPPED: memcached is not installed");
        return;
    };
    let slabs = SlabSettings { growth_factor: 2.0, min_size_bytes: 100, ..SlabSettings::default() };
    let (_server, addr) = strata(Settings { slabs, ..Settings::default() });
    let (mut m, mut s) = (Client::to(reference.1), Client::to(addr));
    m.load();
    s.load();
    let (ms, ss) = (m.stats("slabs"), s.stats("slabs"));
    assert_eq!(names(&ms), names(&ss));
    for (name, v) in &ms {
        if name.ends_with(":chunk_size") || name.ends_with(":used_chunks") {
            assert_eq!(v, value(&ss, name), "{name}");
        }
    }
}

#[test]
fn per_class_counters_follow_deletes_and_reset() {
    let (_server, addr) = strata(Settings::default());
    let mut s = Client::to(addr);
    s.load();
    // "mid" (500 bytes of value) is class 9 with memcached's defaults.
    assert_eq!(value(&s.stats("items"), "items:9:number"), "1");
    s.send(b"delete mid\r\n");
    assert_eq!(s.line(), "DELETED\r\n");
    let items = s.stats("items");
    assert!(!names(&items).iter().any(|n| n.starts_with("items:9:")), "a class with no items is omitted");
    assert_eq!(value(&s.stats("slabs"), "1:delete_hits"), "1");
    s.send(b"stats reset\r\n");
    assert_eq!(s.line(), "RESET\r\n");
    let slabs = s.stats("slabs");
    assert_eq!(value(&slabs, "1:get_hits"), "0");
    assert_eq!(value(&slabs, "1:used_chunks"), "3", "reset keeps the population");
}

/// `stats conns` with its ids replaced by their order of appearance, and
/// the addresses and idle seconds (which differ between two servers) dropped.
fn conns_shape(client: &mut Client) -> Vec<(String, String)> {
    let mut ids: Vec<String> = Vec::new();
    client
        .stats("conns")
        .into_iter()
        .map(|(name, value)| {
            let (id, field) = name.split_once(':').expect("id:field");
            if !ids.iter().any(|i| i == id) {
                ids.push(id.to_string());
            }
            let n = ids.iter().position(|i| i == id).unwrap();
            let value = if field == "state" || field == "UDP" { value } else { String::new() };
            (format!("{n}:{field}"), value)
        })
        .collect()
}

#[test]
fn stats_conns_lists_listeners_and_clients_as_memcached_does() {
    let Some(reference) = memcached(&["-t", "2"]) else {
        eprintln!("SKIPPED: memcached is not installed");
        return;
    };
    let (_server, addr) = strata(Settings::default());
    let mut shapes = Vec::new();
    for addr in [reference.1, addr] {
        // One at a time, so both servers number them in this order.
        let mut asking = Client::to(addr);
        asking.send(b"version\r\n");
        assert!(asking.line().starts_with("VERSION "));
        let mut idle = Client::to(addr);
        idle.send(b"version\r\n");
        assert!(idle.line().starts_with("VERSION "));
        shapes.push(conns_shape(&mut asking));
    }
    // memcached numbers a connection by its file descriptor, which a
    // recently closed one may hand out out of order, and shows the idle
    // connection in whatever state its worker thread has reached
    // (`conn_read`, or still `conn_mwrite`): compare the fields in order;
    // the asking connection is `conn_parse_cmd` on both.
    let names = |shape: &[(String, String)]| shape.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&shapes[0]), names(&shapes[1]));
    assert!(shapes[0].iter().any(|(n, v)| n.ends_with(":state") && v == "conn_parse_cmd"), "{:?}", shapes[0]);
    assert_eq!(shapes[1][1], ("0:state".to_string(), "conn_listening".to_string()), "{:?}", shapes[1]);
    let states: Vec<&str> = shapes[1].iter().filter(|(n, _)| n.ends_with(":state")).map(|(_, v)| v.as_str()).collect();
    assert_eq!(states, ["conn_listening", "conn_parse_cmd", "conn_read"]);
}

#[test]
fn stats_conns_lists_each_workers_udp_socket() {
    let settings = Settings { udp_enabled: true, udp_port: 0, threads: 2, ..Settings::default() };
    let (server, addr) = strata(settings);
    let stats = Client::to(addr).stats("conns");
    let udp = stats.iter().filter(|(n, v)| n.ends_with(":UDP") && v == "UDP").count();
    assert_eq!(udp, 2 * server.udp_addrs.len().max(1), "{stats:?}");
    assert!(stats.iter().any(|(n, v)| n.ends_with(":addr") && v.starts_with("udp:127.0.0.1:")), "{stats:?}");
}

/// Debian's `memcached-tool HOST:PORT display` reads `stats items` and
/// `stats slabs`: it must list each class with its item count.
#[test]
fn memcached_tool_display_lists_the_classes() {
    let tool = std::path::Path::new("/usr/share/memcached/scripts/memcached-tool");
    if !tool.exists() {
        eprintln!("SKIPPED: memcached-tool is not installed");
        return;
    }
    let (_server, addr) = strata(Settings::default());
    Client::to(addr).load();
    let out = Command::new("perl").arg(tool).arg(addr.to_string()).arg("display").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    // class, chunk size, max age, pages, count, ...
    let count = |class: &str| rows.iter().find(|r| r[0] == class).map(|r| r[4].to_string());
    assert_eq!(count("1").as_deref(), Some("3"), "{text}");
    assert_eq!(count("9").as_deref(), Some("1"), "{text}");
    assert_eq!(count("25").as_deref(), Some("1"), "{text}");
    assert_eq!(rows.len(), 3, "{text}");
}
