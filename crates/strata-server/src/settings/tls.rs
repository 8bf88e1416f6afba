//! The `-Z` / `-o ssl_*` settings (`tls/` runs them), as memcached 1.6 names and prints them
//! (`stats settings`), and the per-listener mode of `-l notls:|btls:|mtls:`.

use std::path::PathBuf;

/// `ssl_verify_mode`: memcached's numbers (OpenSSL's `SSL_VERIFY_*`
/// combinations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate asked for.
    #[default]
    None,
    /// 1: asked for; verified against `ssl_ca_cert` if sent.
    Request,
    /// 2: required and verified.
    Require,
    /// 3: required, verified once (rustls never renegotiates, so as
    /// `Require`).
    Once,
}

impl VerifyMode {
    pub fn from_number(n: u32) -> Option<VerifyMode> {
        Some(match n {
            0 => VerifyMode::None,
            1 => VerifyMode::Request,
            2 => VerifyMode::Require,
            3 => VerifyMode::Once,
            _ => return None,
        })
    }

    /// The `ssl_verify_mode` number it was given as.
    pub fn number(self) -> u32 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 2,
            VerifyMode::Once => 3,
        }
    }

    /// Whether a client without a certificate is refused.
    pub fn requires_cert(self) -> bool {
        matches!(self, VerifyMode::Require | VerifyMode::Once)
    }

    /// The number memcached's `stats settings` prints (OpenSSL's flags:
    /// PEER = 1, FAIL_IF_NO_PEER_CERT = 2, CLIENT_ONCE = 4).
    pub fn stat(self) -> u32 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 3,
            VerifyMode::Once => 7,
        }
    }
}

/// How one TCP listener speaks (memcached's `MC_SSL_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListenTls {
    /// Plain: without `-Z`, or `notls:`; also every UDP and unix socket.
    #[default]
    Off,
    /// TLS with `ssl_verify_mode`'s client-certificate policy.
    Default,
    /// `btls:`: TLS, no client certificate asked for.
    Basic,
    /// `mtls:`: TLS, a verified client certificate required.
    Peer,
}

/// `-Z` and the `ssl_*` options.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    pub chain_cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// `ssl_keyformat`: 1 PEM (OpenSSL's `SSL_FILETYPE_PEM`), 2 DER (ASN1).
    pub key_format: u32,
    pub verify_mode: VerifyMode,
    pub ca_cert: Option<PathBuf>,
    /// `ssl_ciphers`, OpenSSL's syntax (see `config.rs`).
    pub ciphers: Option<String>,
    /// `ssl_wbuf_size`, in bytes (given in kilobytes).
    pub wbuf_size_bytes: usize,
    pub session_cache: bool,
    /// `ssl_kernel_tls`: accepted and reported; encryption stays in user
    /// space (docs/COMPATIBILITY.md).
    pub kernel_tls: bool,
    /// `ssl_min_version`: memcached's codes, 2 (TLS 1.2) or 3 (TLS 1.3).
    pub min_version: u32,
    /// Strata's `ssl_handshake_timeout` (seconds): a connection still
    /// handshaking after this long is closed and counted.
    pub handshake_timeout_secs: u32,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            chain_cert: None,
            key: None,
            key_format: 1,
            verify_mode: VerifyMode::None,
            ca_cert: None,
            ciphers: None,
            wbuf_size_bytes: 16 * 1024,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
            handshake_timeout_secs: 10,
        }
    }
}

/// memcached's `ssl_proto_text` for an `ssl_min_version` code.
pub fn min_version_text(code: u32) -> &'static str {
    match code {
        0 => "tlsv1.0",
        1 => "tlsv1.1",
        2 => "tlsv1.2",
        3 => "tlsv1.3",
        _ => "unknown",
    }
}
