# Checks shared by scripts/suite/conformance.sh and scripts/suite/conformance-flash.sh
# (sourced, not run). Each check prints what it saw and returns non-zero on
# a failure, so a caller runs every check and fails at the end.

# A free TCP port on loopback.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait (5 s at most) until something accepts on loopback port $1.
wait_listening() {
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $1)).close()" 2>/dev/null && return 0
        sleep 0.05
    done
}

# memccapable's ascii and binary suites against port $1 ($2 labels the
# output). memccapable's "ascii delete" tests send `delete a b c d e` and
# expect an error: memcached 1.6.45, whose protocol Strata speaks, ignores
# the extra tokens (memccapable fails there against 1.6.45 itself;
# docs/COMPATIBILITY.md). Those two tests may fail, and only at that
# request, whose reply is checked to be 1.6.45's; every other test passes.
memccapable_suites() {
    local port=$1 label=$2 expected_ascii='^ascii delete( noreply)? +\[FAIL\]' ok=0 suite out passed bad reply
    for suite in -a -b; do
        out=$(timeout 300 memccapable -h 127.0.0.1 -p "$port" "$suite" 2>&1) || true
        passed=$(grep -c '\[pass\]' <<<"$out" || true)
        bad=$(grep -iE '\[(fail|skip)' <<<"$out" | grep -vE "$expected_ascii" || true)
        echo "memccapable $suite$label: $passed passed"
        if [ "$suite" = -a ]; then
            reply=$(printf 'delete a b c d e\r\n' | timeout 5 python3 -c "
import socket, sys
s = socket.create_connection(('127.0.0.1', $port)); s.sendall(sys.stdin.buffer.read()); print(s.recv(100).decode().strip())")
            if [ "$reply" != NOT_FOUND ]; then
                echo "memccapable -a$label: \"ascii delete\": delete with extra tokens answered '$reply', not 1.6.45's NOT_FOUND"
                ok=1
            fi
            # Every other test must pass: 25 of the 27.
            [ "$passed" -ge 25 ] || ok=1
        elif ! grep -q 'All tests passed' <<<"$out"; then
            bad="${bad:-binary suite did not pass}"
        fi
        if [ -n "$bad" ]; then
            echo "$out" | tail -20
            ok=1
        fi
    done
    return $ok
}

# A short verified memcaslap run against port $1 in mode $2 (--binary,
# --udp) ($3 labels the output), tried up to $4 times: it must print its
# summary and have none of the fields after $4 non-zero. UDP may lose a
# datagram on a busy machine, and memcaslap then waits for it until
# killed: such a run prints no summary, and is worth trying again.
memcaslap_verified() {
    local port=$1 mode=$2 label=$3 attempts=$4 ok=0 attempt out summary field value
    shift 4
    for attempt in $(seq "$attempts"); do
        # -b: memcaslap prints each failed verification (key, expected and
        # received data), shown below when a count is not zero.
        out=$(timeout 30 memcaslap -s "127.0.0.1:$port" -t 2s -c 8 -T 1 "$mode" --verify=0.05 -b 2>&1) || true
        summary=$(grep '^Run time' <<<"$out" || true)
        [ -n "$summary" ] && break
        echo "memcaslap $mode$label: attempt $attempt printed no summary:"
        tail -5 <<<"$out"
    done
    echo "memcaslap $mode$label: ${summary:-no summary}"
    for field in "$@"; do
        value=$(awk -v f="$field:" '$1 == f { print $2 }' <<<"$out")
        if [ -n "$value" ] && [ "$value" != 0 ]; then
            echo "memcaslap $mode$label: $field = $value"
            grep -A12 "verification failed" <<<"$out" | head -60 || true
            ok=1
        fi
    done
    [ -n "$summary" ] || ok=1
    return $ok
}
