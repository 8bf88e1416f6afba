#!/usr/bin/env bash
# Protocol conformance with Debian's libmemcached-tools against a Strata
# binary: memccapable's ascii and binary suites must pass every test, and
# short memcaslap runs over the binary protocol and over UDP (with value
# verification) must finish with no misses, verification failures, drops or
# timeouts.
#
#   scripts/conformance.sh [path/to/strata]
set -euo pipefail
bin=${1:-target/release/strata}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# memcaslap's two runs together store ~70,000 1 KiB values, more than the
# default 64 MiB holds: with room for all of them, a miss means a lost value
# and not an eviction.
"$bin" -p "$port" -U "$port" -t 2 -m 512 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break
    sleep 0.05
done

# memccapable's "ascii delete" tests send `delete a b c d e` and expect an
# error: memcached 1.6.45, whose protocol Strata speaks, ignores the extra
# tokens (memccapable fails there against 1.6.45 itself; docs/COMPATIBILITY.md).
# Those two tests may fail, and only at that request.
expected_ascii='^ascii delete( noreply)? +\[FAIL\]'
failed=0
for suite in -a -b; do
    out=$(timeout 300 memccapable -h 127.0.0.1 -p "$port" "$suite" 2>&1) || true
    passed=$(grep -c '\[pass\]' <<<"$out" || true)
    bad=$(grep -iE '\[(fail|skip)' <<<"$out" | grep -vE "$expected_ascii" || true)
    echo "memccapable $suite: $passed passed"
    if [ "$suite" = -a ]; then
        for t in "ascii delete"; do
            reply=$(printf 'delete a b c d e\r\n' | timeout 5 python3 -c "
import socket, sys
s = socket.create_connection(('127.0.0.1', $port)); s.sendall(sys.stdin.buffer.read()); print(s.recv(100).decode().strip())")
            if [ "$reply" != NOT_FOUND ]; then
                echo "memccapable -a: \"$t\": delete with extra tokens answered '$reply', not 1.6.45's NOT_FOUND"
                failed=1
            fi
        done
        # Every other test must pass: 25 of the 27.
        [ "$passed" -ge 25 ] || failed=1
    elif ! grep -q 'All tests passed' <<<"$out"; then
        bad="${bad:-binary suite did not pass}"
    fi
    if [ -n "$bad" ]; then
        echo "$out" | tail -20
        failed=1
    fi
done

for mode in --binary --udp; do
    # UDP may lose a datagram on a busy machine, and memcaslap then waits
    # for it until killed: such a run prints no summary and is tried again.
    for attempt in 1 2 3; do
        out=$(timeout 30 memcaslap -s "127.0.0.1:$port" -t 2s -c 8 -T 1 "$mode" --verify=0.05 2>&1) || true
        summary=$(grep '^Run time' <<<"$out" || true)
        [ -n "$summary" ] && break
        echo "memcaslap $mode: attempt $attempt printed no summary:"
        tail -5 <<<"$out"
    done
    echo "memcaslap $mode: ${summary:-no summary}"
    for field in get_misses verify_misses verify_failed packet_disorder packet_drop udp_timeout; do
        value=$(awk -v f="$field:" '$1 == f { print $2 }' <<<"$out")
        if [ -n "$value" ] && [ "$value" != 0 ]; then
            echo "memcaslap $mode: $field = $value"
            failed=1
        fi
    done
    [ -n "$summary" ] || failed=1
done
exit $failed
