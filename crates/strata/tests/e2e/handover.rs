//! Socket handover on the wire (`-o handover=PATH`, docs/SCALE-OUT.md): a
//! second process started with the same flags takes the running one's
//! listener and open connections over. A client connected throughout keeps
//! its connection (a request split across the handover completes), new
//! connections made meanwhile are never refused, no item is lost (the old
//! process writes the memory file back first) and the invalidation journal
//! goes on where it was.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

use crate::common::Reaped as Proc;

/// The first process on a free port (`port` None: read from its log), or
/// the next one on the same port.
fn start(port: Option<u16>, dir: &Dir, engine: &str) -> (Proc, u16) {
    let (mem, ctl) = (dir.0.join("cache.mem"), dir.0.join("control.sock"));
    let mut args = vec!["-l", "127.0.0.1", "-U", "0", "-t", "2", "-m", "64"];
    let (mem, ctl) = (mem.to_str().expect("utf-8"), format!("handover={}", ctl.to_str().expect("utf-8")));
    let engine = format!("io_engine={engine}");
    args.extend(["-e", mem, "-o", &ctl, "-o", &engine]);
    if common::is_root() {
        args.extend(["-u", "root"]);
    }
    let p = port.map_or("-1".to_string(), |p| p.to_string());
    // The engine asked for, not scripts/test's STRATA_IO_ENGINE.
    let mut child = Command::new(common::BIN)
        .args(["-p", &p, "-v"])
        .args(&args)
        .env_remove("STRATA_IO_ENGINE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start strata");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let port = match port {
        Some(port) => port,
        // -p -1: the port it bound, from its log.
        None => loop {
            let line = lines.next().expect("strata exited before listening").expect("log line");
            if let Some(addr) = line.strip_prefix("strata: listening on ") {
                break addr.parse::<SocketAddr>().expect("address in the log").port();
            }
        },
    };
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), port)
}

fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
                let r = BufReader::new(s.try_clone().expect("clone"));
                return (s, r);
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("strata never listened: {e}"),
        }
    }
}

fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).expect("read");
    l
}

/// The value of `key` on this connection (None: a miss).
fn get(w: &mut TcpStream, r: &mut BufReader<TcpStream>, key: &str) -> Option<Vec<u8>> {
    w.write_all(format!("get {key}\r\n").as_bytes()).expect("send");
    let header = line(r);
    if header == "END\r\n" {
        return None;
    }
    let len: usize = header.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{header:?}"));
    let mut value = vec![0u8; len + 2];
    r.read_exact(&mut value).expect("value");
    assert_eq!(line(r), "END\r\n");
    value.truncate(len);
    Some(value)
}

fn stat(w: &mut TcpStream, r: &mut BufReader<TcpStream>, name: &str) -> u64 {
    stat_of(w, r, "", name)
}

/// A number from `stats` (`group`: `stats <group>`).
fn stat_of(w: &mut TcpStream, r: &mut BufReader<TcpStream>, group: &str, name: &str) -> u64 {
    let command = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
    w.write_all(command.as_bytes()).expect("send");
    let mut found = None;
    loop {
        let l = line(r);
        if l == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no stat {name}"));
        }
        let mut parts = l.split_whitespace();
        if parts.nth(1) == Some(name) {
            found = parts.next().and_then(|v| v.parse().ok());
        }
    }
}

fn hand_over(engine: &str) {
    let dir = Dir(std::env::temp_dir().join(format!("strata-handover-{}-{engine}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let (mut old, port) = start(None, &dir, engine);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (mut w, mut r) = connect(addr);
    for i in 0..200 {
        w.write_all(format!("set k{i} 0 0 {}\r\nvalue-{i}\r\n", format!("value-{i}").len()).as_bytes()).expect("send");
        assert_eq!(line(&mut r), "STORED\r\n");
    }
    let old_pid = stat(&mut w, &mut r, "pid");
    let recorded = stat_of(&mut w, &mut r, "journal", "journal_recorded");
    let covers_from = stat_of(&mut w, &mut r, "journal", "journal_covers_from");
    assert!(recorded >= 200, "{recorded} changes journaled");

    // New connections all through the handover: each must be answered.
    let stop = Arc::new(AtomicBool::new(false));
    let (made, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let prober = {
        let (stop, made, failed) = (stop.clone(), made.clone(), failed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ok = TcpStream::connect(addr).ok().and_then(|mut s| {
                    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
                    let mut r = BufReader::new(s.try_clone().ok()?);
                    s.write_all(b"get k7\r\n").ok()?;
                    let mut reply = String::new();
                    while !reply.ends_with("END\r\n") {
                        (r.read_line(&mut reply).ok()? > 0).then_some(())?;
                    }
                    (reply == "VALUE k7 0 7\r\nvalue-7\r\nEND\r\n").then_some(())
                });
                made.fetch_add(1, Ordering::Relaxed);
                if ok.is_none() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    // Half a request: the rest goes to whichever process then serves.
    w.write_all(b"set split 0 0 5\r\nab").expect("send");
    std::thread::sleep(Duration::from_millis(50));

    let (mut new, _) = start(Some(port), &dir, engine);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = old.0.try_wait().expect("old process") {
            break status;
        }
        if let Some(status) = new.0.try_wait().expect("new process") {
            panic!("the new process exited ({status}) instead of taking over");
        }
        assert!(Instant::now() < deadline, "the old process did not hand over");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(status.success(), "the old process exits 0 after handing over: {status}");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    prober.join().expect("prober");

    w.write_all(b"cde\r\n").expect("send");
    assert_eq!(line(&mut r), "STORED\r\n", "the split request completes on the same connection");
    assert_eq!(stat(&mut w, &mut r, "pid"), u64::from(new.0.id()), "served by the new process now");
    assert_ne!(old_pid, u64::from(new.0.id()));
    for i in 0..200 {
        assert_eq!(get(&mut w, &mut r, &format!("k{i}")), Some(format!("value-{i}").into_bytes()), "k{i} after the handover");
    }
    assert_eq!(get(&mut w, &mut r, "split"), Some(b"abcde".to_vec()));
    // The journal went on: the old process's changes, then the split set.
    assert_eq!(stat_of(&mut w, &mut r, "journal", "journal_recorded"), recorded + 1);
    assert_eq!(stat_of(&mut w, &mut r, "journal", "journal_covers_from"), covers_from);
    let (made, failed) = (made.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(made > 0, "the prober ran");
    assert_eq!(failed, 0, "{failed} of {made} new connections failed during the handover");
}

#[test]
fn a_restart_takes_the_listener_and_connections_over_on_epoll() {
    hand_over("epoll");
}

#[test]
fn a_restart_takes_the_listener_and_connections_over_on_io_uring_where_the_kernel_allows() {
    hand_over("auto");
}

#[test]
fn handover_with_a_unix_socket_is_refused() {
    let out = Command::new(common::BIN)
        .args(["-s", "/tmp/strata-handover-refused.sock", "-o", "handover=/tmp/strata-handover-refused.ctl"])
        .output()
        .expect("run strata");
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("handover: only TCP listeners"));
}
