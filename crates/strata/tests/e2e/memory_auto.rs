//! `-m auto` in a memory cgroup the test creates (v1 or v2, whichever the
//! machine has; skipped with a message where cgroups cannot be created,
//! e.g. not root): Strata sizes itself below the cgroup's 512 MiB, is
//! filled, then a neighbour in the same cgroup allocates 200 MiB: with
//! `-m auto`, at once (`dd bs=200M`, a 200 MiB buffer filled from
//! /dev/zero at about 1 GB/s); with a fixed `-m 384 -o
//! memory_pressure_yield`, 10 MiB every 50 ms (python3). Strata's limit
//! must drop within 5 s, its RSS follow, nothing be OOM-killed, the
//! neighbour complete and Strata keep serving; with the neighbour gone the
//! limit grows back.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, Server, BIN};

const CGROUP_LIMIT_BYTES: u64 = 512 << 20;
/// The gradual neighbour (python3).
const NEIGHBOUR: &str = "import time\nheld = []\nfor _ in range(20):\n    held.append(b'\\x01' * (10 << 20))\n    time.sleep(0.05)\ntime.sleep(1.5)\n";

/// A memory cgroup made for the test, removed (after its processes) on drop.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn create(test: &str) -> Result<Cgroup, String> {
        if !common::is_root() {
            return Err("not root".into());
        }
        let name = format!("strata-{test}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), false)
        } else {
            let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                .iter()
                .map(Path::new)
                .find(|p| std::fs::read_to_string(p.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")))
                .ok_or("no memory cgroup hierarchy (v1 memory or v2 with the memory controller)")?;
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
            (root.join(&name), true)
        };
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = Cgroup { dir, v2 };
        let (file, value) = if v2 { ("memory.max", CGROUP_LIMIT_BYTES.to_string()) } else { ("memory.limit_in_bytes", CGROUP_LIMIT_BYTES.to_string()) };
        std::fs::write(cg.dir.join(file), value).map_err(|e| format!("cannot limit {}: {e}", cg.dir.display()))?;
        if !v2 {
            // No swap in the cgroup either, where the kernel has memsw.
            let _ = std::fs::write(cg.dir.join("memory.memsw.limit_in_bytes"), CGROUP_LIMIT_BYTES.to_string());
        }
        Ok(cg)
    }

    /// A command that joins this cgroup, then execs `program args`.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"", self.dir.display())).arg(program).args(args);
        cmd
    }

    fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v2 { ("memory.events", "oom_kill") } else { ("memory.oom_control", "oom_kill") };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn strata_in(cg: &Cgroup, memory: &[&str]) -> Server {
    let mut args = vec!["-p", "-1", "-v", "-U", "0", "-t", "2"];
    args.extend_from_slice(memory);
    let mut child = cg.command(BIN, &args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start strata");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr: SocketAddr = loop {
        let line = lines.next().expect("strata exited before listening").expect("log line");
        if let Some(addr) = line.strip_prefix("strata: listening on ") {
            break addr.parse().expect("address");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server { child: common::Reaped(child), addr }
}

fn stat_text(conn: &mut Conn, name: &str) -> String {
    stat_in(conn, "", name)
}

fn malloced(conn: &mut Conn) -> u64 {
    stat_in(conn, " slabs", "total_malloced").parse().unwrap()
}

fn stat_in(conn: &mut Conn, group: &str, name: &str) -> String {
    conn.stream.write_all(format!("stats{group}\r\n").as_bytes()).unwrap();
    let mut found = String::new();
    loop {
        let line = conn.line();
        if line == "END\r\n" {
            return found;
        }
        let mut parts = line.split_whitespace();
        if parts.nth(1) == Some(name) {
            found = parts.next().unwrap_or("").to_string();
        }
    }
}

/// Pipelined sets of `count` values of `len` bytes from key `first`.
fn fill(conn: &mut Conn, first: usize, count: usize, len: usize) {
    let value = vec![b'v'; len];
    for batch in (first..first + count).collect::<Vec<_>>().chunks(64) {
        let mut req = Vec::new();
        for i in batch {
            req.extend_from_slice(format!("set key:{i} 0 0 {len}\r\n").as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        conn.stream.write_all(&req).unwrap();
        for _ in batch {
            assert_eq!(conn.line(), "STORED\r\n");
        }
    }
}

#[test]
fn auto_limit_yields_to_a_neighbour_in_its_cgroup_and_grows_back() {
    let cg = match Cgroup::create("auto") {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("SKIPPED: -m auto cgroup test: {why}");
            return;
        }
    };
    let mut server = strata_in(&cg, &["-m", "auto"]);
    let mut conn = Conn::to(&server);
    let start = conn.stat("limit_maxbytes");
    assert!(start < CGROUP_LIMIT_BYTES * 7 / 8 && start > CGROUP_LIMIT_BYTES / 2, "sized below the cgroup: {start}");
    assert_eq!(stat_text(&mut conn, "memory_governor"), "auto");
    assert_eq!(stat_text(&mut conn, "memory_source"), if cg.v2 { "cgroup_v2" } else { "cgroup_v1" });
    assert_eq!(conn.stat("memory_cap_bytes"), CGROUP_LIMIT_BYTES);

    // Fill past the limit (16 KiB values).
    let len = 16 << 10;
    let count = (start as usize * 5 / 4) / len;
    fill(&mut conn, 0, count, len);
    assert!(conn.stat("evictions") > 0);
    let full = conn.stat("limit_maxbytes");
    assert!(malloced(&mut conn) > full * 3 / 4);

    let burst = ["if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"];
    let (dropped_after, low) = neighbour_comes(&cg, &mut server, &mut conn, full, ("dd", &burst));
    // Still serving, reads and writes.
    assert_eq!(conn.set("after", b"still here"), "STORED\r\n");
    assert_eq!(conn.get("after").as_deref(), Some(&b"still here"[..]));

    // With the neighbour gone, the limit grows back (slowly).
    let deadline = Instant::now() + Duration::from_secs(20);
    while conn.stat("limit_maxbytes") < low + (32 << 20) {
        assert!(Instant::now() < deadline, "limit never grew back from {low}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(stat_text(&mut conn, "memory_limit_last_reason"), "grow");
    assert!(conn.stat("memory_limit_grows") > 0);
    let grown = conn.stat("limit_maxbytes");
    // cache_memlimit keeps memcached's meaning: a fixed limit from then on.
    assert_eq!(conn_cmd(&mut conn, "cache_memlimit 100"), "OK\r\n");
    assert_eq!(conn.stat("limit_maxbytes"), 100 << 20);
    assert_eq!(stat_text(&mut conn, "memory_governor"), "fixed");
    assert_eq!(stat_text(&mut conn, "memory_limit_last_reason"), "cache_memlimit");
    eprintln!("-m auto in a 512 MiB cgroup: start {start}, full {full}, dropped within {dropped_after:?} to {low}, grew back to {grown}");
    let _ = server.child.kill();
    let _ = server.child.wait();
}

/// The neighbour allocates 200 MiB in the cgroup and exits: the limit must
/// drop within 5 s, memory follow, nothing be OOM-killed. Returns how long
/// the drop took and the limit after.
fn neighbour_comes(cg: &Cgroup, server: &mut Server, conn: &mut Conn, full: u64, (program, args): (&str, &[&str])) -> (Duration, u64) {
    let t0 = Instant::now();
    let mut neighbour = cg.command(program, args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start the neighbour");
    let mut dropped_after = None;
    while dropped_after.is_none() && t0.elapsed() < Duration::from_secs(5) {
        if conn.stat("limit_maxbytes") < full {
            dropped_after = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let dropped_after = dropped_after.unwrap_or_else(|| panic!("limit never dropped from {full} within 5 s"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = neighbour.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the neighbour never finished");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the neighbour failed: {status}");
    assert_eq!(cg.oom_kills(), 0, "nothing OOM-killed");
    assert!(server.child.try_wait().unwrap().is_none(), "strata still runs");
    let low = conn.stat("limit_maxbytes");
    assert!(low <= full - (100 << 20), "gave back room for the neighbour: {full} -> {low}");
    assert!(malloced(conn) <= low);
    assert!(server.rss_bytes() <= low + (64 << 20), "RSS {} follows the limit {low}", server.rss_bytes());
    assert!(conn.stat("memory_limit_shrinks") > 0 && conn.stat("memory_shed_bytes") > 0);
    let reason = stat_text(conn, "memory_limit_last_reason");
    assert!(["usage", "limit_events", "psi"].contains(&reason.as_str()), "{reason}");
    (dropped_after, low)
}

fn conn_cmd(conn: &mut Conn, cmd: &str) -> String {
    conn.stream.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
    conn.line()
}

#[test]
fn pressure_yield_gives_back_a_fixed_limit_and_returns_to_it() {
    let cg = match Cgroup::create("yield") {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("SKIPPED: memory_pressure_yield cgroup test: {why}");
            return;
        }
    };
    if Command::new("python3").arg("-c").arg("pass").status().map(|s| !s.success()).unwrap_or(true) {
        eprintln!("SKIPPED: memory_pressure_yield cgroup test: python3 (the neighbour) is not installed");
        return;
    }
    let fixed = 384u64 << 20;
    let mut server = strata_in(&cg, &["-m", "384", "-o", "memory_pressure_yield"]);
    let mut conn = Conn::to(&server);
    assert_eq!(conn.stat("limit_maxbytes"), fixed);
    assert_eq!(stat_text(&mut conn, "memory_governor"), "yield");
    let len = 16 << 10;
    fill(&mut conn, 0, (fixed as usize * 5 / 4) / len, len);
    assert_eq!(conn.stat("limit_maxbytes"), fixed, "no pressure while filling -m within the cgroup");
    let (dropped_after, low) = neighbour_comes(&cg, &mut server, &mut conn, fixed, ("python3", &["-c", NEIGHBOUR]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while conn.stat("limit_maxbytes") < low + (32 << 20) {
        assert!(Instant::now() < deadline, "limit never grew back from {low}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Never past -m, however calm.
    std::thread::sleep(Duration::from_secs(2));
    let grown = conn.stat("limit_maxbytes");
    assert!(grown <= fixed);
    assert_eq!(conn_cmd(&mut conn, "cache_memlimit 200"), "OK\r\n");
    assert_eq!(stat_text(&mut conn, "memory_governor"), "yield", "cache_memlimit sets the ceiling it yields from");
    assert_eq!(conn.stat("memory_limit_max_bytes"), 200 << 20);
    eprintln!("-m 384 -o memory_pressure_yield in a 512 MiB cgroup: dropped within {dropped_after:?} to {low}, grew back to {grown}");
}
