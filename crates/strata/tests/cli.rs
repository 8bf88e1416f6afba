//! The `strata` binary as a user runs it: flags, exit codes, signals, unix
//! sockets, IPv6 and idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{spawn_listening, BIN};

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// Start strata on an ephemeral port (`-p 0 -v`) and read the address it
/// bound from its log, so parallel tests never race for a port.
fn spawn_on_free_port(args: &[&str]) -> (Child, SocketAddr) {
    let (child, addrs) = spawn_listening(args, 1);
    (child, addrs[0])
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
    let (mut child, addr) = spawn_on_free_port(&["-t", "2"]);
    let mut stream = connect(addr);
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
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    if !v6 {
        eprintln!("no IPv6 loopback on this machine; checking two IPv4 addresses instead");
    }
    let listen = if v6 { "127.0.0.1,::1" } else { "127.0.0.1,127.0.0.2" };
    let (mut child, addrs) = spawn_listening(&["-l", listen], 2);
    assert_eq!(addrs[1].is_ipv6(), v6);
    for addr in addrs {
        let mut stream = connect(addr);
        assert_eq!(roundtrip(&mut stream, b"mn\r\n", 4), b"MN\r\n", "{addr}");
    }
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn idle_connections_are_closed() {
    let (mut child, addr) = spawn_on_free_port(&["-o", "idle_timeout=1"]);
    let mut stream = connect(addr);
    assert_eq!(roundtrip(&mut stream, b"mn\r\n", 4), b"MN\r\n");
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = stream.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server closed the idle connection");
    assert!(started.elapsed() < Duration::from_secs(8));
    child.kill().unwrap();
    let _ = child.wait();
}

fn read_available(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn text_authentication_and_sighup_reload() {
    let dir = std::env::temp_dir().join(format!("strata-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("auth");
    std::fs::write(&file, "alice:secret\n").unwrap();
    let (mut child, addr) = spawn_on_free_port(&["-Y", file.to_str().unwrap()]);
    let mut s = connect(addr);
    s.write_all(b"get a\r\nset x 0 0 10\r\nalice nope\r\nset x 0 0 5\r\nalice\r\n").unwrap();
    assert_eq!(
        read_available(&mut s),
        b"CLIENT_ERROR unauthenticated\r\nCLIENT_ERROR authentication failure\r\nCLIENT_ERROR bad authentication token format\r\n"
    );
    s.write_all(b"set x 0 0 12 noreply\r\nalice secret\r\nset k 0 0 1\r\nv\r\nget k\r\n").unwrap();
    assert_eq!(read_available(&mut s), b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");

    std::fs::write(&file, "bob:pw\n").unwrap();
    assert!(Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    let mut s = connect(addr);
    s.write_all(b"set x 0 0 12\r\nalice secret\r\nset x 0 0 6\r\nbob pw\r\n").unwrap();
    assert_eq!(read_available(&mut s), b"CLIENT_ERROR authentication failure\r\nSTORED\r\n");
    child.kill().unwrap();
    let _ = child.wait();
}

fn binary(opcode: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&[0; 12]);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// (opcode, status, body) of each binary response.
fn responses(mut data: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
    let mut out = Vec::new();
    while data.len() >= 24 {
        let body = u32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        out.push((data[1], u16::from_be_bytes([data[6], data[7]]), data[24..24 + body].to_vec()));
        data = &data[24 + body..];
    }
    out
}

#[test]
fn sasl_plain_over_binary() {
    let dir = std::env::temp_dir().join(format!("strata-sasl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("pwdb");
    std::fs::write(&db, "user1:pass1\n").unwrap();
    let (mut child, addr) = spawn_on_free_port(&["-S", "-o", &format!("sasl_pwdb={}", db.display())]);
    let mut s = connect(addr);
    s.write_all(&binary(0x00, b"k", b"")).unwrap();
    let got = responses(&read_available(&mut s));
    assert_eq!(got, vec![(0x00, 0x20, b"Auth failure.".to_vec())], "unauthenticated GET is refused and closed");

    let mut s = connect(addr);
    let mut req = binary(0x20, b"", b"");
    req.extend(binary(0x21, b"PLAIN", b"\0user1\0wrong"));
    req.extend(binary(0x21, b"PLAIN", b"\0user1\0pass1"));
    req.extend(binary(0x0a, b"", b""));
    s.write_all(&req).unwrap();
    let got = responses(&read_available(&mut s));
    assert_eq!(
        got,
        vec![
            (0x20, 0, b"PLAIN".to_vec()),
            (0x21, 0x20, b"Auth failure.".to_vec()),
            (0x21, 0, b"Authenticated".to_vec()),
            (0x0a, 0, Vec::new()),
        ]
    );
    let out = Command::new(BIN).args(["-S", "-B", "ascii"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "SASL refuses the ascii protocol");
    child.kill().unwrap();
    let _ = child.wait();
}

/// CPUs in a `Cpus_allowed_list` value such as "0-2,5".
fn cpu_list(list: &str) -> Vec<usize> {
    list.trim()
        .split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()).collect::<Vec<_>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

fn allowed(status_path: &str) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).unwrap();
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    cpu_list(line.split(':').nth(1).unwrap())
}

#[test]
fn pin_threads_puts_each_worker_on_its_own_cpu() {
    let (mut child, _) = spawn_listening(&["-t", "3", "-o", "pin_threads"], 1);
    let pid = child.id();
    let cpus = allowed(&format!("/proc/{pid}/status"));
    // A worker pins itself as its thread starts: give the threads a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen;
    loop {
        seen = 0;
        let mut wrong = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if let Some(n) = name.trim().strip_prefix("strata-worker-") {
                let n: usize = n.parse().unwrap();
                let mine = allowed(task.join("status").to_str().unwrap());
                if mine != vec![cpus[n % cpus.len()]] {
                    wrong.push((n, mine));
                }
                seen += 1;
            }
        }
        if wrong.is_empty() && seen == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "workers not pinned: {wrong:?} ({seen} seen)");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen, 3);
    let _ = child.kill();
    let _ = child.wait();
}
