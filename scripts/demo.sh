#!/bin/sh
# make demo (SEED-8, OPS-11): first the product's main job, a real VM: builds (or reuses) the
# end-to-end tests' Debian 12 cloud image with a progress line, then vgpud imports it, creates
# a VM with an SSH key, SSHes in and deletes it, each step timed (scripts/demo-vm.sh). Then
# vgpud against a simulated GPU host with fake-qemu as the VMM: vGPU instances, the operator's
# tools; then the sentinel finding a wedged VF and quarantining it; then an mdev host.
# Everything runs inside private PID, mount and network namespaces (SIM-21), so nothing outlives
# the demo and nothing touches the host's network. Without QEMU, ssh, root or the image (no
# network for the Debian packages, say) the real VM is left out, saying why, and the rest runs.
set -eu
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
with_sim="$top/tests/sim/run-sim-test.sh"
started=$(date +%s)

# The image is built here, outside the namespaces: it needs the network for Debian's packages.
# It is cached in the build directory by a hash of its inputs, shared with the e2e tests.
image_dir=$build/tests/e2e/image
qemu=$(command -v qemu-system-x86_64 || true)
printf '\033[1m== %s\033[0m\n' \
        "The guest image: Debian 12 with cloud-init, sshd and vgpu-agent (tests/e2e/build-image.sh)"
no_vm=
if [ -z "$qemu" ]; then
        no_vm="qemu-system-x86_64 not found; scripts/deps.sh installs it"
elif ! command -v ssh >/dev/null 2>&1; then
        no_vm="ssh not found; scripts/deps.sh installs openssh-client"
elif [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ]; then
        no_vm="the NAT network needs root and /dev/net/tun"
else
        printf '$ tests/e2e/build-image.sh %s %s\n' "$image_dir" "$build/src/agent/vgpu-agent"
        t0=$(date +%s)
        log=$(mktemp "${TMPDIR:-/tmp}/vgpud-demo-image.XXXXXX")
        # The progress line: each of the build's stages as it starts (a first build takes a few
        # minutes), or the cache hit.
        { "$top/tests/e2e/build-image.sh" "$image_dir" "$build/src/agent/vgpu-agent" 2>&1 &&
                echo "build-image: done"; } | tee "$log" | grep --line-buffered '^build-image: '
        if grep -q '^build-image: done$' "$log"; then
                printf '\033[1m[image: %d s]\033[0m\n' $(($(date +%s) - t0))
        else
                tail -n 20 "$log"
                no_vm="build-image.sh failed, see above"
        fi
        rm -f "$log"
fi
if [ -n "$no_vm" ]; then
        echo "(no real VM in this demo: $no_vm)"
else
        "$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-vm.yaml" "$top/scripts/demo-vm.sh" \
                "$build" "$image_dir" "$qemu"
fi

"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo.yaml" "$top/scripts/demo-steps.sh" \
        "$build"

"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-wedge.yaml" "$top/scripts/demo-wedge.sh" \
        "$build"

printf '\n\033[1m== A third host: an A40 with the mdev framework\033[0m\n'
# shellcheck disable=SC2016
"$with_sim" "$build/sim/vgpu-sim" "$top/sim/hosts/demo-mdev.yaml" sh -c '
        echo "\$ vgpud inventory --sysfs-root $VGPU_SIM_MOUNT/sys"
        "$1" inventory --sysfs-root "$VGPU_SIM_MOUNT/sys" | cut -c1-100 | sed -n "1,6p"
        echo "..."' sh "$build/src/daemon/vgpud"
printf '\n\033[1m[the whole demo: %d s]\033[0m\n' $(($(date +%s) - started))
