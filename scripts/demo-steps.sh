#!/bin/sh
# The demo's steps, run by demo.sh inside a private PID namespace with a mounted simulator at
# $VGPU_SIM_MOUNT. Every step prints the command it runs, so the demo doubles as a tour of the
# API. Whatever happens, vgpud is stopped and the work directory removed.
set -eu
build=$1
mnt=$VGPU_SIM_MOUNT
sys=$mnt/sys
vgpud=$build/src/daemon/vgpud
vgpuctl=$build/src/ctl/vgpuctl
nvml=$(find "$build/sim" -maxdepth 1 -name 'libnvidia-ml.so*' | head -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/vgpud-demo.XXXXXX")
vgpud_pid=
cleanup() {
        status=$?
        if [ -n "$vgpud_pid" ]; then
                kill -TERM "$vgpud_pid" 2>/dev/null || true
                wait "$vgpud_pid" 2>/dev/null || true
        fi
        rm -rf "$work"
        exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bold=$(printf '\033[1m') plain=$(printf '\033[0m')
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
run() {
        printf '$ %s\n' "$*"
        "$@"
}

say "A simulated host: two NVIDIA L40S, 0000:e3:00.0 in mixed-size mode, 0001:c8:00.0 equal-size"
echo "vgpu-sim mounts a model of the driver's sysfs, /dev/vfio and a fake libnvidia-ml at $mnt"
run "$vgpud" inventory --sysfs-root "$sys" | cut -c1-100 | sed -n '1,4p'
echo "..."

say "Start vgpud against it (TCP on 127.0.0.1, a Unix socket, NVML from the simulator)"
head -c 48 /dev/urandom > "$work/jwt.secret"
chmod 600 "$work/jwt.secret"
mkdir -p "$work/run"
cat > "$work/vgpud.yaml" <<YAML
listen: ""
unix_socket: "$work/api.sock"
jwt_secret_file: "$work/jwt.secret"
data_dir: "$mnt/data"
runtime_dir: "$work/run"
sysfs_root: "$sys"
dev_root: "$mnt/dev"
nvml_library: "$nvml"
log_level: notice
gpu:
  reconcile_interval: 5s
YAML
printf '$ vgpud --config %s &\n' "$work/vgpud.yaml"
VGPU_SIM_CONTROL=$VGPU_SIM_CONTROL "$vgpud" --config "$work/vgpud.yaml" 2>"$work/vgpud.log" &
vgpud_pid=$!

# Wait (bounded, 20 s) until the first reconcile pass is done: /readyz answers 200.
i=0
until curl -sf --unix-socket "$work/api.sock" http://vgpud/readyz >/dev/null 2>&1; do
        if [ "$i" -ge 400 ] || ! kill -0 "$vgpud_pid" 2>/dev/null; then
                echo "vgpud did not become ready:" >&2
                cat "$work/vgpud.log" >&2
                exit 1
        fi
        sleep 0.05
        i=$((i + 1))
done
run curl -s --unix-socket "$work/api.sock" http://vgpud/readyz
echo

say "Mint a bearer token (HS256, 1h) and point vgpuctl at the daemon"
printf '$ export VGPUD_TOKEN=$(vgpuctl token mint --secret-file %s --sub demo)\n' "$work/jwt.secret"
VGPUD_TOKEN=$("$vgpuctl" token mint --secret-file "$work/jwt.secret" --sub demo)
export VGPUD_TOKEN
ctl() { run "$vgpuctl" --unix "$work/api.sock" "$@"; }

say "Capacity: every profile and how many vGPUs of it the host can place now"
ctl resources | sed -n '1,12p'
echo "..."

say "The driver is driven directly: four 4Q vGPUs on the equal-size card"
for vf in 0001:c8:00.4 0001:c8:00.5 0001:c8:00.6 0001:c8:00.7; do
        echo 1150 > "$sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
done
echo "(echo 1150 > .../nvidia/current_vgpu_type on four VFs; vgpud sees them at its next pass)"
used_slots() {
        "$vgpuctl" --unix "$work/api.sock" --json resources |
                python3 -c 'import json, sys; print(json.load(sys.stdin)["gpu"]["used_slots"])'
}
i=0
while [ "$(used_slots)" != 4 ]; do
        [ "$i" -lt 300 ] || { echo "vgpud did not pick up the change" >&2; exit 1; }
        sleep 0.05
        i=$((i + 1))
done
ctl gpus | grep -E '^GPU|0001:c8:00\.[4-7]' | head -n 8

say "An operator quarantines a VF that keeps failing, and drains a whole GPU"
ctl health quarantine 0000:e3:00.4 --reason "guest reported RmInitAdapter failed"
ctl health drain 0000:e3:00.0 --reason "maintenance: SR-IOV cycle" | head -n 6
echo "... (the GPU is drained: all its VFs leave placement, their records stay as they were)"
ctl gpus | grep -E '^GPU 0000:e3|drained since'
printf 'after the drain, 0000:e3:00.4 keeps: %s\n' "$(ctl health list | grep '^0000:e3:00\.4')"
echo "Only the equal-size card remains; it holds 4 GiB vGPUs, so only 4 GiB profiles fit:"
ctl resources | grep -E 'slots|PROFILE|L40S-4[QA]'

say "The same facts in Prometheus metrics"
curl -s --unix-socket "$work/api.sock" -H "Authorization: Bearer $VGPUD_TOKEN" \
        http://vgpud/metrics | grep -E '^vgpud_(resources_gpu_slots|instances_vgpu_quarantined_vfs)'

say "Restore: after a recovery, clear the GPU's VF records, undrain it, release the four vGPUs"
ctl health clear-gpu 0000:e3:00.0
ctl health undrain 0000:e3:00.0
for vf in 0001:c8:00.4 0001:c8:00.5 0001:c8:00.6 0001:c8:00.7; do
        echo 0 > "$sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
done
ctl health list

say "Stop vgpud (SIGTERM): it exits 0 and leaves running VMs alone"
kill -TERM "$vgpud_pid"
wait "$vgpud_pid" && echo "vgpud exited 0"
vgpud_pid=
