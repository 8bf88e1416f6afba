//! Workers pinned one to a CPU take the connections whose packets arrive
//! on their CPU (strata-server `steer.rs`), within a balance bound; on
//! loopback a connection's packets arrive on its client's CPU.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::common::{allowed, listening, spawn_listening, stats_of, BIN};

/// The CPUs this test process may run on.
fn allowed_cpus() -> Vec<usize> {
    allowed("/proc/self/status")
}

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes in
    // bounds for a CPU the process may use; sched_setaffinity(0, ..) changes
    // the calling thread only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// `stats <group>`'s value of `name`, None when absent.
fn stat(s: &mut TcpStream, group: &str, name: &str) -> Option<String> {
    stats_of(s, group).into_iter().find_map(|(n, v)| (n == name).then_some(v))
}

/// Open `n` connections from a thread on `cpu`, each answered once (so the
/// server has taken it).
fn open_from(cpu: usize, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    std::thread::spawn(move || {
        pin_to(cpu);
        (0..n)
            .map(|_| {
                let mut s = connect(addr);
                s.write_all(b"mn\r\n").unwrap();
                let mut reply = [0u8; 4];
                s.read_exact(&mut reply).unwrap();
                assert_eq!(&reply, b"MN\r\n");
                s
            })
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
fn connections_go_to_the_worker_of_their_cpu_within_the_balance_bound() {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let (_child, addrs) = spawn_listening(&["-U", "0", "-t", "2", "-o", "pin_threads"], 1);
    let addr = addrs[0];
    // Worker 1 is pinned to the second allowed CPU. Three connections from
    // it are steered there; the fourth would put worker 1 three ahead of
    // worker 0, past the slack of two: it goes to worker 0.
    let mut conns = open_from(cpus[1], addr, 4);
    assert_eq!(stat(&mut conns[0], "", "steered_connections").as_deref(), Some("3"));
    // From worker 0's CPU: steered to it (it is behind).
    let mut more = open_from(cpus[0], addr, 3);
    assert_eq!(stat(&mut more[0], "", "steered_connections").as_deref(), Some("6"));
    assert_eq!(stat(&mut more[0], "settings", "pin_threads").as_deref(), Some("yes"));
    // Twenty more from one CPU (handed so far: 4 and 3): worker 1 takes
    // them while at most 2 + a quarter of worker 0's count ahead of it, so
    // 13 of them, worker 0 the other 7 (11 and 16 handed in all).
    let _burst = open_from(cpus[1], addr, 20);
    assert_eq!(stat(&mut more[0], "", "steered_connections").as_deref(), Some("19"));
    assert_eq!(stat(&mut more[0], "", "curr_connections").as_deref(), Some("27"));
}

#[test]
fn floating_workers_take_connections_in_turn_and_show_no_steering() {
    let (_child, addrs) = spawn_listening(&["-U", "0", "-t", "2", "-o", "no_pin_threads"], 1);
    let mut s = connect(addrs[0]);
    assert_eq!(stat(&mut s, "", "steered_connections"), None, "not shown while nothing is steered");
    assert_eq!(stat(&mut s, "settings", "pin_threads").as_deref(), Some("no"));
}

/// Without `-o pin_threads` or `no_pin_threads`: pinned exactly when the
/// process may use as many CPUs as it has workers.
#[test]
fn workers_are_pinned_on_their_own_when_the_cpus_match_the_threads() {
    if Command::new("taskset").arg("-V").stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
        eprintln!("skipped: no taskset");
        return;
    }
    let cpu = allowed_cpus()[0].to_string();
    for (threads, pinned) in [("1", "yes"), ("2", "no")] {
        let mut command = Command::new("taskset");
        command.args(["-c", &cpu, BIN, "-p", "-1", "-U", "0", "-t", threads, "-v"]);
        let (_child, addrs, lines) = listening(command, 1);
        std::thread::spawn(move || for _ in lines {});
        let mut s = connect(addrs[0]);
        assert_eq!(stat(&mut s, "settings", "pin_threads").as_deref(), Some(pinned), "-t {threads} on one CPU");
    }
}
