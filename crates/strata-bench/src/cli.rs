//! The command line. Workload options are shared by `run`, `sweep` and
//! `compare`; each is optional so that a `--preset` can supply it, and an
//! option given explicitly overrides the preset's value.
//!
//! Exit codes: 0 ok, 1 failure (including replies that failed validation),
//! 2 bad usage, 3 the server does not speak the requested protocol.

use crate::preset::{self, NAMES};
use crate::report::Report;
use crate::run::{run_full, RunConfig, RunError};
use crate::workload::{KeyDist, Protocol, ValueSize, Workload};
use crate::{compare, sweep};
use clap::{Args, Parser, Subcommand};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "strata-bench", version, about = "Load generator for memcached-protocol servers; every reply validated")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One measured run against a running server.
    Run {
        /// Server address, HOST:PORT (TCP; UDP uses the same port unless --udp-port).
        #[arg(long)]
        server: String,
        #[command(flatten)]
        load: LoadArgs,
        /// Write the report as JSON to this file (`-` for stdout).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Step the open-loop rate up to saturation; write a table and an SVG plot.
    Sweep {
        #[arg(long)]
        server: String,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        sweep: sweep::SweepArgs,
    },
    /// Start two servers the same way and run the same workload on each, A B A B.
    Compare {
        #[command(flatten)]
        servers: compare::CompareArgs,
        #[command(flatten)]
        load: LoadArgs,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// List the workload presets.
    Presets,
}

#[derive(Args, Clone, Debug, Default)]
pub struct LoadArgs {
    /// Workload preset: memaslap, memtier-binary, udp, pipelined-get, mget48, object-mix, latency.
    #[arg(long)]
    pub preset: Option<String>,
    /// Run length, e.g. 10s, 500ms, 1m [default: 10s].
    #[arg(long)]
    pub duration: Option<String>,
    /// Load threads, each with its own event loop [default: 1].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Connections (UDP: sockets), spread over the threads [default: 64].
    #[arg(long)]
    pub conns: Option<usize>,
    /// Requests in flight per connection [default: 1].
    #[arg(long)]
    pub pipeline: Option<usize>,
    /// text, meta, binary or udp (text over UDP) [default: text].
    #[arg(long)]
    pub protocol: Option<String>,
    /// Distinct keys [default: 10000].
    #[arg(long)]
    pub keys: Option<u32>,
    /// Draw keys from KEY_OFFSET..KEY_OFFSET+KEYS (e.g. keys a prefill of
    /// `--keys KEY_OFFSET` never set: gets that must miss) [default: 0].
    #[arg(long)]
    pub key_offset: Option<u32>,
    /// Key length in bytes [default: 64].
    #[arg(long)]
    pub key_size: Option<usize>,
    /// Value size: N, A-B (uniform), or mix (4-100 B, 1-2 KiB, 5-20 KiB) [default: 1024].
    #[arg(long)]
    pub value_size: Option<String>,
    /// Fraction of requests that are gets [default: 0.9].
    #[arg(long)]
    pub get_ratio: Option<f64>,
    /// Keys per get (multi-get when > 1) [default: 1].
    #[arg(long)]
    pub mget: Option<usize>,
    /// Key popularity: uniform or zipf:S [default: uniform].
    #[arg(long)]
    pub dist: Option<String>,
    /// Open loop at this many requests per second (default: closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// UDP port, if not the TCP port.
    #[arg(long)]
    pub udp_port: Option<u16>,
    /// Stop after this many requests in all (each thread its share), or at
    /// the end of --duration if that comes first: with uniform keys and a
    /// fixed --seed, the same sample of keys every run.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Do not set every key before the run.
    #[arg(long)]
    pub no_prefill: bool,
    /// Connections the prefill sets keys over, each its own contiguous
    /// share of the keys, driven by up to --threads threads [default: 1].
    #[arg(long)]
    pub prefill_conns: Option<usize>,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Pin the load threads to this CPU.
    #[arg(long)]
    pub load_cpu: Option<usize>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Speak TLS (rustls; the server's certificate is not verified).
    #[arg(long)]
    pub tls: bool,
    /// Measure new TLS connections instead of the workload: full (no
    /// session to resume) or resumed (one shared session cache). Each
    /// counts as a request: connect, handshake, `version`, close.
    #[arg(long, value_parser = ["full", "resumed"])]
    pub tls_handshakes: Option<String>,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    if !(n > 0.0 && n.is_finite()) {
        return Err(format!("duration must be positive: {s:?}"));
    }
    Ok(Duration::from_secs_f64(n * scale))
}

pub fn resolve(server: &str) -> Result<SocketAddr, String> {
    server.to_socket_addrs().map_err(|e| format!("{server}: {e}"))?.next().ok_or(format!("{server}: no address"))
}

impl LoadArgs {
    /// The run configuration: explicit options over the preset over defaults.
    pub fn config(&self, server: SocketAddr) -> Result<RunConfig, String> {
        let p = match &self.preset {
            Some(name) => Some(preset::preset(name).ok_or(format!("unknown preset {name:?}; presets: {}", NAMES.join(", ")))?),
            None => None,
        };
        let base = p.as_ref().map(|p| p.workload.clone()).unwrap_or(Workload {
            protocol: Protocol::Text,
            key_count: 10_000,
            key_offset: 0,
            key_size: 64,
            value_size: ValueSize::Fixed(1024),
            get_ratio: 0.9,
            mget: 1,
            dist: KeyDist::Uniform,
        });
        let workload = Workload {
            protocol: self.protocol.as_deref().map(Protocol::parse).transpose()?.unwrap_or(base.protocol),
            key_count: self.keys.unwrap_or(base.key_count),
            key_offset: self.key_offset.unwrap_or(base.key_offset),
            key_size: self.key_size.unwrap_or(base.key_size),
            value_size: self.value_size.as_deref().map(ValueSize::parse).transpose()?.unwrap_or(base.value_size),
            get_ratio: self.get_ratio.unwrap_or(base.get_ratio),
            mget: self.mget.unwrap_or(base.mget),
            dist: self.dist.as_deref().map(KeyDist::parse).transpose()?.unwrap_or(base.dist),
        };
        workload.validate()?;
        let mut udp_server = server;
        if let Some(port) = self.udp_port {
            udp_server.set_port(port);
        }
        let rate = self.rate.or(p.as_ref().and_then(|p| p.rate));
        if rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
            return Err("--rate must be positive".into());
        }
        if self.requests == Some(0) {
            return Err("--requests must be at least 1".into());
        }
        Ok(RunConfig {
            server,
            udp_server,
            workload,
            duration: parse_duration(self.duration.as_deref().unwrap_or("10s"))?,
            threads: self.threads.unwrap_or(1).max(1),
            conns: self.conns.or(p.as_ref().map(|p| p.conns)).unwrap_or(64).max(1),
            pipeline: self.pipeline.or(p.as_ref().map(|p| p.pipeline)).unwrap_or(1).max(1),
            rate,
            requests: self.requests,
            prefill: !self.no_prefill,
            prefill_conns: self.prefill_conns.unwrap_or(1).max(1),
            seed: self.seed,
            progress: !self.quiet,
            load_cpu: self.load_cpu,
            udp_timeout: Duration::from_millis(500),
            tls: (self.tls || self.tls_handshakes.is_some()).then(crate::tls::client_config),
            tls_handshakes: self.tls_handshakes.as_deref().map(|k| k == "resumed"),
        })
    }
}

pub fn write_json<T: serde::Serialize>(path: &PathBuf, value: &T) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    if path.as_os_str() == "-" {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn run_once(server: &str, load: &LoadArgs, json: Option<&PathBuf>) -> Result<Report, RunError> {
    let addr = resolve(server).map_err(RunError::Failed)?;
    let cfg = load.config(addr).map_err(RunError::Failed)?;
    let report = run_full(&cfg)?;
    if json.is_none_or(|p| p.as_os_str() != "-") {
        report.print();
    }
    if let Some(path) = json {
        write_json(path, &report).map_err(RunError::Failed)?;
    }
    Ok(report)
}

/// Exit status for a finished run: a reply that failed validation, a
/// broken connection, counts that do not add up, or no request completed
/// fail it. (Timeouts and SERVER_ERRORs are reported but are the server's
/// to give.)
fn verdict(report: &Report) -> i32 {
    let broken = ["bad_reply", "value_mismatch", "unexpected_reply", "client_error", "closed", "connect"];
    if broken.iter().any(|k| report.errors.contains_key(*k)) || !report.counts_add_up() || report.requests == 0 {
        eprintln!("strata-bench: replies failed validation, connections broke, or counts do not add up");
        1
    } else {
        0
    }
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Presets => {
            for name in NAMES {
                let p = preset::preset(name).expect("listed");
                println!("{:<15} {}", p.name, p.about);
            }
            return 0;
        }
        Command::Run { server, load, json } => run_once(&server, &load, json.as_ref()).map(|r| verdict(&r)),
        Command::Sweep { server, load, sweep } => sweep::main(&server, &load, &sweep),
        Command::Compare { servers, load, json } => compare::main(&servers, &load, json.as_ref()),
    };
    match result {
        Ok(code) => code,
        Err(RunError::Unsupported(why)) => {
            eprintln!("strata-bench: unsupported: {why}");
            3
        }
        Err(RunError::Failed(why)) => {
            eprintln!("strata-bench: {why}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn preset_then_overrides() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let args = LoadArgs { preset: Some("mget48".into()), conns: Some(3), udp_port: Some(9), ..LoadArgs::default() };
        let cfg = args.config(addr).unwrap();
        assert_eq!((cfg.workload.mget, cfg.workload.key_size, cfg.conns, cfg.pipeline), (48, 20, 3, 1));
        assert_eq!((cfg.udp_server.port(), cfg.rate), (9, None));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err() && parse_duration("5h").is_err());
        let bad = LoadArgs { preset: Some("nope".into()), ..LoadArgs::default() };
        assert!(bad.config(addr).is_err());
    }
}
