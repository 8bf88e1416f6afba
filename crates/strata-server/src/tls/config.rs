//! The rustls server configs built from `-o ssl_*`, swapped whole on
//! `refresh_certs` / SIGHUP, and the TLS counters `stats` prints.
//!
//! ```text
//!  TlsState ─ RwLock<Arc<Configs>> ─┬─ default: ssl_verify_mode's policy
//!                                   ├─ basic:   no client certificate (btls:)
//!                                   └─ peer:    client certificate required (mtls:; needs ssl_ca_cert)
//! ```
//!
//! Every config shares one way to resume sessions, so a reload does not
//! forget them: without `ssl_session_cache`, stateless tickets (TLS 1.2
//! and 1.3, keys rotated by rustls), as OpenSSL issues them by default
//! in memcached; with it, a server-side cache instead, whose insertions
//! are `ssl_new_sessions`. And one crypto provider whose TLS 1.2
//! suites are `ssl_ciphers`' (OpenSSL's syntax: a `:`-separated list of
//! suite names, OpenSSL's or IANA's, or the keywords `ALL`, `DEFAULT`,
//! `HIGH`, which keep every suite; `!`, `-`, `+` terms and the other
//! keywords are skipped; as with OpenSSL's `SSL_CTX_set_cipher_list`,
//! TLS 1.3's suites are not affected).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};

use crate::settings::{ListenTls, TlsSettings, VerifyMode};

/// Sessions kept with `ssl_session_cache` (OpenSSL's default cache size).
const SESSION_CACHE_ENTRIES: usize = 20 * 1024;

/// Counters of TLS events, one relaxed add per connection event.
#[derive(Default)]
pub struct TlsStats {
    pub new_sessions: AtomicU64,
    pub handshake_errors: AtomicU64,
    pub proto_errors: AtomicU64,
}

struct Configs {
    default: Arc<ServerConfig>,
    basic: Arc<ServerConfig>,
    peer: Option<Arc<ServerConfig>>,
}

pub struct TlsState {
    pub settings: TlsSettings,
    configs: RwLock<Arc<Configs>>,
    provider: Arc<CryptoProvider>,
    sessions: Option<Arc<CountedSessions>>,
    tickets: Option<Arc<dyn rustls::server::ProducesTickets>>,
    pub stats: Arc<TlsStats>,
    /// memcached's `ssl_last_cert_refresh_time`, in the clock's seconds.
    pub last_refresh: AtomicU32,
}

impl TlsState {
    /// Check the settings and load the certificate, key and CA: the
    /// message is memcached's where it has one.
    pub fn new(settings: TlsSettings, now: u32) -> Result<TlsState, String> {
        if settings.min_version < 2 {
            return Err(format!(
                "ssl_min_version={}: {} is not offered by Strata (rustls speaks TLS 1.2 and 1.3 only); use 2 (tlsv1.2) or 3 (tlsv1.3)",
                settings.min_version,
                super::min_version_text(settings.min_version)
            ));
        }
        if settings.chain_cert.is_none() {
            return Err("Error loading the certificate chain: (null) : ssl_chain_cert is required with -Z".into());
        }
        if settings.verify_mode != VerifyMode::None && settings.ca_cert.is_none() {
            return Err(format!(
                "ssl_verify_mode={} needs ssl_ca_cert: Strata verifies client certificates only against the CAs given there",
                settings.verify_mode.number()
            ));
        }
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(list) = &settings.ciphers {
            let kept = select_ciphers(&provider.cipher_suites, list);
            if kept.iter().all(|s| s.version() == &rustls::version::TLS13) && !list_keeps_all(list) {
                return Err(format!("Error setting the provided cipher(s): {list}"));
            }
            provider.cipher_suites = kept;
        }
        let stats = Arc::new(TlsStats::default());
        let sessions = settings.session_cache.then(|| Arc::new(CountedSessions::new(SESSION_CACHE_ENTRIES, stats.clone())));
        let provider = Arc::new(provider);
        let tickets = match sessions {
            Some(_) => None,
            None => Some(rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?),
        };
        let configs = build(&settings, &provider, sessions.as_ref(), tickets.as_ref())?;
        Ok(TlsState {
            settings,
            configs: RwLock::new(Arc::new(configs)),
            provider,
            sessions,
            tickets,
            stats,
            last_refresh: AtomicU32::new(now),
        })
    }

    /// The config a new connection on a listener of `mode` gets (None for
    /// a plain listener, or `mtls:` without a CA, refused at start).
    pub fn config_for(&self, mode: ListenTls) -> Option<Arc<ServerConfig>> {
        let configs = self.configs.read().unwrap_or_else(|e| e.into_inner()).clone();
        match mode {
            ListenTls::Off => None,
            ListenTls::Default => Some(configs.default.clone()),
            ListenTls::Basic => Some(configs.basic.clone()),
            ListenTls::Peer => configs.peer.clone(),
        }
    }

    /// Whether `mtls:` listeners can be served (a CA is configured).
    pub fn has_peer_config(&self) -> bool {
        self.configs.read().unwrap_or_else(|e| e.into_inner()).peer.is_some()
    }

    /// `refresh_certs` / SIGHUP: reload certificate, key and CA. On
    /// failure the old ones stay and the error is returned (memcached's
    /// message, without its `\r\n`).
    pub fn refresh(&self, now: u32) -> Result<(), String> {
        let configs = build(&self.settings, &self.provider, self.sessions.as_ref(), self.tickets.as_ref())?;
        *self.configs.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(configs);
        self.last_refresh.store(now, Ordering::Relaxed);
        Ok(())
    }
}

fn build(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    sessions: Option<&Arc<CountedSessions>>,
    tickets: Option<&Arc<dyn rustls::server::ProducesTickets>>,
) -> Result<Configs, String> {
    let chain_path = settings.chain_cert.as_deref().unwrap_or(std::path::Path::new(""));
    let chain_name = chain_path.display();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("Error loading the certificate chain: {chain_name} : {e}"))?;
    if certs.is_empty() {
        return Err(format!("Error loading the certificate chain: {chain_name} : no certificate found"));
    }
    let key_path = settings.key.as_deref().unwrap_or(chain_path);
    let key_name = key_path.display();
    let key = match settings.key_format {
        2 => std::fs::read(key_path)
            .map_err(|e| e.to_string())
            .and_then(|der| PrivateKeyDer::try_from(der).map_err(str::to_string)),
        _ => PrivateKeyDer::from_pem_file(key_path).map_err(|e| e.to_string()),
    }
    .map_err(|e| format!("Error loading the key: {key_name} : {e}"))?;
    let certified = CertifiedKey::from_der(certs, key, provider)
        .and_then(|k| k.keys_match().map(|()| k))
        .map_err(|e| format!("Error validating the certificate: {e}"))?;
    let resolver: Arc<dyn ResolvesServerCert> = Arc::new(OneCert(Arc::new(certified)));
    let roots = match &settings.ca_cert {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            let name = path.display();
            let cas = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("Error loading the CA certificate: {name} : {e}"))?;
            for ca in cas {
                roots.add(ca).map_err(|e| format!("Error loading the CA certificate: {name} : {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("Error loading the CA certificate: {name} : no certificate found"));
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let versions: &[&rustls::SupportedProtocolVersion] =
        if settings.min_version >= 3 { &[&rustls::version::TLS13] } else { &[&rustls::version::TLS13, &rustls::version::TLS12] };
    let make = |client: ClientAuth| -> Result<Arc<ServerConfig>, String> {
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("Error setting the TLS versions: {e}"))?;
        let builder = match (client, &roots) {
            (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
            (auth, Some(roots)) => {
                let v = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
                let v = if auth == ClientAuth::Optional { v.allow_unauthenticated() } else { v };
                builder.with_client_cert_verifier(v.build().map_err(|e| format!("Error loading the CA certificate: {e}"))?)
            }
        };
        let mut config = builder.with_cert_resolver(resolver.clone());
        match sessions {
            Some(store) => {
                config.session_storage = store.clone();
                config.send_tls13_tickets = 1;
            }
            None => {
                config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
                if let Some(tickets) = tickets {
                    config.ticketer = tickets.clone();
                    config.send_tls13_tickets = 2; // as OpenSSL
                }
            }
        }
        config.ignore_client_order = false;
        Ok(Arc::new(config))
    };
    let default_auth = match settings.verify_mode {
        VerifyMode::None => ClientAuth::None,
        VerifyMode::Request => ClientAuth::Optional,
        VerifyMode::Require | VerifyMode::Once => ClientAuth::Required,
    };
    Ok(Configs {
        default: make(default_auth)?,
        basic: make(ClientAuth::None)?,
        peer: if roots.is_some() { Some(make(ClientAuth::Required)?) } else { None },
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    None,
    Optional,
    Required,
}

/// The server's one certificate (rustls' `SingleCertAndKey` is not public).
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// `ssl_session_cache`: rustls' memory cache, counting each session it
/// stores as memcached's new-session callback counts `ssl_new_sessions`.
#[derive(Debug)]
struct CountedSessions {
    inner: Arc<rustls::server::ServerSessionMemoryCache>,
    stats: Arc<TlsStats>,
}

impl std::fmt::Debug for TlsStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsStats")
    }
}

impl CountedSessions {
    fn new(entries: usize, stats: Arc<TlsStats>) -> CountedSessions {
        CountedSessions { inner: rustls::server::ServerSessionMemoryCache::new(entries), stats }
    }
}

impl StoresServerSessions for CountedSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.stats.new_sessions.fetch_add(1, Ordering::Relaxed);
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

fn list_keeps_all(list: &str) -> bool {
    list.split([':', ',', ' ']).any(|t| matches!(t, "ALL" | "DEFAULT" | "HIGH"))
}

/// The provider's suites that `list` names (TLS 1.3's always stay).
fn select_ciphers(all: &[SupportedCipherSuite], list: &str) -> Vec<SupportedCipherSuite> {
    if list_keeps_all(list) {
        return all.to_vec();
    }
    let wanted: Vec<&str> = list.split([':', ',', ' ']).filter(|t| !t.is_empty()).collect();
    all.iter()
        .filter(|s| {
            s.version() == &rustls::version::TLS13 || {
                let iana = format!("{:?}", s.suite());
                wanted.iter().any(|w| w.eq_ignore_ascii_case(&iana) || openssl_name(&iana).is_some_and(|o| o.eq_ignore_ascii_case(w)))
            }
        })
        .copied()
        .collect()
}

/// OpenSSL's name of a TLS 1.2 suite rustls offers (IANA name in).
fn openssl_name(iana: &str) -> Option<&'static str> {
    Some(match iana {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return None,
    })
}
