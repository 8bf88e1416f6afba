//! Shared by the binary's test files: start `strata` on ephemeral ports.
//! (Each test file uses a part of it.)
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// Start strata with `-p 0 -v` plus `args` and read the first `count`
/// addresses it logs as bound, so parallel tests never race for a port.
/// The rest of its log is drained so it never blocks on a full pipe.
pub fn spawn_listening(args: &[&str], count: usize) -> (Child, Vec<SocketAddr>) {
    let mut child = Command::new(BIN)
        .args(["-p", "0", "-v"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start strata");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut addrs = Vec::new();
    while addrs.len() < count {
        let line = lines.next().expect("strata exited before listening").expect("log line");
        if let Some(addr) = line.strip_prefix("strata: listening on ") {
            addrs.push(addr.parse().expect("address in the log"));
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, addrs)
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Strata on an ephemeral TCP port, UDP off, with `args`.
    pub fn strata(args: &[&str]) -> Server {
        let mut all = vec!["-U", "0"];
        all.extend_from_slice(args);
        let (child, addrs) = spawn_listening(&all, 1);
        Server { child, addr: addrs[0] }
    }

    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("proc status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("VmRSS value") * 1024
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
