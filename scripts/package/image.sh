#!/usr/bin/env bash
# Build Strata's OCI container image from the release binaries cargo already
# built, with no base image: a root of the binaries, the libraries they link
# (copied from this Debian system) and the files a process needs. umoci
# writes the image, skopeo turns it into an archive `docker load` and
# `podman load` read. Both are Debian packages (apt-get install umoci skopeo).
#
#   scripts/package/image.sh [OUTDIR]   -> OUTDIR/oci               (OCI layout, tag VERSION)
#                                       OUTDIR/strata-VERSION.tar (docker-archive, strata:VERSION)
#                                       default OUTDIR: target/image; prints the archive's path
#
# What it holds, as the official memcached image does it (docker-library/memcached):
#   /usr/bin/strata, /usr/bin/strata-entrypoint   stripped; the entrypoint puts
#                                                 `strata` in front of arguments
#                                                 starting with `-`
#   /lib/x86_64-linux-gnu/..., /lib64/ld-linux-*  what `ldd` lists (libc, libgcc_s)
#   /etc/passwd, /etc/group                       root and memcache, uid/gid 11211
#   /run/strata                                   memcache's, for the memory file:
#                                                 mount a tmpfs there and pass -e
#   /tmp, /usr/share/doc/*/copyright
# Config: User 11211:11211, Entrypoint strata-entrypoint, Cmd strata,
# ExposedPorts 11211/tcp (memcached) and 9150/tcp (-o metrics_listen),
# StopSignal SIGTERM (the memory file is written back). No shell.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-target/image}
bin=target/release
for tool in umoci skopeo ldd strip; do
    command -v "$tool" >/dev/null || { echo "package-image: $tool is missing (apt-get install umoci skopeo)" >&2; exit 1; }
done
for exe in strata strata-entrypoint; do
    [ -x "$bin/$exe" ] || { echo "package-image: $bin/$exe is missing: cargo build --release --workspace --bins" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"
rm -rf "$out/oci"
image=$out/oci:$version
umoci init --layout "$out/oci"
umoci new --image "$image"
# The root is built in an unpacked bundle of the empty image, then packed
# as one layer (umoci keeps owners and modes as they are on disk).
umoci unpack --image "$image" "$stage/bundle" >/dev/null
root=$stage/bundle/rootfs
install -d -m 0755 "$root/usr/bin" "$root/etc" "$root/usr/share/doc/strata"
install -d -m 1777 "$root/tmp"
install -d -m 0750 -o 11211 -g 11211 "$root/run/strata"

for exe in strata strata-entrypoint; do
    strip --remove-section=.comment --remove-section=.note --strip-unneeded -o "$root/usr/bin/$exe" "$bin/$exe"
    chmod 0755 "$root/usr/bin/$exe"
done

# The shared libraries, at the paths the binaries ask for (the interpreter's
# is written in the binary), and their packages' copyright files.
for lib in $(for exe in strata strata-entrypoint; do ldd "$bin/$exe" | grep -o '/[^ ]*'; done | sort -u); do
    install -d "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    pkg=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1) || true
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
        install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/copyright"
    fi
done
install -m 0644 packaging/debian/copyright "$root/usr/share/doc/strata/copyright"

cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
memcache:x:11211:11211:memcache:/nonexistent:/usr/sbin/nologin
EOF
cat > "$root/etc/group" <<'EOF'
root:x:0:
memcache:x:11211:
EOF
# -l with a host name resolves through /etc/hosts (the runtime mounts one)
# and DNS; glibc has both built in.
echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"

umoci repack --image "$image" --history.created_by "scripts/package/image.sh" "$stage/bundle"
source_date=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
umoci config --image "$image" --no-history \
    --created "$source_date" --author "$(sed -n 's/^Maintainer: //p' packaging/debian/control.in)" \
    --architecture "$arch" --os linux \
    --config.user 11211:11211 \
    --config.entrypoint /usr/bin/strata-entrypoint --config.cmd strata \
    --config.exposedports 11211/tcp --config.exposedports 9150/tcp \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir / --config.stopsignal SIGTERM \
    --config.label org.opencontainers.image.title=strata \
    --config.label org.opencontainers.image.description="memcached-compatible cache server" \
    --config.label org.opencontainers.image.version="$version" \
    --config.label org.opencontainers.image.licenses=BSD-3-Clause
umoci gc --layout "$out/oci"

archive=$out/strata-$version.tar
rm -f "$archive"
skopeo copy --quiet "oci:$image" "docker-archive:$archive:strata:$version"
echo "$archive"
