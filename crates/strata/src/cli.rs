//! memcached's command line, short and long forms, turned into [`Settings`].
//! A bad flag or value is an error message and exit code 2, never a panic.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgAction, Parser};
use strata_server::settings::{IoEngine, ProtocolChoice};
use strata_server::Settings;

#[derive(Parser, Debug)]
#[command(
    name = "strata",
    version = concat!(env!("CARGO_PKG_VERSION"), " (memcached 1.6.45 protocol)"),
    about = "Strata: a memcached-compatible cache server",
    disable_help_flag = true,
    disable_version_flag = true
)]
struct Args {
    /// TCP port to listen on
    #[arg(short = 'p', long = "port", default_value_t = 11211, value_name = "NUM")]
    port: u16,
    /// UDP port to listen on (default: 0, off)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0, value_name = "NUM")]
    udp_port: u16,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket", value_name = "FILE")]
    unix_socket: Option<PathBuf>,
    /// access mask for UNIX socket, in octal
    #[arg(short = 'a', long = "unix-mask", default_value = "700", value_name = "MASK")]
    unix_mask: String,
    /// enable ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// interfaces to listen on, comma separated (default: 127.0.0.1; see docs/COMPATIBILITY.md)
    #[arg(short = 'l', long = "listen", value_name = "ADDR")]
    listen: Vec<String>,
    /// run as a daemon
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// assume identity of <username> (only when run as root)
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// save PID in <file>
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pidfile: Option<PathBuf>,
    /// item memory in megabytes (default: 64)
    #[arg(short = 'm', long = "memory-limit", default_value = "64", value_name = "NUM")]
    memory_limit: String,
    /// return error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// max simultaneous connections (default: 1024)
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024, value_name = "NUM")]
    conn_limit: usize,
    /// verbose (-vv very verbose)
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// number of threads to use (default: 4)
    #[arg(short = 't', long = "threads", default_value_t = 4, value_name = "NUM")]
    threads: usize,
    /// maximum number of requests per event (default: 20)
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20, value_name = "NUM")]
    max_reqs_per_event: usize,
    /// disable use of CAS
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// set the backlog queue limit (default: 1024)
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024, value_name = "NUM")]
    listen_backlog: i32,
    /// max item size (k and m suffixes; default: 1m, min: 1k, max: 1024m)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_name = "SIZE")]
    max_item_size: String,
    /// protocol: ascii, binary, or auto (default: auto-negotiate)
    #[arg(short = 'B', long = "protocol", default_value = "auto", value_name = "NAME")]
    protocol: String,
    /// turn on SASL authentication (binary protocol, PLAIN)
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// text-protocol authentication: a file of user:password lines
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// keep the cache in FILE (tmpfs or DAX): restored after a restart or a crash
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    memory_file: Option<PathBuf>,
    /// disable flush_all command
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// comma separated list of extended options (idle_timeout=N, maxconns_fast, no_maxconns_fast, pin_threads, io_engine=..., ...)
    #[arg(short = 'o', long = "extended", value_name = "OPTS")]
    extended: Vec<String>,
    /// print this help and exit
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// print version and exit
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    version: Option<bool>,
}

/// What the process should do.
pub enum Parsed {
    Run(Options),
    Exit(ExitCode),
}

pub struct Options {
    pub settings: Settings,
    pub user: Option<String>,
    pub daemonize: bool,
    pub pid_file: Option<PathBuf>,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return Ok(Parsed::Exit(ExitCode::SUCCESS));
        }
        Err(e) => return Err(e.render().to_string().trim_start_matches("error: ").trim_end().to_string()),
    };
    let mut settings = Settings {
        tcp_port: args.port,
        udp_port: args.udp_port,
        unix_mask: u32::from_str_radix(&args.unix_mask, 8)
            .map_err(|_| format!("invalid unix mask '{}': expected octal, e.g. 700", args.unix_mask))?,
        shutdown_enabled: args.enable_shutdown,
        memory_limit_bytes: parse_size(&args.memory_limit, 1 << 20)
            .ok_or_else(|| format!("invalid memory limit '{}'", args.memory_limit))?,
        evictions_disabled: args.disable_evictions,
        max_connections: args.conn_limit,
        verbose: args.verbose,
        threads: args.threads,
        reqs_per_event: args.max_reqs_per_event,
        cas_disabled: args.disable_cas,
        backlog: args.listen_backlog,
        item_size_max: parse_size(&args.max_item_size, 1)
            .ok_or_else(|| format!("invalid item size '{}'", args.max_item_size))? as usize,
        flush_enabled: !args.disable_flush_all,
        ..Settings::default()
    };
    settings.udp_enabled = settings.udp_port != 0;
    if settings.threads == 0 || settings.threads > 256 {
        return Err(format!("number of threads must be 1..256, got {}", settings.threads));
    }
    if settings.max_connections == 0 {
        return Err("the connection limit (-c) must be at least 1".into());
    }
    if settings.reqs_per_event == 0 {
        return Err("the number of requests per event (-R) must be at least 1".into());
    }
    if settings.item_size_max < 1024 {
        return Err("item max size cannot be less than 1024 bytes".into());
    }
    if settings.item_size_max > 1 << 30 {
        return Err("cannot set item size limit higher than 1 gigabyte".into());
    }
    if settings.memory_limit_bytes < settings.item_size_max as u64 {
        return Err("item max size cannot be larger than the memory limit (-m)".into());
    }
    settings.protocol = match args.protocol.as_str() {
        "auto" => ProtocolChoice::Auto,
        "ascii" => ProtocolChoice::Ascii,
        "binary" => ProtocolChoice::Binary,
        other => return Err(format!("invalid protocol '{other}': use ascii, binary or auto")),
    };
    settings.sasl = args.enable_sasl;
    settings.auth_file = args.auth_file;
    settings.sasl_pwdb = std::env::var_os("MEMCACHED_SASL_PWDB").map(PathBuf::from);
    if settings.sasl {
        if settings.protocol == ProtocolChoice::Ascii {
            return Err("you cannot allow the ASCII protocol while using SASL (-S)".into());
        }
        settings.protocol = ProtocolChoice::Binary;
    }
    if settings.auth_file.is_some() {
        if settings.sasl {
            return Err("-Y (text authentication) and -S (SASL) cannot be combined".into());
        }
        settings.protocol = ProtocolChoice::Ascii;
    }
    if let Ok(name) = std::env::var("STRATA_IO_ENGINE") {
        settings.io_engine = io_engine(&name).map_err(|e| format!("STRATA_IO_ENGINE: {e}"))?;
    }
    settings.unix_socket = args.unix_socket;
    settings.memory_file = args.memory_file;
    settings.tcp_listen = listen_addrs(&args.listen, args.port)?;
    for opts in &args.extended {
        for opt in opts.split(',').filter(|o| !o.is_empty()) {
            extended(&mut settings, opt)?;
        }
    }
    if settings.udp_enabled && (settings.sasl || settings.auth_file.is_some()) {
        return Err("UDP (-U) cannot be used with authentication (-S or -Y)".into());
    }
    Ok(Parsed::Run(Options { settings, user: args.user, daemonize: args.daemon, pid_file: args.pidfile }))
}

/// A size with an optional k/m/g suffix; a bare number is in `unit` bytes.
fn parse_size(text: &str, unit: u64) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, multiplier) = match lower.as_bytes().last()? {
        b'k' => (&lower[..lower.len() - 1], 1 << 10),
        b'm' => (&lower[..lower.len() - 1], 1 << 20),
        b'g' => (&lower[..lower.len() - 1], 1 << 30),
        _ => (&lower[..], unit),
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

/// `-l` values: comma-separated addresses, each optionally with a port;
/// IPv6 in brackets when it carries a port.
fn listen_addrs(values: &[String], port: u16) -> Result<Vec<SocketAddr>, String> {
    if values.is_empty() {
        return Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]);
    }
    let mut addrs = Vec::new();
    for item in values.iter().flat_map(|v| v.split(',')).filter(|s| !s.is_empty()) {
        let item = item.strip_prefix("notls:").unwrap_or(item);
        if let Ok(addr) = item.parse::<SocketAddr>() {
            addrs.push(addr);
        } else if let Ok(ip) = item.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
            addrs.push(SocketAddr::new(ip, port));
        } else if item == "localhost" {
            addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        } else {
            return Err(format!("invalid listen address '{item}'"));
        }
    }
    Ok(addrs)
}

fn io_engine(name: &str) -> Result<IoEngine, String> {
    match name {
        "auto" => Ok(IoEngine::Auto),
        "uring" | "io_uring" => Ok(IoEngine::Uring),
        "epoll" => Ok(IoEngine::Epoll),
        other => Err(format!("-o io_engine must be uring, epoll or auto, not '{other}'")),
    }
}

/// One `-o` option.
fn extended(settings: &mut Settings, opt: &str) -> Result<(), String> {
    let (key, value) = match opt.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (opt, None),
    };
    let number = |v: Option<&str>| -> Result<u64, String> {
        v.and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| format!("-o {key} needs a numeric value"))
    };
    match key {
        "idle_timeout" => {
            let secs = number(value)?;
            settings.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
        }
        "udp_max_reply" => settings.udp_max_reply_bytes = number(value)? as usize,
        "io_engine" => settings.io_engine = io_engine(value.unwrap_or(""))?,
        "sasl_pwdb" => {
            let path = value.filter(|v| !v.is_empty()).ok_or("-o sasl_pwdb needs a file name")?;
            settings.sasl_pwdb = Some(PathBuf::from(path));
        }
        "restart_strict" => settings.restart_strict = true,
        "pin_threads" => settings.pin_threads = true,
        "no_pin_threads" => settings.pin_threads = false,
        "maxconns_fast" => settings.maxconns_fast = true,
        "no_maxconns_fast" => settings.maxconns_fast = false,
        // Sizing and tuning knobs of memcached's slab allocator and LRU that
        // Strata's engine does not have; accepted so existing command lines
        // keep working (docs/COMPATIBILITY.md lists them).
        "hashpower" | "slab_chunk_max" | "lru_crawler_sleep" | "lru_crawler_tocrawl" | "hot_lru_pct"
        | "warm_lru_pct" | "temporary_ttl" | "read_buf_mem_limit" | "tail_repair_time" => {
            number(value)?;
        }
        "hot_max_factor" | "warm_max_factor" | "slab_automove_freeratio" => {
            value.and_then(|v| v.parse::<f64>().ok()).ok_or_else(|| format!("-o {key} needs a number"))?;
        }
        "hash_algorithm" => match value {
            Some("jenkins" | "murmur3" | "xxh3") => {}
            _ => return Err("-o hash_algorithm must be jenkins, murmur3 or xxh3".into()),
        },
        "modern" | "no_modern" | "lru_crawler" | "no_lru_crawler" | "lru_maintainer" | "no_lru_maintainer"
        | "track_sizes" | "no_hashexpand" | "slab_reassign" | "no_slab_reassign" | "slab_automove" => {}
        _ => return Err(format!("unknown extended option '{key}' (-o)")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Settings, String> {
        let args = std::iter::once("strata").chain(args.iter().copied()).map(OsString::from);
        match parse(args)? {
            Parsed::Run(o) => Ok(o.settings),
            Parsed::Exit(_) => Err("exit".into()),
        }
    }

    #[test]
    fn memcached_flags() {
        let s = run(&["-p", "2000", "-m", "128", "-c", "10", "-t", "2", "-I", "2m", "-vv", "-o", "idle_timeout=5"]).unwrap();
        assert_eq!(s.tcp_listen, vec!["127.0.0.1:2000".parse().unwrap()]);
        assert_eq!(s.memory_limit_bytes, 128 << 20);
        assert_eq!(s.item_size_max, 2 << 20);
        assert_eq!(s.verbose, 2);
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(5)));
        let s = run(&["--port=3000", "-l", "0.0.0.0,::1", "-I", "512k"]).unwrap();
        assert_eq!(s.tcp_listen.len(), 2);
        assert_eq!(s.tcp_listen[1], "[::1]:3000".parse().unwrap());
        assert_eq!(s.item_size_max, 512 << 10);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(run(&["-x"]).is_err());
        assert!(run(&["-p", "notaport"]).is_err());
        assert!(run(&["-o", "bogus=1"]).is_err());
        assert!(run(&["-o", "idle_timeout=abc"]).is_err());
        assert!(run(&["-I", "12q"]).is_err());
        assert!(run(&["-I", "2g"]).is_err());
        assert!(run(&["-t", "0"]).is_err());
        assert!(run(&["-l", "nowhere"]).is_err());
    }
}
