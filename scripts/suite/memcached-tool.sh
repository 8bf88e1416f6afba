#!/usr/bin/env bash
# Debian's memcached-tool against Strata (issue 15): `dump` must list every
# one of 100,000 stored keys (it reads `lru_crawler metadump all`, then gets
# each key); `display`, `stats` and `settings` must answer.
# Usage: scripts/suite/memcached-tool.sh [path/to/strata]
set -euo pipefail
BIN=${1:-target/release/strata}
TOOL=/usr/share/memcached/scripts/memcached-tool
KEYS=100000
if [ ! -f "$TOOL" ]; then
    echo "memcached-tool.sh: $TOOL not installed (apt-get install memcached): skipped"
    exit 0
fi
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" -p "$port" -U 0 -l 127.0.0.1 -m 256 -t 2 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT

python3 - "$port" "$KEYS" <<'PY'
import socket, sys, time
port, keys = int(sys.argv[1]), int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit("strata did not start")
batch = []
for i in range(keys):
    value = b"value-%d" % i
    batch.append(b"set tool:%d %d 0 %d noreply\r\n%s\r\n" % (i, i % 7, len(value), value))
    if len(batch) == 1000:
        s.sendall(b"".join(batch)); batch = []
s.sendall(b"".join(batch) + b"mn\r\n")
reply = b""
while not reply.endswith(b"MN\r\n"):
    reply += s.recv(4096)
PY

perl "$TOOL" "127.0.0.1:$port" dump >"$work/dump" 2>"$work/dump.err"
listed=$(grep -c '^add tool:' "$work/dump" || true)
distinct=$(grep '^add tool:' "$work/dump" | awk '{print $2}' | sort -u | wc -l)
if [ "$listed" != "$KEYS" ] || [ "$distinct" != "$KEYS" ]; then
    echo "memcached-tool dump listed $listed lines, $distinct distinct keys; expected $KEYS" >&2
    exit 1
fi
# A dumped item comes back with its flags and value.
grep -q -x -F $'add tool:12 5 0 8\r' "$work/dump" || { echo "memcached-tool dump: tool:12 not as stored" >&2; exit 1; }

perl "$TOOL" "127.0.0.1:$port" stats >"$work/stats"
grep -q 'curr_items *100000' "$work/stats" || { echo "memcached-tool stats: no curr_items 100000" >&2; cat "$work/stats" >&2; exit 1; }
perl "$TOOL" "127.0.0.1:$port" settings >"$work/settings"
grep -q 'maxbytes' "$work/settings" || { echo "memcached-tool settings: no maxbytes" >&2; exit 1; }
perl "$TOOL" "127.0.0.1:$port" display >"$work/display"
echo "memcached-tool: dump listed $listed of $KEYS keys; stats, settings and display answered"
