//! The `strata` binary as a user runs it: flags, exit codes, signals, unix
//! sockets, IPv6 and idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("could not connect to {addr}: {e}"),
        }
    }
}

fn roundtrip(stream: &mut impl ReadWrite, request: &[u8], reply_len: usize) -> Vec<u8> {
    stream.write_all(request).unwrap();
    let mut reply = vec![0u8; reply_len];
    stream.read_exact(&mut reply).unwrap();
    reply
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

#[test]
fn help_lists_every_memcached_flag() {
    let out = Command::new(BIN).arg("-h").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["-p", "-U", "-s", "-a", "-l", "-d", "-u", "-P", "-m", "-M", "-c", "-t", "-R", "-C", "-b", "-I", "-A", "-F", "-B", "-v", "-V", "-h", "-o"] {
        assert!(help.contains(&format!("{flag}, ")), "help lacks {flag}:\n{help}");
    }
    let version = Command::new(BIN).arg("-V").output().unwrap();
    assert!(version.status.success());
}

#[test]
fn bad_flags_exit_with_code_2() {
    for args in [&["-x"][..], &["-p", "http"], &["-o", "nonsense"], &["-o", "idle_timeout=soon"], &["-I", "5g"], &["-U", "notaport"], &["-B", "morse"]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} printed no message");
    }
}

#[test]
fn sigterm_answers_and_exits_zero() {
    let port = free_port();
    let mut child = spawn(&["-p", &port.to_string(), "-t", "2"]);
    let mut stream = connect(SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(roundtrip(&mut stream, b"set k 0 0 1\r\nx\r\n", 8), b"STORED\r\n");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0));
}

#[test]
fn unix_socket_with_mask() {
    let dir = std::env::temp_dir().join(format!("strata-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("strata.sock");
    let mut child = spawn(&["-s", path.to_str().unwrap(), "-a", "600"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    };
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(roundtrip(&mut stream, b"mn\r\n", 4), b"MN\r\n");
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0));
    assert!(!path.exists(), "the socket file is removed on exit");
}

#[test]
fn ipv6_and_several_listen_addresses() {
    let port = free_port();
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    if !v6 {
        eprintln!("no IPv6 loopback on this machine; checking two IPv4 addresses instead");
    }
    let listen = if v6 { "127.0.0.1,::1" } else { "127.0.0.1,127.0.0.2" };
    let mut child = spawn(&["-p", &port.to_string(), "-l", listen]);
    let second: SocketAddr = if v6 { format!("[::1]:{port}") } else { format!("127.0.0.2:{port}") }.parse().unwrap();
    for addr in [SocketAddr::from(([127, 0, 0, 1], port)), second] {
        let mut stream = connect(addr);
        assert_eq!(roundtrip(&mut stream, b"mn\r\n", 4), b"MN\r\n", "{addr}");
    }
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn idle_connections_are_closed() {
    let port = free_port();
    let mut child = spawn(&["-p", &port.to_string(), "-o", "idle_timeout=1"]);
    let mut stream = connect(SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(roundtrip(&mut stream, b"mn\r\n", 4), b"MN\r\n");
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = stream.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server closed the idle connection");
    assert!(started.elapsed() < Duration::from_secs(8));
    child.kill().unwrap();
    let _ = child.wait();
}
