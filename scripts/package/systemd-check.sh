#!/usr/bin/env bash
# The Debian package's units under a real systemd: a minimal Debian 12
# root (mmdebstrap, Debian's packages) booted with `systemd-nspawn -b`,
# systemd as its PID 1, the .deb installed in it, then:
#
#   1. dpkg -i: the package's postinst creates the user, enables and starts
#      strata.service, which answers on 127.0.0.1:11211;
#   2. an item set, `systemctl restart strata`, the item still there, and
#      the journal says the memory file was restored after a graceful stop;
#   3. `systemctl reload strata`: SIGHUP, same main PID, still serving;
#   4. `systemctl start strata@11212`: a second instance on 11212;
#   5. a bad line in /etc/strata/strata.conf: `systemctl restart` fails and
#      `journalctl -u strata` shows the file and line; the conf put back;
#   6. `systemctl stop strata`: exit 0, and the next start restores the
#      memory file "after a graceful stop" (the file was marked clean).
#
#   scripts/package/systemd-check.sh      needs root, mmdebstrap and systemd-container
#                              (apt-get install mmdebstrap systemd-container),
#                              the release binaries and the network to
#                              Debian's mirror the first time: the root is
#                              kept in target/systemd-check/root.tar
#
# Not run by ./scripts/test (building the root takes minutes); its output
# goes in docs/bench/containers.md. Any deviation fails it (exit 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in mmdebstrap systemd-nspawn nsenter; do
    command -v "$tool" >/dev/null || { echo "systemd-check: $tool is missing (apt-get install mmdebstrap systemd-container)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "systemd-check: needs root" >&2; exit 1; }

started_ns=$(date +%s%N)
at() { echo "[$(( ($(date +%s%N) - started_ns) / 1000000 )) ms]"; }
say() { echo "systemd-check: $(at) $*"; }
fail() { echo "systemd-check: $(at) FAIL: $*" >&2; exit 1; }

work=target/systemd-check
mkdir -p "$work"
if [ ! -s "$work/root.tar" ]; then
    say "building a Debian 12 root with systemd (mmdebstrap, once)"
    mmdebstrap --quiet --format=tar --variant=minbase --include=systemd,systemd-sysv,dbus,adduser,procps \
        bookworm "$work/root.tar.part" && mv "$work/root.tar.part" "$work/root.tar"
fi
deb=$(scripts/package/deb.sh)
root=$(mktemp -d "$PWD/$work/root.XXXXXX")
nspawn=
cleanup() {
    if [ -n "$nspawn" ]; then kill -TERM "$nspawn" 2>/dev/null || true; sleep 1; kill -KILL "$nspawn" 2>/dev/null || true; wait "$nspawn" 2>/dev/null || true; fi
    rm -rf "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$work/root.tar"
cp "$deb" "$root/root/strata.deb"
# The client, in the container's bash: send a request, print the reply up
# to its last line (END, STORED, VERSION ...).
cat > "$root/usr/local/bin/mc" <<'EOF'
#!/bin/bash
# mc PORT 'request\r\n' LAST-LINE-PATTERN
exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
printf "$2" >&3
while IFS= read -r -t 5 line <&3; do
    printf '%s\n' "${line%$'\r'}"
    [[ $line =~ $3 ]] && exit 0
done
exit 1
EOF
chmod 0755 "$root/usr/local/bin/mc"

say "booting it: systemd-nspawn -b (console in $work/console.log)"
systemd-nspawn --quiet --register=no --keep-unit --private-network --machine=strata-check -D "$root" -b \
    > "$work/console.log" 2>&1 < /dev/null &
nspawn=$!
# The container's PID 1 (systemd) is the process whose parent is nspawn.
leader=
for _ in $(seq 1 100); do
    leader=$(pgrep -P "$nspawn" | head -n1) || true
    [ -n "$leader" ] && [ "$(cat /proc/"$leader"/comm 2>/dev/null)" = systemd ] && break
    leader=
    sleep 0.1
done
[ -n "$leader" ] || { cat "$work/console.log" >&2; fail "systemd did not start as the container's PID 1"; }
inside() { nsenter --target "$leader" --mount --uts --ipc --net --pid -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
# Wait up to 5 s for an answer on PORT (the checks after it say what failed).
await_port() {
    for _ in $(seq 1 50); do inside mc "$1" 'version\r\n' '^VERSION' >/dev/null 2>&1 && return 0; sleep 0.1; done
}
# systemctl answers once systemd has made its private socket.
state=
for _ in $(seq 1 600); do
    state=$(timeout 120 nsenter --target "$leader" --mount --uts --ipc --net --pid -- systemctl is-system-running --wait 2>&1) || true
    [[ $state == *"Failed to connect"* ]] || break
    sleep 0.1
done
say "systemd in the container: $state ($(inside systemctl --version | head -n1))"
case $state in running|degraded) ;; *) cat "$work/console.log" >&2; fail "the system did not come up: $state";; esac

say "1. dpkg -i strata.deb"
inside dpkg -i /root/strata.deb > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
inside systemctl is-enabled strata >/dev/null || fail "strata.service not enabled by the package"
await_port 11211
inside systemctl is-active strata >/dev/null || { inside journalctl -u strata --no-pager >&2; fail "strata.service not active"; }
say "   active as $(inside systemctl show -p User --value strata), $(inside mc 11211 'version\r\n' '^VERSION')"

say "2. set, systemctl restart strata, get"
[ "$(inside mc 11211 'set kept 0 0 5\r\nhello\r\n' '^STORED')" = STORED ] || fail "set"
inside systemctl restart strata
await_port 11211
got=$(inside mc 11211 'get kept\r\n' '^END' 2>/dev/null) || true
[ "$got" = $'VALUE kept 0 5\nhello\nEND' ] || { inside journalctl -u strata --no-pager >&2; fail "after restart: $got"; }
restored=$(inside journalctl -u strata --no-pager -o cat | grep 'memory file' | tail -n1)
[[ $restored == *"restored 1 items after a graceful stop"* ]] || fail "journal after restart: $restored"
say "   the item is back; journal: $restored"

say "3. systemctl reload strata"
pid=$(inside systemctl show -p MainPID --value strata)
inside systemctl reload strata
sleep 0.5
[ "$(inside systemctl show -p MainPID --value strata)" = "$pid" ] || fail "reload changed the main PID"
inside systemctl is-active strata >/dev/null || fail "inactive after reload"
inside mc 11211 'get kept\r\n' '^END' | grep -q hello || fail "not serving after reload"
say "   same PID $pid, serving"

say "4. systemctl start strata@11212"
inside systemctl start strata@11212
await_port 11212
inside systemctl is-active strata@11212 >/dev/null || { inside journalctl -u strata@11212 --no-pager >&2; fail "strata@11212 not active"; }
say "   $(inside mc 11212 'version\r\n' '^VERSION') on 11212"
inside systemctl stop strata@11212

say "5. a bad line in strata.conf"
conf=/etc/strata/strata.conf
inside cp "$conf" /root/strata.conf.good
lines=$(inside wc -l < "$root$conf")
echo "-m lots" >> "$root$conf"
if inside systemctl restart strata 2>/dev/null; then sleep 1; fi
sleep 0.5
inside systemctl is-active strata >/dev/null 2>&1 && fail "strata started with a bad conf line"
why=$(inside journalctl -u strata --no-pager -o cat | grep "$conf:$((lines + 1))" | tail -n1) || true
[ -n "$why" ] || { inside journalctl -u strata --no-pager -n 20 >&2; fail "journalctl -u strata does not name $conf:$((lines + 1))"; }
say "   journalctl -u strata: $why"
inside cp /root/strata.conf.good "$conf"
inside systemctl reset-failed strata
inside systemctl start strata
await_port 11211

say "6. systemctl stop strata"
inside mc 11211 'set kept 0 0 5\r\nagain\r\n' '^STORED' >/dev/null || fail "set before stop"
inside systemctl stop strata
result=$(inside systemctl show -p Result --value strata)
status=$(inside systemctl show -p ExecMainStatus --value strata)
[ "$result" = success ] && [ "$status" = 0 ] || fail "stop: Result=$result ExecMainStatus=$status"
inside systemctl start strata
await_port 11211
restored=$(inside journalctl -u strata --no-pager -o cat | grep 'memory file' | tail -n1)
[[ $restored == *"after a graceful stop"* ]] || fail "after stop and start: $restored"
inside mc 11211 'get kept\r\n' '^END' | grep -q again || fail "the item set before the stop is gone"
say "   stopped with exit 0; next start: $restored"

inside systemctl poweroff >/dev/null 2>&1 || true
for _ in $(seq 1 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
say "passed"
