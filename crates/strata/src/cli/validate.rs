//! The checks memcached 1.6.45's `main()` makes once every flag is read, in
//! its order and with its messages and exit codes (64, `EX_USAGE`), and the
//! turning of the [`Draft`] into the server's [`Settings`]: sizes with their
//! units, ports (`-1` any free port, `0` off), listen addresses, the size
//! class geometry (`-I`, `slab_chunk_max`, `slab_sizes`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use strata_server::settings::ProtocolChoice;
use strata_server::tls::ListenTls;

use super::{CliError, Draft, Options};

/// memcached's slab page (`settings.slab_page_size`): 1 MiB.
pub const SLAB_PAGE_BYTES: usize = 1 << 20;
/// memcached's `CHUNK_ALIGN_BYTES`.
const CHUNK_ALIGN_BYTES: usize = 8;
/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES` (63 + 1).
const MAX_SLAB_CLASSES: usize = 64;

fn usage(message: impl Into<String>) -> CliError {
    CliError::new(64, message)
}

pub fn finish(mut d: Draft) -> Result<Options, CliError> {
    let s = &mut d.settings;
    super::memory_auto::apply(&d.memory_limit, s)?;
    if !d.journal_size_given {
        s.warm.journal_entries = strata_server::journal::default_entries(s.memory_limit_bytes);
    }
    let item_size_max = item_size(&d.item_size_max)?;

    if s.tunables.napi_ids as usize > s.threads {
        return Err(usage(format!(
            "Number of napi_ids({}) cannot be greater than number of threads({})",
            s.tunables.napi_ids, s.threads
        )));
    }
    item_size_not_small(item_size_max)?;
    if item_size_max > s.memory_limit_bytes / 2 {
        return Err(usage("Cannot set item size limit higher than 1/2 of memory max."));
    }
    item_size_not_large(item_size_max)?;
    let item_size_max = item_size_max as usize;
    s.item_size_max = item_size_max;
    if s.slabs.chunk_max_bytes == 0 || (item_size_max > 1 << 20 && !d.slab_chunk_max_changed) {
        s.slabs.chunk_max_bytes = SLAB_PAGE_BYTES / 2;
    }
    let chunk_max = s.slabs.chunk_max_bytes;
    if chunk_max > item_size_max {
        return Err(usage(format!(
            "slab_chunk_max (bytes: {chunk_max}) cannot be larger than -I (item_size_max {item_size_max})"
        )));
    }
    if item_size_max % chunk_max != 0 {
        return Err(usage(format!(
            "-I (item_size_max: {item_size_max}) must be evenly divisible by slab_chunk_max (bytes: {chunk_max})"
        )));
    }
    if SLAB_PAGE_BYTES % chunk_max != 0 {
        return Err(usage(format!(
            "slab_chunk_max (bytes: {chunk_max}) must divide evenly into {SLAB_PAGE_BYTES} (slab_page_size)"
        )));
    }
    // memcached's storage_check_config comes here, before slab_sizes.
    super::ext::check_usage(&s.ext, item_size_max, d.udp_port != 0)?;
    if let Some(list) = &d.slab_sizes {
        s.slabs.sizes = Some(slab_sizes(list, s.slabs.min_size_bytes, chunk_max)?);
    }
    let t = &s.tunables;
    if t.hot_lru_pct + t.warm_lru_pct > 80 {
        return Err(usage("hot_lru_pct + warm_lru_pct cannot be more than 80% combined"));
    }
    if t.temp_lru && !t.lru_maintainer {
        return Err(usage("temporary_ttl requires lru_maintainer to be enabled"));
    }

    if s.sasl {
        if !d.protocol_specified {
            s.protocol = ProtocolChoice::Binary;
        } else if s.protocol != ProtocolChoice::Binary {
            return Err(usage("ERROR: You cannot allow the ASCII protocol while using SASL."));
        }
        if d.udp_port != 0 {
            return Err(usage("ERROR: Cannot enable UDP while using binary SASL authentication."));
        }
    }
    if s.auth_file.is_some() {
        if !d.protocol_specified {
            s.protocol = ProtocolChoice::Ascii;
        } else if s.protocol != ProtocolChoice::Ascii {
            return Err(usage("ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."));
        }
    }
    if d.udp_specified && d.udp_port != 0 && !d.tcp_specified {
        d.tcp_port = d.udp_port;
    }
    for port in [d.tcp_port, d.udp_port] {
        port_in_range(port)?;
    }
    if s.auth_file.is_some() && d.udp_port != 0 {
        return Err(usage("Cannot use UDP with ascii authentication enabled (-U 0 to disable)"));
    }

    // -1 asks for any free port: port 0 at bind time.
    let bind_port = |port: i64| u16::try_from(port.max(0)).unwrap_or(0);
    s.tcp_enabled = d.tcp_port != 0;
    s.tcp_port = bind_port(d.tcp_port);
    s.udp_enabled = d.udp_port != 0;
    s.udp_port = bind_port(d.udp_port);
    if d.ssl_enabled && !s.tcp_enabled {
        return Err(usage("ERROR: You cannot enable SSL without a TCP port."));
    }
    let (listen, listen_tls) = listen_addrs_tls(&d.listen, s.tcp_port, d.ssl_enabled)?;
    s.tcp_listen = listen;
    s.tcp_listen_tls = listen_tls;
    if d.ssl_enabled {
        s.tls = Some(d.tls.clone());
    }
    if s.handover.is_some() && s.unix_socket.is_some() {
        return Err(usage("handover: only TCP listeners are handed over, not -s"));
    }
    s.port_file = std::env::var_os("MEMCACHED_PORT_FILENAME").map(PathBuf::from);
    if s.sasl_pwdb.is_none() {
        s.sasl_pwdb = std::env::var_os("MEMCACHED_SASL_PWDB").map(PathBuf::from);
    }
    if let Ok(name) = std::env::var("STRATA_IO_ENGINE") {
        s.io_engine = super::extended::io_engine_choice(&name).map_err(|e| usage(format!("STRATA_IO_ENGINE: {e}")))?;
    }
    // memcached's storage_init, after the other checks: the geometry, then
    // the files.
    super::ext::check_geometry(&d.settings.ext)?;
    if let super::Files::Real = d.files {
        super::ext::check_files(&d.settings.ext)?;
    }
    Ok(Options {
        settings: d.settings,
        user: d.user,
        daemonize: d.daemonize,
        pid_file: d.pid_file,
        lock_memory: d.lock_memory,
        core_dumps: d.core_dumps,
    })
}

/// The checks of [`finish`] that need one flag's value alone (`-m`, `-I`,
/// `-p`, `-U`), with their messages and codes: a configuration file runs
/// them on each line so that a bad value names its line (conf.rs). The
/// checks across flags (`-I` above half of `-m`, SASL with `-B ascii`...)
/// stay in `finish`, where no single line is to blame.
pub fn check_value(letter: char, value: &str) -> Result<(), CliError> {
    match letter {
        'm' => super::memory_auto::check_text(value),
        'I' => {
            let size = item_size(value)?;
            item_size_not_small(size)?;
            item_size_not_large(size)
        }
        'p' | 'U' => super::number::<i64>(value).map_or(Ok(()), port_in_range),
        _ => Ok(()),
    }
}

fn item_size(text: &str) -> Result<u64, CliError> {
    parse_size(text, 1).ok_or_else(|| usage(format!("Invalid max item size '{text}': a number with an optional k or m suffix")))
}

fn item_size_not_small(size: u64) -> Result<(), CliError> {
    if size < 1024 {
        return Err(usage("Item max size cannot be less than 1024 bytes."));
    }
    Ok(())
}

fn item_size_not_large(size: u64) -> Result<(), CliError> {
    if size > 1 << 30 {
        return Err(usage("Cannot set item size limit higher than a gigabyte."));
    }
    Ok(())
}

fn port_in_range(port: i64) -> Result<(), CliError> {
    if port > 65535 {
        return Err(usage(format!("ERROR: Invalid port number {port}.")));
    }
    Ok(())
}

/// A size with an optional k/m/g suffix (either case); a bare number is in
/// `unit` bytes.
pub fn parse_size(text: &str, unit: u64) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, multiplier) = match lower.as_bytes().last()? {
        b'k' => (&lower[..lower.len() - 1], 1 << 10),
        b'm' => (&lower[..lower.len() - 1], 1 << 20),
        b'g' => (&lower[..lower.len() - 1], 1 << 30),
        _ => (&lower[..], unit),
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

/// `-o slab_sizes=a-b-c`, checked as memcached's `_parse_slab_sizes`: each
/// size within `-n`..`slab_chunk_max`, increasing by more than the 8-byte
/// chunk alignment, at most 62 of them.
fn slab_sizes(list: &str, min_bytes: usize, chunk_max: usize) -> Result<Vec<usize>, CliError> {
    let mut sizes = Vec::new();
    let mut last = 0usize;
    for token in list.split('-').filter(|t| !t.is_empty()) {
        let size = match token.parse::<u32>() {
            Ok(size) if size as usize >= min_bytes && size as usize <= chunk_max => size as usize,
            _ => return Err(usage(format!("slab size {token} is out of valid range"))),
        };
        if last >= size {
            return Err(usage(format!("slab size {size} cannot be lower than or equal to a previous class size")));
        }
        if size <= last + CHUNK_ALIGN_BYTES {
            return Err(usage(format!(
                "slab size {size} must be at least {CHUNK_ALIGN_BYTES} bytes larger than previous class"
            )));
        }
        sizes.push(size);
        last = size;
        if sizes.len() >= MAX_SLAB_CLASSES - 1 {
            return Err(usage("too many slab classes specified"));
        }
    }
    if sizes.is_empty() {
        return Err(usage("slab_sizes needs at least one size, e.g. slab_sizes=96-192-384"));
    }
    Ok(sizes)
}

/// `-l` values: addresses separated by `,` or `;`, each optionally with a
/// port; IPv6 in brackets when it carries a port.
/// The `-l` addresses with each one's TLS mode: with `-Z` every listener
/// is TLS unless it says `notls:`; `btls:` asks no client certificate,
/// `mtls:` requires one (memcached's `server_sockets`).
pub fn listen_addrs_tls(values: &[String], port: u16, ssl: bool) -> Result<(Vec<SocketAddr>, Vec<ListenTls>), CliError> {
    let default_mode = if ssl { ListenTls::Default } else { ListenTls::Off };
    if values.is_empty() {
        return Ok((vec![SocketAddr::from(([127, 0, 0, 1], port))], vec![default_mode]));
    }
    let mut addrs = Vec::new();
    let mut modes = Vec::new();
    for item in values.iter().flat_map(|v| v.split([',', ';'])).filter(|s| !s.is_empty()) {
        let mut mode = default_mode;
        let mut item = item;
        for (prefix, m) in [("notls:", ListenTls::Off), ("btls:", ListenTls::Basic), ("mtls:", ListenTls::Peer)] {
            if let Some(rest) = item.strip_prefix(prefix) {
                if !ssl {
                    // memcached's own words (its mtls message says 'otls').
                    let name = if m == ListenTls::Peer { "otls" } else { &prefix[..prefix.len() - 1] };
                    return Err(CliError::new(71, format!("'{name}' option is valid only when SSL is enabled")));
                }
                mode = m;
                item = rest;
                break;
            }
        }
        if item.starts_with("proto") || item.starts_with("tag") {
            return Err(CliError::new(
                71,
                format!("-l {item}: per-listener protocol and tag (proto[...]:, tag[...]:) are not supported by Strata yet"),
            ));
        }
        let addr = if let Ok(addr) = item.parse::<SocketAddr>() {
            addr
        } else if let Ok(ip) = item.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
            SocketAddr::new(ip, port)
        } else if item == "localhost" {
            SocketAddr::from(([127, 0, 0, 1], port))
        } else {
            return Err(CliError::new(71, format!("getaddrinfo(): Name or service not known: invalid listen address '{item}'")));
        };
        // memcached skips a -l it already has.
        if !addrs.contains(&addr) {
            addrs.push(addr);
            modes.push(mode);
        }
    }
    Ok((addrs, modes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_sizes_as_memcached_checks_them() {
        assert_eq!(slab_sizes("96-192-384", 48, 524288).unwrap(), vec![96, 192, 384]);
        assert_eq!(slab_sizes("100--200", 48, 524288).unwrap(), vec![100, 200]);
        let err = |list| slab_sizes(list, 48, 524288).unwrap_err();
        assert_eq!(err("100-90").message, "slab size 90 cannot be lower than or equal to a previous class size");
        assert_eq!(err("100-104").message, "slab size 104 must be at least 8 bytes larger than previous class");
        assert_eq!(err("10").message, "slab size 10 is out of valid range");
        assert_eq!(err("600000").message, "slab size 600000 is out of valid range");
        assert_eq!(err("x").code, 64);
        let many: Vec<String> = (1..=63).map(|i| (i * 100).to_string()).collect();
        assert_eq!(err(&many.join("-")).message, "too many slab classes specified");
    }

    #[test]
    fn listen_addresses() {
        let addrs = listen_addrs_tls(&["127.0.0.1".into(), "127.0.0.1;[::1]:9".into()], 7, false).unwrap().0;
        assert_eq!(addrs, vec!["127.0.0.1:7".parse().unwrap(), "[::1]:9".parse().unwrap()]);
        assert_eq!(listen_addrs_tls(&["proto[ascii]:127.0.0.1".into()], 7, false).unwrap_err().code, 71);
        let (addrs, modes) = listen_addrs_tls(&["notls:127.0.0.1:1,btls:127.0.0.1:2;mtls:127.0.0.1:3,127.0.0.1:4".into()], 7, true).unwrap();
        assert_eq!(addrs.len(), 4);
        assert_eq!(modes, vec![ListenTls::Off, ListenTls::Basic, ListenTls::Peer, ListenTls::Default]);
        assert_eq!(listen_addrs_tls(&["mtls:127.0.0.1:3".into()], 7, false).unwrap_err().message, "'otls' option is valid only when SSL is enabled");
    }

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("64", 1 << 20), Some(64 << 20));
        assert_eq!(parse_size("512k", 1), Some(512 << 10));
        assert_eq!(parse_size("2M", 1), Some(2 << 20));
        assert_eq!(parse_size("12q", 1), None);
    }
}
