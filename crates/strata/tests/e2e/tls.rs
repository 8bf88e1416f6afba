//! TLS on the wire (`-Z`, issue 19), with a rustls client: the text, meta
//! and binary protocols over TLS, each `ssl_verify_mode`, `notls:`,
//! `btls:` and `mtls:` listeners, session resumption, `refresh_certs` and
//! SIGHUP with connections open, and bad input (plaintext, garbage, a
//! truncated or stalled handshake, a version below `ssl_min_version`,
//! junk after the handshake) closed and counted while a good connection
//! keeps working. Certificates are made per test with `openssl req`
//! (nothing secret is committed). scripts/test runs this file once per I/O
//! engine (STRATA_IO_ENGINE).

use crate::common;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned, SupportedProtocolVersion};

use common::spawn_listening;

/// A throwaway PKI in a temporary directory: a CA, server certificates
/// for 127.0.0.1-4, a client certificate `alice` from the CA and a
/// self-signed `mallory` the server must refuse.
struct Pki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("strata-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let mut ca = vec!["req", "-x509"];
        ca.extend_from_slice(&ec);
        ca.extend_from_slice(&["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=strata test CA"]);
        openssl(&dir, &ca);
        let pki = Pki { dir };
        for (name, cn) in [("srv", "server-one"), ("srv2", "server-two"), ("srv3", "server-three")] {
            pki.issue(name, cn, true);
        }
        pki.issue("alice", "alice", false);
        let mut selfsigned = vec!["req", "-x509"];
        selfsigned.extend_from_slice(&ec);
        selfsigned.extend_from_slice(&["-keyout", "mallory.key", "-out", "mallory.crt", "-days", "2", "-subj", "/CN=mallory"]);
        openssl(&pki.dir, &selfsigned);
        pki
    }

    fn issue(&self, name: &str, cn: &str, server: bool) {
        let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
        let subj = format!("/CN={cn}");
        openssl(&self.dir, &["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj]);
        let ext = self.dir.join(format!("{name}.ext"));
        let san = if server { "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3,IP:127.0.0.4\n" } else { "extendedKeyUsage=clientAuth\n" };
        std::fs::write(&ext, san).unwrap();
        let ext = ext.to_string_lossy().into_owned();
        openssl(&self.dir, &["x509", "-req", "-in", &csr, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", &crt, "-days", "2", "-extfile", &ext]);
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// `-o` value for the server's certificate `name` (and more options).
    fn server_opts(&self, name: &str, more: &str) -> String {
        let mut o = format!("ssl_chain_cert={},ssl_key={}", self.path(&format!("{name}.crt")), self.path(&format!("{name}.key")));
        if !more.is_empty() {
            o.push(',');
            o.push_str(more);
        }
        o
    }

    fn client(&self, cert: Option<&str>, versions: &[&'static SupportedProtocolVersion]) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(self.path("ca.crt")).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{name}.crt"))).unwrap().map(Result::unwrap).collect();
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{name}.key"))).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
        };
        Arc::new(config)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
const TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> io::Result<Tls> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let conn = ClientConnection::new(config.clone(), ServerName::IpAddress(addr.ip().into())).map_err(io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// Send `req`, read until the reply ends with `end`.
fn call(s: &mut impl ReadWrite, req: &[u8], end: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(req)?;
    s.flush()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16384];
    while !reply.ends_with(end) {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Ok(reply)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A TLS client with `config` gets through the handshake and a request.
fn serves(addr: SocketAddr, config: &Arc<ClientConfig>) -> bool {
    match connect(addr, config) {
        Ok(mut s) => call(&mut s, b"version\r\n", b"\r\n").is_ok_and(|r| r.starts_with(b"VERSION ")),
        Err(_) => false,
    }
}

fn stat(s: &mut impl ReadWrite, group: &str, name: &str) -> Option<String> {
    let reply = call(s, format!("stats{group}\r\n").as_bytes(), b"END\r\n").unwrap();
    let text = String::from_utf8(reply).unwrap();
    let prefix = format!("STAT {name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

fn start(args: &[&str], listeners: usize) -> (common::Server, Vec<SocketAddr>) {
    let mut all = vec!["-U", "0", "-t", "2"];
    all.extend_from_slice(args);
    let (child, addrs) = spawn_listening(&all, listeners);
    (common::Server { child, addr: addrs[0] }, addrs)
}

/// The peer is gone: EOF or an error within the read timeout, no reply.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) if buf[..n].windows(3).any(|w| w == b"END") => return false,
            Ok(_) => continue, // an alert
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn text_meta_and_binary_protocols_over_tls() {
    let pki = Pki::new("protocols");
    let opts = pki.server_opts("srv", "");
    let (_server, addrs) = start(&["-Z", "-o", &opts], 1);
    let client = pki.client(None, BOTH);
    let mut s = connect(addrs[0], &client).unwrap();
    assert_eq!(call(&mut s, b"set a 5 0 5\r\nhello\r\n", b"\r\n").unwrap(), b"STORED\r\n");
    assert_eq!(call(&mut s, b"get a\r\n", b"END\r\n").unwrap(), b"VALUE a 5 5\r\nhello\r\nEND\r\n");
    // A value of many TLS records, both ways.
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = b"set big 0 0 300000\r\n".to_vec();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(call(&mut s, &req, b"\r\n").unwrap(), b"STORED\r\n");
    let reply = call(&mut s, b"get big\r\n", b"END\r\n").unwrap();
    assert_eq!(&reply[..20], b"VALUE big 0 300000\r\n");
    assert_eq!(&reply[20..20 + big.len()], &big[..]);
    // A pipeline of 200 requests in one write.
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend_from_slice(format!("set p{i} 0 0 1\r\nx\r\n").as_bytes());
    }
    pipeline.extend_from_slice(b"mn\r\n");
    let reply = call(&mut s, &pipeline, b"MN\r\n").unwrap();
    assert_eq!(reply.len(), 200 * 8 + 4);
    // Meta.
    assert_eq!(call(&mut s, b"ms m 2 T0\r\nhi\r\nmg m v f\r\n", b"\r\nhi\r\n").unwrap(), b"HD\r\nVA 2 f0\r\nhi\r\n");
    // Binary: GET of `a` on a fresh TLS connection (the first byte decides).
    let mut b = connect(addrs[0], &client).unwrap();
    let mut get = vec![0x80, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    get.push(b'a');
    b.write_all(&get).unwrap();
    let mut header = [0u8; 24];
    b.read_exact(&mut header).unwrap();
    assert_eq!((header[0], header[6], header[7]), (0x81, 0, 0), "binary GET hit over TLS");
    let body_len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0u8; body_len];
    b.read_exact(&mut body).unwrap();
    assert_eq!(&body[4..], b"hello");
    // The TLS lines of stats and stats settings.
    assert_eq!(stat(&mut s, "", "ssl_handshake_errors").as_deref(), Some("0"));
    assert_eq!(stat(&mut s, "", "ssl_proto_errors").as_deref(), Some("0"));
    assert!(stat(&mut s, "", "time_since_server_cert_refresh").is_some());
    assert_eq!(stat(&mut s, "", "ssl_new_sessions"), None, "only with ssl_session_cache, as memcached");
    assert_eq!(stat(&mut s, " settings", "ssl_enabled").as_deref(), Some("yes"));
    assert_eq!(stat(&mut s, " settings", "ssl_verify_mode").as_deref(), Some("0"));
    assert_eq!(stat(&mut s, " settings", "ssl_min_version").as_deref(), Some("tlsv1.2"));
    assert_eq!(stat(&mut s, " settings", "ssl_wbuf_size").as_deref(), Some("16384"));
    // A key dump writes to the socket from its own thread, which would
    // bypass TLS: on a TLS connection it closes the connection instead
    // (docs/COMPATIBILITY.md); stats cachedump is written by the worker.
    assert!(call(&mut s, b"stats cachedump 1 10\r\n", b"END\r\n").is_ok());
    let mut dumper = connect(addrs[0], &client).unwrap();
    assert!(call(&mut dumper, b"lru_crawler metadump all\r\n", b"END\r\n").is_err());
    // quit: the reply stream ends cleanly.
    s.write_all(b"quit\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
}

#[test]
fn verify_modes_and_per_listener_tls() {
    let pki = Pki::new("verify");
    let opts = pki.server_opts("srv", &format!("ssl_verify_mode=1,ssl_ca_cert={}", pki.path("ca.crt")));
    let listen = "127.0.0.1:0,notls:127.0.0.2:0,btls:127.0.0.3:0,mtls:127.0.0.4:0";
    let (_server, addrs) = start(&["-Z", "-o", &opts, "-l", listen], 4);
    let (none, alice, mallory) = (pki.client(None, BOTH), pki.client(Some("alice"), BOTH), pki.client(Some("mallory"), BOTH));
    // Default listener, ssl_verify_mode=1 (request): no certificate is
    // fine, a trusted one is fine, an untrusted one is refused.
    assert!(serves(addrs[0], &none));
    assert!(serves(addrs[0], &alice));
    assert!(!serves(addrs[0], &mallory));
    // notls: plain text.
    let mut plain = TcpStream::connect(addrs[1]).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(call(&mut plain, b"version\r\n", b"\r\n").unwrap().starts_with(b"VERSION "));
    // btls: no client certificate asked, so even mallory's is not looked at.
    assert!(serves(addrs[2], &none));
    assert!(serves(addrs[2], &mallory));
    // mtls: a verified certificate is required.
    assert!(!serves(addrs[3], &none));
    assert!(!serves(addrs[3], &mallory));
    assert!(serves(addrs[3], &alice));
    let errors: u64 = stat(&mut plain, "", "ssl_handshake_errors").unwrap().parse().unwrap();
    assert!(errors >= 3, "refused handshakes are counted: {errors}");
    assert_eq!(stat(&mut plain, " settings", "ssl_verify_mode").as_deref(), Some("1"));

    // ssl_verify_mode=2 (require) and 3 (once: required as well).
    for (mode, stat_value) in [("2", "3"), ("3", "7")] {
        let opts = pki.server_opts("srv", &format!("ssl_verify_mode={mode},ssl_ca_cert={}", pki.path("ca.crt")));
        let (_server, addrs) = start(&["-Z", "-o", &opts, "-l", "127.0.0.1:0,notls:127.0.0.2:0"], 2);
        assert!(!serves(addrs[0], &none), "mode {mode} without a certificate");
        assert!(!serves(addrs[0], &mallory), "mode {mode} with an untrusted one");
        assert!(serves(addrs[0], &alice), "mode {mode} with alice's");
        let mut plain = TcpStream::connect(addrs[1]).unwrap();
        assert_eq!(stat(&mut plain, " settings", "ssl_verify_mode").as_deref(), Some(stat_value));
    }
}

#[test]
fn session_resumption_with_ssl_session_cache() {
    let pki = Pki::new("resume");
    for (cache, versions) in [(true, BOTH), (true, TLS12), (false, BOTH), (false, TLS12)] {
        let more = if cache { "ssl_session_cache" } else { "" };
        let opts = pki.server_opts("srv", more);
        let (_server, addrs) = start(&["-Z", "-o", &opts], 1);
        let client = pki.client(None, versions);
        let mut first = connect(addrs[0], &client).unwrap();
        // Reading a reply also takes in TLS 1.3's session ticket.
        call(&mut first, b"version\r\n", b"\r\n").unwrap();
        let mut second = connect(addrs[0], &client).unwrap();
        let kind = second.conn.handshake_kind();
        call(&mut second, b"version\r\n", b"\r\n").unwrap();
        // Both resume: with the cache from the server's store, without it
        // from a stateless ticket, as memcached's OpenSSL issues them.
        assert_eq!(kind, Some(HandshakeKind::Resumed), "cache {cache}, {versions:?}");
        if cache {
            let new: u64 = stat(&mut second, "", "ssl_new_sessions").unwrap().parse().unwrap();
            assert!(new >= 1, "ssl_new_sessions {new}");
            assert_eq!(stat(&mut second, " settings", "ssl_session_cache").as_deref(), Some("yes"));
        } else {
            assert_eq!(stat(&mut second, "", "ssl_new_sessions"), None);
        }
    }
}

#[test]
fn bad_input_is_closed_and_counted() {
    let pki = Pki::new("bad");
    let opts = pki.server_opts("srv", "ssl_handshake_timeout=1,ssl_min_version=3");
    let (_server, addrs) = start(&["-Z", "-o", &opts], 1);
    let addr = addrs[0];
    let client = pki.client(None, BOTH);
    let mut good = connect(addr, &client).unwrap();
    assert_eq!(call(&mut good, b"set g 0 0 1\r\ng\r\n", b"\r\n").unwrap(), b"STORED\r\n");

    // Each failure is counted (waited for: the count and the close race).
    let mut expected = 0;
    let mut counted = |good: &mut Tls, what: &str| {
        expected += 1;
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let n: u64 = stat(good, "", "ssl_handshake_errors").unwrap().parse().unwrap();
            if n >= expected {
                break;
            }
            assert!(Instant::now() < deadline, "{what}: ssl_handshake_errors {n}, expected {expected}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // Plaintext to a TLS port.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(b"get g\r\n").unwrap();
    assert!(closed_by_server(&mut plain), "plaintext");
    counted(&mut good, "plaintext");
    // A record header announcing more than a record may hold, then junk.
    let mut junk = TcpStream::connect(addr).unwrap();
    let mut bytes = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    bytes.extend(std::iter::repeat(0xab).take(4096));
    junk.write_all(&bytes).unwrap();
    assert!(closed_by_server(&mut junk), "garbage");
    counted(&mut good, "garbage");
    // Half a ClientHello: stalled (closed by the 1 s handshake timeout),
    // and truncated (the client closes its side).
    let mut hello = Vec::new();
    let mut c = ClientConnection::new(client.clone(), ServerName::IpAddress(addr.ip().into())).unwrap();
    c.write_tls(&mut hello).unwrap();
    let half = &hello[..hello.len() / 2];
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled.write_all(half).unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut stalled), "stalled handshake");
    assert!(started.elapsed() < Duration::from_secs(4), "closed by the handshake timeout");
    counted(&mut good, "stalled");
    let mut truncated = TcpStream::connect(addr).unwrap();
    truncated.write_all(half).unwrap();
    truncated.shutdown(Shutdown::Write).unwrap();
    assert!(closed_by_server(&mut truncated), "truncated handshake");
    // A version below ssl_min_version (3: TLS 1.3 only).
    assert!(!serves(addr, &pki.client(None, TLS12)), "TLS 1.2 below ssl_min_version=3");
    counted(&mut good, "TLS 1.2");
    // Junk inside an established session: a protocol error.
    let mut broken = connect(addr, &client).unwrap();
    call(&mut broken, b"version\r\n", b"\r\n").unwrap();
    broken.sock.write_all(&[0x17, 0x03, 0x03, 0x00, 0x20]).unwrap();
    broken.sock.write_all(&[0x55; 32]).unwrap();
    assert!(closed_by_server(&mut broken.sock), "junk after the handshake");

    // The good connection never noticed; everything was counted.
    assert_eq!(call(&mut good, b"get g\r\n", b"END\r\n").unwrap(), b"VALUE g 0 1\r\ng\r\nEND\r\n");
    let proto: u64 = stat(&mut good, "", "ssl_proto_errors").unwrap().parse().unwrap();
    assert_eq!(proto, 1, "junk after the handshake");
    assert_eq!(stat(&mut good, " settings", "ssl_min_version").as_deref(), Some("tlsv1.3"));
}

/// The server certificate's CN a new connection sees (a fresh client, so
/// no session from before the reload is resumed).
fn server_cn(addr: SocketAddr, pki: &Pki) -> String {
    let s = connect(addr, &pki.client(None, BOTH)).unwrap();
    let der = s.conn.peer_certificates().unwrap()[0].to_vec();
    strata_server::tls::common_name(&der).unwrap().to_string()
}

#[test]
fn refresh_certs_and_sighup_keep_live_connections() {
    let pki = Pki::new("refresh");
    let live = |name: &str| {
        std::fs::copy(pki.path(&format!("{name}.crt")), pki.path("live.crt")).unwrap();
        std::fs::copy(pki.path(&format!("{name}.key")), pki.path("live.key")).unwrap();
    };
    live("srv");
    let opts = pki.server_opts("live", "");
    let (server, addrs) = start(&["-Z", "-o", &opts], 1);
    let addr = addrs[0];
    let client = pki.client(None, BOTH);
    assert_eq!(server_cn(addr, &pki), "server-one");
    let mut old = connect(addr, &client).unwrap();
    call(&mut old, b"version\r\n", b"\r\n").unwrap();

    live("srv2");
    assert_eq!(call(&mut old, b"refresh_certs\r\n", b"\r\n").unwrap(), b"OK\r\n");
    assert_eq!(server_cn(addr, &pki), "server-two", "new connections get the new certificate");
    assert_eq!(stat(&mut old, "", "time_since_server_cert_refresh").as_deref().map(|t| t.parse::<u32>().unwrap() <= 1), Some(true));
    assert!(call(&mut old, b"version\r\n", b"\r\n").unwrap().starts_with(b"VERSION "), "live connection kept");

    // A bad file: refused with memcached's message; the old certificate stays.
    std::fs::write(pki.path("live.crt"), b"not a certificate\n").unwrap();
    let reply = String::from_utf8(call(&mut old, b"refresh_certs\r\n", b"\r\n").unwrap()).unwrap();
    assert!(reply.starts_with("Error loading the certificate chain: "), "{reply}");
    assert_eq!(server_cn(addr, &pki), "server-two");
    // A key that does not match the certificate.
    std::fs::copy(pki.path("srv3.crt"), pki.path("live.crt")).unwrap();
    let reply = String::from_utf8(call(&mut old, b"refresh_certs\r\n", b"\r\n").unwrap()).unwrap();
    assert!(reply.starts_with("Error validating the certificate: "), "{reply}");
    assert_eq!(server_cn(addr, &pki), "server-two");

    // SIGHUP reloads as well.
    live("srv3");
    let status = Command::new("kill").args(["-HUP", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while server_cn(addr, &pki) != "server-three" {
        assert!(Instant::now() < deadline, "SIGHUP did not reload the certificate");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(call(&mut old, b"version\r\n", b"\r\n").unwrap().starts_with(b"VERSION "));
}

#[test]
fn refresh_certs_without_tls_and_bad_settings_at_start() {
    let (server, _) = start(&[], 1);
    let mut plain = TcpStream::connect(server.addr).unwrap();
    assert_eq!(call(&mut plain, b"refresh_certs\r\n", b"\r\n").unwrap(), b"Error TLS not enabled\r\n");
    assert_eq!(stat(&mut plain, " settings", "ssl_enabled"), None, "no ssl lines without -Z");
    let pki = Pki::new("badstart");
    for (more, message) in [
        ("ssl_verify_mode=2", "ssl_verify_mode=2 needs ssl_ca_cert"),
        ("ssl_ciphers=NOPE-CIPHER", "Error setting the provided cipher(s): NOPE-CIPHER"),
        ("ssl_min_version=0", "tlsv1.0 is not offered by Strata"),
    ] {
        let opts = pki.server_opts("srv", more);
        let out = Command::new(common::BIN).args(["-p", "-1", "-U", "0", "-Z", "-o", &opts]).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{more}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(message), "{more}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let opts = pki.server_opts("srv", "");
    let out = Command::new(common::BIN).args(["-p", "-1", "-U", "0", "-Z", "-o", &opts, "-l", "mtls:127.0.0.1:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("an mtls: listener needs -o ssl_ca_cert"));
}

#[test]
fn ciphers_restrict_tls12_and_client_cn_is_read() {
    let pki = Pki::new("ciphers");
    let opts = pki.server_opts("srv", "ssl_ciphers=ECDHE-ECDSA-CHACHA20-POLY1305");
    let (_server, addrs) = start(&["-Z", "-o", &opts], 1);
    let s = connect(addrs[0], &pki.client(None, TLS12)).unwrap();
    assert_eq!(s.conn.negotiated_cipher_suite().map(|c| format!("{:?}", c.suite())).as_deref(), Some("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"));
    // The CN the server keeps for a client certificate (memcached's
    // ssl_get_peer_cn), read from alice's certificate.
    let der = CertificateDer::pem_file_iter(pki.path("alice.crt")).unwrap().next().unwrap().unwrap();
    assert_eq!(strata_server::tls::common_name(&der).as_deref(), Some("alice"));
    assert_eq!(strata_server::tls::common_name(b"\x30\x05junk"), None);
}

#[test]
fn text_login_and_sasl_over_tls() {
    let pki = Pki::new("auth");
    let creds = pki.path("users");
    std::fs::write(&creds, "alice:wonderland\n").unwrap();
    let opts = pki.server_opts("srv", "");
    let client = pki.client(None, BOTH);
    // -Y: the text protocol's login, over TLS.
    let (_server, addrs) = start(&["-Z", "-o", &opts, "-Y", &creds], 1);
    let mut s = connect(addrs[0], &client).unwrap();
    assert_eq!(call(&mut s, b"get a\r\n", b"\r\n").unwrap(), b"CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(call(&mut s, b"set x 0 0 16\r\nalice wonderland\r\n", b"\r\n").unwrap(), b"STORED\r\n");
    assert_eq!(call(&mut s, b"get a\r\n", b"\r\n").unwrap(), b"END\r\n");
    // -S: binary SASL PLAIN, over TLS.
    let sasl = format!("{opts},sasl_pwdb={creds}");
    let (_server, addrs) = start(&["-Z", "-S", "-o", &sasl], 1);
    let mut b = connect(addrs[0], &client).unwrap();
    let (key, value) = (b"PLAIN", b"\0alice\0wonderland");
    let mut req = vec![0x80, 0x21, 0, key.len() as u8, 0, 0, 0, 0];
    req.extend_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
    req.extend_from_slice(&[0; 12]);
    req.extend_from_slice(key);
    req.extend_from_slice(value);
    b.write_all(&req).unwrap();
    let mut header = [0u8; 24];
    b.read_exact(&mut header).unwrap();
    assert_eq!((header[0], header[1], header[6], header[7]), (0x81, 0x21, 0, 0), "SASL PLAIN accepted over TLS");
}
