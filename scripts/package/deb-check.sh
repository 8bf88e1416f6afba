#!/usr/bin/env bash
# The Debian package, checked the way it will be used (scripts/test runs
# this after the release build; it needs lintian, help2man, dpkg-dev and,
# for the memcached.conf start, Debian's memcached package):
#
#   1. scripts/package/deb.sh builds target/debian/strata_VERSION_ARCH.deb;
#   2. lintian finds no error in it (its warnings and infos are printed;
#      accepted: hardening-no-fortify-functions, Rust calls no fortified
#      libc function, and package-supports-alternative-init-but-no-init.d-script,
#      there is no SysV init script);
#   3. dpkg -x installs it into a scratch root; systemd-analyze verify
#      checks strata.service and strata@11211.service there;
#   4. the binary is started exactly as strata.service's ExecStart starts
#      it (the unit's own line, paths under the scratch root, as the
#      unprivileged user `nobody` when run as root, standing for
#      User=strata) from the shipped /etc/strata/strata.conf, then from
#      Debian's shipped memcached.conf copied over it; each must answer on
#      the conf's port. Each conf's `-p 11211` becomes a free port (a
#      memcached service may hold 11211) and the shipped conf's
#      /run/strata becomes the scratch root's; nothing else changes;
#   5. the memory file under the runtime directory keeps an item across a
#      stop (SIGTERM) and a start, as across `systemctl restart strata`;
#   6. a conf with a bad line stops the start with FILE:LINE and exit 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
started_ns=$(date +%s%N)
# Milliseconds since the start, for each step's line.
at() { echo "[$(( ($(date +%s%N) - started_ns) / 1000000 )) ms]"; }

deb=$(scripts/package/deb.sh)
echo "package-check: $(at) built $deb ($(du -h "$deb" | cut -f1))"

lintian --fail-on error --tag-display-limit 0 --display-info "$deb" || { echo "package-check: $(at) lintian found errors" >&2; exit 1; }
echo "package-check: $(at) lintian: no errors"

scratch=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$scratch"
}
trap cleanup EXIT
chmod 0755 "$scratch"
dpkg -x "$deb" "$scratch"
for unit in strata.service strata@.service; do
    [ -f "$scratch/lib/systemd/system/$unit" ] || { echo "package-check: $(at) $unit is not in the package" >&2; exit 1; }
done
# verify --root resolves everything inside the root: the targets the units
# order against (the host's unit files, copied under the packaged ones) and
# the commands they run (kill is procps' on a real system). verify exits 0
# on an unknown key or a bad value and only says so: any message fails.
mkdir -p "$scratch/bin" "$scratch/etc/systemd/system"
cp -an /lib/systemd/system/. "$scratch/lib/systemd/system/"
cp /bin/kill "$scratch/bin/kill"
verify=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no --root="$scratch" strata.service strata@11211.service 2>&1) \
    && [ -z "$verify" ] || { echo "package-check: $(at) systemd-analyze verify: $verify" >&2; exit 1; }
echo "package-check: $(at) systemd-analyze verify: strata.service, strata@11211.service"

# The unit's ExecStart, its paths moved under the scratch root.
exec_start=$(sed -n 's/^ExecStart=//p' "$scratch/lib/systemd/system/strata.service")
read -r -a command <<< "${exec_start//\$OPTIONS/}"
command=("${command[@]/#\/usr\//$scratch/usr/}")
command=("${command[@]/#\/etc\//$scratch/etc/}")
conf=$scratch/etc/strata/strata.conf
run=$scratch/run/strata
mkdir -p "$run"
as_user=()
if [ "$(id -u)" -eq 0 ]; then
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
    chown nobody:nogroup "$run"
fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One request (lines end with \r\n), its reply (read until a line that ends it).
ask() {
    python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall((sys.argv[2] + "\n").encode().replace(b"\n", b"\r\n"))
reply = b""
while not reply.endswith((b"END\r\n", b"STORED\r\n")) and not reply.startswith(b"VERSION"):
    chunk = s.recv(65536)
    if not chunk:
        break
    reply += chunk
print(reply.decode(errors="replace"), end="")
PY
}

# Start the unit's command with the conf in place; wait until it answers on
# `port` (10 s at most), or fail with its log.
start() {
    local port=$1 log=$scratch/strata.log
    "${as_user[@]}" "${command[@]}" 2> "$log" &
    server=$!
    local deadline=$((SECONDS + 10))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if ask "$port" "version" 2>/dev/null | grep -q '^VERSION '; then return 0; fi
        if ! kill -0 "$server" 2>/dev/null; then break; fi
        sleep 0.05
    done
    echo "package-check: $(at) ${command[*]} did not answer on $port:" >&2
    cat "$log" >&2
    exit 1
}

stop() {
    kill -TERM "$server"
    wait "$server" || { echo "package-check: $(at) the stop did not exit 0" >&2; exit 1; }
    server=
}

expect() {  # expect PORT REQUEST PATTERN
    ask "$1" "$2" | grep -q -- "$3" || { echo "package-check: $(at) '$2' on $1: no '$3' in: $(ask "$1" "$2")" >&2; exit 1; }
}

# The shipped strata.conf.
port=$(free_port)
sed -i -e "s/^-p 11211\$/-p $port/" -e "s|/run/strata/|$run/|" "$conf"
start "$port"
expect "$port" "stats settings" "STAT tcpport $port"
expect "$port" "stats settings" "STAT maxbytes 67108864"
expect "$port" "set packaged 0 0 5
hello" "STORED"
stop
[ -s "$run/strata.mem" ] || { echo "package-check: $(at) no memory file under the runtime directory" >&2; exit 1; }
start "$port"
expect "$port" "get packaged" "VALUE packaged 0 5"
stop
echo "package-check: $(at) strata.service's command with strata.conf answered on $port; an item survived stop and start"

# Debian's memcached.conf, as the memcached package ships it.
shipped=/usr/share/memcached/memcached.conf.default
[ -f "$shipped" ] || shipped=/etc/memcached.conf
if [ -f "$shipped" ]; then
    port=$(free_port)
    sed -e "s/^-p 11211\$/-p $port/" "$shipped" > "$conf"
    grep -q "^-p $port\$" "$conf" || { echo "package-check: $(at) no '-p 11211' line in $shipped" >&2; exit 1; }
    start "$port"
    expect "$port" "stats settings" "STAT tcpport $port"
    stop
    echo "package-check: $(at) strata.service's command with Debian's $shipped answered on $port"
else
    echo "package-check: $(at) memcached is not installed: Debian's memcached.conf not tried"
fi

# A bad line: memcached's message, the file and the line, exit 1.
printf -- '-m 64\n-t 0\n' > "$conf"
if "${as_user[@]}" "${command[@]}" 2> "$scratch/bad.log"; then
    echo "package-check: $(at) a conf with -t 0 started" >&2; exit 1
fi
grep -q "strata.conf:2: Number of threads must be greater than 0" "$scratch/bad.log" \
    || { echo "package-check: $(at) unexpected refusal: $(cat "$scratch/bad.log")" >&2; exit 1; }
echo "package-check: $(at) a bad line stopped the start: $(head -n1 "$scratch/bad.log")"
echo "package-check: passed in $(( ($(date +%s%N) - started_ns) / 1000000 )) ms"
