//! The restart rules of docs/SCALE-OUT.md ("Restart rules and their
//! failure cases"), each on the wire: the journal kept beside the memory
//! file answers for a peer's time before its own restart (kill -9 or
//! graceful), a journal born with its memory file answers for a young
//! cluster, a peer that lost its files cannot vouch, two nodes down at
//! once start cold (safe) within the peer timeout, and a peer restarting
//! during a catch-up is asked again when it is back.

use crate::common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Conn, Server};

/// A memory file and the journal beside it, removed at the end.
struct Files(PathBuf);

impl Files {
    fn new(name: &str) -> Files {
        let path = std::env::temp_dir().join(format!("strata-rules-{}-{name}.mem", std::process::id()));
        let files = Files(path);
        files.remove();
        files
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.0);
        let mut journal = self.0.clone().into_os_string();
        journal.push(".journal");
        let _ = std::fs::remove_file(journal);
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        self.remove();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port()
}

fn node(port: u16, files: &Files, extra: &[&str]) -> Server {
    let p = port.to_string();
    let mut args = vec!["-p", &p, "-l", "127.0.0.1", "-e", files.arg(), "-m", "64"];
    args.extend_from_slice(extra);
    Server::strata(&args)
}

fn kill9(server: Server) {
    Command::new("kill").args(["-9", &server.child.id().to_string()]).status().expect("kill");
    drop(server);
}

/// SIGTERM, and wait for the exit (the files written back).
fn stop(mut server: Server) {
    Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().expect("kill");
    let _ = server.child.wait();
}

fn load(server: &Server, keys: std::ops::Range<usize>, version: &str) {
    let mut c = Conn::to(server);
    for i in keys {
        assert_eq!(c.set(&format!("key{i}"), format!("{version}{i}").as_bytes()), "STORED\r\n");
    }
}

/// The peer takes writes for key0..9 and deletes key10..14 (the node's
/// keys, re-routed while it is away).
fn change_on(peer: &Server) {
    let mut p = Conn::to(peer);
    for i in 0..10 {
        assert_eq!(p.set(&format!("key{i}"), b"new"), "STORED\r\n");
    }
    for i in 10..15 {
        p.stream.write_all(format!("delete key{i}\r\n").as_bytes()).expect("send");
        assert_eq!(p.line(), "NOT_FOUND\r\n");
    }
}

/// The node back: the 15 changed keys miss, the other 85 hit warm.
fn assert_warm(back: &Server) {
    let mut c = Conn::to(back);
    assert_eq!(c.stat("restart_cold"), 0, "a warm return");
    for i in 0..15 {
        assert_eq!(c.get(&format!("key{i}")), None, "key{i} changed on a peer: dropped, never stale");
    }
    for i in 15..100 {
        assert_eq!(c.get(&format!("key{i}")), Some(format!("old{i}").into_bytes()), "key{i} untouched: warm");
    }
}

fn assert_cold(back: &Server) {
    let mut c = Conn::to(back);
    assert_eq!(c.stat("restart_cold"), 1, "a cold start");
    for i in 0..100 {
        assert_eq!(c.get(&format!("key{i}")), None, "key{i}: no peer vouched");
    }
}

use std::io::Write;

#[test]
fn a_young_cluster_returns_warm_from_a_kill_9_two_seconds_after_start() {
    // Both nodes new: the peer's journal is born with its memory file.
    let (pf, nf) = (Files::new("young-peer"), Files::new("young-node"));
    let (pp, np) = (free_port(), free_port());
    let peer = node(pp, &pf, &[]);
    let a = node(np, &nf, &[]);
    load(&a, 0..100, "old");
    std::thread::sleep(Duration::from_millis(1500));
    kill9(a);
    change_on(&peer);
    // The window (last heartbeat - 2 s) reaches before the peer began.
    let peers = format!("restart_peers=127.0.0.1:{pp},127.0.0.1:{np}");
    let back = node(np, &nf, &["-o", &peers, "-o", "restart_margin=2"]);
    assert_warm(&back);
}

#[test]
fn a_peer_restarted_within_the_window_still_vouches() {
    for graceful in [false, true] {
        let (pf, nf) = (Files::new(&format!("r{graceful}-peer")), Files::new(&format!("r{graceful}-node")));
        let (pp, np) = (free_port(), free_port());
        let peer = node(pp, &pf, &[]);
        let a = node(np, &nf, &[]);
        load(&a, 0..100, "old");
        std::thread::sleep(Duration::from_millis(1100));
        kill9(a);
        change_on(&peer);
        // The peer restarts after taking the writes: its new process
        // answers for them from the journal its file kept.
        if graceful {
            stop(peer);
        } else {
            kill9(peer);
        }
        let peer = node(pp, &pf, &[]);
        let peers = format!("restart_peers=127.0.0.1:{pp}");
        let back = node(np, &nf, &["-o", &peers, "-o", "restart_margin=1"]);
        assert_warm(&back);
        assert_eq!(Conn::to(&peer).stat("restart_cold"), 0, "the peer itself came back warm (no peers named)");
    }
}

#[test]
fn a_peer_that_lost_its_files_cannot_vouch() {
    let (pf, nf) = (Files::new("lost-peer"), Files::new("lost-node"));
    let (pp, np) = (free_port(), free_port());
    let peer = node(pp, &pf, &[]);
    let a = node(np, &nf, &[]);
    load(&a, 0..100, "old");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    change_on(&peer);
    kill9(peer);
    // Its files lost (a tmpfs after a reboot): it comes back new, born
    // after the node's last heartbeat, without the writes it took.
    pf.remove();
    std::thread::sleep(Duration::from_millis(1100));
    let _peer = node(pp, &pf, &[]);
    let peers = format!("restart_peers=127.0.0.1:{pp}");
    let back = node(np, &nf, &["-o", &peers, "-o", "restart_margin=1"]);
    assert_cold(&back);
}

#[test]
fn two_nodes_down_at_once_never_serve_stale_and_wait_at_most_the_peer_timeout() {
    let (af, bf, cf) = (Files::new("two-a"), Files::new("two-b"), Files::new("two-c"));
    let (ap, bp, cp) = (free_port(), free_port(), free_port());
    let peers = format!("restart_peers=127.0.0.1:{ap},127.0.0.1:{bp},127.0.0.1:{cp}");
    let c = node(cp, &cf, &[]);
    let a = node(ap, &af, &[]);
    let b = node(bp, &bf, &[]);
    // Each its own keys: b holds key0..99 (changed on c while away), a key100..199.
    load(&a, 100..200, "old");
    load(&b, 0..100, "old");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    kill9(b);
    change_on(&c);
    // Both start at once; each asks the other, which is not listening yet
    // (it is asking too): the first to give up (the timeout) starts cold
    // and listens; the other, still asking, may then get its answer and
    // return warm. Either way nothing stale.
    let started = Instant::now();
    let args: Vec<String> =
        ["-o", peers.as_str(), "-o", "restart_margin=1", "-o", "restart_peer_timeout=800"].iter().map(|s| s.to_string()).collect();
    let (af2, bf2) = (af.arg().to_string(), bf.arg().to_string());
    let start = |port: u16, file: String| {
        let args = args.clone();
        std::thread::spawn(move || {
            let p = port.to_string();
            let mut all = vec!["-p", p.as_str(), "-l", "127.0.0.1", "-e", file.as_str(), "-m", "64"];
            all.extend(args.iter().map(String::as_str));
            Server::strata(&all)
        })
    };
    let (ta, tb) = (start(ap, af2), start(bp, bf2));
    let (a, b) = (ta.join().expect("a"), tb.join().expect("b"));
    assert!(started.elapsed() < Duration::from_secs(5), "the timeout bounds the wait");
    if Conn::to(&b).stat("restart_cold") == 1 {
        assert_cold(&b);
    } else {
        assert_warm(&b);
    }
    let mut ca = Conn::to(&a);
    let warm = ca.stat("restart_cold") == 0;
    for i in 100..200 {
        let want = warm.then(|| format!("old{i}").into_bytes());
        assert_eq!(ca.get(&format!("key{i}")), want, "key{i}: warm {warm}");
    }
}

/// Poll `stats` until the catch-up is over.
fn catchup_done(c: &mut Conn) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while c.stat("restart_catchup_active") == 1 {
        assert!(Instant::now() < deadline, "the catch-up did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_peer_restarting_during_the_catch_up_is_asked_again_when_back() {
    let (pf, nf) = (Files::new("cu-peer"), Files::new("cu-node"));
    let (pp, np) = (free_port(), free_port());
    let peer = node(pp, &pf, &[]);
    let a = node(np, &nf, &[]);
    load(&a, 0..100, "old");
    std::thread::sleep(Duration::from_millis(1100));
    kill9(a);
    change_on(&peer);
    let peers = format!("restart_peers=127.0.0.1:{pp}");
    let back = node(np, &nf, &["-o", &peers, "-o", "restart_margin=1", "-o", "restart_catchup=5"]);
    // The peer takes one more write for the node's keys, then restarts
    // (a rolling restart reaching it) while the node catches up.
    assert_eq!(Conn::to(&peer).set("key40", b"newer"), "STORED\r\n");
    std::thread::sleep(Duration::from_millis(300));
    stop(peer);
    std::thread::sleep(Duration::from_millis(300));
    let _peer = node(pp, &pf, &[]);
    let mut c = Conn::to(&back);
    catchup_done(&mut c);
    assert_eq!(c.stat("restart_cold"), 0);
    assert_eq!(c.get("key40"), None, "changed on the peer after the return");
    for i in 15..100 {
        if i != 40 {
            assert_eq!(c.get(&format!("key{i}")), Some(format!("old{i}").into_bytes()), "key{i}: the peer vouched again once back");
        }
    }
}
