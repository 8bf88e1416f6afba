//! `-Z` and the `-o ssl_*` options: memcached 1.6.45's parsing and
//! messages (exit code 1 for a bad option, as its `goto error`); the
//! files are loaded when the server starts (`strata_server::tls`), where a
//! bad certificate or an unsupported setting exits 64 as memcached's
//! `ssl_init` does.

use std::path::PathBuf;

use strata_server::tls::VerifyMode;

use super::{number, CliError, Draft};

fn error(message: impl Into<String>) -> CliError {
    CliError::new(1, message)
}

fn needed<'a>(value: Option<&'a str>, name: &str) -> Result<&'a str, CliError> {
    value.ok_or_else(|| error(format!("Missing {name} argument")))
}

/// One `ssl_*` suboption (`key` is known to start with `ssl_`).
pub fn apply(d: &mut Draft, key: &str, value: Option<&str>, opt: &str) -> Result<(), CliError> {
    let t = &mut d.tls;
    match key {
        "ssl_chain_cert" => t.chain_cert = Some(PathBuf::from(needed(value, key)?)),
        "ssl_key" => t.key = Some(PathBuf::from(needed(value, key)?)),
        "ssl_verify_mode" => {
            let v = needed(value, key)?;
            let n = number::<i64>(v).ok_or_else(|| error("could not parse argument to ssl_verify_mode"))?;
            t.verify_mode = u32::try_from(n)
                .ok()
                .and_then(VerifyMode::from_number)
                .ok_or_else(|| error("Invalid ssl_verify_mode. Use help to see valid options."))?;
        }
        "ssl_keyformat" => {
            let v = needed(value, key)?;
            let n = number::<i64>(v).ok_or_else(|| error("could not parse argument to ssl_keyformat"))?;
            // OpenSSL's SSL_FILETYPE_PEM = 1, SSL_FILETYPE_ASN1 = 2.
            t.key_format = match n {
                1 | 2 => n as u32,
                _ => return Err(error(format!("ssl_keyformat={n}: Strata reads keys as 1 (PEM) or 2 (DER); engines are not supported"))),
            };
        }
        "ssl_ciphers" => t.ciphers = Some(needed(value, key)?.to_string()),
        "ssl_ca_cert" => t.ca_cert = Some(PathBuf::from(needed(value, key)?)),
        "ssl_wbuf_size" => {
            let v = needed(value, key)?;
            let kb = number::<u32>(v).ok_or_else(|| error("could not parse argument to ssl_wbuf_size"))?;
            t.wbuf_size_bytes = kb as usize * 1024;
        }
        "ssl_session_cache" => t.session_cache = true,
        "ssl_kernel_tls" => t.kernel_tls = true,
        "ssl_min_version" => {
            let v = needed(value, key)?;
            let n = number::<i64>(v).ok_or_else(|| error("could not parse argument to ssl_min_version"))?;
            t.min_version = match n {
                0..=3 => n as u32,
                _ => return Err(error("Invalid ssl_min_version. Use help to see valid options.")),
            };
        }
        // Strata's own: seconds a client may take to finish its handshake.
        "ssl_handshake_timeout" => {
            let v = needed(value, key)?;
            t.handshake_timeout_secs = number::<u32>(v)
                .filter(|&s| s > 0)
                .ok_or_else(|| error("could not parse argument to ssl_handshake_timeout (seconds, at least 1)"))?;
        }
        _ => return Err(error(format!("Illegal suboption \"{opt}\""))),
    }
    Ok(())
}
