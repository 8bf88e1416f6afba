//! Key dumps, the LRU crawler, `lru`/`slabs` and `stats detail` on the wire:
//! reply shapes compared with Debian's memcached (1.6.18) run side by side,
//! every refusal, a crawl that reclaims, and a dump streamed while another
//! connection keeps being served.
//!
//! Where memcached 1.6.45 (whose formats Strata follows for dumps) differs
//! from 1.6.18, the test says so and checks the 1.6.45 form: metadump and
//! mgdump start with `OK`, metadump lines carry `flags=` and end with a
//! space before the newline.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common;

use common::Server;


struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn to(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client { reader: BufReader::new(stream.try_clone().unwrap()), stream }
    }

    fn send(&mut self, text: &str) {
        self.stream.write_all(text.as_bytes()).unwrap();
    }

    /// One line, with its terminator (`\r\n` or a metadump's bare `\n`).
    fn line(&mut self) -> String {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).unwrap();
        String::from_utf8(line).unwrap()
    }

    /// Send `cmd` and read lines up to and including `end`.
    fn until(&mut self, cmd: &str, end: &str) -> Vec<String> {
        self.send(cmd);
        let mut lines = Vec::new();
        loop {
            let line = self.line();
            assert!(!line.is_empty(), "connection closed after {lines:?}");
            let last = line == end;
            lines.push(line);
            if last {
                return lines;
            }
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.line()
    }
}

/// The field names of a metadump line, in order.
fn field_names(line: &str) -> Vec<String> {
    line.split_whitespace().map(|f| f.split('=').next().unwrap().to_string()).collect()
}

fn fill(c: &mut Client) {
    for (key, flags, ttl, value) in [("foo", 5, 0, "bar"), ("a%20b", 0, 100, "x"), ("big", 0, 0, &*"v".repeat(3000))] {
        assert_eq!(c.ask(&format!("set {key} {flags} {ttl} {}\r\n{value}\r\n", value.len())), "STORED\r\n");
    }
}

/// `lines` without a second line of one key, in their first order.
fn once_each(lines: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    lines.into_iter().filter(|l| seen.insert(l.split_whitespace().next().unwrap_or("").to_string())).collect()
}

#[test]
fn dump_shapes_match_memcached() {
    let Some(mc) = Server::memcached(&[]) else {
        eprintln!("memcached not installed: skipping the comparison");
        return;
    };
    let strata = Server::strata(&["-t", "2"]);
    let (mut m, mut s) = (Client::to(mc.addr), Client::to(strata.addr));
    fill(&mut m);
    fill(&mut s);

    // metadump: 1.6.18 has no OK line, no flags= and no trailing space.
    let mine = s.until("lru_crawler metadump all\r\n", "END\r\n");
    // memcached's crawler can meet an item twice (bumped from one LRU to
    // another while it walks them): its lines, once each.
    let theirs = once_each(m.until("lru_crawler metadump all\r\n", "END\r\n"));
    assert_eq!(mine[0], "OK\r\n", "1.6.45 starts a dump with OK");
    let (mine, theirs) = (&mine[1..], &theirs[..]);
    assert_eq!(mine.len(), theirs.len(), "{mine:?} vs {theirs:?}");
    let sorted = |lines: &[String]| {
        let mut v: Vec<String> = lines.to_vec();
        v.sort();
        v
    };
    for (a, b) in sorted(mine).iter().zip(sorted(theirs).iter()) {
        if b == "END\r\n" {
            assert_eq!(a, b);
            continue;
        }
        assert!(a.ends_with(" \n") && b.ends_with('\n') && !b.ends_with("\r\n"), "{a:?} {b:?}");
        let mut names = field_names(b);
        names.push("flags".into());
        assert_eq!(field_names(a), names);
        // Same key, size and class: both compute memcached's item size.
        for field in ["key", "size", "cls", "fetch"] {
            let get = |l: &str| l.split_whitespace().find(|f| f.starts_with(&format!("{field}="))).unwrap().to_string();
            assert_eq!(get(a), get(b), "{a:?} {b:?}");
        }
    }
    assert!(mine.iter().any(|l| l.starts_with("key=a%2520b ") && l.contains(" flags=0 ")));
    assert!(mine.iter().any(|l| l.starts_with("key=foo ") && l.contains(" exp=-1 ") && l.contains(" flags=5 ")));

    // metadump of a class list and of the hash table: the same items.
    let by_class = s.until("lru_crawler metadump 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20\r\n", "END\r\n");
    assert_eq!(sorted(&by_class), sorted(&s.until("lru_crawler metadump hash\r\n", "END\r\n")));
    let class1 = once_each(m.until("lru_crawler metadump 1\r\n", "END\r\n"));
    assert_eq!(s.until("lru_crawler metadump 1\r\n", "END\r\n").len(), class1.len() + 1, "same items in class 1, plus OK");

    // mgdump (1.6.45 only): OK, mg lines, EN.
    let mg = s.until("lru_crawler mgdump all\r\n", "EN\r\n");
    assert_eq!(sorted(&mg), ["EN\r\n", "OK\r\n", "mg a%20b\r\n", "mg big\r\n", "mg foo\r\n"]);
    assert_eq!(s.ask("ms ZGF0YQ== 1 b\r\nz\r\n"), "HD\r\n");
    assert!(s.until("lru_crawler mgdump hash\r\n", "EN\r\n").contains(&"mg ZGF0YQ== b\r\n".to_string()));

    // cachedump: memcached lists only its COLD LRU, so which items it
    // shows depends on its maintainer thread: compare the line format.
    let item_line = |l: &str| {
        let rest = l.strip_prefix("ITEM ").and_then(|r| r.strip_suffix(" s]\r\n"));
        let Some((_key, tail)) = rest.and_then(|r| r.split_once(" [")) else { return false };
        let Some((bytes, exp)) = tail.split_once(" b; ") else { return false };
        bytes.parse::<u64>().is_ok() && exp.parse::<u64>().is_ok()
    };
    std::thread::sleep(Duration::from_millis(1500));
    for (who, c) in [("strata", &mut s), ("memcached", &mut m)] {
        let lines = c.until("stats cachedump 1 0\r\n", "END\r\n");
        assert!(lines[..lines.len() - 1].iter().all(|l| item_line(l)), "{who}: {lines:?}");
    }
    assert_eq!(s.until("stats cachedump 1 1\r\n", "END\r\n").len(), 2, "limit 1");
    assert_eq!(s.until("stats cachedump 2 0\r\n", "END\r\n"), ["END\r\n"]);
    let big = s.until("stats cachedump 0 0\r\n", "END\r\n");
    assert_eq!(big, ["END\r\n"], "class 0 holds nothing");
    let line = s.until("stats cachedump 1 0\r\n", "END\r\n").into_iter().find(|l| l.starts_with("ITEM foo ")).unwrap();
    assert_eq!(line, "ITEM foo [3 b; 0 s]\r\n");
}

#[test]
fn admin_replies_match_memcached() {
    let Some(mc) = Server::memcached(&[]) else {
        eprintln!("memcached not installed: skipping the comparison");
        return;
    };
    let strata = Server::strata(&["-t", "2"]);
    let (mut m, mut s) = (Client::to(mc.addr), Client::to(strata.addr));
    let commands = [
        "lru_crawler crawl 0", "lru_crawler crawl 64", "lru_crawler crawl x", "lru_crawler crawl 1,x", "lru_crawler crawl ,",
        "lru_crawler crawl hash", "lru_crawler metadump 0", "lru_crawler metadump 1,abc",
        "lru_crawler sleep 2000000", "lru_crawler sleep x", "lru_crawler sleep 100", "lru_crawler tocrawl x",
        "lru_crawler tocrawl 0", "lru_crawler enable", "lru_crawler bogus", "lru_crawler", "lru_crawler crawl",
        "lru tune 10 20 0.1 2", "lru tune 50 40 0.1 2", "lru tune 10 20 0 2", "lru tune 10 20", "lru mode flat",
        "lru mode segmented", "lru mode x", "lru temp_ttl 10", "lru temp_ttl x", "lru", "slabs", "slabs automove",
        "slabs automove 0", "slabs automove 1", "slabs automove 2", "slabs automove 3", "slabs automove x",
        "slabs automove ratio 0.5", "slabs automove ratio x", "slabs reassign 1 1", "slabs reassign 1 2",
        "slabs reassign 70 1", "slabs reassign -1 1", "slabs reassign x 1", "slabs reassign 1",
        "stats detail", "stats detail x", "stats detail dump", "stats cachedump", "stats cachedump 1",
        "stats cachedump 99 0", "stats cachedump x 0", "stats cachedump 0 0",
    ];
    // mgdump is 1.6.45's (1.6.18 answers ERROR): its refusals as 1.6.45's.
    assert_eq!(s.ask("lru_crawler mgdump 99\r\n"), "BADCLASS invalid class id\r\n");
    assert_eq!(s.ask("lru_crawler mgdump x,1\r\n"), "BADCLASS invalid class id\r\n");
    for cmd in commands {
        let line = format!("{cmd}\r\n");
        let (a, b) = (s.ask(&line), m.ask(&line));
        assert_eq!(a, b, "{cmd}");
    }
    // After `disable`, memcached stops its crawler thread asynchronously:
    // for a moment `crawl` may answer `ERROR an unknown error happened`
    // (seen on 1.6.18 and 1.6.45); Strata answers as once it has stopped.
    for (cmd, want) in [
        ("lru_crawler disable", "OK"),
        ("lru_crawler disable", "OK"),
        ("lru_crawler crawl 1", "CLIENT_ERROR lru crawler disabled"),
        ("lru_crawler metadump all", "CLIENT_ERROR lru crawler disabled"),
        ("lru_crawler mgdump all", "CLIENT_ERROR lru crawler disabled"),
        ("lru_crawler enable", "OK"),
        ("lru_crawler enable", "ERROR failed to start lru crawler thread"),
    ] {
        assert_eq!(s.ask(&format!("{cmd}\r\n")), format!("{want}\r\n"), "{cmd}");
    }
    // stats detail: the same table after the same requests.
    let mut script = String::from("stats detail on\r\n");
    script += "set foo:1 0 0 1\r\nx\r\nget foo:1 foo:2 bar:1 plain\r\ndelete foo:3\r\nset bar:9 0 0 1\r\ny\r\n";
    s.send(&script);
    m.send(&script);
    for _ in 0..7 {
        assert_eq!(s.line(), m.line());
    }
    let sorted = |c: &mut Client| {
        let mut v = c.until("stats detail dump\r\n", "END\r\n");
        v.sort();
        v
    };
    assert_eq!(sorted(&mut s), sorted(&mut m));
    assert_eq!(s.ask("stats detail off\r\n"), "OK\r\n");
    assert_eq!(s.ask("get foo:1\r\n"), "VALUE foo:1 0 1\r\n");
    assert_eq!(s.until("", "END\r\n").len(), 2);
    assert!(s.until("stats detail dump\r\n", "END\r\n").contains(&"PREFIX foo get 2 hit 1 set 1 del 1\r\n".to_string()));
    assert_eq!(s.ask("stats reset\r\n"), "RESET\r\n");
    assert_eq!(s.until("stats detail dump\r\n", "END\r\n"), ["END\r\n"]);
}

#[test]
fn dumps_refused_when_pipelined() {
    let strata = Server::strata(&[]);
    let mut s = Client::to(strata.addr);
    s.send("mg foo v\r\nlru_crawler metadump all\r\n");
    assert_eq!(s.line(), "EN\r\n");
    assert_eq!(s.line(), "ERROR cannot pipeline other commands before metadump\r\n");
    s.send("mg foo v\r\nlru_crawler mgdump all\r\n");
    assert_eq!(s.line(), "EN\r\n");
    assert_eq!(s.line(), "ERROR cannot pipeline other commands before mgdump\r\n");
    // memcached 1.6.45: a get's reply is still stacked; `mn` flushes.
    assert_eq!(s.until("get foo\r\nlru_crawler metadump all\r\n", "END\r\n"), ["END\r\n"]);
    assert_eq!(s.line(), "ERROR cannot pipeline other commands before metadump\r\n");
    assert_eq!(s.until("mn\r\nlru_crawler mgdump all\r\n", "EN\r\n"), ["MN\r\n", "OK\r\n", "EN\r\n"]);
    // A request pipelined after a dump waits for it.
    assert_eq!(s.until("lru_crawler mgdump all\r\nversion\r\n", "EN\r\n"), ["OK\r\n", "EN\r\n"]);
    assert!(s.line().starts_with("VERSION "));
}

fn running(c: &mut Client) -> bool {
    c.until("stats\r\n", "END\r\n").iter().any(|l| l == "STAT lru_crawler_running 1\r\n")
}

#[test]
fn crawl_reclaims_expired_items() {
    // -m 1: two shards, so each surely holds long and short TTLs alike.
    let strata = Server::strata(&["-m", "1", "-I", "512k"]);
    let mut s = Client::to(strata.addr);
    // TTLs of 4 and 7 s share a segment (one TTL bucket per power of two),
    // which therefore is not wholly expired when the short ones are: only
    // a crawl reclaims those.
    for i in 0..30 {
        assert_eq!(s.ask(&format!("set ifoo{i} 0 7 2\r\nok\r\n")), "STORED\r\n");
        assert_eq!(s.ask(&format!("set sfoo{i} 0 4 2\r\nok\r\n")), "STORED\r\n");
    }
    std::thread::sleep(Duration::from_millis(4300));
    assert_eq!(s.ask("lru_crawler crawl 1\r\n"), "OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&mut s) {
        assert!(Instant::now() < deadline, "crawl never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = s.until("stats\r\n", "END\r\n");
    for want in ["STAT curr_items 30\r\n", "STAT crawler_reclaimed 30\r\n", "STAT crawler_items_checked 60\r\n", "STAT lru_crawler_starts 1\r\n"] {
        assert!(stats.contains(&want.to_string()), "{want} in {stats:?}");
    }
    // Only the immortal keys are dumped.
    let dump = s.until("lru_crawler metadump all\r\n", "END\r\n");
    assert_eq!(dump.len(), 32);
    assert!(dump[1..31].iter().all(|l| l.starts_with("key=ifoo")));
    // tocrawl: at most that many items checked per class per crawl.
    assert_eq!(s.ask("lru_crawler tocrawl 5\r\n"), "OK\r\n");
    assert_eq!(s.ask("lru_crawler crawl all\r\n"), "OK\r\n");
    while running(&mut s) {
        assert!(Instant::now() < deadline, "crawl never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = s.until("stats\r\n", "END\r\n");
    assert!(stats.contains(&"STAT crawler_items_checked 65\r\n".to_string()), "{stats:?}");
}

/// With the crawler off (`-o no_lru_crawler`, memcached's t/lru-crawler.t
/// setup) nothing reclaims expired items in the background, not even whole
/// expired segments: a crawl finds them and counts them per class, and
/// `stats slabs` keeps listing the class once it is empty, as memcached
/// keeps a class's pages.
#[test]
fn crawler_off_leaves_expired_items_to_a_crawl() {
    let strata = Server::strata(&["-o", "no_lru_crawler"]);
    let mut s = Client::to(strata.addr);
    for i in 0..30 {
        assert_eq!(s.ask(&format!("set sfoo{i} 0 1 2\r\nok\r\n")), "STORED\r\n");
    }
    std::thread::sleep(Duration::from_millis(2500));
    let slabs = s.until("stats slabs\r\n", "END\r\n");
    assert!(slabs.contains(&"STAT 1:used_chunks 30\r\n".to_string()), "{slabs:?}");
    assert_eq!(s.ask("lru_crawler crawl 1\r\n"), "CLIENT_ERROR lru crawler disabled\r\n");
    assert_eq!(s.ask("lru_crawler enable\r\n"), "OK\r\n");
    assert_eq!(s.ask("lru_crawler crawl 1\r\n"), "OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&mut s) {
        assert!(Instant::now() < deadline, "crawl never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let slabs = s.until("stats slabs\r\n", "END\r\n");
    for want in ["STAT 1:used_chunks 0\r\n", "STAT 1:total_pages 1\r\n", "STAT active_slabs 1\r\n"] {
        assert!(slabs.contains(&want.to_string()), "{want} in {slabs:?}");
    }
    let items = s.until("stats items\r\n", "END\r\n");
    assert_eq!(items, ["END\r\n"], "an empty class has no items lines");
    let stats = s.until("stats\r\n", "END\r\n");
    assert!(stats.contains(&"STAT crawler_reclaimed 30\r\n".to_string()), "{stats:?}");
}

/// `stats cachedump` stops at memcached's 2 MiB, with its END.
#[test]
fn cachedump_is_capped_at_two_mebibytes() {
    let strata = Server::strata(&["-m", "64"]);
    let mut s = Client::to(strata.addr);
    let mut batch = String::new();
    for i in 0..12_000 {
        batch += &format!("set {}{i:06} 0 0 1 noreply\r\nv\r\n", "k".repeat(200));
    }
    s.send(&batch);
    assert!(s.ask("version\r\n").starts_with("VERSION"));
    let first = s.until("lru_crawler metadump hash\r\n", "END\r\n")[1].clone();
    let class = first.split_whitespace().find_map(|f| f.strip_prefix("cls=")).unwrap().to_string();
    let lines = s.until(&format!("stats cachedump {class} 0\r\n"), "END\r\n");
    let bytes: usize = lines.iter().map(|l| l.len()).sum();
    assert!(bytes <= 2 << 20 && bytes > (2 << 20) - 300, "{bytes} bytes");
    assert!(lines.len() < 12_000);
    assert_eq!(s.until(&format!("stats cachedump {class} 7\r\n"), "END\r\n").len(), 8);
}

/// A dump of 200,000 keys read slowly by its client while another
/// connection's gets keep being answered, each quickly.
#[test]
fn dump_streams_without_stalling_others() {
    const KEYS: usize = 200_000;
    let strata = Server::strata(&["-t", "1", "-m", "256"]);
    let mut loader = Client::to(strata.addr);
    load_keys(&mut loader, KEYS);

    let addr = strata.addr;
    let dumper = std::thread::spawn(move || {
        let mut d = Client::to(addr);
        d.send("lru_crawler metadump hash\r\n");
        let mut lines = 0usize;
        let mut buf = vec![0u8; 4096];
        let mut tail = Vec::new();
        loop {
            // A slow reader: 4 KiB at a time.
            let n = d.reader.read(&mut buf).unwrap();
            assert!(n > 0, "closed mid-dump");
            lines += buf[..n].iter().filter(|&&b| b == b'\n').count();
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 16 {
                tail.drain(..tail.len() - 16);
            }
            if tail.ends_with(b"\nEND\r\n") {
                return lines - 2; // OK and END
            }
        }
    });
    let mut getter = Client::to(strata.addr);
    let mut worst = Duration::ZERO;
    let mut gets = 0;
    while !dumper.is_finished() {
        let started = Instant::now();
        assert_eq!(getter.ask(&format!("get key:{}\r\n", gets % KEYS)), "VALUE key:".to_string() + &(gets % KEYS).to_string() + " 0 5\r\n");
        assert_eq!(getter.line(), "value\r\n");
        assert_eq!(getter.line(), "END\r\n");
        worst = worst.max(started.elapsed());
        gets += 1;
    }
    assert_eq!(dumper.join().unwrap(), KEYS);
    assert!(gets > 10, "gets were answered while the dump ran ({gets})");
    assert!(worst < Duration::from_millis(500), "slowest get during the dump: {worst:?}");
}

/// Store `key:0` .. `key:{keys - 1}` (value `value`), sent in batches of
/// about 64 KiB, and wait until the server has read them all.
fn load_keys(c: &mut Client, keys: usize) {
    let mut batch = String::new();
    for i in 0..keys {
        batch += &format!("set key:{i} 0 0 5 noreply\r\nvalue\r\n");
        if batch.len() > 1 << 16 {
            c.send(&batch);
            batch.clear();
        }
    }
    c.send(&batch);
    assert!(c.ask("version\r\n").starts_with("VERSION"));
}

/// The threads of a running dump (`ops/dump_feed.rs`): named `strata-dump`
/// (the printer) and `strata-dumpwalk`, with each one's scheduling policy
/// (`/proc/PID/task/TID/stat` field 41; 5 is `SCHED_IDLE`).
fn dump_threads(pid: u32) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((_, fields)) = stat.rsplit_once(')') else { continue };
        let policy = fields.split_whitespace().nth(38).and_then(|p| p.parse().ok()).unwrap_or(u32::MAX);
        if comm.trim().starts_with("strata-dump") {
            found.push((comm.trim().to_string(), policy));
        }
    }
    found.sort();
    found
}

/// The policy of the dump's printer thread while it sleeps (state `S`);
/// None while it runs or before it exists.
fn printer_asleep(pid: u32) -> Option<u32> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((_, fields)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        if comm.trim() == "strata-dump" && fields.first() == Some(&"S") {
            return fields.get(38).and_then(|p| p.parse().ok());
        }
    }
    None
}

/// A metadump whose client stops reading holds the crawler and its two
/// threads (both asleep, under the normal policy) and nothing grows;
/// closing that client cancels it, and the next dump lists every key.
#[test]
fn dump_threads_idle_and_cancel() {
    // More lines (about 20 MB) than the socket buffers take.
    const KEYS: usize = 200_000;
    let strata = Server::strata(&["-t", "1", "-m", "64"]);
    let mut loader = Client::to(strata.addr);
    load_keys(&mut loader, KEYS);

    let mut stalled = Client::to(strata.addr);
    assert_eq!(stalled.ask("lru_crawler metadump all\r\n"), "OK\r\n");
    // The client reads nothing more: the dump waits with its queue full.
    let pid = strata.child.id();
    // Both threads run; the printer works under SCHED_IDLE but sleeps
    // (for room in the socket, the walker, the socket) under the normal
    // policy, so the cancel below only wakes it (ops/dump_feed.rs).
    // A thread takes its name when it first runs: on a busy machine the
    // walker, started first, can still be unnamed (its creator's name)
    // when the printer already sleeps.
    let names = || -> Vec<String> { dump_threads(pid).into_iter().map(|(name, _)| name).collect() };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut asleep = printer_asleep(pid);
    while (asleep != Some(0) || names() != ["strata-dump", "strata-dumpwalk"]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        asleep = printer_asleep(pid);
    }
    assert_eq!(asleep, Some(0), "the printer asleep, and its policy");
    assert_eq!(names(), ["strata-dump", "strata-dumpwalk"]);
    assert_eq!(loader.ask("lru_crawler metadump all\r\n"), "BUSY currently processing crawler request\r\n");
    drop(stalled);

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reply = loader.ask("lru_crawler metadump all\r\n");
    while reply.starts_with("BUSY") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        reply = loader.ask("lru_crawler metadump all\r\n");
    }
    assert_eq!(reply, "OK\r\n");
    let mut keys = 0;
    loop {
        let line = loader.line();
        if line == "END\r\n" {
            break;
        }
        assert!(line.starts_with("key=key%3A"), "{line:?}");
        keys += 1;
    }
    assert_eq!(keys, KEYS);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dump_threads(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(dump_threads(pid), [], "a finished dump's threads are gone");
}

/// `lru_crawler sleep` paces a dump's walker (a nap per 1,000 items);
/// a client that hangs up mid-dump ends the walk at once, not after the
/// nap it was in: at the longest pace, a second a nap.
#[test]
fn a_cancelled_dump_does_not_sleep_out_its_pace() {
    const KEYS: usize = 20_000;
    let strata = Server::strata(&["-t", "1", "-m", "64"]);
    let mut loader = Client::to(strata.addr);
    load_keys(&mut loader, KEYS);
    assert_eq!(loader.ask("lru_crawler sleep 1000000\r\n"), "OK\r\n");
    let pid = strata.child.id();
    let mut dumping = Client::to(strata.addr);
    assert_eq!(dumping.ask("lru_crawler metadump all\r\n"), "OK\r\n");
    // The first lines come as the walker fills its third and fourth
    // stages (1,024 items), then naps: a second, most of it left after
    // the 100 ms given it to get there. (A walker cancelled before its
    // nap ends at its next stage.)
    assert!(dumping.line().starts_with("key=key%3A"));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(dump_threads(pid).len(), 2, "walker and printer");
    let hung_up = Instant::now();
    drop(dumping);
    let deadline = hung_up + Duration::from_secs(10);
    while !dump_threads(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = hung_up.elapsed();
    assert_eq!(dump_threads(pid), [], "the cancelled dump's threads are gone");
    assert!(took < Duration::from_millis(500), "the walker slept on after the cancel: {took:?}");
    assert_eq!(loader.ask("lru_crawler metadump all\r\n"), "OK\r\n", "the crawler is free");
}

/// The dump's printer writes to the client's socket itself: requests sent
/// behind the dump (in the same packet as it, and while it runs) wait,
/// and their replies come after its END, in order, on both engines.
#[test]
fn requests_behind_a_dump_answer_after_its_end() {
    // About 2 MB of lines: more than the socket buffers hold.
    const KEYS: usize = 20_000;
    for engine in ["io_uring", "epoll"] {
        let strata = Server::strata(&["-t", "1", "-m", "64", "-o", &format!("io_engine={engine}")]);
        let mut c = Client::to(strata.addr);
        load_keys(&mut c, KEYS);
        c.send("lru_crawler metadump all\r\nget key:7\r\n");
        // Let the dump fill the socket before more requests arrive.
        std::thread::sleep(Duration::from_millis(50));
        c.send("set late 0 0 1\r\nx\r\nmn\r\n");
        assert_eq!(c.line(), "OK\r\n", "{engine}");
        let mut keys = 0;
        loop {
            let line = c.line();
            if line == "END\r\n" {
                break;
            }
            assert!(line.starts_with("key=key%3A") && line.ends_with(" \n"), "{engine}: {line:?}");
            keys += 1;
        }
        assert_eq!(keys, KEYS, "{engine}");
        assert_eq!(c.line(), "VALUE key:7 0 5\r\n", "{engine}");
        assert_eq!(c.line(), "value\r\n", "{engine}");
        assert_eq!(c.line(), "END\r\n", "{engine}");
        assert_eq!(c.line(), "STORED\r\n", "{engine}");
        assert_eq!(c.line(), "MN\r\n", "{engine}");
    }
}
