//! `strata --config FILE`: a sample configuration, the one the Debian
//! package ships (packaging/strata.conf) and Debian's own memcached.conf,
//! copied from the installed memcached package, each started and asked on
//! the port the file names; a bad line stops the start with `FILE:LINE`
//! before the memory file is created.
//!
//! A file's port is picked free just before the start; a start that lost
//! it to another process (it exits, "failed to listen") is tried again on
//! another, at most [`ATTEMPTS`] times.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{is_root, BIN};

const ATTEMPTS: usize = 20;

/// A directory of its own under the temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("strata-config-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A started server, killed when dropped.
use crate::common::Reaped as Running;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One request, the reply's lines up to `END` (or the one line of `version`).
fn ask(port: u16, request: &str) -> std::io::Result<Vec<String>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request.as_bytes())?;
    let mut lines = Vec::new();
    for line in BufReader::new(stream).lines() {
        let line = line?;
        let last = line == "END" || line.starts_with("VERSION ") || line.starts_with("ERROR");
        lines.push(line);
        if last {
            break;
        }
    }
    Ok(lines)
}

fn setting(port: u16, name: &str) -> String {
    let prefix = format!("STAT {name} ");
    let lines = ask(port, "stats settings\r\n").unwrap();
    let line = lines.iter().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name} in {lines:?}"));
    line[prefix.len()..].to_string()
}

/// `strata --config` with the conf `make(port)` writes, on a free port:
/// the running server and its port once it answers `version` there.
/// `as_nobody`: run as the unprivileged user when root, as the unit's
/// `User=` does (so `-u` and `-P` lines act as under systemd).
fn start(dir: &Scratch, make: impl Fn(u16) -> PathBuf, extra: &[&str], as_nobody: bool) -> (Running, u16) {
    for _ in 0..ATTEMPTS {
        let port = free_port();
        let conf = make(port);
        let log = std::fs::File::create(dir.0.join("strata.log")).unwrap();
        let mut command = Command::new(BIN);
        command.env_remove("STRATA_DEBUGTIME").arg("--config").arg(&conf).args(extra);
        command.stdout(Stdio::null()).stderr(log);
        if as_nobody && is_root() {
            command.uid(65534).gid(65534);
        }
        let mut server = Running(command.spawn().expect("start strata"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ask(port, "version\r\n").is_ok_and(|l| l.first().is_some_and(|v| v.starts_with("VERSION "))) {
                return (server, port);
            }
            if server.0.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(dir.0.join("strata.log")).unwrap();
        assert!(log.contains("failed to listen"), "strata --config did not answer on {port}:\n{log}");
    }
    panic!("no free port in {ATTEMPTS} attempts");
}

/// The file's text with its `-p 11211` line moved to `port`.
fn on_port(text: &str, port: u16) -> String {
    assert!(text.lines().any(|l| l == "-p 11211"), "no '-p 11211' line");
    text.lines().map(|l| if l == "-p 11211" { format!("-p {port}\n") } else { format!("{l}\n") }).collect()
}

#[test]
fn a_sample_conf_answers_on_its_port_with_its_settings() {
    let dir = Scratch::new("sample");
    let text = "# a memcached.conf\n-d\nlogfile /var/log/strata-test.log\n\n-m 32   # megabytes\n-p 11211\n-c 100\n-t 2 -U 0\n-l 127.0.0.1\n-o idle_timeout=30\n";
    let (_server, port) = start(&dir, |port| dir.write("sample.conf", &on_port(text, port)), &[], false);
    assert_eq!(setting(port, "tcpport"), port.to_string());
    assert_eq!(setting(port, "maxbytes"), (32u64 << 20).to_string());
    assert_eq!(setting(port, "maxconns"), "100");
    assert_eq!(setting(port, "num_threads"), "2");
    assert_eq!(setting(port, "idle_timeout"), "30");
}

#[test]
fn the_packaged_conf_answers_and_flags_after_it_win() {
    let dir = Scratch::new("packaged");
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/strata.conf")).unwrap();
    assert!(shipped.contains("-e /run/strata/strata.mem"));
    let mem = dir.0.join("strata.mem");
    let memory_file = mem.to_str().unwrap();
    let make = |port| dir.write("strata.conf", &on_port(&shipped, port).replace("/run/strata/strata.mem", memory_file));
    let (mut server, port) = start(&dir, make, &["-c", "77"], false);
    assert_eq!(setting(port, "maxconns"), "77");
    assert_eq!(setting(port, "maxbytes"), (64u64 << 20).to_string());
    assert!(mem.exists(), "the conf's -e file was not created");
    // A stop writes the file back, as `systemctl stop` does (SIGTERM).
    let status = Command::new("kill").arg("-TERM").arg(server.0.id().to_string()).status().unwrap();
    assert!(status.success());
    assert!(server.0.wait().unwrap().success(), "the stop did not exit 0");
}

#[test]
fn debian_memcached_conf_as_shipped_answers_on_its_port() {
    let shipped = ["/usr/share/memcached/memcached.conf.default", "/etc/memcached.conf"].into_iter().find(|p| Path::new(p).exists());
    let Some(shipped) = shipped else {
        eprintln!("memcached is not installed: Debian's memcached.conf not tried");
        return;
    };
    let text = std::fs::read_to_string(shipped).unwrap();
    let dir = Scratch::new("debian");
    // Readable by nobody, the user it runs as when the tests run as root.
    let make = |port| {
        let path = dir.write("memcached.conf", &on_port(&text, port));
        std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    };
    let (_server, port) = start(&dir, make, &[], true);
    assert_eq!(setting(port, "tcpport"), port.to_string());
    assert_eq!(setting(port, "maxbytes"), (64u64 << 20).to_string());
    assert_eq!(setting(port, "maxconns"), "1024");
}

/// A refused start: exit code and stderr.
fn refused(conf: &Path) -> (i32, String) {
    let out = Command::new(BIN).arg("--config").arg(conf).stdin(Stdio::null()).output().unwrap();
    (out.status.code().expect("exited"), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_bad_line_stops_the_start_before_the_memory_file() {
    let dir = Scratch::new("bad");
    let mem = dir.0.join("strata.mem");
    let text = format!("# bad\n-e {}\n-m 64\n-x\n-p 0\n", mem.display());
    let conf = dir.write("bad.conf", &text);
    let (code, stderr) = refused(&conf);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&format!("{}:4: invalid option -- 'x'", conf.display())), "{stderr}");
    let conf = dir.write("bad.conf", &text.replace("-x", "-p 70000"));
    let (code, stderr) = refused(&conf);
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains(&format!("{}:4: ERROR: Invalid port number 70000.", conf.display())), "{stderr}");
    assert!(!mem.exists(), "a refused start created the memory file");
}
