//! `-e FILE` on the wire: the cache survives a graceful stop (SIGUSR1, and
//! `shutdown graceful` with `-A`) and `kill -9` during a write load, with
//! values, flags and CAS unchanged and TTLs counted across the downtime;
//! a damaged or incompatible file never yields a wrong value.

use crate::common;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, Server, BIN};

struct MemFile(PathBuf);

impl MemFile {
    fn new(name: &str) -> MemFile {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("strata-wire-{}-{name}.mem", std::process::id()));
        let _ = std::fs::remove_file(&path);
        MemFile(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        // The invalidation journal kept beside it (left in /dev/shm before).
        let mut journal = self.0.clone().into_os_string();
        journal.push(".journal");
        let _ = std::fs::remove_file(journal);
    }
}

fn signal(server: &Server, name: &str) {
    let ok = Command::new("kill").args([name, &server.child.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill {name}");
}

/// Wait for a stopped server's exit code.
fn exit_code(mut server: Server) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn value(i: usize, version: usize) -> Vec<u8> {
    let len = match i % 100 {
        0 => 20_000 + (i * 37) % 80_000,
        1..=9 => 1000 + i % 3000,
        _ => 10 + (i * 13) % 400,
    };
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn load(conn: &mut Conn, n: usize) {
    let mut req = Vec::new();
    for i in 0..n {
        // Every 10th item lives 4 seconds (time enough to load and read back 100,000 items on a busy 2-core machine); others forever or an hour.
        let ttl = match i % 10 {
            0 => 4,
            1..=4 => 3600,
            _ => 0,
        };
        let v = value(i, 0);
        req.extend_from_slice(format!("set key:{i} {} {ttl} {} noreply\r\n", i % 1000, v.len()).as_bytes());
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        if req.len() > 1 << 20 || i + 1 == n {
            req.extend_from_slice(b"mn\r\n");
            conn.stream.write_all(&req).unwrap();
            assert_eq!(conn.line(), "MN\r\n");
            req.clear();
        }
    }
}

fn graceful_restart(n: usize, stop: impl Fn(&Server)) {
    let file = MemFile::new(&format!("graceful-{n}"));
    let args = ["-m", "256", "-A", "-e", file.arg()];
    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    load(&mut conn, n);
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
    let before = conn.gets_many(&keys);
    assert_eq!(before.len(), n);
    stop(&server);
    assert_eq!(exit_code(server), Some(0));
    std::thread::sleep(Duration::from_millis(4500));

    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    let after = conn.gets_many(&keys);
    for (i, key) in keys.iter().enumerate() {
        if i % 10 == 0 {
            assert!(!after.contains_key(key), "{key} outlived its 4 s TTL");
        } else {
            assert_eq!(after.get(key), before.get(key), "{key}");
        }
    }
    assert_eq!(conn.stat("restart_ok"), 1);
    assert_eq!(conn.stat("restart_clean"), 1);
    assert_eq!(conn.stat("restart_damaged"), 0);
    assert_eq!(conn.stat("restart_items"), (n - n / 10) as u64);
    assert_eq!(conn.stat("curr_items"), (n - n / 10) as u64);
    // New CAS values go on past the old ones.
    conn.set("new", b"x");
    let (_, _, cas) = conn.gets("new").unwrap();
    assert!(before.values().all(|v| v.2 < cas));
}

#[test]
fn sigusr1_keeps_100000_items_of_mixed_sizes_and_ttls() {
    graceful_restart(100_000, |server| signal(server, "-USR1"));
}

#[test]
fn shutdown_graceful_keeps_the_cache() {
    graceful_restart(2000, |server| {
        let mut conn = Conn::to(server);
        conn.stream.write_all(b"shutdown graceful\r\n").unwrap();
    });
}

/// A restart that does not wait for the old process to exit (a script's
/// `kill -INT; start`, memcached's t/restart.t): the old one is still
/// flushing a client that does not read (up to 2 s) and holds the file's
/// lock; the new one waits for it and gets the cache.
#[test]
fn a_start_while_the_last_server_stops_waits_for_the_file() {
    let file = MemFile::new("handover");
    let args = ["-m", "64", "-e", file.arg()];
    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    assert_eq!(conn.set("kept", b"value"), "STORED\r\n");
    let big = vec![b'x'; 100_000];
    assert_eq!(conn.set("big", &big), "STORED\r\n");
    // ~40 MB of replies nobody reads: the stopping server's flush waits.
    let stuck = Conn::to(&server);
    let mut req = b"get".to_vec();
    for _ in 0..400 {
        req.extend_from_slice(b" big");
    }
    req.extend_from_slice(b"\r\n");
    (&stuck.stream).write_all(&req).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    signal(&server, "-INT");
    let started = Instant::now();
    let next = Server::strata(&args);
    let waited = started.elapsed();
    assert_eq!(exit_code(server), Some(0));
    let mut conn = Conn::to(&next);
    assert_eq!(conn.get("kept").as_deref(), Some(&b"value"[..]), "started after {waited:?}");
    assert_eq!(conn.stat("restart_clean"), 1);
    drop(stuck);
}

#[test]
fn kill_9_during_writes_loses_no_acknowledged_value() {
    let file = MemFile::new("crash");
    let args = ["-m", "256", "-e", file.arg()];
    let server = Server::strata(&args);
    let pid = server.child.id();
    const KEYS: usize = 20_000;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    });
    // Versions per key: acknowledged (STORED read back) and sent.
    let mut acked = vec![None::<usize>; KEYS];
    let mut sent: Vec<Vec<usize>> = vec![Vec::new(); KEYS];
    let mut conn = Conn::to(&server);
    let mut version = 0;
    'load: loop {
        let batch: Vec<usize> = (0..100).map(|j| (version * 7919 + j * 131) % KEYS).collect();
        let mut req = Vec::new();
        for &i in &batch {
            let v = value(i, version);
            req.extend_from_slice(format!("set key:{i} 0 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
            sent[i].push(version);
        }
        if conn.stream.write_all(&req).is_err() {
            break;
        }
        for &i in &batch {
            let mut line = String::new();
            match conn.reader.read_line(&mut line) {
                Ok(n) if n > 0 && line == "STORED\r\n" => acked[i] = Some(version),
                _ => break 'load,
            }
        }
        version += 1;
    }
    killer.join().unwrap();
    let _ = exit_code(server);
    assert!(version > 10, "the load ran ({version} batches)");

    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i}")).collect();
    let back = conn.gets_many(&keys);
    let mut acked_back = 0;
    for i in 0..KEYS {
        let got = back.get(&keys[i]).map(|(v, _, _)| v.clone());
        match (acked[i], got) {
            (Some(a), Some(v)) => {
                // The last acknowledged version, or one sent after it.
                let ok = sent[i].iter().any(|&s| s >= a && value(i, s) == v);
                assert!(ok, "key:{i}: acknowledged version {a}, got {:?}", String::from_utf8_lossy(&v[..20.min(v.len())]));
                acked_back += 1;
            }
            (Some(a), None) => panic!("key:{i}: acknowledged version {a} lost"),
            (None, Some(v)) => assert!(sent[i].iter().any(|&s| value(i, s) == v), "key:{i}: a value never written"),
            (None, None) => {}
        }
    }
    assert!(acked_back > 0);
    assert_eq!(conn.stat("restart_clean"), 0);
    assert_eq!(conn.stat("restart_ok"), 1);
}

#[test]
fn damaged_or_incompatible_files_never_serve_a_wrong_value() {
    let file = MemFile::new("damaged");
    let args = ["-m", "64", "-e", file.arg()];
    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    load(&mut conn, 5000);
    let keys: Vec<String> = (0..5000).map(|i| format!("key:{i}")).collect();
    let before = conn.gets_many(&keys);
    signal(&server, "-TERM");
    assert_eq!(exit_code(server), Some(0));

    // Flip a byte every 64 KiB + 1 (items, directory entries, headers).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&file.0).unwrap();
        let len = f.metadata().unwrap().len();
        for at in (4096 + 1000..len).step_by(65537) {
            let mut b = [0u8];
            f.read_exact_at(&mut b, at).unwrap();
            f.write_all_at(&[!b[0]], at).unwrap();
        }
    }
    let server = Server::strata(&args);
    let mut conn = Conn::to(&server);
    let after = conn.gets_many(&keys);
    for (key, got) in &after {
        assert_eq!(Some(got), before.get(key), "{key}");
    }
    assert!(after.len() < before.len(), "some items were damaged");
    assert!(conn.stat("restart_damaged") > 0);
    drop(conn);
    drop(server);

    // Other settings: strict refuses with a clear line; otherwise a cold start.
    let out = Command::new(BIN)
        .args(["-p", "-1", "-U", "0", "-m", "128", "-e", file.arg(), "-o", "restart_strict"])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("made with other settings"), "{log}");
    let server = Server::strata(&["-m", "128", "-e", file.arg()]);
    let mut conn = Conn::to(&server);
    assert_eq!(conn.stat("restart_ok"), 0);
    assert_eq!(conn.stat("curr_items"), 0);
}
