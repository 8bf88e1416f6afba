//! Warm return on the wire (issue 20): the `mj` journal command, the
//! downtime guard, and a restart on a memory file that syncs from its
//! peers' journals, dropping exactly the keys changed while it was away,
//! or starting cold when a peer cannot vouch (unreachable, hung, garbage,
//! plain memcached, journal too short or too young, a flush in the window).

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Conn, Server};

struct MemFile(PathBuf);

impl MemFile {
    fn new(name: &str) -> MemFile {
        let path = std::env::temp_dir().join(format!("strata-warm-{}-{name}.mem", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("mem.journal"));
        MemFile(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        // The journal kept beside it.
        let mut journal = self.0.clone().into_os_string();
        journal.push(".journal");
        let _ = std::fs::remove_file(journal);
    }
}

fn kill9(server: Server) {
    Command::new("kill").args(["-9", &server.child.id().to_string()]).status().expect("kill");
    drop(server);
}

fn tag(key: &str) -> u32 {
    strata_store::hash_key(key.as_bytes()) as u32
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
}

/// Send `mj <since>` and read the reply: Ok(tags) or Err(first line).
fn mj(conn: &mut Conn, since: u64) -> Result<Vec<u32>, String> {
    conn.stream.write_all(format!("mj {since}\r\n").as_bytes()).expect("send");
    let line = conn.line();
    let words: Vec<&str> = line.trim_end().split(' ').collect();
    if words[0] != "JR" {
        return Err(line.trim_end().to_string());
    }
    let bytes: usize = words[1].parse().expect("bytes");
    assert_eq!(words.len(), 5, "{line}");
    assert_eq!(bytes, 4 * words[2].parse::<usize>().expect("count"));
    assert!(words[3].parse::<u64>().expect("from") <= since);
    let mut block = vec![0u8; bytes + 2];
    conn.reader.read_exact(&mut block).expect("block");
    assert_eq!(&block[bytes..], b"\r\n");
    Ok(block[..bytes].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// A number from `stats journal`.
fn jstat(conn: &mut Conn, name: &str) -> u64 {
    conn.stream.write_all(b"stats journal\r\n").expect("send");
    let mut found = None;
    loop {
        let line = conn.line();
        if line == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no stat {name}"));
        }
        let mut parts = line.split_whitespace();
        if parts.nth(1) == Some(name) {
            found = parts.next().and_then(|v| v.parse().ok());
        }
    }
}

fn send(conn: &mut Conn, req: &[u8]) -> String {
    conn.stream.write_all(req).expect("send");
    conn.line()
}

/// Wait until the unix second has moved past `t`.
fn after(t: u64) {
    while now_unix() <= t {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mj_names_every_key_changed_by_any_protocol_and_no_key_only_read() {
    let server = Server::strata(&["-o", "journal_size=1000"]);
    let mut c = Conn::to(&server);
    let start = now_unix();
    assert!(mj(&mut c, start - 60).is_err_and(|l| l == "JN too_old"), "the window reaches before the journal began");
    after(start);
    after(start + 1);
    let since = now_unix();
    assert_eq!(c.set("set", b"v"), "STORED\r\n");
    assert_eq!(send(&mut c, b"add add 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(send(&mut c, b"replace missing 0 0 1\r\nv\r\n"), "NOT_STORED\r\n");
    assert_eq!(send(&mut c, b"append set 0 0 1\r\nw\r\n"), "STORED\r\n");
    assert_eq!(send(&mut c, b"delete gone\r\n"), "NOT_FOUND\r\n");
    assert_eq!(send(&mut c, b"incr num 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(send(&mut c, b"touch add 100\r\n"), "TOUCHED\r\n");
    assert_eq!(send(&mut c, b"ms meta 1\r\nv\r\n"), "HD\r\n");
    assert_eq!(send(&mut c, b"md mdel\r\n"), "NF\r\n");
    assert_eq!(send(&mut c, b"ma marith N0\r\n"), "HD\r\n");
    assert_eq!(send(&mut c, b"mg mtouch T30\r\n"), "EN\r\n");
    assert_eq!(send(&mut c, b"mg read v\r\n"), "EN\r\n");
    assert_eq!(send(&mut c, b"get set\r\n"), "VALUE set 0 2\r\n");
    assert_eq!(c.line(), "vw\r\n");
    assert_eq!(c.line(), "END\r\n");
    // A binary set on its own connection (the protocol is per connection).
    let mut bin = TcpStream::connect(server.addr).expect("connect");
    bin.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut req = vec![0x80, 0x01, 0, 3, 8, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    req.extend_from_slice(&[0; 8]);
    req.extend_from_slice(b"binv");
    bin.write_all(&req).expect("binary set");
    let mut head = [0u8; 24];
    bin.read_exact(&mut head).expect("binary reply");
    assert_eq!(&head[6..8], &[0, 0], "binary set succeeded");
    let mut got = mj(&mut c, since).expect("covered");
    let mut want: Vec<u32> =
        ["set", "add", "missing", "gone", "num", "meta", "mdel", "marith", "mtouch", "bin"].iter().map(|k| tag(k)).collect();
    want.sort_unstable();
    want.dedup();
    got.sort_unstable();
    assert_eq!(got, want, "every mutated key, hit or miss; not the keys only read");
    assert!(jstat(&mut c, "journal_requests_served") >= 1);
    assert_eq!(jstat(&mut c, "journal_entries"), 1024);
    assert_eq!(jstat(&mut c, "journal_bytes"), 1024 * 8 + 4096 * 16 + 16 * 8, "slots, marks and the 16-word header");
    // A flush_all in the window: this journal cannot vouch for it.
    assert_eq!(send(&mut c, b"flush_all\r\n"), "OK\r\n");
    assert_eq!(mj(&mut c, since), Err("JN flushed".into()));
    assert_eq!(send(&mut c, b"mj\r\n"), "CLIENT_ERROR bad command line format\r\n");
    assert_eq!(send(&mut c, b"mj 12 13\r\n"), "CLIENT_ERROR bad command line format\r\n");
    assert!(jstat(&mut c, "journal_requests_refused") >= 2);
}

#[test]
fn mj_refused_when_off_wrapped_or_unauthenticated() {
    let off = Server::strata(&["-o", "journal_size=0"]);
    let mut c = Conn::to(&off);
    assert_eq!(mj(&mut c, 1), Err("JN off".into()));
    assert_eq!(jstat(&mut c, "journal_bytes"), 0);

    let small = Server::strata(&["-o", "journal_size=4"]);
    let mut c = Conn::to(&small);
    let start = now_unix();
    after(start);
    for i in 0..5 {
        assert_eq!(c.set(&format!("k{i}"), b"v"), "STORED\r\n");
    }
    assert_eq!(mj(&mut c, start + 1), Err("JN wrapped".into()));

    let file = std::env::temp_dir().join(format!("strata-warm-{}-auth", std::process::id()));
    std::fs::write(&file, "peer:secret\n").expect("auth file");
    let auth = Server::strata(&["-Y", file.to_str().expect("path")]);
    let mut c = Conn::to(&auth);
    assert_eq!(send(&mut c, b"mj 1\r\n"), "CLIENT_ERROR unauthenticated\r\n");
    let _ = std::fs::remove_file(&file);
}

/// A free TCP port (for a server restarted on the same address).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port()
}

fn node(port: u16, file: &MemFile, extra: &[&str]) -> Server {
    let p = port.to_string();
    let mut args = vec!["-p", &p, "-l", "127.0.0.1", "-e", file.arg(), "-m", "64"];
    args.extend_from_slice(extra);
    Server::strata(&args)
}

fn load(server: &Server, keys: std::ops::Range<usize>, version: &str) {
    let mut c = Conn::to(server);
    for i in keys {
        assert_eq!(c.set(&format!("key{i}"), format!("{version}{i}").as_bytes()), "STORED\r\n");
    }
}

/// A node holds key0..key99, is killed, the peer takes writes for key0..9
/// and deletes key10..14; the node comes back on its file.
fn away_and_back(peer_list: &dyn Fn(SocketAddr, u16) -> String, extra: &[&str]) -> (Server, MemFile, Server) {
    let peer = Server::strata(&["-l", "127.0.0.1"]);
    let file = MemFile::new(&format!("node{}", free_port()));
    let port = free_port();
    after(now_unix()); // the peer's journal begins before the node's last heartbeat
    let a = node(port, &file, &[]);
    load(&a, 0..100, "old");
    std::thread::sleep(Duration::from_millis(1100)); // a heartbeat after the writes
    kill9(a);
    let mut p = Conn::to(&peer);
    for i in 0..10 {
        assert_eq!(p.set(&format!("key{i}"), b"new"), "STORED\r\n");
    }
    for i in 10..15 {
        assert_eq!(send(&mut p, format!("delete key{i}\r\n").as_bytes()), "NOT_FOUND\r\n");
    }
    let peers = peer_list(peer.addr, port);
    let mut args = vec!["-o", &peers, "-o", "restart_margin=1"];
    args.extend_from_slice(extra);
    let back = node(port, &file, &args);
    (back, file, peer)
}

#[test]
fn a_node_back_from_kill_9_drops_what_its_peers_changed_and_serves_the_rest() {
    // The list names the node itself too: it skips itself.
    let list = |peer: SocketAddr, own: u16| format!("restart_peers=127.0.0.1:{own},{peer}");
    let (back, _file, _peer) = away_and_back(&list, &[]);
    let mut c = Conn::to(&back);
    for i in 0..15 {
        assert_eq!(c.get(&format!("key{i}")), None, "key{i} changed on the peer: dropped, never stale");
    }
    for i in 15..100 {
        assert_eq!(c.get(&format!("key{i}")), Some(format!("old{i}").into_bytes()), "key{i} untouched: still warm");
    }
    assert_eq!(c.stat("restart_cold"), 0);
    assert_eq!(c.stat("restart_peers_synced"), 1);
    assert_eq!(c.stat("restart_sync_dropped"), 15);
    assert!(c.stat("restart_sync_tags") >= 15);
}

/// Poll `stats` until the catch-up is over.
fn catchup_done(c: &mut Conn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stat("restart_catchup_active") == 1 {
        assert!(Instant::now() < deadline, "the catch-up did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn writes_a_peer_takes_after_the_return_are_caught_up() {
    let list = |peer: SocketAddr, _own: u16| format!("restart_peers={peer}");
    let (back, _file, peer) = away_and_back(&list, &["-o", "restart_catchup=2"]);
    let mut c = Conn::to(&back);
    let mut p = Conn::to(&peer);
    assert_eq!(c.stat("restart_catchup_active"), 1);
    // The front end still sends the node's keys to the peer for a moment.
    assert_eq!(p.set("key20", b"newer"), "STORED\r\n");
    assert_eq!(p.set("key21", b"newer"), "STORED\r\n");
    // A key the node itself was sent since it listens: its copy is new, kept.
    assert_eq!(c.set("key22", b"here"), "STORED\r\n");
    assert_eq!(p.set("key22", b"there"), "STORED\r\n");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(c.get("key20"), None, "changed on the peer after the return: dropped when read");
    assert_eq!(c.get("key22"), Some(b"here".to_vec()));
    assert_eq!(c.get("key30"), Some(b"old30".to_vec()));
    catchup_done(&mut c);
    assert_eq!(c.stat("restart_catchup_dropped"), 2, "key20 when read, key21 by the last walk");
    assert_eq!(c.get("key21"), None);
    assert_eq!(c.get("key31"), Some(b"old31".to_vec()));
}

#[test]
fn a_peer_lost_during_the_catch_up_makes_every_restored_item_a_miss() {
    let list = |peer: SocketAddr, _own: u16| format!("restart_peers={peer}");
    let (back, _file, peer) = away_and_back(&list, &["-o", "restart_catchup=5"]);
    let mut c = Conn::to(&back);
    assert_eq!(c.get("key50"), Some(b"old50".to_vec()));
    drop(peer);
    catchup_done(&mut c);
    for i in 15..100 {
        assert_eq!(c.get(&format!("key{i}")), None, "key{i}: no peer vouches for it any more");
    }
    assert_eq!(c.set("fresh", b"x"), "STORED\r\n");
    assert_eq!(c.get("fresh"), Some(b"x".to_vec()));
}

/// A fake peer on a thread: accepts one connection and runs `serve` on it.
fn fake_peer(serve: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((conn, _)) = listener.accept() {
            serve(conn);
        }
    });
    addr
}

fn restart_with_peer(peer: &str, extra: &[&str]) -> (Server, Duration) {
    let file = MemFile::new(&format!("fallback{}", free_port()));
    let port = free_port();
    let a = node(port, &file, &[]);
    load(&a, 0..20, "v");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    let peers = format!("restart_peers={peer}");
    let mut args = vec!["-o", &peers, "-o", "restart_peer_timeout=500"];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let back = node(port, &file, &args);
    (back, started.elapsed())
}

fn assert_cold(back: &Server) {
    let mut c = Conn::to(back);
    assert_eq!(c.stat("restart_cold"), 1);
    assert_eq!(c.stat("restart_cold_items"), 20);
    for i in 0..20 {
        assert_eq!(c.get(&format!("key{i}")), None);
    }
    // And it serves.
    assert_eq!(c.set("after", b"x"), "STORED\r\n");
    assert_eq!(c.get("after"), Some(b"x".to_vec()));
}

#[test]
fn a_peer_that_cannot_vouch_makes_a_cold_start_that_serves() {
    // Unreachable: nothing listens there.
    let (back, _) = restart_with_peer(&format!("127.0.0.1:{}", free_port()), &[]);
    assert_cold(&back);
    // Hung: accepts, never answers; the wait is bounded.
    let hung = fake_peer(|conn| {
        std::thread::sleep(Duration::from_secs(5));
        drop(conn);
    });
    let (back, took) = restart_with_peer(&hung.to_string(), &[]);
    assert_cold(&back);
    assert!(took < Duration::from_secs(4), "a hung peer held the start for {took:?}");
    // Garbage.
    let garbage = fake_peer(|mut conn| {
        let _ = conn.write_all(b"HELLO THERE\r\n");
        std::thread::sleep(Duration::from_secs(1));
    });
    let (back, _) = restart_with_peer(&garbage.to_string(), &[]);
    assert_cold(&back);
    // A JR whose block is not what its line announced.
    let short = fake_peer(|mut conn| {
        let _ = conn.write_all(b"JR 8 2 1 2\r\nabcd\r\n");
        std::thread::sleep(Duration::from_secs(1));
    });
    let (back, _) = restart_with_peer(&short.to_string(), &[]);
    assert_cold(&back);
    // Plain memcached (no journal command), when installed.
    if let Some(mc) = Server::memcached(&[]) {
        let (back, _) = restart_with_peer(&mc.addr.to_string(), &[]);
        assert_cold(&back);
    }
    // A journal that does not reach back: the peer started after the node's last heartbeat.
    let young = Server::strata(&["-l", "127.0.0.1"]);
    let (back, _) = restart_with_peer(&young.addr.to_string(), &["-o", "restart_margin=30"]);
    assert_cold(&back);
}

#[test]
fn a_flush_on_a_peer_while_away_makes_a_cold_start() {
    let list = |peer: SocketAddr, _own: u16| format!("restart_peers={peer}");
    let peer_flush = Server::strata(&["-l", "127.0.0.1"]);
    // Flush on the peer after the node's heartbeat: the journal refuses.
    let file = MemFile::new("flush");
    let port = free_port();
    after(now_unix());
    let a = node(port, &file, &[]);
    load(&a, 0..20, "v");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    assert_eq!(send(&mut Conn::to(&peer_flush), b"flush_all\r\n"), "OK\r\n");
    let peers = list(peer_flush.addr, port);
    let back = node(port, &file, &["-o", &peers, "-o", "restart_margin=1"]);
    assert_cold(&back);
}

#[test]
fn the_downtime_guard_starts_cold_after_a_long_absence_and_warm_after_a_short_one() {
    let file = MemFile::new("guard");
    let port = free_port();
    let a = node(port, &file, &[]);
    load(&a, 0..20, "v");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    // Back at once: within the bound, warm.
    let back = node(port, &file, &["-o", "restart_max_downtime=30"]);
    let mut c = Conn::to(&back);
    assert_eq!(c.stat("restart_cold"), 0);
    assert_eq!(c.get("key3"), Some(b"v3".to_vec()));
    drop(c);
    kill9(back);
    // Away 3 s with a bound of 1 s: cold.
    std::thread::sleep(Duration::from_secs(3));
    let back = node(port, &file, &["-o", "restart_max_downtime=1"]);
    assert_cold(&back);
    assert!(Conn::to(&back).stat("restart_downtime_seconds") >= 2);
}

fn login(c: &mut Conn) {
    assert_eq!(send(c, b"set auth 0 0 11\r\npeer secret\r\n"), "STORED\r\n");
}

#[test]
fn with_ascii_auth_a_returning_node_logs_in_to_its_peers() {
    let auth = std::env::temp_dir().join(format!("strata-warm-{}-peers-auth", std::process::id()));
    std::fs::write(&auth, "peer:secret\n").expect("auth file");
    let auth_arg = auth.to_str().expect("path");
    let peer = Server::strata(&["-l", "127.0.0.1", "-Y", auth_arg]);
    let file = MemFile::new("auth");
    let port = free_port();
    after(now_unix());
    let a = node(port, &file, &["-Y", auth_arg]);
    let mut c = Conn::to(&a);
    login(&mut c);
    for i in 0..10 {
        assert_eq!(c.set(&format!("key{i}"), b"old"), "STORED\r\n");
    }
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    let mut p = Conn::to(&peer);
    login(&mut p);
    assert_eq!(p.set("key3", b"new"), "STORED\r\n");
    let peers = format!("restart_peers={}", peer.addr);
    let back = node(port, &file, &["-Y", auth_arg, "-o", &peers, "-o", "restart_margin=1"]);
    let mut c = Conn::to(&back);
    login(&mut c);
    assert_eq!(c.stat("restart_cold"), 0);
    assert_eq!(c.stat("restart_peers_synced"), 1);
    assert_eq!(c.get("key3"), None);
    assert_eq!(c.get("key4"), Some(b"old".to_vec()));
    let _ = std::fs::remove_file(&auth);
}
