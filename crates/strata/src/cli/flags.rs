//! memcached 1.6.45's flags (its `shortopts` string and `longopts` table),
//! their help lines, and what each one does to the [`Draft`]. Checks that
//! memcached makes while reading a flag are made here, with its message and
//! exit code 1; the checks it makes after all flags are read live in
//! `validate.rs`.

use std::path::PathBuf;

use strata_server::settings::ProtocolChoice;

use super::getopt::{Spec, Takes, LONG_ONLY};
use super::{number, CliError, Draft};

/// One flag: its getopt spec and its line of `-h`.
pub struct Flag {
    pub spec: Spec,
    pub help: &'static str,
}

const fn flag(short: char, long: Option<&'static str>, takes: Takes, help: &'static str) -> Flag {
    Flag { spec: Spec { short, long, takes }, help }
}

use Takes::{Nothing, Optional, Value};

/// In the order of memcached's `-h`.
pub const FLAGS: &[Flag] = &[
    flag('p', Some("port"), Value, "-p, --port=<num>          TCP port to listen on (default: 11211; 0: no TCP; -1: any free port)"),
    flag('U', Some("udp-port"), Value, "-U, --udp-port=<num>      UDP port to listen on (default: 0, off; -1: any free port)"),
    flag('s', Some("unix-socket"), Value, "-s, --unix-socket=<file>  UNIX socket to listen on (disables network support)"),
    flag('a', Some("unix-mask"), Value, "-a, --unix-mask=<mask>    access mask for UNIX socket, in octal (default: 700)"),
    flag('A', Some("enable-shutdown"), Nothing, "-A, --enable-shutdown     enable ascii \"shutdown\" command"),
    flag('l', Some("listen"), Value, "-l, --listen=<addr>       interfaces to listen on, comma separated, each ip or ip:port\n                          (default: 127.0.0.1; see docs/COMPATIBILITY.md)"),
    flag('d', Some("daemon"), Nothing, "-d, --daemon              run as a daemon"),
    flag('r', Some("enable-coredumps"), Nothing, "-r, --enable-coredumps    maximize core file limit"),
    flag('u', Some("user"), Value, "-u, --user=<user>         assume identity of <username> (only when run as root)"),
    flag('m', Some("memory-limit"), Value, "-m, --memory-limit=<num>  item memory in megabytes (default: 64; k, m, g suffixes;\n                          auto: follow the memory cgroup or the host, see README)"),
    flag('M', Some("disable-evictions"), Nothing, "-M, --disable-evictions   return error on memory exhausted instead of evicting"),
    flag('c', Some("conn-limit"), Value, "-c, --conn-limit=<num>    max simultaneous connections (default: 1024)"),
    flag('k', Some("lock-memory"), Nothing, "-k, --lock-memory         lock down all paged memory"),
    flag('v', Some("verbose"), Optional, "-v, --verbose             verbose (print errors/warnings while in event loop)\n-vv                       very verbose (also print client commands/responses)"),
    flag('h', Some("help"), Nothing, "-h, --help                print this help and exit"),
    flag('i', Some("license"), Nothing, "-i, --license             print Strata's license"),
    flag('V', Some("version"), Nothing, "-V, --version             print version and exit"),
    flag('P', Some("pidfile"), Value, "-P, --pidfile=<file>      save PID in <file>"),
    flag('f', Some("slab-growth-factor"), Value, "-f, --slab-growth-factor=<num> chunk size growth factor of the size classes stats report (default: 1.25)"),
    flag('n', Some("slab-min-size"), Value, "-n, --slab-min-size=<bytes> min space used for key+value+flags (default: 48)"),
    flag('L', Some("enable-largepages"), Nothing, "-L, --enable-largepages   try to use large memory pages (transparent huge pages)"),
    flag('D', None, Value, "-D <char>                 use <char> as the delimiter between key prefixes and IDs\n                          for per-prefix stats (default: \":\"); turns stats detail on"),
    flag('t', Some("threads"), Value, "-t, --threads=<num>       number of threads to use (default: 4)"),
    flag('R', Some("max-reqs-per-event"), Value, "-R, --max-reqs-per-event  maximum number of requests per event (default: 20)"),
    flag('C', Some("disable-cas"), Nothing, "-C, --disable-cas         disable use of CAS"),
    flag('b', Some("listen-backlog"), Value, "-b, --listen-backlog=<num> set the backlog queue limit (default: 1024)"),
    flag('B', Some("protocol"), Value, "-B, --protocol=<name>     protocol - one of ascii, binary, or auto (default: auto-negotiate)"),
    flag('I', Some("max-item-size"), Value, "-I, --max-item-size=<num> adjusts max item size\n                          (default: 1m, min: 1k, max: 1024m)"),
    flag('S', Some("enable-sasl"), Nothing, "-S, --enable-sasl         turn on SASL authentication (binary protocol, PLAIN)"),
    flag('F', Some("disable-flush-all"), Nothing, "-F, --disable-flush-all   disable flush_all command"),
    flag('X', Some("disable-dumping"), Nothing, "-X, --disable-dumping     disable stats cachedump, stats detail, and lru_crawler metadump"),
    flag('W', Some("disable-watch"), Nothing, "-W, --disable-watch       disable watch commands (live logging)"),
    flag('Y', Some("auth-file"), Value, "-Y, --auth-file=<file>    enable ASCII protocol authentication. format:\n                          user:pass\\nuser2:pass2\\n"),
    flag('e', Some("memory-file"), Value, "-e, --memory-file=<file>  keep the cache in <file> (tmpfs or DAX): restored after a restart"),
    flag('Z', Some("enable-ssl"), Nothing, "-Z, --enable-ssl          enable TLS/SSL (rustls; see -o ssl_* below)"),
    flag('o', Some("extended"), Value, "-o, --extended            comma separated list of extended options (see below)"),
    flag('N', Some("napi-ids"), Value, "-N, --napi-ids            number of napi ids (accepted; Strata assigns threads round-robin)"),
    flag(CONFIG, Some("config"), Value, "    --config=<file>       read flags from <file>, in the format of Debian's /etc/memcached.conf:\n                          flags as here, one or more a line, '#' comments (Strata's own)"),
];

/// `--config`'s key in the table: it has no short letter.
pub const CONFIG: char = LONG_ONLY;

pub fn specs() -> Vec<Spec> {
    FLAGS.iter().map(|f| Spec { short: f.spec.short, long: f.spec.long, takes: f.spec.takes }).collect()
}

/// What a flag asks for besides settings.
pub enum Act {
    Continue,
    Help,
    License,
    Version,
}

fn positive(value: &str, message: &str) -> Result<i64, CliError> {
    match number::<i64>(value) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(CliError::new(1, message)),
    }
}

/// Apply one flag. `value` is present for every flag that takes one.
pub fn apply(d: &mut Draft, letter: char, value: Option<String>) -> Result<Act, CliError> {
    let v = value.unwrap_or_default();
    let s = &mut d.settings;
    match letter {
        'A' => s.shutdown_enabled = true,
        'Z' => d.ssl_enabled = true,
        'a' => {
            s.unix_mask = u32::from_str_radix(&v, 8)
                .map_err(|_| CliError::new(1, format!("Invalid unix mask '{v}': expected octal, e.g. 700")))?
        }
        'U' => {
            d.udp_port = port_number(&v, "-U")?;
            d.udp_specified = true;
        }
        'p' => {
            d.tcp_port = port_number(&v, "-p")?;
            d.tcp_specified = true;
        }
        's' => s.unix_socket = Some(PathBuf::from(v)),
        'm' => d.memory_limit = v,
        'M' => s.evictions_disabled = true,
        'c' => s.max_connections = positive(&v, "Maximum connections must be greater than 0")? as usize,
        'h' => return Ok(Act::Help),
        'i' => return Ok(Act::License),
        'V' => return Ok(Act::Version),
        'k' => d.lock_memory = true,
        'v' => s.verbose = s.verbose.saturating_add(1),
        'l' => d.listen.push(v),
        'd' => d.daemonize = true,
        'r' => d.core_dumps = true,
        'R' => s.reqs_per_event = positive(&v, "Number of requests per event must be greater than 0")? as usize,
        'u' => d.user = Some(v),
        'P' => d.pid_file = Some(PathBuf::from(v)),
        'e' => s.memory_file = Some(PathBuf::from(v)),
        'f' => {
            s.slabs.growth_factor = match number::<f64>(&v) {
                Some(f) if f > 1.0 && f.is_finite() => f,
                _ => return Err(CliError::new(1, "Factor must be greater than 1")),
            }
        }
        'n' => s.slabs.min_size_bytes = positive(&v, "Chunk size must be greater than 0")? as usize,
        't' => {
            let threads = positive(&v, "Number of threads must be greater than 0")?;
            if threads > 256 {
                return Err(CliError::new(1, format!("Number of threads must be at most 256 in Strata, got {threads}")));
            }
            if threads > 64 {
                strata_server::log_line!(
                    "WARNING: Setting a high number of worker threads is not recommended.\n \
                     Set this value to the number of cores in your machine or less."
                );
            }
            s.threads = threads as usize;
        }
        'D' => {
            let delimiter = *v.as_bytes().first().ok_or_else(|| CliError::new(1, "No delimiter specified"))?;
            s.detail_delimiter = delimiter;
            s.detail_enabled = true;
        }
        'L' => {
            super::large_pages::check()?;
            s.large_pages = true;
        }
        'C' => s.cas_disabled = true,
        'b' => {
            s.backlog = number::<i32>(&v)
                .ok_or_else(|| CliError::new(1, format!("Invalid listen backlog '{v}': a number is needed")))?
        }
        'B' => {
            d.protocol_specified = true;
            s.protocol = match v.as_str() {
                "auto" => ProtocolChoice::Auto,
                "binary" => ProtocolChoice::Binary,
                "ascii" => ProtocolChoice::Ascii,
                _ => {
                    return Err(CliError::new(
                        64,
                        format!("Invalid value for binding protocol: {v}\n -- should be one of auto, binary, or ascii"),
                    ))
                }
            }
        }
        'I' => d.item_size_max = v,
        'S' => s.sasl = true,
        'F' => s.flush_enabled = false,
        'X' => s.dumps_enabled = false,
        'W' => s.watch_enabled = false,
        'Y' => s.auth_file = Some(PathBuf::from(v)),
        'N' => {
            s.tunables.napi_ids = positive(&v, "Maximum number of NAPI IDs must be greater than 0")? as u32;
        }
        'o' => {
            for opt in super::warm::suboptions(&v) {
                super::extended::apply(d, &opt)?;
            }
        }
        CONFIG => return super::conf::apply(d, &v),
        other => return Err(CliError::new(1, format!("Illegal argument \"{other}\""))),
    }
    Ok(Act::Continue)
}

/// `-p`/`-U`: memcached reads them with `atoi`; Strata wants a number, and
/// takes -1 (any free port) and 0 (off) as memcached does. The range check
/// (`ERROR: Invalid port number`) comes after every flag is read.
fn port_number(value: &str, flag: &str) -> Result<i64, CliError> {
    match number::<i64>(value) {
        Some(n) if n >= -1 => Ok(n),
        Some(n) => Err(CliError::new(64, format!("ERROR: Invalid port number {n}."))),
        None => Err(CliError::new(1, format!("Invalid port '{value}' for {flag}: a number is needed"))),
    }
}
