//! `--tls`: the load over TLS (rustls), and `--tls-handshakes full|resumed`,
//! a run whose requests are new TLS connections.
//!
//! ```text
//!  TcpChannel ─ Option<ClientConnection>:
//!    out (plaintext requests) ─ writer() ─► rustls ─ write_tls ─► socket
//!    socket ─ read ─► read_tls ─► rustls ─ reader() ─► input (plaintext replies)
//! ```
//!
//! The handshake is done blocking in `connect`, before the channel joins
//! the event loop, so the measured run sees only established sessions.
//! The server certificate is not verified (a load generator on loopback,
//! pointed at a server the operator started; `--tls` says nothing about
//! the server's identity). Every connection of a run shares one client
//! config, so its session cache (rustls' default, 256 sessions) lets a
//! reconnect resume.
//!
//! Handshake runs (`--tls-handshakes`): each of `--threads` threads loops,
//! for the run's duration, one connection at a time: TCP connect,
//! TLS handshake, one `version` round trip (which also takes in TLS 1.3's
//! session ticket), close. Each counts as one request in the report (a
//! "get" that is a hit), its latency the whole cycle. `full` gives every
//! connection a fresh config (no session to resume); `resumed` shares one.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};

use crate::tally::{ErrorKind, Tally};

/// Accepts any server certificate (see the module comment).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config for a run (TLS 1.2 and 1.3, no client certificate).
pub fn client_config() -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring offers TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

fn server_name(addr: SocketAddr) -> ServerName<'static> {
    ServerName::IpAddress(addr.ip().into())
}

/// Connect and finish the handshake, blocking.
pub fn connect_blocking(addr: SocketAddr, config: &Arc<ClientConfig>) -> io::Result<(ClientConnection, TcpStream)> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    let mut conn = ClientConnection::new(config.clone(), server_name(addr)).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok((conn, tcp))
}

/// A blocking stream, plain or TLS (probe and prefill). Its reads retry
/// `EINTR`: a socket with a receive timeout is not restarted after a stop
/// signal, so a load generator paused (`SIGSTOP`, a shell's `^Z`) and
/// resumed in the middle of a prefill would otherwise fail it.
pub fn stream(addr: SocketAddr, tls: Option<&Arc<ClientConfig>>, timeout: Duration) -> io::Result<Box<dyn ReadWrite>> {
    match tls {
        None => {
            let tcp = TcpStream::connect(addr)?;
            tcp.set_nodelay(true).ok();
            tcp.set_read_timeout(Some(timeout))?;
            Ok(Box::new(Restarting(tcp)))
        }
        Some(config) => {
            let (conn, tcp) = connect_blocking(addr, config)?;
            tcp.set_read_timeout(Some(timeout))?;
            Ok(Box::new(Restarting(StreamOwned::new(conn, tcp))))
        }
    }
}

/// A blocking stream whose reads are retried when a signal interrupts
/// them (writes already are: `write_all` retries `Interrupted`).
struct Restarting<S>(S);

impl<S: Read> Read for Restarting<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}

impl<S: Write> Write for Restarting<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

pub trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

/// A non-blocking channel's TLS state (`tcp.rs`).
pub struct Session {
    pub conn: ClientConnection,
}

impl Session {
    /// Feed ciphertext, append plaintext to `input[end..]` (grown by the
    /// caller's `room`); returns the new end, or None on a TLS error.
    pub fn receive(&mut self, mut cipher: &[u8], input: &mut Vec<u8>, mut end: usize) -> Option<usize> {
        while !cipher.is_empty() {
            self.conn.read_tls(&mut cipher).ok()?;
            self.conn.process_new_packets().ok()?;
            loop {
                if input.len() - end < 16 * 1024 {
                    let grown = (input.len() * 2).max(end + 16 * 1024);
                    input.resize(grown, 0);
                }
                match self.conn.reader().read(&mut input[end..]) {
                    Ok(0) => return None,
                    Ok(n) => end += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return None,
                }
            }
        }
        Some(end)
    }
}

/// One new-connection cycle: connect, handshake, `version`, close.
/// Ok(resumed) or the error kind.
fn cycle(addr: SocketAddr, config: &Arc<ClientConfig>) -> Result<bool, ErrorKind> {
    let (conn, tcp) = connect_blocking(addr, config).map_err(|_| ErrorKind::Connect)?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut s = StreamOwned::new(conn, tcp);
    let resumed = s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    s.write_all(b"version\r\n").map_err(|_| ErrorKind::Closed)?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !reply.ends_with(b"\r\n") {
        let n = s.read(&mut buf).map_err(|_| ErrorKind::Closed)?;
        if n == 0 {
            return Err(ErrorKind::Closed);
        }
        reply.extend_from_slice(&buf[..n]);
    }
    if !reply.starts_with(b"VERSION ") {
        return Err(ErrorKind::UnexpectedReply);
    }
    s.conn.send_close_notify();
    let _ = s.conn.complete_io(&mut s.sock);
    Ok(resumed)
}

/// What a handshake thread counted.
pub struct HandshakeTally {
    pub tally: Tally,
    pub resumed: u64,
}

/// Loop handshakes on one thread, one connection at a time, until `end`.
pub fn handshake_thread(addr: SocketAddr, resumed: bool, end: Instant) -> HandshakeTally {
    let shared = client_config();
    let mut t = HandshakeTally { tally: Tally::default(), resumed: 0 };
    while Instant::now() < end {
        let config = if resumed { shared.clone() } else { client_config() };
        let start = Instant::now();
        t.tally.sent += 1;
        match cycle(addr, &config) {
            Ok(was_resumed) => {
                t.tally.completed += 1;
                t.tally.gets += 1;
                t.tally.keys_requested += 1;
                t.tally.hits += 1;
                t.resumed += u64::from(was_resumed);
                t.tally.latency.record_ns(start.elapsed().as_nanos() as u64);
            }
            Err(kind) => {
                t.tally.error(kind);
                t.tally.aborted += 1;
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails its first `interrupts` reads with `Interrupted`, then yields `data`.
    struct Flaky {
        interrupts: usize,
        data: &'static [u8],
    }

    impl Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.interrupts > 0 {
                self.interrupts -= 1;
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = self.data.len().min(buf.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn reads_are_retried_after_a_signal() {
        let mut buf = [0u8; 16];
        let mut plain = Flaky { interrupts: 1, data: b"STORED\r\n" };
        assert_eq!(plain.read(&mut buf).unwrap_err().kind(), io::ErrorKind::Interrupted);
        let mut restarting = Restarting(Flaky { interrupts: 3, data: b"STORED\r\n" });
        assert_eq!(restarting.read(&mut buf).unwrap(), 8);
        assert_eq!(&buf[..8], b"STORED\r\n");
        // Other errors and the end of the stream pass through.
        assert_eq!(restarting.read(&mut buf).unwrap(), 0);
    }
}
