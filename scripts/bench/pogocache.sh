#!/usr/bin/env bash
# Issue 17's figures in one side-by-side run: Strata beside Pogocache (when
# built) and memcached, each server alone in turn (scripts/bench/solo.py),
# every round printed.
#
#   memaslap       90/10 at pipeline depth 1, server -t 1 on CPU 0, load on CPU 1
#   memcaslap      the same mix from libmemcached's memaslap (-c 64 -T 1),
#                  same placement (skipped when memcaslap is not installed)
#   pipelined-get  8 gets in flight per connection, same placement
#   mget48         48-key multi-gets, same placement
#   mget48 -t 2    two server threads (Pogocache --threads 2) on CPUs 0-1,
#                  the load unpinned, sharing them
#   memtier-binary, udp: Strata beside memcached (Pogocache speaks neither)
#
# Usage: [ROUNDS=5] [DURATION=4s] [POGOCACHE=path] [MEMCACHED=path] \
#            scripts/bench/pogocache.sh [strata binary]
# Pogocache is MIT C (tidwall/pogocache), for comparison only: build it
# with `make` in its tree; without it its rows are skipped. `--perf`
# columns count the server's system calls, io_uring submissions and futex
# calls per request.
set -euo pipefail
cd "$(dirname "$0")/../.."
STRATA=${1:-target/release/strata}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4s}
POGO=${POGOCACHE:-/work/peers/pogocache/pogocache}
MC=${MEMCACHED:-$(command -v memcached || echo /usr/bin/memcached)}
SOLO=(scripts/bench/solo.py --perf --rounds "$ROUNDS" --duration "$DURATION")
pogo() { [ -x "$POGO" ] && echo "$POGO -p {port} --threads $1" || true; }
echo "# $(date -u '+%F %T') UTC, $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
presets=(memaslap pipelined-get mget48)
command -v memcaslap >/dev/null && presets=(memaslap memcaslap pipelined-get mget48)
for preset in "${presets[@]}"; do
    echo "## $preset, -t 1 (server CPU 0, load CPU 1)"
    mapfile -t servers < <(pogo 1; echo "$STRATA -p {port} -t 1"; echo "$MC -p {port} -U 0 -u root -t 1")
    "${SOLO[@]}" --preset "$preset" "${servers[@]}"
done
echo "## mget48, 2 server threads on CPUs 0-1, the load sharing them"
mapfile -t servers < <(pogo 2; echo "$STRATA -p {port} -t 2"; echo "$MC -p {port} -U 0 -u root -t 2")
"${SOLO[@]}" --preset mget48 --server-cpus 0,1 --load-cpu none "${servers[@]}"
echo "## memtier-binary, -t 1"
"${SOLO[@]}" --preset memtier-binary "$MC -p {port} -U 0 -u root -t 1" "$STRATA -p {port} -t 1"
echo "## udp, -t 1"
"${SOLO[@]}" --preset udp "$MC -p {port} -U {port} -u root -t 1" "$STRATA -p {port} -U {port} -t 1"
echo "# done $(date -u '+%F %T') UTC, load: $(cut -d' ' -f1-3 /proc/loadavg)"
