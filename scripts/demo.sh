#!/bin/sh
# make demo: runs vgpud against a simulated GPU host and narrates what it does, then shows an
# mdev host. Everything runs inside a private PID and mount namespace (SIM-21, OPS-11), so
# nothing outlives the demo.
set -eu
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
with_sim="$top/tests/sim/run-sim-test.sh"

"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo.yaml" "$top/scripts/demo-steps.sh" "$build"

printf '\n\033[1m== A second host: an A40 with the mdev framework\033[0m\n'
# shellcheck disable=SC2016
"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-mdev.yaml" sh -c '
        echo "\$ vgpud inventory --sysfs-root $VGPU_SIM_MOUNT/sys"
        "$1" inventory --sysfs-root "$VGPU_SIM_MOUNT/sys" | cut -c1-100 | sed -n "1,6p"
        echo "..."' sh "$build/src/daemon/vgpud"
