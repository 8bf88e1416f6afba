//! A server process under test, started from a command template in which
//! `{port}` is replaced by a free port, optionally pinned to one CPU with
//! `taskset`. It runs as `sh -c "exec CMD"`, so the child's pid is the
//! server's own (the one `/proc` is read for); dropping it kills the server.

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
    pub command: String,
}

/// A port free for both TCP and UDP on 127.0.0.1 (there is a race with
/// other programs picking it between now and the server's bind).
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let Ok(l) = TcpListener::bind("127.0.0.1:0") else { continue };
        let Ok(port) = l.local_addr().map(|a| a.port()) else { continue };
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1");
}

impl Server {
    pub fn start(template: &str, cpu: Option<usize>) -> Result<Server, String> {
        let port = free_port();
        let command = template.replace("{port}", &port.to_string());
        let exec = format!("exec {command}");
        let mut cmd = match cpu {
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string(), "sh", "-c", &exec]);
                c
            }
            None => {
                let mut c = Command::new("sh");
                c.args(["-c", &exec]);
                c
            }
        };
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).spawn().map_err(|e| format!("{command}: {e}"))?;
        let mut server = Server { child, port, command };
        server.wait_ready(Duration::from_secs(10))?;
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited at start: {status}", self.command));
            }
            if TcpStream::connect(self.addr()).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{} did not accept on port {} within {limit:?}", self.command, self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
