#!/usr/bin/env bash
# Latency of a get load while `lru_crawler metadump all` dumps 10 million
# keys, against the same load with no dump (issue 15: p99 within 2x).
# Usage: [DUMP_SLEEP_US=us] scripts/bench/dump.sh [strata binary] [keys]
# (DUMP_SLEEP_US: `lru_crawler sleep` before the dumps, rest per 1000 keys)
# Prints the two strata-bench reports; docs/BENCHMARKS.md has a run.
set -euo pipefail
BIN=${1:-target/release/strata}
KEYS=${2:-10000000}
BENCH=target/release/strata-bench
LOAD=(--load-cpu 0 --keys "$KEYS" --key-size 16 --value-size 10 --get-ratio 1 --conns 16 --rate 20000 --duration 10s --quiet)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The server (and the dump's reader) on the last CPU, the load generator
# (which spins between sends) on CPU 0: the client's own scheduling stays
# out of the server's figures, as with a client on another machine.
# PIN=0 (the default) leaves placement to the scheduler; PIN=1 pins.
last_cpu=$(($(nproc) - 1))
pin=(taskset -c "$last_cpu")
[ "${PIN:-0}" = 0 ] && pin=(env)
"${pin[@]}" "$BIN" -p "$port" -U 0 -l 127.0.0.1 -m 2048 -t 2 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
sleep 0.5
# Prefill: strata-bench sets every key once (pipelined) before a short run.
"$BENCH" run --server "127.0.0.1:$port" --keys "$KEYS" --key-size 16 --value-size 10 --duration 1s --quiet >/dev/null
ROUNDS=${ROUNDS:-3}
for round in $(seq "$ROUNDS"); do
    echo "== round $round: no dump"
    "$BENCH" run --server "127.0.0.1:$port" --no-prefill "${LOAD[@]}" | grep -E '^(requests|latency)'
    echo "== round $round: while metadump all runs back to back (reader discards the output)"
    "${pin[@]}" nice -n 19 python3 - "$port" 12 "${DUMP_SLEEP_US:-}" <<'PY' &
import signal, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if sys.argv[3]:
    # memcached's pacing knob: microseconds of rest per 1000 items.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"lru_crawler sleep %s\r\n" % sys.argv[3].encode())
    assert s.recv(100) == b"OK\r\n"
    s.close()
deadline = time.time() + seconds
while time.time() < deadline:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"lru_crawler metadump all\r\n")
    started, lines, tail = time.time(), 0, b""
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                sys.exit("closed mid-dump")
            lines += chunk.count(b"\n")
            tail = (tail + chunk)[-8:]
            if tail.endswith(b"\nEND\r\n"):
                break
    finally:
        took = time.time() - started
        print(f"dump: {lines} lines in {took:.1f} s ({lines / took / 1e6:.2f} M keys/s)", file=sys.stderr)
    s.close()
PY
    reader=$!
    sleep 1
    "$BENCH" run --server "127.0.0.1:$port" --no-prefill "${LOAD[@]}" | grep -E '^(requests|latency)'
    kill $reader 2>/dev/null || true
    wait $reader 2>/dev/null || true
done
