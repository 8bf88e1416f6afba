//! Shared by the binary's test files: start `strata` on ephemeral ports.

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
