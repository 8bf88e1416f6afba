#!/usr/bin/env bash
# Protocol conformance with Debian's libmemcached-tools against a Strata
# binary: memccapable's ascii and binary suites must pass every test, and
# short memcaslap runs over the binary protocol and over UDP (with value
# verification) must finish with no misses, verification failures, drops or
# timeouts.
#
#   scripts/suite/conformance.sh [path/to/strata]
set -euo pipefail
bin=${1:-target/release/strata}
. "$(dirname "$0")/conformance-lib.sh"
port=$(free_port)
# memcaslap's two runs together store ~70,000 1 KiB values, more than the
# default 64 MiB holds: with room for all of them, a miss means a lost value
# and not an eviction.
"$bin" -p "$port" -U "$port" -t 2 -m 512 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
wait_listening "$port"

failed=0
memccapable_suites "$port" "" || failed=1
for mode in --binary --udp; do
    memcaslap_verified "$port" "$mode" "" 3 get_misses verify_misses verify_failed packet_disorder packet_drop udp_timeout || failed=1
done
exit $failed
