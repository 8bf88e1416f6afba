//! TLS on rustls: memcached's `-Z` and `-o ssl_*` surface.
//!
//! ```text
//!  acceptor: listener i ──► ListenTls (Off | Default | Basic | Peer) ──► NewConn.tls
//!  worker:   Some(TlsSession) per TLS connection, None for plain ones
//!
//!   socket ─ciphertext─► TlsSession::receive ─plaintext─► Conn.input ─► Conn::process
//!   socket ◄─ciphertext─ TlsSession::seal / write_to ◄─plaintext─ Conn.out
//! ```
//!
//! - [`TlsState`] (the runtime's, with `-Z`) holds the three rustls server configs a
//!   listener can ask for (the `ssl_verify_mode` one, `btls:`'s without a
//!   client certificate, `mtls:`'s requiring one) behind one `RwLock`,
//!   swapped whole by `refresh_certs` and SIGHUP ([`TlsState::refresh`]):
//!   a connection takes an `Arc` of its config when it is accepted, so live
//!   connections keep theirs. It also holds the counters `stats` prints
//!   (`ssl_handshake_errors`, `ssl_proto_errors`, `ssl_new_sessions`),
//!   written once per connection event, never per request.
//! - [`TlsSession`] (`session.rs`) is a connection's rustls state: the
//!   handshake advances as ciphertext arrives, like any other connection
//!   state, so it never blocks a worker; a handshake not done within
//!   `ssl_handshake_timeout` seconds is closed by the worker's idle check.
//! - A plain connection costs one `Option` test per read and per write.

mod cn;
mod config;
mod session;
pub mod stats;

pub use cn::common_name;
pub use config::{TlsState, TlsStats};
pub use session::{Fault, Received, TlsSession};
pub use crate::settings::{min_version_text, ListenTls, TlsSettings, VerifyMode};

/// The rustls state for a new connection from a listener of `mode` (`tls`:
/// the server's, None without `-Z`): `Ok(None)` for a plain one; `Err`
/// when TLS is wanted and no session can be made (counted as a handshake
/// error; the caller closes).
pub fn session_for(tls: Option<&TlsState>, mode: ListenTls, now: u32) -> Result<Option<Box<TlsSession>>, ()> {
    let Some(state) = tls.filter(|_| mode != ListenTls::Off) else { return Ok(None) };
    let session = state
        .config_for(mode)
        .and_then(|config| TlsSession::new(config, state.stats.clone(), now, state.settings.wbuf_size_bytes));
    match session {
        Some(session) => Ok(Some(Box::new(session))),
        None => {
            state.stats.handshake_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(())
        }
    }
}

/// `refresh_certs`: memcached's replies (`OK`, or the load error; without
/// `-Z`, `Error TLS not enabled`).
pub fn refresh_command(tls: Option<&TlsState>, now: u32, out: &mut Vec<u8>) {
    let result = match tls {
        None => Err("Error TLS not enabled".to_string()),
        Some(tls) => tls.refresh(now),
    };
    match result {
        Ok(()) => out.extend_from_slice(b"OK\r\n"),
        Err(e) => {
            crate::log_line!("strata: refresh_certs: {e}");
            out.extend_from_slice(e.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}
