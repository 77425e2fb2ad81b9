#!/bin/sh
# make demo (OPS-11): builds (or reuses) the end-to-end tests' tiny guest, then runs vgpud
# against a simulated GPU host and narrates what it does: one real VM booted by QEMU under TCG,
# then vGPU instances with fake-qemu as the VMM, the operator's tools; then the sentinel finding
# a wedged VF and quarantining it; then shows an mdev host.
# Everything runs inside a private PID and mount namespace (SIM-21), so nothing outlives the
# demo. Without QEMU or a guest (no network for the kernel package, say) the real VM is left
# out, saying why, and the rest runs.
set -eu
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
with_sim="$top/tests/sim/run-sim-test.sh"

# The guest is built here, outside the namespace: as the invoking user, whose apt lists and
# cache build-guest.sh uses (in the user namespace of an unprivileged run it would look like
# root). It is cached in the build directory, shared with the e2e tests.
guest=$build/tests/e2e/guest
qemu=$(command -v qemu-system-x86_64 || true)
printf '\033[1m== %s\033[0m\n' \
        "The tiny guest of the end-to-end tests: a Debian cloud kernel, a busybox initramfs"
if [ -z "$qemu" ]; then
        echo "(no real VM in this demo: qemu-system-x86_64 not found; scripts/deps.sh installs it)"
        guest=
else
        printf '$ tests/e2e/build-guest.sh %s\n' "$guest"
        if ! "$top/tests/e2e/build-guest.sh" "$guest"; then
                echo "(no real VM in this demo: build-guest.sh failed, see above)"
                guest=
        fi
fi

"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo.yaml" "$top/scripts/demo-steps.sh" \
        "$build" "$guest" "$qemu"

"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-wedge.yaml" "$top/scripts/demo-wedge.sh" \
        "$build"

printf '\n\033[1m== A third host: an A40 with the mdev framework\033[0m\n'
# shellcheck disable=SC2016
"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-mdev.yaml" sh -c '
        echo "\$ vgpud inventory --sysfs-root $VGPU_SIM_MOUNT/sys"
        "$1" inventory --sysfs-root "$VGPU_SIM_MOUNT/sys" | cut -c1-100 | sed -n "1,6p"
        echo "..."' sh "$build/src/daemon/vgpud"
