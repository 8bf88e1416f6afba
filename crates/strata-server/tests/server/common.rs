//! Shared by the server's test files: a server on an ephemeral loopback
//! port, Debian's memcached beside it, and a line-reading client. (Each
//! test file uses a part of it.)
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use strata_server::{Server, Settings};
use strata_store::SegStore;

/// A server with `settings` (two workers unless set) on 127.0.0.1, any port.
pub fn start(settings: Settings) -> (Server, SocketAddr) {
    let settings = Settings { tcp_listen: vec!["127.0.0.1:0".parse().unwrap()], ..settings };
    let engine = SegStore::new(settings.engine_config());
    let server = Server::start(settings, Box::new(engine)).unwrap();
    let addr = server.tcp_addrs[0];
    (server, addr)
}

pub fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

pub fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l
}

/// Debian's memcached on a free loopback port, killed when dropped.
pub struct Memcached(pub Child, pub SocketAddr);

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// memcached with `args` on a free loopback port (UDP off, `-u root` when
/// run as root), once it accepts; None when it is not installed or does
/// not start.
pub fn memcached(args: &[&str]) -> Option<Memcached> {
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    for _ in 0..20 {
        let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let mut cmd = Command::new("memcached");
        cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]).args(args);
        if root {
            cmd.args(["-u", "root"]);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut server = Memcached(child, addr);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if TcpStream::connect(addr).is_ok() {
                return Some(server);
            }
            if let Ok(Some(_)) = server.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    None
}
