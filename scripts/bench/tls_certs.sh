#!/usr/bin/env bash
# Make a throwaway CA and a server certificate for 127.0.0.1/localhost in
# DIR (default /tmp/strata-bench-tls), for the TLS benchmarks: both servers
# get the same certificate and key (EC P-256), nothing is committed.
#
#   scripts/bench/tls_certs.sh /tmp/bt
#   T="-Z -o ssl_chain_cert=/tmp/bt/server.crt,ssl_key=/tmp/bt/server.key"
#   scripts/bench/solo.py --preset memaslap --duration 4s --rounds 4 \
#       "memcached -p {port} -U 0 -t 1 $T" "target/release/strata -p {port} -U 0 -t 1 $T" -- --tls
set -euo pipefail
dir=${1:-/tmp/strata-bench-tls}
mkdir -p "$dir"
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 30 -subj "/CN=strata bench CA" 2>/dev/null
openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 30 -extfile server.ext 2>/dev/null
echo "$dir/server.crt $dir/server.key (CA: $dir/ca.crt)"
