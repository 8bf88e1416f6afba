#!/usr/bin/env bash
# Coverage-guided fuzzing of the text and meta parser with libFuzzer
# (nightly Rust; the same instrumentation `cargo fuzz` applies). New inputs go
# to target/fuzz-corpus; the seed corpus in crates/strata-proto/fuzz/corpus is
# replayed on stable by `cargo test -p strata-proto` (scripts/test).
#
#   scripts/fuzz.sh [seconds]        (default 60)
set -euo pipefail
cd "$(dirname "$0")/../crates/strata-proto/fuzz"
seconds=${1:-60}
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
target=x86_64-unknown-linux-gnu
cargo +nightly build --release --target "$target" --target-dir target/cov
mkdir -p ../../../target/fuzz-corpus
exec "target/cov/$target/release/text" ../../../target/fuzz-corpus corpus/text \
    -max_total_time="$seconds" -max_len=4096
