//! Shared by the binary's test files: start `strata` on ephemeral ports.
//! (Each test file uses a part of it.)
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// A child process killed and reaped when dropped, so a test that fails
/// part-way leaves no server running. It is the `Child` otherwise.
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start strata with `-p -1 -v` plus `args` and read the first `count`
/// addresses it logs as bound, so parallel tests never race for a port.
/// The rest of its log is drained so it never blocks on a full pipe.
pub fn spawn_listening(args: &[&str], count: usize) -> (Reaped, Vec<SocketAddr>) {
    spawn_listening_env(args, count, &[])
}

/// [`spawn_listening`] with `env` added to the server's environment (and
/// `STRATA_DEBUGTIME` removed unless `env` sets it).
pub fn spawn_listening_env(args: &[&str], count: usize, env: &[(&str, &str)]) -> (Reaped, Vec<SocketAddr>) {
    let (child, addrs, lines) = spawn_listening_log(args, count, env);
    std::thread::spawn(move || for _ in lines {});
    (child, addrs)
}

/// [`spawn_listening_env`] that hands the rest of the server's log back
/// instead of draining it (dropping it breaks the server's log pipe).
pub fn spawn_listening_log(
    args: &[&str],
    count: usize,
    env: &[(&str, &str)],
) -> (Reaped, Vec<SocketAddr>, std::io::Lines<BufReader<std::process::ChildStderr>>) {
    let mut command = Command::new(BIN);
    command.env_remove("STRATA_DEBUGTIME").envs(env.iter().copied()).args(["-p", "-1", "-v"]).args(args);
    listening(command, count)
}

/// Start `command` (strata with `-p -1 -v`, perhaps under a wrapper such
/// as `taskset`) and read the first `count` addresses it logs as bound;
/// the rest of its log is handed back.
pub fn listening(
    mut command: Command,
    count: usize,
) -> (Reaped, Vec<SocketAddr>, std::io::Lines<BufReader<std::process::ChildStderr>>) {
    let child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start strata");
    let mut child = Reaped(child);
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut addrs = Vec::new();
    while addrs.len() < count {
        let line = lines.next().expect("strata exited before listening").expect("log line");
        if let Some(addr) = line.strip_prefix("strata: listening on ") {
            addrs.push(addr.parse().expect("address in the log"));
        }
    }
    (child, addrs, lines)
}

/// A text-protocol client for the tests' own checks.
pub struct Conn {

    pub stream: TcpStream,
    pub reader: BufReader<TcpStream>,
}

impl Conn {
    pub fn to(server: &Server) -> Conn {
        let stream = TcpStream::connect(server.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Conn { reader: BufReader::new(stream.try_clone().unwrap()), stream }
    }

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> String {
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.stream.write_all(&req).unwrap();
        self.line()
    }

    /// Many keys' values, by pipelined multi-key `get`s of 100 keys.
    pub fn get_many(&mut self, keys: &[String]) -> HashMap<String, Vec<u8>> {
        self.multi_get("get", keys).into_iter().map(|(key, (value, _, _))| (key, value)).collect()
    }

    /// Many keys' (value, flags, CAS), by pipelined multi-key `gets`.
    pub fn gets_many(&mut self, keys: &[String]) -> HashMap<String, (Vec<u8>, u32, u64)> {
        self.multi_get("gets", keys)
    }

    /// `cmd` (`get`: CAS read as 0, or `gets`) over `keys`, 100 at a time.
    fn multi_get(&mut self, cmd: &str, keys: &[String]) -> HashMap<String, (Vec<u8>, u32, u64)> {
        let mut found = HashMap::new();
        for batch in keys.chunks(100) {
            self.stream.write_all(format!("{cmd} {}\r\n", batch.join(" ")).as_bytes()).expect("send");
            found.extend(self.values().into_iter().map(|(key, value, flags, cas)| (key, (value, flags, cas))));
        }
        found
    }

    /// The `VALUE` replies of a get up to its `END`, in order: (key, value,
    /// flags, CAS or 0).
    pub fn values(&mut self) -> Vec<(String, Vec<u8>, u32, u64)> {
        let mut found = Vec::new();
        loop {
            let line = self.line();
            if line == "END\r\n" {
                return found;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f[0], "VALUE", "{line}");
            let len: usize = f[3].parse().expect("length");
            let mut data = vec![0u8; len + 2];
            self.reader.read_exact(&mut data).expect("value");
            data.truncate(len);
            let cas = f.get(4).map_or(0, |c| c.parse().expect("cas"));
            found.push((f[1].to_string(), data, f[2].parse().expect("flags"), cas));
        }
    }

    pub fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.gets(key).map(|(value, _, _)| value)
    }

    /// Value, flags and CAS of `key`.
    pub fn gets(&mut self, key: &str) -> Option<(Vec<u8>, u32, u64)> {
        self.stream.write_all(format!("gets {key}\r\n").as_bytes()).unwrap();
        let header = self.line();
        if header == "END\r\n" {
            return None;
        }
        let fields: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(fields[0], "VALUE", "{header}");
        let (flags, len, cas) = (fields[2].parse().unwrap(), fields[3].parse::<usize>().unwrap(), fields[4].parse().unwrap());
        let mut value = vec![0u8; len + 2];
        self.reader.read_exact(&mut value).unwrap();
        assert_eq!(self.line(), "END\r\n");
        value.truncate(len);
        Some((value, flags, cas))
    }

    /// `count` sets of `size` bytes `f` (keys `{prefix}0`, `{prefix}1`...)
    /// without replies, then a round trip: filler that pushes the items
    /// set before out of RAM (and, with a flash tier, out of its write
    /// buffers onto flash).
    pub fn fill(&mut self, prefix: &str, count: usize, size: usize) {
        let filler = vec![b'f'; size];
        for i in 0..count {
            let mut req = format!("set {prefix}{i} 0 0 {size} noreply\r\n").into_bytes();
            req.extend_from_slice(&filler);
            req.extend_from_slice(b"\r\n");
            self.stream.write_all(&req).unwrap();
        }
        self.stream.write_all(b"mn\r\n").unwrap();
        assert_eq!(self.line(), "MN\r\n");
    }

    pub fn stat(&mut self, name: &str) -> u64 {
        self.stream.write_all(b"stats\r\n").unwrap();
        let mut found = None;
        loop {
            let line = self.line();
            if line == "END\r\n" {
                return found.unwrap_or_else(|| panic!("no stat {name}"));
            }
            let mut parts = line.split_whitespace();
            if parts.nth(1) == Some(name) {
                found = parts.next().and_then(|v| v.parse().ok());
            }
        }
    }
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Reaped,
    pub addr: SocketAddr,
}

impl Server {
    /// Strata on an ephemeral TCP port, UDP off, with `args`.
    pub fn strata(args: &[&str]) -> Server {
        Server::strata_env(args, &[])
    }

    /// [`Server::strata`] with `env` in its environment.
    pub fn strata_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut all = vec!["-U", "0"];
        all.extend_from_slice(args);
        let (child, addrs) = spawn_listening_env(&all, 1, env);
        Server { child, addr: addrs[0] }
    }

    /// Debian's memcached on a free port with `args` (UDP off, 2 threads,
    /// `-u root` when root, as it refuses root without it); None when it is
    /// not installed.
    pub fn memcached(args: &[&str]) -> Option<Server> {
        for _ in 0..20 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
            let mut cmd = Command::new("memcached");
            cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "2"]).args(args);
            if is_root() {
                cmd.args(["-u", "root"]);
            }
            let child = Reaped(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut server = Server { child, addr };
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < deadline {
                if TcpStream::connect(addr).is_ok() {
                    return Some(server);
                }
                if let Ok(Some(_)) = server.child.try_wait() {
                    break; // lost the port to someone else: try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = server.child.kill();
        }
        None
    }

    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("proc status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("VmRSS value") * 1024
    }
}

pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

/// A kernel CPU list (`0-3,8`) as CPU numbers.
pub fn cpu_list(list: &str) -> Vec<usize> {
    list.trim()
        .split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()).collect::<Vec<_>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

/// The CPUs a process or thread may run on, from its `/proc/.../status`.
pub fn allowed(status_path: &str) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).unwrap();
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    cpu_list(line.split(':').nth(1).unwrap())
}

/// `stats <group>` as (name, value) pairs, in order.
pub fn stats_of(stream: &mut TcpStream, group: &str) -> Vec<(String, String)> {
    let command = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
    stream.write_all(command.as_bytes()).unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while !text.ends_with(b"END\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed during stats");
        text.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| {
            let (name, value) = l.split_once(' ').unwrap();
            (name.to_string(), value.to_string())
        })
        .collect()
}

/// A directory of a test's own under the temp dir (`strata-{prefix}-{pid}-{name}`),
/// emptied when made and removed at the end.
pub struct ScratchDir(pub std::path::PathBuf);

impl ScratchDir {
    pub fn new(prefix: &str, name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("strata-{prefix}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        ScratchDir(dir)
    }

    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
