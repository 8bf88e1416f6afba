#!/usr/bin/env bash
# Latency of a get load while `lru_crawler metadump all` dumps 10 million
# keys, against the same load with no dump (issue 15: p99 within 2x).
# Usage: [ROUNDS=n] [PIN=0] [READER=idle|nice] [PORT=p] [DUMP_SLEEP_US=us] [NO_DUMP=1]
#        scripts/bench/dump.sh [strata binary] [keys]
# Each round runs the gets alone, then the same gets during the dumps, and
# prints both latency lines, the dump's speed, and a summary line:
#   round N: p99 alone X µs, during the dump Y µs, ratio Y/X; M lines dumped (loadavg)
# ("lines dumped": what the reader got in the round, all dumps together),
# then a table of every round and the median p99s over the rounds.
# docs/bench/operator.md has runs.
# The server and the dump's reader run on the last CPU, the load generator
# on CPU 0, as every benchmark here pins (PIN=0 leaves the server
# unpinned; its threads then also run on the load generator's CPU, where a
# worker woken behind the generator, which spins between its open-loop
# sends, can wait a scheduler tick, 4 ms: the load's artifact, not the
# dump's; `perf sched timehist` shows it, docs/bench/operator.md).
# NO_DUMP=1: the second run of each round has no dump either, to see how far
# two runs of the same load differ on this machine. READER=idle (default) runs the dump's
# reader under SCHED_IDLE, READER=nice at nice 19: the reader stands in for
# a client on another machine, so its own CPU time stays out of the
# server's figures as far as one machine allows, and reads 64 KiB at a
# time, as a client does (a 1 MiB read, which the reader used to make, is a
# copy of up to 1 MiB that a kernel without full preemption does not cut
# short, a stall a client on another machine would not cause; on a machine busy with
# other work an idle reader may get no CPU at all: the "lines dumped" count
# then says 0 and the round had no dump; use READER=nice). DUMP_SLEEP_US sets
# `lru_crawler sleep` (rest per 1000 items) before the dumps.
set -euo pipefail
BIN=${1:-target/release/strata}
KEYS=${2:-10000000}
BENCH=target/release/strata-bench
ROUNDS=${ROUNDS:-3}
LOAD=(--load-cpu 0 --keys "$KEYS" --key-size 16 --value-size 10 --get-ratio 1 --conns 16 --rate 20000 --duration 10s --quiet)
port=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
last_cpu=$(($(nproc) - 1))
pin=(env)
[ "${PIN:-1}" = 1 ] && pin=(taskset -c "$last_cpu")
reader_prio=(chrt --idle 0)
[ "${READER:-idle}" = nice ] && reader_prio=(nice -n 19)
"${pin[@]}" "$BIN" -p "$port" -U 0 -l 127.0.0.1 -m 2048 -t 2 2>/dev/null &
pid=$!
reader=
trap 'kill $pid ${reader:-} 2>/dev/null; wait $pid 2>/dev/null; rm -f "${lines_file:-}"' EXIT
sleep 0.5
# Prefill: strata-bench sets every key once (pipelined) before a short run.
"$BENCH" run --server "127.0.0.1:$port" --keys "$KEYS" --key-size 16 --value-size 10 --duration 1s --quiet >/dev/null
echo "strata $("$BIN" --version 2>/dev/null | head -1), $KEYS keys, PIN=${PIN:-1} READER=${READER:-idle}, $(nproc) CPUs"

# One measured run: prints the latency line, returns "p50 p99 p99.9".
gets() {
    local line
    line=$("$BENCH" run --server "127.0.0.1:$port" --no-prefill "${LOAD[@]}" | grep '^latency')
    echo "  $line" >&2
    awk '{for (i = 1; i < NF; i++) if ($i == "p50" || $i == "p99" || $i == "p99.9") printf "%s ", $(i + 1); print ""}' <<<"$line"
}

summary=()
alone99=()
during99=()
lines_file=$(mktemp)
for round in $(seq "$ROUNDS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "== round $round: gets alone (loadavg $load)"
    read -r a50 a99 a999 < <(gets)
    echo "== round $round: gets while metadump all runs back to back (the reader discards the output)"
    : >"$lines_file"
    "${pin[@]}" "${reader_prio[@]}" python3 - "$port" 13 "${DUMP_SLEEP_US:-}" "$lines_file" "${NO_DUMP:-0}" <<'PY' &
import atexit, signal, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
# Every line the reader got, all dumps together, for the round's summary.
total = 0
atexit.register(lambda: open(sys.argv[4], "w").write(str(total)))
if sys.argv[3]:
    # memcached's pacing knob: microseconds of rest per 1000 items.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"lru_crawler sleep %s\r\n" % sys.argv[3].encode())
    assert s.recv(100) == b"OK\r\n"
    s.close()
deadline = time.time() + seconds
if sys.argv[5] == "1":
    time.sleep(seconds)
while time.time() < deadline:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"lru_crawler metadump all\r\n")
    started, lines, tail = time.time(), 0, b""
    try:
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                sys.exit("closed mid-dump")
            lines += chunk.count(b"\n")
            total += chunk.count(b"\n")
            tail = (tail + chunk)[-8:]
            if tail.endswith(b"\nEND\r\n"):
                break
    finally:
        took = time.time() - started
        whole = "whole" if tail.endswith(b"\nEND\r\n") else "cut short"
        print(f"  dump ({whole}): {lines} lines in {took:.1f} s ({lines / took / 1e6:.2f} M keys/s)", file=sys.stderr)
    s.close()
PY
    reader=$!
    sleep 1
    read -r d50 d99 d999 < <(gets)
    kill "$reader" 2>/dev/null || true
    wait "$reader" 2>/dev/null || true
    reader=
    ratio=$(awk -v a="$a99" -v d="$d99" 'BEGIN {printf "%.2f", d / a}')
    dumped=$(awk '{n = $1} END {printf "%.1f", n / 1e6}' "$lines_file")
    echo "round $round: p99 alone $a99 µs, during the dump $d99 µs, ratio $ratio; $dumped M lines dumped (loadavg $load)"
    summary+=("| $round | $a50 / $a99 / $a999 | $d50 / $d99 / $d999 | $ratio | $dumped M | $load |")
    alone99+=("$a99")
    during99+=("$d99")
done
echo
echo "| round | gets alone: p50 / p99 / p99.9 µs | during the dump: p50 / p99 / p99.9 µs | p99 ratio | lines dumped (~12 s) | loadavg |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
# One round's p99 swings with the machine's own stalls (NO_DUMP=1 shows how
# far): the medians over the rounds are the figure to compare.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ma=$(median "${alone99[@]}")
md=$(median "${during99[@]}")
echo
echo "median p99 over $ROUNDS rounds: alone $ma µs, during the dump $md µs, ratio $(awk -v a="$ma" -v d="$md" 'BEGIN {printf "%.2f", d / a}')"
