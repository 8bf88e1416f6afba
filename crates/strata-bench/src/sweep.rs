//! `strata-bench sweep`: latency against throughput. A closed-loop run first
//! finds the saturation throughput X with the same connections and depth;
//! then open-loop runs step the rate through X/steps, 2X/steps, ... X and on
//! past it in tenths of X, stopping at the first step that achieves less
//! than 90% of its target (saturated) or at 1.5X. Explicit `--rates` skip
//! the search. Each step is a full open-loop run (latency from scheduled
//! send times). Output: a table on stdout, and `sweep.md`, `sweep.json`,
//! `sweep.svg` in `--out`.

use crate::cli::{parse_duration, resolve, write_json, LoadArgs};
use crate::report::Report;
use crate::run::{prefill, probe, run, RunError};
use crate::svg::{plot, Series};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct SweepArgs {
    /// Rates to run, comma separated (req/s); default: search as above.
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Steps up to the saturation throughput.
    #[arg(long, default_value_t = 8)]
    pub steps: u32,
    /// Length of each step (the --duration option is not used by sweep).
    #[arg(long, default_value = "3s")]
    pub step_duration: String,
    /// Directory for sweep.md, sweep.json and sweep.svg.
    #[arg(long, default_value = "sweep-out")]
    pub out: PathBuf,
}

#[derive(Serialize)]
pub struct Sweep {
    pub saturation_rps: Option<f64>,
    pub steps: Vec<Report>,
}

fn row(r: &Report) -> String {
    let l = &r.latency;
    format!(
        "| {:>9.0} | {:>9.0} | {:>8.1} | {:>8.1} | {:>8.1} | {:>8.1} | {:>9.1} | {:>6} | {:>6} |",
        r.target_rate_rps.unwrap_or(0.0),
        r.throughput_rps,
        l.p50_us,
        l.p90_us,
        l.p99_us,
        l.p999_us,
        l.max_us,
        r.unsent,
        r.error_total
    )
}

const HEADER: &str = "| target/s  | achieved/s | p50 µs   | p90 µs   | p99 µs   | p99.9 µs | max µs    | unsent | errors |\n|---|---|---|---|---|---|---|---|---|";

pub fn main(server: &str, load: &LoadArgs, args: &SweepArgs) -> Result<i32, RunError> {
    let addr = resolve(server).map_err(RunError::Failed)?;
    let mut cfg = load.config(addr).map_err(RunError::Failed)?;
    cfg.duration = parse_duration(&args.step_duration).map_err(RunError::Failed)?;
    probe(&cfg)?;
    if cfg.prefill {
        prefill(&cfg)?;
    }
    let (mut rates, saturation) = if args.rates.is_empty() {
        let closed = run(&crate::run::RunConfig { rate: None, progress: false, ..cfg.clone() });
        let x = closed.throughput_rps;
        eprintln!("saturation (closed loop): {x:.0} req/s, p99 {:.1} µs", closed.latency.p99_us);
        let steps = args.steps.max(1);
        (((1..=steps).map(|i| x * f64::from(i) / f64::from(steps))).chain((11..=15).map(|i| x * f64::from(i) / 10.0)).collect(), Some(x))
    } else {
        (args.rates.clone(), None)
    };
    rates.retain(|r| *r > 0.0);
    println!("{HEADER}");
    let mut steps = Vec::new();
    for rate in rates {
        let step_cfg = crate::run::RunConfig { rate: Some(rate), progress: false, ..cfg.clone() };
        let r = run(&step_cfg);
        println!("{}", row(&r));
        let saturated = r.throughput_rps < 0.9 * rate;
        steps.push(r);
        if saturated && args.rates.is_empty() {
            break;
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| RunError::Failed(format!("{}: {e}", args.out.display())))?;
    let write = |name: &str, text: String| {
        let path = args.out.join(name);
        std::fs::write(&path, text).map_err(|e| RunError::Failed(format!("{}: {e}", path.display())))
    };
    let table: Vec<String> = steps.iter().map(row).collect();
    write("sweep.md", format!("{HEADER}\n{}\n", table.join("\n")))?;
    let series = |name, color, f: fn(&Report) -> f64| Series { name, color, points: steps.iter().map(|r| (r.throughput_rps, f(r))).collect() };
    let title = format!("{} {} B values, {} conns x {}", steps.first().map_or("", |r| r.protocol.as_str()), cfg.workload.value_size, cfg.conns, cfg.pipeline);
    let svg = plot(
        &title,
        &[
            series("p50", "#1f77b4", |r| r.latency.p50_us),
            series("p99", "#ff7f0e", |r| r.latency.p99_us),
            series("p99.9", "#d62728", |r| r.latency.p999_us),
        ],
    );
    write("sweep.svg", svg)?;
    write_json(&args.out.join("sweep.json"), &Sweep { saturation_rps: saturation, steps }).map_err(RunError::Failed)?;
    eprintln!("wrote {}/sweep.md, sweep.json, sweep.svg", args.out.display());
    Ok(0)
}
