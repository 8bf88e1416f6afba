//! The TLS lines of `stats` and `stats settings`, memcached's names and
//! formats (printed only with `-Z`: without it Strata's output stays that
//! of memcached 1.6.45 built without TLS).

use std::sync::atomic::Ordering;

use super::{min_version_text, TlsState};

fn path_or(p: &Option<std::path::PathBuf>, none: &str) -> String {
    p.as_ref().map_or_else(|| none.to_string(), |p| p.display().to_string())
}

/// `stats`: after extstore's lines, as in memcached.
pub fn general_lines(tls: &TlsState, now: u32, out: &mut dyn FnMut(&str, String)) {
    let s = &tls.stats;
    if tls.settings.session_cache {
        out("ssl_new_sessions", s.new_sessions.load(Ordering::Relaxed).to_string());
    }
    out("ssl_handshake_errors", s.handshake_errors.load(Ordering::Relaxed).to_string());
    out("ssl_proto_errors", s.proto_errors.load(Ordering::Relaxed).to_string());
    out("time_since_server_cert_refresh", now.wrapping_sub(tls.last_refresh.load(Ordering::Relaxed)).to_string());
}

/// `stats settings`: after extstore's lines, as in memcached.
pub fn settings_lines(tls: &TlsState, out: &mut dyn FnMut(&str, String)) {
    let t = &tls.settings;
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    out("ssl_enabled", yes_no(true));
    out("ssl_chain_cert", path_or(&t.chain_cert, "(null)"));
    out("ssl_key", path_or(&t.key, "(null)"));
    out("ssl_verify_mode", t.verify_mode.stat().to_string());
    out("ssl_keyformat", t.key_format.to_string());
    out("ssl_ciphers", t.ciphers.clone().unwrap_or_else(|| "NULL".into()));
    out("ssl_ca_cert", path_or(&t.ca_cert, "NULL"));
    out("ssl_wbuf_size", t.wbuf_size_bytes.to_string());
    out("ssl_session_cache", yes_no(t.session_cache));
    out("ssl_kernel_tls", yes_no(t.kernel_tls));
    out("ssl_min_version", min_version_text(t.min_version).to_string());
    out("ssl_handshake_timeout", t.handshake_timeout_secs.to_string());
}
