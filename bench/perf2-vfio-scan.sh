#!/bin/sh
# PERF-2: vgpud's open-handle scan (DEV-13) plus 64 in-use probes against `fuser -s` over the
# same 64 VFIO nodes, 500 processes x 20 descriptors, median of 5 after one warm-up, inside a
# private PID namespace (SIM-21) so /proc holds only the benchmark's processes.
#
#   bench/perf2-vfio-scan.sh [BUILD_DIR]     (default: build)
#
# Prints one line on stdout: "PERF-2 <ours_ms> <fuser_ms> <ratio>", ratio = ours / fuser;
# the target is ratio <= 1. Details go to stderr.
set -eu

build=${1:-build}
driver=$build/bench/perf2-vfio-scan
if [ ! -x "$driver" ]; then
        echo "perf2-vfio-scan: $driver is missing; run: ninja -C $build" >&2
        exit 1
fi
if ! fuser=$(command -v fuser); then
        echo "perf2-vfio-scan: fuser not found (Debian package psmisc)" >&2
        exit 1
fi

# Without root, a user namespace maps us to root inside so the PID namespace can be made.
if [ "$(id -u)" -eq 0 ]; then
        set -- --pid --fork --mount-proc
else
        set -- --user --map-root-user --mount --pid --fork --mount-proc
fi
exec unshare "$@" "$driver" --fuser "$fuser"
