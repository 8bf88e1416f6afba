#!/usr/bin/env bash
# A long run under load and faults (a benchmark, not a CI test): text, meta
# and binary clients at 70% of capacity against the flash tier and a memory
# file, a SIGTERM or kill -9 restart every 3 minutes, connection storms up
# to -c, stalled and damaged requests, and a checker that knows every
# acknowledged write. See scripts/bench/soak.py for what it reports.
#
#   scripts/bench/soak.sh [MINUTES] [soak.py options]     (default 30 minutes)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
minutes=30
if [[ ${1:-} =~ ^[0-9.]+$ ]]; then
    minutes=$1
    shift
fi
cd "$root"
cargo build --release --quiet -p strata -p strata-bench
exec python3 scripts/bench/soak.py --minutes "$minutes" "$@"
