//! The store's lab tools, one binary (one link of the store, not eight):
//!
//!     cargo run --release -p strata-store --example lab -- TOOL [ARGS]
//!
//! Each tool's module says what it measures and its arguments. Their
//! figures are in docs/bench/ and docs/design/.

mod damage;
mod flashsim;
mod hitreplay;
mod hitsim;
mod memscale;
mod mget_scaling;
mod setsim;
mod store_latency;

const TOOLS: [(&str, fn(Vec<String>)); 8] = [
    ("damage", damage::main),
    ("flashsim", flashsim::main),
    ("hitreplay", hitreplay::main),
    ("hitsim", hitsim::main),
    ("memscale", memscale::main),
    ("mget_scaling", mget_scaling::main),
    ("setsim", setsim::main),
    ("store_latency", store_latency::main),
];

fn main() {
    let mut args = std::env::args();
    let program = args.next().unwrap_or_else(|| "lab".into());
    let tool = args.next().unwrap_or_default();
    let Some((name, run)) = TOOLS.iter().find(|(name, _)| *name == tool) else {
        let names: Vec<&str> = TOOLS.iter().map(|(name, _)| *name).collect();
        eprintln!("usage: {program} TOOL [ARGS]; tools: {}", names.join(", "));
        std::process::exit(2);
    };
    // Each tool reads its arguments after a program name, as its own binary did.
    run(std::iter::once(format!("{program} {name}")).chain(args).collect());
}
