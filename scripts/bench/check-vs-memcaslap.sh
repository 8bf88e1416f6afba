#!/usr/bin/env bash
# Cross-check the instrument: the memaslap preset of strata-bench against
# memcaslap (libmemcached-tools) on the same memcached, same shape: one load
# thread, 64 connections, one request in flight each, 90% get / 10% set,
# 64-byte keys, 1 KiB values. memcached (1 worker thread) is pinned to CPU 0
# and each load to CPU 1. Rounds alternate memcaslap / strata-bench; the
# script prints each figure and the ratio of the means.
#
#   scripts/bench/check-vs-memcaslap.sh [SECONDS] [ROUNDS]
#
# memcached gets -m 1024 so memcaslap's key windows (64 x 10k keys) fit
# without evictions (with the default 64 MB, 40% of its gets miss, and
# misses are cheaper to serve). The shared 2-core machine drifts by tens of
# percent between runs, so each round is a back-to-back pair and the verdict
# uses the median of the per-round ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-3}
rounds=${2:-8}
port=${PORT:-24611}
cargo build --release -q -p strata-bench
bench=target/release/strata-bench
taskset -c 0 memcached -p "$port" -U 0 -l 127.0.0.1 -u root -t 1 -m 1024 &
mc=$!
trap 'kill $mc 2>/dev/null || true' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

caslap=(); ours=()
for r in $(seq "$rounds"); do
    out=$(taskset -c 1 memcaslap -s 127.0.0.1:$port -t "${secs}s" -c 64 -T 1 2>&1)
    tps=$(grep -o 'TPS: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}')
    misses=$(awk '/^get_misses/ {print $2}' <<<"$out" | tail -1)
    gets=$(awk '/^cmd_get/ {print $2}' <<<"$out" | tail -1)
    caslap+=("$tps")
    echo "round $r memcaslap:    $tps ops/s (get misses $misses of $gets)"
    json=$(mktemp)
    "$bench" run --server 127.0.0.1:$port --preset memaslap --duration "${secs}s" --load-cpu 1 --quiet --json "$json" >/dev/null
    rps=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(round(r['throughput_rps'])); assert r['error_total']==0, r['errors']" "$json")
    p99=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['latency']['p99_us'])" "$json")
    rm -f "$json"
    ours+=("$rps")
    echo "round $r strata-bench: $rps req/s (p99 ${p99} us, 0 errors)"
done
python3 - "${caslap[*]}" "${ours[*]}" <<'PY'
import sys, statistics as st
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = st.mean(a), st.mean(b)
ratios = [y / x for x, y in zip(a, b)]
med = st.median(ratios)
print(f"mean memcaslap {ma:.0f} ops/s, strata-bench {mb:.0f} req/s, ratio of means {mb/ma:.3f}")
print("per-round ratios strata-bench/memcaslap: " + " ".join(f"{r:.3f}" for r in ratios))
print(f"median ratio {med:.3f}: " + ("within 10%" if abs(med - 1) <= 0.10 else "NOT within 10%"))
sys.exit(0 if abs(med - 1) <= 0.10 else 1)
PY
