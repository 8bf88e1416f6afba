//! `strata-bench run | sweep | compare | presets`: see `cli.rs`.

fn main() {
    std::process::exit(strata_bench::cli::main());
}
