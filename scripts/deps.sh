#!/bin/sh
# Installs the Debian 12 packages vgpud needs to build, test and demo. Idempotent, and silent
# when everything is already present.
# Usage: scripts/deps.sh [bench | deb]
#   bench   also the benchmarks' peers (SPEC §16): wrk, the load generator, and nginx-light,
#           PERF-1's baseline. bench/run starts its own nginx in a temporary prefix; the
#           distribution's nginx service is not used.
#   deb     also what `make deb` and tests/deb/test-deb.sh use (OPS-14): dpkg-dev and binutils
#           to build the package, lintian to check it, systemd for systemd-analyze.
set -eu

packages="
  gcc clang lld libclang-rt-14-dev meson ninja-build pkg-config clang-format
  libjansson-dev libyaml-dev libfuse3-dev fuse3 libsystemd-dev libmicrohttpd-dev libjwt-dev
  libcurl4-openssl-dev libcmocka-dev libssl-dev libsqlite3-dev sqlite3 git libmnl-dev libnftables-dev nftables dnsmasq-base
  util-linux iproute2 psmisc python3 python3-yaml strace valgrind prometheus curl mandoc
  python3-placement
  qemu-system-x86 qemu-utils busybox-static cpio xz-utils zstd
  libisofs-dev genisoimage
  mmdebstrap syslinux syslinux-common mtools dosfstools fdisk e2fsprogs openssh-client
  chromium chromium-driver
"
case "${1:-}" in
"") ;;
bench) packages="$packages wrk nginx-light" ;;
deb) packages="$packages dpkg-dev binutils lintian systemd" ;;
*)
        echo "usage: $0 [bench | deb]" >&2
        exit 2
        ;;
esac

missing=""
for p in $packages; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
                exec sudo "$0" "$@"
        fi
        echo "deps: missing packages:$missing (run as root to install them)" >&2
        exit 1
fi

echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
