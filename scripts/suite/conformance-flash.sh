#!/usr/bin/env bash
# memccapable (ascii and binary suites) and a verified memcaslap run against
# Strata with the flash tier on: `-m 8`, an `ext_path` of 256 MiB,
# `ext_item_size=1` (every item may go to flash), and a filler load of sets
# of other keys (strata-bench, open loop) that keeps turning `-m 8` over, so
# the tools' items move to flash between their commands. The same pass rules
# as scripts/suite/conformance.sh (UDP is off: memcached refuses UDP with
# extstore), and the run must have served gets from flash (`get_extstore`;
# memccapable sets and reads back at once, so few of its own gets meet a
# flash item: most come from the verified memcaslap run).
#
#   scripts/suite/conformance-flash.sh [path/to/strata]
set -euo pipefail
bin=${1:-target/release/strata}
bench=$(dirname "$bin")/strata-bench
. "$(dirname "$0")/conformance-lib.sh"
port=$(free_port)
dir=$(mktemp -d "${TMPDIR:-/tmp}/strata-conformance-flash.XXXXXX")
"$bin" -p "$port" -U 0 -t 2 -m 8 -o "ext_page_size=8,ext_wbuf_size=2,ext_item_size=1,ext_path=$dir/flash:256m" &
pid=$!
filler=
cleanup() {
    [ -n "$filler" ] && kill "$filler" 2>/dev/null && wait "$filler" 2>/dev/null || true
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
wait_listening "$port"
stat() {
    python3 -c "
import socket
s = socket.create_connection(('127.0.0.1', $port)); s.sendall(b'stats\r\n'); buf = b''
while not buf.endswith(b'END\r\n'): buf += s.recv(65536)
print(next(l.split()[2] for l in buf.decode().split('\r\n') if l.startswith('STAT $1 ')))"
}
# Keys sb:0000000000000 to sb:...19999 (16 bytes), 1000-byte values: 20 MB
# a second through 8 MB.
"$bench" run --server "127.0.0.1:$port" --keys 20000 --key-size 16 --value-size 1000 --get-ratio 0 \
    --rate 20000 --conns 2 --duration 600s --no-prefill --quiet >/dev/null 2>&1 &
filler=$!
sleep 1

failed=0
memccapable_suites "$port" " with flash" || failed=1
echo "flash after memccapable: $(stat get_extstore) gets served from flash"
memcaslap_verified "$port" --binary " with flash" 1 get_misses verify_misses verify_failed || failed=1

written=$(stat extstore_objects_written)
from_flash=$(stat get_extstore)
echo "flash: $written items written, $from_flash gets served from flash"
if [ "$written" -lt 1000 ] || [ "$from_flash" -lt 100 ]; then
    echo "the tools' items did not go through flash"
    failed=1
fi
exit $failed
