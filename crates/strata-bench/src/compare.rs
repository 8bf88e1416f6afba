//! `strata-bench compare`: the A/B instrument every performance issue
//! reports with. Both servers are started from command templates (`{port}`
//! is filled in), each pinned to `--server-cpu`, with the load threads
//! pinned to `--load-cpu`; the same workload then runs alternately A B A B
//! (`--rounds` pairs), so drift on a shared machine hits both alike.
//!
//! Besides the run report, each run reads the server's user+system CPU time
//! from `/proc/PID/stat` before and after the measured phase (the prefill
//! is outside it) and divides by the requests completed: CPU per request.
//! `/proc` counts in 10 ms ticks, so over a 10 s run at full load that
//! figure is within 0.1%.

use crate::cli::{resolve, write_json, LoadArgs};
use crate::report::Report;
use crate::run::{prefill, probe, run, RunError};
use crate::server::Server;
use crate::sys::process_cpu_time;
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct CompareArgs {
    /// Command for server A with {port}, e.g. "target/release/strata -p {port} -t 1".
    #[arg(long)]
    pub a: String,
    /// Command for server B, e.g. "memcached -p {port} -U 0 -u root -t 1".
    #[arg(long)]
    pub b: String,
    /// A/B pairs to run.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// CPU both servers are pinned to (the load goes to --load-cpu, default 1).
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
}

#[derive(Serialize, Clone)]
pub struct Measured {
    pub server: String,
    pub round: u32,
    pub cpu_us_per_request: f64,
    pub report: Report,
}

#[derive(Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub runs: Vec<Measured>,
    /// (figure, mean A, mean B, B / A)
    pub summary: Vec<(String, f64, f64, f64)>,
}

type Figure = (&'static str, fn(&Measured) -> f64);

const FIGURES: [Figure; 7] = [
    ("throughput req/s", |m| m.report.throughput_rps),
    ("p50 µs", |m| m.report.latency.p50_us),
    ("p90 µs", |m| m.report.latency.p90_us),
    ("p99 µs", |m| m.report.latency.p99_us),
    ("p99.9 µs", |m| m.report.latency.p999_us),
    ("server CPU µs/request", |m| m.cpu_us_per_request),
    ("errors", |m| m.report.error_total as f64),
];

fn measure(server: &Server, name: &str, round: u32, load: &LoadArgs, load_cpu: usize) -> Result<Measured, RunError> {
    let addr = resolve(&server.addr().to_string()).map_err(RunError::Failed)?;
    let mut cfg = load.config(addr).map_err(RunError::Failed)?;
    cfg.load_cpu = Some(load_cpu);
    cfg.progress = false;
    probe(&cfg)?;
    if cfg.prefill {
        prefill(&cfg)?;
    }
    let cpu = || process_cpu_time(server.pid()).map_err(|e| RunError::Failed(format!("/proc for {name}: {e}")));
    let before = cpu()?;
    let report = run(&cfg);
    let spent = cpu()?.saturating_sub(before);
    let cpu_us_per_request = spent.as_secs_f64() * 1e6 / report.requests.max(1) as f64;
    Ok(Measured { server: name.to_string(), round, cpu_us_per_request, report })
}

pub fn main(args: &CompareArgs, load: &LoadArgs, json: Option<&PathBuf>) -> Result<i32, RunError> {
    let a = Server::start(&args.a, Some(args.server_cpu)).map_err(RunError::Failed)?;
    let b = Server::start(&args.b, Some(args.server_cpu)).map_err(RunError::Failed)?;
    println!("A: {}  (pid {})\nB: {}  (pid {})", a.command, a.pid(), b.command, b.pid());
    let load_cpu = load.load_cpu.unwrap_or(1);
    println!("servers on CPU {}, load on CPU {load_cpu}", args.server_cpu);
    let mut runs = Vec::new();
    for round in 1..=args.rounds.max(1) {
        for (name, server) in [("A", &a), ("B", &b)] {
            let m = measure(server, name, round, load, load_cpu)?;
            println!(
                "round {round} {name}: {:>10.0} req/s  p50 {:>7.1}  p99 {:>7.1}  p99.9 {:>7.1} µs  CPU {:.3} µs/req  errors {}",
                m.report.throughput_rps, m.report.latency.p50_us, m.report.latency.p99_us, m.report.latency.p999_us, m.cpu_us_per_request, m.report.error_total
            );
            runs.push(m);
        }
    }
    let mean = |name: &str, f: fn(&Measured) -> f64| {
        let v: Vec<f64> = runs.iter().filter(|m| m.server == name).map(f).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    println!("\n| figure | A | B | B / A |\n|---|---|---|---|");
    let mut summary = Vec::new();
    for (label, f) in FIGURES {
        let (ma, mb) = (mean("A", f), mean("B", f));
        let ratio = if ma != 0.0 { mb / ma } else { f64::NAN };
        println!("| {label} | {ma:.2} | {mb:.2} | {ratio:.3} |");
        summary.push((label.to_string(), ma, mb, ratio));
    }
    if let Some(path) = json {
        let c = Comparison { a: a.command.clone(), b: b.command.clone(), runs, summary };
        write_json(path, &c).map_err(RunError::Failed)?;
    }
    Ok(0)
}
