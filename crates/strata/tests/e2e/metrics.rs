//! `-o metrics_listen`: Prometheus `/metrics` on the wire. The body is parsed
//! by the `prometheus_client` Python package's text-format parser (the
//! reference parser scripts/test installs), and its values are checked
//! against what `stats`, `stats settings`, `stats items` and `stats slabs`
//! say over the memcached port. Bad requests, a slow client, an address in
//! use and the default (no listener) are checked too.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// A strata process, killed when dropped.
use crate::common::Reaped as Killed;

/// Strata with `-p -1 -v -U 0` plus `args`, metrics on an ephemeral port:
/// its memcached and metrics addresses, read from its log.
fn spawn(args: &[&str]) -> (Killed, SocketAddr, Option<SocketAddr>) {
    let mut child = Command::new(BIN)
        .args(["-p", "-1", "-v", "-U", "0", "-t", "2"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start strata");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let wants_metrics = args.iter().any(|a| a.contains("metrics_listen"));
    let (mut addr, mut metrics) = (None, None);
    while addr.is_none() || (wants_metrics && metrics.is_none()) {
        let line = lines.next().expect("strata exited before listening").unwrap();
        if let Some(a) = line.strip_prefix("strata: listening on ") {
            addr = Some(a.parse().unwrap());
        }
        if let Some(a) = line.strip_prefix("strata: metrics on http://") {
            metrics = Some(a.trim_end_matches("/metrics").parse().unwrap());
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (Killed(child), addr.unwrap(), metrics)
}

/// One HTTP exchange: the raw request bytes, the raw reply.
fn http(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8(reply).unwrap();
    let code = reply.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, reply)
}

fn scrape(addr: SocketAddr) -> String {
    let (code, reply) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: strata\r\n\r\n");
    assert_eq!(code, 200, "{reply}");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
    body.to_string()
}

/// A sample as the parser reads it: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: HashMap<String, String>,
    value: f64,
}

/// The body through prometheus_client's `text_string_to_metric_families`:
/// family name -> (type, samples).
fn parse(body: &str) -> HashMap<String, (String, Vec<Sample>)> {
    const SCRIPT: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    print("F\t%s\t%s" % (f.name, f.type))
    for s in f.samples:
        labels = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
        print("S\t%s\t%s\t%r" % (s.name, labels, s.value))
"#;
    let mut py = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/test installs prometheus_client)");
    py.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(out.status.success(), "the Prometheus parser refused the body: {}", String::from_utf8_lossy(&out.stderr));
    let mut families: HashMap<String, (String, Vec<Sample>)> = HashMap::new();
    let mut current = String::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "F" => {
                current = f[1].to_string();
                families.insert(current.clone(), (f[2].to_string(), Vec::new()));
            }
            _ => {
                let labels = f[2]
                    .split(',')
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
                    .collect();
                let sample = Sample { name: f[1].to_string(), labels, value: f[3].parse().unwrap() };
                families.get_mut(&current).unwrap().1.push(sample);
            }
        }
    }
    families
}

/// `stats <group>` over a connection to the memcached port.
fn stats_on(r: &mut BufReader<TcpStream>, group: &str) -> HashMap<String, String> {
    r.get_mut().write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
    let mut map = HashMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" || line.is_empty() {
            return map;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let (_, k, v) = (parts.next(), parts.next().unwrap(), parts.next().unwrap_or(""));
        map.insert(k.to_string(), v.to_string());
    }
}

fn stats_conn(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(s)
}

/// `stats <group>` on a connection of its own.
fn stats(addr: SocketAddr, group: &str) -> HashMap<String, String> {
    stats_on(&mut stats_conn(addr), group)
}

/// Some traffic of every command family the exporter breaks down.
fn traffic(addr: SocketAddr) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = Vec::new();
    for i in 0..40 {
        req.extend_from_slice(format!("set k{i} 0 0 5\r\nhello\r\n").as_bytes());
    }
    req.extend_from_slice(format!("set big 0 0 3000\r\n{}\r\n", "x".repeat(3000)).as_bytes());
    req.extend_from_slice(b"set n 0 0 1\r\n5\r\nget k1 k2 nope\r\ndelete k3\r\ndelete nope\r\nincr n 2\r\ndecr nope 1\r\n");
    req.extend_from_slice(b"touch k4 100\r\ntouch nope 1\r\ncas k5 0 0 1 1\r\nx\r\ncas nope 0 0 1 1\r\nx\r\n");
    req.extend_from_slice(b"gets k6\r\nquit\r\n");
    s.write_all(&req).unwrap();
    let mut sink = Vec::new();
    s.read_to_end(&mut sink).unwrap();
}

/// A family by its metric name (the parser names a counter family without
/// its `_total`).
fn family<'a>(families: &'a HashMap<String, (String, Vec<Sample>)>, name: &str) -> &'a (String, Vec<Sample>) {
    let bare = name.strip_suffix("_total").unwrap_or(name);
    families.get(name).or_else(|| families.get(bare)).unwrap_or_else(|| panic!("no family {name}"))
}

fn value(families: &HashMap<String, (String, Vec<Sample>)>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, samples) = family(families, name);
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| !s.name.ends_with("_created"))
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0].value
}

fn num(map: &HashMap<String, String>, key: &str) -> f64 {
    map.get(key).unwrap_or_else(|| panic!("no stat {key}")).parse().unwrap()
}

#[test]
fn scrape_matches_stats_and_parses() {
    let (_server, addr, metrics) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    let metrics = metrics.unwrap();
    traffic(addr);
    // Opened before the scrape, so the connection counts agree.
    let mut c = stats_conn(addr);
    stats_on(&mut c, "settings");
    let body = scrape(metrics);
    let s = stats_on(&mut c, "");
    let settings = stats_on(&mut c, "settings");
    let items = stats_on(&mut c, "items");
    let slabs = stats_on(&mut c, "slabs");
    let f = parse(&body);

    // Every family comes once, typed, and is the exporter's or Strata's.
    assert!(f.keys().all(|n| n.starts_with("memcached_") || n.starts_with("strata_")), "{:?}", f.keys());
    assert_eq!(body.matches("# TYPE ").count(), f.len());
    assert_eq!(family(&f, "memcached_commands_total").0, "counter");
    assert_eq!(family(&f, "memcached_current_items").0, "gauge");
    assert_eq!(value(&f, "memcached_up", &[]), 1.0);
    assert_eq!(value(&f, "memcached_version", &[("version", &s["version"])]), 1.0);

    // Counters the stats call itself does not move: equal.
    let cmd = |command: &str, status: &str| value(&f, "memcached_commands_total", &[("command", command), ("status", status)]);
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        assert_eq!(cmd(op, "hit"), num(&s, &format!("{op}_hits")), "{op} hit");
        assert_eq!(cmd(op, "miss"), num(&s, &format!("{op}_misses")), "{op} miss");
    }
    assert_eq!(cmd("get", "hit"), 3.0);
    assert_eq!(cmd("cas", "badval"), num(&s, "cas_badval"));
    assert_eq!(cmd("cas", "badval"), 1.0);
    let cas_all = num(&s, "cas_hits") + num(&s, "cas_misses") + num(&s, "cas_badval");
    assert_eq!(cmd("set", "hit"), num(&s, "cmd_set") - cas_all);
    assert_eq!(cmd("set", "hit"), 42.0);
    for (family, key) in [
        ("memcached_current_items", "curr_items"),
        ("memcached_items_total", "total_items"),
        ("memcached_current_bytes", "bytes"),
        ("memcached_limit_bytes", "limit_maxbytes"),
        ("memcached_connections_total", "total_connections"),
        ("memcached_current_connections", "curr_connections"),
        ("memcached_items_evicted_total", "evictions"),
        ("memcached_item_too_large_total", "store_too_large"),
        ("memcached_connections_yielded_total", "conn_yields"),
    ] {
        assert_eq!(value(&f, family, &[]), num(&s, key), "{family}");
    }
    assert_eq!(value(&f, "memcached_current_items", &[]), 41.0); // 42 set, 1 deleted
    assert_eq!(value(&f, "memcached_max_connections", &[]), num(&settings, "maxconns"));
    assert_eq!(value(&f, "memcached_lru_crawler_sleep", &[]), num(&settings, "lru_crawler_sleep"));
    assert_eq!(value(&f, "memcached_malloced_bytes", &[]), num(&slabs, "total_malloced"));
    // Read and written bytes grow with the stats requests: at most those.
    let read = value(&f, "memcached_read_bytes_total", &[]);
    assert!(read > 3000.0 && read <= num(&s, "bytes_read"), "{read}");

    // Per class, from the slab view.
    let classes: Vec<&str> = items.keys().filter_map(|k| k.strip_suffix(":number")?.strip_prefix("items:")).collect();
    assert_eq!(classes.len(), 2, "{items:?}");
    for class in classes {
        let slab = [("slab", class)];
        assert_eq!(value(&f, "memcached_slab_current_items", &slab), num(&items, &format!("items:{class}:number")));
        assert_eq!(value(&f, "memcached_slab_chunk_size_bytes", &slab), num(&slabs, &format!("{class}:chunk_size")));
        assert_eq!(value(&f, "memcached_slab_chunks_used", &slab), num(&slabs, &format!("{class}:used_chunks")));
        let hits = value(&f, "memcached_slab_commands_total", &[("slab", class), ("command", "get"), ("status", "hit")]);
        assert_eq!(hits, num(&slabs, &format!("{class}:get_hits")));
        let warm = value(&f, "memcached_slab_lru_hits_total", &[("slab", class), ("lru", "warm")]);
        assert_eq!(warm, num(&items, &format!("items:{class}:hits_to_warm")));
    }

    // Strata's own.
    assert_eq!(value(&f, "strata_worker_threads", &[]), 2.0);
    assert_eq!(value(&f, "strata_index_bytes", &[]), num(&s, "hash_bytes"));
    assert!(value(&f, "strata_index_slots", &[]) >= 42.0);
    // stats mrc's curve, one gauge per size (0.25x .. 8x of -m), as stats prints it.
    let mrc = stats_on(&mut c, "mrc");
    let (kind, samples) = family(&f, "strata_mrc_miss_ratio");
    assert_eq!(kind, "gauge");
    assert_eq!(samples.len(), 6);
    for x in samples {
        let mb = &x.labels["megabytes"];
        assert!((x.value - num(&mrc, &format!("mrc:{mb}"))).abs() < 1e-4, "{mb}");
    }
    assert_eq!(settings["metrics_listen"], metrics.to_string());
    // The latency histograms of `stats latency`: the get family's count as there.
    let lat = stats_on(&mut c, "latency");
    let (kind, samples) = family(&f, "strata_request_duration_seconds");
    assert_eq!(kind, "histogram");
    let get_count = samples
        .iter()
        .find(|x| x.name == "strata_request_duration_seconds_count" && x.labels.get("family").map(String::as_str) == Some("get"))
        .map(|x| x.value)
        .expect("a get count");
    assert_eq!(get_count, num(&lat, "get_count"));
    assert_eq!(get_count, 2.0); // `get k1 k2 nope` and `gets k6`
    // No flash tier: no extstore families (the exporter's rule).
    assert!(!f.keys().any(|n| n.starts_with("memcached_extstore")));
}

/// Families the exporter emits for memcached 1.6 (the exporter's own
/// `memcached_exporter_build_info` aside): all of them are here.
/// `strata_memory_bytes`: a gauge with one sample per `stats memory`
/// line (`part` is the name without `_bytes`); the parts that do not move
/// between the two reads (the limit's segments are all taken at once by a
/// fill, so only fixed ones are compared) agree.
#[test]
fn memory_parts_match_stats_memory() {
    let (_server, addr, metrics) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    traffic(addr);
    let lines = stats(addr, "memory");
    let f = parse(&scrape(metrics.unwrap()));
    let (kind, samples) = family(&f, "strata_memory_bytes");
    assert_eq!(kind, "gauge");
    assert_eq!(samples.len(), lines.len(), "{samples:?}");
    for name in lines.keys() {
        let part = name.strip_suffix("_bytes").unwrap();
        let v = value(&f, "strata_memory_bytes", &[("part", part)]);
        if ["journal", "latency", "index"].contains(&part) {
            assert_eq!(v, num(&lines, name), "{part}");
        }
    }
    assert!(value(&f, "strata_memory_bytes", &[("part", "rss")]) > 0.0);
}

#[test]
fn every_exporter_family_is_there() {
    let (_server, addr, metrics) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    traffic(addr);
    let f = parse(&scrape(metrics.unwrap()));
    let names = "accepting_connections commands connections_listener_disabled connections_rejected connections \
        connections_yielded current_bytes current_connections current_items direct_reclaims item_no_memory \
        item_too_large items_evicted items_reclaimed items limit_bytes lru_crawler_enabled \
        lru_crawler_hot_max_factor lru_crawler_hot_percent lru_crawler_items_checked lru_crawler_maintainer_thread \
        lru_crawler_moves_to_cold lru_crawler_moves_to_warm lru_crawler_moves_within_lru lru_crawler_reclaimed \
        lru_crawler_sleep lru_crawler_starts lru_crawler_to_crawl lru_crawler_warm_max_factor \
        lru_crawler_warm_percent malloced_bytes max_connections process_system_cpu_seconds \
        process_user_cpu_seconds read_bytes slab_chunk_size_bytes slab_chunks_free slab_chunks_free_end \
        slab_chunks_per_page slab_chunks_used slab_cold_items slab_commands slab_current_chunks \
        slab_current_items slab_current_pages slab_hot_age_seconds slab_hot_items slab_items_age_seconds \
        slab_items_crawler_reclaimed slab_items_evicted_nonzero slab_items_evicted_time_seconds \
        slab_items_evicted slab_items_evicted_unfetched slab_items_expired_unfetched slab_items_moves_to_cold \
        slab_items_moves_to_warm slab_items_moves_within_lru slab_items_outofmemory slab_items_reclaimed \
        slab_items_tailrepairs slab_lru_hits slab_mem_requested_bytes slab_warm_age_seconds slab_warm_items \
        time_seconds up uptime_seconds version written_bytes";
    let missing: Vec<&str> = names.split_whitespace().filter(|n| !f.contains_key(&format!("memcached_{n}"))).collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
    assert_eq!(names.split_whitespace().count(), 69);
}

#[test]
fn bad_requests_get_4xx_and_never_stop_the_listener() {
    let (_server, _addr, metrics) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    let m = metrics.unwrap();
    let cases: [(&[u8], u16); 6] = [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"GET /metricsx HTTP/1.1\r\n\r\n", 404),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET /metrics HTTP/9\r\n\r\n", 400),
        (b"hello\r\n\r\n", 400),
    ];
    for (request, code) in cases {
        assert_eq!(http(m, request).0, code, "{}", String::from_utf8_lossy(request));
    }
    // A head larger than 8 KiB: 431, without reading the rest.
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat(b'a').take(64 << 10));
    let mut s = TcpStream::connect(m).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&big); // the server may close before taking it all
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(reply.starts_with(b"HTTP/1.1 431 "), "{}", String::from_utf8_lossy(&reply));
    // HEAD: the headers only.
    let (code, reply) = http(m, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(code, 200);
    assert!(reply.ends_with("\r\n\r\n"), "{reply}");
    // Still serving.
    assert!(scrape(m).contains("memcached_up 1"));
}

#[test]
fn a_slow_client_never_blocks_the_cache() {
    let (_server, addr, metrics) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    let m = metrics.unwrap();
    // Half a request head, then nothing.
    let mut slow = TcpStream::connect(m).unwrap();
    slow.write_all(b"GET /met").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // The cache answers at once meanwhile.
    let started = Instant::now();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"set a 0 0 1\r\nx\r\n").unwrap();
    let mut reply = [0u8; 8];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"STORED\r\n");
    assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    // The slow one gets 408 at its deadline; the next scrape is served.
    slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 408 "), "{}", String::from_utf8_lossy(&answer));
    assert!(scrape(m).contains("memcached_up 1"));
}

#[test]
fn an_address_in_use_is_a_clear_error_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let opt = format!("metrics_listen=127.0.0.1:{port}");
    let out = Command::new(BIN).args(["-p", "-1", "-U", "0", "-o", &opt]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen for metrics on 127.0.0.1:{port} (-o metrics_listen)")), "{err}");
    assert!(err.contains("Address already in use"), "{err}");
    for (bad, message) in [
        ("metrics_listen", "Missing metrics_listen argument"),
        ("metrics_listen=", "Missing metrics_listen argument"),
        ("metrics_listen=9150", "metrics_listen must be ADDR:PORT, not '9150'"),
        ("metrics_listen=127.0.0.1:99999", "metrics_listen must be ADDR:PORT"),
        ("metrics_listen=example.com:1", "metrics_listen must be ADDR:PORT"),
        ("metrics_listen=::1:9150", "metrics_listen must be ADDR:PORT"),
    ] {
        let out = Command::new(BIN).args(["-p", "-1", "-U", "0", "-o", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(message), "{bad}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok()).map(|n| n.trim().to_string()).collect()
}

#[test]
fn off_by_default() {
    let (server, addr, metrics) = spawn(&[]);
    assert!(metrics.is_none());
    assert_eq!(stats(addr, "settings")["metrics_listen"], "NULL");
    let names = thread_names(server.0.id());
    assert!(names.iter().any(|n| n.starts_with("strata-worker")), "{names:?}");
    assert!(!names.iter().any(|n| n == "strata-metrics"), "{names:?}");
    let (on, _, _) = spawn(&["-o", "metrics_listen=127.0.0.1:0"]);
    // A thread names itself once it runs: a busy machine may not have run it yet.
    let named = |pid| thread_names(pid).iter().any(|n| n == "strata-metrics");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !named(on.0.id()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(named(on.0.id()), "{:?}", thread_names(on.0.id()));
}

#[test]
fn flash_tier_brings_the_extstore_families() {
    let dir = std::env::temp_dir().join(format!("strata-metrics-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("metrics_listen=127.0.0.1:0,ext_page_size=8,ext_wbuf_size=2,ext_path={}:64m", dir.join("f").display());
    let (_server, addr, metrics) = spawn(&["-o", &ext]);
    traffic(addr);
    let f = parse(&scrape(metrics.unwrap()));
    let s = stats(addr, "");
    let extstore: Vec<&String> = f.keys().filter(|n| n.starts_with("memcached_extstore_")).collect();
    assert_eq!(extstore.len(), 19, "{extstore:?}");
    assert_eq!(value(&f, "memcached_extstore_bytes_limit", &[]), num(&s, "extstore_limit_maxbytes"));
    assert_eq!(value(&f, "memcached_extstore_pages_free", &[]), num(&s, "extstore_pages_free"));
    assert_eq!(family(&f, "strata_extstore_write_errors_total").0, "counter");
    let _ = std::fs::remove_dir_all(&dir);
}
