#!/usr/bin/env bash
# Build a Debian package of Strata from the release binaries cargo already
# built (target/release/strata, target/release/strata-bench): no cargo-deb
# (compiling it costs minutes on 2 cores), a staged tree and dpkg-deb.
#
#   scripts/package/deb.sh [OUTDIR]      -> OUTDIR/strata_VERSION_ARCH.deb
#                                        (default target/debian); prints its path
#
#   /usr/bin/strata, /usr/bin/strata-bench     stripped copies, as dh_strip makes them
#   /etc/strata/strata.conf                    conffile (packaging/strata.conf)
#   /lib/systemd/system/strata{,@}.service     packaging/
#   /usr/share/man/man1/strata{,-bench}.1.gz   help2man over `strata -h` and
#                                              `strata-bench --help`: the text
#                                              the binaries print
#   /usr/share/doc/strata/{copyright,changelog.gz}
#   DEBIAN/{control,conffiles,md5sums,postinst,prerm,postrm}
#
# Depends comes from dpkg-shlibdeps (libc6, libgcc-s1) plus procps (the
# units reload with /bin/kill, not in a minimal root) and adduser, which
# postinst uses to create the strata system user.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-target/debian}
bin=target/release
for tool in dpkg-deb dpkg-shlibdeps help2man; do
    command -v "$tool" >/dev/null || { echo "package-deb: $tool is missing (apt-get install dpkg-dev help2man)" >&2; exit 1; }
done
for exe in strata strata-bench; do
    [ -x "$bin/$exe" ] || { echo "package-deb: $bin/$exe is missing: cargo build --release --workspace --bins" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
maintainer=$(sed -n 's/^Maintainer: //p' packaging/debian/control.in)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/strata
install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/strata" "$root/lib/systemd/system" \
    "$root/usr/share/man/man1" "$root/usr/share/doc/strata"

for exe in strata strata-bench; do
    strip --remove-section=.comment --remove-section=.note --strip-unneeded -o "$root/usr/bin/$exe" "$bin/$exe"
    chmod 0755 "$root/usr/bin/$exe"
done
install -m 0644 packaging/strata.conf "$root/etc/strata/strata.conf"
install -m 0644 packaging/strata.service packaging/strata@.service "$root/lib/systemd/system/"

# The man pages: help2man runs the binaries' --help and --version. strata's
# -h is memcached's layout, which packaging/help2man.awk lines up the way
# help2man reads options (the words are strata -h's own).
mkdir -p "$stage/h2m"
printf '#!/bin/sh\ncase "$1" in --version) exec "%s" --version;; esac\n"%s" -h | awk -f "%s"\n' \
    "$root/usr/bin/strata" "$root/usr/bin/strata" "$PWD/packaging/help2man.awk" > "$stage/h2m/strata"
chmod +x "$stage/h2m/strata"
help2man --no-info --section=1 --include=packaging/strata.h2m \
    --name="memcached-compatible cache server" "$stage/h2m/strata" > "$stage/strata.1"
help2man --no-info --section=1 --include=packaging/strata-bench.h2m \
    --name="load generator for memcached-protocol servers" "$root/usr/bin/strata-bench" > "$stage/strata-bench.1"
for page in strata strata-bench; do
    gzip -9n < "$stage/$page.1" > "$root/usr/share/man/man1/$page.1.gz"
done

# A native package's changelog: one entry, dated by the commit built.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
when=$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
printf 'strata (%s) unstable; urgency=medium\n\n  * Built from the workspace at commit %s.\n\n -- %s  %s\n' \
    "$version" "$commit" "$maintainer" "$when" | gzip -9n > "$root/usr/share/doc/strata/changelog.gz"
install -m 0644 packaging/debian/copyright "$root/usr/share/doc/strata/copyright"

# Shared-library dependencies, as dh_shlibdeps computes them.
mkdir -p "$stage/debian"
printf 'Source: strata\n\nPackage: strata\nArchitecture: any\n' > "$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -e strata/usr/bin/strata -e strata/usr/bin/strata-bench 2>/dev/null \
    | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
    packaging/debian/control.in > "$root/DEBIAN/control"
echo /etc/strata/strata.conf > "$root/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/strata_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
