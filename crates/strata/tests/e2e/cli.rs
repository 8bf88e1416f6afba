//! The `strata` binary as a user runs it: flags, exit codes, signals, unix
//! sockets, IPv6 and idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{allowed, spawn_listening, stats_of, Reaped, BIN};

fn spawn(args: &[&str]) -> Reaped {
    Reaped(Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
}

/// Start strata on an ephemeral port (`-p -1 -v`) and read the address it
/// bound from its log, so parallel tests never race for a port.
fn spawn_on_free_port(args: &[&str]) -> (Reaped, SocketAddr) {
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
    for flag in [
        "-p", "-U", "-s", "-a", "-A", "-l", "-d", "-r", "-u", "-m", "-M", "-c", "-k", "-v", "-h", "-i", "-V", "-P", "-f",
        "-n", "-L", "-t", "-R", "-C", "-b", "-B", "-I", "-S", "-F", "-X", "-W", "-Y", "-e", "-Z", "-o", "-N",
    ] {
        assert!(help.contains(&format!("{flag}, ")), "help lacks {flag}:\n{help}");
    }
    assert!(help.contains("-D <char>"));
    for args in [&["-V"][..], &["--version"], &["-i"], &["--license"]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("strata "), "{args:?}");
    }
    let license = Command::new(BIN).arg("-i").output().unwrap();
    assert!(String::from_utf8_lossy(&license.stdout).contains("Redistribution and use in source and binary forms"));
}

/// A refused command line: memcached's exit code (1 while reading flags,
/// 64 for EX_USAGE after) and its message.
#[test]
fn bad_flags_exit_with_memcached_codes() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&["-x"], 1, "invalid option -- 'x'"),
        (&["--bogus"], 1, "unrecognized option '--bogus'"),
        (&["-p", "http"], 1, "Invalid port 'http' for -p"),
        (&["-U", "notaport"], 1, "Invalid port 'notaport' for -U"),
        (&["-p", "70000"], 64, "ERROR: Invalid port number 70000."),
        (&["-o", "nonsense"], 1, "Illegal suboption \"nonsense\""),
        (&["-o", "idle_timeout=soon"], 1, "could not parse argument to idle_timeout"),
        (&["-I", "5g"], 64, "Cannot set item size limit higher than 1/2 of memory max."),
        (&["-B", "morse"], 64, "Invalid value for binding protocol: morse"),
        (&["-f", "1"], 1, "Factor must be greater than 1"),
        (&["--slab-growth-factor=0.5"], 1, "Factor must be greater than 1"),
        (&["-n", "-3"], 1, "Chunk size must be greater than 0"),
        (&["-c", "0"], 1, "Maximum connections must be greater than 0"),
        (&["-t", "0"], 1, "Number of threads must be greater than 0"),
        (&["-R", "0"], 1, "Number of requests per event must be greater than 0"),
        (&["--napi-ids=0"], 1, "Maximum number of NAPI IDs must be greater than 0"),
        (&["-Z"], 64, "ssl_chain_cert is required with -Z"),
        (&["--enable-ssl", "-o", "ssl_min_version=1"], 64, "tlsv1.1 is not offered by Strata"),
        (&["-Z", "-o", "ssl_chain_cert=/nonexistent/strata.pem"], 64, "Error loading the certificate chain: /nonexistent/strata.pem"),
        (&["-o", "ssl_verify_mode=x"], 1, "could not parse argument to ssl_verify_mode"),
        (&["-o", "proxy_config=/x"], 1, "the proxy is not part of Strata"),
        (&["-o", "ext_path=/x:64k"], 1, "failed to parse ext_path argument"),
        (&["-o", "ext_threads=x"], 1, "could not parse argument to ext_threads"),
        (&["-U", "7", "-o", "ext_path=/x:64m"], 64, "Cannot use UDP with extstore enabled (-U 0 to disable)"),
        (&["-o", "ext_page_size=3,ext_path=/x:64m"], 1, "Failed to initialize external storage: page_size must be divisible by wbuf_size"),
        (&["-o", "ext_path=/nonexistent/strata/flash:64m"], 2, "ext_path /nonexistent/strata/flash: cannot open it for reading and writing"),
        (&["-o", "ext_path=/proc/version:64m"], 2, "ext_path /proc/version: "),
        (&["-o", "slab_chunk_max=2048"], 1, "slab_chunk_max must be specified in kilobytes."),
        (&["-o", "slab_sizes=200-100"], 64, "slab size 100 cannot be lower than or equal to a previous class size"),
        (&["-o", "slab_automove_window=9999"], 1, "slab_automove_window must be > 2 and < 1800"),
        (&["-o", "lru_crawler_sleep=-1"], 1, "LRU crawler sleep must be between 0 and 1 second"),
        (&["-o", "hashpower=64"], 1, "Initial hashtable multiplier of 64 is too high"),
        (&["-S", "-B", "ascii"], 64, "ERROR: You cannot allow the ASCII protocol while using SASL."),
    ];
    for (args, code, message) in cases {
        let out = Command::new(BIN).args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(*code), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?} printed {stderr:?}, not {message:?}");
    }
}

/// Whether the kernel offers transparent huge pages (`-L` needs them).
fn huge_pages_offered() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|m| !m.contains("[never]"))
}

/// Every flag and `-o` option of memcached 1.6.45 that starts a server
/// starts Strata, which then answers `version` (the ones that only print
/// or refuse are checked above; -s, -d, -Y, -S by their own tests).
#[test]
fn every_memcached_option_starts_strata() {
    let dir = std::env::temp_dir().join(format!("strata-cli-opts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = dir.join("pid").display().to_string();
    let memory_file = dir.join("memory").display().to_string();
    let flash = format!("ext_path={}:128m", dir.join("flash").display());
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut add = |args: &[&str]| lines.push(args.iter().map(|a| a.to_string()).collect());
    for flags in [
        &["-A"][..], &["--enable-shutdown"], &["-a", "755"], &["-r"], &["--enable-coredumps"], &["-u", "root"],
        &["-m", "32"], &["--memory-limit=32"], &["-M"], &["-c", "100"], &["--conn-limit", "100"], &["-k"],
        &["--lock-memory"], &["-vv"], &["--verbose"], &["-P", &pid], &["-f", "1.5"], &["--slab-growth-factor=2"],
        &["-n", "96"], &["--slab-min-size", "96"], &["-D", "/"], &["-t", "2"], &["--threads=2"], &["-R", "5"],
        &["--max-reqs-per-event", "5"], &["-C"], &["--disable-cas"], &["-b", "64"], &["--listen-backlog=64"],
        &["-B", "ascii"], &["--protocol=auto"], &["-I", "2m"], &["--max-item-size", "512k"], &["-F"],
        &["--disable-flush-all"], &["-X"], &["--disable-dumping"], &["-W"], &["--disable-watch"],
        &["-e", &memory_file], &["-N", "1"], &["--napi-ids", "1"], &["-l", "127.0.0.1"], &["--listen=127.0.0.1"],
        &["-U", "-1"], &["--udp-port=-1"],
    ] {
        add(flags);
    }
    if huge_pages_offered() {
        add(&["-L"]);
        add(&["--enable-largepages"]);
    } else {
        let out = Command::new(BIN).arg("-L").output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot enable large pages on this system"));
    }
    for opt in [
        "maxconns_fast", "no_maxconns_fast", "hashpower=16", "no_hashexpand", "slab_reassign", "no_slab_reassign",
        "slab_automove=2", "no_slab_automove", "slab_automove_ratio=0.5", "slab_automove_window=30",
        "slab_automove_freeratio=0.02", "tail_repair_time=60", "hash_algorithm=jenkins", "lru_crawler", "no_lru_crawler",
        "lru_crawler_sleep=50", "lru_crawler_tocrawl=100", "lru_maintainer", "no_lru_maintainer", "hot_lru_pct=30",
        "warm_lru_pct=30", "hot_max_factor=0.5", "warm_max_factor=1.5", "temporary_ttl=30", "idle_timeout=60",
        "watcher_logbuf_size=128", "worker_logbuf_size=32", "slab_sizes=96-192-384-768", "slab_chunk_max=16",
        "track_sizes", "no_inline_ascii_resp", "inline_ascii_resp", "modern", "no_modern", "no_chunked_items",
        "drop_privileges", "no_drop_privileges", "resp_obj_mem_limit=1", "read_buf_mem_limit=64", "sock_cookie_id=7",
        "relaxed_privileges", "io_engine=epoll", "pin_threads", "no_pin_threads", "udp_max_reply=0", "restart_strict",
        "ext_page_size=32", "ext_wbuf_size=8", "ext_threads=2", "ext_io_depth=4", "ext_item_size=1024",
        "ext_item_age=60", "ext_low_ttl=10", "ext_recache_rate=100", "ext_compact_under=2", "ext_drop_under=2",
        "ext_max_sleep=1000", "ext_max_frag=0.5", "ext_drop_unread", &flash,
    ] {
        add(&["-o", opt]);
    }
    // Start them a few at a time; each must answer `version`.
    for chunk in lines.chunks(8) {
        std::thread::scope(|scope| {
            for args in chunk {
                scope.spawn(move || {
                    let sets_threads = args.iter().any(|a| a == "-t" || a.starts_with("--threads"));
                    let mut full: Vec<&str> = if sets_threads { Vec::new() } else { vec!["-t", "1"] };
                    full.extend(args.iter().map(String::as_str));
                    let (mut child, addrs) = spawn_listening(&full, 1);
                    let mut stream = connect(addrs[0]);
                    let reply = roundtrip(&mut stream, b"version\r\n", 8);
                    assert_eq!(&reply, b"VERSION ", "{args:?}");
                    let _ = child.kill();
                    let _ = child.wait();
                });
            }
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `MEMCACHED_PORT_FILENAME`: the bound ports, in memcached's lines, for a
/// harness that started the server on any free port.
#[test]
fn port_file_names_the_bound_ports() {
    let dir = std::env::temp_dir().join(format!("strata-ports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let read_ports = |args: &[&str], name: &str| -> (Child, Vec<(String, u16)>) {
        let file = dir.join(name);
        let child = Command::new(BIN)
            .args(args)
            .env("MEMCACHED_PORT_FILENAME", &file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !file.exists() {
            assert!(Instant::now() < deadline, "no port file for {args:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!dir.join(format!("{name}.lck")).exists(), "the .lck file is renamed");
        let text = std::fs::read_to_string(&file).unwrap();
        let ports = text
            .lines()
            .map(|line| {
                let (kind, port) = line.split_once(": ").unwrap();
                (kind.to_string(), port.parse().unwrap())
            })
            .collect();
        (child, ports)
    };
    let (mut child, ports) = read_ports(&["-p", "-1", "-U", "-1", "-t", "1"], "both");
    assert_eq!(ports.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["TCP INET", "UDP INET"]);
    assert!(ports.iter().all(|(_, port)| *port != 0 && *port != 11211));
    let mut stream = connect(SocketAddr::from(([127, 0, 0, 1], ports[0].1)));
    assert_eq!(roundtrip(&mut stream, b"version\r\n", 8), b"VERSION ");
    child.kill().unwrap();
    let _ = child.wait();

    // -p 0 turns TCP off, as in memcached: only the UDP port is listed.
    let (mut child, ports) = read_ports(&["-p", "0", "-U", "-1", "-t", "1"], "udp-only");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].0, "UDP INET");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    udp.send_to(b"\x00\x01\x00\x00\x00\x01\x00\x00version\r\n", ("127.0.0.1", ports[0].1)).unwrap();
    let mut buf = [0u8; 64];
    let n = udp.recv(&mut buf).unwrap();
    assert!(buf[8..n].starts_with(b"VERSION "), "{:?}", String::from_utf8_lossy(&buf[..n]));
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
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

/// `-e` on a file system that cannot hold the memory file once full (a
/// tmpfs smaller than `-m`) is refused at start with the reason, instead
/// of a SIGBUS when a write reaches the missing room.
#[test]
fn a_memory_file_its_file_system_cannot_hold_is_refused() {
    let dir = std::env::temp_dir().join(format!("strata-cli-room-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cache");
    // 4 TiB of -m: more than the test machine's disk has free.
    let out = Command::new(BIN).args(["-p", "0", "-U", "0", "-m", "4194304", "-e", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memory file") && err.contains("has room for"), "{err}");
    assert!(!file.exists(), "the refused start left no file behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server whose log pipe lost its reader (a log collector that exited)
/// keeps serving and stops cleanly: a log line it cannot write is dropped,
/// as memcached drops it. (`eprintln!` panicked on the broken pipe: the
/// signal thread died at SIGHUP's reload line, and the SIGTERM after it
/// went unheard.)
#[test]
fn a_broken_log_pipe_drops_log_lines_not_the_server() {
    let dir = std::env::temp_dir().join(format!("strata-cli-stderr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let auth = dir.join("auth");
    std::fs::write(&auth, "alice:secret\n").unwrap();
    let (mut child, addrs, lines) = common::spawn_listening_log(&["-U", "0", "-t", "1", "-Y", auth.to_str().unwrap()], 1, &[]);
    let addr = addrs[0];
    drop(lines);
    // SIGHUP logs a line per credentials file it reloads.
    assert!(Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    let mut s = connect(addr);
    s.write_all(b"set x 0 0 12 noreply\r\nalice secret\r\nset k 0 0 1\r\nv\r\nget k\r\n").unwrap();
    // (Authentication answers even with noreply, as in memcached.)
    assert_eq!(read_available(&mut s), b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0), "SIGTERM after the lost log line");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SIGTERM that comes while the server is still starting (here: right
/// after it opened its memory file, before it listens) stops it cleanly
/// once it runs, as a service manager's stop right after its start must:
/// exit 0 and the memory file marked, so the next start is warm.
#[test]
fn sigterm_during_start_stops_cleanly() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("strata-cli-term-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cache");
    let start = |file: &std::path::Path| {
        let mut child = Command::new(BIN)
            .args(["-p", "-1", "-t", "1", "-m", "8", "-e", file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let opened = lines.by_ref().map_while(Result::ok).find(|l| l.contains("memory file")).expect("memory file line");
        (child, opened, lines)
    };
    // (`_log` stays open: the server logs to it while it stops.)
    let (mut child, _, _log) = start(&file);
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0), "a SIGTERM while starting is a clean stop");
    let (mut again, opened, _rest) = start(&file);
    assert!(opened.contains("after a graceful stop"), "{opened}");
    let _ = again.kill();
    let _ = again.wait();
    let _ = std::fs::remove_dir_all(&dir);
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
    // Its own name: a directory left under the unit test's file name (by a
    // process of the same id) made that test's write fail.
    let dir = std::env::temp_dir().join(format!("strata-auth-e2e-{}", std::process::id()));
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
    let _ = std::fs::remove_dir_all(&dir);
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
    assert_eq!(out.status.code(), Some(64), "SASL refuses the ascii protocol (EX_USAGE)");
    child.kill().unwrap();
    let _ = child.wait();
}

/// CPUs in a `Cpus_allowed_list` value such as "0-2,5".
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

/// memcached 1.6.45's `stats settings` (a build with extstore, as
/// Debian's and 1.6.45's are, without TLS, the proxy or seccomp), in its
/// order; Strata's own fields follow.
const SETTINGS_145: &str = "maxbytes maxconns tcpport udpport inter verbosity oldest evictions domain_socket umask \
    shutdown_command growth_factor chunk_size num_threads num_threads_per_udp stat_key_prefix detail_enabled \
    reqs_per_event cas_enabled tcp_backlog binding_protocol auth_enabled_sasl auth_enabled_ascii item_size_max \
    maxconns_fast hashpower_init slab_reassign slab_automove slab_automove_ratio slab_automove_window slab_chunk_max \
    lru_crawler lru_crawler_sleep lru_crawler_tocrawl tail_repair_time flush_enabled dump_enabled hash_algorithm \
    lru_maintainer_thread lru_segmented hot_lru_pct warm_lru_pct hot_max_factor warm_max_factor temp_lru \
    temporary_ttl idle_timeout watcher_logbuf_size worker_logbuf_size read_buf_mem_limit track_sizes \
    inline_ascii_response ext_item_size ext_item_age ext_low_ttl ext_recache_rate ext_wbuf_size \
    ext_compact_under ext_drop_under ext_max_sleep ext_max_frag slab_automove_freeratio ext_drop_unread \
    num_napi_ids memory_file client_flags_size \
    io_engine pin_threads udp_max_reply large_pages watch_enabled metrics_listen \
    journal_size restart_max_downtime restart_peers restart_margin restart_peer_timeout restart_catchup \
    ext_small_item_max ext_log_share ext_set_size ext_set_bloom_bits ext_set_threshold ext_read_ahead_max";

/// memcached 1.6.45's general `stats` with t/stats.t's command line (`-I 1024
/// -o slab_chunk_max=1,no_lru_crawler,no_lru_maintainer`), less `libevent`.
const STATS_145: &str = "pid uptime time version pointer_size rusage_user rusage_system max_connections \
    curr_connections total_connections rejected_connections connection_structures response_obj_oom \
    response_obj_count response_obj_bytes read_buf_count read_buf_bytes read_buf_bytes_free read_buf_oom \
    reserved_fds cmd_get cmd_set cmd_flush cmd_touch cmd_meta get_hits get_misses get_expired get_flushed \
    delete_misses delete_hits incr_misses incr_hits decr_misses decr_hits cas_misses cas_hits cas_badval \
    touch_hits touch_misses store_too_large store_no_memory auth_cmds auth_errors bytes_read bytes_written \
    limit_maxbytes accepting_conns listen_disabled_num time_in_listen_disabled_us threads conn_yields \
    hash_power_level hash_bytes hash_is_expanding slab_reassign_rescues slab_reassign_chunk_rescues \
    slab_reassign_inline_reclaim slab_reassign_busy_items slab_reassign_busy_deletes slab_reassign_busy_nomem \
    slab_reassign_last_busy_status slab_reassign_running slabs_moved malloc_fails log_worker_dropped \
    log_worker_written log_watcher_skipped log_watcher_sent log_watchers unexpected_napi_ids \
    round_robin_fallback bytes curr_items total_items slab_global_page_pool expired_unfetched \
    evicted_unfetched evictions reclaimed crawler_reclaimed crawler_items_checked lrutail_reflocked";

#[test]
fn stats_settings_has_memcached_fields_and_the_command_line() {
    let (mut child, addr) = spawn_on_free_port(&[
        "-t", "2", "-c", "77", "-f", "1.5", "-n", "64", "-D", "/", "-X", "-N", "1", "-o",
        "track_sizes,no_lru_crawler,lru_crawler_sleep=50,lru_crawler_tocrawl=9,slab_chunk_max=16,hashpower=20",
        "-o", "slab_automove_window=30,read_buf_mem_limit=2,hash_algorithm=xxh3,temporary_ttl=90",
    ]);
    let mut stream = connect(addr);
    let settings = stats_of(&mut stream, "settings");
    let names: Vec<&str> = settings.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, SETTINGS_145.split_whitespace().collect::<Vec<_>>());
    let value = |name: &str| settings.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap();
    for (name, expected) in [
        ("maxconns", "77"),
        ("growth_factor", "1.50"),
        ("chunk_size", "64"),
        ("num_threads", "2"),
        ("stat_key_prefix", "/"),
        ("detail_enabled", "yes"),
        ("dump_enabled", "no"),
        ("binding_protocol", "auto-negotiate"),
        ("hashpower_init", "20"),
        ("slab_automove_ratio", "0.80"),
        ("slab_automove_window", "30"),
        ("slab_chunk_max", "16384"),
        ("lru_crawler", "no"),
        ("lru_crawler_sleep", "50"),
        ("lru_crawler_tocrawl", "9"),
        ("hash_algorithm", "xxh3"),
        ("temp_lru", "yes"),
        ("temporary_ttl", "90"),
        ("hot_max_factor", "0.20"),
        ("watcher_logbuf_size", "262144"),
        ("read_buf_mem_limit", "2097152"),
        ("track_sizes", "yes"),
        ("num_napi_ids", "1"),
        ("memory_file", "(null)"),
        ("client_flags_size", "4"),
    ] {
        assert_eq!(value(name), expected, "{name}");
    }
    child.kill().unwrap();
    let _ = child.wait();

    let (mut child, addr) = spawn_on_free_port(&["-I", "1024", "-o", "slab_chunk_max=1,no_lru_crawler,no_lru_maintainer"]);
    let mut stream = connect(addr);
    let stats = stats_of(&mut stream, "");
    // `strata_version` (what Strata is) stands where memcached has `libevent`.
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).filter(|n| *n != "strata_version").collect();
    assert_eq!(names, STATS_145.split_whitespace().collect::<Vec<_>>());
    child.kill().unwrap();
    let _ = child.wait();
}

/// `-o sock_cookie_id=N` marks the listening sockets (`SO_MARK`), as `ss -e`
/// shows (`fwmark:0x..`). Needs root (CAP_NET_ADMIN) and `ss`.
#[test]
fn sock_cookie_id_marks_the_listeners() {
    let Ok(probe) = Command::new("ss").arg("-V").output() else {
        eprintln!("no ss on this machine: the socket mark is not checked");
        return;
    };
    let root = String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0";
    if !probe.status.success() || !root {
        eprintln!("needs root and ss: the socket mark is not checked");
        return;
    }
    let (mut child, addr) = spawn_on_free_port(&["-t", "1", "-o", "sock_cookie_id=77"]);
    let out = Command::new("ss").args(["-ltne", "sport", "=", &format!(":{}", addr.port())]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fwmark:0x4d"), "{text}");
    child.kill().unwrap();
    let _ = child.wait();
}

/// `-c` raises the soft open-file limit to fit that many connections, as
/// memcached sets its limit from `-c`.
#[test]
fn conn_limit_raises_the_open_file_limit() {
    let script = format!("ulimit -S -n 256 && exec {BIN} -p -1 -t 1 -c 1000");
    let mut child = Command::new("sh").args(["-c", &script]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let soft = loop {
        // Only once the shell has become strata (its own limit was higher).
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap_or_default();
        if comm.trim() != "strata" {
            assert!(Instant::now() < deadline, "strata did not start");
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap_or_default();
        let soft: u64 = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if soft > 256 || Instant::now() > deadline {
            break soft;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(soft >= 1000, "soft open-file limit {soft}");
    child.kill().unwrap();
    let _ = child.wait();
}

/// `-d -P FILE`: the daemon writes its pid, and (its terminal gone) a
/// harness finds its port through `MEMCACHED_PORT_FILENAME`.
#[test]
fn daemon_writes_pid_and_port_files() {
    let dir = std::env::temp_dir().join(format!("strata-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pid_file, port_file) = (dir.join("pid"), dir.join("ports"));
    let status = Command::new(BIN)
        .args(["-d", "-p", "-1", "-t", "1", "-P", pid_file.to_str().unwrap()])
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the parent of the daemon exits 0");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(pid_file.exists() && port_file.exists()) {
        assert!(Instant::now() < deadline, "no pid or port file");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ports = std::fs::read_to_string(&port_file).unwrap();
    let port: u16 = ports.lines().next().and_then(|l| l.strip_prefix("TCP INET: ")).unwrap().parse().unwrap();
    let mut stream = connect(SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(roundtrip(&mut stream, b"version\r\n", 8), b"VERSION ");
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_file.exists() {
        assert!(Instant::now() < deadline, "the daemon did not stop and remove its pid file");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
