//! `-vv`: the request trace on stderr, compared line for line with Debian's
//! memcached 1.6.18 started with `-vv` for the same commands (file
//! descriptors masked: the two servers number their sockets differently;
//! start-up lines left out: memcached's slab classes and `server listening`
//! lines, Strata's `strata:` lines, docs/COMPATIBILITY.md); `verbosity N`
//! turns the trace off and on at run time and `stats settings` shows it.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A server whose stderr lines arrive on a channel.
struct Traced {
    child: Child,
    addr: SocketAddr,
    lines: Receiver<String>,
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn traced(mut cmd: Command, addr: Option<SocketAddr>) -> Traced {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start server");
    let stderr = BufReader::new(child.stderr.take().expect("stderr piped"));
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let addr = match addr {
        Some(addr) => addr,
        None => loop {
            let line = lines.recv_timeout(Duration::from_secs(10)).expect("strata logs its address");
            if let Some(addr) = line.strip_prefix("strata: listening on ") {
                break addr.parse().expect("address");
            }
        },
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "server at {addr} never accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The probe connections above are traced too: drain them.
    std::thread::sleep(Duration::from_millis(200));
    while lines.try_recv().is_ok() {}
    Traced { child, addr, lines }
}

fn strata(args: &[&str]) -> Traced {
    let mut cmd = Command::new(common::BIN);
    cmd.args(["-p", "-1", "-U", "0", "-l", "127.0.0.1", "-t", "1", "-v"]).args(args);
    traced(cmd, None)
}

fn memcached(args: &[&str]) -> Option<Traced> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let mut cmd = Command::new("memcached");
    cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1"]).args(args);
    if common::is_root() {
        cmd.args(["-u", "root"]);
    }
    Command::new("memcached").arg("-h").stdout(Stdio::null()).status().ok()?;
    Some(traced(cmd, Some(SocketAddr::from(([127, 0, 0, 1], port)))))
}

/// The commands of the comparison, `\r\n`-separated; a reply is awaited
/// after each line but the value lines.
const SCRIPT: &[&str] = &[
    "set a 0 0 1\r\nx",
    "get a",
    "get a b",
    "gets a",
    "get nope",
    "delete a",
    "delete a",
    "incr n 1",
    "set n 0 0 1 noreply\r\n5",
    "incr n 3",
    "decr n 1 noreply",
    "touch n 10",
    "add n 0 0 1\r\n1",
    "append n 0 0 1\r\n1",
    "bogus",
    "mg n v",
    "ms m 2\r\nhi",
    "mn",
    "delete nope noreply",
    "flush_all 0",
    "get n",
];

/// Run SCRIPT on one connection, close it, and return the trace lines with
/// file descriptors masked, up to the connection's `connection closed.`.
fn run(server: &Traced) -> Vec<String> {
    let mut conn = TcpStream::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    for cmd in SCRIPT {
        conn.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf); // a reply, or the timeout of a silent one
    }
    conn.write_all(b"quit\r\n").unwrap();
    drop(conn);
    let mut trace = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Ok(line) = server.lines.recv_timeout(Duration::from_millis(200)) else { continue };
        let masked = mask_fd(&line);
        let closed = masked == "<FD connection closed.";
        trace.push(masked);
        if closed {
            return trace;
        }
    }
    panic!("no `connection closed.` line; trace so far: {trace:#?}");
}

/// `<12 get a` -> `<FD get a`, `12: Client ...` -> `FD: Client ...`.
fn mask_fd(line: &str) -> String {
    let (prefix, rest) = match line.as_bytes().first() {
        Some(b'<' | b'>') => line.split_at(1),
        _ => ("", line),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return line.to_string();
    }
    format!("{prefix}FD{}", &rest[digits..])
}

#[test]
fn vv_trace_matches_memcached_1_6_18() {
    let Some(reference) = memcached(&["-vv"]) else {
        eprintln!("memcached not installed: comparison skipped");
        return;
    };
    let ours = strata(&["-vv"]);
    let want = run(&reference);
    let got = run(&ours);
    assert!(want.len() > SCRIPT.len(), "memcached printed a trace: {want:#?}");
    assert_eq!(got, want);
}

#[test]
fn vv_trace_lines() {
    let server = strata(&["-vv"]);
    let trace = run(&server);
    let expect = [
        "<FD new auto-negotiating client connection",
        "FD: Client using the ascii protocol",
        "<FD set a 0 0 1",
        ">FD STORED",
        "<FD get a",
        ">FD sending key a",
        ">FD END",
    ];
    assert_eq!(&trace[..expect.len()], &expect);
    assert!(trace.iter().any(|l| l == ">FD NOREPLY STORED"), "{trace:#?}");
    assert!(trace.iter().any(|l| l == ">FD NOREPLY 7"), "{trace:#?}");
    assert!(trace.iter().any(|l| l == "<FD mg n v"), "{trace:#?}");
}

fn stat_verbosity(conn: &mut TcpStream) -> String {
    conn.write_all(b"stats settings\r\n").unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut found = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return found;
        }
        if let Some(v) = line.strip_prefix("STAT verbosity ") {
            found = v.trim_end().to_string();
        }
    }
}

fn reply(conn: &mut TcpStream, cmd: &str) -> String {
    conn.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

#[test]
fn verbosity_command_turns_the_trace_off_and_on() {
    let server = strata(&[]);
    let mut conn = TcpStream::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(stat_verbosity(&mut conn), "1"); // `-v` from strata()
    assert!(reply(&mut conn, "version").starts_with("VERSION "));
    assert_eq!(reply(&mut conn, "verbosity 2"), "OK\r\n");
    assert_eq!(stat_verbosity(&mut conn), "2");
    assert_eq!(reply(&mut conn, "get traced_key"), "END\r\n");
    // memcached prints `verbosity 1` itself but not its reply.
    assert_eq!(reply(&mut conn, "verbosity 1"), "OK\r\n");
    assert_eq!(reply(&mut conn, "get untraced_key"), "END\r\n");
    assert_eq!(reply(&mut conn, "verbosity 9"), "OK\r\n");
    assert_eq!(stat_verbosity(&mut conn), "2", "clamped to memcached's maximum");
    assert_eq!(reply(&mut conn, "verbosity 0"), "OK\r\n");
    assert_eq!(stat_verbosity(&mut conn), "0");
    let mut trace = Vec::new();
    while let Ok(line) = server.lines.recv_timeout(Duration::from_millis(500)) {
        trace.push(mask_fd(&line));
    }
    let want = ["<FD get traced_key", ">FD END", "<FD verbosity 1", "<FD verbosity 0"];
    assert_eq!(trace.iter().filter(|l| !l.contains("stats settings")).cloned().collect::<Vec<_>>(), want);
    assert!(!trace.iter().any(|l| l.contains("untraced")), "{trace:#?}");
}

#[test]
fn vvv_traces_requests_as_vv() {
    let server = strata(&["-vvv"]);
    let mut conn = TcpStream::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(stat_verbosity(&mut conn), "4"); // -v from strata() plus -vvv
    assert_eq!(reply(&mut conn, "get k3"), "END\r\n");
    let mut trace = Vec::new();
    while let Ok(line) = server.lines.recv_timeout(Duration::from_millis(500)) {
        trace.push(mask_fd(&line));
    }
    assert!(trace.ends_with(&["<FD get k3".to_string(), ">FD END".to_string()]), "{trace:#?}");
}

#[test]
fn vv_traces_udp_requests() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cmd = Command::new(common::BIN);
    // `strata()` with UDP on: `-U` last wins.
    cmd.args(["-p", "-1", "-l", "127.0.0.1", "-t", "1", "-v", "-vv", "-U", &port.to_string()]);
    let server = traced(cmd, None);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for (id, req) in ["set u 0 0 1\r\nx\r\n", "get u\r\n", "bogus\r\n"].iter().enumerate() {
        let mut datagram = vec![0, id as u8, 0, 0, 0, 1, 0, 0];
        datagram.extend_from_slice(req.as_bytes());
        socket.send_to(&datagram, ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 2048];
        socket.recv(&mut buf).expect("a reply datagram");
    }
    let mut trace = Vec::new();
    while let Ok(line) = server.lines.recv_timeout(Duration::from_millis(500)) {
        trace.push(mask_fd(&line));
    }
    // As memcached 1.6.18 -vv printed them (with its UDP socket's fd).
    let want = ["<FD set u 0 0 1", ">FD STORED", "<FD get u", ">FD sending key u", ">FD END", "<FD bogus", ">FD ERROR"];
    assert_eq!(trace, want);
}
