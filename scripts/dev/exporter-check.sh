#!/bin/bash
# The Prometheus memcached_exporter against a server: how many metric
# families it exports (a check while developing, not a CI step; issue 18).
#
#   scripts/dev/exporter-check.sh EXPORTER_BINARY SERVER_COMMAND...
#
# The exporter is built from its repository (github prometheus/memcached_exporter:
# `go build ./cmd/memcached_exporter`). The server command gets `-p PORT`
# appended; MC_PORT (default 26001) and EXPORTER_PORT (default 26002) pick the
# ports. Prints the `# TYPE` count (the exporter's own build_info included),
# memcached_up, and leaves the exporter's output in /tmp/exporter_check.txt.
#   scripts/dev/exporter-check.sh ./memcached_exporter /usr/bin/memcached -u root -U 0
#   scripts/dev/exporter-check.sh ./memcached_exporter target/release/strata -U 0
set -euo pipefail
EXPORTER=$1; shift
MC_PORT=${MC_PORT:-26001}; EXPORTER_PORT=${EXPORTER_PORT:-26002}
"$@" -p "$MC_PORT" >/tmp/exporter_check.server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER ${EXP:-} 2>/dev/null || true; wait 2>/dev/null || true' EXIT
python3 - "$MC_PORT" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port)); break
    except OSError:
        time.sleep(0.05)
req = b"".join(b"set k%d 0 0 5\r\nhello\r\n" % i for i in range(50))
req += b"set big 0 0 3000\r\n" + b"x" * 3000 + b"\r\nget k1 k2 nope\r\ndelete k3\r\nincr k4 1\r\ntouch k5 10\r\ngets k6\r\nquit\r\n"
s.sendall(req)
while s.recv(65536):
    pass
PY
"$EXPORTER" --memcached.address="127.0.0.1:$MC_PORT" --web.listen-address="127.0.0.1:$EXPORTER_PORT" >/tmp/exporter_check.exporter.log 2>&1 &
EXP=$!
python3 - "$EXPORTER_PORT" <<'PY'
import sys, time, urllib.request
for _ in range(100):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode(); break
    except OSError:
        time.sleep(0.05)
open("/tmp/exporter_check.txt", "w").write(body)
types = [l.split()[2] for l in body.splitlines() if l.startswith("# TYPE memcached_")]
print("memcached_* families:", len(types))
print([l for l in body.splitlines() if l.startswith("memcached_up ")][0])
PY
